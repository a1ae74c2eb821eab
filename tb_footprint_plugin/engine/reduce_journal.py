"""The journal of a run's reduce on a disk (``transaction.LocalReduce``): its records written
(``create_journal``, ``append_record``, ``append_rollback``: a full disk said as such, a line it
took only part of cut off again), read back as this operation's (``own_records``), and a journal
lost under way (``journal_gone``): written again from the records this process wrote and settled
(``journal_again``, ``settle_again``), or the outcome that names where the backups are.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import List, Optional

from tb_footprint_plugin.codes import Failure, Finding, Outcome
from tb_footprint_plugin.engine.context import (Context, NoSpace, RunOutcome, TransactionError, no_symlink, reason_of,
                                                writing)
from tb_footprint_plugin.engine.journal import Journal, JournalGone, StateMoved
from tb_footprint_plugin.engine.placement import folder_at
from tb_footprint_plugin.engine.recovery_rules import rollback_incomplete_reason
from tb_footprint_plugin.engine.staged_ident import staged_still, stands_in
from tb_footprint_plugin.engine.swap import rollback
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import forget_staged, fsync_dir
from tb_footprint_plugin.storage.paths import is_within
from tb_footprint_plugin.storage.private import is_ours


def journal_gone(ctx: Context, journal: Journal, gone: JournalGone, reason: str, out: RunOutcome) -> None:
    """``out`` for a run whose journal cannot be read back (``JournalGone``), from what this
    process wrote to it (``Journal.written``). Committed: its manifest was durable before the
    commit record, the reduction stands. Otherwise, when the state folder is still the one the
    journal was made in and nothing stands at the journal's path, the journal is written again
    from those records (``journal_again``) and the run is settled the normal way, rolled back:
    a lost journal must not leave the originals only in the vault, named by no manifest.

    When it cannot be written again (something stands at its path, the state folder moved or is
    not ours): before the swap record no original was touched, so the temp files it staged in
    the run are removed and the run is as it was (its backups, now extra names, stay pinned in
    the vault; ``status`` names the pins: ``Finding.PINS_UNSETTLED``). From the swap record on
    the run is reduced (verified first) or partly swapped: nothing is undone without a journal
    to record it, and the reason names where the backups are."""
    written = journal.written
    code = gone.code
    if any(r.get("type") == "commit" for r in written):
        out.status = Outcome.VERIFIED  # committed: its manifest was durable before the commit record
        with contextlib.suppress(OSError):
            ctx.vault.unpin(journal.op_id)  # the manifest names every backup now
        return
    again = journal_again(ctx, journal, gone)
    if again is not None and settle_again(ctx, again, gone, reason, out):
        return
    if isinstance(gone, StateMoved) and reason != str(gone):
        # what happened leads: a step's own failure since the move is its consequence (it read or
        # wrote through whatever stands at the state folder's name now)
        reason = f"{gone}; the step under way then failed: {reason}"
    moved = getattr(gone, "now_at", None)
    vault = ctx.vault.root
    if moved and is_within(vault, journal.state):  # the vault was in the moved folder: it went along
        vault = os.path.normpath(os.path.join(moved, os.path.relpath(vault, journal.state)))
    where = f"its backups are in {vault} (operation {journal.op_id})"
    if moved:
        where = f"its journal is in {os.path.join(moved, 'journal')}, " + where
    if not any(r.get("type") == "swap" for r in written):
        left = []
        staged = {r["tmp"]: r for r in written if r.get("type") == "staged" and isinstance(r.get("tmp"), str)}
        for r in written:
            if r.get("type") != "stage" or not isinstance(r.get("tmp"), str):
                continue
            try:
                no_symlink(ctx, r["tmp"])
                with folder_at(ctx, r["tmp"]) as at:  # as the walk reaches it: a link since the look refused
                    # only the stage's own file (``staged_ident.staged_still``, the one rule of every
                    # rollback): a name its stage never made may hold the user's own file a teammate
                    # moved there, the names being predictable (review R28 F4)
                    if at is not None and staged_still(ctx, r["tmp"], staged.get(r["tmp"]), at):
                        fsops.unlink(at[1], dir_fd=at[0])
                    elif at is not None and stands_in(at):
                        left.append(r["tmp"])
                forget_staged(ctx.abs(r["tmp"]))
            except FileNotFoundError:
                pass
            except (OSError, TransactionError):
                left.append(r["tmp"])
        out.status, out.code = Outcome.ROLLED_BACK, code
        out.reason = (f"{reason}; the run is as it was (nothing in it was replaced yet)"
                      + (f", temp files left: {', '.join(left)}" if left else "") + f"; {where}")
        if not reason.startswith(str(gone)):
            out.reason += f" ({gone})"
        return
    out.status, out.code = Outcome.FAILED, code
    out.reason = (f"{reason}; the run was swapped after its verification passed, but the operation cannot "
                  f"be committed or rolled back without its journal: {where}"
                  + (f" ({gone})" if not reason.startswith(str(gone)) else ""))


#: a journal written again is first written whole under this name in the journal folder (a
#: dot name: ``journal.pending_journals`` never lists it), then linked to the journal's own name
AGAIN_PREFIX = ".again-"


def journal_again(ctx: Context, journal: Journal, gone: JournalGone) -> Optional[Journal]:
    """The operation's journal written again at its own path from every record this process
    wrote (``journal.written``, in order), or None when it may not be: the state folder moved
    (``StateMoved``, or ``state_moved()`` now), the state or journal folder is not a real folder
    of ours, or anything stands at the journal's path (another file, a link: never ours to
    replace). Made as ``Journal.create`` makes one, but whole: every record is written to a
    temp journal (``Journal.create`` + ``append``, the last one fsynced) and only then linked
    into place (fails if the name is taken), so a kill at any instant leaves either no journal
    or all of it — a prefix without its swap record would be rolled back by recovery as if no
    original had been replaced."""
    written = journal.written
    if isinstance(gone, StateMoved) or gone.code != Failure.JOURNAL_GONE or journal.state_moved():
        return None
    if not written or written[0].get("type") != "begin" or written[0].get("op_id") != journal.op_id:
        return None
    folder = os.path.dirname(journal.path)
    try:
        if not is_ours(os.lstat(journal.state)):
            return None
        try:
            if not is_ours(os.lstat(folder)):
                return None  # a link or a stranger's folder there: not set aside by us now
        except FileNotFoundError:
            pass  # the whole journal folder went: made again, as any journal's is
        if os.path.lexists(journal.path):
            return None
    except OSError:
        return None
    staged: Optional[Journal] = None
    try:
        staged = Journal.create(folder, AGAIN_PREFIX + journal.op_id, written[0])
        if staged.state_identity != journal.state_identity:
            return None  # the state folder changed meanwhile: nothing is linked into it
        rest = written[1:]
        for n, r in enumerate(rest, 1):
            staged.append(r, sync=n == len(rest))  # one fsync: the whole file before its link
        os.link(staged.path, journal.path)  # FileExistsError: something came to stand there
    except OSError:  # NotPrivate is one
        return None
    finally:
        if staged is not None:
            with contextlib.suppress(OSError):
                os.unlink(staged.path)
    again = Journal(journal.path)
    again.identity, again.state_identity, again.version = staged.identity, staged.state_identity, staged.version
    again.written = list(staged.written)
    with contextlib.suppress(OSError):
        # the link's name made durable; lost to a power cut, the run is as this process left it
        # and the rollback's manifest below (durable) says how it ended
        fsync_dir(folder)
    return again


def settle_again(ctx: Context, journal: Journal, gone: JournalGone, reason: str, out: RunOutcome) -> bool:
    """Settle the run through ``journal``, written again after ``gone``: rolled back as any
    failure before the commit is (its manifest says so, its pins go, its journal is closed), a
    recorded folder it leaves without its mode and time a ``folder_not_settled`` finding, as on
    every rollback (issue #26). False when the journal is lost again (the caller says so as
    without it); a rollback that fails otherwise leaves the journal for recovery."""
    reason = (f"{reason}; its journal {journal.path} was gone and was written again from the records this "
              f"process wrote to it")
    unsettled: List[str] = []
    try:
        append_rollback(journal, reason)
        rollback(ctx, own_records(journal), reason, journal, code=gone.code, unsettled=unsettled)
        ctx.vault.unpin(journal.op_id)  # the originals are back
    except JournalGone:
        return False
    except Exception as e2:  # the journal stays: recovery will try again
        out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
        out.reason = rollback_incomplete_reason(reason, reason_of(e2))
        return True
    out.status, out.code, out.reason = Outcome.ROLLED_BACK, gone.code, f"{reason}; the run is as it was"
    out.found(Finding.FOLDER_NOT_SETTLED, unsettled)
    journal.close()
    return True


def own_records(journal: Journal) -> List[dict]:
    """``journal.records()``, but ``JournalGone`` unless they are this operation's: its begin
    record first and at least every record this process wrote. A file written at the journal's
    path after it was removed may get the removed journal's inode number back and pass the
    ``(st_dev, st_ino)`` check; its lines are not this operation's (before: 'list index out of
    range', the rollback left incomplete)."""
    records = journal.records()
    first = records[0] if records else {}
    if first.get("type") != "begin" or first.get("op_id") != journal.op_id or len(records) < len(journal.written):
        raise JournalGone(journal.path, "no longer holds this operation's records (another file, or other content, "
                          "stands at its name)")
    return records


def append_record(journal: Journal, record: dict, sync: bool = True) -> None:
    """Append a journal record; on a full disk ``NoSpace`` names the journal and the line's size
    (a line the disk took only part of is cut off again by the append itself:
    ``StateFolder.append``'s condition). ``sync=False`` for markers no destructive step waits on
    (``Journal.append``)."""
    with writing(journal.path, len(json.dumps(record, sort_keys=True)) + 64):
        journal.append(record, sync=sync)


def stage_record(ctx: Context, op_id: str, i: int, action) -> dict:
    """The ``stage`` record of an operation's ``i``-th staged file (``action``: a compress or
    rewrite): its temp beside the original, under the one name recovery may delete."""
    tmp = os.path.join(os.path.dirname(ctx.abs(action.path)), f".footprint-{op_id}-{i}.tmp")
    return {"type": "stage", "tmp": os.path.relpath(tmp, ctx.logdir), "final": action.new_path or action.path,
            "src": action.path}


def create_journal(ctx: Context, op_id: str, begin: dict) -> Journal:
    """The operation's journal with its begin record; on a full disk none is left behind (an
    empty journal is no operation) and ``NoSpace`` names it."""
    path = os.path.join(ctx.journal_dir, f"{op_id}.jsonl")
    try:
        with writing(path, len(json.dumps(begin, sort_keys=True)) + 64):
            return Journal.create(ctx.journal_dir, op_id, begin)
    except NoSpace:
        with contextlib.suppress(OSError):
            if os.path.getsize(path) == 0:
                os.unlink(path)
        raise


def append_rollback(journal: Journal, reason: str) -> None:
    """Record the rollback (never rolled forward after it). Before the swap record it is not
    needed — recovery rolls such a journal back anyway — so a full disk that refuses it does not
    stop the rollback in process; after the swap record it does (recovery settles the run)."""
    try:
        append_record(journal, {"type": "rollback", "reason": reason})
    except NoSpace:
        if any(r["type"] == "swap" for r in journal.written):
            raise


__all__ = ["AGAIN_PREFIX", "append_record", "append_rollback", "create_journal", "journal_again", "journal_gone",
           "own_records", "settle_again"]
