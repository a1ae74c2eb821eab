"""Rewrite event files record by record, keeping exactly what the dashboard shows.

Two passes over a run, both streaming:

1. **Selection** (``select_run``, once per run, cached for the run's other files): every
   event file of the run is read in TensorBoard's order (file name order) and each record is
   classified; the *records* of the tags that may be downsampled are remembered as
   ``(position, step)`` pairs only (16 bytes a record, no payload), plus one byte a record
   for the keep mask. For "dashboard-exact" tags the Rust data server (TensorBoard's default
   reader) is asked what it retains of the original run, and exactly those records are kept
   (see *Dashboard-exact* below).
2. **Rewrite** (``rewrite_event_file``): each file is copied frame by frame (the exact
   original framed bytes, CRCs included) skipping the records the mask drops, except the few
   records the selection re-encodes on purpose (``Selection.subs``: a carried metadata, a
   graph without its large attribute values), which keep their step, wall time and values and
   are reported with the original record's sha256 so the record-level verification matches
   each one to the record it stands for. Memory is one read buffer (plus one re-encoded
   record); the source is hashed on the way and must match the backup's sha256.

What is always kept, byte for byte and in order: the ``file_version`` record, every
``session_log`` record, every record with a value of a protected plugin (scalars, hparams,
text), log messages, source metadata, unparseable records, and every record whose tag is
not bound to a downsampled plugin. Multi-value events: a record is dropped only if *every*
value in it may be dropped; a tag that ever shares a record with another tag is kept in full
(dropping part of it would add or remove points of the other tags), and so is a tag with two
values in one record.

**Summary metadata.** TensorBoard binds a tag to its plugin from the first value it sees
(the Rust server from the very first value, Python from the first value carrying metadata,
TF2 writers put it only there). A downsampled tag therefore always keeps its first record
(also because the Python backend must keep showing the first step), and also its first
metadata-carrying record if that is a later one — except in default-view mode, below. The
first kept record of every tag carries exactly the metadata TensorBoard bound the tag to in
the original; the reader-level verification compares the metadata both backends report.

**Steps increasing per tag.** A tag whose steps ever go backwards or repeat (a restart), a
tag whose points Python would purge at a ``SessionLog.START`` restart, and every tag of a
run with pre-v2 event files whose summary steps are out of order (Python then purges by
step order, and dropping records would change what it purges) is kept in full. A kept
subset of a strictly increasing series is strictly increasing, so neither backend's
preemption or purge logic sees anything different.

**Dashboard-exact.** The Rust data server keeps, per tag, a reservoir sample (100 tensors,
10 blob sequences), always with the last point, seeded so it is deterministic. The records
it retains on the original run are kept. The first record must stay too (see above); when
the server did not retain it, keeping it alone would change the server's sample of the
reduced run (101 items would be sampled again). Instead, "filler" records are added between
the retained ones so that the server's own sampling of the reduced series discards exactly
the first record and the fillers: for a strictly increasing series of ``n`` items the
positions the server keeps depend only on ``n`` and its fixed seed, and they are measured by
asking the server itself (``kept_positions``, a probe run of ``n`` tiny points), never by
re-implementing its random number generator. With TensorBoard 2.21 (data server 0.7.2) a
10-item blob reservoir needs one extra record (11 items, the first is discarded: always
possible) and a 100-item tensor reservoir 113-121 fillers (213-221 items), which is only
possible for series of ~10,000 records or more (measured: none for 250-8,000 records except
near-trivial savings, 213-267 items from 9,000 on): the server's sample of a shorter series has
adjacent records with no room for fillers. When no arrangement exists the tag is kept in full
and the selection says why.

**Default-view mode** (``downsample: "default_view"``, archive's default): keep exactly the
server's records and drop the first one when the server does not show it. ~100/N of every
series for every length, but the other backend (Python, ``--load_fast=false``) then shows the
last step and not necessarily the first: such plugins are verified with the
``default_view_exact`` mode of ``verify.compare`` (Rust view identical, Python a subset with
the last point), and the notes say per tag which steps are kept. The first kept record must
bind the tag as the first record did: it carries the same metadata (tensorboardX/PyTorch
legacy values, TF 2.x metadata on every value), or none — a tag whose metadata is only on its
first record (TF2 writers' default) — and then the first record's metadata is copied onto it
(``CARRY_METADATA``: one re-encoded record per tag; step, wall time and value unchanged). A
tag whose first kept record carries *different* metadata is kept in full, and the selection
says why.

**Per-tag caps** (``keep_per_tag``): ``N`` records evenly spaced by step, first and last
always included (plus the metadata carrier); every backend sees a subset of the original.

**Graphs.** Byte-identical repeats of ``graph_def`` / ``meta_graph_def`` records are dropped,
but the records each backend displays are kept, so the run graph reads identically:
TensorBoard's Python reader shows the first graph record of each step, the Rust server the
ones that survive its step preemption (usually the last), and the Python accumulator the
newest meta graph. **Large attributes** (``strip_large_graph_attrs``, opt-in): a
``graph_def`` whose top-level nodes carry attribute values over 1 KB (embedded constants) is
re-encoded with exactly what TensorBoard's ``process_graph.prepare_graph_for_ui`` serves for
``limit_attr_size=1024`` (see ``graph_attrs``), and so is the copy of the graph a
``meta_graph_def`` embeds (``META_GRAPH_ATTRS``: no backend shows it, every other field of it
is kept); the run graph is then verified by the graphs route's graph
(``GRAPH_ROUTE_IDENTICAL_MODE``). **Run metadata** (``tagged_run_metadata``
events and ``graph_run_metadata`` summaries: step stats) is dropped only with the opt-in
``strip_run_metadata`` (its tags then leave the Graphs dashboard).
``graph_run_metadata_graph`` (the traced graph) is always kept.

Why one module: the selection and the rewrite are one contract. What the
rewrite may skip, re-encode or must copy byte for byte is decided by the selection's rules
(first record, metadata carrier, fillers, graph repeats, restarts) over one private state
(``_RunSelection``, the keep mask, ``Selection.subs``), and the rewrite's sha256 and record
checks rely on exactly those rules; split, a rule and the code relying on it would sit in two
files. The pieces that stand alone (reservoir probe, even spacing) are small helpers of it.
"""
from __future__ import annotations

import bisect
import collections
import hashlib
import os
import shutil
import threading
from array import array
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import TagKeep
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.scan import eventfile, passes
from tb_footprint_plugin.scan.tfrecord import RecordReader, RecordWriter, frame, masked_crc32c
from tb_footprint_plugin.plan.rules import (DASHBOARD_EXACT, DEFAULT_VIEW, DEFAULT_VIEW_EXACT_MODE,
                                            GRAPH_ROUTE_IDENTICAL_MODE, RUST_CAPACITY, Rules)
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.files import CHUNK, fsync_file, open_staged
from tb_footprint_plugin.storage.hashing import HashingReader, ThreadedHashingReader
from tb_footprint_plugin.storage.regular import open_regular
from tb_footprint_plugin.formats import graph_attrs

#: Substitutions (kept records re-encoded): large graph attribute values dropped; a tag's
#: first metadata copied onto its first kept record.
GRAPH_ATTRS = "graph_attrs"
META_GRAPH_ATTRS = "meta_graph_attrs"  # the same, in the graph a MetaGraphDef embeds
CARRY_METADATA = "carry_metadata"

#: Verification modes by strictness (a plugin whose tags were reduced in different ways gets
#: the weakest, which all of them meet).
_STRICTNESS = {"default_view_identical": 3, DEFAULT_VIEW_EXACT_MODE: 2, "subset": 1, "removed": 0}
_DASHBOARD_EXACT_WHY = "dashboard-exact"
_DEFAULT_VIEW_WHY = "default-view (first step not forced)"
_TAG_NOTES = 20  # reduced tags described one by one in the notes
_REC_BITS = 40  # global record id = file index << 40 | record index in the file
_REC_MASK = (1 << _REC_BITS) - 1


class RewriteError(RuntimeError):
    """The file cannot be rewritten safely (changed, damaged, or inconsistent with the plan)."""


# ---------------------------------------------------------------------------------------
# the Rust server's kept positions, measured on probe runs
# ---------------------------------------------------------------------------------------
_PROBE_LOCK = threading.Lock()
_PROBE_CACHE: Dict[Tuple[str, int], Dict[int, Tuple[int, ...]]] = {}
PROBE_PLUGIN = "footprint_probe"


def kept_positions(capacity: int, max_n: Optional[int] = None) -> Dict[int, Tuple[int, ...]]:
    """``{n: positions the Rust data server keeps}`` for a strictly increasing series of ``n``
    items (``capacity < n <= max_n``) in a reservoir of ``capacity``, measured once per
    process by asking the server itself on a probe run (one tag per length)."""
    from tb_footprint_plugin.formats import views

    binary = views.data_server_binary()
    if binary is None:
        raise RewriteError("the Rust data server is not available")
    max_n = max_n or (4 * capacity + 20)
    key = (binary, capacity)
    with _PROBE_LOCK:
        table = _PROBE_CACHE.get(key)
        if table is not None and max(table, default=0) >= max_n:
            return table
        tmp = scratch.make("probe")  # in the vault during an operation: a killed process's is swept
        try:
            run = os.path.join(tmp, "probe")
            os.makedirs(run)
            lengths = range(capacity + 1, max_n + 1)
            _write_probe(os.path.join(run, "events.out.tfevents.0.probe"), lengths)
            view = views.read_view(run, "rust", {PROBE_PLUGIN: capacity}, timeout_s=300)
            if view.fatal:
                raise RewriteError(f"probe of the data server failed: {view.fatal}")
            tags = view.plugins.get(PROBE_PLUGIN, {})
            table = {}
            for n in lengths:
                tv = tags.get(f"n{n:06d}")
                if tv is None:
                    raise RewriteError(f"probe: the data server did not list series of length {n}")
                steps = tuple(p[0] for p in tv.points)
                if len(steps) != capacity or steps[-1] != n - 1 or list(steps) != sorted(set(steps)):
                    raise RewriteError(f"probe: unexpected sample for length {n} (capacity {capacity})")
                table[n] = steps
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _PROBE_CACHE[key] = table
        return table


def _write_probe(path: str, lengths: Iterable[int]) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

    md = summary_pb2.SummaryMetadata(data_class=summary_pb2.DATA_CLASS_TENSOR)
    md.plugin_data.plugin_name = PROBE_PLUGIN
    with open(path, "wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
        for n in lengths:
            tag = f"n{n:06d}"
            for s in range(n):
                v = summary_pb2.Summary.Value(tag=tag, tensor=tensor_pb2.TensorProto(
                    dtype=types_pb2.DT_INT32, int_val=[s]))
                if s == 0:
                    v.metadata.CopyFrom(md)
                ev = event_pb2.Event(wall_time=2.0 + s, step=s, summary=summary_pb2.Summary(value=[v]))
                w.write(ev.SerializeToString())


def arrange_fillers(retained: Sequence[int], extras: Sequence[int], table: Dict[int, Tuple[int, ...]],
                    capacity: int) -> Optional[List[int]]:
    """Stream indices to keep so that a reservoir of ``capacity`` keeps exactly ``retained``.

    ``retained``: sorted indices (``capacity`` of them, the last one the series' last);
    ``extras``: indices that must be kept too. Returns the sorted selection (retained +
    extras + fillers), or None when no length in ``table`` admits an arrangement. Indices
    are positions in a strictly increasing series, so any subset keeps steps increasing.
    """
    if len(retained) != capacity:
        return None
    extra_in_gap: Dict[int, List[int]] = collections.defaultdict(list)
    for e in sorted(set(extras) - set(retained)):
        g = bisect.bisect_left(retained, e)
        if g >= capacity:
            return None  # after the last retained item: the server would keep it
        extra_in_gap[g].append(e)
    n_extra = sum(len(v) for v in extra_in_gap.values())
    avail = [retained[i] - (retained[i - 1] if i else -1) - 1 for i in range(capacity)]
    for n in sorted(table):
        if n < capacity + n_extra:
            continue
        kept = table[n]
        gaps = [kept[i] - (kept[i - 1] if i else -1) - 1 for i in range(capacity)]
        if all(len(extra_in_gap.get(i, ())) <= g <= avail[i] for i, g in enumerate(gaps)):
            out = list(retained)
            for i, g in enumerate(gaps):
                if g:
                    lo = retained[i - 1] + 1 if i else 0
                    out += _pick(lo, retained[i], g, extra_in_gap.get(i, []))
            return sorted(out)
    return None


def _pick(lo: int, hi: int, k: int, must: List[int]) -> List[int]:
    """``k`` indices of ``range(lo, hi)``: ``must`` plus evenly spaced others."""
    chosen = set(must)
    need = k - len(chosen)
    if need > 0:
        free = [i for i in range(lo, hi) if i not in chosen]
        step = len(free) / need
        chosen.update(free[int(j * step)] for j in range(need))
    return sorted(chosen)


def evenly_spaced(steps: Sequence[int], k: int) -> List[int]:
    """Indices of ``k`` items of a strictly increasing ``steps`` evenly spaced by step,
    always the first and the last (the nearest item to each target step)."""
    n = len(steps)
    if n <= k:
        return list(range(n))
    lo, hi = steps[0], steps[-1]
    chosen = {0, n - 1}
    for j in range(1, k - 1):
        target = lo + (hi - lo) * j / (k - 1)
        i = bisect.bisect_left(steps, target)
        if i > 0 and (i >= n or target - steps[i - 1] <= steps[i] - target):
            i -= 1
        chosen.add(i)
    # nearest-step collisions (uneven steps): top up with the widest remaining gaps
    if len(chosen) < k:
        rest = sorted(set(range(n)) - chosen)
        for i in rest[:: max(1, len(rest) // (k - len(chosen)))][: k - len(chosen)]:
            chosen.add(i)
    return sorted(chosen)


# ---------------------------------------------------------------------------------------
# selection (one pass over the run)
# ---------------------------------------------------------------------------------------
@dataclass
class _Stream:
    """The records of one downsampleable tag, in run order."""

    plugin: str
    mode: object  # DASHBOARD_EXACT, DEFAULT_VIEW or int
    ids: array = field(default_factory=lambda: array("q"))
    steps: array = field(default_factory=lambda: array("q"))
    meta0: Optional[bytes] = None  # serialized metadata of the first record (None: none)
    same_meta: bytearray = field(default_factory=bytearray)  # 1: same metadata as the first
    has_meta: bytearray = field(default_factory=bytearray)  # 1: the value carries metadata
    meta_first: Optional[int] = None  # stream index of the first value carrying metadata
    carrier: Optional[int] = None  # stream index of the kept record the first's metadata is copied to
    pinned: Optional[str] = None  # why the tag is kept in full
    relaxed: bool = False  # DEFAULT_VIEW applied: verified with DEFAULT_VIEW_EXACT_MODE

    def pin(self, why: str) -> None:
        if self.pinned is None:
            self.pinned = why


@dataclass
class Selection:
    """What to keep of each event file of a run (the result of ``select_run``)."""

    run_dir: str
    masks: Dict[str, bytearray]  # file name -> 1 byte per good record: 1 keep, 0 drop
    codes: Dict[str, bytearray]  # file name -> category code of each record (stats)
    code_names: List[str]
    expectations: Dict[str, str]  # plugin -> verification mode
    notes: List[str]
    signature: tuple
    tags: Dict[str, dict] = field(default_factory=dict)  # tag -> summary (plugin, before, after, how)
    #: file name -> {record index: substitution}: kept records whose bytes change (the event is
    #: re-encoded): ``(GRAPH_ATTRS,)`` or ``(CARRY_METADATA, tag, serialized SummaryMetadata)``
    subs: Dict[str, Dict[int, tuple]] = field(default_factory=dict)
    #: file name -> what the selection pass read of it (sha256, each record's offset and size):
    #: the copy then reads only the kept records (``rewrite_event_file``'s ``facts``)
    facts: Dict[str, object] = field(default_factory=dict)


def _files_signature(run_dir: str, names: Sequence[str]) -> tuple:
    out = []
    for n in names:
        st = os.stat(os.path.join(run_dir, n))
        out.append((n, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def event_file_names(run_dir: str) -> List[str]:
    """Event files directly in ``run_dir`` in TensorBoard's reading order (by name)."""
    from tb_footprint_plugin.verify.records import event_file_names as names

    return names(run_dir)


_SEL_LOCK = threading.Lock()
_SEL_CACHE: "collections.OrderedDict[tuple, Selection]" = collections.OrderedDict()


def selection_for(run_dir: str, rules: Rules, rewritten: Sequence[str], original=None) -> Selection:
    """``select_run`` cached per (run, rules, files, their sizes and mtimes). ``original``
    (``verify.original.OriginalRun``): see ``select_run``; a cached selection leaves it empty."""
    names = event_file_names(run_dir)
    key = (os.path.realpath(run_dir), repr(sorted(rules.to_params().items())), tuple(sorted(rewritten)),
           _files_signature(run_dir, names))
    with _SEL_LOCK:
        sel = _SEL_CACHE.get(key)
        if sel is not None:
            _SEL_CACHE.move_to_end(key)
    if sel is not None:
        if original is not None and not original.files:
            # the plan made this selection (``plan_rewrite``): its pass is this reduce's
            for name, facts in sel.facts.items():
                original.add_file(name, facts)
        return sel
    sel = select_run(run_dir, rules, rewritten, original=original)
    with _SEL_LOCK:
        global _sel_cache_records
        old = _SEL_CACHE.pop(key, None)
        if old is not None:
            _sel_cache_records -= _records(old)
        if not _SEL_CACHE:
            _sel_cache_records = 0  # emptied from outside (a test's clear): start the count again
        _SEL_CACHE[key] = sel
        _sel_cache_records += _records(sel)
        # a running total: summing every cached selection at each insert was quadratic in the
        # runs a plan rewrites
        while len(_SEL_CACHE) > 1 and _sel_cache_records > _SEL_CACHE_RECORDS:
            _k, dropped = _SEL_CACHE.popitem(last=False)
            _sel_cache_records -= _records(dropped)
    return sel


#: records of the cached selections (~10 bytes each: mask, code, size, CRC): a plan caches one
#: selection per run it rewrites, so that the reduce that follows applies exactly that one
_SEL_CACHE_RECORDS = 8_000_000
_sel_cache_records = 0  # records of the selections in _SEL_CACHE (under _SEL_LOCK)


def _records(sel: "Selection") -> int:
    return sum(len(m) for m in sel.masks.values())


@dataclass
class FileOutcome:
    """What the rewrite of one event file leaves, computed from its selection (nothing written)."""

    name: str
    size_before: int
    size_after: int
    records_before: int
    records_after: int
    substituted: int
    #: selection category (plugin, ``graph_def``, ...) -> [records, framed bytes] removed
    removed: Dict[str, List[int]]
    #: selection category -> bytes a re-encoded record adds (negative: removes)
    resized: Dict[str, int]

    @property
    def unchanged(self) -> bool:
        """The rewrite would write the very same bytes: nothing dropped, nothing re-encoded."""
        return self.records_after == self.records_before and not self.substituted


@dataclass
class RewriteOutcome:
    """``plan_rewrite``'s answer: the files whose rewrite changes them, and what each leaves."""

    rewritten: List[str]
    files: Dict[str, FileOutcome]
    notes: List[str]
    tags: Dict[str, dict]
    expectations: Dict[str, str]


def plan_rewrite(run_dir: str, rules: Rules, candidates: Sequence[str]) -> RewriteOutcome:
    """The rewrite's own selection, made at plan time (a dry computation, cached for the reduce
    that follows: ``selection_for``), and the exact bytes each rewritten file will have.

    Files whose rewrite would copy every record unchanged are left out of ``rewritten`` (no
    backup, no new file); the selection is then made again over the rest, since a file kept
    whole is part of what the others' selection must keep."""
    rewritten = sorted(set(candidates))
    outcomes: Dict[str, FileOutcome] = {}
    sel = None
    for _ in range(len(rewritten) + 1):
        if not rewritten:
            break
        sel = selection_for(run_dir, rules, rewritten)
        outcomes = {n: file_outcome(run_dir, sel, n) for n in rewritten}
        changed = [n for n in rewritten if not outcomes[n].unchanged]
        if changed == rewritten:
            break
        rewritten = changed
    if sel is None:
        return RewriteOutcome([], {}, [], {}, {})
    if not rewritten:  # nothing changes: the tags it reports say why (kept in full: a restart, ...)
        return RewriteOutcome([], {}, list(sel.notes), {t: r for t, r in sel.tags.items()
                                                         if r["kept"] == r["records"]}, {})
    return RewriteOutcome(rewritten, outcomes, list(sel.notes), dict(sel.tags), dict(sel.expectations))


def file_outcome(run_dir: str, sel: Selection, name: str) -> FileOutcome:
    """Bytes and records the rewrite of ``name`` leaves under ``sel`` (the records it keeps,
    framed as they are, plus each re-encoded record at its new size)."""
    import numpy as np

    facts = sel.facts.get(name)
    mask = sel.masks[name]
    if facts is None or len(facts.sizes) != len(mask):
        raise RewriteError(f"{name}: changed while it was being analysed")
    sizes = np.asarray(facts.sizes, dtype=np.int64)
    keep = np.frombuffer(bytes(mask), dtype=np.uint8) != 0
    codes = np.frombuffer(bytes(sel.codes[name]), dtype=np.uint8)
    removed: Dict[str, List[int]] = {}
    gone = ~keep
    if gone.any():
        cv = codes[gone]
        counts = np.bincount(cv)
        sums = np.bincount(cv, weights=sizes[gone].astype(np.float64))
        for c in np.flatnonzero(counts).tolist():
            label = sel.code_names[c] if c < len(sel.code_names) else "other"
            r = removed.setdefault(label, [0, 0])
            r[0] += int(counts[c])
            r[1] += int(round(sums[c]))
    resized: Dict[str, int] = {}
    after = int(sizes[keep].sum())
    subs = sel.subs.get(name) or {}
    if subs:
        offsets = facts.offsets()
        with open_regular(os.path.join(run_dir, name), buffering=0, follow_symlinks=True) as f:
            for ri, sub in sorted(subs.items()):
                data = os.pread(f.fileno(), int(sizes[ri]) - 16, int(offsets[ri]) + 12)
                if masked_crc32c(data) != int(facts.crcs[ri]):
                    raise RewriteError(f"{name}: a record changed since it was analysed")
                delta = len(substitute(data, sub)) - len(data)
                label = sel.code_names[codes[ri]] if codes[ri] < len(sel.code_names) else "other"
                resized[label] = resized.get(label, 0) + delta
                after += delta
    return FileOutcome(name, int(sizes.sum()) + int(facts.start), after, len(mask), int(keep.sum()),
                       len(subs), removed, resized)


def _file_version(s: str) -> Optional[float]:
    try:
        return float(s.split(":", 1)[1])
    except (IndexError, ValueError):
        return None


def select_run(run_dir: str, rules: Rules, rewritten: Sequence[str], *,
               rust_view=None, original=None, fast: bool = True) -> Selection:
    """Decide, for every record of every event file of ``run_dir``, keep or drop.

    Files not in ``rewritten`` are kept whole; their records still count (they are part of
    what TensorBoard reads). ``rust_view``: the Rust server's default view of the run, read
    here when a dashboard-exact tag needs it (tests may pass one).

    ``original`` (``verify.original.OriginalRun`` of this reduce): its Rust data server, if
    started, gives the default view (no load of its own), and the pass fills its ``files``
    (record index, tag index, sha256) for the verification of this reduce.

    ``fast=False`` parses every record in Python instead of classifying runs of plain records
    from the batch decode (``_batch``): the same decisions, slower; tests compare the two.
    """
    names = event_file_names(run_dir)
    signature = _files_signature(run_dir, names)
    missing = set(rewritten) - set(names)
    if missing:
        raise RewriteError(f"not event files of {run_dir}: {sorted(missing)}")
    sel = _RunSelection(run_dir, rules, names, set(rewritten))
    sel.original = original
    sel.fast = fast
    for fi, name in enumerate(names):
        sel.read_file(fi, name)
    sel.apply_restart_rules()
    sel.drop_run_metadata()
    sel.dedupe_graphs()
    sel.note_graph_attrs()
    tag_report = sel.downsample(sel.rust_view_for_exact_tags(rust_view))
    sel.note_tags(tag_report)
    return Selection(run_dir=run_dir, masks=sel.masks, codes=sel.codes, code_names=sel.code_names,
                     expectations=sel.expectations, notes=sel.notes, signature=signature, tags=tag_report,
                     subs=sel.subs, facts=sel.facts)


class _ReadBack:
    """The records of one batch of a kept scan pass, read back at their offsets when the
    selection needs their payload (``RecordBatch.payload``); a record whose CRC is not the
    one the scan read means the file changed since."""

    def __init__(self, fd: int, name: str, offsets, sizes, crcs):
        self.fd, self.name, self.offsets, self.sizes, self.crcs = fd, name, offsets, sizes, crcs

    def __len__(self) -> int:
        return len(self.sizes)

    def payload(self, i: int) -> bytes:
        size = int(self.sizes[i])
        data = os.pread(self.fd, size - 16, int(self.offsets[i]) + 12)
        if len(data) != size - 16 or masked_crc32c(data) != int(self.crcs[i]):
            raise RewriteError(f"{self.name}: the record at offset {int(self.offsets[i])} changed "
                               "since the scan read it")
        return data


class _RunSelection:
    """The state of ``select_run``: one pass over the run's records (``read_file``) gathers the
    streams, graphs and run metadata; the named steps after it decide what each drops."""

    def __init__(self, run_dir: str, rules: Rules, names: List[str], rewritten: set):
        self.run_dir, self.rules, self.names, self.rewritten = run_dir, rules, names, rewritten
        self.masks: Dict[str, bytearray] = {}
        self.codes: Dict[str, bytearray] = {}
        self.code_names = ["other"]
        self.code_of: Dict[str, int] = {}
        self.notes: List[str] = []
        self.expectations: Dict[str, str] = {}
        self.binding: Dict[str, str] = {}  # tag -> plugin, from its first value
        self.streams: Dict[str, _Stream] = {}
        self.graphs: Dict[str, List[Tuple[int, int, bytes]]] = {"graph_def": [], "meta_graph_def": []}
        self.drop_ids: List[int] = []  # run metadata to strip
        self.subs: Dict[str, Dict[int, tuple]] = {}
        # small records' bytes this selection may hold (its own passes' and kept ones'); a
        # bound per selection: reduces running at once (jobs) hold one each
        self.small_left = passes.MAX_SMALL_BYTES
        self.n_attrs = 0  # graph attribute values dropped
        self.file_version: Optional[float] = None
        self.seen_start = False
        self.purging_start = False
        self.v1_disorder = False
        self.most_recent_step = -1
        self.original = None  # verify.original.OriginalRun to fill, if any
        self.facts: Dict[str, object] = {}
        self.fast = True  # classify runs of plain records from the batch decode (``_batch``)

    # --- the pass -----------------------------------------------------------------------
    def code(self, name: str) -> int:
        c = self.code_of.get(name)
        if c is None:
            c = len(self.code_names) if len(self.code_names) < 255 else 0
            if c:
                self.code_names.append(name)
            self.code_of[name] = c
        return c

    def read_file(self, fi: int, name: str) -> None:
        """Every record of event file ``name`` (the ``fi``-th): kept for now, classified.

        The same pass hashes the file and notes where each record is (``FileFacts``), so the
        copy reads only the kept records, and, for this reduce's verification
        (``self.original``), folds the scan's tag index of the file."""
        from tensorboard.compat.proto import event_pb2

        from tb_footprint_plugin.scan import eventfile
        from tb_footprint_plugin.verify import original as orig

        path = os.path.join(self.run_dir, name)
        kept = passes.take(path, orig.stat_sig(path))
        if kept is not None:
            self._replay(fi, name, path, kept)
            return
        mask = bytearray()
        cls = bytearray()
        # the vectorised decode also speeds up classification (``_batch``): folded at plan time
        # as in a reduce, so the plan and the reduce classify every record the same way
        fold = eventfile.StatsFold(name) if self.fast else None
        offsets, sizes, crcs = [], [], []
        # for this reduce's copy and verification, as a kept scan pass does (``scan.passes``);
        # released with the reduce's ``original``, so cached selections hold no record bytes
        small = passes.SmallBytes(self.small_left if self.original is not None else 0)
        parse = event_pb2.Event.FromString
        # never a FIFO or device (an open would block forever); a symlink to a file is fine
        with open_regular(path, buffering=0, follow_symlinks=True) as raw:
            before = orig.stat_sig(path)
            hin = ThreadedHashingReader(raw)
            try:
                reader = RecordReader(hin, verify=True, display_name=name)
                for batch in reader.batches():
                    if fold is not None:
                        fold.add(batch)
                    if not offsets:  # only where the first record is: the rest follow back to back
                        offsets.append(batch.starts[:1] + batch.base)
                    sizes.append(batch.sizes)
                    crcs.append(batch.crcs())
                    ri = len(mask)
                    mask.extend(b"\1" * len(batch))
                    cls.extend(bytes(len(batch)))
                    self._batch(batch, fold.decoded() if fold is not None else None, name, fi, ri,
                                cls, parse)
                    small.add(batch, len(mask))
                while hin.read(CHUNK):  # a damaged tail is hashed too
                    pass
            finally:
                sha = hin.hexdigest()  # also stops the hashing thread on an error
            after = orig.stat_sig(path)
        if reader.status != "ok" and name in self.rewritten:
            raise RewriteError(f"{name}: {reader.status} at offset {reader.error_offset}; "
                               "a damaged file is never rewritten")
        self.masks[name] = mask
        self.codes[name] = cls
        if before is not None and before == after:
            facts = orig.FileFacts.build(name, sha, before, offsets, sizes, crcs,
                                         fold.finish(reader) if fold is not None else None,
                                         reader.status, small.joined(), small.upto)
            self.small_left -= len(facts.small)
            self.facts[name] = facts
            if self.original is not None:
                self.original.add_file(name, facts)

    def _replay(self, fi: int, name: str, path: str, kept) -> None:
        """``read_file`` from this reduce's scan of the file (``scan.passes``): its batches'
        decode classifies the records again without reading the file; the few records that
        need a full parse are read at their offsets and checked against the CRC the scan saw.
        The facts carry the scan's sha256, which the copy compares with the backup's."""
        from tensorboard.compat.proto import event_pb2

        from tb_footprint_plugin.verify import original as orig

        n = kept.records
        mask = bytearray(b"\1" * n)
        cls = bytearray(n)
        offsets = kept.offsets()
        parse = event_pb2.Event.FromString
        with open_regular(path, buffering=0, follow_symlinks=True) as f:
            for b in kept.batches:
                at = slice(b.first, b.first + b.n)
                batch = _ReadBack(f.fileno(), name, offsets[at], kept.sizes[at], kept.crcs[at])
                self._batch(batch, b.decoded if self.fast else None, name, fi, b.first, cls, parse)
        if orig.stat_sig(path) != kept.stat:
            raise RewriteError(f"{name}: changed while it was being analysed")
        self.masks[name] = mask
        self.codes[name] = cls
        # the small records' bytes travel only with this reduce's ``original``, which releases
        # them when the reduce is over (a cached selection keeps no record bytes)
        small = (kept.small, kept.small_upto) if self.original is not None else (b"", 0)
        self.small_left -= len(small[0])
        facts = orig.FileFacts(name, kept.sha256, kept.stat, kept.sizes, kept.crcs, kept.stats,
                               "ok", kept.start, *small)
        self.facts[name] = facts
        if self.original is not None:
            self.original.add_file(name, facts)

    def _batch(self, batch, dec, name: str, fi: int, ri0: int, cls: bytearray, parse) -> None:
        """Classify a batch's records, in order: record by record (``_event``), except runs of
        records that the tag index's decode of the batch (``StatsFold.decoded``) shows to be
        one-value summaries without metadata of tags already bound (torch and tensorboardX
        values past a run's first records), classified together (``_fast_run``) without
        parsing each in Python; a test checks both ways decide the same."""
        n = len(batch)
        payload = batch.payload

        def slow(a: int, b: int) -> None:
            for i in range(a, b):
                data = payload(i)  # a read-back record that changed raises (``_ReadBack``)
                try:
                    ev = parse(data)
                except Exception:  # unparseable: kept, TensorBoard skips it the same
                    continue
                self._event(ev, name, ri0 + i, (fi << _REC_BITS) | (ri0 + i), cls)

        for a, b, plain in eventfile.plain_runs(dec, n, self.binding.__contains__):
            if not plain:
                slow(a, b)
                continue
            _, tag_id, names, steps, _ = dec
            if not self._fast_run(tag_id[a:b], names, steps[a:b], fi, ri0 + a, cls):
                slow(a, b)

    def _fast_run(self, tag_id, names, steps, fi: int, ri0: int, cls: bytearray) -> bool:
        """``_event`` of consecutive one-value summaries without metadata of bound tags, at once.
        False (nothing done): a case left to the record-by-record path."""
        import numpy as np

        n = len(tag_id)
        uniq, inv = np.unique(tag_id, return_inverse=True)
        tags = [names[t] for t in uniq.tolist()]
        plugins = []
        for t in tags:
            plugin = self.binding.get(t)
            s = self.streams.get(t)
            if plugin is None or (s is not None and not s.ids) or (
                    plugin == "graph_run_metadata" and self.rules.strip_run_metadata):
                return False
            plugins.append(plugin)
        if not (self.file_version is not None and self.file_version >= 2):
            prev = np.concatenate(([self.most_recent_step], steps[:-1]))
            if (steps < prev).any():
                self.v1_disorder = True
        self.most_recent_step = int(steps[-1])
        cls[ri0:ri0 + n] = np.array([self.code(p) for p in plugins], dtype=np.uint8)[inv].tobytes()
        gid0 = (fi << _REC_BITS) | ri0
        for k, t in enumerate(tags):
            s = self.streams.get(t)
            if s is None:
                continue
            idx = np.flatnonzero(inv == k)
            st = steps[idx]
            if (s.steps and int(st[0]) <= s.steps[-1]) or (len(st) > 1 and (np.diff(st) <= 0).any()):
                s.pin("its steps go backwards or repeat (a restart)")
            m = len(idx)
            s.same_meta.extend((b"\1" if s.meta0 is None else b"\0") * m)
            s.has_meta.extend(bytes(m))
            s.ids.extend((idx + gid0).tolist())
            s.steps.extend(st.tolist())
        return True

    def _event(self, ev, name: str, ri: int, gid: int, cls: bytearray) -> None:
        what = ev.WhichOneof("what")
        step = ev.step
        if what == "file_version":
            self.file_version = _file_version(ev.file_version)
            return
        # Python's restart logic (plugin_event_accumulator._MaybePurgeOrphanedData)
        v2 = self.file_version is not None and self.file_version >= 2
        if what == "session_log":
            from tensorboard.compat.proto import event_pb2  # not per record: imports cost ~1 us

            if v2 and ev.session_log.status == event_pb2.SessionLog.START:
                if self.seen_start:
                    self.purging_start = True
                    for s in self.streams.values():
                        if s.steps and max(s.steps) >= step:
                            s.pin(f"Python's reader purges its points at a restart (step {step})")
                self.seen_start = True
            return
        if what in ("summary", "graph_def", "tagged_run_metadata"):
            # data_compat turns graph and run metadata events into summaries
            if not v2 and step < self.most_recent_step:
                self.v1_disorder = True
            self.most_recent_step = step
        if what in ("graph_def", "meta_graph_def"):
            self._graph(ev, what, name, ri, gid, cls)
            return
        if what == "tagged_run_metadata":
            cls[ri] = self.code("graph_tagged_run_metadata")
            if self.rules.strip_run_metadata:
                self.drop_ids.append(gid)
            return
        if what == "summary" and ev.summary.value:
            self._summary(ev.summary.value, step, ri, gid, cls)

    def _graph(self, ev, what: str, name: str, ri: int, gid: int, cls: bytearray) -> None:
        raw = ev.graph_def if what == "graph_def" else ev.meta_graph_def
        self.graphs[what].append((gid, ev.step, hashlib.sha256(raw).digest()))
        cls[ri] = self.code(what)
        if (self.rules.strip_large_graph_attrs and name in self.rewritten
                and len(raw) > graph_attrs.LIMIT_ATTR_SIZE):
            # every stored copy of the graph: the GraphDef and the one a MetaGraphDef embeds
            strip = graph_attrs.strip_graph_def if what == "graph_def" else graph_attrs.strip_meta_graph_def
            try:
                stripped = strip(raw)
            except Exception:  # noqa: BLE001 - not a graph TensorBoard can read: kept
                stripped = None
            if stripped is not None:
                self.subs.setdefault(name, {})[ri] = (GRAPH_ATTRS if what == "graph_def" else META_GRAPH_ATTRS,)
                self.n_attrs += stripped[1]

    def _summary(self, values, step: int, ri: int, gid: int, cls: bytearray) -> None:
        for v in values:
            if v.tag not in self.binding:
                kind = v.WhichOneof("value")
                self.binding[v.tag] = cat.LEGACY_PLUGIN.get(kind) or (
                    v.metadata.plugin_data.plugin_name if v.HasField("metadata") else "")
                mode = self.rules.mode(self.binding[v.tag])
                if mode is not None and kind is not None:
                    self.streams[v.tag] = _Stream(self.binding[v.tag], mode)
        if len(values) > 1:
            tags = {v.tag for v in values}
            for t in tags:
                if t in self.streams:
                    self.streams[t].pin("shares records with another tag" if len(tags) > 1
                                        else "several values in one record")
                    _append(self.streams[t], gid, step, values[0])
            return
        v = values[0]
        plugin = self.binding[v.tag]
        cls[ri] = self.code(plugin)
        if plugin == "graph_run_metadata" and self.rules.strip_run_metadata:
            self.drop_ids.append(gid)
            return
        s = self.streams.get(v.tag)
        if s is not None:
            _append(s, gid, step, v)

    # --- the decisions ----------------------------------------------------------------------
    def file_of(self, gid: int) -> str:
        return self.names[gid >> _REC_BITS]

    def drop(self, gid: int) -> None:
        self.masks[self.file_of(gid)][gid & _REC_MASK] = 0

    def apply_restart_rules(self) -> None:
        """Where Python's reader purges by step order (pre-v2 disorder, a restart), nothing that
        purge could touch is dropped."""
        if self.v1_disorder:
            self.notes.append("pre-v2 event file with out-of-order steps: TensorBoard's Python reader "
                              "purges by step order there, so nothing is dropped in this run")
            for s in self.streams.values():
                s.pin("out-of-order steps in a pre-v2 event file")
            self.drop_ids = []
        if self.purging_start and self.drop_ids:
            self.notes.append("run metadata kept: a SessionLog.START restart purges it in Python's reader")
            self.drop_ids = []

    def drop_run_metadata(self) -> None:
        for gid in self.drop_ids:
            if self.file_of(gid) in self.rewritten:
                self.drop(gid)
                plugin = self.code_names[self.codes[self.file_of(gid)][gid & _REC_MASK]]
                self.expectations[plugin] = "removed"

    def dedupe_graphs(self) -> None:
        if not self.rules.dedupe_graphs or self.v1_disorder or self.purging_start:
            return
        n_dropped = 0
        for kind, items in self.graphs.items():
            for gid in _graph_duplicates(kind, items):
                if self.file_of(gid) in self.rewritten:
                    self.drop(gid)
                    n_dropped += 1
        if n_dropped:
            self.notes.append(f"{n_dropped} byte-identical repeated graph record(s) dropped; the copies "
                              "each backend displays are kept")

    def note_graph_attrs(self) -> None:
        graph_subs = sum(1 for f in self.subs.values() for sub in f.values()
                         if sub[0] in (GRAPH_ATTRS, META_GRAPH_ATTRS))
        if graph_subs:
            self.expectations["graphs"] = GRAPH_ROUTE_IDENTICAL_MODE
            self.notes.append(f"{self.n_attrs} graph attribute value(s) over {graph_attrs.LIMIT_ATTR_SIZE} bytes "
                              f"dropped from {graph_subs} graph record(s) and listed under "
                              f"{graph_attrs.LARGE_ATTRS_KEY} (the Graphs dashboard shows them as \"Too large to "
                              "show...\")")

    def rust_view_for_exact_tags(self, rust_view):
        """The Rust server's default view when a dashboard-exact tag needs it (read here unless
        given); without one, those tags are kept in full."""
        exact = [t for t, s in self.streams.items() if not isinstance(s.mode, int) and not s.pinned
                 and len(s.ids) > min(RUST_CAPACITY.values())]
        if not exact or rust_view is not None:
            return rust_view
        from tb_footprint_plugin.formats import views

        reader = self.original.rust_reader() if self.original is not None else None
        if reader is not None:  # this reduce's one load of the original, started by the engine
            return reader.read(plugins={self.streams[t].plugin for t in exact}, payloads=False)

        if views.data_server_binary() is None:
            self.notes.append("dashboard-exact downsampling skipped: the Rust data server is not available")
            for t in exact:
                self.streams[t].pin("the Rust data server is not available")
            return None
        # a plan's selection: its load of the original is kept (``park``) for the reduce of this
        # run that may follow, which then does not load the original again
        from tb_footprint_plugin.verify.original import OriginalRun, park

        run = OriginalRun(self.run_dir)
        meanwhile = None
        if passes.wanted(self.run_dir, passes.MIN_BYTES):
            # a reduce's own plan (its scan keeps passes: ``passes.retaining``), so this run's
            # transaction follows at once: TensorBoard's app imports (~0.2 s of a core, which its
            # route crawl waits for) start as soon as the load is under way, while this thread
            # waits for it, then beside the rest of the plan, the run's lock and journal and the
            # backup (a plan shown, not reduced, never pays them)
            from tb_footprint_plugin.verify import routes

            meanwhile = routes.prewarm
        reader = run.load_now(timeout_s=900, meanwhile=meanwhile)
        # only which steps the default view keeps decides (``_choose``): no payload is read
        rust_view = reader.read(plugins={self.streams[t].plugin for t in exact}, payloads=False)
        if not rust_view.fatal:
            park(run)
        else:
            run.close()
            self.notes.append(f"dashboard-exact downsampling skipped: {rust_view.fatal}")
            for t in exact:
                self.streams[t].pin("the Rust data server could not read the run")
        return rust_view

    def downsample(self, rust_view) -> Dict[str, dict]:
        """Drop what each downsampled tag does not keep; per tag: records, kept, and why."""
        tag_report: Dict[str, dict] = {}
        for tag, s in sorted(self.streams.items()):
            n = len(s.ids)
            keep = _choose(tag, s, rust_view, self.rewritten, self.file_of)
            if keep is None:
                if s.pinned and n:
                    tag_report[tag] = {"plugin": s.plugin, "records": n, "kept": n, "why": s.pinned,
                                       "how": TagKeep.PINNED}
                continue
            dropped = self._drop_all_but(s, keep)
            if s.carrier is not None and dropped:
                gid = s.ids[s.carrier]
                self.subs.setdefault(self.file_of(gid), {})[gid & _REC_MASK] = (CARRY_METADATA, tag, s.meta0)
            if dropped:
                self._expect(s)
            if isinstance(s.mode, int):
                how, why = TagKeep.AT_MOST, f"at most {s.mode} per tag"
            elif s.relaxed:
                how, why = TagKeep.DEFAULT_VIEW, _DEFAULT_VIEW_WHY
            else:
                how, why = TagKeep.DASHBOARD_EXACT, _DASHBOARD_EXACT_WHY
            if s.pinned:
                how, why = TagKeep.PINNED, s.pinned
            tag_report[tag] = {"plugin": s.plugin, "records": n, "kept": n - dropped, "why": why, "how": how}
        return tag_report

    def _drop_all_but(self, s: _Stream, keep: List[int]) -> int:
        """Drop the stream's records but those at ``keep`` (stream indices); returns how many
        were dropped. (At once: a call per record cost ~0.1 s per GB of histograms.)"""
        import numpy as np

        ids = np.frombuffer(s.ids, dtype=np.int64)
        gone = np.ones(len(ids), dtype=bool)
        gone[np.asarray(keep, dtype=np.int64)] = False
        drop = ids[gone]
        for f, sel in _by_file(drop):
            np.frombuffer(self.masks[self.names[f]], dtype=np.uint8)[drop[sel] & _REC_MASK] = 0
        return len(drop)

    def _kept_flags(self, s: _Stream):
        """bool array: which of the stream's records the masks keep."""
        import numpy as np

        ids = np.frombuffer(s.ids, dtype=np.int64)
        flags = np.zeros(len(ids), dtype=bool)
        for f, sel in _by_file(ids):
            mask = np.frombuffer(self.masks[self.names[f]], dtype=np.uint8)
            flags[sel] = mask[ids[sel] & _REC_MASK] != 0
        return flags

    def _expect(self, s: _Stream) -> None:
        """One verification mode per plugin: the weakest, which every tag of the plugin meets."""
        if isinstance(s.mode, int):
            mode = "subset"
        elif s.relaxed:
            mode = DEFAULT_VIEW_EXACT_MODE
        else:
            mode = "default_view_identical"
        prev = self.expectations.get(s.plugin)
        if prev is None or _STRICTNESS[mode] < _STRICTNESS[prev]:
            self.expectations[s.plugin] = mode

    def note_tags(self, tag_report: Dict[str, dict]) -> None:
        """Notes on the tags: why some were kept in full, which lost their first step, which had
        their metadata carried, and what --load_fast=false shows of each reduced tag."""
        notes = self.notes
        pinned = sorted({r["why"] for r in tag_report.values() if r["kept"] == r["records"]
                         and r["how"] == TagKeep.PINNED})
        for why in pinned:
            k = sum(1 for r in tag_report.values() if r["why"] == why)
            notes.append(f"{k} tag(s) kept in full: {why}")
        relaxed = sorted(t for t, r in tag_report.items() if r["how"] == TagKeep.DEFAULT_VIEW
                         and r["kept"] < r["records"])
        if relaxed:
            notes.append(f"{len(relaxed)} tag(s) reduced to exactly the default view (downsample: "
                         "default_view): with --load_fast=false (TensorBoard's Python reader) their "
                         "first step may be gone; the last step is always kept")
        carried = sorted(t for t, s in self.streams.items() if s.carrier is not None and tag_report.get(t, {}).get(
            "kept", 0) < tag_report.get(t, {}).get("records", 0))
        if carried:
            notes.append(f"{len(carried)} tag(s) had their summary metadata only on a record the default view "
                         "does not show: it was copied onto their first kept record (step, wall time and "
                         "value unchanged; only that record's bytes differ)")
        reduced_tags = self._kept_steps(tag_report)
        # what --load_fast=false (Python reader, which shows every kept record up to its own
        # per-tag limit) users see of each reduced tag
        for tag in reduced_tags[:_TAG_NOTES]:
            r = tag_report[tag]
            first = ("first step kept" if r["kept_first_step"] == r["first_step"]
                     else f"first step {r['first_step']} gone")
            notes.append(f"{r['plugin']} {tag!r}: {r['kept']} of {r['records']} records kept, steps "
                         f"{r['kept_first_step']}–{r['kept_last_step']} ({first}); --load_fast=false shows "
                         f"these (up to its per-tag limit)")
        if len(reduced_tags) > _TAG_NOTES:
            notes.append(f"… and {len(reduced_tags) - _TAG_NOTES} more reduced tag(s)")

    def _kept_steps(self, tag_report: Dict[str, dict]) -> List[str]:
        """Adds each reduced tag's first and last step, before and after; returns those tags."""
        reduced_tags = []
        for tag, r in sorted(tag_report.items()):
            s = self.streams[tag]
            if r["kept"] < r["records"]:
                kept = self._kept_flags(s).nonzero()[0]
                r["first_step"], r["last_step"] = s.steps[0], s.steps[-1]
                r["kept_first_step"] = s.steps[int(kept[0])]
                r["kept_last_step"] = s.steps[int(kept[-1])]
                reduced_tags.append(tag)
        return reduced_tags


def _append(s: _Stream, gid: int, step: int, value) -> None:
    if s.steps and step <= s.steps[-1]:
        s.pin("its steps go backwards or repeat (a restart)")
    md = value.metadata.SerializeToString() if value.HasField("metadata") else None
    if not s.ids:
        s.meta0 = md
    s.same_meta.append(1 if md == s.meta0 else 0)
    s.has_meta.append(0 if md is None else 1)
    if s.meta_first is None and md is not None:
        s.meta_first = len(s.ids)
    s.ids.append(gid)
    s.steps.append(step)


def _choose(tag: str, s: _Stream, rust_view, rewritten, file_of) -> Optional[List[int]]:
    """Stream indices to keep, or None to keep all (``s.pinned`` may say why)."""
    n = len(s.ids)
    if s.pinned or n == 0:
        return None
    forced = _in_whole_files(s, rewritten, file_of)
    # The first record: TensorBoard binds the tag there and Python shows its step.
    first = {0} | ({s.meta_first} if s.meta_first is not None else set())
    if isinstance(s.mode, int):
        if n <= s.mode:
            return None
        return sorted(set(evenly_spaced(s.steps, s.mode)) | first | forced)
    # dashboard-exact: what the Rust server retains of the original run
    if n <= min(RUST_CAPACITY.values()):
        return None  # fewer records than any reservoir holds: all of them are shown
    tv = rust_view.plugins.get(s.plugin, {}).get(tag) if rust_view is not None else None
    if tv is None:
        s.pin("the Rust data server does not list it")
        return None
    capacity = RUST_CAPACITY.get(tv.kind)
    if capacity is None:
        s.pin(f"{tv.kind} data is not downsampled")
        return None
    if n <= capacity:
        return None
    retained = []
    for step, _wall, _payload in tv.points:
        i = bisect.bisect_left(s.steps, step)
        if i >= n or s.steps[i] != step:
            s.pin("the Rust data server's points do not match its records")
            return None
        retained.append(i)
    if retained != sorted(set(retained)) or not retained or retained[-1] != n - 1:
        s.pin("the Rust data server's points do not match its records")
        return None
    extras = first | forced
    if s.mode == DEFAULT_VIEW:
        # The first record may go only if the first kept one binds the tag the same way: same
        # metadata as the first record (or no metadata anywhere, legacy values), or no metadata
        # at all, in which case the first record's metadata is copied onto it (TF2 writers put
        # it on a tag's first value only; the default reader binds the tag from its first value).
        first_kept = min(set(retained) | set(forced))
        same = s.same_meta[first_kept] and (s.meta0 is not None or s.meta_first is None)
        carry = (not same and s.meta_first == 0 and not s.has_meta[first_kept]
                 and first_kept not in forced)
        if not (same or carry):
            if not extras <= set(retained):
                s.pin("default_view: its summary metadata differs between its first record and the "
                      "first one the default reader shows (or sits on a record of a file that is not "
                      "rewritten), so its first record cannot be dropped")
                return None
        else:
            extras = set(forced)
            s.relaxed = True
            if carry:
                s.carrier = first_kept
    if extras <= set(retained):
        return retained
    keep = _fill(s, retained, extras, capacity, n)
    if keep is not None and s.carrier is not None:
        c = keep[0]  # a filler may now come first: it carries the metadata instead
        if s.has_meta[c] and not s.same_meta[c]:
            s.carrier = None
            s.pin("default_view: its summary metadata differs between its first record and the "
                  "first one kept")
            return None
        s.carrier = None if s.has_meta[c] else c
    return keep


def _by_file(gids):
    """``(file index, selector into gids)`` for each file the record ids ``gids`` (int64 array)
    fall in: one file (the usual case) costs one comparison pass, no sort."""
    import numpy as np

    files = gids >> _REC_BITS
    if not len(files):
        return []
    if (files == files[0]).all():
        return [(int(files[0]), slice(None))]
    return [(f, files == f) for f in np.unique(files).tolist()]


def _in_whole_files(s: _Stream, rewritten, file_of) -> set:
    """Stream indices of the records in files kept whole (not rewritten)."""
    import numpy as np

    ids = np.frombuffer(s.ids, dtype=np.int64)
    out: set = set()
    for f, sel in _by_file(ids):
        if file_of(f << _REC_BITS) not in rewritten:
            out.update(np.arange(len(ids))[sel].tolist())
    return out


def _fill(s: _Stream, retained: List[int], extras: set, capacity: int, n: int) -> Optional[List[int]]:
    """``arrange_fillers`` for one stream, pinning it (with the reason) when impossible."""
    try:
        table = kept_positions(capacity)
    except RewriteError as e:
        s.pin(str(e))
        return None
    table = {k: v for k, v in table.items() if k < n}
    keep = arrange_fillers(retained, sorted(extras), table, capacity)
    if keep is None and s.relaxed:
        s.relaxed = False
        s.pin("default_view: its records in event files that are not rewritten cannot be kept "
              "without changing the default view")
    elif keep is None:
        s.pin(f"its first step cannot be kept without changing the default view (a {capacity}-point "
              f"reservoir needs about {100 * capacity} records per tag for that)")
    return keep


def _graph_duplicates(kind: str, items: List[Tuple[int, int, bytes]]) -> List[int]:
    """Graph records that are byte-identical repeats and that no backend displays."""
    if len(items) < 2:
        return []
    keep = set()
    first_of_content = set()
    seen = set()
    first_of_step = set()
    for gid, step, digest in items:
        if digest not in seen:
            seen.add(digest)
            first_of_content.add(gid)
        if step not in first_of_step:
            first_of_step.add(step)
            keep.add(gid)  # Python's blob sequences show the first record of each step
    survivors: List[Tuple[int, int]] = []  # Rust's step preemption
    for gid, step, _ in items:
        while survivors and survivors[-1][1] >= step:
            survivors.pop()
        survivors.append((gid, step))
    keep |= {g for g, _ in survivors}
    keep |= first_of_content
    if kind == "meta_graph_def":
        keep.add(items[-1][0])  # Python's accumulator keeps the newest meta graph
    return [gid for gid, _, _ in items if gid not in keep]


# ---------------------------------------------------------------------------------------
# the rewrite (one file, streaming)
# ---------------------------------------------------------------------------------------
class _HashedOut:
    """Kept records gathered into writes of about 1 MB, hashed as they are written."""

    def __init__(self, raw, sha) -> None:
        self.raw, self.sha = raw, sha
        self.parts: List[bytes] = []
        self.n = 0

    def add(self, piece) -> None:
        self.parts.append(piece)
        self.n += len(piece)
        if self.n >= 1 << 20:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            data = b"".join(self.parts)
            self.raw.write(data)
            self.sha.update(data)
            self.parts, self.n = [], 0


def _substitute_record(data: bytes, sub: tuple, substituted: List[dict]) -> bytes:
    """The framed record that replaces ``data`` (``substitute``), noted in ``substituted``."""
    new = substitute(data, sub)
    substituted.append({"kind": sub[0], "sha256": hashlib.sha256(new).hexdigest(),
                        "original_sha256": hashlib.sha256(data).hexdigest(),
                        "original_size": len(data), "size": len(new)})
    return frame(new)


def substitute(data: bytes, sub: tuple) -> bytes:
    """The re-encoded event for a kept record (``Selection.subs``): same step, wall time and
    values; large graph attribute values dropped, or the tag's first metadata added."""
    from tensorboard.compat.proto import event_pb2

    ev = event_pb2.Event.FromString(data)
    if sub[0] == GRAPH_ATTRS:
        stripped = graph_attrs.strip_graph_def(ev.graph_def)
        if stripped is None:
            raise RewriteError("a graph record changed between the selection and the rewrite")
        ev.graph_def = stripped[0]
    elif sub[0] == META_GRAPH_ATTRS:
        stripped = graph_attrs.strip_meta_graph_def(ev.meta_graph_def)
        if stripped is None:
            raise RewriteError("a meta graph record changed between the selection and the rewrite")
        ev.meta_graph_def = stripped[0]
    elif sub[0] == CARRY_METADATA:
        _, tag, meta = sub
        values = ev.summary.value
        if len(values) != 1 or values[0].tag != tag or values[0].HasField("metadata"):
            raise RewriteError(f"tag {tag!r}: the record chosen to carry its metadata changed")
        values[0].metadata.ParseFromString(meta)
    else:
        raise RewriteError(f"unknown substitution {sub[0]!r}")
    return ev.SerializeToString()


def rewrite_event_file(src: str, dst: str, mask: bytearray, codes: Optional[bytearray] = None,
                       code_names: Sequence[str] = (), expected_sha: Optional[str] = None,
                       subs: Optional[Dict[int, tuple]] = None, facts=None) -> dict:
    """Copy the records of ``src`` whose ``mask`` byte is 1 to ``dst`` (framed bytes as is,
    except the records in ``subs``, re-encoded by ``substitute`` and framed anew).

    Raises ``RewriteError`` if ``src`` is damaged, has a different number of records than
    ``mask``, or (with ``expected_sha``) is not the file that was backed up. The result's
    ``substituted`` lists each re-encoded record: its sha256 and the original record's
    (sha256, size), so the record-level check can match it to the record it stands for.

    ``facts`` (``Selection.facts[name]``: the selection pass hashed ``src`` and noted where each
    record is): while ``src`` is provably the file that pass read (same inode, size, mtime and
    ctime), only the kept records are read, at their offsets: a 1 GB original reduced to a few
    MB is not read a second time. Otherwise the whole file is streamed and hashed again.
    """
    if facts is not None and expected_sha is not None and facts.sha256 != expected_sha:
        # the selection analysed other bytes than the backup's (the scan's kept pass is older
        # than the backup): its mask must not be applied to them, copied or streamed
        raise RewriteError(f"{os.path.basename(src)}: changed since it was analysed "
                           "(sha256 differs from the backup's)")
    if facts is not None and len(facts.sizes) == len(mask) and facts.status == "ok":
        from tb_footprint_plugin.verify.original import stat_sig

        if stat_sig(src) == facts.stat:
            return _copy_kept(src, dst, mask, facts, codes, code_names, subs or {},
                              from_pass=expected_sha is not None)
    kept = dropped = 0
    removed: Dict[str, List[int]] = {}
    subs = subs or {}
    substituted: List[dict] = []
    out_sha = hashlib.sha256()
    name = os.path.basename(src)
    with open(src, "rb", buffering=0) as raw_in, open_staged(dst) as raw_out:
        hin = HashingReader(raw_in)
        reader = RecordReader(hin, verify=True, display_name=name)
        out = _HashedOut(raw_out, out_sha)
        i = 0
        n = len(mask)
        for batch in reader.batches():
            buf = batch.buf
            for s, size in zip(batch.starts.tolist(), batch.sizes.tolist()):
                if i >= n:
                    raise RewriteError(f"{name}: more records than when it was analysed (changed?)")
                if mask[i]:
                    piece = buf[s:s + size]
                    if i in subs:
                        piece = _substitute_record(bytes(piece[12:-4]), subs[i], substituted)
                    out.add(piece)
                    kept += 1
                else:
                    dropped += 1
                    label = code_names[codes[i]] if codes is not None and codes[i] < len(code_names) else "other"
                    r = removed.setdefault(label, [0, 0])
                    r[0] += 1
                    r[1] += size
                i += 1
        out.flush()
        fsync_file(raw_out)
        while raw_in.read(CHUNK):  # hash any unread tail (there is none when status is ok)
            pass
    if reader.status != "ok":
        raise RewriteError(f"{name}: {reader.status} at offset {reader.error_offset}; "
                           "a damaged file is never rewritten")
    if i != n:
        raise RewriteError(f"{name}: {i} records, {n} when it was analysed (changed?)")
    if expected_sha is not None and hin.sha.hexdigest() != expected_sha:
        raise RewriteError(f"{name}: changed while it was being rewritten (sha256 differs)")
    return _finish(dst, name, kept, dropped, out_sha, removed, substituted)


def _copy_kept(src: str, dst: str, mask: bytearray, facts, codes: Optional[bytearray],
               code_names: Sequence[str], subs: Dict[int, tuple], from_pass: bool = False) -> dict:
    """``rewrite_event_file`` from the selection pass's record index: the kept frames are read
    at their offsets (consecutive ones in one read), the dropped ones are never read again.

    ``from_pass`` (the facts' sha256 is the backup's): kept runs of small records are copied
    from the bytes the pass kept of them (``FileFacts.small``) instead: a read per scalar
    record cost ~0.3 s per GB of histograms and images between them."""
    import numpy as np

    from tb_footprint_plugin.verify.original import stat_sig

    name = os.path.basename(src)
    keep = np.frombuffer(bytes(mask), dtype=np.uint8) != 0
    offsets, sizes = facts.offsets(), facts.sizes
    removed: Dict[str, List[int]] = {}
    if codes is not None and (~keep).any():
        cv = np.frombuffer(bytes(codes), dtype=np.uint8)[~keep]
        counts = np.bincount(cv)
        byte_sums = np.bincount(cv, weights=sizes[~keep].astype(np.float64))
        for c in np.flatnonzero(counts).tolist():
            label = code_names[c] if c < len(code_names) else "other"
            r = removed.setdefault(label, [0, 0])
            r[0] += int(counts[c])
            r[1] += int(round(byte_sums[c]))
    elif (~keep).any():
        removed["other"] = [int((~keep).sum()), int(sizes[~keep].sum())]
    idx = np.flatnonzero(keep)
    # runs of consecutive kept records (adjacent in the file); a substituted record is a run alone
    cut = np.flatnonzero(np.diff(idx) != 1) + 1 if len(idx) else np.zeros(0, np.int64)
    starts = np.concatenate(([0], cut)).astype(np.int64) if len(idx) else cut
    ends = np.concatenate((cut, [len(idx)])).astype(np.int64) if len(idx) else cut
    ra, rb = idx[starts], idx[ends - 1]
    runs = list(zip(ra.tolist(), rb.tolist()))
    if subs:
        split = []
        for a, b in runs:
            for i in sorted(k for k in subs if a <= k <= b):
                if a < i:
                    split.append((a, i - 1))
                split.append((i, i))
                a = i + 1
            if a <= b:
                split.append((a, b))
        runs = split
        ra = np.array([a for a, _ in runs], dtype=np.int64)
        rb = np.array([b for _, b in runs], dtype=np.int64)
    substituted: List[dict] = []
    out_sha = hashlib.sha256()
    # runs whose every record is in the pass's small bytes are copied from there, groups of
    # consecutive such runs at once; ``groups``: (first run, end run, from small bytes)
    groups = [(0, len(runs), False)]
    view = facts.small_view() if from_pass else None
    small_pos = view[0] if view is not None else None
    if small_pos is not None and runs:
        p, q = small_pos[ra], small_pos[rb]
        # all of a..b are there iff their span there is their span in the file
        whole = (p >= 0) & (q >= 0) & (q - p == offsets[rb] - offsets[ra])
        at = np.searchsorted(ra, np.array(sorted(subs), dtype=np.int64))
        at = at[at < len(ra)]
        whole[at] = False  # a re-encoded record is a run alone: read and checked below
        p_list, end_list = p.tolist(), (q + sizes[rb]).tolist()
        cut = (np.flatnonzero(np.diff(whole.astype(np.int8)) != 0) + 1).tolist()
        bounds = [0] + cut + [len(runs)]
        groups = [(g0, g1, bool(whole[g0])) for g0, g1 in zip(bounds[:-1], bounds[1:])]
    small = memoryview(view[1] if view is not None else b"")
    with open_regular(src, buffering=0, follow_symlinks=True) as fin, open_staged(dst) as raw_out:
        fd = fin.fileno()
        out = _HashedOut(raw_out, out_sha)
        for g0, g1, from_small in groups:
            if from_small:
                out.add(b"".join([small[p:e] for p, e in zip(p_list[g0:g1], end_list[g0:g1])]))
            else:
                _copy_runs(fd, name, runs[g0:g1], offsets, sizes, facts.crcs, subs, substituted, out)
        out.flush()
        fsync_file(raw_out)
    if stat_sig(src) != facts.stat:
        raise RewriteError(f"{name}: changed while it was being rewritten")
    kept = len(idx)
    return _finish(dst, name, kept, len(mask) - kept, out_sha, removed, substituted)


def _copy_runs(fd: int, name: str, runs: list, offsets, sizes, crcs, subs: Dict[int, tuple],
               substituted: List[dict], out: "_HashedOut") -> None:
    """Read each run of kept records at its offset (one read a run) into ``out``, re-encoding
    the substituted ones after checking their CRC."""
    for a, b in runs:
        start = int(offsets[a])
        length = int(offsets[b]) + int(sizes[b]) - start
        piece = os.pread(fd, length, start)
        if len(piece) != length:
            raise RewriteError(f"{name}: shorter than when it was analysed (changed?)")
        if a in subs:
            data = piece[12:-4]
            if masked_crc32c(data) != int(crcs[a]):
                raise RewriteError(f"{name}: a record changed since it was analysed")
            piece = _substitute_record(data, subs[a], substituted)
        out.add(piece)


def _finish(dst: str, name: str, kept: int, dropped: int, out_sha, removed: Dict[str, List[int]],
            substituted: List[dict]) -> dict:
    """Re-read the new file (framing and CRCs of every kept record) and report."""
    with RecordReader(dst, verify=True, display_name=name) as check:
        count = sum(len(b) for b in check.batches())
    if check.status != "ok" or count != kept:
        raise RewriteError(f"{name}: the rewritten copy does not read back ({check.status}, "
                           f"{count} of {kept} records)")
    return {
        "size": os.path.getsize(dst),
        "sha256": out_sha.hexdigest(),
        "records_before": kept + dropped,
        "records_after": kept,
        "removed": {k: {"records": v[0], "bytes": v[1]} for k, v in sorted(removed.items())},
        "substituted": substituted,
    }


def stage_event_rewrite(action, src: str, tmp: str, sha: str, original=None) -> dict:
    """``stage_rewrite`` for an event file: select (per run, cached), rewrite, report.
    ``original``: this reduce's ``verify.original.OriginalRun`` of the run (see ``select_run``)."""
    params = _params(action)
    rules = Rules.from_params(params.get("rules") or {})
    run_dir = os.path.dirname(src)
    name = os.path.basename(src)
    rewritten = params.get("run_files") or [name]
    sel = selection_for(run_dir, rules, rewritten, original)
    if name not in sel.masks:
        raise RewriteError(f"{name}: not an event file of its run")
    info = rewrite_event_file(src, tmp, sel.masks[name], sel.codes[name], sel.code_names, sha,
                              subs=sel.subs.get(name), facts=sel.facts.get(name))
    info["transform"] = "event_rewrite"
    info["expectations"] = dict(sel.expectations)
    info["notes"] = list(sel.notes)
    return info


def _params(action) -> dict:
    p = getattr(action, "params", None)
    if p is None and isinstance(action, dict):
        p = action.get("params")
    return dict(p or {})


__all__ = [
    "DASHBOARD_EXACT",
    "DEFAULT_VIEW",
    "CARRY_METADATA",
    "DEFAULT_VIEW_EXACT_MODE",
    "GRAPH_ATTRS",
    "GRAPH_ROUTE_IDENTICAL_MODE",
    "META_GRAPH_ATTRS",
    "Rules",
    "RewriteError",
    "Selection",
    "arrange_fillers",
    "evenly_spaced",
    "file_outcome",
    "FileOutcome",
    "kept_positions",
    "plan_rewrite",
    "RewriteOutcome",
    "rewrite_event_file",
    "select_run",
    "selection_for",
    "stage_event_rewrite",
]
