"""Original vs reduced run: does TensorBoard still show what the fidelity contract promises?

Order of checks (each later one assumes the earlier ones):

1. records — every reduced event file re-read with CRCs (TensorBoard's loaders hide bad
   CRCs), and, by default, the reduced run's records are a byte-identical, in-order
   subsequence of the original's;
2. run present, per backend;
3. reader errors — the reduced run loads with no reader error or warning the original
   did not already have;
4. per plugin, per tag, per backend, according to the plugin's mode;
5. the run graph the graphs plugin reads.

How much each backend stores is chosen so the comparison is exact: every point for
"identical", "subset" and "removed" plugins (so a changed point cannot hide outside a
reservoir sample), and the Rust server's own default sampling for "default_view_identical"
and "default_view_exact" plugins (that view *is* the promise). The Python backend always
stores every point: for "default_view_identical" it checks that the reduced run is a subset
of the original with the first and last points kept; for "default_view_exact" a subset with
the last point kept (the first step may be gone on ``--load_fast=false``).

Why one module: the checks run in one order, each assuming the earlier ones,
into one ``VerificationResult``, and every per-plugin and per-backend comparison shares the same
payload keys, difference finder and summaries (``_payload_key``, ``_first_difference``,
``_tag_summaries``): the fidelity contract is judged in one place.
"""
from __future__ import annotations

import concurrent.futures
import math
import os
import shutil
import struct
import time
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Iterable, NamedTuple, Optional

from tb_footprint_plugin.fmt import plural
from tb_footprint_plugin.formats import views
from tb_footprint_plugin.formats.views import RunView, TagView, TensorPayload
from tb_footprint_plugin.scan import categories
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.files import sha256_file
from tb_footprint_plugin.verify import records
from tb_footprint_plugin.verify.contract import (  # noqa: F401  (the contract's words, verify's API)
    DEFAULT_VIEW_EXACT,
    DEFAULT_VIEW_IDENTICAL,
    DEFAULT_VIEW_MODES,
    GRAPH_MODES,
    GRAPH_ROUTE_IDENTICAL,
    IDENTICAL,
    MODES,
    REMOVED,
    SUBSET,
    Check,
    exact_on,
)
from tb_footprint_plugin.verify.readers import Reader
from tb_footprint_plugin.verify.stop import NEVER, ShouldStop, Stop

SERIES_MAX_POINTS = 200
#: Bounds of the per-tag summaries the check page draws (stored with the operation).
SUMMARY_MAX_TAGS = 60        # per plugin
SUMMARY_MAX_STEPS = 60       # steps listed per tag and side
SUMMARY_MAX_BUCKETS = 120    # histogram buckets per distribution


@dataclass
class Expectations:
    """The fidelity contract for one run: a mode per summary plugin.

    ``scalars``, ``hparams`` and ``text`` are always "identical"; asking otherwise raises
    ``ValueError``. ``sampling_hints`` is the dashboard's ``--samples_per_plugin`` (used
    for the Rust default view of "default_view_identical" and "default_view_exact" plugins).
    """

    default_mode: str = IDENTICAL
    plugin_modes: dict = field(default_factory=dict)
    graph: str = IDENTICAL
    sampling_hints: dict = field(default_factory=dict)
    #: Require the reduced records to be an in-order subsequence of the original's.
    records_subsequence: bool = True
    #: Re-encoded records a rewrite reported: sha256 of the new record -> (sha256, size) of
    #: the original record it stands for (see ``records.records_subsequence``).
    record_substitutes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default_mode not in MODES:
            raise ValueError(f"unknown mode {self.default_mode!r}; expected one of {MODES}")
        for plugin, mode in self.plugin_modes.items():
            if mode not in MODES:
                raise ValueError(f"{plugin}: unknown mode {mode!r}; expected one of {MODES}")
            if plugin in categories.PROTECTED_PLUGINS and mode != IDENTICAL:
                raise ValueError(f"{plugin} is protected: its mode is always 'identical'")
        if self.graph not in GRAPH_MODES:
            raise ValueError(f"unknown graph mode {self.graph!r}; expected one of {GRAPH_MODES}")

    def mode_for(self, plugin: str) -> str:
        if plugin in categories.PROTECTED_PLUGINS:
            return IDENTICAL
        if plugin in self.plugin_modes:
            return self.plugin_modes[plugin]
        if plugin == views.GRAPHS_PLUGIN and self.graph == REMOVED:
            return REMOVED
        return self.default_mode


@dataclass
class VerificationResult:
    ok: bool
    checks: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    backends: list = field(default_factory=list)
    scalar_series: dict = field(default_factory=dict)
    #: ``{plugin: {tag: summary}}`` for what a policy may touch (histograms, images, audio,
    #: ...): counts, the steps the dashboard shows on each side, histogram distributions,
    #: per shown sample whether it is the same; bounded (SUMMARY_MAX_*), see _tag_summaries.
    tag_summaries: dict = field(default_factory=dict)
    graph: dict = field(default_factory=dict)  # {"before": sha256|None, "after": ...}
    views: dict = field(default_factory=dict)  # backend -> {"before": ..., "after": ...}
    duration_s: float = 0.0

    def to_dict(self) -> dict:
        """The result as the manifest stores it. Only the ``Check`` lines are dataclasses; the
        other fields are plain data already and are handed over, not copied (the result is not
        used once converted): ``dataclasses.asdict`` deep-copied every summary list and curve
        point too, ~3,800 calls and ~0.03 s of a core a verification, whatever the run's size."""
        return {
            "ok": self.ok,
            "checks": [asdict(c) if is_dataclass(c) else c for c in self.checks],
            "failed": self.failed,
            "backends": self.backends,
            "scalar_series": self.scalar_series,
            "tag_summaries": self.tag_summaries,
            "graph": self.graph,
            "views": self.views,
            "duration_s": round(self.duration_s, 3),
        }


# --- entry point -------------------------------------------------------------------------


def verify_reduction(
    original_dir: str,
    reduced_dir: str,
    expectations: Optional[Expectations] = None,
    backends: Iterable[str] = views.BACKENDS,
    *,
    timeout_s: float = 300.0,
    full_read_bytes: Optional[int] = None,
    routes: bool = True,
    original=None,
    should_stop: Optional[ShouldStop] = None,
) -> VerificationResult:
    """Compare what TensorBoard shows for ``original_dir`` and ``reduced_dir``.

    Runs whose original event data is at most ``full_read_bytes`` (default
    ``dashboard.FULL_READ_BYTES``) are read in full by both backends; bigger ones take the
    flat-memory path of ``dashboard`` (never the Python loader over the original).
    ``routes=False`` leaves out TensorBoard's HTTP routes (the verifier before issue 12).

    ``original`` (``verify.original.OriginalRun``, big runs): what the rewrite already read of
    ``original_dir``'s files (the caller vouches they are those bytes): its Rust data server's
    load is the original's side of the route crawl, its record index finds the records the
    subsequence check compares byte for byte, its tag index is the original's. Whatever it
    does not cover is read here as without it.

    ``should_stop`` (a cancel, Ctrl-C, a run's timeout): looked at between the reader passes,
    the route crawl's responses and while waiting on the data servers or the Python loader
    (``verify.stop``); once it says yes the verification ends within a moment, its helper
    processes and threads ended, and raises ``Stopped`` instead of any verdict.
    """
    with Stop(should_stop) as stop:
        if original is not None:
            stop.on_stop(original.abort)  # its load and its loader's child, still the caller's
        stop.check()
        result = _verify_reduction(original_dir, reduced_dir, expectations, backends, timeout_s,
                                   full_read_bytes, routes, original, stop)
        # what a stop cut short (a data server's channel closed, the loader's child killed) made
        # failures that are no finding: no verdict
        stop.check()
        return result


def _verify_reduction(original_dir, reduced_dir, expectations, backends, timeout_s, full_read_bytes,
                      routes, original, stop: Stop) -> VerificationResult:
    from tb_footprint_plugin.verify import dashboard

    start = time.monotonic()
    exp = expectations or Expectations()
    checks: list[Check] = []
    wanted = list(dict.fromkeys(backends))
    for b in wanted:
        if b not in views.BACKENDS:
            raise ValueError(f"unknown backend {b!r}")
    limit = dashboard.FULL_READ_BYTES if full_read_bytes is None else full_read_bytes
    size = dashboard.event_bytes(original_dir)
    big = size > limit
    # Big runs: the Python loader's pass over the reduced run is the longest single check and
    # needs nothing the others compute; it starts first, in its own interpreter (``pyside``).
    python_side = None
    if big and "python" in wanted and (dashboard.event_bytes(reduced_dir)
                                       <= dashboard.PYTHON_REDUCED_BYTES):
        from tb_footprint_plugin.verify.pyside import PythonSide, python_probe

        # the loader reads the reduced run, whole tags thinned where their records prove the
        # same (``pyside.python_probe``); its child imports TensorBoard's loader meanwhile
        python_side = original.take_python_side() if original is not None else None
        if python_side is not None:
            python_side.timeout_s = timeout_s  # what this verification waits for its answer
        else:
            # inside a reduce (``original``) TensorBoard's loader is imported here already: a
            # small input is read in this process, not in a child (``PythonSide.lazy``)
            python_side = PythonSide(None, timeout_s, lazy=original is not None).start()
        stop.on_stop(python_side.kill)
        python_side.probe_dir = scratch.make("python-probe")
        python_side.probe = None
        if not (exp.records_subsequence and original is not None and original.index() is not None):
            python_side.probe = python_probe(reduced_dir, exp, python_side.probe_dir)
            _tell(python_side, reduced_dir)
        # else: the record subsequence's pass over the reduced run classifies its records for
        # the probe (``_verify_rest``), and the child is told its run then
    if "rust" in wanted and views.data_server_binary() is None:
        # TensorBoard itself falls back to the Python reader when the binary is missing.
        wanted.remove("rust")
        checks.append(Check("rust backend", True, "rust: data server binary not available; skipped"))
    # Big runs: the Rust servers load both sides in their own processes while this one makes
    # its passes over the records (``_record_checks``, the tag index).
    rust_opening = None
    handed = original.take_reader() if (big and original is not None and "rust" in wanted) else None
    if big and "rust" in wanted:
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        sides = ("after",) if handed is not None else ("before", "after")

        def opening() -> dict:
            try:
                readers = dashboard.open_pair(original_dir, reduced_dir, "rust", None,
                                              store_all=False, timeout_s=timeout_s, sides=sides,
                                              stop=stop)
            except BaseException:
                if handed is not None:
                    handed.close()  # nobody else will: the caller only closes what it gets
                raise
            if handed is not None:
                readers["before"] = handed
            return readers

        if handed is not None:
            stop.on_stop(handed.abort)

        rust_opening = pool.submit(opening)
        pool.shutdown(wait=False)
    elif handed is not None:
        handed.close()
    try:
        return _verify(original_dir, reduced_dir, exp, wanted, checks, timeout_s, routes, size,
                       big, python_side, rust_opening, start, original if big else None, stop)
    finally:
        if python_side is not None:
            python_side.cancel()  # no-op once its result was collected
            if getattr(python_side, "probe_dir", None):
                shutil.rmtree(python_side.probe_dir, ignore_errors=True)
        if rust_opening is not None and not getattr(rust_opening, "taken", False):
            try:
                for r in rust_opening.result().values():
                    r.close()
            except Exception:  # noqa: BLE001 - already failing; the readers clean up their temp dirs
                pass
        if big:  # the many threads are the big-run path's; a batch of small runs pays nothing
            release_free_heap()


#: glibc's ``malloc_trim`` in this process (None: another C library, or not looked up yet)
_MALLOC_TRIM: list = []


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``, ~1-2 ms);
    False where the C library has none.

    A verification runs ~50 threads at once (route crawl groups, blob fetches, the tab's reads,
    gRPC's own), and glibc gives threads their own heaps ("arenas", up to 8 a core); what those
    threads freed stays in their arenas, mapped, when they end. A process that reduces again (the
    tab's TensorBoard) started its next reduce ~15 MB higher for it, and its peak with it:
    measured on a 100 MB histogram file after a 2 MB reduce with a 4-core machine's arena limit,
    own peak RSS 140-147 MB -> 126-131 MB (the bench's 150 MB target failed at 152 MB in CI).
    Nothing is changed in how the process allocates (no ``mallopt``, no ``MALLOC_ARENA_MAX``):
    memory already free is returned, at the end of each big run's verification."""
    if not _MALLOC_TRIM:
        trim = None
        try:
            import ctypes

            trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
        except (OSError, AttributeError, ImportError):
            trim = None
        _MALLOC_TRIM.append(trim)
    trim = _MALLOC_TRIM[0]
    if trim is None:
        return False
    trim(0)
    return True


def _tell(python_side, reduced_dir: str) -> None:
    """Tell the Python loader what it reads: the thinned copy (with its record count) if the
    probe made one, else the reduced run."""
    probe = python_side.probe
    if probe:
        python_side.go(python_side.probe_dir, probe.get("records"))
    else:
        python_side.go(reduced_dir)


def _verify(original_dir, reduced_dir, exp, wanted, checks, timeout_s, routes, size,
            big, python_side, rust_opening, start, original=None, stop: Stop = NEVER
            ) -> VerificationResult:
    from tb_footprint_plugin.verify import dashboard

    # Big runs: the original's tag index is the rewrite pass's (``original``), or folded from
    # the record-subsequence pass.
    tap = dashboard.IndexTap() if big else None
    index_before = original.index() if original is not None else None
    facts = original.files if (original is not None and index_before is not None) else None
    reduced_pass = records.ReducedPass(reduced_dir) if (big and facts) else None
    if reduced_pass is not None and python_side is not None and python_side.run_dir is None:
        from tb_footprint_plugin.verify.pyside import ProbeTap

        reduced_pass.probe = ProbeTap(exp)
    # Big runs: the route crawl over the Rust data servers mostly waits for them (measured: a
    # fifth of its time is this process's); it runs beside the record checks, which are all
    # this process's.
    rust_side = None
    if big and "rust" in wanted:
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        rust_side = pool.submit(_rust_side, original_dir, reduced_dir, exp, timeout_s, routes,
                                rust_opening, stop)
        pool.shutdown(wait=False)
    try:
        return _verify_rest(original_dir, reduced_dir, exp, wanted, checks, timeout_s, routes,
                            size, big, python_side, rust_side, start, tap, index_before, facts,
                            reduced_pass, stop)
    finally:
        if rust_side is not None:
            concurrent.futures.wait([rust_side])  # its data servers are closed when it ends


def _verify_rest(original_dir, reduced_dir, exp, wanted, checks, timeout_s, routes, size, big,
                 python_side, rust_side, start, tap, index_before, facts, reduced_pass,
                 stop: Stop = NEVER) -> VerificationResult:
    from tb_footprint_plugin.verify import dashboard

    checks.extend(_record_checks(original_dir, reduced_dir, exp, None if facts else tap,
                                 facts, reduced_pass))
    stop.check()
    if python_side is not None and python_side.run_dir is None:  # the deferred probe
        from tb_footprint_plugin.verify.pyside import python_probe

        tap = reduced_pass.probe if reduced_pass is not None and reduced_pass.complete else None
        python_side.probe = python_probe(reduced_dir, exp, python_side.probe_dir, tap=tap)
        _tell(python_side, reduced_dir)
    if not wanted:
        checks.append(Check("backends", False, "backends: no TensorBoard reader was run"))

    if not big:
        pairs, route_lines = _read_full(original_dir, reduced_dir, exp, wanted, timeout_s, routes,
                                        stop)
    else:
        subsequence_ok = all(c.ok for c in checks if c.name == "record subsequence")
        index_after = (dashboard.index_from_stats(reduced_pass.stats)
                       if reduced_pass is not None and reduced_pass.complete else None)
        pairs, route_lines = _read_big(original_dir, reduced_dir, exp, wanted, timeout_s, routes,
                                       subsequence_ok, size, python_side, rust_side,
                                       index_before or tap.index(original_dir), index_after, stop)
    checks.extend(_run_present_checks(pairs))
    checks.extend(_reader_error_checks(pairs))
    # Compare points only where both sides were read in full and both hold the run.
    usable = {b: (v0, v1) for b, (v0, v1) in pairs.items()
              if not (v0.fatal or v1.fatal) and v0.run_present and v1.run_present
              and b not in _routes_only(pairs)}
    if usable:
        checks.extend(_plugin_checks(usable, exp))
        checks.extend(_graph_checks(usable, exp))
    if exp.mode_for(views.GRAPHS_PLUGIN) == GRAPH_ROUTE_IDENTICAL:
        checks.append(graph_copies_check(original_dir, reduced_dir))
    checks.extend(route_lines)

    failed = [c.detail for c in checks if not c.ok]
    return VerificationResult(
        ok=not failed,
        checks=checks,
        failed=failed,
        backends=wanted,
        scalar_series=_scalar_series(usable or pairs),
        tag_summaries=_tag_summaries(pairs),
        graph=_graph_summary(pairs),
        views={b: {"before": views.describe(v0), "after": views.describe(v1)}
               for b, (v0, v1) in pairs.items()},
        duration_s=time.monotonic() - start,
    )


#: Event's oneof field tags of the records that store a graph: ``graph_def`` (4) and
#: ``meta_graph_def`` (9), both length-delimited
_GRAPH_FIELD_TAGS = {0x22: "graph_def", 0x4A: "meta_graph_def"}


def _graph_record_kind(data: bytes) -> Optional[str]:
    """``graph_def`` / ``meta_graph_def`` for an event record storing a graph, else None, read
    from the field after ``wall_time`` and ``step`` (writers serialize fields in number order)
    without parsing the record."""
    i = 9 if data[:1] == b"\x09" else 0
    if data[i:i + 1] == b"\x10":
        i += 1
        while i < len(data) and data[i] & 0x80:
            i += 1
        i += 1
    return _GRAPH_FIELD_TAGS.get(data[i]) if i < len(data) else None


def _graph_copies(run_dir: str) -> list:
    """What the graphs route would make of every stored graph of a run, in reading order:
    ``(file, kind, step, wall_time, route digest of the graph, sha256 of the record's other
    fields)``; the route's processing (``limit_attr_size=1024``) is the same for a graph and the
    graph a meta graph embeds."""
    import hashlib

    from tensorboard.compat.proto import event_pb2, meta_graph_pb2

    from tb_footprint_plugin.scan.tfrecord import RecordReader
    from tb_footprint_plugin.formats import graph_attrs

    out = []
    for name in records.event_file_names(run_dir):
        with RecordReader(os.path.join(run_dir, name)) as reader:
            for rec in reader:
                kind = _graph_record_kind(rec.data)
                if kind is None:
                    continue
                ev = event_pb2.Event.FromString(rec.data)
                if kind == "graph_def":
                    graph, rest = ev.graph_def, b""
                else:
                    meta = meta_graph_pb2.MetaGraphDef.FromString(ev.meta_graph_def)
                    graph = meta.graph_def.SerializeToString(deterministic=True)
                    meta.ClearField("graph_def")
                    rest = meta.SerializeToString(deterministic=True)
                try:
                    route = graph_attrs.route_graph_digest(graph)
                except Exception:  # noqa: BLE001 - not a GraphDef: compared by its bytes
                    route = "bytes:" + hashlib.sha256(graph).hexdigest()
                out.append((name, kind, ev.step, ev.wall_time, route, hashlib.sha256(rest).hexdigest()))
    return out


def graph_copies_check(original_dir: str, reduced_dir: str) -> Check:
    """Where stored graphs lost their large attribute values (``GRAPH_ROUTE_IDENTICAL``): every
    graph the reduced run stores — the ``GraphDef`` each backend serves and the copy a
    ``MetaGraphDef`` embeds, which no backend shows — is, in order, one of the original's as
    the graphs route serves it with the dashboard's ``limit_attr_size``, the meta graph's other
    fields unchanged; so the Graphs dashboard, and any reader of the meta graph through that
    route's processing, sees the same graph."""
    try:
        before, after = _graph_copies(original_dir), _graph_copies(reduced_dir)
    except Exception as e:  # noqa: BLE001 - unreadable graph records: a failed check, named
        return Check("graph copies", False, f"graph copies: cannot read the stored graphs: {type(e).__name__}: {e}")
    it = iter(before)
    for i, g in enumerate(after):
        if not any(g == o for o in it):
            return Check("graph copies", False,
                         f"graph copies: the {g[1]} record at step {g[2]} in {g[0]} (the {i + 1}th stored graph) "
                         "is not one of the original's as the graphs route serves it")
    kinds = {k: sum(1 for g in after if g[1] == k) for k in ("graph_def", "meta_graph_def")}
    return Check("graph copies", True,
                 f"graph copies: {kinds['graph_def']} GraphDef and {kinds['meta_graph_def']} MetaGraphDef record(s) "
                 "hold the original's graphs as the graphs route serves them (limit_attr_size=1024), "
                 "other fields unchanged")


def _routes_only(pairs) -> set:
    """Backends whose views were loaded but not read point by point (the big-run path)."""
    return {b for b, (v0, _) in pairs.items() if v0.storage.endswith(_NOT_READ)}


#: Marks a view of the big-run path: loaded for the routes, not read point by point.
_NOT_READ = " (routes only)"


def _read_full(original_dir, reduced_dir, exp, backends, timeout_s, with_routes,
               stop: Stop = NEVER):
    """Every point, both backends; the routes are crawled over the same loaded readers.

    Returns ``({backend: (before view, after view)}, route check lines)``. Python is read
    first: its plugin names seed the Rust server's keep-everything hints."""
    from tb_footprint_plugin.verify import dashboard

    pairs: dict[str, tuple[RunView, RunView]] = {}
    lines: list[Check] = []
    for backend in [b for b in ("python", "rust") if b in backends]:
        stop.check()
        hints: dict = {}
        if backend == "rust":
            seen = set(views.KNOWN_PLUGINS) | set(exp.plugin_modes)
            for v in pairs.get("python", ()):
                seen |= set(v.plugins)
            hints = {p: _rust_hint(p, exp) for p in sorted(seen)}
        readers = dashboard.open_pair(original_dir, reduced_dir, backend, hints, store_all=True,
                                      timeout_s=timeout_s, stop=stop)
        try:
            stop.check()
            before = readers["before"].read()
            stop.check()
            after = readers["after"].read()
            stop.check()
            if with_routes and before.run_present and after.run_present:
                lines.append(dashboard.route_check(backend, readers["before"],
                                                   readers["after"], exp, stop=stop))
        finally:
            for r in readers.values():
                r.close()
        pairs[backend] = (before, after)
    return {b: pairs[b] for b in backends if b in pairs}, _merge_route_lines(lines)


def _read_big(original_dir, reduced_dir, exp, backends, timeout_s, with_routes,
              subsequence_ok, size, python_side=None, rust_side=None, index_before=None,
              index_after=None, stop: Stop = NEVER):
    """The flat-memory path (see ``dashboard``): Rust default view through the routes
    (``_rust_side``, running since before the record checks), the tag index of both sides,
    the Python loader over the reduced run only."""
    from tb_footprint_plugin.verify import dashboard

    pairs: dict[str, tuple[RunView, RunView]] = {}
    lines: list[Check] = []
    if index_before is None:  # not folded from the subsequence pass (not run, or cut short)
        index_before = dashboard.run_index(original_dir)
        stop.check()
    if index_after is None:  # not folded from the record subsequence pass
        index_after = dashboard.run_index(reduced_dir)
        stop.check()
    lines.extend(dashboard.index_checks(index_before, index_after, exp, subsequence_ok))
    if rust_side is not None:
        pairs["rust"], rust_lines = stop.result(rust_side)
        lines.extend(rust_lines)
    stop.check()
    if "python" in backends:
        reduced_size = dashboard.event_bytes(reduced_dir)
        if python_side is not None or reduced_size <= dashboard.PYTHON_REDUCED_BYTES:
            from tb_footprint_plugin.verify import pyside

            listing = (python_side.result() if python_side is not None
                       else pyside.read_listing(reduced_dir, timeout_s))
            probe = getattr(python_side, "probe", None)
            lines.extend(dashboard.python_against_index(
                listing, index_before, exp, thinned=(probe or {}).get("thinned"),
                whole_ok=subsequence_ok and exp.records_subsequence))
        else:
            lines.append(Check("python", True,
                               f"python: original ({size / 1e6:.0f} MB) and reduced run "
                               f"({reduced_size / 1e6:.0f} MB) too big for the legacy loader "
                               f"(~4.5 MB/s); covered by the record subsequence and tag index"))
    return pairs, lines


def _rust_side(original_dir, reduced_dir, exp, timeout_s, with_routes, rust_opening=None,
               stop: Stop = NEVER):
    """``(pair of views, route lines)`` of the Rust default view: TensorBoard's routes over
    both sides' data servers (the original's handed over by the rewrite when it can be), and
    the tab's before/after curves. Closes the servers."""
    from tb_footprint_plugin.verify import dashboard

    lines: list[Check] = []
    if rust_opening is not None:
        rust_opening.taken = True  # closed below, not by the caller
        readers = rust_opening.result()  # a stop kills the servers it waits for (``Reader.abort``)
        # a handed-over reader's view holds what the rewrite read of it: both sides start
        # equal (the tab's summaries compare the two views)
        before = readers["before"].view
        before.plugins, before.graph, before.graph_route, before.graph_nodes = {}, None, None, None
    else:
        readers = dashboard.open_pair(original_dir, reduced_dir, "rust", None,
                                      store_all=False, timeout_s=timeout_s, stop=stop)
    try:
        stop.check()
        present = readers["before"].view.run_present and readers["after"].view.run_present
        # what the tab's check draws (the default view: curves, histogram distributions, image
        # and audio samples) is read while the routes are crawled: both mostly wait for the data
        # servers (the crawl reads only ``view.fatal``)
        with concurrent.futures.ThreadPoolExecutor(
                max_workers=len(readers), thread_name_prefix="footprint-tab") as curves:
            reading = [curves.submit(_read_for_tab, r) for r in readers.values()]
            if with_routes and present:
                lines.append(dashboard.route_check("rust", readers["before"], readers["after"],
                                                   exp, ", default view",
                                                   heavy_via_provider=True, stop=stop))
            for f in reading:
                f.result()
    finally:
        for r in readers.values():
            r.close()
    v0, v1 = readers["before"].view, readers["after"].view
    v0.storage += _NOT_READ
    v1.storage += _NOT_READ
    return (v0, v1), lines


#: What the tab's check draws on the big-run path, read from the Rust default view (bounded by
#: its sampling: ≤1000 scalars, ≤500 histograms, ≤10 images or audio clips per tag; blobs are
#: hashed, never kept): ``(plugin, data class, blob fetches at once)``.
_TAB_KINDS = (("scalars", views.SCALAR, 1), ("histograms", views.TENSOR, 1),
              ("images", views.BLOB_SEQUENCE, 8), ("audio", views.BLOB_SEQUENCE, 8))
#: An image summary's blob sequence is its width, its height, then its samples: the check shows
#: the samples only (``_samples``), as the images routes serve them, so the tab's read leaves the
#: first two unfetched (None): of a one-sample image tag, two of every three of its data-server
#: reads, on both sides, in every reduce of a run with images.
IMAGE_HEADER_BLOBS = 2


class PayloadDigest(NamedTuple):
    """A tensor payload the tab's check needs only to tell apart: its dtype, shape and the
    sha256 of its bytes (two are equal exactly when their payloads are; never equal to a
    ``TensorPayload``)."""

    dtype: str
    shape: tuple
    sha256: str


def _read_for_tab(reader: Reader) -> None:
    """What the tab's before/after check shows, as the reader stores it (the default view);
    the comparison itself is the routes' and the records'. Of a histogram tag only the points
    the summary draws keep their payload (``_digest_undrawn``)."""
    if reader.provider is None or reader.view.fatal or not reader.view.run_present:
        return
    for plugin, kind, workers in _TAB_KINDS:
        try:
            views.read_kind(reader.view, reader.provider, views.request_context(), plugin,
                             kind, {}, workers, skip=IMAGE_HEADER_BLOBS if plugin == "images" else 0)
        except Exception as e:  # noqa: BLE001 - a reader failure is a finding
            reader.view.errors.append(f"{plugin}: {type(e).__name__}: {e}")
        if kind == views.TENSOR:
            for tag in reader.view.plugins.get(plugin, {}).values():
                _digest_undrawn(tag)


def _digested(payload: Any) -> Any:
    """``payload``'s ``PayloadDigest`` if it is a ``TensorPayload``, else itself."""
    import hashlib

    if isinstance(payload, TensorPayload):
        return PayloadDigest(payload.dtype, payload.shape, hashlib.sha256(payload.data).hexdigest())
    return payload


def _same_payload(a: Any, b: Any) -> bool:
    """Bit-exact equality of two payloads, one of them possibly digested (``_digest_undrawn``
    kept a different step whole on each side)."""
    if isinstance(a, PayloadDigest) != isinstance(b, PayloadDigest):
        a, b = _digested(a), _digested(b)
    return _payload_key(a) == _payload_key(b)


def _digest_undrawn(tag: TagView) -> None:
    """Replace the payload of every point but the last one and the last shown step's (the
    distribution ``_tag_summaries`` draws is at a side's last shown step, and a reduced run's
    steps are the original's: the other side's last shown step is one of these or absent) by
    its ``PayloadDigest``, which is all ``same_shown`` compares. The default view holds up to
    500 histograms a tag, ~4 KB each for a weight tensor's: a 100 MB run's two sides held
    ~8 MB of them through the rest of the route crawl, at the reduce's peak memory."""
    if not tag.points:
        return
    keep = {tag.points[-1][0]}
    if tag.display_steps:
        keep.add(tag.display_steps[-1])
    tag.points = [p if p[0] in keep else (p[0], p[1], _digested(p[2])) for p in tag.points]


def _merge_route_lines(lines: list[Check]) -> list[Check]:
    """One line for backends whose ok route lines say the same thing."""
    out: list[Check] = []
    merged: dict[str, list[str]] = {}
    for c in lines:
        if c.ok and c.detail.startswith("routes ("):
            backend, text = c.detail[len("routes ("):].split(")", 1)
            merged.setdefault(text, []).append(backend)
        else:
            out.append(c)
    return [Check("routes", True, f"routes ({', '.join(bs)}){t}") for t, bs in merged.items()] + out


def _rust_hint(plugin: str, exp: Expectations) -> Optional[int]:
    """Keep every point, except where the promise is the default (sampled) view."""
    if exp.mode_for(plugin) in DEFAULT_VIEW_MODES:
        return exp.sampling_hints.get(plugin)  # None: the server's own default
    return 0


# --- records -----------------------------------------------------------------------------


def _record_checks(original_dir: str, reduced_dir: str, exp: Expectations,
                   original_tap=None, facts=None, reduced_pass=None) -> list[Check]:
    """The framing of every reduced file, and the record subsequence. With ``facts`` (the
    original's record index), the subsequence pass over the reduced run is made first and
    also serves the framing check and ``reduced_pass`` (the reduced run's tag index)."""
    indexed = None
    if facts and exp.records_subsequence:
        reduced_pass = reduced_pass if reduced_pass is not None else records.ReducedPass(reduced_dir)
        try:
            indexed = records.records_subsequence_indexed(
                original_dir, reduced_dir, facts, (), substitutes=exp.record_substitutes,
                reduced_tap=reduced_pass.tap)
        except OSError:  # an unreadable file: reported by the framing check below
            indexed = None
    if indexed is not None and reduced_pass.complete and all(c.ok for c in reduced_pass.checks):
        reduced = reduced_pass.checks
    else:  # read on its own: a damaged file may be an inherited tail (below)
        reduced, indexed = records.check_event_files(reduced_dir), None
    problems, notes, inherited = [], [], []
    for rc in reduced:
        if rc.ok:
            continue
        # Allowed only as an unchanged copy of an original with the same bad tail.
        orig_path = os.path.join(original_dir, rc.name)
        orig = records.check_file(orig_path) if os.path.isfile(orig_path) else None
        if orig is not None and not orig.ok and _same_bytes(orig.path, rc.path):
            inherited.append(rc.name)
            notes.append(f"{rc.name} carried over unchanged with the original's {rc.status} "
                         f"tail at offset {rc.error_offset}")
        else:
            problems.append(rc.describe())
    n_records = sum(rc.records for rc in reduced)
    if problems:
        out = [Check("records", False, f"records: {'; '.join(problems)}")]
    else:
        detail = (f"records: {len(reduced)} event files, {n_records} records, framing and CRCs ok"
                  if reduced else "records: no event files in the reduced run")
        out = [Check("records", True, detail + "".join(f"; {n}" for n in notes))]
    if exp.records_subsequence and reduced and not problems:
        res = indexed or (records.records_subsequence_indexed(original_dir, reduced_dir, facts,
                                                              inherited,
                                                              substitutes=exp.record_substitutes)
                          if facts else None)
        if res is None:
            res = records.records_subsequence(original_dir, reduced_dir, inherited,
                                              substitutes=exp.record_substitutes,
                                              original_tap=original_tap)
        ok, msg = res
        out.append(Check("record subsequence", ok, f"record subsequence: {msg}"))
    return out


def _same_bytes(a: str, b: str) -> bool:
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    return sha256_file(a) == sha256_file(b)


# --- run presence and reader errors ------------------------------------------------------


def _group(results: dict[str, tuple[bool, str]], name: str) -> list[Check]:
    """Merge per-backend ``(ok, text)`` into lines, one per distinct outcome."""
    by_text: dict[tuple[bool, str], list[str]] = {}
    for backend, key in results.items():
        by_text.setdefault(key, []).append(backend)
    return [Check(name, ok, f"{text} ({', '.join(bs)})") for (ok, text), bs in by_text.items()]


def _run_present_checks(pairs) -> list[Check]:
    results = {}
    for b, (before, after) in pairs.items():
        if before.fatal or after.fatal:
            results[b] = (False, "run present: unknown, the reader failed")
        elif before.run_present and after.run_present:
            results[b] = (True, "run present: yes, before and after")
        elif before.run_present:
            results[b] = (False, "run present: the run is MISSING after reduction")
        elif after.run_present:
            results[b] = (False, "run present: a run appeared that the original did not have")
        else:
            results[b] = (True, "run present: no run before or after (no event data)")
    return _group(results, "run present")


def _reader_error_checks(pairs) -> list[Check]:
    out = []
    for b, (before, after) in pairs.items():
        fatal = [f"{label}: {v.fatal}" for label, v in (("original", before), ("reduced", after))
                 if v.fatal]
        if fatal:
            # A backend that could not read at all proves nothing, even if both sides failed.
            out.append(Check("reader errors", False,
                             f"reader errors ({b}): could not read the run: {' | '.join(fatal)}"))
            continue
        new_errors = [e for e in after.errors if e not in before.errors]
        new_warnings = [w for w in after.warnings if w not in before.warnings]
        if new_errors or new_warnings:
            shown = (new_errors + new_warnings)[:3]
            out.append(Check("reader errors", False,
                             f"reader errors ({b}): {len(new_errors)} new errors, "
                             f"{len(new_warnings)} new warnings: {' | '.join(shown)}"))
        else:
            inherited = len(after.errors) + len(after.warnings)
            note = f", {inherited} inherited from the original" if inherited else ""
            out.append(Check("reader errors", True, f"reader errors: none new{note} ({b})"))
    return _merge_same(out)


def _merge_same(checks: list[Check]) -> list[Check]:
    """Merge ok lines that differ only by their trailing ``(backend)``."""
    merged: dict[str, list[str]] = {}
    rest = []
    for c in checks:
        if c.ok and c.detail.endswith(")") and " (" in c.detail:
            text, backend = c.detail[:-1].rsplit(" (", 1)
            merged.setdefault(text, []).append(backend)
        else:
            rest.append(c)
    name = checks[0].name if checks else ""
    return [Check(name, True, f"{t} ({', '.join(bs)})") for t, bs in merged.items()] + rest


# --- per plugin comparison ---------------------------------------------------------------


def _payload_key(payload: Any) -> Any:
    """Bit-exact comparable form (floats by their IEEE bits: NaN == NaN, 0.0 != -0.0)."""
    if isinstance(payload, float):
        return struct.pack("<d", payload)
    return payload


def _key(point: tuple) -> tuple:
    step, wall_time, payload = point
    return (step, struct.pack("<d", wall_time), _payload_key(payload))


def _fmt_payload(payload: Any) -> str:
    if isinstance(payload, float):
        return repr(payload)
    if isinstance(payload, TensorPayload):
        return f"<{payload.dtype}{list(payload.shape)} {len(payload.data)} bytes>"
    if isinstance(payload, PayloadDigest):
        return f"<{payload.dtype}{list(payload.shape)} sha256 {payload.sha256[:12]}>"
    return f"<{len(payload)} blobs {','.join(d[:8] for d in payload)}>"


def _first_difference(before: list, after: list) -> str:
    for i, (p, q) in enumerate(zip(before, after)):
        if _key(p) == _key(q):
            continue
        if p[0] != q[0]:
            return f"point #{i}: step {p[0]} became step {q[0]}"
        if _key(p)[1] != _key(q)[1]:
            return f"step {p[0]}: wall time {p[1]!r} became {q[1]!r}"
        return f"step {p[0]}: value {_fmt_payload(p[2])} became {_fmt_payload(q[2])}"
    return f"{len(before)} points became {len(after)}"


def _is_subsequence(before: list, after: list) -> Optional[str]:
    """None if ``after`` is an in-order subsequence of ``before``, else the first stray point."""
    it = iter(_key(p) for p in before)
    for q in after:
        k = _key(q)
        if not any(k == b for b in it):
            return f"step {q[0]} (value {_fmt_payload(q[2])}) is not an original point, in order"
    return None


def _compare_tag(mode: str, backend: str, before: TagView, after: TagView) -> Optional[str]:
    """None when the tag meets its mode on this backend, else why not."""
    if before.kind != after.kind:
        return f"data class {before.kind} became {after.kind}"
    if before.metadata != after.metadata:
        return "summary metadata differs"
    if mode == GRAPH_ROUTE_IDENTICAL:
        # the stored graphs differ by design; the graph check compares what the route serves
        def shape(points):
            return [(p[0], struct.pack("<d", p[1]), len(p[2])) for p in points]

        if shape(before.points) != shape(after.points):
            return _first_difference(before.points, after.points)
        return None
    if exact_on(mode, backend):
        if [_key(p) for p in before.points] != [_key(p) for p in after.points]:
            return _first_difference(before.points, after.points)
        if mode in DEFAULT_VIEW_MODES and before.display_steps != after.display_steps:
            return "displayed steps differ"
        return None
    stray = _is_subsequence(before.points, after.points)
    if stray:
        return stray
    if mode != REMOVED and before.points:
        kept = {_key(p) for p in after.points}
        required = (("first", before.points[0]), ("last", before.points[-1]))
        if mode == DEFAULT_VIEW_EXACT:
            required = required[1:]  # only the last: the first step may be gone off Rust
        for label, p in required:
            if _key(p) not in kept:
                return f"{label} point (step {p[0]}) was not kept"
    return None


def _compare_plugin(plugin: str, mode: str, backend: str, before: RunView,
                    after: RunView) -> tuple[list[str], str]:
    """(failures, summary) for one plugin on one backend."""
    b_tags = before.plugins.get(plugin, {})
    a_tags = after.plugins.get(plugin, {})
    failures = [f"tag {t!r} is new after reduction" for t in sorted(set(a_tags) - set(b_tags))]
    for tag in sorted(b_tags):
        if tag not in a_tags:
            if mode != REMOVED:
                failures.append(f"tag {tag!r} is missing after reduction")
            continue
        why = _compare_tag(mode, backend, b_tags[tag], a_tags[tag])
        if why:
            failures.append(f"tag {tag!r}: {why}")
    n_before = sum(len(t.points) for t in b_tags.values())
    n_after = sum(len(t.points) for t in a_tags.values())
    return failures, _summary(plugin, mode, backend, len(b_tags), len(a_tags), n_before, n_after)


def _summary(plugin, mode, backend, tags_before, tags_after, n_before, n_after) -> str:
    if mode == GRAPH_ROUTE_IDENTICAL:
        return f"{plugin}: {tags_before} tags, {n_before} points at the same steps (graph content: see graph)"
    if exact_on(mode, backend):
        what = "identical" if mode == IDENTICAL else "default view identical"
        return f"{plugin}: {plural(tags_before, 'tag')}, {plural(n_before, 'point')} {what}"
    if mode == REMOVED and tags_after == 0:
        return f"{plugin}: {plural(tags_before, 'tag')} removed as allowed"
    if mode == DEFAULT_VIEW_EXACT:
        return (f"{plugin}: {tags_after}/{tags_before} tags, {n_after}/{n_before} points kept, "
                "all original, last kept; first step may differ on --load_fast=false")
    return (f"{plugin}: {tags_after}/{tags_before} tags, {n_after}/{n_before} points kept, "
            f"all original" + ("" if mode == REMOVED else ", first & last kept"))


def _plugin_checks(pairs, exp: Expectations) -> list[Check]:
    plugins = sorted({p for v0, v1 in pairs.values() for p in (*v0.plugins, *v1.plugins)})
    out = []
    for plugin in plugins:
        mode = exp.mode_for(plugin)
        results: dict[str, tuple[bool, str]] = {}
        for backend, (before, after) in pairs.items():
            failures, summary = _compare_plugin(plugin, mode, backend, before, after)
            if failures:
                more = f" (+{len(failures) - 3} more)" if len(failures) > 3 else ""
                text = f"{plugin} [{mode}]: " + "; ".join(failures[:3]) + more
                results[backend] = (False, text)
            else:
                results[backend] = (True, summary)
        out.extend(_group(results, plugin))
    return out


def _graph_checks(pairs, exp: Expectations) -> list[Check]:
    results = {}
    mode = exp.plugin_modes.get(views.GRAPHS_PLUGIN, exp.graph)
    for b, (before, after) in pairs.items():
        if mode == GRAPH_ROUTE_IDENTICAL and before.graph is not None:
            if before.graph_route is not None and before.graph_route == after.graph_route:
                results[b] = (True, "graph: the graphs route serves the identical run graph "
                                    "(attribute values over 1 KB listed as too large to show)")
            else:
                results[b] = (False, f"graph [{mode}]: the graphs route's run graph "
                                     f"{'changed' if after.graph else 'is missing after reduction'}")
        elif before.graph == after.graph:
            text = "graph: run graph identical" if before.graph else "graph: no run graph"
            results[b] = (True, text)
        elif exp.graph == REMOVED and after.graph is None:
            results[b] = (True, "graph: run graph removed as allowed")
        else:
            results[b] = (False, f"graph [{exp.graph}]: run graph "
                                 f"{'changed' if after.graph else 'missing after reduction'}")
    return _group(results, "graph")


# --- scalar series for the UI ------------------------------------------------------------


def _json_float(x: float) -> Any:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _thin(points: list, limit: int = SERIES_MAX_POINTS) -> list:
    """At most ``limit`` evenly spaced points, always including the first and last."""
    n = len(points)
    if n <= limit:
        idx = range(n)
    else:
        idx = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return [[points[i][0], _json_float(points[i][2])] for i in idx]


def _scalar_series(pairs) -> dict:
    """``{tag: {"before": [[step, value]...], "after": [...]}}`` from the first backend."""
    readable = [pair for pair in pairs.values() if not (pair[0].fatal or pair[1].fatal)]
    if not readable:
        return {}
    before, after = readable[0]  # Python when present; every point is stored either way
    b_tags = before.plugins.get("scalars", {})
    a_tags = after.plugins.get("scalars", {})
    return {
        tag: {
            "before": _thin(b_tags[tag].points) if tag in b_tags else [],
            "after": _thin(a_tags[tag].points) if tag in a_tags else [],
        }
        for tag in sorted(set(b_tags) | set(a_tags))
    }


# --- per-tag summaries for the UI (what the policy touched) ---------------------------------


def _first_readable(pairs):
    readable = [pair for pair in pairs.values() if not (pair[0].fatal or pair[1].fatal)]
    return readable[0] if readable else None


def _steps(tag: Optional[TagView]) -> list:
    if tag is None:
        return []
    shown = tag.display_steps if tag.display_steps is not None else [p[0] for p in tag.points]
    return list(shown)


def _distribution(tag: Optional[TagView], step) -> Optional[list]:
    """``[[left, right, count], ...]`` of a histogram at ``step`` (None if absent or not one)."""
    if tag is None:
        return None
    point = next((p for p in tag.points if p[0] == step), None)
    if point is None or not isinstance(point[2], TensorPayload):
        return None
    import numpy as np

    payload = point[2]
    if payload.dtype == "bytes" or len(payload.shape) != 2 or payload.shape[1] != 3:
        return None
    arr = np.frombuffer(payload.data, dtype=np.dtype(payload.dtype)).reshape(payload.shape)
    if arr.shape[0] > SUMMARY_MAX_BUCKETS:
        # merge neighbouring buckets (counts summed) so the stored shape stays bounded
        groups = np.array_split(np.arange(arr.shape[0]), SUMMARY_MAX_BUCKETS)
        arr = np.array([[arr[g[0], 0], arr[g[-1], 1], arr[g, 2].sum()] for g in groups if len(g)])
    def short(x: float) -> Any:
        return _json_float(float(f"{x:.6g}")) if math.isfinite(x) else _json_float(x)

    return [[short(a), short(b), short(c)] for a, b, c in arr.tolist()]


def _samples(before: Optional[TagView], after: Optional[TagView], steps: list, skip: int = 0) -> list:
    """Per shown step: how many samples each side holds and whether they are the same bytes
    (``skip``: leading blobs that are not samples, the width and height of an image summary)."""
    b = {p[0]: p[2] for p in (before.points if before else [])}
    a = {p[0]: p[2] for p in (after.points if after else [])}
    out = []
    for s in steps:
        vb, va = b.get(s), a.get(s)
        out.append({"step": s, "before": max(0, len(vb) - skip) if isinstance(vb, tuple) else 0,
                    "after": max(0, len(va) - skip) if isinstance(va, tuple) else 0,
                    "same": vb is not None and vb == va})
    return out


def _tag_summaries(pairs) -> dict:
    """What the dashboards show per tag, before and after, for every plugin but scalars (their
    curves are in ``scalar_series``); bounded so a manifest stays small whatever the run."""
    pair = _first_readable(pairs)
    if pair is None:
        return {}
    before, after = pair
    out: dict = {}
    for plugin in sorted(set(before.plugins) | set(after.plugins)):
        if plugin == "scalars":
            continue
        b_tags, a_tags = before.plugins.get(plugin, {}), after.plugins.get(plugin, {})
        tags = sorted(set(b_tags) | set(a_tags))
        per: dict = {}
        for tag in tags[:SUMMARY_MAX_TAGS]:
            tb, ta = b_tags.get(tag), a_tags.get(tag)
            sb, sa = _steps(tb), _steps(ta)
            entry = {
                "points": [len(tb.points) if tb else 0, len(ta.points) if ta else 0],
                "shown": [sb[-SUMMARY_MAX_STEPS:], sa[-SUMMARY_MAX_STEPS:]],
                "same_shown": sb == sa and all(
                    _same_payload(x[2], y[2])
                    for x, y in zip([p for p in (tb.points if tb else []) if p[0] in set(sb)],
                                    [p for p in (ta.points if ta else []) if p[0] in set(sa)])),
            }
            if (tb or ta).kind == views.BLOB_SEQUENCE:
                shown = sorted(set(sb) | set(sa))[-SUMMARY_MAX_STEPS:]
                entry["samples"] = _samples(tb, ta, shown,
                                            skip=IMAGE_HEADER_BLOBS if plugin == "images" else 0)
            elif plugin == "histograms":
                last = sb[-1] if sb else (sa[-1] if sa else None)
                if last is not None:
                    entry["distribution"] = {"step": last, "before": _distribution(tb, last),
                                             "after": _distribution(ta, last)}
            per[tag] = entry
        out[plugin] = {"tags": per, "tag_count": len(tags)}
    return out


def _graph_summary(pairs) -> dict:
    pair = _first_readable(pairs)
    if pair is None:
        return {}
    return {"before": pair[0].graph, "after": pair[1].graph,
            "nodes": [pair[0].graph_nodes, pair[1].graph_nodes]}
