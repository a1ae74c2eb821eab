"""The one purge, on every store (issue #26): a disk's vault of reductions' backups
(``purge.DiskBackups``), a disk's retired runs (``retire_purge.DiskRetired``) and a bucket's vault
(``bucket_purge.BucketCopies``) each supply only what their store does differently (a
``PurgeLayout``); the sequence is written here, once (``purge``):

1. choose (``PurgeLayout.choose``): the operations ``PurgeFilter`` admits, minus the ones the
   store refuses (a run locked or with an unfinished operation, a backup damaged or grown, an
   operation still journaled...), listed in ``kept`` with their codes; the store holds what it
   locked for the choice until its block ends;
2. with ``yes``, what a purge killed past its intent left is finished first, where the store
   finishes it at a purge (``PurgeLayout.finish_killed``: a bucket's; a disk's are finished by
   every start, ``upkeep``);
3. each group of chosen operations is one transaction (``txn.Purge`` over the layout's
   ``txn.PurgeSteps``) on the one driver: its intent, then its deletes, then its marks and
   change-log lines. A cancel is honoured up to the intent — every operation of the group then
   a ``kept`` row with the cancel's code, nothing of it deleted or recorded — never after;
4. the report (``PurgeReport``): the rows purged (or, without ``yes``, that would be), what
   they free, the originals lost for good (the rows' sum), the kept rows and what was refused.
"""
from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.engine.purge_rules import PurgeFilter, not_purged


@dataclass
class PurgeReport:
    """What a purge freed (or, without ``yes``, would free), and what it kept and why."""

    dry_run: bool
    ops: List[dict]
    freed_bytes: int
    kept: List[dict] = field(default_factory=list)  # {op_id, run, code, detail, bytes}
    #: original files that exist nowhere else once these backups are gone (runs not restored);
    #: None: the sum of the rows' ``originals`` (``purge_rules.originals_lost``, on every store)
    originals_lost: Optional[int] = None
    #: state on disk that was refused (planted, copied or malformed): reported, never acted on
    refused: List[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.originals_lost is None:
            self.originals_lost = sum(int(o.get("originals") or 0) for o in self.ops)

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "ops": self.ops, "freed_bytes": self.freed_bytes, "kept": self.kept,
                "originals_lost": self.originals_lost, "refused": list(self.refused)}


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


class PurgeLayout(txn.PurgeSteps):
    """What one store does in the one purge (``purge``): how it chooses, the steps of its
    transaction (``txn.PurgeSteps``) and what it says after them."""

    @abc.abstractmethod
    def choose(self, which: PurgeFilter, yes: bool) -> contextlib.AbstractContextManager:
        """A context manager giving the ``Chosen`` of ``which`` (with ``yes``: what it locked to
        choose held until its block ends)."""

    def finish_killed(self, cancel: CancelToken) -> List[dict]:
        """Rows of the purges killed past their intent that this purge finished first (only a
        store whose start does not finish them: a bucket's); none by default."""
        return []

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
    for layout in layouts:
        with layout.choose(which, yes) as chosen:
            kept = list(chosen.kept)
            finished = layout.finish_killed(cancel) if yes else []
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
                report.ops += rows
            report.ops += finished
        report.kept += kept
        report.refused += layout.refused()
    report.freed_bytes = sum(r["bytes"] for r in report.ops)
    report.originals_lost = sum(int(r.get("originals") or 0) for r in report.ops)
    return report


def groups_of(manifests: List[dict], rows: List[dict], key) -> Iterator[Group]:
    """``manifests`` (with their ``rows``) grouped by ``key(m)``, in the order first seen."""
    by: dict = {}
    for m, r in zip(manifests, rows):
        g = by.setdefault(key(m), Group([], []))
        g.manifests.append(m)
        g.rows.append(r)
    return iter(by.values())


__all__ = ["Chosen", "Group", "PurgeLayout", "PurgeReport", "groups_of", "purge"]
