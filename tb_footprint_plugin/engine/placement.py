"""Put these bytes at this path: the one rule every verb follows when a verified temporary
takes a file's place in a run (issue #26 item 2).

The reduce's swap (``swap.copy_then_delete``), the put-back of a rollback or a restore
(``swap.put_back``), the records a put-back sets beside an original (``salvage``:
``<file>.salvaged-NNN``) and a retired run's files put back (``retire_tree.put_back``) all place
their bytes through ``put_in_place``, as the folder's swap strategy says
(``swap_strategy.swap_strategy``):

- where the folder renames atomically, the temporary is renamed onto the path: one step, a kill
  leaves one or the other;
- where it does not, a ``copying`` record naming the path is journaled first, then the temporary
  is copied to the path (``copy_over``: a new file made exclusively, fsynced, hash-checked, with
  the temporary's mode, mtime and owner) and deleted. A kill within the copy leaves the beginning
  of the bytes at the path; only a path a ``copying`` record names may be taken for such a
  partial copy (``partial_copy`` against the temporary, ``partial_put_back`` against the vault's
  copy, ``copies_begun`` reads the records), and the next start removes it and copies again. A
  kill after the copy's last byte and before its mode, mtime and owner leaves the whole bytes at
  the path with the new file's (0600, the time of the kill, this process's owner): where a
  ``copying`` record names the path and its bytes are the recorded ones, the next start gives the
  file its recorded mode, mtime and owner (``finish_copied``) before it counts it as in place.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from typing import BinaryIO, Callable, Iterable, Optional, Tuple

from tb_footprint_plugin.engine.journal import OpJournal, Rec
from tb_footprint_plugin.engine.swap_strategy import SwapStrategy
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import CHUNK, copy_new, finish_new_file, matches, sha256_file
from tb_footprint_plugin.storage.regular import open_regular


def prefix_sha256(f: BinaryIO, size: int) -> Optional[str]:
    """sha256 of the next ``size`` bytes read from ``f``; None when it holds fewer."""
    h, left = hashlib.sha256(), size
    while left > 0:
        b = f.read(min(CHUNK, left))
        if not b:
            return None
        h.update(b)
        left -= len(b)
    return h.hexdigest()


def starts_with(path: str, size: int, sha: str) -> bool:
    """Whether the regular file ``path`` holds at least ``size`` bytes and its first ``size``
    bytes have sha256 ``sha``: the recorded file, perhaps with records appended after it."""
    try:
        with open_regular(path) as f:
            return prefix_sha256(f, size) == sha
    except OSError:
        return False


def copy_over(tmp: str, final: str, sha: str, size: int, sparse: bool = False, new_name: bool = False) -> None:
    """``tmp`` (bytes of digest ``sha``, ``size`` long) put at ``final`` by a copy, then deleted:
    the one copy + delete of the swap and of every put-back (``put_in_place``). Unless ``final``
    holds those bytes already, whatever stands there is unlinked (the caller journaled and, where
    it is no one's output, kept it first; with ``new_name`` nothing is: the name was found free,
    and a file made there meanwhile fails the copy, ``FileExistsError``) and a new file is made
    exclusively with ``tmp``'s mode, mtime and owner, fsynced and hash-checked: an inode a second
    name shares (a backup's hard link) never sees a byte change. ``sparse``: zero blocks stay
    holes (a put-back allocates what the original did)."""
    if not matches(final, sha, size):
        if not new_name:
            with contextlib.suppress(FileNotFoundError):
                fsops.unlink(final)
        st = os.lstat(tmp)
        copy_new(tmp, final, sha, mode=stat.S_IMODE(st.st_mode), mtime_ns=st.st_mtime_ns, exclusive=True,
                 sparse=sparse, owner=(st.st_uid, st.st_gid))
    fsops.unlink(tmp)


def finish_copied(path: str, mode: Optional[int] = None, mtime_ns: Optional[int] = None,
                  mtime: Optional[float] = None, owner: Optional[Tuple[int, int]] = None) -> None:
    """Give the file at ``path`` the ``mode``, modification time and (when root) ``owner`` that
    ``copy_over``'s copy sets last (``files.finish_new_file``): a kill after its last byte and
    before them leaves the recorded bytes with a new file's mode, time and owner, which a content
    check alone takes for the put-back done (rule 3: mode and mtime are given back too). Asked
    only where a ``copying`` record names the path and the bytes there are the recorded ones;
    through an fd opened without following a link (``open_regular``)."""
    with open_regular(path) as f:
        finish_new_file(f, mode, mtime_ns, mtime, owner)


def put_in_place(strategy: SwapStrategy, journal: Optional[OpJournal], rec: dict,
                 new_name: bool = False) -> Callable[[str, str], None]:
    """How a verified temporary of ``rec``'s bytes (``path`` logdir-relative, ``sha256``,
    ``size``) takes its path, as the folder's swap strategy says: renamed onto it where the folder
    renames atomically; else a ``copying`` record naming the path is journaled (only a path so
    recorded can hold the operation's own partial copy) and the temporary is copied over it, then
    deleted (``copy_over``, holes kept). ``new_name``: a name found free (a salvage file), never
    one whose standing file may be unlinked."""
    if strategy.renames:
        return fsops.replace

    def copy_in(tmp: str, dest: str) -> None:
        if journal is not None:
            journal.append({"type": Rec.COPYING, "final": rec["path"]})
        copy_over(tmp, dest, rec["sha256"], rec["size"], sparse=True, new_name=new_name)

    return copy_in


def copies_begun(records: Iterable[dict]) -> set:
    """The paths a copy + delete began copying bytes to (the journal's ``copying`` records)."""
    return {r["final"] for r in records if r.get("type") == Rec.COPYING and isinstance(r.get("final"), str)}


def _shorter_file(path: str, size: int) -> Optional[Tuple[str, int]]:
    """(sha256, length) of ``path`` when it is a regular file shorter than ``size``, else None."""
    try:
        st = fsops.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size >= size:
            return None
        return sha256_file(path), st.st_size
    except OSError:
        return None


def partial_copy(path: str, tmp: str, s: dict) -> bool:
    """Whether ``path`` is what a copy + delete killed within its copy of the temporary ``tmp``
    (``s``: its ``sha256`` and ``size``) left: a regular file shorter than those bytes holding
    their beginning, while ``tmp`` still holds them whole (so every byte of it exists there).
    Asked only of a path a ``copying`` record names: a rename leaves no partial file."""
    got = _shorter_file(path, s["size"])
    return got is not None and matches(tmp, s["sha256"], s["size"]) and starts_with(tmp, got[1], got[0])


def partial_put_back(vault, path: str, rec: dict) -> bool:
    """Whether ``path`` is what a copying put-back of ``rec``'s original, killed within its copy,
    left: a regular file shorter than the original holding its beginning, as the vault's copy
    says (``vault.open_blob``: whatever form it is in; the put-back's temporary may be gone).
    Every byte of such a file is in the original: asked only of a path a ``copying`` record names."""
    got = _shorter_file(path, rec["size"])
    if got is None:
        return False
    try:
        with vault.open_blob(rec["sha256"]) as f:
            return prefix_sha256(f, got[1]) == got[0]
    except OSError:
        return False


__all__ = ["prefix_sha256", "starts_with", "copy_over", "finish_copied", "put_in_place", "copies_begun", "partial_copy",
           "partial_put_back"]
