"""Content-level planning: which event files to rewrite and which PyTorch traces to slim.

What exactly an event-file rewrite keeps is decided by the rewrite's own selection
(``event_rewrite.select_run``: restarts, metadata, reservoirs, graph repeats, corrupt files).
The planner cannot import it (layers), so the caller hands it in as ``rewrite`` (``api.plan``
passes ``event_rewrite.plan_rewrite``): one rule in one place, run at plan time, so the bytes
after are exact and a file the rewrite would leave byte-identical is not planned at all.
Without ``rewrite`` (a bucket logdir) the plan falls back to estimates from the scan's
per-category record counts, and says so (``Action.estimated``). A trace slim is planned the same
way: ``trace_after`` runs the slim's own writer into a counting sink (exact bytes, nothing
written); without it the size is estimated.

Fidelity lines are short (at most ``LINE_MAX`` characters, the loss first); what explains
them goes into a parallel list of details (``RunPlan.fidelity_details``).

``policy.content`` keys (all optional):

* ``downsample``: ``"default_view"`` (archive's default: exactly the records the default
  dashboard shows of histograms, images, audio, pr_curves and every other tensor/blob plugin;
  with ``--load_fast=false`` a tag's first step may be gone); ``"dashboard_exact"`` (also
  keeps each tag's first step for the Python reader, which keeps long tags of fewer than
  ~10,000 records whole); or ``{plugin: "dashboard_exact" | "default_view" | "keep", "*": default}``;
* ``keep_per_tag``: ``{plugin: N}`` per-tag caps (overrides ``downsample`` for the plugin);
* ``strip_run_metadata`` (opt-in, not in any built-in policy): drop ``tagged_run_metadata`` /
  ``graph_run_metadata`` records: their tags leave the Graphs dashboard;
* ``dedupe_graphs``: drop byte-identical repeated ``graph_def`` / ``meta_graph_def`` records;
* ``strip_large_graph_attrs``: drop the attribute values the graphs route lists as too large
  to show (over 1 KB: embedded constants) from stored ``graph_def`` records and from the graph
  a ``meta_graph_def`` record embeds;
* ``trace``: ``{"whitespace", "drop_python_function", "drop_memory", "keep_steps",
  "min_dur_us"}`` for the PyTorch traces a policy keeps (see ``trace_slim``).

Why one module: event files, traces and profile sessions are planned with
the same policy keys and said in one vocabulary of fidelity lines (``LINE_MAX``, the loss first,
details beside); one module keeps what a plan promises worded one way for every content kind.
"""
from __future__ import annotations

import math
import os
from typing import Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import TagKeep
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.plan.model import Action
from tb_footprint_plugin.plan.rules import (DASHBOARD_EXACT, DEFAULT_VIEW, LARGE_ATTRS_KEY, LIMIT_ATTR_SIZE,
                                            PYTHON_CAPACITY, Rules, TraceOptions)

#: Rust data server reservoir per plugin for the estimate (blob sequences keep 10).
_BLOB_PLUGINS = frozenset({cat.IMAGES, cat.AUDIO})
#: Records a dashboard-exact tag keeps when the default reader did not retain its first
#: record (measured with data server 0.7.2): a 10-item reservoir needs 11; a 100-item one
#: ~213-221, and only for series of about 10,000 records or more (shorter ones are kept in
#: full). Estimates: the rewrite asks the server itself.
_EXACT_KEEP_ESTIMATE = {10: 11, 100: 221}
_EXACT_MIN_RECORDS = {10: 11, 100: 10000}
#: the planner's gzip ratio estimate for kineto JSON (an upper bound; slimming only removes more),
#: used only where the plan cannot run the slim itself (``trace_after``: a bucket logdir)
_GZIP_RATIO = 0.08
_RUN_METADATA_CATEGORIES = (cat.TAGGED_RUN_METADATA, "graph_run_metadata")
_GRAPH_CATEGORIES = (cat.GRAPH_DEF, cat.META_GRAPH_DEF)
#: Estimate of a graph record after its large attribute values are dropped (the rewrite
#: knows; the scan only has the bytes): graphs averaging more than this are assumed to be
#: mostly embedded constants.
_GRAPH_STRIPPED_ESTIMATE = 64 * 1024
#: Tags named per plugin in the --load_fast=false line of the plan.
_TAGS_NAMED = 8
#: Longest fidelity line; the rest of what a line says goes into its detail.
LINE_MAX = 120
#: Selection categories (``event_rewrite`` codes) that the scan names otherwise.
_SCAN_CATEGORY = {"graph_tagged_run_metadata": cat.TAGGED_RUN_METADATA}
#: Plugins the Rust data server keeps as tensors (a 100-point reservoir per tag).
_TENSOR_PLUGINS = frozenset({cat.HISTOGRAMS, cat.PR_CURVES})
#: Non-summary record categories: never downsampled.
_FIXED = frozenset({cat.FILE_VERSION, cat.SESSION_LOG, cat.EVENTS_OTHER, cat.EVENTS_CORRUPT,
                    cat.EVENTS_INCOMPLETE, cat.GRAPH_DEF, cat.META_GRAPH_DEF, cat.TAGGED_RUN_METADATA,
                    cat.OTHER})


def _rust_capacity(plugin: str) -> int:
    return 10 if plugin in _BLOB_PLUGINS else 100


def _kept_per_tag(plugin: str, mode, per_tag: float) -> float:
    if isinstance(mode, int):
        return min(per_tag, mode + 1)  # +1: a later metadata carrier, rarely
    cap = _rust_capacity(plugin)
    if per_tag <= cap:
        return per_tag
    if mode == DEFAULT_VIEW:
        return cap + 1
    if per_tag < _EXACT_MIN_RECORDS.get(cap, 100 * cap):
        return per_tag
    return min(per_tag, _EXACT_KEEP_ESTIMATE.get(cap, 2.2 * cap))


def _tail_offset(f, category: str) -> Optional[int]:
    b = f.categories.get(category)
    return f.size - b if b else None


Line = Tuple[str, str]  # (fidelity line, its detail or "")


def fit(line: str, detail: str = "") -> Line:
    """A fidelity line of at most ``LINE_MAX`` characters; what does not fit leads its detail."""
    if len(line) <= LINE_MAX:
        return line, detail
    return line[:LINE_MAX - 1].rstrip() + "…", (line + (" " + detail if detail else ""))


def plan_content(run, policy, file_actions, rewrite=None, trace_after=None) -> Tuple[list, List[Line]]:
    """Rewrite actions and fidelity lines (with their details) for ``policy.content`` on one run.

    ``file_actions`` is the run's list of file-level actions; a ``compress`` action of a trace
    that is slimmed instead is removed from it (the slim writes the ``.gz`` itself).
    ``rewrite(run, rules, file_names)``: the rewrite's own selection (see the module), or None;
    ``trace_after(run, path, options)``: the slim's exact output size (``planner.make_plan``), or None.
    """
    content = dict(policy.content or {})
    rules = Rules.from_content(content)
    lines: List[Line] = []
    actions = None
    if rewrite is not None and rules.active:
        actions = _exact_event_actions(run, rules, lines, rewrite)
    if actions is None:
        actions = _event_actions(run, rules, lines)
    trace_opts = content.get("trace")
    if trace_opts:
        opts = TraceOptions.from_dict(trace_opts if isinstance(trace_opts, dict) else {})
        actions += _trace_actions(run, opts, file_actions, lines, trace_after)
    if content:
        lines += _xprof_lines(run, file_actions)
    return actions, lines


def _event_candidates(run, rules: Rules, per_tag: Dict[str, float], lines: List[str]) -> list:
    """``(file, estimate)`` of each event file the rules would change; a file that is corrupt,
    still being appended to or unreadable is kept as is (said in ``lines``)."""
    candidates = []
    for f in run.files:
        if f.kind != "event":
            continue
        base = os.path.basename(f.path)
        if not _eligible(f, rules, lines):
            continue
        est = _estimate_file(f, run, rules, per_tag)
        if est is not None:
            candidates.append((f, est))
    return candidates


def _eligible(f, rules: Rules, lines: List[Line]) -> bool:
    """May event file ``f`` be rewritten at all? A corrupt, still appended or unreadable one
    is kept as is (said in ``lines`` when rules would otherwise touch it)."""
    base = os.path.basename(f.path)
    off = _tail_offset(f, cat.EVENTS_CORRUPT)
    if off is not None:
        if rules.active:
            lines.append(fit(f"{base}: kept as is (corrupt at offset {off})",
                             "a file with a bad CRC is never rewritten"))
        return False
    off = _tail_offset(f, cat.EVENTS_INCOMPLETE)
    if off is not None:
        if rules.active:
            lines.append(fit(f"{base}: kept as is (incomplete at offset {off})",
                             "its final record is incomplete: a writer may still be appending"))
        return False
    if set(f.categories) == {cat.OTHER}:
        if rules.active:
            lines.append(fit(f"{base}: kept as is (unreadable)"))
        return False
    return True


def _may_change(run, rules: Rules) -> bool:
    """Could the rules drop or re-encode anything in this run? Decided from the scan's counts,
    to spare the selection's pass (and its Rust data-server load) over runs where nothing
    qualifies; where something may, the selection decides.

    A tag is reduced only beyond its cap: ``keep_per_tag`` N, or the Rust server's reservoir
    (which keeps every point of a tag that has no more than it holds). The reservoir is 100 for
    the tensor plugins known here and taken as 10 (the blob-sequence size) for any other plugin,
    whose data class the scan does not know; without per-tag counts (a footprint of an older
    version), the category's records stand in."""
    for name, st in run.categories.items():
        if not st.records:
            continue
        if rules.strip_run_metadata and name in _RUN_METADATA_CATEGORIES:
            return True
        if rules.strip_large_graph_attrs and name in _GRAPH_CATEGORIES and st.bytes > LIMIT_ATTR_SIZE:
            return True
        if rules.dedupe_graphs and name in _GRAPH_CATEGORIES and st.records > 1:
            return True
        mode = None if name in _FIXED else rules.mode(name)
        if mode is None:
            continue
        floor = mode if isinstance(mode, int) else (100 if name in _TENSOR_PLUGINS else 10)
        if (st.max_tag_records or st.records) > floor:
            return True
    return False


def _exact_event_actions(run, rules: Rules, lines: List[Line], rewrite) -> Optional[list]:
    """The rewrite actions the rewrite's own selection makes (exact bytes), or None when it could
    not be made (the estimate stands in)."""
    files = {os.path.basename(f.path): f for f in run.files if f.kind == "event"}
    eligible = [n for n, f in sorted(files.items()) if _eligible(f, rules, lines)]
    if not eligible or not _may_change(run, rules):
        return []
    outcome = rewrite(run, rules, eligible)
    if outcome is None:
        return None
    actions = []
    for name in outcome.rewritten:
        f, fo = files[name], outcome.files[name]
        per_cat = {c: [b, b] for c, b in f.categories.items()}
        for label, (_, b) in fo.removed.items():
            per_cat.setdefault(_SCAN_CATEGORY.get(label, label), [0, 0])[1] -= b
        for label, delta in fo.resized.items():
            per_cat.setdefault(_SCAN_CATEGORY.get(label, label), [0, 0])[1] += delta
        drops = {c: v[0] - v[1] for c, v in per_cat.items() if v[0] != v[1]}
        main = max(drops, key=lambda c: drops[c]) if drops else next(iter(f.categories), cat.OTHER)
        actions.append(Action("rewrite", f.path, main, f.size, fo.size_after,
                              "rewrite records: " + "; ".join(_what_exact(fo)), estimated=False,
                              params={"transform": "event_rewrite", "rules": rules.to_params(),
                                      "run_files": list(outcome.rewritten)},
                              categories=per_cat))
    lines.extend(_exact_fidelity(run, rules, outcome))
    return actions


def _what_exact(fo) -> List[str]:
    what = []
    for label, (n, b) in sorted(fo.removed.items(), key=lambda kv: -kv[1][1]):
        what.append(f"{cat.label(_SCAN_CATEGORY.get(label, label))}: {n} record(s) dropped ({human_bytes(b)})")
    if fo.substituted:
        what.append(f"{fo.substituted} record(s) re-encoded (same step, wall time and values)")
    return what


def _exact_fidelity(run, rules: Rules, outcome) -> List[Line]:
    """Fidelity lines from what the selection decided, per plugin and per rule."""
    lines: List[Line] = []
    removed: Dict[str, List[int]] = {}
    resized: Dict[str, int] = {}
    for fo in outcome.files.values():
        for label, (n, b) in fo.removed.items():
            r = removed.setdefault(label, [0, 0])
            r[0] += n
            r[1] += b
        for label, d in fo.resized.items():
            resized[label] = resized.get(label, 0) + d
    by_plugin: Dict[str, List[Tuple[str, dict]]] = {}
    for tag, r in outcome.tags.items():
        by_plugin.setdefault(r["plugin"], []).append((tag, r))
    for plugin, items in sorted(by_plugin.items()):
        label = cat.label(plugin) + (" (and distributions)" if plugin == cat.HISTOGRAMS else "")
        records = sum(r["records"] for _, r in items)
        kept = sum(r["kept"] for _, r in items)
        reduced = [(t, r) for t, r in items if r["kept"] < r["records"]]
        whole = [(t, r) for t, r in items if r["kept"] == r["records"] and _pinned(r)]
        mode = rules.mode(plugin)
        if reduced:
            cap = _rust_capacity(plugin)
            if isinstance(mode, int):
                how, detail = (f"at most {mode} records per tag",
                               "evenly spaced by step, first and last kept; every reader and setting shows a "
                               "subset of the original")
            elif mode == DASHBOARD_EXACT:
                how = "the default dashboard's view"
                detail = (f"TensorBoard's Rust data server (--load_fast=auto) shows exactly the same {cap} points "
                          "per tag as before; a few extra records keep each tag's first step without changing "
                          f"that view. With --load_fast=false (Python reader) or --samples_per_plugin above {cap}, "
                          "you see the kept records instead: a subset of the original with the first and last "
                          "step of every tag.")
            else:
                how = "the default dashboard's view"
                detail = (f"TensorBoard's Rust data server (--load_fast=auto) shows exactly the same {cap} points "
                          f"per tag as before ({len(reduced)} of {len(items)} tag(s) reduced). Where a tag's "
                          "summary metadata is only on a record the default dashboard does not show (TF2 writers "
                          "put it on the first), it is copied onto the first kept record: that record's step, "
                          "wall time and value are unchanged, only its bytes.")
            head = f"{label}: {kept:,} of {records:,} records kept ({how})"  # the loss first, then the rule
            lines.append(fit(head, detail))
            relaxed = [(t, r) for t, r in reduced if r.get("how") == TagKeep.DEFAULT_VIEW]
            if relaxed:
                lines.append(_python_view(cat.label(plugin), cap, relaxed))
        for why in sorted({r["why"] for _, r in whole}):
            tags = sorted(t for t, r in whole if r["why"] == why)
            lines.append(fit(f"{label}: {len(tags)} tag(s) kept in full: {why}",
                             "tags: " + _names(tags)))
    rm = [removed[c] for c in _RUN_METADATA_CATEGORIES + ("graph_tagged_run_metadata",) if c in removed]
    if rm:
        n = sum(r[0] for r in rm)
        tags = sorted({t for c in _RUN_METADATA_CATEGORIES if c in run.categories for t in run.categories[c].tags})
        lines.append(fit(f"run metadata: {n} step-stats record(s) removed; their tags leave the Graphs dashboard",
                         f"opt-in strip_run_metadata: the Graphs dashboard no longer lists {_names(tags)} and "
                         "loses their per-step compute time and memory (the Profile view); op graphs and the "
                         "run graph are kept"))
    graphs = [removed[c] for c in _GRAPH_CATEGORIES if c in removed]
    if graphs:
        n = sum(r[0] for r in graphs)
        total = sum(run.categories[c].records for c in _GRAPH_CATEGORIES if c in run.categories)
        lines.append(fit(f"graphs: {n} of {total} graph records dropped (byte-identical repeats)",
                         "the copies TensorBoard displays are kept, so the run graph reads identically"))
    if any(resized.get(c, 0) < 0 for c in _GRAPH_CATEGORIES):
        lines.append(_graph_attrs_line())
    if outcome.rewritten:
        lines.append(_event_files_line(rules))
    return lines


def _pinned(r: dict) -> bool:
    return r.get("how") == TagKeep.PINNED


def _python_view(label: str, cap: int, relaxed) -> Line:
    """What ``--load_fast=false`` users see of the tags reduced to exactly the default view."""
    head = f"{label}, --load_fast=false: the same {cap} points as the default dashboard ("
    shown: List[str] = []
    for t, _ in sorted(relaxed):
        more = len(relaxed) - len(shown) - 1
        tail = f", … {more} more)" if more else ")"
        if len(head) + len(", ".join(shown + [t])) + len(tail) > LINE_MAX:
            break
        shown.append(t)
    rest = len(relaxed) - len(shown)
    line = head + ", ".join(shown) + (f", … {rest} more)" if rest else ")")
    steps = "; ".join(f"{t}: {r['kept']} of {r['records']} kept, steps {r.get('kept_first_step')}–"
                      f"{r.get('kept_last_step')}" for t, r in sorted(relaxed)[:_TAGS_NAMED])
    return fit(line, "TensorBoard's Python reader then shows the default dashboard's points instead of up to its "
               "own per-tag limit; a tag's first step may be gone, the last is kept. " + steps)


def _graph_attrs_line() -> Line:
    return fit(f"graphs: attribute values over {LIMIT_ATTR_SIZE} B dropped (\"Too large to show\"); "
               "raw GraphDef copy in the vault",
               f"embedded constants are dropped from every stored copy of the graph (the GraphDef, and the "
               f"copy a MetaGraphDef embeds, which neither backend shows; its other fields are kept) and listed under "
               f"{LARGE_ATTRS_KEY}, exactly as TensorBoard's graphs route does for "
               f"limit_attr_size={LIMIT_ATTR_SIZE}: that route returns the identical graph and the Graphs dashboard "
               "draws the same nodes and edges; a node's info card lists those attributes as \"Too large to "
               "show...\" (TensorBoard 2.21's op-graph view asks without the limit). Programs reading the raw "
               "GraphDef from the event file lose the constants; the vault keeps the original until purge.")


def _event_files_line(rules: Rules) -> Line:
    graphs = "" if rules.strip_run_metadata else "; every graph and run-metadata tag stays listed"
    return fit("event files: kept records copied byte for byte, in order, same names; scalars, hparams, text all kept",
               "except a record that receives its tag's metadata or a graph that loses its large attribute "
               "values (re-encoded, same step, wall time and values); file_version and session_log records "
               "are all kept" + graphs + "; a tag with restarts (steps going backwards) or sharing records "
               "with another tag is kept in full")


def _event_actions(run, rules: Rules, lines: List[Line]) -> list:
    """One ``event_rewrite`` action per event file the rules change, and their fidelity lines."""
    per_tag: Dict[str, float] = {}
    for name, st in run.categories.items():
        if st.records and st.tags:
            per_tag[name] = st.records / len(st.tags)
    candidates = _event_candidates(run, rules, per_tag, lines)
    run_files = [os.path.basename(f.path) for f, _ in candidates]
    actions = [Action("rewrite", f.path, main_cat, f.size, after, "rewrite records: " + "; ".join(what),
                      estimated=True,
                      params={"transform": "event_rewrite", "rules": rules.to_params(), "run_files": run_files},
                      categories=per_cat)
               for f, (after, main_cat, what, per_cat) in candidates]
    if rules.active:
        lines.extend(_event_fidelity(run, rules, per_tag, candidates))
    return actions


def _trace_actions(run, opts: TraceOptions, file_actions, lines: List[Line], trace_after=None) -> list:
    """One ``trace_slim`` action per PyTorch trace the policy keeps; each replaces that trace's
    ``compress`` action in ``file_actions`` (the slim writes the ``.gz`` itself). With
    ``trace_after`` the bytes after are the slim's own (exact); a trace it cannot read, or whose
    slim would give back its own bytes or no fewer, is kept as is (said in ``lines``)."""
    deleted = {a.path for a in file_actions if a.kind == "delete"}
    existing = {f.path for f in run.files}
    actions, slimmed = [], []
    for f in run.files:
        if f.kind != "file" or cat.TORCH_TRACE not in f.categories or f.path in deleted:
            continue
        gz = f.path.endswith(".gz")
        base = os.path.basename(f.path)
        target = f.path if gz else f.path + ".gz"
        if not gz and target in existing:
            lines.append(fit(f"torch traces: {base} kept (a .gz of it exists)"))
            continue
        measured = trace_after(run, f.path, opts.to_dict()) if trace_after is not None else None
        if measured is not None and "error" in measured:
            lines.append(fit(f"torch traces: {base} not slimmed (not a trace the slim can read)", measured["error"]))
            continue  # a plain trace's gzip (a compress action), if the policy has one, stands
        if measured is not None and (measured["same"] or (gz and measured["size"] >= f.size)):
            if not measured["same"]:
                lines.append(fit(f"torch traces: {base} kept as is (slimming would not make it smaller)"))
            continue  # already slimmed under these options: a rewrite to the same bytes never happens
        file_actions[:] = [a for a in file_actions
                           if not (a.kind == "compress" and a.path == f.path)]
        exact = measured is not None
        after = measured["size"] if exact else (f.size if gz else int(f.size * _GZIP_RATIO))
        actions.append(Action(
            "rewrite", f.path, cat.TORCH_TRACE, f.size, after,
            "slim trace: " + ", ".join(opts.describe() or ["re-encoded"]) + "; gzip",
            new_path=None if gz else target, estimated=not exact,
            params={"transform": "trace_slim", "trace": opts.to_dict()},
        ))
        slimmed.append(f)
    if slimmed:
        lines.append(_trace_fidelity(opts, slimmed))  # (line, detail)
    return actions


def _xprof_lines(run, file_actions) -> List[Line]:
    """What a content policy says of the xprof files it keeps (never trimmed)."""
    deleted = {a.path for a in file_actions if a.kind == "delete"}
    kept = [f for f in run.files if cat.PROFILE_XPLANE in f.categories and f.path not in deleted]
    if not kept:
        return []
    return [fit(f"profile: {len(kept)} xplane file(s) kept as is",
                ".xplane.pb / .xplane.riegeli: xplane trimming is not proven safe with the profile plugin")]


def _estimate_file(f, run, rules: Rules, per_tag: Dict[str, float]):
    """(bytes after, main category, reasons, {category: [before, after]}) for one event file, or
    None if nothing changes."""
    after = 0.0
    reduced: Dict[str, float] = {}
    what: List[str] = []
    graphs_maybe = False
    for c, b in f.categories.items():
        if rules.strip_run_metadata and c in _RUN_METADATA_CATEGORIES:
            reduced[c] = b
            continue
        if rules.strip_large_graph_attrs and c in _GRAPH_CATEGORIES:
            st = run.categories.get(c)
            n = st.records if st is not None and st.records else 1
            if b / n > _GRAPH_STRIPPED_ESTIMATE:
                reduced[c] = b - n * _GRAPH_STRIPPED_ESTIMATE
                after += n * _GRAPH_STRIPPED_ESTIMATE
                continue
        if rules.dedupe_graphs and c in _GRAPH_CATEGORIES:
            st = run.categories.get(c)
            if st is not None and st.records > 2:
                graphs_maybe = True  # only byte-identical repeats go: unknown until read
            after += b
            continue
        mode = None if c in _FIXED else rules.mode(c)
        if mode is not None and c in per_tag:
            kept = _kept_per_tag(c, mode, per_tag[c])
            frac = kept / per_tag[c]
            if frac < 1:
                after += b * frac
                reduced[c] = b * (1 - frac)
                continue
        after += b
    if not reduced and not graphs_maybe:
        return None
    for c in sorted(reduced, key=lambda c: -reduced[c]):
        mode = rules.mode(c)
        if c in _RUN_METADATA_CATEGORIES:
            what.append(f"{cat.label(c)} removed")
        elif c in _GRAPH_CATEGORIES:
            what.append(f"graph attribute values over {LIMIT_ATTR_SIZE} bytes dropped")
        elif mode in (DASHBOARD_EXACT, DEFAULT_VIEW):
            what.append(f"{cat.label(c)}: keep what the default dashboard shows")
        else:
            what.append(f"{cat.label(c)}: at most {mode} per tag")
    if graphs_maybe:
        what.append("byte-identical repeated graphs dropped")
    main = max(reduced, key=lambda c: reduced[c]) if reduced else cat.GRAPH_DEF
    per_cat = {c: [int(b), int(math.ceil(b - reduced.get(c, 0.0)))] for c, b in f.categories.items()}
    return int(math.ceil(after)), main, what, per_cat


def _event_fidelity(run, rules: Rules, per_tag: Dict[str, float], candidates) -> List[Line]:
    """The estimated rewrite's fidelity lines (a plan without the rewrite's own selection, as on
    a bucket): the loss first and short, what explains it in the detail."""
    lines: List[Line] = []
    touched = set()
    for f in run.files:
        if f.kind == "event":
            touched |= set(f.categories)
    for c in sorted(touched):
        st = run.categories.get(c)
        mode = None if c in _FIXED else rules.mode(c)
        if mode is None or st is None or c not in per_tag:
            continue
        n = per_tag[c]
        kept = _kept_per_tag(c, mode, n)
        label = cat.label(c) + (" (and distributions)" if c == cat.HISTOGRAMS else "")
        total = int(round(kept * len(st.tags)))
        if kept >= n:
            cap = _rust_capacity(c)
            if mode == DASHBOARD_EXACT and n > cap:
                lines.append(fit(
                    f"{label}: kept as is (≈{int(n):,} records per tag)",
                    f"TensorBoard's default reader shows {cap} of them but not the first step, and keeping that "
                    f"step without changing what it shows needs ≥ ~{_EXACT_MIN_RECORDS.get(cap, 100 * cap)} "
                    "records per tag; keep_per_tag gives a fixed cap instead"))
            continue
        head = f"{label}: ≈{total:,} of {st.records:,} records kept"
        if mode == DEFAULT_VIEW:
            cap = _rust_capacity(c)
            lines.append(fit(
                f"{head} (the default dashboard's view)",
                f"the default dashboard (TensorBoard's Rust data server, --load_fast=auto) shows exactly the same "
                f"{cap} points per tag as before. Where a tag's summary metadata is only on a record the default "
                "dashboard does not show (TF2 writers put it on the first), it is copied onto the first kept "
                "record: that record's step, wall time and value are unchanged, only its bytes."))
            lines.append(_python_view_line(c, st, n, cap))
            continue
        if mode == DASHBOARD_EXACT:
            cap = _rust_capacity(c)
            py = PYTHON_CAPACITY.get(c, 10)
            lines.append(fit(
                f"{head} (the default dashboard's view)",
                f"the default dashboard (TensorBoard's Rust data server, --load_fast=auto) shows exactly the same "
                f"{cap} points per tag as before ({len(st.tags)} tags; a few extra records keep each tag's first "
                f"step without changing that view). With --load_fast=false (Python reader, up to {py} per tag) "
                f"or --samples_per_plugin {c}=N above {cap}, you see the kept records instead: a subset of the "
                "original with the first and last step of every tag."))
        else:
            lines.append(fit(f"{head} (at most {mode} per tag)",
                             "evenly spaced by step, first and last kept; every reader and setting shows a subset "
                             "of the original."))
    if rules.strip_run_metadata and candidates:
        n = sum(run.categories[c].records for c in _RUN_METADATA_CATEGORIES if c in run.categories)
        if n:
            tags = sorted({t for c in _RUN_METADATA_CATEGORIES if c in run.categories
                           for t in run.categories[c].tags})
            lines.append(fit(
                f"run metadata: {n} step-stats record(s) removed; their tags leave the Graphs dashboard",
                "opt-in strip_run_metadata (tagged_run_metadata / graph_run_metadata): the Graphs dashboard no "
                f"longer lists {_names(tags)} and loses their per-step compute time and memory (the Profile "
                "view); op graphs and the run graph are kept"))
    if rules.strip_large_graph_attrs and candidates:
        st = run.categories.get(cat.GRAPH_DEF)
        if st is not None and st.records and st.bytes / st.records > _GRAPH_STRIPPED_ESTIMATE:
            lines.append(fit(
                f"graphs: attribute values over {LIMIT_ATTR_SIZE} B dropped (embedded constants)",
                f"dropped from the stored graph and listed under {LARGE_ATTRS_KEY}, exactly as TensorBoard's "
                f"graphs route does for limit_attr_size={LIMIT_ATTR_SIZE}: that route returns the "
                "identical graph and the Graphs dashboard draws the same nodes and edges; a node's info "
                "card lists those attributes as \"Too large to show...\" instead of printing their values "
                "(TensorBoard 2.21's op-graph view asks without the limit). Programs reading the raw "
                "GraphDef from the event file lose the constants; the vault keeps the original until purge."))
    if rules.dedupe_graphs and candidates:
        n = sum(run.categories[c].records for c in _GRAPH_CATEGORIES if c in run.categories)
        if n > 2:
            # estimated: whether the records are byte-identical is known only once they are read
            lines.append(fit(f"graphs: byte-identical repeats, if any, among {n} graph records dropped",
                             "the copies TensorBoard displays are kept, so the run graph reads identically"))
    if candidates:
        graphs = "" if rules.strip_run_metadata else "; every graph and run-metadata tag stays listed"
        lines.append(fit(
            "event files: kept records copied byte for byte, in order, same names; scalars, hparams, text all kept",
            "except a record that receives its tag's metadata or a graph that loses its large attribute values "
            "(re-encoded, same step, wall time and values); file_version and session_log records are kept"
            + graphs + "; a tag with restarts (steps going backwards) or sharing records with another tag is "
            "kept in full"))
    return lines


def _names(tags: List[str]) -> str:
    shown = ", ".join(tags[:_TAGS_NAMED])
    more = len(tags) - _TAGS_NAMED
    return (shown + (f" and {more} more" if more > 0 else "")) or "their tags"


def _python_view_line(c: str, st, per_tag: float, cap: int) -> Line:
    """What ``--load_fast=false`` users see of a plugin reduced to the default view, per tag."""
    steps = ""
    if st.min_step is not None and st.max_step is not None:
        steps = (f"; the last step ({st.max_step} for the latest tag) is kept, the first "
                 f"({st.min_step} for the earliest) only where the default dashboard shows it")
    return fit(f"{cat.label(c)}, --load_fast=false: the same ≤{cap} points as the default dashboard",
               f"TensorBoard's Python reader: {_names(st.tags)}: each shows the same ≤{cap} points as the default "
               f"dashboard instead of up to {min(int(per_tag), PYTHON_CAPACITY.get(c, 10))} of its ≈{int(per_tag)} "
               f"records{steps}. The reduction lists, per tag, the points and steps kept.")


def _trace_fidelity(opts, slimmed) -> Line:
    size = sum(f.size for f in slimmed)
    what = opts.describe() or ["re-encoded"]
    effects, short = [], []
    if opts.drop_python_function:
        effects.append("the trace view loses Python stack frames")
        short.append("no Python frames")
    if opts.drop_memory:
        effects.append("the PyTorch profiler's Memory view becomes empty")
        short.append("Memory view becomes empty")
    if opts.keep_steps is not None:
        effects.append(f"the overview and operator views cover the first {opts.keep_steps} step(s) only")
        short.append(f"first {opts.keep_steps} step(s) only")
    if opts.min_dur_us is not None:
        effects.append(f"events shorter than {opts.min_dur_us:g} µs disappear from every view")
        short.append(f"events < {opts.min_dur_us:g} µs gone")
    loss = "; ".join(short) if short else "every event kept, identical"
    return fit(f"torch traces: {len(slimmed)} slimmed and gzip'd ({human_bytes(size)}): {loss}",
               ", ".join(what) + "; every kept event is identical to the original"
               + ("; " + "; ".join(effects) if effects else ""))


__all__ = ["LINE_MAX", "fit", "plan_content"]
