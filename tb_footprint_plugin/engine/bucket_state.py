"""A bucket logdir's small state objects: the vault, the journal, the run lock and their helpers.

What every bucket verb shares (the journal-and-lock part of the bucket engine):

* ``BucketVault``: where backups go (``<logdir>/.tb-footprint`` or another bucket/prefix);
* ``BucketState`` (``engine.bucket_objects``, through the ``Store`` interface): small JSON objects
  written with the store's conditions (create-only, or only over the version read last);
* the journal: ``new_journal`` (the one journal interface, ``engine.journal.OpJournal``, in the
  implementation the store declares: an ``engine.journal_object.ObjectJournal``, every record
  written under the previous version), ``must_close``, ``journal_path``;
* the **per-run lock** (``run_lock`` / ``lock_run``): the one run-lock interface
  (``engine.lease.RunLease``) in the implementation the store declares, on a bucket
  ``engine.bucket_lease.ObjectRunLock`` (created create-only, renewed by conditional writes; a
  lock whose holder is gone and left no journal is taken over);
* listings of runs, batched deletes, and the codes of failures (``failure_code``: the local
  engine's ``codes.py`` code for the same failure, never prose) and of the one "still being
  written" rule (``written_recently``, over ``plan.planner.active_reason``).
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from tb_footprint_plugin.codes import Code, Failure, Outcome, Skip, StoreError
from tb_footprint_plugin.engine import bucket_identity, bucket_lease
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.context import failure_code as neutral_failure_code
from tb_footprint_plugin.engine.journal import OpJournal, Rec
from tb_footprint_plugin.engine.lease import LockRefused, RunLease
from tb_footprint_plugin.engine.manifest import run_prefix  # noqa: F401  (re-exported: the bucket modules' name)
from tb_footprint_plugin.engine.journal_object import (  # noqa: F401  (COMMITTED_STEPS, commit_recorded: re-exported)
    COMMITTED_STEPS,
    OBJECT_JOURNALS,
    ObjectFolder,
    ObjectJournal,
    commit_recorded,
    journal_class,
    journal_key,
)
from tb_footprint_plugin.plan.cost import LIST_PAGE_KEYS
from tb_footprint_plugin.plan.planner import active_reason, newest_write
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.private import ensure_private_dir
from tb_footprint_plugin.storage.remote import ObjectInfo, is_remote, protocol_of
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore

#: a failed request to the store, as the engine catches it: a ``Store`` call's ``StoreFailure``
#: (listings and ranged reads included: every request of the bucket engine goes through the
#: ``Store`` interface); its ``codes.StoreError`` ``code`` is what a catch site branches on
STORE_FAILURES = (StoreFailure,)

JOURNAL = OBJECT_JOURNALS
LOCKS = f"{STATE_DIR_NAME}/locks"


class BucketTxnError(RuntimeError):
    """A step of a bucket transaction failed; ``code`` (a ``codes.py`` member) says which kind of
    failure, the message says what happened in prose (never a code)."""

    def __init__(self, code: Code, message: str, holder: Optional[str] = None):
        super().__init__(message)
        self.code = code
        self.holder = holder  # a refused lock's holder (``"HOST pid PID (operation OP)"``), else None


def failure_code(e: BaseException) -> Code:
    """The ``codes.py`` code of a failed bucket step: the store-neutral rule every engine codes a
    failed run by (``context.failure_code``: an exception's own ``Failure``, ``Cancelled``'s
    included, ``Failure.NO_SPACE`` for a full disk of local staging, else ``Failure.ERROR`` for
    a failed step of ours), with a ``BucketTxnError``'s or a ``TransactionError``'s own code
    first (a ``Skip`` a step named too) and the store's codes on top of it: ``Failure.NO_SPACE``
    for a store out of space or quota; ``Failure.REFUSED`` for a key that is not a plain key of
    the store (``ValueError``, or a ``StoreFailure`` ``UNSAFE_KEY``); ``Failure.STORE_ERROR``
    for any other failed store request."""
    if isinstance(e, BucketTxnError) or (isinstance(e, TransactionError) and e.code is not None):
        return e.code
    code = neutral_failure_code(e)
    if code != Failure.ERROR:
        return code
    if getattr(e, "code", None) == StoreError.NO_SPACE:
        return Failure.NO_SPACE
    if isinstance(e, StoreFailure) and e.code == StoreError.UNSAFE_KEY:
        return Failure.REFUSED
    if isinstance(e, STORE_FAILURES):
        return Failure.STORE_ERROR
    if isinstance(e, ValueError):
        return Failure.REFUSED
    return Failure.ERROR


def lock_failure_code(e: BaseException) -> Code:
    """The code of a lock that could not be taken for another reason than its holder: as on a
    disk, ``Failure.LOCK_ERROR``, or ``Failure.NO_SPACE`` when the store is out of space or quota."""
    return Failure.NO_SPACE if failure_code(e) == Failure.NO_SPACE else Failure.LOCK_ERROR


class BlobVault:
    """A local folder holding a bucket logdir's backups as blobs (``engine.bucket_blobs``)."""

    def __init__(self, folder: str, logdir: ObjectStore):
        """The blob vault in ``folder`` for the logdir whose store is ``logdir``; ``NotPrivate`` when the folder
        exists and is not a folder of ours. It is made (0700) at its first use, not here: a plan
        or a status names it without writing anything. Its blobs are claimed under an owner name
        of that logdir (``engine.bucket_identity``: its id and where it stands), so another logdir
        sharing the folder, or a new one at this one's old URL, never loses one to this one's purge."""
        self.folder = os.path.abspath(folder)
        if os.path.lexists(self.folder):
            ensure_private_dir(self.folder)
        self.logdir = ObjectStore.of(logdir)  # its client would name the same owner, unchecked: the engine takes the store
        #: 3f68b74's owner (the URL's hash): the owner of a blob entry that records none
        self.legacy_owner = bucket_identity.legacy_owner(self.logdir)
        self.place = bucket_identity.place_of(self.logdir)
        self._id: Optional[str] = None  # the logdir's id, once read (or made)
        self._id_read = False
        self._store: Optional[BlobStore] = None

    @property
    def logdir_id(self) -> Optional[str]:
        """The logdir's id (``bucket_identity.IDENTITY``, read once), None when it has none or its
        object is not ours (then no owner of an id stands here: only the legacy one)."""
        if not self._id_read:
            try:
                self._id = bucket_identity.read_id(self.logdir)
            except bucket_identity.IdentityRefused:
                self._id = None
            self._id_read = True
        return self._id

    @property
    def owner(self) -> str:
        """The owner this logdir claims blobs under now: ``bucket:<id>:<place>`` once it has an id
        (``claim``), else the legacy owner (nothing was added under an id here yet)."""
        i = self.logdir_id
        return bucket_identity.owner_name(i, self.place) if i is not None else self.legacy_owner

    def claim(self) -> str:
        """Before blobs are added: the logdir's id made if it has none (create-only), the store
        from then on claiming under ``bucket:<id>:<place>``; returns that owner.
        ``BucketTxnError(REFUSED)`` naming the id object when it is not ours."""
        if self.logdir_id is None:
            try:
                self._id = bucket_identity.ensure_id(self.logdir)
            except bucket_identity.IdentityRefused as e:
                raise BucketTxnError(e.code, str(e)) from None
            self._id_read = True
            self._store = None  # made again under the new owner
        bucket_identity.note_place(self)  # what this place is, in clear, for a restore (R13 F6)
        return self.owner

    def forgettable(self) -> List[str]:
        """The owners whose claims a purge of this logdir may drop: the current one and the legacy
        one of this URL (3f68b74's entries), never an earlier location's (a moved logdir's old claims
        stay: a copy of it, or a new logdir at its old URL, may still need them)."""
        return list(dict.fromkeys([self.owner, self.legacy_owner]))

    def is_ours(self, owner: str) -> bool:
        """Whether a blob entry may name ``owner`` (untrusted input) for this logdir's restore: the
        legacy owner of this URL (as 3f68b74 checked), or an owner of this logdir's id wherever it
        stood (a moved logdir restores), or of this place (its id object lost: as the URL's hash did)."""
        if owner == self.legacy_owner:
            return True
        got = bucket_identity.split_owner(owner)
        return got is not None and ((self.logdir_id is not None and got[0] == self.logdir_id) or got[1] == self.place)

    def store_as(self, owner: str) -> BlobStore:
        """A ``BlobStore`` of the folder that forgets as ``owner`` (one of ``forgettable``)."""
        return self.store if owner == self.store.owner else BlobStore(PosixStore(self.folder), owner=owner)

    @property
    def store(self) -> BlobStore:
        """The ``BlobStore`` over a ``PosixStore`` at the folder (made, or checked ours, first),
        adding and forgetting as ``owner``."""
        if self._store is None:
            ensure_private_dir(self.folder)
            self._store = BlobStore(PosixStore(self.folder), owner=self.owner)
        return self._store


@dataclass
class BucketVault:
    """Where backups of a bucket logdir go: ``<logdir>/.tb-footprint`` or another bucket/prefix
    (server-side copies), or a local folder (``blobs``: a ``BlobStore``; the manifests stay in
    ``<logdir>/.tb-footprint``). Built over the ``Store`` interface: ``logdir`` is the logdir's
    store and ``store`` the vault's own (the objects under ``root``, on the logdir's client and
    request counters: ``ObjectStore.on_client``), through which its manifests are listed."""

    logdir: ObjectStore  # the logdir's store
    root: str  # store path (bucket/prefix) of the vault's manifests (and server-side copies)
    blobs: Optional[BlobVault] = None  # a local blob vault: the backups of reductions go there
    #: the vault's own store, made at its first use (on the logdir's client: no request, no client)
    _store: Optional[ObjectStore] = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def for_logdir(cls, logdir: ObjectStore, backup_dir: Optional[str] = None) -> "BucketVault":
        """The vault of the logdir whose store is ``logdir`` (the ``Store`` interface: its client
        is what the vault's own store shares, ``ObjectStore.at``): ``backup_dir`` a local folder
        (blobs), another prefix or bucket of the same store (``ValueError`` for another store, or
        one holding the logdir), else ``<logdir>/.tb-footprint``. ``TypeError`` for anything but
        an ``ObjectStore`` (a ``RemoteFS`` is its client, not a store)."""
        if not isinstance(logdir, ObjectStore):
            raise TypeError(f"BucketVault.for_logdir takes the logdir's ObjectStore, not {type(logdir).__name__}")
        store = logdir
        if backup_dir and not is_remote(backup_dir):
            return cls(logdir=store, root=store.path(STATE_DIR_NAME), blobs=BlobVault(backup_dir, store))
        if backup_dir:
            if protocol_of(backup_dir) != store.protocol:
                raise ValueError(f"backup dir {backup_dir} must be on the same store as {store.url} "
                                 "(backups are server-side copies)")
            try:
                other = store.at(backup_dir)  # on the logdir's client and counters: no request
            except StoreFailure as e:
                if isinstance(e.__cause__, ValueError):  # a URL naming no bucket: refused as it was
                    raise e.__cause__ from None
                raise
            root = other.root
            if store.root == root or store.root.startswith(root + "/"):
                raise ValueError(f"backup dir {backup_dir} contains the logdir; choose a separate prefix")
            vault = cls(logdir=store, root=root)
            vault._store = other
            return vault
        return cls(logdir=store, root=store.path(STATE_DIR_NAME))

    @property
    def store(self) -> ObjectStore:
        """The vault's own store: the objects under ``root`` (keys ``manifests/…``, ``blobs/…``)."""
        if self._store is None:
            self._store = self.logdir.at(f"{self.logdir.scheme}://{self.root}")
        return self._store

    def blob(self, op_id: str, rel: str) -> str:
        return f"{self.root}/blobs/{op_id}/{rel}"

    def manifest(self, op_id: str) -> str:
        return f"{self.root}/manifests/{op_id}.json"


def lock_key(run: str) -> str:
    return f"{LOCKS}/{hashlib.sha256(run.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.json"


def now_s() -> float:
    """Wall-clock seconds, as journals, manifests and locks record them."""
    return time.time()


def written_recently(objs: Dict[str, ObjectInfo], run: str, quiet_period: float,
                     closed_files: Optional[Mapping[str, float]] = None) -> Optional[str]:
    """Why ``run`` is still being written (``plan.planner.active_reason``, the one rule of every
    store), judged by the newest object of the run in a listing; None when it is quiet.
    ``closed_files`` (key -> mtime when the caller's own job closed it) are not counted while
    unchanged (``plan.planner.newest_write``, as on a disk)."""
    pre = run_prefix(run)
    newest = newest_write(((k, o.mtime) for k, o in objs.items() if k.startswith(pre)), closed_files)
    active = active_reason(newest, quiet_period, now_s())
    return f"run {run!r} is {active}" if active else None


#: the bucket engine's name for its journal: the object-store implementation of the one journal
#: interface (``engine.journal_object.ObjectJournal``, over ``engine.journal.OpJournal``)
BucketJournal = ObjectJournal


def journal_path(ostore: ObjectStore, op_id: str) -> str:
    """The store path of operation ``op_id``'s journal object (its lock names it by ``op``)."""
    return journal_key(ostore.path(JOURNAL), op_id)


def new_journal(st: BucketState, op_id: str, first: dict) -> OpJournal:
    """The journal of a new operation of this bucket logdir, holding ``first`` (its begin record's
    fields: the operation, its runs, the step it begins at) from the moment it exists: the
    implementation the logdir's store declares (``journal_object.journal_class``: an object
    rewritten under its version where an append is a conditional rewrite), created create-only
    (``StoreFailure`` ``ALREADY_EXISTS`` when one of that operation is there)."""
    folder = st.logdir.path(JOURNAL)
    store, _ = st.where(folder)
    return journal_class(store.capabilities).create(ObjectFolder(st, folder), op_id, dict(first, type=Rec.BEGIN))


def must_close(journal: ObjectJournal, also: Optional[List[str]] = None,
               versions: Optional[Dict[str, str]] = None) -> None:
    """Remove an operation's journal object (with ``also``, its locks at ``versions``, in the same
    batched delete); ``BucketTxnError`` when one could not be deleted."""
    failed = journal.close(also=also or [], versions=versions)
    if failed:
        key = sorted(failed)[0]
        raise BucketTxnError(Failure.STORE_ERROR, f"{key}: could not be deleted ({failed[key]})")


def run_lock(st: BucketState, run: str, op_id: str) -> RunLease:
    """The run lock of ``run`` for operation ``op_id`` (not taken yet): the one run-lock interface
    (``engine.lease.RunLease``) in the implementation the logdir's store declares
    (``bucket_lease.lock_class``: the lock object carrying its lease on a bucket), its holder
    judged gone by progress of its operation's journal object (one metadata read, only for an
    expired lease of another host, or before a takeover)."""
    store, _ = st.where(st.logdir.path(LOCKS))
    place = bucket_lease.LockPlace(st, lambda r: st.logdir.path(lock_key(r)),
                                   lambda op: st.stat(journal_path(st.logdir, op)), ACTIVE_OPS)
    return bucket_lease.lock_class(store.capabilities)(place, run, op_id)


def lock_run(st: BucketState, run: str, op_id: str) -> RunLease:
    """Take the run's lock (``run_lock(...).acquire()``) and return it, held: the caller keeps
    the lock object (``still_held``, ``unlock_versions``), never its path. Raises
    BucketTxnError with the refusal's code (``Skip.LOCKED``) and its ``holder``."""
    lock = run_lock(st, run, op_id)
    try:
        return lock.acquire()
    except LockRefused as e:
        raise BucketTxnError(e.code, str(e), holder=e.holder) from None


def lock_refused(out, e: BucketTxnError) -> None:
    """Say in ``out`` (a ``RunOutcome``) that its run's lock was refused: skipped, with the
    refusal's code (``Skip.LOCKED``) and its holder as fields, the message for people."""
    out.status, out.reason, out.code, out.holder = Outcome.SKIPPED, str(e), e.code, e.holder


def lock_runs(st: BucketState, runs: List[str], op_id: str, locks: List[RunLease], out) -> bool:
    """Take each run's lock, appending the held lock to ``locks`` (the caller releases them, also
    after a partial failure). False when one is not taken, with ``out`` (a ``RunOutcome``) saying
    why: skipped ``locked`` (``lock_refused``) when another process holds it, else the lock's failure code."""
    try:
        for r in runs:
            locks.append(lock_run(st, r, op_id))
    except BucketTxnError as e:
        lock_refused(out, e)
        return False
    except STORE_FAILURES as e:
        out.reason, out.code = str(e), lock_failure_code(e)
        return False
    return True


def unlock_versions(lock: RunLease) -> Optional[Dict[str, str]]:
    """Stop renewing the lock; its path and the version to delete it at, None if it is not ours
    any more (or leaves nothing to delete)."""
    v = lock.release()
    return {lock.path: v} if isinstance(v, str) else None


def unlock_all(locks: List[RunLease]) -> Tuple[List[str], Dict[str, str]]:
    """Stop renewing these locks; the paths of the ones still ours and the versions to delete
    them at (a lock another worker took over is never deleted as ours)."""
    versions: Dict[str, str] = {}
    for lock in locks:
        versions.update(unlock_versions(lock) or {})
    return list(versions), versions


#: operations this process is running right now (a lock of this pid naming another op is stale)
ACTIVE_OPS: set = set()


def owner_gone(lock: dict, st: Optional[BucketState] = None) -> bool:
    """Whether a lock's holder is gone: the lease rules of ``engine.bucket_lease``, the journal
    progress read from the bucket (``st``) when the lease of another host expired."""
    def journal_mtime(op: str) -> Optional[float]:
        info = st.stat(journal_path(st.logdir, op)) if st is not None else None
        return info.mtime if info is not None else None

    return bucket_lease.holder_gone(lock, journal_mtime, ACTIVE_OPS)


def must_delete(ostore: ObjectStore, paths: List[str], versions: Optional[Dict[str, str]] = None) -> None:
    """Delete ``paths`` (at ``versions`` where given); ``BucketTxnError`` when one could not be."""
    if not paths:
        return
    failed = BucketState(ostore).delete(paths, versions=versions)
    if failed:
        key = sorted(failed)[0]
        raise BucketTxnError(Failure.STORE_ERROR, f"{key}: could not be deleted ({failed[key]})")


def must_delete_versioned(ostore: ObjectStore, path: str, version: str) -> None:
    failed = BucketState(ostore).delete([path], versions={path: version})
    if failed:
        raise BucketTxnError(Failure.STORE_ERROR, f"{path}: could not be deleted ({failed[path]})")


def delete_all(ostore: ObjectStore, paths: List[str], attempts: int = 3,
                versions: Optional[Dict[str, str]] = None) -> None:
    """Delete ``paths`` in batches; keys the store refused are retried; raises if any remain."""
    st = BucketState(ostore)
    todo = list(paths)
    failed: Dict[str, str] = {}
    for i in range(attempts):
        failed = st.delete(todo, versions=versions)
        if not failed:
            return
        todo = sorted(failed)
        time.sleep(0.2 * (2 ** i))
    raise BucketTxnError(Failure.STORE_ERROR, f"{len(todo)} key(s) could not be deleted, e.g. {todo[0]}: "
                         f"{failed[todo[0]]}")


def run_listing(ostore: ObjectStore, vault: BucketVault, run: str) -> Dict[str, ObjectInfo]:
    """One listing of the run's prefix (keys relative to the logdir), the state and vault left out."""
    pre = run_prefix(run)
    objs = BucketState.of(ostore).tree(pre.rstrip("/"))
    vault_rel = vault.root[len(ostore.root) + 1:] + "/" if vault.root.startswith(ostore.root + "/") else None
    return {k: o for k, o in objs.items()
            if not k.startswith(STATE_DIR_NAME + "/") and not (vault_rel and k.startswith(vault_rel))}


def listing_of_runs(ostore: ObjectStore, vault: BucketVault, runs: List[str], logdir_objects: int,
                    known: Optional[Mapping[str, ObjectInfo]] = None) -> Dict[str, ObjectInfo]:
    """The current objects of ``runs`` (and maybe of their neighbours), listed in the fewest
    pages. Without ``known``: one listing of the whole logdir when that takes fewer pages than
    one listing per run prefix, else one listing per run. With ``known`` (the listing the plan
    was made from) the runs are covered by folder prefixes: a folder holding several of them is
    listed once when its objects take fewer pages than listing them one by one. A batch of a
    sweep's neighbouring runs then costs a page or two per folder instead of the whole logdir's
    pages, which grow with the logdir and with the vault and state objects under it."""
    if "." in runs:
        return run_listing(ostore, vault, ".")
    # the whole logdir's listing holds what was written there since the listing counted, less
    # what was deleted: this process's backups, manifests, locks and journals in a vault inside
    # it, the runs' removed objects (``objects_now``)
    now = BucketState.of(ostore).objects_now()
    if known is None:
        if math.ceil(max(1, logdir_objects if now is None else now) / LIST_PAGE_KEYS) <= len(runs):
            return run_listing(ostore, vault, ".")
        prefixes = list(runs)
    else:
        prefixes = cover_prefixes(runs, known, logdir_objects, now)
    out: Dict[str, ObjectInfo] = {}
    for pre in prefixes:
        out.update(run_listing(ostore, vault, pre))
    return out


def cover_prefixes(runs: List[str], known: Mapping[str, ObjectInfo], logdir_objects: int,
                   now: Optional[int] = None) -> List[str]:
    """The folders (run names, their parent folders, or ``"."`` for the whole logdir) whose
    listings cover every run in ``runs`` in the fewest pages, counted from ``known``. A run's
    own prefix is always a candidate; a parent folder replaces its runs' listings when its
    objects (any run's, in ``known``) take fewer pages than they do. The whole logdir is priced
    at what its listing holds now as far as this process knows (``now``,
    ``BucketState.objects_now``: its last whole listing with the backups, manifests, locks and
    journals written in a vault inside the logdir since, less what was deleted there), else at
    ``known``'s objects (its state folder and that vault included as they were then). Every
    choice covers every run: a stale count only costs pages, never a run left out."""
    wanted = {r.strip("/") for r in runs}
    parents: Dict[str, set] = {}  # folder -> its child folders that lead to a wanted run
    for r in wanted:
        parts = r.split("/")
        for i in range(len(parts)):
            parents.setdefault("/".join(parts[:i]), set()).add("/".join(parts[:i + 1]))
    count = folder_counts(known)
    root = now if now is not None else max(logdir_objects, len(known))

    def pages(folder: str) -> int:
        return max(1, math.ceil((root if folder == "" else count.get(folder, 0)) / LIST_PAGE_KEYS))

    def best(folder: str) -> Tuple[int, List[str]]:
        if folder in wanted:  # a run is listed whole, with whatever nests under it
            return pages(folder), [folder]
        cost, chosen = 0, []
        for child in sorted(parents.get(folder, ())):
            c, ch = best(child)
            cost += c
            chosen += ch
        mine = pages(folder)
        return (mine, [folder or "."]) if mine < cost else (cost, chosen)

    return best("")[1]


_last_counts: Tuple[Optional[Tuple[int, int]], Dict[str, int]] = (None, {})


def folder_counts(known: Mapping[str, ObjectInfo]) -> Dict[str, int]:
    """Objects under each folder of a listing. A reduce asks once per batch with the same
    listing: the last counts are kept (one tuple, swapped whole), so the listing is walked once,
    not once per batch."""
    global _last_counts
    tag, count = _last_counts
    if tag != (id(known), len(known)):
        count = {}
        for key in known:
            parts = key.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                folder = "/".join(parts[:i])
                count[folder] = count.get(folder, 0) + 1
        _last_counts = ((id(known), len(known)), count)
    return count


def vault_url(ostore: ObjectStore, path: str) -> str:
    """The URL of a store path (``bucket/key``) of this logdir's store, as users name objects."""
    return f"{ostore.url.split('://', 1)[0]}://{path}"  # the scheme the user gave (gs, not gcsfs' gcs)
