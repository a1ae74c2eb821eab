"""The one purge, on every store (issue #26): a disk's vault of reductions' backups
(``purge.DiskBackups``), a disk's retired runs (``retire_purge.DiskRetired``) and a bucket's vault
(``bucket_purge.BucketCopies``) each supply only what their store does differently (a
``PurgeLayout``); the sequence is written here, once (``purge``):

1. choose (``PurgeLayout.choose``): the operations ``PurgeFilter`` admits, minus the ones the
   store refuses (a run locked or with an unfinished operation, a backup damaged or grown, an
   operation still journaled...), listed in ``kept`` with their codes; the store holds what it
   locked for the choice until its block ends;
2. each group of chosen operations is one transaction (``txn.Purge`` over the layout's
   ``txn.PurgeSteps``) on the one driver: its intent, then its deletes, then its marks and
   change-log lines. A cancel is honoured up to the intent — every operation of the group then
   a ``kept`` row with the cancel's code, nothing of it deleted or recorded — never after;
3. the report (``PurgeReport``): the rows purged (or, without ``yes``, that would be), what
   they free, the originals lost for good (derived from the rows, ``originals_lost``), the kept
   rows and what was refused.

A purge killed past its intent is finished by the next start, once, the same way on every store
(``finish_killed``, ``outcomes``: ``Finding.PURGE_FINISHED``): the store's ``KilledPurges`` finds
what its intents name and is still there (``killed``), each run is held once (``holding``: a
disk's run locks by ``purge_choice``'s rule, a bucket's purge by its journal's lease; a run held
by another process is left for a later start, ``Recovery.SKIPPED_LIVE``), then it deletes what
is left, marks and writes the change log (``finish``). A disk's start finishes its two layouts'
(``upkeep``), a bucket's start the purges its journals name (``bucket_recover``, through
``bucket_purge_journal.KilledBucketPurges``: found in the listing of the journal folder every
start makes, so a start with nothing to finish makes no request more). A purge need not finish
another's first: every verb that changes something starts with that start.
"""
from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Type

from tb_footprint_plugin.codes import Code, Finding, Recovery, Skip
from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.context import CancelToken, reason_of
from tb_footprint_plugin.engine.purge_rules import PurgeFilter, not_purged
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome


#: the codes of a store's findings that refuse nothing: a purge's ``warnings``, not its ``refused``
#: (a manifest the change log names gone: the purge goes on and keeps every blob, review R26 F1)
WARNINGS = (Finding.LOGDIR_NOT_STICKY, Finding.OTHER_USERS_STATE, Finding.MANIFEST_MISSING)
#: a purged row's ``kept_by``: a layout that said ``Finding.MANIFEST_MISSING`` kept every blob, so the
#: row freed nothing (``bytes`` 0), whatever its backups' size; its run can no longer be restored, and
#: its ``originals`` say how many of its files that costs (review R27, R26 LOW: the row said the bytes
#: and originals of a purge that deleted nothing; on a disk, 0 originals though the run's restore went)
KEPT_BY = "kept_by"


@dataclass
class PurgeReport:
    """What a purge freed (or, without ``yes``, would free), and what it kept and why."""

    dry_run: bool
    ops: List[dict]
    freed_bytes: int
    kept: List[dict] = field(default_factory=list)  # {op_id, run, code, detail, bytes}
    #: state on disk that was refused (planted, copied or malformed): reported, never acted on
    refused: List[dict] = field(default_factory=list)
    #: findings that refuse nothing (``WARNINGS``: the logdir others may write without its sticky bit,
    #: another user's state folder beside this one): said, and the purge goes on (review R17 F12)
    warnings: List[dict] = field(default_factory=list)
    #: a bucket logdir's local folder of blobs (``--backup-dir FOLDER``): the stored bytes its forget
    #: frees (a preview: up to; a purge: deleted), beside ``freed_bytes``; None for every other vault
    folder_freed_bytes: Optional[int] = None

    @property
    def every_blob_kept(self) -> bool:
        """Whether a vault of blobs this purge ran over kept every blob (``WARNINGS``'s
        ``Finding.MANIFEST_MISSING``: an operation the change log or the witness names has no
        manifest, and which blobs its run's files are is unknown): the rows it marked purged freed
        nothing (``KEPT_BY``), their runs can no longer be restored. Derived from the warnings, so a
        report rebuilt from a store's dict says it too."""
        return any(w.get("code") == Finding.MANIFEST_MISSING for w in self.warnings)

    @property
    def originals_lost(self) -> int:
        """Original files that exist nowhere else once these backups are gone (runs not
        restored): the sum of the rows' ``originals`` (``purge_rules.originals_lost``, on every
        store), derived here only, so it always says what ``ops`` says."""
        return sum(int(o.get("originals") or 0) for o in self.ops)

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "ops": self.ops, "freed_bytes": self.freed_bytes, "kept": self.kept,
                "originals_lost": self.originals_lost, "refused": list(self.refused), "warnings": list(self.warnings),
                "folder_freed_bytes": self.folder_freed_bytes, "every_blob_kept": self.every_blob_kept}


@dataclass
class Group:
    """One transaction's chosen operations: their manifests, the report's rows of them (same
    order; ``bytes`` what each frees) and the store's own plan of them (``plan``), which its
    steps may note what they did in (``done``)."""

    manifests: List[dict]
    rows: List[dict]
    plan: Any = None
    done: Any = None


@dataclass
class Chosen:
    """What a layout's choice gives the purge: the groups (one transaction each) and the rows of
    the operations it passed over (``purge_rules.kept_row``)."""

    groups: List[Group]
    kept: List[dict] = field(default_factory=list)


@dataclass
class Killed:
    """An operation whose purge was killed past its intent (``PurgeLayout.killed``): what the
    intent names (``intent``: the store's own form), its manifest when read (``m``)."""

    op_id: str
    run: str
    intent: Any = None
    m: Optional[dict] = None


@dataclass
class Finished:
    """What ``finish_killed`` did of one killed purge: finished (``freed`` bytes, ``detail``),
    or not, said with a code (``code``: its run's lock not taken — ``Skip.LOCKED``: another
    process holds it —, or ``Finding.RECOVERY_FAILED``) and retried later."""

    op_id: str
    run: str
    freed: int = 0
    detail: str = ""
    code: Optional[Code] = None
    m: Optional[dict] = None


#: hold(run) -> None when ``run`` is held for the finish, else the lock's (code, detail)
Hold = Callable[[str], Optional[Tuple[Code, str]]]


class KilledPurges:
    """How one store finds and finishes its purges killed past their intent (``finish_killed``),
    at every start: a ``PurgeLayout`` of a disk (its intents), or a bucket's start
    (``bucket_recover``: the purge journals its one listing of the journal folder found)."""

    #: the failures of ``finish`` said as one ``Finished`` (retried later); others propagate
    finish_errors: Tuple[Type[BaseException], ...] = ()

    def killed(self) -> List[Killed]:
        """The purges killed past their intent (none by default)."""
        return []

    def holding(self) -> contextlib.AbstractContextManager:
        """A context manager giving ``Hold``: each run held once for the finish, released when
        the block ends (by default every run is held: a store whose marks are conditional)."""
        return contextlib.nullcontext(lambda run: None)

    def finish(self, killed: List[Killed]) -> List[Finished]:
        """Finish ``killed`` (their runs held): delete what is left, mark, write the change log."""
        return []


class PurgeLayout(txn.PurgeSteps, KilledPurges):
    """What one store does in the one purge (``purge``): how it chooses, the steps of its
    transaction (``txn.PurgeSteps``) and what it says after them; and, where the same layout
    finishes them (a disk's), how a purge killed past its intent is found and finished
    (``KilledPurges``)."""

    @abc.abstractmethod
    def choose(self, which: PurgeFilter, yes: bool) -> contextlib.AbstractContextManager:
        """A context manager giving the ``Chosen`` of ``which`` (with ``yes``: what it locked to
        choose held until its block ends)."""

    def outcome(self, group: Group) -> Tuple[List[dict], List[dict]]:
        """After its transaction: the group's rows as purged, and rows of what stayed after all."""
        return group.rows, []

    def refused(self) -> List[dict]:
        """The state this purge found refused (planted, copied, malformed): reported, not acted on."""
        return []


def purge(layouts: Sequence[PurgeLayout], which: PurgeFilter, *, yes: bool, cancel: Optional[CancelToken] = None,
          progress: Optional[txn.Report] = None) -> PurgeReport:
    """The one purge (module doc) over each of ``layouts`` in turn (a disk: its reductions', then
    its retired runs'): without ``yes`` only the rows that would go. ``cancel``: honoured before
    each transaction's intent, never after. ``progress``: told ``("purge", 0.5)`` once, right
    before the first intent of a transaction with an operation (``txn.intent_hook``)."""
    cancel = cancel or CancelToken()
    on_intent = txn.intent_hook(progress)
    report = PurgeReport(dry_run=not yes, ops=[], freed_bytes=0)
    rows_of = []  # each layout's purged rows, in ``report.ops``
    for layout in layouts:
        at = len(report.ops)
        with layout.choose(which, yes) as chosen:
            kept = list(chosen.kept)
            for group in chosen.groups:
                rows = group.rows
                if yes:
                    t = txn.Purge(layout, group, entries=bool(group.manifests))
                    t.on_intent = on_intent if group.manifests else None
                    txn.run(t, cancel)
                    if t.stopped is not None:  # before its intent: nothing of these was deleted or recorded
                        kept += [not_purged(m, r["bytes"], t.stopped, t.stopped.code)
                                 for m, r in zip(group.manifests, group.rows)]
                        continue
                    rows, stayed = layout.outcome(group)
                    kept += stayed
                # every store's rows say whose originals go (``purge_rules.others_of``); a bucket has no owners
                report.ops += [{**r, "others": r.get("others") or []} for r in rows]
        report.kept += kept
        rows_of.append(report.ops[at:])
    # what was refused, as it stands once every layout has run
    found_of = [layout.refused() for layout in layouts]
    found = [r for f in found_of for r in f]
    report.refused = [r for r in found if r.get("code") not in WARNINGS]
    report.warnings = [r for r in found if r.get("code") in WARNINGS]
    for rows, f in zip(rows_of, found_of):
        # the one rule of every store: a layout whose vault of blobs keeps every blob (a manifest
        # missing: its own finding says so) freed nothing, whatever the rows it marked were worth
        if any(r.get("code") == Finding.MANIFEST_MISSING for r in f):
            for r in rows:
                r["bytes"], r[KEPT_BY] = 0, str(Finding.MANIFEST_MISSING)
    report.freed_bytes = sum(r["bytes"] for r in report.ops)
    return report


def finish_killed(layout: KilledPurges) -> List[Finished]:
    """Finish the purges ``layout`` finds killed past their intent (module doc): each run held
    once, what is left deleted, marked, logged. A run not held is left (its ``Finished`` coded
    with the lock's code); a failure of ``layout.finish_errors`` is one ``Finished`` coded
    ``Finding.RECOVERY_FAILED`` (no op: retried whole at the next start)."""
    killed = layout.killed()
    if not killed:
        return []
    out: List[Finished] = []
    with layout.holding() as hold:
        ready = []
        for k in killed:
            if not isinstance(k.run, str):  # an intent is untrusted input (an op log, a manifest)
                out.append(Finished(k.op_id, "", code=Finding.RECOVERY_FAILED,
                                    detail=f"interrupted purge not finished: its intent names no run ({k.run!r})"))
                continue
            refused = hold(k.run)
            if refused is None:
                ready.append(k)
            else:
                out.append(Finished(k.op_id, k.run, code=refused[0], detail=refused[1]))
        try:
            out += layout.finish(ready)
        except layout.finish_errors as e:
            out.append(Finished("", "", code=Finding.RECOVERY_FAILED, detail=f"interrupted purge not finished: "
                                                                           f"{reason_of(e)}"))
    return out


def outcomes(finished: List[Finished]) -> List[RecoveryOutcome]:
    """A start's outcomes of ``finish_killed``: finished (``Finding.PURGE_FINISHED``), left for
    a later start as its run is held by another process (``Finding.RUN_LOCKED``), or not
    finished (``Finding.RECOVERY_FAILED``, a run's lock not taken included, naming why)."""
    out = []
    for f in finished:
        if f.code is None:
            out.append(RecoveryOutcome(f.op_id, f.run, Recovery.COMPLETED, f.detail, Finding.PURGE_FINISHED))
        elif f.code == Skip.LOCKED:
            out.append(RecoveryOutcome(f.op_id, f.run, Recovery.SKIPPED_LIVE, "held by a running process",
                                       Finding.RUN_LOCKED))
        else:
            out.append(RecoveryOutcome(f.op_id, f.run, Recovery.FAILED, f.detail, Finding.RECOVERY_FAILED))
    return out


def groups_of(manifests: List[dict], rows: List[dict], key) -> Iterator[Group]:
    """``manifests`` (with their ``rows``) grouped by ``key(m)``, in the order first seen."""
    by: dict = {}
    for m, r in zip(manifests, rows):
        g = by.setdefault(key(m), Group([], []))
        g.manifests.append(m)
        g.rows.append(r)
    return iter(by.values())


__all__ = ["KEPT_BY", "WARNINGS", "Chosen", "Finished", "Group", "Hold", "Killed", "KilledPurges", "PurgeLayout", "PurgeReport", "finish_killed", "groups_of",
           "outcomes", "purge"]
