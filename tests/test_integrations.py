"""End-of-training reductions without a framework: the quiet-period exemption for a job's own
closed files (plan and transaction), ``reduce_when_done``, waiting for writers, failures as
logged values, and lazy framework imports. The real frameworks: test_integrations_frameworks.py."""
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

import tb_footprint_plugin as fp
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.transaction import Context, reduce_run
from tb_footprint_plugin.integrations import JobCode, JobReducer, reduce_when_done
from tb_footprint_plugin.plan.planner import make_plan
from conftest import REPO, tree_hashes

RUN = "resnet_torch"


@pytest.fixture
def demo(tmp_path):
    root = tmp_path / "logs"
    generate_demo(str(root), scale=0.05)
    return root


def _traces(root):
    return sorted(p for p in (root / RUN).iterdir() if p.name.endswith(".pt.trace.json"))


def _touch(path, t=None):
    t = time.time() if t is None else t
    os.utime(path, (t, t))
    return os.lstat(path).st_mtime


def _rel(root, p):
    return os.path.relpath(p, root).replace(os.sep, "/")


# -- the engine rule -------------------------------------------------------------------------
def test_plan_quiet_period_exempts_only_the_jobs_closed_files(demo):
    traces = _traces(demo)
    closed = {_rel(demo, p): _touch(p) for p in traces}  # the job just wrote and closed these
    fp_ = fp.scan(str(demo), write_cache=False)

    plain = make_plan(fp_, "lossless", runs=[RUN]).run(RUN)
    assert plain.skipped and plain.skipped.startswith("active")  # as the CLI sees it
    exempt = make_plan(fp_, "lossless", runs=[RUN], closed_files=closed).run(RUN)
    assert exempt.skipped is None and exempt.actions

    # another file of the run written recently still makes it active
    event = next(p for p in (demo / RUN).iterdir() if p.name.startswith("events.out"))
    _touch(event)
    fp_ = fp.scan(str(demo), write_cache=False)
    rp = make_plan(fp_, "lossless", runs=[RUN], closed_files=closed).run(RUN)
    assert rp.skipped and rp.skipped.startswith("active")


def test_closed_file_written_again_is_not_exempt(demo):
    traces = _traces(demo)
    closed = {_rel(demo, p): _touch(p, time.time() - 5) for p in traces}
    _touch(traces[0])  # written again after the job declared it closed
    rp = make_plan(fp.scan(str(demo), write_cache=False), "lossless", runs=[RUN],
                   closed_files=closed).run(RUN)
    assert rp.skipped and rp.skipped.startswith("active")


def test_transaction_preflight_applies_the_same_rule(demo):
    """Between the plan and the transaction another file of the run is written: the run's
    transaction refuses (preflight), even though the plan passed."""
    traces = _traces(demo)
    closed = {_rel(demo, p): _touch(p) for p in traces}
    rp = make_plan(fp.scan(str(demo), write_cache=False), "lossless", runs=[RUN],
                   closed_files=closed).run(RUN)
    assert rp.skipped is None
    before = tree_hashes(demo / RUN)
    event = next(p for p in (demo / RUN).iterdir() if p.name.startswith("events.out"))
    _touch(event)
    ctx = Context(logdir=str(demo), closed_files=closed, verify_backends=("python",))
    out = reduce_run(ctx, rp, policy=None)
    assert out.status == "skipped" and "active" in out.reason
    assert tree_hashes(demo / RUN) == before


def test_reduce_logdir_with_closed_files_reduces_and_verifies(demo):
    closed = {_rel(demo, p): _touch(p) for p in _traces(demo)}
    assert fp.reduce_logdir(str(demo), policy="lossless", dry_run=False, runs=[RUN],
                            verify_backends=("python",)).outcomes[0].status == "skipped"
    rep = fp.reduce_logdir(str(demo), policy="lossless", dry_run=False, runs=[RUN], closed_files=closed,
                           verify_backends=("python",))
    [o] = rep.outcomes
    assert o.status == "verified", o.reason
    assert [e["run"] for e in fp.history(str(demo))] == [RUN]
    assert all(r["ok"] for r in fp.verify(str(demo), RUN, verify_backends=("python",)))


# -- reduce_when_done -----------------------------------------------------------------------
_TEMPLATE = {}


def _template_demo(tmp):
    """A real PyTorch trace and event file (from the demo writers), written once per session."""
    if not _TEMPLATE:
        generate_demo(str(tmp), scale=0.05)
        d = tmp / RUN
        _TEMPLATE["trace"] = next(p for p in sorted(d.iterdir()) if p.name.endswith(".pt.trace.json")).read_bytes()
        _TEMPLATE["event"] = next(p for p in sorted(d.iterdir()) if p.name.startswith("events.out")).read_bytes()


def _write_job(root, name="job"):
    """What a job writes into a fresh run of ``root``: an event file and a PyTorch trace, closed."""
    run = root / name
    run.mkdir()
    (run / "host_1.1.pt.trace.json").write_bytes(_TEMPLATE["trace"])
    (run / "events.out.tfevents.1.host.1").write_bytes(_TEMPLATE["event"])
    return run


@pytest.fixture
def logdir(tmp_path):
    _template_demo(tmp_path / "template")
    root = tmp_path / "logs"
    root.mkdir()
    old = root / "old_run"  # a run the job did not write: never part of its reduction
    old.mkdir()
    (old / "host_9.9.pt.trace.json").write_bytes(_TEMPLATE["trace"])
    _touch(old / "host_9.9.pt.trace.json", time.time() - 7200)
    return root


def test_reduce_when_done_reduces_only_the_runs_the_block_wrote(logdir, caplog):
    old = tree_hashes(logdir / "old_run")
    caplog.set_level(logging.INFO, logger="tb_footprint_plugin.integrations")
    with reduce_when_done(str(logdir), dry_run=False, verify_backends=("python",)) as job:
        _write_job(logdir)
    out = job.wait(60)
    assert out.code == JobCode.REDUCED, out.to_dict()
    assert out.runs == ["job"]
    assert sorted(out.closed_files) == ["job/events.out.tfevents.1.host.1", "job/host_1.1.pt.trace.json"]
    assert (logdir / "job" / "host_1.1.pt.trace.json.gz").exists()
    assert tree_hashes(logdir / "old_run") == old
    assert [e["run"] for e in fp.history(str(logdir))] == ["job"]
    assert "footprint: reduced for job" in caplog.text


def test_reduce_when_done_defaults_to_a_logged_dry_run(logdir, caplog):
    caplog.set_level(logging.INFO, logger="tb_footprint_plugin.integrations")
    with fp.reduce_when_done(str(logdir)) as job:  # re-exported at the package top
        _write_job(logdir)
    before = tree_hashes(logdir)
    out = job.wait(60)
    assert out.code == JobCode.PLANNED and out.report.dry_run
    assert out.report.plan.policy["name"] == "lossless"
    assert tree_hashes(logdir) == before
    assert "compress job/host_1.1.pt.trace.json" in caplog.text and "dry run: nothing was changed" in caplog.text


def test_other_recent_file_in_the_run_keeps_it_active(logdir):
    run = logdir / "shared"
    run.mkdir()
    other = run / "events.out.tfevents.1.other.2"
    other.write_bytes(_TEMPLATE["event"])
    _touch(other, time.time() - 5)  # another writer, 5 s ago: well inside the quiet period
    with reduce_when_done(str(logdir), job_dirs=[str(run)], dry_run=False, verify_backends=("python",)) as job:
        (run / "host_1.1.pt.trace.json").write_bytes(_TEMPLATE["trace"])
    # the other writer's file was written before the job started: it is not the job's
    out = job.wait(60)
    assert out.code == JobCode.SKIPPED, out.to_dict()
    [o] = out.report.outcomes
    assert o.status == "skipped" and "active" in o.reason
    assert (run / "host_1.1.pt.trace.json").exists()


def test_waits_for_a_writer_still_open_then_reduces(logdir):
    run = logdir / "job"
    run.mkdir()
    with reduce_when_done(str(logdir), dry_run=False, verify_backends=("python",)) as job:
        (run / "host_1.1.pt.trace.json").write_bytes(_TEMPLATE["trace"])
        writer = open(run / "events.out.tfevents.1.host.1", "wb")
        writer.write(_TEMPLATE["event"])
        writer.flush()
    assert job.outcome is None  # waiting in the background for the writer
    time.sleep(1.0)
    assert job.outcome is None
    writer.close()
    out = job.wait(60)
    assert out.code == JobCode.REDUCED, out.to_dict()


def test_writer_never_closed_leaves_the_run_alone(logdir, caplog):
    run = logdir / "job"
    run.mkdir()
    with reduce_when_done(str(logdir), dry_run=False, close_timeout=1.0) as job:
        (run / "host_1.1.pt.trace.json").write_bytes(_TEMPLATE["trace"])
        writer = open(run / "events.out.tfevents.1.host.1", "wb")
    try:
        before = tree_hashes(run)
        out = job.wait(30)
        assert out.code == JobCode.WRITERS_OPEN and "events.out.tfevents.1.host.1" in out.reason
        assert tree_hashes(run) == before
        assert "footprint: writers_open" in caplog.text
    finally:
        writer.close()


def test_training_that_raises_is_not_reduced_and_the_error_propagates(logdir):
    with pytest.raises(ZeroDivisionError):
        with reduce_when_done(str(logdir), dry_run=False) as job:
            _write_job(logdir)
            1 / 0
    assert job.outcome.code == JobCode.TRAINING_FAILED
    assert (logdir / "job" / "host_1.1.pt.trace.json").exists()


def test_failing_reduction_is_logged_and_leaves_the_run_as_it_was(logdir, caplog):
    snap = {}
    faults.arm("reduce.journal", lambda: snap.update(tree_hashes(logdir / "job")))
    faults.arm("reduce.verify", "raise")
    try:
        with reduce_when_done(str(logdir), dry_run=False, verify_backends=("python",)) as job:
            _write_job(logdir)
        out = job.wait(60)
    finally:
        faults.disarm_all()
    assert out.code == JobCode.FAILED and not out.ok
    [o] = out.report.outcomes
    assert o.status == "rolled_back" and "injected" in o.reason
    assert snap and tree_hashes(logdir / "job") == snap
    assert "footprint: failed for job" in caplog.text and "rolled_back" in caplog.text


def test_bad_logdir_is_an_error_value_not_an_exception(tmp_path):
    job = JobReducer(str(tmp_path / "missing"), job_dirs=[str(tmp_path / "missing" / "run")], dry_run=False)
    out = job.finish()
    assert out.code == JobCode.ERROR and "NotADirectoryError" in out.reason
    outside = JobReducer(str(tmp_path / "a"), job_dirs=[str(tmp_path / "b")])
    (tmp_path / "a").mkdir()
    out = outside.finish()
    assert out.code == JobCode.ERROR and "not inside the logdir" in out.reason


def test_importing_the_integrations_imports_no_framework():
    code = ("import sys, tb_footprint_plugin as fp, tb_footprint_plugin.integrations as i; fp.reduce_when_done; "
            "bad = [m for m in ('torch', 'keras', 'tensorflow', 'lightning', 'pytorch_lightning', 'transformers') "
            "if m in sys.modules]; assert not bad, bad")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_a_file_another_process_writes_is_never_the_jobs(logdir):
    """Another process keeps a file of the same run open for writing: the job does not wait
    for it, and the file keeps the quiet period, so the run is left alone as active."""
    run = logdir / "job"
    run.mkdir()
    other = run / "events.out.tfevents.2.host.99"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nf = open(sys.argv[1], 'ab')\n"
                               "f.write(b'x'); f.flush(); print('open', flush=True); time.sleep(120)", str(other)],
                              stdout=subprocess.PIPE, text=True)
    try:
        with reduce_when_done(str(logdir), dry_run=False, close_timeout=60, verify_backends=("python",)) as job:
            (run / "host_1.1.pt.trace.json").write_bytes(_TEMPLATE["trace"])
            assert holder.stdout.readline().strip() == "open"
        t0 = time.monotonic()
        out = job.wait(60)
        assert time.monotonic() - t0 < 30  # not waiting for the other process's writer
        assert out.code == JobCode.SKIPPED, out.to_dict()
        assert "job/events.out.tfevents.2.host.99" not in out.closed_files
        [o] = out.report.outcomes
        assert o.status == "skipped" and "active" in o.reason
        assert (run / "host_1.1.pt.trace.json").exists()
    finally:
        holder.kill()
        holder.wait()
