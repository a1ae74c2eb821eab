"""Which runs a retirement takes: the selection rules, in one place for the CLI, the API and the tab.

Rules combine (all must hold): explicit run names, a glob on run names, a group glob, age
(``older_than``: no file changed for that long), size (``min_size``), and a result rule: keep
the best N runs of the group by a scalar tag's last (or min/max) value and retire the rest.

Never selected: runs marked to keep (a ``.keep`` file in the run directory, or a name or glob
on the keep list), runs being written (a file changed within the quiet period), the logdir's
own run ``.``, another user's run (its folder or a file of its tree owned by another uid:
``plan.owners``, ``Skip.OTHERS_RUN``) unless ``include_others_runs``. Nested runs are explicit: a run whose directory holds other runs is retired
only with ``include_nested``, and then its plan names every run it takes along (those runs
are never retired on their own in the same plan). Without it such a parent is left alone and
says why; its nested runs can still be retired one by one.

On a bucket logdir the same rules hold (a keep mark is a ``.keep`` object the scan listed);
ranking by a metric is the one rule left to disk logdirs (it reads event files locally).

Writes nothing. The plan shows each run's metric, so the rule's choice can be checked before
anything moves.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional

from tb_footprint_plugin.codes import RetireSkip, Skip
from tb_footprint_plugin.plan import owners
from tb_footprint_plugin.plan.select import matches, matches_any, missing_hint
from tb_footprint_plugin.scan.metrics import run_metric
from tb_footprint_plugin.scan.model import UNATTRIBUTED, LogdirFootprint
from tb_footprint_plugin.storage.remote import is_remote

KEEP_MARK = ".keep"


@dataclass
class RetireRule:
    """A selection. An empty rule selects nothing (retiring everything takes an explicit ``'*'``)."""

    runs: Optional[List[str]] = None
    run_glob: Optional[str] = None
    group: Optional[str] = None
    older_than: Optional[float] = None
    min_size: int = 0
    keep_best: Optional[int] = None
    metric: Optional[str] = None
    mode: str = "min"  # 'min': lower is better; 'max': higher is better
    value: str = "last"  # which value of the metric ranks a run: 'last' | 'min' | 'max'
    keep_list: List[str] = field(default_factory=list)
    include_nested: bool = False
    #: take runs another user owns too (``plan.owners``); their outcomes say whose vault holds them
    include_others_runs: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` for a rule that cannot mean anything."""
        if self.keep_best is not None:
            if isinstance(self.keep_best, bool) or not isinstance(self.keep_best, int) or self.keep_best < 0:
                raise ValueError("keep_best must be a whole number ≥ 0")
            if not self.metric:
                raise ValueError("keep_best needs a metric (a scalar tag, e.g. val/loss)")
        if self.metric and self.keep_best is None:
            raise ValueError("a metric ranks runs only with keep_best N")
        if self.mode not in ("min", "max"):
            raise ValueError(f"mode must be min or max, not {self.mode!r}")
        if self.value not in ("last", "min", "max"):
            raise ValueError(f"value must be last, min or max, not {self.value!r}")
        if self.older_than is not None and (self.older_than < 0 or self.older_than != self.older_than):
            raise ValueError("older_than must be a non-negative number of seconds")
        if self.min_size < 0:
            raise ValueError("min_size must be ≥ 0")
        if not (self.runs or self.run_glob or self.group or self.older_than is not None or self.min_size
                or self.keep_best is not None):
            raise ValueError("say which runs to retire: names, a glob, a group, --older-than, --min-size "
                             "or --keep-best")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RetireItem:
    """One run the selection looked at: retired (``selected``) or left alone with a reason and code."""

    run: str
    selected: bool
    bytes: int = 0  # of the run's directory tree, runs taken along included
    files: int = 0
    newest_mtime: float = 0.0
    takes_along: List[str] = field(default_factory=list)
    metric: Optional[dict] = None  # MetricSummary.to_dict() with 'value' (the ranking value) and 'rank'
    reason: Optional[str] = None  # why (selected or not), for people
    code: Optional[str] = None  # a codes.RetireSkip / codes.Skip for a run left alone
    #: another user's uid owning the run's tree (``plan.owners``): left alone, or taken on request
    owner_uid: Optional[int] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RetirePlan:
    """The dry run of a retirement: what moves (``selected``), what stays and why."""

    logdir: str
    rule: RetireRule
    items: List[RetireItem]
    planned_at: float = field(default_factory=time.time)
    #: names, the glob and the group of the rule that match no run at all (a typo, not "nothing to do")
    unmatched: List[str] = field(default_factory=list)
    #: the same, said for people (with the ``**`` form of a glob that the old rule would have matched)
    unmatched_detail: str = ""

    @property
    def selected(self) -> List[RetireItem]:
        return [i for i in self.items if i.selected]

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.selected)

    def to_dict(self) -> dict:
        return {"logdir": self.logdir, "rule": self.rule.to_dict(), "planned_at": self.planned_at,
                "bytes": self.bytes, "runs": len(self.selected), "items": [i.to_dict() for i in self.items],
                "unmatched": list(self.unmatched)}


def read_keep_list(path: str) -> List[str]:
    """Run names or globs, one a line; blank lines and ``#`` comments ignored."""
    with open(path, "r", encoding="utf-8") as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


def _nested(names: Iterable[str], run: str) -> List[str]:
    prefix = run.rstrip("/") + "/"
    return sorted(n for n in names if n.startswith(prefix))


def plan_retire(fp: LogdirFootprint, rule: RetireRule, *, quiet_period: float,
                now: Optional[float] = None) -> RetirePlan:
    """Apply ``rule`` to the runs of a scan. Reads metric scalars when the rule ranks runs."""
    rule.validate()
    remote = is_remote(fp.logdir)
    if remote and rule.keep_best is not None:
        # the ranking reads each run's event files through TensorBoard's local loader
        raise ValueError("--keep-best ranks runs by reading their event files on this machine; on object "
                         "storage name the runs (names, a glob, a group, age or size) instead")
    now = time.time() if now is None else now
    # every run the scan and the overview show, profile-only ones (a JAX profile, a Keras 2 run's
    # ``plugins/profile``) included: one meaning of "run" for every verb
    runs = {r.name: r for r in fp.runs if r.path != UNATTRIBUTED and r.name != UNATTRIBUTED}
    names = sorted(runs)
    subtree = {n: [n] + _nested(names, n) for n in names}
    tree_bytes = {n: sum(runs[m].total_bytes for m in subtree[n]) for n in names}
    tree_files = {n: sum(len(runs[m].files) for m in subtree[n]) for n in names}
    tree_mtime = {n: max(runs[m].newest_mtime for m in subtree[n]) for n in names}
    # a bucket has no directories to look into: a keep mark is an object the scan listed
    listed = {f.path for r in fp.runs for f in r.files} if remote else set()

    def is_marked(n: str) -> bool:
        return f"{n}/{KEEP_MARK}" in listed if remote else _is_marked(fp.logdir, n)

    def item(n: str, selected: bool, reason: str, code=None, **kw) -> RetireItem:
        return RetireItem(run=n, selected=selected, bytes=tree_bytes.get(n, 0), files=tree_files.get(n, 0),
                          newest_mtime=tree_mtime.get(n, 0.0), reason=reason,
                          code=str(code) if code else None, **kw)

    out: Dict[str, RetireItem] = {}
    if rule.runs:
        for n in rule.runs:
            if n not in runs:
                out[n] = RetireItem(run=n, selected=False, reason="no such run in the logdir",
                                    code=str(RetireSkip.NOT_FOUND))
    pop = [n for n in names if (not rule.runs or n in rule.runs)
           and (not rule.run_glob or matches(n, rule.run_glob))
           and (not rule.group or matches(n, rule.group))
           and (rule.older_than is None or tree_mtime[n] <= now - rule.older_than)
           and tree_bytes[n] >= rule.min_size]
    why = _describe(rule)
    candidates = list(pop)
    if rule.keep_best is not None:
        scored = []
        for n in pop:
            m = run_metric(os.path.join(fp.logdir, n) if n != "." else fp.logdir, rule.metric)
            if m is None:
                out[n] = item(n, False, f"has no scalar {rule.metric!r}: cannot be ranked, left alone",
                              RetireSkip.NO_METRIC)
                continue
            v = m.value(rule.value)
            scored.append((n, v, m))
        bad = math.inf if rule.mode == "min" else -math.inf

        def key(t):
            v = t[1] if not math.isnan(t[1]) else bad
            return (v if rule.mode == "min" else -v, t[0])

        scored.sort(key=key)
        candidates = []
        for rank, (n, v, m) in enumerate(scored, 1):
            md = dict(m.to_dict(), value=v, rank=rank, of=len(scored))
            if rank <= rule.keep_best:
                out[n] = item(n, False, f"kept: #{rank} of {len(scored)} by {rule.value} {rule.metric} "
                              f"({rule.mode} is best)", RetireSkip.KEPT_BY_RULE, metric=md)
            else:
                out[n] = item(n, True, f"#{rank} of {len(scored)} by {rule.value} {rule.metric}; "
                              f"keeping the best {rule.keep_best}", metric=md)
                candidates.append(n)
    chosen = set(candidates)
    for n in candidates:
        prev = out.get(n)
        md = prev.metric if prev else None
        base = prev.reason if prev else why
        kids = subtree[n][1:]
        if n == ".":
            out[n] = item(n, False, "the logdir's own run cannot leave the logdir", RetireSkip.LOGDIR_ROOT, metric=md)
            continue
        # another logdir's state or vault inside the tree (left out by the scan): its backups, perhaps
        # its only copies, would go into this logdir's vault and be freed by its purge (review R13 F5)
        held = [a["path"] for a in getattr(fp, "set_aside", None) or () if a.get("run") in subtree[n]]
        if held:
            out[n] = item(n, False, f"holds {held[0]}" + (f" and {len(held) - 1} more" if len(held) > 1 else "")
                          + ", another logdir's state or vault (its backups, perhaps their only copies): never "
                          "moved by a retirement; purge or restore that logdir's operations, or move it out, "
                          "then retire this run", RetireSkip.HOLDS_STATE, metric=md)
            continue
        # the engine's inventory refuses a link anywhere in the tree (it never follows or moves one):
        # the plan says so before the yes, naming it (review R17 F7)
        link = next((f.path for m in subtree[n] for f in runs[m].files if f.kind == "symlink"), None)
        if link is not None:
            out[n] = item(n, False, f"{link}: a symbolic link inside the run; a retirement never follows or "
                          "moves links; remove or replace it, then retire this run", RetireSkip.HOLDS_LINK, metric=md)
            continue
        marked = [m for m in subtree[n] if is_marked(m) or matches_any(m, rule.keep_list)]
        if marked:
            what = "marked to keep" if marked == [n] else f"holds runs marked to keep ({', '.join(marked)})"
            out[n] = item(n, False, f"{what}; never retired", RetireSkip.MARKED_KEEP, metric=md)
            continue
        age = now - tree_mtime[n]
        if age < quiet_period:
            out[n] = item(n, False, f"active: a file changed {int(age)} s ago (quiet period "
                          f"{int(quiet_period)} s); left alone", Skip.ACTIVE, metric=md)
            continue
        if kids and not rule.include_nested:
            out[n] = item(n, False, f"holds {len(kids)} nested run(s) ({', '.join(kids[:5])}"
                          f"{', …' if len(kids) > 5 else ''}); retire them on their own, or take them along "
                          "(--with-nested)", RetireSkip.HOLDS_RUNS, metric=md)
            continue
        # the whole tree moves: any of its runs' folders or files another user's (one rule: plan.owners)
        uid = owners.others_uid_of(runs[m] for m in subtree[n])
        if uid is not None and not rule.include_others_runs:
            out[n] = item(n, False, owners.left_alone(uid, "retires"), Skip.OTHERS_RUN, metric=md, owner_uid=uid)
            continue
        # another user's taken on request: the plan says so before anyone says yes (review R12 H3)
        out[n] = item(n, True, base + (f"; takes along {len(kids)} nested run(s)" if kids else "")
                      + (f"; {owners.taken_ahead(uid)}" if uid is not None else ""),
                      takes_along=kids, metric=md, owner_uid=uid)
    # a run inside a selected parent's tree moves with the parent: never a second operation
    parents = [i.run for i in out.values() if i.selected and i.takes_along]
    for n in list(out):
        owner = next((p for p in parents if n.startswith(p + "/")), None)
        if owner and n in chosen:
            prev = out[n]
            out[n] = item(n, False, f"moves with {owner} (nested in it)", RetireSkip.INSIDE_RETIRED,
                          metric=prev.metric)
    items = sorted(out.values(), key=lambda i: (not i.selected, i.run))
    unmatched = [n for n in rule.runs or [] if n not in runs]
    unmatched += [g for g in (rule.run_glob, rule.group) if g and not any(matches(n, g) for n in names)]
    detail = ""
    if unmatched:
        shown = ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
        detail = (f"no run of {fp.logdir} matches {', '.join(repr(m) for m in unmatched)}"
                  + "".join(missing_hint(m, names) for m in unmatched) + f" (runs: {shown or 'none'})")
    return RetirePlan(logdir=fp.logdir, rule=rule, items=items, unmatched=unmatched, unmatched_detail=detail)


def _is_marked(logdir: str, run: str) -> bool:
    return os.path.lexists(os.path.join(logdir, run, KEEP_MARK))


def _describe(rule: RetireRule) -> str:
    parts = []
    if rule.runs:
        parts.append("named")
    if rule.run_glob:
        parts.append(f"matches {rule.run_glob!r}")
    if rule.group:
        parts.append(f"in group {rule.group!r}")
    if rule.older_than is not None:
        parts.append(f"unchanged for {int(rule.older_than)} s or more")
    if rule.min_size:
        parts.append(f"holds ≥ {rule.min_size} bytes")
    return "selected: " + ", ".join(parts) if parts else "selected"


__all__ = ["RetireRule", "RetireItem", "RetirePlan", "plan_retire", "read_keep_list", "KEEP_MARK"]
