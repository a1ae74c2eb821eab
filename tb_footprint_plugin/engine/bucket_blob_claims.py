"""Which claims one command's operations make in a bucket logdir's local vault of blobs
(``engine.bucket_blobs``), noted in memory for the command's end (``engine.bucket_blob_release``):
a reduction or retirement rolled back releases the claims it made anew, and only those (review R9
F8's follow-up). Nothing here is written anywhere: a command killed leaves at worst orphans."""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Collection, Dict, Iterator, Optional, Set

from tb_footprint_plugin.engine.bucket_state import BlobVault, BucketVault


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


__all__ = ["Claims", "noting", "noting_in"]
