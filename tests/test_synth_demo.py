"""Tests of the synthetic writers (``synth``) and the demo logdir (``demo``) against the real readers:
TensorBoard's loaders and multiplexer, the xplane.proto compiled into xprof, xprof's C++ XSpace
parser and xprof's real profile plugin, and the real writers' output vendored in tests/fixtures/real.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import struct
import tracemalloc
import wave
import zlib

import pytest

from conftest import real as real_fixture
from tb_footprint_plugin import demo, synth
from tb_footprint_plugin.scan import categories

EVENT_NAME_RE = re.compile(r"^events\.out\.tfevents\.\d{10}\.[\w.-]+\.\d+\.\d+(\.v2)?$")

try:  # the real profile plugin is optional (base deps are tensorboard, werkzeug, protobuf)
    from xprof.convert import _pywrap_profiler_plugin as _xprof_native  # noqa: F401

    HAVE_XPROF = True
except Exception:  # noqa: BLE001
    HAVE_XPROF = False
needs_xprof = pytest.mark.skipif(not HAVE_XPROF, reason="xprof not installed")
CLASSES = synth.xplane_proto_classes()
needs_classes = pytest.mark.skipif(CLASSES is None, reason="no xplane protobuf classes (xprof absent)")


# --- helpers ------------------------------------------------------------------------------------
def tree_digest(root: str) -> str:
    """sha256 over every file's relative path, size, mtime and content."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            h.update(f"{os.path.relpath(path, root)}\0{st.st_size}\0{int(st.st_mtime)}\0".encode())
            with open(path, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def walk_files(root: str):
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            yield os.path.join(dirpath, name)


def framed_sizes(path: str):
    """Record sizes from the TFRecord framing itself (lengths only), to prove files are whole."""
    sizes, data = [], open(path, "rb").read()
    pos = 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        sizes.append(n + 16)
        pos += n + 16
    assert pos == len(data), f"{path}: framing overruns the file"
    return sizes


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    target = str(tmp_path_factory.mktemp("demo") / "logs")
    summary = demo.generate_demo(target)
    return target, summary


# --- demo -----------------------------------------------------------------------------------------
def test_demo_is_deterministic(demo_dir, tmp_path):
    target, _ = demo_dir
    other = str(tmp_path / "elsewhere" / "logs")  # a different path must not change a byte
    demo.generate_demo(other)
    assert tree_digest(other) == tree_digest(target)
    changed = str(tmp_path / "seed1")
    demo.generate_demo(changed, seed=1, scale=0.05)
    assert tree_digest(changed) != tree_digest(target)


def test_demo_profile_share_and_size(demo_dir):
    target, summary = demo_dir
    total = profile = 0
    for path in walk_files(target):
        size = os.lstat(path).st_size
        total += size
        rel = os.path.relpath(path, target).split(os.sep)
        name = rel[-1]
        if categories.is_summary_event_file_name(name):
            continue
        if categories.classify_file(tuple(rel[:-1]), name) in categories.PROFILE_CATEGORIES:
            profile += size
    assert profile / total >= 0.90
    assert 20e6 <= total <= 40e6
    marker = os.lstat(os.path.join(target, demo.MARKER)).st_size
    assert summary["total_bytes"] == total - marker
    assert summary["profile_share"] >= 0.90


def test_demo_layout(demo_dir):
    target, summary = demo_dir
    rels = {os.path.relpath(p, target) for p in walk_files(target)}
    sessions = {r.split("/plugins/profile/")[0] for r in rels if "/plugins/profile/" in r}
    assert sessions == {"mnist/baseline/train", "mnist/lr_0.01/train", "keras2_cifar", "jax_profile",
                        "tf_summary_mix"}
    # Keras 2: profile at the run root, no event file of its own
    assert not any(re.match(r"keras2_cifar/events", r) for r in rels)
    # JAX: no event files at all; secondary traces and perfetto beside the xplanes
    jax = [r for r in rels if r.startswith("jax_profile/")]
    assert not any("tfevents" in r for r in jax)
    assert sum(r.endswith(".trace.json.gz") for r in jax) == 2
    assert sum(r.endswith("perfetto_trace.json.gz") for r in jax) == 1
    # one viewed session with xprof's caches in their real shapes
    viewed = [r for r in rels if r.startswith("mnist/baseline/train/plugins/profile/")]
    names = {os.path.basename(r) for r in viewed}
    assert {".cached_tools.json", "cache_version.txt", "demo-host.SSTABLE", "demo-host.metadata.SSTABLE",
            "demo-host.trie.SSTABLE", "ALL_HOSTS.op_stats_v2.pb", "demo-host.xplane.pb"} <= names
    traces = [r for r in rels if categories.is_torch_trace_name(os.path.basename(r))]
    assert 2 <= len(traces) <= 4 and all(r.startswith("resnet_torch/") for r in traces)
    for r in rels:
        if "tfevents" in os.path.basename(r):
            assert EVENT_NAME_RE.match(os.path.basename(r)), r
    assert summary["files"] == len(rels) - 1  # all but the marker


def test_demo_refuses_non_empty_and_only_replaces_its_own_files(tmp_path):
    target = tmp_path / "logs"
    target.mkdir()
    (target / "mine.txt").write_text("user data")
    with pytest.raises(FileExistsError):
        demo.generate_demo(str(target), scale=0.05)
    assert os.listdir(target) == ["mine.txt"]

    fresh = tmp_path / "fresh"
    demo.generate_demo(str(fresh), scale=0.05)
    digest = tree_digest(str(fresh))
    with pytest.raises(FileExistsError):
        demo.generate_demo(str(fresh), scale=0.05)  # no overwrite
    (fresh / "tf1_legacy" / "notes.md").write_text("keep me")
    demo.generate_demo(str(fresh), scale=0.05, overwrite=True)
    assert (fresh / "tf1_legacy" / "notes.md").read_text() == "keep me"
    os.remove(fresh / "tf1_legacy" / "notes.md")
    assert tree_digest(str(fresh)) == digest

    # a smaller demo replaces the bigger one's files (recorded in the marker) and nothing else
    demo.generate_demo(str(fresh), scale=0.02, overwrite=True)
    marker = json.loads((fresh / demo.MARKER).read_text())
    on_disk = {os.path.relpath(p, fresh) for p in walk_files(str(fresh))} - {demo.MARKER}
    assert on_disk == set(marker["files"])

    # a file the demo did not write sitting where the demo wants to write: refuse, change nothing
    victim = next(f for f in marker["files"] if f.endswith(".xplane.pb"))
    (fresh / demo.MARKER).write_text(json.dumps({**marker, "files": [f for f in marker["files"] if f != victim]}))
    (fresh / victim).write_bytes(b"not ours")
    with pytest.raises(FileExistsError):
        demo.generate_demo(str(fresh), scale=0.02, overwrite=True)
    assert (fresh / victim).read_bytes() == b"not ours"
    assert not (fresh / ".footprint-demo-staging").exists()


def test_demo_main(tmp_path, capsys):
    assert demo.main([str(tmp_path / "cli"), "--scale", "0.02"]) == 0
    assert "profile data" in capsys.readouterr().out
    assert demo.main([str(tmp_path / "cli"), "--scale", "0.02"]) == 2  # non-empty, no --overwrite


# --- event files: TensorBoard's own readers -----------------------------------------------------
def test_every_event_file_reads_cleanly(demo_dir):
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.compat.proto import event_pb2

    target, _ = demo_dir
    files = [p for p in walk_files(target) if "tfevents" in os.path.basename(p)]
    assert len(files) >= 10
    for path in files:
        sizes = framed_sizes(path)
        raw = list(event_file_loader.RawEventFileLoader(path).Load())
        assert len(raw) == len(sizes), path  # TB read every record: no CRC or framing error
        events = list(event_file_loader.EventFileLoader(path).Load())
        first = event_pb2.Event.FromString(raw[0])
        assert first.file_version == "brain.Event:2"
        assert first.source_metadata.writer in (synth.TF_SOURCE_WRITER, synth.TB_SOURCE_WRITER)
        assert events and all(e.wall_time >= first.wall_time for e in events)


def test_multiplexer_sees_every_plugin(demo_dir):
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    target, summary = demo_dir
    mux = pem.EventMultiplexer(tensor_size_guidance={"scalars": 0})  # keep every scalar
    mux.AddRunsFromDirectory(target)
    mux.Reload()
    runs = set(mux.Runs())
    assert runs == set(summary["runs"])
    assert {"mnist/baseline/train", "mnist/baseline/validation", "mnist/lr_0.01/train", "mnist/lr_0.01/validation",
            "keras2_cifar/train", "keras2_cifar/validation", "resnet_torch", "tf_summary_mix",
            "tf1_legacy"} <= runs
    assert any(r.startswith("resnet_torch/1795") for r in runs)  # torch add_hparams sub-run
    assert not any(r.startswith("jax_profile") for r in runs)

    def plugin_runs(plugin):
        return {run for run, tags in mux.PluginRunToTagToContent(plugin).items() if tags}

    assert {"mnist/baseline/train", "resnet_torch", "tf_summary_mix", "tf1_legacy"} <= plugin_runs("scalars")
    for plugin in ("histograms", "images"):
        assert {"mnist/baseline/train", "resnet_torch", "tf_summary_mix", "tf1_legacy"} <= plugin_runs(plugin)
    assert {"resnet_torch", "tf_summary_mix"} <= plugin_runs("text")
    assert {"tf_summary_mix", "tf1_legacy"} <= plugin_runs("audio")
    assert "tf_summary_mix" in plugin_runs("pr_curves")
    hp = plugin_runs("hparams")
    assert "tf_summary_mix" in hp and any(r.startswith("resnet_torch/") for r in hp)
    assert {"resnet_torch", "tf_summary_mix", "tf1_legacy"} <= plugin_runs("graphs")
    assert "mnist/baseline/train" in plugin_runs("graph_keras_model")
    assert "tf_summary_mix" in plugin_runs("graph_run_metadata")
    assert {"mnist/baseline/train", "tf_summary_mix"} <= plugin_runs("graph_run_metadata_graph")
    assert {"resnet_torch", "tf1_legacy"} <= plugin_runs("graph_tagged_run_metadata")
    # scalar values survive the round trip
    loss = mux.Tensors("tf_summary_mix", "loss")
    assert [e.step for e in loss] == list(range(1000))
    assert mux.Runs()["tf1_legacy"]["meta_graph"]


def test_event_writer_shapes_match_real_writers(tmp_path):
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.compat.proto import event_pb2

    with synth.EventWriter(str(tmp_path / "tf"), timestamp=1795998045) as w:
        w.scalar("loss", 0, 0.5)
        w.scalar("loss", 1, 0.25)
    with synth.EventWriter(str(tmp_path / "torch"), style="torch", timestamp=1795998065) as t:
        t.legacy_simple_value("train/loss", 0, 2.0)
    ours = [event_pb2.Event.FromString(r) for r in event_file_loader.RawEventFileLoader(w.path).Load()]
    assert os.path.basename(w.path) == "events.out.tfevents.1795998045.demo-host.4242.0.v2"
    assert os.path.basename(t.path) == "events.out.tfevents.1795998065.demo-host.4242.0"
    value = ours[1].summary.value[0]
    assert value.tensor.tensor_content == struct.pack("<f", 0.5)  # TF: 4-byte tensor_content
    assert value.metadata.plugin_data.plugin_name == "scalars"
    assert ours[2].summary.value[0].HasField("metadata")  # TF 2.21: metadata on every value
    real = str(real_fixture("tf/summary_mix/events.out.tfevents.1795998045.vm.25654.0.v2"))
    real_events = [event_pb2.Event.FromString(r) for _, r in
                   zip(range(40), event_file_loader.RawEventFileLoader(real).Load())]
    assert real_events[0].source_metadata.writer == ours[0].source_metadata.writer
    assert real_events[0].wall_time == int(real_events[0].wall_time) and ours[0].wall_time == 1795998045
    real_loss = next(e.summary.value[0] for e in real_events
                     if e.HasField("summary") and e.summary.value[0].tag == "loss")
    assert real_loss.tensor.dtype == value.tensor.dtype
    assert len(real_loss.tensor.tensor_content) == len(value.tensor.tensor_content)
    assert real_loss.metadata == value.metadata


def test_metadata_first_policy_and_fast_framing(tmp_path):
    from tensorboard.compat.proto import event_pb2
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.summary.writer.record_writer import RecordWriter

    with synth.EventWriter(str(tmp_path / "a"), metadata="first") as w:
        for step in range(3):
            w.scalar("x", step, step)
            w.text("t", step, "hello")
    events = [event_pb2.Event.FromString(r) for r in event_file_loader.RawEventFileLoader(w.path).Load()][1:]
    assert [e.summary.value[0].HasField("metadata") for e in events] == [True, True, False, False, False, False]

    data = os.urandom(3000)
    fast, slow = io.BytesIO(), io.BytesIO()
    synth.FastRecordWriter(fast).write(data)
    RecordWriter(slow).write(data)
    assert fast.getvalue() == slow.getvalue()


def test_profile_empty_stub(tmp_path):
    from tensorboard.backend.event_processing import io_wrapper

    path = synth.write_profile_empty(str(tmp_path), 1600000000, "h")
    name = os.path.basename(path)
    assert name == "events.out.tfevents.1600000000.h.profile-empty"
    assert categories.classify_file((), name) == categories.PROFILE_EMPTY
    assert io_wrapper.IsTensorFlowEventsFile(path) and not io_wrapper.IsSummaryEventsFile(path)
    assert len(framed_sizes(path)) == 1


def test_png_and_wav_are_valid():
    png = synth.make_png(20, 10, seed=3)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png == synth.make_png(20, 10, seed=3)
    width, height, depth, color = struct.unpack(">IIBB", png[16:26])
    assert (width, height, depth, color) == (20, 10, 8, 2)
    idat_len = struct.unpack(">I", png[33:37])[0]
    assert png[37:41] == b"IDAT"
    assert len(zlib.decompress(png[41:41 + idat_len])) == 10 * (1 + 20 * 3)
    with wave.open(io.BytesIO(synth.make_wav(1600)), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getnframes()) == (1, 2, 1600)


# --- PyTorch traces -------------------------------------------------------------------------------
def test_torch_traces_have_kineto_shape(demo_dir):
    target, _ = demo_dir
    traces = sorted(p for p in walk_files(target) if os.path.basename(p).endswith(".pt.trace.json"))
    real = json.load(open(sorted(real_fixture("torch/profiled").glob("*.pt.trace.json"))[0]))
    for path in traces:
        text = open(path).read()
        assert text.startswith(' {\n    "schemaVersion": 1,\n    "deviceProperties": [],\n    \n      "trace_id"')
        assert text.endswith('" }')
        d = json.loads(text)
        assert {"schemaVersion", "deviceProperties", "traceEvents", "traceName", "displayTimeUnit",
                "baseTimeNanoseconds"} <= set(d)
        assert not d["traceName"].startswith(target)  # embedded paths never depend on the target
        events = d["traceEvents"]
        phases = {(e.get("ph"), e.get("cat")) for e in events}
        assert {("X", "cpu_op"), ("X", "python_function"), ("X", "user_annotation"), ("i", "cpu_instant_event"),
                ("M", None), ("s", "fwdbwd"), ("f", "fwdbwd")} <= phases
        steps = [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]
        assert len(steps) == 3
        op = next(e for e in events if e.get("cat") == "cpu_op")
        assert {"External id", "Record function id", "Ev Idx", "Input Dims"} <= set(op["args"])
        assert any(e.get("name") == "[memory]" and "Total Allocated" in e["args"] for e in events)
        assert list(d) == list(real)  # same keys in the same order
        assert phases == {(e.get("ph"), e.get("cat")) for e in real["traceEvents"]}


def test_torch_trace_streams_and_gzips(tmp_path):
    plain = str(tmp_path / "w.pt.trace.json")
    tracemalloc.start()
    size = synth.write_torch_trace(plain, 16, seed=1, trace_name="t")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert size > 12e6 and peak < 6e6  # memory does not grow with the file
    assert len(json.load(open(plain))["traceEvents"]) > 30_000
    gz = str(tmp_path / "w.pt.trace.json.gz")
    synth.write_torch_trace(gz, 16, seed=1, gz=True, trace_name="t")
    raw = open(gz, "rb").read()
    assert raw[:4] == b"\x1f\x8b\x08\x08" and b"w.pt.trace.json\x00" in raw[:40]  # like torch's gzip
    assert gzip.decompress(raw) == open(plain, "rb").read()
    compact = str(tmp_path / "c.pt.trace.json")
    synth.write_torch_trace(compact, 2, seed=1, pretty=False)
    assert json.load(open(compact))["traceEvents"][0]["ph"] == "M"


# --- XSpace ---------------------------------------------------------------------------------------
@needs_classes
def test_xplane_field_numbers_match_xprofs_xplane_proto():
    for msg, fields in synth.XPLANE_FIELDS.items():
        desc = getattr(CLASSES, msg).DESCRIPTOR
        assert desc.full_name == f"tensorflow.profiler.{msg}"
        assert {f.name: f.number for f in desc.fields} == fields, msg


@needs_classes
@pytest.mark.parametrize("flavor", ["tf", "jax"])
def test_wire_and_proto_encodings_agree(flavor):
    model = synth.build_host_xspace(3000, seed=5, flavor=flavor, repository_path="/srv/x")
    wire = synth.encode_xspace_wire(model)
    proto = synth.encode_xspace_proto(model, CLASSES)
    a, b = CLASSES.XSpace.FromString(wire), CLASSES.XSpace.FromString(proto)
    assert a == b
    assert a.SerializeToString(deterministic=True) == proto  # canonical bytes too
    assert synth.xspace_bytes(3000, 5, flavor=flavor, repository_path="/srv/x", encoder="proto") == proto


@needs_classes
def test_demo_xplanes_parse_like_real_ones(demo_dir):
    target, _ = demo_dir
    xplanes = [p for p in walk_files(target) if p.endswith(".xplane.pb")]
    assert len(xplanes) == 6
    for path in xplanes:
        xs = CLASSES.XSpace.FromString(open(path, "rb").read())
        names = [p.name for p in xs.planes]
        assert "/host:CPU" in names and names[-1] == "Task Environment"
        assert list(xs.hostnames) == ["demo-host"]
        cpu = xs.planes[names.index("/host:CPU")]
        assert [ln.name for ln in cpu.lines][0] == "python" and len(cpu.lines) == 4
        for line in cpu.lines:
            for ev in line.events:
                assert ev.metadata_id in cpu.event_metadata
                assert all(s.metadata_id in cpu.stat_metadata for s in ev.stats)
        env = xs.planes[-1]
        assert {env.stat_metadata[s.metadata_id].name for s in env.stats} == {
            "profile_start_time", "profile_stop_time", "profile_options"}
    real = CLASSES.XSpace.FromString(
        real_fixture("tf/summary_mix/plugins/profile/2026_11_30_00_20_46/vm.xplane.pb").read_bytes())
    assert [p.name for p in real.planes] == ["/host:CPU", "Task Environment"]


@needs_xprof
def test_xprof_cpp_parser_reads_demo_xplanes(demo_dir):
    from xprof import profile_data

    target, _ = demo_dir
    for path in (p for p in walk_files(target) if p.endswith(".xplane.pb")):
        pd = profile_data.ProfileData.from_file(path)
        planes = {p.name: p for p in pd.planes}
        assert "/host:CPU" in planes
        assert sum(len(line.events) for line in planes["/host:CPU"].lines) > 400


def _profile_client(logdir):
    from werkzeug.test import Client
    from werkzeug.wrappers import Response
    from tensorboard.plugins import base_plugin
    from xprof import profile_plugin

    ctx = base_plugin.TBContext(logdir=logdir, flags=argparse.Namespace(master_tpu_unsecure_channel=""))
    apps = profile_plugin.ProfilePlugin(ctx).get_plugin_apps()

    def get(route, **query):
        resp = Client(apps[route], Response).get(route, query_string=query)
        body = resp.get_data()
        if resp.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return resp.status_code, body

    return get


@needs_xprof
def test_real_profile_plugin_serves_demo_sessions(demo_dir, tmp_path):
    target, summary = demo_dir
    logdir = str(tmp_path / "copy")
    shutil.copytree(target, logdir)  # the plugin writes caches into session dirs
    get = _profile_client(logdir)
    code, body = get("/runs")
    runs = json.loads(body)
    assert code == 200 and len(runs) == 6 and sorted(runs) == summary["profile_sessions"]
    assert {r.rsplit("/", 1)[0] for r in runs} == {"mnist/baseline/train", "mnist/lr_0.01/train", "keras2_cifar",
                                                 "jax_profile", "tf_summary_mix"}
    for run in runs:
        code, body = get("/run_tools", run=run)
        assert code == 200 and json.loads(body) == list(synth.HOST_ONLY_TOOLS), run
    for run in (r for r in runs if r.startswith(("mnist/baseline", "jax_profile"))):
        for tool in ("overview_page", "trace_viewer@"):
            code, body = get("/data", run=run, tag=tool, host="demo-host")
            assert code == 200 and len(body) > 10_000, (run, tool, body[:200])
            json.loads(body)
        events = json.loads(get("/data", run=run, tag="trace_viewer@", host="demo-host")[1])["traceEvents"]
        assert sum(e.get("ph") == "X" for e in events) > 1000
    # the viewed session's filler caches were stale (older cache_version) and got rebuilt for real
    viewed = next(r for r in runs if r.startswith("mnist/baseline"))
    sdir = os.path.join(logdir, "mnist/baseline/train/plugins/profile", viewed.rsplit("/", 1)[1])
    assert open(os.path.join(sdir, "cache_version.txt")).read() == synth.XPROF_VERSION


@needs_xprof
def test_real_profile_plugin_check_can_fail(tmp_path):
    """Negative control: the same checks reject a session whose xplane is garbage."""
    sdir = tmp_path / "bad" / "plugins" / "profile" / "2026_01_01_00_00_00"
    sdir.mkdir(parents=True)
    (sdir / "demo-host.xplane.pb").write_bytes(b"\xff" * 64)
    get = _profile_client(str(tmp_path))
    runs = json.loads(get("/runs")[1])
    assert runs == ["bad/2026_01_01_00_00_00"]
    assert json.loads(get("/run_tools", run=runs[0])[1]) == []


@needs_xprof
def test_cached_tools_json_matches_what_xprof_computes(tmp_path):
    listed = synth.write_profile_session(str(tmp_path / "r"), "2026_11_29_22_00_00", n_events=2000,
                                         with_caches=True)
    cached = json.load(open(next(p for p in listed if p.endswith(".cached_tools.json"))))
    for p in listed:
        if not p.endswith(".xplane.pb"):
            os.remove(p)  # make the plugin compute the list itself
    get = _profile_client(str(tmp_path))
    run = json.loads(get("/runs")[1])[0]
    assert json.loads(get("/run_tools", run=run)[1]) == cached["tools"]


def test_profile_session_files(tmp_path):
    listed = synth.write_profile_session(str(tmp_path / "r"), "2026_11_29_22_00_00", "h", 2000, with_caches=True,
                                         trace_json=True, perfetto=True, flavor="jax")
    names = {os.path.basename(p) for p in listed}
    assert {"h.xplane.pb", "h.trace.json.gz", "perfetto_trace.json.gz", ".cached_tools.json", "cache_version.txt",
            "h.SSTABLE", "h.metadata.SSTABLE", "h.trie.SSTABLE", "ALL_HOSTS.op_stats_v2.pb"} <= names
    sdir = os.path.dirname(listed[0])
    xplane = os.path.join(sdir, "h.xplane.pb")
    st = os.stat(xplane)
    tools = json.load(open(os.path.join(sdir, ".cached_tools.json")))
    assert tools == {"files": {"h.xplane.pb": f"{int(st.st_mtime)}-{st.st_size}"},
                     "tools": list(synth.HOST_ONLY_TOOLS), "version": 1}
    assert open(os.path.join(sdir, "cache_version.txt")).read() < synth.XPROF_VERSION
    for name in ("h.trace.json.gz", "perfetto_trace.json.gz"):
        d = json.loads(gzip.decompress(open(os.path.join(sdir, name), "rb").read()))
        assert d["displayTimeUnit"] == "ns" and d["traceEvents"][-1] == {}
        assert sum(e.get("ph") == "X" for e in d["traceEvents"]) >= 2000
    assert open(os.path.join(sdir, "h.trace.json.gz"), "rb").read(10) == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
    for name in names:
        assert categories.classify_profile_file(name) != categories.PROFILE_OTHER, name
    with pytest.raises(ValueError):  # filler caches marked current would break every tool
        synth.write_profile_session(str(tmp_path / "s"), n_events=100, with_caches=True,
                                    cache_version=synth.XPROF_VERSION)


def test_real_cache_shapes_match(tmp_path):
    real = str(real_fixture("viewed/jax_profiled/plugins/profile/2026_11_30_00_21_35"))
    real_tools = json.load(open(os.path.join(real, ".cached_tools.json")))
    listed = synth.write_profile_session(str(tmp_path / "r"), n_events=500, with_caches=True)
    ours = json.load(open(next(p for p in listed if p.endswith(".cached_tools.json"))))
    assert list(ours) == list(real_tools) and ours["version"] == real_tools["version"]
    assert re.fullmatch(r"\d+-\d+", next(iter(ours["files"].values())))
    assert re.fullmatch(r"\d+\.\d+\.\d+", open(os.path.join(real, "cache_version.txt")).read())
    ours_text = open(next(p for p in listed if p.endswith(".cached_tools.json"))).read()
    real_text = open(os.path.join(real, ".cached_tools.json")).read()
    for text in (ours_text, real_text):  # json.dumps(indent=2, sort_keys=True), no trailing newline
        assert text.startswith('{\n  "files": {\n    "') and text.endswith('\n  "version": 1\n}')


def test_demo_marker_is_no_run_and_overwrite_resets_the_vault(tmp_path):
    from tb_footprint_plugin import api
    from tb_footprint_plugin.scan.model import UNATTRIBUTED

    target = tmp_path / "logs"
    demo.generate_demo(str(target), scale=0.05)
    fp = api.scan(str(target))
    assert fp.run(UNATTRIBUTED) is None, [f.path for f in fp.run(UNATTRIBUTED).files]
    rep = api.reduce_logdir(str(target), dry_run=False, runs=["tf_summary_mix"], verify_backends=("python",),
                            quiet_period=0)
    assert rep.ok and any(o.status == "verified" for o in rep.outcomes)
    assert api.status(str(target))["vault_bytes"] > 0
    demo.generate_demo(str(target), scale=0.05, overwrite=True)
    st = api.status(str(target))
    assert st["vault_bytes"] == 0 and st["operations"] == [] and api.history(str(target)) == []
    # a backup of a file the demo did not write is never dropped with it
    run = target / "mine"
    run.mkdir()
    # incompressible: the vault keeps it at its size (compressible bytes would be stored as ~23)
    (run / "model.ckpt-1.data-00000-of-00001").write_bytes(os.urandom(5000))
    os.utime(run / "model.ckpt-1.data-00000-of-00001", (1, 1))
    (run / "events.out.tfevents.1.host").write_bytes(b"")
    pol = api.custom_policy("lossless", delete=["checkpoints"])
    rep = api.reduce_logdir(str(target), policy=pol, dry_run=False, runs=["mine"], verify_backends=("python",),
                            quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    kept = api.status(str(target))["vault_bytes"]
    assert kept >= 5000
    demo.generate_demo(str(target), scale=0.05, overwrite=True)
    assert api.status(str(target))["vault_bytes"] == kept


def test_demo_graphs_tab_draws_every_graph(demo_dir):
    """TensorBoard's Graphs tab (its own plugin code) draws every graph the demo lists: the op
    graph of a tagged run metadata is the merge of its pre-optimization function graphs, so the
    demo's traced graph must be there, or the tab says 'the graph is empty'."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.graph import graphs_plugin

    target, _summary = demo_dir
    mux = pem.EventMultiplexer()
    mux.AddRunsFromDirectory(str(target))
    mux.Reload()
    tb_ctx = base_plugin.TBContext(logdir=str(target), multiplexer=mux,
                                   data_provider=data_provider.MultiplexerDataProvider(mux, str(target)))
    plugin = graphs_plugin.GraphsPlugin(tb_ctx)
    rctx = context.RequestContext()
    info = plugin.info_impl(rctx, "")
    drawn = []
    for run, d in sorted(info.items()):
        asks = [(None, False)] if d["run_graph"] else []
        # a profile-only run metadata (trace_export without graph) has no graph to draw, as with TF itself
        asks += [(tag, t["conceptual_graph"]) for tag, t in d["tags"].items()
                 if (t["op_graph"] and not t["profile"]) or t["conceptual_graph"]]
        for tag, conceptual in asks:
            body, _ = plugin.graph_impl(rctx, run, tag, conceptual, "")
            assert "node {" in body, f"{run} {tag}: the graph is empty"
            drawn.append((run, tag))
    assert ("keras2_cifar/train", "batch_6") in drawn  # the default run's traced graph


def test_demo_that_would_not_fit_is_refused_before_anything_is_made(tmp_path, monkeypatch):
    """A large ``--scale`` is refused up front, naming the folder, what it needs and what is
    free, and nothing is made (before: the demo filled the disk half-way and failed there)."""
    target = tmp_path / "new" / "demo"
    free = demo.shutil.disk_usage(str(tmp_path)).free
    scale = 2 * free / demo.DEMO_BYTES_AT_SCALE_1
    with pytest.raises(OSError) as e:
        demo.generate_demo(str(target), scale=scale)
    assert isinstance(e.value, demo.NoSpaceForDemo) and e.value.errno == demo.errno.ENOSPC
    assert str(target) in str(e.value) and "MB are free" in str(e.value) and "[Errno" not in str(e.value)
    assert not (tmp_path / "new").exists()


def test_demo_bytes_is_an_upper_bound_of_what_the_demo_writes(demo_dir):
    """The estimate the refusal rests on is not below what the demo writes."""
    target, _summary = demo_dir  # scale 1
    written = sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(target) for f in fs)
    assert written <= demo.demo_bytes(1.0) < 1.5 * written, (written, demo.demo_bytes(1.0))
