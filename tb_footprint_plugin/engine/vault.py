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

The parts (one module a concern, each a mixin of ``Vault``; every name is still imported from
here): ``vault_base`` (errors, names, constants, the ownership checks, ``VaultBase``: folders, a
blob's paths, the locks), ``vault_blobs`` (reading any form), ``vault_store`` (storing a backup,
shard folders, unsharing), ``vault_pins``, ``vault_compaction`` (notes, one blob's ``.zst``),
``vault_packs``, ``vault_manifests`` (and ``ManifestMemo``), ``vault_delete``. This module keeps
``PACK_BELOW`` / ``PACK_BATCH`` and the steps that read the names the compaction worker and the
tests set on it (``PACK_BELOW``, ``PACK_BATCH``, ``copy_new``, ``set_aside_at``, ``find_writers``,
``no_writer_anywhere``): ``restore_blob``, ``compact_ops``, ``_compact_locked``,
``_pack_candidates``, ``_packable``, ``_set_lock_aside``; and ``blob_sizes``. The offloaded blobs
(``offload``, ``remote_vault``) and the operation log (``oplog``) are modules of their own.
"""
from __future__ import annotations

# besides what its own code uses, the names importers and tests reach through this module (re-exported)
import contextlib
import errno
import marshal
import os
import stat
import tempfile
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from tb_footprint_plugin.engine import faults, remote_vault
from tb_footprint_plugin.engine.vault_base import (ALONE, COMPRESSED, DEFAULT_VAULT_FORMAT, KEPT_BUSY,
                                                   KEPT_DAMAGED, KEPT_INCOMPRESSIBLE, KEPT_OPEN, KEPT_SHARED,
                                                   MIN_SAVING, MISSING, PACKED, RESTORE_TMP_PREFIX,
                                                   RESTORE_TOKEN, SHARD_TRIES, UNSHARED, VAULT_FORMATS,
                                                   VaultBase, VaultError, ZST_SUFFIX, ZST_TMP_SUFFIX,
                                                   late_tmp_path, other_users_state_findings,
                                                   refuse_unless_ours, restore_tmp_path, same_file,
                                                   set_aside_findings, who)
from tb_footprint_plugin.engine.vault_blobs import VaultBlobs, Within, put_temp, restore_folder
from tb_footprint_plugin.engine.vault_compaction import (VaultCompaction, compact_operation, damaged_notes,
                                                         note_compaction, read_notes)
from tb_footprint_plugin.engine.vault_delete import VaultDelete
from tb_footprint_plugin.engine.vault_manifests import EveryBlob, ManifestMemo, VaultManifests
from tb_footprint_plugin.engine.vault_packs import FORGET_STEPS, MERGE_SMALL_PACKS, MERGE_STEPS, VaultPacks
from tb_footprint_plugin.engine.vault_pins import VaultPins
from tb_footprint_plugin.engine.vault_store import UNSHARE_TMP, VaultStore
from tb_footprint_plugin.storage import throttle as fsops, zst
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.files import (CopyMismatch, copy_new, create_new, fsync_dir, hash_count_sparse,
                                               sha256_file, unlink_if_same)
from tb_footprint_plugin.storage.openfiles import find_writers, no_writer_anywhere
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.private import set_aside, set_aside_at
from tb_footprint_plugin.storage.regular import open_regular
from tb_footprint_plugin.storage.sparse import SparseWriter
from tb_footprint_plugin.storage.store import StoreFailure

#: a compaction puts blobs smaller than this into a pack of the vault's pack store instead of a
#: ``.zst`` each (0: never). bench/vault.py --small --pack-below N (2026-12-02): on its profile-heavy
#: logdir 800 files -> 40 and du of the vault 4.4 -> 3.2 MB at 64 KiB, 256 KiB and 1 MiB alike;
#: on the mixed project 42 files -> 13 / 7 / 8. Above a few hundred KB a file's part-used last
#: block is under 1% of it, while a pack's blob is read whole into memory when added (bounded by
#: this) and copied again when a purge repacks its pack
PACK_BELOW = 256 << 10


#: at most this many blobs a pack (their locks are held while the pack is written and verified)
PACK_BATCH = 256


def _blocks(n: int, st: os.stat_result) -> int:
    """Filesystem blocks ``n`` bytes take (what a compression must save: a small file's block
    costs the same compressed or not)."""
    bs = getattr(st, "st_blksize", 0) or 4096
    return (n + bs - 1) // bs


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


class Vault(VaultManifests, VaultPacks, VaultCompaction, VaultDelete, VaultPins, VaultStore, VaultBlobs, VaultBase):
    """A vault directory: blobs, manifests and scratch space. Each concern is a part of its own
    (the module docstring lists them); the steps defined here read names set on this module."""

    def restore_blob(self, sha: str, dest: str, mode: Optional[int] = None,
                     mtime: Optional[float] = None, mtime_ns: Optional[int] = None,
                     tmp_token: Optional[str] = None, owner: Optional[Tuple[int, int]] = None,
                     place: Optional[Callable[[str, str], None]] = None, within: Optional[Within] = None) -> None:
        """Put the blob's bytes at ``dest`` (a verified temp copy in the same dir, then ``place``),
        with ``mode``, the modification time (``mtime_ns`` to the nanosecond, else the older
        records' float ``mtime``) and, when root, the recorded ``owner`` (``files.give_owner``)
        set on the copy before it takes the name. ``place(tmp, dest)``: how the verified temp takes
        ``dest``'s place, as the folder's swap strategy says (``placement.put_in_place``: renamed, or
        copied over and deleted); a rename by default. Either way a blob that does not read back
        as ``sha`` is found in the temp, before anything at ``dest`` is touched.

        ``within``: (the logdir's store, ``dest``'s key): the temp, and any folder missing on the
        way, is made in the folder that store's walk reaches without following a link
        (``restore_folder``): a folder on the way swapped for a link to one outside the logdir
        fails the walk (``StoreFailure``, ``SYMLINK``, naming it) before anything is written;
        swapped after it, the temp is made in the folder walked to, wherever it went.

        Always a copy, never a link of the blob: a hard-linked blob shares its inode with the
        file it backs up, so setting the restored file's mode or time, or a writer appending to
        it later, would change the backup too. A compressed blob is decompressed into the temp
        file and hashed on the way; one that does not decode to ``sha`` never takes ``dest``'s
        name (``VaultError`` naming ``dest``). Every form (plain, ``.zst``, packed, remote) is
        written through a ``SparseWriter``: zero blocks go back as holes. ``tmp_token``: the
        restore's journaled token of its temp names (``restore_tmp_path``; a random one without)."""
        if not self._plain_usable(sha) and (self._has_zst(sha) or remote_vault.has_record(self.root, sha)
                                            or remote_vault.packed_ref(self.root, sha) is not None):
            # streamed, hashed
            return self._restore_zst(sha, dest, mode, mtime, mtime_ns, tmp_token, owner, place, within)
        blob = self.blob_path(sha)
        if not self.check_blob(sha):
            raise VaultError(errno.EIO, f"backup of {dest} is missing or damaged in {self.root} (sha256 {sha[:12]}…)")
        tmp = restore_tmp_path(os.path.dirname(dest), sha, tmp_token)
        with restore_folder(dest, within) as dfd:
            made = None  # the temp file this call made: the only one its cleanup removes
            # a copy, so the blob stays valid whatever happens to dest later; made where nothing
            # stands (never over or instead of a file there), in the folder walked to, and
            # hashed, chmod'ed and timed through its fd (``files.copy_new``): a name swapped
            # meanwhile is never followed
            try:
                try:
                    # holes put back as holes: a sparse original never comes back allocated whole
                    made = copy_new(blob, tmp, sha, mode, mtime_ns=mtime_ns, mtime=mtime, exclusive=True,
                                    sparse=True, owner=owner, dir_fd=dfd)
                except (FileNotFoundError, CopyMismatch):
                    if not self._has_zst(sha) and remote_vault.packed_ref(self.root, sha) is None:
                        raise
                    # compacted or packed (by another run's compaction) between the check and the
                    # copy, or the plain blob beside the .zst changed: the compressed or packed form is
                    # the backup (``copy_new`` removed its temp)
                    return self._restore_zst(sha, dest, mode, mtime, mtime_ns, tmp_token, owner, place, within)
                faults.hit("restore_copied")
                put_temp(place, tmp, dest, dfd)
            except CopyMismatch:
                raise VaultError(errno.EIO, f"restored copy of {dest} does not match its hash") from None
            except BaseException:
                if made is not None:
                    with contextlib.suppress(OSError):
                        unlink_if_same(tmp, made, dfd)  # a failure after the copy leaves no temp file behind
                raise
            os.fsync(dfd)

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

    def _set_lock_aside(self, path: str, dir_fd: Optional[int]) -> None:
        """A stranger at a blob lock's name set aside (``storage.private``: renamed beside itself,
        never followed or deleted; ``set_aside_findings`` names it in status); gone meanwhile: fine."""
        with contextlib.suppress(FileNotFoundError):
            if dir_fd is None:
                set_aside(path)
            else:
                set_aside_at(dir_fd, path)

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
                ok = same_file(os.fstat(check.fileno()), ident) and self._zst_ok_file(check, sha, st.st_size)
            if not ok:
                fsops.unlink(tmp)
                return KEPT_DAMAGED  # the plain blob did not hash to its name: left for health to name
            faults.hit("compact_verified")
            fsops.replace(tmp, z)
            fsync_dir(folder)
            faults.hit("compact_renamed")
            if not same_file(os.lstat(z), ident):
                return KEPT_DAMAGED  # the name is not the inode verified: the plain blob stays
            fsops.unlink(plain)
            fsync_dir(folder)
        except BaseException:
            with contextlib.suppress(OSError):
                fsops.unlink(tmp)
            raise
        return COMPRESSED
