"""One run, all or nothing: journal → back up → stage → verify → swap → commit, or roll back.

Every destructive step is preceded by its fsynced journal record. Until the swap starts the
user's files are untouched (backups are hard links or verified copies; new files carry
temporary names no reader matches), so a failure or a crash before it leaves the run exactly
as it was. The swap starts only after verification passed and is recorded; a crash inside it
is finished on recovery (every step is idempotent), or rolled back if anything no longer
checks out. The same ``swap.rollback``/``swap.roll_forward`` code serves failures in process
and recovery after a crash (``recovery``). The steps are ``LocalReduce``'s methods, run in the
order of ``engine.txn.STEPS`` by the one driver ``engine.txn.run`` (as a bucket's ``ObjectReduce``).

Why one module: the reduce transaction is one sequence of steps
(journal, back up, stage, verify, swap, commit) whose journal records and rollback must match one
for one; kept together, each step's record and its undo are read side by side.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil  # noqa: F401  (tests patch transaction.shutil.disk_usage: the free-space check)
import stat
import time
from typing import Dict, List, Optional

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Skip
from tb_footprint_plugin.engine import faults, trust, txn
from tb_footprint_plugin.engine.catalogue import unsettled_op, write_manifest
from tb_footprint_plugin.engine.checks import compare_views
from tb_footprint_plugin.engine.compactor import note_before_swap
from tb_footprint_plugin.engine.context import (
    Cancelled,
    CancelToken,
    Context,
    Progress,
    RunOutcome,
    NoSpace,
    TransactionError,
    check_space,
    is_no_space,
    new_op_id,
    no_symlink,
    reason_of,
    writing,
)
from tb_footprint_plugin.engine.history import changes_since
from tb_footprint_plugin.engine.journal import Journal, JournalGone, RunLocked, StateMoved
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.engine.run_lock import lock_failure, run_lock
from tb_footprint_plugin.engine.recovery import recover
from tb_footprint_plugin.engine.swap import (apply_swap, folder_times, kept_folders, new_put_back_token, removed_dirs_before,
                                             rollback)
from tb_footprint_plugin.plan.model import RunPlan
from tb_footprint_plugin.plan.planner import active_reason, newest_write
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import fsync_dir, give_owner, matches, recorded_owner, sha256_file
from tb_footprint_plugin.storage.openfiles import describe_holders, files_under, find_writers
from tb_footprint_plugin.storage.paths import is_within, real_within
from tb_footprint_plugin.storage.private import is_ours
from tb_footprint_plugin.storage.regular import kind_of


# ---------------------------------------------------------------------------------------
# preflight: refuse before anything is written
# ---------------------------------------------------------------------------------------
def _preflight(ctx: Context, rp: RunPlan) -> None:
    run_dir = ctx.abs(rp.run)
    _changed_by_other(ctx, rp)
    if not real_within(run_dir, ctx.logdir) or os.path.islink(run_dir):
        raise TransactionError(f"run {rp.run!r} is a symlink or leads out of the logdir; left alone")
    mtimes = []
    for root, dirs, files in os.walk(run_dir, followlinks=False):
        dirs[:] = [d for d in dirs if os.path.join(root, d) != ctx.state]
        for n in files:
            p = os.path.join(root, n)
            with contextlib.suppress(OSError):
                st = fsops.lstat(p)
                if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):  # as the scan counts them
                    mtimes.append((os.path.relpath(p, ctx.logdir).replace(os.sep, "/"), st.st_mtime))
    # verification reads every event file of the run: one it cannot read is named up front
    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else ():
        p = os.path.join(run_dir, name)
        if cat.is_event_file_name(name) and os.path.isfile(p) and not os.access(p, os.R_OK):
            raise TransactionError(f"{os.path.relpath(p, ctx.logdir)}: not readable (permission denied); the run "
                                   "cannot be verified without it, nothing was changed", Failure.REFUSED)
    active = active_reason(newest_write(mtimes, ctx.closed_files), ctx.quiet_period, time.time())
    if active:
        raise TransactionError(f"run {rp.run!r} is {active}", Skip.ACTIVE)
    need_logdir = 0
    need_vault = 0
    for a in rp.actions:
        p = ctx.abs(a.path)
        if not is_within(p, ctx.logdir) or not real_within(os.path.dirname(p), ctx.logdir):
            raise TransactionError(f"{a.path}: leads out of the logdir; refusing")
        no_symlink(ctx, a.path)
        if a.new_path and a.new_path != a.path and os.path.lexists(ctx.abs(a.new_path)):
            raise TransactionError(f"{a.new_path}: already exists; it would be overwritten")
        if a.kind == "remove_dir":
            continue
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            raise TransactionError(f"{a.path}: no longer exists (scan is stale); rescan and plan again",
                                   Failure.REFUSED) from None
        if not stat.S_ISREG(st.st_mode):
            raise TransactionError(f"{a.path}: is {kind_of(st.st_mode)}, not a regular file; refusing",
                                   Skip.NOT_REGULAR)
        if st.st_size != a.bytes_before:
            raise TransactionError(f"{a.path}: changed since the scan ({a.bytes_before} → {st.st_size} bytes)")
        if not os.access(p, os.R_OK):
            raise TransactionError(f"{a.path}: not readable (permission denied)")
        d = os.path.dirname(p)
        if not os.access(d, os.W_OK | os.X_OK):
            raise TransactionError(f"{os.path.relpath(d, ctx.logdir)}: directory not writable (permission denied)")
        if a.kind in ("compress", "rewrite"):
            need_logdir += a.bytes_before if a.kind == "rewrite" else max(a.bytes_after * 2, 1 << 16)
        if not ctx.vault.same_filesystem(p):
            need_vault += a.bytes_before
    _check_space(ctx.logdir, need_logdir)
    os.makedirs(ctx.vault.root, exist_ok=True)
    _check_space(ctx.vault.root, need_vault)
    _check_writers(ctx, rp)


def _check_writers(ctx: Context, rp: RunPlan) -> None:
    """Leave the run alone while a process on this machine holds one of its files open for
    writing: its next records would go into the inode the swap takes away."""
    found = find_writers(files_under(ctx.abs(rp.run), exclude=[ctx.state, ctx.vault.root]))
    if found.holders:
        raise TransactionError(f"run {rp.run!r} is being written: "
                               + describe_holders(found.holders, lambda p: os.path.relpath(p, ctx.logdir))
                               + "; left alone", Skip.OPEN_FOR_WRITING)


def _changed_by_other(ctx: Context, rp: RunPlan) -> None:
    """Another operation on the run (another reducer, a restore) since this plan was made: say
    so plainly instead of finding its traces ('no longer exists', 'changed since the scan')."""
    if not rp.planned_at:
        return
    changed = (Outcome.VERIFIED, Outcome.RESTORED, Finding.LATE_WRITES_SALVAGED)  # not a rolled-back one
    later = changes_since(ctx.state, rp.run, rp.planned_at, changed)
    if later:
        e = later[-1]
        raise TransactionError(f"run {rp.run!r} was changed by another process since it was planned "
                               f"({e.get('kind')} {e['op_id']} by {e.get('user')}@{e.get('host')}); plan again",
                               Skip.CHANGED_BY_OTHER)




_check_space = check_space  # one rule, shared with restore (engine.context)


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
        out.status, out.reason, out.code = Outcome.SKIPPED, str(e), Skip.LOCKED
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
#: the reason of a run that failed once its batch was cancelled (``Failure.INTERRUPTED``)
INTERRUPTED_REASON = "interrupted before the commit point (the batch was cancelled)"


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


def _journal_gone(ctx: Context, journal: Journal, gone: JournalGone, reason: str, out: RunOutcome) -> None:
    """``out`` for a run whose journal cannot be read back (``JournalGone``), from what this
    process wrote to it (``Journal.written``). Committed: its manifest was durable before the
    commit record, the reduction stands. Otherwise, when the state folder is still the one the
    journal was made in and nothing stands at the journal's path, the journal is written again
    from those records (``_journal_again``) and the run is settled the normal way, rolled back:
    a lost journal must not leave the originals only in the vault, named by no manifest.

    When it cannot be written again (something stands at its path, the state folder moved or is
    not ours): before the swap record no original was touched, so the temp files it staged in
    the run are removed and the run is as it was (its backups, now extra names, stay pinned in
    the vault; ``status`` names the pins: ``Finding.PINS_UNSETTLED``). From the swap record on
    the run is reduced (verified first) or partly swapped: nothing is undone without a journal
    to record it, and the reason names where the backups are."""
    written = journal.written
    code = gone.code
    if any(r.get("type") == "commit" for r in written):
        out.status = Outcome.VERIFIED  # committed: its manifest was durable before the commit record
        with contextlib.suppress(OSError):
            ctx.vault.unpin(journal.op_id)  # the manifest names every backup now
        return
    again = _journal_again(ctx, journal, gone)
    if again is not None and _settle_again(ctx, again, gone, reason, out):
        return
    if isinstance(gone, StateMoved) and reason != str(gone):
        # what happened leads: a step's own failure since the move is its consequence (it read or
        # wrote through whatever stands at the state folder's name now)
        reason = f"{gone}; the step under way then failed: {reason}"
    moved = getattr(gone, "now_at", None)
    vault = ctx.vault.root
    if moved and is_within(vault, journal.state):  # the vault was in the moved folder: it went along
        vault = os.path.normpath(os.path.join(moved, os.path.relpath(vault, journal.state)))
    where = f"its backups are in {vault} (operation {journal.op_id})"
    if moved:
        where = f"its journal is in {os.path.join(moved, 'journal')}, " + where
    if not any(r.get("type") == "swap" for r in written):
        left = []
        for r in written:
            if r.get("type") != "stage" or not isinstance(r.get("tmp"), str):
                continue
            try:
                no_symlink(ctx, r["tmp"])
                fsops.unlink(ctx.abs(r["tmp"]))
            except FileNotFoundError:
                pass
            except (OSError, TransactionError):
                left.append(r["tmp"])
        out.status, out.code = Outcome.ROLLED_BACK, code
        out.reason = (f"{reason}; the run is as it was (nothing in it was replaced yet)"
                      + (f", temp files left: {', '.join(left)}" if left else "") + f"; {where}")
        if not reason.startswith(str(gone)):
            out.reason += f" ({gone})"
        return
    out.status, out.code = Outcome.FAILED, code
    out.reason = (f"{reason}; the run was swapped after its verification passed, but the operation cannot "
                  f"be committed or rolled back without its journal: {where}"
                  + (f" ({gone})" if not reason.startswith(str(gone)) else ""))


#: a journal written again is first written whole under this name in the journal folder (a
#: dot name: ``journal.pending_journals`` never lists it), then linked to the journal's own name
AGAIN_PREFIX = ".again-"


def _journal_again(ctx: Context, journal: Journal, gone: JournalGone) -> Optional[Journal]:
    """The operation's journal written again at its own path from every record this process
    wrote (``journal.written``, in order), or None when it may not be: the state folder moved
    (``StateMoved``, or ``state_moved()`` now), the state or journal folder is not a real folder
    of ours, or anything stands at the journal's path (another file, a link: never ours to
    replace). Made as ``Journal.create`` makes one, but whole: every record is written to a
    temp journal (``Journal.create`` + ``append``, the last one fsynced) and only then linked
    into place (fails if the name is taken), so a kill at any instant leaves either no journal
    or all of it — a prefix without its swap record would be rolled back by recovery as if no
    original had been replaced."""
    written = journal.written
    if isinstance(gone, StateMoved) or gone.code != Failure.JOURNAL_GONE or journal.state_moved():
        return None
    if not written or written[0].get("type") != "begin" or written[0].get("op_id") != journal.op_id:
        return None
    folder = os.path.dirname(journal.path)
    try:
        if not is_ours(os.lstat(journal.state)):
            return None
        try:
            if not is_ours(os.lstat(folder)):
                return None  # a link or a stranger's folder there: not set aside by us now
        except FileNotFoundError:
            pass  # the whole journal folder went: made again, as any journal's is
        if os.path.lexists(journal.path):
            return None
    except OSError:
        return None
    staged: Optional[Journal] = None
    try:
        staged = Journal.create(folder, AGAIN_PREFIX + journal.op_id, written[0])
        if staged.state_identity != journal.state_identity:
            return None  # the state folder changed meanwhile: nothing is linked into it
        rest = written[1:]
        for n, r in enumerate(rest, 1):
            staged.append(r, sync=n == len(rest))  # one fsync: the whole file before its link
        os.link(staged.path, journal.path)  # FileExistsError: something came to stand there
    except OSError:  # NotPrivate is one
        return None
    finally:
        if staged is not None:
            with contextlib.suppress(OSError):
                os.unlink(staged.path)
    again = Journal(journal.path)
    again.identity, again.state_identity = staged.identity, staged.state_identity
    again.written = list(staged.written)
    with contextlib.suppress(OSError):
        # the link's name made durable; lost to a power cut, the run is as this process left it
        # and the rollback's manifest below (durable) says how it ended
        fsync_dir(folder)
    return again


def _settle_again(ctx: Context, journal: Journal, gone: JournalGone, reason: str, out: RunOutcome) -> bool:
    """Settle the run through ``journal``, written again after ``gone``: rolled back as any
    failure before the commit is (its manifest says so, its pins go, its journal is closed).
    False when the journal is lost again (the caller says so as without it); a rollback that
    fails otherwise leaves the journal for recovery."""
    reason = (f"{reason}; its journal {journal.path} was gone and was written again from the records this "
              f"process wrote to it")
    try:
        _append_rollback(journal, reason)
        rollback(ctx, own_records(journal), reason, journal)
        ctx.vault.unpin(journal.op_id)  # the originals are back
    except JournalGone:
        return False
    except Exception as e2:  # the journal stays: recovery will try again
        out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
        out.reason = f"{reason}; rollback incomplete ({reason_of(e2)}), will be retried on next start"
        return True
    out.status, out.code, out.reason = Outcome.ROLLED_BACK, gone.code, f"{reason}; the run is as it was"
    journal.close()
    return True


def own_records(journal: Journal) -> List[dict]:
    """``journal.records()``, but ``JournalGone`` unless they are this operation's: its begin
    record first and at least every record this process wrote. A file written at the journal's
    path after it was removed may get the removed journal's inode number back and pass the
    ``(st_dev, st_ino)`` check; its lines are not this operation's (before: 'list index out of
    range', the rollback left incomplete)."""
    records = journal.records()
    first = records[0] if records else {}
    if first.get("type") != "begin" or first.get("op_id") != journal.op_id or len(records) < len(journal.written):
        raise JournalGone(journal.path, "no longer holds this operation's records (another file, or other content, "
                          "stands at its name)")
    return records


def _append(journal: Journal, record: dict, sync: bool = True) -> None:
    """Append a journal record; on a full disk ``NoSpace`` names the journal and the line's size,
    and a line the disk took only part of is cut off again (the next record must start a line).
    ``sync=False`` for markers no destructive step waits on (``Journal.append``)."""
    with writing(journal.path, len(json.dumps(record, sort_keys=True)) + 64):
        with trust.undo_partial_append(journal.path):
            journal.append(record, sync=sync)


def _create_journal(ctx: Context, op_id: str, begin: dict) -> Journal:
    """The operation's journal with its begin record; on a full disk none is left behind (an
    empty journal is no operation) and ``NoSpace`` names it."""
    path = os.path.join(ctx.journal_dir, f"{op_id}.jsonl")
    try:
        with writing(path, len(json.dumps(begin, sort_keys=True)) + 64):
            return Journal.create(ctx.journal_dir, op_id, begin)
    except NoSpace:
        with contextlib.suppress(OSError):
            if os.path.getsize(path) == 0:
                os.unlink(path)
        raise


def _append_rollback(journal: Journal, reason: str) -> None:
    """Record the rollback (never rolled forward after it). Before the swap record it is not
    needed — recovery rolls such a journal back anyway — so a full disk that refuses it does not
    stop the rollback in process; after the swap record it does (recovery settles the run)."""
    try:
        _append(journal, {"type": "rollback", "reason": reason})
    except NoSpace:
        if any(r["type"] == "swap" for r in journal.written):
            raise


def _original_of(ctx: Context, rp: RunPlan):
    """For a big run whose event files are rewritten: the one Rust load of its original for
    this reduce, started before the backup (in its own process: it loads while the backup and
    the rewrite's selection pass run), and what that pass learns of the original, both handed
    to the verification (``verify.original``)."""
    from tb_footprint_plugin.transforms import transform_of
    from tb_footprint_plugin.verify import dashboard
    from tb_footprint_plugin.verify.original import OriginalRun

    if "rust" not in ctx.verify_backends:
        return None
    if not any(a.kind == "rewrite" and transform_of(a) == "event_rewrite" for a in rp.actions):
        return None
    run_dir = ctx.abs(rp.run)
    if dashboard.event_bytes(run_dir) <= dashboard.FULL_READ_BYTES:
        return None  # small runs are read in full by both backends: nothing to share
    scratch.use_root(ctx.vault.tmp)
    return OriginalRun(run_dir).start_reader()


class LocalReduce(txn.Txn):
    """The steps of one run's reduce on a disk for ``engine.txn.run`` (the module doc):

    - **journal**: the preflight (a refusal is a skip or a failure with nothing to undo), the
      logdir's identity bound, the begin record;
    - **backup**: every backup record (one fsync, the last's), then every blob linked or copied
      in, pinned; ``backed_up``;
    - **stage**: each new file under a temporary name beside its original, after its ``stage``
      record (failpoint ``reduce.stage_record`` between them), then ``staged``;
    - **transform**: nothing on a disk (the staged file is where the swap renames it from);
    - **verify**: TensorBoard's readers over the original and reduced views, ``verified``;
    - the **last look**: the verification passed, nothing changed since its backup, no writer
      opened a file since the plan; then the swap record (the commit point, the driver's) after
      the journal is read back as ours, the pins synced and a compaction noted;
    - **swap**: ``apply_swap``, ``swapped``; **commit**: the manifest, the commit record
      (failpoint ``reduce.commit`` between it and the journal's close), the pins released.

    A failure is classified as it always was (``failed``): past the commit record the reduction
    stands; a journal lost is said so and never removed; else the run is rolled back to its
    exact original bytes after its ``rollback`` record. Every failure is rolled back, an
    injected one too (``injected_is_crash`` False)."""

    errors = (Exception,)
    rollback_errors = (Exception,)
    injected_is_crash = False

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

    def failpoint(self, step: str) -> Optional[str]:
        """``reduce.commit`` is hit inside the commit step, between the commit record and the
        journal's close (where the crash matrix has always fired it)."""
        return None if step == "commit" else super().failpoint(step)

    def journal(self, report: txn.Report) -> None:
        """The preflight, then the begin record (``NotStarted`` when the preflight refuses)."""
        ctx, rp, out = self.ctx, self.rp, self.out
        try:
            _preflight(ctx, rp)
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
            "verify_backends": list(ctx.verify_backends),
            "dir_times": folder_times(ctx, kept_folders(rp)),  # before anything is staged in them
            # a rollback's put-backs name their temps by it: a killed one's are removed, exactly those
            "tmp_token": new_put_back_token(),
        }
        self.jnl = _create_journal(ctx, op_id, begin)

    def backup(self, report: txn.Report) -> None:
        """Every original that will be removed or replaced, into the vault after its record."""
        ctx, rp, journal, cancel = self.ctx, self.rp, self.jnl, self.cancel
        vault = ctx.vault
        # a big run's Rust load starts now and runs during the backup and the selection pass
        self.original = _original_of(ctx, rp)
        if self.original is not None:
            self.handover.append(self.original)  # closed by ``unwind``, whatever happens next
        originals = self.originals
        total = sum(a.bytes_before for a in originals) or 1
        done = 0
        # a run whose event files this reduce neither replaces nor removes (profile data only): its
        # event data is proven the same by identity, hashed now under the run's lock and again at
        # the verification and after the swap, not by reading each file against itself
        unchanged = self.unchanged = _unchanged_event_files(ctx, rp)
        # first every backup record, made durable by one fsync (the last record's), then every
        # blob linked or copied in. A record precedes its blob on disk as it did with an fsync each
        # (three fsyncs a file, journal, blob folder and pin folder, were half of a profile-heavy
        # run's reduce): a power cut can never leave a blob, a second name of a live original,
        # that no record names for the rollback
        backups = self.backups
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
                   "uid": st.st_uid, "gid": st.st_gid}  # the owner: root gives it back (review R14 F5)
            _append(journal, rec, sync=n == len(originals))
            faults.hit("reduce.backup_record")
            backups[a.path] = rec
            done += a.bytes_before
            report("backup", 0.2 * done / total)
        done = 0
        for a in originals:
            cancel.check()
            p, rec = ctx.abs(a.path), backups[a.path]
            # a hard link needs no data blocks; a copy to another filesystem needs the whole file
            with writing(vault.blob_path(rec["sha256"]), 0 if vault.same_filesystem(p) else rec["size"]):
                # pinned: no purge or compaction anywhere takes it. The blob's and the pin's folders
                # are synced once each before the swap (``sync_pinned``), not once a file: nothing is
                # destroyed before it, and the records name every blob for a rollback meanwhile
                vault.store(p, rec["sha256"], pin=journal.op_id, sync=False)
            done += a.bytes_before
            report("backup", 0.2 + 0.2 * done / total)
        # markers below are made durable by the next fsynced record (the swap's), which every
        # destructive step waits on: an fsync each was a fifth of a small run's reduce
        _append(journal, {"type": "backed_up", "count": len(backups),
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
            tmp = os.path.join(os.path.dirname(src), f".footprint-{journal.op_id}-{i}.tmp")
            _append(journal, {"type": "stage", "tmp": os.path.relpath(tmp, ctx.logdir), "final": final_rel,
                              "src": a.path})
            faults.hit("reduce.stage_record")
            # a rewrite is never bigger than its original; a compressed copy neither, nearly
            with writing(tmp, a.bytes_before):
                try:
                    info = stage_file(a, src, tmp, backups[a.path]["sha256"], self.original)
                except Exception as e:
                    # a transform that fails on a file written since its backup says so in its own
                    # words (a record changed, a sha256 differs): the code says it for all of them
                    if not isinstance(e, (NoSpace, Cancelled)) and not is_no_space(e) \
                            and _changed_since_backup(ctx, a.path, backups[a.path]):
                        raise TransactionError(f"{a.path}: changed during the reduction (is the run still being "
                                               f"written?): {reason_of(e)}", Failure.CHANGED_SINCE_BACKUP) from e
                    raise
            # root reducing a user's run: the file that takes the original's place stays theirs
            # (through its fd, never a link; a chown changes neither its bytes nor its mtime)
            owner = recorded_owner(backups[a.path])
            if owner is not None and os.geteuid() == 0:
                fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                try:
                    give_owner(fd, owner)
                finally:
                    os.close(fd)
            staged.append({"tmp": os.path.relpath(tmp, ctx.logdir), "final": final_rel, "src": a.path, **info})
            # no fsync of its own: the swap record's fsync makes it durable before anything in place
            # is replaced, and without it recovery rolls back by the durable stage record, which
            # names the temp file (the final name exists only after the swap)
            _append(journal, {"type": "staged", **staged[-1]}, sync=False)
            report("stage", 0.4 + 0.2 * (i + 1) / max(1, len(originals)))

    def transform(self, report: txn.Report) -> None:
        """Nothing on a disk: each staged file is already beside its original, where the swap
        renames it from."""

    def verify(self, report: txn.Report) -> None:
        """TensorBoard's readers, original view vs reduced view; the ``verified`` record."""
        ctx, rp, journal = self.ctx, self.rp, self.jnl
        _scratch_space(ctx, journal.op_id)
        report("verify", 0.65)
        if self.unchanged is not None:
            verification = _verify_unchanged(ctx, rp, self.backups, self.staged, self.unchanged)
        else:
            verification = _verify(ctx, rp, journal.op_id, self.backups, self.staged, self.original)
        self.verification = verification
        _append(journal, {"type": "verified", "ok": verification["ok"], "verification": verification}, sync=False)

    def last_look(self) -> None:
        """The verification passed, and nothing changed since the backup (an appending writer, a
        user edit) nor opened a file for writing since the plan."""
        ctx, verification = self.ctx, self.verification
        self.out.verification = verification
        if not verification["ok"]:
            raise TransactionError("verification failed: " + "; ".join(verification.get("failed", [])))
        for path, rec in self.backups.items():
            if _changed_since_backup(ctx, path, rec) or not ctx.vault.check_blob(rec["sha256"]):
                # a state folder moved away meanwhile takes the vault in it along, and the blob was
                # read through whatever stands at its name now: that is what happened (StateMoved)
                self.jnl.check_state()
                raise TransactionError(f"{path}: changed during the reduction (is the run still being written?)",
                                       Failure.CHANGED_SINCE_BACKUP)
        # a writer that opened a file since the plan: its next records would land in the backup
        # (salvaged at a later start), so the run is left alone instead
        _check_writers(ctx, self.rp)

    def record(self, step: str) -> None:
        """The swap record (the commit point), or the rollback record."""
        ctx, journal = self.ctx, self.jnl
        if step != "swap":
            _append_rollback(journal, self.reason)
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
        _append(journal, {"type": "swap", "dirs": self.removed_dirs})

    def swap(self, report: txn.Report) -> None:
        """Each staged file renamed over its original, the removed ones unlinked; ``swapped``."""
        apply_swap(self.ctx, self.rp, self.jnl, self.staged, self.backups, self.removed_dirs)
        _append(self.jnl, {"type": "swapped"}, sync=False)

    def commit(self, report: txn.Report) -> None:
        """The manifest, the commit record, the journal closed and the pins released."""
        ctx, rp, out, journal, backups, staged = self.ctx, self.rp, self.out, self.jnl, self.backups, self.staged
        vault = ctx.vault
        if self.unchanged is not None:
            # the proof of an untouched run is that its event files are the bytes hashed under the
            # lock: a change since (a writer, a user's edit) rolls the run back before the commit
            changed = _changed_files(ctx, self.unchanged)
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
        _append(journal, {"type": "commit"}, sync=False)
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
        code = Failure.NO_SPACE if isinstance(e, NoSpace) or is_no_space(e) else Failure.ERROR
        if isinstance(e, TransactionError) and isinstance(e.code, Failure):
            code = e.code  # a failure the step named (a file changed since its backup): as the bucket engine says it
        interrupted = self.cancel.cancelled  # the batch's cancel (Ctrl-C, the tab's Cancel), not a timeout
        if interrupted:
            # whatever the step under way then said is the interrupt's consequence (a helper
            # process it stopped, a read cut short), never a finding about the policy: said
            # and recorded (manifest, history) as what the single-job path says
            reason, code = INTERRUPTED_REASON, Failure.INTERRUPTED
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
            _journal_gone(ctx, journal, self.gone, reason, out)
            return
        if committed:
            out.status = Outcome.VERIFIED  # past the commit point: the reduction stands
            self.jnl = None
            journal.close()
            ctx.vault.unpin(journal.op_id)
            return
        self.rolling = True
        rollback(ctx, own_records(journal), reason, journal)
        ctx.vault.unpin(journal.op_id)  # the originals are back
        out.status, out.reason, out.code = Outcome.ROLLED_BACK, reason, code
        e = self.error
        if isinstance(e, TransactionError) and isinstance(e.code, Skip) and not self.interrupted:
            out.status, out.code = Outcome.SKIPPED, e.code  # nothing changed: left alone
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
            _journal_gone(ctx, journal, error, reason, out)
            return
        out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
        out.reason = f"{reason}; rollback incomplete ({reason_of(error)}), will be retried on next start"

    def unwind(self) -> None:
        """The Rust reader of the original run, closed whatever happened."""
        while self.handover:
            self.handover.pop(0).close()

    def end(self) -> None:
        self.lock.release()
        self.out.duration_s = round(time.monotonic() - self.t0, 3)


#: what an outcome keeps of a committed run's verification (the manifest keeps all of it)
SUMMARY_KEYS = ("ok", "checks", "failed", "backends", "mode", "unchanged", "expectations", "record_substitutes",
                "duration_s")


def verification_summary(verification: dict) -> dict:
    """The part of a verification record an outcome shows: verdict, check lines, contract."""
    return {k: verification[k] for k in SUMMARY_KEYS if k in verification}


#: what the verification's scratch views and readers write at least (symlinks, the Python
#: reader's answer): below it a full disk would read as a failed verification
VERIFY_SCRATCH_BYTES = 1 << 20


def _scratch_space(ctx: Context, op_id: str) -> None:
    """``NoSpace`` naming the verification's scratch folder when the vault's filesystem has less
    than ``VERIFY_SCRATCH_BYTES`` free: said as a full disk, not as a difference the readers saw."""
    try:
        free = shutil.disk_usage(ctx.vault.tmp).free
    except OSError:
        return  # the verification names what it cannot do
    if free < VERIFY_SCRATCH_BYTES:
        raise NoSpace(os.path.join(ctx.vault.tmp, op_id), VERIFY_SCRATCH_BYTES - free,
                      OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))


def _changed_since_backup(ctx: Context, path: str, rec: dict) -> bool:
    """Whether the file at ``path`` is no longer the size and mtime its backup record says
    (gone counts as changed): a writer appended to it or a user edited it."""
    try:
        st = os.lstat(ctx.abs(path))
    except FileNotFoundError:
        return True
    return st.st_size != rec["size"] or st.st_mtime != rec["mtime"]


def stage_file(action, src: str, tmp: str, sha: str, original=None) -> dict:
    """Produce the new file of a compress or rewrite ``action`` at ``tmp`` from ``src`` (whose
    sha256 as backed up is ``sha``) and check it; the engines on disk and on buckets share it.

    Returns at least ``size`` and ``sha256`` of ``tmp`` (a rewrite adds its removal counts and
    expectations). Raises when the file cannot be produced safely (a compress whose source no
    longer hashes to ``sha`` with ``Failure.CHANGED_SINCE_BACKUP``). ``original``: what a big run's
    rewrite hands to its verification (``verify.original.OriginalRun``)."""
    if action.kind == "compress":
        from tb_footprint_plugin.transforms.gzip_trace import gunzip_sha256, gzip_file

        got = gzip_file(src, tmp)
        if got != sha:
            raise TransactionError(f"{action.path}: changed while compressing", Failure.CHANGED_SINCE_BACKUP)
        if gunzip_sha256(tmp) != sha:
            raise TransactionError(f"{action.path}: compressed copy does not decompress to the original")
        return {"size": os.lstat(tmp).st_size, "sha256": sha256_file(tmp), "content_sha256": sha}
    if action.kind == "rewrite":
        from tb_footprint_plugin.transforms import stage_rewrite

        return stage_rewrite(action, src, tmp, sha, original)
    raise TransactionError(f"unknown action {action.kind}")


# ---------------------------------------------------------------------------------------
# verification
# ---------------------------------------------------------------------------------------
def _verify(ctx: Context, rp: RunPlan, op_id: str, backups: Dict[str, dict], staged: List[dict],
            handover=None) -> dict:
    """Reader-level check of the run's event files, original vs reduced, plus file checks.
    ``handover``: what the rewrite learnt of the original (``verify.original.OriginalRun``),
    used only for the files whose sha256 it read is the backup's (or, kept whole, unchanged)."""
    run_dir = ctx.abs(rp.run)
    replaced = {s["final"]: s for s in staged}
    pairs = {}
    for name in os.listdir(run_dir):
        p = os.path.join(run_dir, name)
        rel = os.path.relpath(p, ctx.logdir)
        if not cat.is_event_file_name(name) or not os.path.isfile(p) or os.path.islink(p):
            continue
        original = ctx.vault.blob_path(backups[rel]["sha256"]) if rel in backups else p
        if rel in replaced:
            pairs[name] = (original, ctx.abs(replaced[rel]["tmp"]))
        else:
            pairs[name] = (original, None if rel in backups else p)
    modes: Dict[str, str] = {}
    for s in staged:
        modes.update(s.get("expectations") or {})
    scratch.use_root(ctx.vault.tmp)  # the readers' scratch space: swept at the next start
    # records a rewrite re-encoded on purpose, each standing for one original record
    substitutes = {r["sha256"]: [r["original_sha256"], r["original_size"]]
                   for s in staged for r in (s.get("substituted") or ())}
    # a folder of its own inside the operation's: ``compare_views`` removes it whole, and the
    # operation's folder holds its pins until the commit
    d = compare_views(os.path.join(ctx.vault.tmp, op_id, "views"), pairs, modes, ctx.verify_backends, substitutes,
                      label=rp.run, handover=_handed_over(ctx, run_dir, handover, backups, pairs))
    # kept so `verify` can re-check the run later under the same contract
    d["expectations"] = modes
    if substitutes:
        d["record_substitutes"] = substitutes
    checks = list(d.get("checks", []))
    failed = list(d.get("failed", []))
    _file_checks(checks, rp, backups, staged)
    d["checks"], d["failed"] = checks, failed
    d["ok"] = bool(d.get("ok")) and not failed
    return d


def _event_file_paths(ctx: Context, run: str) -> List[str]:
    """The event files TensorBoard reads for ``run`` (directly in its folder, regular files, not
    links), logdir-relative, by name."""
    run_dir = ctx.abs(run)
    out = []
    for name in sorted(os.listdir(run_dir)):
        p = os.path.join(run_dir, name)
        if cat.is_event_file_name(name) and os.path.isfile(p) and not os.path.islink(p):
            out.append(os.path.relpath(p, ctx.logdir))
    return out


def _unchanged_event_files(ctx: Context, rp: RunPlan) -> Optional[List[dict]]:
    """``[{path, sha256, size}]`` of the run's event files when the plan touches none of them and
    changes only profile data (removed, compressed or slimmed; emptied folders removed): then
    TensorBoard's readers would read the very same bytes before and after, and identity is the
    proof. None when any event file is replaced or removed, or anything else changes: those runs
    are verified by both readers and the dashboards' routes."""
    for a in rp.actions:
        if a.kind != "remove_dir" and a.category not in cat.PROFILE_CATEGORIES:
            return None
    events = _event_file_paths(ctx, rp.run)
    touched = {a.path for a in rp.actions} | {a.new_path for a in rp.actions if a.new_path}
    run_prefix = "" if rp.run in (".", "") else rp.run.rstrip("/") + "/"
    for path in touched:
        rel = path[len(run_prefix):] if path.startswith(run_prefix) else None
        if path in events or (rel is not None and "/" not in rel and cat.is_event_file_name(rel)):
            return None
    out = []
    for rel in events:
        p = ctx.abs(rel)
        out.append({"path": rel, "sha256": sha256_file(p), "size": os.lstat(p).st_size})
    return out


def _changed_files(ctx: Context, files: List[dict]) -> List[str]:
    """The ones of ``files`` (``{path, sha256, size}``) whose bytes are no longer those."""
    return [f["path"] for f in files if not matches(ctx.abs(f["path"]), f["sha256"], f["size"])]


def _verify_unchanged(ctx: Context, rp: RunPlan, backups: Dict[str, dict], staged: List[dict],
                      unchanged: List[dict]) -> dict:
    """The verification of a run whose event files the reduce leaves alone: each is proven
    unchanged by its sha256 (hashed under the run's lock before the backup, again now; once more
    after the swap), the run stays a run for TensorBoard (its event files all remain), and the
    profile dashboards' routes are the one difference the contract allows. No reader is started:
    reading a file against itself proves nothing more (docs/FAILSAFE.md, verification)."""
    t0 = time.monotonic()
    changed = _changed_files(ctx, unchanged)
    checks: List[dict] = []
    if changed:
        checks.append({"name": "event files", "ok": False,
                       "detail": f"{changed[0]}: changed since it was hashed before the backup"
                                 + (f" (+{len(changed) - 1} more)" if len(changed) > 1 else "")})
    elif unchanged:
        names = ", ".join(os.path.basename(f["path"]) for f in unchanged[:3]) + (
            f" (+{len(unchanged) - 3} more)" if len(unchanged) > 3 else "")
        checks.append({"name": "event files", "ok": True,
                       "detail": f"{len(unchanged)} event file(s) unchanged (sha256), neither rewritten nor "
                                 f"removed: TensorBoard's readers read the same bytes ({names})"})
        checks.append({"name": "run present", "ok": True,
                       "detail": "run present: yes, its event files all stay"})
    else:
        checks.append({"name": "run present", "ok": True,
                       "detail": "run present: profile data only, no event file before or after (the plan "
                                 "says what stays of it)"})
    _file_checks(checks, rp, backups, staged)
    failed = [c["detail"] for c in checks if not c["ok"]]
    return {"ok": not failed, "checks": checks, "failed": failed, "backends": [], "mode": "unchanged",
            "unchanged": [{"path": f["path"], "sha256": f["sha256"]} for f in unchanged],
            "duration_s": round(time.monotonic() - t0, 3)}


def _file_checks(checks: List[dict], rp: RunPlan, backups: Dict[str, dict], staged: List[dict]) -> None:
    """The verification lines of the files a transform produced, the files removed, the profile
    routes left uncompared and the plan's fidelity lines (every verified run has them)."""
    comp = [s for s in staged if "content_sha256" in s]
    if comp:
        checks.append({"name": "torch traces", "ok": True,
                       "detail": f"{len(comp)} compressed, decompressed content identical (sha256)"})
    notes = []
    for s in staged:
        checks.append({"name": s.get("transform", "rewrite"), "ok": True, "detail": stage_line(s)})
        notes += [n for n in s.get("notes") or () if n not in notes]  # run-level: once per run
    checks += [{"name": "rewrite", "ok": True, "detail": n} for n in notes]
    checks.extend(_profile_route_lines(rp))
    dels = [p for p, r in backups.items() if r["action"] == "delete"]
    if dels:
        checks.append({"name": "removed files", "ok": True,
                       "detail": f"{len(dels)} file(s) backed up (sha256 verified) and removed"})
    for line in rp.fidelity:
        checks.append({"name": "plan", "ok": True, "detail": line})


def _handed_over(ctx: Context, run_dir: str, original, backups: Dict[str, dict], pairs: dict):
    """``original`` if every original event file it describes is provably the one verified:
    a backed-up file by the backup's sha256, a file kept whole by being unchanged."""
    from tb_footprint_plugin.verify.original import stat_sig

    if original is None or not original.files or set(original.files) != set(pairs):
        return None
    for name, facts in original.files.items():
        rel = os.path.relpath(os.path.join(run_dir, name), ctx.logdir)
        if rel in backups:
            if backups[rel]["sha256"] != facts.sha256:
                return None
        elif stat_sig(os.path.join(run_dir, name)) != facts.stat:
            return None
    return original


def _profile_route_lines(rp: RunPlan) -> List[dict]:
    """The Profile and PyTorch-profiler dashboards read files the policy removes, not event
    data: their routes are the one difference the route comparison allows. Say so."""
    from tb_footprint_plugin.verify.dashboard import profile_removed_check

    removed: Dict[str, int] = {}
    for a in rp.actions:
        if a.kind == "delete" and a.category in cat.PROFILE_CATEGORIES:
            what = "PyTorch traces" if a.category == cat.TORCH_TRACE else "profile files"
            removed[what] = removed.get(what, 0) + 1
    return [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in profile_removed_check(removed)]


def stage_line(s: dict) -> str:
    """One verification line for a file a transform produced (``s``: what ``stage_file``
    returned, with the file's ``final`` path)."""
    name = os.path.basename(s["final"])
    if "trace_check" in s:
        return f"{name}: {s['trace_check']}"
    if "records_before" in s:
        removed = ", ".join(f"{k} {v['records']}" for k, v in (s.get("removed") or {}).items()) or "nothing"
        subs = s.get("substituted") or []
        if not subs:
            return (f"{name}: rewritten, {s['records_before']} → {s['records_after']} records, each kept "
                    f"record byte-identical; removed {removed}")
        kinds = sorted({r["kind"] for r in subs})
        return (f"{name}: rewritten, {s['records_before']} → {s['records_after']} records, each kept "
                f"record byte-identical except {len(subs)} re-encoded ({', '.join(kinds)}: same step, wall "
                f"time and values); removed {removed}")
    return f"{name}: compressed, decompressed content identical (sha256)"
