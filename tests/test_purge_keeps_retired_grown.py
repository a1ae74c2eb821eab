"""A purge keeps a retired run whose stored files are not as the retirement recorded them, and
``status`` names them (review R9 F3's second half). On one filesystem a retirement renames the run's
files into the vault; a writer still holding one open (a job on another machine: the check for
writers sees this machine only) appends its records there. Before, ``purge --yes`` deleted that
retirement, late records and all, without a word, and ``status`` listed no problem; a reduction's
grown backup was kept (``late_writes_pending``) and salvaged. Now the purge lists it kept, coded
as ``status`` names it: ``late_writes_kept`` (grown), ``backup_changed`` (changed in place)."""
import glob
import os
import time

import pytest
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome


def _retired(tmp_path) -> tuple:
    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / "train")) as w:
        for s in range(50):
            w.scalar("loss", s, 1.0 / (s + 1))
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    (stored,) = glob.glob(str(logdir / ".tb-footprint" / "retired" / "*" / "files" / "*"))
    return str(logdir), stored


def _grow(stored: str) -> None:
    with open(stored, "ab") as f:  # the late writer's descriptor (its inode is the stored file)
        rw = RecordWriter(f)
        for step in range(50, 60):
            e = event_pb2.Event(wall_time=time.time(), step=step)
            e.summary.value.add(tag="late", simple_value=float(step))
            rw.write(e.SerializeToString())


def _change(stored: str) -> None:
    with open(stored, "r+b") as f:  # same size, other bytes: a write through another name of its inode
        f.seek(40)
        f.write(b"\x00" * 8)
    os.utime(stored, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))


@pytest.mark.parametrize("how, code", [(_grow, Finding.LATE_WRITES_KEPT), (_change, Finding.BACKUP_CHANGED)])
def test_a_purge_keeps_a_retired_file_not_as_recorded(tmp_path, how, code):
    logdir, stored = _retired(tmp_path)
    how(stored)
    with open(stored, "rb") as f:
        held = f.read()
    assert code in [p["code"] for p in api.status(logdir)["problems"]]
    preview = api.purge(logdir, yes=False, older_than=0)
    assert [(k["run"], k["code"]) for k in preview.kept] == [("train", code)], preview.kept
    assert not preview.ops
    done = api.purge(logdir, yes=True, older_than=0)
    assert [(k["run"], k["code"]) for k in done.kept] == [("train", code)], done.kept
    with open(stored, "rb") as f:
        assert f.read() == held  # the only copy of what was written after the retirement, kept


def test_a_purge_takes_a_retirement_as_recorded(tmp_path):
    logdir, stored = _retired(tmp_path)
    assert not [p for p in api.status(logdir)["problems"] if p["run"] == "train"]
    done = api.purge(logdir, yes=True, older_than=0)
    assert not done.kept and not os.path.exists(stored)
