"""One transaction as a sequence of named steps, and the one driver that runs it (issue #26).

Every reduce of a run, on a disk or in a bucket, passes the same steps in the same order
(``STEPS``): journal → backup → stage → transform → verify → swap → commit, and on any failure a
rollback. What each step does differs by store (a hard link or a server-side copy, a rename or
a conditional copy); the order, the journal record that comes before each destructive step,
where a cancel is honoured and where a failpoint fires do not, so they live here, once:

- the **swap** (the step that changes the user's files) runs only after the last look at the
  run (``Txn.last_look``, read-only), a last ``cancel.check()`` and its journal record (the
  commit record) are done;
- the **rollback** runs only after its record (a recovery that finds the journal then finishes
  the rollback instead of rolling the reduction forward);
- a cancel (or a run's timeout) is honoured after each step before verify and right before the
  commit record, never after it: past the commit point the swap finishes; inside the verify step
  the engine's verification looks at the cancel too (``verify_reduction(should_stop=)``), and a
  cancel seen there ends the step with the token's own ``Cancelled`` (a bucket's rewrite, which
  verifies its staged run in its stage step, does the same there);
- after each step the driver hits that step's failpoint (``Txn.failpoint``: ``<verb>.<step>``
  by default, declared in ``engine.faults.STEPS``; the crash matrices fire them). A failpoint a
  step hits between one of its own records and its action (``reduce.backup_copy``,
  ``reduce.stage_record``) stays inside that step, at its instant.

A step's failure is a value: the driver rolls back and the transaction's outcome says why
(``Txn.failed``). A transaction of several entries (a bucket's batch of runs) settles an entry
that fails on its own and goes on with the others; a step that finds none left raises
``Settled`` and the driver stops there, with nothing to roll back. The failpoints say the same
on every store (issue #26): an injected failure (``faults.InjectedFault``, a ``raise``) is a
failure like any other, rolled back whatever failures the store's transaction catches
(``errors``: a disk's any, a bucket's its store's), and an injected crash
(``faults.InjectedCrash``, a ``crash``: a ``BaseException``) is never caught, never rolled back:
it stops the transaction as a SIGKILL (``kill``) stops the process, for the next start.
"""
from __future__ import annotations

import abc
import time
from typing import Callable, Optional, Tuple, Type

from tb_footprint_plugin.codes import Code
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import Cancelled, CancelToken

#: The steps of a transaction, in the order the driver runs them.
STEPS: Tuple[str, ...] = ("journal", "backup", "stage", "transform", "verify", "swap", "commit")

#: The steps after which a cancel is honoured; the last check comes after the verify step and its
#: last look, right before the commit record (a bucket's manifest, written in verify, is followed
#: by the last look at once, as it always was).
CANCELLABLE: Tuple[str, ...] = STEPS[:STEPS.index("verify")]

#: ``report(step, fraction)``: a step's progress, for a front end's progress bar.
Report = Callable[[str, float], None]


class NotStarted(Exception):
    """Raised by ``Txn.journal`` when the run is refused before anything is recorded or held (its
    lock is another's, the lock could not be taken): the transaction has set its outcome, and
    there is nothing to roll back."""


class Refused(Exception):
    """Raised by a store's layout of a transaction over it (``retire_run.RetireLayout``,
    ``unretire_run.UnretireLayout``) before anything is recorded: the transaction does not start.
    ``reason`` is the outcome's; ``code`` its code (None: the outcome's code until it starts stays;
    a retirement's ``Skip`` code makes it a skip)."""

    def __init__(self, reason: str, code: Optional[Code] = None) -> None:
        super().__init__(reason)
        self.reason, self.code = reason, code


class Settled(Exception):
    """Raised by a step of a transaction of several entries when every entry has been taken out
    and settled on its own (each rolled back alone, its outcome set, the journal closed or kept
    as the entries need): the driver runs no further step, record or rollback, and hits no
    failpoint (``unwind`` and ``end`` still run)."""


class Txn(abc.ABC):
    """One transaction: one method per step of ``STEPS``, run by ``run`` in that order.

    ``errors``: the failures of a step that ``run`` rolls back (anything else propagates);
    ``rollback_errors``: those of the rollback (its record included) that leave it incomplete
    (``incomplete``). ``verb``: the failpoints' prefix."""

    verb: str = "reduce"
    #: a failure of a step is rolled back (False: a purge, which past its intent is finished, never
    #: undone: any failure propagates); an injected failure (``faults.InjectedFault``, a ``raise``
    #: failpoint) is then one too, on every store, and an injected crash (``faults.InjectedCrash``,
    #: a ``crash`` failpoint) never is
    rolls_back: bool = True
    errors: Tuple[Type[BaseException], ...] = (Exception,)
    rollback_errors: Tuple[Type[BaseException], ...] = (OSError,)

    def failpoint(self, step: str) -> Optional[str]:
        """The failpoint ``run`` hits after ``step`` (None: none at that instant for this engine):
        ``<verb>.<step>`` where ``engine.faults`` declares it."""
        name = f"{self.verb}.{step}"
        return name if name in faults.DECLARED else None

    @abc.abstractmethod
    def journal(self, report: Report) -> None:
        """Take the run's lock and write the journal's begin record (``NotStarted`` if refused)."""

    @abc.abstractmethod
    def backup(self, report: Report) -> None:
        """Back up every original the plan removes or replaces, verified, each after its record."""

    @abc.abstractmethod
    def stage(self, report: Report) -> None:
        """Produce each new file in scratch space (never under its final name)."""

    @abc.abstractmethod
    def transform(self, report: Report) -> None:
        """Put each staged file where the swap takes it from, read back."""

    @abc.abstractmethod
    def verify(self, report: Report) -> None:
        """Verify and record the verification (the reduced run is what the plan says)."""

    @abc.abstractmethod
    def last_look(self) -> None:
        """The last, read-only look at the run before the commit record: raise to refuse the swap."""

    @abc.abstractmethod
    def record(self, step: str) -> None:
        """Journal the record that must be durable before the destructive ``step`` (``swap``:
        the commit record; ``rollback``) starts."""

    @abc.abstractmethod
    def swap(self, report: Report) -> None:
        """Replace and remove the originals (past the commit record: finished by recovery)."""

    @abc.abstractmethod
    def commit(self, report: Report) -> None:
        """Check the result, close the journal, release what the transaction held."""

    @abc.abstractmethod
    def journaled(self) -> bool:
        """Whether a journal exists to hold a rollback record."""

    @abc.abstractmethod
    def committed(self) -> bool:
        """Whether the commit record is durable, as the journal says (not as the driver assumes:
        a record whose write failed half-way is judged by the journal)."""

    @abc.abstractmethod
    def failed(self, error: BaseException) -> None:
        """Note why the transaction failed in its outcome, before the rollback."""

    @abc.abstractmethod
    def rollback(self, committed: bool) -> None:
        """Undo what the steps did (from the verified backups when ``committed``), after its record."""

    @abc.abstractmethod
    def incomplete(self, error: BaseException) -> None:
        """A rollback that could not finish: say so in the outcome (the journal stays for recovery)."""

    def unwind(self) -> None:
        """Leave what the steps entered (scratch space, shared locks) before a rollback or on
        the way out; called more than once."""

    def end(self) -> None:
        """Always last, whatever happened: release what is held for the transaction's life."""


class OverLayout:
    """What a transaction over a store's layout does last, written once (``retire_run.Retire``,
    ``unretire_run.Unretire``; they set ``layout``, ``out``, ``t0`` and ``ended``): once, whatever
    happened, what the layout held released, then the duration noted on the outcome."""

    def end(self) -> None:
        """Once: what the layout held released, the duration noted."""
        if self.ended:
            return
        self.ended = True
        self.layout.release()
        self.out.duration_s = round(time.monotonic() - self.t0, 3)


class PutBack(Txn):
    """A transaction that only puts back what the vault holds, unchanged (a retired run's restore
    and the restore of a reduction, on a disk or in a bucket): the vault's files are its backups,
    nothing is staged or transformed, and a restore is finished, never undone, so it journals no
    swap or rollback record of its own. Its commit point is where the first file goes back: the
    begin record where the backups were checked before it; for a restore whose backups are checked
    after its begin record (a disk's streamed remote backups: ``restore.LocalRestore``), the swap."""

    def backup(self, report: Report) -> None:
        """Nothing: the vault's files are the backups, checked before the journal."""

    def stage(self, report: Report) -> None:
        """Nothing: the files go back unchanged."""

    def transform(self, report: Report) -> None:
        """Nothing: the files go back unchanged."""

    def last_look(self) -> None:
        """Nothing: the begin record is the commit point."""

    def record(self, step: str) -> None:
        """Nothing: a restore journals its begin record only (and never a rollback)."""


class PurgeSteps(abc.ABC):
    """What one store does at each instant of a purge (``Purge``; the order is not its own):
    ``group`` is one transaction's chosen operations, in the store's own form."""

    @abc.abstractmethod
    def intent(self, group) -> int:
        """Record the intent (the commit record), before anything goes; how many operations it
        names now (0: nothing recorded)."""

    @abc.abstractmethod
    def delete(self, group, report: Report) -> None:
        """Delete what the intent names (``purge.blob`` after each backup or operation)."""

    @abc.abstractmethod
    def settle(self, group, report: Report) -> None:
        """What follows the deletes: the marks, the change log, what a vault forgets."""


class Purge(Txn):
    """The one purge transaction, on every store (a disk's vault, its retired runs, a bucket's
    vault): ``steps`` (a store's ``PurgeSteps``) says what each instant does to ``group``. It
    only deletes what nothing needs any more: it writes no new byte, so it has no begin record,
    backup, staged file, transform or verification of its own, and no last look (what may go was
    checked as the entries were chosen, and is checked again as it goes). Its intent is its commit
    record (``record("swap")`` → ``steps.intent``, the failpoint ``purge.intent`` right after);
    the swap deletes (``steps.delete``), the commit settles (``steps.settle``). The driver's last
    cancel check comes right before the intent, so a cancel is honoured with nothing deleted or
    recorded (``stopped``, the caller reports the entries as not purged), never after. Past its
    intent a purge is finished, now or by the next start, never rolled back: it journals no
    rollback record and the driver catches only a cancel (``errors``); any other failure
    propagates (an injected failure too: ``rolls_back`` False), the intent left for the next start. With no entry
    (``entries`` False: a bucket's purge that chose none still lets its vault of blobs forget)
    nothing is recorded and no failpoint is hit."""

    verb = "purge"
    rolls_back = False
    errors: Tuple[Type[BaseException], ...] = (Cancelled,)
    rollback_errors: Tuple[Type[BaseException], ...] = ()
    #: the driver's instants -> the declared failpoints (a purge's others are hit inside its steps)
    FAILPOINTS = {"swap_record": "purge.intent"}
    #: the cancel that stopped it before its intent (nothing of its entries deleted or recorded)
    stopped: Optional[Cancelled] = None
    #: called right before the driver's last cancel check (``last_look``): a front end that offers
    #: a cancel stops offering it here, so a cancel it accepted before is still honoured by that
    #: check and none is accepted after it (the tab's purge job)
    on_intent: Optional[Callable[[], None]] = None

    def __init__(self, steps: PurgeSteps, group, entries: bool = True) -> None:
        self.steps, self.group, self.entries = steps, group, entries
        self.intents = 0  # operations the intent names

    def failpoint(self, step: str) -> Optional[str]:
        return self.FAILPOINTS.get(step) if self.entries else None

    def journal(self, report: Report) -> None:
        """Nothing is recorded yet: the intent is the commit record (``record``)."""

    def backup(self, report: Report) -> None:
        """Nothing: a purge makes no copy."""

    def stage(self, report: Report) -> None:
        """Nothing: a purge writes no new file."""

    def transform(self, report: Report) -> None:
        """Nothing: a purge writes no new file."""

    def verify(self, report: Report) -> None:
        """Nothing: what may go was checked as the entries were chosen."""

    def last_look(self) -> None:
        """Nothing is looked at (each deletion looks again as it goes); ``on_intent`` is told."""
        if self.on_intent is not None:
            self.on_intent()

    def record(self, step: str) -> None:
        """The intent (``steps.intent``); never a rollback record (``journaled`` is False)."""
        self.intents = self.steps.intent(self.group)

    def swap(self, report: Report) -> None:
        self.steps.delete(self.group, report)

    def commit(self, report: Report) -> None:
        self.steps.settle(self.group, report)

    def journaled(self) -> bool:
        return False  # never a rollback record: past its intent a purge is finished

    def committed(self) -> bool:
        return self.intents > 0

    def failed(self, error: BaseException) -> None:
        """A cancel (the only failure caught), before the intent: the caller reports the entries
        as not purged."""
        self.stopped = error  # type: ignore[assignment]

    def rollback(self, committed: bool) -> None:
        """Nothing to undo: nothing was deleted or recorded (``failed``)."""

    def incomplete(self, error: BaseException) -> None:
        raise error  # pragma: no cover - ``rollback`` does nothing that can fail


def intent_hook(progress: Optional[Report]) -> Optional[Callable[[], None]]:
    """A purge's ``Purge.on_intent`` from its caller's ``progress``: ``progress("purge", 0.5)``
    once, right before the first of the purge's transactions records its intent (from there on
    the purge finishes, so a front end stops offering a cancel); None without ``progress``."""
    if progress is None:
        return None
    told: list = []

    def hook() -> None:
        if not told:
            told.append(True)
            progress("purge", 0.5)

    return hook


def run(txn: Txn, cancel: CancelToken, report: Optional[Report] = None) -> None:
    """Run ``txn`` step by step (module doc): the one place that orders records, destructive
    steps, cancel checks, failpoints and the rollback."""
    report = report or (lambda step, frac: None)
    # an injected failure is a failure on every store; a purge rolls none back (``rolls_back``)
    caught = (faults.InjectedFault, *txn.errors) if txn.rolls_back else txn.errors
    try:
        try:
            for step in STEPS:
                if step == "swap":
                    txn.last_look()
                    cancel.check()  # the last point where a cancel or the run's timeout is honoured
                    txn.record("swap")
                    _hit(txn, "swap_record")
                getattr(txn, step)(report)
                _hit(txn, step)
                if step in CANCELLABLE:
                    cancel.check()
        except (NotStarted, Settled):
            return
        except caught as e:
            txn.unwind()
            txn.failed(e)
            try:
                if txn.journaled():
                    # recorded first: a recovery that finds this journal must finish the rollback,
                    # not roll the reduction forward (also past the commit record: a swap refused
                    # by a precondition is undone from the verified backups)
                    txn.record("rollback")
                txn.rollback(txn.committed())
            except txn.rollback_errors as e2:
                txn.incomplete(e2)
    finally:
        txn.unwind()
        txn.end()


def _hit(txn: Txn, step: str) -> None:
    name = txn.failpoint(step)
    if name is not None:
        faults.hit(name)


__all__ = ["OverLayout", "CANCELLABLE", "NotStarted", "Purge", "PurgeSteps", "PutBack", "Refused", "Report", "STEPS", "Settled", "Txn", "intent_hook", "run"]
