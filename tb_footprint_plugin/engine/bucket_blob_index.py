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

import os
from typing import Dict, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import manifest
from tb_footprint_plugin.engine.bucket_blobs import forget_lock, is_blob_entry
from tb_footprint_plugin.engine.bucket_identity import entry_owner
from tb_footprint_plugin.engine.bucket_state import BlobVault, BucketVault
from tb_footprint_plugin.engine.catalogue_rules import entry_released
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome
from tb_footprint_plugin.engine.pack_index_rebuilt import rebuilt_outcomes
from tb_footprint_plugin.engine.remote_vault import hidden_words
from tb_footprint_plugin.engine.vault_packs import damaged_index_problems
from tb_footprint_plugin.storage.blob_salvage import Salvage, salvage
from tb_footprint_plugin.storage.blobstore import BlobFailure
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


def _hidden(bv: BlobVault, wanted: Dict[str, int]) -> List[str]:
    """The needed blobs no valid index object of the folder lists (the index as last read)."""
    return sorted(s for s in wanted if not bv.store.has(s))


def rebuild(bv: Optional[BlobVault], manifests) -> Optional[Salvage]:
    """While an index object of the folder is damaged (only then), the blobs the bucket's
    manifests need that no valid index object lists, found in the folder's packs and listed anew
    under their owners (``storage.blob_salvage.salvage``). ``manifests``: a callable giving the
    bucket's manifests (read only when something is damaged). None when nothing is damaged, or
    the folder is absent or not ours (nothing is written into it). Under the folder's forget
    lock, shared (a purge's forget takes it alone). ``BlobFailure``/``StoreFailure``/``OSError``."""
    if not folder_ours(bv):
        return None
    bs = bv.store
    bs.reload()
    if not bs.damaged_index():
        return None
    wanted, owners, known = blob_needs(bv, manifests())
    with forget_lock(bv, exclusive=False):
        bs.reload()
        hidden = set(_hidden(bv, wanted))
        return salvage(bs, {s: n for s, n in wanted.items() if s in hidden}, known,
                       owners={s: owners[s] for s in hidden}, store_as=bv.store_as)


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
    return rebuilt_outcomes(got, bv.folder, bv.folder)


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
        wanted, _owners, _known = blob_needs(bv, manifests())
        hidden = _hidden(bv, wanted)
    except LOOK_FAILURES:
        return []  # the folder does not read: the verbs that read it say so
    return [{"code": Finding.DAMAGED_FILE, "op_id": None, "run": None, "bytes": 0, "path": p["file"],
             "detail": f"{p['file']}: {p['message']}"} for p in damaged_index_problems(damaged, bv.folder, hidden)]


def hidden_by_index(vault: BucketVault, f: dict) -> Optional[str]:
    """Why ``f``'s blob reads as missing when only a damaged index object of the folder may list
    it (or its owner's claim on it): the words naming those objects (``remote_vault.hidden_words``);
    None otherwise (missing or damaged as ``bucket_blobs.entry_failure`` says)."""
    bv = vault.blobs
    sha = f.get("sha256") if isinstance(f, dict) else None
    if not is_sha256(sha) or not folder_ours(bv):
        return None
    try:
        damaged = bv.store.damaged_index()
        if not damaged:
            return None
        who = entry_owner(bv, f)
        if bv.store.has(sha) and who in bv.store.owners(sha):
            return None  # listed and claimed: its failure is its own
    except LOOK_FAILURES:
        return None
    return hidden_words([os.path.join(bv.folder, d["key"]) for d in damaged])


__all__ = ["LOOK_FAILURES", "blob_needs", "folder_ours", "hidden_by_index", "index_problems", "rebuild",
           "recover_index"]
