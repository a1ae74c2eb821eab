"""What a purge on a disk may take, by one rule for both kinds of backup (review R r20 R15): a
reduction's backups (``purge.purge_backups``) and a retired run's vault copy
(``retire_purge.DiskRetired``) are chosen by the same filters, under the same run locks, and
passed over with the same ``kept`` rows.

- ``PurgeFilter`` and ``kept_row``: the store-neutral rules a bucket's purge uses too
  (``engine.purge_rules``, re-exported here).
- ``PurgeChoice``: with ``yes``, each run's lock taken once (``run_lock.lock_for_purge``: a refusal
  is a ``kept`` row with its code) and held until the purge ends (the ``with`` block: released
  there, in one place); an operation whose run has an unfinished one (``catalogue.unsettled_op``)
  is kept with ``Finding.UNFINISHED``.
- ``held_runs``: the same locks, each run's once, for a start that finishes a killed purge.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Code, Finding
from tb_footprint_plugin.engine.catalogue import unsettled_op
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.engine.purge_rules import PurgeFilter, kept_row
from tb_footprint_plugin.engine.run_lock import lock_for_purge

#: the detail of a ``kept`` row whose run has an unfinished operation
UNFINISHED_DETAIL = "an operation on this run is unfinished; run `tb-footprint recover`"


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


@contextlib.contextmanager
def held_runs(ctx: Context) -> Iterator[Callable[[str], Optional[Tuple[Code, str]]]]:
    """``hold(run)``: ``run``'s lock taken once (``lock_for_purge``: None when held, else the
    lock's code and why), every lock released when the block ends."""
    locks: Dict[str, RunLease] = {}
    try:
        yield lambda run: lock_for_purge(ctx, run, locks)
    finally:
        for lock in locks.values():
            lock.release()


__all__ = ["PurgeChoice", "PurgeFilter", "UNFINISHED_DETAIL", "held_runs", "kept_row"]
