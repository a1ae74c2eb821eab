"""``archive`` by default: every graph kept, large graph attributes out, the default view kept.

* graphs: every tag the Graphs dashboard lists stays, with the same content (real writers'
  ``graph_run_metadata`` and ``step1`` run-metadata tags), checked through TensorBoard's own
  graphs routes on both backends; stripping step stats is an opt-in rule;
* a TF1-style graph with a 20 MB constant shrinks to a few KB and the graphs route returns the
  identical graph for the dashboard's ``limit_attr_size``/``large_attrs_key``;
* ``downsample: default_view`` is archive's default; TF2 tags whose metadata sits only on the
  first record are reduced by carrying that metadata onto the first kept record;
* the cut targets: >= 85% of a tensorboardX 3 x 1,000-histogram run, >= 90% of a profiled
  project, scalars / hparams / text records byte-identical;
* ``*.xplane.riegeli`` sessions are profile sessions (scan, plan, policies, restore).
"""
from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api, synth
from tb_footprint_plugin import synth as sp
from tb_footprint_plugin.transforms import event_rewrite as er
from tb_footprint_plugin.formats import graph_attrs
from tb_footprint_plugin.verify import data_server_binary, read_view

from tensorboard.compat.proto import event_pb2, graph_pb2, summary_pb2

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="tensorboard-data-server not installed")

#: What the Graphs dashboard's attribute filter passes (process_graph's defaults).
GRAPH_QS = {"limit_attr_size": "1024", "large_attrs_key": "_too_large_attrs"}


def user_bytes(root) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, fs in os.walk(root) for n in fs
               if ".tb-footprint" not in d)


def verified(rep, run):
    o = next(o for o in rep.outcomes if o.run == run)
    assert o.status == "verified", o.to_dict()
    assert o.verification["ok"], o.verification["failed"]
    return o


# --- TensorBoard's own graphs routes, both backends ------------------------------------------
def _wsgi_client(logdir, load_fast: str, provider, mux=None):
    from tensorboard import default, program
    from tensorboard.backend import application
    from werkzeug.test import Client

    tb = program.TensorBoard(plugins=default.get_plugins())
    tb.configure(argv=[None, "--logdir", str(logdir), f"--load_fast={load_fast}"])
    return Client(application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders, provider,
                                                 tb.assets_zip_provider, mux))


class PythonApp:
    """TensorBoard's WSGI app in-process over the Python (multiplexer) backend, loaded once."""

    def __init__(self, logdir):
        from tensorboard.backend.event_processing import data_ingester
        from tensorboard import default, program

        tb = program.TensorBoard(plugins=default.get_plugins())
        tb.configure(argv=[None, "--logdir", str(logdir), "--load_fast=false", "--reload_task=blocking",
                           "--reload_interval=0"])
        ingester = data_ingester.LocalDataIngester(tb.flags)
        ingester.start()
        self.client = _wsgi_client(logdir, "false", ingester.data_provider, ingester.deprecated_multiplexer)

    def get(self, path):
        r = self.client.get(path)
        return r.status_code, r.get_data()

    def close(self):
        pass


class RustApp:
    """TensorBoard's WSGI app in-process over a private Rust data server (``--load_fast=true``)."""

    def __init__(self, logdir, workdir):
        import grpc
        from tensorboard.data import grpc_provider

        from tb_footprint_plugin.formats import views

        os.makedirs(workdir, exist_ok=True)
        self.server = views.DataServer(data_server_binary(), str(logdir), str(workdir), "")
        addr = self.server.start(timeout_s=30)
        self.server.channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 1 << 28)])
        grpc.channel_ready_future(self.server.channel).result(timeout=30)
        provider = grpc_provider.GrpcDataProvider(addr, grpc_provider.make_stub(self.server.channel))
        views.wait_until_loaded(self.server, provider, 120)
        self.client = _wsgi_client(logdir, "true", provider)

    def get(self, path):
        r = self.client.get(path)
        return r.status_code, r.get_data()

    def close(self):
        self.server.stop()


def graph_routes(app, settle_s: float = 0.0, unfiltered: bool = True) -> dict:
    """``info`` and, for every run/tag it lists, ``graph`` (op graphs, with and without the
    attribute filter) and ``run_metadata``: path -> (status, body)."""
    deadline = time.monotonic() + settle_s
    while True:
        status, body = app.get("/data/plugin/graphs/info")
        info = json.loads(body) if status == 200 else {}
        if info or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    out = {"info": (status, body)}
    for run, entry in sorted(info.items()):
        if entry.get("run_graph"):
            for qs in ({}, GRAPH_QS) if unfiltered else (GRAPH_QS,):
                p = "/data/plugin/graphs/graph?" + urllib.parse.urlencode({"run": run, "conceptual": "false", **qs})
                out[p] = app.get(p)
        for tag, t in sorted(entry.get("tags", {}).items()):
            if t.get("op_graph"):
                p = "/data/plugin/graphs/graph?" + urllib.parse.urlencode(
                    {"run": run, "tag": tag, "conceptual": "false", **GRAPH_QS})
                out[p] = app.get(p)
            if t.get("profile"):
                p = "/data/plugin/graphs/run_metadata?" + urllib.parse.urlencode({"run": run, "tag": tag})
                out[p] = app.get(p)
            if t.get("conceptual_graph"):
                p = "/data/plugin/graphs/graph?" + urllib.parse.urlencode({"run": run, "tag": tag, "conceptual": "true"})
                out[p] = app.get(p)
    return out


def both_backends(logdir, unfiltered: bool = True) -> dict:
    routes = {"python": graph_routes(PythonApp(logdir), unfiltered=unfiltered)}
    if data_server_binary() is not None:
        rust = RustApp(logdir, Path(str(logdir) + f"-rust-{time.monotonic_ns()}"))
        try:
            routes["rust"] = graph_routes(rust, settle_s=30, unfiltered=unfiltered)
        finally:
            rust.close()
    return routes


# --- archive never drops a graph ---------------------------------------------------------------
@needs_rust
@pytest.mark.parametrize("name", ["tf/summary_mix", "torch/profiled"])
def test_archive_keeps_every_graph_tag_of_real_writers(tmp_path, name):
    logdir = copy_real(name, tmp_path / "logdir")
    before = user_files(logdir)
    routes0 = both_backends(logdir)
    for backend, r in routes0.items():
        info = json.loads(r["info"][1])
        tags = {(run, tag) for run, e in info.items() for tag, t in e["tags"].items() if t.get("profile")}
        # trace_export(profiler=True)'s graph_run_metadata tag; torch add_graph's run metadata
        want = "step_fn_profile" if name == "tf/summary_mix" else "step1"
        assert any(tag == want for _, tag in tags), (backend, info)
    plan = api.plan(str(logdir), "archive")
    text = "\n".join(line for rp in plan.runs for line in rp.fidelity)
    assert "step-stats record(s) removed" not in text
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    routes1 = both_backends(logdir)
    for backend in routes0:
        assert routes1[backend].keys() == routes0[backend].keys(), backend
        for path, (status, body) in routes0[backend].items():
            assert status == 200, (backend, path, body[:300])
            assert routes1[backend][path] == (status, body), (backend, path)
    api.restore(str(logdir))
    assert user_files(logdir) == before


def test_strip_run_metadata_is_an_opt_in_rule_with_its_own_fidelity_line(tmp_path):
    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    archive = api.get_policy("archive")
    assert not archive.content.get("strip_run_metadata")
    pol = api.get_policy({"name": "archive-strip", "base": "archive",
                                "content": dict(archive.content, strip_run_metadata=True)})
    text = "\n".join(api.plan(str(logdir), pol).run(".").fidelity)
    assert "step-stats record(s) removed" in text and "Graphs dashboard" in text


# --- large graph attributes --------------------------------------------------------------------
def tf1_graph_with_constant(mb: float = 20.0) -> graph_pb2.GraphDef:
    """A TF1-style inference graph with an embedded constant of ``mb`` MB (a weight matrix
    frozen into the graph, as ``write_graph`` of a frozen model writes it)."""
    from tensorboard.compat.proto import attr_value_pb2, node_def_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    n = int(mb * 1e6 / 4)
    rows = 1000
    cols = n // rows
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=rows),
                                                   tensor_shape_pb2.TensorShapeProto.Dim(size=cols)])
    content = (bytes(range(256)) * (rows * cols * 4 // 256 + 1))[: rows * cols * 4]
    big = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, tensor_content=content)
    small = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[0.5],
                                   tensor_shape=tensor_shape_pb2.TensorShapeProto())

    def node(name, op, inputs=(), **attrs):
        nd = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs), device="/device:CPU:0")
        for k, v in attrs.items():
            nd.attr[k].CopyFrom(v)
        return nd

    f32 = attr_value_pb2.AttrValue(type=types_pb2.DT_FLOAT)
    g = graph_pb2.GraphDef(node=[
        node("input", "Placeholder", dtype=f32, shape=attr_value_pb2.AttrValue(shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1), tensor_shape_pb2.TensorShapeProto.Dim(size=rows)]))),
        node("dense/kernel", "Const", dtype=f32, value=attr_value_pb2.AttrValue(tensor=big)),
        node("dense/scale", "Const", dtype=f32, value=attr_value_pb2.AttrValue(tensor=small)),
        node("dense/MatMul", "MatMul", ["input", "dense/kernel"], T=f32,
             transpose_a=attr_value_pb2.AttrValue(b=False), transpose_b=attr_value_pb2.AttrValue(b=False)),
        node("dense/Mul", "Mul", ["dense/MatMul", "dense/scale"], T=f32),
        node("output", "Identity", ["dense/Mul"], T=f32),
    ])
    g.versions.producer = 1882
    return g


@needs_rust
def test_large_graph_constant_is_dropped_and_the_graph_route_is_identical(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "frozen"
    graph = tf1_graph_with_constant(20)
    with synth.EventWriter(str(run), suffix="", metadata="first") as w:  # TF1 FileWriter
        w.graph_def(graph)
        for s in range(50):
            w.legacy_simple_value("loss", s, 1.0 / (s + 1))
    sp.age(logdir)
    before = user_files(logdir)
    size0 = user_bytes(logdir)
    assert size0 > 20e6
    routes0 = both_backends(logdir, unfiltered=False)  # (the unfiltered body is ~80 MB of pbtxt)

    # opt-in (not part of archive): the 2.21 dashboard's own graph request has no size limit
    assert not api.plan(str(logdir), "archive").run("frozen").actions
    policy = {"name": "archive+large-graph-attrs", "base": "archive",
              "content": {"strip_large_graph_attrs": True}}
    plan = api.plan(str(logdir), policy)
    rp = plan.run("frozen")
    text = "\n".join(rp.fidelity)
    assert "Too large to show" in text and "raw GraphDef" in text and "vault" in text
    assert rp.expected_after_bytes < 100_000
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    o = verified(rep, "frozen")
    details = " ".join(c["detail"] for c in o.verification["checks"])
    assert "graph" in details
    assert user_bytes(logdir) < 8_000, user_bytes(logdir)  # a few KB

    routes1 = both_backends(logdir, unfiltered=True)
    for backend in routes0:
        filtered = [p for p in routes0[backend] if "limit_attr_size" in p]
        assert filtered, backend
        for p in filtered:
            assert routes0[backend][p][0] == 200
            assert routes1[backend][p] == routes0[backend][p], (backend, p)  # byte-identical body
        assert routes1[backend]["info"] == routes0[backend]["info"]
        # without the filter (what TensorBoard 2.21's op-graph view fetches): the same graph with
        # the constant listed as too large, i.e. exactly what the filter makes of the original
        from google.protobuf import text_format
        from tensorboard.backend import process_graph

        expected = graph_pb2.GraphDef()
        expected.CopyFrom(graph)
        process_graph.prepare_graph_for_ui(expected, 1024, "_too_large_attrs")
        unfiltered = [p for p in routes1[backend] if "graph?" in p and "limit_attr_size" not in p]
        assert unfiltered, backend
        for p in unfiltered:
            body = routes1[backend][p][1].decode()
            assert body == str(expected), (backend, p)
            # the cheap form of that contract: the unfiltered route after the reduction serves
            # byte for byte what the filtered route served before it
            assert routes1[backend][p] == routes0[backend][p + "&" + urllib.parse.urlencode(GRAPH_QS)], p
            kernel = next(n for n in text_format.Parse(body, graph_pb2.GraphDef()).node if n.name == "dense/kernel")
            assert list(kernel.attr["_too_large_attrs"].list.s) == [b"value"]
    outs = api.restore(str(logdir))
    assert outs and all(x.status == "restored" for x in outs), [x.to_dict() for x in outs]
    assert user_files(logdir) == before


def test_strip_graph_def_is_tensorboards_own_processing():
    g = tf1_graph_with_constant(0.01)
    raw = g.SerializeToString()
    out, dropped = graph_attrs.strip_graph_def(raw)
    assert dropped == 1 and len(out) < 2000
    assert graph_attrs.route_graph_digest(out) == graph_attrs.route_graph_digest(raw)
    assert graph_attrs.strip_graph_def(out) is None  # a fixed point: nothing left to drop
    small = graph_pb2.GraphDef(node=g.node[:1])
    assert graph_attrs.strip_graph_def(small.SerializeToString()) is None


# --- the default-dashboard view is archive's default ---------------------------------------------
def views_of(run_dir, backend, **kw):
    v = read_view(str(run_dir), backend, **kw)
    assert v.fatal is None, v.fatal
    return v


def key(p):
    return (p[0], repr(p[1]), p[2])


def assert_same(before, after, plugins):
    for plugin in plugins:
        b, a = before.plugins.get(plugin, {}), after.plugins.get(plugin, {})
        assert set(b) == set(a), (plugin, set(b) ^ set(a))
        for tag in b:
            assert b[tag].metadata == a[tag].metadata, (plugin, tag)
            assert [key(p) for p in b[tag].points] == [key(p) for p in a[tag].points], (plugin, tag)


def assert_subset_with_last(before, after, plugins):
    for plugin in plugins:
        for tag, tv in before.plugins.get(plugin, {}).items():
            got = [key(p) for p in after.plugins[plugin][tag].points]
            it = iter([key(p) for p in tv.points])
            assert all(any(k == o for o in it) for k in got), (plugin, tag)
            assert got[-1] == key(tv.points[-1]), (plugin, tag)
            assert after.plugins[plugin][tag].metadata == tv.metadata, (plugin, tag)


@needs_rust
def test_tensorboardx_histogram_run_cut_at_least_85_percent(tmp_path):
    logdir = tmp_path / "logdir"
    sp.write_tbx_histogram_run(str(logdir / "run"))
    sp.age(logdir)
    before, size0, prot0 = user_files(logdir), user_bytes(logdir), sp.protected_digests(str(logdir))
    rust0, py0 = views_of(logdir / "run", "rust"), views_of(logdir / "run", "python", store_all=True)
    rp = api.plan(str(logdir), "archive").run("run")
    text = "\n".join(rp.fidelity + [d for d in rp.fidelity_details if d])  # names past the short line
    # the plan says, per tag, what --load_fast=false users will see
    for t in range(3):
        assert f"layer{t}/weight" in text
    assert "--load_fast=false" in text and "100 points" in text
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    o = verified(rep, "run")
    assert {"python", "rust"} <= set(o.verification["backends"])
    cut = 1 - user_bytes(logdir) / size0
    assert cut >= 0.85, cut
    assert sp.protected_digests(str(logdir)) == prot0  # scalars bit-exact
    rust1, py1 = views_of(logdir / "run", "rust"), views_of(logdir / "run", "python", store_all=True)
    assert_same(rust0, rust1, ("histograms", "scalars"))
    assert_same(py0, py1, ("scalars",))
    assert_subset_with_last(py0, py1, ("histograms",))
    # what the plan promised --load_fast=false users: the default view's 100 points per tag
    for tag, tv in py1.plugins["histograms"].items():
        assert [p[0] for p in tv.points] == [p[0] for p in rust0.plugins["histograms"][tag].points]
    api.restore(str(logdir))
    assert user_files(logdir) == before


@needs_rust
def test_tf2_metadata_on_the_first_record_is_carried_to_the_first_kept_one(tmp_path):
    """TF2 writers put a tag's SummaryMetadata on its first record only; the default view
    does not show that record, so archive copies the metadata onto the first record it keeps
    (step, wall time and value unchanged) instead of keeping the whole tag."""
    logdir = tmp_path / "logdir"
    run = logdir / "tf2"
    with synth.EventWriter(str(run), metadata="first") as w:
        for s in range(1500):
            w.histogram("weights", s, [(0, 1, s % 5), (1, 2, 1 + s % 3)])
            if s % 5 == 0:
                w.image("input", s, synth.make_png(4, 4, seed=s % 3), 4, 4)
            if s % 10 == 0:
                w.scalar("acc", s, s / 1500)
                w.text("note", s, f"step {s}")
        w.hparams({"lr": 0.1}, ["acc"])
    sp.age(logdir)
    before, size0, prot0 = user_files(logdir), user_bytes(logdir), sp.protected_digests(str(logdir))
    rust0, py0 = views_of(run, "rust"), views_of(run, "python", store_all=True)
    name = er.event_file_names(str(run))[0]
    orig = {}
    from tb_footprint_plugin.scan.tfrecord import RecordReader

    with RecordReader(str(run / name)) as r:
        for rec in r:
            orig[rec.data] = event_pb2.Event.FromString(rec.data)

    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    o = verified(rep, "tf2")
    assert o.verification["expectations"]["histograms"] == er.DEFAULT_VIEW_EXACT_MODE
    assert 1 - user_bytes(logdir) / size0 >= 0.8
    assert sp.protected_digests(str(logdir)) == prot0  # scalars, text, hparams bit-exact
    changed = []
    kept_by_tag = {}
    with RecordReader(str(run / name)) as r:
        for rec in r:
            ev = event_pb2.Event.FromString(rec.data)
            for v in ev.summary.value:
                kept_by_tag[v.tag] = kept_by_tag.get(v.tag, 0) + 1
            if rec.data in orig:
                continue
            changed.append(ev)
    assert kept_by_tag["weights"] == 100 and kept_by_tag["input"] == 10
    assert sorted(ev.summary.value[0].tag for ev in changed) == ["input", "weights"]
    for ev in changed:  # same step, wall time and value as an original record: metadata added
        v = ev.summary.value[0]
        twin = next(e for e in orig.values() if e.step == ev.step and e.summary.value
                    and e.summary.value[0].tag == v.tag)
        assert ev.wall_time == twin.wall_time and not twin.summary.value[0].HasField("metadata")
        assert v.tensor == twin.summary.value[0].tensor and v.HasField("metadata")
    rust1, py1 = views_of(run, "rust"), views_of(run, "python", store_all=True)
    assert_same(rust0, rust1, ("histograms", "images", "scalars", "text", "hparams"))
    assert_same(py0, py1, ("scalars", "text", "hparams"))
    assert_subset_with_last(py0, py1, ("histograms", "images"))
    api.restore(str(logdir))
    assert user_files(logdir) == before


@needs_rust
def test_profiled_project_cut_at_least_90_percent(tmp_path):
    logdir = tmp_path / "project"
    parts = sp.write_profiled_project(str(logdir), 20_000_000)
    total = sum(parts.values())
    for part, share in sp.PROJECT_SHARES.items():
        assert abs(parts[part] / total - share) < 0.02 + share * 0.15, (part, parts[part] / total)
    sp.age(logdir)
    before, size0, prot0 = user_files(logdir), user_bytes(logdir), sp.protected_digests(str(logdir))
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    for o in rep.outcomes:
        assert o.status == "verified" or (o.run == "resnet_long" and o.status == "skipped"), o.to_dict()
    cut = 1 - user_bytes(logdir) / size0
    assert cut >= 0.90, cut
    assert sp.protected_digests(str(logdir)) == prot0
    api.restore(str(logdir))
    assert user_files(logdir) == before


# --- xprof's newer *.xplane.riegeli --------------------------------------------------------------
def test_xplane_riegeli_sessions_are_profile_sessions(tmp_path):
    from tb_footprint_plugin.scan import categories as cat
    from tb_footprint_plugin.scan import scan

    logdir = tmp_path / "logdir"
    run = logdir / "train"
    with synth.EventWriter(str(run)) as w:
        w.scalar("loss", 0, 1.0)
    sessions = []
    for i in range(3):
        name = synth.session_name_for(1795990000 + 3600 * i)
        sdir = run / "plugins" / "profile" / name
        sdir.mkdir(parents=True)
        # footprint never parses a session's files: the bytes only need to be someone's only copy
        (sdir / "host1.xplane.riegeli").write_bytes(synth.xspace_bytes(2000, seed=i))
        (sdir / "host2.xplane.riegeli").write_bytes(synth.xspace_bytes(1000, seed=i + 7))
        (sdir / "cache_version.txt").write_bytes(b"1")
        sessions.append(name)
    sp.age(logdir)
    before = user_files(logdir)
    fp = scan(str(logdir), write_cache=False)
    r = next(r for r in fp.runs if r.name == "train")
    assert r.categories[cat.PROFILE_XPLANE].files == 6
    xs = sorted((s for s in r.sessions if s.kind == "xprof"), key=lambda s: s.name)
    assert [s.name for s in xs] == sessions and all(sorted(s.hosts) == ["host1", "host2"] for s in xs)

    # lossless: caches go, xplanes stay; keep-latest: the two older sessions go; archive: all
    lossless = api.plan(str(logdir), "lossless").run("train")
    assert {os.path.basename(a.path) for a in lossless.actions} == {"cache_version.txt"}
    latest = api.plan(str(logdir), "keep-latest").run("train")
    gone = {a.path.split("/")[3] for a in latest.actions if a.path.endswith(".xplane.riegeli")}
    assert gone == set(sessions[:2])
    archive = api.plan(str(logdir), "archive").run("train")
    text = "\n".join(archive.fidelity)
    assert "kept as is" not in text and "profile" in text
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert not any(n.endswith(".xplane.riegeli") for _, _, fs in os.walk(logdir / "train") for n in fs)
    outs = api.restore(str(logdir))
    assert outs and all(x.status == "restored" for x in outs)
    assert user_files(logdir) == before
