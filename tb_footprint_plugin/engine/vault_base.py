"""The vault's shared ground: its errors, names and constants, the ownership checks, and
``VaultBase`` — the folders, a blob's paths and the locks every part of ``engine.vault.Vault``
takes (the vault's lock folder, each blob's ``compact/<sha>.lock``).

A part of ``engine.vault`` (its docstring describes the on-disk format); importers keep importing
from ``engine.vault``, which re-exports these names.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import os
import re
import secrets
import socket
import stat
import threading
import time
from typing import Dict, Optional

from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.storage.paths import (VAULT_HOLDINGS, is_sha256, is_state_name, other_users_state_dirs,
                                               writable_by_others_unsticky)
from tb_footprint_plugin.storage.private import (ADVICE, NotPrivate, check_private_dir, describe,
                                                 ensure_private_dir, untrusted_in, user_name)


class VaultError(OSError):
    """A backup could not be made or checked; the message names the file."""


#: temp name of a file being restored: ``<dir>/.footprint-restore-<token>-<sha12>``, the token
#: random (a restore's journal names its own: ``engine.restore``), made only where nothing stands
#: (``create_exclusive``): no file of a user's is ever taken for a leftover of ours, and recovery
#: of a killed restore removes exactly the names its journal's token gives
RESTORE_TMP_PREFIX = ".footprint-restore-"
RESTORE_TOKEN = re.compile(r"[0-9a-f]{32}")


def restore_tmp_path(d: str, sha: str, token: Optional[str] = None) -> str:
    """The temp name for restoring blob ``sha`` into folder ``d``: ``token`` (a restore's
    journaled one, ``RESTORE_TOKEN``) or a new random one."""
    if token is None or not RESTORE_TOKEN.fullmatch(token):
        token = secrets.token_hex(16)
    return os.path.join(d, f"{RESTORE_TMP_PREFIX}{token}-{sha[:12]}")


def late_tmp_path(d: str, sha: str, token: str) -> str:
    """The temp name of the late records a restore with journaled ``token`` puts back beside
    the original of blob ``sha`` in folder ``d`` (``engine.swap``)."""
    return os.path.join(d, f"{RESTORE_TMP_PREFIX}late-{token}-{sha[:12]}")

#: how backups are kept once their operation is committed: compressed blobs (the default: the
#: disk is freed at once) or the hard links themselves (no compression time; freed by purge)
VAULT_FORMATS = ("compressed", "hardlink")
DEFAULT_VAULT_FORMAT = "compressed"
#: suffix of a compressed blob, and of one being written
ZST_SUFFIX = ".zst"
ZST_TMP_SUFFIX = ".zst.tmp"
#: a blob is compressed only when that frees at least this share of its disk blocks
MIN_SAVING = 0.10
#: tries of a write into a blob's shard folder (``blobs/ab``): any process's ``prune_shards`` may
#: remove the folder, while empty, between its making and the write, which then makes it again
SHARD_TRIES = 4

#: what ``Vault.compact`` did with a blob (the bench and the tests count them)
COMPRESSED = "compressed"
KEPT_SHARED = "kept_shared"          # a live file still shares the inode: compressing frees nothing
KEPT_OPEN = "kept_open"              # a writer holds it open, or the kernel cannot rule one out
KEPT_BUSY = "kept_busy"              # another process is compacting it right now
KEPT_INCOMPRESSIBLE = "kept_incompressible"
KEPT_DAMAGED = "kept_damaged"        # it does not hash to its name: kept as it is, for health to name
PACKED = "packed"                    # in a verified pack of the vault's pack store, its plain blob unlinked
MISSING = "missing"
#: what ``Vault.repair_shared`` did besides (``KEPT_BUSY``, ``KEPT_DAMAGED``)
UNSHARED = "unshared"                # a backup sharing its inode with a name outside the vault, now a copy
ALONE = "alone"                      # one name already (or gone): nothing to repair


def who() -> dict:
    """User and host recorded in manifests and the change log."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = str(os.getuid())
    return {"user": user, "host": socket.gethostname()}


def set_aside_findings(folder: str) -> list:
    """What was set aside as untrusted in ``folder`` and its subfolders (``storage.private``), as
    ``trust.Untrusted`` findings with code ``untrusted_set_aside``: shown by ``status`` and the
    tab until someone removes them."""
    from tb_footprint_plugin.engine.trust import Untrusted

    out = []
    for item in untrusted_in(folder):
        p = item["file"]
        try:
            st = os.lstat(p)
            what = (f"a symbolic link to {os.readlink(p)}" if stat.S_ISLNK(st.st_mode)
                    else f"{'a folder' if stat.S_ISDIR(st.st_mode) else 'a file'} {describe(st)}")
        except OSError:
            what = "an entry"
        out.append(Untrusted(Finding.UNTRUSTED_SET_ASIDE, p,
                             f"{what} stood where the tool keeps {item['name']!r}; set aside on "
                             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(item['time']))}, never followed "
                             "or written; look at it, then remove it"))
    return out


def other_users_state_findings(root: str) -> list:
    """For a vault that is a state folder in a logdir: every other user's state folder beside it,
    as a ``trust.Untrusted`` finding with code ``other_users_state`` (``status`` names it: its
    backups are never used by this user, and the user should know they exist), and the logdir
    itself with code ``logdir_not_sticky`` when others may write it without the sticky bit."""
    from tb_footprint_plugin.engine.trust import Untrusted

    if not is_state_name(os.path.basename(os.path.abspath(root))):
        return []
    logdir = os.path.dirname(os.path.abspath(root))
    out = [Untrusted(Finding.OTHER_USERS_STATE, p,
                     f"another user's state folder {os.path.basename(p)} (owned by {user_name(uid)}): its backups "
                     "are not used by you (ask its owner to restore from it)")
           for p, uid in other_users_state_dirs(logdir)]
    # a logdir others may write without the sticky bit: any of them can move this folder away
    why = writable_by_others_unsticky(logdir)
    return out + ([Untrusted(Finding.LOGDIR_NOT_STICKY, logdir, why)] if why else [])


def refuse_unless_ours(state: str, vault: "Vault") -> None:
    """Before a change starts: ``NotPrivate`` (code ``state_not_ours``) naming the folder, its
    owner and mode, and what to do, when this user's state folder or the vault exists and is not
    a folder of ours (a symlink, another user's, writable by others). A missing ``--backup-dir``
    is made here, 0700 with its missing parents (a later ``makedirs`` would give it the umask's
    mode); the state folder is made 0700 when first needed."""
    try:
        st = os.lstat(state)
    except FileNotFoundError:
        st = None
    if st is not None and not (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()):
        check_private_dir(state, advice=f"Both {os.path.basename(state)} and the shared name are taken by "
                          "someone else: remove them if they are yours, or ask their owner to; " + ADVICE)
    if not vault.own_folder and not os.path.lexists(vault.root):
        ensure_private_dir(vault.root)
    vault.check_private()


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two stats are of one file (its device and inode): shared by the lock, the pack and
    the compaction steps, which each re-check a name is still the inode they read."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class VaultBase:
    """The folders, a blob's paths and the locks of a vault (a part of ``engine.vault.Vault``)."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.blobs = os.path.join(self.root, "blobs")
        self.ops = os.path.join(self.root, "ops")
        self.tmp = os.path.join(self.root, "tmp")
        #: manifests ``manifests()`` refused (``trust.Untrusted``), to report
        self.problems: list = []
        #: the op ids of the manifests the last read refused (``Vault.manifests``)
        self.refused_ops: list = []
        #: how many manifests ``manifests()`` could not read, damaged log lines that may have been
        #: one included (their blobs may be claimed: a release of blobs waits while it is not 0)
        self.unread = 0
        #: a reduce compacts each committed run's backups (``vault_format`` ``compressed``): a
        #: backup's blob lock leaves its lock file for that compaction's lock (``_blob_lock``)
        self.compacts = False
        #: op id → folders whose new entries (its backups' blobs, its pins) are not yet synced:
        #: ``sync_pinned`` syncs each once before the operation's first destructive step
        self._unsynced: Dict[str, set] = {}
        self._unsynced_lock = threading.Lock()

    @property
    def own_folder(self) -> bool:
        """True when the vault is a state folder the tool names (``.tb-footprint``,
        ``.tb-footprint-u<uid>``), not a folder the user pointed at with ``--backup-dir``."""
        return is_state_name(os.path.basename(self.root))

    def ensure(self) -> None:
        """Make the vault and its folders, 0700, and check each is a folder of ours: a backup is
        never placed where someone else can unlink it. Raises ``NotPrivate`` (code
        ``state_not_ours``) naming the folder, its owner and mode when the vault is a symlink,
        another user's folder or writable by others; a stray entry inside it is set aside."""
        ensure_private_dir(self.root, tighten_root=self.own_folder)
        # ops/ stays (empty now): it is how a vault is told from any folder (``paths.recorded_vaults``)
        for d in (self.blobs, self.ops, self.tmp):
            ensure_private_dir(d, self.root)

    def is_private(self) -> bool:
        """Whether the vault is absent or a folder of ours (``check_private`` without raising)."""
        try:
            self.check_private()
        except NotPrivate:
            return False
        return True

    def check_private(self) -> None:
        """``NotPrivate`` when the vault exists and is not a folder of ours; changes nothing
        (a missing vault is made private by ``ensure``)."""
        try:
            st = os.lstat(self.root)
        except FileNotFoundError:
            return
        if self.own_folder and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            return  # our own state folder, group-writable from an old umask: ``ensure`` tightens it
        check_private_dir(self.root)

    def blob_path(self, sha: str) -> str:
        """``blobs/ab/abcdef…``; a digest read from a file that is not one is refused, so no
        name such as ``../x`` can ever lead a read or a delete out of the vault."""
        if not is_sha256(sha):
            raise VaultError(errno.EINVAL, f"{str(sha)[:80]!r} is not a sha256 digest; refusing it as a blob name")
        return os.path.join(self.blobs, sha[:2], sha)

    def zst_path(self, sha: str) -> str:
        """``blobs/ab/abcdef….zst``: the compressed form of a blob (digest checked as in ``blob_path``)."""
        return self.blob_path(sha) + ZST_SUFFIX

    @contextlib.contextmanager
    def _lock_folder(self):
        """A descriptor of ``compact/``, the blob locks' folder, checked ours (made if missing):
        the blob locks of a pack are taken through it, so a folder swapped for a link after this
        check can lead none of them out of the vault (review R5 F3), with one check a pack instead
        of one a lock."""
        folder = os.path.join(self.root, "compact")
        ensure_private_dir(folder, self.root, tighten_root=self.own_folder)
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                raise VaultError(errno.EPERM, f"{folder} changed under the check (not a private folder of ours); "
                                 "no blob lock is taken in it")
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _blob_lock(self, sha: str, wait: bool = False, *, dir_fd: Optional[int] = None, leave: bool = False):
        """An exclusive ``flock`` on ``compact/<sha>.lock`` for one compaction (or deletion) of
        the blob; without ``wait`` it yields False when another process holds it. The lock file
        is removed by its holder, so a lock taken on a name removed meanwhile is not the lock
        (inode checked): refused, or taken again on the new name when waiting. ``compact/`` is
        checked ours at every lock, not once a pack (review R5 F3: a folder swapped for a link
        between a pack's locks led every later lock file out of the vault), unless ``dir_fd`` is
        ``_lock_folder``'s (checked once; the lock files made through that descriptor).
        ``leave``: the lock file stays after the release, for the compaction soon to lock the
        blob again (a backup in a vault that compacts after each commit): making a lock file and
        unlinking it while it is open cost this ext4 ~57 µs, making it 14 and reopening it 7. Any
        holder may remove it, so a lock file left is the same lock for everyone."""
        if not is_sha256(sha):
            raise VaultError(errno.EINVAL, f"{str(sha)[:80]!r} is not a sha256 digest")
        folder = os.path.join(self.root, "compact")
        if dir_fd is None:
            ensure_private_dir(folder, self.root, tighten_root=self.own_folder)
            path = os.path.join(folder, f"{sha}.lock")
            at: dict = {}
        else:
            path, at = f"{sha}.lock", {"dir_fd": dir_fd}
        strangers = 0
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                             0o600, **at)
            except OSError as e:
                named = os.path.join(folder, f"{sha}.lock")
                if e.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EOPNOTSUPP):
                    raise VaultError(e.errno or errno.EIO, f"cannot take the lock {named}: {e.strerror or e}") from e
                if strangers >= 2:
                    raise NotPrivate(named, f"not a lock file of ours ({e.strerror}) and still there after being set "
                                            "aside twice") from e
                strangers += 1  # a link, folder or socket at the lock's name (review R8 F4)
                self._set_lock_aside(path, dir_fd)
                continue
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink > 1:
                # a FIFO, another user's file or a second name of some file (a blob's) stands there:
                # never the lock, nor removed by its holder; kept aside for status to name
                os.close(fd)
                if strangers >= 2:
                    raise NotPrivate(os.path.join(folder, f"{sha}.lock"), f"not a lock file of ours ({describe(st)}, "
                                     f"{st.st_nlink} links) and still there after being set aside twice")
                strangers += 1
                self._set_lock_aside(path, dir_fd)
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    yield False
                    return
                try:
                    mine = same_file(os.fstat(fd), os.lstat(path, **at))
                except FileNotFoundError:
                    mine = False
                if not mine and wait:
                    continue  # its holder removed that name: lock the new one
                try:
                    yield mine
                finally:
                    if mine and not leave:
                        with contextlib.suppress(OSError):
                            os.unlink(path, **at)  # removed while held: a waiter's inode check refuses it
                return
            finally:
                os.close(fd)

    def size(self) -> int:
        """Bytes the vault holds: backups (blobs, packs as stored; not their index) and retired runs."""
        total = 0
        folders = [os.path.join(self.root, sub) for sub in VAULT_HOLDINGS]  # what the tab's scan counts too
        for root, _dirs, files in [w for d in folders for w in os.walk(d)]:
            for n in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, n)).st_size
        return total
