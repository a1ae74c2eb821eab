"""One run, all or nothing: journal → back up → stage → verify → swap → commit, or roll back.

Every destructive step is preceded by its fsynced journal record. Until the swap starts the
user's files are untouched (backups are hard links or verified copies; new files carry
temporary names no reader matches), so a failure or a crash before it leaves the run exactly
as it was. The swap starts only after verification passed and is recorded; a crash inside it
is finished on recovery (every step is idempotent), or rolled back if anything no longer
checks out. The same ``swap.rollback``/``swap.roll_forward`` code serves failures in process
and recovery after a crash (``recovery``). The steps are ``LocalReduce``'s methods, run in the
order of ``engine.txn.STEPS`` by the one driver ``engine.txn.run`` (as a bucket's ``ObjectReduce``).

What the steps share lives beside this module: the preflight (``engine.preflight``), the journal's
records and a journal lost under way (``engine.reduce_journal``), the verification and the staged
file (``engine.verification``).
"""
from __future__ import annotations

import os
import shutil  # noqa: F401  (tests patch transaction.shutil.disk_usage: the free-space check)
import stat
import time
from typing import Dict, List, Optional

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Skip
from tb_footprint_plugin.engine import faults, trust, txn
from tb_footprint_plugin.engine.catalogue import unsettled_op, write_manifest
from tb_footprint_plugin.engine.compactor import note_before_swap
from tb_footprint_plugin.engine.context import (
    Cancelled,
    CancelToken,
    Context,
    Progress,
    RunOutcome,
    NoSpace,
    TransactionError,
    failure_code,
    is_no_space,
    new_op_id,
    no_symlink,
    reason_of,
    writing,
)
from tb_footprint_plugin.engine.journal import Journal, JournalGone, RunLocked
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.engine.preflight import check_writers, preflight
from tb_footprint_plugin.engine.recovery import recover
from tb_footprint_plugin.engine.relink import inode_fields
from tb_footprint_plugin.engine.recovery_rules import CANCELLED_REASON, rollback_incomplete_reason
from tb_footprint_plugin.engine.reduce_journal import (append_record, append_rollback, create_journal, journal_gone,
                                                       own_records, stage_record)
from tb_footprint_plugin.engine.run_lock import folder_capabilities, lock_failure, run_lock
from tb_footprint_plugin.engine.swap import apply_swap, folder_times, kept_folders, new_put_back_token, removed_dirs_before, rollback, run_owner
from tb_footprint_plugin.engine.swap_strategy import swap_strategy
from tb_footprint_plugin.engine.verification import (changed_files, changed_since_backup, original_of, scratch_space,
                                                     stage_file, stop_of, unchanged_event_files,
                                                     verification_summary, verify_run, verify_unchanged)
from tb_footprint_plugin.plan.model import RunPlan
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import StagedReplaced, sha256_file, take_over
from tb_footprint_plugin.verify import Stopped


# ---------------------------------------------------------------------------------------
# the transaction
# ---------------------------------------------------------------------------------------
def _lock_run(ctx: Context, out: RunOutcome, settle_first: bool = False) -> Optional[RunLease]:
    """The lock of ``out.run`` (after settling unfinished operations with ``settle_first``), or
    None with ``out`` saying why: held by another process is a skip, anything else a failure."""
    errors = Exception if settle_first else OSError  # a failed settle must not escape either
    try:
        if settle_first:
            recover(ctx)
        return run_lock(ctx, out.run).acquire()
    except RunLocked as e:
        out.status, out.reason, out.code, out.holder = Outcome.SKIPPED, str(e), Skip.LOCKED, e.holder
    except errors as e:
        out.code, out.reason = lock_failure(e, out.run, ctx.lock_dir)
        if settle_first and out.code == Failure.LOCK_ERROR:  # the error may be the settling's
            out.reason = f"cannot settle or lock run {out.run!r}: {reason_of(e)}"
    return None


#: Metadata calls one run's transaction and verification make beyond those counted one by one
#: (path and containment checks, state folders, TensorBoard's own readers), measured with strace
#: on the test logdirs: about 200 a run and 20 a planned file. Charged to the throttle when the run
#: starts, so a worker's average stays under ``--max-file-ops-per-second`` (strace had found it
#: 10x over: only the scan and the engine's own file operations were counted).
UNCOUNTED_RUN_OPS, UNCOUNTED_FILE_OPS = 200, 20


def reduce_run(ctx: Context, rp: RunPlan, *, policy: Optional[dict] = None,
               cancel: Optional[CancelToken] = None, progress: Optional[Progress] = None) -> RunOutcome:
    """Reduce one run as ``rp`` says; returns an outcome, never raises for a failed run."""
    # the readers' scratch goes into this vault while the run is reduced, and only then
    with scratch.rooted(ctx.vault.tmp):
        return _reduce_run(ctx, rp, policy=policy, cancel=cancel, progress=progress)


def _reduce_run(ctx: Context, rp: RunPlan, *, policy: Optional[dict] = None,
                cancel: Optional[CancelToken] = None, progress: Optional[Progress] = None) -> RunOutcome:
    t0 = time.monotonic()
    out = RunOutcome(run=rp.run, status=Outcome.FAILED, bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
    if rp.skipped:
        out.status, out.reason, out.code = Outcome.SKIPPED, rp.skipped, rp.code
        return out
    cancel = cancel or CancelToken()
    lock = _lock_run(ctx, out)
    if lock is None:
        return out
    fsops.op(UNCOUNTED_RUN_OPS + UNCOUNTED_FILE_OPS * len(rp.actions))
    unsettled = unsettled_op(ctx, rp.run)
    if unsettled:
        # we hold the run's lock, so the process of that operation is gone (a killed worker of a
        # sharded batch): settle it now, as the next start would, and go on if the run is free
        lock.release()
        lock = _lock_run(ctx, out, settle_first=True)
        if lock is None:
            return out
        unsettled = unsettled_op(ctx, rp.run)
    if unsettled:
        lock.release()
        out.reason = (f"unfinished operation {unsettled} on this run could not be settled yet; "
                      f"run `tb-footprint recover {ctx.logdir}`")
        out.code = Failure.UNSETTLED
        return out
    t = LocalReduce(ctx, rp, out, lock, policy, cancel, t0)
    _run_steps(t, cancel, progress)
    return out


def _run_steps(t: "LocalReduce", cancel: CancelToken, report: Optional[Progress]) -> None:
    """The run's transaction, run by the one driver ``engine.txn.run`` (a name tests wrap to see
    when a run's steps start)."""
    txn.run(t, cancel, report)


class LocalReduce(txn.Txn):
    """The steps of one run's reduce on a disk for ``engine.txn.run`` (the module doc):

    - **journal**: the preflight (a refusal is a skip or a failure with nothing to undo), the
      logdir's identity bound, the begin record;
    - **backup**: every backup record and every ``stage`` record (one fsync, the last's), then
      every blob linked or copied in (linked only where the swap strategy allows hard links),
      pinned; ``backed_up``;
    - **stage**: each new file under a temporary name beside its original, its ``stage`` record
      durable since the backup (failpoint ``reduce.stage_record`` before it is written), then ``staged``;
    - **transform**: nothing on a disk (the staged file is where the swap takes it from);
    - **verify**: TensorBoard's readers over the original and reduced views, ``verified``;
    - the **last look**: the verification passed, nothing changed since its backup, no writer
      opened a file since the plan; then the swap record (the commit point, the driver's) after
      the journal is read back as ours, the pins synced and a compaction noted;
    - **swap**: ``apply_swap`` as the folder's swap strategy says (``engine.swap_strategy``:
      renamed, or copied and then deleted), ``swapped``; **commit**: the manifest, the commit record
      (failpoint ``reduce.commit`` between it and the journal's close), the pins released.

    A failure is classified as it always was (``failed``): past the commit record the reduction
    stands; a journal lost is said so and never removed; else the run is rolled back to its
    exact original bytes after its ``rollback`` record. Every failure is rolled back (an
    injected one too, on every store: ``engine.txn``)."""

    errors = (Exception,)
    rollback_errors = (Exception,)

    def __init__(self, ctx: Context, rp: RunPlan, out: RunOutcome, lock: RunLease, policy: Optional[dict],
                 cancel: CancelToken, t0: float) -> None:
        self.ctx, self.rp, self.out, self.lock, self.policy, self.cancel, self.t0 = \
            ctx, rp, out, lock, policy, cancel, t0
        self.jnl: Optional[Journal] = None
        self.handover: list = []
        self.original = None
        self.originals = [a for a in rp.actions if a.kind in ("delete", "compress", "rewrite")]
        self.unchanged: Optional[List[dict]] = None
        self.backups: Dict[str, dict] = {}
        self.staged: List[dict] = []
        self.verification: dict = {}
        self.removed_dirs: list = []
        # the failure's classification (``failed``)
        self.reason, self.code, self.interrupted = "", Failure.ERROR, False
        self.error: Optional[BaseException] = None
        self.gone: Optional[JournalGone] = None
        self.commit_seen = False
        self.rolling = False
        # how the swap puts files in place and the backups are kept: what the folder's store
        # declares decides, not this engine (``engine.swap_strategy``)
        self.strategy = swap_strategy(folder_capabilities())

    def failpoint(self, step: str) -> Optional[str]:
        """``reduce.commit`` is hit inside the commit step, between the commit record and the
        journal's close (where the crash matrix has always fired it)."""
        return None if step == "commit" else super().failpoint(step)

    def journal(self, report: txn.Report) -> None:
        """The preflight, then the begin record (``NotStarted`` when the preflight refuses)."""
        ctx, rp, out = self.ctx, self.rp, self.out
        try:
            preflight(ctx, rp, link_backups=self.strategy.link_backups)
        except (TransactionError, OSError) as e:
            code = e.code if isinstance(e, TransactionError) and e.code else Failure.REFUSED
            out.status = Outcome.SKIPPED if isinstance(code, Skip) else Outcome.FAILED
            out.reason, out.code = str(e), code
            raise txn.NotStarted() from e
        identity = trust.bind(ctx.logdir, ctx.state)  # refuses a state dir copied from elsewhere
        ctx.vault.ensure()
        op_id = new_op_id()
        out.op_id = op_id
        begin = {
            "type": "begin", "kind": "reduce", "op_id": op_id, "run": rp.run, "logdir_id": identity["id"],
            "logdir": ctx.logdir, "vault": ctx.vault.root, "plan": rp.to_dict(), "policy": self.policy,
            "verify_backends": list(ctx.verify_backends), **run_owner(ctx, rp.run),  # whose folder: ``folder_owners``
            "dir_times": folder_times(ctx, kept_folders(rp)),  # before anything is staged in them
            # a rollback's put-backs name their temps by it: a killed one's are removed, exactly those
            "tmp_token": new_put_back_token(),
        }
        self.jnl = create_journal(ctx, op_id, begin)

    def backup(self, report: txn.Report) -> None:
        """Every original that will be removed or replaced, into the vault after its record."""
        ctx, rp, journal, cancel = self.ctx, self.rp, self.jnl, self.cancel
        vault = ctx.vault
        # a big run's Rust load starts now and runs during the backup and the selection pass
        self.original = original_of(ctx, rp)
        if self.original is not None:
            self.handover.append(self.original)  # closed by ``unwind``, whatever happens next
        originals = self.originals
        total = sum(a.bytes_before for a in originals) or 1
        done = 0
        # a run whose event files this reduce neither replaces nor removes (profile data only): its
        # event data is proven the same by identity, hashed now under the run's lock and again at
        # the verification and after the swap, not by reading each file against itself
        unchanged = self.unchanged = unchanged_event_files(ctx, rp)
        # first every backup record, made durable by one fsync (the last record's), then every
        # blob linked or copied in. A record precedes its blob on disk as it did with an fsync each
        # (three fsyncs a file, journal, blob folder and pin folder, were half of a profile-heavy
        # run's reduce): a power cut can never leave a blob, a second name of a live original,
        # that no record names for the rollback
        backups = self.backups
        # each stage record too (its temp's name is the op id's and the file's index): made durable
        # by that same fsync, not one of its own before the temp is written (a journal fsync cost
        # 5-28 ms, a tenth of a 20 MB run's fixed cost: #28 item 3)
        staging = [a for a in originals if a.kind in ("compress", "rewrite")]
        for n, a in enumerate(originals, 1):
            cancel.check()
            p = ctx.abs(a.path)
            no_symlink(ctx, a.path)
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                raise TransactionError(f"{a.path}: no longer a regular file (replaced by a symlink?)")
            sha = sha256_file(p)
            rec = {"type": "backup", "path": a.path, "sha256": sha, "size": st.st_size,
                   "mode": st.st_mode & 0o7777, "mtime": st.st_mtime, "mtime_ns": st.st_mtime_ns, "action": a.kind,
                   "uid": st.st_uid, "gid": st.st_gid,  # the owner: root gives it back (review R14 F5)
                   **inode_fields(st, a.links)}  # its other names, if any: the restore links them again (R17 F4)
            append_record(journal, rec, sync=n == len(originals) and not staging)
            faults.hit("reduce.backup_record")
            backups[a.path] = rec
            done += a.bytes_before
            report("backup", 0.2 * done / total)
        for i, a in enumerate(staging):
            append_record(journal, stage_record(ctx, journal.op_id, i, a), sync=i == len(staging) - 1)
        done = 0
        for a in originals:
            cancel.check()
            p, rec = ctx.abs(a.path), backups[a.path]
            # a hard link needs no data blocks; a copy needs the whole file
            link = self.strategy.link_backups
            with writing(vault.blob_path(rec["sha256"]), 0 if link and vault.same_filesystem(p) else rec["size"]):
                # pinned: no purge or compaction anywhere takes it. The blob's and the pin's folders
                # are synced once each before the swap (``sync_pinned``), not once a file: nothing is
                # destroyed before it, and the records name every blob for a rollback meanwhile
                vault.store(p, rec["sha256"], pin=journal.op_id, sync=False, link=link)
            done += a.bytes_before
            report("backup", 0.2 + 0.2 * done / total)
        # markers below are made durable by the next fsynced record (the swap's), which every
        # destructive step waits on: an fsync each was a fifth of a small run's reduce
        append_record(journal, {"type": "backed_up", "count": len(backups),
                          **({"unchanged": unchanged} if unchanged is not None else {})}, sync=False)

    def stage(self, report: txn.Report) -> None:
        """Each new file under a name no reader matches, after its ``stage`` record."""
        ctx, journal, cancel, originals, backups = self.ctx, self.jnl, self.cancel, self.originals, self.backups
        staged = self.staged
        # a rewrite reads the run through TensorBoard's readers to choose what it keeps: their scratch
        # space is in the vault too, so a killed process's is swept at the next start
        scratch.use_root(ctx.vault.tmp)
        for i, a in enumerate(x for x in originals if x.kind in ("compress", "rewrite")):
            cancel.check()
            src = ctx.abs(a.path)
            final_rel = a.new_path or a.path
            tmp = ctx.abs(stage_record(ctx, journal.op_id, i, a)["tmp"])  # its record is durable (``backup``)
            faults.hit("reduce.stage_record")
            # a rewrite is never bigger than its original; a compressed copy neither, nearly
            with writing(tmp, a.bytes_before):
                try:
                    info = stage_file(a, src, tmp, backups[a.path]["sha256"], self.original)
                except Exception as e:
                    # a transform that fails on a file written since its backup says so in its own
                    # words (a record changed, a sha256 differs): the code says it for all of them
                    if not isinstance(e, (NoSpace, Cancelled)) and not is_no_space(e) \
                            and changed_since_backup(ctx, a.path, backups[a.path]):
                        raise TransactionError(f"{a.path}: changed during the reduction (is the run still being "
                                               f"written?): {reason_of(e)}", Failure.CHANGED_SINCE_BACKUP) from e
                    raise
            # the file that takes the original's place has its owner (root reducing a user's run) and
            # its permission bits: a private event file stays private (neither changes bytes nor mtime)
            try:
                ident = take_over(tmp, backups[a.path])
            except StagedReplaced as e:  # nothing given to a file not ours; the run rolls back as it was
                raise TransactionError(f"{a.path}: its staged file {os.path.relpath(tmp, ctx.logdir)}: {reason_of(e)}",
                                       Failure.REFUSED) from e
            # its inode: the swap renames this file, never one put at its name during the verification
            staged.append({"tmp": os.path.relpath(tmp, ctx.logdir), "final": final_rel, "src": a.path, **info,
                           "ident": list(ident)})
            # no fsync of its own: the swap record's fsync makes it durable before anything in place
            # is replaced, and without it recovery rolls back by the durable stage record, which
            # names the temp file (the final name exists only after the swap)
            append_record(journal, {"type": "staged", **staged[-1]}, sync=False)
            report("stage", 0.4 + 0.2 * (i + 1) / max(1, len(originals)))

    def transform(self, report: txn.Report) -> None:
        """Nothing on a disk: each staged file is already beside its original, where the swap
        takes it from."""

    def verify(self, report: txn.Report) -> None:
        """TensorBoard's readers, original view vs reduced view; the ``verified`` record. A cancel
        or the run's timeout is looked at inside the readers' work (``stop_of``): they end within a
        moment and the step raises ``Cancelled``, as the driver's own check between steps does."""
        ctx, rp, journal = self.ctx, self.rp, self.jnl
        scratch_space(ctx, journal.op_id)
        report("verify", 0.65)
        if self.unchanged is not None:
            verification = verify_unchanged(ctx, rp, self.backups, self.staged, self.unchanged)
        else:
            try:
                verification = verify_run(ctx, rp, journal.op_id, self.backups, self.staged, self.original,
                                          should_stop=stop_of(self.cancel))
            except Stopped:
                self.cancel.check()  # Cancelled: "cancelled" or "timed out before the commit point"
                raise  # not reached: only the cancel stops a verification
        self.verification = verification
        append_record(journal, {"type": "verified", "ok": verification["ok"], "verification": verification}, sync=False)

    def last_look(self) -> None:
        """The verification passed, and nothing changed since the backup (an appending writer, a
        user edit) nor opened a file for writing since the plan."""
        ctx, verification = self.ctx, self.verification
        self.out.verification = verification
        if not verification["ok"]:
            raise TransactionError("verification failed: " + "; ".join(verification.get("failed", [])))
        for path, rec in self.backups.items():
            if changed_since_backup(ctx, path, rec) or not ctx.vault.check_blob(rec["sha256"]):
                # a state folder moved away meanwhile takes the vault in it along, and the blob was
                # read through whatever stands at its name now: that is what happened (StateMoved)
                self.jnl.check_state()
                raise TransactionError(f"{path}: changed during the reduction (is the run still being written?)",
                                       Failure.CHANGED_SINCE_BACKUP)
        # a writer that opened a file since the plan: its next records would land in the backup
        # (salvaged at a later start), so the run is left alone instead
        check_writers(ctx, self.rp)

    def record(self, step: str) -> None:
        """The swap record (the commit point), or the rollback record."""
        ctx, journal = self.ctx, self.jnl
        if step != "swap":
            append_rollback(journal, self.reason)
            return
        vault = ctx.vault
        # the journal recovery would read must hold every record so far before anything is replaced
        # (one read of a file just written: page cache): other lines at its name leave the run as it was
        own_records(journal)
        # the backups and their pins durable (each folder once), then the swap record's fsync the journal
        vault.sync_pinned(journal.op_id)
        # A compressing reduce notes its compaction first: from the swap on a kill leaves the run
        # committed (or rolled forward) with that note, which the next start finishes; noted after
        # the commit, a kill in between left the backups plain for good
        if vault.compacts:
            note_before_swap(ctx, journal.op_id, list(dict.fromkeys(r["sha256"] for r in self.backups.values())))
        # the removed folders' mode and mtime from before any change, so a swap finished by recovery
        # after a kill between two unlinks journals these, not the times its unlinks left (R14 F1)
        self.removed_dirs = removed_dirs_before(ctx, self.rp)
        append_record(journal, {"type": "swap", "dirs": self.removed_dirs})

    def swap(self, report: txn.Report) -> None:
        """Each staged file put over its original (the strategy's way), the removed ones
        unlinked; ``swapped``."""
        apply_swap(self.ctx, self.rp, self.jnl, self.staged, self.backups, self.removed_dirs, self.strategy)
        append_record(self.jnl, {"type": "swapped"}, sync=False)

    def commit(self, report: txn.Report) -> None:
        """The manifest, the commit record, the journal closed and the pins released."""
        ctx, rp, out, journal, backups, staged = self.ctx, self.rp, self.out, self.jnl, self.backups, self.staged
        vault = ctx.vault
        if self.unchanged is not None:
            # the proof of an untouched run is that its event files are the bytes hashed under the
            # lock: a change since (a writer, a user's edit) rolls the run back before the commit
            changed = changed_files(ctx, self.unchanged)
            if changed:
                raise TransactionError(f"{changed[0]}: changed during the reduction (its sha256 is no longer the one "
                                       "hashed before it); the run is left as it was", Failure.CHANGED_SINCE_BACKUP)
        out.removed_files = sorted(backups)
        out.created_files = [s["final"] for s in staged]
        out.bytes_after = (rp.bytes_before - sum(b["size"] for b in backups.values())
                           + sum(s["size"] for s in staged))
        write_manifest(ctx, own_records(journal), "verified", None)
        # the manifest is durable: the commit record and the journal's removal need no fsync (a
        # journal a power cut brings back is settled by recovery, which finds the manifest)
        append_record(journal, {"type": "commit"}, sync=False)
        faults.hit("reduce.commit")
        journal.close(durable=False)
        vault.unpin(journal.op_id)  # its manifest, durable, names every backup now
        # the manifest holds the whole record now: a batch keeps only what the outcome shows of it
        # (its series, summaries and views would grow with the runs of the batch)
        out.verification = verification_summary(self.verification)
        report("done", 1.0)
        self.unwind()
        out.status = Outcome.VERIFIED

    def journaled(self) -> bool:
        """A rollback to record: a journal of ours, not lost, not past its commit record."""
        return self.jnl is not None and self.gone is None and not self.commit_seen

    def committed(self) -> bool:
        return self.commit_seen

    def failed(self, error: BaseException) -> None:
        """Why, in the words and codes the outcome and the history show, and what the journal says."""
        e, journal = error, self.jnl
        reason = reason_of(e)
        code = failure_code(e)  # a failure the step named (a file changed since its backup) as every engine says it
        interrupted = self.cancel.cancelled  # the batch's cancel (Ctrl-C, the tab's Cancel), not a timeout
        if interrupted:
            # whatever the step under way then said is the interrupt's consequence (a helper
            # process it stopped, a read cut short), never a finding about the policy: said
            # and recorded (manifest, history) as what the single-job path says
            reason, code = CANCELLED_REASON, Failure.INTERRUPTED
        gone = e if isinstance(e, JournalGone) else None
        records: List[dict] = []
        if journal is not None and gone is None:
            try:
                records = own_records(journal)
            except JournalGone as g:
                gone = g
        self.error, self.reason, self.code, self.interrupted, self.gone = e, reason, code, interrupted, gone
        self.commit_seen = any(r["type"] == "commit" for r in records)

    def rollback(self, committed: bool) -> None:
        """Back to the exact original bytes; or, with no journal, lost, or past the commit
        record, the outcome that says so."""
        ctx, out, journal, reason, code = self.ctx, self.out, self.jnl, self.reason, self.code
        if journal is None:
            out.status, out.reason, out.code = Outcome.FAILED, reason, code
            return
        if self.gone is not None:
            self.jnl = None  # never removed: whatever stands at its path now is not ours to unlink
            journal_gone(ctx, journal, self.gone, reason, out)
            return
        if committed:
            out.status = Outcome.VERIFIED  # past the commit point: the reduction stands
            self.jnl = None
            journal.close()
            ctx.vault.unpin(journal.op_id)
            return
        self.rolling = True
        e = self.error
        skip = isinstance(e, TransactionError) and isinstance(e.code, Skip) and not self.interrupted
        # the manifest and the history line carry the code the outcome says
        unsettled: List[str] = []
        kept = rollback(ctx, own_records(journal), reason, journal, code=e.code if skip else code, unsettled=unsettled)
        ctx.vault.unpin(journal.op_id)  # the originals are back
        out.status, out.reason, out.code = Outcome.ROLLED_BACK, reason, code
        if skip:
            out.status, out.code = Outcome.SKIPPED, e.code  # nothing changed: left alone
        # its code is the cause: a folder left unsettled, an original a writer replaced (kept) are findings
        out.found(Finding.FOLDER_NOT_SETTLED, unsettled)
        out.found(Finding.ORIGINAL_NOT_IN_PLACE, kept)
        self.rolling, self.jnl = False, None  # rolled back: a failing close propagates, as it always did
        journal.close()

    def incomplete(self, error: BaseException) -> None:
        """A rollback (its record included) that did not finish: the journal stays, recovery will
        try again; a journal lost meanwhile is said so. A failure outside the rollback itself (an
        outcome past the commit record, a lost journal's settling) propagates, as it always did."""
        if not (self.rolling or self.journaled()):
            raise error
        ctx, out, journal, reason = self.ctx, self.out, self.jnl, self.reason
        self.jnl = None
        if isinstance(error, JournalGone):  # lost during the rollback itself
            journal_gone(ctx, journal, error, reason, out)
            return
        out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
        out.reason = rollback_incomplete_reason(reason, reason_of(error))

    def unwind(self) -> None:
        """The Rust reader of the original run, closed whatever happened."""
        while self.handover:
            self.handover.pop(0).close()

    def end(self) -> None:
        self.lock.release()
        self.out.duration_s = round(time.monotonic() - self.t0, 3)
