"""Per-record categorization of one event file: ``event_file_stats(path) -> EventFileStats``.

Every framed byte of the file lands in exactly one place:

* ``fixed[category]`` for non-summary events (``file_version``, ``graph_def``,
  ``meta_graph_def``, ``tagged_run_metadata``, ``session_log``; ``log_message``,
  ``source_metadata``-only, empty and unparseable events go to ``events_other``), plus the
  tail of a damaged file (``events_incomplete`` for a truncated last record,
  ``events_corrupt`` from a bad CRC to the end of the file);
* ``tags[plugin][tag]`` for summary values.

Plugin of a summary value, following TensorBoard (``data_compat.migrate_value`` and
``EventAccumulator._ProcessEvent``): legacy TF1 values map by type (``simple_value`` ->
scalars, ``histo`` -> histograms, ``image`` -> images, ``audio`` -> audio), other values take
``metadata.plugin_data.plugin_name``. The first of these seen for a tag binds the tag to that
plugin for the rest of the file, whatever later values carry (TF2 writers put metadata only on
a tag's first value). A value with no plugin on a tag not yet bound is recorded under plugin
``""``; ``category_bytes`` resolves it through the run's bindings (the scan collects them from
the run's files in filename order). Metadata with an empty plugin name does not bind.

A multi-value event's framed bytes are split between its values in proportion to each
value's serialized size (integer bytes, remainder to the last value), so the categories of a
file always add up to its size exactly. ``TagStat.records`` counts values (points);
``EventFileStats.records`` counts framed records; steps are the events' ``step``.

Damaged files: the bytes from a truncated final record to EOF are ``events_incomplete``
(status ``"truncated"``; a file shorter than one record header counts as this too), the bytes
from a bad CRC to EOF are ``events_corrupt`` (status ``"corrupt"``). A file that is not TFRecord
at all fails its first length CRC, so all of it is ``events_corrupt`` and the warning says
"not a TFRecord event file".

An unreadable file (e.g. permission denied) gets status ``"unreadable"``, empty ``fixed`` and
``tags``, its ``size`` from ``stat`` when possible, and a warning; ``category_bytes`` then
returns ``{"other": size}`` so the sum rule holds for every file. (Choice: no dedicated
category, since nothing is known about those bytes; the scan shows the warning.)

Speed: records are decoded in batches with numpy. For the common shape of a summary event
(``wall_time``, ``step``, one ``Summary.Value`` = tag + one value field + at most one
``metadata`` field) the envelope is decoded with vectorized varint reads and the tag is
matched exactly (8-byte words) against the tags learned so far; tags are learned by parsing
one record per new tag with ``event_pb2`` (the records of a batch grouped by tag hash, each
record checked against its group's first word by word; that parse also gives the plugin the
tag's first value names, so the record is not parsed again to bind it). Everything else (other event kinds, several values,
unusual field order, a tag's first plugin-bearing value) goes through ``event_pb2`` record by
record, in file order, so bindings behave exactly as in a full parse. Limitation: the fast path
checks the envelope but does not parse the value payload (``TensorProto``, ``HistogramProto``,
...), so a record with an intact CRC whose payload alone is malformed protobuf is attributed to
its tag instead of to ``events_other``.

Why one module: one rule for where every framed byte of an event file
lands (category, plugin, tag), with the fast path that decodes it in batches; the scan, the
rewrite's selection and the verification count records by it, so every layer counts a record
the same way.
"""
from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from tb_footprint_plugin.scan import categories as C
from tb_footprint_plugin.scan import passes
from tb_footprint_plugin.scan.filestats import EventFileStats, FixedStat, TagStat
from tb_footprint_plugin.scan.tfrecord import RecordBatch, RecordReader

__all__ = ["TagStat", "FixedStat", "EventFileStats", "event_file_stats"]

_FIXED_BY_FIELD = {
    "file_version": C.FILE_VERSION,
    "graph_def": C.GRAPH_DEF,
    "meta_graph_def": C.META_GRAPH_DEF,
    "tagged_run_metadata": C.TAGGED_RUN_METADATA,
    "session_log": C.SESSION_LOG,
}
# Summary.Value field keys (field << 3 | wire type) of the value oneof, and the legacy plugin
# code each implies (0: plugin comes from metadata)
_KIND_FIXED32 = 0x15  # simple_value = 2, fixed32
_KIND_LEN = {0x1A: 0, 0x22: 3, 0x2A: 2, 0x32: 4, 0x42: 0}  # old histo, image, histo, audio, tensor
_CODE_PLUGIN = {1: C.SCALARS, 2: C.HISTOGRAMS, 3: C.IMAGES, 4: C.AUDIO}
# the same by the key byte: one lookup a record instead of a comparison a kind
_KIND_CODE = np.zeros(256, dtype=np.int8)
_KIND_CODE[_KIND_FIXED32] = 1
_KIND_IS_LEN = np.zeros(256, dtype=bool)
for _key, _code in _KIND_LEN.items():
    _KIND_CODE[_key], _KIND_IS_LEN[_key] = _code, True
del _key, _code
_FAST_MIN_RECORDS = 48  # below this, per-record parsing is cheaper than numpy set-up
_MAX_FAST_TAG = 1024  # bytes; longer tags take the per-record path
_WORD_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)
_I64_MAX, _I64_MIN = (1 << 63) - 1, -(1 << 63)


_PARSE: List[Callable[[bytes], object]] = []


def _event_parser() -> Callable[[bytes], object]:
    """``event_pb2.Event.FromString``, imported at first use (the protobuf modules are only
    needed once a file is read) and then kept: an import statement a record cost ~1 us."""
    if not _PARSE:
        from tensorboard.compat.proto import event_pb2

        _PARSE.append(event_pb2.Event.FromString)
    return _PARSE[0]


def event_file_stats(path, display_name: Optional[str] = None, size: Optional[int] = None) -> EventFileStats:
    """Categorize every byte of the event file at ``path`` (CRCs verified).

    ``path`` may also be a binary file object (a ranged reader over an object in a bucket);
    the reader closes it. ``size`` (known from a listing) is reported if the file is unreadable.
    Never raises for bad content or an unreadable file; messages name ``display_name`` (or
    ``path``).
    """
    name = display_name or str(getattr(path, "name", path))
    if passes.wanted(path, size):
        try:
            return _kept_pass_stats(os.fspath(path), name)
        except OSError as e:
            return _unreadable(path, name, e, size)
    acc = _Accumulator(name)
    try:
        with RecordReader(path, verify=True, display_name=name) as reader:
            for batch in reader.batches():
                acc.add_batch(batch)
    except OSError as e:
        return _unreadable(path, name, e, size)
    finally:
        if not isinstance(path, (str, os.PathLike)):
            path.close()
    return acc.finish(reader)


def _kept_pass_stats(path: str, name: str) -> EventFileStats:
    """``event_file_stats`` of a local file whose pass a reduce keeps (``scan.passes``): the
    same fold, plus the file's sha256 (on a second core), its records' sizes and CRCs, what
    the fold decoded of each batch, and its small records' bytes (``passes.gather_small``)."""
    from tb_footprint_plugin.storage.files import CHUNK, stat_sig
    from tb_footprint_plugin.storage.hashing import ThreadedHashingReader
    from tb_footprint_plugin.storage.regular import open_regular

    acc = _Accumulator(name)
    sizes, crcs, batches = [], [], []
    start, count = None, 0
    room = passes.room()  # beyond it the pass is not kept: memory stays bounded meanwhile
    small = passes.SmallBytes(passes.small_room())
    # never a FIFO or device (an open would block forever); a symlink to a file is fine
    with open_regular(path, buffering=0, follow_symlinks=True) as raw:
        before = stat_sig(path)
        hin = ThreadedHashingReader(raw)
        try:
            reader = RecordReader(hin, verify=True, display_name=name)
            for batch in reader.batches():
                acc.add_batch(batch)
                if count + len(batch) > room:
                    sizes = crcs = batches = None
                    count = room + 1
                    small.stop()
                if sizes is None:
                    continue
                if start is None and len(batch):
                    start = int(batch.starts[0]) + batch.base
                sizes.append(batch.sizes)
                crcs.append(batch.crcs())
                dec = acc.decoded
                if dec is not None:  # the arrays are the fold's own copies; tag ids fit 32 bits
                    fast, tag_id, names, step, meta = dec
                    dec = (fast, tag_id.astype(np.int32), names, step, meta)
                batches.append(passes.BatchDecode(count, len(batch), dec))
                count += len(batch)
                small.add(batch, count)
            while hin.read(CHUNK):  # a damaged tail is hashed too
                pass
        finally:
            sha = hin.hexdigest()  # also stops the hashing thread on an error
        after = stat_sig(path)
    stats = acc.finish(reader)
    if sizes is not None and reader.status == "ok" and before is not None and before == after:
        sz = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        if len(sz) and int(sz.max()) < 1 << 32:
            sz = sz.astype(np.uint32)
        passes.keep(passes.EventPass(
            path=os.path.realpath(path), stat=before, sha256=sha, start=start or 0, sizes=sz,
            crcs=np.concatenate(crcs).astype(np.uint32) if crcs else np.zeros(0, np.uint32),
            batches=batches, stats=stats, small=small.joined(), small_upto=small.upto))
    return stats


class StatsFold:
    """``event_file_stats`` folded from batches someone else reads (one pass serving two
    checks): ``add`` every batch of the file in order, then ``finish`` with its reader."""

    def __init__(self, name: str) -> None:
        self._acc = _Accumulator(name)

    def add(self, batch) -> None:
        self._acc.add_batch(batch)

    def decoded(self) -> Optional[tuple]:
        """What the fold decoded of the batch it was just given, for a caller that classifies
        the same records (one decode serving two passes): ``(fast, tag_id, tag names, step,
        meta)`` where ``fast`` marks the records of the form ``Event{wall_time, [step],
        summary{one value{tag, value, [metadata]}}}`` whose tag is ``names[tag_id]``; None for
        a batch decoded record by record."""
        return self._acc.decoded

    def finish(self, reader: RecordReader) -> EventFileStats:
        return self._acc.finish(reader)


def plain_runs(dec: Optional[tuple], n: int, bound: Callable[[str], bool]
               ) -> Iterator[Tuple[int, int, bool]]:
    """A batch of ``n`` records, decoded as ``StatsFold.decoded()`` gave ``dec``, split into
    consecutive ranges in file order for a caller that classifies them: ``(a, b, True)`` for a
    run of one-value summaries without metadata of tags already bound (``bound(tag)``), to
    take together from the decode; ``(a, b, False)`` for records to take one by one (a full
    parse), among them each tag's first record, which binds it. Lazy: ``bound`` is asked
    only once the caller has handled the ranges before."""
    if dec is None or dec[4] is None or len(dec[0]) != n:
        yield 0, n, False
        return
    fast, tag_id, names, _steps, meta = dec
    eligible = fast & ~meta
    cut = np.flatnonzero(np.diff(eligible.astype(np.int8)) != 0) + 1
    bounds = [0] + cut.tolist() + [n]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if not eligible[a]:
            yield a, b, False
            continue
        while a < b:
            # a tag's first record binds it: record by record up to the last such record
            uniq, first = np.unique(tag_id[a:b], return_index=True)
            unbound = [a + int(f) for t, f in zip(uniq.tolist(), first.tolist())
                       if not bound(names[t])]
            if unbound:
                k = max(unbound) + 1
                yield a, k, False
                a = k
                continue
            yield a, b, True
            a = b


def _unreadable(path, name: str, err: OSError, size: Optional[int] = None) -> EventFileStats:
    try:
        size = os.stat(path).st_size if size is None else size
    except (OSError, TypeError):
        size = 0
    reason = err.strerror or str(err)
    return EventFileStats(size=size, status="unreadable", warning=f"{name}: unreadable ({reason})")


# --- vectorized decoding -----------------------------------------------------------------
def _u64_view(buf: bytes) -> np.ndarray:
    """Little-endian u64 at every byte offset (unaligned strided view, no copy)."""
    return np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def _varint(
    a8: np.ndarray, u64: np.ndarray, pos: np.ndarray, max_bytes: int
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode a varint of at most ``max_bytes`` (<= 8) at each position.

    Returns (value as int64, length in bytes, terminated-within-max_bytes mask).
    """
    first = a8[pos]
    long = first >= 0x80
    if not long.any():  # the usual case for lengths: one byte each
        return first.astype(np.int64), np.ones(len(pos), dtype=np.int64), np.ones(len(pos), dtype=bool)
    # the long path on the long ones only (one histogram among scalars made every length long)
    li = long.nonzero()[0]
    w = u64[pos[li]]
    val = w & np.uint64(0x7F)
    more = np.ones(len(li), dtype=bool)
    length = np.ones(len(li), dtype=np.int64)
    for j in range(1, max_bytes):
        if not more.any():
            break
        b = (w >> np.uint64(8 * j)) & np.uint64(0xFF)
        val |= ((b & np.uint64(0x7F)) << np.uint64(7 * j)) * more
        length += more
        more &= (b & np.uint64(0x80)) != 0
    value = first.astype(np.int64)
    value[li] = val.astype(np.int64)
    size = np.ones(len(pos), dtype=np.int64)
    size[li] = length
    ok = np.ones(len(pos), dtype=bool)
    ok[li] = ~more
    return value, size, ok


@dataclass
class _Envelope:
    """Decoded layout of each record of a batch (meaningful where ``ok``)."""

    ok: np.ndarray
    step: np.ndarray
    tag_start: np.ndarray
    tag_len: np.ndarray
    code: np.ndarray  # legacy plugin code 1..4, 0: no plugin, -1: plugin in its metadata
    meta: Optional[np.ndarray] = None  # the value carries a metadata field


def _decode_envelopes(a8: np.ndarray, u64: np.ndarray, ds: np.ndarray, de: np.ndarray) -> _Envelope:
    """Match ``Event{wall_time, [step], summary{value{tag, <one value field>, [metadata]}}}``.

    Every length is checked against the record end, so a record that passes has all of its
    parsed fields inside ``[ds, de)``; positions are clipped so garbage never indexes out of
    the buffer.
    """
    lim = len(u64) - 1

    def at(p: np.ndarray) -> np.ndarray:
        return np.minimum(p, lim)

    ok = a8[ds] == 0x09  # wall_time, a double, comes first in canonical order
    p = ds + 9
    has_step = a8[at(p)] == 0x10
    step, step_len, step_ok = _varint(a8, u64, at(p + 1), 8)
    ok &= step_ok | ~has_step
    step *= has_step
    p = p + (1 + step_len) * has_step
    ok &= a8[at(p)] == 0x2A  # summary
    sl, n, vok = _varint(a8, u64, at(p + 1), 4)
    q = p + 1 + n
    ok &= vok & (q + sl == de)
    ok &= a8[at(q)] == 0x0A  # the one value spans the whole summary
    vl, n, vok = _varint(a8, u64, at(q + 1), 4)
    r = q + 1 + n
    ok &= vok & (r + vl == de)
    ok &= a8[at(r)] == 0x0A  # tag first
    tl, n, vok = _varint(a8, u64, at(r + 1), 2)
    ts = r + 1 + n
    te = ts + tl
    ok &= vok & (tl <= _MAX_FAST_TAG) & (te < de)
    kind = a8[at(te)]
    fixed32 = kind == _KIND_FIXED32
    code = _KIND_CODE[kind]
    is_len = _KIND_IS_LEN[kind]
    kl, n, vok = _varint(a8, u64, at(te + 1), 4)
    ke = np.where(fixed32, te + 5, te + 1 + n + kl)
    ok &= fixed32 | (is_len & vok)
    ok &= ke <= de
    tail = ke < de  # then it must be exactly one metadata field
    ml, n, vok = _varint(a8, u64, at(ke + 1), 4)
    ok &= ~tail | ((a8[at(ke)] == 0x4A) & vok & (ke + 1 + n + ml == de))
    code[tail & (code == 0)] = -1
    return _Envelope(ok, step, ts, tl, code, tail)


def _tag_words(u64: np.ndarray, ts: np.ndarray, tl: np.ndarray) -> List[np.ndarray]:
    """The tag bytes as little-endian u64 words, zero-padded (word k only where tl > 8k)."""
    lim = len(u64) - 1
    words = []
    nwords = int((int(tl.max()) + 7) // 8) if len(tl) else 0
    for k in range(nwords):
        rem = np.minimum(np.maximum(tl - 8 * k, 0), 8)  # np.clip's wrapper costs more
        words.append(u64[np.minimum(ts + 8 * k, lim)] & _WORD_MASKS[rem])
    return words


def _tag_hash(tl: np.ndarray, words: List[np.ndarray]) -> np.ndarray:
    """A 64-bit hash of each tag that depends only on its own words (not on padding)."""
    h = tl.astype(np.uint64) * _HASH_MUL
    for k, w in enumerate(words):
        mixed = (h ^ w) * _HASH_MUL
        mixed ^= mixed >> np.uint64(29)
        h = np.where(tl > 8 * k, mixed, h)
    return h


class _TagTable:
    """Tags learned so far in a file, for exact vectorized matching."""

    def __init__(self) -> None:
        self.names: List[str] = []
        self.ids: Dict[bytes, int] = {}
        self._raw: List[bytes] = []
        self._dirty = True

    def add(self, raw: bytes, name: str) -> int:
        """Register a tag (raw UTF-8 bytes); returns its id."""
        tid = self.ids.get(raw)
        if tid is None:
            tid = self.ids[raw] = len(self.names)
            self.names.append(name)
            self._raw.append(raw)
            self._dirty = True
        return tid

    def _build(self) -> None:
        n = len(self._raw)
        width = max([(len(r) + 7) // 8 for r in self._raw] + [1])
        self.words = np.zeros((n, width), dtype=np.uint64)
        for i, raw in enumerate(self._raw):
            padded = raw + bytes(8 * width - len(raw))
            self.words[i] = np.frombuffer(padded, dtype="<u8")
        self.lens = np.array([len(r) for r in self._raw], dtype=np.int64)
        cols = [self.words[:, k] for k in range((int(self.lens.max()) + 7) // 8)] if n else []
        hashes = _tag_hash(self.lens, cols) if n else np.zeros(0, np.uint64)
        self.order = np.argsort(hashes, kind="stable")
        self.sorted_hashes = hashes[self.order]
        self._dirty = False

    def match(self, tl: np.ndarray, words: List[np.ndarray], h: np.ndarray) -> np.ndarray:
        """Tag id of each record, or -1; exact (hash picks a candidate, words confirm it)."""
        if self._dirty:
            self._build()
        if not self.names:
            return np.full(len(tl), -1, dtype=np.int64)
        i = np.minimum(np.searchsorted(self.sorted_hashes, h), len(self.order) - 1)
        cand = self.order[i]
        hit = (self.sorted_hashes[i] == h) & (self.lens[cand] == tl)
        width = self.words.shape[1]
        for k, w in enumerate(words):
            if k >= width:
                hit &= tl <= 8 * k  # longer than any known tag: cannot match
                continue
            hit &= self.words[cand, k] == w
        return np.where(hit, cand, -1)


# --- the accumulator ---------------------------------------------------------------------
class _Accumulator:
    """Folds batches of records into per-category and per-tag stats, in file order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fixed: Dict[str, FixedStat] = {}
        self.tags: Dict[str, Dict[str, TagStat]] = {}
        self.bindings: Dict[str, str] = {}
        self.table = _TagTable()
        self.bound = np.zeros(0, dtype=bool)  # per tag id: bound to a plugin
        self.bad_events = 0
        self.first_bad_offset: Optional[int] = None
        self._bind_at: Optional[Dict[int, int]] = None  # tag id -> record index, in a batch
        self.decoded = None  # see StatsFold.decoded
        self._index = 0
        # record index in the batch -> the plugin its value names (``_value_plugin``), for the
        # records ``_learn`` parsed: a tag's first record, parsed once, not again to bind it
        self._named: Dict[int, str] = {}

    # stats ----------------------------------------------------------------------------
    def _add_fixed(self, cat: str, nbytes: int, records: int, step: Optional[int]) -> None:
        st = self.fixed.get(cat)
        if st is None:
            st = self.fixed[cat] = FixedStat()
        st.add(nbytes, records, step, step)

    def _add_tag(self, plugin: str, tag: str, nbytes: int, records: int, lo, hi) -> None:
        by_tag = self.tags.setdefault(plugin, {})
        st = by_tag.get(tag)
        if st is None:
            st = by_tag[tag] = TagStat()
        st.add(nbytes, records, lo, hi)

    def _bind(self, tag: str, plugin: str) -> None:
        self.bindings[tag] = plugin
        tid = self.table.ids.get(tag.encode("utf-8"))
        if tid is not None:
            self._sync_bound()
            self.bound[tid] = True
            if self._bind_at is not None:
                self._bind_at.setdefault(tid, self._index)

    def _sync_bound(self) -> None:
        n = len(self.table.names)
        if len(self.bound) < n:
            new = [name in self.bindings for name in self.table.names[len(self.bound) :]]
            self.bound = np.concatenate([self.bound, np.array(new, dtype=bool)])

    # per-record path --------------------------------------------------------------------
    def _parse(self, data: bytes):
        try:
            return (_PARSE[0] if _PARSE else _event_parser())(data)
        except Exception:  # DecodeError, or UTF-8 errors in string fields
            return None

    def _record(self, data: bytes, framed: int, offset: int) -> None:
        """Categorize one record by a full ``event_pb2`` parse."""
        ev = self._parse(data)
        if ev is None:
            self.bad_events += 1
            if self.first_bad_offset is None:
                self.first_bad_offset = offset
            self._add_fixed(C.EVENTS_OTHER, framed, 1, None)
            return
        what = ev.WhichOneof("what")
        step = ev.step
        values = ev.summary.value if what == "summary" else ()
        if not values:
            self._add_fixed(_FIXED_BY_FIELD.get(what, C.EVENTS_OTHER), framed, 1, step)
            return
        for value, share in zip(values, _split_bytes(framed, values)):
            tag = value.tag
            self._add_tag(self._resolve(tag, value), tag, share, 1, step, step)

    def _resolve(self, tag: str, value) -> str:
        bound = self.bindings.get(tag)
        if bound is not None:
            return bound
        plugin = _value_plugin(value)
        if plugin:
            self._bind(tag, plugin)
            return plugin
        return ""

    # batches ----------------------------------------------------------------------------
    def add_batch(self, batch: RecordBatch) -> None:
        """Fold in a batch of good records (in file order)."""
        self.decoded = None
        self._named = {}
        if len(batch) < _FAST_MIN_RECORDS:
            for rec in batch.records():
                self._record(rec.data, rec.framed_size, rec.offset)
            return
        self._fast_batch(batch)

    def _fast_batch(self, batch: RecordBatch) -> None:
        buf, starts, sizes = batch.buf, batch.starts, batch.sizes
        a8 = np.frombuffer(buf, dtype=np.uint8)
        u64 = _u64_view(buf)
        env = _decode_envelopes(a8, u64, starts + 12, starts + sizes - 4)
        ok_idx = env.ok.nonzero()[0]
        tag_id = np.full(len(starts), -1, dtype=np.int64)
        if len(ok_idx):
            tag_id[ok_idx] = self._match_tags(batch, u64, env, ok_idx)
        fast = tag_id >= 0
        self._sync_bound()
        bound_at_start = self.bound.copy()
        bind_at = self._resolve_batch(batch, env, tag_id, fast)
        self._aggregate(env, sizes, tag_id, fast, bound_at_start, bind_at)
        self.decoded = (fast, tag_id, self.table.names, env.step, env.meta)

    def _match_tags(self, batch: RecordBatch, u64: np.ndarray, env: _Envelope, idx: np.ndarray) -> np.ndarray:
        ts, tl = env.tag_start[idx], env.tag_len[idx]
        words = _tag_words(u64, ts, tl)
        h = _tag_hash(tl, words)
        if not self.table.names:  # a file's first batch: every tag is new, nothing to match
            tid = np.full(len(idx), -1, dtype=np.int64)
            self._learn(batch, idx, ts, tl, words, h, tid, None)
            return tid
        tid = self.table.match(tl, words, h)
        unknown = (tid < 0).nonzero()[0]
        if len(unknown):
            self._learn(batch, idx, ts, tl, words, h, tid, unknown)
        return tid

    def _learn(self, batch: RecordBatch, idx, ts, tl, words, h, tid, unknown) -> None:
        """Learn the tags of unmatched records (``unknown``, None: all) and set their ``tid``.

        The records are grouped by tag hash; the first of each group is parsed with
        ``event_pb2`` (the full parse validates the tag's UTF-8 and confirms the envelope
        decode) and, if it holds, names the group's tag; a record of the group takes that tag
        only if its bytes equal the first's (exact: a hash collision leaves a record unmatched,
        to the per-record path). One parse a new tag, and no second match against the table."""
        sub = np.arange(len(idx)) if unknown is None else unknown
        _, first, inv = np.unique(h[sub], return_index=True, return_inverse=True)
        buf = batch.buf
        group = []
        for j in sub[first].tolist():
            raw = buf[int(ts[j]) : int(ts[j] + tl[j])]
            t = self.table.ids.get(raw)
            if t is None:
                s, n = int(batch.starts[idx[j]]), int(batch.sizes[idx[j]])
                ev = self._parse(buf[s + 12 : s + n - 4])
                if ev is not None and len(ev.summary.value) == 1 and ev.summary.value[0].tag.encode("utf-8") == raw:
                    t = self.table.add(raw, ev.summary.value[0].tag)
                    self._named[int(idx[j])] = _value_plugin(ev.summary.value[0])
            group.append(-1 if t is None else t)
        rep = sub[first][inv]
        same = tl[sub] == tl[rep]
        for w in words:
            same &= w[sub] == w[rep]
        tid[sub] = np.where(same, np.array(group, dtype=np.int64)[inv], -1)
        self._sync_bound()

    def _resolve_batch(self, batch: RecordBatch, env: _Envelope, tag_id, fast) -> Dict[int, int]:
        """Run the per-record path and the tag bindings in file order.

        Fast records of tags already bound need nothing. For each unbound tag only its first
        record that may carry a plugin matters; those and the per-record ("slow") records are
        merged by index and processed in order. Returns tag id -> index where it got bound.
        """
        fidx = fast.nonzero()[0]
        maybe = fidx[~self.bound[tag_id[fidx]] & (env.code[fidx] != 0)]
        heap: List[Tuple[int, int]] = []
        if len(maybe):  # each tag's first such record (a sort, np.unique, cost more)
            first = np.full(len(self.table.names), len(fast), dtype=np.int64)
            np.minimum.at(first, tag_id[maybe], maybe)
            tags = (first < len(fast)).nonzero()[0]
            heap = list(zip(first[tags].tolist(), tags.tolist()))
        heap += [(i, -1) for i in (~fast).nonzero()[0].tolist()]
        heapq.heapify(heap)
        self._bind_at = bind_at = {}
        buf, base = batch.buf, batch.base
        try:
            while heap:
                i, tid = heapq.heappop(heap)
                self._index = i
                s, n = int(batch.starts[i]), int(batch.sizes[i])
                if tid < 0:
                    self._record(buf[s + 12 : s + n - 4], n, base + s)
                elif not self.bound[tid]:
                    plugin = _CODE_PLUGIN.get(int(env.code[i])) or self._metadata_plugin(i, buf, s, n)
                    if plugin:
                        self._bind(self.table.names[tid], plugin)
                    else:  # metadata without a plugin name: the tag's next candidate decides
                        later = maybe[(tag_id[maybe] == tid) & (maybe > i)]
                        if len(later):
                            heapq.heappush(heap, (int(later[0]), tid))
        finally:
            self._bind_at = None
        return bind_at

    def _metadata_plugin(self, i: int, buf: bytes, s: int, n: int) -> str:
        named = self._named.get(i)
        if named is not None:
            return named
        ev = self._parse(buf[s + 12 : s + n - 4])
        return _value_plugin(ev.summary.value[0]) if ev is not None and ev.summary.value else ""

    def _aggregate(self, env: _Envelope, sizes, tag_id, fast, bound_at_start, bind_at) -> None:
        """Sum the fast records per (tag, bound or not) and fold them into ``tags``."""
        fidx = fast.nonzero()[0]
        if not len(fidx):
            return
        tid = tag_id[fidx]
        ntags = len(self.table.names)
        when = np.full(ntags, _I64_MAX, dtype=np.int64)
        for t, i in bind_at.items():
            when[t] = i
        is_bound = bound_at_start[tid] | (fidx >= when[tid])
        gid = tid * 2 + is_bound
        ngroups = 2 * ntags
        nbytes = np.zeros(ngroups, dtype=np.int64)
        np.add.at(nbytes, gid, sizes[fidx])
        count = np.bincount(gid, minlength=ngroups)
        step = env.step[fidx]
        lo = np.full(ngroups, _I64_MAX, dtype=np.int64)
        hi = np.full(ngroups, _I64_MIN, dtype=np.int64)
        np.minimum.at(lo, gid, step)
        np.maximum.at(hi, gid, step)
        names, bindings = self.table.names, self.bindings
        groups = count.nonzero()[0]
        for g, nb, k, a, z in zip(groups.tolist(), nbytes[groups].tolist(), count[groups].tolist(),
                                  lo[groups].tolist(), hi[groups].tolist()):
            tag = names[g >> 1]
            self._add_tag(bindings[tag] if g & 1 else "", tag, nb, k, a, z)

    # result -----------------------------------------------------------------------------
    def finish(self, reader: RecordReader) -> EventFileStats:
        """The stats, with the damaged tail (if any) and the warnings."""
        warnings = []
        if self.bad_events:
            warnings.append(
                f"{self.name}: {self.bad_events} record(s) are not parseable Event protos "
                f"(first at offset {self.first_bad_offset}); counted as other events"
            )
        size = reader.size
        if reader.status != "ok":
            tail = size - reader.error_offset
            if reader.status == "truncated":
                self.fixed[C.EVENTS_INCOMPLETE] = FixedStat(tail, 0)
                warnings.append(f"{reader.error}; a writer may still be appending")
            elif reader.error_offset == 0:
                self.fixed[C.EVENTS_CORRUPT] = FixedStat(tail, 0)
                warnings.append(f"{self.name}: not a TFRecord event file ({_detail(reader)})")
            else:
                self.fixed[C.EVENTS_CORRUPT] = FixedStat(tail, 0)
                warnings.append(f"{reader.error}; TensorBoard stops reading there ({tail} bytes unread)")
        return EventFileStats(
            size=size,
            records=reader.records,
            status=reader.status,
            error_offset=reader.error_offset,
            warning="; ".join(warnings) or None,
            fixed=self.fixed,
            tags=self.tags,
            bindings=self.bindings,
        )


def _detail(reader: RecordReader) -> str:
    prefix = f"{reader.name}: "
    err = reader.error or ""
    return err[len(prefix) :] if err.startswith(prefix) else err


def _value_plugin(value) -> str:
    """The plugin a value names by itself: its legacy type, else its metadata (may be '')."""
    legacy = C.LEGACY_PLUGIN.get(value.WhichOneof("value"))
    if legacy:
        return legacy
    return value.metadata.plugin_data.plugin_name if value.HasField("metadata") else ""


def _split_bytes(framed: int, values) -> List[int]:
    """Split ``framed`` bytes between values in proportion to their serialized sizes."""
    if len(values) == 1:
        return [framed]
    weights = [v.ByteSize() for v in values]
    total = sum(weights)
    if total == 0:
        return [0] * (len(values) - 1) + [framed]
    shares = [framed * w // total for w in weights[:-1]]
    return shares + [framed - sum(shares)]
