"""A compaction note names the batch process that compacts it in a later round (``waits_for``:
host, pid and the process's start time); a start of another process leaves the note to that
batch while it runs. A live process at that pid that is not the one the note names is no
reason to wait: the note would otherwise be put off for as long as an unrelated process that
reused the pid runs (task N2 item 2).

- a note with a start time: a process at the pid with another start time, or whose start time
  cannot be read (another user's process under ``hidepid``: never ours), is gone;
- an older note without a start time keeps waiting for a live process at its pid, but only for
  one that started before the note was written (the writer, or one that might be): a process
  started after it cannot have written it, so the note is finished at once. Such a note
  therefore waits at most as long as a process that was already running when it was written.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time

from test_small_packs import small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.context import Context

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _noted(tmp_path, waits_for, age: float = 0.0):
    """One run reduced into a hard-link vault, its compaction noted as a batch notes it (the
    note dated ``age`` seconds ago)."""
    logdir = small_runs(tmp_path, 1, 3)
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, verify_backends=("python",),
                            vault_format="hardlink")
    assert rep.ok
    vault = Context(str(logdir)).vault
    (m,) = vault.manifests()
    shas = [f["sha256"] for f in m["files"]]
    vault.note_compaction(m["op_id"], shas, waits_for=waits_for)
    if age:
        t = time.time() - age
        os.utime(os.path.join(vault.root, "compact", f"{m['op_id']}.json"), (t, t))
    return logdir, vault, m["op_id"]


def _finished(logdir, op) -> bool:
    return any(r.code == Finding.COMPACTION_FINISHED and r.op_id == op for r in api.recover_logdir(str(logdir)))


def _sleeper():
    p = subprocess.Popen(["sleep", "60"])
    for _ in range(100):  # its start time is readable once it runs
        if lease.process_start(p.pid) is not None:
            break
        time.sleep(0.01)
    return p


def test_a_pid_reused_by_another_process_does_not_hold_a_note(tmp_path):
    other = _sleeper()
    try:
        start = lease.process_start(other.pid)
        who = {"host": socket.gethostname(), "pid": other.pid, "pid_start": start + 1}  # not that process
        logdir, vault, op = _noted(tmp_path, who)
        assert _finished(logdir, op) and vault.pending_compactions() == {}
    finally:
        other.kill()
        other.wait()


def test_a_process_whose_start_time_cannot_be_read_does_not_hold_a_note(tmp_path, monkeypatch):
    other = _sleeper()
    try:
        who = {"host": socket.gethostname(), "pid": other.pid, "pid_start": lease.process_start(other.pid)}
        logdir, vault, op = _noted(tmp_path, who)
        real = lease.process_start
        # what another user's process shows under hidepid: alive (EPERM), /proc/<pid> unreadable
        monkeypatch.setattr(lease, "process_start", lambda pid: None if pid == other.pid else real(pid))
        assert _finished(logdir, op) and vault.pending_compactions() == {}
    finally:
        other.kill()
        other.wait()


def test_an_old_note_without_a_start_time_waits_only_for_a_process_older_than_itself(tmp_path):
    # a process started after the note was written cannot have written it: the note is finished
    logdir, vault, op = _noted(tmp_path / "a", None, age=0)
    later = _sleeper()
    try:
        vault.note_compaction(op, vault.pending_compactions()[op],
                              waits_for={"host": socket.gethostname(), "pid": later.pid})
        t = time.time() - 30  # written well before that process started
        os.utime(os.path.join(vault.root, "compact", f"{op}.json"), (t, t))
        assert vault.compaction_waits_for(op)["pid_start"] is None
        assert _finished(logdir, op) and vault.pending_compactions() == {}
    finally:
        later.kill()
        later.wait()
    # one started before the note (it may be the batch that wrote it) keeps today's behaviour:
    # the note waits while it runs, and is finished by the first start after it ended
    earlier = _sleeper()
    try:
        time.sleep(1.1)  # the boot time /proc gives is whole seconds
        logdir, vault, op = _noted(tmp_path / "b", {"host": socket.gethostname(), "pid": earlier.pid})
        assert not _finished(logdir, op) and op in vault.pending_compactions()
    finally:
        earlier.kill()
        earlier.wait()
    assert _finished(logdir, op) and vault.pending_compactions() == {}
