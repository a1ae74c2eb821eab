"""What a recovery is, written once for every store (issue #26 item 2): the outcome it answers
(``RecoveryOutcome``) and its codes, the reason a reduction rolled back on recovery gives (and the
one a reduction its cancelled batch rolled back gives, ``CANCELLED_REASON``), and the
run a settled reduction reports (what a batch ledger records, ``ledger.mark_recovered``).

The disk's recovery (``engine.recovery``, over a journal file and a ``Context``) and the bucket's
(``engine.bucket_recover``, over journal objects) are the two layouts: each reads its own journals
and decides by its own commit point (a disk's commit or verified swap record, a bucket's commit
step with every backup verified); what each answers and says is made here, so both say the same.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine.context import Finds

#: the reason (and, with ``Failure.INTERRUPTED``, the code) of a reduction recovery rolled back:
#: its manifest's and its change-log line's on every store
INTERRUPTED_REASON = "interrupted (crash or kill); rolled back on recovery"
#: the reason (with ``Failure.INTERRUPTED``) of a reduction its own process rolled back because its
#: batch was cancelled before the commit point (Ctrl-C, SIGTERM, the tab's Cancel): the other way a
#: reduction is interrupted, said apart from a crash because nothing waited for a recovery
CANCELLED_REASON = "interrupted before the commit point (the batch was cancelled)"
#: the longest reason a batch's taken-out run keeps in its journal entry, for the change-log line
#: its own process or a recovery writes of it
MAX_REASON = 1000
#: what recovery leaves of an operation whose journal it will not replay (damaged, or not a journal)
NOT_REPLAYED = "not replayed: its run and backups are left exactly as they are"
#: what a run whose rollback did not finish (``Failure.ROLLBACK_INCOMPLETE``) says after why it
#: stopped, on every store and verb: the journal stays, and the next start settles it
ROLLBACK_LEFT_TO_RECOVERY = "the journal is kept and the next start settles it"


def rollback_incomplete_reason(reason: str, error: str) -> str:
    """The reason of a run whose rollback did not finish, on every store and verb: ``reason``
    (why it was rolled back), ``error`` (what stopped the rollback), and what happens next."""
    return f"{reason}; rollback incomplete ({error}); {ROLLBACK_LEFT_TO_RECOVERY}"


def damaged_journal(file: str, what: str) -> str:
    """The words of a journal recovery will not replay because it is damaged, on every store:
    the file (a disk's path, a bucket's URL), ``what`` is damaged (a disk's line, a bucket's
    object, which is read whole) and what is left as it is (``NOT_REPLAYED``)."""
    return f"{file}: {what}; {NOT_REPLAYED}"


def damaged_line(file: str, line: int, detail: str) -> str:
    """``damaged_journal`` of a disk's journal with a line that does not parse (``detail``: the
    parser's, its leading ``where: `` dropped); what ``recover`` refuses it with and ``status`` says."""
    return damaged_journal(file, f"line {line} is damaged ({detail.split(': ', 1)[-1]})")


def no_begin_record(file: str) -> str:
    """``damaged_journal`` of a disk's journal whose records lack their begin record (an older
    version split a hard-linked journal in two); what ``recover`` and ``status`` say of it."""
    base = file.rsplit("/", 1)[-1]
    return damaged_journal(file, f"has no begin record (its first records may be in a '{base}.refused-…' "
                                 "file beside it)")


#: the kind of a settled reduction's outcome (the others, restore, salvage, retire, purge and
#: vault upkeep, carry none)
REDUCE = "reduce"


@dataclass
class RecoveryOutcome(Finds):
    op_id: str
    run: Optional[str]
    action: str  # a codes.Recovery: 'rolled_back' | 'completed' | 'skipped_live' | 'failed' | 'refused' | ...
    detail: str = ""
    code: Optional[str] = None  # a codes.Finding, or why a journal was refused (``engine.trust`` codes)
    #: the reductions this outcome settled, one per run (``run``, ``op_id``, ``bytes_before``,
    #: ``bytes_after``): what a batch ledger records for runs a dead worker left (``ledger.mark_recovered``)
    runs: Optional[List[dict]] = None
    #: ``"reduce"`` when the operation settled was a reduction (its outcome says the run is now
    #: reduced and verified, or as it was); None for the others (restore, salvage, retire, purge,
    #: vault upkeep), whose ``detail`` says what was finished
    kind: Optional[str] = None
    #: ``backups_kept`` alone: each original left in the vault, ``{op_id, run, path}`` (the
    #: reduction's own op id, whose manifest names the copy): what says how it comes back
    kept: Optional[List[dict]] = None
    #: what the settling found besides its ``code`` (``found``; issue #26), ``[{code, path}]`` as a
    #: per-run outcome's: a recorded folder a finished restore or a rollback left without its mode
    #: and time (``folder_not_settled``), an original a finished restore left in the vault
    #: (``not_restored``); ``detail`` says them in words
    findings: List[dict] = field(default_factory=list)


def refused(op_id: str, run: Optional[str], detail: str, code: str) -> RecoveryOutcome:
    """A journal (or lock) never acted on: foreign, damaged or naming what is not ours; left in
    place, named with ``code`` (an ``engine.trust`` or ``codes`` code)."""
    return RecoveryOutcome(op_id, run, Recovery.REFUSED, detail, code)


def skipped_live(op_id: str, run: Optional[str], detail: str) -> RecoveryOutcome:
    """An operation whose owner still holds its run: left for that owner."""
    return RecoveryOutcome(op_id, run, Recovery.SKIPPED_LIVE, detail, Finding.RUN_LOCKED)


def failed(op_id: str, run: Optional[str], detail: str) -> RecoveryOutcome:
    """A settling that could not be done: its journal stays for the next start, ``detail`` says why."""
    return RecoveryOutcome(op_id, run, Recovery.FAILED, detail, Finding.RECOVERY_FAILED)


def settled(op_id: str, run: Optional[str], action: str, detail: str, *, runs: Optional[List[dict]] = None,
            kind: Optional[str] = None) -> RecoveryOutcome:
    """An operation recovery settled (``action`` a ``codes.Recovery``: completed or rolled back)."""
    return RecoveryOutcome(op_id, run, action, detail, Finding.RECOVERED, runs=runs, kind=kind)


def backups_kept(op_id: str, run: Optional[str], kept: List[str], where: Optional[List[dict]] = None
                 ) -> RecoveryOutcome:
    """A reduction recovery would have rolled back, of which a key does not hold the original its
    journal recorded (the reduced bytes, or anything else: the journal was older than the run, or
    a writer came): nothing of the operation's copies deleted, its manifest kept, so a restore
    gives back the originals wherever the run still holds what the operation left. Not "as it
    was": the run is as it stands. ``where``: each kept original's ``{op_id, run, path}``
    (``RecoveryOutcome.kept``; by default of ``op_id`` and ``run``)."""
    return RecoveryOutcome(op_id, run, Recovery.BACKUPS_KEPT, kept_words(kept), Finding.ORIGINAL_NOT_IN_PLACE,
                           kind=REDUCE, kept=where if where is not None else
                           [{"op_id": op_id, "run": run, "path": p} for p in kept])


def kept_words(kept: List[str]) -> str:
    """What a rollback that kept the backups of ``kept`` (keys not holding the original its journal
    recorded) says, a recovery's (``backups_kept``) and a reduction's own (its outcome's reason) alike."""
    more = f" and {len(kept) - 1} more" if len(kept) > 1 else ""
    return (f"{kept[0]}{more}: not the original its journal recorded (reduced, or written since); "
            "its backups are kept with a manifest naming them: nothing is lost (`tb-footprint restore` "
            "gives the originals back, `tb-footprint vault bring-back` each one `status` lists as left in the vault)")


def not_in_place_words(path: str, journal: str) -> str:
    """What a disk's journal without a swap record whose original at ``path`` is not the one it
    recorded is refused with (``Finding.ORIGINAL_NOT_IN_PLACE``): ``recover``'s words and
    ``status``'s forecast of them (``health.recover_will``)."""
    return (f"{path}: not the original its journal {journal} recorded, though it records no swap; not replayed, "
            "left in place with its backups")


def settled_run(run: str, op_id: str, before: Optional[int], after: Optional[int], completed: bool) -> dict:
    """One run a recovery settled, as a batch ledger records it: a rolled-back run is as big as it
    was (``after`` counts only when the reduction was completed)."""
    return {"run": run, "op_id": op_id, "bytes_before": before, "bytes_after": after if completed else before}


__all__ = ["backups_kept", "kept_words", "not_in_place_words", "INTERRUPTED_REASON", "CANCELLED_REASON", "MAX_REASON", "NOT_REPLAYED", "damaged_journal", "damaged_line", "no_begin_record", "REDUCE", "RecoveryOutcome", "failed", "refused", "settled", "settled_run",
           "skipped_live"]
