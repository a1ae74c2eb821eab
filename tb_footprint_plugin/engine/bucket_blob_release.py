"""A bucket logdir's local vault of blobs at a command's end and in ``status``: the claims an
operation rolled back made anew released (``release_rolled_back``), the folder's orphans named
(``folder_orphans``) — review R9 F8's follow-up. Positive evidence only, as the purge's forget
(``bucket_blobs.collect``): a blob nothing names may be the only copy of a run."""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

from tb_footprint_plugin.codes import Finding, Outcome, StoreError
from tb_footprint_plugin.engine.bucket_blob_claims import Claims, drop_fresh, fresh_of
from tb_footprint_plugin.engine.bucket_blobs import (listed_op, missing_in_bucket, names_in_bucket, said_kept_in_bucket,
                                                    witness_name)
from tb_footprint_plugin.engine.history import bucket_kept_log, missing_manifests_said
from tb_footprint_plugin.engine.bucket_identity import claimed_here
from tb_footprint_plugin.engine.bucket_state import BucketState, BucketTxnError, BucketVault, STORE_FAILURES
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.lock import Locked, release, try_exclusive
from tb_footprint_plugin.storage.store import StoreFailure
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
    # the folder's records of new claims (``bucket_blob_claims.FreshNotes``) of the operations this
    # command settled go at its end: committed, given back (released here or left orphans); a failed
    # one's journal may be left, whose rollback by a start reads them
    settled = {o.op_id for o in outcomes if o.op_id and o.status != Outcome.FAILED}
    try:
        return _release(ostore, vault, claims, outcomes)
    finally:
        drop_fresh(bv, settled)


def _release(ostore: ObjectStore, vault: BucketVault, claims: Claims, outcomes) -> dict:
    """``release_rolled_back``'s release, the records aside."""
    bv = vault.blobs
    ops = sorted({o.op_id for o in outcomes if gave_back(o)})
    want = claims.to_release(ops) if bv is not None else set()
    claims.drop(ops)
    if not want or not os.path.isdir(bv.folder):
        return {}
    return release_claims(ostore, vault, want)


def release_claims(ostore: ObjectStore, vault: BucketVault, want) -> dict:
    """This logdir's claim on each of ``want`` released, unless a journal or manifest (not purged)
    in the bucket names it now, under the folder's forget lock, only tried (held: nothing
    released, ``{"orphans_left", "why"}``); ``BlobStore.forget``'s own rules for what goes (a blob
    another owner claims stays; a pack with bytes nothing accounts for is held). Never raises."""
    bv = vault.blobs
    try:
        bv.store  # noqa: B018 - the folder checked ours before its lock file is opened
        fd = try_exclusive(os.path.join(bv.folder, ".forget.lock"))
    except (Locked, BlobFailure, OSError) as e:
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


def release_fresh(ostore: ObjectStore, vault: BucketVault, ops, rolled_back: bool) -> dict:
    """A start's settling of operations ``ops`` whose process is gone (their journal closed): when
    ``rolled_back`` (each run put back as it was, nothing kept aside), the claims each recorded in
    the folder as made anew (``bucket_blob_claims.fresh_of``: written by its add before the claim
    could be listed, never from the bucket) released by the rule of a command's end
    (``release_claims``: not while a journal or manifest in the bucket names one; the forget's own
    rules) — review R25 L2: such claims stayed orphans, counted and never freed. Then the records
    go, whatever happened (committed, released, or left orphans). Never raises; ``{}`` without a
    folder or a record."""
    bv = vault.blobs
    if bv is None:
        return {}
    ops = [str(op) for op in ops]
    try:
        want = set().union(*(fresh_of(bv, op) for op in ops)) if rolled_back and ops else set()
        if not want or not os.path.isdir(bv.folder):
            return {}
        return release_claims(ostore, vault, want)
    finally:
        drop_fresh(bv, ops)


def release_settled(ostore: ObjectStore, vault: BucketVault, back, ops) -> str:
    """A start's settling of a journal (``bucket_recover``): ``release_fresh`` of the operations
    ``back`` (each put back as it was), the records of every operation of ``ops`` dropped; what is
    said of it, to follow the outcome's words ("" when nothing was released)."""
    freed = release_fresh(ostore, vault, back, rolled_back=True) if back else {}
    release_fresh(ostore, vault, [o for o in ops if o not in back], rolled_back=False)
    if not freed.get("released"):
        return ""
    return (f"; the blob folder released the {freed['released']} backup(s) its add had claimed anew "
            f"({freed.get('released_bytes', 0)} bytes; none another operation names)")


def folder_orphans(ostore: ObjectStore, vault: BucketVault, manifests_read: Optional[List[dict]] = None) -> List[dict]:
    """``status``'s finding of the folder's orphans (``Finding.ORPHAN_BLOBS``, as a disk vault's):
    the blobs this logdir added that no journal or manifest in the bucket names or lets go, with
    their count and original bytes, and what frees them (nothing today: kept). Read only, no lock:
    an operation adding now counts its blobs until its manifest names them. None listed when the
    folder holds no blob of this logdir (no request then) or a manifest or journal does not read
    (it is named among the problems already). ``manifests_read``: the manifests ``status`` read (the
    one schema), so only the journals' listing (and a read of each journal) is added; without them
    the manifests are listed and read too. Nothing asked of the bucket when the folder holds no blob
    of this logdir. Counted by what the manifests and journals name, the witness not read: an
    operation it names whose manifest is missing has its own row (``missing_rows_of``), and its
    blobs no other manifest names are among these (kept all the same)."""
    bv = vault.blobs
    if bv is None or not os.path.isdir(bv.folder):
        return []
    try:
        bv.store.reload()
        mine, earlier = claimed_here(bv)
        named = names_in_bucket(ostore, vault, manifests_read, said_kept=frozenset()) if mine or earlier else None
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
                       "by hand), or what an operation rolled back by an older version left, or one killed and settled "
                       "where this folder was not reached; nothing frees them today (a purge forgets only what a "
                       "manifest lets go; a reduction or retirement rolled back releases the claims it made anew, "
                       "at its end or at the start that rolls it back)"}]


def missing_rows_of(ostore: ObjectStore, vault: BucketVault, found: List[dict],
                    rows: List[dict]) -> Tuple[frozenset, List[dict]]:
    """What the witness says was verified into the blob folder (``bucket_blobs.said_kept_in_bucket``:
    none without a folder, no request), and status's row of each of those operations whose manifest
    object is not there (``missing_in_bucket``, the one rule, review R26 F1: every blob is kept
    while one is) in a disk's words (``history.missing_manifests_said``), named by the witness. Present:
    each manifest read (``found``) and each row naming a manifest key (``rows``: one damaged, refused,
    another logdir's). A witness that does not read is named (nothing is forgotten while it does not)."""
    url = witness_name(ostore)
    try:
        said_kept = said_kept_in_bucket(ostore, vault)
    except (StoreFailure, OSError) as e:  # nothing is forgotten while it does not read (``names_in_bucket``)
        return frozenset(), [{"code": getattr(e, "code", None) or StoreError.STORE_ERROR, "op_id": None, "run": None,
                              "file": url, "bytes": 0,
                              "detail": f"not readable ({e}): no backup of {vault.blobs.folder} is forgotten "
                                        "until it reads"}]
    present = {listed_op(m["_path"]) for m in found if isinstance(m.get("_path"), str)}
    present |= {listed_op(r[k]) for r in rows for k in ("_path", "file")
                if isinstance(r.get(k), str) and "/manifests/" in r[k]}
    missing = missing_in_bucket(said_kept, present)
    said = missing_manifests_said(bucket_kept_log(BucketState.of(ostore).logdir_store()), missing)
    return said_kept, [{"code": Finding.MANIFEST_MISSING, "op_id": op, "run": said[op][0], "file": url, "bytes": 0,
                        # the row's ``file`` names the witness: its words are said after it, once
                        "detail": said[op][1]} for op in missing]


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


__all__ = ["folder_orphans", "gave_back", "missing_rows_of", "release_claims", "release_fresh", "release_rolled_back",
           "release_settled"]
