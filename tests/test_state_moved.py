"""A journal or state folder taken away mid-operation (review R13 F2, task L2).

A group member of a group-writable logdir without the sticky bit can rename the owner's
``.tb-footprint`` (tests/test_trust_users.py's users show the kernel rule); here the same user
does it, or removes the journal, at a failpoint of a reduce. The run's outcome must say so with a
code that names the file or folder, and the run is left as it was (before the swap) or reduced
with the failure naming where its backups are (after it)."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults


def _tree(logdir):
    out = {}
    for dp, ds, fs in os.walk(logdir):
        ds[:] = [d for d in ds if not d.startswith(".tb-footprint") and d != ".hidden"]
        for f in fs:
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, logdir)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def _reduce(logdir):
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    assert len(rep.outcomes) == 1
    return rep.outcomes[0]


def _journals(logdir):
    return os.path.join(logdir, ".tb-footprint", "journal")


@pytest.fixture
def logdir(tmp_path):
    yield aged_small_runs(str(tmp_path / "logs"), 1)
    faults.disarm_all()


def _remove_journal(logdir):
    def act():
        d = _journals(logdir)
        for n in os.listdir(d):
            if n.endswith(".jsonl"):
                os.unlink(os.path.join(d, n))
    return act


def test_journal_gone_after_swap_is_coded_and_names_journal_and_backups(logdir):
    """Before: the outcome's reason was a bare 'list index out of range' (write_manifest on the
    [] records() returned), coded rollback_incomplete."""
    faults.arm("reduce.swap", _remove_journal(logdir))
    out = _reduce(logdir)
    # the journal is written again and the run rolled back (task N3: tests/test_journal_lost_again.py;
    # where it cannot be, the outcome is failed, naming the vault: the same test file)
    assert out.status == Outcome.ROLLED_BACK
    assert out.code == Failure.JOURNAL_GONE
    assert "list index out of range" not in out.reason
    assert os.path.join(_journals(logdir), f"{out.op_id}.jsonl") in out.reason
    assert os.path.join(logdir, ".tb-footprint") in out.reason and out.op_id in out.reason


def test_journal_gone_before_swap_leaves_the_run_as_it_was(logdir):
    """Before: rollback_incomplete (the rollback record could not be appended) and the staged
    temp files of the run were left in it."""
    before = _tree(logdir)
    faults.arm("reduce.stage", _remove_journal(logdir))
    out = _reduce(logdir)
    assert out.status == Outcome.ROLLED_BACK, out.reason
    assert out.code == Failure.JOURNAL_GONE
    assert os.path.join(_journals(logdir), f"{out.op_id}.jsonl") in out.reason
    assert _tree(logdir) == before  # no staged temp file left, every original as it was


def test_records_of_a_vanished_own_journal_raise_coded(tmp_path):
    from tb_footprint_plugin.engine.journal import Journal, JournalGone

    j = Journal.create(str(tmp_path / "journal"), "op1", {"type": "begin", "op_id": "op1"})
    j.append({"type": "backup"})
    assert [r["type"] for r in j.records()] == ["begin", "backup"]
    os.unlink(j.path)
    with pytest.raises(JournalGone) as e:
        j.records()
    assert e.value.code == Failure.JOURNAL_GONE and j.path in str(e.value)
    assert [r["type"] for r in j.written] == ["begin", "backup"]
    # a journal read back by recovery (identity unknown) that is gone holds nothing
    assert Journal(j.path, may_create=False).records() == []


# ---------------------------------------------------------------------------------------
# item 2: the state folder's identity, held from the journal's creation
# ---------------------------------------------------------------------------------------
def _move_state(logdir, link=False):
    """What a group member can do without the sticky bit (tests/test_trust_users.py's users): the
    state folder renamed away, and a folder (or a link to the moved one) put at its name."""
    def act():
        state = os.path.join(logdir, ".tb-footprint")
        os.rename(state, os.path.join(logdir, ".hidden"))
        if link:
            os.symlink(".hidden", state)
        else:
            os.mkdir(state)
            if os.geteuid() == 0:
                os.chown(state, 65534, 65534)
    return act


def _move_back(logdir):
    state = os.path.join(logdir, ".tb-footprint")
    if os.path.islink(state):
        os.unlink(state)
    else:
        shutil.rmtree(state)  # the stand-in (as root, the reduce's scratch made tmp/ in it: not ours to judge here)
    os.rename(os.path.join(logdir, ".hidden"), state)


@pytest.mark.parametrize("link", [False, True], ids=["folder", "link"])
def test_state_moved_before_swap_is_coded_and_leaves_the_run(logdir, link):
    """Before: journal_gone naming the stand-in's journal folder (folder), rollback_incomplete
    (link: refused, never followed), neither naming where the moved folder is."""
    before = _tree(logdir)
    faults.arm("reduce.backup", _move_state(logdir, link))
    out = _reduce(logdir)
    state = os.path.join(logdir, ".tb-footprint")
    assert out.code == Failure.STATE_MOVED, out.reason
    assert out.status == Outcome.ROLLED_BACK
    assert f"{state}: the state folder is no longer" in out.reason
    assert os.path.join(logdir, ".hidden", "journal") in out.reason
    assert _tree(logdir) == before
    # the folder moved back, recovery settles the journal left in it: nothing to restore, all there
    _move_back(logdir)
    api.recover_logdir(logdir)
    assert _tree(logdir) == before
    assert not [n for n in os.listdir(_journals(logdir)) if n.endswith(".jsonl")]


def test_state_moved_after_swap_record_names_backups_and_recovers(logdir):
    """Before (review R13 E6b): rollback_incomplete naming only the stand-in; the run reduced,
    its journal and backups in .hidden, named nowhere."""
    before = _tree(logdir)
    faults.arm("reduce.swap_record", _move_state(logdir))
    out = _reduce(logdir)
    assert out.code == Failure.STATE_MOVED, out.reason
    assert out.status == Outcome.FAILED
    hidden = os.path.join(logdir, ".hidden")
    assert f"its journal is in {os.path.join(hidden, 'journal')}, its backups are in {hidden} " \
           f"(operation {out.op_id})" in out.reason
    assert os.path.exists(os.path.join(hidden, "journal", f"{out.op_id}.jsonl"))
    # moved back: recovery settles the run, and a restore gives back every original byte for byte
    _move_back(logdir)
    api.recover_logdir(logdir)
    assert not [n for n in os.listdir(_journals(logdir)) if n.endswith(".jsonl")]
    assert all(o.verified for o in api.restore(logdir))
    assert _tree(logdir) == before


def test_append_checks_the_state_folder_once(tmp_path, monkeypatch):
    """One lstat a record, of the state folder: a journal append through a moved folder's name
    raises StateMoved naming the folder and where it went (before: no check at all)."""
    from tb_footprint_plugin.engine.journal import Journal, StateMoved

    state = tmp_path / ".tb-footprint"
    j = Journal.create(str(state / "journal"), "op1", {"type": "begin", "op_id": "op1"})
    j.append({"type": "backup"})
    os.rename(state, tmp_path / ".hidden")
    os.symlink(".hidden", state)
    with pytest.raises(StateMoved) as e:
        j.append({"type": "swap"})
    assert e.value.code == Failure.STATE_MOVED and e.value.now_at == str(tmp_path / ".hidden")
    assert str(state) in str(e.value)
    j.close()  # nothing removed through the moved folder's name
    assert os.path.exists(tmp_path / ".hidden" / "journal" / "op1.jsonl")
