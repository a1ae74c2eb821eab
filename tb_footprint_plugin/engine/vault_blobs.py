"""Reading a vault's blobs in whichever form they are: plain, ``.zst``, packed or in the remote
vault (``VaultBlobs``: ``blob_form``, ``open_blob``, ``check_blob``, ``materialise``, a ``.zst``
blob's put-back), and dropping the local forms of one the remote vault holds.

A part of ``engine.vault.Vault`` (the format is described there).
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import BinaryIO, Callable, Iterator, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import faults, remote_vault
from tb_footprint_plugin.engine.vault_base import VaultError, restore_tmp_path
from tb_footprint_plugin.storage import throttle as fsops, zst
from tb_footprint_plugin.storage.files import (check_still, create_exclusive, create_new, finish_new_file,
                                               fsync_dir, hash_and_count, hash_count_sparse, sha256_file,
                                               sha256_stream, unlink_if_same)
from tb_footprint_plugin.storage.paths import is_sha256, plausible_mtime_ns
from tb_footprint_plugin.storage.regular import open_regular
from tb_footprint_plugin.storage.sparse import SparseWriter
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import PosixStore

#: ``restore_blob``'s ``within``: (the logdir's store, the restored file's key in it)
Within = Tuple[PosixStore, str]


@contextlib.contextmanager
def restore_folder(dest: str, within: Optional[Within]) -> Iterator[int]:
    """A descriptor of the folder a restore's temporary of ``dest`` is made in (invariant 4):
    reached by ``within``'s store walk that follows no link, the folders missing on the way made
    by it (``PosixStore.folder(create=True)``), so a folder on the way swapped for a link to a
    folder outside the logdir never receives the temporary nor a folder. ``StoreFailure``
    (``SYMLINK`` naming the link, …) when the walk refuses: nothing was made. Without ``within``
    the caller vouches for ``dest``'s folder (made as named, links and all, as before)."""
    store, key = within if within is not None else (PosixStore(os.path.dirname(dest), create=True),
                                                    os.path.basename(dest))
    with contextlib.ExitStack() as held:
        try:
            dfd = held.enter_context(store.folder(key, create=True))[0]
        except StoreFailure as e:
            if e.code not in _AS_SYSTEM:
                raise
            # a folder this user may not make, or no room for it: said as the system said it, as
            # ``os.makedirs`` did (a restore names a permission to fix, a full disk, not a link)
            raise OSError(_AS_SYSTEM[e.code], str(e), dest) from e
        yield dfd


#: the walk's failures ``restore_folder`` gives back as the system's errors
_AS_SYSTEM = {StoreError.PERMISSION: errno.EACCES, StoreError.NO_SPACE: errno.ENOSPC}


class _NoFile:
    """A sink that keeps nothing: ``SparseWriter`` over it counts what a put-back would write."""

    def write(self, b: bytes) -> int:
        return len(b)

    def seek(self, n: int, whence: int = os.SEEK_SET) -> int:
        return 0

    def flush(self) -> None:
        pass

    def truncate(self, size: int) -> int:
        return size


class VaultBlobs:
    """Reading blobs in any form (a part of ``engine.vault.Vault``)."""

    def blob_form(self, sha: str) -> Optional[str]:
        """``"plain"``, ``"zst"``, ``"remote"``, ``"packed"`` or None: which form of the blob the
        vault holds (plain first: during a transaction, and while compaction is under way, it is
        the original's own inode; then its ``.zst``, an offloaded copy's record, a pack)."""
        form = self._local_form(sha)
        if form is not None:
            return form
        # the packs before a record: a record beside a packed blob (a kill between the offload's
        # record and the pack copy's forget, or a stale, planted or malformed one) must not hide
        # the local copy; the offload then checks the remote one before the pack copy goes
        if remote_vault.packed_ref(self.root, sha) is not None:
            return "packed"  # in a pack of the vault's own pack store
        if remote_vault.has_record(self.root, sha):
            return "remote"  # offloaded: the bytes are in the remote vault (``engine.offload``)
        return None

    def local_form(self, sha: str) -> Optional[str]:
        """``"plain"``, ``"zst"`` or None: the form of the blob on the local disk (not remote);
        None for anything that is not a digest."""
        if not is_sha256(sha):
            return None
        return self._local_form(sha)  # the two lstats only: a pack index or record is never asked

    def _local_form(self, sha: str) -> Optional[str]:
        for form, p in (("plain", self.blob_path(sha)), ("zst", self.zst_path(sha))):
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(p).st_mode):
                    return form
        return None

    def drop_local(self, sha: str) -> int:
        """Unlink the local forms of a blob the remote vault holds (``engine.offload``'s last
        step), under the blob's lock; bytes freed as stored. Nothing is unlinked unless the
        blob's remote record reads back well formed (written and fsynced before this is called),
        nor a plain blob a live file or a writer may still share (the caller checked writers;
        a second link means a live file: kept), nor a plain blob that does not hash to its name
        (beside a ``.zst`` it may hold a late writer's records, which exist nowhere else:
        salvage's)."""
        rec = remote_vault.read_record(self.root, sha)
        if rec is None:
            raise VaultError(errno.ENOENT, f"{remote_vault.record_path(self.root, sha)}: no remote record; "
                             "the local backup is kept")
        freed = 0
        with self._blob_lock(sha, wait=True):
            if self.pinned_by(sha):
                return 0  # a transaction under way reads it as its backup: it stays local for now
            for p in (self.blob_path(sha), self.zst_path(sha)):
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if p == self.blob_path(sha):
                    if st.st_nlink > 1 or st.st_size != rec["size"]:
                        continue
                    try:
                        if sha256_file(p) != sha:
                            continue
                    except OSError:
                        continue
                fsops.unlink(p)
                freed += st.st_size
            fsync_dir(os.path.dirname(self.blob_path(sha)))
        return freed

    def has_blob(self, sha: str) -> bool:
        """Whether the vault holds the blob in either form (present, not checked)."""
        return self.blob_form(sha) is not None

    def open_blob(self, sha: str) -> BinaryIO:
        """The blob's original bytes as a binary stream (decompressed on the fly from a ``.zst``),
        never through a link. ``FileNotFoundError`` when neither form exists; damage in a
        compressed blob shows as ``zst.DecodeError`` (an ``OSError``) while reading."""
        try:
            f = open_regular(self.blob_path(sha))
        except FileNotFoundError:
            f = None  # compacted meanwhile, or only ever compressed
        if f is not None:
            if not self._has_zst(sha) and not self._is_packed(sha):
                return f
            # both forms: a plain blob beside a .zst or a pack copy may hold other bytes (a live
            # file linked in, a late writer's records); it is read only when it hashes to the name
            try:
                ok = sha256_stream(f) == sha
                f.seek(0)
            except BaseException:
                f.close()
                raise
            if ok:
                return f
            f.close()
        ref = None if self._has_zst(sha) else remote_vault.packed_ref(self.root, sha)
        if ref is not None:
            return remote_vault.open_packed(self.root, sha, ref)  # local, verified: before any record
        if not self._has_zst(sha) and remote_vault.has_record(self.root, sha):
            return remote_vault.open_remote(self.root, sha)
        return zst.open_decompressed(open_regular(self.zst_path(sha)))

    def _has_zst(self, sha: str) -> bool:
        with contextlib.suppress(OSError):
            return stat.S_ISREG(os.lstat(self.zst_path(sha)).st_mode)
        return False

    def _is_packed(self, sha: str) -> bool:
        return remote_vault.has_packs(self.root) and remote_vault.packed_ref(self.root, sha) is not None

    def _plain_usable(self, sha: str) -> bool:
        """Whether the plain blob is the one to read: present, and either alone or hashing to
        ``sha`` (beside a ``.zst`` or a pack copy it may hold other bytes)."""
        try:
            if not stat.S_ISREG(os.lstat(self.blob_path(sha)).st_mode):
                return False
        except OSError:
            return False
        if not self._has_zst(sha) and not self._is_packed(sha):
            return True
        try:
            return sha256_file(self.blob_path(sha)) == sha
        except OSError:
            return False

    def blob_size_on_disk(self, sha: str) -> int:
        """Bytes the blob takes as stored (its plain and compressed forms, both while a
        compaction is under way); 0 when absent."""
        total = 0
        for p in (self.blob_path(sha), self.zst_path(sha)):
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
        ref = remote_vault.packed_ref(self.root, sha) if remote_vault.has_packs(self.root) else None
        return total + (ref.length if ref is not None else 0)  # its share of a pack, as stored

    def blob_mtime_ns(self, sha: str) -> Optional[int]:
        """The blob's modification time (compaction keeps the plain blob's on its ``.zst``, the
        offload in the blob's remote record)."""
        for p in (self.blob_path(sha), self.zst_path(sha)):
            with contextlib.suppress(OSError):
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode):
                    return st.st_mtime_ns
        rec = remote_vault.read_record(self.root, sha)
        return plausible_mtime_ns(rec.get("mtime_ns")) if rec is not None else None

    def zst_header_ok(self, sha: str, size: int) -> bool:
        """Cheap check of a compressed blob (no decompression): a zstd frame header that
        declares ``size`` bytes. A damaged body is found by ``check_blob``."""
        try:
            with open_regular(self.zst_path(sha)) as f:
                return zst.content_size(f.read(zst.HEADER_MAX)) == size
        except OSError:
            return False

    def materialise(self, sha: str, folder: str) -> str:
        """A real path holding the blob's bytes, for readers that take a path (TensorBoard's):
        the plain blob itself, or a decompressed, hash-checked copy written into ``folder`` (a
        scratch folder of the caller's, removed with it). ``VaultError`` when damaged or missing."""
        if self._plain_usable(sha):
            return self.blob_path(sha)
        dest = os.path.join(folder, sha)
        if not os.path.exists(dest):
            fd = create_new(dest)
            with os.fdopen(fd, "wb") as out:
                ok = self._write_checked(sha, out, None)
            if not ok:
                with contextlib.suppress(OSError):
                    os.unlink(dest)
                raise VaultError(errno.EIO, f"backup {sha[:12]}… in {self.root} is missing or damaged")
        return dest

    def _write_checked(self, sha: str, out: BinaryIO, size: Optional[int], sparse: bool = False) -> bool:
        """Stream the blob into ``out``; True when what was written hashes to ``sha``. ``sparse``:
        ``out`` is a new file, its zero blocks left holes (``hash_count_sparse``)."""
        try:
            with self.open_blob(sha) as f:
                got, n = hash_count_sparse(f, out) if sparse else hash_and_count(f, out)
        except (FileNotFoundError, zst.DecodeError):
            return False
        return got == sha and (size is None or n == size)

    def same_filesystem(self, path: str) -> bool:
        try:
            return os.stat(path).st_dev == os.stat(self.root).st_dev
        except OSError:
            return False

    def check_blob(self, sha: str) -> bool:
        """True when the blob exists and its content (decompressed, for a ``.zst``) still hashes
        to ``sha``."""
        try:
            with self.open_blob(sha) as f:
                return sha256_stream(f) == sha
        except (OSError, ValueError):
            return False

    def check_blob_extents(self, sha: str, block: int) -> Optional[int]:
        """``check_blob`` that also says how much a put-back of the blob allocates where the
        file system's block is ``block`` bytes: its blocks not all zeros (``SparseWriter`` leaves
        the others holes), in bytes; None when the blob is missing or does not hash to ``sha``.
        The same one read as ``check_blob``; memory flat in the blob's size."""
        sink = SparseWriter(_NoFile(), block)  # type: ignore[arg-type]
        try:
            with self.open_blob(sha) as f:
                got, n = hash_and_count(f, sink)
        except (OSError, ValueError):
            return None
        if got != sha:
            return None
        sink.finish(n)
        return -(-sink.data_bytes // sink.block) * sink.block

    def _restore_zst(self, sha: str, dest: str, mode: Optional[int], mtime: Optional[float],
                     mtime_ns: Optional[int], tmp_token: Optional[str] = None,
                     owner: Optional[Tuple[int, int]] = None,
                     place: Optional[Callable[..., None]] = None, within: Optional[Within] = None) -> None:
        """``restore_blob`` from a compressed blob, or from the remote vault: one pass
        decompresses (or downloads), hashes and writes a new temp file (``create_exclusive``, set up
        through its fd as ``files.copy_new`` does) in the folder ``restore_folder`` reached
        (``within``); only a copy that hashes to ``sha`` takes ``dest``'s place (``place``, a
        rename by default). A remote blob that fails raises ``remote_vault.RemoteReadError`` (its code,
        the object named, and ``dest``); nothing takes ``dest``'s name."""
        tmp = restore_tmp_path(os.path.dirname(dest), sha, tmp_token)
        with restore_folder(dest, within) as dfd:
            made = None  # the temp file this call made: the only one its cleanup removes
            try:
                fd = create_exclusive(tmp, dir_fd=dfd)
                made = os.fstat(fd)
                with os.fdopen(fd, "wb") as fo:
                    try:
                        ok = self._write_checked(sha, fo, None, sparse=True)
                    except remote_vault.RemoteReadError as e:
                        where = "its pack" if self.blob_form(sha) == "packed" else "the remote vault"
                        raise remote_vault.RemoteReadError(e.code, e.key, f"backup of {dest} cannot be restored from "
                                                           f"{where}: {e}; nothing was written in its "
                                                           "place") from None
                    if not ok:
                        raise VaultError(errno.EIO, f"backup of {dest} is missing or damaged in {self.root} "
                                         f"({os.path.relpath(self.zst_path(sha), self.root)} does not decompress to "
                                         f"sha256 {sha[:12]}…); nothing was written in its place")
                    ident = finish_new_file(fo, mode, mtime_ns, mtime, owner)
                check_still(tmp, ident, dfd)
                faults.hit("restore_copied")
                put_temp(place, tmp, dest, dfd)
            except BaseException:
                if made is not None:
                    with contextlib.suppress(OSError):
                        unlink_if_same(tmp, made, dfd)  # garbage never stays, not even under a temp name
                raise
            os.fsync(dfd)


def put_temp(place: Optional[Callable[..., None]], tmp: str, dest: str, dfd: int) -> None:
    """The verified temporary ``tmp``, made in the folder at ``dfd``, takes ``dest``'s place:
    ``place(tmp, dest)`` (the caller's: a put-back's ``swap._where_looked`` walks again and looks
    first), else renamed within that folder."""
    if place is not None:
        place(tmp, dest)
    else:
        fsops.replace(tmp, dest, src_dir_fd=dfd, dst_dir_fd=dfd)
