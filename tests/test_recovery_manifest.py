"""Recovery takes a reduction's durable manifest over a journal that lost its commit marker.

The manifest is fsynced before the commit record, which is not (nor is the journal's removal):
a power cut can bring back a journal that ends before ``commit`` while the manifest says the run
was verified, perhaps restored since. Replaying such a journal (roll forward, or roll back) would
rewrite the manifest without its later fields or put originals back over newer content.
"""
import json
import os
from pathlib import Path

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults, oplog
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir


pytestmark = pytest.mark.usefixtures("disarm_faults")


def _journal_dir(logdir: Path) -> Path:
    return Path(state_dir(str(logdir))) / "journal"


def _reduce_keeping_journal(logdir: Path):
    """Reduce ``logdir``; returns (op_id, the journal's lines as they were at the commit)."""
    kept = {}

    def keep():
        for p in _journal_dir(logdir).glob("*.jsonl"):
            kept[p.name] = p.read_bytes()

    faults.arm("reduce.commit", keep)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    faults.disarm_all()
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    (name, raw), = kept.items()
    lines = raw.decode().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "commit"
    return name[: -len(".jsonl")], lines


def _bring_back(logdir: Path, op_id: str, lines, upto: str) -> None:
    """The journal as a power cut leaves it: every record before the first ``upto`` one."""
    types = [json.loads(line)["type"] for line in lines]
    fd = os.open(_journal_dir(logdir) / f"{op_id}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(lines[: types.index(upto)]))


def _records(logdir: Path, op_id: str) -> list:
    """What the vault recorded of the operation: its manifest's only record is the operation log."""
    return oplog.records(state_dir(str(logdir)), op_id)


def _manifest(logdir: Path, op_id: str) -> dict:
    return Vault(state_dir(str(logdir))).read_manifest(op_id)


@pytest.mark.parametrize("upto", ["commit", "swapped"])
def test_lost_commit_after_a_restore_changes_neither_the_run_nor_the_manifest(tmp_path, upto):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    op_id, lines = _reduce_keeping_journal(logdir)
    outs = api.restore(str(logdir))
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(logdir) == before
    assert _manifest(logdir, op_id)["restored_by"]
    recorded = _records(logdir, op_id)

    _bring_back(logdir, op_id, lines, upto)
    rec = [r for r in api.recover_logdir(str(logdir)) if r.op_id == op_id]
    assert [r.action for r in rec] == ["completed"], [(r.action, r.detail) for r in rec]
    assert user_files(logdir) == before  # the restored originals stay
    assert _records(logdir, op_id) == recorded  # restored_by and every other field kept
    m = api.operation(str(logdir), op_id)
    assert m["outcome"] == "verified" and m["restored_by"]
    assert not os.listdir(_journal_dir(logdir))


def test_lost_commit_of_a_reduced_run_leaves_it_reduced_and_its_manifest_as_written(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    op_id, lines = _reduce_keeping_journal(logdir)
    reduced = user_files(logdir)
    recorded = _records(logdir, op_id)

    _bring_back(logdir, op_id, lines, "commit")
    rec = [r for r in api.recover_logdir(str(logdir)) if r.op_id == op_id]
    assert [r.action for r in rec] == ["completed"], [(r.action, r.detail) for r in rec]
    assert rec[0].runs and rec[0].runs[0]["bytes_after"] < rec[0].runs[0]["bytes_before"]
    assert user_files(logdir) == reduced
    assert _records(logdir, op_id) == recorded  # not rewritten as 'recovered'
    assert not os.listdir(_journal_dir(logdir))


def _damage_last_record(logdir: Path, op_id: str, copies: int = 2) -> None:
    """Cut the last ``copies`` lines of the operation's log (each state is written twice in a
    row: both copies of its newest state, or one) to their first 40 bytes (op id still readable)."""
    seg_dir = Path(oplog.segments_dir(state_dir(str(logdir))))
    found = []
    for p in sorted(seg_dir.glob("*.jsonl")):
        for n, line in enumerate(p.read_bytes().splitlines(keepends=True)):
            if line.startswith(b'{"op":"%s"' % op_id.encode()):
                found.append((p, n))
    for p, n in found[-copies:]:
        lines = p.read_bytes().splitlines(keepends=True)
        lines[n] = lines[n][:40] + b"\n"
        p.write_bytes(b"".join(lines))


def test_one_damaged_copy_of_a_state_loses_nothing(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    op_id, lines = _reduce_keeping_journal(logdir)
    assert [o.status for o in api.restore(str(logdir))] == ["restored"]
    _damage_last_record(logdir, op_id, copies=1)  # one copy of its newest state (restored)
    assert _manifest(logdir, op_id)["restored_by"]  # read from the other copy
    _bring_back(logdir, op_id, lines, "commit")
    rec = [r for r in api.recover_logdir(str(logdir)) if r.op_id == op_id]
    assert [r.action for r in rec] == ["completed"], [(r.action, r.detail) for r in rec]
    assert user_files(logdir) == before and _manifest(logdir, op_id)["restored_by"]


def test_a_damaged_manifest_is_never_replayed_over_and_keeps_its_run_and_backups(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    op_id, lines = _reduce_keeping_journal(logdir)
    assert [o.status for o in api.restore(str(logdir))] == ["restored"]
    blobs = {f["sha256"] for f in _manifest(logdir, op_id)["files"]}
    _damage_last_record(logdir, op_id)  # both copies of its newest state (restored): unknown now

    _bring_back(logdir, op_id, lines, "commit")
    for _start in range(2):
        got = [r for r in api.recover_logdir(str(logdir)) if r.op_id == op_id]
        # the journal is not replayed over a manifest whose newest state may be lost
        assert [(r.action, r.code) for r in got] == [("refused", "damaged_line")], \
            [(r.action, r.code, r.detail) for r in got]
        assert user_files(logdir) == before
        assert os.listdir(_journal_dir(logdir)) == [f"{op_id}.jsonl"]
    # what the damaged state may have named stays: the blobs its records spell out are claimed
    assert blobs <= Vault(state_dir(str(logdir))).referenced_blobs()
