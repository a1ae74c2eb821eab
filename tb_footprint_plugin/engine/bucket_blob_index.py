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

from tb_footprint_plugin.codes import Failure, Finding, Recovery
from tb_footprint_plugin.engine import manifest
from tb_footprint_plugin.engine.bucket_blobs import forget_let_go, forget_lock, is_blob_entry, names_in_bucket
# ``recorded_vault``: the one rule of a recorded folder (``bucket_blob_folder.choose_folder``), named here too
from tb_footprint_plugin.engine.bucket_blob_folder import choose_folder, recorded_vault
from tb_footprint_plugin.engine.bucket_identity import PLACES, entry_owner, place_record
from tb_footprint_plugin.engine.bucket_manifests import own_manifests
from tb_footprint_plugin.engine.bucket_state import BlobVault, BucketVault
from tb_footprint_plugin.engine.catalogue_rules import entry_released
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome
from tb_footprint_plugin.engine.pack_index_rebuilt import rebuilt_outcomes
from tb_footprint_plugin.engine.remote_vault import hidden_words
from tb_footprint_plugin.engine.vault_packs import (damaged_index_problems, damaged_notes_findings, store_rows,
                                                   unlisted_words)
from tb_footprint_plugin.storage.blob_salvage import UNLISTED_AFTER, Salvage, salvage
from tb_footprint_plugin.storage.blob_salvage import unlisted_objects as blob_unlisted
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.private import NotPrivate, check_private_dir
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

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
    return needs_of(bv, ((f, not (m.get(manifest.BACKUP_PURGED) or entry_released(m, f)))
                         for m in manifests for f in _entries(m)))


def needs_of(bv: BlobVault, entries) -> Tuple[Dict[str, int], Dict[str, Set[str]], Dict[str, int]]:
    """``blob_needs``'s ``(wanted, owners, known)`` from file entries, each with whether it is
    still needed (a manifest's, or those ``bucket_blobs.names_in_bucket`` gives a purge)."""
    wanted: Dict[str, int] = {}
    owners: Dict[str, Set[str]] = {}
    known: Dict[str, int] = {}
    for f, need in entries:
        if not (is_blob_entry(f) and is_sha256(f.get("sha256")) and type(f.get("size")) is int and f["size"] >= 0):
            continue
        if not need:
            known.setdefault(f["sha256"], f["size"])
            continue
        who = entry_owner(bv, f)
        if who is not None:
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


#: the folder of marks a restore leaves when a claim it needs is listed nowhere while data objects
#: no index object lists stand in the folder (one per owner, ``lost_mark``): the next start looks
#: in them. A mark costs a start one ``stat``; without it no start lists ``data/`` (a folder of
#: 100,000 big blobs is 100,000 entries: ~1 s a start)
LOST_MARKS = "unlisted"


def lost_mark(bv: BlobVault) -> str:
    """The mark that sends this logdir's next start to look in the unlisted data objects."""
    return os.path.join(bv.folder, LOST_MARKS, hashlib.sha256(bv.owner.encode()).hexdigest()[:32])


#: folder -> (monotonic time, ``unlisted_objects``): a restore's every missing blob asks (one listing)
_UNLISTED: Dict[Tuple[str, bool], Tuple[float, List[str]]] = {}


def unlisted_objects(bv: BlobVault, gaps: bool = False) -> List[str]:
    """The folder's data objects no valid index row points into, older than ``UNLISTED_AFTER``:
    what a removed (or lost) index object leaves (review R23 T5, t6: a logdir's pack listed by
    nothing once another logdir's status had called its damaged index removable); ``gaps``: and
    the packs rows list only in part (an index object removed after a rebuild listed the others'
    rows: R23 T12). One listing of the local folder's ``data/`` against the index as last read
    (``blob_salvage.unlisted_objects``; the same answer for 10 s: a verify asks it for each blob
    it misses)."""
    got = _UNLISTED.get((bv.folder, gaps))
    if got is not None and time.monotonic() - got[0] < 10:
        return list(got[1])
    out = blob_unlisted(bv.store, gaps=gaps)
    _UNLISTED[(bv.folder, gaps)] = (time.monotonic(), out)
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


def recover_index(vault: BucketVault, manifests, ostore: Optional[ObjectStore] = None) -> List[RecoveryOutcome]:
    """``rebuild`` at a bucket's start and ``recover``, said as a disk's start says it
    (``pack_index_rebuilt.rebuilt_outcomes``); a failure is a failed outcome: nothing was written, the
    next start looks again. ``ostore`` given (the ``recover`` verb's, not a start's: it costs a
    reading of the manifests) and no ``--backup-dir``: in the blob folder this logdir's manifests
    record, by the one rule of status, verify and purge (``bucket_blob_folder.choose_folder``, r37
    W: ``recover`` looked only in ``--backup-dir``'s folder, while the words of a restore that
    misses a blob send to it), or in each of several (a look lists anew only claims the manifests
    need, each under the owner its entry records); a recorded folder refused or not there is not
    looked in, and said by ``status`` (and by ``recover`` where a journal needs it), not here again."""
    if vault.blobs is None and ostore is not None:
        try:
            read = manifests()
        except (*LOOK_FAILURES, ValueError) as e:
            return [RecoveryOutcome("", "", Recovery.FAILED, f"cannot read the manifests for the blob folder they "
                                    f"record: {e}", Finding.RECOVERY_FAILED)]
        got = choose_folder(vault, own_manifests(ostore, vault, read, []))
        out: List[RecoveryOutcome] = []
        for _folder, each in sorted(got.usable.items()):
            out += recover_index(each, lambda: read)
        return out
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
    (``vault_packs.damaged_index_problems``); with none damaged, the backups the manifests need that
    no row lists (``_unlisted_problems``) and the data objects no row lists that every sweep keeps
    (``vault_packs.kept_unlisted_finding``, ``Finding.ORPHAN_BLOBS``). ``manifests``: a callable
    giving the bucket's manifests, called only when an object is damaged or one is unlisted; a
    listing of the folder's index and one of its ``data/`` else."""
    bv = vault.blobs
    if not folder_ours(bv):
        return []
    try:
        bv.store.reload()
        damaged = bv.store.damaged_index()
        if not damaged:
            # one listing of ``data/`` for the rows of what the folder keeps that nothing frees (the
            # data objects no row lists, the packs no forget deletes, the pending notes that do not
            # read: ``vault_packs.store_rows``, issue #26) and the backups a lost index object hid
            rows = store_rows(bv.store, bv.folder, UNLISTED_LOOKS)
            unlisted = any(r["code"] == Finding.ORPHAN_BLOBS for r in rows)
            return (_unlisted_problems(bv, manifests) if unlisted else []) + rows
        _wanted, owners, _known = blob_needs(bv, manifests())
        hidden = _hidden(bv, owners)
        others = shared_with(bv)
        notes = damaged_notes_findings(bv.folder, bv.store.damaged_notes())
    except LOOK_FAILURES:
        return []  # the folder does not read: the verbs that read it say so
    return [{"code": Finding.DAMAGED_FILE, "op_id": None, "run": None, "bytes": 0, "path": p["file"],
             "detail": f"{p['file']}: {p['message']}"}
            for p in damaged_index_problems(damaged, bv.folder, hidden, shared=others)] + notes


#: who lists anew, in a bucket's blob folder, a backup a lost index object hid (``rebuild``,
#: ``find_hidden``, ``unlisted_guard``): ``vault_packs.kept_unlisted_finding``'s words
UNLISTED_LOOKS = "A restore or a purge of this logdir (each looks in them, every slice hashed)"


def _unlisted_problems(bv: BlobVault, manifests) -> List[dict]:
    """``status``'s row when no index object is damaged but backups the manifests need are listed
    by no index row while data objects no row lists stand in the folder (an index object removed
    or lost, R23 T13; the caller has counted them, ``vault_packs.kept_unlisted``):
    ``Failure.BACKUP_INDEX_DAMAGED`` naming the folder's ``index`` and them, in the disk's words
    (``vault_packs.unlisted_words``); a restore or purge finds them again. The manifests are read
    only when an unlisted object stands."""
    _wanted, owners, _known = blob_needs(bv, manifests())
    hidden = sorted(s for s in owners if not bv.store.has(s))
    if not hidden:
        return []
    where = os.path.join(bv.folder, "index")
    return [{"code": Failure.BACKUP_INDEX_DAMAGED, "op_id": None, "run": None, "bytes": 0, "path": where,
             "detail": f"{where}: {unlisted_words(hidden, ', while data objects no row lists stand in the folder')}; "
                       "a restore or a purge finds them in those objects (each slice hashed) and lists them anew"}]


def find_hidden(vault: BucketVault, m: dict, catalogue: List[dict] = ()) -> Optional[Salvage]:
    """A restore's own look (R23 T13: "restore finds it again"): when a blob the manifest ``m``
    needs is listed by no index row, no index object is damaged (the start's ``rebuild`` took that
    case) and data objects no row lists (or lists in part) stand (``blob_salvage.unlisted_objects``),
    every blob the bucket's manifests need (``catalogue``: the restore's reading of them,
    ``blob_needs``; with ``m``) that no row lists is looked for in those objects in one walk
    (``storage.blob_salvage.salvage``: each slice hashed against an entry's sha256 and size; the
    others' sizes step over what no longer is needed) and listed anew under the owner each entry
    records, under the folder's forget lock, shared. A blob listed for another owner only gets no
    claim here (``rebuild``'s rule: not on a manifest's word alone). None when there was nothing
    to look for, the folder is not ours, or the look failed (the restore then says why each blob
    is missing, ``hidden_by_index``)."""
    bv = vault.blobs
    if not folder_ours(bv):
        return None
    try:
        bs = bv.store
        if all(bs.has(s) for s in blob_needs(bv, [m])[0]) or bs.damaged_index() \
                or not blob_unlisted(bs, gaps=True):
            return None
        wanted, owners, known = blob_needs(bv, [*catalogue, m])
        with forget_lock(bv, exclusive=False):
            bs.reload()
            want = {s: n for s, n in wanted.items() if not bs.has(s)}
            if not want or bs.damaged_index():
                return None
            got = salvage(bs, want, known, owners={s: owners[s] for s in want}, store_as=bv.store_as)
        for gaps in (False, True):  # what it listed is no longer unlisted
            _UNLISTED.pop((bv.folder, gaps), None)
        return got
    except LOOK_FAILURES:
        return None


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
            lost = unlisted_objects(bv, gaps=True)
            if not lost:
                return None
            os.makedirs(os.path.dirname(lost_mark(bv)), mode=0o700, exist_ok=True)
            os.close(os.open(lost_mark(bv), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            return (f"listed by no index object of {bv.folder}, where {len(lost)} data object(s) no index object "
                    "lists whole stand (one removed?) and may hold it: `tb-footprint recover` looks for it in them "
                    "(each slice hashed) and lists it anew")
    except LOOK_FAILURES:
        return None
    return hidden_words([os.path.join(bv.folder, d["key"]) for d in damaged])


def unlisted_guard(bv: BlobVault, needed: Set[str], entries) -> dict:
    """What a purge's forget must keep (issue #26, R23 T12/T13, F3's remainder; restic's prune
    never deletes a pack holding a blob still referenced): every blob a journal or manifest still
    needs (``needed``, ``entries``) that no index row lists — an index object removed or lost,
    garbled or not — is first looked for in the folder's data objects no row covers and listed
    anew (``storage.blob_salvage.salvage``: each slice hashed against the entry's sha256 and size,
    under the owner the entry records); one still found nowhere may be in a data object no row
    lists, so none is swept (``keep_unlisted``), nor a pack with bytes no row accounts for
    repacked or deleted (``keep_uncovered``, while one is ``missing``); nor is unlisted data swept
    in a folder other logdirs share (``shared_with``): their manifests are not ours to read, and it
    may be theirs (each add writes its own pack, listed in one index object: what another logdir
    lost is a whole unlisted object).
    The caller holds the exclusive forget lock and has just read the index. Returns ``{}`` (sweep
    as before), or ``{"keep_unlisted": True, "missing": [...], "shared": [...]}``, with ``"found"``
    (refs listed anew) and ``"index"`` (objects written) when a look found some. While an index
    object is damaged nothing is deleted anyway (``BlobStore.forget``): no look then, the start's
    rebuild does it. ``BlobFailure``/``StoreFailure``/``OSError`` as the folder fails."""
    bs = bv.store
    if bs.damaged_index():
        return {}
    out: dict = {}
    hidden = sorted(s for s in needed if not bs.has(s))
    if hidden:
        wanted, owners, known = needs_of(bv, entries)
        look = {s: wanted[s] for s in hidden if s in wanted}
        if look and folder_ours(bv):
            got = salvage(bs, look, known, owners={s: owners[s] for s in look}, store_as=bv.store_as)
            out.update(found=got.found, index=got.index)
        missing = sorted(s for s in hidden if not bs.has(s))
        if missing:
            out.update(keep_unlisted=True, missing=missing)
    shared = shared_with(bv)
    if shared:
        out.update(keep_unlisted=True, shared=shared)
    return out


def kept_unlisted_row(bv: BlobVault, guard: dict, fig: dict) -> Optional[dict]:
    """A purge's row (its ``refused``: said, never acted on) of the data objects its forget kept
    for ``unlisted_guard``: with the backups found nowhere, ``Failure.BACKUP_INDEX_DAMAGED`` naming
    the folder and them (nothing unlisted is swept until they are found, or their operations are
    purged); in a shared folder, ``Finding.ORPHAN_BLOBS`` counting what stays. None when nothing
    was kept."""
    n, size = int(fig.get("unlisted_kept") or 0), int(fig.get("unlisted_kept_bytes") or 0)
    n += int(fig.get("uncovered_kept") or 0)
    missing, shared = guard.get("missing") or [], guard.get("shared") or []
    what = f"kept: {n} data object(s) no index row lists ({size} bytes)"
    if missing:
        return {"code": Failure.BACKUP_INDEX_DAMAGED, "path": bv.folder, "op_id": None, "run": None, "bytes": size,
                "detail": f"{bv.folder}: {unlisted_words(missing, ' nor found in a data object no row lists')} "
                          f"({what})"}
    if shared and n:
        return {"code": Finding.ORPHAN_BLOBS, "path": bv.folder, "op_id": None, "run": None, "bytes": size,
                "detail": f"{bv.folder}: {what}, in a folder shared with {len(shared)} other logdir(s) "
                          f"({', '.join(shared[:3])}{', …' if len(shared) > 3 else ''}): their backups may be listed "
                          "only by an index object now gone; each one's purge or `recover` lists its own anew"}
    return None


def collect(ostore: ObjectStore, vault: BucketVault) -> dict:
    """Purge's step on the blob vault: under the exclusive forget lock, what the bucket's journals
    and manifests need read (``names_in_bucket``; one that does not read blocks everything: it may
    name any blob), the blobs they need that no index row lists found again first
    (``unlisted_guard``: its one read of every manifest is the purge's own, so the check costs no
    request more), then the claims they let go dropped (``bucket_blobs.forget_let_go``), no data
    object no row lists swept while the guard says keep. Returns the blob store's figures, with
    ``unlisted_row`` (``kept_unlisted_row``) when it kept some, ``rebuilt`` (the refs listed
    anew) when it found some; or ``{"blocked": why}``."""
    bv = vault.blobs
    if bv is None or not os.path.isdir(bv.folder):
        return {}  # no blob was ever added there
    with forget_lock(bv, exclusive=True):
        entries: list = []
        named = names_in_bucket(ostore, vault, entries=entries)
        if isinstance(named, str):
            return {"blocked": f"{named} is not readable; nothing forgotten"}
        needed, let_go = named
        bv.store.reload()
        guard = unlisted_guard(bv, needed, entries)
        fig = forget_let_go(bv, needed, let_go, keep_unlisted=bool(guard.get("keep_unlisted")),
                            keep_uncovered=bool(guard.get("missing")))
        row = kept_unlisted_row(bv, guard, fig) if guard.get("keep_unlisted") else None
        if row is not None:
            fig["unlisted_row"] = row
        if guard.get("found"):
            fig["rebuilt"] = len(guard["found"])
        return fig


__all__ = ["LOOK_FAILURES", "blob_needs", "collect", "find_hidden", "folder_ours", "needs_of",
           "kept_unlisted_row", "unlisted_guard", "hidden_by_index", "index_problems", "rebuild",
           "recorded_vault", "recover_index", "lost_mark", "shared_with", "unlisted_objects",
           "UNLISTED_LOOKS"]
