"""Slim a PyTorch (kineto) Chrome trace in a stream: ``*.pt.trace.json[.gz]`` -> ``.gz``.

Never loads the whole file (real traces reach several GB): the top-level object is walked
with the C JSON scanner of the standard library (``JSONDecoder.raw_decode``, one call per
trace event on a sliding text window), so memory is one read window plus the largest single
event, and the output is written compact and gzip'd as it goes. The result is checked with
an independent parser, ``ijson`` (yajl, C), streaming the gzip'd output.

Options (``content.trace`` of a policy):

* ``whitespace`` (default true): write compact JSON (kineto pretty-prints: ~24% of a trace
  is whitespace). False writes one event per line with ``", "``/``": "`` separators.
* ``drop_python_function``: drop ``"cat": "python_function"`` events (``with_stack`` frames).
  The trace view loses the Python call stacks; operators and kernels are unchanged.
* ``drop_memory``: drop ``"ph": "i"`` events named ``"[memory]"``. torch-tb-profiler's
  Memory view is built from them and becomes empty; other views are unchanged.
* ``keep_steps`` = N: keep the first N ``ProfilerStep#k`` spans (by start time) and **every
  event that starts before the end of the N-th one**, on every thread: the work inside the
  kept steps and whatever ran before the first step (warm-up, profiler start). Events
  starting later are dropped, except metadata (``"ph": "M"``: process and thread names),
  trace-level spans and global instant events (``cat`` ``"Trace"``, ``"s": "g"``), and
  device activity (GPU kernels, memcpy, ``ac2g`` flows) whose ``correlation`` id belongs to a
  launch that is kept: a kernel launched in a kept step stays even if it ran after the cut.
* ``min_dur_us`` = X: drop complete events (``"ph": "X"``) shorter than X microseconds,
  except ``ProfilerStep#`` spans and trace-level spans. Flow arrows that pointed at a dropped
  slice are kept (viewers draw them to the enclosing slice or skip them).

An event dropped for several reasons is counted once, under the first that applies in the
order above. All top-level keys are kept in their original order (``traceName`` too, even
though the file name gains ``.gz``).

Verification (``verify_slim``): the gzip'd output is parsed by ijson; its trace events must
be, in order, exactly the events the rewrite kept (a sha256 over their canonical JSON, so
"identical as JSON values"), none of them of a dropped kind, their number must be the
original count minus the removed counts, and the output's top-level keys and values must
equal the original's.

Why one module: the streaming reader, the event classifier and the
writer are one pass with one cut rule (``find_cut``, ``kept_correlations``), and ``verify_slim``
re-reads the output with that same classifier (``_Classifier``); apart, the rule the check trusts
could drift from the one the slim applied.
"""
from __future__ import annotations

import codecs
import gzip
import hashlib
import json
import os
import re
from typing import Dict, Iterator, List, Optional, Tuple

from tb_footprint_plugin.transforms.gzip_trace import LEVEL, CountingSink
from tb_footprint_plugin.plan.rules import TraceOptions
from tb_footprint_plugin.storage.files import CHUNK, fsync_file, open_staged, sha256_file
from tb_footprint_plugin.storage.hashing import HashingReader
from tb_footprint_plugin.storage.regular import open_regular

MAX_VALUE = 256 << 20  # a single JSON value (one trace event, or a header value) larger than this is refused
REMOVAL_KINDS = ("python_function", "memory", "after_steps", "short")


class TraceFormatError(ValueError):
    """The input is not a Chrome trace this tool can rewrite safely."""


# ---------------------------------------------------------------------------------------
# streaming JSON walker
# ---------------------------------------------------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")
_DELIM = frozenset(" \t\n\r,]}")


def _no_constant(name: str):
    raise TraceFormatError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


class _Reader:
    """Pull JSON values out of a binary stream one at a time, with a sliding text window."""

    def __init__(self, binfile, chunk: int = CHUNK):
        self.f = binfile
        self.dec = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.chunk = chunk

    def _fill(self, want: Optional[int] = None) -> bool:
        if self.eof:
            return False
        if len(self.buf) - self.pos > MAX_VALUE:
            raise TraceFormatError(f"a JSON value larger than {MAX_VALUE >> 20} MB, or malformed JSON")
        b = self.f.read(want or self.chunk)
        if b:
            text = self.dec.decode(b)
        else:
            self.eof = True
            text = self.dec.decode(b"", final=True)
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-whitespace character ("" at the end)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, ch: str) -> None:
        c = self.peek()
        if c != ch:
            raise TraceFormatError(f"expected {ch!r}, found {c or 'end of file'!r}")
        self.pos += 1

    def value(self):
        c = self.peek()
        if not c:
            raise TraceFormatError("unexpected end of file")
        want = self.chunk
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if self.eof:
                    raise TraceFormatError(f"invalid JSON: {e}") from None
                self._fill(want)
                want *= 2
                continue
            # a number or literal at the window's end may continue in the next chunk
            if c not in '{["' and not self.eof and (end >= len(self.buf) or self.buf[end] not in _DELIM):
                self._fill(want)
                continue
            self.pos = end
            return obj


def _walk(binfile) -> Iterator[Tuple[str, object, object]]:
    """``("key", name, value)`` for top-level keys, ``("events", name, None)`` when the trace
    event array starts, ``("event", event, None)`` per event, ``("end_events", ...)``,
    ``("end", ...)``. A top-level array (Chrome's array format) is events only."""
    r = _Reader(binfile)
    c = r.peek()
    if c == "[":
        r.pos += 1
        yield ("events", None, None)
        yield from _events(r)
        yield ("end_events", None, None)
    elif c == "{":
        r.pos += 1
        seen_events = False
        if r.peek() == "}":
            r.pos += 1
        else:
            while True:
                key = r.value()
                if not isinstance(key, str):
                    raise TraceFormatError("a top-level key is not a string")
                r.expect(":")
                if key == "traceEvents" and r.peek() == "[":
                    if seen_events:
                        raise TraceFormatError("two traceEvents arrays")
                    seen_events = True
                    r.pos += 1
                    yield ("events", key, None)
                    yield from _events(r)
                    yield ("end_events", key, None)
                else:
                    yield ("key", key, r.value())
                c = r.peek()
                r.pos += 1
                if c == "}":
                    break
                if c != ",":
                    raise TraceFormatError(f"expected ',' or '}}' at the top level, found {c!r}")
        if not seen_events:
            raise TraceFormatError("no traceEvents array")
    else:
        raise TraceFormatError("not a JSON object or array")
    if r.peek() != "":
        raise TraceFormatError("trailing data after the trace")
    yield ("end", None, None)


def _events(r: _Reader) -> Iterator[Tuple[str, object, object]]:
    if r.peek() == "]":
        r.pos += 1
        return
    while True:
        yield ("event", r.value(), None)
        c = r.peek()
        r.pos += 1
        if c == "]":
            return
        if c != ",":
            raise TraceFormatError(f"expected ',' or ']' in traceEvents, found {c!r}")


# ---------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------
def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_step(ev: dict) -> bool:
    name = ev.get("name")
    return (ev.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#")
            and ev.get("cat") != "gpu_user_annotation")


def _correlation(ev: dict):
    args = ev.get("args")
    if isinstance(args, dict) and "correlation" in args:
        return args["correlation"]
    if ev.get("cat") == "ac2g" and ev.get("ph") in ("s", "f", "t"):
        return ev.get("id")
    return None


def _always(ev: dict) -> bool:
    """Events ``keep_steps`` never drops: metadata, trace-level spans, global instants."""
    ph = ev.get("ph")
    return ph == "M" or ev.get("cat") == "Trace" or (ph in ("i", "I") and ev.get("s") == "g")


class _Classifier:
    def __init__(self, o: TraceOptions, cut: Optional[float], corr: Optional[set]):
        self.o, self.cut, self.corr = o, cut, corr or set()

    def why(self, ev) -> Optional[str]:
        """The removal kind of one event, or None to keep it."""
        if not isinstance(ev, dict):
            return None
        o = self.o
        ph = ev.get("ph")
        if o.drop_python_function and ev.get("cat") == "python_function":
            return "python_function"
        if o.drop_memory and ph in ("i", "I") and ev.get("name") == "[memory]":
            return "memory"
        if self.cut is not None and not _always(ev):
            ts = ev.get("ts")
            if _num(ts) and ts >= self.cut:
                c = _correlation(ev)
                if c is None or c not in self.corr:
                    return "after_steps"
        if o.min_dur_us is not None and ph == "X":
            dur = ev.get("dur")
            if _num(dur) and dur < o.min_dur_us and not _is_step(ev) and ev.get("cat") != "Trace":
                return "short"
        return None


# ---------------------------------------------------------------------------------------
# passes
# ---------------------------------------------------------------------------------------
def _open_source(path: str, opener=None):
    """(text-ready binary stream, raw hashing file, closer); ``opener()`` opens the raw bytes
    instead of the path (an object's ranged reader: the plan measures a bucket's trace)."""
    raw = opener() if opener is not None else open_regular(path)  # never through a symlink, never a FIFO
    h = HashingReader(raw)
    stream = gzip.GzipFile(fileobj=h, mode="rb") if path.endswith(".gz") else h
    return stream, h, raw


def _events_of(path: str, opener=None) -> Iterator[dict]:
    stream, _h, raw = _open_source(path, opener)
    try:
        for kind, a, _ in _walk(stream):
            if kind == "event":
                yield a
    finally:
        raw.close()


def find_cut(path: str, keep_steps: int, opener=None) -> Tuple[Optional[float], List[str], int, bool]:
    """(time cut, names of the kept steps, number of steps, has device activity)."""
    steps = []
    device = False
    for ev in _events_of(path, opener):
        if not isinstance(ev, dict):
            continue
        if _is_step(ev) and _num(ev.get("ts")) and _num(ev.get("dur")):
            steps.append((ev["ts"], ev["ts"] + ev["dur"], ev.get("name")))
        elif not device and _correlation(ev) is not None:
            device = True
    steps.sort()
    if len(steps) <= keep_steps:
        return None, [s[2] for s in steps], len(steps), device
    kept = steps[:keep_steps]
    return max(s[1] for s in kept), [s[2] for s in kept], len(steps), device


def kept_correlations(path: str, cut: float, opener=None) -> set:
    """Correlation ids of launches (and ``ac2g`` flows) that start before the cut."""
    out = set()
    for ev in _events_of(path, opener):
        if isinstance(ev, dict) and not _always(ev):
            ts = ev.get("ts")
            if _num(ts) and ts < cut:
                c = _correlation(ev)
                if c is not None:
                    out.add(c)
    return out


def _dumper(o: TraceOptions):
    if o.whitespace:
        enc = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    else:
        enc = json.JSONEncoder(separators=(", ", ": "), ensure_ascii=True, allow_nan=False)
    return enc.encode


def canonical(ev) -> str:
    """The JSON text events are hashed by (same on both sides of the check)."""
    return _CANON(ev)


_CANON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode


class _GzOut:
    """The gzip'd output of one slimming pass into the binary file ``raw`` (a file the reduce
    writes, or the plan's ``CountingSink``): the same bytes either way."""

    def __init__(self, raw, level: int):
        self.raw = raw
        self.gz = gzip.GzipFile(filename="", mode="wb", compresslevel=level, fileobj=self.raw, mtime=0)
        self.parts: List[str] = []
        self.n = 0
        self.head: Optional[bytes] = None

    def write(self, s: str) -> None:
        self.parts.append(s)
        self.n += len(s)
        if self.n >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.gz.write("".join(self.parts).encode("ascii"))
            self.parts, self.n = [], 0

    def close(self) -> None:
        self.flush()
        self.gz.close()


def slim_trace(src: str, dst: str, options: TraceOptions, expected_sha: Optional[str] = None,
               level: int = LEVEL) -> dict:
    """Write the slimmed, gzip'd trace of ``src`` to ``dst``; returns the stats the check uses.

    Raises ``TraceFormatError`` for input that is not a Chrome trace, ``ValueError`` if the
    source is not the backed-up file (``expected_sha``)."""
    raw = open_staged(dst)  # never through a link planted at dst
    try:
        stats, sha = _slim_into(src, open_regular(src), raw, options, level)
        fsync_file(raw)
    except BaseException:
        raw.close()
        os.unlink(dst)
        raise
    raw.close()
    if expected_sha is not None and sha != expected_sha:
        os.unlink(dst)
        raise ValueError(f"{os.path.basename(src)}: changed while it was being slimmed (sha256 differs)")
    return stats


def slim_size(src: str, options: TraceOptions, level: int = LEVEL, opener=None) -> dict:
    """What ``slim_trace`` would write, without writing it: ``{size, sha256, source_sha256}`` of
    the very same pass run into a ``CountingSink`` (memory as the slim's own: one read window
    and the largest event). ``src`` is read only if it is a regular file (no symlink followed);
    ``opener()``, when given, opens its bytes instead (a bucket object's ranged reader; ``src``
    then only names it). Raises ``TraceFormatError`` as ``slim_trace`` would."""
    sink = CountingSink()
    raw = opener() if opener is not None else open_regular(src)
    _stats, sha = _slim_into(src, raw, sink, options, level, opener)
    return {"size": sink.size, "sha256": sink.sha.hexdigest(), "source_sha256": sha}


def _slim_into(src: str, raw_in, raw_out, options: TraceOptions, level: int, opener=None) -> Tuple[dict, str]:
    """One slimming pass from ``raw_in``, the binary file of ``src`` (closed here), into
    ``raw_out`` (left open): ``(stats, sha256 of raw_in)``. The steps' cut, when asked, takes
    its own passes over ``src`` first (``_step_cut``)."""
    o = options
    with raw_in:
        cut, kept_steps, n_steps, corr = _step_cut(src, o, opener)
        w = _SlimWriter(o, _Classifier(o, cut, corr), _GzOut(raw_out, level))
        h = HashingReader(raw_in)
        stream = gzip.GzipFile(fileobj=h, mode="rb") if src.endswith(".gz") else h
        for kind, a, b in _walk(stream):
            if kind == "event":
                w.event(a)
            else:
                w.structure(kind, a, b)
        while h.read(CHUNK):  # hash the rest of the raw file (gzip trailer padding etc.)
            pass
        w.out.close()
    return dict(w.stats(), cut_ts=cut, steps_total=n_steps, steps_kept=kept_steps,
                kept_correlations=len(corr)), h.sha.hexdigest()


def _step_cut(src: str, o: TraceOptions, opener=None) -> Tuple[Optional[float], list, int, set]:
    """Where ``keep_steps`` cuts the trace: (cut timestamp or None, kept steps, steps in all,
    correlation ids of device work launched by kept steps)."""
    if o.keep_steps is None:
        return None, [], 0, set()
    cut, kept_steps, n_steps, device = find_cut(src, o.keep_steps, opener)
    corr = kept_correlations(src, cut, opener) if cut is not None and device else set()
    return cut, kept_steps, n_steps, corr


class _SlimWriter:
    """The output side of one slimming pass: kept events and the top-level structure around
    them, written as they stream by, with the counts and digests the check compares."""

    def __init__(self, o: TraceOptions, cls: "_Classifier", out: _GzOut):
        self.o, self.cls, self.out = o, cls, out
        self.dump = _dumper(o)
        self.sep_key = ":" if o.whitespace else ": "
        self.sep_item = "," if o.whitespace else ",\n"
        self.removed = {k: 0 for k in REMOVAL_KINDS}
        self.n_in = self.n_out = 0
        self.ev_hash = hashlib.sha256()
        self.canon_parts: List[str] = []
        self.top: List[Tuple[str, object]] = []
        self.head: List[str] = []  # the text before the first event
        self.tail: List[str] = []  # the text after the last event
        self.array_format = False
        self.cur = self.head
        self.first_key = True
        self.first_event = True

    def event(self, ev) -> None:
        self.n_in += 1
        why = self.cls.why(ev)
        if why is not None:
            self.removed[why] += 1
            return
        self.n_out += 1
        text = self.dump(ev)
        self.canon_parts.append(text if self.o.whitespace else canonical(ev))
        if len(self.canon_parts) >= 4096:
            self._hash_parts()
        if self.first_event:
            self.first_event = False
        else:
            self.out.write(self.sep_item)
        self.out.write(text)

    def structure(self, kind: str, a, b) -> None:
        """Everything but an event: a top-level key, the start or end of the event list, the end."""
        if kind == "key":
            self.top.append((a, b))
            piece = ("{" if self.first_key else ",") + self.dump(a) + self.sep_key + self.dump(b)
            self.first_key = False
            self.cur.append(piece)
            if self.cur is not self.head:
                self.out.write(piece)
        elif kind == "events":
            if a is None:
                self.array_format = True
                self.cur.append("[")
            else:
                self.cur.append(("{" if self.first_key else ",") + self.dump(a) + self.sep_key + "[")
                self.first_key = False
            self.out.write("".join(self.head))
            self.cur = self.tail
        elif kind == "end_events":
            self.cur.append("]")
            self.out.write("]")
        elif kind == "end":
            if not self.array_format:
                self.cur.append("}")
                self.out.write("}")

    def _hash_parts(self) -> None:
        self.ev_hash.update("\n".join(self.canon_parts).encode("ascii") + b"\n")
        self.canon_parts = []

    def stats(self) -> dict:
        if self.canon_parts:
            self._hash_parts()
        return {
            "options": self.o.to_dict(),
            "events_before": self.n_in,
            "events_after": self.n_out,
            "removed": self.removed,
            "events_sha256": self.ev_hash.hexdigest(),
            "head": "".join(self.head),
            "tail": "".join(self.tail),
            "top_level": _top_digest(self.top, self.array_format),
            "array_format": self.array_format,
        }


def _top_digest(top: List[Tuple[str, object]], array_format: bool) -> str:
    """sha256 of the top-level keys and values (other than the trace events), in order."""
    if array_format:
        return hashlib.sha256(b"[]").hexdigest()
    return hashlib.sha256(canonical([[k, v] for k, v in top]).encode("ascii")).hexdigest()


def verify_slim(dst: str, stats: dict) -> dict:
    """Re-read the gzip'd output with ijson: it must parse, hold exactly the kept events in
    order (sha256 of their canonical JSON), none of a dropped kind, and the original
    top-level keys and values. Raises ``ValueError`` with the reason; returns a summary."""
    import ijson

    o = TraceOptions.from_dict(stats["options"])
    corr = None  # a kept device event after the cut is allowed: it was matched by correlation
    cls = _Classifier(o, None, corr)
    prefix = "item" if stats["array_format"] else "traceEvents.item"
    sink = ijson.sendable_list()
    coro = ijson.items_coro(sink, prefix, use_float=True)
    ev_hash = hashlib.sha256()
    parts: List[str] = []
    n = 0
    bad = 0
    head_len = len(stats["head"].encode("ascii"))
    tail_len = len(stats["tail"].encode("ascii"))
    first = b""
    last = b""
    with gzip.open(dst, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            if len(first) < head_len:
                first += chunk[: head_len - len(first)]
            last = (last + chunk)[-tail_len:] if tail_len else b""
            coro.send(chunk)
            for ev in sink:
                n += 1
                parts.append(canonical(ev))
                if cls.why(ev) is not None:
                    bad += 1
            del sink[:]
            if len(parts) >= 4096:
                ev_hash.update("\n".join(parts).encode("ascii") + b"\n")
                parts = []
        coro.close()
        for ev in sink:
            n += 1
            parts.append(canonical(ev))
            if cls.why(ev) is not None:
                bad += 1
    if parts:
        ev_hash.update("\n".join(parts).encode("ascii") + b"\n")
    problems = []
    if n != stats["events_after"]:
        problems.append(f"{n} events in the output, {stats['events_after']} written")
    if stats["events_before"] - sum(stats["removed"].values()) != n:
        problems.append("event counts do not add up (before - removed != after)")
    if ev_hash.hexdigest() != stats["events_sha256"]:
        problems.append("the output's events differ from the kept original events")
    if bad:
        problems.append(f"{bad} event(s) of a dropped kind are still in the output")
    if first != stats["head"].encode("ascii") or last != stats["tail"].encode("ascii"):
        problems.append("the output's top-level layout is not what was written")
    else:
        skeleton = json.loads(stats["head"] + stats["tail"])
        if stats["array_format"]:
            ok = skeleton == []
        else:
            items = [[k, v] for k, v in skeleton.items() if k != "traceEvents"]
            ok = hashlib.sha256(canonical(items).encode("ascii")).hexdigest() == stats["top_level"]
        if not ok:
            problems.append("top-level keys or values differ from the original")
    if problems:
        raise ValueError("trace check failed: " + "; ".join(problems))
    return {"events": n, "ok": True}


def stage_trace_slim(action, src: str, tmp: str, sha: str) -> dict:
    """``stage_rewrite`` for a PyTorch trace: slim, gzip, check; the stage info."""
    params = getattr(action, "params", None) or (action.get("params") if isinstance(action, dict) else None) or {}
    options = TraceOptions.from_dict(params.get("trace"))
    stats = slim_trace(src, tmp, options, expected_sha=sha)
    try:
        verify_slim(tmp, stats)
    except Exception:
        os.unlink(tmp)
        raise
    return {
        "size": os.path.getsize(tmp),
        "sha256": sha256_file(tmp),
        "transform": "trace_slim",
        "events_before": stats["events_before"],
        "events_after": stats["events_after"],
        "removed": dict(stats["removed"]),
        "steps_total": stats["steps_total"],
        "steps_kept": list(stats["steps_kept"]),
        "trace_check": (f"trace re-read with ijson: {stats['events_after']} events identical to the "
                        f"kept originals, removed {_fmt_removed(stats['removed'])}"),
    }


def _fmt_removed(removed: Dict[str, int]) -> str:
    parts = [f"{v} {k}" for k, v in removed.items() if v]
    return ", ".join(parts) or "nothing"


__all__ = ["TraceOptions", "TraceFormatError", "slim_trace", "slim_size", "verify_slim", "stage_trace_slim",
           "find_cut", "canonical", "REMOVAL_KINDS"]
