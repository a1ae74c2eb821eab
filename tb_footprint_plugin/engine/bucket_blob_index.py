"""A damaged index object of a bucket logdir's local blob folder (``--backup-dir FOLDER``,
``engine.bucket_blobs``): the backups it hid found again, named in ``status``, and said by a
restore (review R22 F3, its bucket half).

The folder is a ``BlobStore`` as a disk's vault packs are, so the one rebuild serves both
(``storage.blob_salvage``: every slice hashed and matched to a manifest's sha256 and size; the
damaged object kept, so no ``forget`` deletes anything while it stands) and the one set of words
(``vault_packs.damaged_index_problems``, ``remote_vault.hidden_words``, ``pack_index_rebuilt``). What
differs is who needs a blob: the bucket's manifests (not purged; an entry a restore released is
no longer needed), each blob listed again under the owner its entry records
(``bucket_identity.entry_owner``): a folder several logdirs share keeps each one's claims.

Cost: the folder's index objects are listed and read (a local folder: the restore and purge read
them anyway); the packs are walked only while one of them does not read.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import time
from typing import Dict, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import manifest
from tb_footprint_plugin.engine.bucket_blobs import forget_lock, is_blob_entry
from tb_footprint_plugin.engine.bucket_identity import PLACES, entry_owner, place_record
from tb_footprint_plugin.engine.bucket_state import BlobVault, BucketVault
from tb_footprint_plugin.engine.catalogue_rules import entry_released
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome
from tb_footprint_plugin.engine.pack_index_rebuilt import rebuilt_outcomes
from tb_footprint_plugin.engine.remote_vault import hidden_words
from tb_footprint_plugin.engine.vault_packs import damaged_index_problems
from tb_footprint_plugin.storage.blob_salvage import Salvage, salvage
from tb_footprint_plugin.storage.blobstore import DATA, INDEX_EVERY, BlobFailure
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.private import NotPrivate, check_private_dir
from tb_footprint_plugin.storage.store import StoreFailure

#: what a look at the folder's index may raise (said as a failed step, never fatal to the verb)
LOOK_FAILURES = (BlobFailure, StoreFailure, OSError, NotPrivate)


def folder_ours(bv: Optional[BlobVault]) -> bool:
    """Whether the blob folder exists and is a folder of ours (the disk vault's rule,
    ``storage.private.check_private_dir``: ours, no link, not writable by others); nothing is
    made, written or tightened."""
    if bv is None or not os.path.isdir(bv.folder) or os.path.islink(bv.folder):
        return False
    try:
        check_private_dir(bv.folder)
    except (NotPrivate, OSError):
        return False
    return True


def _entries(m: dict):
    """The file entries of a manifest in the one schema (a retirement's runs, or its own files)."""
    runs = m.get("runs") if isinstance(m.get("runs"), list) else [m]
    for en in runs:
        files = en.get("files") if isinstance(en, dict) else None
        for f in files if isinstance(files, list) else ():
            if is_blob_entry(f) and is_sha256(f.get("sha256")) and type(f.get("size")) is int and f["size"] >= 0:
                yield f


def blob_needs(bv: BlobVault, manifests: List[dict]) -> Tuple[Dict[str, int], Dict[str, Set[str]], Dict[str, int]]:
    """``(wanted, owners, known)`` from the bucket's manifests (untrusted input): the blobs they
    still need (not purged, not released by a restore) with their sizes and the owners whose
    claim each needs (``entry_owner``: an entry naming another's owner needs nothing here), and
    the sizes of those let go (stepped over by the walk, never listed)."""
    wanted: Dict[str, int] = {}
    owners: Dict[str, Set[str]] = {}
    known: Dict[str, int] = {}
    for m in manifests:
        purged = bool(m.get(manifest.BACKUP_PURGED))
        for f in _entries(m):
            if purged or entry_released(m, f):
                known.setdefault(f["sha256"], f["size"])
                continue
            who = entry_owner(bv, f)
            if who is None:
                continue
            wanted.setdefault(f["sha256"], f["size"])
            owners.setdefault(f["sha256"], set()).add(who)
    return wanted, owners, {s: n for s, n in known.items() if s not in wanted}


def _unclaimed(bv: BlobVault, owners: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    """The claims the manifests need that no valid index object of the folder lists (the index as
    last read): sha256 -> the owners whose claim on it is listed nowhere. A claim is counted per
    (sha256, owner), as a restore checks it (``check_entry``): a blob listed for another logdir
    sharing the folder is still hidden from this one when its own claim was only in a damaged
    object (review R23 T5)."""
    out: Dict[str, Set[str]] = {}
    for sha, who in owners.items():
        listed = bv.store.owners(sha) if bv.store.has(sha) else set()
        if who - listed:
            out[sha] = set(who - listed)
    return out


def _hidden(bv: BlobVault, owners: Dict[str, Set[str]]) -> List[str]:
    """The needed blobs some owner's claim on which no valid index object lists (``_unclaimed``)."""
    return sorted(_unclaimed(bv, owners))


def _claim_again(bv: BlobVault, unclaimed: Dict[str, Set[str]]) -> Tuple[List, List[str], List[str]]:
    """The claims of blobs a valid index object lists for another owner, listed again under their
    own owners: no walk (the bytes are where that row says), each ref hashed before it is listed
    (``BlobStore.index_found`` reads it back). ``(refs, index objects written, shas no listed
    place of which hashes)``."""
    bs = bv.store
    by_owner: Dict[str, list] = {}
    found: list = []
    bad: List[str] = []
    for sha in sorted(unclaimed):
        ref = next((r for r in bs.candidates(sha) if bs.check_ref(r) is None), None)
        if ref is None:
            bad.append(sha)
            continue
        found.append(ref)
        for who in sorted(unclaimed[sha]):
            by_owner.setdefault(who, []).append(ref)
    index: List[str] = []
    for who, refs in sorted(by_owner.items()):
        index += bv.store_as(who).index_found(refs)
    if index:
        bs.reload()  # written through another owner's store: listed here too
    return found, index, bad


#: a data object younger than this may be an add's not indexed yet (``BlobStore.add`` indexes
#: what it verified every ``INDEX_EVERY`` seconds): never taken for one an index lost
UNLISTED_AFTER = 2 * INDEX_EVERY
#: the folder of marks a restore leaves when a claim it needs is listed nowhere while data objects
#: no index object lists stand in the folder (one per owner, ``lost_mark``): the next start looks
#: in them. A mark costs a start one ``stat``; without it no start lists ``data/`` (a folder of
#: 100,000 big blobs is 100,000 entries: ~1 s a start)
LOST_MARKS = "unlisted"


def lost_mark(bv: BlobVault) -> str:
    """The mark that sends this logdir's next start to look in the unlisted data objects."""
    return os.path.join(bv.folder, LOST_MARKS, hashlib.sha256(bv.owner.encode()).hexdigest()[:32])


#: folder -> (monotonic time, ``unlisted_objects``): a restore's every missing blob asks (one listing)
_UNLISTED: Dict[str, Tuple[float, List[str]]] = {}


def unlisted_objects(bv: BlobVault) -> List[str]:
    """The folder's data objects no valid index row points into, older than ``UNLISTED_AFTER``:
    what a removed (or lost) index object leaves (review R23 T5, t6: a logdir's pack listed by
    nothing once another logdir's status had called its damaged index removable). One listing of
    the local folder's ``data/`` against the index as last read (the same answer for 10 s: a
    restore asks it for each blob it misses)."""
    got = _UNLISTED.get(bv.folder)
    if got is not None and time.monotonic() - got[0] < 10:
        return list(got[1])
    bs = bv.store
    listed = {r.key for ref in bs.refs() for r in bs.candidates(ref.sha)}
    now = time.time()
    out = sorted(e.key for e in bs.store.list(DATA)
                 if e.key not in listed and e.mtime > 0 and now - e.mtime >= UNLISTED_AFTER)
    _UNLISTED[bv.folder] = (time.monotonic(), out)
    return list(out)


def rebuild(bv: Optional[BlobVault], manifests) -> Optional[Salvage]:
    """The claims the bucket's manifests need that no valid index object lists (per sha256 and
    owner, ``_unclaimed``) listed anew, looked for while an index object of the folder is damaged
    or a restore left this logdir's ``lost_mark`` (a claim listed nowhere, data objects listed by
    nothing: ``unlisted_objects``; removed once looked in; only then: else one listing of
    the index, and a ``stat``). A blob listed for another owner sharing the
    folder gets this owner's claim on that very row (hashed first, ``_claim_again``), only while an
    object is damaged (it may have listed the claim: no claim on another's blob on a manifest's
    word alone); one listed for no one is looked for in the folder's packs
    (``storage.blob_salvage.salvage``) and listed under its owners. ``manifests``: a callable
    giving the bucket's manifests (read only then). None when there is nothing to look for, or
    the folder is absent or not ours (nothing is written into it). Under the folder's forget lock,
    shared (a purge's forget takes it alone). ``BlobFailure``/``StoreFailure``/``OSError``."""
    if not folder_ours(bv):
        return None
    bs = bv.store
    bs.reload()
    damaged = bool(bs.damaged_index())
    mark = lost_mark(bv)
    if not damaged and not os.path.exists(mark):
        return None
    wanted, owners, known = blob_needs(bv, manifests())
    with forget_lock(bv, exclusive=False):
        bs.reload()
        unclaimed = _unclaimed(bv, owners)
        listed = {s: w for s, w in unclaimed.items() if bs.has(s)} if damaged else {}
        unlisted = {s: w for s, w in unclaimed.items() if not bs.has(s)}
        got = salvage(bs, {s: n for s, n in wanted.items() if s in unlisted}, known, owners=unlisted,
                      store_as=bv.store_as)
        found, index, bad = _claim_again(bv, listed)
        got.found += found
        got.index += index
        got.missing = sorted(set(got.missing) | set(bad))
    if not damaged:
        # looked once: what is still missing was said; a restore that fails again leaves it again
        with contextlib.suppress(FileNotFoundError):
            os.unlink(mark)
    return got if damaged or got.found or got.missing else None


def shared_with(bv: BlobVault) -> List[str]:
    """The other logdirs this folder's records say share it: each place another logdir claimed
    blobs from (``bucket_identity.note_place``: ``places/<place>.json``, in clear when it reads),
    and "another owner" when a valid index object lists a claim of an owner not this logdir's.
    A damaged index object of a shared folder may be the only one listing their claims: this
    logdir's manifests alone never say it may be removed (review R23 T5)."""
    out: List[str] = []
    try:
        names = sorted(os.listdir(os.path.join(bv.folder, PLACES)))
    except OSError:
        names = []
    for name in names:
        place = name[:-len(".json")] if name.endswith(".json") else None
        if not place or place == bv.place:
            continue
        doc = place_record(bv, place)
        out.append(f"{doc['protocol']}://{doc['root'][:300]}" if doc else f"place {place[:24]}")
    if not out and any(not bv.is_ours(who) for r in bv.store.refs() for who in bv.store.owners(r.sha)):
        out.append("another owner")
    return out


def recover_index(vault: BucketVault, manifests) -> List[RecoveryOutcome]:
    """``rebuild`` at a bucket's start and ``recover``, said as a disk's start says it
    (``pack_index_rebuilt.rebuilt_outcomes``); a failure is a failed outcome: nothing was written, the
    next start looks again."""
    bv = vault.blobs
    if bv is None:
        return []
    try:
        got = rebuild(bv, manifests)
    except LOOK_FAILURES as e:
        return [RecoveryOutcome("", "", Recovery.FAILED, f"cannot look in the packs of {bv.folder} for the backups a "
                                f"damaged pack index hides: {e}", Finding.RECOVERY_FAILED)]
    try:
        unlisted = got is not None and not bv.store.damaged_index()
    except LOOK_FAILURES:
        unlisted = False
    return rebuilt_outcomes(got, bv.folder, bv.folder, unlisted=unlisted)


def index_problems(vault: BucketVault, manifests) -> List[dict]:
    """``status``'s rows for the folder's damaged index objects (``Finding.DAMAGED_FILE``, named
    by path), each saying whether it still hides a backup the manifests need: the disk's words
    (``vault_packs.damaged_index_problems``). ``manifests``: a callable giving the bucket's
    manifests, called only when an object is damaged; one listing of the folder's index else."""
    bv = vault.blobs
    if not folder_ours(bv):
        return []
    try:
        bv.store.reload()
        damaged = bv.store.damaged_index()
        if not damaged:
            return []
        _wanted, owners, _known = blob_needs(bv, manifests())
        hidden = _hidden(bv, owners)
        others = shared_with(bv)
    except LOOK_FAILURES:
        return []  # the folder does not read: the verbs that read it say so
    return [{"code": Finding.DAMAGED_FILE, "op_id": None, "run": None, "bytes": 0, "path": p["file"],
             "detail": f"{p['file']}: {p['message']}"}
            for p in damaged_index_problems(damaged, bv.folder, hidden, shared=others)]


def hidden_by_index(vault: BucketVault, f: dict) -> Optional[str]:
    """Why ``f``'s blob reads as missing when only a damaged index object of the folder may list
    it (or its owner's claim on it), or when data objects no index object lists stand in the
    folder (one removed: they may hold it; this logdir's ``lost_mark`` left, so that the next
    start looks in them): the words naming those objects (``remote_vault.hidden_words``); None
    otherwise (missing or damaged as ``bucket_blobs.entry_failure`` says)."""
    bv = vault.blobs
    sha = f.get("sha256") if isinstance(f, dict) else None
    if not is_sha256(sha) or not folder_ours(bv):
        return None
    try:
        who = entry_owner(bv, f)
        if bv.store.has(sha) and who in bv.store.owners(sha):
            return None  # listed and claimed: its failure is its own
        damaged = bv.store.damaged_index()
        if not damaged:
            lost = unlisted_objects(bv)
            if not lost:
                return None
            os.makedirs(os.path.dirname(lost_mark(bv)), mode=0o700, exist_ok=True)
            os.close(os.open(lost_mark(bv), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            return (f"listed by no index object of {bv.folder}, where {len(lost)} data object(s) no index object "
                    "lists stand (one removed?) and may hold it: `tb-footprint recover` looks for it in them (each "
                    "slice hashed) and lists it anew")
    except LOOK_FAILURES:
        return None
    return hidden_words([os.path.join(bv.folder, d["key"]) for d in damaged])


__all__ = ["LOOK_FAILURES", "blob_needs", "folder_ours", "hidden_by_index", "index_problems", "rebuild",
           "recover_index", "lost_mark", "shared_with", "unlisted_objects"]
