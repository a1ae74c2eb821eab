"""Storing a backup (``VaultStore``): a hard link or a verified copy into ``blobs/ab/``, made
under the blob's lock and pinned, the shard folders made and pruned, and a blob sharing its inode
with a name outside the vault made a copy of its own (``unshare``, ``repair_shared``).

A part of ``engine.vault.Vault`` (the format is described there).
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from typing import Callable, Iterable, Optional, TypeVar

from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.vault_base import (ALONE, KEPT_BUSY, KEPT_DAMAGED, SHARD_TRIES, UNSHARED,
                                                   VaultError)
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import copy_file, fsync_dir, is_regular, sha256_file
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.private import NotPrivate, ensure_private_dir


_T = TypeVar("_T")


#: the middle of an ``unshare`` copy's temp name: ``<sha>.unshare-<pid>-<random>``
UNSHARE_TMP = ".unshare-"


def _sweep_unshare_leftovers(folder: str, sha: str) -> None:
    """Remove the copies killed ``unshare`` calls of ``sha`` left in ``folder``: those whose
    process is gone (a live one's is its copy in progress)."""
    pre = sha + UNSHARE_TMP
    try:
        names = [n for n in os.listdir(folder) if n.startswith(pre)]
    except OSError:
        return
    for n in names:
        pid = n[len(pre):].split("-", 1)[0]
        if pid.isdigit() and lease.holder_alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            fsops.unlink(os.path.join(folder, n))


def _one_name(path: str) -> bool:
    """Whether ``path`` is one name of its file, or gone (``Vault.unshare``'s first, cheap test)."""
    try:
        return os.lstat(path).st_nlink <= 1
    except FileNotFoundError:
        return True


class VaultStore:
    """Storing backups (a part of ``engine.vault.Vault``)."""

    def store(self, path: str, sha: str, pin: Optional[str] = None, sync: bool = True, link: bool = True) -> str:
        """Back up ``path`` (whose sha256 is ``sha``) and return the verified blob path.

        The original is left in place. Raises ``VaultError`` naming the file on any failure.
        With ``pin`` (the op id of a transaction under way) the whole store runs under the blob's
        lock and ends with a pin (``pin_blob``): a purge or compaction in any process sharing this
        vault, which deletes under the same lock, either ran before (the blob is made afresh here)
        or sees the pin and keeps the blob. ``sync=False`` (with ``pin``): the blob's and the pin's
        folders are synced by the transaction's ``sync_pinned`` before its first destructive step,
        once each, not once a backup (two folder fsyncs a file were most of a profile-heavy run's
        reduce); until then a power cut may undo the link and the pin, never a byte of the original.
        ``link``: the backup may be a hard link of ``path`` (where the transaction's swap strategy
        allows it, ``engine.swap_strategy``); False: always a copy.
        """
        if pin is None:
            return self._store(path, sha, link=link)
        if not is_op_id(pin):
            raise VaultError(errno.EINVAL, f"{str(pin)[:80]!r} is not an operation id; refusing it as a pin")
        self.blob_path(sha)
        with self._blob_lock(sha, wait=True, leave=self.compacts):
            blob = self._store(path, sha, sync=sync, own=pin, link=link)
            self.pin_blob(pin, sha, sync=sync)
        if not sync:
            # the blob's folder also when the blob was there already: another transaction's
            # unsynced link, which this one's swap may come before; and the folders above the shard
            # and the pins, whose entries name folders this store may just have made (review R10 F4)
            pins = self._pins_dir(pin)
            self._defer_sync(pin, os.path.dirname(blob), self.blobs, pins, os.path.dirname(pins), self.tmp)
        return blob

    def _defer_sync(self, op_id: str, *folders: str) -> None:
        with self._unsynced_lock:
            self._unsynced.setdefault(op_id, set()).update(folders)

    def sync_pinned(self, op_id: str) -> int:
        """Make ``op_id``'s unsynced backups and pins durable (``store(..., sync=False)``): each
        folder they went into synced once. Called before the operation's swap record; on ext4 the
        first sync commits the file system's journal and the rest find their entries committed.
        How many folders were synced."""
        with self._unsynced_lock:
            folders = sorted(self._unsynced.pop(op_id, ()))
        for folder in folders:
            fsync_dir(folder)
        return len(folders)

    def in_shard(self, sha: str, write: Callable[[], _T]) -> _T:
        """``write()``, which makes a file in ``sha``'s shard folder (``blobs/ab``), after that
        folder is made or checked ours all the way from the vault (``ensure_private_dir``). Any
        process's ``prune_shards`` removes the folder while it is empty (a packed blob's plain
        form gone), also between the check and the write: a ``FileNotFoundError`` makes the
        folder again and tries again, ``SHARD_TRIES`` times in all (one the folder's removal did
        not cause, e.g. a source file gone, is raised after the last)."""
        folder = os.path.dirname(self.blob_path(sha))
        for attempt in range(SHARD_TRIES):
            try:
                ensure_private_dir(folder, self.root, tighten_root=self.own_folder)
                return write()
            except (FileNotFoundError, NotPrivate) as e:
                # NotPrivate of a folder found missing when checked: the prune's too; of one
                # there (a link, another user's) it is refused as ever
                if attempt + 1 >= SHARD_TRIES or (isinstance(e, NotPrivate) and os.path.lexists(e.path)):
                    raise
        raise AssertionError("unreachable")

    def prune_shards(self, shas: Iterable[str]) -> int:
        """Remove the shard folders (``blobs/ab``) of ``shas`` that are empty now (their blobs
        packed or deleted): 256 of them took a vault ~1 MB on disk, 1 kB a run at 1,000 small
        runs whose backups all went to packs. Only an empty folder goes (``rmdir``), only a real
        folder of ours (never a symlink, never followed: through a descriptor of ``blobs/``
        checked ours), with no fsync (a crash that undoes a removal leaves an empty folder). A
        writer into a shard folder goes through ``in_shard``, which makes it again. How many went."""
        names = sorted({s[:2] for s in shas if is_sha256(s)})
        if not names:
            return 0
        try:
            fd = os.open(self.blobs, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return 0  # no blobs folder, or a link in its place: nothing removed through it
        gone = 0
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                return 0
            for name in names:
                try:
                    sub = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISDIR(sub.st_mode) or sub.st_uid != os.geteuid():
                        continue  # a link or someone else's: never removed (health names it)
                    os.rmdir(name, dir_fd=fd)  # unlinkat(AT_REMOVEDIR): refused unless empty
                    gone += 1
                except OSError:
                    continue  # not empty (a blob, a record, a temp file), or gone already
        finally:
            os.close(fd)
        return gone

    def _store(self, path: str, sha: str, sync: bool = True, own: Optional[str] = None, link: bool = True) -> str:
        blob = self.blob_path(sha)
        try:
            # checked on every backup: the shard folder must be ours all the way from the root
            if self.in_shard(sha, lambda: self._put(path, sha, blob, sync, own, link)):
                return blob  # same content already backed up (e.g. by an earlier op)
        except OSError as e:
            raise VaultError(e.errno or errno.EIO, f"cannot back up {path} into {self.root}: {e.strerror or e}") from e
        if not is_regular(blob):  # never a link standing for a backup
            fsops.unlink(blob)
            raise VaultError(errno.EIO, f"backup of {path} is not a regular file; refusing")
        got = sha256_file(blob)
        if got != sha:
            raise VaultError(errno.EIO, f"backup of {path} does not match its hash (file changed while backing up?)")
        return blob

    def _put(self, path: str, sha: str, blob: str, sync: bool = True, own: Optional[str] = None,
             link: bool = True) -> bool:
        """``_store``'s writes into the shard folder (made and checked by ``in_shard``): True when
        ``blob`` holds ``sha`` already, else ``path`` linked or copied in and the folder synced
        (unless ``sync`` is False: the caller syncs it later). ``own``: the transaction storing
        it (its pin), whose own links (another file of its run, same bytes) are adopted as they
        stand: its originals go at its swap, or none of them does."""
        if os.path.exists(blob):
            if sha256_file(blob) == sha and (_one_name(blob) or self._own_link(sha, own) or self.unshare(sha)):
                # a blob of one name (a committed backup) is adopted as it stands, without
                # ``_own_link``'s listing of every pin (``unshare`` would say True for it too);
                # a second name of a live file (another transaction's link of its original, pinned
                # or not, or one an older version or damage left) is never adopted as it stands:
                # that transaction may never swap, and a write to its file in place would then
                # change this backup too. ``unshare`` made it a copy of its own first (reviews R10
                # F1, R11 F1); one whose bytes changed meanwhile is no backup of ``sha``: made anew
                if sync:
                    fsync_dir(os.path.dirname(blob))  # adopted: durable before anything relies on it
                return True
            st = os.lstat(blob)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                # other bytes under the name, in a file of its own: records a writer appended
                # after an earlier reduction (salvage's), or damage health names; they may
                # exist nowhere else, so they are never replaced
                raise VaultError(errno.EEXIST, f"cannot back up {path} into {self.root}: "
                                 f"{os.path.relpath(blob, self.root)} holds other bytes than its name says "
                                 "(late records salvaged at the next start, or damage `tb-footprint status` "
                                 "names); it is never replaced")
            fsops.unlink(blob)  # a link of a live file (its bytes live on under that name): not a backup
        linked = False
        # beside a .zst or a pack copy (an earlier operation's compacted or packed backup)
        # the new plain blob is a copy: a link would make this run's live file, which may
        # still change before its swap (a late writer), stand under that backup's name.
        # An original with other names (a ``cp -al`` or ``rsync --link-dest`` snapshot, a
        # hard-linked copy of the run) is copied too: its swap removes one name only, so a link
        # would leave the backup an inode the user still writes through the other (review R13 F1)
        if link and self.same_filesystem(path) and not self._has_zst(sha) and not self._is_packed(sha) \
                and _one_name(path):
            try:
                fsops.link(path, blob, follow_symlinks=False)
                linked = True
            except FileNotFoundError:
                raise  # the shard folder pruned meanwhile (``in_shard`` tries again), or the file gone
            except OSError:
                linked = False  # e.g. fs.protected_hardlinks; fall back to a copy
            if linked and os.lstat(blob).st_nlink > 2:
                fsops.unlink(blob)  # a name made meanwhile (a snapshot under way): our link goes, a copy
                linked = False
        if not linked:
            fd, tmp = tempfile.mkstemp(prefix=".in-", dir=os.path.dirname(blob))
            os.close(fd)
            try:
                copy_file(path, tmp)
                fsops.replace(tmp, blob)
            except BaseException:
                with contextlib.suppress(OSError):
                    fsops.unlink(tmp)
                raise
        if sync:
            fsync_dir(os.path.dirname(blob))
        return False

    def _own_link(self, sha: str, own: Optional[str]) -> bool:
        """Whether the blob is pinned by the transaction ``own`` alone: a link it made of a file
        of its own run (every blob it adopted from others was made a copy of its own first)."""
        return own is not None and self.pinned_by(sha) == [own]

    def unshare(self, sha: str) -> bool:
        """Make the blob a file of its own (a copy) if it is still a hard link of a live file,
        so a later write to that file cannot change the backup. False when the link's bytes no
        longer hash to ``sha`` (the live file changed since it was linked in: left as it is);
        True otherwise (a file of its own now, or already, or gone)."""
        p = self.blob_path(sha)
        if _one_name(p):
            return True
        folder = os.path.dirname(p)
        _sweep_unshare_leftovers(folder, sha)
        # named by digest and pid: a killed unshare's copy is removed by the next one of this blob
        tmp = os.path.join(folder, f"{sha}{UNSHARE_TMP}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            st = os.lstat(p)
            copy_file(p, tmp)
            if sha256_file(tmp) != sha:
                # the live file changed since it was linked in: its bytes are not this backup's
                # and never take its name; the link is left as it is (readers fall back to the
                # .zst, compaction keeps it as shared, salvage skips it)
                fsops.unlink(tmp)
                return False
            # the blob's mode and times go with it: a grown backup's mtime is the only record of
            # its last write, which a restore gives back (``swap._time_of``; review R15 F1)
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
                os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
                os.fsync(fd)
            finally:
                os.close(fd)
            fsops.replace(tmp, p)
        except BaseException:
            with contextlib.suppress(OSError):
                fsops.unlink(tmp)
            raise
        fsync_dir(os.path.dirname(p))
        return True

    def repair_shared(self, sha: str) -> str:
        """A committed backup an older version linked in while its original had other names (a
        snapshot's, review R13 F1) made a copy of its own (``unshare``: copied, hashed, fsynced,
        renamed over the link), under the blob's lock so no compaction or purge of it runs
        meanwhile. Returns ``UNSHARED``; ``ALONE`` (one name already, or gone); ``KEPT_BUSY``
        (another process holds its lock, or a transaction under way pins it: it may be that
        transaction's own link, which its swap settles; tried again at the next start);
        ``KEPT_DAMAGED`` (its bytes no longer hash to ``sha``: written through the other name, so
        no backup of ``sha``; left exactly as it is, never made a copy under that name)."""
        self.blob_path(sha)  # the digest is checked before any name is made from it
        with self._blob_lock(sha) as mine:
            if not mine:
                return KEPT_BUSY
            if _one_name(self.blob_path(sha)):
                return ALONE
            if self.pinned_by(sha):
                return KEPT_BUSY
            return UNSHARED if self.unshare(sha) else KEPT_DAMAGED
