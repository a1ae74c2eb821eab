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
* a put is whole (a temporary file, fsync, rename, fsync of the folder);
* an append lands whole or not at all: under the ``flock`` every appender of this tool takes
  (``trust.undo_partial_append``), a line a full disk cut short is cut back, a torn last line is
  never glued onto the next (``store.on_a_new_line``), the size ``limit`` is decided under that
  lock; fsynced unless the caller says the line may be lost to a power cut (``sync=False``: an
  in-flight ledger mark, which reads as the state before it).

The bytes are those the state-file helpers always wrote (``tests/contract/test_old_state.py``).
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator, Optional

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.trust import undo_partial_append
from tb_footprint_plugin.storage.files import append_line, atomic_write
from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.paths import UnsafePath, contained
from tb_footprint_plugin.storage.regular import NotRegularFile
from tb_footprint_plugin.storage.store import StoreFailure, check_key
from tb_footprint_plugin.storage.store_posix import PosixStore, version_of


#: the checked paths of this many keys are kept per store
_PATHS_KEPT = 64


class StateFolder(PosixStore):
    """A folder of the tool's state files as a ``Store`` (the module docstring: its ``put`` and
    ``append`` keep the state files' rules)."""

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
        """A state file written whole (``files.atomic_write``: a private temporary file, fsync, a
        stranger at the name set aside, rename, fsync of the folder). The conditions and ``mode``
        are the folder store's (``PosixStore.put``): no state file is written under them."""
        if if_absent or if_version is not None or mode is not None:
            return super().put(key, data, if_absent=if_absent, if_version=if_version, mode=mode)
        atomic_write(self.path_of(key), data)
        return self.version(key) or ""

    def append(self, key: str, data: bytes, *, limit: Optional[int] = None, sync: bool = True,
               create: bool = True) -> str:
        """``Store.append`` with the state files' rules (the module docstring). ``sync=False``: not
        fsynced (a line no step waits on). ``create=False``: the file must be there
        (``FileNotFoundError``), and something not a regular file there is refused
        (``NotRegularFile``) instead of set aside for a fresh file: a file whose first line is not
        this append's (a ledger's snapshot) is never started by it. Returns the new version, ''
        when the file was moved away right after the line landed (another appender rolled it
        over: the line is written, not to be appended again)."""
        path = self.path_of(key)
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
        processes."""
        with exclusive(self.path_of(key) + ".lock"):
            yield


__all__ = ["StateFolder"]
