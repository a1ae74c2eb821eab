"""The backup vault: content-addressed blobs and a manifest per operation.

Layout (``<vault>`` is ``<logdir>/.tb-footprint`` unless ``--backup-dir`` says otherwise)::

    <vault>/blobs/ab/abcdef…   sha256-named originals (never a 'tfevents' name)
    <vault>/oplog/segments/    the manifests: every state of every operation (``engine.oplog``)
    <vault>/oplog/twins/       the second copy of each sealed piece of those segments
    <vault>/ops/<op_id>.json   manifest of one operation, as older versions wrote it (read; removed
                               once the log holds a newer state of it)
    <vault>/tmp/<op_id>/       scratch space for verification views
    <vault>/tmp/<op_id>/pins/  one empty file per blob a transaction under way relies on

On the same filesystem a backup is a hard link: no copy, no extra space, and the original
name stays in place until the transaction's swap removes it (a copy when the blob's ``.zst``
is there already: a live file is never linked in under a compacted backup's name; a copy when
the original has other names, a snapshot's: the swap would leave the backup their inode). On another filesystem the file
is copied, fsynced and re-hashed before anything else happens. Either way a blob is only
trusted after its sha256 is checked.

The compressed vault (the default, ``VAULT_FORMATS``): once an operation is committed, its
hard-link blobs, whose original names are gone from the logdir, are compacted into
``blobs/ab/abcdef….zst`` (``compact``): written as ``….zst.tmp``, fsynced, decompressed and
hashed, renamed, the folder fsynced, and only then the plain blob unlinked. Until that last
step the plain blob is a verified copy, so a kill anywhere leaves one; a pending note
(``compact/<op_id>.json``) written before the first step lets the next start finish the job.
A blob that still shares its inode with a live file, that any process may hold open for writing
(a late writer, salvaged later: only the kernel's answer that no descriptor anywhere writes it,
``no_writer_anywhere``, lets it go; a writer in another container or on an NFS client is never
seen in ``/proc``), or that compression would not shrink by ``MIN_SAVING`` stays plain (its note
stays for the next start while a writer may hold it). One compaction of a blob at a time: an
exclusive ``flock`` on ``compact/<sha>.lock`` for the whole of it (busy: the blob stays plain),
a temp name of its own per attempt, and the plain blob is unlinked only when the ``.zst`` name
is still the inode that was verified. A plain blob is never removed unless it hashes to its
name, nor a ``.zst`` unless the plain one does (a plain that grew is a late writer's: salvage's).
A transaction's ``store`` pins each digest under the blob's lock (``pin_blob``); every deletion
(``delete_blob``, ``delete_blobs``, ``drop_local``) and compaction takes the same lock and leaves
a digest a live pin names, so no process sharing the vault, whatever its logdir, takes a backup
another relies on. The pins go when the transaction commits (its manifest durable) or rolls back,
or at the next start that finds it settled (``engine.upkeep``).
Every reader goes through ``open_blob`` / ``check_blob`` / ``restore_blob`` / ``materialise``,
which read either form, and the ``.zst`` when the plain blob beside it does not verify.

Packs (issue #27 item 2): a compaction's blobs smaller than ``PACK_BELOW`` — a profile session's
hundreds of small files, a small run's few — go together into one pack of the vault's own
``BlobStore`` over a ``PosixStore`` at ``<vault>/packs`` (``remote_vault.pack_store``: the same
format and code as the remote vault's) instead of a ``.zst`` each: one pack and one index object
per compaction, however many blobs. Under the rules a compaction obeys (the shared pack lock,
then each blob's lock, taken without waiting; a blob a live file shares, a live pin names, or a
writer anywhere may hold stays plain), ``BlobStore.add`` writes the pack, reads it back and
hashes every blob, then writes its index object durably; only once ``add`` returned a blob's
verified ref is its plain blob unlinked (``_drop_plain``: still the inode read, one link, hashing
to its name). A kill anywhere leaves each blob plain, or packed and listed, or both; the
compaction's note finishes it at the next start. Readers find a packed blob through the pack
index (``blob_form`` "packed", ``open_blob`` → ``remote_vault.open_packed``, hashed as read).
A purge, a restore's release and a rollback forget packed blobs in ``delete_blobs``:
``BlobStore.forget`` (restic's prune: new index first, then the old index objects, then the
packs no live blob needs; half-dead packs repacked and verified first) under the pack lock held
exclusively and the blobs' locks, after ``needed()`` was read under them; nothing is forgotten
while an index object is damaged (``RemoteReadError``, code ``index_damaged``). A blob a later
salvage made (its mtime is its late writer's last write, which a pack does not keep) and blobs of
a vault that offloads to a bucket are not packed.

Shard folders: a packing, a purge and a restore's release remove the ``blobs/ab`` folders they
left empty (``prune_shards``: ``rmdir``, never a link or another user's folder): 4 KiB each, they
were 1 kB a run of a vault of 1,000 small packed runs. Every write into a shard folder (a backup,
a remote record, salvage's link) goes through ``in_shard``, which makes the folder again when a
prune in any process took it between its check and the write.

The remote vault (``--backup-dir s3://…|gs://…|az://…`` for a local logdir, ``engine.offload``):
after compaction a committed operation's backups are added to a ``storage.blobstore.BlobStore``
in the bucket, and once the store has read each one back and verified it, a record
``blobs/ab/abcdef….remote`` (sha, store URL, size) is written and only then the local forms are
unlinked. Every reader above falls back to the bucket for a digest that has such a record and no
local form: the bytes are streamed from the store and refused
unless they hash to the digest (``remote_vault.RemoteReadError``, with a code).

Why one module: the vault is one on-disk format — content-addressed blobs
(hard links, verified copies, compacted ``.zst``), manifests, compaction and the ownership checks
(``refuse_unless_ours``) — and every reader and writer of it must agree on that format; the
offloaded blobs (``offload``, ``remote_vault``) and the operation log (``oplog``) are modules of
their own.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import getpass
import json
import marshal
import os
import re
import secrets
import socket
import stat
import tempfile
import threading
import time
from typing import BinaryIO, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar

from tb_footprint_plugin.codes import BlobError, Failure, Finding
from tb_footprint_plugin.engine import faults, lease, oplog, remote_vault
from tb_footprint_plugin.storage.files import (CopyMismatch, atomic_write_json, check_still,
                                               copy_file, copy_new, create_exclusive, create_new, finish_new_file,
                                               fsync_dir, hash_and_count, hash_count_sparse, is_regular,
                                               sha256_file, sha256_stream, unlink_if_same)
from tb_footprint_plugin.storage import zst
from tb_footprint_plugin.storage.sparse import SparseWriter
from tb_footprint_plugin.storage.openfiles import find_writers, no_writer_anywhere
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.paths import (is_op_id, is_sha256, is_state_name, other_users_state_dirs,
                                               writable_by_others_unsticky,
                                               plausible_mtime_ns)
from tb_footprint_plugin.storage.private import (ADVICE, NotPrivate, check_private_dir, describe, ensure_private_dir,
                                                 set_aside, set_aside_at, untrusted_in, user_name)
from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobSource
from tb_footprint_plugin.storage.lock import Locked, held as lock_held, release, try_exclusive
from tb_footprint_plugin.storage.store import TMP_PREFIX, StoreFailure
from tb_footprint_plugin.storage.regular import open_regular

_T = TypeVar("_T")


class VaultError(OSError):
    """A backup could not be made or checked; the message names the file."""


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
#: the name of an index object in ``<vault>/packs/index`` (``storage.blobstore``'s layout)
_INDEX_NAME = re.compile(r"[0-9a-f]{32}\.json\Z")
DEFAULT_VAULT_FORMAT = "compressed"
#: suffix of a compressed blob, and of one being written
ZST_SUFFIX = ".zst"
ZST_TMP_SUFFIX = ".zst.tmp"
#: a blob is compressed only when that frees at least this share of its disk blocks
MIN_SAVING = 0.10
#: a compaction puts blobs smaller than this into a pack of the vault's pack store instead of a
#: ``.zst`` each (0: never). bench/vault.py --small --pack-below N (2026-12-02): on its profile-heavy
#: logdir 800 files -> 40 and du of the vault 4.4 -> 3.2 MB at 64 KiB, 256 KiB and 1 MiB alike;
#: on the mixed project 42 files -> 13 / 7 / 8. Above a few hundred KB a file's part-used last
#: block is under 1% of it, while a pack's blob is read whole into memory when added (bounded by
#: this) and copied again when a purge repacks its pack
PACK_BELOW = 256 << 10
#: a batch's end (``merge_pack_index``) repacks the packs under ``blobstore.MIN_PACK`` together once
#: there are this many (each compaction writes its own pack: a batch of small runs, one of a few KB
#: a run). More than a bucket's 2: on a local disk a small pack costs a file, not requests or a
#: storage class, and a run's pack of its own lets its release delete it without copying others
MERGE_SMALL_PACKS = 8
#: ``BlobStore.forget``'s steps -> the failpoints (``faults.STEPS``) of a forget of packed blobs
#: (a purge, a restore's release, a rollback) and of a batch's end merging the pack index
FORGET_STEPS = {"forget.pack_written": "repack.pack_written", "forget.index_written": "purge.pack_index_written",
                "forget.old_index_deleted": "purge.pack_old_index_deleted",
                "forget.objects_deleted": "purge.pack_objects_deleted"}
MERGE_STEPS = {"forget.pack_written": "repack.pack_written", "forget.index_written": "merge.pack_index_written",
               "forget.old_index_deleted": "merge.pack_old_index_deleted", "forget.objects_deleted": "merge.pack_swept"}


def _forget_failpoint(step: str) -> None:
    faults.hit(FORGET_STEPS[step])


def _merge_failpoint(step: str) -> None:
    faults.hit(MERGE_STEPS[step])


#: at most this many blobs a pack (their locks are held while the pack is written and verified)
PACK_BATCH = 256
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


def compact_operation(vault: "Vault", op_id: str, in_use: Iterable[str] = (), noted: bool = False) -> Dict[str, str]:
    """After ``op_id`` committed: compact its backups (``Vault.compact_all``); digest → what was
    done. ``in_use``: digests an operation under way backs up too (another run's transaction,
    ``--jobs``): it reads that blob as its original, so it stays plain for now. ``noted``: its
    note is there already (written before the swap). Never raises: a compaction that fails leaves
    the backups as the hard links they are (safe; purge frees them), and a note it left is
    finished by the next start."""
    busy = set(in_use)
    try:
        m = vault.read_manifest(op_id)
        return vault.compact_all(op_id, [f["sha256"] for f in m.get("files", [])
                                         if isinstance(f, dict) and f.get("sha256") not in busy], manifest=m,
                                 noted=noted)
    except Exception:  # the reduction stands whatever happens here
        return {}


def note_compaction(vault: "Vault", op_id: str) -> None:
    """Leave ``op_id``'s compaction to the next start (its run was busy): a note naming its
    backups, as ``compact_all`` writes first. Never raises (the backups stay hard links)."""
    try:
        m = vault.read_manifest(op_id)
        vault.note_compaction(op_id, [f["sha256"] for f in m.get("files", []) if isinstance(f, dict)])
    except Exception:  # the reduction stands; its backups stay plain until a purge
        pass


def _note_paths(folder: str) -> List[Tuple[str, str]]:
    """(op id, path) of every note ``<op id>.json`` in ``folder``, sorted; none through a link."""
    try:
        names = sorted(os.listdir(folder)) if not os.path.islink(folder) else []
    except OSError:
        return []
    return [(n[:-5], os.path.join(folder, n)) for n in names if n.endswith(".json") and is_op_id(n[:-5])]


def read_notes(folder: str) -> Dict[str, List[str]]:
    """op id → blob digests of the notes ``<op id>.json`` in ``folder`` (a compaction's, an
    offload's): untrusted input, so only op ids and digests of the right form are taken, never
    through a link; an unreadable note names nothing."""
    out: Dict[str, List[str]] = {}
    for op_id, p in _note_paths(folder):
        try:
            with open_regular(p) as f:
                d = json.load(f)
            blobs = d.get("blobs") if isinstance(d, dict) else None
            out[op_id] = [s for s in blobs if is_sha256(s)] if isinstance(blobs, list) else []
        except (OSError, ValueError, RecursionError):
            out[op_id] = []
    return out


def damaged_notes(folder: str) -> List[Tuple[str, str]]:
    """The notes ``<op id>.json`` in ``folder`` that ``read_notes`` takes as naming nothing:
    (path, why) for each that is no regular file, does not read or parse, or is no note (no list
    of blobs). Such a note is never finished nor dropped; ``status`` names it (review R13 F5)."""
    out: List[Tuple[str, str]] = []
    for _op_id, p in _note_paths(folder):
        try:
            with open_regular(p) as f:
                d = json.load(f)
        except FileNotFoundError:
            continue  # finished meanwhile
        except OSError as e:
            kind = getattr(e, "kind", None)  # ``NotRegularFile``: a link, FIFO, folder, ...
            out.append((p, f"is {kind}, not a regular file" if kind else f"unreadable ({e.strerror or e})"))
            continue
        except (ValueError, RecursionError):
            out.append((p, "does not parse as JSON"))
            continue
        if not isinstance(d, dict) or not isinstance(d.get("blobs"), list):
            out.append((p, "is JSON but no note (no list of blobs)"))
    return out


class EveryBlob(set):
    """What ``Vault.referenced_blobs`` returns while a manifest may be unreadable in a way that
    hides which blobs it claimed: a set every digest is in (``in`` is always true, and so is it
    in a union with it, on either side), so no purge, rollback, forget or reset deletes a blob
    by its absence from the manifests read."""

    def __contains__(self, item) -> bool:
        return True

    def __or__(self, other) -> "EveryBlob":
        return EveryBlob(set.__or__(self, set(other)))

    __ror__ = __or__

    def __sub__(self, other) -> "EveryBlob":
        return EveryBlob(set.__sub__(self, set(other)))

    def __rsub__(self, other) -> set:
        return set()  # nothing is outside every blob

    def __rand__(self, other) -> set:
        return set(other)

    __and__ = __rand__


class ManifestMemo:
    """The manifests one command read, each with the key of the records it was read from
    (``Vault.manifests(memo=…)``): a restore of N runs re-reads, at each run's checks and under
    the blob locks of its release, only what changed since (issue #28: N full reads each).

    The key of an operation is everything its state is derived from: its entries in the log's
    index (sequence, segment, line, offset, length of each: records are only appended, and a
    seal or a re-indexed segment changes them) and the stat of an older version's file of it.
    A pass after the first asks the log's change feed (``oplog.Index.changed_since``) which
    operations had a record indexed since the last pass, and reads only those (and any older
    version's file, and any manifest not held): the others' keys cannot have changed, so a pass
    costs what changed, not one look-up per operation. When the feed cannot tell (the index was
    reset: a segment sealed, went or was replaced), the pass looks at every key, as the first.
    While the index holds a damaged line nothing is reused; a manifest refused is never held
    (it is read, and refused, again).
    Held marshalled, so no caller's change to a manifest it was given reaches the next one;
    memory is one full read's worth (and one slim read's: a projection with a ``memo_name``,
    such as ``vault_reads.slim``, is held apart), for the length of the command."""

    def __init__(self) -> None:
        self._held: Dict[tuple, tuple] = {}
        #: vault root -> whether it had no older version's manifest files when the pass began
        self._no_files: Dict[str, bool] = {}
        #: (vault root, projection) -> (the feed's mark when the last pass began, its op ids)
        self._passes: Dict[tuple, tuple] = {}
        #: reads answered from the memo (for tests)
        self.hits = 0

    def usable(self, vault: "Vault", keep) -> bool:
        """Whether this pass may reuse: a full read, or a projection with a ``memo_name``, of a
        log without damage."""
        if keep is not None and not isinstance(getattr(keep, "memo_name", None), str):
            return False
        idx = oplog.index(vault.root)
        if any(idx.damaged.values()) or oplog.hiding_damage(vault.root):
            return False
        # no folder of older-version files (none is written now): no file to look for per operation
        self._no_files[vault.root] = not os.path.lexists(vault.ops)
        return True

    def since(self, vault: "Vault", keep) -> tuple:
        """``(mark, changed, logged)`` for a pass beginning now: the feed's mark (give it to
        ``passed``), the op ids whose records changed since the last pass in ``keep``'s
        projection and the op ids the log held a state of then — ``changed`` None when every
        key must be looked at (no earlier pass, or the feed cannot tell)."""
        idx = oplog.index(vault.root)
        mark = idx.mark()
        last = self._passes.get((vault.root, getattr(keep, "memo_name", None)))
        changed = idx.changed_since(last[0]) if last is not None else None
        return mark, changed, (last[1] if last is not None else None)

    def passed(self, vault: "Vault", keep, mark: tuple, ids: Iterable[str]) -> None:
        """Remember a pass that began at ``mark``, when the log held a state of each of ``ids``."""
        self._passes[(vault.root, getattr(keep, "memo_name", None))] = (mark, frozenset(ids))

    def key(self, vault: "Vault", op_id: str) -> Optional[tuple]:
        """What ``op_id``'s manifest is read from now (None: it cannot be told, read it)."""
        if not is_op_id(op_id):
            return None
        legacy = None
        if not self._no_files.get(vault.root):
            try:
                st = os.lstat(vault.manifest_path(op_id))
                legacy = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            except FileNotFoundError:
                legacy = None
            except OSError:
                return None
        return tuple(oplog.index(vault.root).entries(op_id)), legacy

    #: what ``get`` answers for a manifest held that ``where`` does not take (not copied out)
    PASSED_OVER: dict = {}

    def get(self, root: str, op_id: str, key: Optional[tuple], keep=None, where=None) -> Optional[dict]:
        """What was held of ``op_id`` (in ``keep``'s projection) if read from ``key`` (None: as
        last read, the caller knowing nothing of it changed since), else None; ``PASSED_OVER``
        when ``where(run, kind)`` does not take it (judged on its fields held beside it)."""
        held = self._held.get((root, op_id, getattr(keep, "memo_name", None)))
        if held is None or (key is not None and held[0] != key):
            return None
        self.hits += 1
        if where is not None and not where(*held[2]):
            return self.PASSED_OVER
        return marshal.loads(held[1])

    def forget(self, root: str, op_id: str, keep=None) -> None:
        """Hold nothing of ``op_id`` (in ``keep``'s projection): it is being read again."""
        self._held.pop((root, op_id, getattr(keep, "memo_name", None)), None)

    def put(self, root: str, op_id: str, key: tuple, m: dict, keep=None) -> None:
        """Hold ``m`` (``op_id``'s manifest, in ``keep``'s projection) as read from ``key``."""
        name = (root, op_id, getattr(keep, "memo_name", None))
        try:
            self._held[name] = (key, marshal.dumps(m), (m.get("run"), m.get("kind")))
        except ValueError:
            self._held.pop(name, None)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


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


def _blocks(n: int, st: os.stat_result) -> int:
    """Filesystem blocks ``n`` bytes take (what a compression must save: a small file's block
    costs the same compressed or not)."""
    bs = getattr(st, "st_blksize", 0) or 4096
    return (n + bs - 1) // bs


class Vault:
    """A vault directory: blobs, manifests and scratch space."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.blobs = os.path.join(self.root, "blobs")
        self.ops = os.path.join(self.root, "ops")
        self.tmp = os.path.join(self.root, "tmp")
        #: manifests ``manifests()`` refused (``trust.Untrusted``), to report
        self.problems: list = []
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

    def restore_blob(self, sha: str, dest: str, mode: Optional[int] = None,
                     mtime: Optional[float] = None, mtime_ns: Optional[int] = None,
                     tmp_token: Optional[str] = None, owner: Optional[Tuple[int, int]] = None,
                     place: Optional[Callable[[str, str], None]] = None) -> None:
        """Put the blob's bytes at ``dest`` (a verified temp copy in the same dir, then ``place``),
        with ``mode``, the modification time (``mtime_ns`` to the nanosecond, else the older
        records' float ``mtime``) and, when root, the recorded ``owner`` (``files.give_owner``)
        set on the copy before it takes the name. ``place(tmp, dest)``: how the verified temp takes
        ``dest``'s place, as the folder's swap strategy says (``placement.put_in_place``: renamed, or
        copied over and deleted); a rename by default. Either way a blob that does not read back
        as ``sha`` is found in the temp, before anything at ``dest`` is touched.

        Always a copy, never a link of the blob: a hard-linked blob shares its inode with the
        file it backs up, so setting the restored file's mode or time, or a writer appending to
        it later, would change the backup too. A compressed blob is decompressed into the temp
        file and hashed on the way; one that does not decode to ``sha`` never takes ``dest``'s
        name (``VaultError`` naming ``dest``). Every form (plain, ``.zst``, packed, remote) is
        written through a ``SparseWriter``: zero blocks go back as holes. ``tmp_token``: the
        restore's journaled token of its temp names (``restore_tmp_path``; a random one without)."""
        if not self._plain_usable(sha) and (self._has_zst(sha) or remote_vault.has_record(self.root, sha)
                                            or remote_vault.packed_ref(self.root, sha) is not None):
            return self._restore_zst(sha, dest, mode, mtime, mtime_ns, tmp_token, owner, place)  # streamed, hashed
        blob = self.blob_path(sha)
        if not self.check_blob(sha):
            raise VaultError(errno.EIO, f"backup of {dest} is missing or damaged in {self.root} (sha256 {sha[:12]}…)")
        d = os.path.dirname(dest)
        os.makedirs(d, exist_ok=True)
        tmp = restore_tmp_path(d, sha, tmp_token)
        made = None  # the temp file this call made: the only one its cleanup removes
        # a copy, so the blob stays valid whatever happens to dest later; made where nothing
        # stands (never over or instead of a file there), and hashed, chmod'ed and timed through
        # its fd (``files.copy_new``): a name swapped meanwhile is never followed
        try:
            try:
                # holes put back as holes: a sparse original never comes back allocated whole
                made = copy_new(blob, tmp, sha, mode, mtime_ns=mtime_ns, mtime=mtime, exclusive=True, sparse=True,
                                owner=owner)
            except (FileNotFoundError, CopyMismatch):
                if not self._has_zst(sha) and remote_vault.packed_ref(self.root, sha) is None:
                    raise
                # compacted or packed (by another run's compaction) between the check and the
                # copy, or the plain blob beside the .zst changed: the compressed or packed form is
                # the backup (``copy_new`` removed its temp)
                return self._restore_zst(sha, dest, mode, mtime, mtime_ns, tmp_token, owner, place)
            faults.hit("restore_copied")
            (place or fsops.replace)(tmp, dest)
        except CopyMismatch:
            raise VaultError(errno.EIO, f"restored copy of {dest} does not match its hash") from None
        except BaseException:
            if made is not None:
                with contextlib.suppress(OSError):
                    unlink_if_same(tmp, made)  # a failure after the copy leaves no temp file behind
            raise
        fsync_dir(d)

    def _restore_zst(self, sha: str, dest: str, mode: Optional[int], mtime: Optional[float],
                     mtime_ns: Optional[int], tmp_token: Optional[str] = None,
                     owner: Optional[Tuple[int, int]] = None,
                     place: Optional[Callable[[str, str], None]] = None) -> None:
        """``restore_blob`` from a compressed blob, or from the remote vault: one pass
        decompresses (or downloads), hashes and writes a new temp file (``create_exclusive``, set up
        through its fd as ``files.copy_new`` does); only a copy that hashes to ``sha`` takes
        ``dest``'s place (``place``, a rename by default). A remote blob that fails raises ``remote_vault.RemoteReadError`` (its code,
        the object named, and ``dest``); nothing takes ``dest``'s name."""
        d = os.path.dirname(dest)
        os.makedirs(d, exist_ok=True)
        tmp = restore_tmp_path(d, sha, tmp_token)
        made = None  # the temp file this call made: the only one its cleanup removes
        try:
            fd = create_exclusive(tmp)
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
            check_still(tmp, ident)
            faults.hit("restore_copied")
            (place or fsops.replace)(tmp, dest)
        except BaseException:
            if made is not None:
                with contextlib.suppress(OSError):
                    unlink_if_same(tmp, made)  # garbage never stays, not even under a temp name
            raise
        fsync_dir(d)

    # --- pins: blobs a transaction under way relies on -----------------------------------
    def _pins_dir(self, op_id: str) -> str:
        if not is_op_id(op_id):
            raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a folder name")
        return os.path.join(self.tmp, op_id, "pins")

    def pin_blob(self, op_id: str, sha: str, sync: bool = True) -> None:
        """Record, durably (``sync``; else at the transaction's ``sync_pinned``), that transaction
        ``op_id`` relies on blob ``sha``: an empty file ``tmp/<op_id>/pins/<sha>`` (not a hard link
        of the blob: a second link is how compaction, offload and store tell a blob a live file
        still shares). Call under the blob's lock."""
        self.blob_path(sha)  # refuses a name that is not a digest
        folder = self._pins_dir(op_id)
        # makes or checks every folder from the vault down to it
        ensure_private_dir(folder, self.root, tighten_root=self.own_folder)
        p = os.path.join(folder, sha)
        if not os.path.lexists(p):
            os.close(create_new(p))
            if sync:
                fsync_dir(folder)

    def unpin(self, op_id: str) -> int:
        """Drop every pin of ``op_id`` (its transaction committed, its manifest durable, or rolled
        back); pins removed. Only digest-named regular files in a real folder are removed."""
        with self._unsynced_lock:
            self._unsynced.pop(op_id, None)  # nothing of it needs syncing any more
        try:
            folder = self._pins_dir(op_id)
        except VaultError:
            return 0
        if os.path.islink(folder) or not os.path.isdir(folder) or os.path.islink(os.path.dirname(folder)):
            return 0
        n = 0
        for name in os.listdir(folder):
            p = os.path.join(folder, name)
            if is_sha256(name) and not os.path.islink(p) and os.path.isfile(p):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
                    n += 1
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(folder))  # an empty op folder (its scratch already gone)
        return n

    def pinned_ops(self) -> List[str]:
        """Op ids with a pins folder in ``tmp/`` (untrusted names: op ids only, no symlink)."""
        try:
            names = os.listdir(self.tmp) if not os.path.islink(self.tmp) else []
        except OSError:
            return []
        out = []
        for n in sorted(names):
            d = os.path.join(self.tmp, n)
            if is_op_id(n) and not os.path.islink(d) and os.path.isdir(os.path.join(d, "pins")) \
                    and not os.path.islink(os.path.join(d, "pins")):
                out.append(n)
        return out

    def pins_of(self, op_id: str) -> List[str]:
        """The digests ``op_id`` pins (digest-named regular files in its real pins folder; read
        only, untrusted names skipped), sorted; [] when it pins nothing."""
        try:
            folder = self._pins_dir(op_id)
        except VaultError:
            return []
        if os.path.islink(folder) or os.path.islink(os.path.dirname(folder)) or not os.path.isdir(folder):
            return []
        try:
            names = os.listdir(folder)
        except OSError:
            return []
        return sorted(n for n in names if is_sha256(n) and not os.path.islink(os.path.join(folder, n)))

    def _rolled_back(self, op_id: str) -> bool:
        """Whether ``op_id``'s manifest says it rolled back: its originals are back, so its pins
        protect nothing (its own rollback deletes the blobs only it needed). Unreadable: False."""
        try:
            if oplog.has_state(self.root, op_id):
                m, damage = oplog.segment_state(self.root, op_id)
                m = None if damage is not None else m
            else:
                with open_regular(self.manifest_path(op_id)) as f:
                    m = json.load(f)
        except (OSError, ValueError, RecursionError):  # VaultError is an OSError
            return False
        return isinstance(m, dict) and m.get("op_id") == op_id and m.get("outcome") == "rolled_back"

    def pinned_by(self, sha: str, ops: Optional[List[str]] = None) -> List[str]:
        """Op ids of transactions whose live pin names ``sha`` (any logdir sharing this vault);
        ``ops``: ``pinned_ops()`` when the caller listed them already (for many digests at once)."""
        if not is_sha256(sha):
            return []
        return [op for op in (self.pinned_ops() if ops is None else ops)
                if os.path.lexists(os.path.join(self.tmp, op, "pins", sha)) and not self._rolled_back(op)]

    # --- compaction (the compressed vault) --------------------------------------------
    def _pending_path(self, op_id: str) -> str:
        if not is_op_id(op_id):
            raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a file name")
        return os.path.join(self.root, "compact", f"{op_id}.json")

    def note_compaction(self, op_id: str, shas: List[str], waits_for: Optional[dict] = None) -> None:
        """Record, before the first step, which blobs an operation's compaction works on: a kill
        midway is finished by the next start (``pending_compactions``). ``waits_for``: the
        process (``{host, pid, pid_start}``) whose batch compacts it in a later round; another
        process's start leaves the note to it while it runs (``compaction_waits_for``)."""
        ensure_private_dir(os.path.join(self.root, "compact"), self.root, tighten_root=self.own_folder)
        doc = {"op_id": op_id, "blobs": [s for s in shas if is_sha256(s)]}
        if waits_for:
            doc["waits_for"] = waits_for
        atomic_write_json(self._pending_path(op_id), doc)

    def compaction_waits_for(self, op_id: str) -> Optional[dict]:
        """The process a compaction note says will compact it (``note_compaction``'s
        ``waits_for``: ``host`` a str, ``pid`` an int, ``pid_start`` an int or None), or None
        (no such field, or not of that form: the note is anyone's to finish)."""
        try:
            with open_regular(self._pending_path(op_id)) as f:
                d = json.load(f)
        except (OSError, ValueError, RecursionError):
            return None
        w = d.get("waits_for") if isinstance(d, dict) else None
        if not (isinstance(w, dict) and isinstance(w.get("host"), str) and isinstance(w.get("pid"), int)
                and not isinstance(w.get("pid"), bool)
                and (w.get("pid_start") is None or isinstance(w.get("pid_start"), int))):
            return None
        return {"host": w["host"], "pid": w["pid"], "pid_start": w.get("pid_start")}

    def compaction_noted_ns(self, op_id: str) -> Optional[int]:
        """When ``op_id``'s compaction note was last written (its mtime, ns), or None (no note, or
        not a regular file): a process that started after that cannot have written it."""
        try:
            st = os.lstat(self._pending_path(op_id))
        except OSError:
            return None
        return st.st_mtime_ns if stat.S_ISREG(st.st_mode) else None

    def pending_compactions(self) -> Dict[str, List[str]]:
        """op id → blob digests of compactions noted and not finished (``read_notes``; an
        unreadable note names nothing to compact, and is dropped)."""
        return read_notes(os.path.join(self.root, "compact"))

    def done_compaction(self, op_id: str) -> None:
        """Drop an operation's compaction note once every blob it names is settled."""
        with contextlib.suppress(FileNotFoundError):
            fsops.unlink(self._pending_path(op_id))

    def compact_all(self, op_id: str, shas: Iterable[str], manifest: Optional[dict] = None,
                    noted: bool = False) -> Dict[str, str]:
        """Compact the blobs of committed operation ``op_id`` (``compact_ops`` of it alone, noted
        first so a kill is finished at the next start, unless ``noted``: its note names them
        already); digest → what was done. ``manifest``: ``op_id``'s, when the caller read it already."""
        return self.compact_ops({op_id: list(shas)}, {op_id: manifest} if manifest is not None else None,
                                noted=noted)[op_id]

    def compact_ops(self, ops: Mapping[str, List[str]], manifests: Optional[Mapping[str, dict]] = None, *,
                    busy: Iterable[str] = (), noted: bool = False, prune: bool = True
                    ) -> Dict[str, Dict[str, str]]:
        """Compact the backups of committed operations together (``op id → digests``): each
        operation noted first (unless ``noted``: its caller did), so a kill is finished at the
        next start; every small blob of them all in as few packs as they fill (``PACK_BATCH``
        blobs a pack, not one pack an operation), the others compressed one by one. One scan of
        ``/proc`` for writers covers those compressed one by one; none is made for the ones
        packed, whose lease probe under their lock (``_packable``) already answers for every
        descriptor on the machine, those /proc shows included, and later. ``busy``: digests a
        transaction under way backs up too (it reads that blob as its original): left plain and
        said ``KEPT_BUSY``. An operation's note stays while one of its blobs was kept because a
        writer may hold it or another transaction or process was using it: it is tried again
        (the next start, or the batch's end). ``prune``: the shard folders the packing empties
        removed (``prune_shards``; a batch's rounds leave it to the batch's end). op id → digest →
        what was done."""
        manifests = manifests or {}
        busy = set(busy)
        todo = {op: list(dict.fromkeys(s for s in shas if is_sha256(s))) for op, shas in ops.items()}
        if not noted:
            for op, shas in todo.items():
                self.note_compaction(op, shas)
        small: set = set()
        rest: set = set()
        for op, shas in todo.items():
            free = [s for s in shas if s not in busy]
            cand = set(self._pack_candidates(op, free, manifests.get(op)))
            small |= cand
            rest.update(s for s in free if s not in cand)
        small -= rest  # a salvaged backup in one operation stays a blob of its own for all (its mtime)
        alone = sorted(rest)
        # a profile-heavy run's backups all go to a pack: its /proc walk cost ~2.5 ms a run for
        # nothing (a read lease is refused while any process holds the inode open for writing)
        held = {h.path for h in find_writers([self.blob_path(s) for s in alone]).holders} if alone else set()
        done: Dict[str, str] = {s: self.compact(s, held=self.blob_path(s) in held) for s in alone}
        packed = sorted(small)
        for i in range(0, len(packed), PACK_BATCH):
            # a store failure raises: the notes stay and the blobs stay plain (the next start packs them)
            done.update(self.pack(packed[i:i + PACK_BATCH], held, prune=prune))
        done.update((s, KEPT_BUSY) for s in busy)
        out: Dict[str, Dict[str, str]] = {}
        for op, shas in todo.items():
            out[op] = {s: done[s] for s in shas if s in done}
            if not any(v in (KEPT_OPEN, KEPT_BUSY) for v in out[op].values()):
                self.done_compaction(op)
        return out

    # --- packs: small blobs together in the vault's pack store ----------------------------
    @contextlib.contextmanager
    def pack_lock(self, exclusive: bool):
        """The lock of the vault's pack store (``compact/packs.lock``): a compaction's packing
        shares it, a forget of packed blobs takes it alone (``BlobStore.forget`` must not run
        beside an add). Always taken before any blob's lock (the offload's lock is another)."""
        folder = os.path.join(self.root, "compact")
        ensure_private_dir(folder, self.root, tighten_root=self.own_folder)
        with lock_held(os.path.join(folder, "packs.lock"), shared=not exclusive):
            yield

    def _pack_candidates(self, op_id: str, shas: List[str], manifest: Optional[dict] = None) -> List[str]:
        """The digests a compaction packs: a plain blob alone (no ``.zst`` beside it), smaller than
        ``PACK_BELOW``, in a vault that does not offload to a bucket (those go there), and not a
        salvaged backup (its mtime, its late writer's last write, lives on the blob only)."""
        if PACK_BELOW <= 0 or remote_vault.configured_url(self.root) is not None:
            return []
        try:
            m = self.read_manifest(op_id) if manifest is None else manifest
            grown = {f.get("sha256") for f in m.get("files", []) if isinstance(f, dict) and f.get("grew_from")}
        except Exception:  # noqa: BLE001 - no manifest readable: nothing packed, compaction as before
            return []
        out = []
        for sha in shas:
            if sha in grown or self._has_zst(sha):
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(self.blob_path(sha))
                if stat.S_ISREG(st.st_mode) and st.st_size < PACK_BELOW:
                    out.append(sha)
        return sorted(out)

    def pack(self, shas: List[str], held: Iterable[str] = (), prune: bool = True) -> Dict[str, str]:
        """Put the plain blobs ``shas`` into one pack of the vault's pack store (the module's
        docstring: locks, checks, ``add``, then each plain blob unlinked); digest → what was done
        (``PACKED`` or a ``KEPT_*`` as ``compact`` says it). ``held``: paths a ``/proc`` scan found
        open for writing. A store failure raises ``BlobFailure``/``OSError`` with every blob still
        plain; a blob that does not hash to its name is ``KEPT_DAMAGED`` and the rest are packed."""
        held = set(held)
        out: Dict[str, str] = {}
        with self.pack_lock(exclusive=False), contextlib.ExitStack() as stack:
            todo: Dict[str, os.stat_result] = {}
            folder = stack.enter_context(self._lock_folder())
            for sha in sorted(dict.fromkeys(s for s in shas if is_sha256(s))):
                if not stack.enter_context(self._blob_lock(sha, dir_fd=folder)):
                    out[sha] = KEPT_BUSY  # another process compacts or deletes it now
                    continue
                why, st = self._packable(sha, self.blob_path(sha) in held)
                if why is None:
                    todo[sha] = st
                else:
                    out[sha] = why
            if not todo:
                return out
            # this process's cached index (a batch of runs lists it once, not once a run): under the
            # shared lock no forget runs, and a stale entry only costs a read-back (``add`` checks a
            # stored copy before it claims it, and lists it again) or a second copy
            bs = remote_vault.pack_store(self.root, create=True)
            refs = self._add_plain(bs, todo, out)
            remote_vault.tighten_pack_dirs(self.root, [r.key for r in refs])
            # no fsync of the folders after the unlinks: the pack and its index are durable (``add``),
            # so an unlink a crash undoes only leaves a second copy of the same verified bytes, which
            # the next compaction drops again; syncing each blob folder cost a run of 100 small
            # backups ~80 folder fsyncs (a third of the compressed vault's extra reduce time)
            for ref in refs:
                out[ref.sha] = PACKED if self._drop_plain(ref.sha, todo[ref.sha]) else KEPT_DAMAGED
                faults.hit("reduce.pack_unlinked")
            # the shard folders the packed blobs leave empty (4 KiB each, up to 256 a vault); a
            # batch's rounds leave that to its end (``prune``), or the next backups make them again
            if prune:
                self.prune_shards(sha for sha, what in out.items() if what == PACKED)
        return out

    def _packable(self, sha: str, held: bool):
        """(None, its stat) when the plain blob may be packed now (under its lock), else
        (why not, None): the checks ``_compact_locked`` makes before it compresses."""
        try:
            st = os.lstat(self.blob_path(sha))
        except FileNotFoundError:
            form = self.blob_form(sha)
            return (PACKED if form == "packed" else COMPRESSED if form == "zst" else MISSING), None
        if not stat.S_ISREG(st.st_mode):
            return KEPT_DAMAGED, None
        if st.st_nlink > 1:
            return KEPT_SHARED, None  # the original (or a user's link) still holds these blocks
        if self.pinned_by(sha):
            return KEPT_BUSY, None  # a transaction under way reads it as its original's backup
        # the kernel's lease answers for every descriptor anywhere; None (NFS, …) keeps it plain
        if held or no_writer_anywhere(self.blob_path(sha)) is not True:
            return KEPT_OPEN, None
        return None, st

    def _add_plain(self, bs, todo: Dict[str, os.stat_result], out: Dict[str, str]) -> list:
        """``BlobStore.add`` of the plain blobs ``todo``: verified refs; a blob whose bytes are not
        its name's is ``KEPT_DAMAGED`` and the others are added again."""
        left = sorted(todo)
        while left:
            sources = [BlobSource(sha=s, size=todo[s].st_size, open=functools.partial(open_regular, self.blob_path(s)))
                       for s in left]
            try:
                return bs.add(sources)
            except BlobFailure as e:
                if e.sha in left and e.code == BlobError.MISMATCH:
                    out[e.sha] = KEPT_DAMAGED  # other bytes than its name: kept, for health to name
                    left.remove(e.sha)
                    continue
                raise
        return []

    def _drop_plain(self, sha: str, was: os.stat_result) -> bool:
        """Unlink a packed blob's plain form (under its lock, after ``add`` returned its verified
        ref): only while its name is still the inode that was read, with one link, the same size
        and time, and hashing to its name; True when it went."""
        p = self.blob_path(sha)
        try:
            st = os.lstat(p)
            if not (_same_file(st, was) and st.st_nlink == 1 and st.st_size == was.st_size
                    and st.st_mtime_ns == was.st_mtime_ns) or sha256_file(p) != sha:
                return False
        except OSError:
            return False
        fsops.unlink(p)
        return True

    def forget_packed_copies(self, shas: List[str]) -> int:
        """Forget from the vault's packs the blobs a remote vault now holds (``engine.offload``:
        each has a record, durable before this is called); how many went. Under the pack lock
        alone and each blob's lock; a blob a live pin names, or without a well-formed record, stays."""
        with self.pack_lock(exclusive=True), contextlib.ExitStack() as stack:
            todo = []
            for sha in sorted(dict.fromkeys(s for s in shas if is_sha256(s))):
                stack.enter_context(self._blob_lock(sha, wait=True))
                if remote_vault.read_record(self.root, sha) is not None and not self.pinned_by(sha):
                    todo.append(sha)
            return sum(1 for n in self._forget_packed(todo).values() if n)

    def packed_orphans(self, referenced) -> Dict[str, int]:
        """Packed blobs no manifest refers to (``referenced`` does not name them): sha256 → bytes
        they take in their packs. Reported like the plain and compressed ones, never forgotten
        (they may be the only copy of something whose manifest was lost)."""
        bs = remote_vault.pack_store(self.root)
        if bs is None:
            return {}
        try:
            bs.reload()
            return {r.sha: r.length for r in bs.refs() if r.sha not in referenced}
        except (BlobFailure, StoreFailure, OSError):
            return {}  # the packs do not list: pack_problems names that

    def pack_problems(self, referenced: Optional[Iterable[str]] = None) -> List[dict]:
        """Damage in the vault's packs that a look without reading any blob finds: index objects
        that do not read (``index_damaged``: no packed backup is forgotten while one is, and the
        blobs only it listed read as missing) and packs gone or shorter than a blob the index
        places in them (``blob_missing``, ``blob_corrupt``); ``verify`` hashes every packed blob.
        Each: ``{"code", "file", "message"}`` (a ``codes.BlobError`` value; the message is about the file).
        And ``pack_index_gaps(referenced)``: an index folder gone, replaced or holding a renamed
        object, or backups the operations need that nothing lists (no leftover is swept then)."""
        bs = remote_vault.pack_store(self.root, fresh=True)
        if bs is None:
            return []
        root = remote_vault.packs_root(self.root)
        try:
            damaged = bs.damaged_index()
            ends: Dict[str, int] = {}
            for ref in bs.refs():
                ends[ref.key] = max(ends.get(ref.key, 0), ref.offset + ref.length)
            sizes = {e.key: e.size for e in bs.store.list("data")}
        except (BlobFailure, StoreFailure, OSError) as e:
            return [{"code": BlobError.STORE.value, "file": root, "message": f"the vault's packs do not list ({e}); "
                     "their backups cannot be read now"}]
        out = [{"code": BlobError.DAMAGED_INDEX.value, "file": os.path.join(root, d["key"]),
                "message": f"the vault's pack index does not read ({d['message']}); "
                           "no packed backup is deleted while it is damaged, and those only it lists read as "
                           "missing"} for d in damaged]
        for key, end in sorted(ends.items()):
            f = os.path.join(root, key)
            if key not in sizes:
                out.append({"code": BlobError.MISSING.value, "file": f,
                            "message": "a pack of backups is missing from the vault"})
            elif sizes[key] < end:
                out.append({"code": BlobError.CORRUPT.value, "file": f,
                            "message": f"a pack of backups is shorter ({sizes[key]} bytes) than its index "
                                       f"says ({end}); the backups in it are damaged"})
        return out + self.pack_index_gaps(referenced)

    def pack_index_gaps(self, referenced: Optional[Iterable[str]] = None) -> List[dict]:
        """Why the packs' index cannot be trusted to list every packed backup, as ``pack_problems``
        entries (code ``index_damaged``, the file: ``<vault>/packs/index``): the folder gone while
        packs exist, something else standing there, a name in it that is not an index object (a
        renamed one), or — while some data object is listed by no index — a blob ``referenced``
        (default: ``referenced_blobs()``, read only then) that no index lists and the vault holds
        neither plain, compressed nor offloaded (a record whose remote vault lists it now:
        ``_remote_holds``). Every pack no index
        lists counts as a killed compaction's leftover and is deleted past its grace, so while any
        of these stands no leftover is (``merge_pack_index``): the pack may be the only copy of those
        backups. Nothing when the vault has no packs or an index object is damaged (named already,
        and it blocks every forget)."""
        if not remote_vault.has_packs(self.root):
            return []
        root = remote_vault.packs_root(self.root)
        folder = os.path.join(root, "index")

        def gap(message: str) -> dict:
            return {"code": BlobError.DAMAGED_INDEX.value, "file": folder, "message": message}

        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            st = None
        except OSError as e:
            return [gap(f"the vault's pack index cannot be looked at ({e}); no pack is deleted as a leftover")]
        if st is not None and not stat.S_ISDIR(st.st_mode):
            return [gap("the vault's pack index is not a folder; no pack is deleted as a leftover, and the backups "
                        "in the packs read as missing until the index folder is put back")]
        if st is None:
            data = os.path.join(root, "data")
            with contextlib.suppress(OSError):
                for sub in sorted(os.listdir(data)):
                    if os.path.isdir(os.path.join(data, sub)) and os.listdir(os.path.join(data, sub)):
                        return [gap("the vault's pack index folder is missing while packs exist; no pack is "
                                    "deleted as a leftover, and the backups in them read as missing until it is "
                                    "put back")]
            return []
        try:
            strays = sorted(n for n in os.listdir(folder) if not _INDEX_NAME.match(n) and not n.startswith(TMP_PREFIX))
        except OSError as e:
            return [gap(f"the vault's pack index does not list ({e}); no pack is deleted as a leftover")]
        if strays:
            return [gap(f"the vault's pack index holds {len(strays)} file(s) that are not index objects "
                        f"({', '.join(strays[:3])}): a renamed index object hides the backups it lists; no pack "
                        "is deleted as a leftover until it is put back or removed")]
        bs = remote_vault.pack_store(self.root)
        try:
            bs.reload()
            if bs.damaged_index():
                return []  # named by pack_problems, and no forget deletes anything meanwhile
            listed = bs.has
            keys = {r.key for ref in bs.refs() for r in bs.candidates(ref.sha)}
            unlisted = any(e.key not in keys for e in bs.store.list("data"))
        except (BlobFailure, StoreFailure, OSError) as e:
            return [gap(f"the vault's pack index does not read ({e}); no pack is deleted as a leftover")]
        if not unlisted:
            return []  # no leftover to take for one: a backup missing here is health's "missing" alone
        missing = []
        remote: Dict[str, object] = {}  # URL -> its blob store (None: it does not read now)
        for sha in sorted(set(self.referenced_blobs() if referenced is None else referenced)):
            if not is_sha256(sha) or listed(sha):
                continue
            held = False
            for p in (self.blob_path(sha), self.zst_path(sha)):
                with contextlib.suppress(OSError):
                    held = held or stat.S_ISREG(os.lstat(p).st_mode)
            if not held and not self._remote_holds(sha, remote):
                missing.append(sha)
        if missing:
            return [gap(f"{len(missing)} backup(s) the operations need are listed by no index object and are not in "
                        f"the blobs folder (sha256 {', '.join(s[:12] + '…' for s in missing[:3])}): an index object "
                        "may be gone; no pack is deleted as a leftover, since one may be their only copy")]
        return []

    def _remote_holds(self, sha: str, stores: Dict[str, object]) -> bool:
        """Whether ``sha``'s ``.remote`` record stands for a copy: a record is untrusted input (a
        planted or stale one would let the only pack holding ``sha`` be swept as a leftover), so
        it counts only when it names a remote vault this vault offloaded to and that vault's own
        index lists ``sha`` now (read afresh once per URL in ``stores``). Any doubt: False."""
        rec = remote_vault.read_record(self.root, sha)
        if rec is None:
            return False
        url = rec["url"]
        if url not in stores:
            try:
                stores[url] = remote_vault.blobstore(url, fresh=True)
            except Exception:  # noqa: BLE001 - a store that does not open backs nothing now
                stores[url] = None
        bs = stores[url]
        try:
            return bs is not None and bs.ref(sha) is not None
        except Exception:  # noqa: BLE001 - unreachable or unreadable: the record proves nothing
            stores[url] = None
            return False

    def _forget_packed(self, shas: List[str]) -> Dict[str, int]:
        """``BlobStore.forget`` of packed blobs (hold the pack lock alone and their locks); digest →
        bytes they took in their packs. Nothing is forgotten while an index object is damaged:
        ``RemoteReadError`` (``index_damaged``) naming it, so a purge stays unfinished and says why."""
        bs = remote_vault.pack_store(self.root)  # ``forget`` lists the index again itself
        if bs is None or not shas:
            return {}
        sizes = {s: (bs.ref(s).length if bs.ref(s) is not None else 0) for s in shas}
        # no sweep: a restore's release of one run touches the packs its blobs are in, not the
        # whole vault (leftovers are swept at a batch's end, ``merge_pack_index``)
        fig = bs.forget(shas, sweep=False, failpoint=_forget_failpoint)
        remote_vault.tighten_pack_dirs(self.root, [r.key for r in bs.refs()])  # a repack's new pack
        blocked = fig.get("blocked_by_damaged_index")
        if blocked:
            names = ", ".join(os.path.join(remote_vault.packs_root(self.root), k) for k in blocked[:3])
            raise remote_vault.RemoteReadError(BlobError.DAMAGED_INDEX, blocked[0],
                                               f"{names}: the vault's pack index does not read; no packed backup is "
                                               f"deleted while one is damaged ({len(shas)} kept); repair or remove it")
        return {s: (n if not bs.has(s) else 0) for s, n in sizes.items()}

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
                    mine = _same_file(os.fstat(fd), os.lstat(path, **at))
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

    def _set_lock_aside(self, path: str, dir_fd: Optional[int]) -> None:
        """A stranger at a blob lock's name set aside (``storage.private``: renamed beside itself,
        never followed or deleted; ``set_aside_findings`` names it in status); gone meanwhile: fine."""
        with contextlib.suppress(FileNotFoundError):
            if dir_fd is None:
                set_aside(path)
            else:
                set_aside_at(dir_fd, path)

    def _tmp_names(self, sha: str) -> List[str]:
        """Temp files of compactions of ``sha`` (``<sha>.zst.tmp``, ``<sha>.zst.tmp-<pid>-…``)."""
        folder, pre = os.path.dirname(self.blob_path(sha)), sha + ZST_TMP_SUFFIX
        try:
            return [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(pre)]
        except OSError:
            return []

    def compact(self, sha: str, held: Optional[bool] = None) -> str:
        """Replace a plain blob no live file shares by a verified ``.zst`` (see the module's
        docstring for the order); idempotent, so a killed compaction is finished by calling it
        again. Returns one of ``COMPRESSED``, ``KEPT_*``, ``MISSING``."""
        self.blob_path(sha)  # the digest is checked before any name is made from it
        with self._blob_lock(sha) as mine:
            if not mine:
                return KEPT_BUSY  # another process compacts it: two never share a temp or a step
            return self._compact_locked(sha, held)

    def _compact_locked(self, sha: str, held: Optional[bool]) -> str:
        plain, z = self.blob_path(sha), self.zst_path(sha)
        # under the blob's lock every temp name of it is a killed compaction's leftover
        for t in self._tmp_names(sha):
            with contextlib.suppress(FileNotFoundError):
                fsops.unlink(t)
        try:
            st = os.lstat(plain)
        except FileNotFoundError:
            form = self.blob_form(sha)
            return COMPRESSED if form == "zst" else PACKED if form == "packed" else MISSING
        if not stat.S_ISREG(st.st_mode):
            return KEPT_DAMAGED
        if st.st_nlink > 1:
            return KEPT_SHARED  # the original (or a user's link) still holds these blocks
        if self.pinned_by(sha):
            # a transaction under way (any logdir sharing this vault) reads it as its original's
            # backup: it stays plain; the note stays and the next start tries again
            return KEPT_BUSY
        if held is None:
            held = bool(find_writers([plain]).holders)
        # /proc shows only the processes this user can inspect on this machine; the kernel's
        # lease answers for every descriptor anywhere (None: it cannot tell, e.g. NFS -> kept)
        if held or no_writer_anywhere(plain) is not True:
            return KEPT_OPEN
        folder = os.path.dirname(plain)
        if os.path.lexists(z):
            # a compaction killed between its rename and its unlink, or a blob stored again beside
            # its .zst: each form is removed only when the other is proven to hold the backup
            try:
                plain_ok = sha256_file(plain) == sha
            except OSError:
                plain_ok = False
            if self._zst_ok(z, sha, st.st_size if plain_ok else None):
                if not plain_ok:
                    return KEPT_DAMAGED  # other bytes under the name (a late writer's: salvage's)
                faults.hit("compact_before_unlink")
                fsops.unlink(plain)
                fsync_dir(folder)
                return COMPRESSED
            if not plain_ok:
                return KEPT_DAMAGED  # neither form verifies: both kept, for health to name
            fsops.unlink(z)  # a damaged .zst never stands for a backup; the verified plain blob does
        tmp = f"{plain}{ZST_TMP_SUFFIX}-{os.getpid()}-{os.urandom(4).hex()}"  # one per attempt
        fd = create_new(tmp)
        try:
            with os.fdopen(fd, "wb") as out, open_regular(plain) as src:
                got = zst.compress_stream(src, out, st.st_size)
                out.flush()
                if got is not None and _blocks(got[1], st) <= (1 - MIN_SAVING) * _blocks(got[0], st):
                    os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))  # the blob's time is kept
                    os.fsync(out.fileno())
                else:
                    got = None
                ident = os.fstat(out.fileno())
            if got is None:
                fsops.unlink(tmp)
                return KEPT_INCOMPRESSIBLE
            faults.hit("compact_written")
            # verified through a descriptor of the very inode written, then followed by identity
            with open_regular(tmp) as check:
                ok = _same_file(os.fstat(check.fileno()), ident) and self._zst_ok_file(check, sha, st.st_size)
            if not ok:
                fsops.unlink(tmp)
                return KEPT_DAMAGED  # the plain blob did not hash to its name: left for health to name
            faults.hit("compact_verified")
            fsops.replace(tmp, z)
            fsync_dir(folder)
            faults.hit("compact_renamed")
            if not _same_file(os.lstat(z), ident):
                return KEPT_DAMAGED  # the name is not the inode verified: the plain blob stays
            fsops.unlink(plain)
            fsync_dir(folder)
        except BaseException:
            with contextlib.suppress(OSError):
                fsops.unlink(tmp)
            raise
        return COMPRESSED

    @staticmethod
    def _zst_ok_file(f: BinaryIO, sha: str, size: Optional[int]) -> bool:
        """Whether the open compressed file decompresses to ``size`` bytes (any, for None)
        hashing to ``sha``."""
        try:
            with zst.open_decompressed(f) as d:
                got, n = hash_and_count(d)
        except OSError:
            return False
        return (size is None or n == size) and got == sha

    @classmethod
    def _zst_ok(cls, path: str, sha: str, size: Optional[int]) -> bool:
        """Whether the compressed file decompresses to ``size`` bytes hashing to ``sha``."""
        try:
            f = open_regular(path)
        except OSError:
            return False
        return cls._zst_ok_file(f, sha, size)

    # --- manifests ------------------------------------------------------------------
    def manifest_path(self, op_id: str) -> str:
        """Where an older version kept ``op_id``'s manifest (``ops/<op_id>.json``: read, never
        written now; the op id is checked, so no name leads out of the vault)."""
        if not is_op_id(op_id):
            raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a file name")
        return os.path.join(self.ops, f"{op_id}.json")

    def manifest_where(self, op_id: str) -> str:
        """The file that holds ``op_id``'s manifest, for messages: its segment, else its old file."""
        return oplog.segment_file(self.root, op_id) or self.manifest_path(op_id)

    def has_manifest(self, op_id: str) -> bool:
        """Whether the vault records a manifest of ``op_id`` (readable or not): a state in the
        operation log's segments (or a damaged line naming it), or an older version's file."""
        return oplog.has_state(self.root, op_id) or os.path.lexists(self.manifest_path(op_id))

    def seal_log(self) -> bool:
        """Compress the manifests this process logged here so far (a batch's end: ``oplog.seal``),
        and merge the pack index objects the batch's compactions wrote (``merge_pack_index``);
        never raises. True when there was a segment to seal and it was."""
        sealed = oplog.seal(self.root)
        self.merge_pack_index()
        return sealed

    def merge_pack_index(self) -> bool:
        """A batch's end: the index objects of the vault's packs (each compaction writes one)
        merged by ``BlobStore.forget([])`` (those of fewer than ``INDEX_ROWS // 2`` rows, into
        objects of at most ``INDEX_ROWS``) — the merged index durable before the ones it replaces
        go, so a kill leaves both and the union lists every blob — keeping what the vault holds
        beyond its backups a few files however many runs a batch reduced (issue #28 item 2); and
        the packs' leftovers (a killed compaction's pack no index lists) deleted past their grace,
        the one full listing of the packs a batch pays (a forget of packed blobs looks only at
        the packs it touches). Only when no compaction or purge holds the pack lock (never
        waits); never raises. True when a merged index was written. Its failpoints are
        ``merge.*`` (and ``repack.pack_written``)."""
        if not remote_vault.has_packs(self.root):
            return False
        try:
            folder = os.path.join(self.root, "compact")
            ensure_private_dir(folder, self.root, tighten_root=self.own_folder)
            fd = try_exclusive(os.path.join(folder, "packs.lock"))
        except Locked:
            return False  # a compaction or a purge is using the packs now: the next batch's end merges
        except OSError:
            return False
        try:
            if self.pack_index_gaps():
                return False  # a pack no index lists may be a backup's only copy: nothing is swept (status names it)
            bs = remote_vault.pack_store(self.root)
            if bs is None:
                return False
            fig = bs.forget([], consolidate_above=1, sweep=True, small_packs=MERGE_SMALL_PACKS,
                            failpoint=_merge_failpoint)
            remote_vault.tighten_pack_dirs(self.root, [r.key for r in bs.refs()])  # a repack's new pack
            return bool(fig.get("index_written"))
        except Exception:  # noqa: BLE001 - the index objects stay as they are (all still read)
            return False
        finally:
            release(fd)

    def manifest_damage(self, op_id: str) -> Optional[str]:
        """A damaged log line that may have been one of ``op_id``'s states (file and line), or None."""
        return oplog.segment_state(self.root, op_id)[1] if oplog.has_state(self.root, op_id) else None

    def write_manifest(self, manifest: dict) -> None:
        """Record the manifest's new state in the vault's operation log (``oplog.record_manifest``:
        one fsynced line in this process's segment, its only durable record — no file of its
        own). Only in a vault of ours (``NotPrivate``)."""
        self.check_private()
        oplog.record_manifest(self.root, manifest)
        # an older version's file of it is superseded (the log now holds its whole state): it
        # goes, so a stale state of it (say, "verified" after a restore) can never come back
        old = self.manifest_path(manifest["op_id"])
        if os.path.isfile(old) and not os.path.islink(old) and oplog.segment_state(self.root, manifest["op_id"])[0]:
            with contextlib.suppress(FileNotFoundError):
                fsops.unlink(old)
                fsync_dir(self.ops)

    def read_manifest(self, op_id: str) -> dict:
        """The manifest of ``op_id``, checked (``trust.check_manifest``: ``Untrusted``, a ValueError);
        ``FileNotFoundError`` when the vault has none. A state the segments hold wins over an
        older version's file (later changes were logged there). A damaged line that may have been
        one of its records does not hide it: its last readable state is listed, restored from
        and verified (nothing a lost change said can lose a byte: a restore keeps what it
        displaces, a purged backup is refused as missing), the line is named by ``health``, the
        digests it spells out stay claimed (``referenced_blobs``), and recovery does not replay a
        journal over it (``manifest_damage``). None readable: ``Untrusted`` (``damaged_line``)."""
        from tb_footprint_plugin.engine.trust import DAMAGED_LINE, Untrusted, check_manifest

        state = None
        if oplog.has_state(self.root, op_id):
            state, damage = oplog.segment_state(self.root, op_id)
        if state is None and oplog.has_state(self.root, op_id) and oplog.manifest_readable(
                self.manifest_path(op_id), op_id):
            # only a damaged line names it in the log: an older version's readable file of it is
            # its record still (a state logged after it would have removed that file)
            path = self.manifest_path(op_id)
            with open(path, "r", encoding="utf-8") as f:
                m = json.load(f)
            check_manifest(m, path, op_id)
        elif oplog.has_state(self.root, op_id):
            where = self.manifest_where(op_id)
            if state is None:
                raise Untrusted(DAMAGED_LINE, where, f"manifest of {op_id}: no readable state ({damage}); its backups "
                                "are kept")
            m = oplog.derived(state)
            check_manifest(m, where, op_id)
        else:
            path = self.manifest_path(op_id)
            with open(path, "r", encoding="utf-8") as f:
                m = json.load(f)
            check_manifest(m, path, op_id)
        m["vault"] = self.root  # where it was found, not where the file says
        return m

    def manifest_ids(self) -> List[str]:
        """Every op id the vault records a manifest of (segments and older files), sorted."""
        ids = {op for op in oplog.index(self.root).op_ids() if oplog.has_state(self.root, op)}
        ids.update(self._legacy_ids())
        return sorted(ids)

    def _legacy_ids(self) -> List[str]:
        """The op ids of an older version's manifest files (``ops/<op_id>.json``)."""
        if not os.path.isdir(self.ops):
            return []
        return [n[:-5] for n in os.listdir(self.ops) if n.endswith(".json") and not n.startswith(".")]

    def manifests(self, keep: Optional[Callable[[dict], dict]] = None,
                  memo: Optional["ManifestMemo"] = None,
                  where: Optional[Callable[[object, object], bool]] = None) -> List[dict]:
        """Every well-formed manifest, oldest first; refused ones are listed in ``problems``
        (and counted in ``unread``: a caller deciding what no manifest claims must see 0).
        ``keep``: what of each is held, applied as it is read (a projection keeping ``op_id``
        and ``started_at``), so a pass needing a few fields of thousands holds only those.
        ``memo`` (one command's, e.g. a restore of many runs): a manifest whose records did not
        change since it was last read through it is not read again — the list is what a fresh
        read gives (the log's index is brought up to date first; while it holds a damaged line
        every one is read afresh). ``where(run, kind)``: only the manifests it takes (by their
        ``run`` and ``kind`` fields as stored) are listed — one the memo holds is judged before it
        is copied out; every refusal is still listed and counted, whatever its run."""
        from tb_footprint_plugin.engine.trust import Untrusted

        out: List[dict] = []
        self.problems = []
        self.unread = 0
        try:
            self.check_private()
        except NotPrivate as e:
            # another user's folder, a symlink, writable by others: what it holds could be
            # anyone's; never listed as ours, so never restored from, purged or replayed
            self.problems.append(Untrusted(Failure.STATE_NOT_OURS, self.root, e.why))
            self.unread = 1
            return out
        if not os.path.isdir(self.ops) and not os.path.isdir(oplog.oplog_dir(self.root)):
            self.problems += other_users_state_findings(self.root)
            return out
        with oplog.snapshot(self.root):  # one look at the log's files for all of them
            self._read_all(out, keep, memo, where)
            # a damaged log line may have been a manifest no one can read now (its blobs claimed)
            self.unread += oplog.lost_lines(self.root)
            # one that may have been a whole manifest no readable line names is said, with its file
            for where in oplog.hiding_damage(self.root):
                file, _sep, why = where.partition(" line ")
                self.problems.append(Untrusted(Finding.DAMAGED_LINE, file, f"line {why}; a manifest may have been "
                                               f"on it: {oplog.DAMAGED_LINE_ADVICE}"))
        out.sort(key=lambda m: (m.get("started_at", 0), m.get("op_id", "")))
        self.problems += set_aside_findings(self.root)
        self.problems += other_users_state_findings(self.root)
        return out

    def _read_all(self, out: List[dict], keep: Optional[Callable[[dict], dict]] = None,
                  memo: Optional["ManifestMemo"] = None,
                  where: Optional[Callable[[object, object], bool]] = None) -> None:
        from tb_footprint_plugin.engine.trust import BAD_MANIFEST, BAD_OP_ID, Untrusted

        if memo is not None and not memo.usable(self, keep):
            memo = None
        changed = None
        files = self._legacy_ids()
        if memo is not None:
            mark, changed, logged = memo.since(self, keep)
            if changed is not None:
                # only what the log's feed says changed, and older-version files (few: none is
                # written now), are looked at again; the rest is as the last pass read it (a
                # state, once logged, stays until the index is reset, which the feed reports)
                logged = set(logged) | {op for op in changed if oplog.has_state(self.root, op)}
                changed = set(changed) | set(files)
            else:
                logged = {op for op in oplog.index(self.root).op_ids() if oplog.has_state(self.root, op)}
            memo.passed(self, keep, mark, logged)
            ids = sorted(logged.union(files))
        else:
            ids = sorted({op for op in oplog.index(self.root).op_ids()
                          if oplog.has_state(self.root, op)}.union(files))
        for op_id in ids:
            try:
                got = None
                if changed is not None and op_id not in changed:
                    got = memo.get(self.root, op_id, None, keep, where)
                key = memo.key(self, op_id) if memo is not None and got is None else None
                if got is None and key is not None:
                    got = memo.get(self.root, op_id, key, keep, where)
                if got is None:
                    if memo is not None:
                        memo.forget(self.root, op_id, keep)  # unread, it is never taken as read
                    m = self.read_manifest(op_id)
                    got = keep(m) if keep is not None else m
                    if key is not None:
                        memo.put(self.root, op_id, key, got, keep)
                    if where is not None and not where(got.get("run"), got.get("kind")):
                        got = ManifestMemo.PASSED_OVER
                if got is not ManifestMemo.PASSED_OVER:
                    out.append(got)
            except Untrusted as e:
                self.problems.append(e)
                self.unread += 1
            except VaultError as e:
                self.problems.append(Untrusted(BAD_OP_ID, os.path.join(self.ops, op_id + ".json"), str(e)))
                self.unread += 1
            except FileNotFoundError:
                continue  # gone meanwhile (a rebuild set a corrupt one aside)
            except (OSError, ValueError, RecursionError) as e:
                self.problems.append(Untrusted(BAD_MANIFEST, self.manifest_where(op_id), f"unreadable ({e})"))
                self.unread += 1

    def unreadable_manifests(self) -> List[str]:
        """Op ids whose older-version manifest file does not parse and that the segments hold
        no state of (reported, never silently skipped)."""
        if not os.path.isdir(self.ops) or not self.is_private():
            return []
        return [n[:-5] for n in sorted(os.listdir(self.ops))
                if n.endswith(".json") and not n.startswith(".") and is_op_id(n[:-5])
                and not oplog.has_state(self.root, n[:-5])
                and not oplog.manifest_readable(os.path.join(self.ops, n), n[:-5])]

    def referenced_blobs(self, exclude_ops: Iterable[str] = (), manifests: Optional[List[dict]] = None) -> set:
        """Blob hashes that some manifest still needs: the backups of operations not purged nor
        excluded, and the blobs any manifest kept for content it displaced (``displaced``,
        ``restore_displaced``: bytes a rollback or restore found in an original's place, which
        exist nowhere else) — those of excluded and purged operations too: only their backups
        are let go, never what they kept. ``manifests``: what this object's ``manifests()``
        returned a moment ago (its ``problems`` go with them; one read shared by a command's
        passes), else read now."""
        ex = set(exclude_ops)
        refs = set()
        for m in (self.manifests() if manifests is None else manifests):
            for key in ("displaced", "restore_displaced"):
                kept = m.get(key)
                if isinstance(kept, list):
                    refs.update(d["sha256"] for d in kept if isinstance(d, dict) and is_sha256(d.get("sha256")))
            if m["op_id"] in ex or m.get("backup_purged"):
                continue
            refs.update(f["sha256"] for f in m.get("files", []) if f.get("sha256"))
        # a manifest refused as malformed is never acted on, but the blobs it names are kept:
        # keeping is the safe direction, and it may be a real backup in a damaged file
        segments = oplog.segments_dir(self.root) + os.sep
        for problem in self.problems:
            if not problem.file.startswith(segments):  # a segment's are the damaged_digests below
                refs |= _digests_named_in(problem.file)
        # and so are those a damaged log line spells out, or any record of an operation it may
        # have been about (its last readable state may be older than the lost one)
        with oplog.snapshot(self.root):
            refs |= oplog.damaged_digests(self.root, oplog.index(self.root).damaged_ops())
            if oplog.hiding_damage(self.root):
                # a damaged line that may have been a whole manifest no readable line names: the
                # blobs it claimed are unknown, so none is let go by its absence
                return EveryBlob(refs)
        return refs

    def delete_blob(self, sha: str) -> int:
        """Remove the blob in every local form (plain, compressed, a compaction's temp; a remote
        copy and its record are ``engine.offload.forget_remote``'s, after the manifests); the bytes
        they held as stored. Waits for a compaction of it under way (the blob's lock): its
        rename would otherwise leave a ``.zst`` no manifest names."""
        with self._blob_lock(sha, wait=True):
            return self._delete_locked(sha)

    def _delete_locked(self, sha: str) -> int:
        """``delete_blob`` under the blob's lock: a blob a live pin names is kept (0 freed)."""
        if self.pinned_by(sha):
            # a transaction under way relies on it (``store`` pinned it under this lock); a link
            # of a live file (a rolled-back run's original) is made a copy of its own first
            with contextlib.suppress(OSError):
                self.unshare(sha)
            return 0
        size = 0
        for p in (self.blob_path(sha), self.zst_path(sha), *self._tmp_names(sha)):
            try:
                n = os.lstat(p).st_size
                fsops.unlink(p)
                size += n
            except FileNotFoundError:
                continue
        return size

    def _release_locked(self, sha: str, changed: set) -> int:
        """``_delete_locked`` for a restore's release, under the blob's lock: its plain blob goes
        only by ``_drop_plain`` (still the inode read, one link, hashing to its name). One that
        does not (grown by a late writer of a linked original: bytes that may be nowhere else)
        is kept with every other form of the digest, and named in ``changed`` unless it is only
        shared (another link holds it: kept, not changed). 0 freed when kept."""
        if self.pinned_by(sha):
            return self._delete_locked(sha)
        p = self.blob_path(sha)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return self._delete_locked(sha)
        except OSError:
            changed.add(sha)
            return 0
        if not stat.S_ISREG(st.st_mode):
            changed.add(sha)
            return 0
        if not self._drop_plain(sha, st):
            if st.st_nlink == 1:
                changed.add(sha)
            return 0
        return st.st_size + self._delete_locked(sha)

    def delete_blobs(self, shas: Iterable[str], needed, batch: int = 256,
                     after_each=None, changed: Optional[set] = None) -> Dict[str, int]:
        """Delete blobs a purge planned, digest → bytes freed (0: kept). A plan read earlier may
        be stale: under the locks of each batch (taken in digest order, so two purges never wait
        on each other), a blob is kept when a live pin names it or when ``needed()`` — the
        manifests and journals read afresh, once a batch — names it. ``store`` pins under the
        same lock and a transaction unpins only after its manifest is durable, so a transaction
        that stored the bytes since the plan is seen one way or the other. ``changed`` (a
        restore's release): a plain blob goes only while intact (``_release_locked``); one kept
        as changed is added to it, and its pack copy stays too."""
        todo = sorted(dict.fromkeys(s for s in shas if is_sha256(s)))
        out: Dict[str, int] = {}
        # packed blobs are forgotten by the pack store, which no add may run beside: its lock first
        # (alone), then the blobs' (the order a compaction's packing takes them in). Taken whether
        # or not a digest is packed now: a packing that held a blob's lock when this looked would
        # otherwise leave its pack copy behind once it let go
        with (self.pack_lock(exclusive=True) if todo else contextlib.nullcontext()):
            packs = remote_vault.has_packs(self.root)
            for i in range(0, len(todo), batch):
                part = todo[i:i + batch]
                with contextlib.ExitStack() as stack:
                    for sha in part:
                        stack.enter_context(self._blob_lock(sha, wait=True))
                    keep = needed()
                    forget = []
                    for sha in part:
                        if sha in keep:
                            out[sha] = 0
                        elif changed is not None:
                            out[sha] = self._release_locked(sha, changed)
                            if sha in changed or self.local_form(sha) is not None:
                                continue  # kept (changed, shared or pinned): so is its pack copy
                        else:
                            out[sha] = self._delete_locked(sha)
                        if packs and sha not in keep and not self.pinned_by(sha) \
                                and remote_vault.packed_ref(self.root, sha) is not None:
                            forget.append(sha)
                        if after_each is not None:
                            after_each()  # a failpoint: a kill here is finished from the purge's intent
                    for sha, n in self._forget_packed(forget).items():
                        out[sha] += n
        self.prune_shards(sha for sha, n in out.items() if n)  # the shard folders the deletes emptied
        return out

    def forget_packed_released(self, shas: Iterable[str], needed, batch: int = 256) -> Dict[str, int]:
        """Forget the pack copies of blobs restores let go (``engine.restore.Releases``: one
        forget for a restore of many runs, not one a run), digest → bytes they took in their
        packs (0: kept). The rules of ``delete_blobs``: the pack lock alone, then each batch's
        blob locks (digest order), ``needed(batch)`` read afresh under them once a batch; a
        digest it names, a live pin names, or that has a local form again (stored anew since: its
        pack copy stays with it, as ``delete_blobs`` keeps one) stays.

        One ``forget`` of every batch's digests at the end, under the pack lock held throughout
        (a forget a batch repacked the packs each left half dead: 60x80 profile files, 19
        forgets moved 3,692 blobs through 71 repacks). Between a batch's check and that forget
        only a transaction's ``store`` can touch its digests (packing, purges and offloads take
        the pack lock): a digest with no local form is stored as a fresh plain copy, never as
        the pack copy, so a pin made after the check relies on nothing this forgets."""
        todo = sorted(dict.fromkeys(s for s in shas if is_sha256(s)))
        out: Dict[str, int] = {s: 0 for s in todo}
        if not todo:
            return out
        with self.pack_lock(exclusive=True):
            if not remote_vault.has_packs(self.root):
                return out
            forget: List[str] = []
            for i in range(0, len(todo), batch):
                part = todo[i:i + batch]
                with contextlib.ExitStack() as stack:
                    for sha in part:
                        stack.enter_context(self._blob_lock(sha, wait=True))
                    keep = needed(part)
                    pinned = self._pinned_among(part)
                    forget += [sha for sha in part if sha not in keep and sha not in pinned
                               and self._local_form(sha) is None
                               and remote_vault.packed_ref(self.root, sha) is not None]
            out.update(self._forget_packed(forget))
        return out

    def _pinned_among(self, shas: List[str]) -> set:
        """Those of ``shas`` a live pin names (``pinned_by`` of each, the pins folder listed once)."""
        ops = self.pinned_ops()
        return {sha for sha in shas if self.pinned_by(sha, ops)} if ops else set()

    def size(self) -> int:
        """Bytes the vault holds: backups (blobs, packs as stored; not their index) and retired runs."""
        total = 0
        folders = (self.blobs, os.path.join(self.root, "retired"), os.path.join(remote_vault.packs_root(self.root), "data"))
        for root, _dirs, files in [w for d in folders for w in os.walk(d)]:
            for n in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, n)).st_size
        return total


#: what ``blob_sizes`` reads of a ``.zst`` blob: its frame header (``zst.content_size``)
ZST_HEADER_BYTES = 18


def blob_sizes(root: str) -> "Iterable[Tuple[str, int, str]]":
    """The blobs the vault at ``root`` holds on this machine, one at a time, as ``(sha, size,
    form)``: ``size`` is the original's (what a file backed up as that blob measures), ``form``
    ``"plain"`` (a blob of one name: a committed backup, adopted as it stands by a backup of the
    same bytes), ``"linked"`` (a plain blob with other names: such a backup makes a copy of its
    own), ``"zst"`` (its size from the frame header, 18 bytes read) or ``"packed"`` (the vault's
    pack index). A read for a plan (``engine.plan_notes``): nothing is written or locked, the
    shard folders are listed one entry at a time (memory flat in the vault's size), nothing is followed,
    and a name that is not a digest, a blob that is no regular file and a header without its
    size are left out (the caller then counts those bytes as it would without them). A vault
    that is absent or not a folder of ours yields nothing."""
    vault = Vault(root)
    if not os.path.isdir(vault.root) or os.path.islink(vault.root) or not vault.is_private():
        return
    try:
        shards = sorted(e.name for e in os.scandir(vault.blobs) if len(e.name) == 2
                        and e.is_dir(follow_symlinks=False))
    except OSError:
        shards = []
    for shard in shards:
        folder = os.path.join(vault.blobs, shard)
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            yield from _shard_blobs(folder, shard, it)
    if remote_vault.has_packs(vault.root):
        try:
            bs = remote_vault.pack_store(vault.root)
            refs = bs.refs() if bs is not None else iter(())
        except (BlobFailure, StoreFailure, OSError):
            refs = iter(())
        for ref in refs:
            yield ref.sha, ref.size, "packed"


def _shard_blobs(folder: str, shard: str, entries) -> "Iterable[Tuple[str, int, str]]":
    """``blob_sizes`` of one shard folder's ``entries`` (a ``scandir`` of ``folder``, streamed)."""
    for e in entries:
        name = e.name
        sha, form = (name[:-len(ZST_SUFFIX)], "zst") if name.endswith(ZST_SUFFIX) else (name, "plain")
        if not is_sha256(sha) or sha[:2] != shard:
            continue  # a temp, a lock, a planted name: no blob
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            if form == "plain":
                yield sha, st.st_size, "plain" if st.st_nlink <= 1 else "linked"
                continue
            with open_regular(path) as f:
                size = zst.content_size(f.read(ZST_HEADER_BYTES))
        except OSError:
            continue
        if size is not None:
            yield sha, size, "zst"
