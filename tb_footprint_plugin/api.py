"""The public verbs, shared by the CLI and the TensorBoard plugin:
``scan``, ``plan``, ``reduce_logdir``, ``verify``, ``restore``, ``purge``, ``status``, ``history``.

Every verb that can change something first settles unfinished operations (crash recovery).
Failures come back as values (per-run outcomes with reasons); only bad arguments raise.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from tb_footprint_plugin.engine.history import read_history
from tb_footprint_plugin.engine.journal import pending_journals
from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.storage.paths import is_within, state_dir
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD, Plan, make_plan
from tb_footprint_plugin.plan.policies import get_policy
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.engine.transaction import (
    CancelToken,
    Context,
    RecoveryOutcome,
    RunOutcome,
    TransactionError,
    recover,
    reduce_run,
)
from tb_footprint_plugin.engine.vault import Vault, atomic_write_json

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


def known_vaults(ctx: Context) -> List[str]:
    """The default vault plus every other vault this logdir's operations have used."""
    roots = [ctx.state]
    try:
        with open(os.path.join(ctx.state, "vaults.json"), "r", encoding="utf-8") as f:
            roots += [r for r in json.load(f) if r not in roots]
    except (OSError, ValueError):
        pass
    if ctx.vault.root not in roots:
        roots.append(ctx.vault.root)
    return roots


def _remember_vault(ctx: Context) -> None:
    if ctx.vault.root == ctx.state:
        return
    roots = [r for r in known_vaults(ctx) if r != ctx.state]
    atomic_write_json(os.path.join(ctx.state, "vaults.json"), roots)


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
    def removed_files(self) -> List[str]:
        return [p for o in self.outcomes for p in o.removed_files]

    @property
    def failed(self) -> List[RunOutcome]:
        return [o for o in self.outcomes if o.status in ("failed", "rolled_back")]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "removable_bytes": self.removable_bytes,
            "expected_after_bytes": self.expected_after_bytes,
            "saved_bytes": self.saved_bytes,
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
        report.outcomes = [RunOutcome(run=rp.run, status="skipped" if rp.skipped else "dry_run",
                                      reason=rp.skipped, bytes_before=rp.bytes_before,
                                      bytes_after=rp.expected_after_bytes) for rp in p.runs]
        return report
    _remember_vault(ctx)
    book = None
    if ledger:
        path = os.path.join(ctx.state, "ledger.json") if ledger == "default" else os.path.abspath(ledger)
        if not (is_within(path, ctx.logdir) or is_within(path, ctx.vault.root)):
            raise ValueError(f"ledger {path} must be inside the logdir or the backup vault")
        book = Ledger(path, pol.name, ctx.logdir)
        report.ledger_path = path
        entries = book.start(rp.run for rp in p.runs)
    todo = []
    for rp in p.runs:
        if book and not book.should_run(entries.get(rp.run)):
            report.outcomes.append(RunOutcome(run=rp.run, status="skipped",
                                              reason=f"already {entries[rp.run]['state']} in the ledger",
                                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before))
            continue
        todo.append(rp)

    def one(rp) -> RunOutcome:
        if cancel is not None and cancel.cancelled:
            return RunOutcome(run=rp.run, status="skipped", reason="batch cancelled",
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
        token = CancelToken(timeout)
        if cancel is not None:
            token._event = cancel._event  # one cancel stops every run at its next step
        if book:
            book.mark(rp.run, "reducing", original_size_bytes=rp.bytes_before)

        def step(name, frac):
            if book and name == "verify":
                book.mark(rp.run, "verifying")
            if progress:
                progress(rp.run, name, frac)

        o = reduce_run(ctx, rp, policy=pol.to_dict(), cancel=token, progress=step)
        if book:
            state = {"verified": "done", "skipped": "skipped"}.get(o.status, "failed")
            book.mark(rp.run, state, original_size_bytes=o.bytes_before, after_size_bytes=o.bytes_after,
                      reduced_ratio=round(1 - o.bytes_after / o.bytes_before, 4) if o.bytes_before else 0.0,
                      verified=o.verified, error=o.reason if state != "done" else None, op_id=o.op_id)
        if on_outcome:
            on_outcome(o)
        return o

    def safe(rp) -> RunOutcome:
        try:
            return one(rp)
        except Exception as e:  # e.g. the ledger's disk is full: this run failed, the batch goes on
            return RunOutcome(run=rp.run, status="failed", reason=f"{type(e).__name__}: {e}",
                              bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)

    if jobs > 1:
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            report.outcomes += list(ex.map(safe, todo))
    else:
        report.outcomes += [safe(rp) for rp in todo]
    return report


def verify(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
           backup_dir: Optional[str] = None,
           verify_backends: Sequence[str] = DEFAULT_BACKENDS) -> List[dict]:
    """Re-check committed reductions: every backup re-hashed, and the run as it is now read by
    TensorBoard's readers against the original (from the vault)."""
    import shutil

    from tb_footprint_plugin.scan.categories import is_event_file_name
    from tb_footprint_plugin.engine.restore import find_manifest, restorable_ops
    from tb_footprint_plugin.verify import verify_reduction

    ctx = _context(logdir, backup_dir, verify_backends=verify_backends)
    recover_logdir(logdir, backup_dir)
    manifests = [find_manifest(ctx, op)] if op else restorable_ops(ctx, run)
    newest = {}
    for m in restorable_ops(ctx, None):  # newest first
        newest.setdefault(m["run"], m["op_id"])
    results = []
    for m in manifests:
        vault = Vault(m["vault"])
        bad = [f["path"] for f in m["files"] if not vault.check_blob(f["sha256"])]
        res = {"op_id": m["op_id"], "run": m["run"], "backups_ok": not bad, "damaged_backups": bad}
        if newest.get(m["run"], m["op_id"]) != m["op_id"]:
            # a later reduction changed the run again: only its own backups can be checked
            res["verification"] = {"ok": True, "checks": [{"name": "superseded", "ok": True, "detail":
                                   f"superseded by {newest[m['run']]}; backups re-hashed"}]}
            res["ok"] = not bad
            results.append(res)
            continue
        run_dir = ctx.abs(m["run"])
        tmp = os.path.join(vault.tmp, f"verify-{m['op_id']}-{os.getpid()}")
        orig, cur = os.path.join(tmp, "original"), os.path.join(tmp, "reduced")
        os.makedirs(orig, exist_ok=True)
        os.makedirs(cur, exist_ok=True)
        try:
            by_name = {os.path.basename(f["path"]): f for f in m["files"]
                       if os.path.dirname(f["path"]) == (m["run"] if m["run"] != "." else "")}
            names = set(by_name)
            if os.path.isdir(run_dir):
                names |= {n for n in os.listdir(run_dir) if is_event_file_name(n)}
            for n in sorted(names):
                if not is_event_file_name(n):
                    continue
                f = by_name.get(n)
                os.symlink(vault.blob_path(f["sha256"]) if f else os.path.join(run_dir, n), os.path.join(orig, n))
                if os.path.isfile(os.path.join(run_dir, n)):
                    os.symlink(os.path.join(run_dir, n), os.path.join(cur, n))
            exp = None
            modes = (m.get("verification") or {}).get("expectations")
            if modes:
                from tb_footprint_plugin.verify import Expectations

                exp = Expectations(plugin_modes=modes)
            vr = verify_reduction(orig, cur, exp, backends=tuple(verify_backends)).to_dict()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        res["verification"] = vr
        res["ok"] = bool(vr.get("ok")) and not bad
        results.append(res)
    return results


def restore(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
            backup_dir: Optional[str] = None) -> List[RunOutcome]:
    """Put back the exact original bytes: one operation (``op``), every operation of ``run``
    newest first, or (neither given) every restorable operation of the logdir."""
    from tb_footprint_plugin.engine.restore import find_manifest, restorable_ops, restore_op

    ctx = _context(logdir, backup_dir)
    recover_logdir(logdir, backup_dir)
    if op:
        return [restore_op(ctx, find_manifest(ctx, op))]
    ops = restorable_ops(ctx, run)
    if run is not None and not ops:
        raise TransactionError(f"nothing to restore for run {run!r} (no kept backup of a verified reduction)")
    outcomes = []
    for m in ops:
        outcomes.append(restore_op(ctx, m))
    return outcomes


@dataclass
class PurgeReport:
    """What a purge freed (or, without ``yes``, would free)."""

    dry_run: bool
    ops: List[dict]
    freed_bytes: int

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "ops": self.ops, "freed_bytes": self.freed_bytes}


def purge(logdir: str, older_than: Optional[float] = None, run: Optional[str] = None,
          yes: bool = False, backup_dir: Optional[str] = None, op: Optional[str] = None) -> PurgeReport:
    """Delete backups of verified (or restored) operations; without ``yes`` only list them.

    A blob another kept operation, or an unfinished one, still needs is never deleted; a run
    being changed right now is passed over.
    """
    from tb_footprint_plugin.engine.journal import RunLock, RunLocked
    from tb_footprint_plugin.engine.restore import own_manifests
    from tb_footprint_plugin.engine.transaction import journal_blobs, unsettled_op

    ctx = _context(logdir, backup_dir)
    recover_logdir(logdir, backup_dir)
    now = time.time()
    candidates = []
    for m in own_manifests(ctx):
        if m.get("kind") != "reduce" or m.get("backup_purged"):
            continue
        if (op and m["op_id"] != op) or (run is not None and m["run"] != run):
            continue
        if older_than is not None and m.get("finished_at", now) > now - older_than:
            continue
        candidates.append(m)
    locks, chosen = {}, []
    try:
        for m in candidates:
            if yes and m["run"] not in locks:
                try:
                    locks[m["run"]] = RunLock(ctx.lock_dir, m["run"]).acquire()
                except (RunLocked, OSError):
                    continue  # being changed right now: purge it another time
                if unsettled_op(ctx, m["run"]):
                    continue
            chosen.append(m)
        freed, listed = 0, []
        by_vault: Dict[str, List[dict]] = {}
        for m in chosen:
            by_vault.setdefault(m["vault"], []).append(m)
        pending = journal_blobs(ctx)
        for root, ms in by_vault.items():
            vault = Vault(root)
            keep = vault.referenced_blobs(exclude_ops=[m["op_id"] for m in ms]) | pending
            seen = set()
            for m in ms:
                shas = [f["sha256"] for f in m["files"] if f["sha256"] not in keep and f["sha256"] not in seen]
                seen.update(shas)
                if yes:
                    # the manifest stops claiming a backup before any blob goes
                    m["backup_purged"] = True
                    m["purged_at"] = now
                    vault.write_manifest(m)
                    size = sum(vault.delete_blob(sha) for sha in shas)
                else:
                    size = sum(os.lstat(vault.blob_path(sha)).st_size for sha in shas
                               if os.path.exists(vault.blob_path(sha)))
                freed += size
                listed.append({"op_id": m["op_id"], "run": m["run"], "bytes": size,
                               "finished_at": m.get("finished_at"), "restored": bool(m.get("restored_by"))})
    finally:
        for lock in locks.values():
            lock.release()
    return PurgeReport(dry_run=not yes, ops=listed, freed_bytes=freed)


def status(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations, the batch ledger, the vault and the operations it holds."""
    ctx = _context(logdir, backup_dir)
    pending = [j.op_id for j in pending_journals(ctx.journal_dir)]
    ops = []
    vault_bytes = 0
    from tb_footprint_plugin.engine.restore import own_manifests

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
    """The change log, oldest first."""
    return read_history(state_dir(logdir))


__all__ = ["scan", "plan", "reduce_logdir", "verify", "restore", "purge", "status", "history",
           "recover_logdir", "ReduceReport", "PurgeReport"]


def operation(logdir: str, op_id: str, backup_dir: Optional[str] = None) -> dict:
    """The full manifest of one operation (files, plan, verification with scalar series)."""
    from tb_footprint_plugin.engine.restore import find_manifest

    return find_manifest(_context(logdir, backup_dir), op_id)


def operations(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """Every operation's manifest (newest first), optionally for one run."""
    from tb_footprint_plugin.engine.restore import own_manifests

    ctx = _context(logdir, backup_dir)
    out = [m for m in own_manifests(ctx) if run is None or m.get("run") == run]
    out.sort(key=lambda m: m.get("started_at", 0), reverse=True)
    return out
