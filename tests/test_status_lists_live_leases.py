"""``status`` did not list the runs another live process is changing (a live lease held by someone
else): now ``locked_runs`` says each, from the lease files ("being changed by pid … on host … until …",
code ``locked``), and a lease whose holder is gone is not listed.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tb_footprint_plugin import api

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))

HOLD = r'''
import sys, time
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.run_lock import run_lock
lock = run_lock(Context(sys.argv[1]), "a").acquire()
print("held", flush=True)
time.sleep(600)
'''


def test_status_lists_a_run_another_live_process_holds(tmp_path):
    from tb_footprint_plugin import synth

    ld = tmp_path / "logdir"
    with synth.EventWriter(str(ld / "a")) as w:
        w.scalar("loss", 1, 1.0)
    assert api.status(str(ld))["locked_runs"] == []
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(ld)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        (held,) = api.status(str(ld))["locked_runs"]
        assert (held["run"], held["pid"], held["host"], held["code"]) == ("a", child.pid, socket.gethostname(),
                                                                          "locked"), held
        assert f"being changed by pid {child.pid} on host {socket.gethostname()}" in held["detail"], held
        assert "until" in held["detail"] and held["until"], held
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # its holder is gone: its lease (left behind by the kill) holds nothing any more
    assert list((ld / ".tb-footprint" / "locks").glob("*.lease")), "the killed holder's lease should remain"
    assert api.status(str(ld))["locked_runs"] == []


def test_status_reads_no_lease_through_a_planted_locks_link(tmp_path):
    """A ``locks`` folder swapped for a symbolic link to a folder of live-looking leases outside the
    logdir: ``status`` reads nothing through it (nothing is followed outside the logdir and the
    vault, review R17 F3), and the run's journal progress is not read through a ``journal`` link."""
    import json
    import time

    from tb_footprint_plugin import synth
    from tb_footprint_plugin.engine import lease

    ld = tmp_path / "logdir"
    with synth.EventWriter(str(ld / "a")) as w:
        w.scalar("loss", 1, 1.0)
    assert api.status(str(ld))["locked_runs"] == []
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    now = time.time()
    # held by pid 1 (alive) of this host, a lease well formed in every field
    (outside / "a.lease").write_text(json.dumps({"run": "a", "host": socket.gethostname(), "pid": 1,
                                                "expires": now + 3600, "renewed": now, "token": "t"}))
    (outside / "x.jsonl").write_text(json.dumps({"type": "begin", "run": "a"}) + "\n")
    state = ld / ".tb-footprint"
    real = state / "locks"
    assert lease.live_leases(str(outside), str(outside)), "the planted lease reads as live where it lies"
    if real.exists():
        for p in real.iterdir():
            p.unlink()
        real.rmdir()
    state.mkdir(mode=0o700, exist_ok=True)
    real.symlink_to(outside)
    assert api.status(str(ld))["locked_runs"] == []
    assert lease.journal_progress(str(outside), "a") is not None
    jl = tmp_path / "journal-link"
    jl.symlink_to(outside)
    assert lease.journal_progress(str(jl), "a") is None
