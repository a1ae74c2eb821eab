"""A bucket logdir's reduce: each run to the transaction its plan needs.

Drop-only runs go in batches under one journal object (``engine.bucket_batch.reduce_batch``); a run
whose plan rewrites or compresses files is its own transaction (``engine.bucket_rewrite``).
Above both, so neither imports the other's way back.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.engine.bucket_batch import reduce_batch
from tb_footprint_plugin.engine.bucket_state import STORE_FAILURES, BucketVault, failure_code
from tb_footprint_plugin.engine.bucket_rewrite import reduce_rewrite_run
from tb_footprint_plugin.engine.context import CancelToken, RunOutcome
from tb_footprint_plugin.plan.cost import BATCH_RUNS
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.remote import ObjectInfo
from tb_footprint_plugin.storage.store_object import ObjectStore


def reduce_runs(ostore: ObjectStore, vault: BucketVault, rps: List, listing: Dict[str, ObjectInfo],
                quiet_period: float, policy: Optional[str] = None, on_outcome=None,
                verify_backends: Tuple[str, ...] = ("python", "rust"), begin=None,
                closed_files: Optional[Mapping[str, float]] = None, cancel: Optional[CancelToken] = None,
                progress: Optional[Callable[[str, str, float], None]] = None,
                timeout: Optional[float] = None, jobs: int = 1) -> List[RunOutcome]:
    """Reduce runs of a bucket logdir by their plans, in the plan's order. A run the plan skipped
    is said so (its reason and code). Drop-only runs go in batches (one journal object per batch,
    one lock object per run); a run whose plan rewrites or compresses files is its own
    transaction (stage locally, upload under a temporary key, verify, swap with a precondition).
    Never raises for a store failure: each run ends verified, rolled back, or skipped, with a
    reason. ``begin(rp)`` is called for each run right before its batch or transaction starts
    (e.g. a ledger's "reducing" mark); a store's failure (``STORE_FAILURES``) from it fails that run alone, untouched.
    ``closed_files`` (key -> mtime when the caller's own job closed it): the quiet period's one
    exception, as in the plan and on a disk. ``cancel`` and ``timeout`` (seconds per run), as on a
    disk: looked at before each batch and each transaction, and between their steps up to the
    commit record, where a cancelled or timed-out run is rolled back ("timed out before the commit
    point", ``Failure.ERROR``); a batch's runs start together, so their timeout counts from the
    batch's start (``bucket_batch.reduce_batch``). The runs not started are skipped with
    ``Skip.CANCELLED`` and, as on a disk, not passed to ``on_outcome``. ``progress(run, step, fraction)``: ``start`` (0.0) as a run's batch or
    transaction starts, then the disk's steps (``backup``, ``stage`` for a rewrite, ``verify``:
    a ledger marks the run ``verifying`` there), ``done`` (1.0) when it is verified.
    ``jobs``: the rewrite transactions run on that many threads (their requests, downloads and
    uploads are I/O bound; each its own lock, journal and scratch), the drop-only batches one
    after the other before them (a batch already shares its requests); outcomes in plan order.
    Runs one inside another go one after the other on one thread (``nested_groups``); an
    unexpected error in one thread cancels the others (as Ctrl-C) and is raised once they settle.
    Shared between the threads: the listing (read only), the store's clients and request counts
    (locked), the ledger (``BucketLedger.mark`` locked), one readers' scratch root for all of
    them (``reduce_rewrite_run``'s ``readers_root``; a killed process's is swept by the next start)."""
    outcomes: Dict[str, RunOutcome] = {}
    cancel = cancel or CancelToken()  # one token: an interrupt stops the runs of every thread

    def settled(o: RunOutcome) -> None:
        outcomes[o.run] = o
        if progress and o.status == Outcome.VERIFIED:
            progress(o.run, "done", 1.0)
        if on_outcome:
            on_outcome(o)

    def started(group: List) -> List:
        ok = []
        for rp in group:
            if cancel is not None and cancel.cancelled:
                outcomes[rp.run] = RunOutcome(run=rp.run, status=Outcome.SKIPPED, reason="batch cancelled",
                                              code=Skip.CANCELLED, bytes_before=rp.bytes_before,
                                              bytes_after=rp.bytes_before)
                continue
            try:
                if begin:
                    begin(rp)
                if progress:  # a mark the store refuses here fails the run, untouched (R6 F1)
                    progress(rp.run, "start", 0.0)
                ok.append(rp)
            except STORE_FAILURES as e:
                settled(RunOutcome(run=rp.run, status=Outcome.FAILED, reason=str(e), code=failure_code(e),
                                   bytes_before=rp.bytes_before, bytes_after=rp.bytes_before))
        return ok

    drops, heavy = [], []
    for rp in rps:
        if rp.skipped:
            settled(RunOutcome(run=rp.run, status=Outcome.SKIPPED, reason=rp.skipped, code=rp.code,
                               bytes_before=rp.bytes_before, bytes_after=rp.bytes_before))
        elif any(a.kind in ("compress", "rewrite") for a in rp.actions):
            heavy.append(rp)
        elif not any(a.kind == "delete" for a in rp.actions):
            settled(RunOutcome(run=rp.run, status=Outcome.SKIPPED, bytes_before=rp.bytes_before,
                               bytes_after=rp.bytes_before, reason="nothing to remove", code=Skip.NOTHING))
        else:
            drops.append(rp)

    # neighbours in the key space batched together (not largest first): a batch's checking
    # listings then cover a few folders of the sweep, not the whole logdir
    # (``bucket_state.listing_of_runs``)
    drops.sort(key=lambda rp: rp.run)
    for i in range(0, len(drops), BATCH_RUNS):
        group = started(drops[i:i + BATCH_RUNS])
        if not group:
            continue
        for o in reduce_batch(ostore, vault, group, listing, quiet_period, policy, settled_early=settled,
                              closed_files=closed_files, cancel=CancelToken(timeout, parent=cancel),
                              progress=progress):
            if o.run not in outcomes:
                settled(o)

    def rewrite(rp, readers: Optional[str] = None) -> None:
        if not started([rp]):
            return
        settled(reduce_rewrite_run(ostore, vault, rp, listing, quiet_period, policy, verify_backends, closed_files,
                                   cancel=CancelToken(timeout, parent=cancel),
                                   progress=None if progress is None else
                                   (lambda step, frac, run=rp.run: progress(run, step, frac)),
                                   readers_root=readers))

    # each rewrite transaction writes its witness itself, before its journal goes (``bucket_rewrite``)
    _rewrite_all(heavy, rewrite, jobs, cancel)
    return [outcomes[rp.run] for rp in rps]


def _rewrite_all(heavy: List, rewrite: Callable, jobs: int, cancel: CancelToken) -> None:
    """``rewrite`` of each run of ``heavy``: on ``jobs`` threads, runs one inside another on one."""
    groups = nested_groups(heavy) if jobs > 1 else [heavy]
    if len(groups) <= 1:
        for rp in heavy:
            rewrite(rp)  # each sets the readers' scratch root inside its own scratch while it stages
    else:
        def worker(group: List, shared: str) -> None:
            try:
                for rp in group:  # runs one inside another, one after the other
                    rewrite(rp, shared)
            except BaseException:
                # as Ctrl-C: the transactions of the other threads stop at their next step and
                # roll back, the runs not started are skipped (``Skip.CANCELLED``); raised below
                # once they settle, as one thread raises it (review R6 F4)
                cancel.cancel()
                raise

        # one scratch root for the readers of every transaction, set while they run (the root is
        # the process's: a transaction that set its own would move it under another thread)
        with scratch.scratch("readers", scratch.system_root()) as shared, scratch.rooted(shared):
            with ThreadPoolExecutor(max_workers=jobs) as ex:
                futures = [ex.submit(worker, g, shared) for g in groups]
                try:
                    wait(futures)
                except KeyboardInterrupt:
                    # before the pool waits for its threads: each transaction under way stops at
                    # its next step and rolls back (as ``local_batch``)
                    cancel.cancel()
                    raise
        for f in futures:  # the first group's error in plan order, once every thread has settled
            if f.exception() is not None:
                raise f.exception()


def nested_groups(rps: List) -> List[List]:
    """Runs in groups that may run at once: a run inside another (``a/b`` in ``a``, every run in
    ``.``) goes in the group of the top-most run holding it, since the outer run's checks list
    the inner run's objects (its last look, quiet period and verification would see the other's
    swap: review R6 F3). Each group in the runs' order, the groups by their first run."""
    order = {rp.run: i for i, rp in enumerate(rps)}
    groups: List[List] = []
    top: Optional[str] = None
    # by path segments: every run below ``a`` sorts right after it (plain text puts ``a-x`` between)
    for rp in sorted(rps, key=lambda rp: [] if rp.run == "." else rp.run.split("/")):
        if top is not None and (top == "." or rp.run.startswith(top + "/")):
            groups[-1].append(rp)
        else:
            top = rp.run
            groups.append([rp])
    for g in groups:
        g.sort(key=lambda rp: order[rp.run])
    groups.sort(key=lambda g: order[g[0].run])
    return groups


def reduce_run(ostore: ObjectStore, vault: BucketVault, rp, listing: Dict[str, ObjectInfo],
               quiet_period: float, policy: Optional[str] = None) -> RunOutcome:
    """Reduce one run of a bucket logdir by its plan ``rp`` (a batch of one)."""
    return reduce_runs(ostore, vault, [rp], listing, quiet_period, policy)[0]


__all__ = ["reduce_run", "reduce_runs"]
