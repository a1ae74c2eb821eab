"""The one restore of a retired run, on every store (issue #26): a disk's (``retire.DiskUnretire``)
and a bucket's (``bucket_retire.BucketUnretire``) each supply only what their store does
differently (an ``UnretireLayout``: how the retirement's record is read and refused, how the runs
are held, journaled, put back, checked and recorded, and what a failure leaves); the sequence is
written here, once (``Unretire``, a ``txn.PutBack`` run by the one driver ``engine.txn.run``;
``unretire``, what comes before and after it):

1. the outcome until it starts (``retire_rules.unretire_outcome``: failed, ``RESTORE_BLOCKED``,
   named by the retirement); the record read as the store keeps it (``UnretireLayout.admit``);
   what no store restores (``retire_rules.unretire_refusal``: restored already, purged, never
   verified); the store's refusals of names and keys (``UnretireLayout.refused``); a new run of
   the same name standing there (``retire_rules.new_run_refusal`` over ``UnretireLayout.standing``
   and ``retired_at``: anything there that is not the retirement's, refused in one set of words;
   files written once the restore runs are left as they are, ``not_restored``) — each before
   anything is held, nothing changed;
2. the runs held (``UnretireLayout.hold``: the lock of the run and of every run it takes along);
3. the driver's steps: **journal** (``begin``: the vault's copies checked, then the journal's
   begin record, the restore named by its own op id from there on; ``txn.Refused`` before the record,
   nothing changed), the cancel point right after it (the last before anything is put back; ``unretire.journal``
   between them),
   **swap** (``put_back``: every file back where it was; a path another file holds now is left
   as it is, its original kept in the vault), **commit** (``settle``: the run checked,
   the retirement recorded as restored — a disk's manifest and change-log line, a bucket's
   manifest mark (``unretire.manifest``); the paths left named ``not_restored``, their copies
   kept, which purge keeps; the copies of the files back released (a disk's retired tree
   removed, or each ``files/<n>`` but the left ones'; a bucket's copies deleted as its purge
   deletes them, or its blobs forgotten, ``bucket_putback.release_restored``) — the journal closed;
   then the outcome: restored, with the store's words and code, ``not_restored`` on every store
   when a path was left);
4. a failure is never undone (no rollback record: the begin record is the commit point), and
   said one way on every store: failed, its reason the failure's, its code the store's one rule
   (``UnretireLayout.code_of``; a permission error is ``permission_denied`` everywhere); the
   journal goes when nothing was put back yet (``started`` False: the run is as it was, retired,
   and no journal is left for every start to meet), else it stays and the reason says the next
   start finishes the restore (``JOURNAL_KEPT``), once this user may write there (a permission
   error) or once what stands in its way is gone (``RESTORE_BLOCKED``: a link or another user's
   folder at the run's name, which every start meets until someone moves it);
5. last, whatever happened, what was held released (``release``) and the duration noted.

Recovery is this sequence too, with the journal a stopped restore kept (the step **journal**
checks the vault's copies and writes nothing; ``started`` is True from the first instant, so that
journal is never dropped): a disk's next start runs it from ``retire.finish_unretire``
(``DiskUnretire`` over the kept journal, named by its op id, under recovery's lock of the run), a
bucket's from ``bucket_recover`` (``bucket_retire.unretire(resume=True)``, the op id its journal
records, ``resumed_op_id``): every attempt is recorded by the op id of the restore it finishes.
What only a recovery does is what comes before: a restore stopped after the retirement's mark
needs only its record (a disk's manifest and line written once; a bucket's journal removed, and
a release of its copies stopped there finished from the purge journal it left).
"""
from __future__ import annotations

import abc
import time
from typing import Any, Dict, Mapping, Optional, Tuple, Type

from tb_footprint_plugin.codes import Code, Failure, Outcome, StoreError
from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, RunOutcome, new_op_id, reason_of
from tb_footprint_plugin.engine.retire_rules import new_run_refusal, unretire_outcome, unretire_refusal
from tb_footprint_plugin.storage.access import is_permission_error

#: the driver's instants → the failpoints every store's restore of a retirement hits there
FAILPOINTS: Dict[str, str] = {"journal": "unretire.journal", "swap": "unretire.move"}
#: what a put-back stopped after its first file says, on every store (a bucket's restore of a
#: reduction too, ``bucket_putback``): its journal stays and the next start finishes it
JOURNAL_KEPT = "; the journal is kept and the next start finishes the restore"
#: what a cancel says (honoured only before the first put-back)
NOTHING_PUT_BACK = ": nothing was put back, the run is as it was"


class UnretireLayout(abc.ABC):
    """What one store does at each instant of a retired run's restore (``Unretire``; the order is
    not its own). ``m`` is the retirement's manifest, ``out`` the restore's outcome, which
    ``Unretire`` sets the status of; a layout counts in it what it puts back."""

    #: the failpoints this store hits at the driver's instants besides ``FAILPOINTS``
    failpoints: Dict[str, str] = {}
    errors: Tuple[Type[BaseException], ...] = (Exception,)
    #: the restore's own op id when the layout finishes one its kept journal names already (a
    #: disk's journal is named by it, a bucket's records it): set by the journal step at the
    #: latest (a bucket reads it under the runs' locks); None: a new one
    op_id: Optional[str] = None

    def __init__(self, m: dict) -> None:
        self.m = m
        self.out: RunOutcome = unretire_outcome(m)  # a refusal before the journal names the retirement

    def admit(self) -> None:
        """The retirement's record read as this store keeps it (``self.m``); ``txn.Refused`` when it
        does not read."""

    @abc.abstractmethod
    def refused(self) -> None:
        """``txn.Refused`` when the store cannot put this retirement back whatever the vault holds
        (names, keys, a link on the way); before anything is held."""

    def standing(self) -> Optional[Mapping[str, Any]]:
        """What stands at or below the run's path now, each name (logdir-relative) with what the
        store's look gave of it, the state and the vault left out: the one rule against a new run
        of the same name (``retire_rules.new_run_refusal``) is asked of it before anything is held.
        None for a resumed restore (what stands is what it put back)."""
        return None

    def retired_at(self, name: str, seen: Any) -> Optional[bool]:
        """Whether ``name`` (``seen``: ``standing``'s look at it) holds the retired file of that
        name: True, False, or None when the retirement took no file of that name."""
        return None

    @abc.abstractmethod
    def hold(self) -> bool:
        """Hold every run it puts back; False when refused (``out`` says why)."""

    def resumed_op_id(self) -> None:
        """Under the locks, before ``begin``: ``op_id`` set from the kept journal a resumed restore
        finishes, where the store reads it only then (a disk's names it from the start)."""

    @abc.abstractmethod
    def begin(self, op_id: str, report: txn.Report) -> None:
        """The vault's copies checked, then the journal's begin record naming restore ``op_id``
        (``txn.Refused`` before it, nothing changed)."""

    @abc.abstractmethod
    def put_back(self, report: txn.Report) -> None:
        """Every file of the run back where it was (``unretire.mid_move`` after the first)."""

    @abc.abstractmethod
    def settle(self, op_id: str, report: txn.Report) -> Tuple[str, Optional[Code]]:
        """The run checked and the retirement recorded as restored by ``op_id``, the journal
        closed; the restored outcome's reason and code."""

    @abc.abstractmethod
    def journaled(self) -> bool:
        """Whether the restore's journal stands (from it on the restore is finished, never undone)."""

    @abc.abstractmethod
    def started(self) -> bool:
        """Whether a file may have been put back (or a folder made) already."""

    @abc.abstractmethod
    def drop_journal(self) -> None:
        """The journal of a restore that put nothing back removed; left standing when it cannot go."""

    @abc.abstractmethod
    def code_of(self, error: BaseException) -> Code:
        """The code a failure is said with (the store's one rule, ``failure_code``)."""

    def release(self) -> None:
        """Once, last: release what the restore held (its locks)."""


class Unretire(txn.OverLayout, txn.PutBack):
    """The one restore of a retired run, on every store (the module doc): the order, the op id,
    the cancel point, the status; ``layout`` does the rest."""

    verb = "unretire"
    rollback_errors: Tuple[Type[BaseException], ...] = ()

    def __init__(self, layout: UnretireLayout, cancel: CancelToken) -> None:
        self.layout, self.cancel, self.out = layout, cancel, layout.out
        self.errors = layout.errors
        self.failpoints = {**FAILPOINTS, **layout.failpoints}
        self.fresh_op_id = new_op_id()
        self.t0 = time.monotonic()
        self.error: Optional[BaseException] = None
        self.ended = False

    @property
    def op_id(self) -> str:
        """The restore's op id: its kept journal's when the layout finishes one (the same on
        every attempt), else one drawn for this restore."""
        return self.layout.op_id or self.fresh_op_id

    def failpoint(self, step: str) -> Optional[str]:
        return self.failpoints.get(step)

    def refuse(self, e: txn.Refused) -> None:
        """A refusal before anything is recorded: the outcome says why (still failed)."""
        self.out.reason = e.reason
        if e.code is not None:
            self.out.code = e.code

    def journal(self, report: txn.Report) -> None:
        """The copies checked, the begin record: from it on the outcome names the restore."""
        try:
            self.layout.resumed_op_id()
            self.layout.begin(self.op_id, report)
        except txn.Refused as e:
            self.refuse(e)
            raise txn.NotStarted() from e
        self.out.op_id = self.op_id

    def verify(self, report: txn.Report) -> None:
        """Nothing: the copies were checked before the journal, the run is checked once back."""

    def swap(self, report: txn.Report) -> None:
        self.layout.put_back(report)

    def commit(self, report: txn.Report) -> None:
        """Checked and recorded by the store, then the outcome: restored."""
        reason, code = self.layout.settle(self.op_id, report)
        self.out.status, self.out.code, self.out.reason = Outcome.RESTORED, code, reason

    def journaled(self) -> bool:
        return False  # never a rollback record: from the begin record on the restore is finished

    def committed(self) -> bool:
        return self.layout.journaled()

    def failed(self, error: BaseException) -> None:
        self.error = error

    def rollback(self, committed: bool) -> None:
        """Nothing is undone (module doc, 4): the outcome says why it stopped, the same way on every
        store; the journal goes when nothing was put back, else it stays for the next start."""
        e, out, layout = self.error, self.out, self.layout
        assert e is not None
        permission = is_permission_error(e)
        out.reason = reason_of(e)
        out.code = StoreError.PERMISSION if permission else layout.code_of(e)
        if isinstance(e, Cancelled):
            out.reason += NOTHING_PUT_BACK
        if committed and not layout.started():
            layout.drop_journal()
        if layout.journaled():
            out.reason += JOURNAL_KEPT
            if permission:  # every start meets it until the mode is fixed
                out.reason += " once this user may write there"
            elif out.code == Failure.RESTORE_BLOCKED:  # a link or a stranger's folder: every start meets it
                out.reason += " once what stands in its way is gone"

    def incomplete(self, error: BaseException) -> None:
        raise error  # pragma: no cover - ``rollback`` settles its own failures


def unretire(layout: UnretireLayout, cancel: Optional[CancelToken] = None,
             progress: Optional[txn.Report] = None) -> RunOutcome:
    """Put ``layout``'s retired run back (module doc): its outcome (``restored`` when every file
    is back and the retirement recorded as restored), never raised for a failed restore."""
    t = Unretire(layout, cancel or CancelToken())
    try:
        layout.admit()
        refusal = unretire_refusal(layout.m)
        if refusal:
            raise txn.Refused(refusal)
        layout.refused()
        there = layout.standing()
        refusal = new_run_refusal(layout.out.run, there, lambda n: layout.retired_at(n, there[n]),
                                  took_all=True) if there else None
        if refusal:
            raise txn.Refused(refusal)
        if layout.hold():
            txn.run(t, t.cancel, progress)
    except txn.Refused as e:
        t.refuse(e)
    finally:
        t.end()
    return t.out


__all__ = ["FAILPOINTS", "JOURNAL_KEPT", "NOTHING_PUT_BACK", "Unretire", "UnretireLayout", "unretire"]
