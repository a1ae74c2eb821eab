"""``reduce_logdir`` on a bucket logdir: settle, one listing to scan and plan from, then each run
as its own bucket transaction (``engine.bucket_reduce``), recorded in the shard's ledger objects.
"""
from __future__ import annotations

from typing import Optional

from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.engine.front import BucketEngine
from tb_footprint_plugin.engine.ledger import mark_recovered
from tb_footprint_plugin.plan.planner import make_plan
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.storage.remote import RemoteError
from tb_footprint_plugin.api.common import DEFAULT_BACKENDS, logdir_keys
from tb_footprint_plugin.api.reports import ReduceReport
from tb_footprint_plugin.api.survey import scan_shard_sizes, select_runs, shard_plan


def reduce_on_bucket(eng: BucketEngine, backup_dir: Optional[str], pol, *, runs, run_glob, min_size, older_than,
                     quiet_period, on_outcome, verify_backends=DEFAULT_BACKENDS, shard=None, shard_with=None,
                     partition_sizes=None, ledger=None, closed_files=None) -> "ReduceReport":
    """Reduce a bucket logdir: settle unfinished operations, one listing to scan and plan from,
    then each run as its own bucket transaction. With ``shard``, only this shard's runs (the
    partition of ``shard_plan``), and every transition recorded in the shard's ledger objects
    (``engine.bucket_ledger``; also with ``ledger`` set, unsharded)."""
    from tb_footprint_plugin.scan.scanner import scan_bucket

    logdir = eng.logdir.rstrip("/")
    eng.prepare_vault()
    recovered = eng.recover()
    objects = eng.rfs.list_tree()
    in_use_before = eng.stored(objects)
    fp = scan_bucket(eng.rfs, objects, backup_dir=backup_dir)
    mine = None
    if shard is not None:
        shard = sharding.check_shard(*shard)
        logdirs = logdir_keys(shard_with or [logdir])
        if logdir not in logdirs:
            raise ValueError(f"shard_with must list the logdir {logdir} itself")
        sizes = partition_sizes if partition_sizes is not None else \
            scan_shard_sizes(logdirs, backup_dir, {logdir: fp}, write_cache=True)
        mine = shard_plan(logdirs, shard, backup_dir, sizes).get(logdir, [])
        runs = [r for r in mine if runs is None or r in runs]
    traces = eng.plan_measures()  # the dry run's measures, read back: the same bytes after
    p = make_plan(fp, pol, runs=select_runs(fp, runs, run_glob), min_size=min_size, older_than=older_than,
                  quiet_period=quiet_period, closed_files=closed_files, rewrite=traces,
                  trace_after=traces.trace_after)
    traces.save(r.name for r in fp.runs)
    eng.note_plan(p, fp, measures=traces)
    report = ReduceReport(dry_run=False, plan=p, recovered=recovered, shard=shard, shard_runs=mine)
    book = eng.open_ledger(pol.name, sharding.label(shard)) if (shard is not None or ledger) else None
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
    report.outcomes += eng.reduce_runs(todo, objects, quiet_period, policy=(p.policy or {}).get("name"),
                                       on_outcome=settled, verify_backends=tuple(verify_backends), begin=begin,
                                       closed_files=closed_files)
    report.requests = eng.rfs.stats.to_dict()
    removed = report.removed_from_logdir_bytes
    if removed:  # the backups are whole copies in the store: what purge frees is the bucket's retention's say
        try:
            report.freed_on_disk_after_purge_bytes = eng.retention(removed)["freed_after_purge"]
        except (OSError, ValueError):
            pass
    in_use_after = eng.stored()  # None when a listing fails
    if in_use_before is not None and in_use_after is not None:
        report.disk_in_use_before_bytes, report.disk_in_use_after_bytes = in_use_before, in_use_after
        # copies in the same store: ~0; blobs in a local folder: what left, less the blobs' stored size
        report.freed_now_bytes = in_use_before - in_use_after
    return report


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

