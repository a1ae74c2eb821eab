"""A reduce batch on a local disk: each run its own transaction on ``jobs`` threads, each with its
own timeout and a cancel that stops it at its next step (``LocalEngine.reduce_runs``), and the
ledger file those runs are marked in, whose marks name a full disk (``DiskLedger``).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine.context import CancelToken, NoSpace, RunOutcome, failure_code, writing
from tb_footprint_plugin.engine.ledger import Ledger

#: ``reduce_one(rp, cancel, progress)``: one run's transaction (``LocalEngine.reduce_run``)
ReduceOne = Callable[[object, CancelToken, Optional[Callable[[str, float], None]]], RunOutcome]


class DiskLedger(Ledger):
    """A reduce's ledger file: each mark names a full disk (``NoSpace`` naming the ledger and the
    bytes a rewrite of it needs), so the run it was for fails with ``Failure.NO_SPACE``."""

    def mark(self, run: str, state: str, **fields) -> None:
        try:
            need = os.path.getsize(self.path) + 4096
        except OSError:
            need = 4096
        with writing(self.path, need):
            super().mark(run, state, **fields)


def _failed(rp, reason: str, code) -> RunOutcome:
    return RunOutcome(run=rp.run, status=Outcome.FAILED, reason=reason, code=code,
                      bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)


def run_batch(reduce_one: ReduceOne, todo: list, *, jobs: int, timeout: Optional[float],
              cancel: Optional[CancelToken], progress: Optional[Callable[[str, str, float], None]],
              begin: Optional[Callable], on_outcome: Optional[Callable[[RunOutcome], None]]) -> List[RunOutcome]:
    """``todo``'s runs through ``reduce_one``, one outcome each in order (``Engine.reduce_runs``).
    ``begin`` is called for every run, the plan's skips too; a failure of ``begin`` or of the
    run is a failed outcome (``NoSpace``: its code), passed to ``on_outcome`` as any other; a
    run the cancel kept from starting is ``Skip.CANCELLED`` and not passed to it."""

    def one(rp) -> RunOutcome:
        if cancel is not None and cancel.cancelled:
            return RunOutcome(run=rp.run, status=Outcome.SKIPPED, reason="batch cancelled", code=Skip.CANCELLED,
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
        token = CancelToken(timeout, parent=cancel)  # one cancel stops every run at its next step
        try:
            if begin:
                begin(rp)
            o = reduce_one(rp, token, None if progress is None else (lambda name, frac: progress(rp.run, name, frac)))
        except NoSpace as e:  # the ledger's disk is full: named, this run failed, the batch goes on
            o = _failed(rp, str(e), e.code)
        except Exception as e:  # once the batch is cancelled, a failure is the interrupt's (review R16 F13)
            o = _failed(rp, f"{type(e).__name__}: {e}",
                        Failure.INTERRUPTED if cancel is not None and cancel.cancelled else failure_code(e))
        if on_outcome:
            try:
                on_outcome(o)
            except Exception as e:  # the caller's hook failed: this run is failed, the batch goes on
                return _failed(rp, f"{type(e).__name__}: {e}", failure_code(e))
        return o

    if jobs <= 1:
        return [one(rp) for rp in todo]
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        try:
            return list(ex.map(one, todo))
        except KeyboardInterrupt:
            # before the pool waits for its threads: each run under way stops at its next step
            # and rolls back (a notebook's interrupt has no handler of its own to do it)
            if cancel is not None:
                cancel.cancel()
            raise


__all__ = ["DiskLedger", "ReduceOne", "run_batch"]
