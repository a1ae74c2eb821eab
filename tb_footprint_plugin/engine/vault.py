"""The backup vault: content-addressed blobs and one manifest per operation.

Layout (``<vault>`` is ``<logdir>/.tb-footprint`` unless ``--backup-dir`` says otherwise)::

    <vault>/blobs/ab/abcdef…   sha256-named originals (never a 'tfevents' name)
    <vault>/ops/<op_id>.json   manifest of one operation
    <vault>/tmp/<op_id>/       scratch space for verification views

On the same filesystem a backup is a hard link: no copy, no extra space, and the original
name stays in place until the transaction's swap removes it. On another filesystem the file
is copied, fsynced and re-hashed before anything else happens. Either way a blob is only
trusted after its sha256 is checked.
"""
from __future__ import annotations

import contextlib
import errno
import getpass
import json
import os
import socket
import stat
import tempfile
import time
from typing import Iterable, List, Optional

from tb_footprint_plugin.codes import Failure, Finding
from tb_footprint_plugin.engine import faults, oplog
from tb_footprint_plugin.storage.files import (CopyMismatch, atomic_write_json, copy_file, copy_new, fsync_dir, is_regular,
                                               sha256_file)
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256, is_state_name, other_users_state_dirs
from tb_footprint_plugin.storage.private import (ADVICE, NotPrivate, check_private_dir, describe, ensure_private_dir,
                                                 untrusted_in, user_name)
from tb_footprint_plugin.storage.regular import open_regular

class VaultError(OSError):
    """A backup could not be made or checked; the message names the file."""


#: temp name of a file being restored: ``<dir>/.footprint-restore-<pid>-<sha12>``
RESTORE_TMP_PREFIX = ".footprint-restore-"


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
    backups are never used by this user, and the user should know they exist)."""
    from tb_footprint_plugin.engine.trust import Untrusted

    if not is_state_name(os.path.basename(os.path.abspath(root))):
        return []
    return [Untrusted(Finding.OTHER_USERS_STATE, p,
                      f"another user's state folder {os.path.basename(p)} (owned by {user_name(uid)}): its backups "
                      "are not used by you (ask its owner to restore from it)")
            for p, uid in other_users_state_dirs(os.path.dirname(os.path.abspath(root)))]


def _digests_named_in(path: str) -> set:
    try:
        with open_regular(path) as f:  # a set-aside link or FIFO is never followed
            m = json.load(f)
        files = m.get("files", []) if isinstance(m, dict) and not m.get("backup_purged") else []
        return {f.get("sha256") for f in files if isinstance(f, dict) and is_sha256(f.get("sha256"))}
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return set()


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


class Vault:
    """A vault directory: blobs, manifests and scratch space."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.blobs = os.path.join(self.root, "blobs")
        self.ops = os.path.join(self.root, "ops")
        self.tmp = os.path.join(self.root, "tmp")
        #: manifests ``manifests()`` refused (``trust.Untrusted``), to report
        self.problems: list = []

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

    def same_filesystem(self, path: str) -> bool:
        try:
            return os.stat(path).st_dev == os.stat(self.root).st_dev
        except OSError:
            return False

    def store(self, path: str, sha: str) -> str:
        """Back up ``path`` (whose sha256 is ``sha``) and return the verified blob path.

        The original is left in place. Raises ``VaultError`` naming the file on any failure.
        """
        blob = self.blob_path(sha)
        try:
            # checked on every backup: the shard folder must be ours all the way from the root
            ensure_private_dir(os.path.dirname(blob), self.root, tighten_root=self.own_folder)
            if os.path.exists(blob):
                if sha256_file(blob) == sha:
                    return blob  # same content already backed up (e.g. by an earlier op)
                fsops.unlink(blob)  # a damaged blob must never stand for a backup
            linked = False
            if self.same_filesystem(path):
                try:
                    fsops.link(path, blob, follow_symlinks=False)
                    linked = True
                except OSError:
                    linked = False  # e.g. fs.protected_hardlinks; fall back to a copy
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
            fsync_dir(os.path.dirname(blob))
        except OSError as e:
            raise VaultError(e.errno or errno.EIO, f"cannot back up {path} into {self.root}: {e.strerror or e}") from e
        if not is_regular(blob):  # never a link standing for a backup
            fsops.unlink(blob)
            raise VaultError(errno.EIO, f"backup of {path} is not a regular file; refusing")
        got = sha256_file(blob)
        if got != sha:
            raise VaultError(errno.EIO, f"backup of {path} does not match its hash (file changed while backing up?)")
        return blob

    def unshare(self, sha: str) -> None:
        """Make the blob a file of its own (a copy) if it is still a hard link of a live file,
        so a later write to that file cannot change the backup."""
        p = self.blob_path(sha)
        try:
            if os.lstat(p).st_nlink <= 1:
                return
        except FileNotFoundError:
            return
        tmp = p + ".unshare"
        copy_file(p, tmp)
        fsops.replace(tmp, p)
        fsync_dir(os.path.dirname(p))

    def check_blob(self, sha: str) -> bool:
        """True when the blob exists and its content still hashes to ``sha``."""
        p = self.blob_path(sha)
        try:
            return sha256_file(p) == sha
        except OSError:
            return False

    def restore_blob(self, sha: str, dest: str, mode: Optional[int] = None,
                     mtime: Optional[float] = None, mtime_ns: Optional[int] = None) -> None:
        """Put the blob's bytes at ``dest`` atomically (temp name in the same dir, then rename),
        with ``mode`` and the modification time (``mtime_ns`` to the nanosecond, else the older
        records' float ``mtime``) set on the copy before it takes the name.

        Always a copy, never a link of the blob: a hard-linked blob shares its inode with the
        file it backs up, so setting the restored file's mode or time, or a writer appending to
        it later, would change the backup too."""
        blob = self.blob_path(sha)
        if not self.check_blob(sha):
            raise VaultError(errno.EIO, f"backup of {dest} is missing or damaged in {self.root} (sha256 {sha[:12]}…)")
        d = os.path.dirname(dest)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f"{RESTORE_TMP_PREFIX}{os.getpid()}-{sha[:12]}")
        # a copy, so the blob stays valid whatever happens to dest later; made anew, never
        # through a link planted at that guessable name, and hashed, chmod'ed and timed through
        # its fd (``files.copy_new``): a name swapped meanwhile is never followed
        try:
            copy_new(blob, tmp, sha, mode, mtime_ns=mtime_ns, mtime=mtime)
            faults.hit("restore_copied")
            fsops.replace(tmp, dest)
        except CopyMismatch:
            raise VaultError(errno.EIO, f"restored copy of {dest} does not match its hash") from None
        except BaseException:
            with contextlib.suppress(OSError):
                st = os.lstat(tmp)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    fsops.unlink(tmp)  # a failure after the copy leaves no temp file behind
            raise
        fsync_dir(d)

    # --- manifests ------------------------------------------------------------------
    def manifest_path(self, op_id: str) -> str:
        if not is_op_id(op_id):
            raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a file name")
        return os.path.join(self.ops, f"{op_id}.json")

    def write_manifest(self, manifest: dict) -> None:
        """Log the manifest's new state in the vault's operation log, then replace the file (a
        lost or corrupt manifest is rebuilt from that log). Only in a vault of ours (``NotPrivate``)."""
        self.check_private()
        oplog.record_manifest(self.root, manifest)
        atomic_write_json(self.manifest_path(manifest["op_id"]), manifest)

    def read_manifest(self, op_id: str) -> dict:
        """The manifest of ``op_id``, checked (``trust.check_manifest``: ``Untrusted``, a ValueError)."""
        from tb_footprint_plugin.engine.trust import check_manifest

        path = self.manifest_path(op_id)
        with open(path, "r", encoding="utf-8") as f:
            m = json.load(f)
        check_manifest(m, path, op_id)
        m["vault"] = self.root  # where it was found, not where the file says
        return m

    def manifests(self) -> List[dict]:
        """Every well-formed manifest, oldest first; refused ones are listed in ``problems``."""
        from tb_footprint_plugin.engine.trust import BAD_MANIFEST, BAD_OP_ID, Untrusted

        out = []
        self.problems = []
        try:
            self.check_private()
        except NotPrivate as e:
            # another user's folder, a symlink, writable by others: what it holds could be
            # anyone's; never listed as ours, so never restored from, purged or replayed
            self.problems.append(Untrusted(Failure.STATE_NOT_OURS, self.root, e.why))
            return out
        if not os.path.isdir(self.ops):
            self.problems += other_users_state_findings(self.root)
            return out
        for name in sorted(os.listdir(self.ops)):
            if name.endswith(".json") and not name.startswith("."):
                try:
                    out.append(self.read_manifest(name[:-5]))
                except Untrusted as e:
                    self.problems.append(e)
                except VaultError as e:
                    self.problems.append(Untrusted(BAD_OP_ID, os.path.join(self.ops, name), str(e)))
                except (OSError, ValueError, RecursionError) as e:
                    self.problems.append(Untrusted(BAD_MANIFEST, os.path.join(self.ops, name), f"unreadable ({e})"))
        out.sort(key=lambda m: (m.get("started_at", 0), m.get("op_id", "")))
        self.problems += set_aside_findings(self.root)
        self.problems += other_users_state_findings(self.root)
        return out

    def unreadable_manifests(self) -> List[str]:
        """Op ids whose manifest file does not parse (reported, never silently skipped)."""
        if not os.path.isdir(self.ops) or not self.is_private():
            return []
        return [n[:-5] for n in sorted(os.listdir(self.ops))
                if n.endswith(".json") and not n.startswith(".")
                and not oplog.manifest_readable(os.path.join(self.ops, n), n[:-5])]

    def referenced_blobs(self, exclude_ops: Iterable[str] = ()) -> set:
        """Blob hashes that some manifest still needs: the backups of operations not purged nor
        excluded, and the blobs any manifest kept for content it displaced (``displaced``,
        ``restore_displaced``: bytes a rollback or restore found in an original's place, which
        exist nowhere else) — those of excluded and purged operations too: only their backups
        are let go, never what they kept."""
        ex = set(exclude_ops)
        refs = set()
        for m in self.manifests():
            for key in ("displaced", "restore_displaced"):
                kept = m.get(key)
                if isinstance(kept, list):
                    refs.update(d["sha256"] for d in kept if isinstance(d, dict) and is_sha256(d.get("sha256")))
            if m["op_id"] in ex or m.get("backup_purged"):
                continue
            refs.update(f["sha256"] for f in m.get("files", []) if f.get("sha256"))
        # a manifest refused as malformed is never acted on, but the blobs it names are kept:
        # keeping is the safe direction, and it may be a real backup in a damaged file
        for problem in self.problems:
            refs |= _digests_named_in(problem.file)
        return refs

    def delete_blob(self, sha: str) -> int:
        p = self.blob_path(sha)
        try:
            size = os.lstat(p).st_size
            fsops.unlink(p)
            return size
        except FileNotFoundError:
            return 0

    def size(self) -> int:
        """Bytes the vault holds: backups (blobs) and retired runs."""
        total = 0
        for root, _dirs, files in [w for d in (self.blobs, os.path.join(self.root, "retired")) for w in os.walk(d)]:
            for n in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, n)).st_size
        return total
