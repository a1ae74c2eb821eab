"""What a purge on a disk may take, by one rule for both kinds of backup (review R r20 R15): a
reduction's backups (``purge.purge_backups``) and a retired run's vault copy
(``retire_purge.purge_retired``) are chosen by the same filters, under the same run locks, and
passed over with the same ``kept`` rows.

- ``PurgeFilter``: which operations the caller asked for (``op``, ``run``, ``runs``, ``op_ids``,
  ``older_than`` against ``now``); a purged one is never asked for again.
- ``PurgeChoice``: with ``yes``, each run's lock taken once (``run_lock.lock_for_purge``: a refusal
  is a ``kept`` row with its code) and held until the purge ends (the ``with`` block: released
  there, in one place); an operation whose run has an unfinished one (``catalogue.unsettled_op``)
  is kept with ``Finding.UNFINISHED``.
- ``kept_row``: every ``kept`` row of a disk's purge, one set of fields: ``op_id``, ``run``,
  ``kind`` (``reduce`` or ``retire``, the manifest's), ``bytes`` (what stays: the size function
  the purge passes in), ``code``, ``detail``, and what a row adds (``sha256`` of a blob kept).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Dict, List, Optional

from tb_footprint_plugin.codes import Code, Finding
from tb_footprint_plugin.engine.catalogue import unsettled_op
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.engine.run_lock import lock_for_purge

#: the detail of a ``kept`` row whose run has an unfinished operation
UNFINISHED_DETAIL = "an operation on this run is unfinished; run `tb-footprint recover`"


@dataclass(frozen=True)
class PurgeFilter:
    """The operations a purge was asked for: ``op`` (one operation), ``run`` (one run), ``runs``
    (these runs), ``op_ids`` (the ones a preview showed and the user confirmed), ``older_than``
    (seconds since the operation finished, at ``now``); None asks for all."""

    now: float
    older_than: Optional[float] = None
    run: Optional[str] = None
    runs: Optional[Collection[str]] = None
    op: Optional[str] = None
    op_ids: Optional[Collection[str]] = None

    def admits(self, m: dict) -> bool:
        """Whether manifest ``m`` is asked for and not purged already."""
        if m.get("backup_purged"):
            return False
        if (self.op and m["op_id"] != self.op) or (self.run is not None and m["run"] != self.run) or \
                (self.runs is not None and m["run"] not in self.runs) or \
                (self.op_ids is not None and m["op_id"] not in self.op_ids):
            return False
        return self.older_than is None or m.get("finished_at", self.now) <= self.now - self.older_than


def kept_row(m: dict, size: int, code: Code, detail: str, **extra) -> dict:
    """The ``kept`` row of an operation (manifest or report row ``m``) a purge passes over, wholly
    or in part (``extra``: a blob's ``sha256``): nothing of what it names was deleted."""
    return {"op_id": m["op_id"], "run": m["run"], "kind": m["kind"], "bytes": size, "code": code,
            "detail": detail, **extra}


class PurgeChoice:
    """The choice of one purge (``with PurgeChoice(ctx, yes) as c``): ``choose`` keeps the runs'
    locks it takes until the block ends, and lists what it passes over in ``kept``."""

    def __init__(self, ctx: Context, yes: bool) -> None:
        self.ctx, self.yes = ctx, yes
        self.locks: Dict[str, RunLease] = {}
        self.kept: List[dict] = []

    def __enter__(self) -> "PurgeChoice":
        return self

    def __exit__(self, *exc) -> None:
        for lock in self.locks.values():
            lock.release()
        self.locks.clear()

    def choose(self, manifests: List[dict], size: Callable[[dict], int],
               fresh: Optional[Callable[[dict], Optional[dict]]] = None,
               check: Optional[Callable[[dict], Optional[dict]]] = None) -> List[dict]:
        """The ``manifests`` a purge may take: with ``yes`` their runs locked (a refused lock
        keeps its operations, coded as ``lock_for_purge`` says), each then read again by
        ``fresh`` (None: no longer one to purge, passed over silently); none whose run has an
        unfinished operation (``Finding.UNFINISHED``), nor one ``check`` keeps (its ``kept``
        row, ``kept_row``'s, or None). ``size(m)``: a kept row's bytes, asked only for the rows
        kept here."""
        chosen = []
        for m in manifests:
            refused = lock_for_purge(self.ctx, m["run"], self.locks) if self.yes else None
            if refused is not None:
                self.kept.append(kept_row(m, size(m), *refused))
                continue
            if self.yes and fresh is not None:
                m = fresh(m)
                if m is None:
                    continue
            if unsettled_op(self.ctx, m["run"]):
                self.kept.append(kept_row(m, size(m), Finding.UNFINISHED, UNFINISHED_DETAIL))
                continue
            problem = check(m) if check is not None else None
            if problem is not None:
                self.kept.append(problem)
                continue
            chosen.append(m)
        return chosen


__all__ = ["PurgeChoice", "PurgeFilter", "UNFINISHED_DETAIL", "kept_row"]
