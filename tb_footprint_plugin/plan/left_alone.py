"""Runs a plan leaves alone for what it cannot see or must not touch now, named with a code.

The planner plans each run from its scan; what makes a planned run wait is decided here, apart
from what the policy would do: a folder the scan could not enter (inside a run, or outside every
run, where it may hold runs), a file open for writing, an operation left unfinished (the engine's
front asks ``leave_alone``). A run once left alone for being unread or another user's stays so.
"""
from __future__ import annotations

import os
from typing import List, Optional

from tb_footprint_plugin.codes import Finding, Skip, UNREAD_SKIPS
from tb_footprint_plugin.plan import select
from tb_footprint_plugin.plan.model import Plan, RunPlan
from tb_footprint_plugin.scan.discovery import display
from tb_footprint_plugin.scan.model import LogdirFootprint

__all__ = ["apply_open_writers", "leave_alone", "leave_unread_alone", "unread_folders"]


def unread_folders(footprint: LogdirFootprint) -> List[str]:
    """The folders outside every run the scan could not enter (``LogdirFootprint.unreadable``):
    each may be or hold runs, so a selection may name it and the plan lists it, left alone."""
    return [u["path"] for u in getattr(footprint, "unreadable", None) or () if u.get("run") is None]


def leave_unread_alone(footprint: LogdirFootprint, plans: List[RunPlan], chosen: Optional[set],
                       run_glob: Optional[str]) -> List[RunPlan]:
    """The folders the scan could not enter, never dropped silently (review R16 F10): a planned run
    with such a folder inside is left alone (it is not wholly seen), and each such folder outside
    every run (it may be or hold runs) selected is returned as a plan of its own, left alone;
    both naming the folder's absolute path in ``skipped``, with its code (``codes.UNREAD_SKIPS``)."""
    found = getattr(footprint, "unreadable", None) or ()
    if not found:
        return []
    by_run = {rp.run: rp for rp in plans}
    extra: List[RunPlan] = []
    for u in found:
        where = display(os.path.join(footprint.logdir, u["path"]) if u["path"] != "." else footprint.logdir)
        why = u.get("why") or "unreadable"
        if u.get("run") is not None:
            rp = by_run.get(u["run"])
            if rp is None or rp.code in UNREAD_SKIPS:
                continue  # not selected, or left alone for an earlier folder already
            rp.skipped = (f"its folder {where} cannot be read ({why}): the run is not wholly seen, so it is left "
                          "alone; give this user read access to it and plan again")
            rp.code = u["code"]
            continue
        if chosen is not None and u["path"] not in chosen:
            continue
        if run_glob and not select.matches(u["path"], run_glob):
            continue
        extra.append(RunPlan(
            run=u["path"], bytes_before=0, expected_after_bytes=0, planned_at=footprint.scanned_at,
            skipped=(f"folder {where} cannot be read ({why}): not scanned, so nothing in it is planned or "
                     "changed, and it may hold runs; give this user read access to it and plan again"),
            code=u["code"]))
    return extra


def leave_alone(plan: Plan, run: str, reason: str, code: str, writers: Optional[List[dict]] = None) -> None:
    """Mark a planned run as left alone (a live writer, an unfinished operation), with a code."""
    rp = plan.run(run)
    if rp is None or (rp.skipped and not rp.actions):
        return  # nothing planned for it anyway
    if rp.code in UNREAD_SKIPS or rp.code == Skip.OTHERS_RUN:
        return  # not wholly seen, or another user's: it stays left alone for that (it does not pass)
    rp.skipped, rp.code = reason, code
    if writers:
        rp.writers = list(writers)


def apply_open_writers(plan: Plan, found, logdir: str) -> None:
    """Leave alone every planned run with a file open for writing (``found``: a ``WriterScan``
    over the runs' files), naming the process; say so if some processes could not be checked, and
    when others may write the logdir without its sticky bit (``logdir_not_sticky``)."""
    from tb_footprint_plugin.storage.openfiles import describe_holders
    from tb_footprint_plugin.storage.paths import writable_by_others_unsticky

    rel = lambda p: os.path.relpath(p, logdir)  # noqa: E731
    by_run = {}
    for h in found.holders:
        r = _run_of(plan, rel(h.path))
        if r is not None:
            by_run.setdefault(r, []).append(h)
    for run, hs in by_run.items():
        leave_alone(plan, run, "being written: " + describe_holders(hs, rel) + "; left alone",
                    Skip.OPEN_FOR_WRITING, [h.to_dict() for h in hs])
    if not found.supported:
        plan.notes.append("open files could not be checked on this system: only the quiet period tells "
                          "whether a run is still being written; late writes are salvaged at the next start")
    elif found.uninspected:
        plan.notes.append(f"{Finding.WRITERS_NOT_RULED_OUT}: {found.uninspected} process(es) of other users could not "
                          "be inspected for open files (pids " + ", ".join(map(str, found.uninspected_pids))
                          + "); a writer among them is not ruled out — its late records would be salvaged "
                          "into the run at the next start")
    # others who may write the logdir without its sticky bit can move the state folder away mid-run
    # (review R13 F2): the operation would stop with state_moved; said here, before it starts
    unsticky = writable_by_others_unsticky(logdir)
    if unsticky:
        plan.notes.append(f"{Finding.LOGDIR_NOT_STICKY}: {unsticky}")


def _run_of(plan: Plan, path: str) -> Optional[str]:
    """The planned run a logdir-relative path belongs to (the deepest run directory above it)."""
    best = None
    for rp in plan.runs:
        prefix = "" if rp.run == "." else rp.run + "/"
        if path.startswith(prefix) and (best is None or len(rp.run) > len(best)):
            best = rp.run
    return best
