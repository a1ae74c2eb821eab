"""A restore's check of its big remote backups, made one download with the copy (issue #27).

A restore checks every backup of a run before it touches anything. A remote blob a check reads
whole is kept in memory for the copy that follows while it fits in ``remote_vault.STAGE_BYTES``;
a larger one would be downloaded twice, once to check it and once to copy it. Such a blob is
checked instead, under the run's lock and after the restore's journal (whose ``tmp_token``
names its temporaries), by streaming it into its target's temporary — made where nothing
stands, with ``O_EXCL|O_NOFOLLOW``, beside the target (or in the nearest folder standing when
the reduce removed the target's), hashed and counted as written, fsynced — and the put-back
renames that verified temporary (``PreparedVault``) with the mode and time the put-back gives.
The temporaries are not the user's files: until every backup verified (the journal's
``verified`` record) nothing of the run is touched, and a failed check removes exactly the
temporaries it made and gives their folders back their times. The disk room it needs is the
files it puts back, as before. ``remove_restore_temps`` is what a restore's next attempt (or the
next start) removes of a killed one: exactly the names its journaled token gives.
"""
from __future__ import annotations

import contextlib
import errno
import os
from typing import Callable, Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.engine.context import CancelToken, Context, TransactionError, no_symlink
from tb_footprint_plugin.engine.swap import remove_put_back_temps
from tb_footprint_plugin.engine.vault import Vault, VaultError, Within, restore_folder, restore_tmp_path
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import (check_still, create_exclusive, finish_new_file, fsync_dir,
                                               hash_and_count, unlink_if_same)
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.sparse import SparseWriter
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.regular import open_regular


def checked_in_place(vault: Vault, f: dict) -> bool:
    """Whether ``f``'s backup is a remote one a check would download without keeping it for
    the copy (``remote_vault.read_twice``): its check streams it into its target's temporary."""
    sha = f.get("sha256")
    return is_sha256(sha) and vault.blob_form(sha) == "remote" and remote_vault.read_twice(vault.root, sha)


class Prepared:
    """The temporaries a restore's check streamed its big remote backups into, each verified
    (sha256 and size) and fsynced, by digest: ``(path, fstat when verified)``. Only these are
    renamed into place (``PreparedVault``) or removed (``abandon``, ``discard``): a name another
    process put there since is left alone."""

    def __init__(self) -> None:
        self.temps: Dict[str, Tuple[str, os.stat_result]] = {}
        #: folder -> its lstat before this restore's first temporary there (its times put back
        #: when the restore is abandoned: nothing of the run's changed, its folders' times included)
        self.folders: Dict[str, os.stat_result] = {}

    def paths(self) -> set:
        """The temporaries' paths."""
        return {p for p, _st in self.temps.values()}

    def holds(self, sha: str) -> bool:
        """Whether a verified temporary of ``sha`` waits for its put-back."""
        return sha in self.temps

    def put(self, sha: str, dest: str, mode: Optional[int], mtime: Optional[float],
            mtime_ns: Optional[int], owner: Optional[Tuple[int, int]] = None,
            place: Optional[Callable[[str, str], None]] = None, within: Optional[Within] = None) -> bool:
        """Put ``sha``'s verified temporary at ``dest`` with ``mode``, the modification time and
        (when root) ``owner`` set through its fd first; True when done, False when there is none (or ``dest`` is on
        another filesystem: the temporary is removed and the caller copies as without one).
        ``place(tmp, dest)``: how it takes ``dest``'s place, as the folder's swap strategy says
        (``placement.put_in_place``), a rename by default. ``within``: (the logdir's store,
        ``dest``'s key): a folder of ``dest`` gone since is made again by that store's walk that
        follows no link (``vault_blobs.restore_folder``; ``StoreFailure`` naming a link on the way,
        the temporary removed). ``VaultError`` when the temporary is no longer the file verified."""
        got = self.temps.pop(sha, None)
        if got is None:
            return False
        tmp, made = got
        try:
            with open_regular(tmp) as f:  # never through a link; its fd is the file renamed
                st = os.fstat(f.fileno())
                if (st.st_dev, st.st_ino, st.st_size) != (made.st_dev, made.st_ino, made.st_size):
                    raise VaultError(errno.EIO, f"{tmp}: changed since its backup was verified; not used")
                ident = finish_new_file(f, mode, mtime_ns, mtime, owner)
            check_still(tmp, ident)
            with restore_folder(dest, within) as dfd:  # as ``Vault.restore_blob``: a folder gone since made again
                if place is not None:
                    place(tmp, dest)
                else:
                    fsops.replace(tmp, dest, dst_dir_fd=dfd)
                os.fsync(dfd)
        except OSError as e:
            if e.errno != errno.EXDEV:
                with contextlib.suppress(OSError):
                    unlink_if_same(tmp, made)
                raise
            with contextlib.suppress(OSError):
                unlink_if_same(tmp, made)
            return False
        if os.path.dirname(tmp) != os.path.dirname(dest):
            fsync_dir(os.path.dirname(tmp))
        return True

    def discard(self) -> List[str]:
        """Remove the temporaries no put-back took; their paths."""
        gone = []
        for tmp, made in self.temps.values():
            with contextlib.suppress(OSError):
                if unlink_if_same(tmp, made):
                    gone.append(tmp)
        self.temps.clear()
        return gone

    def abandon(self) -> None:
        """The restore stops before anything was put back: its temporaries go, and the folders
        they stood in get back the times they had (still the same folders)."""
        self.discard()
        for folder, was in self.folders.items():
            with contextlib.suppress(OSError):
                st = os.lstat(folder)
                if (st.st_dev, st.st_ino) == (was.st_dev, was.st_ino):
                    os.utime(folder, ns=(was.st_atime_ns, was.st_mtime_ns), follow_symlinks=False)
        self.folders.clear()


class PreparedVault(Vault):
    """The restore's vault as its put-back sees it: a backup its check streamed into a verified
    temporary (``Prepared``) is that temporary, renamed into place, not a second download."""

    def __init__(self, root: str, prepared: Prepared):
        super().__init__(root)
        self.prepared = prepared

    def check_blob(self, sha: str) -> bool:
        """As ``Vault.check_blob``; a backup read back whole into its temporary just now is good."""
        return self.prepared.holds(sha) or super().check_blob(sha)

    def restore_blob(self, sha: str, dest: str, mode: Optional[int] = None,
                     mtime: Optional[float] = None, mtime_ns: Optional[int] = None,
                     tmp_token: Optional[str] = None, owner: Optional[Tuple[int, int]] = None,
                     place: Optional[Callable[[str, str], None]] = None, within: Optional[Within] = None) -> None:
        """As ``Vault.restore_blob``, from the verified temporary where there is one."""
        if not self.prepared.put(sha, dest, mode, mtime, mtime_ns, owner, place, within):
            super().restore_blob(sha, dest, mode, mtime, mtime_ns=mtime_ns, tmp_token=tmp_token, owner=owner,
                                 place=place, within=within)


def temp_folder(ctx: Context, path: str) -> str:
    """Where the check of the backup of ``path`` streams its temporary: the file's folder, or the
    nearest one above it that stands (the reduce may have removed it); logdir-relative, '' the
    logdir. The restore's begin record keeps these folders' times (``swap.folder_times``), so
    the next start that removes the temporaries of a restore killed while checking gives them
    back, as ``Prepared.abandon`` does in process."""
    d = os.path.dirname(path)
    while d and not os.path.isdir(ctx.abs(d)):
        d = os.path.dirname(d)
    return d


def prepare_streamed(ctx: Context, vault: Vault, files: List[dict], token: str, prepared: Prepared,
                     cancel: Optional[CancelToken] = None) -> None:
    """Check each of ``files``' backups by streaming it from the remote vault into a temporary
    beside its target (``restore_tmp_path`` with the journaled ``token``; made with
    ``O_EXCL|O_NOFOLLOW`` where nothing stands, in the nearest folder standing when the reduce
    removed the target's), hashed and counted as it is written, then fsynced: one download where
    a check and a copy made two. Each temporary is in ``prepared`` from the moment it exists, so
    the caller's ``abandon`` removes exactly those on any failure. Raises ``VaultError`` or
    ``remote_vault.RemoteReadError`` when a backup does not read back as its digest, ``OSError``
    or ``TransactionError`` when its temporary cannot be made; the user's files are not touched.
    ``cancel``: looked at before each download (``Cancelled``), a big one taking minutes."""
    for f in files:
        if cancel is not None:
            cancel.check()
        sha = f["sha256"]
        if prepared.holds(sha):
            continue  # one copy per digest: the put-back of another path with it copies as before
        d = temp_folder(ctx, f["path"])
        no_symlink(ctx, os.path.join(d, "x") if d else "x")
        folder = ctx.abs(d) if d else ctx.logdir
        tmp = restore_tmp_path(folder, sha, token)
        # made in the folder the logdir store's walk reaches, no link on the way followed: one
        # swapped in since the look above is refused, naming it, and nothing is written there
        with contextlib.ExitStack() as held:
            try:
                dfd = held.enter_context(ctx.store.folder(ctx.key(os.path.relpath(tmp, ctx.logdir))))[0]
            except StoreFailure as e:
                raise TransactionError(f"{f['path']}: its backup's temporary is not made: {e}; nothing was "
                                       "changed", Failure.REFUSED) from None
            if folder not in prepared.folders:
                prepared.folders[folder] = os.fstat(dfd)
            fd = create_exclusive(tmp, 0o600, dfd)
            made = os.fstat(fd)
            prepared.temps[sha] = (tmp, made)
            with os.fdopen(fd, "wb") as fo:
                sink = SparseWriter(fo)  # its zero blocks left holes, as every put-back leaves them
                with vault.open_blob(sha) as src:
                    got, n = hash_and_count(src, sink)
                sink.finish(n)
                if (got, n) != (sha, f["size"]):
                    raise VaultError(errno.EIO, f"backup of {f['path']} in {vault.root} does not read back as its "
                                     f"sha256 {sha[:12]}… ({n} bytes)")
                ident = finish_new_file(fo)
            check_still(tmp, ident, dfd)
            prepared.temps[sha] = (tmp, ident)



def remove_restore_temps(ctx: Context, manifest: dict, token: Optional[str],
                         spare: Optional["Prepared"] = None, left: Optional[List[str]] = None) -> List[str]:
    """Temp copies a killed attempt of this restore left next to its files
    (``swap.remove_put_back_temps``: the one rule for a restore's and a rollback's). ``spare``:
    this process's verified temporaries, left for the put-back; ``left``: as there."""
    return remove_put_back_temps(ctx, manifest.get("files", []), token,
                                 keep=spare.paths() if spare is not None else (), left=left)


__all__ = ["checked_in_place", "Prepared", "PreparedVault", "prepare_streamed", "remove_restore_temps", "temp_folder"]
