"""Issue 29 item 3 gap: an interrupt (or a kill) between a run's commit and its ledger "done" record
left the batch ledger saying ``verifying`` for good. ``status --runs`` showed ``verifying?`` and
advised a rerun that does nothing for a run the reduction left nothing of (a profile-only run leaves
the plan), and the batch's "saved" total left it out. The interrupted process, and any later start,
now record such a run as done with its operation and sizes."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import copy_real
from test_issue29_dayone_interrupt import PAUSED_LEDGER

ROOT = Path(__file__).resolve().parent.parent


def _paused_reduce(tmp_path, sig):
    logdir = tmp_path / "logs"
    copy_real("jax/profiled", logdir / "jax_profile")
    copy_real("tf/keras_profiled", logdir / "train")
    flag = tmp_path / "paused"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", PAUSED_LEDGER, str(flag), "reduce", str(logdir), "-y",
                          "--run", "jax_profile", "--quiet-period", "0"], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not flag.exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert flag.exists(), p.communicate()
    p.send_signal(sig)
    out, err = p.communicate(timeout=300)
    return logdir, env, p.returncode, out + err


def _status(logdir, env):
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "status", str(logdir), "--runs", "--json"],
                       env=env, capture_output=True, text=True, timeout=300)
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
    logdir, env, rc, text = _paused_reduce(tmp_path, signal.SIGINT)
    assert rc == 130, text
    _assert_done(_status(logdir, env))


def test_a_kill_after_the_commit_is_settled_in_the_ledger_by_the_next_start(tmp_path):
    logdir, env, rc, text = _paused_reduce(tmp_path, signal.SIGKILL)
    assert rc == -signal.SIGKILL, text
    assert _status(logdir, env)["batch"]["runs"]["jax_profile"]["state"] == "verifying"  # the gap's state
    # any later changing verb starts by settling: here a reduce of another run
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", str(logdir), "-y", "--run",
                        "train/train", "--quiet-period", "0"], env=env, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    _assert_done(_status(logdir, env))
