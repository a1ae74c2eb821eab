"""Drop-only runs of a bucket logdir reduced in batches under one journal object.

Runs that only lose files are reduced together, ``plan.cost.BATCH_RUNS`` to one journal object,
each with its own lock object, operation id, backups and manifest (restorable on its own); the
batch pays one journal create, one commit record, one listing before and after its delete step
and the batched deletes (1,000 keys a request on S3; failed keys retried, then the run rolled back
from its backups if they still fail). The steps are ``engine.bucket_steps``; a crash is settled
from any machine by ``engine.bucket_recover``.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Mapping, Optional

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.bucket_blobs import adding, backup_entries, is_blob_entry, missing_blobs
from tb_footprint_plugin.engine.bucket_state import (
    ACTIVE_OPS,
    BucketState,
    BucketTxnError,
    BucketVault,
    failure_code,
    listing_of_runs,
    lock_failure_code,
    lock_refused,
    lock_run,
    must_close,
    must_delete,
    new_journal,
    now_s,
    STORE_FAILURES,
    unlock_all,
    written_recently,
)
from tb_footprint_plugin.engine.bucket_steps import (
    backup_object,
    file_entry,
    finish_op,
    manifest_doc,
    rollback_entry,
    rollback_incomplete,
    rolled_back,
    verify_batch,
)
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, RunOutcome, new_op_id
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.journal_object import ObjectJournal
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.storage.remote import ObjectInfo, RemoteFS


def reduce_batch(rfs: RemoteFS, vault: BucketVault, rps: List, listing: Dict[str, ObjectInfo],
                  quiet_period: float, policy: Optional[str], settled_early=None,
                  closed_files: Optional[Mapping[str, float]] = None,
                  cancel: Optional[CancelToken] = None,
                  progress: Optional[Callable[[str, str, float], None]] = None) -> List[RunOutcome]:
    """Drop-only runs under one journal object. Each run has its own lock object (two machines
    never reduce one run at once), its own operation id, backups and manifest (restorable on its
    own); the journal records the batch's steps, so a crash is settled from any machine.
    ``settled_early(outcome)`` hears of each run left out before the journal is written (gone
    since the plan, locked by another worker) as soon as that is known. ``closed_files``: keys
    the caller's own job closed, not counted by the quiet period while unchanged.
    ``cancel``: the batch's runs start together, so one token (each run's ``timeout`` counted from
    the batch's start, and the batch's cancel) is checked before each run's backups and before the
    checking listing and the commit record; past it every run not committed is rolled back
    (its backups and manifest dropped, its originals untouched: "timed out before the commit
    point", ``Failure.ERROR`` as on a disk); once the commit record is written the batch finishes.
    ``progress(run, step, fraction)``: a disk's steps of a run that only loses files, ``backup``
    (0.4) once its backups are made and ``verify`` (0.65) as the batch's checks begin."""
    t0 = time.monotonic()
    cancel = cancel or CancelToken()
    st = BucketState(rfs)
    batch_id = new_op_id()
    outs: Dict[str, RunOutcome] = {}
    entries: List[dict] = []
    plans = {rp.run: rp for rp in rps}
    held: Dict[str, RunLease] = {}  # each run's lock object (its entry names only the lock's path)
    ACTIVE_OPS.add(batch_id)
    journal = None
    try:
        for rp in rps:
            out = RunOutcome(run=rp.run, status=Outcome.SKIPPED, bytes_before=rp.bytes_before,
                             bytes_after=rp.bytes_before)
            outs[rp.run] = out
            files = []
            missing = None
            op_id = new_op_id()
            for a in rp.actions:
                if a.kind != "delete":
                    continue
                o = listing.get(a.path)
                if o is None:
                    missing = a.path
                    break
                files.append(file_entry(vault, op_id, a, o))
            if missing:
                out.reason, out.code = f"{missing}: gone since the plan", Skip.NOT_IN_PLAN
                continue
            try:
                held[rp.run] = lock_run(st, rp.run, batch_id)
            except BucketTxnError as e:
                lock_refused(out, e)
                continue
            except STORE_FAILURES as e:
                out.status, out.reason, out.code = Outcome.FAILED, str(e), lock_failure_code(e)
                continue
            out.op_id = op_id
            entries.append({"run": rp.run, "op": op_id, "lock": held[rp.run].path, "files": files})
        if settled_early:
            taken = {en["run"] for en in entries}
            for run, o in outs.items():
                if run not in taken:
                    settled_early(o)
        if not entries:
            return list(outs.values())
        try:
            journal = new_journal(st, batch_id, {"op": batch_id, "logdir": rfs.url, "step": Rec.PLANNED,
                                                 "created": now_s(), "vault": vault.root, "runs": entries,
                                                 "logdir_objects": len(listing)})
        except STORE_FAILURES as e:
            ours, versions = unlock_all([held[en["run"]] for en in entries])
            must_delete(rfs, ours, versions=versions)
            for en in entries:
                o = outs[en["run"]]
                o.status, o.reason, o.code = Outcome.FAILED, str(e), failure_code(e)
            return list(outs.values())
        faults.hit("reduce.journal")
        # Backups: server-side copies, each conditional on the plan's version. A run whose copy
        # fails is rolled back alone; the others go on.
        live: List[dict] = []
        # with a vault of blobs: one add for the batch (small originals share packs), under the
        # lock that keeps a purge's forget out until the manifests name the digests
        with adding(vault):
            unmade = backup_entries(rfs, vault, entries)
            if vault.blobs is not None:
                faults.hit("reduce.blobs_added")
            for en in entries:
                rp = plans[en["run"]]
                try:
                    cancel.check()
                    if en["run"] in unmade:
                        raise unmade[en["run"]]
                    for f in en["files"]:
                        if not is_blob_entry(f):
                            backup_object(rfs, f)
                        faults.hit("reduce.backup_copy")
                    live.append(en)
                except faults.InjectedFault:
                    raise
                except (BucketTxnError, *STORE_FAILURES, Cancelled) as e:
                    _drop_run(rfs, vault, en, outs[en["run"]], e)
                except ValueError as e:  # a key that is not a plain key of the logdir ('..' segments)
                    bad = next((f["path"] for f in en["files"] if not f.get("backup_checksums")), en["run"])
                    _drop_run(rfs, vault, en, outs[en["run"]],
                              BucketTxnError(Failure.REFUSED, f"{str(bad)[:300]!r}: {e}; run left as it was"))
                if live and live[-1] is en:  # told outside the try: a callback's error is not a bad key
                    live[-1:] = _told(rfs, vault, [en], outs, progress, (("backup", 0.4),))
            live = _in_time(rfs, vault, live, outs, cancel)
            faults.hit("reduce.backup")
            # as on a disk: a ledger marks each run "verifying" here; a mark the store refuses is
            # a failed step of that run (R6 F1)
            live = _told(rfs, vault, live, outs, progress, (("verify", 0.65),))
            # every run's manifest once the batch's backups are all made, each dated with the
            # time the commit record then carries (``finished_at``, a disk's commit time; no
            # request more): a run's first backups are not its commit
            committed_at = now_s()
            made = []
            for en in live:
                rp = plans[en["run"]]
                bytes_after = rp.bytes_before - sum(f["size"] for f in en["files"])
                try:
                    st.create(vault.manifest(en["op"]), manifest_doc(rfs, en, rp, policy, bytes_after, vault,
                                                                     journal.doc, committed_at=committed_at))
                    made.append(en)
                except (BucketTxnError, *STORE_FAILURES) as e:
                    _drop_run(rfs, vault, en, outs[en["run"]], e)
            live = made
        # Last look before the destructive step: an object rewritten since its backup was made
        # must not be deleted (its new bytes have no backup). Each delete also carries the
        # version as a condition where the store takes one.
        faults.hit("reduce.verify")
        if live:
            try:
                now_objs = listing_of_runs(rfs, vault, [en["run"] for en in live], len(listing), known=listing)
            except STORE_FAILURES as e:
                for en in live:
                    _drop_run(rfs, vault, en, outs[en["run"]], e)
                live, now_objs = [], {}
            keep, reread = [], True
            for en in live:
                changed = next((f["path"] for f in en["files"] if f["path"] not in now_objs
                                or now_objs[f["path"]].version_token != f["version"]), None)
                active = None if changed else written_recently(now_objs, en["run"], quiet_period, closed_files)
                if changed:
                    _drop_run(rfs, vault, en, outs[en["run"]], BucketTxnError(
                        Failure.CHANGED_SINCE_BACKUP, f"{changed}: changed since its backup; run left as it was"))
                elif active:
                    _drop_run(rfs, vault, en, outs[en["run"]], BucketTxnError(Skip.ACTIVE, active))
                else:
                    try:  # its blobs still there: the delete removes what only they hold
                        missing_blobs(vault, en["files"], reread=reread)
                        reread = False
                    except BucketTxnError as e:
                        _drop_run(rfs, vault, en, outs[en["run"]], e)
                        continue
                    keep.append(en)
            live = keep
        keep = []
        for en in live:  # a run whose lock another worker took over stops before its delete step
            if held[en["run"]].still_held():
                keep.append(en)
            else:
                _drop_run(rfs, vault, en, outs[en["run"]], BucketTxnError(
                    Skip.LOCKED, f"run {en['run']}: its lock was taken over; left as it was"))
        live = _in_time(rfs, vault, keep, outs, cancel)  # the last point where a cancel is honoured
        if not live:
            # every run taken out: the journal and locks go only when every drop finished; a drop
            # whose rollback did not (its manifest may still be there, dated as committed) keeps
            # them, as at the end, so the next start rolls the batch back (review R6 F2)
            if not _incomplete(entries, outs):
                ours, versions = unlock_all([held[en["run"]] for en in entries])
                journal.close(also=ours, versions=versions)
            return list(outs.values())
        try:
            # the destructive step is preceded by its record: every backup of these runs verified
            # (the entries as they stand: their backups' checksums, the runs taken out)
            journal.step(Rec.SWAPPING, at=committed_at, runs=entries)
            faults.hit("reduce.swap_record")
            finish_op(rfs, vault, journal.doc, present=now_objs)
        except (BucketTxnError, *STORE_FAILURES, ValueError) as e:  # ValueError: a key no call can address
            if _rollback_batch(rfs, vault, journal, live, outs, e, entries, held):
                ours, versions = unlock_all([held[en["run"]] for en in entries if en not in live])
                BucketState.of(rfs).delete(ours, versions=versions)
            return list(outs.values())
        faults.hit("reduce.swap")
        # a verification that finds the run not as planned is a failed step (as on a disk); one
        # whose listing the store refused is the store's failure
        unverified = Failure.ERROR
        try:
            verification = verify_batch(rfs, vault, live, listing)
        except STORE_FAILURES as e:  # past the commit point: the reduction stands, unverified
            unverified = failure_code(e)
            verification = {en["run"]: {"ok": False, "error": f"reduced, but the checking listing failed ({e}); "
                                        "run `verify` to check it"} for en in live}
        for en in live:
            o = outs[en["run"]]
            bad = verification.get(en["run"], {}).get("error")
            o.verification = verification.get(en["run"])
            o.removed_files = [f["path"] for f in en["files"]]
            o.status = Outcome.VERIFIED if not bad else Outcome.FAILED
            if bad:
                o.reason, o.code = bad, unverified
            o.bytes_after = o.bytes_before - sum(f["size"] for f in en["files"])
        # done: the journal and every lock in one batched delete (journal first: a crash between
        # the two leaves only stale locks, which recovery drops). A run taken out whose cleanup
        # failed keeps the journal: the next start finishes that cleanup.
        if not _incomplete(entries, outs):
            ours, versions = unlock_all([held[en["run"]] for en in entries])
            journal.close(also=ours, versions=versions)
        else:
            journal.step(Rec.DONE, runs=entries)
        return list(outs.values())
    except faults.InjectedFault:
        raise
    finally:
        ACTIVE_OPS.discard(batch_id)
        for lock in held.values():  # no lock of an ended batch is renewed (those kept are stale now)
            lock.release()
        dt = (time.monotonic() - t0) / max(1, len(rps))
        for o in outs.values():
            o.duration_s = dt


def _in_time(rfs: RemoteFS, vault: BucketVault, live: List[dict], outs: Dict[str, RunOutcome],
             cancel: CancelToken) -> List[dict]:
    """``live`` while ``cancel`` stands; past it (cancelled or timed out) every one is dropped."""
    try:
        cancel.check()
    except Cancelled as e:
        for en in live:
            _drop_run(rfs, vault, en, outs[en["run"]], e)
        return []
    return live


def _told(rfs: RemoteFS, vault: BucketVault, live: List[dict], outs: Dict[str, RunOutcome],
          progress: Optional[Callable[[str, str, float], None]], steps) -> List[dict]:
    """``live`` less the runs whose ``progress`` call (a ledger's mark: one request) raised a
    store failure: each is taken out of the batch before its destructive step, as a failed step."""
    if not progress:
        return live
    kept = []
    for en in live:
        try:
            for name, frac in steps:
                progress(en["run"], name, frac)
            kept.append(en)
        except (BucketTxnError, OSError) as e:  # a ledger's refused write (``StoreFailure``) among them
            _drop_run(rfs, vault, en, outs[en["run"]], e)
    return kept


def _drop_run(rfs: RemoteFS, vault: BucketVault, en: dict, out: RunOutcome, e: Exception) -> None:
    """Take one run out of a batch before its destructive step: its originals are untouched,
    its backups and manifest go. The batch journal still names the run: a crash from here on
    makes recovery roll it back too, which finds nothing left to undo."""
    code = failure_code(e)
    out.reason = str(e)
    try:
        rollback_entry(rfs, vault, en, deleted=False)
        rolled_back(out, code)
    except (BucketTxnError, *STORE_FAILURES, OSError) as e2:
        rollback_incomplete(out, e2)
    en["dropped"] = True


def _incomplete(entries: List[dict], outs: Dict[str, RunOutcome]) -> bool:
    """Whether a run of the batch was left with its rollback unfinished (its manifest or backups
    may still be there): then the journal naming it, and the batch's locks, must stay."""
    return any(outs[en["run"]].code == Failure.ROLLBACK_INCOMPLETE for en in entries)


def _rollback_batch(rfs: RemoteFS, vault: BucketVault, journal: ObjectJournal, live: List[dict],
                    outs: Dict[str, RunOutcome], e: Exception, entries: List[dict],
                    held: Dict[str, RunLease]) -> bool:
    """The destructive step failed: recorded first (a recovery that finds this journal must
    finish the rollback, not roll forward), then every run put back from its backups. The
    journal and the locks of ``live`` go only when every run of the batch (``entries``, those
    dropped before too) was rolled back in full; returns whether they went."""
    code = failure_code(e)
    try:
        journal.step(Rec.ROLLING_BACK, runs=entries)
    except STORE_FAILURES:
        pass
    incomplete = None
    for en in live:
        o = outs[en["run"]]
        o.reason = str(e)
        try:
            rollback_entry(rfs, vault, en)
            o.status, o.code = Outcome.ROLLED_BACK, code
        except (BucketTxnError, *STORE_FAILURES, OSError) as e2:
            incomplete = e2
            o.status, o.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
            o.reason += f"; rollback incomplete ({e2}); the journal is kept and the next start settles it"
    if incomplete is None and not _incomplete(entries, outs):
        try:
            ours, versions = unlock_all([held[en["run"]] for en in live])
            must_close(journal, ours, versions=versions)
            return True
        except BucketTxnError as e3:
            for en in live:
                o = outs[en["run"]]
                o.status, o.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
                o.reason += f"; cleanup incomplete ({e3}); the next start settles it"
    return False
