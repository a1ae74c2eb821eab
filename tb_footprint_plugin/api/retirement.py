"""``retire``: whole runs out of the logdir into the vault, each as its own journaled operation
(``restore`` brings them back); the rule, the dry-run plan and the list of retired runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.engine.context import CancelToken, RunOutcome
from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD
from tb_footprint_plugin.plan.retire import plan_retire, read_keep_list, RetireItem, RetirePlan, RetireRule
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.api.common import engine_vault, RunProgress, say_taken
from tb_footprint_plugin.plan import owners
from tb_footprint_plugin.api.reports import RunOutcomes


# ---------------------------------------------------------------------------------------
# retire: whole runs out of the logdir into the vault (restore brings them back)
# ---------------------------------------------------------------------------------------
@dataclass
class RetireReport(RunOutcomes):
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
    open_engine(logdir, backup_dir, quiet_period=quiet_period).check_retire()  # the retirement's refusals
    fp = footprint or scan(logdir, backup_dir=backup_dir, write_cache=False)
    return plan_retire(fp, rule, quiet_period=quiet_period)


def retire(logdir: str, rule: RetireRule, *, dry_run: bool = True, backup_dir: Optional[str] = None,
           quiet_period: float = DEFAULT_QUIET_PERIOD, only: Optional[Sequence[str]] = None,
           progress: Optional[RunProgress] = None, on_outcome: Optional[Callable[[RunOutcome], None]] = None,
           cancel: Optional[CancelToken] = None, footprint: Optional[LogdirFootprint] = None) -> RetireReport:
    """Retire the runs ``rule`` selects, each as its own journaled operation (dry run by default).

    ``only`` (run names) limits the retirement to runs of the plan the user confirmed: a run the
    rule selects now but that was not shown is left alone. A run another user owns is left alone
    (``Skip.OTHERS_RUN``) unless ``rule.include_others_runs``; one taken says whose vault holds it
    (``plan.owners``). On a bucket logdir each run is a bucket
    retirement (``engine.bucket_retire``), planned from one listing; ``progress`` is a disk's."""
    eng = open_engine(logdir, backup_dir, quiet_period=quiet_period)
    eng.check_retire()
    recovered = [] if dry_run else eng.recover()

    def retire_one(item: RetireItem) -> RunOutcome:
        return eng.retire_run(item.run, takes_along=item.takes_along, rule=rule.to_dict(), quiet_period=quiet_period,
                              cancel=cancel,
                              progress=(lambda step, frac, r=item.run: progress(r, step, frac)) if progress else None)
    p = retire_plan(logdir, rule, backup_dir=backup_dir, quiet_period=quiet_period, footprint=footprint)
    report = RetireReport(dry_run=dry_run, plan=p, recovered=recovered)
    if dry_run:
        report.outcomes = [RunOutcome(run=i.run, status=Outcome.DRY_RUN if i.selected else Outcome.SKIPPED,
                                      reason=i.reason, code=i.code, bytes_before=i.bytes, bytes_after=0 if i.selected
                                      else i.bytes) for i in p.items]
        return report
    eng.remember_vault()
    # one loop for every store: what is not confirmed or comes after a cancel never reaches an engine
    for item in p.selected:
        if only is not None and item.run not in only:
            o = RunOutcome(run=item.run, status=Outcome.SKIPPED, code=Skip.NOT_IN_PLAN, bytes_before=item.bytes,
                           bytes_after=item.bytes, reason="not in the plan that was confirmed")
        elif cancel is not None and cancel.cancelled:
            o = RunOutcome(run=item.run, status=Outcome.SKIPPED, code=Skip.CANCELLED, reason="cancelled",
                           bytes_before=item.bytes, bytes_after=item.bytes)
        else:
            o = retire_one(item)
            if item.owner_uid is not None and o.status == Outcome.VERIFIED:
                vault = engine_vault(eng)
                say_taken(o, owners.taken(item.owner_uid, vault), vault)
        report.outcomes.append(o)
        if on_outcome:
            on_outcome(o)
    return report


def retired(logdir: str, backup_dir: Optional[str] = None) -> List[dict]:
    """Retired runs still kept in the vault (restorable), newest first: run, size, date, op id."""
    return open_engine(logdir, backup_dir).retired()
