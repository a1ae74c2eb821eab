"""The dashboard layer of verification: TensorBoard's routes, per backend, at a flat cost.

What is run depends on the size of the original's event data (``full_read_bytes``):

* **small runs** (the common case) — both sides are loaded by both backends keeping every
  point: the reader-level comparison of ``compare`` (every point, bit for bit) runs on these
  readers, and TensorBoard's own WSGI app is crawled over the same readers (histogram series
  compared where their routes read them, as for big runs below);
* **big runs** — the legacy Python loader (~4.5 MB/s) is never run over the original, and no
  reader keeps every point (memory would follow the file):

  - Rust (the default backend): both sides loaded with the dashboard's own sampling (the servers
    start before the record passes and load meanwhile), TensorBoard's app crawled over both and
    compared route by route: the default view. The histogram series behind the histograms,
    distributions and time-series routes are compared where those routes read them, the data
    provider (``routes._heavy_histograms``): rendering hundreds of histograms as JSON on both
    sides was most of the crawl's cost and proves nothing more;
  - records: every tag's record count and bytes from the streaming index of both sides
    (``eventfile.event_file_stats``); with the record-subsequence check this proves that every
    record of an "identical" tag is still there, byte for byte;
  - Python (``--load_fast=false``): the reduced run (small after a reduction) is loaded and
    checked against the original's index: the same tags per plugin, every point for
    "identical" tags, and the first/last steps each contract keeps. That loader costs ~0.05-0.3
    ms per record: in a reduce it reads a small input (``pyside.IN_PROCESS_BYTES``, a thinned
    copy mostly) on a thread of the engine's process, where TensorBoard is imported already,
    and anything bigger in its own interpreter (``pyside``, started with the reduce for a run
    over ``original.EARLY_CHILD_BYTES``), so it overlaps the rest instead of adding to it.
    Should the reduced run itself be too big for that loader, the line says so and the
    record-level proof stands.

Every line names the route (or tag) and the first difference.
"""
from __future__ import annotations

import concurrent.futures
import os
from typing import Iterable, Optional

from tb_footprint_plugin.formats import views
from tb_footprint_plugin.verify import routes
from tb_footprint_plugin.verify.readers import Reader
from tb_footprint_plugin.verify.stop import NEVER, Stop, Stopped

#: Original event data up to this size is read in full by both backends (every point). Above it
#: the big-run path is the cheaper one: measured with bench/verify.py on a histogram/image run,
#: the full read costs ~0.9 s a MB (both backends keep every point, the Python loader reads the
#: original at ~4.5 MB/s: a 20 MB run took 9.9 s and 297 MB where 100 MB took 1.9 s), the
#: big-run path ~1 s fixed plus ~0.01 s a MB; they cross between 0.3 and 1 MB.
FULL_READ_BYTES = 1024 * 1024
#: The Python loader reads ~4.5 MB/s: it reads a big run's reduced side only up to this.
PYTHON_REDUCED_BYTES = 64 * 1024 * 1024
#: Non-summary record kinds of the index -> the data plugin TensorBoard serves them under.
FIXED_PLUGIN = {
    "graph_def": "graphs",
    "meta_graph_def": "graphs",
    "tagged_run_metadata": "graph_tagged_run_metadata",
}
#: Route differences listed per line before "+N more".
SHOWN_DIFFS = 3


def event_bytes(run_dir: str) -> int:
    """Bytes of the event files directly in ``run_dir`` (what a reader would load)."""
    from tb_footprint_plugin.verify.records import event_file_names

    total = 0
    for n in event_file_names(run_dir):
        try:
            total += os.stat(os.path.join(run_dir, n)).st_size
        except OSError:
            pass
    return total


def open_pair(original_dir: str, reduced_dir: str, backend: str, hints: Optional[dict], *,
              store_all: bool, timeout_s: float, sides: Iterable[str] = ("before", "after"),
              stop: Stop = NEVER) -> dict:
    """``{"before": Reader, "after": Reader}`` opened (Rust servers load side by side); a
    ``stop`` ends their loads (``Reader.abort``)."""
    dirs = {"before": original_dir, "after": reduced_dir}
    readers = {s: Reader(dirs[s], backend, hints, store_all=store_all, timeout_s=timeout_s,
                         stop=stop)
               for s in sides}
    if backend == "rust" and len(readers) > 1:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(readers)) as pool:
            list(pool.map(lambda r: r.open(), readers.values()))
    else:
        for r in readers.values():
            r.open()
    return readers


def route_contract(exp, backend: str):
    """``plugin -> (exact, keep_first, keep_last, removable)`` for routes, from ``exp``."""
    from tb_footprint_plugin.verify import contract as c

    def contract(plugin: str) -> tuple:
        modes = [exp.mode_for(p) for p in plugin.split("|")]
        # served from either plugin: removable when the contract removes one of them
        mode = c.REMOVED if c.REMOVED in modes else modes[0]
        return (
            c.exact_on(mode, backend),
            mode in (c.SUBSET, c.DEFAULT_VIEW_IDENTICAL),
            mode != c.REMOVED,
            mode == c.REMOVED,
        )

    return contract


def route_check(backend: str, before: Reader, after: Reader, exp, label: str = "",
                heavy_via_provider: bool = True, stop: Stop = NEVER):
    """Crawl TensorBoard's app over both readers; one ``Check`` naming route and difference.

    ``heavy_via_provider`` (every reduce): the histogram series behind the histograms,
    distributions and time-series routes are compared where those routes read them, the
    readers' data providers (``routes._heavy_histograms``); every listing still goes through
    the routes. Off, those routes are rendered as JSON on both sides as well. ``stop``: the
    crawl ends at its next response (``Stopped``)."""
    from tb_footprint_plugin.verify.contract import Check

    name = f"routes ({backend}{label})"
    if before.view.fatal or after.view.fatal or not before.provider or not after.provider:
        return Check("routes", False, f"{name}: not crawled, a reader failed")
    try:
        from tb_footprint_plugin.verify.contract import GRAPH_ROUTE_IDENTICAL

        dropped = exp is not None and exp.mode_for("graphs") == GRAPH_ROUTE_IDENTICAL
        res = routes.compare_crawl(before.app(), after.app(), route_contract(exp, backend),
                                   graph_attrs_dropped=dropped,
                                   sampled=True,
                                   providers=((before.provider, after.provider)
                                              if heavy_via_provider else None),
                                   stop=stop)
    except Stopped:
        raise  # no verdict: the caller stopped the verification
    except Exception as e:  # noqa: BLE001 - a crawl that breaks proves nothing: a failure
        return Check("routes", False, f"{name}: crawl failed: {type(e).__name__}: {e}")
    if res.diffs:
        shown = "; ".join(f"{d.route}: {routes.shorten(d.why, 240)}" for d in res.diffs[:SHOWN_DIFFS])
        more = f" (+{len(res.diffs) - SHOWN_DIFFS} more)" if len(res.diffs) > SHOWN_DIFFS else ""
        return Check("routes", False, f"{name}: {shown}{more}")
    per = ", ".join(f"{p} {n}" for p, n in sorted(res.by_plugin.items()) if p != "<core>")
    off = (f"; not crawled, disabled on both sides in TensorBoard's plugins listing: "
           f"{', '.join(res.skipped)}" if res.skipped else "")
    return Check("routes", True,
                 f"{name}: {res.routes} routes and {res.blobs} blobs the dashboards fetch "
                 f"compared, within the contract ({per}){off}")


def profile_removed_check(removed: dict) -> list:
    """Profile data a policy removed is the one allowed route difference: say so."""
    from tb_footprint_plugin.verify.contract import Check

    if not removed:
        return []
    what = ", ".join(f"{n} {k}" for k, n in sorted(removed.items()))
    return [Check("routes", True, f"routes (profile, pytorch_profiler): removed by policy "
                                  f"({what}); their dashboards' routes are not compared")]


# --- big runs ----------------------------------------------------------------------------------


class IndexTap:
    """``run_index`` of the original made in the record-subsequence pass (a tap for
    ``records.records_subsequence``): the 1 GB original is read and CRC-checked once, not
    twice."""

    def __init__(self) -> None:
        self.stats: list = []

    def __call__(self, name: str):
        from tb_footprint_plugin.scan import eventfile

        tap, fold = self, eventfile.StatsFold(name)

        class _Fold:
            add = staticmethod(fold.add)

            @staticmethod
            def finish(reader) -> None:
                tap.stats.append(fold.finish(reader))

        return _Fold()

    def index(self, run_dir: str) -> Optional[tuple]:
        """The run's index, if the pass read every event file of ``run_dir`` to its end."""
        from tb_footprint_plugin.verify.records import event_file_names

        if self.stats and len(self.stats) == len(event_file_names(run_dir)):
            return index_from_stats(self.stats)
        return None


def run_index(run_dir: str) -> tuple[dict, dict]:
    """``({plugin: {tag: TagStat}}, {category: FixedStat})`` of a run, one streaming pass."""
    from tb_footprint_plugin.scan import eventfile
    from tb_footprint_plugin.verify.records import event_file_names

    return index_from_stats([eventfile.event_file_stats(os.path.join(run_dir, n), n)
                             for n in event_file_names(run_dir)])


def index_from_stats(stats: list) -> tuple[dict, dict]:
    """``run_index`` from the files' ``EventFileStats``, in name order."""
    from tb_footprint_plugin.scan import eventfile

    bindings: dict = {}
    for st in stats:
        for tag, plugin in st.bindings.items():
            bindings.setdefault(tag, plugin)
    tags: dict = {}
    fixed: dict = {}
    for st in stats:
        for plugin, ts in st.tags.items():
            for tag, s in ts.items():
                p = plugin or bindings.get(tag) or ""
                tags.setdefault(p, {}).setdefault(tag, eventfile.TagStat()).add(
                    s.bytes, s.records, s.min_step, s.max_step)
        for cat, s in st.fixed.items():
            fixed.setdefault(cat, eventfile.FixedStat()).add(s.bytes, s.records, s.min_step,
                                                             s.max_step)
    return tags, fixed


def index_checks(before: tuple, after: tuple, exp, subsequence_ok: bool) -> list:
    """Per tag, from both sides' streaming indexes: tags kept, "identical" tags whole."""
    from tb_footprint_plugin.verify import contract as c
    from tb_footprint_plugin.verify.contract import Check

    (b_tags, b_fixed), (a_tags, a_fixed) = before, after
    problems, whole, kept = [], 0, 0
    for plugin in sorted(set(b_tags) | set(a_tags)):
        mode = exp.mode_for(plugin)
        for tag in sorted(set(b_tags.get(plugin, {})) | set(a_tags.get(plugin, {}))):
            b, a = b_tags.get(plugin, {}).get(tag), a_tags.get(plugin, {}).get(tag)
            if b is None:
                problems.append(f"{plugin} tag {tag!r} is new after reduction")
            elif a is None:
                if mode != c.REMOVED:
                    problems.append(f"{plugin} tag {tag!r} has no record left")
            elif mode == c.IDENTICAL:
                if (a.records, a.bytes) != (b.records, b.bytes):
                    problems.append(f"{plugin} tag {tag!r}: {b.records} records ({b.bytes} B) "
                                    f"became {a.records} ({a.bytes} B)")
                else:
                    whole += 1
            else:
                kept += 1
                if mode != c.REMOVED and a.max_step != b.max_step:
                    problems.append(f"{plugin} tag {tag!r}: last step {b.max_step} became "
                                    f"{a.max_step}")
    for cat in sorted(b_fixed):
        plugin = FIXED_PLUGIN.get(cat)
        if cat not in a_fixed and not (plugin and exp.mode_for(plugin) == c.REMOVED):
            problems.append(f"{cat}: no record left")
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        return [Check("tag index", False, "tag index: " + "; ".join(problems[:3]) + more)]
    how = ("each byte-identical to an original record, in order" if subsequence_ok
           else "by record count and bytes")
    return [Check("tag index", True,
                  f"tag index: {whole} identical tags whole ({how}), {kept} reduced tags keep "
                  f"their last step, every tag still has records")]


def python_against_index(view, index: tuple, exp, thinned: Optional[dict] = None,
                         whole_ok: bool = True) -> list:
    """The reduced run as the Python loader shows it (``pyside.PythonListing``: steps per
    tag), against the original's index.

    ``thinned`` (``pyside.python_probe``): tags of "identical" plugins the loader read only a
    few records of -> how many it was spared; each must still be listed, with every record it
    was given and the original's first and last steps, and its points are proven by its
    records (``whole_ok``: the record subsequence held, the tag index found it whole)."""
    from tb_footprint_plugin.verify import contract as c
    from tb_footprint_plugin.verify.contract import Check

    if view.fatal:
        return [Check("python", False, f"python (reduced only): {view.fatal}")]
    tags, _ = index
    thinned = thinned or {}
    problems, n_tags, n_points = [], 0, 0
    n_spared = sum(thinned.values())
    for plugin in sorted(tags):
        if not plugin:
            continue
        mode = exp.mode_for(plugin)
        shown = view.plugins.get(plugin, {})
        for tag, st in sorted(tags[plugin].items()):
            tv = shown.get(tag)
            if tv is None:
                if mode != c.REMOVED:
                    problems.append(f"{plugin} tag {tag!r} is missing from the Python listing")
                continue
            n_tags += 1
            n_points += len(tv)
            steps = tv
            if tag in thinned and mode == c.IDENTICAL:
                if not whole_ok:
                    problems.append(f"{plugin} tag {tag!r}: read thinned, but its records are not "
                                    "proven whole")
                elif len(steps) != st.records - thinned[tag]:
                    problems.append(f"{plugin} tag {tag!r}: {st.records - thinned[tag]} records "
                                    f"given to the loader became {len(steps)} points")
                elif steps and (min(steps), max(steps)) != (st.min_step, st.max_step):
                    problems.append(f"{plugin} tag {tag!r}: steps {st.min_step}–{st.max_step} "
                                    f"became {min(steps)}–{max(steps)}")
                continue
            if mode == c.IDENTICAL and len(steps) != st.records:
                problems.append(f"{plugin} tag {tag!r}: {st.records} points became {len(steps)}")
            elif steps and mode != c.REMOVED and max(steps) != st.max_step:
                problems.append(f"{plugin} tag {tag!r}: last step {st.max_step} is not shown")
            elif (steps and mode in (c.SUBSET, c.DEFAULT_VIEW_IDENTICAL)
                  and min(steps) != st.min_step):
                problems.append(f"{plugin} tag {tag!r}: first step {st.min_step} is not shown")
        for tag in sorted(set(shown) - set(tags[plugin])):
            problems.append(f"{plugin} tag {tag!r} is new in the Python listing")
    errors = list(view.errors)
    if errors:
        problems.append(f"reader errors: {' | '.join(errors[:2])}")
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        return [Check("python", False, "python (reduced run vs the original's index): "
                      + "; ".join(problems[:3]) + more)]
    spared = (f"; {len(thinned)} whole tag(s) of identical plugins read through their first, last "
              f"and metadata records ({n_spared} records not re-read: each is byte-identical to "
              f"the original's, see the record subsequence and tag index)" if thinned else "")
    return [Check("python", True,
                  f"python (reduced run vs the original's index): {n_tags} tags listed as "
                  f"before, {n_points} points, every contract's first/last steps shown{spared}")]
