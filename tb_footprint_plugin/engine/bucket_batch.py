"""Drop-only runs of a bucket logdir reduced in batches under one journal object.

Runs that only lose files are reduced together, ``plan.cost.BATCH_RUNS`` to one journal object,
each with its own lock object, operation id, backups and manifest (restorable on its own); the
batch pays one journal create, one commit record, one listing before and after its delete step,
one journal rewrite a third of a lease (its locks' renewal, ``bucket_lease.delegate``) and the
batched deletes (1,000 keys a request on S3; failed keys retried, then the run rolled back
from its backups if they still fail). The steps are ``engine.bucket_steps``; a crash is settled
from any machine by ``engine.bucket_recover``.

The batch is one transaction, ``ObjectBatchReduce``, whose entries are its runs, run by the one
driver ``engine.txn.run`` (issue #26): the driver alone orders the steps, writes the commit record
(``swapping``) and the rollback record (``rolling_back``) before what they guard, honours a cancel
and hits the failpoints. A run that fails a step before the commit record is taken out of the
batch there and rolled back alone (``bucket_batch_runs.drop_run``), the others go on; a step that finds no run left
ends the batch (``txn.Settled``). What the driver rolls back (a cancel, a failed delete step) is
every run still in the batch.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Dict, List, Mapping, Optional

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine import faults, txn
from tb_footprint_plugin.engine.bucket_batch_runs import batch_entries, drop_run, not_to_delete, rollback_unfinished
from tb_footprint_plugin.engine.bucket_lease import delegate
from tb_footprint_plugin.engine.bucket_blobs import adding, backup_entries, is_blob_entry
from tb_footprint_plugin.engine.bucket_history import note_shard_batch
from tb_footprint_plugin.engine.bucket_op_records import create_manifest
from tb_footprint_plugin.engine.bucket_verified import drop_verification, listed, unverified
from tb_footprint_plugin.engine.history import append_kept, append_rolled_back, kept_line, rolled_back_line
from tb_footprint_plugin.engine.bucket_state import (ACTIVE_OPS, BucketState, BucketTxnError, BucketVault, failure_code,
                                                     listing_of_runs, must_close, must_delete, new_journal, now_s,
                                                     STORE_FAILURES, unlock_all)
from tb_footprint_plugin.engine.bucket_steps import (backup_object, finish_op, manifest_doc, rollback_entry,
                                                     rollback_incomplete, verify_batch)
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, RunOutcome, new_op_id
from tb_footprint_plugin.engine.recovery_rules import CANCELLED_REASON, kept_words
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.ledger_objects import write_waiting
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.storage.remote import ObjectInfo
from tb_footprint_plugin.storage.store_object import ObjectStore

#: ``progress(run, step, fraction)``
Progress = Callable[[str, str, float], None]


def reduce_batch(ostore: ObjectStore, vault: BucketVault, rps: List, listing: Dict[str, ObjectInfo],
                  quiet_period: float, policy: Optional[str], settled_early=None,
                  closed_files: Optional[Mapping[str, float]] = None,
                  cancel: Optional[CancelToken] = None,
                  progress: Optional[Progress] = None) -> List[RunOutcome]:
    """Drop-only runs under one journal object, ``ObjectBatchReduce`` run by ``engine.txn.run``.
    Each run has its own lock object (two machines never reduce one run at once), its own
    operation id, backups and manifest (restorable on its own); the journal records the batch's
    steps, so a crash is settled from any machine.
    ``settled_early(outcome)`` hears of each run left out before the journal is written (gone
    since the plan, locked by another worker) as soon as that is known. ``closed_files``: keys
    the caller's own job closed, not counted by the quiet period while unchanged.
    ``cancel``: the batch's runs start together, so one token (each run's ``timeout`` counted from
    the batch's start, and the batch's cancel) is checked at the driver's points (after the
    journal and the backups, then after the last look, right before the commit record) and before
    each run's backups; past it every run not committed is rolled back after the rollback record
    (its backups and manifest dropped, its originals untouched: "timed out before the commit
    point", ``Failure.ERROR`` as on a disk); once the commit record is written the batch finishes.
    ``progress(run, step, fraction)``: a disk's steps of a run that only loses files, ``backup``
    (0.4) once its backups are made and ``verify`` (0.65) as the batch's checks begin."""
    t = ObjectBatchReduce(ostore, vault, rps, listing, quiet_period, policy, closed_files,
                          cancel or CancelToken(), progress)
    if t.take_locks(settled_early):
        txn.run(t, t.cancel)
    return t.outcomes()


class ObjectBatchReduce(txn.Txn):
    """The steps of a batch of drop-only bucket runs for ``engine.txn.run``, its entries the runs:

    - the locks are taken before the transaction (``take_locks``): a run refused one, or gone
      since the plan, is left out, said at once (``settled_early``), and never journaled;
    - **journal**: one journal object for the batch (step ``planned``), an entry per run naming
      its lock, operation id and files; a journal the store refuses fails every run, nothing done;
    - **backup**: server-side copies (or blobs of a vault of blobs, one add for the batch), holding
      the vault's shared ``adding`` lock until the manifests exist; a run whose copy fails is
      taken out and rolled back alone;
    - **stage**, **transform**: nothing (a drop-only run has no new file; no failpoint there);
    - **verify**: each run's ledger mark ``verifying`` and its manifest, dated as the commit record;
    - the **last look**: one listing of the runs (unchanged since their backups, nothing written
      within the quiet period, the blobs there), each lock still ours; a run that fails it is
      taken out, and with none left the batch ends (``txn.Settled``) before any record;
    - the commit record ``swapping`` (the driver's), then **swap**: ``finish_op``, the batched
      deletes; **commit**: the checking listing, each run's outcome, the journal closed with every
      lock (or kept, step ``done``, while a run taken out has its rollback unfinished)."""

    errors = (BucketTxnError, *STORE_FAILURES, ValueError, Cancelled)
    rollback_errors = (BucketTxnError, *STORE_FAILURES, OSError)

    def __init__(self, ostore: ObjectStore, vault: BucketVault, rps: List, listing: Dict[str, ObjectInfo],
                 quiet_period: float, policy: Optional[str], closed_files: Optional[Mapping[str, float]],
                 cancel: CancelToken, progress: Optional[Progress]) -> None:
        self.t0 = time.monotonic()
        self.ostore, self.vault, self.rps, self.listing = ostore, vault, rps, listing
        self.quiet_period, self.policy, self.closed_files = quiet_period, policy, closed_files
        self.cancel, self.progress = cancel, progress
        self.st = BucketState(ostore)
        self.batch_id = new_op_id()
        self.outs: Dict[str, RunOutcome] = {}
        self.plans = {rp.run: rp for rp in rps}
        self.entries: List[dict] = []  # every run journaled, those taken out too
        self.live: List[dict] = []  # the runs still in the batch, in its order
        self.held: Dict[str, RunLease] = {}  # each run's lock object (its entry names only the lock's path)
        self.jnl = None
        self.error: Optional[BaseException] = None
        self.committed_at = 0.0
        self.now_objs: Dict[str, ObjectInfo] = {}
        self.noted: List[tuple] = []  # (op id, version, manifest) of each manifest written
        self._adding = contextlib.ExitStack()  # the vault's shared adding lock, backup to verify
        self._ended = False
        #: the change-log lines of the runs rolled back, appended at the end in one append
        self._lines: List[dict] = []
        self._rolled: List[RunOutcome] = []

    def failpoint(self, step: str) -> Optional[str]:
        """The batch's failpoints as the crash matrix knows them: none after the stage and the
        transform (a drop-only run stages nothing) nor after the commit (the journal is gone)."""
        if step in ("stage", "transform", "commit"):
            return None
        return super().failpoint(step)

    def outcomes(self) -> List[RunOutcome]:
        """Each run's outcome, in the plan's order."""
        return list(self.outs.values())

    def take_locks(self, settled_early=None) -> bool:
        """Each run's entry (its files as the listing has them) and lock; False when no run is left
        (each outcome says why, the batch ended)."""
        ACTIVE_OPS.add(self.batch_id)
        try:
            self.entries = batch_entries(self.st, self.vault, self.rps, self.listing, self.batch_id, self.outs,
                                         self.held)
            if settled_early:
                taken = {en["run"] for en in self.entries}
                for run, o in self.outs.items():
                    if run not in taken:
                        settled_early(o)
        except BaseException:
            self.end()
            raise
        if not self.entries:
            self.end()
            return False
        self.live = list(self.entries)
        return True

    def journal(self, report: txn.Report) -> None:
        """The ledger's waiting start marks, then the journal object (``planned``); either refused, no run is touched."""
        try:
            write_waiting()  # the ledger's marks of the runs' start, one write a worker (#28)
            self.jnl = new_journal(self.st, self.batch_id, {
                "op": self.batch_id, "logdir": self.ostore.url, "step": Rec.PLANNED, "created": now_s(),
                "vault": self.vault.root, "runs": self.entries, "logdir_objects": len(self.listing)})
            # from now on one rewrite of the journal a third of a lease keeps every lock of the
            # batch alive, not a write a lock: its puts a run stay flat however long it takes (#28)
            delegate([self.held[en["run"]] for en in self.entries], getattr(self.jnl, "renew", None))
        except STORE_FAILURES as e:
            for en in self.entries:
                o = self.outs[en["run"]]
                o.status, o.reason, o.code = Outcome.FAILED, str(e), failure_code(e)
            ours, versions = unlock_all([self.held[en["run"]] for en in self.entries])
            must_delete(self.ostore, ours, versions=versions)
            raise txn.NotStarted() from e

    def backup(self, report: txn.Report) -> None:
        """Backups: server-side copies, each conditional on the plan's version (with a vault of
        blobs: one add for the batch, small originals sharing packs). A run whose copy fails is
        rolled back alone; the others go on. A cancel is looked at before each run's copies."""
        ostore, vault = self.ostore, self.vault
        # held until the manifests name the digests: a purge's forget waits while only the journal does
        self._adding.enter_context(adding(vault))
        unmade = backup_entries(ostore, vault, self.entries)
        if vault.blobs is not None:
            faults.hit("reduce.blobs_added")
        for en in self.entries:
            self.cancel.check()
            try:
                if en["run"] in unmade:
                    raise unmade[en["run"]]
                for f in en["files"]:
                    if not is_blob_entry(f):
                        backup_object(ostore, f)
                    faults.hit("reduce.backup_copy")
            except faults.InjectedFault:
                raise
            except (BucketTxnError, *STORE_FAILURES) as e:
                self._drop(en, e)
                continue
            except ValueError as e:  # a key that is not a plain key of the logdir ('..' segments)
                bad = next((f["path"] for f in en["files"] if not f.get("backup_checksums")), en["run"])
                self._drop(en, BucketTxnError(Failure.REFUSED, f"{str(bad)[:300]!r}: {e}; run left as it was"))
                continue
            self._told([en], (("backup", 0.4),))  # outside the try: a callback's error is not a bad key

    def stage(self, report: txn.Report) -> None:
        """Nothing: a drop-only run has no new file."""

    def transform(self, report: txn.Report) -> None:
        """Nothing: a drop-only run has no new file."""

    def verify(self, report: txn.Report) -> None:
        """As on a disk, each run's ledger marked ``verifying`` (a mark the store refuses is a failed
        step of that run, R6 F1); then every run's manifest, once the batch's backups are all made,
        each dated with the time the commit record then carries (``finished_at``, a disk's commit
        time; no request more): a run's first backups are not its commit."""
        self._told(list(self.live), (("verify", 0.65),))
        write_waiting()  # their ledger marks, one write a worker (#28); refused, the batch rolls back
        self.committed_at = now_s()
        folder = self.vault.blobs.folder if self.vault.blobs is not None else None
        for en in list(self.live):
            rp = self.plans[en["run"]]
            bytes_after = rp.bytes_before - sum(f["size"] for f in en["files"])
            try:
                doc = manifest_doc(self.ostore, en, rp, self.policy, bytes_after, self.vault, self.jnl.doc,
                                   committed_at=self.committed_at,
                                   verification=drop_verification(rp, en["files"], folder))
                self.noted.append((en["op"], create_manifest(self.ostore, self.vault, en["op"], doc), doc))
            except (BucketTxnError, *STORE_FAILURES) as e:
                self._drop(en, e)
        self._adding.close()

    def last_look(self) -> None:
        """Before the destructive step: an object rewritten since its backup was made must not be
        deleted (its new bytes have no backup; each delete also carries the version as a condition
        where the store takes one), a run written within the quiet period is left, the blobs are
        still there, and a run whose lock another worker took over stops. With no run left the
        batch ends here: the journal and locks go only when every drop finished; a drop whose
        rollback did not (its manifest may still be there, dated as committed) keeps them, as at
        the end, so the next start rolls the batch back (review R6 F2)."""
        if self.live:
            try:
                now_objs = listing_of_runs(self.ostore, self.vault, [en["run"] for en in self.live],
                                           len(self.listing), known=self.listing)
            except STORE_FAILURES as e:
                for en in list(self.live):
                    self._drop(en, e)
                now_objs = {}
            reread = True  # the blob folder's index read again once, by the first run that asks
            for en in list(self.live):
                why = not_to_delete(self.vault, en, now_objs, self.quiet_period, self.closed_files, reread)
                if why is None:
                    reread = False
                else:
                    self._drop(en, why)
            self.now_objs = now_objs
        for en in list(self.live):  # a run whose lock another worker took over stops before its delete step
            if not self.held[en["run"]].still_held():
                self._drop(en, BucketTxnError(
                    Skip.LOCKED, f"run {en['run']}: its lock was taken over; left as it was"))
        if not self.live:
            if not rollback_unfinished(self.entries, self.outs):
                ours, versions = unlock_all([self.held[en["run"]] for en in self.entries])
                self._write_lines()
                self.jnl.close(also=ours, versions=versions)
            raise txn.Settled()

    def record(self, step: str) -> None:
        """``swapping``, the commit record (every backup of the runs left verified: the entries as
        they stand, their backups' checksums, the runs taken out), dated as the manifests;
        ``rolling_back``."""
        if step == "swap":
            self.jnl.step(Rec.SWAPPING, at=self.committed_at, runs=self.entries)
        else:
            self.jnl.step(Rec.ROLLING_BACK, runs=self.entries)

    def swap(self, report: txn.Report) -> None:
        """The batched deletes, each under its version (``finish_op``)."""
        finish_op(self.ostore, self.vault, self.jnl.doc, present=self.now_objs)

    def commit(self, report: txn.Report) -> None:
        """The checking listing and each run's outcome: a verification that finds the run not as
        planned is a failed step (as on a disk); one whose listing the store refused is the
        store's failure (past the commit point: the reduction stands, unverified). Then the
        journal and every lock in one batched delete (journal first: a crash between the two
        leaves only stale locks, which recovery drops); a run taken out whose cleanup failed
        keeps the journal (step ``done``): the next start finishes that cleanup. Last, a shard
        worker's manifests go into the partition's summary (``bucket_history.note_shard_batch``)."""
        live, outs = self.live, self.outs
        unverified = Failure.ERROR
        try:
            verification = verify_batch(self.ostore, self.vault, live, self.listing)
        except STORE_FAILURES as e:
            unverified = failure_code(e)
            verification = {en["run"]: {"ok": False, "error": f"reduced, but the checking listing failed ({e}); "
                                        "run `verify` to check it"} for en in live}
        checked = {op: (doc.get("verification") or {}).get("checks") or [] for op, _version, doc in self.noted}
        for en in live:
            o = outs[en["run"]]
            bad = verification.get(en["run"], {}).get("error")
            o.verification = verification.get(en["run"])
            if not bad and o.verification is not None:  # the manifest's checks, then the listing's, as a rewrite's
                o.verification = listed(o.verification, checked.get(en["op"], []))
            o.removed_files = [f["path"] for f in en["files"]]
            o.status = Outcome.VERIFIED if not bad else Outcome.FAILED
            if bad:
                o.reason, o.code = bad, unverified
            o.bytes_after = o.bytes_before - sum(f["size"] for f in en["files"])
        self._unverified({en["op"]: outs[en["run"]].reason for en in live
                          if outs[en["run"]].status == Outcome.FAILED})
        self._witness([outs[en["run"]] for en in live if outs[en["run"]].status == Outcome.VERIFIED])
        if not rollback_unfinished(self.entries, outs):
            ours, versions = unlock_all([self.held[en["run"]] for en in self.entries])
            self._write_lines()
            self.jnl.close(also=ours, versions=versions)
        else:
            self.jnl.step(Rec.DONE, runs=self.entries)
        ops = {en["op"] for en in live}  # a shard worker's next partition reads none of these (#28)
        note_shard_batch(self.ostore, self.vault, [n for n in self.noted if n[0] in ops])

    def _witness(self, verified: List[RunOutcome]) -> None:
        """With a blob folder, the batch's verified operations appended to the bucket's witness in
        one append (``history.append_kept``: a head, a read and a conditional put; the first ever a
        head and a put), before the journal goes: past the commit record with every backup verified
        a start finishes the batch, never rolls it back, so no manifest the witness names is dropped
        by it. Once a manifest object is gone, the witness still names its operation, and no forget
        lets a blob go (``bucket_blobs.names_in_bucket``: a copied run's blobs are another's too;
        review R26 F1). A witness the store refuses is said in each outcome; the runs stand."""
        if self.vault.blobs is None or not verified:
            return
        said = append_kept(BucketState.of(self.ostore).logdir_store(),
                           [kept_line(o.op_id, "reduce", o.run) for o in verified])
        for o in verified if said else ():
            o.reason = f"{o.reason}; {said}" if o.reason else said

    def _unverified(self, why: Dict[str, str]) -> None:
        """The manifest of each run whose listing after the swap found it not as planned (``why``:
        op id -> the failure) rewritten to say so (``bucket_verified.unverified``), under the
        version this batch wrote: the failure path's request alone. One the store refuses, or
        changed since, stays as written (the run's outcome says the failure)."""
        for i, (op, version, doc) in enumerate(self.noted):
            if op not in why:
                continue
            new = unverified(doc, str(why[op] or "the listing after the swap found the run not as planned"))
            try:
                self.noted[i] = (op, self.st.update(self.vault.manifest(op), new, version), new)
            except STORE_FAILURES:
                continue

    def journaled(self) -> bool:
        return self.jnl is not None

    def committed(self) -> bool:
        return self.jnl is not None and self.jnl.committed()

    def failed(self, error: BaseException) -> None:
        self.error = Cancelled(CANCELLED_REASON) if self.cancel.cancelled else error  # said as a disk's

    def rollback(self, committed: bool) -> None:
        """Every run still in the batch put back. Before the commit record each is taken out as a
        failed step takes one out (originals untouched, backups and manifest dropped), and the
        journal goes with every lock once every run's rollback finished. Past it each is put back
        from its verified backups; the journal and the locks of these runs go only when every run
        of the batch (those taken out before too) was rolled back in full, then the locks of those
        taken out."""
        if self.jnl is None:
            return  # no journal: nothing was done, each outcome says why (``journal``)
        if not committed:
            for en in list(self.live):
                self._drop(en, self.error)
            if not rollback_unfinished(self.entries, self.outs):
                ours, versions = unlock_all([self.held[en["run"]] for en in self.entries])
                self._write_lines()
                self.jnl.close(also=ours, versions=versions)
            return
        code = failure_code(self.error)
        live = self.live
        for en in live:
            o = self.outs[en["run"]]
            o.reason = str(self.error)
            try:
                kept = rollback_entry(self.ostore, self.vault, en, code=code, out=o)
                o.status, o.code = Outcome.ROLLED_BACK, code
                o.reason += f"; {kept_words(kept)}" if kept else ""
                if not kept:  # a kept manifest names its backups: not "as it was", no rolled-back line
                    self._record(en)
            except (BucketTxnError, *STORE_FAILURES, OSError) as e2:
                rollback_incomplete(o, e2)
        if rollback_unfinished(self.entries, self.outs):
            return
        try:
            ours, versions = unlock_all([self.held[en["run"]] for en in live])
            # no lock renewed past here: those kept alive by the journal would be lost once it goes
            out_ours, out_versions = unlock_all([self.held[en["run"]] for en in self.entries if not _among(en, live)])
            self._write_lines()
            must_close(self.jnl, ours, versions=versions)
        except BucketTxnError as e3:
            for en in live:
                o = self.outs[en["run"]]
                o.status, o.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
                o.reason += f"; cleanup incomplete ({e3}); the next start settles it"
            return
        BucketState.of(self.ostore).delete(out_ours, versions=out_versions)

    def incomplete(self, error: BaseException) -> None:
        """The rollback record, or the rollback, failed: every run still in the batch says so (the
        journal stays, and the next start settles it)."""
        for en in self.live:
            o = self.outs[en["run"]]
            o.reason = str(self.error)
            rollback_incomplete(o, error)

    def unwind(self) -> None:
        self._adding.close()

    def end(self) -> None:
        """Once: the change-log lines of the runs rolled back not written yet (the journal stays:
        its recovery writes none twice), no lock of an ended batch is renewed (those kept are
        stale now); each run's duration, the batch's shared among its runs."""
        if self._ended:
            return
        self._ended = True
        self._write_lines()
        ACTIVE_OPS.discard(self.batch_id)
        for lock in self.held.values():
            lock.release()
        dt = (time.monotonic() - self.t0) / max(1, len(self.rps))
        for o in self.outs.values():
            o.duration_s = dt

    def _write_lines(self) -> None:
        """The change-log lines of the runs rolled back so far, in one append (a failure path's
        requests; none when no run was), before the journal naming those runs goes: a kill between
        the two leaves the journal, and its recovery writes only the lines the log lacks
        (``bucket_recover``); never none."""
        lines, rolled = self._lines, self._rolled
        self._lines, self._rolled = [], []
        append_rolled_back(BucketState.of(self.ostore).logdir_store(), lines, rolled)

    def _drop(self, en: dict, e: BaseException) -> None:
        """Take ``en`` out of the batch, rolled back alone (``bucket_batch_runs.drop_run``)."""
        self.live = [x for x in self.live if x is not en]
        if not drop_run(self.ostore, self.vault, en, self.outs[en["run"]], e) and \
                self.outs[en["run"]].code != Failure.ROLLBACK_INCOMPLETE:  # kept: its manifest names it
            self._record(en)

    def _record(self, en: dict) -> None:
        """The change log's ``rolled_back`` line of a run put back as it was (its manifest gone
        with its backups), with its outcome's code, as a disk's rollback writes it."""
        o = self.outs[en["run"]]
        self._lines.append(rolled_back_line(o, en["op"], self.policy))
        self._rolled.append(o)

    def _told(self, ens: List[dict], steps) -> None:
        """``progress`` of each of ``ens``; a run whose call (a ledger's mark: one request) raised a
        store failure is taken out of the batch before its destructive step, as a failed step."""
        if not self.progress:
            return
        for en in ens:
            try:
                for name, frac in steps:
                    self.progress(en["run"], name, frac)
            except (BucketTxnError, OSError) as e:  # a ledger's refused write (``StoreFailure``) among them
                self._drop(en, e)


def _among(en: dict, ens: List[dict]) -> bool:
    return any(x is en for x in ens)


__all__ = ["ObjectBatchReduce", "reduce_batch"]
