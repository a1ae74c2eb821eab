"""Write-ahead journal: every destructive step is preceded by a durable record of it.

The one journal interface of both engines is ``OpJournal`` (``create`` with its first record,
``append``, ``records``, ``close``, and ``written``: what this object wrote), its record vocabulary
``Rec`` (every record type either journal writes, named once). Two implementations, chosen by
what the store declares (``journal_object.journal_class(Capabilities)``): where the store appends
durably (``append == "o_append"``: a folder), ``Journal`` here; where an append is a
conditional rewrite (a bucket), ``engine.journal_object.ObjectJournal``.

``Journal``: one append-only JSON-lines file per operation in ``<logdir>/.tb-footprint/journal/``. A
journal that still exists after its process is gone is an unfinished operation; recovery
reads it and either rolls the run back to its exact original bytes or finishes the swap
(only when verification and the start of the swap were recorded).

Per-run locks (``flock``, released by the kernel even on SIGKILL) keep two reducers off the
same run and tell recovery which journals belong to a live process. Each lock also carries a
lease (``engine.lease``: host, pid, shard, expiry, renewed while held) so workers on several
machines sharing an NFS or Lustre logdir, where ``flock`` may not hold, still keep apart.
"""
from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import stat
import threading
import time
from typing import AbstractSet, Any, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Failure, StoreError
from tb_footprint_plugin.engine import lease as leases
from tb_footprint_plugin.engine.state_store import StateFolder
from tb_footprint_plugin.storage.files import fsync_dir
from tb_footprint_plugin.storage.lock import Locked, release, try_exclusive
from tb_footprint_plugin.storage.paths import UnsafePath, is_state_name, safe_rel
from tb_footprint_plugin.storage.private import NotPrivate, ensure_private_dir
from tb_footprint_plugin.storage.regular import NotRegularFile, open_regular
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import version_of


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def is_safe_rel(rel) -> bool:
    """True when ``rel`` is a relative path that stays below its root (``paths.safe_rel``)."""
    try:
        safe_rel(rel)
    except UnsafePath:
        return False
    return True


def ensure_state_subdir(path: str) -> str:
    """``<state>/<name>`` (journal, locks) made 0700 and checked, with the state folder itself:
    a symlink or a stranger's folder in its place is set aside, never written through."""
    root = os.path.dirname(os.path.abspath(path))
    return ensure_private_dir(path, root, tighten_root=is_state_name(os.path.basename(root)))


class Rec:
    """The record vocabulary of both journals, named once: a record is a JSON object whose
    ``type`` is one of these, the first one of every journal ``BEGIN``.

    A disk's operations (``engine.transaction``, ``swap``, ``restore``, ``retire``, ``salvage``,
    ``recovery``) write one record per step: ``BACKUP`` (one per file) and ``BACKED_UP``,
    ``STAGE``/``STAGED``, ``VERIFIED``, ``SWAP`` (the commit point: from it on recovery finishes),
    ``RMDIR``, ``DISPLACED``, ``SWAPPED``, ``COMMIT``, ``ROLLBACK`` (and ``COPYING`` before a copy +
    delete swap copies a staged file to a new name: only a name so recorded can hold the swap's
    own partial copy); a retirement ``MOVE``,
    ``MOVED``, ``DELETE``. A bucket's operations record the step they stand at (the object journal
    keeps it as ``step``): ``PLANNED`` (its begin record's), ``BACKED_UP``, ``STAGED``,
    ``UPLOADED``, ``SWAPPING`` (the commit point), ``DONE``, ``ROLLING_BACK``; a restore begins at
    ``RESTORING``; ``DELETING`` is what older bucket journals called ``SWAPPING``."""

    BEGIN = "begin"
    BACKUP = "backup"
    BACKED_UP = "backed_up"
    STAGE = "stage"
    STAGED = "staged"
    VERIFIED = "verified"
    SWAP = "swap"
    RMDIR = "rmdir"
    DISPLACED = "displaced"
    SWAPPED = "swapped"
    COMMIT = "commit"
    ROLLBACK = "rollback"
    COPYING = "copying"
    MOVE = "move"
    MOVED = "moved"
    DELETE = "delete"
    PLANNED = "planned"
    RESTORING = "restoring"
    UPLOADED = "uploaded"
    SWAPPING = "swapping"
    DELETING = "deleting"
    DONE = "done"
    ROLLING_BACK = "rolling_back"


def copying_path(record: dict) -> Optional[str]:
    """The path a ``Rec.COPYING`` record names (its ``final``), or None for any other record."""
    final = record.get("final") if record.get("type") == Rec.COPYING else None
    return final if isinstance(final, str) else None


class OpJournal(abc.ABC):
    """One operation's write-ahead journal, whatever holds it: every destructive step is preceded
    by its record, made durable before ``append`` returns (``sync``), and a journal left behind
    is an unfinished operation recovery settles. ``op_id``: the operation; ``written``: every
    record this object wrote, as written (its account of the operation when the journal cannot
    be read back)."""

    op_id: str

    @property
    def written(self) -> List[dict]:
        """Every record this object wrote, as written (its account of the operation when the
        journal cannot be read back). Added to only by ``wrote``: the copying paths follow it."""
        return self._written

    @written.setter
    def written(self, records: List[dict]) -> None:
        """Take ``records`` as what this object wrote (a journal written again from another's
        records, ``reduce_journal.journal_again``): the copying paths are read from them once."""
        self._written = records
        self._copying = {p for p in map(copying_path, records) if p is not None}

    @property
    def copying_paths(self) -> AbstractSet[str]:
        """The paths this object's own ``Rec.COPYING`` records name (kept as it writes them: asking
        costs no scan of ``written``; ``placement.put_in_place`` asks it once per copy). Read only."""
        return self._copying

    def wrote(self, record: dict) -> None:
        """``record`` was written: kept in ``written`` and, a ``copying`` record, its path in
        ``copying_paths``. The implementations' ``create`` and ``append`` call it."""
        self._written.append(record)
        path = copying_path(record)
        if path is not None:
            self._copying.add(path)

    @classmethod
    @abc.abstractmethod
    def create(cls, where: Any, op_id: str, first: dict) -> "OpJournal":
        """The journal of a new operation at ``where`` (a folder or an object store's journal
        folder), holding ``first`` (its ``Rec.BEGIN`` record) from the moment it exists; fails
        when one of that operation exists already."""

    @abc.abstractmethod
    def append(self, record: dict, sync: bool = True) -> None:
        """Record one step (``record["type"]`` a ``Rec`` name), durable before returning unless
        ``sync=False`` where the store allows a deferred sync."""

    @abc.abstractmethod
    def records(self) -> List[dict]:
        """The journal's records, its begin record first."""

    @abc.abstractmethod
    def close(self, durable: bool = True) -> Any:
        """The operation is settled: remove the journal."""


class JournalGone(RuntimeError):
    """The operation's own journal is no longer at its path (removed, or its folder moved away)
    or is another file now: its records cannot be read back. ``code``: ``Failure.JOURNAL_GONE``;
    ``path``: the journal file. The operation stops; what it did is in ``Journal.written``."""

    def __init__(self, path: str, what: str, code: Failure = Failure.JOURNAL_GONE):
        super().__init__(f"{path}: the operation's journal {what}; its records cannot be read back")
        self.path = path
        self.code = code


class StateMoved(JournalGone):
    """The state folder holding the operation's journal (``<logdir>/.tb-footprint``) is no longer
    the folder the operation started with: moved away or replaced meanwhile (in a logdir other
    users may write without the sticky bit, any of them can rename it). ``code``:
    ``Failure.STATE_MOVED``; ``path``: the folder; ``now_at``: where the folder the operation
    started with is now, when found beside it (its journal and backups are there), else None."""

    def __init__(self, state: str, now_at: Optional[str]):
        RuntimeError.__init__(
            self, f"{state}: the state folder is no longer the one this operation started with (moved away or "
            "replaced meanwhile: in a logdir others may write without the sticky bit, any of them can rename it); "
            + (f"the folder it started with (its journal, and the backups it holds) is now {now_at}: move it back to {state} "
               "(once the folder there now is moved away) and run `tb-footprint recover`" if now_at else
               "the folder it started with (its journal and backups) was not found beside it"))
        self.path = state
        self.now_at = now_at
        self.code = Failure.STATE_MOVED


def _moved_to(state: str, identity: Tuple[int, int]) -> Optional[str]:
    """Where the folder of ``identity`` is now among ``state``'s neighbours (one listing; only on
    the failure path), or None."""
    parent = os.path.dirname(state)
    with contextlib.suppress(OSError):
        with os.scandir(parent) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    if entry.inode() == identity[1] and entry.is_dir(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        if (st.st_dev, st.st_ino) == identity:
                            return entry.path
    return None


class Journal(OpJournal):
    """An operation's journal file (the ``OpJournal`` of a store that appends durably).

    Written through its folder's ``state_store.StateFolder`` (the state files' rules): made by
    ``put(if_absent=True)`` holding its begin record, each later record ``append(if_version=)``
    the version this object's last write left: one file from its first record to its last (its
    ``(st_dev, st_ino)`` kept for ``records``); one gone, replaced or written by another meanwhile
    is never written nor started again (``private.NotPrivate`` or ``FileNotFoundError``: the
    operation stops and rolls back). ``may_create=False`` (a journal read back by recovery):
    appends never create it, the first one takes the file as it stands."""

    def __init__(self, path: str, *, may_create: bool = True):
        self.path = path
        self.op_id = os.path.basename(path)[: -len(".jsonl")]
        self.may_create = may_create
        self.identity: Optional[Tuple[int, int]] = None
        #: every record this object wrote, as written (a failure path's account of the operation
        #: when the file itself cannot be read back: ``JournalGone``)
        self.written = []
        #: the state folder holding the journal folder, and its ``(st_dev, st_ino)`` when this
        #: object made the journal: checked at every append (``check_state``)
        self.state = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        self.state_identity: Optional[Tuple[int, int]] = None
        #: the version this object's last write left the file at (``StateFolder.version``): the
        #: condition of its next append, so the journal is one file from its first record on
        self.version: Optional[str] = None
        self._folder: Optional[StateFolder] = None
        self._mu = threading.Lock()  # one append at a time: each one's condition is the last's version

    def folder(self) -> StateFolder:
        """The journal folder as a store of state files (made once per journal)."""
        if self._folder is None:
            self._folder = StateFolder(os.path.dirname(os.path.abspath(self.path)))
        return self._folder

    def _took(self, st: os.stat_result) -> None:
        """This object now holds the file ``st`` was taken of (its identity and version)."""
        self.identity, self.version = (st.st_dev, st.st_ino), version_of(st)

    @classmethod
    def create(cls, journal_dir: str, op_id: str, first: dict) -> "Journal":
        """The journal of a new operation, holding ``first`` (its begin record) from the moment
        it exists: written whole to a temp file, fsynced, then linked into place (fails if the
        name exists). A journal without its begin record is never seen, so recovery never has
        to guess whether one without it is an operation that did nothing."""
        ensure_state_subdir(journal_dir)
        j = cls(os.path.join(journal_dir, f"{op_id}.jsonl"))
        st_state = os.lstat(j.state)  # the folder this operation holds to (ensured ours just now)
        j.state_identity = (st_state.st_dev, st_state.st_ino)
        line = json.dumps(dict(first, t=time.time()), sort_keys=True) + "\n"
        j._put_first(line)
        j.wrote(json.loads(line))
        return j

    def _put_first(self, line: str) -> None:
        """The file made holding ``line`` (``StateFolder.put(if_absent=True)``: a temp file linked
        into place); ``FileExistsError`` if the name is a journal already."""
        try:
            self.folder().put(os.path.basename(self.path), line.encode("utf-8"), if_absent=True)
        except StoreFailure as e:
            if e.code == StoreError.ALREADY_EXISTS:
                raise FileExistsError(errno.EEXIST, "a journal of this operation exists already", self.path) from None
            raise
        self._took(os.lstat(self.path))

    def append(self, record: dict, sync: bool = True) -> None:
        """Append one record and fsync it before returning (to this journal's own file only).
        ``sync=False``: a marker no destructive step waits on (``backed_up``, ``staged``, ``verified``,
        ``swapped``, ``commit``; a batch's records but its last, synced before any of its steps:
        ``swap._journal_rmdirs``), made durable by the next record's fsync; lost to a power cut,
        recovery decides as without it, the safe direction (no ``verified`` before a ``swap`` rolls back)."""
        self.check_state()
        record = dict(record, t=time.time())
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._mu:
            if self.version is None and not self._adopt(line):
                self.wrote(record)  # the file made with this record
                return
            try:
                self.version = self.folder().append(os.path.basename(self.path), line.encode("utf-8"),
                                                    if_version=self.version, sync=sync)
            except StoreFailure as e:
                if e.code != StoreError.PRECONDITION_FAILED:
                    raise
                if not os.path.lexists(self.path):
                    raise FileNotFoundError(errno.ENOENT, "the operation's journal is gone", self.path) from None
                raise NotPrivate(self.path, "is not the file this operation created (replaced meanwhile)",
                                 "It was not written; the operation stops and is rolled back") from None
        self.wrote(record)

    def _adopt(self, line: str) -> bool:
        """Before the first append of a journal this object did not make: the file taken as it
        stands (``FileNotFoundError`` unless it may be made), or made holding ``line`` (False)."""
        try:
            self._took(os.lstat(self.path))
            return True
        except FileNotFoundError:
            if not self.may_create:
                raise
        self._put_first(line)
        return False

    def state_moved(self) -> bool:
        """Whether the state folder is no longer the one this journal was made in (one lstat)."""
        if self.state_identity is None:
            return False
        try:
            st = os.lstat(self.state)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self.state_identity or not stat.S_ISDIR(st.st_mode)

    def check_state(self) -> None:
        """``StateMoved`` when the state folder is no longer the one this journal was made in:
        nothing more is written through its path (another user's folder, or a link, may stand
        there now)."""
        if self.state_moved():
            raise StateMoved(self.state, _moved_to(self.state, self.state_identity))

    def records(self) -> List[dict]:
        """Every complete record; a torn last line (crash mid-write) is ignored. The journal of
        an operation this object made or wrote (its identity is known) must still be that file:
        gone, or another file at its path, raises ``JournalGone`` (an empty list would read as an
        operation that recorded nothing). A journal read back by recovery that is gone, a link
        or a FIFO holds no record of ours: ``[]``."""
        out = []
        if self.identity is not None:
            self.check_state()
        try:
            # a symlink or FIFO in a journal's place is never read through (``NotRegularFile``)
            raw = open_regular(self.path)
        except (OSError, NotRegularFile) as e:
            if self.identity is not None:
                raise JournalGone(self.path, "was replaced by something that is not a file"
                                  if isinstance(e, NotRegularFile) else f"is gone ({e.strerror or e})") from None
            if not isinstance(e, (FileNotFoundError, NotRegularFile)):
                raise
            return out  # a link or FIFO planted as a journal holds no record of ours
        if self.identity is not None:
            st = os.fstat(raw.fileno())
            if (st.st_dev, st.st_ino) != self.identity:
                raw.close()
                raise JournalGone(self.path, "was replaced by another file")
        try:
            with io.TextIOWrapper(raw, encoding="utf-8") as f:
                for line in f:
                    if not line.endswith("\n"):
                        break
                    try:
                        rec = json.loads(line)
                    except (ValueError, RecursionError):
                        break
                    if not isinstance(rec, dict):
                        break  # not a record this tool writes; trust.check_journal judges the rest
                    out.append(rec)
        finally:
            raw.close()
        return out

    def close(self, durable: bool = True) -> None:
        """The operation is fully settled: remove the journal. ``durable=False`` (a committed
        reduction whose manifest is durable): the removal is not fsynced; a journal a power cut
        brings back is settled again by recovery, which finds the manifest and changes nothing.
        A state folder moved away meanwhile: nothing is removed through its path (the journal
        stays in the moved folder; recovery settles it there)."""
        if self.state_moved():
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        if durable:
            fsync_dir(os.path.dirname(self.path))


def pending_journals(journal_dir: str) -> Iterator[Journal]:
    """Journals left behind (unfinished operations), oldest first: only from a real folder of
    ours (a symlinked or planted journal folder is never listed, let alone replayed)."""
    try:
        st = os.lstat(journal_dir)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return
    for name in sorted(os.listdir(journal_dir)):
        if name.endswith(".jsonl") and not name.startswith("."):
            yield Journal(os.path.join(journal_dir, name), may_create=False)


class RunLocked(leases.LockRefused):
    """Another process holds this run's lock (``Skip.LOCKED``; ``holder`` named where a live
    lease says who)."""


class RunLock(leases.RunLease):
    """Exclusive, non-blocking lock on one run of one logdir: a ``flock`` plus a lease (the
    folder implementation of ``engine.lease.RunLease``)."""

    def __init__(self, lock_dir: str, run: str):
        self.lock_dir = lock_dir
        self.run = run
        digest = hashlib.sha1(run.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        self.path = os.path.join(lock_dir, f"run-{digest}.lock")
        self.lease_path = os.path.join(lock_dir, f"run-{digest}.lease")
        self.journal_dir = os.path.join(os.path.dirname(lock_dir), "journal")
        self.fd: Optional[int] = None
        self.dir_fd: Optional[int] = None  # the run folder's own flock (see ``_lock_run_dir``)

    def live_holder(self) -> Optional[str]:
        """Who holds this run by a live lease (``engine.lease`` rules), without taking anything:
        ``"HOST pid PID, shard I/N, lease until HH:MM:SS"``, or None."""
        held = leases.read_lease(self.lease_path)
        if not leases.live_holder(held, self.journal_dir, self.run):
            return None
        return (f"{held['host']} pid {held['pid']}"
                + (f", shard {held['shard']}" if isinstance(held.get("shard"), str) else "")
                + f", lease until {leases.until_text(leases.effective_expiry(held, time.time()))}")

    def acquire(self) -> "RunLock":
        ensure_state_subdir(self.lock_dir)
        try:
            self.fd = try_exclusive(self.path)
        except Locked:
            # its holder's lease says who, where it is live (read only: nothing is taken)
            holder = self.live_holder()
            raise RunLocked(f"run {self.run!r} is being changed by another process"
                            + (f" ({holder})" if holder else ""), holder) from None
        try:
            self._lock_run_dir()
            holder = self.live_holder()
            if holder:
                raise RunLocked(f"run {self.run!r} is being changed by another process ({holder})", holder)
            if not leases.take(self.lease_path, self.run):
                raise RunLocked(f"run {self.run!r} was taken over by another process at the same moment")
        except BaseException:
            self._unlock_run_dir()
            release(self.fd)
            self.fd = None
            raise
        return self

    def _lock_run_dir(self) -> None:
        """``flock`` the run's own folder too: the lock every user of a shared logdir sees. Each
        user whose ``.tb-footprint`` is not theirs keeps state (and lock files) in a folder of
        their own (``.tb-footprint-u<uid>``), so the state lock alone would let two users change
        one run at once. Held until ``release``; ``RunLocked`` when someone else holds it. A run
        folder that is missing (retired), a symlink, unreadable, or on a filesystem without
        ``flock`` on folders has only the state lock (nobody can change it through us there)."""
        state = os.path.dirname(os.path.abspath(self.lock_dir))
        if not is_state_name(os.path.basename(state)) or not is_safe_rel(self.run):
            return
        path = os.path.join(os.path.dirname(state), self.run)
        try:
            fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLocked(f"run {self.run!r} is being changed by another process (its folder is locked, "
                                "perhaps by another user of this logdir)") from None
            return  # no flock on folders here (e.g. some network filesystems): the lease still holds
        self.dir_fd = fd

    def _unlock_run_dir(self) -> None:
        if self.dir_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.dir_fd, fcntl.LOCK_UN)
            os.close(self.dir_fd)
            self.dir_fd = None

    def still_held(self) -> bool:
        """Whether this object holds the run: its ``flock`` taken and its lease not found taken
        over by a renewal."""
        return self.fd is not None and leases.holds(self.lease_path)

    def release(self) -> None:
        """Drop the lease (if still ours) and the ``flock``s."""
        if self.fd is not None:
            try:
                leases.drop(self.lease_path)
            finally:
                self._unlock_run_dir()
                release(self.fd)
                self.fd = None
