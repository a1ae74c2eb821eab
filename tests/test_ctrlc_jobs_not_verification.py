"""Ctrl-C during ``reduce --jobs 2`` is an interrupt, never a verification failure (review R16 F13).

A terminal's Ctrl-C sends SIGINT to its whole foreground process group. The verification's helper
processes (the Rust data server, the Python loader child) were in that group: the server died
mid-verification, its reader's "Connection refused" became "verification failed: reader errors
(rust)" in the outcome and in the permanent history, while stderr said the run was untouched.
Here the real CLI runs in its own session (as a shell's job would), is paused while a worker
thread's verification has its data server up, and its process group gets a real SIGINT."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import user_files
from helpers_cli import cli_env, run_cli

#: the CLI, paused once a run's new files are staged and a data server of its verification has
#: started (on whichever thread: the readers open on pools of their own); the server's pid is
#: written beside the flag
PAUSED_IN_VERIFICATION = r"""
import os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # what a terminal's shell leaves it
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.formats import views
flag, staged, hits, lock = sys.argv[1], threading.Event(), [], threading.Lock()
faults.arm("reduce.stage", staged.set)
real_start = views.DataServer.start
def start(self, timeout_s):
    addr = real_start(self, timeout_s)
    if staged.is_set():
        with lock:
            hits.append(1)
            n = len(hits)
        if n == 1:
            with open(flag + ".pid", "w") as f:
                f.write(str(self.proc.pid))
            open(flag, "w").close()
            deadline = time.monotonic() + 300
            while not os.path.exists(flag + ".release") and time.monotonic() < deadline:
                time.sleep(0.05)
    return addr
views.DataServer.start = start
from tb_footprint_plugin.cli import main
sys.exit(main(sys.argv[2:]))
"""


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo at scale 2: its resnet_torch and tf_summary_mix runs have event files the archive
    policy rewrites, so their verification reads both sides through the Rust data server."""
    d = tmp_path_factory.mktemp("demo") / "logs"
    p = run_cli("demo", d, "--scale", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    return d


def test_sigint_to_the_process_group_with_two_jobs_is_said_and_recorded_as_interrupted(demo, tmp_path):
    logdir = tmp_path / "logdir"
    for r in ("resnet_torch", "tf_summary_mix"):
        shutil.copytree(demo / r, logdir / r, symlinks=True)
    before = user_files(logdir)
    flag = str(tmp_path / "paused")
    p = subprocess.Popen([sys.executable, "-c", PAUSED_IN_VERIFICATION, flag, "reduce", str(logdir), "--yes",
                          "--jobs", "2", "--verify", "python,rust"],
                         env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(flag) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(flag), p.communicate()
        server = int(Path(flag + ".pid").read_text())
        assert alive(server)
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C at the terminal does
        time.sleep(1)
        # the terminal's interrupt is the CLI's to act on: its verification's server reads on
        assert alive(server), "the data server died of the terminal's SIGINT"
    finally:
        Path(flag + ".release").touch()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, out + err
    assert gone_within(server, 10), "the data server outlived its verification"

    assert "verification failed" not in out + err, out + err
    assert "[error]" not in out, out
    stopped = [r for r in ("resnet_torch", "tf_summary_mix")
               if f"✗ {r}: rolled_back [interrupted] — interrupted before the commit point" in out]
    assert stopped, out + err  # the paused run at least: cancelled at its next step
    for r in stopped:
        assert f"✓ {r}: untouched" in err, err
        assert {k: v for k, v in user_files(logdir).items() if k.startswith(r + "/")} == \
            {k: v for k, v in before.items() if k.startswith(r + "/")}, r

    hist = run_cli("history", logdir, "--json")
    assert hist.returncode == 0, hist.stderr
    entries = json.loads(hist.stdout)
    assert not [e for e in entries if "verification failed" in (e.get("reason") or "")], entries
    rolled = {e["run"]: e for e in entries if e.get("outcome") == "rolled_back"}
    assert sorted(rolled) == sorted(stopped), entries
    assert all(e["reason"].startswith("interrupted") for e in rolled.values()), entries


#: a parent that starts the Python loader child on a run, says the child's pid and waits to be killed
LOADER_PARENT = r"""
import sys, time
from tb_footprint_plugin.verify import pyside
side = pyside.PythonSide(sys.argv[1], 120).start()
print(side._proc.pid, flush=True)
time.sleep(300)
"""


def test_the_python_loader_child_is_in_its_own_session_and_ends_with_its_parent(tmp_path):
    """Out of the terminal's process group (Ctrl-C is its parent's to act on), yet never outliving
    its parent: killed with SIGKILL (no cleanup of its own), the parent's end of the child's stdin
    closes and the child ends at once, not when its read is done (250,000 scalar records: ~15 s
    of this loader)."""
    from tb_footprint_plugin.synth.events import EventWriter

    run = tmp_path / "run"
    w = EventWriter(str(run))
    for step in range(250_000):
        w.scalar("loss", step, 1.0 / (step + 1))
    w.close()
    p = subprocess.Popen([sys.executable, "-c", LOADER_PARENT, str(run)], env=cli_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(p.stdout.readline())
        assert os.getsid(child) == child != os.getsid(p.pid)  # its own session, out of the parent's group
    finally:
        p.kill()
        p.wait()
    assert gone_within(child, 4), "the loader child outlived its killed parent"
