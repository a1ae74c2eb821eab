"""The public verbs, shared by the CLI and the TensorBoard plugin:
``scan``, ``plan``, ``reduce_logdir``, ``verify``, ``restore``, ``purge``, ``status``, ``history``.

Every verb that can change something first settles unfinished operations (crash recovery).
Failures come back as values (per-run outcomes with reasons); only bad arguments raise.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine.catalogue import (  # noqa: F401  (operation summaries: shown by both front ends)
    find_manifest,
    known_vaults,
    operation_summary,
    own_manifests,
    remember_vault,
    restorable_ops,
    summarize_operations,
)
from tb_footprint_plugin.engine.checks import recheck
from tb_footprint_plugin.engine.context import CancelToken, Context, RunOutcome, TransactionError
from tb_footprint_plugin.engine.history import history_csv, read_history  # noqa: F401  (history_csv: the CLI's --csv)
from tb_footprint_plugin.engine.journal import pending_journals
from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.engine.purge import PurgeReport, purge_backups
from tb_footprint_plugin.engine.recovery import RecoveryOutcome, recover
from tb_footprint_plugin.engine.restore import restore_op
from tb_footprint_plugin.engine.transaction import reduce_run
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD, SelectionError, make_plan  # noqa: F401
from tb_footprint_plugin.plan.policies import PolicyError, custom_policy, get_policy  # noqa: F401  (for the front ends)
from tb_footprint_plugin.plan.summary import (  # noqa: F401  (what a plan means: shown by both front ends)
    category_changes,
    dashboards_note,
    labels_for,
    overview,
    plan_run_view,
)
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.storage.paths import is_within, state_dir

DEFAULT_BACKENDS = ("python", "rust")
RunProgress = Callable[[str, str, float], None]  # (run, step, fraction)


def _context(logdir: str, backup_dir: Optional[str], quiet_period: float = DEFAULT_QUIET_PERIOD,
             verify_backends: Sequence[str] = DEFAULT_BACKENDS) -> Context:
    logdir = os.path.abspath(logdir)
    if not os.path.isdir(logdir):
        raise NotADirectoryError(f"logdir {logdir} is not a directory")
    if backup_dir is not None:
        backup_dir = os.path.abspath(backup_dir)
        if is_within(logdir, backup_dir):
            raise ValueError(f"backup dir {backup_dir} contains the logdir; choose a separate folder")
    return Context(logdir=logdir, backup_dir=backup_dir, quiet_period=quiet_period,
                   verify_backends=tuple(verify_backends))


def pending_operations(logdir: str) -> List[str]:
    """Ids of unfinished operations (journals left behind), oldest first; nothing is settled."""
    return [j.op_id for j in pending_journals(Context(logdir).journal_dir)]


def recover_logdir(logdir: str, backup_dir: Optional[str] = None) -> List[RecoveryOutcome]:
    """Settle unfinished operations (rolled back, or finished when their swap was recorded)."""
    ctx = _context(logdir, backup_dir)
    if not any(True for _ in pending_journals(ctx.journal_dir)):
        return []
    return recover(ctx)


def plan(logdir: str, policy="archive", *, backup_dir: Optional[str] = None,
         runs: Optional[List[str]] = None, run_glob: Optional[str] = None, min_size: int = 0,
         older_than: Optional[float] = None, quiet_period: float = DEFAULT_QUIET_PERIOD,
         footprint: Optional[LogdirFootprint] = None) -> Plan:
    """The dry run: what ``policy`` would do. Writes nothing (not even the scan cache)."""
    fp = footprint or scan(logdir, backup_dir=backup_dir, write_cache=False)
    return make_plan(fp, policy, runs=runs, run_glob=run_glob, min_size=min_size,
                     older_than=older_than, quiet_period=quiet_period)


@dataclass
class ReduceReport:
    """Result of ``reduce_logdir``: the plan, per-run outcomes and totals."""

    dry_run: bool
    plan: Plan
    outcomes: List[RunOutcome] = field(default_factory=list)
    recovered: List[RecoveryOutcome] = field(default_factory=list)
    ledger_path: Optional[str] = None
    #: what ``purge`` of this batch's backups would free on disk (purge's own count)
    freed_on_disk_after_purge_bytes: int = 0

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

    @property
    def failed(self) -> List[RunOutcome]:
        return [o for o in self.outcomes if o.status in (Outcome.FAILED, Outcome.ROLLED_BACK)]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "removable_bytes": self.removable_bytes,
            "expected_after_bytes": self.expected_after_bytes,
            "saved_bytes": self.saved_bytes,
            "removed_from_logdir_bytes": self.removed_from_logdir_bytes,
            "freed_on_disk_after_purge_bytes": self.freed_on_disk_after_purge_bytes,
            "removed_files": self.removed_files,
            "ok": self.ok,
            "plan": self.plan.to_dict(),
            "outcomes": [o.to_dict() for o in self.outcomes],
            "recovered": [vars(r) for r in self.recovered],
            "ledger": self.ledger_path,
        }


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
    jobs: int = 1,
    timeout: Optional[float] = None,
    ledger: Optional[str] = None,
    verify_backends: Sequence[str] = DEFAULT_BACKENDS,
    progress: Optional[RunProgress] = None,
    on_outcome: Optional[Callable[[RunOutcome], None]] = None,
    cancel: Optional[CancelToken] = None,
) -> ReduceReport:
    """Reduce runs largest first, each as its own verified transaction.

    ``dry_run=True`` (the default) only plans. With ``ledger`` (a path, or ``"default"`` for
    ``<logdir>/.tb-footprint/ledger.json``) every transition is recorded and a rerun resumes.
    """
    ctx = _context(logdir, backup_dir, quiet_period, verify_backends)
    pol = get_policy(policy)
    recovered = [] if dry_run else recover_logdir(logdir, backup_dir)
    p = plan(logdir, pol, backup_dir=backup_dir, runs=runs, run_glob=run_glob, min_size=min_size,
             older_than=older_than, quiet_period=quiet_period)
    report = ReduceReport(dry_run=dry_run, plan=p, recovered=recovered)
    if dry_run:
        report.outcomes = [RunOutcome(run=rp.run, status=Outcome.SKIPPED if rp.skipped else Outcome.DRY_RUN,
                                      reason=rp.skipped, code=rp.code, bytes_before=rp.bytes_before,
                                      bytes_after=rp.expected_after_bytes) for rp in p.runs]
        return report
    remember_vault(ctx)
    book = _open_ledger(ctx, ledger, pol.name)
    if book:
        report.ledger_path = book.path
    todo = _ledger_filter(book, p, report, on_outcome)
    batch = _Batch(ctx, pol.to_dict(), book, timeout, cancel, progress, on_outcome)
    if jobs > 1:
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            report.outcomes += list(ex.map(batch.run, todo))
    else:
        report.outcomes += [batch.run(rp) for rp in todo]
    report.freed_on_disk_after_purge_bytes = _freed_after_purge(ctx, [o.op_id for o in report.outcomes
                                                                      if o.status == Outcome.VERIFIED])
    return report


def _open_ledger(ctx: Context, ledger: Optional[str], policy_name: str) -> Optional[Ledger]:
    """The batch ledger (``"default"``: ``<state>/ledger.json``), only inside the logdir or the vault."""
    if not ledger:
        return None
    path = os.path.join(ctx.state, "ledger.json") if ledger == "default" else os.path.abspath(ledger)
    if not (is_within(path, ctx.logdir) or is_within(path, ctx.vault.root)):
        raise ValueError(f"ledger {path} must be inside the logdir or the backup vault")
    return Ledger(path, policy_name, ctx.logdir)


def _ledger_filter(book: Optional[Ledger], p: Plan, report: ReduceReport, on_outcome) -> list:
    """The plan's runs still to do; a run the ledger settled (and that did not change since) is
    reported skipped with ``Skip.LEDGER_DONE`` — said as such, not silently counted as nothing."""
    if not book:
        return list(p.runs)
    entries = book.start(rp.run for rp in p.runs)
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

    def run(self, rp) -> RunOutcome:
        try:
            return self._one(rp)
        except Exception as e:  # e.g. the ledger's disk is full: this run failed, the batch goes on
            return RunOutcome(run=rp.run, status=Outcome.FAILED, reason=f"{type(e).__name__}: {e}", code=Failure.ERROR,
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)

    def _one(self, rp) -> RunOutcome:
        book = self.book
        if self.cancel is not None and self.cancel.cancelled:
            return RunOutcome(run=rp.run, status=Outcome.SKIPPED, reason="batch cancelled", code=Skip.CANCELLED,
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
        token = CancelToken(self.timeout, parent=self.cancel)  # one cancel stops every run at its next step
        if book:
            book.mark(rp.run, "reducing", original_size_bytes=rp.bytes_before)

        def step(name, frac):
            if book and name == "verify":
                book.mark(rp.run, "verifying")
            if self.progress:
                self.progress(rp.run, name, frac)

        o = reduce_run(self.ctx, rp, policy=self.policy, cancel=token, progress=step)
        if book:
            state = {Outcome.VERIFIED: "done", Outcome.SKIPPED: "skipped"}.get(o.status, "failed")
            book.mark(rp.run, state, original_size_bytes=o.bytes_before, after_size_bytes=o.bytes_after,
                      reduced_ratio=round(1 - o.bytes_after / o.bytes_before, 4) if o.bytes_before else 0.0,
                      verified=o.verified, error=o.reason if state != "done" else None, op_id=o.op_id,
                      code=o.code if state != "done" else None)
        if self.on_outcome:
            self.on_outcome(o)
        return o


def _freed_after_purge(ctx: Context, op_ids: List[str]) -> int:
    """What purging these operations' backups would free, counted by purge itself (a listing)."""
    if not op_ids:
        return 0
    ids = set(op_ids)
    try:
        return sum(o["bytes"] for o in purge_backups(ctx, yes=False).ops if o["op_id"] in ids)
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
    rule ``restore`` applies; returns ``{"run", "op", "run_only"}`` or raises ``NotRestorable``."""
    ctx = _context(logdir, backup_dir)
    if op is not None:
        try:
            m = find_manifest(ctx, op)
        except (OSError, ValueError, TransactionError):
            raise NotRestorable(f"no operation {op!r}", "not_found") from None
        if m.get("kind") != "reduce":
            raise NotRestorable(f"operation {op} is a {m.get('kind')}, not a reduction", "blocked")
        if m.get("outcome") != Outcome.VERIFIED:
            raise NotRestorable(f"operation {op} did not change the run ({m.get('outcome')}); nothing to restore",
                                "blocked")
        if m.get("restored_by"):
            raise NotRestorable(f"operation {op} was already restored by {m['restored_by']}", "already_restored")
        if m.get("backup_purged"):
            raise NotRestorable(f"the backup of {op} was purged; nothing to restore from", "blocked")
        newest = restorable_ops(ctx, m["run"])
        if newest and newest[0]["op_id"] != op:
            raise NotRestorable(f"operation {newest[0]['op_id']} on this run is newer: restore it first", "blocked")
        return {"run": m["run"], "op": op, "run_only": False}
    if run is None:
        raise NotRestorable("give the operation to restore (op) or a run (run)", "not_found")
    if not restorable_ops(ctx, run):
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
            "committed_any": any(o["status"] == Outcome.RESTORED for o in out)}


def verify(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
           backup_dir: Optional[str] = None,
           verify_backends: Sequence[str] = DEFAULT_BACKENDS,
           progress: Optional[Callable[[dict, int, int], None]] = None) -> List[dict]:
    """Re-check committed reductions: every backup re-hashed, and the run as it is now read by
    TensorBoard's readers against the original (from the vault). ``progress(summary, i, n)``
    is called as each check starts (``summary``: the operation's summary, with its bytes)."""
    ctx = _context(logdir, backup_dir, verify_backends=verify_backends)
    recover_logdir(logdir, backup_dir)
    hook = None if progress is None else (lambda m, i, n: progress(operation_summary(m), i, n))
    return recheck(ctx, run, op, progress=hook)


def restore(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
            backup_dir: Optional[str] = None) -> List[RunOutcome]:
    """Put back the exact original bytes: one operation (``op``), every operation of ``run``
    newest first, or (neither given) every restorable operation of the logdir."""

    ctx = _context(logdir, backup_dir)
    recover_logdir(logdir, backup_dir)
    if op:
        m = find_manifest(ctx, op)
        if m.get("restored_by"):
            return [_already_restored(m)]
        return [restore_op(ctx, m)]
    ops = restorable_ops(ctx, run)
    if run is not None and not ops:
        done = [m for m in own_manifests(ctx) if m.get("run") == run and m.get("restored_by")]
        if done:
            return [_already_restored(max(done, key=lambda m: m.get("started_at", 0)))]
        raise TransactionError(f"nothing to restore for run {run!r} (no kept backup of a verified reduction)")
    outcomes = []
    for m in ops:
        outcomes.append(restore_op(ctx, m))
    return outcomes


def _already_restored(m: dict) -> RunOutcome:
    """A restore asked for again: its originals are back already, nothing is done (said so)."""
    return RunOutcome(run=m["run"], status=Outcome.SKIPPED, code=Skip.ALREADY_RESTORED, op_id=m["op_id"],
                      reason=f"already restored: operation {m['op_id']} was restored by {m['restored_by']}",
                      bytes_before=m.get("bytes_before", 0), bytes_after=m.get("bytes_before", 0))


def restorable(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """What ``restore`` would put back (newest first), as operation summaries; changes nothing."""
    return summarize_operations(restorable_ops(_context(logdir, backup_dir), run))


def purge(logdir: str, older_than: Optional[float] = None, run: Optional[str] = None,
          yes: bool = False, backup_dir: Optional[str] = None, op: Optional[str] = None) -> PurgeReport:
    """Delete backups of verified (or restored) operations; without ``yes`` only list them.

    A blob another kept operation, or an unfinished one, still needs is never deleted; a run
    being changed right now is passed over.
    """
    ctx = _context(logdir, backup_dir)
    recover_logdir(logdir, backup_dir)
    return purge_backups(ctx, older_than=older_than, run=run, yes=yes, op=op)


def status(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations, the batch ledger, the vault and the operations it holds."""
    ctx = _context(logdir, backup_dir)
    pending = [j.op_id for j in pending_journals(ctx.journal_dir)]
    ops = []
    vault_bytes = 0
    for root in known_vaults(ctx):
        vault_bytes += Vault(root).size()
    for m in own_manifests(ctx):
        ops.append({k: m.get(k) for k in ("op_id", "kind", "run", "outcome", "reason", "bytes_before",
                                          "bytes_after", "finished_at", "backup_purged", "restored_by")})
    ledger_path = os.path.join(ctx.state, "ledger.json")
    led = Ledger(ledger_path, "", ctx.logdir).summary() if os.path.exists(ledger_path) else None
    return {"logdir": ctx.logdir, "state_dir": ctx.state, "vaults": known_vaults(ctx),
            "vault_bytes": vault_bytes, "unfinished_operations": pending, "operations": ops,
            "ledger": led}


def history(logdir: str) -> List[dict]:
    """The change log, oldest first. Each reduce entry says where its backup is now
    (``backup``: ``kept``, ``purged`` or ``released`` — dropped by a verified restore — or ``none``)
    and ``removed_from_logdir_bytes``; purge entries carry ``freed`` (bytes freed on disk)."""
    entries = read_history(state_dir(logdir))
    try:
        ctx = Context(os.path.abspath(logdir))
        manifests = {m.get("op_id"): m for m in own_manifests(ctx)}
    except OSError:
        manifests = {}
    for e in entries:
        if e.get("kind") != "reduce":
            continue
        m = manifests.get(e.get("op_id"))
        if e.get("outcome") == Outcome.VERIFIED:
            e["removed_from_logdir_bytes"] = max(0, (e.get("before") or 0) - (e.get("after") or 0))
        if not e.get("backup_kept") or m is None:
            e["backup"] = "none" if not e.get("backup_kept") else "unknown"
        elif m.get("backup_released_by_restore"):
            e["backup"] = "released"
        elif m.get("backup_purged"):
            e["backup"] = "purged"
        else:
            e["backup"] = "kept"
    return entries


__all__ = ["scan", "plan", "reduce_logdir", "verify", "restore", "purge", "status", "history",
           "recover_logdir", "pending_operations", "operation", "operations", "ReduceReport", "PurgeReport",
           "CancelToken", "summarize_operations", "operation_summary", "plan_run_view", "category_changes",
           "dashboards_note", "labels_for", "custom_policy", "history_csv", "overview", "restorable",
           "PolicyError", "SelectionError", "reduce_summary", "restore_summary", "restore_target", "NotRestorable"]


def operation(logdir: str, op_id: str, backup_dir: Optional[str] = None) -> dict:
    """The full manifest of one operation (files, plan, verification with scalar series)."""

    return find_manifest(_context(logdir, backup_dir), op_id)


def operations(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """Every operation's manifest (newest first), optionally for one run."""

    ctx = _context(logdir, backup_dir)
    out = [m for m in own_manifests(ctx) if run is None or m.get("run") == run]
    out.sort(key=lambda m: m.get("started_at", 0), reverse=True)
    return out
