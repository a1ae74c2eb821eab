"""A run another live process holds is refused on a disk as on a bucket: skipped ``locked``, and the
outcome's ``holder`` names who ("HOST pid PID, lease until …"), for reduce and restore alike (issue
#26: one lock with its lease; a bucket's refusals filled ``holder``, a disk's left it None and, when
the lock file itself was held, did not name the holder in the reason either)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Skip

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))

HOLD = r'''
import sys, time
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.run_lock import run_lock
lock = run_lock(Context(sys.argv[1]), sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(600)
'''


def _holding(logdir: str, run: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLD, logdir, run], env=ENV, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_reduce_and_restore_of_a_held_run_name_its_holder(tmp_path):
    for name in ("a", "b"):
        copy_real("tf/keras_profiled", tmp_path / "logdir" / name)
    logdir = str(tmp_path / "logdir")
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, runs=["b/train"], quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [(o.status, o.reason) for o in rep.outcomes]
    children = [_holding(logdir, run) for run in ("a/train", "b/train")]
    try:
        rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, runs=["a/train"], quiet_period=0)
        (o,) = [o for o in rep.outcomes if o.run == "a/train"]
        who = f"{socket.gethostname()} pid {children[0].pid}"
        assert (o.status, o.code) == (Outcome.SKIPPED, Skip.LOCKED), (o.status, o.code, o.reason)
        assert o.holder and o.holder.startswith(who) and "lease until" in o.holder, o.holder
        assert who in o.reason, o.reason
        (r,) = api.restore(logdir, run="b/train")
        who = f"{socket.gethostname()} pid {children[1].pid}"
        assert r.code == Skip.LOCKED and r.holder and r.holder.startswith(who), (r.code, r.holder, r.reason)
        assert who in r.reason, r.reason
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
            child.wait()
