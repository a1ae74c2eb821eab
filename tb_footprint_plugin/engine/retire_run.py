"""The one retirement, on every store (issue #26): a disk's (``retire.DiskRetire``) and a
bucket's (``bucket_retire.BucketRetire``) each supply only what their store does differently (a
``RetireLayout``: how the run is held, listed and journaled, moved or copied into the vault,
checked, removed and put back); the transaction is written here, once (``Retire``, run by the one
driver ``engine.txn.run``; ``retire``, what comes before and after it):

1. the names every store refuses (``RetireLayout.refused``: ``retire_rules.refused_names`` and
   the store's own), before anything is held: failed, ``Failure.REFUSED``;
2. the run held (``RetireLayout.hold``: the lock of every run it moves, the outcome set when
   refused);
3. the driver's steps (``txn.STEPS``): **journal** (``begin``: the run listed and the journal's
   first record; a ``txn.Refused`` there is a skip when its code is a ``Skip``, else a failure, with
   nothing recorded), **backup** (``move``), **verify** (``check``), the **last look**, the commit
   record (``commit_record``), **swap** (``remove``), **commit** (``settle``, then the outcome:
   verified, its files removed from the logdir, nothing left of it there). A cancel is honoured
   where the driver honours it, up to the commit record;
4. a failure: a retirement the store has recorded as done (``RetireLayout.retired``: a disk's
   verified manifest) is verified, never undone; else it is rolled back after its rollback record
   (``rollback_record``) by ``put_back``: rolled back (skipped when the failure's code is a
   ``Skip``), coded by the store's one rule (``code_of``), its reason the failure's and what the
   put-back noticed; with no journal nothing moved: failed (skipped for a cancel). A rollback that
   does not finish leaves the journal: failed, ``Failure.ROLLBACK_INCOMPLETE``.

The failpoints of the driver's instants are the verb's (``FAILPOINTS``) plus a store's own
(``RetireLayout.failpoints``); those a step hits inside itself are the layout's.
"""
from __future__ import annotations

import abc
import time
from typing import Dict, List, Optional, Tuple, Type

from tb_footprint_plugin.codes import Code, Failure, Outcome, Skip
from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, RunOutcome, reason_of
from tb_footprint_plugin.engine.recovery_rules import rollback_incomplete_reason

#: the driver's instants → the failpoints every store's retirement hits there (``engine.faults``)
FAILPOINTS: Dict[str, str] = {"journal": "retire.journal", "backup": "retire.move", "swap": "retire.delete"}


class RetireLayout(abc.ABC):
    """What one store does at each instant of a retirement (``Retire``; the order is not its
    own). ``out`` is the retirement's outcome, which ``Retire`` sets the status, code and reason
    of; a layout notes in it only what it counts (``bytes_before``, ``op_id``, a lock's holder)."""

    #: the failpoints this store hits at the driver's instants besides ``FAILPOINTS``
    failpoints: Dict[str, str] = {}
    errors: Tuple[Type[BaseException], ...] = (Exception,)
    rollback_errors: Tuple[Type[BaseException], ...] = (Exception,)

    def __init__(self, run: str, along: List[str]) -> None:
        self.run, self.along = run, along
        self.out = RunOutcome(run=run, status=Outcome.FAILED)

    @abc.abstractmethod
    def refused(self) -> Optional[str]:
        """Why the run cannot be retired whatever it holds (before anything is held), or None."""

    @abc.abstractmethod
    def hold(self) -> bool:
        """Hold the run (the lock of every run it moves); False when refused (``out`` says why)."""

    @abc.abstractmethod
    def begin(self, cancel: CancelToken, report: txn.Report) -> None:
        """List the run and write the journal's first record (``txn.Refused`` before anything
        is recorded)."""

    @abc.abstractmethod
    def move(self, cancel: CancelToken, report: txn.Report) -> None:
        """Every file of the run into the vault (moved, or copied and checked), each after its record."""

    @abc.abstractmethod
    def check(self, report: txn.Report) -> None:
        """Every stored file is the one listed (and, where the store records it there, the manifest)."""

    @abc.abstractmethod
    def last_look(self) -> None:
        """The last, read-only look at the run before the commit record: raise to keep it in the logdir."""

    @abc.abstractmethod
    def commit_record(self) -> None:
        """The record that must be durable before anything of the run is removed from the logdir."""

    @abc.abstractmethod
    def remove(self, report: txn.Report) -> None:
        """What is left of the run in the logdir removed (past the commit record)."""

    @abc.abstractmethod
    def settle(self, report: txn.Report) -> None:
        """The run gone from the logdir and whole in the vault, recorded; the journal closed."""

    @abc.abstractmethod
    def files(self) -> List[dict]:
        """The run's files as listed (``path``, ``size``)."""

    @abc.abstractmethod
    def journaled(self) -> bool:
        """Whether the journal exists (and is open)."""

    @abc.abstractmethod
    def committed(self) -> bool:
        """Whether the commit record is durable, as the journal says."""

    def retired(self) -> bool:
        """Whether the store has recorded the retirement as done, so a failure now never undoes it."""
        return False

    @abc.abstractmethod
    def code_of(self, error: BaseException) -> Code:
        """The code a failure is said with (the store's one rule, ``failure_code``)."""

    @abc.abstractmethod
    def rollback_record(self, reason: str) -> None:
        """The rollback record, before anything is put back."""

    @abc.abstractmethod
    def put_back(self, reason: str, committed: bool) -> str:
        """Every file of the run back where it was (from the vault's verified copies when
        ``committed``), the rollback recorded; returns what it noticed ('' when nothing)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the journal (the retirement settled, or rolled back)."""

    def unwind(self) -> None:
        """Leave what the steps entered (shared locks of the vault); called more than once."""

    def release(self) -> None:
        """Once, last: release what the retirement held (its locks)."""


class Retire(txn.OverLayout, txn.Txn):
    """The one retirement transaction, on every store (the module doc): the order, the records
    before each destructive step, the outcome's fields and codes; ``layout`` does the rest."""

    verb = "retire"

    def __init__(self, layout: RetireLayout, cancel: CancelToken) -> None:
        self.layout, self.cancel, self.out = layout, cancel, layout.out
        self.errors, self.rollback_errors = layout.errors, layout.rollback_errors
        self.failpoints = {**FAILPOINTS, **layout.failpoints}
        self.t0 = time.monotonic()
        self.error: Optional[BaseException] = None
        self.reason = ""
        self.code: Optional[Code] = None
        self.was_retired = False  # the store recorded it as done before the failure
        self.rolling = False
        self.said = False  # the outcome's reason set by the rollback
        self.ended = False

    def failpoint(self, step: str) -> Optional[str]:
        return self.failpoints.get(step)

    def journal(self, report: txn.Report) -> None:
        """The run listed, the journal's first record (refused: a skip or a failure, nothing recorded)."""
        try:
            self.layout.begin(self.cancel, report)
        except txn.Refused as e:
            out = self.out
            out.status = Outcome.SKIPPED if isinstance(e.code, Skip) else Outcome.FAILED
            out.reason, out.code = e.reason, e.code
            raise txn.NotStarted() from e

    def backup(self, report: txn.Report) -> None:
        self.layout.move(self.cancel, report)

    def stage(self, report: txn.Report) -> None:
        """Nothing: a retirement produces no new file."""

    def transform(self, report: txn.Report) -> None:
        """Nothing: the run is moved unchanged."""

    def verify(self, report: txn.Report) -> None:
        self.layout.check(report)

    def last_look(self) -> None:
        self.layout.last_look()

    def record(self, step: str) -> None:
        """The commit record before the swap; the rollback record, with its reason."""
        if step == "swap":
            self.layout.commit_record()
        else:
            self.layout.rollback_record(self.reason)

    def swap(self, report: txn.Report) -> None:
        self.layout.remove(report)

    def commit(self, report: txn.Report) -> None:
        """Settled by the store, then the outcome: verified, every file gone from the logdir."""
        self.layout.settle(report)
        out = self.out
        out.removed_files = [f["path"] for f in self.layout.files()]
        out.status, out.bytes_after = Outcome.VERIFIED, 0

    def journaled(self) -> bool:
        """A rollback to record: a journal, the retirement not recorded as done."""
        return self.layout.journaled() and not self.was_retired

    def committed(self) -> bool:
        return self.layout.committed()

    def failed(self, error: BaseException) -> None:
        """Why, its code, and whether the store has recorded the retirement as done already. A
        failure coded with a ``Skip`` (a writer found after the journal) is that skip on every
        store, as a reduce says it; any other is coded by the store's one rule (``code_of``)."""
        code = getattr(error, "code", None)
        self.error, self.reason = error, reason_of(error)
        self.code = code if isinstance(code, Skip) else self.layout.code_of(error)
        self.was_retired = self.layout.journaled() and self.layout.retired()

    def rollback(self, committed: bool) -> None:
        """Every file back (``put_back``), the outcome saying so; or, with no journal or a
        retirement recorded as done, the outcome that says that."""
        out, layout = self.out, self.layout
        if not layout.journaled():  # nothing was recorded: nothing moved
            out.status, out.reason, out.code = Outcome.FAILED, self.reason, self.code
            if isinstance(self.error, Cancelled):
                out.status, out.code = Outcome.SKIPPED, Skip.CANCELLED
            self.said = True
            return
        if self.was_retired:  # retired, as a crash there leaves it: never rolled back past its record
            out.status = Outcome.VERIFIED
            layout.close()
            return
        self.rolling, self.said = True, True
        out.reason = self.reason
        noted = layout.put_back(self.reason, committed)
        out.status = Outcome.SKIPPED if isinstance(self.code, Skip) else Outcome.ROLLED_BACK
        out.code = self.code
        if noted:
            out.reason = f"{out.reason}; {noted}"
        layout.close()
        self.rolling = False

    def incomplete(self, error: BaseException) -> None:
        """The rollback (its record included) did not finish: the journal stays, the next start
        settles it. A failure outside the rollback (closing a retirement recorded as done)
        propagates."""
        if not (self.rolling or self.journaled()):
            raise error
        out = self.out
        base = out.reason if self.said else self.reason
        out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
        out.reason = rollback_incomplete_reason(base, reason_of(error))

    def unwind(self) -> None:
        self.layout.unwind()


def retire(layout: RetireLayout, cancel: Optional[CancelToken] = None,
           progress: Optional[txn.Report] = None) -> RunOutcome:
    """Retire ``layout``'s run (module doc): its outcome (``verified`` when the run left the
    logdir for the vault), never raised for a failed run. ``cancel``: honoured up to the commit
    record; ``progress``: the steps' progress."""
    why = layout.refused()
    if why:  # before any lock: a name outside the logdir locks nothing
        layout.out.reason, layout.out.code = why, Failure.REFUSED
        return layout.out
    t = Retire(layout, cancel or CancelToken())
    try:
        if layout.hold():
            txn.run(t, t.cancel, progress)
    finally:
        t.end()
    return t.out


__all__ = ["FAILPOINTS", "Retire", "RetireLayout", "retire"]
