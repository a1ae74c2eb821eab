"""Crash recovery: settle every operation whose journal outlived its process.

A restore is finished (it only adds originals back); a reduction that committed gets its
manifest; one whose own verified manifest is there committed too, whatever its journal lost
(the commit marker is not fsynced; the manifest, written first, is), and neither the run nor
the manifest is touched (its change-log line, written between the two, is written now when a
kill took it: once per operation); one whose swap was recorded after a passed verification is rolled
forward; anything else is rolled back to its exact original bytes. A manifest of the
operation that is not ours or unreadable is never replayed over. A run whose lock is held by a
live process is left for that process; what is settled is the journal as read once the run's lock
is held (its holder may have gone on, or settled it, since it was listed).

This is the disk's layout of recovery; what a recovery answers (``RecoveryOutcome`` and its codes,
the settled runs, the reason of a rollback) is ``engine.recovery_rules``', shared with a bucket's
(``engine.bucket_recover``). ``RecoveryOutcome`` is re-exported here.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery
from tb_footprint_plugin.engine import health, trust
from tb_footprint_plugin.engine.catalogue import (
    bytes_after_of,
    is_own,
    known_vaults,
    manifest_exists,
    vault_of,
    write_committed_line,
    write_manifest,
)
from tb_footprint_plugin.engine.context import Context, reason_of
from tb_footprint_plugin.engine.recovery_rules import (
    INTERRUPTED_REASON,
    REDUCE,
    RecoveryOutcome,
    damaged_line,
    failed,
    no_begin_record,
    not_in_place_words,
    refused,
    settled,
    settled_run,
    skipped_live,
)
from tb_footprint_plugin.engine.journal import Rec, pending_journals
from tb_footprint_plugin.engine.lease import LockRefused
from tb_footprint_plugin.engine.run_lock import run_lock
from tb_footprint_plugin.engine.restore import finish_restore, restore_abandoned
from tb_footprint_plugin.engine.retire import recover_retire
from tb_footprint_plugin.engine.swap import roll_forward, rollback
from tb_footprint_plugin.storage.access import is_permission_error


def recover(ctx: Context) -> List[RecoveryOutcome]:
    """Settle every unfinished operation of this logdir (call at every start).

    A journal is replayed only when ``trust.check_journal`` accepts it: well formed, bound to
    this logdir, every path inside its run, its vault one this logdir uses. Any other one is
    reported (``refused``, with a code) and left exactly as it is.
    """
    outcomes = []
    journals = list(pending_journals(ctx.journal_dir))
    if not journals:
        return outcomes
    try:
        identity = trust.bind(ctx.logdir, ctx.state)
    except trust.Untrusted as e:
        return [refused(j.op_id, None, str(e), e.code) for j in journals]
    vaults = [ctx.state, ctx.vault.root] + known_vaults(ctx)
    for j in journals:
        records, said = _checked(ctx, j, vaults, identity)
        if records is None:
            if said is not None:
                outcomes.append(said)
            continue
        begin = records[0]
        run = begin["run"]
        try:
            lock = run_lock(ctx, run).acquire()
        except LockRefused:
            outcomes.append(skipped_live(begin["op_id"], run, "held by a running process"))
            continue
        try:
            # what is acted on is the journal as it stands now that the run is held, never what was
            # read before: its holder (a shard worker beside this start) held the run until its
            # operation ended and may have gone on meanwhile, past its swap, and been killed; or it
            # settled the operation and removed the journal (nothing is left to do)
            fresh, said = _checked(ctx, j, vaults, identity, read_before=begin)
            if fresh is None:  # gone (its holder settled it), or not replayed now: named
                if said is not None:
                    outcomes.append(said)
                continue
            if fresh[0] != begin:
                outcomes.append(refused(begin["op_id"], run, f"{j.path}: not the journal read a moment before (its "
                                        "begin record differs); not replayed", Finding.DAMAGED_FILE))
                continue
            records = fresh
            unsettled: List[str] = []  # recorded folders a restore or rollback left without mode and time
            if begin["kind"] in ("retire", "unretire"):  # whole runs moved out of the logdir, or back
                found: List[dict] = []
                action, detail = recover_retire(ctx, records, found)
                outcome = settled(begin["op_id"], run, action, detail)
                for f in found:
                    outcome.found(f["code"], [f["path"]])
                outcomes.append(outcome)
                j.close()
                continue
            if begin["kind"] in ("restore", "salvage"):
                # a restore only adds originals back: finished; a salvage not yet recorded: undone
                # (the next step of this start salvages again)
                from tb_footprint_plugin.engine.salvage import finish_salvage

                # a restore stopped while still checking its backups put nothing back: it is
                # undone (its temporaries removed), not finished, and said so
                undone = begin["kind"] == "restore" and restore_abandoned(records)
                # a restore's put-backs that copy record each copy in its journal (``placement.put_in_place``)
                detail = finish_restore(ctx, records, journal=j, unsettled=unsettled) if begin["kind"] == "restore" \
                    else finish_salvage(ctx, records)
                outcome = settled(begin["op_id"], run, Recovery.ROLLED_BACK if undone else Recovery.COMPLETED, detail)
                outcome.found(Finding.FOLDER_NOT_SETTLED, unsettled)  # the detail says them; a code too (#26)
                outcomes.append(outcome)
                j.close()
                continue
            types = {r["type"] for r in records}
            verified_ok = any(r["type"] == Rec.VERIFIED and r.get("ok") for r in records)
            committed, doubt = (None, None) if Rec.COMMIT in types or Rec.ROLLBACK in types else \
                committed_manifest(ctx, records, identity)
            if doubt is not None:
                # a manifest of this very operation is there but cannot be taken at its word:
                # replaying the journal would overwrite it (and perhaps the run); nothing is
                # touched, the journal stays for the next start (after the manifest's rebuild)
                outcomes.append(refused(begin["op_id"], run, doubt.detail, doubt.code))
                continue
            if committed is not None:
                # the manifest is made durable before the commit marker, which is not fsynced:
                # a power cut can take the marker (or bring the removed journal back without
                # it) after the run was swapped, verified and perhaps restored or salvaged
                # since; the manifest is the truth, so neither the run nor it is touched
                action, detail = Recovery.COMPLETED, "was committed (its manifest says so; the journal had lost " \
                                                     "its commit record)"
                # a kill between the manifest and its change-log line (the commit record comes
                # after both) left the line unwritten: written now, once, before the journal goes
                if write_committed_line(ctx, records, committed):
                    detail += "; its change-log line written"
            elif Rec.COMMIT in types:
                action, detail = Recovery.COMPLETED, "was committed"
                if not manifest_exists(ctx, records):
                    write_manifest(ctx, records, "verified", None, recovered=True)
            elif Rec.SWAP in types and verified_ok and Rec.ROLLBACK not in types and Rec.DISPLACED not in types \
                    and roll_forward(ctx, records):
                # (``displaced`` records come only from a rollback that began: never rolled forward)
                # read again: the roll-forward journaled the folders it removed (``rmdir``, with
                # their mode and mtime), which the manifest must name for a restore to remake them
                records = _vault_now(j.path, j.records()) or records
                write_manifest(ctx, records, "verified", None, recovered=True)
                action, detail = Recovery.COMPLETED, "swap finished after a crash (verification had passed)"
            elif Rec.SWAP not in types and (astray := health.not_in_place(ctx.store, ctx.key, records)):
                # no swap recorded, yet an original is not as its backup record says: the journal is
                # older than the run (a copy put back) and the blobs may be the originals' only copies.
                # The rollback would take the files in place for the truth and drop those blobs: the
                # journal is left (it keeps them claimed) and named, in the words status forecast
                outcomes.append(refused(begin["op_id"], run, not_in_place_words(ctx.abs(astray[0]), j.path),
                                        Finding.ORIGINAL_NOT_IN_PLACE))
                continue
            else:
                reason = INTERRUPTED_REASON
                # recorded first, as a rollback in process is: a start after a kill in this one
                # rolls back again, never forward over what this one put back (review R5 F2).
                # Before a swap record nothing could roll forward: the journal is left as it is
                if Rec.SWAP in types:
                    with contextlib.suppress(OSError):
                        j.append({"type": Rec.ROLLBACK, "reason": reason})
                # the code its reason says; a recorded folder left without its mode and time a finding
                rollback(ctx, records, reason, j, code=Failure.INTERRUPTED, unsettled=unsettled)
                # the words status promised (health.recover_will): nothing is "put back" before a swap
                action, detail = Recovery.ROLLED_BACK, health.AFTER_SWAP if Rec.SWAP in types else health.BEFORE_SWAP
            j.close()
            completed = action == Recovery.COMPLETED
            before = begin["plan"]["bytes_before"]
            outcome = settled(begin["op_id"], run, action, detail, kind=REDUCE, runs=[settled_run(
                run, begin["op_id"], before, bytes_after_of(records) if completed else before, completed)])
            outcome.found(Finding.FOLDER_NOT_SETTLED, unsettled)
            outcomes.append(outcome)
        except Exception as e:  # leave the journal for the next start, say why
            why = reason_of(e)
            if is_permission_error(e):  # every start fails so until a mode changes: say what to do
                why += ("; this user may not change it: nothing is lost, and once it may (the mode or owner fixed) "
                        "the next start finishes it")
            outcomes.append(failed(begin["op_id"], run, why))
        finally:
            lock.release()
    return outcomes


def _checked(ctx: Context, j, vaults: List[str], identity: dict, read_before: Optional[dict] = None
             ) -> Tuple[Optional[List[dict]], Optional[RecoveryOutcome]]:
    """A journal's records as recovery may act on them, read now: ``(records, None)``; else
    ``(None, outcome)`` naming why it is not replayed (unreadable, damaged, without its begin
    record, refused by ``trust.check_journal``: left as it is), or ``(None, None)`` when there is
    nothing to settle (gone: settled by its holder since it was listed; empty: an older version's,
    closed here). ``read_before``: the begin record a first read found (the read again under the
    run's lock): the journal then read empty but there was emptied, not left by an older version,
    and is refused and left in place (review R7 F4)."""
    try:
        log = trust.read_json_lines(j.path)  # gone (its holder settled it since the listing): empty
    except OSError as e:  # left for the next start, named
        return None, failed(j.op_id, None, f"{j.path}: unreadable journal ({reason_of(e)})")
    if log.damaged:
        # every record of a journal counts (a lost backup record would leave its original out
        # of a rollback): one damaged line and the operation is not replayed at all
        d = log.damaged[0]
        return None, refused(j.op_id, None, damaged_line(j.path, d.line, d.detail), Finding.DAMAGED_FILE)
    records = log.records
    if not records and read_before is not None and os.path.lexists(j.path):
        # it held this begin record a moment ago, and a journal only grows (it is created holding
        # it): something emptied or replaced it. Its records are lost to this start either way;
        # nothing is replayed from the first read (its holder may have gone on since), and the
        # file, the only sign of what happened, is left and named rather than removed
        return None, refused(j.op_id, read_before.get("run"), f"{j.path}: empty now, though it held the begin "
                             "record of this operation a moment before; not replayed, left in place",
                             Finding.DAMAGED_FILE)
    if not records:
        # gone (its holder settled it: nothing to remove), or an older version's journal, created
        # but crashed before its first record was durable: nothing happened, closed here. Journals
        # are now created holding their begin record, so a live operation's is never empty and
        # this cannot race one; one emptied after its begin record was read is refused above
        j.close()
        return None, None
    if records[0].get("type") != Rec.BEGIN:
        # records without their begin (an older version split a hard-linked journal in two):
        # something happened and nothing says which run; never deleted, never replayed
        return None, refused(j.op_id, None, no_begin_record(j.path), Finding.DAMAGED_FILE)
    try:
        trust.check_journal(j.path, j.op_id, records, logdir=ctx.logdir, vaults=vaults, identity=identity)
    except trust.Untrusted as e:
        return None, refused(j.op_id, None, str(e), e.code)
    return _vault_now(j.path, records), None


def _vault_now(path: str, records: List[dict]) -> List[dict]:
    """The records of the journal at ``path`` (checked) with its begin record naming its vault
    where it is now (``trust.journal_vault``): its logdir's state folder named at the path the
    logdir had then (renamed since, review R10 F1) is acted on where it stands now, never at
    the old path, where another logdir may stand. Every read recovery acts on passes here."""
    if not records:
        return records
    vault = trust.journal_vault(path, records[0])
    if vault == records[0].get("vault"):
        return records
    return [dict(records[0], vault=vault), *records[1:]]


@dataclass
class ManifestDoubt:
    """Why a manifest of the operation being settled cannot be trusted: ``code`` is an
    ``engine.trust`` or ``codes`` code, ``detail`` the words."""

    code: str
    detail: str


def committed_manifest(ctx: Context, records: List[dict],
                       identity: dict) -> Tuple[Optional[dict], Optional["ManifestDoubt"]]:
    """``(manifest, None)`` when this reduction's own manifest says its run was verified (the
    reduction is committed whatever its journal lost), ``(None, None)`` when there is no
    manifest or it says something else (the journal decides), ``(None, ManifestDoubt)`` when a
    manifest file of this operation is there but is not ours, unreadable or about another run
    or logdir (nothing may be replayed over it)."""
    begin = records[0]
    vault = vault_of(records, ctx)
    if not vault.has_manifest(begin["op_id"]):
        return None, None
    path = vault.manifest_where(begin["op_id"])
    damage = vault.manifest_damage(begin["op_id"])
    if damage is not None:
        # its newest state may be on that line (restored since, say): nothing is replayed over it
        return None, ManifestDoubt(trust.DAMAGED_LINE, f"{damage}: may have been a state of this operation; the "
                                   "operation is not replayed over it (left for the next start)")
    if not vault.is_private():
        return None, ManifestDoubt(Failure.STATE_NOT_OURS, f"{path}: its vault is not a folder of ours; the "
                                   "operation is not replayed over it")
    try:
        m = vault.read_manifest(begin["op_id"])
    except trust.Untrusted as e:
        return None, ManifestDoubt(e.code, f"{e}; the operation is not replayed over it (left for the next start)")
    except (OSError, ValueError, RecursionError) as e:
        return None, ManifestDoubt(trust.BAD_MANIFEST, f"{path}: unreadable ({reason_of(e)}); the operation is not "
                                   "replayed over it (left for the next start)")
    if (m.get("kind") != "reduce" or m.get("run") != begin["run"]
            or not is_own(m, os.path.realpath(ctx.logdir), identity)):
        return None, ManifestDoubt(trust.BAD_MANIFEST, f"{path}: names another operation than its journal "
                                   f"({str(m.get('kind'))[:20]} of {str(m.get('run'))[:120]!r}); not replayed over it")
    if m.get("outcome") != Outcome.VERIFIED:
        return None, None  # a rollback's record, say: the journal says how to finish it
    return m, None


__all__ = ["ManifestDoubt", "RecoveryOutcome", "committed_manifest", "recover"]
