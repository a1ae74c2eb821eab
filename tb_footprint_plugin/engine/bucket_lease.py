"""The bucket run lock: the object-store implementation (``ObjectRunLock``) of the one run-lock
interface ``engine.lease.RunLease``, and ``lock_class`` (which implementation a store gets).

A bucket run lock (``<logdir>/.tb-footprint/locks/<hash>.json``, created with the store's
create-only condition, ``ObjectRunLock.acquire``) carries the one lease document
(``engine.lease.lease_doc``: ``{run, host, pid, pid_start, shard, renewed, expires}``) with
``op`` and ``at``. While a process holds it, a background thread renews it every third of the lease
(``engine.lease.lease_seconds()``: 120 s by default, ``--lease`` / ``TB_FOOTPRINT_LEASE_SECONDS``)
by a write conditional on the version it wrote last, so a lock someone else took over is never
written back: the renewal fails its precondition and the lock is marked lost.

A batch's locks are kept alive by their journal once it exists (``delegate``): one conditional
rewrite of the journal object a third of a lease for the whole batch, not one write per lock
(#28 item 5: a 250-run batch that outlived a third of a lease paid 250 puts a renewal, so the puts
a run grew with the time a batch took). Nothing is weaker for it: another host judges a lock by
its lease **and** its journal's last write (``holder_gone``), and a lock whose journal exists is
never taken over (``ObjectRunLock.acquire``); a journal renewal that finds the journal changed or
gone marks every lock of the batch lost, as a lock's own renewal does.

Whether a lock's holder is gone (the lock may be taken over, its journal settled) is
``engine.lease.holder_gone``, the one rule of both engines, with the progress of the lock's
operation's journal object (``journal/<op>.json``): same host, its process no longer runs;
other host, its lease expired **and** that journal was not written within the last lease.

Locks are untrusted input: one that is malformed is treated as held by nobody, and the op id
it names is only used to build a journal key when it has the op-id format.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.journal import RunLock
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage.paths import is_op_id
from tb_footprint_plugin.storage.store import Capabilities, StoreFailure

HOST = lease.HOST  # one host name for both engines' leases


@dataclass
class _Group:
    """Locks kept alive by one other object's renewal (``delegate``): ``renew(t)`` writes it."""

    renew: Callable[[float], None]
    last_renewal: float  # when its renew last ran (not a lease document: it has none of its own)
    lost: bool = False


@dataclass
class _Held:
    put: Callable[[dict, str], str]  # (doc, version) -> new version (conditional write)
    doc: dict
    version: str
    lost: bool = False
    group: Optional[_Group] = None  # renewed through the group's object, not by its own writes
    # () -> (doc, version) read back: a renewal whose answer was lost is adopted when it landed
    read: Optional[Callable[[], Tuple[Optional[dict], Optional[str]]]] = None

    def is_lost(self) -> bool:
        return self.lost or (self.group is not None and self.group.lost)


_held: Dict[str, _Held] = {}
# held while a renewal writes a lock: release never races a renewal in flight
_mu = threading.Lock()
_renewer: Optional[threading.Thread] = None


def new_lock_doc(run: str, op_id: str) -> dict:
    """The lock object of ``run`` for operation ``op_id`` taken now by this process."""
    now = time.time()
    return lease.lease_doc(run, now, op=op_id, at=now)  # the one lease document (``engine.lease``)


def well_formed(lock) -> bool:
    """A lock read back from the store has the fields the rules above read, with their types."""
    return lease.well_formed(lock) and not lock.get("corrupt")


def holder_gone(lock, journal_mtime: Callable[[str], Optional[float]], active_ops=frozenset(),
                now: Optional[float] = None) -> bool:
    """Whether the holder of ``lock`` is gone (rules above). ``journal_mtime(op_id)`` is the
    last-modified time of that operation's journal object, None when there is none;
    ``active_ops`` are the operations this process runs now."""
    if not well_formed(lock):
        return True
    op = lock.get("op")
    # the one staleness rule (``engine.lease.holder_gone``); progress: the operation's journal object
    return lease.holder_gone(lock, lambda: journal_mtime(op) if is_op_id(op) else None,
                             ours_live=isinstance(op, str) and op in active_ops, now=now)


def hold(path: str, doc: dict, version: str, put: Callable[[dict, str], str],
         read: Optional[Callable[[], Tuple[Optional[dict], Optional[str]]]] = None) -> None:
    """Renew the lock at ``path`` (written as ``doc`` at ``version``) until ``release``. ``read()``:
    the lock read back with its version, so that a renewal that landed with its answer lost is
    adopted (as ``ObjectJournal.renew`` adopts a batch's), not taken for another's write."""
    global _renewer
    with _mu:
        _held[path] = _Held(put=put, doc=dict(doc), version=version, read=read)
        if _renewer is None or not _renewer.is_alive():
            _renewer = threading.Thread(target=_loop, name="tb-footprint-bucket-lease", daemon=True)
            _renewer.start()


def delegate(locks: Iterable[Any], renew: Optional[Callable[[float], None]], now: Optional[float] = None) -> int:
    """From now on the bucket locks among ``locks`` (``ObjectRunLock``s held by this process; a
    folder's locks are left as they are) are renewed by one call ``renew(t)`` a third of a lease for
    them all instead of one write each (``renew``: their operation's journal object rewritten under
    its version, ``ObjectJournal.renew``; None: nothing changes). A ``renew`` the store refuses as
    changed or gone (``PRECONDITION_FAILED``, ``NOT_FOUND``) marks every one of them lost. Returns
    how many were delegated."""
    if renew is None:
        return 0
    group = _Group(renew=renew, last_renewal=time.time() if now is None else now)
    n = 0
    with _mu:
        for lock in locks:
            h = _held.get(getattr(lock, "path", None)) if isinstance(lock, ObjectRunLock) else None
            if h is not None and not h.lost:
                h.group = group
                n += 1
    return n


def still_held(path: str) -> bool:
    """False once a renewal found the lock changed or gone (someone took it over)."""
    with _mu:
        h = _held.get(path)
        return h is not None and not h.is_lost()


def release(path: str) -> Optional[str]:
    """Stop renewing the lock at ``path``; returns the version this process wrote last, or None
    if the lock is no longer ours (then it must not be deleted: it is someone else's now)."""
    with _mu:
        h = _held.pop(path, None)
    if h is None or h.is_lost():
        return None
    return h.version


class LockObjects(Protocol):
    """What a bucket run lock needs of the engine's way to its store (``bucket_objects.BucketState``):
    small JSON objects written create-only or over a version, read with their version, deleted at
    a version."""

    def create(self, path: str, doc: dict) -> str: ...

    def update(self, path: str, doc: dict, version: str) -> str: ...

    def read(self, path: str, info=None) -> Tuple[Optional[dict], Optional[str]]: ...

    def delete(self, paths: List[str], versions: Optional[Dict[str, str]] = None) -> Dict[str, str]: ...


@dataclass(frozen=True)
class LockPlace:
    """Where a bucket's run locks live and what judging a holder reads: the state objects, the
    store path of a run's lock (``lock_path(run)``), the metadata of an operation's journal object
    (``journal_info(op)``: an object with ``mtime``, None when there is none) and the operations
    this process runs now (its own lock naming another is stale)."""

    st: LockObjects
    lock_path: Callable[[str], str]
    journal_info: Callable[[str], Any]
    active_ops: Any = frozenset()


class ObjectRunLock(lease.RunLease):
    """A bucket's run lock (the object-store implementation of ``engine.lease.RunLease``): the
    object ``<logdir>/.tb-footprint/locks/<hash>.json`` carrying its own lease (``new_lock_doc``),
    created create-only, renewed in the background by writes conditional on the version written
    last (``hold``). A lock whose holder is gone (``holder_gone``) and that left no journal guards
    nothing and is taken over: deleted at the version read (of two takers only one wins), then
    created again. ``release`` gives the version to delete it at (with the operation's journal,
    in one batched delete), None when it is not ours any more."""

    def __init__(self, where: LockPlace, run: str, op_id: str):
        self.where = where
        self.run = run
        self.op_id = op_id
        self.path = where.lock_path(run)
        self.version: Optional[str] = None

    def _take(self, doc: dict) -> Optional["ObjectRunLock"]:
        """Create the lock object (create-only) and renew it from now on; None when one is there."""
        st = self.where.st
        try:
            self.version = st.create(self.path, doc)
        except StoreFailure as e:
            if e.code != StoreError.ALREADY_EXISTS:
                raise
            return None
        hold(self.path, doc, self.version, lambda d, v: st.update(self.path, d, v), lambda: st.read(self.path))
        return self

    def acquire(self) -> "ObjectRunLock":
        """Take the run's lock (one create-only put; a stale one taken over); ``lease.LockRefused``
        naming the holder when another live process has it."""
        doc = new_lock_doc(self.run, self.op_id)
        if self._take(doc):
            return self
        st, where = self.where.st, self.where
        held, version = st.read(self.path)
        if held is not None and version and \
                holder_gone(held, lambda op: getattr(where.journal_info(op), "mtime", None), where.active_ops) and \
                where.journal_info(str(held.get("op"))) is None:
            if not st.delete([self.path], versions={self.path: version}) and self._take(doc):
                return self
            held, _ = st.read(self.path)
        who = f"{held.get('host')} pid {held.get('pid')} (operation {held.get('op')})" if held else None
        raise lease.LockRefused(f"run {self.run} is being changed by {who or 'another process'}; left alone", who)

    def still_held(self) -> bool:
        """``still_held(self.path)``: False once a renewal found the lock taken over."""
        return self.version is not None and still_held(self.path)

    def release(self) -> Optional[str]:
        """Stop renewing; the version to delete the lock at, None when it is no longer ours (then
        it must not be deleted: someone else holds it now)."""
        return release(self.path)


def lock_class(caps: Capabilities) -> type:
    """The run-lock implementation for a store of these capabilities (as
    ``journal_object.journal_class`` chooses the journal): ``journal.RunLock`` (``flock`` + a lease
    file) where the store is a folder that appends durably in place, ``ObjectRunLock`` (the lock
    object carrying its lease, renewed by conditional writes) where writes are conditional."""
    if caps.append == "o_append" and caps.fsync:
        return RunLock
    if caps.conditional_put:
        return ObjectRunLock
    raise ValueError(f"no run lock for a store that neither locks files nor puts conditionally ({caps})")


def renew_all(now: Optional[float] = None) -> None:
    """Push forward every held lock renewed a third of a lease ago or more."""
    period = lease.lease_seconds()
    tried = set()  # a group's renewal that failed is tried again at the next wake-up, not once a lock
    with _mu:
        for path, h in list(_held.items()):
            t = time.time() if now is None else now
            if h.group is not None:  # one write for the group, whichever of its locks comes first
                g = h.group
                if g.lost or id(g) in tried or t - g.last_renewal < period / 3:
                    continue
                tried.add(id(g))
                try:
                    g.renew(t)
                    g.last_renewal = t
                except StoreFailure as e:
                    if e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
                        # the journal rewritten or removed by another (a put of ours that landed
                        # with its answer lost is adopted by ``renew``): its locks are not ours
                        g.lost = True
                continue
            if h.lost or t - h.doc.get("renewed", 0) < period / 3:
                continue
            doc = lease.renewed(h.doc, t)
            try:
                h.version = h.put(doc, h.version)
                h.doc = doc
            except StoreFailure as e:
                # a put that landed with its answer lost: the client's retry fails its precondition
                # against our own new version, or every try times out; read back, adopted when it is ours
                landed = jsondoc.landed_version(h.read, doc) if h.read and e.code != StoreError.NOT_FOUND else None
                if landed is not None:
                    h.version, h.doc = landed, doc
                elif e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
                    h.lost = True  # taken over (or removed) by another worker: never written back
                # any other store error: tried again at the next wake-up, the lease still runs


def _loop() -> None:
    while True:  # wakes at least every second, so a shorter lease configured later is honoured
        time.sleep(min(1.0, max(0.05, lease.lease_seconds() / 6)))
        try:
            renew_all()
        except Exception:  # noqa: BLE001 - the renewer must outlive one bad wake-up
            pass


__all__ = ["LockObjects", "LockPlace", "ObjectRunLock", "delegate", "hold", "holder_gone", "lock_class", "new_lock_doc", "release",
           "renew_all", "still_held", "well_formed"]
