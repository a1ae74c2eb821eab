"""What the verbs return and what both front ends show of it: a reduce's report
(``ReduceReport``, ``reduce_summary``), a restore's summary, and the per-run outcome rule they share
(``RunOutcomes``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Outcome, Skip, UNREAD_SKIPS
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.plan.summary import category_changes, dashboards_note, dashboards_summary, labels_for


class RunOutcomes:
    """What a report of per-run outcomes says as a whole: which failed, and whether all went well."""

    outcomes: List[RunOutcome]

    @property
    def failed(self) -> List[RunOutcome]:
        return [o for o in self.outcomes if o.status in (Outcome.FAILED, Outcome.ROLLED_BACK)]

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass
class ReduceReport(RunOutcomes):
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
    #: what ``purge`` of this batch's backups would free on disk (purge's own count); a dry run
    #: that cannot know it (a bucket): None
    freed_on_disk_after_purge_bytes: Optional[int] = 0
    #: disk in use by the logdir and its vault(s) before and after the batch, as ``du`` counts it
    #: (allocated blocks, hard links once; a bucket: the sizes as stored). A dry run: None
    disk_in_use_before_bytes: Optional[int] = None
    disk_in_use_after_bytes: Optional[int] = None
    #: what the logdir's disk gained now: ~0 with the default vault (its backups are hard links
    #: on that disk), the removed bytes with a vault on another disk. A dry run: the estimate
    #: for the chosen vault (``engine.usage``), None where it is not known before (a bucket)
    freed_now_bytes: Optional[int] = 0
    #: what the ledger had that was refused (untrusted input; ``engine.ledger.check_ledger``)
    ledger_problems: List[dict] = field(default_factory=list)
    #: a local logdir whose backups go to a bucket: what the remote vault stores after the batch
    #: (``engine.usage.remote_usage``), never counted in the disk in use; None without one
    remote_vault: Optional[dict] = None
    #: folders outside every run the scan could not enter, of a batch that named no run (a reduce of
    #: the whole logdir): named (a warning, ``unread_warnings``), never a failure of the runs it reduced
    warned_folders: List[str] = field(default_factory=list)

    @property
    def unread(self) -> List[RunOutcome]:
        """Runs and folders left alone because the scan could not enter a folder (``codes.UNREAD_SKIPS``):
        not done, and not said done (review R16 F10); a run seen in part, or a folder the batch named.
        A folder outside every run that no one named is a warning (``unread_warnings``)."""
        return [o for o in self.outcomes if o.status == Outcome.SKIPPED and o.code in UNREAD_SKIPS
                and o.run not in self.warned_folders]

    @property
    def unread_warnings(self) -> List[RunOutcome]:
        """The folders outside every run the scan could not enter, left alone, that a reduce of the
        whole logdir names and goes on without (the runs it reduced do not hold them)."""
        return [o for o in self.outcomes if o.status == Outcome.SKIPPED and o.code in UNREAD_SKIPS
                and o.run in self.warned_folders]

    @property
    def ok(self) -> bool:
        """Nothing failed or rolled back, and no run or folder asked for was left unread."""
        return not self.failed and not self.unread

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
            "remote_vault": self.remote_vault,
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
            "unread_warnings": [o.run for o in self.unread_warnings],
        }


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
                "saved_bytes": 0, "findings": [], "reason": "not in the plan any more (the run changed since the scan); "
                                            "rescan and look again"})
    d["committed_any"] = any(o["status"] == Outcome.VERIFIED for o in d["outcomes"])
    d["dashboards"] = dashboards_summary(
        "reduce", [(o, plan_runs.get(o["run"], {}).get("actions", [])) for o in d["outcomes"]])
    if not with_files:
        d.pop("removed_files", None)
    return d


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

