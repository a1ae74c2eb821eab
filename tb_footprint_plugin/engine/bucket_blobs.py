"""A bucket logdir's backups in a blob vault (``storage.blobstore``) instead of server-side copies.

``tb-footprint reduce s3://b/logs --backup-dir /local/vault``: the originals a reduction removes
or replaces are streamed down once, hashed (sha256, and the store's MD5 where it gives one: an
object changed while it was read is refused), and added to a ``BlobStore`` over a ``PosixStore``
at that folder (a private folder of ours, ``storage.private``): content-addressed, zstd where it
pays, small ones packed. ``BlobStore.add`` reads every blob back and hashes it before it returns
its ref, so a file entry gets its ``sha256`` (and ``backup_checksums``, the journal's "verified"
mark) only for bytes that are in the vault; only then may the bucket object be deleted or
replaced (the swap of ``engine.bucket_steps``). The journal, the locks and the manifests stay in
the bucket (``<logdir>/.tb-footprint``): coordination between workers is the bucket's. A
manifest entry names its blob by ``sha256`` (``kept_in: blobstore``) instead of a ``backup`` key.

Restore and rollback stream a blob back (verified while read) into the bucket under the same
conditions as a server-side copy back: create-only where the original is gone, only over the
version the reduction made where it was replaced.

A bucket retire with a folder (``engine.bucket_retire``) uses the same steps for every object of
the run (``backup_entries`` under ``adding``, ``missing_blobs`` before its commit record,
``put_back`` create-only for its rollback and restore): the bucket keeps no copy of a retired run.

Forgetting is safe against other operations through one ``flock`` on the folder (the local
vault's offload/forget discipline, ``engine.offload``): an operation holds it shared from its
first blob added until its manifest in the bucket names those digests (its journal names them
from the backup on, and goes only after the manifest exists); a purge holds it alone while it
reads which digests the bucket's journals, then manifests (not purged), still name — journals
first, so an operation that commits between the two listings is named by one of them — and
forgets the rest of what this logdir added (``BlobStore`` owner claims: another logdir sharing
the folder keeps its blobs). While a manifest or journal cannot be read nothing is forgotten (it
may be the only one naming a blob). Right before its swap an operation reads the folder's index
again: a blob forgotten anyway (by hand, by an older version) rolls the run back.

Why one module: the folder's one rule of what a blob is to the bucket (added, named, let go, kept
while a manifest is missing: ``names_in_bucket``) is read by every verb that adds or forgets one;
split, the add and the forget could disagree on what a manifest or the witness names.

Not yet the vault in the bucket (issue #27 item 2): the code above takes any ``Store``, but its
forget lock is a ``flock``, which holds on one machine only, and workers on several machines
reduce one bucket. The bucket's version would follow restic: an add creates
``<state>/blob-locks/shared-<op>.json`` (create-only, the run lock's lease document, renewed by
``engine.bucket_lease``), then lists ``exclusive-*``: one whose holder is not gone (the lease
rules) makes it delete its own and wait. A purge creates ``exclusive.json`` (create-only), then
lists ``shared-*``: any live one makes it delete its own and report the purge held (``locked``).
Each side writes before it looks, so with a strongly consistent listing (S3, GCS, Azure) two of
them never both go on; a holder paused past its lease is the one case the lease rules already
accept for run locks. Until that is built and run through the crash matrix on every store,
server-side copies stay the bucket default.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import BlobError, Failure, Skip, StoreError
from tb_footprint_plugin.engine import manifest
from tb_footprint_plugin.engine.bucket_objects import HEADERS, entry_headers
from tb_footprint_plugin.engine.bucket_blob_claims import FreshNotes, noting_in
from tb_footprint_plugin.engine.bucket_identity import BLOB_OWNER, claimed_here, dropped_claims, entry_claimed, let_go_owner
from tb_footprint_plugin.engine.catalogue_rules import entry_released
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.engine.journal_object import pending_objects
from tb_footprint_plugin.engine.history import (BUCKET_KEPT, HISTORY_NAME, append_kept, bucket_kept_log, ended_line,
                                                missing_manifests)
from tb_footprint_plugin.engine.vault_manifests import EveryBlob
from tb_footprint_plugin.engine.bucket_state import (
    BlobVault,
    BucketState,
    BucketTxnError,
    BucketVault,
    must_delete,
    STORE_FAILURES,
)
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobSource
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.lock import held
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.remote import (
    content_checksums,
    same_content,
)
from tb_footprint_plugin.storage.store import StoreFailure, check_key
from tb_footprint_plugin.storage.store_object import ObjectStore

#: a file entry whose backup is a blob of the vault's ``BlobStore`` (no ``backup`` key)
KEPT_IN = "blobstore"
#: originals up to this size are read whole into memory (down and back up); larger ones go
#: through a scratch file, so memory never grows with a file's size
IN_MEMORY = 8 << 20


def is_blob_entry(f: dict) -> bool:
    """Whether a journal/manifest file entry keeps its original in the blob vault."""
    return isinstance(f, dict) and f.get("kept_in") == KEPT_IN


def entry_ok(f: dict) -> bool:
    """A blob entry's shape (untrusted input): no ``backup`` key, a sha256 when it has one."""
    return is_blob_entry(f) and f.get("backup") is None and (f.get("sha256") is None or is_sha256(f.get("sha256")))


def names_our_backup(vault: BucketVault, f: dict) -> bool:
    """Whether an entry's backup is one of this vault's (untrusted input): a key under its
    ``blobs/``, or a blob entry of the right shape."""
    if is_blob_entry(f):
        return entry_ok(f)
    key = f.get("backup") if isinstance(f, dict) else None
    # a plain key: S3 keeps 'blobs/../../elsewhere' as it is, a store that resolves it would not
    return isinstance(key, str) and plain_under(key, vault.root + "/blobs/")


def plain_under(key: str, prefix: str) -> bool:
    """Whether ``key`` lies under ``prefix`` and its part below it is a plain key
    (``storage.store.check_key``: no empty, ``.`` or ``..`` part, no NUL): '<vault>/tmp/../x'
    starts with '<vault>/tmp/' (review R12 F1)."""
    if not key.startswith(prefix):
        return False
    try:
        check_key(key[len(prefix):])
    except StoreFailure:
        return False
    return True


def blobs_of(vault: BucketVault, f: dict) -> BlobVault:
    """The blob vault that holds ``f``'s original; a ``BucketTxnError`` when this vault has none
    (the logdir was reduced with ``--backup-dir <folder>`` and this command was not given it)."""
    if vault.blobs is None:
        raise BucketTxnError(Failure.RESTORE_BLOCKED, f"{f.get('path')}: its backup is in a local vault folder; "
                             "give that folder with --backup-dir")
    return vault.blobs


@contextlib.contextmanager
def forget_lock(bv: BlobVault, exclusive: bool) -> Iterator[None]:
    """``flock`` on the vault folder's lock file: operations that add blobs share it until the
    bucket names their digests, a purge's forget takes it alone."""
    bv.store  # the folder made (or checked ours) first
    with held(os.path.join(bv.folder, ".forget.lock"), shared=not exclusive):
        yield


def adding(vault: BucketVault):
    """The shared lock an operation holds while it adds blobs (a no-op without a blob vault)."""
    return forget_lock(vault.blobs, exclusive=False) if vault.blobs is not None else contextlib.nullcontext()


def _fetch(ostore: ObjectStore, f: dict, work: str, n: int) -> Tuple[str, Callable[[], io.BufferedIOBase]]:
    """Stream one original down: its sha256 and an opener of the bytes read (memory below
    ``IN_MEMORY``, else a scratch file). The bytes must have the planned size and, where the
    store gives one, the MD5 it computed for the planned version: anything else changed since."""
    size = int(f["size"])
    h, md5 = hashlib.sha256(), hashlib.md5()
    # its first read says the object's headers where the listing did not (S3: the GET answers them)
    reader = BucketState.of(ostore).open_read(ostore.path(f["path"]), size, headers=True) if size else io.BytesIO(b"")
    buf = io.BytesIO() if size <= IN_MEMORY else None
    path = os.path.join(work, f"{n:06d}.orig")
    got = 0
    with (contextlib.nullcontext(buf) if buf is not None else open(path, "wb")) as out:
        while got < size:
            b = reader.read(min(CHUNK, size - got))
            if not b:
                break
            h.update(b)
            md5.update(b)
            out.write(b)
            got += len(b)
        data = buf.getvalue() if buf is not None else None
    want = (f.get("checksums") or {}).get("md5")
    if got != size or (want and want != base64.b64encode(md5.digest()).decode("ascii")):
        raise BucketTxnError(Skip.NOT_IN_PLAN, f"{f['path']}: changed while it was read for its backup")
    said = getattr(reader, "headers", None)
    if said is not None and f.get(HEADERS) is None:  # the blob keeps bytes only: the entry records these
        f[HEADERS] = said
    if data is not None:
        return h.hexdigest(), lambda: io.BytesIO(data)
    return h.hexdigest(), lambda: open(path, "rb")


def backup_entries(ostore: ObjectStore, vault: BucketVault, entries: List[dict]) -> Dict[str, Exception]:
    """Back up every blob entry of ``entries`` (runs of one operation or batch) into the blob
    vault in one ``BlobStore.add`` (small originals share packs). The caller holds ``adding``
    until the bucket names the digests. Each entry verified in the vault gets ``sha256`` and
    ``backup_checksums``; returns run -> the error that left its backups unmade (the others go
    on). A failure of the vault itself fails every run of the call."""
    bv = vault.blobs
    failed: Dict[str, Exception] = {}
    todo = [(en, f) for en in entries for f in en["files"] if is_blob_entry(f)]
    if not todo or bv is None:
        return failed
    got: Dict[int, str] = {}  # index in todo -> sha of the bytes read
    try:
        owner = bv.claim()  # the logdir's id made before its first blob is claimed under it
    except (BucketTxnError, *STORE_FAILURES) as e:
        for en in entries:
            failed.setdefault(en["run"], e)
        return failed
    claims = noting_in(bv)
    fresh: Set[int] = set()  # index in todo of a blob this logdir had not claimed before this add

    with scratch.scratch("bucket-backup", scratch.system_root()) as work:
        def sources() -> Iterator[BlobSource]:
            last = None
            for i, (en, f) in enumerate(todo):
                if last is not None:  # the previous one is in the store's hands now
                    with contextlib.suppress(OSError):
                        os.unlink(last)
                    last = None
                if en["run"] in failed:
                    continue
                try:
                    sha, opener = _fetch(ostore, f, work, i)
                except (FileNotFoundError, StoreFailure) as e:
                    failed[en["run"]] = e if isinstance(e, StoreFailure) and e.code != StoreError.NOT_FOUND else \
                        BucketTxnError(Skip.NOT_IN_PLAN, f"{f['path']}: gone since the plan")
                    continue
                except ValueError as e:  # a key that is not a plain key of the logdir ('..' segments)
                    failed[en["run"]] = BucketTxnError(Failure.REFUSED, f"{str(f['path'])[:300]!r}: {e}")
                    continue
                except (BucketTxnError, *STORE_FAILURES) as e:
                    failed[en["run"]] = e
                    continue
                got[i] = sha
                if claims is not None and bv.store.owner not in bv.store.owners(sha):
                    fresh.add(i)
                    # in the folder before the add can list it: a start's rollback releases it (R25 L2)
                    notes.note(str(en.get("op")), sha)
                if int(f["size"]) > IN_MEMORY:
                    last = os.path.join(work, f"{i:06d}.orig")
                yield BlobSource(sha=sha, size=int(f["size"]), open=opener)

        notes = FreshNotes(bv)
        try:
            if claims is not None:
                bv.store.reload()  # whose claims exist now: another process's adds count too
            refs = bv.store.add(sources())
        except BlobFailure as e:
            err = BucketTxnError(Failure.STORE_ERROR if e.code == BlobError.STORE else Failure.BACKUP_DAMAGED,
                                 f"{bv.folder}: the blob vault refused the backups ({e})")
            for en in entries:
                failed.setdefault(en["run"], err)
            return failed
        finally:
            notes.close()
    verified = {r.sha for r in refs if r is not None}
    for i, (en, f) in enumerate(todo):
        if en["run"] in failed:
            continue
        sha = got.get(i)
        if sha is None or sha not in verified:
            failed[en["run"]] = BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: not verified in the blob vault")
            continue
        f["sha256"] = sha
        f["backup_checksums"] = {"sha256": sha}
        f[BLOB_OWNER] = owner  # the claim a restore reads and only this owner's purge drops
        if claims is not None:
            claims.note(str(en.get("op")), sha, i in fresh)
    return failed


def put_back(ostore: ObjectStore, vault: BucketVault, f: dict, *, if_version: Optional[str] = None,
             moved_from: Optional[str] = None) -> None:
    """Stream ``f``'s original from the blob vault (hashed while read) back to its key: create-only,
    or only over ``if_version``; only a blob this logdir claimed where it stands, or where its
    manifest was found moved from (``moved_from``: ``bucket_moved.MOVED_FROM`` of the manifest
    naming ``f``, ``bucket_identity.entry_owner``'s copying rule). Raises ``StoreFailure`` (``already_exists`` / ``precondition_failed``)
    as a server-side copy back would, ``BucketTxnError(BACKUP_DAMAGED)`` when the blob does not
    verify (nothing is written then) or the object written does not hold the original's bytes."""
    bv = blobs_of(vault, f)
    sha = f.get("sha256")
    if not is_sha256(sha):
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: no verified backup of it in the blob vault")
    if not entry_claimed(bv, f, copying=True, moved_from=moved_from):
        # manifests are untrusted: a blob this logdir never added (another logdir's, sharing the
        # folder, whatever id its planted state claims) is never copied into this bucket
        raise BucketTxnError(Failure.REFUSED, f"{f['path']}: names a blob of {bv.folder} this logdir did not add")
    orig = ostore.path(f["path"])
    size = int(f["size"])
    # the Content-Type and user metadata its entry recorded, set by the upload (a record refused is
    # never sent: the restore's words name it, ``bucket_putback.headers_said``)
    headers, _ = entry_headers(f, ostore.protocol)
    try:
        if size <= IN_MEMORY:
            with bv.store.open(sha) as src:
                data = src.read()
            if len(data) != size:
                raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: its blob holds {len(data)} bytes, not {size}")
            token = BucketState.of(ostore).put(orig, data, if_absent=if_version is None, if_version=if_version,
                                               headers=headers)
            if token == hashlib.md5(data).hexdigest():
                return  # S3's ETag of a single-part put is the MD5 of what it stored: these bytes
        else:
            _put_back_large(ostore, vault, bv, f, sha, orig, if_version, headers)
    except BlobFailure as e:
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: its backup in {bv.folder} does not read back "
                             f"({e}); nothing was written") from None
    cur = BucketState.of(ostore).head(orig)
    if cur is None or cur.size != size or same_content(content_checksums(cur), f.get("checksums") or {}) is False:
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: restored object does not match the original")


def _put_back_large(ostore: ObjectStore, vault: BucketVault, bv: BlobVault, f: dict, sha: str, orig: str,
                    if_version: Optional[str], headers: Optional[dict] = None) -> None:
    """A large original back: verified into a scratch file, uploaded under a temporary key of the
    vault with ``headers``, then copied over its key with the condition (a bucket's only
    conditional large write; the copy keeps the headers)."""
    tmp = f"{vault.root}/tmp/put-back/{sha}"
    with scratch.scratch("bucket-restore", scratch.system_root()) as work:
        local = os.path.join(work, "orig")
        with bv.store.open(sha) as src, open(local, "wb") as out:
            while True:
                b = src.read(CHUNK)
                if not b:
                    break
                out.write(b)
        BucketState.of(ostore).put_file(tmp, local, headers=headers)
    try:
        BucketState.of(ostore).copy(tmp, orig, if_absent=if_version is None, if_version=if_version, size=int(f["size"]))
    finally:
        with contextlib.suppress(*STORE_FAILURES, BucketTxnError):
            must_delete(ostore, [tmp])


def copy_from_blobs(vault: BucketVault, f: dict, dest: str) -> str:
    """Write ``f``'s original from the blob vault to the local file ``dest`` (streamed, hashed by
    the store while read); returns its sha256. A rewrite stages from here instead of downloading
    the object it has just backed up."""
    bv = blobs_of(vault, f)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        with bv.store.open(f["sha256"]) as src, open(dest, "wb") as out:
            while True:
                b = src.read(CHUNK)
                if not b:
                    break
                out.write(b)
    except BlobFailure as e:
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: its backup in {bv.folder} does not read "
                             f"back ({e})") from None
    return f["sha256"]


def entry_failure(vault: BucketVault, f: dict) -> Optional[BlobFailure]:
    """None when ``f``'s blob is in the vault, added by this logdir, and reads back to its sha256;
    else why not: ``MISSING`` (no folder, not claimed by this logdir, not there) or the read's own
    failure (``CORRUPT``: bytes there that do not hash). Each blob read once."""
    bv = vault.blobs
    sha = f.get("sha256")
    if bv is None or not entry_claimed(bv, f):
        return BlobFailure(BlobError.MISSING, "not claimed by this logdir in its blob folder", sha=sha)
    return bv.store.check(sha)


def check_entry(vault: BucketVault, f: dict) -> bool:
    """Whether ``f``'s blob is in the vault, added by this logdir, and reads back to its sha256
    (re-check, ``verify``, and a restore before its first put-back)."""
    return entry_failure(vault, f) is None


#: what ``missing_blobs``'s refusal says of the run by default: its last look before the commit
#: record (a batch's, a rewrite's), where nothing was deleted or replaced yet
LEFT_AS_IT_WAS = "run left as it was"


def missing_blobs(vault: BucketVault, files: List[dict], reread: bool = True, *, then: str = LEFT_AS_IT_WAS) -> None:
    """Raise ``BucketTxnError(BACKUP_DAMAGED)`` naming the folder when a blob entry of ``files``
    is no longer claimed by this logdir in the blob vault (a forget since it was added): the swap
    that replaces or deletes its original must not go on. The index is read again (another
    process may have forgotten it; ``reread=False``: read for an earlier run of the same batch);
    the bytes were read back and hashed when they were added. ``then``: what the caller does with
    the run on this refusal, said after the cause (``LEFT_AS_IT_WAS`` before the commit record;
    past it, e.g. "the reduction is not finished: its journal and every original left stay") —
    the code is the same, only the caller knows which is true."""
    todo = [f for f in files if is_blob_entry(f)]
    if not todo:
        return
    bv = blobs_of(vault, todo[0])  # no folder given is not a forgotten blob (review R8 F8): said as such
    try:
        if reread and os.path.isdir(bv.folder):
            bv.store.reload()
    except BlobFailure as e:
        raise BucketTxnError(Failure.STORE_ERROR, f"{bv.folder}: the blob vault's index does not read ({e}); "
                             f"{then}") from None
    for f in todo:
        if not entry_claimed(bv, f) or not bv.store.candidates(f["sha256"]):
            raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: its backup is no longer in {bv.folder} "
                                 f"(forgotten since it was added); {then}")


def named_digests(doc, out: Set[str], let_go: Optional[Set[Tuple[Optional[str], str]]] = None,
                  purged: bool = False, entries: Optional[List[Tuple[dict, bool]]] = None) -> bool:
    """Add the digests a manifest or journal names to ``out``, and those it let go (``purged``:
    every one; else the entries its restore released) to ``let_go``, each with the owner its entry
    records (``let_go_owner``: None for 3f68b74's); False when it is not readable. The one rule of
    what names a blob: the forget (``bucket_blob_index.collect``) and the purge preview's figure
    (``bucket_purge.folder_frees``) both ask it, and ``dropped_claims`` which claims go.
    ``entries``: each entry naming a digest appended with whether it is needed (its size and
    owner: what a look for a blob no index row lists needs)."""
    if not isinstance(doc, dict) or doc.get("corrupt"):
        return False
    runs = doc.get("runs") if isinstance(doc.get("runs"), list) else [doc]
    for en in runs:
        files = en.get("files") if isinstance(en, dict) else None
        for f in files if isinstance(files, list) else []:
            if not (isinstance(f, dict) and is_sha256(f.get("sha256"))):
                continue
            # an entry its restore let go (a restore that left another original) names it no more
            if purged or entry_released(doc, f):
                if let_go is not None:
                    let_go.add((let_go_owner(f), f["sha256"]))
            else:
                out.add(f["sha256"])
            if entries is not None:
                entries.append((f, not (purged or entry_released(doc, f))))
    return True


def _purged(doc, file: str) -> bool:
    """Whether a manifest (any shape ever written, read by ``engine.manifest.read``) says its
    backups were purged; one that does not read counts as not purged: what it names is kept."""
    try:
        return bool(manifest.read(doc, file)[manifest.BACKUP_PURGED])
    except Untrusted:
        return False


def said_kept_in_bucket(ostore: ObjectStore, vault: BucketVault) -> FrozenSet[str]:
    """The operations the witness (``history.bucket_kept_log``) says were verified into a blob
    folder, by the disk's rule (``backups_said_kept``); none without a folder (no request). Raises
    ``StoreFailure`` when the witness cannot be read."""
    return bucket_kept_log(BucketState.of(ostore).logdir_store()).backups_said_kept(strict=True) \
        if vault.blobs is not None else frozenset()


def end_witness(ostore: ObjectStore, vault: BucketVault, op_id: str, kind: str, run: str) -> None:
    """With a blob folder, the witness line of operation ``op_id`` ended (``history.ended_line``)
    right before a rollback deletes its manifest (every original back): a line whose manifest is
    gone keeps every blob of the folder for good and status names it (``names_in_bucket``); a
    retirement a start puts back after its process wrote the line, or one whose journal would not
    close, is no such loss. ``BucketTxnError`` when the store refuses the append: the manifest is
    kept (the rollback stays unfinished, its journal too; the next start ends the line, then the
    manifest goes). No request without a folder (no line was ever written)."""
    if vault.blobs is None:
        return
    said = append_kept(BucketState.of(ostore).logdir_store(), [ended_line(op_id, kind, run)])
    if said:
        raise BucketTxnError(Failure.STORE_ERROR, f"{witness_name(ostore)}: {said}; the manifest of {op_id} is "
                             "kept until it is (the next start ends it)")


def witness_name(ostore: ObjectStore) -> str:
    """The witness's URL (``history.bucket_kept_log``), as a row or a refusal names it."""
    return bucket_kept_log(BucketState.of(ostore).logdir_store()).name_of(f"{BUCKET_KEPT}/{HISTORY_NAME}")


def listed_op(key: str) -> str:
    """The op id a manifest's key names (``…/manifests/<op_id>.json``)."""
    name = str(key).rsplit("/", 1)[-1]
    return name[:-len(".json")] if name.endswith(".json") else name


def missing_in_bucket(said_kept: FrozenSet[str], present: Set[str]) -> List[str]:
    """``history.missing_manifests`` (the one rule, review R26 F1) of a bucket: those of ``said_kept``
    whose manifest key is not listed (``present``: ``listed_op`` of each; any content counts)."""
    return missing_manifests(said_kept, present.__contains__) if said_kept else []


def names_in_bucket(ostore: ObjectStore, vault: BucketVault, manifests_read: Optional[List[dict]] = None,
                    entries: Optional[List[Tuple[dict, bool]]] = None, said_kept: Optional[FrozenSet[str]] = None):
    """``(needed, let_go)``: the digests a journal or a manifest (not purged) of the bucket names,
    and those a manifest lets go (marked purged, or an entry a restore released) with the owner its
    entry records (``named_digests``); the path of the
    first that is not readable instead (nothing may be forgotten then: it may name any blob).
    ``needed`` is every blob (``EveryBlob``) while an operation the witness names has no manifest
    (``missing_in_bucket``: no forget lets a blob go then). The witness (``said_kept``: as the
    caller read it) is read before the listings: an operation committed in between is listed.
    ``manifests_read``: the manifests as the caller read them in the one schema (``status``: no
    read twice), else listed and read here. A forget's caller holds the exclusive forget lock.
    ``entries``: each file entry naming a digest, with whether it is needed (``named_digests``)."""
    st = BucketState(ostore)
    needed: Set[str] = set()
    let_go: Set[Tuple[Optional[str], str]] = set()
    if said_kept is None:
        try:
            said_kept = said_kept_in_bucket(ostore, vault)
        except (StoreFailure, OSError):
            return witness_name(ostore)
    # journals first: an operation's journal names its digests until its manifest exists and
    # goes only after, so one that commits between the two listings is named by one of them
    # (the journal folder through its one listing, ``journal_object.pending_objects``)
    journals = [(f"{ostore.root}/{key}", info) for key, info in pending_objects(st)]
    manifests = vault.root + "/manifests"
    listed = [] if manifests_read is not None else \
        [(f"{manifests}/{key}", info) for key, info in sorted(st.listing(manifests, missing_ok=True).items())]
    for path, info in journals + listed:
        doc, _ = st.read(path, info)
        if doc is None:
            continue
        is_manifest = path.startswith(manifests + "/")
        # only a manifest's word lets a blob go: a journal names what it names, nothing more
        if not named_digests(doc, needed, let_go if is_manifest else None, is_manifest and _purged(doc, path),
                             entries):
            return path
    for m in manifests_read or []:
        named_digests(m, needed, let_go, bool(m.get(manifest.BACKUP_PURGED)), entries)
    if said_kept:
        present = {listed_op(p) for p, _i in listed} | {listed_op(m.get("_path", "")) for m in manifests_read or []}
        if missing_in_bucket(said_kept, present):
            return EveryBlob(needed), let_go
    return needed, let_go


def forget_let_go(bv: BlobVault, needed: Set[str], let_go: Set[Tuple[Optional[str], str]], *,
                  keep_unlisted: bool = False, keep_uncovered: bool = False) -> dict:
    """A purge's forget on the blob vault (``bucket_blob_index.collect``, under the exclusive
    forget lock, the index just read): drop this logdir's claims (``dropped_claims``) on the blobs
    a manifest in the bucket lets go (marked purged: by a purge, or a restore's release; or an
    entry a restore released) and no manifest (not purged) or journal names (``needed``); a blob
    goes when no owner claims it any more. Positive evidence only (review R9 F8): a blob nothing
    names at all (its manifest gone without a purge: a sync with ``--delete``, a lifecycle rule, a
    tidy by hand; an operation rolled back) may be the only copy of a run: an orphan, kept and
    counted (``orphans``, ``orphan_bytes``), as a disk vault keeps its ``orphan_blobs``. Claims
    made at an earlier location of this logdir (moved since) are never dropped (review R11 G2: a
    copy of it may still need them), counted (``earlier_location``). ``keep_unlisted``,
    ``keep_uncovered``: ``BlobStore.forget``'s (no data object no index row lists swept; no pack
    with bytes no row accounts for repacked or deleted): one may hold a needed blob.
    Returns the blob store's figures."""
    mine, earlier = claimed_here(bv)
    drops = dropped_claims(bv, needed, let_go)
    gone = {sha for _, sha in let_go}
    orphans = [r for r in mine if r.sha not in gone and r.sha not in needed]
    kept = {"orphans": len(orphans), "orphan_bytes": sum(r.size for r in orphans)}
    if earlier:
        kept["earlier_location"] = len(earlier)
    if not drops:
        return {"forgotten": 0, **kept}
    total: dict = {}
    try:
        for owner, shas in drops.items():
            for k, v in bv.store_as(owner).forget(shas, keep_unlisted=keep_unlisted,
                                                    keep_uncovered=keep_uncovered).items():
                total[k] = total[k] + v if isinstance(v, (int, list)) and k in total else v
        if len(drops) > 1:
            bv.store.reload()
        return {**total, **kept}
    except BlobFailure as e:
        n = sum(len(v) for v in drops.values())
        raise BucketTxnError(Failure.STORE_ERROR, f"{bv.folder}: the blob vault could not forget "
                             f"{n} purged backup(s) yet ({e}); the next purge does it") from None


__all__ = ["LEFT_AS_IT_WAS", "adding", "backup_entries", "blobs_of", "check_entry",
           "copy_from_blobs", "end_witness", "entry_failure", "entry_ok", "forget_let_go", "forget_lock", "is_blob_entry", "listed_op", "missing_blobs", "missing_in_bucket", "named_digests", "names_in_bucket", "names_our_backup", "plain_under", "said_kept_in_bucket",
           "put_back", "witness_name"]
