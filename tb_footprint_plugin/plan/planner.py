"""The dry run: a pure function of a scan and a policy. Nothing here touches the disk.

Per run it lists the actions (delete, compress, rewrite, remove an emptied directory), the
bytes before and the expected bytes after, and one fidelity line per category saying what
the dashboard will show afterwards.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from tb_footprint_plugin.codes import Skip
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.fmt import human_bytes, plural
from tb_footprint_plugin.scan.model import LogdirFootprint, NO_ITEMS, NO_KEYS, RunFootprint, UNATTRIBUTED
from tb_footprint_plugin.plan.content import Line, fit, plan_content
from tb_footprint_plugin.plan.left_alone import leave_unread_alone, unread_folders
from tb_footprint_plugin.plan.model import Action, DirRemoval, Plan, RunPlan, SharedTexts
from tb_footprint_plugin.plan import owners, select
from tb_footprint_plugin.plan.policies import COMPRESS, DELETE, Policy, get_policy

#: gzip -6 shrinks kineto's pretty-printed JSON ~19x (measured on the real fixtures). Only where
#: the plan cannot run the gzip itself (a bucket logdir, a trace unreadable now) does it plan with
#: this margin, so "expected after" is an upper bound, and say it is an estimate.
TORCH_GZIP_RATIO_ESTIMATE = 0.08
DEFAULT_QUIET_PERIOD = 600.0
#: Session files derived from its xplane, deleted by the lossless tiers only when the session
#: still has one (``Policy.secondary_only_with_xplane``), with the reason the plan gives.
_DERIVED_FROM_XPLANE = {
    cat.PROFILE_SECONDARY: "secondary trace: xprof reads only the session's xplane (.pb / .riegeli)",
    cat.PROFILE_TOOL_OUTPUTS: ("old-format tool output: with an xplane in the session the profile plugin "
                               "builds every tool from the xplane (any version), xprof reads nothing else"),
}
#: Event records that carry no dashboard data of their own.
_BOOKKEEPING = frozenset({cat.FILE_VERSION, cat.SESSION_LOG, cat.EVENTS_OTHER})


def newest_write(files: Iterable[Tuple[str, float]], closed_files: Optional[Mapping[str, float]] = None) -> float:
    """The newest mtime the quiet period looks at (0.0 if none): every file's, except a file the
    caller knows its own job wrote and closed (``closed_files``: logdir-relative path -> the
    mtime it had when found closed) and that has not been written since."""
    closed = closed_files or {}
    return max((m for p, m in files if closed.get(p) != m), default=0.0)


def active_reason(newest: float, quiet_period: float, now: float) -> Optional[str]:
    """Why a run whose newest counted write is ``newest`` is active, or None when it is quiet."""
    age = now - newest
    if newest and age < quiet_period:
        if age < 0:  # a clock ahead of this one (another host's, a copy's): no age to tell
            return (f"active: a file is dated {int(-age)} s in the future (quiet period {int(quiet_period)} s); "
                    "a run that may still be being written is left alone")
        return (f"active: files changed {int(age)} s ago (quiet period {int(quiet_period)} s); "
                "a run still being written is left alone")
    return None


#: what a plan says of a local vault (a bucket plan says when its bucket frees bytes instead)
LOCAL_VAULT_NOTE = ("Backups are kept in the vault until you purge them: disk space is freed by `purge`, "
                    "or at once if the vault is on another disk (--backup-dir).")


class SelectionError(ValueError):
    """A run selection (``--run`` / ``--runs``) that names no run of the logdir."""


def check_selection(footprint: LogdirFootprint, runs: Optional[List[str]], run_glob: Optional[str]) -> None:
    """Raise ``SelectionError`` naming each ``runs`` entry and a ``run_glob`` that match no run:
    a typo must not look like "nothing to do". A folder the scan could not enter counts as a name
    (the plan then says why it is left alone)."""
    names = [r.name for r in footprint.runs if r.name != UNATTRIBUTED] + unread_folders(footprint)
    known = set(names)  # membership per selected name: a list made a whole-logdir selection quadratic
    missing = [n for n in (runs or []) if n not in known or not n.strip()]
    # a blank glob selects nothing (plan.select's rule), never every run
    if run_glob is not None and (not run_glob.strip() or not any(select.matches(n, run_glob) for n in names)):
        missing.append(run_glob)
    if missing:
        shown = ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
        raise SelectionError(f"no run of {footprint.logdir} matches {', '.join(repr(m) for m in missing)} "
                             f"(runs: {shown or 'none'})")


def make_plan(
    footprint: LogdirFootprint,
    policy="archive",
    *,
    runs: Optional[List[str]] = None,
    run_glob: Optional[str] = None,
    min_size: int = 0,
    older_than: Optional[float] = None,
    quiet_period: float = DEFAULT_QUIET_PERIOD,
    now: Optional[float] = None,
    closed_files: Optional[Mapping[str, float]] = None,
    rewrite=None,
    trace_after=None,
    on_planned: Optional[Callable[[RunFootprint, RunPlan], None]] = None,
    include_others_runs: bool = False,
) -> Plan:
    """Plan ``policy`` over ``footprint``; runs not selected by the filters are left out,
    active or unchanged runs are listed with ``skipped`` set. ``closed_files`` (see
    ``newest_write``) are exempt from the quiet period; every other file is not.
    ``rewrite(run, rules, file_names)``: the event-file rewrite's own selection, so that what
    the plan says is what the reduce does (``content``); without it, event rewrites are estimates.
    ``trace_after(run, path, trace_options)``: the same for PyTorch traces, the exact size the
    gzip (options None) or the slim leaves (``transforms.plan_cache.PlanRewrites.trace_after``);
    without it, their sizes are estimates (``Action.estimated``).
    ``on_planned(run, run_plan)``: called once each run is planned (skips set), so a caller that
    owns the scan may let go of the run's files before the next (``let_go``).
    A run another user owns (its folder, or a file it would change: ``plan.owners``) is left alone
    with ``Skip.OTHERS_RUN`` unless ``include_others_runs``; then planned, its ``owner_uid`` set.
    Each run plan carries the opt-in: the engine asks the rule again at the run's lock."""
    pol = get_policy(policy)
    now = time.time() if now is None else now
    check_selection(footprint, runs, run_glob)
    chosen = set(runs) if runs is not None else None
    plans = []
    texts = SharedTexts()  # the plan's lines and reasons: one string each, however many runs say it
    for r in footprint.runs:
        if r.name == UNATTRIBUTED or (chosen is not None and r.name not in chosen):
            continue
        if run_glob and not select.matches(r.name, run_glob):
            continue
        if r.total_bytes < min_size:
            continue
        if older_than is not None and r.newest_mtime > now - older_than:
            continue
        active = active_reason(newest_write(((f.path, f.mtime) for f in r.files), closed_files),
                               quiet_period, now)
        # a run still being written, or in another user's folder, is left alone: its rewrite is not
        # worth analysing now
        idle = not active and (include_others_runs or r.uid is None)
        rp = plan_run(r, pol, rewrite if idle else None, trace_after if idle else None)
        rp.planned_at, rp.include_others_runs = footprint.scanned_at, include_others_runs
        uid = owners.others_uid_changed(r, rp.actions)
        if uid is not None and not include_others_runs:
            rp.skipped, rp.code, rp.owner_uid = owners.left_alone(uid, "reduces"), Skip.OTHERS_RUN, uid
        elif rp.actions and active:
            rp.skipped, rp.code = active, Skip.ACTIVE
        elif not rp.actions:
            rp.skipped, rp.code = "nothing to reduce under this policy", Skip.NOTHING
        else:
            rp.owner_uid = uid  # taken on request: the outcome says whose vault holds it
        _share_texts(rp, texts)
        plans.append(rp)
        if on_planned is not None:
            on_planned(r, rp)
    folders = leave_unread_alone(footprint, plans, chosen, run_glob)
    plans += folders
    plans.sort(key=lambda p: (-p.bytes_before, p.run))
    notes = [LOCAL_VAULT_NOTE]
    return Plan(
        logdir=footprint.logdir,
        policy=pol.to_dict(),
        created_at=now,
        total_bytes=sum(p.bytes_before for p in plans),
        runs=plans,
        notes=notes,
        unread_folders=[rp.run for rp in folders],
    )


def let_go(run: RunFootprint) -> None:
    """Drop what a planned run's footprint holds beyond its name and totals (files, sessions,
    categories): for a scan only its plan reads, so that a plan of 100,000 runs does not hold
    the whole scan and the whole plan at once (~1.5 KB a run; issue 28 item 1)."""
    run.files, run.sessions, run.categories = NO_ITEMS, NO_ITEMS, NO_KEYS


def _mark_links(run: RunFootprint, rp: RunPlan) -> None:
    """Each action on a file with other hard links (``FileEntry.links``) says so, and the run
    counts them as kept on disk (``linked_*``): removing one name frees nothing while another
    stands. Counted here without a look at the disk; the engine's note refines it (names that
    all go in this plan free their inode once: ``engine.plan_notes.linked_cut``). Likewise a
    sparse original (``FileEntry.allocated``) says what it holds on disk, and the run counts its
    holes (``hole_bytes``): removed data, but no disk freed."""
    links = {f.path: (f.links, f.allocated) for f in run.files
             if f.links > 1 or f.allocated is not None}  # none, mostly
    if not links:
        return
    for a in rp.actions:
        n, held = links.get(a.path, (1, None))
        if a.kind == "remove_dir":
            continue
        if n > 1:
            a.links = n
            rp.linked_files += 1
            rp.linked_bytes += a.disk_before if held is None else held
        if held is not None and held < a.bytes_before:
            a.allocated = held
            rp.hole_bytes += a.bytes_before - held


def _file_category(f) -> str:
    return next(iter(f.categories)) if f.categories else cat.OTHER


def _session_of(path: str, run: RunFootprint) -> Optional[str]:
    for s in run.sessions:
        if s.kind == "xprof" and path.startswith(s.path + "/"):
            return s.path
    return None


def _share_texts(rp: RunPlan, texts: SharedTexts) -> None:
    """Make the plan's like lines one string: the runs of a sweep mostly say the same
    ("scalars: unchanged (...)", "profile xplane: policy archive"), ~100 bytes a copy at 100,000 runs."""
    rp.fidelity = texts.lines("fidelity", [texts.setdefault(t, t) for t in rp.fidelity])
    rp.fidelity_details = texts.lines("details", [texts.setdefault(t, t) for t in rp.fidelity_details])
    for a in rp.actions:
        a.reason = texts.setdefault(a.reason, a.reason)


def plan_run(run: RunFootprint, policy: Policy, rewrite=None, trace_after=None) -> RunPlan:
    """The actions ``policy`` takes on one run (no filesystem access but through ``rewrite`` and
    ``trace_after``, see ``make_plan``)."""
    rp = RunPlan(run=run.name, bytes_before=run.total_bytes, expected_after_bytes=run.total_bytes,
                 newest_mtime=run.newest_mtime)
    xprof = [s for s in run.sessions if s.kind == "xprof"]
    torch = [s for s in run.sessions if s.kind == "torch"]
    drop_sessions = set()
    drop_traces = set()
    if policy.keep_latest is not None:
        ordered = sorted(xprof, key=lambda s: (s.name, s.mtime))
        keep = ordered[len(ordered) - policy.keep_latest:] if policy.keep_latest else []
        drop_sessions = {s.path for s in ordered if s not in keep}
        by_worker: Dict[str, list] = {}
        for s in torch:
            by_worker.setdefault(s.hosts[0] if s.hosts else s.name, []).append(s)
        for items in by_worker.values():
            items.sort(key=lambda s: (s.mtime, s.name))
            kept = items[len(items) - policy.keep_latest:] if policy.keep_latest else []
            drop_traces |= {s.path for s in items if s not in kept}
    sessions_with_xplane = {s.path for s in xprof if s.hosts}
    linked = _sessions_holding_links(run, xprof)
    deleted_per_session: Dict[str, int] = {}
    existing = {f.path for f in run.files}
    lines: List[Line] = []
    kept_tool_outputs = 0

    for f in run.files:
        if f.kind != "file":
            continue  # event files are content-level; symlinks are never acted on
        c = _file_category(f)
        session = _session_of(f.path, run)
        if session in linked:
            continue  # kept whole, said by _fidelity
        action = policy.rule(c)
        reason = f"{cat.label(c)}: policy {policy.name}"
        if session and session in drop_sessions:
            action, reason = DELETE, f"older profile session (keep latest {policy.keep_latest})"
        elif c == cat.TORCH_TRACE and f.path in drop_traces:
            action, reason = DELETE, f"older PyTorch trace (keep latest {policy.keep_latest} per worker)"
        elif c in _DERIVED_FROM_XPLANE and action == DELETE and policy.secondary_only_with_xplane:
            if session not in sessions_with_xplane:
                action = "keep"  # without an xplane this file is the only copy of the profile
                if c == cat.PROFILE_TOOL_OUTPUTS:
                    kept_tool_outputs += 1
            else:
                reason = _DERIVED_FROM_XPLANE[c]
        elif c == cat.PROFILE_CACHE and action == DELETE:
            reason = "xprof cache: rebuilt from the xplane on the next view"
        if action == DELETE:
            rp.actions.append(Action("delete", f.path, c, f.size, 0, reason))
            if session:
                deleted_per_session[session] = deleted_per_session.get(session, 0) + 1
        elif c == cat.TORCH_TRACE and not f.path.endswith(".gz") and (
            policy.compress_torch or action == COMPRESS
        ):
            target = f.path + ".gz"
            if target in existing:
                lines.append(fit(f"torch traces: {os.path.basename(f.path)} kept (a .gz of it exists)"))
                continue
            after = int(f.size * TORCH_GZIP_RATIO_ESTIMATE)  # measured below unless a slim replaces it
            rp.actions.append(Action("compress", f.path, c, f.size, after,
                                     "gzip: the PyTorch profiler reads .pt.trace.json.gz the same",
                                     new_path=target, estimated=True))
    if policy.content:
        # Content-level rules (event-file rewriting, trace slimming) plan their own actions.
        content_actions, content_lines = plan_content(run, policy, rp.actions, rewrite, trace_after)
        if linked:  # a trace in a session kept whole is not slimmed either
            content_actions = [a for a in content_actions if _session_of(a.path, run) not in linked]
        rp.actions.extend(content_actions)
        lines.extend(content_lines)
    if trace_after is not None:
        _measure_compress(run, rp.actions, trace_after)
    # A session emptied of files is still listed by xprof: remove its directory too.
    removes_sessions = policy.rule(cat.PROFILE_XPLANE) == DELETE
    emptied = [s for s in xprof if s.path not in linked and (
               (s.files and deleted_per_session.get(s.path, 0) == s.files)
               or (not s.files and (removes_sessions or s.path in drop_sessions)))]
    # (a ``DirRemoval`` each, ~3 a run: half an ``Action``'s memory, the folders above a session
    # held as its path and how far up, no string each)
    for s in emptied:
        rp.actions.append(DirRemoval(s.path, cat.PROFILE_XPLANE, "emptied profile session"))
    if xprof and len(emptied) == len(xprof):
        # plugins/profile, then plugins: os.path.dirname of the session's path, once and twice
        rp.actions.append(DirRemoval(xprof[0].path, cat.PROFILE_XPLANE,
                                     "no sessions left (xprof would list an empty run)", up=1))
        rp.actions.append(DirRemoval(xprof[0].path, cat.PLUGIN_ASSETS, "only if empty", up=2))
    rp.expected_after_bytes = run.total_bytes - sum(a.bytes_before - a.bytes_after for a in rp.actions)
    _mark_links(run, rp)
    if kept_tool_outputs:
        lines.append(fit(f"profile tool outputs (old format): {kept_tool_outputs} kept, their session has no xplane",
                         "without an xplane.pb they are the session's only profile data: older "
                         "tensorboard-plugin-profile versions show their tools from these files (xprof 2.2x "
                         "reads only xplanes)"))
    lines = _fidelity(run, rp, emptied, xprof) + _linked_lines(run, linked) + lines
    rp.fidelity = [line for line, _ in lines]
    rp.fidelity_details = [detail for _, detail in lines]
    return rp


def _sessions_holding_links(run: RunFootprint, xprof) -> Dict[str, str]:
    """Each xprof session holding a symbolic link -> the first such link's path.

    Such a session is kept whole: a link is never followed (invariant 4), so what it points at is
    unknown, and it may be one of the session's own files (``host.xplane.pb -> vm.xplane.pb``).
    Deleting those would leave the user's link dangling in a folder xprof still lists, while the
    plan counted the session as kept."""
    linked: Dict[str, str] = {}
    if not xprof:
        return linked
    profile_dirs = {os.path.dirname(s.path) for s in xprof}
    for f in run.files:
        if f.kind == "symlink":
            session = _session_of(f.path, run)
            if session is not None:
                linked.setdefault(session, f.path)
            elif os.path.dirname(f.path) in profile_dirs:
                # beside the sessions (``latest -> <session>``): xprof lists it as a session and it
                # may lead to any of them, so every session of that folder is kept whole
                for s in xprof:
                    if os.path.dirname(s.path) == os.path.dirname(f.path):
                        linked.setdefault(s.path, f.path)
    return linked


def _linked_lines(run: RunFootprint, linked: Dict[str, str]) -> List[Line]:
    """The fidelity line naming the sessions kept whole for a link (in them, or beside them)."""
    if not linked:
        return []
    first = sorted(linked)[0]
    link = os.path.relpath(linked[first], os.path.dirname(first))
    links = len(set(linked.values()))
    more = f" and {links - 1} more" if links > 1 else ""
    return [fit(f"profile: {plural(len(linked), 'session')} kept whole for a symbolic link ({link}{more})",
                "a link is never followed, so what it points at is unknown and may be one of these "
                "sessions' files (a link beside the sessions, as xprof lists it, may lead to any of them): "
                "none of their files is removed. Remove or replace the link to let the policy reduce them.")]


def _measure_compress(run: RunFootprint, actions: List[Action], trace_after) -> None:
    """The exact size of each planned gzip: the transform's own writer into a counting sink
    (``trace_after``, cached per file); one it cannot measure now keeps the estimate, said so."""
    for a in actions:
        if a.kind == "compress":
            measured = trace_after(run, a.path, None)
            if measured is not None and "size" in measured:
                a.bytes_after, a.estimated = measured["size"], False


def _fidelity(run: RunFootprint, rp: RunPlan, emptied, xprof) -> List[Line]:
    lines: List[str] = []
    for name in (cat.SCALARS, cat.HPARAMS, cat.TEXT):
        c = run.categories.get(name)
        if c:
            lines.append(f"{name}: unchanged ({plural(c.records, 'record')} in {plural(len(c.tags), 'tag')}, "
                         "bit for bit)")
    rewritten = {a.path for a in rp.actions if a.kind == "rewrite"}
    event_cats = [c for c in run.categories.values()
                  if c.name not in cat.PROTECTED_PLUGINS and c.name not in cat.PROFILE_CATEGORIES
                  and c.records and c.name not in _BOOKKEEPING]
    if event_cats and not rewritten:
        names = ", ".join(sorted(cat.label(c.name) for c in event_cats))
        lines.append(f"event files: kept as is ({names} look exactly as before)")
    by_cat: Dict[str, List[Action]] = {}
    for a in rp.actions:
        by_cat.setdefault(a.category, []).append(a)
    if emptied:
        size = sum(s.bytes for s in emptied)
        kept = len(xprof) - len(emptied)
        lines.append(f"profile: {len(emptied)} session(s) removed ({human_bytes(size)}); {kept} kept")
    elif xprof:
        lines.append(f"profile: all {len(xprof)} session(s) kept, every tool still works")
    dels = [a for a in by_cat.get(cat.PROFILE_CACHE, []) if a.kind == "delete"]
    if dels and not emptied:
        lines.append(f"xprof caches: {len(dels)} file(s) removed, rebuilt on the next view")
    secs = [a for a in by_cat.get(cat.PROFILE_SECONDARY, []) if a.kind == "delete"]
    if secs and not emptied:
        lines.append(f"secondary traces: {len(secs)} removed (xprof reads only the xplane, .pb or .riegeli)")
    tools = [a for a in by_cat.get(cat.PROFILE_TOOL_OUTPUTS, []) if a.kind == "delete"]
    if tools and not emptied:
        lines.append(f"profile tool outputs (old format): {len(tools)} removed, every tool is rebuilt from the "
                     "session's xplane")
    torch = by_cat.get(cat.TORCH_TRACE, [])
    comp = [a for a in torch if a.kind == "compress"]
    gone = [a for a in torch if a.kind == "delete"]
    if comp:
        lines.append(f"torch traces: {len(comp)} compressed to .gz, content identical")
    if gone:
        lines.append(f"torch traces: {len(gone)} removed ({human_bytes(sum(a.bytes_before for a in gone))})")
    others = [a for a in rp.actions if a.kind == "delete" and a.category in
              (cat.PLUGIN_ASSETS, cat.CHECKPOINTS, cat.OTHER, cat.PROFILE_OTHER)]
    if others:
        lines.append(f"other files: {len(others)} removed ({human_bytes(sum(a.bytes_before for a in others))})")
    return [fit(line) for line in lines]
