"""Issue 29 item 3 gap: an interrupt (or a kill) between a run's commit and its ledger "done" record
left the batch ledger saying ``verifying`` for good. ``status --runs`` showed ``verifying?`` and
advised a rerun that does nothing for a run the reduction left nothing of (a profile-only run leaves
the plan), and the batch's "saved" total left it out. The interrupted process, and any later start,
now record such a run as done with its operation and sizes."""
import json
import signal

from conftest import copy_real
from helpers_cli import interrupt, run_cli, start_paused
from test_issue29_dayone_interrupt import PAUSED_LEDGER


def _paused_reduce(tmp_path, sig):
    logdir = tmp_path / "logs"
    copy_real("jax/profiled", logdir / "jax_profile")
    copy_real("tf/keras_profiled", logdir / "train")
    p = start_paused(PAUSED_LEDGER, tmp_path / "paused", "reduce", logdir, "-y", "--run", "jax_profile",
                     "--quiet-period", "0")
    out, err = interrupt(p, sig)
    return logdir, p.returncode, out + err


def _status(logdir):
    p = run_cli("status", logdir, "--runs", "--json", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def _assert_done(st):
    (op,) = [o for o in st["operations"] if o["run"] == "jax_profile" and o["kind"] == "reduce"]
    assert op["outcome"] == "verified" and op["bytes_after"] == 0
    e = st["batch"]["runs"]["jax_profile"]
    assert e["state"] == "done", e
    assert e["op_id"] == op["op_id"] and e["verified"] is True
    assert e["original_size_bytes"] == op["bytes_before"] and e["after_size_bytes"] == 0
    others = sum(r["original_size_bytes"] - r["after_size_bytes"] for n, r in st["batch"]["runs"].items()
                 if n != "jax_profile" and r["state"] == "done")
    assert st["batch"]["saved_bytes"] == op["bytes_before"] + others  # the 0 B run's saving is counted
    assert st["batch"]["stalled"] == []


def test_ctrl_c_after_the_commit_leaves_the_run_done_in_the_ledger_with_its_savings(tmp_path):
    logdir, rc, text = _paused_reduce(tmp_path, signal.SIGINT)
    assert rc == 130, text
    _assert_done(_status(logdir))


def test_a_kill_after_the_commit_is_settled_in_the_ledger_by_the_next_start(tmp_path):
    logdir, rc, text = _paused_reduce(tmp_path, signal.SIGKILL)
    assert rc == -signal.SIGKILL, text
    assert _status(logdir)["batch"]["runs"]["jax_profile"]["state"] == "verifying"  # the gap's state
    # any later changing verb starts by settling: here a reduce of another run
    p = run_cli("reduce", logdir, "-y", "--run", "train/train", "--quiet-period", "0")
    assert p.returncode == 0, p.stdout + p.stderr
    _assert_done(_status(logdir))
