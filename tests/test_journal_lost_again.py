"""A reduce whose journal is deleted mid-run (task N3 item 1).

Before: a journal lost after the swap record left the run reduced and failed, no manifest, the
pins staying: ``restore`` could not find the operation and ``status`` named nothing, so the
originals were in the vault named only by a line of output. Now, while the state folder is the
one the journal was made in and nothing stands at the journal's path, the journal is written
again (whole, then linked into place) from every record the process wrote, and the run is
rolled back the normal way: its manifest says so, its pins go, its journal is closed. A kill
right after the journal is written again is settled by recovery. Where it may not be written
again (something stands at its path), the old outcome stays and ``status`` names the pins."""
from __future__ import annotations

import hashlib
import os

import pytest

from helpers_crash import Killed
from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Outcome
from tb_footprint_plugin.engine import faults, reduce_journal
from tb_footprint_plugin.engine.context import Context

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _tree(logdir):
    out = {}
    for dp, ds, fs in os.walk(logdir):
        ds[:] = [d for d in ds if not d.startswith(".tb-footprint")]
        for f in fs:
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                st = os.lstat(p)
                out[os.path.relpath(p, logdir)] = (hashlib.sha256(fh.read()).hexdigest(), st.st_mtime_ns,
                                                   st.st_mode)
    return out


def _reduce(logdir):
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    assert len(rep.outcomes) == 1
    return rep.outcomes[0]


def _journal_dir(logdir):
    return os.path.join(logdir, ".tb-footprint", "journal")


def _journal_files(logdir):
    d = _journal_dir(logdir)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def _remove_journal(logdir, whole_folder=False, plant=False):
    def act():
        d = _journal_dir(logdir)
        for n in os.listdir(d):
            if n.endswith(".jsonl"):
                if plant:  # something else comes to stand at the journal's name: made first, so
                    # it cannot reuse the journal's inode number (it would then pass for it)
                    with open(os.path.join(d, "planted"), "w") as f:
                        f.write("not a journal of this operation\n")
                    os.replace(os.path.join(d, "planted"), os.path.join(d, n))
                else:
                    os.unlink(os.path.join(d, n))
        if whole_folder:
            os.rmdir(d)
    return act


def _pins(logdir):
    tmp = os.path.join(logdir, ".tb-footprint", "tmp")
    return [op for op in (os.listdir(tmp) if os.path.isdir(tmp) else ())
            if os.path.isdir(os.path.join(tmp, op, "pins"))]


@pytest.fixture
def logdir(tmp_path):
    return aged_small_runs(str(tmp_path / "logs"), 1)


@pytest.mark.parametrize("step,whole_folder", [("reduce.swap", False), ("reduce.swap", True),
                                              ("reduce.swap_record", False), ("reduce.stage", False)],
                         ids=["after-swap", "after-swap-folder-gone", "at-swap-record", "before-swap"])
def test_a_lost_journal_is_written_again_and_the_run_rolled_back(logdir, step, whole_folder):
    """Before (after the swap): failed, the run reduced, no manifest, pins left; restore found
    nothing. Before (before the swap): rolled back, but the pins stayed and no manifest."""
    before = _tree(logdir)
    faults.arm(step, _remove_journal(logdir, whole_folder))
    out = _reduce(logdir)
    assert out.status == Outcome.ROLLED_BACK, out.reason
    assert out.code == Failure.JOURNAL_GONE
    journal = os.path.join(_journal_dir(logdir), f"{out.op_id}.jsonl")
    assert f"its journal {journal} was gone and was written again" in out.reason
    assert _tree(logdir) == before  # every original back: bytes, mtime, mode
    assert _journal_files(logdir) == []  # closed, and no temp journal left beside it
    assert _pins(logdir) == []
    ops = {m["op_id"]: m for m in api.operations(logdir)}
    assert ops[out.op_id]["outcome"] == Outcome.ROLLED_BACK
    assert "was written again" in (ops[out.op_id].get("reason") or "")
    st = api.status(logdir)
    assert not st["unfinished_operations"]
    assert not [p for p in st["problems"] if p["code"] in (Finding.PINS_UNSETTLED, Finding.ORPHAN_BLOBS)], \
        st["problems"]


def test_the_journal_written_again_carries_every_record(logdir, monkeypatch):
    """The journal is linked into place whole: at the instant it appears, it holds the swap
    record and every record before it, in the order they were written."""
    seen = {}
    real = reduce_journal.settle_again

    def look(ctx, journal, gone, reason, out):
        seen["types"] = [r["type"] for r in journal.records()]
        seen["written"] = [r["type"] for r in journal.written]
        return real(ctx, journal, gone, reason, out)

    monkeypatch.setattr(reduce_journal, "settle_again", look)
    faults.arm("reduce.swap", _remove_journal(logdir))
    _reduce(logdir)
    assert seen["types"] == seen["written"]
    assert seen["types"][0] == "begin" and seen["types"][-1] == "swapped"
    assert {"backup", "verified", "swap"} <= set(seen["types"])


@pytest.mark.parametrize("killed_at", ["append_rollback", "rollback"],
                         ids=["before-rollback-record", "in-rollback"])
def test_a_kill_after_the_journal_is_written_again_is_settled_by_recovery(logdir, monkeypatch, killed_at):
    """A SIGKILL right after the journal is back (before its rollback record: recovery finishes
    the swap, verification had passed; after it: recovery rolls back). Either way the run is
    settled with a manifest and a restore gives every original back."""
    before = _tree(logdir)

    def killed(*a, **kw):
        raise Killed()

    monkeypatch.setattr(reduce_journal, killed_at, killed)
    faults.arm("reduce.swap", _remove_journal(logdir))
    with pytest.raises(Killed):
        _reduce(logdir)
    faults.disarm_all()
    monkeypatch.undo()
    (name,) = [n for n in _journal_files(logdir) if n.endswith(".jsonl")]
    assert not name.startswith(".")  # the journal at its own name, no temp left
    op_id = name[:-len(".jsonl")]
    rec = api.recover_logdir(logdir)
    assert _journal_files(logdir) == []
    ops = {m["op_id"]: m for m in api.operations(logdir)}
    if killed_at == "append_rollback":
        assert ops[op_id]["outcome"] == Outcome.VERIFIED, rec
        assert _tree(logdir) != before
        assert all(o.verified for o in api.restore(logdir))
    else:
        assert ops[op_id]["outcome"] == Outcome.ROLLED_BACK, rec
    assert _tree(logdir) == before
    assert _pins(logdir) == []


def test_something_at_the_journal_path_is_left_and_the_pins_are_named(logdir):
    """A file standing at the journal's name is not ours to replace: the old outcome (failed,
    naming the vault and operation) stays, the file is untouched, and the pins that hold the
    originals are named by status. Before: nothing named them."""
    faults.arm("reduce.swap", _remove_journal(logdir, plant=True))
    out = _reduce(logdir)
    assert out.status == Outcome.FAILED and out.code == Failure.JOURNAL_GONE, out.reason
    path = os.path.join(_journal_dir(logdir), f"{out.op_id}.jsonl")
    with open(path) as f:
        assert f.read() == "not a journal of this operation\n"
    assert out.op_id in out.reason
    # the stand-in is gone now: neither a journal nor a manifest names the operation
    os.unlink(path)
    st = api.status(logdir)
    found = [p for p in st["problems"] if p["code"] == Finding.PINS_UNSETTLED]
    assert [p["op_id"] for p in found] == [out.op_id], st["problems"]
    vault = Context(logdir).vault
    assert vault.tmp in found[0]["detail"] and found[0]["bytes"] > 0


CHILD = r"""
import os, signal, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults, reduce_journal
logdir = sys.argv[1]
journals = os.path.join(logdir, ".tb-footprint", "journal")

def remove():
    for n in os.listdir(journals):
        if n.endswith(".jsonl"):
            os.unlink(os.path.join(journals, n))

def sigkill(*a, **kw):  # the instant after the journal is back at its name
    os.kill(os.getpid(), signal.SIGKILL)

reduce_journal.append_rollback = sigkill
faults.arm("reduce.swap", remove)
api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
"""


def test_a_real_sigkill_after_the_journal_is_written_again(logdir):
    """The same in a process of its own killed by SIGKILL (its locks let go by the kernel): the
    next start finds the journal whole and settles the run; restore gives every original back."""
    import subprocess
    import sys

    before = _tree(logdir)
    proc = subprocess.run([sys.executable, "-c", CHILD, logdir], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    (name,) = _journal_files(logdir)
    rec = api.recover_logdir(logdir)
    assert _journal_files(logdir) == []
    assert {m["op_id"]: m["outcome"] for m in api.operations(logdir)} == {name[:-len(".jsonl")]: Outcome.VERIFIED}, rec
    assert all(o.verified for o in api.restore(logdir))
    assert _tree(logdir) == before
    assert _pins(logdir) == []


def _overwrite_journal(logdir):
    """The journal's own inode given other content (what a file planted after its removal is
    when it gets the removed journal's inode number back)."""
    def act():
        d = _journal_dir(logdir)
        for n in os.listdir(d):
            if n.endswith(".jsonl"):
                with open(os.path.join(d, n), "r+") as f:
                    f.truncate(0)
                    f.write("not a journal of this operation\n")
    return act


@pytest.mark.parametrize("step", ["reduce.swap", "reduce.stage"])
def test_a_journal_holding_other_lines_is_said_so_not_read_as_the_operation(logdir, step):
    """Before: 'list index out of range; rollback incomplete' (after the swap: the manifest was
    written from no records; before it: the rollback read no begin record)."""
    before = _tree(logdir)
    faults.arm(step, _overwrite_journal(logdir))
    out = _reduce(logdir)
    assert out.code == Failure.JOURNAL_GONE, out.reason
    assert "list index out of range" not in out.reason
    assert "no longer holds this operation's records" in out.reason
    path = os.path.join(_journal_dir(logdir), f"{out.op_id}.jsonl")
    with open(path) as f:  # never removed or rewritten (records appended until the check are)
        assert f.read().startswith("not a journal of this operation\n")
    if step == "reduce.stage":  # found before the swap: nothing replaced
        assert out.status == Outcome.ROLLED_BACK and _tree(logdir) == before
    else:
        assert out.status == Outcome.FAILED and out.op_id in out.reason
