"""``reduce_logdir`` / ``reduce_logdirs``: each run its own verified transaction, largest first,
in a batch recorded in the ledger (resumable, shardable, cancellable; Ctrl-C settles at once).
A bucket logdir goes to ``api.reduce_bucket``.
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.context import CancelToken, NoSpace, RunOutcome, writing
from tb_footprint_plugin.engine.front import LocalEngine, open_engine
from tb_footprint_plugin.engine.history import configure_writer
from tb_footprint_plugin.engine.ledger import Ledger, mark_recovered
from tb_footprint_plugin.engine.plan_notes import freed_estimate
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.vault import DEFAULT_VAULT_FORMAT, VAULT_FORMATS
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.plan.policies import get_policy
from tb_footprint_plugin.scan import passes
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.storage import throttle
from tb_footprint_plugin.api.common import DEFAULT_BACKENDS, logdir_keys, partition_name, RunProgress
from tb_footprint_plugin.api.settle import Interrupted, settle_interrupted
from tb_footprint_plugin.api.reports import ReduceReport
from tb_footprint_plugin.api.survey import (plan, scan_shard_sizes, selection_by_logdir,
                                            shard_plan, shard_sizes)
from tb_footprint_plugin.api.reduce_bucket import reduce_on_bucket


def reduce_logdir(
    logdir: str,
    backup_dir: Optional[str] = None,
    policy="archive",
    dry_run: bool = True,
    *,
    runs: Optional[List[str]] = None,
    run_glob: Optional[str] = None,
    min_size: int = 0,
    older_than: Optional[float] = None,
    quiet_period: float = DEFAULT_QUIET_PERIOD,
    closed_files: Optional[Mapping[str, float]] = None,
    jobs: int = 1,
    timeout: Optional[float] = None,
    ledger: Optional[str] = None,
    verify_backends: Sequence[str] = DEFAULT_BACKENDS,
    progress: Optional[RunProgress] = None,
    on_outcome: Optional[Callable[[RunOutcome], None]] = None,
    cancel: Optional[CancelToken] = None,
    shard: Optional[Tuple[int, int]] = None,
    shard_with: Optional[Sequence[str]] = None,
    partition_sizes: Optional[Mapping[str, int]] = None,
    max_file_ops_per_second: Optional[float] = None,
    lease_seconds: Optional[float] = None,
    vault_format: str = DEFAULT_VAULT_FORMAT,
) -> ReduceReport:
    """Reduce runs largest first, each as its own verified transaction.

    ``dry_run=True`` (the default) only plans. With ``ledger`` (a path, or ``"default"`` for
    ``<logdir>/.tb-footprint/ledger.json``) every transition is recorded and a rerun resumes.
    ``closed_files``: see ``plan`` (the end-of-training integrations pass the job's own files).

    ``shard=(i, n)``: only the runs shard ``i`` of ``n`` takes (``shard_plan``; with
    ``shard_with``, the partition is over the runs of all those logdirs, this one included;
    ``partition_sizes``: its input ``shard_sizes`` when the caller has it already) and
    the ledger defaults to this shard's own (``ledger-shard-I-of-N.json``, merged by ``status``).
    Overlapping or rerun shards are safe: a run another worker holds is skipped with
    ``Skip.LOCKED`` (its lease says who), one a dead worker held is taken over.
    ``max_file_ops_per_second`` caps this process's metadata operations (``storage.throttle``);
    ``lease_seconds`` sets the run locks' lease (``engine.lease``).
    ``vault_format``: ``"compressed"`` (each committed run's backups are compacted into verified
    zstd blobs, so the disk is freed at once) or ``"hardlink"`` (kept as hard links until purge).
    """
    if vault_format not in VAULT_FORMATS:
        raise ValueError(f"vault_format must be one of {', '.join(VAULT_FORMATS)}")
    eng = open_engine(logdir, backup_dir, quiet_period=quiet_period, verify_backends=verify_backends,
                      closed_files=closed_files)
    if eng.batch_from_listing:
        # a bucket plans from one listing that its transactions share, and its ledgers are
        # objects (``api.reduce_bucket``)
        if not dry_run:
            lease.configure(lease_seconds, sharding.label(shard))
            return reduce_on_bucket(eng, backup_dir, get_policy(policy), runs=runs, run_glob=run_glob,
                                    min_size=min_size, older_than=older_than, quiet_period=quiet_period,
                                    on_outcome=on_outcome, verify_backends=verify_backends, shard=shard,
                                    shard_with=shard_with, partition_sizes=partition_sizes, ledger=ledger,
                                    closed_files=closed_files)
        mine = None
        if shard is not None:
            shard = sharding.check_shard(*shard)
            mine = shard_plan(shard_with or [logdir], shard, backup_dir, partition_sizes).get(logdir.rstrip("/"), [])
            runs = [r for r in mine if runs is None or r in runs]
        p = plan(logdir, get_policy(policy), backup_dir=backup_dir, runs=runs, run_glob=run_glob,
                 min_size=min_size, older_than=older_than, quiet_period=quiet_period, closed_files=closed_files)
        return ReduceReport(dry_run=True, plan=p, shard=shard, shard_runs=mine, outcomes=[
            RunOutcome(run=rp.run, status=Outcome.SKIPPED if rp.skipped else Outcome.DRY_RUN,
                       reason=rp.skipped, code=rp.code, bytes_before=rp.bytes_before,
                       bytes_after=rp.expected_after_bytes) for rp in p.runs])
    backup_dir, remote = eng.local_backup_dir, eng.remote_vault  # a bucket URL: the local vault offloads there
    pol = get_policy(policy)
    before_limit = throttle.limit()
    if max_file_ops_per_second is not None:
        throttle.configure(max_file_ops_per_second)
    lease.configure(lease_seconds, sharding.label(shard))
    history_before = configure_writer(sharding.label(shard)) if shard is not None else None
    seen: List[RunOutcome] = []  # what the batch's runs came to, for what an interrupt says
    on_outcome = _recording(seen, on_outcome)
    if cancel is None:  # one token for the batch: an interrupt stops the runs of other threads too
        cancel = CancelToken()
    try:
        return _reduce(eng, logdir, backup_dir, pol, dry_run, runs=runs, run_glob=run_glob, min_size=min_size,
                       older_than=older_than, quiet_period=quiet_period, closed_files=closed_files, jobs=jobs,
                       timeout=timeout, ledger=ledger, progress=progress, on_outcome=on_outcome, cancel=cancel,
                       shard=shard, shard_with=shard_with, partition_sizes=partition_sizes,
                       vault_format=vault_format, remote=remote)
    except KeyboardInterrupt as e:
        if dry_run or isinstance(e, Interrupted):
            raise
        # Ctrl-C (in a notebook too): the run under way goes back to its exact bytes now, its
        # staging files removed, as the next start would do; then the interrupt goes on
        if cancel is not None:
            cancel.cancel()  # runs on other threads stop at their next step
        rolled = [o.op_id for o in list(seen) if o.status == Outcome.ROLLED_BACK and o.op_id]
        raise Interrupted(settle_interrupted(logdir, backup_dir, policy=pol, ledger=ledger, shard=shard,
                                             rolled_back=rolled)) from e
    finally:
        if max_file_ops_per_second is not None:
            throttle.configure(before_limit)
        if shard is not None:
            configure_writer(history_before)


def _recording(seen: List[RunOutcome], on_outcome: Optional[Callable[[RunOutcome], None]]):
    """``on_outcome`` that also appends each outcome to ``seen`` (list appends are atomic: the
    batch's worker threads call it)."""
    def record(o: RunOutcome) -> None:
        seen.append(o)
        if on_outcome is not None:
            on_outcome(o)

    return record


def reduce_logdirs(logdirs: Sequence[str], *, shard: Optional[Tuple[int, int]] = None, **kwargs) -> List[ReduceReport]:
    """``reduce_logdir`` over several logdirs in one call; with ``shard``, the partition is over the
    runs of all of them (a logdir of one run still counts for one shard only)."""
    logdirs = logdir_keys(logdirs)
    if len({partition_name(ld) for ld in logdirs}) != len(logdirs):
        raise ValueError("a logdir is listed twice (also by another path to it)")
    before_limit = throttle.limit()
    if kwargs.get("max_file_ops_per_second") is not None:
        throttle.configure(kwargs["max_file_ops_per_second"])  # the partition's scans count too
    try:
        # several logdirs: one partition scan of each, shared by all their reductions
        sizes = shard_sizes(logdirs, kwargs.get("backup_dir")) if shard and len(logdirs) > 1 else None
        selection = {}
        if len(logdirs) > 1 and (kwargs.get("runs") is not None or kwargs.get("run_glob")):
            selection = selection_by_logdir(logdirs, kwargs.pop("runs", None), kwargs.pop("run_glob", None),
                                            kwargs.get("backup_dir"))
        return [reduce_logdir(ld, shard=shard, shard_with=logdirs if shard else None, partition_sizes=sizes,
                              **selection.get(ld, {}), **kwargs) for ld in logdirs]
    finally:
        throttle.configure(before_limit)


def _reduce(eng: LocalEngine, logdir: str, backup_dir: Optional[str], pol, dry_run: bool, *, runs, run_glob, min_size,
            older_than, quiet_period, closed_files, jobs, timeout, ledger, progress, on_outcome, cancel,
            shard, shard_with, partition_sizes, vault_format=DEFAULT_VAULT_FORMAT,
            remote: Optional[str] = None) -> ReduceReport:
    ctx = eng.ctx
    if not dry_run:
        eng.prepare_reduce()  # the vault ours, a remote vault remembered, before any backup is made
    recovered = [] if dry_run else eng.recover()
    # a reduce's scan keeps its passes over big event files for the rewrite (``scan.passes``)
    keeping = contextlib.nullcontext() if dry_run else passes.retaining()
    token = None
    try:
        with keeping as token:
            mine = None
            scans: Dict[str, LogdirFootprint] = {}
            if shard is not None:
                shard = sharding.check_shard(*shard)
                logdirs = logdir_keys(shard_with or [ctx.logdir])
                if ctx.logdir not in logdirs:
                    raise ValueError(f"shard_with must list the logdir {ctx.logdir} itself")
                if partition_sizes is not None:
                    scans[ctx.logdir] = scan(ctx.logdir, backup_dir=backup_dir, write_cache=not dry_run)
                    sizes = partition_sizes
                else:  # a dry run writes nothing, not even the scan cache
                    sizes = scan_shard_sizes(logdirs, backup_dir, scans, write_cache=not dry_run)
                mine = shard_plan(logdirs, shard, backup_dir, sizes).get(ctx.logdir, [])
                runs = [r for r in mine if runs is None or r in runs]
                if ledger is None:
                    ledger = "default"
            p = plan(logdir, pol, backup_dir=remote or backup_dir, runs=runs, run_glob=run_glob, min_size=min_size,
                     older_than=older_than, quiet_period=quiet_period, closed_files=closed_files,
                     footprint=scans.get(ctx.logdir), vault_format=vault_format)  # the partition's own scan: one scan per worker
        report = ReduceReport(dry_run=dry_run, plan=p, recovered=recovered, shard=shard, shard_runs=mine)
        if dry_run:
            report.outcomes = [RunOutcome(run=rp.run, status=Outcome.SKIPPED if rp.skipped else Outcome.DRY_RUN,
                                          reason=rp.skipped, code=rp.code, bytes_before=rp.bytes_before,
                                          bytes_after=rp.expected_after_bytes) for rp in p.runs]
            if eng.offloads():  # the backups leave the local disk at once
                report.freed_now_bytes, report.freed_on_disk_after_purge_bytes = p.removable_bytes, 0
            else:
                report.freed_now_bytes, report.freed_on_disk_after_purge_bytes, _same = \
                    freed_estimate(ctx.logdir, backup_dir, p, vault_format)
            return report
        eng.remember_vault()
        before = eng.disk_in_use()
        book = eng.open_ledger(ledger, pol.name, shard)
        if book:
            report.ledger_path = book.path
            eng.settle_ledger(book.path)  # a custom --ledger PATH: the start settled only the default ones
        todo = _ledger_filter(book, p, report, on_outcome, recovered)
        batch = _Batch(eng, pol.to_dict(), book, timeout, cancel, progress, on_outcome, vault_format)
        if jobs > 1:
            with ThreadPoolExecutor(max_workers=jobs) as ex:
                try:
                    report.outcomes += list(ex.map(batch.run, todo))
                except KeyboardInterrupt:
                    # before the pool waits for its threads: each run under way stops at its next
                    # step and rolls back (a notebook's interrupt has no handler of its own to do it)
                    if cancel is not None:
                        cancel.cancel()
                    raise
        else:
            report.outcomes += [batch.run(rp) for rp in todo]
        if book:
            with contextlib.suppress(OSError):  # the appended transitions stand as they are
                book.compact()  # the batch's end: the ledger is one snapshot again
        report.freed_on_disk_after_purge_bytes = eng.freed_after_purge([o.op_id for o in report.outcomes
                                                                          if o.status == Outcome.VERIFIED])
        remote_usage = eng.end_batch()  # the batch's manifests sealed
        after = eng.disk_in_use()
        report.disk_in_use_before_bytes, report.disk_in_use_after_bytes = before.total_bytes, after.total_bytes
        # what the logdir's disk gained: a vault on another disk grew by what it took in
        report.freed_now_bytes = before.on_logdir_disk - after.on_logdir_disk
        report.remote_vault = remote_usage
        return report
    finally:
        if token is not None:
            passes.release(token)


def _ledger_filter(book: Optional[Ledger], p: Plan, report: ReduceReport, on_outcome,
                   recovered: Sequence[RecoveryOutcome] = ()) -> list:
    """The plan's runs still to do; a run the ledger settled (and that did not change since) is
    reported skipped with ``Skip.LEDGER_DONE`` — said as such, not silently counted as nothing.
    Runs this start's recovery settled for a dead worker are recorded first (``mark_recovered``)."""
    if not book:
        return list(p.runs)
    book.start((rp.run for rp in p.runs), {rp.run: rp.bytes_before for rp in p.runs},
               since=min((rp.planned_at for rp in p.runs if rp.planned_at), default=None))
    report.ledger_problems = list(book.problems)
    report.ledger_problems += mark_recovered(book, recovered)
    entries = book.read()["runs"]
    todo = []
    for rp in p.runs:
        if book.should_run(entries.get(rp.run), rp.bytes_before):
            todo.append(rp)
            continue
        o = RunOutcome(run=rp.run, status=Outcome.SKIPPED, code=Skip.LEDGER_DONE,
                       reason=f"already {entries[rp.run]['state']} in the ledger {book.path}",
                       bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
        report.outcomes.append(o)
        if on_outcome:
            on_outcome(o)
    return todo


@dataclass
class _Batch:
    """One run of a batch: its own transaction (``LocalEngine.reduce_run``), recorded in the ledger
    step by step."""

    eng: LocalEngine
    policy: dict
    book: Optional[Ledger]
    timeout: Optional[float]
    cancel: Optional[CancelToken]
    progress: Optional[RunProgress]
    on_outcome: Optional[Callable[[RunOutcome], None]]
    vault_format: str = DEFAULT_VAULT_FORMAT

    def run(self, rp) -> RunOutcome:
        try:
            return self._one(rp)
        except NoSpace as e:  # the ledger's disk is full: named, this run failed, the batch goes on
            return RunOutcome(run=rp.run, status=Outcome.FAILED, reason=str(e), code=e.code,
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
        except Exception as e:
            return RunOutcome(run=rp.run, status=Outcome.FAILED, reason=f"{type(e).__name__}: {e}", code=Failure.ERROR,
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)

    def _mark(self, run: str, state: str, **fields) -> None:
        """Record a run's state in the ledger; a full disk names the ledger (rewritten whole)."""
        try:
            need = os.path.getsize(self.book.path) + 4096
        except OSError:
            need = 4096
        with writing(self.book.path, need):
            self.book.mark(run, state, **fields)

    def _one(self, rp) -> RunOutcome:
        book = self.book
        if self.cancel is not None and self.cancel.cancelled:
            return RunOutcome(run=rp.run, status=Outcome.SKIPPED, reason="batch cancelled", code=Skip.CANCELLED,
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
        token = CancelToken(self.timeout, parent=self.cancel)  # one cancel stops every run at its next step
        if book:
            self._mark(rp.run, "reducing", original_size_bytes=rp.bytes_before)

        def step(name, frac):
            if book and name == "verify":
                self._mark(rp.run, "verifying")
            if self.progress:
                self.progress(rp.run, name, frac)

        o = self.eng.reduce_run(rp, policy=self.policy, cancel=token, progress=step, vault_format=self.vault_format)
        if book:
            state = {Outcome.VERIFIED: "done", Outcome.SKIPPED: "skipped"}.get(o.status, "failed")
            self._mark(rp.run, state, original_size_bytes=o.bytes_before, after_size_bytes=o.bytes_after,
                       reduced_ratio=round(1 - o.bytes_after / o.bytes_before, 4) if o.bytes_before else 0.0,
                       verified=o.verified, error=o.reason if state != "done" else None, op_id=o.op_id,
                       code=o.code if state != "done" else None)
        if self.on_outcome:
            self.on_outcome(o)
        return o

