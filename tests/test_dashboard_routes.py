"""Verification through TensorBoard's own routes (issue 12).

* a transform planted to drop a graph tag's record is caught by the route comparison and the
  run rolled back, with a message naming the route and the tag;
* a crawl of TensorBoard's WSGI app (both backends) over copies of the real fixtures with
  graphs, after ``lossless`` and ``archive``, finds no difference except removed profile data;
* the comparison itself names the route and the first difference;
* the big-run path (no Python loader over the original) reaches the same verdicts.
"""
import os
from pathlib import Path

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.verify import Expectations, data_server_binary, verify_reduction
from tb_footprint_plugin.verify import dashboard, routes
from tb_footprint_plugin.verify.readers import Reader


@pytest.fixture(autouse=True)
def _full_read_path(monkeypatch):
    """Most tests here are of the full read (both backends keep every point, routes crawled on
    both), which runs of more than ``dashboard.FULL_READ_BYTES`` (1 MB) no longer take: their
    fixtures are a few MB. The big-run path is asked for where a test passes
    ``full_read_bytes=0``."""
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 64 << 20)


BOTH = ("python", "rust")

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _event_files(run_dir: Path) -> list:
    return sorted(p for p in run_dir.iterdir() if "tfevents" in p.name and p.is_file())


def _into_the_staged_file(staged: Path, tmp: Path) -> None:
    """The planted bytes written into the staged file itself (its inode kept: a file put at the
    staged name instead is refused before any verification, ``storage.files.take_over``)."""
    with open(tmp, "r+b") as f:
        f.write(staged.read_bytes())
        f.truncate()
    staged.unlink()


def _drop_records(path: Path, dest: Path, plugin: str) -> int:
    """Copy ``path`` to ``dest`` without the records of summaries of ``plugin``."""
    from tensorboard.compat.proto import event_pb2

    dropped = 0
    with tfrecord.RecordReader(str(path), verify=True) as r, open(dest, "wb") as out:
        for rec in r:
            e = event_pb2.Event.FromString(rec.data)
            if any(v.metadata.plugin_data.plugin_name == plugin for v in e.summary.value):
                dropped += 1
                continue
            out.write(tfrecord.frame(rec.data))
    return dropped


# --- the planted transform: a graph tag dropped without saying so ------------------------------


def test_planted_graph_tag_drop_is_rolled_back(tmp_path, monkeypatch):
    """A rewrite that silently drops the ``graph_run_metadata`` record of a
    ``trace_export(profiler=True)`` run is rolled back; the reason names the graphs route and
    the tag, and every user file is byte-identical to before."""
    from tb_footprint_plugin.engine.vault import sha256_file
    from tb_footprint_plugin.transforms import event_rewrite

    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    before = user_files(logdir)
    real_stage = event_rewrite.stage_event_rewrite
    planted = []

    def stage_dropping_graph_tag(action, src, tmp, sha):
        info = real_stage(action, src, tmp, sha)
        staged = tmp + ".planted"
        n = _drop_records(Path(tmp), Path(staged), "graph_run_metadata")
        _into_the_staged_file(Path(staged), Path(tmp))
        planted.append(n)
        info["size"] = os.path.getsize(tmp)
        info["sha256"] = sha256_file(tmp)
        # the fault: the drop is not declared in the contract
        info["expectations"] = {k: v for k, v in info["expectations"].items()
                                if not k.startswith("graph")}
        return info

    monkeypatch.setattr(event_rewrite, "stage_event_rewrite", stage_dropping_graph_tag)
    # Histograms thinned so the event file is rewritten; graphs untouched by the policy: the
    # plant is the only thing that touches them.
    policy = {"name": "planted", "content": {"keep_per_tag": {"histograms": 50},
                                             "strip_run_metadata": False, "dedupe_graphs": False}}
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=BOTH)
    assert planted and planted[0] >= 1, "the planted transform did not run"
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert out and all(o.status == "rolled_back" for o in out), [o.to_dict() for o in out]
    reason = " ".join(filter(None, [out[0].reason] + list(out[0].verification["failed"])))
    assert "/data/plugin/graphs/info" in reason, reason
    assert "step_fn_profile" in reason, reason
    assert user_files(logdir) == before


# --- route crawl on the real fixtures ------------------------------------------------------------


def _route_lines(outcome) -> list:
    return [c for c in outcome.verification["checks"] if c["name"] == "routes"]


@needs_rust
@pytest.mark.parametrize("policy, fixture", [
    ("archive", "tf/summary_mix"),  # op graph + run metadata of trace_export(profiler=True)
    ("archive", "torch/profiled"),  # run graph + the `step1` run metadata
    ("archive", "tf/keras_profiled"),  # Keras conceptual graph, per-run profile
    ("lossless", "torch/profiled"),  # traces compressed, event files untouched
])
def test_route_crawl_after_reduce(tmp_path, fixture, policy):
    """The crawl runs on both backends inside every reduce, and finds nothing but the
    profile data the policy removed; a fresh crawl of the result against the untouched
    fixture agrees (graphs listing and every graph route included)."""
    logdir = copy_real(fixture, tmp_path / "logdir")
    pristine = copy_real(fixture, tmp_path / "pristine")
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=BOTH)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    changed = [o for o in rep.outcomes if o.status == "verified"]
    assert changed
    for o in changed:
        if not any("tfevents" in f for f in o.removed_files + o.created_files):
            # only profile data changed: the event files are proven the same bytes by sha256 and
            # no reader is started (docs/FAILSAFE.md); the fresh crawl below still compares them
            assert o.verification["mode"] == "unchanged", o.verification["checks"]
            assert any(c["name"] == "event files" and "unchanged (sha256)" in c["detail"]
                       for c in o.verification["checks"]) == bool(_event_files(logdir / o.run))
            continue
        lines = _route_lines(o)
        assert lines and all(c["ok"] for c in lines), lines
        details = " ".join(c["detail"] for c in lines)
        if _event_files(logdir / o.run):
            assert "routes (python, rust)" in details or (
                "routes (python)" in details and "routes (rust" in details), details
    # An independent crawl: the reduced logdir against the pristine copy, run by run.
    for o in changed:
        orig_run, red_run = pristine / o.run, logdir / o.run
        if not _event_files(orig_run):
            continue
        exp = Expectations(plugin_modes=o.verification.get("expectations") or {})
        for backend in BOTH:
            with Reader(str(orig_run), backend) as a, Reader(str(red_run), backend) as b:
                res = routes.compare_crawl(a.app(), b.app(),
                                           dashboard.route_contract(exp, backend), sampled=True)
            assert not res.diffs, (backend, [(d.route, d.why) for d in res.diffs[:5]])
            assert res.by_plugin.get("graphs", 0) >= 1  # /graphs/info and a graph were fetched


# --- the comparison names the route and the first difference --------------------------------------


def _copy_run(src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for p in _event_files(src):
        (dest / p.name).write_bytes(p.read_bytes())
    return dest


@needs_rust
@pytest.mark.parametrize("full_read_bytes", [None, 0], ids=["full", "big-run path"])
def test_dropped_run_metadata_tag_names_route_and_tag(tmp_path, real_copy, full_read_bytes):
    """The PyTorch run's ``step1`` run metadata removed from its event file: both the full
    and the big-run path fail, naming the graphs route and the tag."""
    src = real_copy("torch/profiled")
    orig = _copy_run(src, tmp_path / "orig")
    red = tmp_path / "red"
    red.mkdir()
    from tensorboard.compat.proto import event_pb2

    for p in _event_files(orig):
        with tfrecord.RecordReader(str(p), verify=True) as r, open(red / p.name, "wb") as out:
            for rec in r:
                if event_pb2.Event.FromString(rec.data).HasField("tagged_run_metadata"):
                    continue
                out.write(tfrecord.frame(rec.data))
    result = verify_reduction(str(orig), str(red), backends=BOTH, full_read_bytes=full_read_bytes)
    assert not result.ok
    route_fails = [f for f in result.failed if f.startswith("routes")]
    assert route_fails, result.failed
    assert any("/data/plugin/graphs/info" in f and "step1" in f for f in route_fails), route_fails


@needs_rust
def test_identical_copy_big_run_path(tmp_path, real_copy):
    """The big-run path on an unchanged copy: records, tag index, the Rust default view
    through the routes and the Python loader over the reduced side all pass, and the
    Python loader never reads the original."""
    src = real_copy("tf/summary_mix")
    orig = _copy_run(src, tmp_path / "orig")
    red = _copy_run(src, tmp_path / "red")
    result = verify_reduction(str(orig), str(red), backends=BOTH, full_read_bytes=0)
    assert result.ok, result.failed
    names = {c.name for c in result.checks}
    assert {"records", "record subsequence", "tag index", "routes", "python"} <= names
    assert any(c.detail.startswith("routes (rust, default view)") for c in result.checks)
    assert "python" not in result.views  # the Python loader was not run over the original
    assert result.scalar_series["loss"]["before"] == result.scalar_series["loss"]["after"]


def test_first_difference_names_the_point():
    before = [{"step": 1, "wall_time": 1.0, "<bytes sha256>": "a"},
              {"step": 2, "wall_time": 2.0, "<bytes sha256>": "b"}]
    after = [{"step": 1, "wall_time": 1.0, "<bytes sha256>": "a"},
             {"step": 3, "wall_time": 3.0, "<bytes sha256>": "c"}]
    assert routes.first_difference(before, after) == "[1].step: 2 became 3"
    assert routes.compare_points(before, after[:1], exact=False, keep_first=True,
                                 keep_last=True, sampled=False) == "last point (step 2) was not kept"
    assert routes.compare_points(before, before[1:], exact=False, keep_first=False,
                                 keep_last=True, sampled=False) is None


# --- the big-run path's cheaper proofs (issue 12: within 3x of the Rust load) -----------------


def _changed_histogram_run(tmp_path: Path) -> tuple[Path, Path]:
    """The keras train run, and a copy whose last histogram of one tag has one bucket
    count changed (re-encoded: same step, wall time and tag)."""
    import test_verify as tv

    orig = _copy_run(tv.real(tv.KERAS), tmp_path / "orig")
    red = _copy_run(orig, tmp_path / "red")
    target = tv.nth_of_tag(tv.HIST_TAG, 4)  # the last of its 5 points: every sample keeps it

    def edit(i, e):
        if not target(e):
            return True
        from tensorboard.util import tensor_util

        v = e.summary.value[0]
        arr = tensor_util.make_ndarray(v.tensor).copy()
        arr[0, 2] += 1.0
        v.tensor.CopyFrom(tensor_util.make_tensor_proto(arr))
        return e

    assert tv.rewrite(tv.main_event_file(red), edit) == 1
    return orig, red


@needs_rust
def test_histogram_routes_compared_at_the_data_provider(tmp_path):
    """On the big-run path the histograms, distributions and time-series histogram series
    are compared where those routes read them: a changed bucket count fails, naming the
    routes and the tag; an unchanged copy passes with those series compared."""
    orig, red = _changed_histogram_run(tmp_path)
    readers = dashboard.open_pair(str(orig), str(red), "rust", None, store_all=False,
                                  timeout_s=120)
    try:
        check = dashboard.route_check("rust", readers["before"], readers["after"],
                                      Expectations(), ", default view", heavy_via_provider=True)
    finally:
        for r in readers.values():
            r.close()
    assert not check.ok
    assert "/data/plugin/histograms/histograms" in check.detail, check.detail
    assert "data provider read_tensors" in check.detail, check.detail
    import test_verify as tv
    assert tv.HIST_TAG in check.detail, check.detail

    same = _copy_run(orig, tmp_path / "same")
    readers = dashboard.open_pair(str(orig), str(same), "rust", None, store_all=False,
                                  timeout_s=120)
    try:
        check = dashboard.route_check("rust", readers["before"], readers["after"],
                                      Expectations(), ", default view", heavy_via_provider=True)
    finally:
        for r in readers.values():
            r.close()
    assert check.ok, check.detail
    assert "histograms" in check.detail


@needs_rust
def test_big_run_path_fails_a_changed_histogram(tmp_path):
    """The whole big-run verification of the changed histogram fails (records and routes)."""
    orig, red = _changed_histogram_run(tmp_path)
    result = verify_reduction(str(orig), str(red), backends=BOTH, full_read_bytes=0)
    assert not result.ok
    assert any(f.startswith("routes") and "/data/plugin/histograms/histograms" in f
               for f in result.failed), result.failed


def test_python_loader_child_matches_in_process(tmp_path):
    """The Python loader's view read in its own interpreter is the in-process one."""
    from tb_footprint_plugin.verify import pyside
    import test_verify as tv

    run = _copy_run(tv.real(tv.KERAS), tmp_path / "run")
    child = pyside.PythonSide(str(run), 120).start().result()
    here = pyside.read_listing(str(run), 120)
    assert child.fatal is None and child.errors == here.errors
    assert child.plugins == here.plugins
    assert len(child.plugins["histograms"][tv.HIST_TAG]) == 5


def test_python_loader_child_that_fails_fails_verification(tmp_path, monkeypatch):
    """A Python-loader child that dies proves nothing: the big-run check fails, saying so."""
    import sys

    import test_verify as tv

    orig = _copy_run(tv.real(tv.KERAS), tmp_path / "orig")
    red = _copy_run(orig, tmp_path / "red")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    result = verify_reduction(str(orig), str(red), backends=("python",), full_read_bytes=0)
    assert not result.ok
    assert any(f.startswith("python") and "exited with 1" in f for f in result.failed), \
        result.failed


# --- the concurrent groups of the crawl ------------------------------------------------------------


def test_crawl_group_runs_ahead_by_a_bounded_number_of_responses():
    """A group of routes fetches at most ``_AHEAD`` responses the comparison has not taken
    (memory stays a few responses, not the run's), and ends once the caller is done."""
    import queue
    import threading
    import time

    made = []

    def group():
        for i in range(10 * routes._AHEAD):
            made.append(i)
            yield i

    q, stop = queue.Queue(maxsize=routes._AHEAD), threading.Event()
    t = threading.Thread(target=routes._produce, args=(group, q, stop))
    t.start()
    # the queue filled (waited for: a loaded CI may not run the producer within a fixed sleep),
    # then a moment for a producer that runs ahead to show it
    deadline = time.monotonic() + 60
    while q.qsize() < routes._AHEAD and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    assert len(made) <= routes._AHEAD + 1 and q.qsize() == routes._AHEAD
    assert [q.get()[1] for _ in range(5)] == list(range(5))  # in order, as taken
    stop.set()
    t.join(5)
    assert not t.is_alive() and len(made) < 10 * routes._AHEAD


def test_crawl_group_failure_reaches_the_caller_in_order():
    import queue
    import threading

    def group():
        yield "a"
        raise OSError("data server gone")

    q = queue.Queue(maxsize=routes._AHEAD)
    routes._produce(group, q, threading.Event())
    assert q.get() == ("item", "a")
    kind, err = q.get()
    assert kind == "error" and isinstance(err, OSError) and "gone" in str(err)


@needs_rust
def test_crawl_stopped_early_leaves_no_group_running(tmp_path, monkeypatch):
    """The caller stops at the first response (as a comparison that gives up would): every
    group of routes ends promptly instead of crawling the rest of the run (here one group's
    routes never end)."""
    import threading

    def endless(listing, fetch):
        while True:
            yield listing("/data/runs", "<core>")

    monkeypatch.setattr(routes, "_graphs", endless)
    run = copy_real("tf/summary_mix", tmp_path / "run")
    runs = [p.parent for p in run.rglob("events.out.tfevents.*")]
    with Reader(str(runs[0]), "rust") as a, Reader(str(runs[0]), "rust") as b:
        crawl = routes.crawl_pair(a.app(), b.app(), providers=(a.provider, b.provider))
        first = next(crawl)
        assert first[0].route == "/data/runs"
        closing = threading.Thread(target=crawl.close, daemon=True)
        closing.start()
        closing.join(10)
        assert not closing.is_alive(), "the crawl's groups did not stop"
    alive = [th.name for th in threading.enumerate() if th.name.startswith("footprint-crawl")]
    assert not alive, alive
