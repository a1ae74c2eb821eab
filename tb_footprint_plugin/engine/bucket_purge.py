"""Free a bucket logdir's vault: the backups of verified or restored operations (never an
original a restore could not put back), and what a reduction frees on this bucket and when.

A purge is the one purge of every store (``engine.purge_run``, issue #26), this store's steps
``BucketCopies``: its intent, a manifest marked purged, is its commit record, so a cancel is
honoured up to it (nothing marked or deleted, the operations listed as kept with code
``interrupted``) and never after (the purge finishes). Right before it, its journal
(``bucket_purge_journal``) names the operations it is about to mark: a purge killed past its
intent is finished by the next start, as a disk's is."""
from __future__ import annotations

import contextlib
import os
from typing import Collection, Iterator, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Skip
from tb_footprint_plugin.engine import faults, manifest, purge_run, txn
from tb_footprint_plugin.engine.bucket_purge_journal import purge_journal_first, renew
from tb_footprint_plugin.engine.bucket_putback import delete_copies, store_delete_batch
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.engine.purge_rules import PurgeFilter, kept_by_restore, kept_row, originals_lost
from tb_footprint_plugin.engine.bucket_blob_folder import choose_folder
from tb_footprint_plugin.engine.bucket_blob_index import collect
from tb_footprint_plugin.engine.bucket_blob_release import missing_rows_of
from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry, named_digests
from tb_footprint_plugin.engine.bucket_identity import dropped_claims
from tb_footprint_plugin.engine.catalogue_rules import copies_bytes, is_rolled_back_keeping
from tb_footprint_plugin.engine.bucket_manifests import manifests, own_manifests
from tb_footprint_plugin.engine.bucket_moved import MOVED_FROM, NOTHING, STANDS, moved_unclaimed, standing
from tb_footprint_plugin.engine.bucket_state import (
    ACTIVE_OPS,
    BucketState,
    BucketTxnError,
    BucketVault,
    must_close,
    must_delete,
    new_journal,
    now_s,
    STORE_FAILURES,
    vault_url,
)
from tb_footprint_plugin.engine.context import new_op_id
from tb_footprint_plugin.engine.journal_object import journal_entries, journal_unreadable, pending_objects
from tb_footprint_plugin.engine.history import purge_mark, purge_reason
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


#: the keys of one operation's copies deleted between two looks at its journal's lease: None is
#: the store's own (``bucket_putback.store_delete_batch``, which a restore's release of its copies
#: uses too); a number fixes it (tests)
DELETE_BATCH: Optional[int] = None


def delete_batch(ostore: ObjectStore) -> int:
    """How many of an operation's copies go between two looks at the lease, on ``ostore``."""
    if DELETE_BATCH is not None:
        return DELETE_BATCH
    return store_delete_batch(ostore)


def purge(ostore: ObjectStore, vault: BucketVault, *, older_than: Optional[float] = None,
          run: Optional[str] = None, op: Optional[str] = None, yes: bool = False,
          runs: Optional[Collection[str]] = None, op_ids: Optional[Collection[str]] = None,
          cancel: Optional[CancelToken] = None, progress: Optional[txn.Report] = None) -> dict:
    """Delete the backups of verified or restored bucket operations (without ``yes``: list them):
    the one purge (``purge_run.purge``) over ``BucketCopies``. The manifest is marked purged
    before its copies go, so a restore never points at them. ``cancel``: honoured before the
    first manifest is marked (every chosen operation then kept with code ``interrupted``, nothing
    deleted), never after. ``progress``: told ``("purge", 0.5)`` right before the first mark
    (``txn.intent_hook``), if one is chosen."""
    now = now_s()
    which = PurgeFilter(now=now, older_than=older_than, run=run, runs=runs, op=op, op_ids=op_ids)
    layout = BucketCopies(ostore, vault, now)
    try:
        rep = purge_run.purge([layout], which, yes=yes, cancel=cancel, progress=progress)
    finally:  # from here on its journal, if left, is a gone holder's: the next start finishes it
        ACTIVE_OPS.discard(layout.purge_id)
    return {"dry_run": rep.dry_run, "ops": rep.ops, "freed_bytes": rep.freed_bytes, "kept": rep.kept,
            "refused": rep.refused, "warnings": rep.warnings, "folder_freed_bytes": layout.folder_freed}


class BucketCopies(purge_run.PurgeLayout):
    """A bucket's vault in the one purge (``purge_run``): chosen from one listing of the manifests
    (no run lock: each mark is conditional on the version read there), one transaction for every
    chosen operation, whose copies are its own (never shared):

    - intent: the first operation's manifest marked purged (``backup_purged``, ``purged_at``:
      from then on no restore points at its copies), then ``purge.intent``;
    - delete: each operation marked (the first already is), then its backup copies deleted
      (``purge.blob`` after each operation): one at a time, so a purge killed half-way leaves at
      most one marked operation whose copies stayed;
    - settle: a vault of blobs forgets what no manifest or journal in the bucket names any more
      (``purge.forget``), also what a purge stopped after its intent, or a rollback, left.

    Before the intent its journal (``bucket_purge_journal``) names the chosen operations, and goes
    once they are settled. A mark the store refuses (a manifest changed since it was read) stops
    the purge there, the operations before it purged, then the refusal is raised, as it always
    was; a delete that fails does not keep the next operations' copies: they are purged, then the
    first failure is raised (the journal left: the next start deletes what stayed). What a purge
    killed past an operation's mark left is finished by the next start, from that journal
    (``bucket_purge_journal.KilledBucketPurges``), as a disk's."""

    def __init__(self, ostore: ObjectStore, vault: BucketVault, now: float) -> None:
        self.ostore, self.vault, self.now = ostore, vault, now
        self.st = BucketState(ostore)
        self.every: List[dict] = []
        self.refused_rows: List[dict] = []
        self.purge_id = new_op_id()  # its journal's name
        self.jnl = None
        self.lost: Optional[BaseException] = None  # the renewal of its journal that failed
        #: what the folder's forget frees (stored bytes; a vault of blobs only): foreseen by the
        #: choice, then what the settle's forget deleted
        self.folder_freed: Optional[int] = None

    @contextlib.contextmanager
    def choose(self, which: PurgeFilter, yes: bool) -> Iterator[purge_run.Chosen]:
        ostore, vault = self.ostore, self.vault
        # a manifest that does not read, or names a backup outside this vault (planted, copied from
        # another logdir), is listed and left as it is; the other operations are purged
        refused: List[dict] = self.refused_rows
        every = self.every = own_manifests(ostore, vault, manifests(ostore, vault, refused), refused)
        left: Set[str] = set()
        if vault.blobs is None:
            # no --backup-dir: the blob folder the manifests record for this host, as a restore takes
            # it (review R24 F4: the purge said "freed" and left every blob in that folder), by the one
            # rule (``choose_folder``): a folder refused (not ours, its places/ not listing this
            # logdir: nothing read or written there) leaves alone only the operations recording it,
            # each named with its manifest (review R25 L3: one planted manifest refused the whole
            # purge); with several usable folders none is taken and their operations are left alone
            # (marked purged, their blobs would stay in a folder no forget visits), said with what to pass
            got = choose_folder(vault, every)
            vault = self.vault = got.vault
            left = got.left_alone()
            for m in [m for m in every if m["op_id"] in left and not m["backup_purged"] and which.admits(m)]:
                code, why = got.why_left(m["op_id"])
                url = vault_url(ostore, m["_path"])
                refused.append({"code": code, "file": url, "op_id": m["op_id"], "run": m["run"],
                                "detail": f"{url}: not purged, nothing of it deleted: {why}"})
        if every and not vault.root.startswith(ostore.root + "/"):
            # a vault elsewhere, and no logdir here (or none that can be told): perhaps one moved
            # away, whose only copies these are
            here, why = standing(ostore)
            if here != STANDS:
                refused += [_not_standing_row(ostore, m, here, why) for m in every]
                every = self.every = []
        # manifests in the one schema (``engine.manifest``): a bucket keeps only verified ones, and
        # those of a rollback that kept backups (``rolled_back_keeping``): listed below, never freed
        chosen = [m for m in every if (m["outcome"] == Outcome.VERIFIED or is_rolled_back_keeping(m))
                  and which.admits(m) and m["op_id"] not in left]
        # a restore or a rollback that found a file written again at an original's name left that
        # original in the vault only (``not_restored``): its operation is not purged, and the
        # listing says why
        kept = [m for m in chosen if kept_by_restore(m)]
        chosen = [m for m in chosen if m not in kept]
        # an operation a journal still names is under way (a retire writes its manifest before its
        # commit record and may still roll back onto these copies; a batch reduction writes its
        # manifest before the swap, its journal named by the batch: review R21 PD16) or awaits
        # recovery: its copies may be the only ones, so it is left for a purge after it settled
        journaled = journaled_ops(ostore)
        busy = [m for m in chosen if m["op_id"] in journaled]
        chosen = [m for m in chosen if m not in busy]
        # moved here by its records alone: a copy of the logdir made before the move holds the same
        # records, and its copies may be that one's only ones (review R14 G5): never freed from here
        unclaimed = [m for m in chosen if moved_unclaimed(m)]
        chosen = [m for m in chosen if m not in unclaimed]
        # a run not restored has its originals only in the vault (a reduction's removed or rewritten
        # objects, a retired run's every object): each whose copy goes is lost for good, as on a disk
        # (``originals``; the report's ``originals_lost`` is their sum). A server-side copy is the
        # operation's own; a blob of a local blob vault stays while an operation not purged names it
        stays = {f.get("sha256") for m in every if not m["backup_purged"] and m not in chosen
                 for f in m["files"] if is_blob_entry(f) and f.get("sha256")}
        ops = [{"op_id": m["op_id"], "run": m["run"], "bytes": copies_bytes(m),
                "restored": bool(m["restored_by"]), "kind": m["kind"],
                "originals": originals_lost(m, lambda f: not is_blob_entry(f) or f.get("sha256") not in stays)}
               for m in chosen]
        # what is passed over, in a disk's rows (``purge_rules.kept_row``): bytes, what stays in the vault
        rows = [kept_row(m, copies_bytes(m), Finding.NOT_RESTORED, kept_by_restore(m)) for m in kept]
        rows += [kept_row(m, copies_bytes(m), Skip.LOCKED, "the operation is still under way or awaits recovery (its "
                                                    "journal is there); purge it once it has settled") for m in busy]
        rows += [kept_row(m, copies_bytes(m), Finding.MOVED_UNCLAIMED,
                          f"made at {str(m[MOVED_FROM])[:300]} and recorded in this logdir's state: this logdir was "
                          "moved from there, or is a copy of one made before it moved, and which cannot be told: "
                          "its copies are never freed from here (the other may rely on them); restore works; move "
                          "this logdir back there to purge them") for m in unclaimed]
        # an operation the witness names whose manifest object is gone (review R26 F1): its blobs are
        # unknown, maybe these operations' too (a copied run), so the forget keeps every blob
        # (``names_in_bucket``); said here as status says it, and nothing foreseen freed in the folder
        missing = missing_rows_of(ostore, vault, every, refused)[1]
        refused += missing
        self.folder_freed = 0 if missing and vault.blobs is not None else folder_frees(vault, every, chosen)
        # one transaction, run even with none chosen: the vault of blobs forgets what nothing names
        yield purge_run.Chosen([purge_run.Group(chosen, ops, plan=[])], rows)

    def intent(self, group: purge_run.Group) -> int:
        """The first operation's manifest marked purged (one conditional write). The others are
        marked in the deletes, each right before its own copies go: a purge killed in between
        leaves at most one marked operation whose copies stayed (marking them all first left
        every one's)."""
        group.done = None  # a mark the store refused: raised once the marked are purged
        if group.manifests:
            ACTIVE_OPS.add(self.purge_id)  # a start of this process leaves it alone while it runs
            self.jnl = new_journal(self.st, self.purge_id,
                                   purge_journal_first(self.ostore, self.vault, self.purge_id, group.manifests))
            self._mark(group, group.manifests[0])
        return len(group.plan)

    def _mark(self, group: purge_run.Group, m: dict) -> bool:
        """``m``'s manifest marked purged, conditionally on the version the choice read; False
        (and the refusal kept in ``group.done``) when the store refused it."""
        try:
            # who purged, with which version and why, as a disk's purge line says it (review R21
            # PD18, ``history.purge_mark``): a shared bucket's change log is read from the manifests
            self.st.update(m["_path"], manifest.bucket_form(dict(m, backup_purged=True, purged_at=self.now,
                                                                 purged_with=purge_mark(purge_reason(m, self.where())))),
                           m["_version"])
        except (BucketTxnError, *STORE_FAILURES) as e:
            group.done = e
            return False
        group.plan.append(m)  # the marked
        return True

    def where(self) -> str:
        """Where this vault's backups are, as a purge's line names it: the local folder of its
        blobs, or the URL of its server-side copies."""
        blobs = self.vault.blobs
        return blobs.folder if blobs is not None else f"{self.ostore.scheme}://{self.vault.root}"

    def delete(self, group: purge_run.Group, report: txn.Report) -> None:
        """Each chosen operation marked (the first was, by ``intent``), then its backup copies
        deleted, ``delete_batch`` keys at a time, the journal's lease renewed before each batch
        and each mark (``_renew``). A mark the store refuses stops the purge there, and so does a
        renewal that failed (no operation is marked that the journal may no longer name); a
        failed delete does not keep the next operations' copies: the first failure is raised
        once the others are done."""
        failure: Optional[BaseException] = None
        for i, m in enumerate(group.manifests):
            if i and self._renew() is not None:
                break
            if group.done is not None or (i and not self._mark(group, m)):
                break
            # a marked operation's copies go on going, the lease renewed: nothing else needs them
            failed = delete_copies(self.ostore, m, self._renew, delete_batch(self.ostore))
            failure = failure or failed
            faults.hit("purge.blob")
        lost = self.lost if len(group.plan) < len(group.manifests) else None
        if group.done is not None or lost is not None or failure is not None:
            raise group.done or lost or failure

    def _renew(self) -> Optional[BaseException]:
        """The journal's lease renewed once half of it has passed (``renew``: a time check, no
        request before then), so a start on another host leaves a purge alone however long its
        deletes take, as long as no batch of them outlasts half a lease. A renewal that fails
        (the journal changed or gone: such a start judged the purge ended and finished it) is
        kept in ``lost`` and not retried; the purge then marks nothing more."""
        if self.jnl is not None and self.lost is None:
            try:
                renew(self.jnl)
            except (BucketTxnError, *STORE_FAILURES) as e:
                self.lost = BucketTxnError(
                    Failure.STORE_ERROR, f"{self.jnl.path}: this purge's journal could not be renewed ({e}); the "
                    "operations marked purged are purged, the others kept: purge again")
        return self.lost

    def settle(self, group: purge_run.Group, report: txn.Report) -> None:
        """The blob vault forgets what no manifest or journal in the bucket names any more; then
        the purge's journal goes."""
        ostore, vault = self.ostore, self.vault
        if vault.blobs is None:
            self._close()
            return
        fig = collect(ostore, vault)
        self.folder_freed = int(fig.get("bytes_deleted") or 0)
        if fig.get("unlisted_row"):  # data objects no index row lists kept: said, never acted on
            self.refused_rows.append(fig["unlisted_row"])
        if fig.get("blocked"):
            raise BucketTxnError(Failure.STORE_ERROR, f"{vault.blobs.folder}: {fig['blocked']}")
        if fig.get("blocked_by_damaged_index"):
            raise BucketTxnError(Failure.STORE_ERROR, f"{vault.blobs.folder}: its index object(s) "
                                 f"{', '.join(fig['blocked_by_damaged_index'][:3])} do not read; nothing is "
                                 "deleted while one is damaged (it may be the only one listing a backup). "
                                 f"`tb-footprint recover` given this folder (--backup-dir {vault.blobs.folder}) "
                                 "looks in its packs for the backups the manifests need that only it listed and "
                                 "lists them anew (each slice hashed); `tb-footprint status` given it says "
                                 "whether it still hides one, and once it hides none, that it may be removed "
                                 "(which frees no space and deletes no backup); then purge again")
        faults.hit("purge.forget")
        self._close()

    def _close(self) -> None:
        """The purge's journal removed; one already gone (a start judged this purge ended and
        finished it) is done: a delete of a missing object is no refusal."""
        if self.jnl is not None:
            must_close(self.jnl)
            self.jnl = None

    def refused(self) -> List[dict]:
        return self.refused_rows


def folder_frees(vault: BucketVault, every: List[dict], chosen: List[dict]) -> Optional[int]:
    """What the settle's forget would free in a vault of blobs once ``chosen`` are marked purged
    (the preview's figure beside the bucket's): the stored bytes of this logdir's blobs a manifest
    then lets go and no other names, of which no other logdir holds a claim; from the manifests the
    choice read (no request). "Up to": a journal under way names blobs too, and a packed blob's bytes
    go when its pack is repacked. None without a folder."""
    bv = vault.blobs
    if bv is None or not os.path.isdir(bv.folder):
        return None
    picked = {id(m) for m in chosen}
    needed: Set[str] = set()
    let_go: Set[Tuple[Optional[str], str]] = set()
    for m in every:  # the forget's own rule of what names a blob (``collect``)
        named_digests(m, needed, let_go, bool(m["backup_purged"]) or id(m) in picked)
    try:
        bv.store.reload()
    except BlobFailure:
        return None  # its index does not read: the purge's forget says so
    drops = dropped_claims(bv, needed, let_go)
    freed = {sha for sha in set().union(*drops.values())
             if bv.store.owners(sha) <= {o for o, shas in drops.items() if sha in shas}}
    return sum(r.length for r in bv.store.refs() if r.sha in freed)


def _not_standing_row(ostore: ObjectStore, m: dict, here: str, why: Optional[str]) -> dict:
    """The purge's refused row of operation ``m`` at a URL where no logdir stands (``here``
    ``NOTHING``: ``Finding.PREFIX_MOVED``), or where a listing could not tell whether one does
    (``UNSURE``, ``why`` the listing's failure: ``Finding.WHOSE_UNKNOWN``, review R13 F7): never
    purged, left in place."""
    if here == NOTHING:
        return {"code": Finding.PREFIX_MOVED, "file": ostore.url, "op_id": m["op_id"], "run": m["run"],
                "detail": f"no logdir stands at {ostore.url} (nothing there, not even its state): its operations may "
                          "be a logdir's moved away, their backups its only copies; move it back here to purge or "
                          "restore them. Never acted on, left in place"}
    return {"code": Finding.WHOSE_UNKNOWN, "file": ostore.url, "op_id": m["op_id"], "run": m["run"],
            "detail": f"cannot tell whether a logdir stands at {ostore.url} ({why}): nothing purged. Its operations "
                      "may be a logdir's moved away, their backups its only copies; purge again once that URL can "
                      "be listed. Never acted on, left in place"}


def journaled_ops(ostore: ObjectStore) -> Set[str]:
    """The operations the journals left in the bucket name: each journal's own name (an operation's
    op id, or a batch's id) and every op id its entries name (a batch's runs, a purge's operations,
    an earlier version's one run): one listing of the journals, one read each (none usually stand).
    A journal that cannot be read names its own name only (``recover`` and ``status`` name it)."""
    st = BucketState.of(ostore)
    ops: Set[str] = set()
    for key, info in pending_objects(st):
        name = key.rsplit("/", 1)[-1]
        ops.add(name[: -len(".json")] if name.endswith(".json") else name)
        try:
            doc, _ = st.read(ostore.path(key), info)
        except ValueError:  # not a plain key: never read (``damaged_journals`` names it)
            continue
        if isinstance(doc, dict) and not journal_unreadable(doc):
            ops.update(en["op"] for en in journal_entries(doc) if isinstance(en, dict) and isinstance(en.get("op"), str))
    return ops


def retention_report(ostore: ObjectStore, vault: BucketVault, removable: int) -> dict:
    """What a reduction frees and when, on this bucket: removed from the logdir now; backups
    (server-side copies in the vault) billed until purge; deleted bytes kept by the bucket's
    versioning or soft delete until its retention passes."""
    bucket = ostore.root.split("/", 1)[0]
    r = BucketState.of(ostore).retention(bucket)
    # backups are server-side copies in this store, unless they are blobs in a local folder
    same_store = vault.blobs is None
    kept_days = None
    never = False
    if r.get("versioning"):
        if r.get("noncurrent_expiry_days") is not None:
            kept_days = float(r["noncurrent_expiry_days"])
        else:
            never = True
    if r.get("soft_delete_seconds"):
        kept_days = max(kept_days or 0.0, r["soft_delete_seconds"] / 86400.0)
    lines = [f"removed from the logdir: {removable} bytes, at once"]
    if same_store:
        lines.append("backups are server-side copies in the same store: billed until `purge`")
    else:
        lines.append(f"backups are compressed blobs in {vault.blobs.folder}, off the bucket: on that disk until `purge`")
    if never:
        when = ("never, until a lifecycle rule expires noncurrent versions: the bucket is versioned and "
                "a delete only adds a delete marker")
    elif kept_days:
        when = f"{kept_days:g} day(s) after purge (the bucket keeps deleted objects that long)"
    else:
        when = "at purge" if same_store else "at once"
    lines.append(f"freed from the bucket's bill: {when}" if not same_store else f"freed from the bill: {when}")
    return {
        "removed_from_logdir": removable,
        "freed_now": 0 if same_store or never or kept_days else removable,
        "freed_after_purge": removable if not (never or kept_days) else 0,
        "freed_after_retention": None if never else removable,
        "retention_days": kept_days,
        "versioning": bool(r.get("versioning")),
        "soft_delete_seconds": r.get("soft_delete_seconds"),
        "noncurrent_expiry_days": r.get("noncurrent_expiry_days"),
        "lines": lines,
    }
