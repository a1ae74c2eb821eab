"""``reduce_logdir`` / ``reduce_logdirs``: each run its own verified transaction, largest first,
in a batch recorded in the ledger (resumable, shardable, cancellable; Ctrl-C settles at once).

One driver for every store: the sequence below runs once, calling the logdir's ``Engine``
(``engine.front_base``) — a disk's or a bucket's — with one signature: prepare the vault →
recover → the footprint (a bucket's from its one listing, kept for its transactions) → the shard
partition → the plan → the ledger (what it settled is skipped) → the runs (``Engine.reduce_runs``)
with their ledger marks → the batch's end → the numbers in use before and after.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from tb_footprint_plugin.codes import Finding, Outcome, Skip
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.context import CancelToken, NoSpace, RunOutcome
from tb_footprint_plugin.engine.front import Engine, open_engine
from tb_footprint_plugin.engine.ledger import mark_recovered
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.vault import DEFAULT_VAULT_FORMAT, VAULT_FORMATS
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD
from tb_footprint_plugin.plan import owners, shard as sharding
from tb_footprint_plugin.plan.policies import get_policy
from tb_footprint_plugin.scan import passes
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.storage import throttle
from tb_footprint_plugin.api.common import (DEFAULT_BACKENDS, engine_vault, logdir_keys, partition_name, RunProgress,
                                            say_taken)
from tb_footprint_plugin.api.settle import Interrupted, settle_interrupted
from tb_footprint_plugin.api.reports import ReduceReport
from tb_footprint_plugin.api.survey import (hold_to_confirmed, plan, scan_shard_sizes, selection_by_logdir,
                                            shard_plan, shard_sizes)


def _backed_up_bytes(p: Plan, runs: Set[str]) -> int:
    """The originals the plan's actions back up in ``runs`` (each whole: a delete's, a rewrite's,
    a compression's): what a vault of whole copies holds of them (review R17 F8)."""
    return sum(a.bytes_before for rp in p.runs if rp.run in runs for a in rp.actions if a.kind != "remove_dir")


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
    vault_format: Optional[str] = None,
    confirmed: Optional[Collection[str]] = None,
    include_others_runs: bool = False,
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
    zstd blobs, so the disk is freed at once) or ``"hardlink"`` (kept as hard links until purge);
    None: the store's own (a disk's ``"compressed"``). On a bucket logdir the same sequence runs
    over its one listing with the same ``jobs``, ``timeout``, ``cancel`` and ``progress``
    (``Engine.reduce_runs`` of each store says how); its backups are whole server-side copies or,
    with a local ``backup_dir``, compressed blobs, and another ``vault_format`` is refused
    (``Engine.vault_format``), as is a ``ledger`` path other than its own ledger folder's.
    ``confirmed``: the ``plan_digest`` of each run's plan the user said yes to (``confirmed_digests``
    of the plan shown): a run whose plan is now another is left alone with ``Skip.PLAN_CHANGED``
    (``hold_to_confirmed``), the others reduced; None: no question was asked (``--yes``, a job).
    ``include_others_runs``: reduce runs another user owns too (by default left alone with
    ``Skip.OTHERS_RUN``, ``plan.owners``); each such run's outcome then says whose vault holds it
    (its ``reason`` and a finding ``others_run_taken`` naming the vault).
    """
    if vault_format is not None and vault_format not in VAULT_FORMATS:
        raise ValueError(f"vault_format must be one of {', '.join(VAULT_FORMATS)}")
    eng = open_engine(logdir, backup_dir, quiet_period=quiet_period, verify_backends=verify_backends,
                      closed_files=closed_files)
    vault_format = eng.vault_format(vault_format)  # refused before anything is planned or changed
    pol = get_policy(policy)
    before_limit = throttle.limit()
    if max_file_ops_per_second is not None:
        throttle.configure(max_file_ops_per_second)
    shard_before, lease_before = lease.shard_label(), lease.lease_seconds()
    # the process's one shard label: its leases, locks and change-log lines name it (review R7)
    lease.configure(lease_seconds, sharding.label(shard))
    seen: List[RunOutcome] = []  # what the batch's runs came to, for what an interrupt says
    on_outcome = _recording(seen, on_outcome)
    if cancel is None:  # one token for the batch: an interrupt stops the runs of other threads too
        cancel = CancelToken()
    try:
        return _reduce(eng, logdir, pol, dry_run, runs=runs, run_glob=run_glob, min_size=min_size,
                       older_than=older_than, quiet_period=quiet_period, closed_files=closed_files, jobs=jobs,
                       timeout=timeout, ledger=ledger, progress=progress, on_outcome=on_outcome, cancel=cancel,
                       shard=shard, shard_with=shard_with, partition_sizes=partition_sizes,
                       vault_format=vault_format, confirmed=confirmed, include_others_runs=include_others_runs)
    except KeyboardInterrupt as e:
        if dry_run or isinstance(e, Interrupted):
            raise
        # Ctrl-C (in a notebook too): the run under way goes back to its exact bytes now, its
        # staging files removed, as the next start would do; then the interrupt goes on
        if cancel is not None:
            cancel.cancel()  # runs on other threads stop at their next step
        rolled = [o.op_id for o in list(seen) if o.status == Outcome.ROLLED_BACK and o.op_id]
        raise Interrupted(settle_interrupted(logdir, eng.backup_dir, policy=pol, ledger=ledger, shard=shard,
                                             rolled_back=rolled)) from e
    finally:
        if max_file_ops_per_second is not None:
            throttle.configure(before_limit)
        # a later verb of this process (a restore, a recover) must not name this batch's shard
        # in its leases, locks and lines, nor take its leases for this batch's length
        lease.configure(lease_before, shard=shard_before)


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


def _reduce(eng: Engine, logdir: str, pol, dry_run: bool, *, runs, run_glob, min_size, older_than, quiet_period,
            closed_files, jobs, timeout, ledger, progress, on_outcome, cancel, shard, shard_with, partition_sizes,
            vault_format=DEFAULT_VAULT_FORMAT, confirmed: Optional[Collection[str]] = None,
            include_others_runs: bool = False) -> ReduceReport:
    if not dry_run:
        eng.prepare_reduce()  # the vault ours, a remote vault remembered, before any backup is made
        # what its verification will import (gRPC, TensorBoard's app) on a thread from now, beside
        # the recovery and the scan rather than after them (issue #28 item 3)
        eng.warm_up()
    # no run named: an unreadable folder outside every run is a warning, not a run left undone
    whole_logdir = runs is None and not run_glob
    recovered = [] if dry_run else eng.recover()
    backup_dir = eng.scan_backup_dir
    # a reduce's scan keeps its passes over big event files for the rewrite (``scan.passes``)
    keeping = contextlib.nullcontext() if dry_run else passes.retaining()
    token = None
    try:
        with keeping as token:
            mine = None
            key = logdir_keys([logdir])[0]
            # a dry run writes nothing, not even the scan cache
            fp = eng.survey_for_reduce(write_cache=not dry_run, eager=shard is not None and partition_sizes is not None)
            scans: Dict[str, LogdirFootprint] = {} if fp is None else {key: fp}
            if shard is not None:
                shard = sharding.check_shard(*shard)
                logdirs = logdir_keys(shard_with or [key])
                if key not in logdirs:
                    raise ValueError(f"shard_with must list the logdir {key} itself")
                sizes = partition_sizes if partition_sizes is not None else \
                    scan_shard_sizes(logdirs, backup_dir, scans, write_cache=not dry_run)
                mine = shard_plan(logdirs, shard, backup_dir, sizes).get(key, [])
                runs = [r for r in mine if runs is None or r in runs]
                if ledger is None:
                    ledger = "default"
            # the partition's own scan, or the bucket's listing: one scan per worker
            p = plan(logdir, pol, backup_dir=eng.backup_dir, runs=runs, run_glob=run_glob, min_size=min_size,
                     older_than=older_than, quiet_period=quiet_period, closed_files=closed_files,
                     footprint=scans.get(key), vault_format=vault_format, engine=eng,
                     include_others_runs=include_others_runs)
            if confirmed is not None and not dry_run:
                hold_to_confirmed(p, confirmed)  # what the user said yes to, or nothing for that run
        report = ReduceReport(dry_run=dry_run, plan=p, recovered=recovered, shard=shard, shard_runs=mine,
                              warned_folders=list(p.unread_folders) if whole_logdir else [])
        if dry_run:
            report.outcomes = [RunOutcome(run=rp.run, status=Outcome.SKIPPED if rp.skipped else Outcome.DRY_RUN,
                                          reason=rp.skipped, code=rp.code, bytes_before=rp.bytes_before,
                                          bytes_after=rp.expected_after_bytes) for rp in p.runs]
            freed = eng.dry_run_freed(p, vault_format)
            if freed is not None:
                report.freed_now_bytes, report.freed_on_disk_after_purge_bytes = freed
            else:  # not known before the reduce (a bucket: its plan's retention note says when): null, not 0
                report.freed_now_bytes = report.freed_on_disk_after_purge_bytes = None
            return report
        eng.remember_vault()
        before = eng.reduce_usage()
        book = eng.open_ledger(ledger, pol.name, shard)
        if book:
            report.ledger_path = book.path
            eng.settle_ledger(book.path)  # a custom --ledger PATH: the start settled only the default ones
        todo = _ledger_filter(book, p, report, on_outcome, recovered)
        hooks = _Marks(book, report, progress, on_outcome, _taken_notes(eng, p))
        report.outcomes += eng.reduce_runs(todo, policy=pol, vault_format=vault_format, jobs=jobs, timeout=timeout,
                                           cancel=cancel, progress=hooks.step, begin=hooks.begin if book else None,
                                           on_outcome=hooks.settled)
        if book:
            with contextlib.suppress(OSError):  # the appended transitions stand as they are
                book.compact()  # the batch's end: the ledger is one snapshot again
        report.requests = eng.request_counts()
        done = [o for o in report.outcomes if o.status == Outcome.VERIFIED]
        freed_later = eng.freed_after_purge([o.op_id for o in done], report.removed_from_logdir_bytes,
                                            _backed_up_bytes(p, {o.run for o in done}))
        if freed_later is not None:
            report.freed_on_disk_after_purge_bytes = freed_later
        report.remote_vault = eng.end_batch()  # the batch's manifests sealed
        after = eng.reduce_usage()
        if before is not None and after is not None:
            report.disk_in_use_before_bytes, report.disk_in_use_after_bytes = before[0], after[0]
            # what the logdir's disk gained: a vault on another disk grew by what it took in
            report.freed_now_bytes = before[1] - after[1]
        return report
    finally:
        if token is not None:
            passes.release(token)


def _ledger_filter(book, p: Plan, report: ReduceReport, on_outcome,
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


def _taken_notes(eng: Engine, p: Plan) -> Dict[str, Tuple[str, Optional[str]]]:
    """Run -> (what its outcome says, the vault) for each run of another user the plan takes on
    request (``RunPlan.owner_uid``; none on a bucket: no owners there)."""
    taken = {rp.run: rp.owner_uid for rp in p.runs if rp.owner_uid is not None and not rp.skipped}
    if not taken:
        return {}
    vault = engine_vault(eng)
    return {run: (owners.taken(uid, vault), vault) for run, uid in taken.items()}


class _Marks:
    """What a batch's runs tell as they go (called by ``Engine.reduce_runs``, maybe from worker
    threads): each run's ledger marks (``reducing`` as it starts, ``verifying`` at its verify step,
    then ``done`` / ``failed`` / ``skipped``), its progress, the caller's ``on_outcome``."""

    def __init__(self, book, report: ReduceReport, progress: Optional[RunProgress],
                 on_outcome: Optional[Callable[[RunOutcome], None]],
                 taken: Optional[Mapping[str, Tuple[str, Optional[str]]]] = None):
        self.book, self.report, self.progress, self.on_outcome = book, report, progress, on_outcome
        self.taken = taken or {}

    def begin(self, rp) -> None:
        """A failure raises: the run fails, untouched (the engine says so)."""
        self.book.mark(rp.run, "reducing", original_size_bytes=rp.bytes_before)

    def step(self, run: str, name: str, frac: float) -> None:
        if self.book and name == "verify":
            self.book.mark(run, "verifying")
        if self.progress:
            self.progress(run, name, frac)

    def settled(self, o: RunOutcome) -> None:
        """The run's last mark; one that fails is reported (``ledger_problems``), the run's outcome
        stands (the ledger is a record: a rerun reduces a run it does not show done again). Another
        user's run taken on request says whose vault holds it now (``plan.owners``)."""
        if o.status == Outcome.VERIFIED and o.run in self.taken:
            say_taken(o, *self.taken[o.run])
        book = self.book
        if book:
            state = {Outcome.VERIFIED: "done", Outcome.SKIPPED: "skipped"}.get(o.status, "failed")
            try:
                book.mark(o.run, state, original_size_bytes=o.bytes_before, after_size_bytes=o.bytes_after,
                          reduced_ratio=round(1 - o.bytes_after / o.bytes_before, 4) if o.bytes_before else 0.0,
                          verified=o.status == Outcome.VERIFIED, error=o.reason if state != "done" else None,
                          op_id=o.op_id, code=o.code if state != "done" else None)
            except (OSError, NoSpace) as e:
                self.report.ledger_problems.append({"code": getattr(e, "code", None) or Finding.LEDGER_WRITE_FAILED,
                                                    "detail": f"{o.run}: ledger not written ({e})"})
        if self.on_outcome:
            self.on_outcome(o)
