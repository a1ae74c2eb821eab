"""The steps of a bucket transaction that a batch of drop-only runs (``engine.bucket_batch``), a
rewrite (``engine.bucket_rewrite``) and recovery (``engine.bucket_recover``) share.

* **backup** by server-side copy into the vault, conditional on the version the plan saw, its
  integrity the checksum the store computed for the copy equal to the original's: no byte of a
  removed file passes through this machine; the manifest records both;
* **finish**: the committed part of a journal, idempotent (a reduction and a recovery both run
  it): staged objects put over their originals only while those are the planned version,
  compressed copies created under their new names, removed originals deleted under their version;
* **verification by a fresh listing**: every removed key gone, every other object of the run at
  the version it had, so TensorBoard reads exactly the bytes it read before;
* **rollback** of a run that did not commit: every removed original put back from its verified
  backup, then the manifest, the backups and the temporary keys dropped; a backup whose original
  is not in place kept, with a manifest naming it (written if none was yet).

Why one module: the rollback's rule (``_verdicts``) and what it keeps are one rule for the
three callers and ``status``'s forecast; split, its looks and its deeds would drift apart.
"""
from __future__ import annotations

import hashlib
from typing import Dict, List, Optional

from tb_footprint_plugin.codes import Code, Failure, Finding, Outcome, Skip, StoreError
from tb_footprint_plugin.engine import faults, lease, manifest
from tb_footprint_plugin.engine.bucket_objects import HEADERS
from tb_footprint_plugin.engine.bucket_op_records import create_manifest, forget_record
from tb_footprint_plugin.engine.bucket_blobs import KEPT_IN, end_witness, is_blob_entry, missing_blobs, put_back
from tb_footprint_plugin.engine.bucket_verified import plan_record
from tb_footprint_plugin.engine.bucket_state import (BucketState, BucketTxnError, BucketVault, delete_all, listing_of_runs,
                                                     must_delete, must_delete_versioned, now_s, run_prefix, vault_url)
from tb_footprint_plugin.engine.catalogue_rules import is_rolled_back_keeping, rolled_back_keeping
from tb_footprint_plugin.engine.context import Finds, RunOutcome
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.journal_object import ObjectJournal, live_entries, pending_objects
from tb_footprint_plugin.engine.manifest import renamed  # noqa: F401  (re-exported: the bucket modules' name)
from tb_footprint_plugin.engine.recovery_rules import rollback_incomplete_reason
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.engine.vault import who
from tb_footprint_plugin.storage.remote import (ObjectInfo, content_checksums, same_content)
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


def in_place(f: dict) -> bool:
    """Whether an entry's new bytes replace its original under the same key (an event-file rewrite)."""
    return f.get("action") == "rewrite" and not renamed(f)


def file_entry(vault: BucketVault, op_id: str, a, o: ObjectInfo) -> dict:
    """A journal/manifest entry of one planned file: its action, size, version, checksums and
    backup key (a server-side copy), or ``kept_in: blobstore`` with a vault of blobs; its
    Content-Type and user metadata (``bucket_objects.HEADERS``) where the listing said them (an S3
    listing says none: a blob backup's read or a rewrite's head records them then, and a
    server-side copy keeps them)."""
    f = {"path": a.path, "action": a.kind, "size": o.size, "version": o.version_token,
         "checksums": content_checksums(o)}
    if o.headers is not None:  # its Content-Type and user metadata, where the listing said them (GCS, Azure)
        f[HEADERS] = o.headers
    if vault.blobs is not None:  # its sha256 once verified in the blob vault (``bucket_blobs``)
        f["kept_in"] = KEPT_IN
    else:
        f["backup"] = vault.blob(op_id, a.path)
    return f


def backup_object(ostore: ObjectStore, f: dict) -> None:
    """Back up one original by a server-side copy conditional on the version the plan saw; its
    integrity is the store's checksum of the copy equal to the original's. An original changed
    or gone since the plan (e.g. another worker reduced the run) is ``Skip.NOT_IN_PLAN``."""
    try:
        res = BucketState.of(ostore).copy(ostore.path(f["path"]), f["backup"], if_source_version=f["version"], size=f["size"])
    except StoreFailure as e:
        if e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
            raise BucketTxnError(Skip.NOT_IN_PLAN, f"{f['path']}: changed or gone since the plan") from e
        raise
    if not copy_matches(ostore, res, f, ostore.path(f["path"]), f["backup"]):
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: backup copy does not match the original")
    f["backup_checksums"] = res.checksums
    f["backup_version"] = res.version


def copy_matches(ostore: ObjectStore, res, f: dict, src: str, dst: str) -> bool:
    """A server-side copy of an original (a backup, or a backup put back) holds the original's
    bytes: by the store's checksum of the copy against the original's when they share a kind;
    otherwise (a copy made in parts, a blob without an MD5) by reading both."""
    ok = same_content(res.checksums, f["checksums"])
    if ok is None:
        ok = stream_digest(ostore, src, f["size"]) == stream_digest(ostore, dst, f["size"])
    return ok


def stream_digest(ostore: ObjectStore, path: str, size: int) -> str:
    """SHA-256 of an object's first ``size`` bytes by ranged reads (used only when the store gave no
    common checksum, or to tell an original grown by a writer)."""
    h = hashlib.sha256()
    pos = 0
    while pos < size:
        end = min(size, pos + (1 << 20))
        data = BucketState.of(ostore).read_range(path, pos, end)
        h.update(data)
        pos = end
    return h.hexdigest()


def copies_there(ostore: ObjectStore, vault: BucketVault, en: dict, what: str = "reduction",
                 before_commit: bool = False) -> None:
    """Raise ``BucketTxnError`` (``Failure.BACKUP_DAMAGED``) naming the first copy of an operation's
    entry ``en`` that is not in the vault as its copy step verified it, before anything is finished
    from its commit record (a copy lost or changed since, by hand or a lifecycle rule, leaves the
    originals not yet deleted as their bytes' only home; the disk's ``swap.roll_forward`` checks every
    blob first). One listing of ``<vault>/blobs/<op>/``, no read: each copy of its size and the
    checksums recorded when it was made (``backup_checksums``), or, sharing no checksum kind with
    them, of the version recorded then. A key the journal (untrusted) names outside that listing
    counts as missing. Blob entries (a local blob vault): each still claimed by this logdir there
    (``bucket_blobs.missing_blobs``: its index read again, no blob read). ``what``: the operation's
    kind in the words (``reduction``, ``retirement``); ``before_commit``: asked in the last look
    before the commit record (the run is then put back), else past it (the journal stays): the
    words say which, the code is the same."""
    then = (f"the {what} stops before its commit record: nothing deleted, the run put back as it was"
            if before_commit else
            f"the {what} is not finished: its journal and every original left stay (nothing deleted)")
    missing_blobs(vault, en.get("files") or [], then=then)
    files = [f for f in en.get("files") or [] if not is_blob_entry(f)]
    if not files:
        return
    base = f"{vault.root}/blobs/{en['op']}"
    listed = {f"{vault.root}/{k}": o for k, o in
              BucketState.of(ostore).listing(base, vault.root, missing_ok=True).items()}
    for f in files:
        if not copy_there(listed.get(f.get("backup")), f):
            url = vault_url(ostore, str(f.get("backup")))
            since = "its copy was verified" if before_commit else "the commit record"
            raise BucketTxnError(Failure.BACKUP_DAMAGED,
                                 f"{url}: the vault copy of {f.get('path')} is gone or changed since {since}; {then}")


def copy_there(info: Optional[ObjectInfo], f: dict) -> bool:
    """Whether ``info`` (a listed or headed backup key) is the copy of ``f`` its copy step verified:
    its size, and the checksums recorded then (``backup_checksums``, else the original's), or, when
    the two share no checksum kind, the copy's version recorded then (``backup_version``)."""
    if info is None or info.size != f.get("size"):
        return False
    want = f.get("backup_checksums") or f.get("checksums")
    same = same_content(content_checksums(info), want) if isinstance(want, dict) else None
    if same is not None:
        return same
    return bool(f.get("backup_version")) and info.version_token == f.get("backup_version")


def journal_started(doc: dict) -> Optional[float]:
    """When an operation's journal object was created (its ``created``: the transaction began),
    or None when the journal (untrusted) does not say it as a number."""
    t = doc.get("created") if isinstance(doc, dict) else None
    return t if isinstance(t, (int, float)) and not isinstance(t, bool) and t == t else None


def manifest_doc(ostore: ObjectStore, entry: dict, rp, policy: Optional[str], bytes_after: int,
                 vault: Optional[BucketVault] = None, journal: Optional[dict] = None,
                 committed_at: Optional[float] = None, verification: Optional[dict] = None) -> dict:
    """The manifest of one verified run of an operation (what a restore puts back); with a local
    vault of blobs, its folder (with ``host``: where a restore must run, said when it cannot).
    ``started_at`` is when the run's transaction began (the creation of ``journal``, its journal
    object); ``finished_at`` is ``committed_at``, the time the operation's commit record
    (``swapping``) then carries, as a disk's manifest is dated at its commit. The manifests are
    written once every backup of the operation is made (a rewrite's new objects staged and read
    back), before the last look and that record: dating both with one time costs no request (a
    manifest whose commit record never follows is removed by the rollback). Now when not given.
    With the plan's ``fidelity`` lines (``bucket_verified.plan_record``) and ``verification``
    when given: what was checked before it is written (``bucket_verified``), as a disk's says."""
    folder = {"blob_folder": vault.blobs.folder} if vault is not None and vault.blobs is not None else {}
    now = now_s() if committed_at is None else committed_at
    started = journal_started(journal) if journal is not None else None
    # written once the backups are verified, before the swap: what a restore needs from then on
    return manifest.bucket_form(manifest.new(
        op_id=entry["op"], kind="reduce", run=entry["run"], logdir=ostore.url,
        started_at=min(started, now) if started is not None else now, finished_at=now,
        outcome=Outcome.VERIFIED, files=entry["files"], bytes_before=rp.bytes_before, bytes_after=bytes_after,
        policy=policy, shard=lease.shard_label(), **folder, **who(), **plan_record(rp),
        **({"verification": verification} if verification is not None else {})))


def rolled_back(out: RunOutcome, code: Code) -> None:
    """A run put back as it was, with the code of why: a skip (``Skip``: gone since the plan, being
    written, locked by another worker) as on a disk; a rollback otherwise."""
    out.status = Outcome.SKIPPED if isinstance(code, Skip) else Outcome.ROLLED_BACK
    out.code = code


def rollback_incomplete(out: RunOutcome, e: Exception) -> None:
    """A rollback that did not finish: the journal stays, and the next start settles it."""
    out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
    out.reason = rollback_incomplete_reason(out.reason, str(e))


def finish_op(ostore: ObjectStore, vault: BucketVault, doc: dict,
            present: Optional[Dict[str, ObjectInfo]] = None) -> None:
    """The committed part of a journal, idempotent (the reduction and recovery both run it):
    each staged object put over its original only while the original is the planned version
    (or already the staged bytes), compressed copies created under their new names, then every
    removed original deleted under its version and the temporary keys dropped."""
    deletes: Dict[str, str] = {}
    rels: Dict[str, str] = {}  # store path -> key in the logdir, of each original deleted
    temps: List[str] = []
    for en in live_entries(doc):
        for f in en["files"]:
            path = ostore.path(f["path"])
            if in_place(f):
                _put_over(ostore, f["tmp"], path, f)
                temps.append(f["tmp"])
            elif renamed(f):  # the new name first: the original is deleted only once it exists
                _put_new(ostore, f["tmp"], ostore.path(f["final"]), f)
                temps.append(f["tmp"])
                deletes[path], rels[path] = f["version"], f["path"]
            else:
                deletes[path], rels[path] = f["version"], f["path"]
            if f.get("tmp"):
                faults.hit("reduce.mid_swap")
    if deletes:
        if present is None:
            present = listing_of_runs(ostore, vault, [en["run"] for en in live_entries(doc)],
                                       int(doc.get("logdir_objects") or 10 ** 9))
        # looked up by the planned keys (a listing may hold keys that are not plain: '..' segments)
        present = {p: present[rels[p]] for p in deletes if rels[p] in present}
        changed = [p for p in deletes if p in present and present[p].version_token != deletes[p]]
        if changed:  # new bytes under a planned key have no backup: never delete them
            raise BucketTxnError(Failure.CHANGED_SINCE_BACKUP, f"{changed[0]}: rewritten since its backup; left as is")
        todo = [p for p in deletes if p in present]
        if todo:
            delete_all(ostore, todo, versions={p: deletes[p] for p in todo})
    if temps:
        must_delete(ostore, temps)


def staged_match(info: Optional[ObjectInfo], f: dict) -> bool:
    """True when ``info`` is the object the reduction staged for ``f`` (by the store's checksum)."""
    return info is not None and info.size == f.get("new_size") and \
        bool(same_content(content_checksums(info), f.get("new_checksums") or {}))


def _put_over(ostore: ObjectStore, tmp: str, path: str, f: dict) -> None:
    try:
        res = BucketState.of(ostore).copy(tmp, path, if_version=f["version"], size=f.get("new_size"))
    except StoreFailure as e:
        if e.code not in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
            raise
        if staged_match(BucketState.of(ostore).head(path), f):
            return  # put over already (a crash after the copy)
        raise BucketTxnError(Failure.CHANGED_SINCE_BACKUP,
                             f"{f['path']}: changed since its backup; the reduced copy was not put over it") from e
    if same_content(res.checksums, f.get("new_checksums") or {}) is False:
        raise BucketTxnError(Failure.STORE_ERROR, f"{f['path']}: the copy put over it does not match the staged file")


def _put_new(ostore: ObjectStore, tmp: str, path: str, f: dict) -> None:
    try:
        res = BucketState.of(ostore).copy(tmp, path, if_absent=True, size=f.get("new_size"))
    except StoreFailure as e:
        if e.code == StoreError.ALREADY_EXISTS and staged_match(BucketState.of(ostore).head(path), f):
            return
        if e.code == StoreError.NOT_FOUND and staged_match(BucketState.of(ostore).head(path), f):
            return  # the temporary key is gone: a crash after the copy and the cleanup
        raise
    if same_content(res.checksums, f.get("new_checksums") or {}) is False:
        raise BucketTxnError(Failure.STORE_ERROR, f"{f['final']}: the compressed copy does not match the staged file")


def uncommitted_ops(ostore: ObjectStore) -> set:
    """The operation ids whose manifests are no settled reduction (yet): every run a reduce's
    journal in the bucket still names, before its commit record (its manifest is written before
    that record, dated with its time; the rollback, or the next start's recovery, removes it:
    review R6 F2) and after it until the journal goes (its swap or rollback unfinished: a disk's
    history says nothing of such a reduction until recovery settles it, review R21 PD14), and
    those it took out (``dropped``). A batch's journal left at ``done`` (only a run taken out
    still to clean up) names its other runs settled. One listing of the journals, each one read
    (usually none). Untrusted: a journal that does not read as a reduce's names nothing."""
    st = BucketState(ostore)
    out: set = set()
    for key, info in pending_objects(st):
        j = ObjectJournal.read(st, ostore.path(key), info)
        if j is None or j.doc.get("corrupt") or "kind" in j.doc:  # gone, damaged, a restore's, a retirement's
            continue
        settled = j.step_name == Rec.DONE  # its live runs verified, their swap finished
        if not j.committed() and isinstance(j.doc.get("op"), str):
            out.add(j.doc["op"])
        out.update(en["op"] for en in j.entries() if isinstance(en, dict) and isinstance(en.get("op"), str)
                   and (not settled or en.get("dropped")))
    return out


def verify_batch(ostore: ObjectStore, vault: BucketVault, live: List[dict],
                  listing: Dict[str, ObjectInfo]) -> Dict[str, dict]:
    """A fresh listing of the runs: every removed key gone, every rewritten key holding the
    staged bytes (the store's checksum), every other object of the run at the version it had."""
    now_objs = listing_of_runs(ostore, vault, [en["run"] for en in live], len(listing), known=listing)
    removed = {f["path"] for en in live for f in en["files"] if not in_place(f)}
    rewritten = {f["path"]: f for en in live for f in en["files"] if in_place(f)}
    planned = planned_objects(listing, [en["run"] for en in live])
    out: Dict[str, dict] = {}
    for en in live:
        error = None
        mine = [f["path"] for f in en["files"]]
        still = [p for p in mine if p in removed and p in now_objs]
        if still:
            error = f"{still[0]}: still present after delete"
        for p in mine:
            if p in rewritten and not staged_match(now_objs.get(p), rewritten[p]):
                error = error or f"{p}: does not hold the reduced file after the swap"
        for f in en["files"]:
            if renamed(f) and not staged_match(now_objs.get(f["final"]), f):
                error = error or f"{f['final']}: the reduced file is not there after the swap"
        kept = changed = 0
        first_changed = None
        for rel, o in planned[en["run"]]:
            if rel in removed or rel in rewritten:
                continue
            kept += 1
            cur = now_objs.get(rel)
            if cur is None or cur.version_token != o.version_token:
                changed += 1
                first_changed = first_changed or rel
        if first_changed:
            error = error or f"{first_changed}: changed during the reduction"
        events = sum(1 for rel, _ in planned[en["run"]] if "tfevents" in rel.rsplit("/", 1)[-1])
        out[en["run"]] = {
            "method": "listing", "removed": sum(1 for p in mine if p in removed), "unchanged_objects": kept,
            "event_files_unchanged": events - sum(1 for p in mine if p in rewritten and "tfevents" in p),
            "rewritten": sum(1 for p in mine if p in rewritten),
            "created": [f["final"] for f in en["files"] if renamed(f)],
            "checked_backends": ["store listing: versions of every kept object (ETag/generation) unchanged"],
            "not_checked": ["TensorBoard's Rust data server cannot reach this endpoint (it reads gs:// "
                            "from Google's endpoint only)"],
            "ok": error is None, **({"error": error} if error else {})}
    return out


def planned_objects(listing: Dict[str, ObjectInfo], runs: List[str]) -> Dict[str, List[tuple]]:
    """The plan's objects of each run, ``(key, info)``, in one walk of the listing: a key belongs
    to every run whose prefix it starts with (as ``key.startswith(run_prefix(run))`` says, a
    nested run's objects also to the run above it). One walk per batch, not one per run: the
    listing is the whole logdir's, 250 walks of it per batch grew with the logdir."""
    out: Dict[str, List[tuple]] = {r: [] for r in runs}
    if "." in out:
        out["."] = list(listing.items())
    folders = {run_prefix(r)[:-1]: r for r in runs if r != "."}
    for key, info in listing.items():
        parts = key.split("/")
        for i in range(1, len(parts)):
            r = folders.get("/".join(parts[:i]))
            if r is not None:
                out[r].append((key, info))
    return out


def rollback_entry(ostore: ObjectStore, vault: BucketVault, en: dict, deleted: bool = True,
                   code: Optional[Code] = None, out: Optional[Finds] = None) -> List[str]:
    """Undo one run of an operation that did not commit: put back any removed original from its
    verified backup, then drop the manifest, the backup copies and the temporary keys. ``deleted``:
    whether it may have deleted originals (its commit record was written); before that, one gone
    without a verified backup was removed by someone else; one with one is put back either way.

    A backup copy is deleted only while its original stands at its key as the journal recorded it
    before the reduction (its version, or its size and the store's checksum), or grown from it by a
    writer (its bytes still the object's beginning): a stale journal (R7 F2) or a writer may have
    left other bytes there, the copy then the original's only one. Returns the keys whose
    original is not in place and of which a backup may exist: their backups are kept, with the
    manifest and every backup of the run, for every caller (a recovery, whose journal may be stale;
    a reduction's own rollback, a writer's new bytes at a key; review R8 F3). Unless a kept key shows
    the swap (gone, or the staged bytes its manifest records: a stale journal, the manifest true), the
    manifest is rewritten as what happened (R8 F6, ``catalogue_rules.rolled_back_keeping``). ``out``:
    the outcome each kept key is noted on, ``Finding.ORIGINAL_NOT_IN_PLACE`` (issue #26: a code,
    not words only; a recovery's outcome, made after, notes the keys returned)."""
    kept: List[str] = []
    finals: List[dict] = []
    now: Dict[str, Optional[ObjectInfo]] = {}  # a kept key's object: what tells the swap
    for f, verdict, cur in _verdicts(ostore, vault, en, deleted):
        if verdict == KEEP:
            kept.append(f["path"])
            now[f["path"]] = cur
        elif verdict == PUT_BACK_OVER:
            _copy_back(ostore, vault, f, ostore.path(f["path"]), if_version=cur.version_token)
        elif verdict == PUT_BACK:
            _copy_back(ostore, vault, f, ostore.path(f["path"]))
        if verdict in (PUT_BACK, IN_PLACE) and renamed(f):
            finals.append(f)
    st = BucketState.of(ostore)
    for f in finals:  # its original back: the copy made under a new name goes while it holds the staged bytes
        cur = st.head(ostore.path(f["final"]))
        if staged_match(cur, f):
            must_delete_versioned(ostore, ostore.path(f["final"]), cur.version_token)
    temps = [f["tmp"] for f in en.get("files", []) if f.get("tmp")]
    if kept:
        if out is not None:
            out.found(Finding.ORIGINAL_NOT_IN_PLACE, kept)
        path = vault.manifest(en["op"])
        doc, version = st.read(path)
        if doc is None:  # rolled back before its manifest was written: one names the copies kept
            _name_kept(ostore, vault, en, kept, code)
            must_delete(ostore, temps)
            return kept
        try:
            m = manifest.read(doc, vault_url(ostore, path)) if doc is not None else None
        except Untrusted:
            m = None  # not ours to rewrite: status names it as it is
        shown = {g.get("path"): g for g in (m or {}).get("files") or [] if isinstance(g, dict)}
        if m is not None and not any(now[p] is None or staged_match(now[p], shown.get(p) or {}) for p in kept) \
                and not (is_rolled_back_keeping(m) and m["not_restored"] == kept):
            st.update(path, manifest.bucket_form(rolled_back_keeping(m, kept, code)), version)
        must_delete(ostore, temps)
        return kept
    # Originals are all in place (or kept): the copies in the vault are redundant now (the manifest
    # first, so no restorable operation ever points at a missing backup). Past the commit record its
    # witness line may be written: ended first, or it would name a manifest gone for good and every
    # blob of the folder were kept forever (``bucket_blobs.end_witness``; no request without a folder).
    # Defensive for a reduction (no path is known that rolls one back after its line; a retirement's
    # is real: ``bucket_retire.rollback``): the one rule "no manifest goes while its line stands"
    if deleted:
        end_witness(ostore, vault, str(en["op"]), "reduce", str(en["run"]))
    must_delete(ostore, [vault.manifest(en["op"])])
    forget_record(ostore, vault, en["op"])  # after its manifest: one left names nothing
    # (blobs stay: another operation may hold the same bytes; purge forgets what none names)
    must_delete(ostore, [f["backup"] for f in en.get("files", []) if not is_blob_entry(f) and f["path"] not in kept]
                + temps)
    return kept


def _name_kept(ostore: ObjectStore, vault: BucketVault, en: dict, kept: List[str], code: Optional[Code]) -> None:
    """The manifest of a run rolled back before its own was written, as what happened
    (``rolled_back_keeping``): each file with a verified backup or kept, created only where none
    is (a manifest written since wins: the rollback then stops, the journal stays). Without it
    the kept copies were named by nothing: no status row, restore, bring-back or purge reached
    them, and a blob folder's next purge forgot them. A copy of no file named (made after the
    journal was written, its original in place as ``_verdicts`` found) goes."""
    named = [f for f in en.get("files", []) if f["path"] in kept or f.get("backup_checksums")]
    before = en.get("bytes_before") if isinstance(en.get("bytes_before"), int) else None
    doc = manifest_doc(ostore, dict(en, files=named), _Before(before), None, before, vault)
    create_manifest(ostore, vault, en["op"], manifest.bucket_form(rolled_back_keeping(doc, kept, code)))
    must_delete(ostore, [f["backup"] for f in en.get("files", []) if f not in named and not is_blob_entry(f)
                         and isinstance(f.get("backup"), str)])


class _Before:
    """A plan's size alone, what ``manifest_doc`` asks of one (``bytes_before``)."""

    def __init__(self, bytes_before: Optional[int]):
        self.bytes_before = bytes_before


#: what a rollback does with one file of its journal (``_verdicts``): nothing (never ours, or in
#: place), put its original back (gone: create-only; replaced by the staged bytes: over them), or
#: keep its backup (its key holds something else: the backup may be the original's only copy)
SKIP, IN_PLACE, PUT_BACK, PUT_BACK_OVER, KEEP = "skip", "in_place", "put_back", "put_back_over", "keep"


def rollback_keeps(ostore: ObjectStore, vault: BucketVault, en: dict, deleted: bool = True) -> List[str]:
    """The keys ``rollback_entry`` would keep the backups of (their original not in place), by its
    own looks and none of its changes: what ``status`` says a recovery will answer
    (``recovery_rules.backups_kept``). One head per file (a read only where a key grew)."""
    return [f["path"] for f, verdict, _ in _verdicts(ostore, vault, en, deleted) if verdict == KEEP]


def _verdicts(ostore: ObjectStore, vault: BucketVault, en: dict, deleted: bool):
    """``(file entry, verdict, its key's object now)`` for each file of a journal entry to roll
    back (the one rule of ``rollback_entry`` and ``rollback_keeps``); ``BucketTxnError`` for one
    replaced or gone with no verified backup."""
    st = BucketState.of(ostore)
    named: List[bool] = []  # whether the run's manifest is there (looked at once, for a blob entry)

    def may_exist(f: dict) -> bool:
        # a backup of ``f`` though its journal records none verified: a copy at its backup key, or
        # (a vault of blobs) a blob only the manifest names, written once every backup was made
        if not is_blob_entry(f):
            return isinstance(f.get("backup"), str) and st.head(f["backup"]) is not None
        if not named:
            named.append(st.head(vault.manifest(en["op"])) is not None)
        return named[0]

    for f in en.get("files", []):
        if not deleted and not f.get("backup_checksums"):
            # never backed up as far as this journal says, and nothing is replaced or deleted before
            # the commit record: nothing to put back. A copy made after the journal was read is kept
            # unless its original stands there (not a plain key: never copied, a backup is made
            # through that key)
            try:
                orig = ostore.path(f["path"])
            except ValueError:
                yield f, SKIP, None
                continue
            cur = None
            verdict = SKIP
            if may_exist(f):
                cur = st.head(orig)
                if not _is_original(cur, f) and not _grown_from(ostore, orig, cur, f):
                    verdict = KEEP
            yield f, verdict, cur
            continue
        orig = ostore.path(f["path"])
        cur = st.head(orig)
        if in_place(f):
            # overwritten only after the commit record; put back if it holds the staged bytes now
            if cur is not None and cur.version_token != f["version"] and staged_match(cur, f):
                if not f.get("backup_checksums"):
                    raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: replaced and no verified backup of it")
                yield f, PUT_BACK_OVER, cur
            elif not _is_original(cur, f) and (f.get("backup_checksums") or may_exist(f)) and \
                    not _grown_from(ostore, orig, cur, f):
                yield f, KEEP, cur
            else:
                yield f, SKIP, cur
            continue
        if cur is None:
            if not f.get("backup_checksums") and not deleted:
                yield f, SKIP, cur  # never copied, never deleted by us: someone else removed it (nothing of ours)
                continue
            if not f.get("backup_checksums"):
                raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: gone and no verified backup of it")
            yield f, PUT_BACK, cur
        elif not _is_original(cur, f) and not _grown_from(ostore, orig, cur, f):
            yield f, KEEP, cur  # another object under its key: the backup holds the only original
        else:
            yield f, IN_PLACE, cur


def _is_original(cur: Optional[ObjectInfo], f: dict) -> bool:
    """Whether ``cur`` (a key's object now) is the original the journal recorded for ``f`` before
    the reduction: its version, or its size and the store's checksum of those bytes (a copy put
    back). Untrusted: a checksum record that is no mapping proves nothing."""
    if cur is None:
        return False
    if cur.version_token == f.get("version"):
        return True
    sums = f.get("checksums")
    return cur.size == f.get("size") and isinstance(sums, dict) and same_content(content_checksums(cur), sums) is True


def _grown_from(ostore: ObjectStore, orig: str, cur: Optional[ObjectInfo], f: dict) -> bool:
    """Whether the object at ``orig`` is its original with bytes appended (a writer went on: the
    original's bytes are still in the run), by reading the original's length of it and the backup
    copy (only where a key no longer holds its recorded version: a rare path)."""
    size = f.get("size")
    if cur is None or is_blob_entry(f) or not isinstance(size, int) or isinstance(size, bool) or \
            not 0 < size < cur.size or not isinstance(f.get("backup"), str):
        return False
    backup = BucketState.of(ostore).head(f["backup"])
    if backup is None or backup.size != size:
        return False
    return stream_digest(ostore, orig, size) == stream_digest(ostore, f["backup"], size)


def _copy_back(ostore: ObjectStore, vault: BucketVault, f: dict, orig: str, if_version: Optional[str] = None) -> None:
    """Put an original back from its verified backup: a server-side copy, or streamed from the
    blob vault; create-only, or only over ``if_version``."""
    if is_blob_entry(f):
        put_back(ostore, vault, f, if_version=if_version)
        return
    if if_version is None:
        res = BucketState.of(ostore).copy(f["backup"], orig, if_absent=True, size=f["size"])
    else:
        res = BucketState.of(ostore).copy(f["backup"], orig, if_version=if_version, size=f["size"])
    if not copy_matches(ostore, res, f, f["backup"], orig):
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: restored copy does not match")
