"""Which claims one command's operations make in a bucket logdir's local vault of blobs
(``engine.bucket_blobs``), noted in memory for the command's end (``engine.bucket_blob_release``):
a reduction or retirement rolled back releases the claims it made anew, and only those (review R9
F8's follow-up).

A command killed never reaches its end: its operations are rolled back by the next start, and the
claims their adds made anew stayed orphans, counted and never freed (review R25 L2). So each claim
made anew is also noted in the folder itself, before the blob is handed to the add that lists it
(``FRESH``: one file per operation, a line per sha256; the folder is local and ours, the bucket is
not, so no bucket writer can name a claim there): the rollback of that operation by a later start
releases those claims by the rule of the command's end (``bucket_blob_release.release_fresh``).
A line is written before the claim can be listed, never after: a record may miss a claim (an
orphan, as before), never name one its operation did not make anew. Records go at the command's
end and once a start settled the operation."""
from __future__ import annotations

import contextlib
import os
import stat
import threading
import weakref
from typing import Collection, Dict, Iterator, Optional, Set

from tb_footprint_plugin.engine.bucket_state import BlobVault, BucketVault
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256

#: the folder (in the blob folder) of the claims each operation made anew, one file per op id
FRESH = "fresh"
#: the most lines a record is read for (one per blob an operation added; a bigger file is not ours)
FRESH_LIMIT = 10_000_000


def fresh_path(bv: BlobVault, op: str) -> Optional[str]:
    """The record of operation ``op``'s new claims in ``bv``'s folder; None for a name that is no op id."""
    return os.path.join(bv.folder, FRESH, op) if is_op_id(op) else None


class FreshNotes:
    """The records one add writes (``bucket_blobs.backup_entries``): a line per claim made anew,
    written (to the kernel: a process killed keeps it) before the blob is handed to the add; made
    durable (``fsync``) once the add is done. A record that cannot be written leaves its claims
    unrecorded: orphans if killed, as before; never a failed backup."""

    def __init__(self, bv: BlobVault) -> None:
        self.bv = bv
        self.fds: Dict[str, int] = {}

    def note(self, op: str, sha: str) -> None:
        """Operation ``op`` is about to claim ``sha`` anew."""
        path = fresh_path(self.bv, op)
        if path is None or not is_sha256(sha):
            return
        try:
            fd = self.fds.get(op)
            if fd is None:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                fd = self.fds[op] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                                            | getattr(os, "O_CLOEXEC", 0), 0o600)
            os.write(fd, (sha + "\n").encode("ascii"))
        except OSError:
            pass  # unrecorded: at worst an orphan, as before the record

    def close(self) -> None:
        """Each record made durable and closed."""
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.fsync(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def fresh_of(bv: BlobVault, op: str) -> Set[str]:
    """The claims operation ``op`` recorded as made anew in ``bv``'s folder (``FreshNotes``): only
    from a regular file of ours that no link reaches, only lines that are sha256 digests; empty
    when there is none."""
    path = fresh_path(bv, op)
    if path is None:
        return set()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return set()
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > 65 * FRESH_LIMIT:
            return set()
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    except OSError:
        return set()
    finally:
        os.close(fd)
    return {w for w in data.decode("ascii", "replace").split("\n") if is_sha256(w)}


def drop_fresh(bv: Optional[BlobVault], ops: Collection[str]) -> None:
    """The records of ``ops`` removed (their claims committed, released, or left as orphans)."""
    if bv is None:
        return
    for op in ops:
        path = fresh_path(bv, str(op))
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)


class Claims:
    """What one command's operations claimed in a vault of blobs while ``noting``: per operation
    id, the digests its backups claimed that this logdir had not claimed before (``new``) and every
    digest its backups hold (``used``). In memory only: a command killed before its end leaves at
    worst orphans, never a release of a claim it did not make."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.new: Dict[str, Set[str]] = {}
        self.used: Dict[str, Set[str]] = {}

    def note(self, op: str, sha: str, new: bool) -> None:
        """Operation ``op``'s backup holds ``sha``; ``new``: this logdir claimed it only now."""
        with self._lock:
            self.used.setdefault(op, set()).add(sha)
            if new:
                self.new.setdefault(op, set()).add(sha)

    def to_release(self, ops: Collection[str]) -> Set[str]:
        """The digests ``ops`` claimed anew that no other operation of the command holds."""
        with self._lock:
            mine = set().union(*(self.new.get(o, ()) for o in ops))
            others = set().union(*(u for o, u in self.used.items() if o not in ops))
        return mine - others

    def drop(self, ops: Collection[str]) -> None:
        """Forget ``ops`` (released, or left as orphans: asked once)."""
        with self._lock:
            for o in ops:
                self.new.pop(o, None)
                self.used.pop(o, None)


#: the ``Claims`` each vault of blobs notes into (``noting``), read by ``backup_entries``
_NOTING: "weakref.WeakKeyDictionary[BlobVault, Claims]" = weakref.WeakKeyDictionary()
_NOTING_LOCK = threading.Lock()


def noting_in(bv: BlobVault) -> Optional[Claims]:
    """The ``Claims`` a ``noting`` block notes ``bv``'s claims into, None outside one."""
    with _NOTING_LOCK:
        return _NOTING.get(bv)


@contextlib.contextmanager
def noting(vault: BucketVault) -> Iterator[Claims]:
    """Note, for the ``with`` block (one command: a reduce, a retirement), which claims the
    operations' backups make in the vault of blobs (``Claims``), for ``release_rolled_back`` at
    the block's end. Nested: the outer block's ``Claims``."""
    bv = vault.blobs
    if bv is None:
        yield Claims()
        return
    with _NOTING_LOCK:
        outer = _NOTING.get(bv)
        claims = outer if outer is not None else _NOTING.setdefault(bv, Claims())
    try:
        yield claims
    finally:
        if outer is None:
            with _NOTING_LOCK:
                _NOTING.pop(bv, None)


__all__ = ["FRESH", "Claims", "FreshNotes", "drop_fresh", "fresh_of", "fresh_path", "noting", "noting_in"]
