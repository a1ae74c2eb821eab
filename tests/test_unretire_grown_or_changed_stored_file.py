"""A disk retirement's stored file changed after the retirement (review R9 F3): on one filesystem
the retirement renames the run's files into the vault, so a writer that still held one open (a
job on another NFS client, which the local writer check cannot see) appends to the vault's file.

- A stored file that begins with its recorded bytes (grown) goes back whole, its late records
  with it, where TensorBoard reads them (``late_records_restored``), as ``rollback_retire``
  keeps such records; before, the restore refused the whole run (``restore_blocked``).
- A stored file that does not begin with its recorded bytes stays in the vault and is named
  (``not_restored``, ``backup_changed``): the run's other files go back; before, none did (every
  stored file changed: still refused, nothing changed). Killed after its first put-back, the next
  start finishes such a restore (it leaves the file its begin record named).
- ``retire_tree.stored_problems`` (what ``status`` says, one lstat a file) names each case first.
- Grown before the retirement's commit (its check): the run is active (``Skip.ACTIVE``, as
  ``rollback_retire`` then keeps the records in the file), not a damaged backup (R9's nit on 9cf31c4).
"""
import glob
import os
import shutil
import time
import uuid
from pathlib import Path

import pytest
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Finding, Outcome, Skip
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.scan.tfrecord import RecordReader

NOTES = b"notes\n" * 10


def _records(folder):
    n = 0
    for name in sorted(os.listdir(folder)):
        if "tfevents" in name:
            with open(os.path.join(folder, name), "rb") as f:
                n += sum(1 for _ in RecordReader(f, raw=True))
    return n


def _retired(tmp_path, vault=None):
    logdir = tmp_path / "logs"
    run = logdir / "train"
    with synth.EventWriter(str(run)) as w:
        for s in range(50):
            w.scalar("loss", s, 1.0 / (s + 1))
    (run / "notes.txt").write_bytes(NOTES)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0,
                     backup_dir=str(vault) if vault else None)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    stored = sorted(glob.glob(str((vault or logdir / ".tb-footprint") / "retired" / "*" / "files" / "*")))
    event = next(p for p in stored if open(p, "rb").read() != NOTES)
    notes = next(p for p in stored if open(p, "rb").read() == NOTES)
    return logdir, run, before, event, notes


def _said(logdir, vault=None):
    """What status says of the retirement's stored files (imported here: new with this change)."""
    from tb_footprint_plugin.engine.retire_tree import stored_problems

    return [(c, p) for c, p, _w in stored_problems(_manifest(logdir, vault))]


def _manifest(logdir, vault=None):
    [m] = [m for m in Vault(str(vault or logdir / ".tb-footprint")).manifests() if m.get("kind") == "retire"]
    return m


def _append_late_records(path, n=10):
    with open(path, "ab") as f:  # the late writer's descriptor: the inode is the vault's stored file now
        rw = RecordWriter(f)
        for step in range(50, 50 + n):
            e = event_pb2.Event(wall_time=time.time(), step=step)
            e.summary.value.add(tag="late", simple_value=float(step))
            rw.write(e.SerializeToString())


def test_a_grown_stored_file_goes_back_whole_with_its_late_records(tmp_path):
    logdir, run, before, event, _notes = _retired(tmp_path)
    n = sum(1 for _ in RecordReader(open(event, "rb"), raw=True))
    _append_late_records(event)
    name = next(k for k in before if "tfevents" in k)
    assert _said(logdir) == [(Finding.LATE_WRITES_KEPT, f"train/{name}")]  # what status says before

    (o,) = api.restore(str(logdir), run="train")
    assert o.status == Outcome.RESTORED, (o.status, o.code, o.reason)
    assert o.code == Finding.LATE_RECORDS_RESTORED and "grew after the retirement" in o.reason, o.to_dict()
    assert {"code": Finding.LATE_RECORDS_RESTORED, "path": f"train/{name}"} in o.findings
    assert (run / "notes.txt").read_bytes() == NOTES
    back = (run / name).read_bytes()
    assert back.startswith(before[name]) and len(back) > len(before[name])  # the original, then the records
    assert _records(run) == n + 10  # the late records are in the run, where TensorBoard reads them
    assert not glob.glob(str(logdir / ".tb-footprint" / "retired" / "*"))  # nothing left behind
    assert api.retired(str(logdir)) == []


def test_a_grown_copy_in_a_vault_on_another_filesystem_is_copied_back_whole(tmp_path):
    vault = Path("/dev/shm") / f"tbfp-test-{uuid.uuid4().hex[:8]}"
    vault.mkdir()
    try:
        assert os.stat(vault).st_dev != os.stat(tmp_path).st_dev, "needs /dev/shm on another filesystem"
        logdir, run, before, event, _notes = _retired(tmp_path, vault)
        n = sum(1 for _ in RecordReader(open(event, "rb"), raw=True))
        _append_late_records(event)  # a copy: grown only through a name of its own (a link, by hand)
        name = next(k for k in before if "tfevents" in k)
        assert _said(logdir, vault) == [(Finding.LATE_WRITES_KEPT, f"train/{name}")]
        (o,) = api.restore(str(logdir), run="train")
        assert o.status == Outcome.RESTORED and o.code == Finding.LATE_RECORDS_RESTORED, o.to_dict()
        assert (run / name).read_bytes().startswith(before[name]) and (run / "notes.txt").read_bytes() == NOTES
        assert _records(run) == n + 10
        assert not os.path.exists(event)  # the vault's copy released once the run checked out
    finally:
        shutil.rmtree(vault, ignore_errors=True)


def test_a_changed_stored_file_stays_in_the_vault_and_the_others_go_back(tmp_path):
    logdir, run, before, event, notes = _retired(tmp_path)
    head = open(event, "rb").read(6)
    for p in (event, notes):  # in-place writes: no stored file begins with its bytes
        with open(p, "r+b") as f:
            f.write(b"EDITED")
    (o,) = api.restore(str(logdir), run="train")  # nothing would come back: refused, nothing changed
    assert o.status == Outcome.FAILED and o.code == Failure.RESTORE_BLOCKED, o.to_dict()
    assert "nothing was changed" in o.reason and not run.exists() and len(api.retired(str(logdir))) == 1
    with open(event, "r+b") as f:  # the event file's bytes as recorded again; the notes still changed
        f.write(head)
    assert (Finding.BACKUP_CHANGED, "train/notes.txt") in _said(logdir)

    (o,) = api.restore(str(logdir), run="train")
    assert o.status == Outcome.RESTORED and o.code == Finding.NOT_RESTORED, o.to_dict()
    assert {"code": Finding.NOT_RESTORED, "path": "train/notes.txt"} in o.findings
    assert {"code": Finding.BACKUP_CHANGED, "path": "train/notes.txt"} in o.findings
    assert "no longer begin with their recorded bytes" in o.reason, o.reason
    assert {p.name: p.read_bytes() for p in run.iterdir()} == {k: v for k, v in before.items() if k != "notes.txt"}
    assert open(notes, "rb").read().startswith(b"EDITED")  # kept as it is, in the vault
    assert _manifest(logdir)["not_restored"] == ["train/notes.txt"]


def test_a_restore_leaving_a_changed_file_killed_midway_is_finished_by_the_next_start(tmp_path):
    logdir, run, before, _event, notes = _retired(tmp_path)
    with open(notes, "r+b") as f:
        f.write(b"EDITED")
    faults.arm("unretire.mid_move", "raise")
    try:
        (o,) = api.restore(str(logdir), run="train")
    finally:
        faults.disarm_all()
    assert o.status == Outcome.FAILED, o.to_dict()
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "completed", r
    assert {p.name: p.read_bytes() for p in run.iterdir()} == {k: v for k, v in before.items() if k != "notes.txt"}
    assert open(notes, "rb").read().startswith(b"EDITED")
    assert api.recover_logdir(str(logdir)) == []


def test_a_file_grown_during_the_retirement_keeps_the_run_active(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "train"
    with synth.EventWriter(str(run)) as w:
        for s in range(50):
            w.scalar("loss", s, 1.0 / (s + 1))
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    [name] = os.listdir(run)
    n = _records(run)
    # after the rename into the vault, before its check: a writer on another machine appends
    faults.arm("retire.move", lambda: _append_late_records(
        glob.glob(str(logdir / ".tb-footprint" / "retired" / "*" / "files" / "0"))[0]))
    [o] = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0).outcomes
    assert (o.status, o.code) == (Outcome.SKIPPED, Skip.ACTIVE), o.to_dict()  # left alone, as a run written
    assert "written to during the retirement" in o.reason, o.reason
    assert os.listdir(run) == [name] and _records(run) == n + 10  # back, the records in it


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()
