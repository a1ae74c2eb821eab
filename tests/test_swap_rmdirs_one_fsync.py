"""The disk swap journals the folders it removes with one fsync (#28, r27 task K4): before, each
``rmdir`` record was appended and fsynced on its own right before its folder went, so a run whose
reduction empties many folders (a profile of many sessions) paid one fsync a folder. Now every
``rmdir`` record is appended, the last one fsynced (making the others durable too), before the
first folder is removed: each removal still follows its durable record, and the records are the
ones old journals hold (rollback, recovery and the manifest read them alike).

Here: the fsyncs of the swap do not grow with the folders it removes; a SIGKILL at the first
``rmdir`` (every record durable, no folder gone yet) and at a later one (some gone) are settled by
the next start as the clean reduce leaves the run, and a restore gives back every file and folder
(bytes, mode, mtime)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_late_records import ENV
from test_put_back_killed_before_metadata import snapshot
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import transaction

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = 1_700_000_000
SESSIONS = 40


def _logdir(root: Path, sessions: int = SESSIONS) -> Path:
    """``run``: a scalar event file and ``sessions`` profile sessions, each its own folder (the
    archive policy deletes them all: ``sessions`` + 2 folders emptied); one session 0750."""
    run = root / "run"
    with synth.EventWriter(str(run)) as w:
        for s in range(3):
            w.scalar("loss", s, 1.0 / (s + 1))
    for i in range(sessions):
        d = run / "plugins" / "profile" / f"2026_01_01_00_00_{i:02d}"
        d.mkdir(parents=True)
        (d / "host.xplane.pb").write_bytes(os.urandom(200) + bytes([i]))
    (run / "plugins" / "profile" / "2026_01_01_00_00_03").chmod(0o750)
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    os.utime(root, (OLD, OLD))
    return root


def _reduce(logdir: Path):
    return api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",))


def test_the_swap_fsyncs_the_folders_it_removes_once(tmp_path, monkeypatch):
    """40 session folders (42 with ``profile`` and ``plugins``): before, 42 journal fsyncs in the
    swap alone; now one for them all (the swap's other fsyncs do not depend on the folder count)."""
    logdir = _logdir(tmp_path / "L")
    counted = {"on": False, "fsyncs": 0}
    real_fsync, real_swap = os.fsync, transaction.apply_swap

    def fsync(fd):
        if counted["on"]:
            counted["fsyncs"] += 1
        return real_fsync(fd)

    def swap(*a, **kw):
        counted["on"] = True
        try:
            return real_swap(*a, **kw)
        finally:
            counted["on"] = False

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(transaction, "apply_swap", swap)
    rep = _reduce(logdir)
    [o] = [o for o in rep.outcomes if o.op_id]
    assert o.status == "verified", o.to_dict()
    assert not (logdir / "run" / "plugins").exists()
    assert counted["fsyncs"] <= 4, f"{counted['fsyncs']} fsyncs for {SESSIONS + 2} folders removed"


CHILD = textwrap.dedent("""
    import os, signal, sys
    from tb_footprint_plugin import api
    from tb_footprint_plugin.engine import transaction

    logdir, at = sys.argv[1], int(sys.argv[2])
    real_rmdir, real_swap = os.rmdir, transaction.apply_swap
    state = {"on": False, "n": 0}

    def rmdir(path, *a, dir_fd=None, **kw):
        if state["on"]:
            state["n"] += 1
            if state["n"] == at:  # SIGKILL right before this folder's removal
                os.kill(os.getpid(), signal.SIGKILL)
        return real_rmdir(path, *a, dir_fd=dir_fd, **kw)

    def swap(*a, **kw):
        state["on"] = True
        try:
            return real_swap(*a, **kw)
        finally:
            state["on"] = False

    os.rmdir, transaction.apply_swap = rmdir, swap
    api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    sys.exit(3)  # not killed
""")


def _journal_records(logdir: Path) -> list:
    (j,) = [p for p in (logdir / ".tb-footprint" / "journal").iterdir() if p.suffix == ".jsonl"]
    return [json.loads(line) for line in j.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("at", [1, 7], ids=["before_any_rmdir", "mid_rmdirs"])
def test_a_swap_killed_among_its_folder_removals_is_finished_and_restored(tmp_path, at):
    killed, clean = _logdir(tmp_path / "K"), _logdir(tmp_path / "C")
    before = snapshot(killed)
    assert all(o.status == "verified" for o in _reduce(clean).outcomes if o.op_id)
    p = subprocess.run([sys.executable, "-c", CHILD, str(killed), str(at)], env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-3000:])
    # every folder the swap removes was journaled, durably, before the first of them went
    going = {r["path"] for r in _journal_records(killed) if r.get("type") == "rmdir"}
    sessions = {f"run/plugins/profile/2026_01_01_00_00_{i:02d}" for i in range(SESSIONS)}
    assert sessions | {"run/plugins/profile", "run/plugins"} <= going, sorted(going)[:5]
    left = {os.path.relpath(d, killed) for d, _x, _f in os.walk(killed / "run" / "plugins" / "profile")}
    assert len(sessions & left) == SESSIONS - (at - 1)  # the kill came before the at-th removal
    api.recover_logdir(str(killed))
    assert not api.unfinished(str(killed))["unfinished_operations"]
    got, want = snapshot(killed), snapshot(clean)
    assert {k: v[:1] + v[2:] for k, v in got.items()} == {k: v[:1] + v[2:] for k, v in want.items()}
    [op] = [m["op_id"] for m in api.operations(str(killed)) if m["kind"] == "reduce"]
    [o] = api.restore(str(killed), op=op)
    assert o.status == "restored", o.to_dict()
    assert snapshot(killed) == before, "the run is not back as it was (bytes, modes, mtimes)"
