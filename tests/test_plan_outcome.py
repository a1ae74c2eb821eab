"""Plan = outcome: what a dry run says a run will weigh is what the reduce leaves, to the byte.

Over every vendored real fixture and synthetic cases the rewrite's rules treat specially (a tag
whose steps restart across files, repeated graphs that differ, out-of-order wall times,
duplicate steps, empty and truncated files), and PyTorch traces gzip'd or slimmed (plain and
already gzip'd). A rewrite that would give back the same bytes is
never planned: the run is "nothing to reduce", and its files keep their bytes and mtimes.
"""
import os

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.plan.content import LINE_MAX
from tb_footprint_plugin.scan.tfrecord import RecordWriter
from tb_footprint_plugin.verify import data_server_binary

from conftest import copy_real, tree_hashes

FIXTURES = ["tf/keras_profiled", "tf/summary_mix", "jax/profiled", "viewed/jax_profiled", "torch/profiled",
            "torch/profiled_gz"]


def _age(root, t=1_000_000_000):
    for d, _, fs in os.walk(root):
        for f in fs:
            os.utime(os.path.join(d, f), (t, t))


def _assert_plan_is_outcome(logdir, policy):
    """Plan, reduce, and compare per run: exact where the plan says exact; nothing else moved."""
    plan = api.plan(str(logdir), policy)
    for rp in plan.runs:
        assert len(rp.fidelity) == len(rp.fidelity_details), rp.run
        assert all(len(line) <= LINE_MAX for line in rp.fidelity), rp.fidelity
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    outcomes = {o.run: o for o in rep.outcomes}
    for rp in plan.runs:
        o = outcomes[rp.run]
        if rp.skipped:
            assert o.status == Outcome.SKIPPED and o.bytes_after == o.bytes_before, rp.run
            continue
        assert o.status == Outcome.VERIFIED, (rp.run, o.to_dict())
        # nothing is estimated on a local logdir: event rewrites, gzips and trace slims alike
        assert [a.path for a in rp.actions if a.estimated] == [], rp.run
        assert (rp.run, o.bytes_after) == (rp.run, rp.expected_after_bytes)
    return plan, rep


@pytest.mark.parametrize("name", FIXTURES)
def test_archive_plan_equals_reduce_on_every_real_fixture(tmp_path, name):
    logdir = copy_real(name, tmp_path / "logdir")
    plan, _ = _assert_plan_is_outcome(logdir, "archive")
    assert plan.runs


@pytest.mark.parametrize("name", ["tf/summary_mix", "torch/profiled", "tf/keras_profiled"])
def test_lossless_plan_equals_reduce_and_fidelity_fits(tmp_path, name):
    logdir = copy_real(name, tmp_path / "logdir")
    _assert_plan_is_outcome(logdir, "lossless")


# --- synthetic event files -----------------------------------------------------------------------
def _events(path, events):
    from tensorboard.compat.proto import event_pb2

    with open(path, "wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
        for ev in events:
            w.write(ev.SerializeToString())


def _image(tag, step, wall, seed=0, meta=False):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    png = bytes([seed % 251]) * (200 + step % 97)
    v = summary_pb2.Summary.Value(tag=tag, image=summary_pb2.Summary.Image(
        height=3, width=3, colorspace=3, encoded_image_string=png))
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[v]))


def _scalar(tag, step, wall):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    v = summary_pb2.Summary.Value(tag=tag, simple_value=float(step))
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[v]))


def _graph(seed):
    from tensorboard.compat.proto import event_pb2, graph_pb2, node_def_pb2

    g = graph_pb2.GraphDef(node=[node_def_pb2.NodeDef(name=f"n{seed}_{i}", op="Const") for i in range(5)])
    return event_pb2.Event(wall_time=2.0 + seed, step=0, graph_def=g.SerializeToString())


def test_tag_restarting_across_three_files_is_planned_as_kept_whole(tmp_path):
    """torch.utils.tensorboard style: an image tag restarts at step 999 in each of three files:
    the rewrite keeps such tags whole, so the plan says so, with nothing to reduce."""
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    for k in range(3):
        _events(run / f"events.out.tfevents.{1795990000 + k}.host.{k}",
                [_image("img", s, 1795990000.0 + k * 2000 + s, seed=s) for s in range(0, 1000, 3)]
                + [_scalar("loss", s, 1795990000.0 + k * 2000 + s) for s in range(0, 1000, 50)])
    _age(tmp_path / "logdir")
    before = tree_hashes(tmp_path / "logdir")
    mtimes = {p: os.stat(p).st_mtime_ns for p in run.iterdir()}
    rp = api.plan(str(tmp_path / "logdir"), "archive").run("run")
    assert rp.code == Skip.NOTHING and rp.expected_after_bytes == rp.bytes_before, rp.to_dict()
    assert any("kept in full" in line and "restart" in line for line in rp.fidelity), rp.fidelity
    rep = api.reduce_logdir(str(tmp_path / "logdir"), policy="archive", dry_run=False)
    assert [o.code for o in rep.outcomes] == [Skip.NOTHING]
    assert tree_hashes(tmp_path / "logdir") == before
    assert {p: os.stat(p).st_mtime_ns for p in run.iterdir()} == mtimes
    assert not (tmp_path / "logdir" / ".tb-footprint").exists()  # no backup, no state


def test_three_different_graphs_are_not_rewritten_to_the_same_bytes(tmp_path):
    """tensorboardX style: three graph records that differ; lossless dedupes only byte-identical
    repeats, so it plans nothing (it used to back up and rewrite to the same bytes)."""
    run = tmp_path / "logdir" / "tbx"
    run.mkdir(parents=True)
    _events(run / "events.out.tfevents.1795990000.host", [_graph(i) for i in range(3)]
            + [_scalar("loss", s, 1795990000.0 + s) for s in range(20)])
    _age(tmp_path / "logdir")
    before = tree_hashes(tmp_path / "logdir")
    rp = api.plan(str(tmp_path / "logdir"), "lossless").run("tbx")
    assert rp.code == Skip.NOTHING and not rp.actions, rp.to_dict()
    assert not any("graph records dropped" in line for line in rp.fidelity)
    rep = api.reduce_logdir(str(tmp_path / "logdir"), policy="lossless", dry_run=False)
    assert [o.code for o in rep.outcomes] == [Skip.NOTHING]
    assert tree_hashes(tmp_path / "logdir") == before


def test_repeated_identical_graphs_are_counted_in_the_plan(tmp_path):
    """Byte-identical repeats are what lossless drops: the plan counts their bytes exactly."""
    run = tmp_path / "logdir" / "tbx"
    run.mkdir(parents=True)
    _events(run / "events.out.tfevents.1795990000.host", [_graph(0) for _ in range(7)]
            + [_scalar("loss", s, 1795990000.0 + s) for s in range(20)])
    _age(tmp_path / "logdir")
    plan, _ = _assert_plan_is_outcome(tmp_path / "logdir", "lossless")
    rp = plan.run("tbx")
    assert rp.removable_bytes > 0 and any("byte-identical repeats" in line for line in rp.fidelity)


def write_oddities(ld):
    """One run each under ``ld``: duplicate steps (dup), wall times going backwards (walls), 400
    images and a plain scalar tag (plain), an empty file (empty), a file cut mid-record (truncated)."""
    for r in ("dup", "walls", "plain", "empty", "truncated"):
        (ld / r).mkdir(parents=True)
    _events(ld / "dup" / "events.out.tfevents.1.h", [_image("img", s // 2, 10.0 + s, seed=s) for s in range(400)])
    _events(ld / "walls" / "events.out.tfevents.1.h", [_image("img", s, 5000.0 - s, seed=s) for s in range(400)])
    _events(ld / "plain" / "events.out.tfevents.1.h", [_image("img", s, 10.0 + s, seed=s) for s in range(400)]
            + [_scalar("loss", s, 10.0 + s) for s in range(100)])
    (ld / "empty" / "events.out.tfevents.1.h").write_bytes(b"")
    _events(ld / "truncated" / "events.out.tfevents.1.h", [_image("img", s, 10.0 + s, seed=s) for s in range(400)])
    with open(ld / "truncated" / "events.out.tfevents.1.h", "ab") as f:
        f.write(b"\x10\x00\x00")  # a writer mid-record


def test_synthetic_oddities_plan_equals_reduce(tmp_path):
    """Duplicate steps, wall times going backwards, an empty file, a truncated file and a long
    plain tag in one logdir: per run, the plan's bytes are the reduce's."""
    ld = tmp_path / "logdir"
    write_oddities(ld)
    _age(ld)
    plan, rep = _assert_plan_is_outcome(ld, "archive")
    assert plan.run("plain").removable_bytes > 0  # 400 images: the default view keeps 10
    assert plan.run("dup").code == Skip.NOTHING  # repeated steps: kept whole
    assert plan.run("truncated").code == Skip.NOTHING
    assert any("kept as is (incomplete" in line for line in plan.run("truncated").fidelity)


# --- the cost of planning: selection outcomes cached across plans, no selection where none can drop ----
def _histo(tag, step, wall):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    h = summary_pb2.HistogramProto(min=0.0, max=float(step), num=3.0, sum=float(step), sum_squares=1.0,
                                   bucket_limit=[0.0, 1.0, 2.0], bucket=[1.0, 1.0, float(step % 5)])
    v = summary_pb2.Summary.Value(tag=tag, histo=h)
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[v]))


def _selection_counter(monkeypatch):
    """Counts the selections plans make, and fails any Rust data-server load a plan starts."""
    from tb_footprint_plugin.transforms import event_rewrite as er
    from tb_footprint_plugin.formats import views

    made = []
    select_run = er.select_run

    def counting(run_dir, *a, **k):
        made.append(os.path.basename(run_dir))
        return select_run(run_dir, *a, **k)

    monkeypatch.setattr(er, "select_run", counting)
    read_view = views.read_view

    def loads(run_dir, backend="python", **k):
        if backend == "rust":
            made.append("rust:" + os.path.basename(str(run_dir)))
        return read_view(run_dir, backend, **k)

    monkeypatch.setattr(views, "read_view", loads)
    from tb_footprint_plugin.verify.original import OriginalRun  # a plan's load, kept for its reduce

    load_now = OriginalRun.load_now

    def loads_now(self, *a, **k):
        made.append("rust:" + os.path.basename(str(self.run_dir)))
        return load_now(self, *a, **k)

    monkeypatch.setattr(OriginalRun, "load_now", loads_now)
    return made


def _new_process():
    """What a new process starts with: no selection cached in memory, no cache file read yet."""
    from tb_footprint_plugin.scan import selcache
    from tb_footprint_plugin.transforms import event_rewrite as er

    er._SEL_CACHE.clear()
    selcache._MEMO.clear()


def _shown(plan):
    return [(rp.run, rp.expected_after_bytes, rp.code, rp.fidelity, rp.fidelity_details,
             [(a.kind, a.path, a.bytes_after, a.params) for a in rp.actions]) for rp in plan.runs]


def _images_run(logdir, name="imgs", n=300):
    run = logdir / name
    run.mkdir(parents=True)
    _events(run / "events.out.tfevents.1795990000.host",
            [_image("img", s, 1795990000.0 + s, seed=s) for s in range(n)]
            + [_scalar("loss", s, 1795990000.0 + s) for s in range(0, n, 10)])
    return run


@pytest.mark.skipif(data_server_binary() is None, reason="tensorboard-data-server not installed")
def test_second_plan_of_an_unchanged_logdir_starts_no_data_server(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    _images_run(logdir)
    _images_run(logdir, "other", 50)
    _age(logdir)
    made = _selection_counter(monkeypatch)
    first = api.plan(str(logdir), "archive")
    assert "imgs" in made and "rust:imgs" in made, made
    assert first.run("imgs").removable_bytes > 0
    _new_process()
    made.clear()
    second = api.plan(str(logdir), "archive")
    assert made == []  # every outcome came from the cache: no pass over the files, no Rust load
    assert _shown(second) == _shown(first)
    # the reduce after a cached plan makes its own selection: the plan's bytes are its bytes
    _new_process()
    plan, rep = _assert_plan_is_outcome(logdir, "archive")
    assert _shown(plan) == _shown(first)
    assert {o.run: o.status for o in rep.outcomes}["imgs"] == Outcome.VERIFIED


def test_a_changed_file_or_other_rules_make_the_selection_again(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    run = _images_run(logdir, n=40)
    _age(logdir)
    made = _selection_counter(monkeypatch)
    caps = {"name": "caps", "base": "archive", "content": {"keep_per_tag": {"images": 5}}}
    first = api.plan(str(logdir), caps)
    assert made.count("imgs") >= 1
    _new_process()
    made.clear()
    assert _shown(api.plan(str(logdir), caps)) == _shown(first) and made == []
    tighter = dict(caps, content={"keep_per_tag": {"images": 3}})
    fewer = api.plan(str(logdir), tighter)
    assert made.count("imgs") >= 1 and fewer.run("imgs").expected_after_bytes < first.run("imgs").expected_after_bytes
    # the same bytes with another mtime: another file as far as the key is concerned
    made.clear()
    _new_process()
    f = next(run.iterdir())
    os.utime(f, ns=(os.stat(f).st_atime_ns, os.stat(f).st_mtime_ns + 1))
    assert _shown(api.plan(str(logdir), caps)) == _shown(first) and made.count("imgs") >= 1
    # an appended record: the plan follows the file, not its old outcome
    made.clear()
    _new_process()
    with open(f, "ab") as out:
        RecordWriter(out).write(_image("img", 40, 1795990040.0, seed=40).SerializeToString())
    _age(logdir)
    grown = api.plan(str(logdir), caps).run("imgs")
    assert made.count("imgs") >= 1 and grown.bytes_before > first.run("imgs").bytes_before


def test_a_damaged_or_planted_selection_cache_is_never_trusted(tmp_path, monkeypatch):
    import json

    from tb_footprint_plugin.scan.selcache import SELCACHE_NAME
    from tb_footprint_plugin.storage.paths import cache_dir

    logdir = tmp_path / "logdir"
    _images_run(logdir, n=40)
    _age(logdir)
    caps = {"name": "caps", "base": "archive", "content": {"keep_per_tag": {"images": 5}}}
    truth = _shown(api.plan(str(logdir), caps))
    path = os.path.join(cache_dir(str(logdir)), SELCACHE_NAME)
    data = json.load(open(path))
    made = _selection_counter(monkeypatch)
    # an outcome of another shape under the right key: dropped, made again, the plan unchanged
    for bad in ({"rewritten": ["x"], "files": {}, "notes": [], "tags": {}, "expectations": {}},
                {"rewritten": [], "files": {}, "notes": [1], "tags": {}, "expectations": {}}, "junk"):
        for e in data["runs"].values():
            e["outcome"] = bad
        with open(path, "w") as f:
            json.dump(data, f)
        _new_process()
        made.clear()
        assert _shown(api.plan(str(logdir), caps)) == truth and made.count("imgs") >= 1
    with open(path, "w") as f:
        f.write("{not json")
    _new_process()
    assert _shown(api.plan(str(logdir), caps)) == truth
    # a cache folder others may write to is not ours: neither read nor written
    made.clear()
    _new_process()
    os.chmod(os.path.dirname(path), 0o777)
    try:
        assert _shown(api.plan(str(logdir), caps)) == truth and made.count("imgs") >= 1
    finally:
        os.chmod(os.path.dirname(path), 0o700)
    # a symlink planted in the cache file's place is never followed
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    os.unlink(path)
    os.symlink(target, path)
    _new_process()
    assert _shown(api.plan(str(logdir), caps)) == truth
    assert target.read_text() == "{}" and not os.path.islink(path)


def test_no_selection_where_no_tag_has_more_records_than_the_dashboard_keeps(tmp_path, monkeypatch):
    """Archive's default view drops only beyond the Rust server's reservoir (10 images, 100
    histograms per tag): a run whose every tag fits is planned from the scan's per-tag counts,
    and the selection agrees that it would drop nothing."""
    from tb_footprint_plugin.plan.rules import Rules
    from tb_footprint_plugin.plan.policies import get_policy
    from tb_footprint_plugin.transforms import event_rewrite as er

    logdir = tmp_path / "logdir"
    run = logdir / "small"
    run.mkdir(parents=True)
    _events(run / "events.out.tfevents.1795990000.host",
            [_histo(f"h{k}", s, 1795990000.0 + s) for s in range(100) for k in range(3)]
            + [_image(f"i{k}", s, 1795990000.0 + s, seed=s) for s in range(10) for k in range(4)]
            + [_scalar("loss", s, 1795990000.0 + s) for s in range(500)])
    _images_run(logdir, "big", 11)  # one image over the reservoir: this one is analysed
    _age(logdir)
    fp = api.scan(str(logdir))
    assert fp.run("small").categories["histograms"].max_tag_records == 100
    assert fp.run("small").categories["images"].max_tag_records == 10
    assert fp.run("small").categories["histograms"].records == 300
    made = _selection_counter(monkeypatch)
    plan = api.plan(str(logdir), "archive")
    assert "small" not in made and "big" in made, made
    assert plan.run("small").code == Skip.NOTHING
    rules = Rules.from_content(get_policy("archive").content)
    sel = er.select_run(str(run), rules, er.event_file_names(str(run)))
    assert all(all(m) for m in sel.masks.values())  # the selection would have kept every record


def test_the_selection_cache_never_takes_a_nearly_full_disk(tmp_path, monkeypatch):
    """A reduce's journal and backups need the last free bytes more than a cache does."""
    from types import SimpleNamespace

    from tb_footprint_plugin.scan import selcache
    from tb_footprint_plugin.storage.paths import cache_dir

    logdir = tmp_path / "logdir"
    _images_run(logdir, n=40)
    _age(logdir)
    caps = {"name": "caps", "base": "archive", "content": {"keep_per_tag": {"images": 5}}}
    monkeypatch.setattr(selcache.os, "statvfs", lambda p: SimpleNamespace(f_bavail=100, f_frsize=4096))
    p = api.plan(str(logdir), caps)
    assert p.run("imgs").removable_bytes > 0
    assert any(n.startswith("selection cache not saved") and "free" in n for n in p.notes), p.notes
    assert not os.path.exists(os.path.join(cache_dir(str(logdir)), selcache.SELCACHE_NAME))


# --- PyTorch traces: the gzip and the slim are measured, not estimated ----------------------------
SLIM = {"name": "slim", "base": "lossless", "content": {"trace": {"drop_python_function": True, "drop_memory": True}}}


def _trace_counter(monkeypatch):
    """Counts the passes plans make over traces (gzip and slim measures)."""
    from tb_footprint_plugin.transforms import plan_cache

    made = []
    for name in ("gzip_size", "slim_size"):
        real = getattr(plan_cache, name)

        def counting(src, *a, _real=real, _name=name, **k):
            made.append((_name, os.path.basename(src)))
            return _real(src, *a, **k)

        monkeypatch.setattr(plan_cache, name, counting)
    return made


@pytest.mark.parametrize("name,policy", [("torch/profiled", "lossless"), ("torch/profiled", SLIM),
                                         ("torch/profiled_gz", SLIM)])
def test_gzip_and_slim_of_traces_plan_equals_reduce_to_the_byte(tmp_path, name, policy):
    logdir = copy_real(name, tmp_path / "logdir")
    plan, rep = _assert_plan_is_outcome(logdir, policy)
    kinds = [(a.kind, a.params.get("transform")) for rp in plan.runs for a in rp.actions
             if ".pt.trace.json" in a.path]
    assert kinds and all(k == (("compress", None) if policy == "lossless" else ("rewrite", "trace_slim"))
                         for k in kinds), kinds
    # per trace too: each action's bytes after are the file the reduce left
    for rp in plan.runs:
        for a in rp.actions:
            if ".pt.trace.json" in a.path:
                assert os.path.getsize(logdir / (a.new_path or a.path)) == a.bytes_after, a.path


def test_a_trace_measure_is_cached_and_a_slimmed_trace_is_not_slimmed_again(tmp_path, monkeypatch):
    """The measure is made once per trace and rules (a second plan, and the reduce's own plan,
    read it back); a trace the slim would give back byte for byte is not planned at all."""
    logdir = copy_real("torch/profiled_gz", tmp_path / "logdir")
    made = _trace_counter(monkeypatch)
    first = api.plan(str(logdir), SLIM)
    traces = sorted(n for n in os.listdir(logdir) if ".pt.trace.json" in n)
    assert sorted(n for _, n in made) == traces, made
    _new_process()
    made.clear()
    assert _shown(api.plan(str(logdir), SLIM)) == _shown(first) and made == []
    _new_process()
    rep = api.reduce_logdir(str(logdir), policy=SLIM, dry_run=False, verify_backends=("python",))
    assert rep.ok and made == [], made  # the reduce's plan measured nothing again
    assert sum(o.bytes_after for o in rep.outcomes) == first.expected_after_bytes
    reduced = tree_hashes(logdir)
    again = api.plan(str(logdir), SLIM, quiet_period=0)  # the reduce just wrote them: no quiet period
    assert sorted(n for _, n in made) == traces  # new files: measured anew
    assert [rp.code for rp in again.runs] == [Skip.NOTHING], [rp.to_dict() for rp in again.runs]
    rep = api.reduce_logdir(str(logdir), policy=SLIM, dry_run=False, verify_backends=("python",), quiet_period=0)
    assert [o.code for o in rep.outcomes] == [Skip.NOTHING]
    assert {k: v for k, v in tree_hashes(logdir).items() if not k.startswith(".tb-footprint")} == \
        {k: v for k, v in reduced.items() if not k.startswith(".tb-footprint")}


def test_a_trace_the_slim_cannot_read_is_planned_as_kept(tmp_path):
    """A damaged trace is refused by the plan as the reduce would refuse it: nothing planned,
    said in a fidelity line, instead of a plan the reduce then rolls back."""
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    (run / "host_1.1795990000000000000.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00not gzip at all")
    _events(run / "events.out.tfevents.1795990000.host", [_scalar("loss", s, 1795990000.0 + s) for s in range(5)])
    _age(tmp_path / "logdir")
    rp = api.plan(str(tmp_path / "logdir"), SLIM).run("run")
    assert rp.code == Skip.NOTHING and not rp.actions, rp.to_dict()
    assert any("not slimmed" in line for line in rp.fidelity), rp.fidelity


@pytest.mark.parametrize("policy", ["lossless", SLIM])
def test_a_bucket_plan_measures_traces_too_and_the_reduce_leaves_its_bytes(s3_bucket, tmp_path, policy, monkeypatch):
    """On an object store the traces are streamed by ranged reads and measured as on disk: the
    plan is the local plan, nothing estimated, the reduce leaves its bytes, and the reduce's own
    plan reads the measures back instead of downloading the traces again."""
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    url = s3_bucket.upload(logdir, "logs")
    local = api.plan(str(logdir), policy, quiet_period=0)
    remote = api.plan(url, policy, quiet_period=0)
    traced = [a for rp in remote.runs for a in rp.actions if ".pt.trace.json" in a.path]
    assert traced and not any(a.estimated for a in traced)
    assert [(rp.run, rp.expected_after_bytes) for rp in remote.runs] == \
        [(rp.run, rp.expected_after_bytes) for rp in local.runs]
    assert remote.cost["scan"]["bytes_down"] >= sum(a.bytes_before for a in traced)  # said in its cost
    made = _trace_counter(monkeypatch)
    rep = api.reduce_logdir(url, policy=policy, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert made == []
    for o in rep.outcomes:
        rp = remote.run(o.run)
        assert (o.run, o.bytes_after) == (o.run, rp.expected_after_bytes if not rp.skipped else o.bytes_before)
