"""The public verbs, shared by the CLI and the TensorBoard plugin:
``scan``, ``plan``, ``reduce_logdir``, ``verify``, ``restore``, ``purge``, ``status``, ``history``.

Every verb that can change something first settles unfinished operations (crash recovery).
Failures come back as values (per-run outcomes with reasons); only bad arguments raise.
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery, Skip
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.engine.catalogue import (  # noqa: F401  (operation summaries: shown by both front ends)
    find_manifest,
    hiding_damage,
    is_kept,
    journal_blobs,
    known_vaults,
    operation_summary,
    own_manifests,
    remember_vault,
    restorable_ops,
    summarize_operations,
    vault_problems,
)
from tb_footprint_plugin.engine import health, trust
from tb_footprint_plugin.engine.checks import recheck
from tb_footprint_plugin.engine.context import CancelToken, Context, NoSpace, RunOutcome, TransactionError, writing
from tb_footprint_plugin.engine.history import configure_writer, history_csv, read_history  # noqa: F401  (history_csv: the CLI's --csv)
from tb_footprint_plugin.engine.journal import RunLock, RunLocked, pending_journals
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.ledger import (Ledger, ledger_path, ledger_paths, mark_recovered, merged,
                                              with_restores)
from tb_footprint_plugin.engine.purge import PurgeReport, freeable_bytes, purge_backups
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.upkeep import recover_all
from tb_footprint_plugin.engine.restore import kept_blobs, restore_op
from tb_footprint_plugin.engine.retire import is_restorable_retirement, retire_run, retirements, unretire
from tb_footprint_plugin.engine.transaction import reduce_run
from tb_footprint_plugin.engine import usage
from tb_footprint_plugin.engine.vault import (DEFAULT_VAULT_FORMAT, VAULT_FORMATS, Vault,  # noqa: F401  (VAULT_FORMATS: the CLI's choices)
                                             compact_operation, note_compaction, refuse_unless_ours)
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.planner import (  # noqa: F401  (SelectionError: for the front ends)
    DEFAULT_QUIET_PERIOD, LOCAL_VAULT_NOTE, SelectionError, apply_open_writers, leave_alone, make_plan)
from tb_footprint_plugin.plan.retire import RetirePlan, RetireRule, plan_retire, read_keep_list
from tb_footprint_plugin.plan import select as selecting
from tb_footprint_plugin.plan.cost import format_cost  # noqa: F401  (for the front ends)
from tb_footprint_plugin.plan.policies import (BUILTIN, PolicyError, custom_policy, get_policy,  # noqa: F401  (for the front ends)
                                               list_policies)
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.plan.shard import ShardError, parse_shard, shard_from_env  # noqa: F401  (for the front ends)
from tb_footprint_plugin.plan.summary import (  # noqa: F401  (what a plan means: shown by both front ends)
    category_changes,
    dashboards_note,
    dashboards_summary,
    labels_for,
    overview,
    plan_run_view,
)
from tb_footprint_plugin.scan import categories  # noqa: F401  (the category vocabulary both front ends show)
from tb_footprint_plugin.scan import passes
from tb_footprint_plugin.scan.model import UNATTRIBUTED, LogdirFootprint
from tb_footprint_plugin.scan.discovery import discover
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.storage import scratch, throttle
from tb_footprint_plugin.storage.openfiles import find_writers
from tb_footprint_plugin.storage.files import is_regular, matches as file_matches
from tb_footprint_plugin.storage.paths import UnsafePath, contained, is_within, real_within, state_dir, state_dirs_in
from tb_footprint_plugin.storage.remote import RemoteError, is_bucket_url, is_remote  # noqa: F401  (is_bucket_url: the tab)

DEFAULT_BACKENDS = ("python", "rust")
RunProgress = Callable[[str, str, float], None]  # (run, step, fraction)


def _context(logdir: str, backup_dir: Optional[str], quiet_period: float = DEFAULT_QUIET_PERIOD,
             verify_backends: Sequence[str] = DEFAULT_BACKENDS,
             closed_files: Optional[Mapping[str, float]] = None) -> Context:
    if is_remote(logdir) or (backup_dir and is_remote(backup_dir)):
        raise RemoteError("not_supported", f"{logdir}: this verb is not available on object storage "
                          "(scan, plan, reduce, retire, verify, restore, purge, status, history and operations are)")
    logdir = os.path.abspath(logdir)
    if not os.path.isdir(logdir):
        raise NotADirectoryError(f"logdir {logdir} is not a directory")
    if backup_dir is not None:
        backup_dir = os.path.abspath(backup_dir)
        if is_within(logdir, backup_dir):
            raise ValueError(f"backup dir {backup_dir} contains the logdir; choose a separate folder")
    return Context(logdir=logdir, backup_dir=backup_dir, quiet_period=quiet_period,
                   verify_backends=tuple(verify_backends), closed_files=dict(closed_files or {}))


def pending_operations(logdir: str) -> List[str]:
    """Ids of unfinished operations (journals left behind), oldest first; nothing is settled."""
    return [j.op_id for j in pending_journals(Context(logdir).journal_dir)]


def _bucket(logdir: str, backup_dir: Optional[str]):
    from tb_footprint_plugin.engine.bucket import BucketVault
    from tb_footprint_plugin.storage.remote import RemoteFS

    if backup_dir and not is_remote(backup_dir):
        raise ValueError(f"backup dir {backup_dir}: a bucket logdir keeps its backups in the same store "
                         "(server-side copies); give an s3://, gs:// or az:// prefix")
    rfs = RemoteFS(logdir)
    return rfs, BucketVault.for_logdir(rfs, backup_dir)


def _reduce_bucket(logdir: str, backup_dir: Optional[str], pol, *, runs, run_glob, min_size, older_than,
                   quiet_period, on_outcome, verify_backends=DEFAULT_BACKENDS, shard=None, shard_with=None,
                   partition_sizes=None, ledger=None, closed_files=None) -> "ReduceReport":
    """Reduce a bucket logdir: settle unfinished operations, one listing to scan and plan from,
    then each run as its own bucket transaction. With ``shard``, only this shard's runs (the
    partition of ``shard_plan``), and every transition recorded in the shard's ledger objects
    (``engine.bucket_ledger``; also with ``ledger`` set, unsharded)."""
    from tb_footprint_plugin.engine import bucket as bk
    from tb_footprint_plugin.engine.bucket_ledger import BucketLedger
    from tb_footprint_plugin.engine.bucket_reduce import reduce_runs
    from tb_footprint_plugin.scan.scanner import scan_bucket

    rfs, vault = _bucket(logdir, backup_dir)
    recovered = bk.recover(rfs, vault)
    objects = rfs.list_tree()
    in_use_before = _bucket_in_use(rfs, vault, objects)
    fp = scan_bucket(rfs, objects, backup_dir=backup_dir)
    mine = None
    if shard is not None:
        shard = sharding.check_shard(*shard)
        logdirs = _logdir_keys(shard_with or [logdir])
        if logdir not in logdirs:
            raise ValueError(f"shard_with must list the logdir {logdir} itself")
        sizes = partition_sizes if partition_sizes is not None else \
            _shard_sizes(logdirs, backup_dir, {logdir: fp}, write_cache=True)
        mine = shard_plan(logdirs, shard, backup_dir, sizes).get(logdir, [])
        runs = [r for r in mine if runs is None or r in runs]
    traces = _bucket_traces(logdir)  # the dry run's measures, read back: the same bytes after
    p = make_plan(fp, pol, runs=select_runs(fp, runs, run_glob), min_size=min_size, older_than=older_than,
                  quiet_period=quiet_period, closed_files=closed_files, trace_after=traces.trace_after)
    traces.save(r.name for r in fp.runs)
    _bucket_notes(p, fp, backup_dir, traces.stats)
    report = ReduceReport(dry_run=False, plan=p, recovered=recovered, shard=shard, shard_runs=mine)
    book = BucketLedger(rfs, pol.name, sharding.label(shard)) if (shard is not None or ledger) else None
    if book:
        report.ledger_path = book.url
        report.ledger_problems += mark_recovered(book, recovered)
    for rp in p.runs:
        if rp.skipped:
            o = RunOutcome(run=rp.run, status=Outcome.SKIPPED, reason=rp.skipped, code=rp.code,
                           bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
            _mark_bucket_outcome(book, o, report)
            report.outcomes.append(o)
            if on_outcome:
                on_outcome(o)

    def begin(rp) -> None:  # raises RemoteError when the ledger's PUT fails: that run fails, the rest go on
        if book:
            book.mark(rp.run, "reducing", original_size_bytes=rp.bytes_before)

    def settled(o: RunOutcome) -> None:
        _mark_bucket_outcome(book, o, report)
        if on_outcome:
            on_outcome(o)

    todo = [rp for rp in p.runs if not rp.skipped]
    report.outcomes += reduce_runs(rfs, vault, todo, objects, quiet_period,
                                   policy=(p.policy or {}).get("name"), on_outcome=settled,
                                   verify_backends=tuple(verify_backends), begin=begin, closed_files=closed_files)
    report.requests = rfs.stats.to_dict()
    removed = report.removed_from_logdir_bytes
    if removed:  # the backups are whole copies in the store: what purge frees is the bucket's retention's say
        try:
            report.freed_on_disk_after_purge_bytes = bk.retention_report(rfs, vault, removed)["freed_after_purge"]
        except (OSError, ValueError):
            pass
    try:
        in_use_after = _bucket_in_use(rfs, vault)
    except (OSError, ValueError):
        in_use_after = None
    if in_use_before is not None and in_use_after is not None:
        report.disk_in_use_before_bytes, report.disk_in_use_after_bytes = in_use_before, in_use_after
        report.freed_now_bytes = in_use_before - in_use_after  # the backups are copies in the same store: ~0
    return report


def _bucket_in_use(rfs, vault, objects=None) -> Optional[int]:
    """What a bucket logdir and its vault hold, as stored (the listing's sizes; a vault in
    another prefix listed too); None when a listing fails."""
    try:
        objects = rfs.list_tree() if objects is None else objects
        total = usage.stored_bytes(o.size for o in objects.values())
        if not (vault.root == rfs.root or vault.root.startswith(rfs.root + "/")):
            try:
                total += usage.stored_bytes(o.size for o in rfs.list_under(vault.root, vault.root).values())
            except FileNotFoundError:
                pass  # no backup made yet
        return total
    except (OSError, ValueError):
        return None


def _mark_bucket_outcome(book, o: RunOutcome, report: "ReduceReport") -> None:
    """Record a run's outcome in the bucket ledger (done, skipped or failed); a ledger write that
    fails is reported, the run's outcome stands."""
    if not book:
        return
    state = {Outcome.VERIFIED: "done", Outcome.SKIPPED: "skipped"}.get(o.status, "failed")
    try:
        book.mark(o.run, state, original_size_bytes=o.bytes_before, after_size_bytes=o.bytes_after,
                  reduced_ratio=round(1 - o.bytes_after / o.bytes_before, 4) if o.bytes_before else 0.0,
                  verified=o.status == Outcome.VERIFIED, error=o.reason if state != "done" else None,
                  op_id=o.op_id, code=o.code if state != "done" else None)
    except RemoteError as e:
        report.ledger_problems.append({"code": e.code, "detail": f"{o.run}: ledger not written ({e})"})


def _logdir_keys(logdirs: Sequence[str]) -> List[str]:
    """Logdirs as the partition names them: bucket URLs as given, local paths absolute."""
    return [ld.rstrip("/") if is_remote(ld) else os.path.abspath(ld) for ld in logdirs]


def recover_logdir(logdir: str, backup_dir: Optional[str] = None) -> List[RecoveryOutcome]:
    """What every start does (``tb-footprint recover``): settle unfinished operations (rolled
    back, or finished when their swap was recorded), rebuild lost manifests from the vault's
    log, finish killed purges, sweep scratch space of ended processes, and salvage records
    written into backups after their reduction. Each outcome has an action and a code."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        return bk.recover(*_bucket(logdir, backup_dir))
    ctx = _context(logdir, backup_dir)
    return recover_all(ctx, known_vaults(ctx), own_manifests)


def unfinished(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations and damage, found without changing anything, and the command that
    settles them: ``{unfinished_operations, problems, settle_command}`` (problems carry a
    ``codes.Finding``; ``settle_command`` is None when all is well)."""
    ctx = _context(logdir, backup_dir)
    ops = health.unfinished_ops(ctx.journal_dir)
    problems = health.state_problems(ctx.logdir, ctx.state, ctx.journal_dir)
    problems += health.catalogue_problems(known_vaults(ctx), own_manifests(ctx), frozenset(journal_blobs(ctx)))
    # a damaged line or file is named for the user to look at: `recover` cannot mend it
    settles = ops or any(p["code"] not in (Finding.DAMAGED_LINE, Finding.DAMAGED_FILE) for p in problems)
    return {"unfinished_operations": ops, "problems": problems,
            "settle_command": health.settle_command(ctx.logdir, backup_dir) if settles else None}


def plan(logdir: str, policy="archive", *, backup_dir: Optional[str] = None,
         runs: Optional[List[str]] = None, run_glob: Optional[str] = None, min_size: int = 0,
         older_than: Optional[float] = None, quiet_period: float = DEFAULT_QUIET_PERIOD,
         footprint: Optional[LogdirFootprint] = None,
         closed_files: Optional[Mapping[str, float]] = None, vault_format: str = DEFAULT_VAULT_FORMAT) -> Plan:
    """The dry run: what ``policy`` would do. Writes nothing but its cache of selection outcomes
    (``scan.selcache``, beside the scan cache; the scan cache itself is not written).

    ``closed_files`` (logdir-relative path -> mtime when found closed) are files the caller's
    own job wrote and closed: the quiet period skips them while unchanged, and only them.
    A run with an unfinished operation, or with a file some process on this machine holds open
    for writing, is left alone (``code``; ``writers`` names the processes).

    On a bucket logdir the plan also carries ``cost``: the requests its scan issued and the
    requests and bytes a reduction and a restore would take. ``vault_format``: the vault its note
    counts with (what is freed now and after purge; see ``reduce_logdir``)."""
    fp = footprint or scan(logdir, backup_dir=backup_dir, write_cache=False)
    runs = select_runs(fp, runs, run_glob)
    rewrite = None if is_remote(fp.logdir) else _rewrite_of(os.path.abspath(logdir))
    traces = _bucket_traces(fp.logdir) if rewrite is None else rewrite
    p = make_plan(fp, policy, runs=runs, min_size=min_size,
                  older_than=older_than, quiet_period=quiet_period, closed_files=closed_files,
                  rewrite=rewrite, trace_after=traces.trace_after)
    warning = traces.save(r.name for r in fp.runs)
    if warning:
        p.notes.append(warning)
    if is_remote(fp.logdir):
        _bucket_notes(p, fp, backup_dir, traces.stats)
        return p
    logdir = os.path.abspath(logdir)
    p.notes = [n for n in p.notes if n != LOCAL_VAULT_NOTE] + [_vault_note(logdir, backup_dir, p, vault_format)]
    ops = health.unfinished_ops(os.path.join(state_dir(logdir), "journal"))
    if ops:
        cmd = health.settle_command(logdir, backup_dir)
        interrupted = 0
        for o in ops:
            if o["run"] is None:
                interrupted += 1
                continue
            # an operation whose holder still runs (elsewhere: a live lease) is not interrupted
            holder = RunLock(os.path.join(state_dir(logdir), "locks"), o["run"]).live_holder()
            if holder:
                leave_alone(p, o["run"], f"run {o['run']} is being changed by another process ({holder}); "
                            "left alone", Skip.LOCKED)
            else:
                interrupted += 1
                leave_alone(p, o["run"], f"unfinished {o['kind']} operation {o['op_id']} (interrupted?); "
                            f"run `{cmd}` to settle it", Skip.UNFINISHED)
        if interrupted:
            p.notes.append(f"{interrupted} unfinished operation(s): run `{cmd}` to settle them")
    live = [rp.run for rp in p.runs if rp.actions and not rp.skipped]
    if live:
        paths = [os.path.join(logdir, f.path) for r in live for f in (fp.run(r).files if fp.run(r) else [])
                 if f.kind != "symlink"]
        apply_open_writers(p, find_writers(paths), logdir)
    return p


def _freed_estimate(logdir: str, backup_dir: Optional[str], p: Plan,
                    vault_format: str = DEFAULT_VAULT_FORMAT) -> Tuple[int, int, bool]:
    """``(freed now, freed after purge, vault on the logdir's disk)`` of plan ``p`` with the
    chosen vault. Hard-link vault: on the logdir's disk nothing is freed until purge; on another
    disk the copies are there, so the logdir's disk gains it all now and purge frees the copies.
    Compressed vault: the backups keep about their compressed size (``usage.estimate_compressed``,
    sampled), the rest is freed now; purge frees that size."""
    removable = p.removable_bytes
    vault = os.path.abspath(backup_dir) if backup_dir else state_dir(logdir)
    same = usage.device_of(vault) == usage.device_of(logdir)
    if vault_format != "compressed":
        return (0 if same else removable), removable, same
    originals = [(os.path.join(logdir, a.path), a.bytes_before) for rp in p.runs if not rp.skipped
                 for a in rp.actions if a.kind in ("delete", "compress", "rewrite")]
    kept = usage.estimate_compressed(originals)
    return (max(0, removable - kept) if same else removable), kept, same


def _vault_note(logdir: str, backup_dir: Optional[str], p: Plan, vault_format: str = DEFAULT_VAULT_FORMAT) -> str:
    """What a plan says of its local vault: what is freed now and what only after purge."""
    now, later, same = _freed_estimate(logdir, backup_dir, p, vault_format)
    if vault_format == "compressed":
        where = ("on disk (logdir + vault)" if same else "on the logdir's disk (the vault is on another disk)")
        return (f"freed now: ~{human_bytes(now)} {where}: each run's backups are compressed in the vault "
                f"once it commits (a file that does not compress stays as it is); ~{human_bytes(later)} more "
                "after `tb-footprint purge` (--vault-format hardlink keeps them as hard links, freed only by purge)")
    if same:
        return (f"freed now: ~{human_bytes(now)} on disk (logdir + vault): the backups are hard links in the vault "
                f"on the same disk; {human_bytes(later)} more after `tb-footprint purge` "
                "(or put the vault on another disk with --backup-dir)")
    return (f"freed now: {human_bytes(now)} on the logdir's disk: the backups are copies in the vault on another "
            f"disk; {human_bytes(later)} more there after `tb-footprint purge`")


def _disk_in_use(ctx: Context) -> "usage.DiskUsage":
    """Disk in use by the logdir and every vault of it, now (``engine.usage.disk_usage``)."""
    return usage.disk_usage(ctx.logdir, known_vaults(ctx))


def _rewrite_of(logdir: str):
    """The event-file rewrite's own selection, made at plan time (``plan.content``) and cached
    for the reduce that follows, its outcome kept across plans of unchanged runs
    (``transforms.plan_cache``); a run it cannot analyse now (changed meanwhile) is estimated.
    Its ``trace_after`` measures the PyTorch traces' gzip and slim the same way."""
    from tb_footprint_plugin.transforms.plan_cache import PlanRewrites

    return PlanRewrites(logdir)


def _bucket_traces(url: str):
    """A bucket plan's ``trace_after``: its PyTorch traces' gzip and slim measured by ranged reads,
    cached per object (``transforms.plan_cache.BucketTraces``), as a local plan measures them."""
    from tb_footprint_plugin.transforms.plan_cache import BucketTraces

    return BucketTraces(url)


def _bucket_notes(p: Plan, fp: LogdirFootprint, backup_dir: Optional[str], measured=None) -> None:
    """The request cost of a bucket plan, and when its bytes are really freed on this bucket;
    ``measured``: the requests the plan's own trace measures issued, counted with its scan's."""
    from tb_footprint_plugin.engine.bucket import retention_report
    from tb_footprint_plugin.plan.cost import request_cost
    from tb_footprint_plugin.storage.remote import protocol_of

    p.cost = request_cost(p, fp, protocol_of(fp.logdir))
    if measured is not None:  # the plan read the traces it measures: that is this plan's cost too
        scanned = p.cost["scan"]
        for k, v in measured.to_dict().items():
            scanned[k] = scanned.get(k, 0) + v
    rfs, vault = _bucket(fp.logdir, backup_dir)
    p.cost["freed"] = retention_report(rfs, vault, p.removable_bytes)
    p.notes = [n for n in p.notes if n != LOCAL_VAULT_NOTE] + p.cost["freed"]["lines"]


class _RunOutcomes:
    """What a report of per-run outcomes says as a whole: which failed, and whether all went well."""

    outcomes: List[RunOutcome]

    @property
    def failed(self) -> List[RunOutcome]:
        return [o for o in self.outcomes if o.status in (Outcome.FAILED, Outcome.ROLLED_BACK)]

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass
class ReduceReport(_RunOutcomes):
    """Result of ``reduce_logdir``: the plan, per-run outcomes and totals."""

    dry_run: bool
    plan: Plan
    outcomes: List[RunOutcome] = field(default_factory=list)
    recovered: List[RecoveryOutcome] = field(default_factory=list)
    ledger_path: Optional[str] = None
    #: bucket logdirs: the requests the reduction issued, per verb, and bytes moved
    requests: Optional[dict] = None
    shard: Optional[Tuple[int, int]] = None
    #: the runs of the logdir this shard took (None without a shard)
    shard_runs: Optional[List[str]] = None
    #: what ``purge`` of this batch's backups would free on disk (purge's own count)
    freed_on_disk_after_purge_bytes: int = 0
    #: disk in use by the logdir and its vault(s) before and after the batch, as ``du`` counts it
    #: (allocated blocks, hard links once; a bucket: the sizes as stored). A dry run: None
    disk_in_use_before_bytes: Optional[int] = None
    disk_in_use_after_bytes: Optional[int] = None
    #: what the logdir's disk gained now: ~0 with the default vault (its backups are hard links
    #: on that disk), the removed bytes with a vault on another disk. A dry run: the estimate
    #: for the chosen vault (``engine.usage``)
    freed_now_bytes: int = 0
    #: what the ledger had that was refused (untrusted input; ``engine.ledger.check_ledger``)
    ledger_problems: List[dict] = field(default_factory=list)

    @property
    def removable_bytes(self) -> int:
        return self.plan.removable_bytes

    @property
    def expected_after_bytes(self) -> int:
        return self.plan.expected_after_bytes

    @property
    def saved_bytes(self) -> int:
        return sum(o.saved_bytes for o in self.outcomes)

    @property
    def removed_from_logdir_bytes(self) -> int:
        """What the runs' files shrank by (what TensorBoard's logdir holds less); the disk does not
        drop by this yet: backups stay in the vault (hard links on the same disk) until a purge."""
        return self.saved_bytes

    @property
    def removed_files(self) -> List[str]:
        return [p for o in self.outcomes for p in o.removed_files]

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "removable_bytes": self.removable_bytes,
            "expected_after_bytes": self.expected_after_bytes,
            "saved_bytes": self.saved_bytes,
            "removed_from_logdir_bytes": self.removed_from_logdir_bytes,
            "freed_on_disk_after_purge_bytes": self.freed_on_disk_after_purge_bytes,
            "disk_in_use_before_bytes": self.disk_in_use_before_bytes,
            "disk_in_use_after_bytes": self.disk_in_use_after_bytes,
            "freed_now_bytes": self.freed_now_bytes,
            "removed_files": self.removed_files,
            "ok": self.ok,
            "logdir": self.plan.logdir,  # also in the plan: said first, for reports of several logdirs
            "plan": self.plan.to_dict(),
            "outcomes": [o.to_dict() for o in self.outcomes],
            "recovered": [vars(r) for r in self.recovered],
            "ledger": self.ledger_path,
            "requests": self.requests,
            "shard": sharding.label(self.shard),
            "shard_runs": self.shard_runs,
            "ledger_problems": self.ledger_problems,
        }


def shard_sizes(logdirs: Sequence[str], backup_dir: Optional[str] = None) -> Dict[str, int]:
    """The partition's input over ``logdirs`` sharded together: ``plan.shard.key(logdir, run)`` ->
    the run's original bytes (its size before any reduction the change log records)."""
    return _shard_sizes(logdirs, backup_dir, {}, write_cache=False)


def _shard_sizes(logdirs: Sequence[str], backup_dir: Optional[str], scans: Dict[str, LogdirFootprint],
                 write_cache: bool) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for ld in _logdir_keys(logdirs):
        fp = scans[ld] if ld in scans else scan(ld, backup_dir=backup_dir, write_cache=write_cache)
        scans[ld] = fp
        cur = {r.name: r.total_bytes for r in fp.runs if r.name != UNATTRIBUTED}
        # a run another worker is reducing right now may have been scanned half-swapped: its
        # journal says the size it had. Read before the change log, which a finished operation
        # writes before it drops its journal, so one of the two always has it.
        for run, b in sharding.original_sizes(cur, _in_flight(ld) + history(ld, backup_dir)).items():
            out[sharding.key(_partition_name(ld), run)] = b
    return out


def _in_flight(logdir: str) -> List[dict]:
    """Reductions under way in a local logdir, as change-log entries of their planned sizes."""
    if is_remote(logdir):
        return []  # a bucket's manifests, read as its history, are written before anything is deleted
    return [{"kind": "reduce", "outcome": "verified", "run": o["run"], "before": o["bytes_before"]}
            for o in health.unfinished_ops(os.path.join(state_dir(logdir), "journal"))
            if o["kind"] == "reduce" and isinstance(o["run"], str) and o["bytes_before"] is not None]


def _partition_name(logdir: str) -> str:
    """A logdir as the partition names it: the same on every worker however it was reached (a
    local path after symlinks; workers that named one logdir by two paths split it differently
    and left runs in no shard)."""
    return logdir if is_remote(logdir) else os.path.realpath(logdir)


def shard_plan(logdirs: Sequence[str], shard: Tuple[int, int], backup_dir: Optional[str] = None,
               sizes: Optional[Mapping[str, int]] = None) -> Dict[str, List[str]]:
    """Which runs of each logdir shard ``shard`` = (index, count) takes: logdir -> runs. Every
    worker computes the same partition from its own scan (``plan.shard`` says how and its bound)."""
    sizes = shard_sizes(logdirs, backup_dir) if sizes is None else sizes
    out: Dict[str, List[str]] = {ld: [] for ld in _logdir_keys(logdirs)}
    names = {_partition_name(ld): ld for ld in out}
    for k in sharding.select(sizes, shard):
        name, run = k.split("\0", 1)
        if name in names:
            out[names[name]].append(run)
    return out


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
    if is_remote(logdir):
        if not dry_run:
            lease.configure(lease_seconds, sharding.label(shard))
            return _reduce_bucket(logdir.rstrip("/"), backup_dir, get_policy(policy), runs=runs, run_glob=run_glob,
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
    ctx = _context(logdir, backup_dir, quiet_period, verify_backends, closed_files)
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
        return _reduce(ctx, logdir, backup_dir, pol, dry_run, runs=runs, run_glob=run_glob, min_size=min_size,
                       older_than=older_than, quiet_period=quiet_period, closed_files=closed_files, jobs=jobs,
                       timeout=timeout, ledger=ledger, progress=progress, on_outcome=on_outcome, cancel=cancel,
                       shard=shard, shard_with=shard_with, partition_sizes=partition_sizes,
                       vault_format=vault_format)
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
    logdirs = _logdir_keys(logdirs)
    if len({_partition_name(ld) for ld in logdirs}) != len(logdirs):
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


def selection_by_logdir(logdirs: Sequence[str], runs: Optional[List[str]], run_glob: Optional[str],
                        backup_dir: Optional[str] = None) -> Dict[str, dict]:
    """A ``runs`` / ``run_glob`` selection over several logdirs: each name and the glob must match
    a run of one of them (else ``SelectionError`` naming what matched nowhere, before anything
    runs); each logdir gets the part of the selection that names its own runs."""
    names = {ld: [r.name for r in scan(ld, backup_dir=backup_dir, write_cache=False).runs if r.name != UNATTRIBUTED]
             for ld in logdirs}
    every = [n for v in names.values() for n in v]
    missing = [n for n in runs or [] if n not in every]
    if run_glob and not any(selecting.matches(n, run_glob) for n in every):
        missing.append(run_glob)
    if missing:
        raise SelectionError(f"no run of {', '.join(logdirs)} matches {', '.join(repr(m) for m in missing)}"
                             + "".join(selecting.missing_hint(m, every) for m in missing))
    out = {}
    for ld, v in names.items():
        here = None if runs is None else [n for n in runs if n in v]
        if run_glob and not any(selecting.matches(n, run_glob) for n in v):
            out[ld] = {"runs": [], "run_glob": None}  # nothing of this logdir is selected
        else:
            out[ld] = {"runs": here, "run_glob": run_glob}
    return out


def select_runs(fp: LogdirFootprint, runs: Optional[Sequence[str]] = None,
                run_glob: Optional[str] = None) -> Optional[List[str]]:
    """The runs of ``fp`` a selection names (``runs``: exact names, ``run_glob``: a glob, matched
    by ``plan.select``, the one rule of every verb), or None when there is no selection; a name
    or glob that matches no run raises ``SelectionError`` naming it (a typo must not look like
    "nothing to do")."""
    if runs is None and not run_glob:
        return None
    names = [r.name for r in fp.runs if r.name != UNATTRIBUTED]
    chosen, missing = selecting.select(names, runs, run_glob)
    if missing:
        shown = ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
        raise SelectionError(f"no run of {fp.logdir} matches {', '.join(repr(m) for m in missing)}"
                             + "".join(selecting.missing_hint(m, names) for m in missing)
                             + f" (runs: {shown or 'none'})")
    return chosen


class NotALogdir(ValueError):
    """A folder with no TensorBoard data and no state of ours: nothing to scan, plan or reduce."""


def check_logdir(logdir: str, backup_dir: Optional[str] = None,
                 footprint: Optional[LogdirFootprint] = None) -> None:
    """Raise ``NotALogdir`` (naming the folder) unless ``logdir`` holds TensorBoard data (an event
    file, a profile session, a PyTorch trace: a run as the scan counts them) or a state folder
    (a logdir whose every run was retired is still one). Reads only; writes nothing.
    ``footprint``: the caller's scan of it, so the folder is not walked twice."""
    if is_remote(logdir):
        return
    if not os.path.isdir(logdir):
        raise NotALogdir(f"logdir {logdir} is not a directory")
    base = os.path.abspath(logdir)
    if state_dirs_in(base):
        return
    if footprint is not None:  # the caller's scan already walked it
        names = [r.name for r in footprint.runs]
    else:
        exclude = [os.path.abspath(backup_dir)] if backup_dir and is_within(backup_dir, base) else []
        names = list(discover(base, exclude=exclude).runs)
    if any(name != UNATTRIBUTED for name in names):
        return
    raise NotALogdir(f"{logdir} is not a TensorBoard logdir: no event file, profile session or PyTorch trace "
                     "in it (give the folder you pass to `tensorboard --logdir`)")


def interrupted_state(logdir: str, backup_dir: Optional[str] = None) -> List[dict]:
    """Each unfinished operation said plainly, read-only: ``{op_id, run, kind, untouched, files,
    changed}``. ``untouched`` is True when the run's files were never swapped (no swap record) and
    every backed-up file still has the sha256 it had before; False when some file differs (the
    settle command puts the originals back); None when the journal does not tell (not a reduce).
    Journals are untrusted input: a path leading out of the logdir counts as not verified."""
    if is_remote(logdir):
        return []
    base = os.path.abspath(logdir)
    out = []
    for j in pending_journals(os.path.join(state_dir(base), "journal")):
        recs = j.records()
        begin = recs[0] if recs and recs[0].get("type") == "begin" else {}
        row = {"op_id": j.op_id, "run": begin.get("run"), "kind": begin.get("kind"), "untouched": None,
               "files": 0, "changed": []}
        if begin.get("kind") == "reduce":
            backups = [r for r in recs if r.get("type") == "backup"]
            swapped = any(r.get("type") in ("swap", "swapped", "commit") for r in recs)
            changed = []
            for r in backups:
                try:
                    p = contained(base, r.get("path"))
                except UnsafePath:
                    changed.append(str(r.get("path")))
                    continue
                if not (real_within(p, base) and is_regular(p) and isinstance(r.get("sha256"), str)
                        and isinstance(r.get("size"), int) and file_matches(p, r["sha256"], r["size"])):
                    changed.append(r.get("path"))
            row.update(untouched=not swapped and not changed, files=len(backups), changed=changed)
        out.append(row)
    return out


def ledger_skips(p: Plan, policy="archive", *, backup_dir: Optional[str] = None, ledger: Optional[str] = "default",
                 shard: Optional[Tuple[int, int]] = None) -> List[str]:
    """Mark in ``p`` each planned run the batch ledger already settled, as a resumed reduce will
    skip it (``Skip.LEDGER_DONE``, by the ledger's own ``should_run``), and return their names.
    Reads only: a question asked before a resumed reduce names and counts exactly the runs it
    will touch. A run with an interrupted attempt of its own stays in (the reduce settles it, and
    records it in the ledger, before it decides); a ledger of another policy holds nothing (the
    reduce sets it aside); a bucket logdir's reduce does not skip by its ledger, so neither does this."""
    from tb_footprint_plugin.engine.ledger import load_ledger

    if not ledger or is_remote(p.logdir):
        return []
    ctx = _context(p.logdir, backup_dir)
    path = ledger_path(ctx.state, shard) if ledger == "default" else os.path.abspath(ledger)
    data, _problems = load_ledger(path, ctx.logdir)  # untrusted: refused entries are simply not used
    name = get_policy(policy).name
    if data is None or (data.get("policy") != name and data["runs"]):
        return []
    book = Ledger(path, name, ctx.logdir)
    skipped = []
    for rp in p.runs:
        if not rp.actions or rp.skipped:
            continue  # nothing planned, or left alone already (an unfinished attempt: redone)
        e = data["runs"].get(rp.run)
        if not book.should_run(e, rp.bytes_before):
            rp.skipped, rp.code = f"already {e['state']} in the ledger {path}", Skip.LEDGER_DONE
            skipped.append(rp.run)
    return skipped


class Interrupted(KeyboardInterrupt):
    """A reduce stopped by Ctrl-C, after it settled what it left: ``settled`` is what
    ``settle_interrupted`` returned (the run under way rolled back, its files' sha256 checked)."""

    def __init__(self, settled: List[dict]):
        super().__init__("interrupted; the run under way was rolled back")
        self.settled = settled


def settle_interrupted(logdir: str, backup_dir: Optional[str] = None, *, policy="archive",
                       ledger: Optional[str] = "default", shard: Optional[Tuple[int, int]] = None,
                       rolled_back: Sequence[str] = ()) -> List[dict]:
    """After a reduce of this process was interrupted (Ctrl-C): settle what it left as the next
    start would (a run not committed goes back to its exact original bytes and its staging files
    are removed; one past the commit point is finished) and record it in the batch ledger, so
    ``status`` shows the run as pending again, not as held by a worker that is gone.

    ``rolled_back``: operations of the interrupted batch that their own worker thread rolled back
    when it saw the interrupt (``--jobs`` > 1: a run under way stops at its next step); each is
    said as the others are (its files' sha256 checked against its manifest) and recorded in the
    ledger as pending again, not as a failure.

    Returns one dict per settled operation: ``{op_id, run, action, code, detail, untouched,
    files}``; ``untouched`` is checked after the fact (every backed-up file's sha256 equal to
    the one it had before the reduce)."""
    if is_remote(logdir):
        return [dict(vars(o), untouched=None, files=0) for o in recover_logdir(logdir, backup_dir)]
    base = os.path.abspath(logdir)
    before = {}
    for j in pending_journals(os.path.join(state_dir(base), "journal")):
        recs = j.records()
        before[j.op_id] = [r for r in recs if r.get("type") == "backup"]
    recovered = recover_logdir(logdir, backup_dir)
    ctx = _context(logdir, backup_dir)
    book = _open_ledger(ctx, ledger, get_policy(policy).name, shard) if ledger else None
    if book is not None and os.path.exists(book.path):
        mark_recovered(book, recovered)
    out = _rolled_back_at_interrupt(ctx, rolled_back, book)
    for o in recovered:
        row = dict(op_id=o.op_id, run=o.run, action=o.action, code=o.code, detail=o.detail, untouched=None, files=0)
        backups = before.get(o.op_id)
        if o.action == Recovery.ROLLED_BACK and backups:  # a reduce's backups (a retire moves whole trees)
            same = 0
            for r in backups:
                try:
                    p = contained(base, r.get("path"))
                except UnsafePath:
                    continue
                if real_within(p, base) and is_regular(p) and isinstance(r.get("sha256"), str) and \
                        isinstance(r.get("size"), int) and file_matches(p, r["sha256"], r["size"]):
                    same += 1
            row.update(untouched=same == len(backups), files=len(backups))
        out.append(row)
    return out


def _rolled_back_at_interrupt(ctx: Context, op_ids: Sequence[str], book: Optional[Ledger]) -> List[dict]:
    """``settle_interrupted``'s rows of the operations a worker thread rolled back itself at the
    interrupt: untouched when every original its manifest names has its sha256 from before (the
    manifest is untrusted input: a path leading out of the logdir counts as not verified); the
    ledger says the run is pending again (code ``rolled_back``), as for a run recovery settled."""
    if not op_ids:
        return []
    wanted = set(op_ids)
    out = []
    for m in own_manifests(ctx):
        if m.get("op_id") not in wanted or m.get("kind") != "reduce" or m.get("outcome") != Outcome.ROLLED_BACK:
            continue
        files = [f for f in m.get("files") or [] if isinstance(f, dict)]
        same = 0
        for f in files:
            try:
                p = contained(ctx.logdir, f.get("path"))
            except UnsafePath:
                continue
            if real_within(p, ctx.logdir) and is_regular(p) and isinstance(f.get("sha256"), str) and \
                    isinstance(f.get("size"), int) and file_matches(p, f["sha256"], f["size"]):
                same += 1
        untouched = same == len(files)
        detail = ("stopped at its next step by the interrupt and rolled back before the commit point"
                  + ("" if untouched else "; not every file has its sha256 from before"))
        out.append(dict(op_id=m["op_id"], run=m.get("run"), action=Recovery.ROLLED_BACK, code=Recovery.ROLLED_BACK,
                        detail=detail, untouched=untouched, files=len(files)))
        if book is not None and isinstance(m.get("run"), str):
            try:  # the run is to do again, not a failure (a resumed batch retries either)
                book.mark(m["run"], "pending", op_id=m["op_id"], verified=False, code=Recovery.ROLLED_BACK,
                          error=f"interrupted; {detail}")
            except OSError:
                pass  # the ledger is a record: the run's state on disk stands
    return out


def _reduce(ctx: Context, logdir: str, backup_dir: Optional[str], pol, dry_run: bool, *, runs, run_glob, min_size,
            older_than, quiet_period, closed_files, jobs, timeout, ledger, progress, on_outcome, cancel,
            shard, shard_with, partition_sizes, vault_format=DEFAULT_VAULT_FORMAT) -> ReduceReport:
    if not dry_run:
        refuse_unless_ours(ctx.state, ctx.vault)  # never a backup where another user can unlink it
    recovered = [] if dry_run else recover_logdir(logdir, backup_dir)
    # a reduce's scan keeps its passes over big event files for the rewrite (``scan.passes``)
    keeping = contextlib.nullcontext() if dry_run else passes.retaining()
    token = None
    try:
        with keeping as token:
            mine = None
            scans: Dict[str, LogdirFootprint] = {}
            if shard is not None:
                shard = sharding.check_shard(*shard)
                logdirs = _logdir_keys(shard_with or [ctx.logdir])
                if ctx.logdir not in logdirs:
                    raise ValueError(f"shard_with must list the logdir {ctx.logdir} itself")
                if partition_sizes is not None:
                    scans[ctx.logdir] = scan(ctx.logdir, backup_dir=backup_dir, write_cache=not dry_run)
                    sizes = partition_sizes
                else:  # a dry run writes nothing, not even the scan cache
                    sizes = _shard_sizes(logdirs, backup_dir, scans, write_cache=not dry_run)
                mine = shard_plan(logdirs, shard, backup_dir, sizes).get(ctx.logdir, [])
                runs = [r for r in mine if runs is None or r in runs]
                if ledger is None:
                    ledger = "default"
            p = plan(logdir, pol, backup_dir=backup_dir, runs=runs, run_glob=run_glob, min_size=min_size,
                     older_than=older_than, quiet_period=quiet_period, closed_files=closed_files,
                     footprint=scans.get(ctx.logdir), vault_format=vault_format)  # the partition's own scan: one scan per worker
        report = ReduceReport(dry_run=dry_run, plan=p, recovered=recovered, shard=shard, shard_runs=mine)
        if dry_run:
            report.outcomes = [RunOutcome(run=rp.run, status=Outcome.SKIPPED if rp.skipped else Outcome.DRY_RUN,
                                          reason=rp.skipped, code=rp.code, bytes_before=rp.bytes_before,
                                          bytes_after=rp.expected_after_bytes) for rp in p.runs]
            report.freed_now_bytes, report.freed_on_disk_after_purge_bytes, _same = \
                _freed_estimate(ctx.logdir, backup_dir, p, vault_format)
            return report
        remember_vault(ctx)
        before = _disk_in_use(ctx)
        book = _open_ledger(ctx, ledger, pol.name, shard)
        if book:
            report.ledger_path = book.path
        todo = _ledger_filter(book, p, report, on_outcome, recovered)
        batch = _Batch(ctx, pol.to_dict(), book, timeout, cancel, progress, on_outcome, vault_format)
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
        report.freed_on_disk_after_purge_bytes = _freed_after_purge(ctx, [o.op_id for o in report.outcomes
                                                                          if o.status == Outcome.VERIFIED])
        after = _disk_in_use(ctx)
        report.disk_in_use_before_bytes, report.disk_in_use_after_bytes = before.total_bytes, after.total_bytes
        # what the logdir's disk gained: a vault on another disk grew by what it took in
        report.freed_now_bytes = before.on_logdir_disk - after.on_logdir_disk
        return report
    finally:
        if token is not None:
            passes.release(token)


def _open_ledger(ctx: Context, ledger: Optional[str], policy_name: str,
                 shard: Optional[Tuple[int, int]] = None) -> Optional[Ledger]:
    """The batch ledger (``"default"``: ``<state>/ledger.json``, or the shard's own), only inside
    the logdir or the vault."""
    if not ledger:
        return None
    path = ledger_path(ctx.state, shard) if ledger == "default" else os.path.abspath(ledger)
    if not (is_within(path, ctx.logdir) or is_within(path, ctx.vault.root)):
        raise ValueError(f"ledger {path} must be inside the logdir or the backup vault")
    return Ledger(path, policy_name, ctx.logdir, shard=sharding.label(shard))


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
    """One run of a batch: its own transaction, recorded in the ledger step by step."""

    ctx: Context
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

        o = reduce_run(self.ctx, rp, policy=self.policy, cancel=token, progress=step)
        if o.status == Outcome.VERIFIED and o.op_id and self.vault_format == "compressed":
            # after the commit, never inside the transaction: its verification read the backup as
            # the original's own inode; a failure here leaves hard links (safe, freed by purge);
            # a blob another run's transaction backs up too stays plain until that one's turn.
            # Under the run's lock, so no restore or purge of the run races it; a run taken
            # meanwhile is compacted by the next start (the note)
            try:
                with RunLock(self.ctx.lock_dir, rp.run):
                    compact_operation(self.ctx.vault, o.op_id, journal_blobs(self.ctx))
            except (RunLocked, OSError):
                # a lock file the disk refuses (ENOSPC, EMFILE) fails no committed run: the
                # backups stay hard links and the next start compacts them, as for a busy run
                note_compaction(self.ctx.vault, o.op_id)
        if book:
            state = {Outcome.VERIFIED: "done", Outcome.SKIPPED: "skipped"}.get(o.status, "failed")
            self._mark(rp.run, state, original_size_bytes=o.bytes_before, after_size_bytes=o.bytes_after,
                       reduced_ratio=round(1 - o.bytes_after / o.bytes_before, 4) if o.bytes_before else 0.0,
                       verified=o.verified, error=o.reason if state != "done" else None, op_id=o.op_id,
                       code=o.code if state != "done" else None)
        if self.on_outcome:
            self.on_outcome(o)
        return o


def _freed_after_purge(ctx: Context, op_ids: List[str]) -> int:
    """What purging these operations' backups would free, counted by purge's own rule."""
    if not op_ids:
        return 0
    try:
        return freeable_bytes(ctx, op_ids)
    except OSError:
        return 0


def reduce_summary(report: ReduceReport, runs: Optional[Sequence[str]] = None,
                   categories_before: Optional[dict] = None, *, with_files: bool = True) -> dict:
    """What both front ends show of a reduce: ``report.to_dict()`` with, per outcome, the
    category changes, the fidelity lines, which dashboards it touched and the verification
    (without its internal views); a run of ``runs`` the batch did not reach is listed as
    skipped (``Skip.NOT_IN_PLAN``); ``committed_any`` says whether anything changed."""
    d = report.to_dict()
    plan_runs = {rp["run"]: rp for rp in d.get("plan", {}).get("runs", [])}
    before = categories_before or {}
    for o in d["outcomes"]:
        rp = plan_runs.get(o["run"], {})
        labels = labels_for({a.get("category") for a in rp.get("actions", [])})
        o["category_changes"] = category_changes(rp, labels) if o["status"] == Outcome.VERIFIED else []
        o["categories_before"] = before.get(o["run"], {})
        o["fidelity"] = rp.get("fidelity", [])
        o["dashboards"] = dashboards_note("reduce", o, rp.get("actions", []))
        if o.get("verification"):
            o["verification"] = {k: v for k, v in o["verification"].items() if not k.startswith("_") and k != "views"}
    seen = {o["run"] for o in d["outcomes"]}
    for n in runs or ():
        if n not in seen:
            d["outcomes"].append({
                "run": n, "status": Outcome.SKIPPED, "code": Skip.NOT_IN_PLAN, "bytes_before": 0, "bytes_after": 0,
                "saved_bytes": 0, "reason": "not in the plan any more (the run changed since the scan); "
                                            "rescan and look again"})
    d["committed_any"] = any(o["status"] == Outcome.VERIFIED for o in d["outcomes"])
    d["dashboards"] = dashboards_summary(
        "reduce", [(o, plan_runs.get(o["run"], {}).get("actions", [])) for o in d["outcomes"]])
    if not with_files:
        d.pop("removed_files", None)
    return d


class NotRestorable(ValueError):
    """A restore that cannot start; ``code``: ``not_found``, ``blocked`` or ``already_restored``."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def restore_target(logdir: str, *, op: Optional[str] = None, run: Optional[str] = None,
                   backup_dir: Optional[str] = None) -> dict:
    """Check that a restore of ``op`` (or of ``run``'s newest kept reduction) can start, by the
    rule ``restore`` applies (local and bucket logdirs alike); returns ``{"run", "op", "run_only"}``
    or raises ``NotRestorable``."""
    ops = operations(logdir, backup_dir=backup_dir)
    if op is not None:
        m = next((x for x in ops if x.get("op_id") == op), None)
        if m is None:
            raise NotRestorable(f"no operation {op!r} in the vault", "not_found")
        if m.get("kind") != "reduce":
            raise NotRestorable(f"operation {op} is a {m.get('kind')}, not a reduction", "blocked")
        if m.get("outcome") != Outcome.VERIFIED:
            raise NotRestorable(f"operation {op} did not change the run ({m.get('outcome')}); nothing to restore",
                                "blocked")
        if m.get("restored_by"):
            raise NotRestorable(f"operation {op} was already restored by {m['restored_by']}", "already_restored")
        if m.get("backup_purged"):
            raise NotRestorable(f"the backup of {op} was purged; nothing to restore from", "blocked")
        newer = [x for x in ops if x.get("run") == m.get("run") and is_kept(x)
                 and (x.get("started_at") or 0) > (m.get("started_at") or 0)]
        if newer:
            raise NotRestorable(f"operation {newer[0]['op_id']} on this run is newer: restore it first", "blocked")
        return {"run": m["run"], "op": op, "run_only": False}
    if run is None:
        raise NotRestorable("give the operation to restore (op) or a run (run)", "not_found")
    if not any(x.get("run") == run and is_kept(x) for x in ops):
        raise NotRestorable(f"nothing to restore for run {run!r}", "not_found")
    return {"run": run, "op": None, "run_only": True}


def restore_summary(outcomes: List[RunOutcome]) -> dict:
    """What both front ends show of a restore: the outcomes with the dashboards they touched."""
    out = []
    for o in outcomes:
        d = o.to_dict()
        d["dashboards"] = dashboards_note("restore", d)
        out.append(d)
    return {"outcomes": out, "ok": all(o["status"] == Outcome.RESTORED or o.get("code") == Skip.ALREADY_RESTORED
                                       for o in out),
            "dashboards": dashboards_summary("restore", [(o, None) for o in out]),
            "committed_any": any(o["status"] == Outcome.RESTORED for o in out)}


def verify(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
           backup_dir: Optional[str] = None,
           verify_backends: Sequence[str] = DEFAULT_BACKENDS,
           progress: Optional[Callable[[dict, int, int], None]] = None) -> List[dict]:
    """Re-check committed reductions: every backup re-hashed, and the run as it is now read by
    TensorBoard's readers against the original (from the vault). ``progress(summary, i, n)``
    is called as each check starts (``summary``: the operation's summary, with its bytes).

    On a bucket logdir every backup object is checked against the checksums the store computed for
    its original, removed keys must still be absent and replaced keys must still hold the reduced
    bytes (the store's checksum), with nothing downloaded."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = _bucket(logdir, backup_dir)
        bk.recover(rfs, vault)
        return bk.recheck(rfs, vault, run=run, op=op)
    ctx = _context(logdir, backup_dir, verify_backends=verify_backends)
    recover_logdir(logdir, backup_dir)
    hook = None if progress is None else (lambda m, i, n: progress(operation_summary(m), i, n))
    results = recheck(ctx, run, op, progress=hook)
    if not op:  # damage no operation's check shows: lost manifests, blobs of no operation
        for p in unfinished(logdir, backup_dir)["problems"]:
            if p["code"] in (Finding.MANIFEST_LOST, Finding.MANIFEST_DAMAGED, Finding.ORPHAN_BLOBS,
                             Finding.IDENTITY_DAMAGED):
                results.append({"op_id": p["op_id"] or "-", "run": p["run"] or "(vault)", "ok": False,
                                "backups_ok": False, "damaged_backups": [], "code": p["code"],
                                "verification": {"ok": False, "checks": [
                                    {"name": str(p["code"]), "ok": False, "detail": p["detail"]}]}})
    return results


def restore(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
            backup_dir: Optional[str] = None) -> List[RunOutcome]:
    """Put back the exact original bytes: one operation (``op``), every operation of ``run``
    newest first, or (neither given) every restorable operation of the logdir."""

    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = _bucket(logdir, backup_dir)
        bk.recover(rfs, vault)
        damaged: List[dict] = []  # a damaged manifest may hide a backup: named, as on disk
        todo = [m for m in bk.manifests(rfs, vault, damaged) if m.get("status") == "verified" and not m.get("purged")
                and (op is None or m.get("op") == op)
                and (run is None or m.get("run") == run or run in (m.get("takes_along") or []))]
        todo.sort(key=lambda m: m.get("kind") != "retire")  # a retired run comes back first, as on disk
        damage = [d["detail"] for d in damaged]
        if (op or run) and not todo:
            raise TransactionError(f"nothing to restore for {op or run!r} in {logdir}" + "".join(f"; {w}" for w in damage))
        return [bk.restore_op(rfs, vault, m) for m in todo] + [
            RunOutcome(run=run or "", status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED, reason=w) for w in damage]
    ctx = _context(logdir, backup_dir)
    recover_logdir(logdir, backup_dir)
    if op:
        m = find_manifest(ctx, op)
        if m.get("restored_by"):
            return [_already_restored(m)]
        return [unretire(ctx, m) if m.get("kind") == "retire" else restore_op(ctx, m)]
    # a retired run comes back first: its reductions can only be restored once it is back
    outcomes = [unretire(ctx, m) for m in retirements(ctx) if is_restorable_retirement(m)
                and (run is None or m["run"] == run or run in m.get("takes_along", []))]
    ops = restorable_ops(ctx, run)
    if run is not None and not ops and not outcomes:
        done = [m for m in own_manifests(ctx) if m.get("run") == run and m.get("restored_by")]
        if done:
            return [_already_restored(max(done, key=lambda m: m.get("started_at", 0)))]
        raise TransactionError(f"nothing to restore for run {run!r} (no kept backup of a verified reduction, "
                               "no retirement)" + "".join(f"; {why}" for why in hiding_damage(ctx)))
    for m in ops:
        outcomes.append(restore_op(ctx, m))
    # state damage that may hide backups: named as a failed outcome, never a quiet "nothing to restore"
    for why in hiding_damage(ctx):
        outcomes.append(RunOutcome(run=run or "", status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED, reason=why))
    return outcomes


def _already_restored(m: dict) -> RunOutcome:
    """A restore asked for again: its originals are back already, nothing is done (said so)."""
    return RunOutcome(run=m["run"], status=Outcome.SKIPPED, code=Skip.ALREADY_RESTORED, op_id=m["op_id"],
                      reason=f"already restored: operation {m['op_id']} was restored by {m['restored_by']}",
                      bytes_before=m.get("bytes_before", 0), bytes_after=m.get("bytes_before", 0))


def restorable(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """What ``restore`` would put back (newest first), as operation summaries; changes nothing."""
    if is_remote(logdir):
        return summarize_operations([m for m in operations(logdir, run=run, backup_dir=backup_dir) if is_kept(m)])
    return summarize_operations(restorable_ops(_context(logdir, backup_dir), run))


def purge(logdir: str, older_than: Optional[float] = None, run: Optional[str] = None,
          yes: bool = False, backup_dir: Optional[str] = None, op: Optional[str] = None) -> PurgeReport:
    """Delete backups of verified (or restored) operations; without ``yes`` only list them.

    Never deletes a byte that exists nowhere else: a backup that is damaged, grown by a late
    writer, still held open for writing, or needed by another kept or unfinished operation is
    kept and listed in ``kept`` with a code (the preview says so too); a run being changed
    right now is passed over.
    """
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = _bucket(logdir, backup_dir)
        bk.recover(rfs, vault)
        d = bk.purge(rfs, vault, older_than=older_than, run=run, op=op, yes=yes)
        return PurgeReport(dry_run=d["dry_run"], ops=d["ops"], freed_bytes=d["freed_bytes"],
                           kept=[{"op_id": h["op_id"], "run": h["run"], "bytes": 0,
                                  "code": Skip(h["code"]) if h.get("code") else Finding.NOT_RESTORED,
                                  "detail": h["reason"]} for h in d.get("held", [])])
    ctx = _context(logdir, backup_dir)
    recovered = recover_logdir(logdir, backup_dir)
    report = purge_backups(ctx, older_than=older_than, run=run, yes=yes, op=op)
    # journals recovery refused (planted, copied, malformed) are reported with the vault's
    report.refused[:0] = [{"op_id": r.op_id, "code": r.code, "detail": r.detail}
                          for r in recovered if r.action == "refused"]
    return report


def status(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations, damage (``problems``, with codes), late writes salvaged, the batch
    ledger, ``batch`` (every ledger of the logdir — one per shard — merged into one view: per run
    its state, who did it and its bytes; ``engine.ledger.merged``), the vault and the operations it holds; ``settle_command`` says what settles them.
    ``kept_blobs``: every blob a restore or rollback kept in the vault in a file's place (``path``,
    ``blob``, ``holds``, ``late_records`` and ``late_records_file`` when its records are back in
    the run, ``bring_back``: the command that copies it out, ``code``). Changes nothing."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk
        from tb_footprint_plugin.engine import bucket_ledger

        rfs, vault = _bucket(logdir, backup_dir)
        st = bk.status(rfs, vault)
        st["batch"] = with_restores(bucket_ledger.merged(rfs), st["operations"])
        # the keys the front ends read for a local logdir; a bucket's damage is reported per verb
        for k in ("unfinished", "problems", "late_writes", "kept_blobs"):
            st.setdefault(k, [])
        st.setdefault("settle_command", health.settle_command(logdir, backup_dir) if st["unfinished_operations"] else None)
        st["disk_in_use_bytes"] = _bucket_in_use(rfs, vault)
        try:
            st["freed_after_purge_bytes"] = bk.retention_report(rfs, vault, st["vault_bytes"])["freed_after_purge"]
        except (OSError, ValueError):
            st["freed_after_purge_bytes"] = st["vault_bytes"]
        return st
    ctx = _context(logdir, backup_dir)
    pending = [j.op_id for j in pending_journals(ctx.journal_dir)]
    ops = []
    vault_bytes = 0
    for root in known_vaults(ctx):
        vault_bytes += Vault(root).size()
    for m in own_manifests(ctx):
        ops.append({k: m.get(k) for k in ("op_id", "kind", "run", "outcome", "reason", "bytes_before",
                                          "bytes_after", "finished_at", "backup_purged", "restored_by",
                                          "rebuilt")})
        ops[-1]["salvaged"] = len(m.get("salvaged", []))
    lp = ledger_path(ctx.state)
    led = Ledger(lp, "", ctx.logdir).summary() if os.path.exists(lp) else None
    paths = ledger_paths(ctx.state)
    found = unfinished(logdir, backup_dir)
    problems = [p.to_dict() for p in vault_problems(ctx)]
    try:
        trust.bind(ctx.logdir, ctx.state, adopt=False)
    except trust.Untrusted as e:
        if e.code != trust.IDENTITY_DAMAGED:  # a damaged one is among ``unfinished``'s problems
            problems.insert(0, e.to_dict())
    kept_ops = [o["op_id"] for o in ops if o["kind"] == "reduce" and o["outcome"] == Outcome.VERIFIED
                and not o["backup_purged"] and not o["restored_by"]]
    return {"logdir": ctx.logdir, "state_dir": ctx.state, "vaults": known_vaults(ctx),
            "vault_bytes": vault_bytes,
            # the same numbers a reduce reports: disk in use now (logdir + vaults, as ``du``
            # counts it) and what purging every kept backup would free (purge's own count)
            "disk_in_use_bytes": _disk_in_use(ctx).total_bytes,
            "freed_after_purge_bytes": _freed_after_purge(ctx, kept_ops),
            "unfinished_operations": pending, "operations": ops,
            "ledger": led, "batch": with_restores(merged(paths, ctx.logdir), ops) if paths else None,
            "unfinished": found["unfinished_operations"],
            "problems": problems + found["problems"],
            "settle_command": found["settle_command"], "late_writes": health.late_writes(own_manifests(ctx)),
            # bytes a restore or rollback found in a file's place, kept in the vault: what each
            # holds and how to bring it back (``engine.restore.kept_blobs``)
            "kept_blobs": kept_blobs(ctx, own_manifests(ctx))}


def disk_numbers(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """The header numbers of the tab (#27.4), counted as ``status`` and ``history`` count them:
    ``disk_in_use_bytes`` (logdir + vaults now, ``engine.usage``), ``freed_now_bytes`` (what the
    verified reductions not restored freed on disk as things stand, ``usage.freed_by_op``: ~0 while
    hard-linked backups are kept) and ``freed_after_purge_bytes`` (what purging every kept backup
    frees on top). A bucket's ``freed_now_bytes`` is None (its backups are copies in the store,
    not measured per operation). Walks the logdir and its vaults; changes nothing."""
    if is_remote(logdir):
        st = status(logdir, backup_dir)
        return {"disk_in_use_bytes": st.get("disk_in_use_bytes"), "freed_now_bytes": None,
                "freed_after_purge_bytes": st.get("freed_after_purge_bytes")}
    ctx = _context(logdir, backup_dir)
    vaults, device = known_vaults(ctx), usage.device_of(ctx.logdir)
    freed_now, kept_ops = 0, []
    for m in own_manifests(ctx):  # untrusted: a malformed count counts as nothing
        if m.get("kind") != "reduce" or m.get("outcome") != Outcome.VERIFIED or m.get("restored_by"):
            continue
        try:
            removed = max(0, int(m.get("bytes_before") or 0) - int(m.get("bytes_after") or 0))
        except (TypeError, ValueError):
            removed = 0
        freed_now += usage.freed_by_op(m, vaults, device, removed)[0]
        if not m.get("backup_purged"):
            kept_ops.append(m.get("op_id"))
    return {"disk_in_use_bytes": _disk_in_use(ctx).total_bytes, "freed_now_bytes": freed_now,
            "freed_after_purge_bytes": _freed_after_purge(ctx, kept_ops)}


def history(logdir: str, backup_dir: Optional[str] = None) -> List[dict]:
    """The change log, oldest first. Each reduce entry says where its backup is now
    (``backup``: ``kept``, ``purged`` or ``released`` — dropped by a verified restore — or ``none``)
    and ``removed_from_logdir_bytes``, and how much of that is freed on the logdir's disk now
    (``freed_now_bytes``: ~0 while a hard-linked backup is kept) and after ``purge``
    (``freed_after_purge_bytes``), as things stand when read; purge entries carry ``freed`` (bytes freed on disk); a restore
    (or rolled-back reduce) that kept bytes found in a file's place carries ``kept_blobs`` (as in
    ``status``)."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        return bk.history(*_bucket(logdir, backup_dir))
    entries = read_history(state_dir(logdir))
    try:
        ctx = _context(logdir, backup_dir)
        manifests = {m.get("op_id"): m for m in own_manifests(ctx)}
        kept = kept_blobs(ctx, list(manifests.values()))
        vaults, device = known_vaults(ctx), usage.device_of(ctx.logdir)
    except (OSError, ValueError):
        manifests, kept, vaults, device = {}, [], [], None
    for e in entries:
        if e.get("kind") in ("restore", "reduce"):  # blobs kept in a file's place, as they are now
            mine = [k for k in kept if k["op_id"] == e.get("op_id")]
            if mine:
                e["kept_blobs"] = mine
        if e.get("kind") != "reduce":
            continue
        m = manifests.get(e.get("op_id"))
        if e.get("outcome") == Outcome.VERIFIED:
            e["removed_from_logdir_bytes"] = max(0, (e.get("before") or 0) - (e.get("after") or 0))
            if m is not None:  # as things stand now: a backup hard-linked on the logdir's disk frees nothing yet
                e["freed_now_bytes"], e["freed_after_purge_bytes"] = usage.freed_by_op(
                    m, vaults, device, e["removed_from_logdir_bytes"])
        if not e.get("backup_kept") or m is None:
            e["backup"] = "none" if not e.get("backup_kept") else "unknown"
        elif m.get("backup_released_by_restore"):
            e["backup"] = "released"
        elif m.get("backup_purged"):
            e["backup"] = "purged"
        else:
            e["backup"] = "kept"
    return entries


__all__ = ["scan", "plan", "reduce_logdir", "reduce_logdirs", "selection_by_logdir", "shard_plan", "shard_sizes", "ShardError", "verify", "restore", "purge", "status", "history", "UNATTRIBUTED",
           "recover_logdir", "unfinished", "pending_operations", "operation", "operations", "ReduceReport", "PurgeReport",
           "CancelToken", "summarize_operations", "operation_summary", "plan_run_view", "category_changes",
           "dashboards_note", "dashboards_summary", "labels_for", "sample", "SampleUnavailable", "custom_policy", "history_csv",
           "overview", "disk_numbers", "restorable", "PolicyError", "SelectionError", "reduce_summary", "restore_summary", "restore_target",
           "NotRestorable"]


class SampleUnavailable(LookupError):
    """A sample the check page asked for cannot be shown; ``code`` says why (for programs)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def sample(logdir: str, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0,
           backup_dir: Optional[str] = None) -> tuple:
    """``(bytes, content type)`` of one image/audio sample of operation ``op_id``'s run as the
    dashboard showed it ``before`` the reduction (backed-up event files from the vault, the
    others from the run) or shows it ``after``. Only event files directly in the run directory
    (as TensorBoard reads them), inside the logdir, and vault blobs named by their sha256 are
    ever read; ``SampleUnavailable`` (code ``not_found`` / ``restored`` / ``purged`` / ``bad_request``)."""
    from tb_footprint_plugin.verify import samples

    if side not in ("before", "after") or plugin not in (samples.IMAGES, samples.AUDIO):
        raise SampleUnavailable("bad_request", "side must be before or after, plugin images or audio")
    ctx = _context(logdir, backup_dir)
    m = find_manifest(ctx, op_id)
    run = m.get("run")
    run_dir = os.path.normpath(os.path.join(ctx.logdir, run if isinstance(run, str) else "\0"))
    if not isinstance(run, str) or not is_within(run_dir, ctx.logdir) or not os.path.isdir(run_dir):
        raise SampleUnavailable("not_found", f"the run of {op_id} is not in the logdir")
    restored = bool(m.get("restored_by"))
    if side == "after" and restored:
        raise SampleUnavailable("restored", f"{op_id} was restored: the reduced run exists no more")

    def direct_events(names) -> dict:
        out = {}
        for n in names:
            p = os.path.join(run_dir, n)
            if "tfevents" in n and os.path.isfile(p) and not os.path.islink(p) and real_within(p, ctx.logdir):
                out[os.path.relpath(p, ctx.logdir)] = p
        return out

    current = direct_events(sorted(os.listdir(run_dir)))
    backups: Dict[str, str] = {}  # backed-up event files: rel → sha256
    if side == "after" or restored:
        files = current  # after a restore the run holds the originals again
    else:
        created = {c.get("path") for c in m.get("created", [])}
        files = {rel: p for rel, p in current.items() if rel not in created}
        for f in m.get("files", []):
            rel, sha = f.get("path"), f.get("sha256")
            if not (isinstance(rel, str) and isinstance(sha, str) and len(sha) == 64
                    and all(ch in "0123456789abcdef" for ch in sha)):
                continue
            if os.path.dirname(os.path.normpath(rel)) != os.path.relpath(run_dir, ctx.logdir) or "tfevents" not in rel:
                continue
            if m.get("backup_purged"):
                raise SampleUnavailable("purged", f"the backup of {op_id} was purged: the original is gone")
            if ctx.vault.has_blob(sha):
                files[rel] = None
                backups[rel] = sha
    # the sample reader takes paths: a compressed backup is decompressed into a scratch folder
    # of the vault (swept with this process), a plain one is read where it is
    with scratch.scratch("sample", ctx.vault.tmp) as tmp:
        paths = [ctx.vault.materialise(backups[k], tmp) if k in backups else files[k] for k in sorted(files)]
        data = samples.read_sample(paths, plugin, tag, int(step), int(index))
    if data is None:
        raise SampleUnavailable("not_found", f"no {plugin} sample {index} of {tag!r} at step {step} {side}")
    return data, samples.sniff(data)


def operation(logdir: str, op_id: str, backup_dir: Optional[str] = None) -> dict:
    """The full manifest of one operation (files, plan, verification with scalar series)."""
    if is_remote(logdir):
        found = [m for m in operations(logdir, backup_dir=backup_dir) if m.get("op_id") == op_id]
        if not found:
            raise TransactionError(f"no operation {op_id!r} in the vault of {logdir}")
        return found[0]
    return find_manifest(_context(logdir, backup_dir), op_id)


def _bucket_op_view(m: dict) -> dict:
    """A bucket manifest in the shape of a local one (``op_id``, ``kind``, ``outcome``,
    ``restored_by``, ``backup_purged``), so one set of rules and views serves both."""
    out = {k: v for k, v in m.items() if not k.startswith("_")}
    status = m.get("status")
    out.update(op_id=m.get("op"), kind="retire" if m.get("kind") == "retire" else "reduce",
               started_at=m.get("created"), finished_at=m.get("created"),
               outcome=Outcome.VERIFIED if status in ("verified", "restored") else status,
               restored_by="a restore" if status == "restored" else None,
               backup_purged=bool(m.get("purged")))
    return out


def operations(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """Every operation's manifest (newest first), optionally for one run."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = _bucket(logdir, backup_dir)
        return [_bucket_op_view(m) for m in bk.manifests(rfs, vault) if run is None or m.get("run") == run]
    ctx = _context(logdir, backup_dir)
    out = [m for m in own_manifests(ctx) if run is None or m.get("run") == run]
    out.sort(key=lambda m: m.get("started_at", 0), reverse=True)
    return out


# ---------------------------------------------------------------------------------------
# retire: whole runs out of the logdir into the vault (restore brings them back)
# ---------------------------------------------------------------------------------------
@dataclass
class RetireReport(_RunOutcomes):
    """Result of ``retire``: the plan (what the rule chose, with each run's metric) and outcomes."""

    dry_run: bool
    plan: RetirePlan
    outcomes: List[RunOutcome] = field(default_factory=list)
    recovered: List[RecoveryOutcome] = field(default_factory=list)

    @property
    def retired_bytes(self) -> int:
        return sum(o.bytes_before for o in self.outcomes if o.status == Outcome.VERIFIED)

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "plan": self.plan.to_dict(), "bytes": self.plan.bytes,
                "retired_bytes": self.retired_bytes, "ok": self.ok,
                "outcomes": [o.to_dict() for o in self.outcomes], "recovered": [vars(r) for r in self.recovered]}


def retire_rule(**kw) -> RetireRule:
    """A ``RetireRule`` from keyword arguments (``keep_list`` may also be a file path: ``keep_list_file``)."""
    path = kw.pop("keep_list_file", None)
    rule = RetireRule(**kw)
    if path:
        rule.keep_list = list(rule.keep_list) + read_keep_list(path)
    rule.validate()
    return rule


def retire_plan(logdir: str, rule: RetireRule, *, backup_dir: Optional[str] = None,
                quiet_period: float = DEFAULT_QUIET_PERIOD, footprint: Optional[LogdirFootprint] = None) -> RetirePlan:
    """The dry run of a retirement: which runs the rule selects, what each takes along, and why
    the others stay (with each run's metric for a keep-best rule). Writes nothing."""
    if is_remote(logdir):
        _bucket(logdir.rstrip("/"), backup_dir)  # the same refusals as the retirement's
    else:
        _context(logdir, backup_dir, quiet_period)
    fp = footprint or scan(logdir, backup_dir=backup_dir, write_cache=False)
    return plan_retire(fp, rule, quiet_period=quiet_period)


def retire(logdir: str, rule: RetireRule, *, dry_run: bool = True, backup_dir: Optional[str] = None,
           quiet_period: float = DEFAULT_QUIET_PERIOD, only: Optional[Sequence[str]] = None,
           progress: Optional[RunProgress] = None, on_outcome: Optional[Callable[[RunOutcome], None]] = None,
           cancel: Optional[CancelToken] = None, footprint: Optional[LogdirFootprint] = None) -> RetireReport:
    """Retire the runs ``rule`` selects, each as its own journaled operation (dry run by default).

    ``only`` (run names) limits the retirement to runs of the plan the user confirmed: a run the
    rule selects now but that was not shown is left alone."""
    if is_remote(logdir):
        return _retire_bucket(logdir.rstrip("/"), rule, dry_run=dry_run, backup_dir=backup_dir,
                              quiet_period=quiet_period, only=only, on_outcome=on_outcome, cancel=cancel,
                              footprint=footprint)
    ctx = _context(logdir, backup_dir, quiet_period)
    recovered = [] if dry_run else recover_logdir(logdir, backup_dir)
    p = retire_plan(logdir, rule, backup_dir=backup_dir, quiet_period=quiet_period, footprint=footprint)
    report = RetireReport(dry_run=dry_run, plan=p, recovered=recovered)
    if dry_run:
        report.outcomes = [RunOutcome(run=i.run, status=Outcome.DRY_RUN if i.selected else Outcome.SKIPPED,
                                      reason=i.reason, code=i.code, bytes_before=i.bytes, bytes_after=0 if i.selected
                                      else i.bytes) for i in p.items]
        return report
    remember_vault(ctx)
    for item in p.selected:
        if only is not None and item.run not in only:
            o = RunOutcome(run=item.run, status=Outcome.SKIPPED, code=Skip.NOT_IN_PLAN, bytes_before=item.bytes,
                           bytes_after=item.bytes, reason="not in the plan that was confirmed")
        elif cancel is not None and cancel.cancelled:
            o = RunOutcome(run=item.run, status=Outcome.SKIPPED, code=Skip.CANCELLED, reason="cancelled",
                           bytes_before=item.bytes, bytes_after=item.bytes)
        else:
            o = retire_run(ctx, item.run, takes_along=item.takes_along, rule=rule.to_dict(),
                           cancel=CancelToken(parent=cancel),
                           progress=(lambda step, frac, r=item.run: progress(r, step, frac)) if progress else None)
        report.outcomes.append(o)
        if on_outcome:
            on_outcome(o)
    return report


def _retire_bucket(logdir: str, rule: RetireRule, *, dry_run: bool, backup_dir: Optional[str], quiet_period: float,
                   only, on_outcome, cancel, footprint) -> RetireReport:
    """``retire`` on a bucket logdir: settle unfinished operations, plan from one listing, then
    each selected run as its own bucket retirement (``engine.bucket_retire``)."""
    from tb_footprint_plugin.engine import bucket as bk

    rfs, vault = _bucket(logdir, backup_dir)
    recovered = [] if dry_run else bk.recover(rfs, vault)
    p = retire_plan(logdir, rule, backup_dir=backup_dir, quiet_period=quiet_period, footprint=footprint)
    report = RetireReport(dry_run=dry_run, plan=p, recovered=recovered)
    for item in (p.items if dry_run else p.selected):
        if dry_run:
            o = RunOutcome(run=item.run, status=Outcome.DRY_RUN if item.selected else Outcome.SKIPPED,
                           reason=item.reason, code=item.code, bytes_before=item.bytes,
                           bytes_after=0 if item.selected else item.bytes)
        elif only is not None and item.run not in only:
            o = RunOutcome(run=item.run, status=Outcome.SKIPPED, code=Skip.NOT_IN_PLAN, bytes_before=item.bytes,
                           bytes_after=item.bytes, reason="not in the plan that was confirmed")
        elif cancel is not None and cancel.cancelled:
            o = RunOutcome(run=item.run, status=Outcome.SKIPPED, code=Skip.CANCELLED, reason="cancelled",
                           bytes_before=item.bytes, bytes_after=item.bytes)
        else:
            o = bk.retire_run(rfs, vault, item.run, takes_along=item.takes_along, rule=rule.to_dict(),
                              quiet_period=quiet_period)
        report.outcomes.append(o)
        if on_outcome and not dry_run:
            on_outcome(o)
    return report


def retired(logdir: str, backup_dir: Optional[str] = None) -> List[dict]:
    """Retired runs still kept in the vault (restorable), newest first: run, size, date, op id."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = _bucket(logdir.rstrip("/"), backup_dir)
        return [{"op_id": m["op"], "run": m["run"], "takes_along": m.get("takes_along") or [],
                 "bytes": m.get("bytes_before", 0), "files": len(m["files"]), "retired_at": m.get("created"),
                 "user": m.get("user"), "tree_sha256": None, "rule": m.get("rule")}
                for m in bk.retirements(bk.manifests(rfs, vault))]
    ctx = _context(logdir, backup_dir)
    return [{"op_id": m["op_id"], "run": m["run"], "takes_along": m.get("takes_along", []),
             "bytes": m.get("bytes_before", 0), "files": len(m.get("tree", [])), "retired_at": m.get("finished_at"),
             "user": m.get("user"), "tree_sha256": m.get("tree_sha256"), "rule": m.get("rule")}
            for m in retirements(ctx) if is_restorable_retirement(m)]


__all__ += ["retire", "retire_plan", "retire_rule", "retired", "RetireReport", "RetireRule"]
__all__ += ["select_runs", "check_logdir", "NotALogdir", "interrupted_state", "settle_interrupted", "Interrupted"]
__all__ += ["ledger_skips"]
