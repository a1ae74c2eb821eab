"""One Rust load of the original per reduce, and what the verification does not pay twice
(issue #28 item 3: the fixed verification cost of a reduce).

* a reduce with no plan before it (``tb-footprint reduce``: the plan is made inside it) loads
  the original in TensorBoard's Rust data server once: the plan's selection loads it, keeps it
  (``verify.original.park``) and the reduce's verification takes it over;
* a kept load is taken only while the run's files are the very ones it loaded, only by the
  reduce of that run, and not after ``PARK_S``: otherwise its data server is stopped;
* a selection reads the default view's steps without the payloads (no image blob fetched);
* the Python loader's child starts without TensorBoard's S3 and fsspec clients.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.formats import views
from tb_footprint_plugin.verify import dashboard, data_server_binary
from tb_footprint_plugin.verify import original as orig
from tb_footprint_plugin.verify.readers import Reader
from test_verify_handover import BOTH, _age, _histogram_run, _user_files

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


@pytest.fixture
def servers(monkeypatch):
    """Every data server started, in order (``views.DataServer``)."""
    started = []
    real_start = views.DataServer.start

    def counting_start(self, *a, **kw):
        started.append(self)
        return real_start(self, *a, **kw)

    monkeypatch.setattr(views.DataServer, "start", counting_start)
    yield started
    orig.release_parked()


def _fresh_process():
    """No selection cached in memory, no cache file read, no load kept: a new process."""
    from tb_footprint_plugin.scan import selcache
    from tb_footprint_plugin.transforms import event_rewrite as er

    er._SEL_CACHE.clear()
    selcache._MEMO.clear()
    orig.release_parked()


def _stopped(server) -> bool:
    return server.proc is not None and server.proc.poll() is not None


@needs_rust
def test_reduce_without_a_plan_before_loads_the_original_once(tmp_path, monkeypatch, servers):
    logdir = tmp_path / "logdir"
    _histogram_run(logdir / "run")
    _age(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)  # this small run takes the big-run path
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no plan cached on disk
    _fresh_process()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert len(out) == 1 and out[0].status == "verified", [o.to_dict() for o in out]
    v = out[0].verification
    assert v["ok"], v["failed"]
    # one load of the original (the plan's selection, taken over by the verification) and one
    # of the reduced run; before, the reduce loaded the original again for its verification
    assert len(servers) == 2, [s.args[1] for s in servers]
    assert all(_stopped(s) for s in servers)  # nothing left running once the reduce is over
    assert orig._parked is None
    lines = {c["name"]: c["detail"] for c in v["checks"]}
    assert "routes (rust, default view)" in lines["routes"]
    assert "each byte-identical to an original record, in order" in lines["record subsequence"]


@needs_rust
def test_a_kept_load_is_taken_only_for_the_same_files(tmp_path, servers):
    run = tmp_path / "run"
    path = _histogram_run(run, steps=300)
    kept = orig.OriginalRun(str(run))
    reader = kept.load_now(timeout_s=120)
    assert reader is not None and not reader.view.fatal
    orig.park(kept)
    assert len(servers) == 1
    # the same files: the reduce's start takes the loaded server over, starts none
    taken = orig.OriginalRun(str(run)).start_reader(timeout_s=120)
    try:
        # wait for the load start_reader has (a load of its own starts its server on a thread:
        # counted before it exists, a new load would pass unseen)
        assert taken.load_now(timeout_s=120) is reader
        assert taken.reader is reader and len(servers) == 1
        assert orig._parked is None and kept.reader is None
    finally:
        taken.close()
    assert _stopped(servers[0])

    # a file whose mtime changed since the load: not taken, its server stopped, a new load
    kept = orig.OriginalRun(str(run))
    kept.load_now(timeout_s=120)
    orig.park(kept)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    fresh = orig.OriginalRun(str(run)).start_reader(timeout_s=120)
    try:
        # the new load's server is started on the load's own thread: wait for it before counting
        # (under load the count was taken before that thread had started it)
        loaded = fresh.load_now(timeout_s=120)
        assert loaded is not None and not loaded.view.fatal
        assert len(servers) == 3 and _stopped(servers[1])
        assert fresh.reader is not None and fresh.reader is not kept.reader
    finally:
        fresh.close()
    assert _stopped(servers[2])


@needs_rust
def test_a_kept_load_of_another_run_or_too_old_is_stopped(tmp_path, monkeypatch, servers):
    a, b = tmp_path / "a", tmp_path / "b"
    _histogram_run(a, steps=300)
    _histogram_run(b, steps=300)
    kept = orig.OriginalRun(str(a))
    kept.load_now(timeout_s=120)
    orig.park(kept)
    other = orig.OriginalRun(str(b)).start_reader(timeout_s=120)
    try:
        assert _stopped(servers[0]) and kept.reader is None  # the reduce of b stopped a's
        assert orig._parked is None
    finally:
        other.close()

    monkeypatch.setattr(orig, "PARK_S", 0.2)
    kept = orig.OriginalRun(str(a))
    kept.load_now(timeout_s=120)
    orig.park(kept)
    deadline = time.monotonic() + 60  # stopping a data server process: a loaded CI is slow
    while (orig._parked is not None or kept.reader is not None) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orig._parked is None and kept.reader is None
    assert _stopped(servers[-1])


@needs_rust
def test_a_selection_reads_steps_without_payloads(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _histogram_run(run, steps=300)
    with Reader(str(run), "rust", None, store_all=False, timeout_s=120) as full:
        whole = full.read(plugins={"histograms", "images"})
        steps = {(p, t): [x[:2] for x in tv.points] for p, tags in whole.plugins.items()
                 for t, tv in tags.items()}
    fetched = []
    real_points = views.read_points

    def counting(*a, **kw):
        fetched.append(a[2])
        return real_points(*a, **kw)

    monkeypatch.setattr(views, "read_points", counting)
    with Reader(str(run), "rust", None, store_all=False, timeout_s=120) as bare:
        view = bare.read(plugins={"histograms", "images"}, payloads=False)
    assert fetched == []  # no blob fetched, no tensor converted
    assert {(p, t): [x[:2] for x in tv.points] for p, tags in view.plugins.items()
            for t, tv in tags.items()} == steps
    assert all(x[2] is None for tags in view.plugins.values() for tv in tags.values() for x in tv.points)
    assert ("images", "sample") in steps and ("histograms", "layer1/weight") in steps


def test_python_child_starts_without_remote_clients(tmp_path):
    run = tmp_path / "run"
    _histogram_run(run, steps=50)
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.verify.pyside", str(run), "60"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    listing = json.loads(proc.stdout.strip().splitlines()[-1])
    assert listing["fatal"] is None and listing["plugins"]["histograms"]["layer1/weight"]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "tensorboard.compat.tensorflow_stub.io.gfile" in imported
    # (a refused import is listed too, under its own name: a real one imports the package's modules)
    real = sorted(m for m in imported if m.split(".")[0] in ("boto3", "botocore", "fsspec") and "." in m
                  and m != "botocore.exceptions")
    assert real == [], real


_DEFERRED_IO = r"""
import sys, threading
from tb_footprint_plugin.formats import views
if sys.argv[1] == "busy":  # another thread alive: a plain import
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()
assert views.data_server_binary()
from tensorboard.compat.tensorflow_stub.io import gfile
imported = {m: m in sys.modules for m in ("boto3", "fsspec")}
# everything gfile offers is still offered: s3 registered, fsspec paths served
assert gfile.S3_ENABLED and gfile.FSSPEC_ENABLED
assert type(gfile.get_filesystem("s3://bucket/key")).__name__ == "S3FileSystem"
assert gfile.botocore.exceptions.ClientError.__name__ == "ClientError"
with gfile.GFile("memory://d/f.txt", "w") as f:
    f.write("x")
assert gfile.exists("memory://d/f.txt") and "fsspec" in sys.modules
assert callable(gfile.boto3.client) and "boto3" in sys.modules
print(imported)
"""


@needs_rust
@pytest.mark.parametrize("threads", ["alone", "busy"])
def test_tensorboard_io_defers_its_remote_clients(threads):
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-c", _DEFERRED_IO, threads], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = eval(proc.stdout.strip().splitlines()[-1])
    # alone: the readers' start imports neither (they come at a remote path's first use);
    # with another thread alive, which could import them meanwhile: imported as TensorBoard does
    assert imported == ({"boto3": False, "fsspec": False} if threads == "alone"
                        else {"boto3": True, "fsspec": True}), imported


@needs_rust
def test_a_bucket_plan_keeps_no_load_of_its_private_copy(tmp_path, s3_bucket, servers):
    """A bucket plan makes the selection over a private copy of the run's event files, deleted
    once planned, that no reduce takes over: its data server is stopped with the copy."""
    logdir = tmp_path / "logdir"
    _histogram_run(logdir / "run", steps=400)
    url = s3_bucket.upload(logdir, "logs")
    _fresh_process()
    plan = api.plan(url, "archive", quiet_period=0)
    assert [rp for rp in plan.runs if rp.actions], plan.to_dict()
    assert servers, "the bucket plan's selection loaded the copy in the Rust data server"
    assert orig._parked is None
    assert all(_stopped(s) for s in servers)
