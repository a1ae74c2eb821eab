"""The tool's state files on a disk as a ``Store``: a folder whose writes keep the state files' rules.

``StateFolder`` is a ``PosixStore`` (its reads, listings, stats, replace and delete are the
folder store's: a symlink or FIFO is refused, never followed) whose ``put`` and ``append`` are
those of the tool's state files (``storage.files``), the rules written once here for every state
file written through a store — the change log (``engine.history``) and a batch's folder ledger
(``engine.ledger_file``):

* only into a folder of ours (``files.atomic_write`` / ``private.open_private``: a folder another
  user controls is refused, ``private.NotPrivate``), each file private (0600);
* a symlink, FIFO, folder or another user's file planted under the name is set aside (the name
  itself, never its target; kept for inspection) and a fresh file written;
* a put is whole (a temporary file, fsync, rename, fsync of the folder), its conditions kept
  under the same rules: ``if_absent`` a link into place (fails when the name is a file of ours),
  ``if_version`` the version ``version`` reports, compared under the file's ``flock``;
* an append lands whole or not at all: under the ``flock`` every appender of this tool takes
  (``trust.undo_partial_append``), a line a full disk cut short is cut back, a torn last line is
  never glued onto the next (``store.on_a_new_line``), the size ``limit`` is decided under that
  lock; fsynced unless the caller says the line may be lost to a power cut (``sync=False``: an
  in-flight ledger mark, which reads as the state before it).

The bytes are those the state-file helpers always wrote (``tests/contract/test_old_state.py``).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from typing import Iterator, Optional

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.trust import cut_back_to, undo_partial_append
from tb_footprint_plugin.storage.files import append_line, atomic_write, fsync_dir, private_folder
from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.paths import UnsafePath, contained, is_state_name
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.private import (NotPrivate, ensure_private_dir, open_private, set_aside_at,
                                                 set_aside_stranger, why_not_ours)
from tb_footprint_plugin.storage.regular import NotRegularFile
from tb_footprint_plugin.storage.store import Store, StoreFailure, Wrapper, check_key, on_a_new_line
from tb_footprint_plugin.storage.store_posix import PosixStore, version_of


#: the checked paths of this many keys are kept per store
_PATHS_KEPT = 64
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class StateFolder(PosixStore):
    """A folder of the tool's state files as a ``Store`` (the module docstring: its ``put`` and
    ``append`` keep the state files' rules). ``create``: a missing folder is made as every state
    folder is (``private.ensure_private_dir``: 0700, its parents too; a state folder's own name,
    ``.tb-footprint…``, checked ours and tightened)."""

    def __init__(self, root: str, *, create: bool = False):
        if create and not os.path.lexists(root):
            self.make_root(root)
        super().__init__(root)

    @staticmethod
    def make_root(root: str) -> None:
        """Make the folder ``root`` of state files (0700), or check it is ours (``NotPrivate``)."""
        root = os.path.abspath(root)
        ensure_private_dir(root, tighten_root=is_state_name(os.path.basename(root)))

    def path_of(self, key: str) -> str:
        """The path of ``key`` in the folder (``UNSAFE_KEY`` for one leading out of it)."""
        paths = self.__dict__.setdefault("_paths", {})
        path = paths.get(key)
        if path is None:
            # checked once per key: a ledger's marks write one key thousands of times a batch
            try:
                path = contained(self.root, check_key(key))
            except UnsafePath as e:
                raise StoreFailure(StoreError.UNSAFE_KEY, key, str(e)) from None
            if len(paths) >= _PATHS_KEPT:
                paths.clear()
            paths[key] = path
        return path

    def version(self, key: str) -> Optional[str]:
        """``key``'s version (``store_posix.version_of``: inode, size, mtime) from one ``lstat`` of
        its name (``stat`` walks the folder first), None when there is nothing there."""
        try:
            return version_of(os.lstat(self.path_of(key)))
        except OSError:
            return None

    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_version: Optional[str] = None,
            mode: Optional[int] = None) -> str:
        """A state file written whole: a private temporary file in a folder checked ours, fsynced,
        then put in place and the folder fsynced; a stranger at the name (a symlink, FIFO, folder,
        another user's file) set aside, kept. Unconditional: renamed over (``files.atomic_write``).
        ``if_absent``: linked into place, ``ALREADY_EXISTS`` when a state file of ours is there
        (``Journal.create``'s way: the name never shows a partial file). ``if_version``: renamed
        over only while the file is at that version (``version``: inode, size, mtime), compared
        under the ``flock`` every appender takes on the file; ``PRECONDITION_FAILED`` otherwise (a
        stranger there is set aside and the condition fails). ``mode``: its owner bits only (a
        state file is never opened to others)."""
        path = self.path_of(key)
        if not if_absent and if_version is None and mode is None:
            atomic_write(path, data)
            return self.version(key) or ""
        folder = os.path.dirname(path)
        private_folder(folder)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)  # 0600, O_EXCL
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if mode is not None:
                    os.fchmod(fd, stat.S_IMODE(mode) & 0o700)
                os.fsync(fd)
            finally:
                os.close(fd)
            if if_version is not None:
                with self._at_version(path, key, if_version):
                    os.replace(tmp, path)
            else:
                set_aside_stranger(path)  # a planted link would otherwise stand for the file
                if if_absent:
                    try:
                        os.link(tmp, path)
                    except FileExistsError:
                        raise StoreFailure(StoreError.ALREADY_EXISTS, key, "already exists; not written") from None
                else:
                    os.replace(tmp, path)
            fsync_dir(folder)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # the temporary's name after a link (gone after a rename)
        return self.version(key) or ""

    @contextlib.contextmanager
    def _at_version(self, path: str, key: str, version: str) -> Iterator[None]:
        """Hold the ``flock`` of the state file at ``path`` (the one ``append`` takes) while it is
        still at ``version``; ``PRECONDITION_FAILED`` when it is not, is gone or is no state file
        of ours (``private.open_private``: such a stranger is set aside)."""
        try:
            fd = open_private(path, os.O_RDONLY)
        except FileNotFoundError:
            raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "is gone; not written") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.lstat(path)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino) or version_of(now) != version:
                raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "changed since it was read; not written")
            yield
        finally:
            os.close(fd)  # releases the flock

    def append(self, key: str, data: bytes, *, limit: Optional[int] = None, sync: bool = True,
               create: bool = True, if_version: Optional[str] = None) -> str:
        """``Store.append`` with the state files' rules (the module docstring). ``sync=False``: not
        fsynced (a line no step waits on). ``create=False``: the file must be there
        (``FileNotFoundError``), and something not a regular file there is refused
        (``NotRegularFile``) instead of set aside for a fresh file: a file whose first line is not
        this append's (a ledger's snapshot) is never started by it. Returns the new version, ''
        when the file was moved away right after the line landed (another appender rolled it
        over: the line is written, not to be appended again).

        ``if_version``: appended only while the file is at that version (``version``: the one
        this writer's last write returned), checked under the file's ``flock`` with the line's
        write (``PRECONDITION_FAILED`` otherwise, nothing written; never a file made): a journal's
        appends go to the file it made only, never to one put in its place. A line the disk took
        only part of is cut off again and the file's time set back: a failed append leaves the
        file at its version."""
        path = self.path_of(key)
        if if_version is not None:
            return self._append_at(path, key, data, if_version, limit, sync)
        line = data.decode("utf-8")
        try:
            with undo_partial_append(path, line):  # a full disk's torn line never glues onto the next entry
                append_line(path, line, limit=limit, sync=sync, create=create)
        except StoreFailure as e:
            if e.code != StoreError.TOO_LARGE:
                raise
            raise StoreFailure(StoreError.TOO_LARGE, key, f"an append past {limit} bytes: the file is full") from None
        except NotRegularFile:
            if not create:
                raise
            # what ``append_line`` could not set aside itself (a folder): renamed aside, kept
            self.set_aside(key, f"refused-{int(time.time())}")
            append_line(path, line, sync=sync)
        try:
            return version_of(os.lstat(path))
        except FileNotFoundError:
            return ""

    def _append_at(self, path: str, key: str, data: bytes, version: str, limit: Optional[int], sync: bool) -> str:
        """``append(if_version=version)``: one open of the file through its folder's descriptor
        (checked ours), its ``flock``, the version compared with its ``fstat``, the line written
        (after a newline when the last line has none), fsynced when ``sync``."""
        fsops.op()  # the open
        dfd = os.open(os.path.dirname(path), os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        try:
            why = why_not_ours(os.fstat(dfd))
            if why:
                raise NotPrivate(os.path.dirname(path), why)
            name = os.path.basename(path)
            try:
                fd = os.open(name, os.O_RDWR | os.O_APPEND | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
            except FileNotFoundError:
                raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "is gone; not written") from None
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    raise
                set_aside_at(dfd, name)  # a symlink, FIFO or folder at the name: kept aside
                raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "is not the state file; not written") from None
            try:
                # a regular file ignores O_NONBLOCK: only the open needed it (a FIFO never hangs it)
                with contextlib.suppress(OSError):  # a filesystem without locks (ENOLCK) still appends
                    fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                if why_not_ours(st, want_dir=False) is not None:
                    set_aside_at(dfd, name)  # another user's file, say: kept aside
                    raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "is not a state file of ours; not written")
            except BaseException:
                os.close(fd)
                raise
        finally:
            os.close(dfd)
        try:
            if version_of(st) != version:
                raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "changed since it was written; not written")
            if limit is not None and st.st_size and st.st_size + len(data) + 1 > limit:
                raise StoreFailure(StoreError.TOO_LARGE, key, f"an append past {limit} bytes: the file is full")
            view = memoryview(on_a_new_line(os.pread(fd, 1, st.st_size - 1) if st.st_size else b"", data))
            try:
                while view:
                    view = view[os.write(fd, view):]
                if sync:
                    os.fsync(fd)
            except OSError:
                # only this append wrote past the size checked under the flock: cut back, and its
                # time set back, so the file is at its version again
                with contextlib.suppress(OSError):
                    cut_back_to(fd, st)
                raise
            return version_of(os.fstat(fd))
        finally:
            os.close(fd)  # releases the flock

    def set_aside(self, key: str, tag: str) -> str:
        """Rename whatever is at ``key`` (the name itself, never a link's target) to
        ``<key>.<tag>``, kept for inspection; returns that path. Raises ``OSError``."""
        path = self.path_of(key)
        aside = f"{path}.{tag}"
        os.replace(path, aside)
        return aside

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Hold the exclusive ``flock`` of ``<key>.lock`` (a state file of its own: never through a
        link) for the ``with`` block: the lock the writers of one state file share across
        processes. A folder gone meanwhile is made again first (``make_root``)."""
        path = self.path_of(key) + ".lock"
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(exclusive(path))
            except NotPrivate:
                if os.path.lexists(self.root):
                    raise
                # the folder went since this store was made (a state folder removed mid-batch):
                # made again as at the start; ``exclusive`` checks it ours
                self.make_root(self.root)
                stack.enter_context(exclusive(path))
            yield


def state_folder_of(store: Store) -> Store:
    """``store`` as a store of state files: itself when it is a ``StateFolder`` (or wrappers around
    one); for another folder store, the same wrappers (sharing their counters and token buckets:
    what goes through it is counted and throttled as through ``store``) around a ``StateFolder``
    of its root. A ledger or a change log given a store keeps the state files' rules this way."""
    chain = []
    inner = store
    while isinstance(inner, Wrapper):
        chain.append(inner)
        inner = inner.inner
    if isinstance(inner, StateFolder):
        return store
    if not isinstance(inner, PosixStore):
        raise StoreFailure(StoreError.NOT_SUPPORTED, inner.location, "not a folder: no state files there")
    out: Store = StateFolder(inner.root)
    for w in reversed(chain):
        # a wrapper's own state shared (its ``__getattr__`` forwards to ``inner``: no copy.copy)
        again = object.__new__(type(w))
        again.__dict__.update(w.__dict__)
        again.inner = out
        out = again
    return out


__all__ = ["StateFolder", "state_folder_of"]
