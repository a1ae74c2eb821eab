"""A bucket logdir's local vault of blobs at a command's end and in ``status``: the claims an
operation rolled back made anew released (``release_rolled_back``), the folder's orphans named
(``folder_orphans``) — review R9 F8's follow-up. Positive evidence only, as the purge's forget
(``bucket_blobs.collect``): a blob nothing names may be the only copy of a run."""
from __future__ import annotations

import os
from typing import List, Optional

from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine.bucket_blob_claims import Claims
from tb_footprint_plugin.engine.bucket_blobs import names_in_bucket
from tb_footprint_plugin.engine.bucket_identity import claimed_here
from tb_footprint_plugin.engine.bucket_state import BucketTxnError, BucketVault, STORE_FAILURES
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.lock import Locked, release, try_exclusive
from tb_footprint_plugin.storage.store_object import ObjectStore


def gave_back(outcome) -> bool:
    """Whether a run's outcome says its operation put the run back as it was (rolled back or
    skipped, nothing kept aside: no finding), so the claims its backups made anew are its own to
    release. A failed one (a rollback left unfinished, a reduction unverified) keeps them."""
    return bool(outcome.op_id) and outcome.status in (Outcome.ROLLED_BACK, Outcome.SKIPPED) and \
        not outcome.findings


def release_rolled_back(ostore: ObjectStore, vault: BucketVault, claims: Claims, outcomes) -> dict:
    """At a command's end (every journal of its operations closed, their ``adding`` lock left):
    release this logdir's claim on each blob an operation put back as it was (``gave_back``)
    claimed anew in this command (``Claims``: in memory, never read from the bucket), unless
    another operation of the command holds it or a journal or manifest (not purged) in the bucket
    names it now; a rolled-back reduction or retirement then leaves none of its bytes in the folder
    (review R9 F8's follow-up). A blob claimed before the command (maybe an orphan: the only copy
    of a run whose manifest went missing) is never released here. The forget lock is only tried:
    held by an operation adding (or a purge), nothing is released, the blobs stay orphans
    (``status`` names them). Never raises: a release that fails leaves orphans, nothing lost.
    Returns ``{"released", "released_bytes"}``, or ``{"orphans_left", "why"}``."""
    bv = vault.blobs
    ops = sorted({o.op_id for o in outcomes if gave_back(o)})
    want = claims.to_release(ops) if bv is not None else set()
    claims.drop(ops)
    if not want or not os.path.isdir(bv.folder):
        return {}
    try:
        bv.store  # noqa: B018 - the folder checked ours before its lock file is opened
        fd = try_exclusive(os.path.join(bv.folder, ".forget.lock"))
    except (Locked, OSError) as e:
        return {"orphans_left": len(want), "why": f"{bv.folder}: the forget lock is held ({e})"}
    try:
        named = names_in_bucket(ostore, vault)
        if isinstance(named, str):
            return {"orphans_left": len(want), "why": f"{named} is not readable"}
        bv.store.reload()
        drop = sorted(s for s in want if s not in named[0] and bv.store.owner in bv.store.owners(s))
        size = sum(r.size for r in (bv.store.ref(s) for s in drop) if r is not None)
        if drop:
            bv.store.forget(drop, sweep=False)
        return {"released": len(drop), "released_bytes": size}
    except (BlobFailure, BucketTxnError, *STORE_FAILURES, OSError) as e:
        return {"orphans_left": len(want), "why": str(e)}
    finally:
        release(fd)


def folder_orphans(ostore: ObjectStore, vault: BucketVault, manifests_read: Optional[List[dict]] = None) -> List[dict]:
    """``status``'s finding of the folder's orphans (``Finding.ORPHAN_BLOBS``, as a disk vault's):
    the blobs this logdir added that no journal or manifest in the bucket names or lets go, with
    their count and original bytes, and what frees them (nothing today: kept). Read only, no lock:
    an operation adding now counts its blobs until its manifest names them. None listed when the
    folder holds no blob of this logdir (no request then) or a manifest or journal does not read
    (it is named among the problems already). ``manifests_read``: the manifests ``status`` read (the
    one schema), so only the journals' listing (and a read of each journal) is added; without them
    the manifests are listed and read too. Nothing asked of the bucket when the folder holds no blob
    of this logdir."""
    bv = vault.blobs
    if bv is None or not os.path.isdir(bv.folder):
        return []
    try:
        bv.store.reload()
        mine, earlier = claimed_here(bv)
        named = names_in_bucket(ostore, vault, manifests_read) if mine or earlier else None
    except BlobFailure:
        return []  # its index does not read: said by the verbs that read it
    if not isinstance(named, tuple):
        return []
    gone = {sha for _, sha in named[1]}
    orphans = [r for r in mine if r.sha not in named[0] and r.sha not in gone]
    out = [_earlier_row(bv, [r for r in earlier if r.sha not in named[0]])] if earlier else []
    if not orphans:
        return [row for row in out if row is not None]
    n = sum(r.size for r in orphans)
    return [row for row in out if row is not None] + [{"code": Finding.ORPHAN_BLOBS, "op_id": None, "run": None, "path": bv.folder, "bytes": n,
             "count": len(orphans),
             "detail": f"{bv.folder}: {len(orphans)} backup blob(s) of this logdir ({n} bytes before compression) "
                       "that no manifest or journal in the bucket names: kept, never purged — they may be the only "
                       "copy of a run whose manifest went missing (a sync with --delete, a lifecycle rule, a tidy "
                       "by hand), or what an operation killed or rolled back by an older version left; nothing "
                       "frees them today (a purge forgets only what a manifest lets go; a reduction or retirement "
                       "rolled back releases its own at its end)"}]


def _earlier_row(bv, refs) -> Optional[dict]:
    """``status``'s finding of the blobs this logdir claimed at an earlier location (its prefix
    moved since, review R11 G2) that no manifest or journal here needs any more: kept (a copy of
    the logdir left at the old place may still need them), said with what frees them."""
    if not refs:
        return None
    n = sum(r.size for r in refs)
    return {"code": Finding.ORPHAN_BLOBS, "op_id": None, "run": None, "path": bv.folder, "bytes": n,
            "count": len(refs),
            "detail": f"{bv.folder}: {len(refs)} backup blob(s) ({n} bytes before compression) claimed by this "
                      "logdir where it stood before (its prefix was moved, or its id object lost) that no manifest "
                      "or journal here names: kept for that earlier location, never purged from here — a copy of "
                      "this logdir left there may still need them"}


__all__ = ["folder_orphans", "gave_back", "release_rolled_back"]
