"""What a plan means to a person: bytes per category before and after, and what the
dashboards of a running TensorBoard show after a change. Both front ends show these, so both
call these functions (through ``api``) and show the same numbers.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional

from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.scan import categories as cat


def labels_for(names) -> Dict[str, str]:
    """Category name -> the label people read."""
    return {n: cat.label(n) for n in names if n}


def plan_run_view(rp, labels: dict) -> dict:
    """A run's plan as shown to people: actions labelled, params dropped, per-category totals."""
    d = rp.to_dict()
    d["category_changes"] = category_changes(d, labels)
    for a in d.get("actions", []):
        a.pop("params", None)
        a["label"] = labels.get(a["category"], a["category"])
    return d


def category_totals(actions) -> Dict[str, List[int]]:
    """Per category the actions touch: [bytes before, bytes after, files] (a rewritten event
    file counts under each category it holds with that category's own bytes; its framing stays in
    "everything else"). What a manifest keeps of its plan's actions, which ``files`` and
    ``removed_dirs`` already list one by one."""
    per: Dict[str, List[int]] = {}
    for a in actions or []:
        if not isinstance(a, dict):
            continue
        split = a.get("categories") or {}
        if split:
            for c, (b, after) in split.items():
                if b == after:
                    continue
                e = per.setdefault(c, [0, 0, 0])
                e[0] += int(b)
                e[1] += int(after)
                e[2] += 1
            continue
        e = per.setdefault(a.get("category") or "other", [0, 0, 0])
        e[0] += int(a.get("bytes_before") or 0)
        e[1] += int(a.get("bytes_after") or 0)
        if a.get("kind") != "remove_dir":
            e[2] += 1
    return per


def category_changes(plan_run: dict, labels: dict) -> List[dict]:
    """Per category touched by a plan: bytes before and after; plus the untouched rest. From its
    actions, or, in a manifest that keeps only their totals, from ``changes`` (``category_totals``)."""
    if "actions" in plan_run or not isinstance(plan_run.get("changes"), dict):
        totals = category_totals(plan_run.get("actions", []))
    else:
        totals = plan_run["changes"]
    per = []
    for c, e in totals.items():
        try:
            before, after, files = (int(x) for x in e)
        except (TypeError, ValueError):
            continue  # read back from disk: a malformed entry is left out, never guessed
        per.append({"name": c, "label": labels.get(c) or cat.label(c), "before": before, "after": after,
                    "files": files})
    out = sorted((e for e in per if e["before"] or e["files"]), key=lambda e: -e["before"])
    touched = sum(e["before"] for e in out)
    rest = int(plan_run.get("bytes_before") or 0) - touched
    if rest > 0:
        out.append({"name": "_unchanged", "label": "everything else (unchanged)", "before": rest, "after": rest,
                    "files": 0})
    return out


def _dashboard_effects(kind: str, outcome: dict, actions: Optional[List[dict]]) -> tuple:
    """(profile lines, whether an event file changed) for one run's outcome."""
    changed = list(outcome.get("removed_files") or []) + list(outcome.get("created_files") or [])
    if actions:
        changed += [a.get("path") or "" for a in actions]
    events = [p for p in changed if "tfevents" in os.path.basename(p) and not p.endswith(".profile-empty")]
    lines = []
    if kind == "reduce" and actions is not None:
        acts = [a for a in actions if a.get("kind") in ("delete", "compress", "rewrite", "remove_dir")]
        cats = {(a.get("kind"), a.get("category")) for a in acts}
        sessions_gone = any(k == "remove_dir" for k, _ in cats) or ("delete", "profile_xplane") in cats
        if sessions_gone:
            lines.append("Profile: the removed sessions disappear from the Profile tab's run list once the page is "
                         "reloaded; a session already open there can no longer load its tools.")
        elif cats & {("delete", "profile_cache"), ("delete", "profile_secondary"),
                     ("delete", "profile_tool_outputs")}:
            lines.append("Profile: every session still opens with every tool; xprof rebuilds the removed caches "
                         "the first time a session is viewed again (slower once).")
        if ("compress", "torch_trace") in cats:
            lines.append("PyTorch Profiler: it reads the .gz traces the same; reload the page so it lists the "
                         "new file names.")
        if ("delete", "torch_trace") in cats:
            lines.append("PyTorch Profiler: the removed traces disappear from its list once the page is reloaded.")
    else:
        profile = [p for p in changed if "/plugins/profile/" in "/" + p
                   or p.endswith((".pt.trace.json", ".pt.trace.json.gz"))]
        if profile:
            verb = "listed again" if kind == "restore" else "updated"
            lines.append(f"Profile / PyTorch Profiler: the restored sessions and traces are {verb} once the page "
                         "is reloaded.")
    return lines, bool(events)


def _names(runs: List[str], limit: int = 5) -> str:
    shown = ", ".join(runs[:limit])
    return shown + (f" and {len(runs) - limit} more" if len(runs) > limit else "")


def dashboards_summary(kind: str, changes: List[tuple]) -> List[str]:
    """What the other dashboards show after a job, from all its outcomes at once.

    ``changes`` is ``[(outcome, actions or None), ...]``. Derived from what each run's outcome
    says changed on disk, so one job gets one consistent note (never "restart" for some runs and
    "nothing to reload" for the job as a whole)."""
    done = [(o, a) for o, a in changes if o.get("status") in (Outcome.VERIFIED, Outcome.RESTORED)]
    if not done:
        return ["Nothing on disk changed, so every dashboard shows what it showed before."]
    lines: List[str] = []
    rewritten: List[str] = []
    untouched: List[str] = []
    for o, actions in done:
        profile_lines, events = _dashboard_effects(kind, o, actions)
        lines.extend(l for l in profile_lines if l not in lines)
        (rewritten if events else untouched).append(o.get("run") or "?")
    if rewritten:
        which = "" if len(done) == 1 else f" of {_names(rewritten)}"
        lines.append("Scalars, images, histograms and the other dashboards: this running TensorBoard keeps what it "
                     f"already loaded from the rewritten or removed event files{which} (it never re-reads a file it "
                     "has read), so it shows their old data until it is restarted. Restart TensorBoard to see "
                     + ("the run" if len(done) == 1 else "these runs") + " exactly as on disk now.")
        if untouched:
            lines.append(f"No event file of {_names(untouched)} changed: their scalars, images, histograms, text, "
                         "hparams and graphs show exactly what they showed before.")
    else:
        lines.append("Scalars, images, histograms, text, hparams and graphs: no event file changed, so these "
                     "dashboards show exactly what they showed before; nothing to reload.")
    return lines


def dashboards_note(kind: str, outcome: dict, actions: Optional[List[dict]] = None) -> List[str]:
    """What the other dashboards of a running TensorBoard show after one run's change, in plain words."""
    return dashboards_summary(kind, [(outcome, actions)])


def overview(fp, plan) -> dict:
    """The logdir at a glance under ``plan``: totals, categories, and per run its size and what
    the plan frees (runs the plan skips free nothing; ``code`` says why, ``skipped`` in words)."""
    plans = {rp.run: rp for rp in plan.runs}
    runs = []
    for r in fp.runs:
        rp = plans.get(r.name)
        runs.append({
            "name": r.name,
            "total_bytes": r.total_bytes,
            "newest_mtime": r.newest_mtime,
            "categories": {c.name: c.bytes for c in r.categories.values() if c.bytes},
            "biggest": r.biggest_category(),
            "sessions": len(r.sessions),
            "warnings": len(r.warnings),
            "has_event_files": r.has_event_files,
            "removable_bytes": rp.removable_bytes if rp and not rp.skipped else 0,
            "planned_removable_bytes": rp.removable_bytes if rp else 0,
            "skipped": rp.skipped if rp else "not a run TensorBoard reads",
            "code": rp.code if rp else Skip.NOT_A_RUN,
            "actions": len(rp.actions) if rp else 0,
        })
    cats = [{"name": c.name, "label": cat.label(c.name), "bytes": c.bytes, "files": c.files,
             "records": c.records} for c in fp.categories.values()]
    payload = {
        "logdir": fp.logdir,
        "policy": plan.policy.get("name"),
        "total_bytes": fp.total_bytes,
        "vault_bytes": fp.vault_bytes,
        "reclaimable_bytes": plan.removable_bytes,
        "expected_after_bytes": plan.expected_after_bytes,
        "run_count": len(fp.runs),
        "active_runs": sum(1 for rp in plan.runs if rp.code == Skip.ACTIVE),
        "categories": cats,
        "warnings": list(fp.warnings)[:50],
        "runs": runs,
    }
    return payload


__all__ = ["overview", "labels_for", "plan_run_view", "category_changes", "dashboards_note",
           "dashboards_summary"]
