"""What a reduce's own scan learnt in its pass over a big event file, kept for that reduce.

A reduce scans the logdir to plan, then rewrites each run: the rewrite's selection needs every
record's tag, step and place in the file, which the scan's pass has just decoded. Reading and
decoding a 1 GB file a second time was a third of a reduce's time. Inside ``retaining()`` (the
reduce's planning, not a dry run or the tab's scan), the scan keeps, for each local event file
of at least ``MIN_BYTES``, an ``EventPass``: the file's sha256 (hashed on a second core during
the same pass), its ``stat_sig`` (equal before and after the pass), every record's framed size
and stored data CRC, and what the vectorised decode found of each batch (``StatsFold.decoded``):
about 22 bytes a record, and the framed bytes of the small records (``SMALL_FRAME``: scalars,
mostly; see ``small_offsets``), within ``MAX_SMALL_BYTES``.

Why the small records' bytes: a reduce keeps every scalar, and a scalar record is ~40 bytes
between histograms and images of kilobytes. The copy and the verification's byte comparison
then read tens of thousands of such records one at a time, a system call each, which cost more
than the rest of both together (~0.3 s each per GB). They are bytes the pass hashed: where the
pass is used (its sha256 is the backup's), they are the backup's bytes.

Trust: a pass describes the bytes it hashed. Its user (``event_rewrite``) takes it only while the
file's ``stat_sig`` is unchanged, and the copy that follows uses it only when its sha256 is the
backup's; any record payload the selection needs again is re-read and checked against its CRC.
Memory is bounded by ``MAX_RECORDS`` and ``MAX_SMALL_BYTES`` over all kept passes; a file above
the first is simply not kept (the selection then makes its own pass, as without this module),
beyond the second a pass keeps no more record bytes (those records are read from the file).
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

if TYPE_CHECKING:  # numpy is imported by the functions that compute: the scan's walk needs none
    import numpy as np

#: smaller event files are re-read by the selection (a pass costs less than keeping it)
MIN_BYTES = 8 << 20
#: records kept over all passes (~22 bytes each)
MAX_RECORDS = 4_000_000
#: records of at most this framed size have their bytes kept (see the module docstring)
SMALL_FRAME = 1024
#: bytes of small records kept over all passes
MAX_SMALL_BYTES = 32 << 20


@dataclass
class BatchDecode:
    """One batch of the pass: ``n`` records from record ``first``; ``decoded`` as
    ``StatsFold.decoded()`` gave it (None: the batch was decoded record by record)."""

    first: int
    n: int
    decoded: Optional[tuple]


@dataclass
class EventPass:
    """One event file as a reduce's scan read it (see the module docstring)."""

    path: str  # real path
    stat: tuple  # files.stat_sig before the pass, equal after it
    sha256: str
    start: int  # file offset of the first record (the rest follow back to back)
    sizes: np.ndarray  # uint32 (int64 for a record >= 4 GB): framed size of each record
    crcs: np.ndarray  # uint32: stored (masked) data CRC of each record
    batches: List[BatchDecode] = field(default_factory=list)
    stats: object = None  # eventfile.EventFileStats (what the scan reported)
    small: bytes = b""  # framed bytes of records < small_upto of size <= SMALL_FRAME, in order
    small_upto: int = 0

    @property
    def records(self) -> int:
        return len(self.sizes)

    def offsets(self) -> np.ndarray:
        """int64 file offset of each record's header."""
        return offsets_of(self.start, self.sizes)


def small_offsets(sizes: np.ndarray, small_upto: int) -> np.ndarray:
    """int64 offset in a pass's ``small`` bytes of each record kept there, -1 for the others
    (records from ``small_upto`` on, and those bigger than ``SMALL_FRAME``)."""
    import numpy as np

    kept = np.zeros(len(sizes), dtype=bool)
    kept[:small_upto] = sizes[:small_upto] <= SMALL_FRAME
    ends = np.cumsum(np.where(kept, sizes, 0), dtype=np.int64)
    return np.where(kept, ends - sizes, -1)


def gather_small(buf, starts: np.ndarray, sizes: np.ndarray) -> bytes:
    """The framed bytes of a batch's records of at most ``SMALL_FRAME`` bytes, in order."""
    import numpy as np

    small = sizes <= SMALL_FRAME
    if not small.any():
        return b""
    st, n = starts[small], sizes[small]
    src = np.frombuffer(buf, dtype=np.uint8)
    parts = []
    # _GATHER records at a time: the index arrays cost ~24 bytes per byte gathered
    for a in range(0, len(n), _GATHER):
        s, k = st[a:a + _GATHER], n[a:a + _GATHER]
        # each byte's index in ``buf``: its record's start, plus its place in the record
        shift = np.repeat(s - (np.cumsum(k) - k), k)
        parts.append(src[shift + np.arange(int(k.sum()))].tobytes())
    return b"".join(parts)


#: records per gather step (at most ``_GATHER * SMALL_FRAME`` bytes at once)
_GATHER = 256


class SmallBytes:
    """A pass's small records' bytes (``gather_small``), batch after batch, within ``budget``
    bytes: past it nothing more is kept, and ``upto`` says up to which record it holds them."""

    def __init__(self, budget: int) -> None:
        self.budget, self.parts, self.size, self.upto = budget, [], 0, 0
        self.full = budget <= 0

    def add(self, batch, records_after: int) -> None:
        """Gather ``batch`` (a ``tfrecord.RecordBatch``), after which the pass has seen
        ``records_after`` records."""
        if self.full:
            return
        blob = gather_small(batch.buf, batch.starts, batch.sizes)
        if self.size + len(blob) > self.budget:
            self.full = True  # the rest are read where needed
            return
        self.parts.append(blob)
        self.size += len(blob)
        self.upto = records_after

    def stop(self) -> None:
        """Keep nothing more (what is held stays valid up to ``upto``)."""
        self.full = True

    def joined(self) -> bytes:
        return b"".join(self.parts)


def offsets_of(start: int, sizes: np.ndarray) -> np.ndarray:
    """int64 file offset of each of back-to-back records of ``sizes`` from ``start``."""
    import numpy as np

    out = np.empty(len(sizes), dtype=np.int64)
    if len(out):
        out[0] = start
        np.cumsum(sizes[:-1], dtype=np.int64, out=out[1:])
        out[1:] += start
    return out


_LOCK = threading.Lock()
_KEPT: Dict[str, Tuple[int, EventPass]] = {}  # real path -> (owner token, pass)
_LOCAL = threading.local()
_TOKENS = iter(range(1, 1 << 62))


def wanted(path, size: Optional[int]) -> bool:
    """True when a scan in this thread should keep its pass over ``path`` (of ``size`` bytes)."""
    return (getattr(_LOCAL, "token", None) is not None and isinstance(path, (str, os.PathLike))
            and size is not None and size >= MIN_BYTES)


@contextlib.contextmanager
def retaining() -> Iterator[int]:
    """Scans in this thread keep their passes (see the module); yields the token that
    ``release`` takes once the reduce is over (passes nobody took are then dropped)."""
    prev = getattr(_LOCAL, "token", None)
    with _LOCK:
        token = next(_TOKENS)
    _LOCAL.token = token
    try:
        yield token
    finally:
        _LOCAL.token = prev


def keep(ep: EventPass) -> bool:
    """Keep ``ep`` for the current ``retaining()`` scope, within ``MAX_RECORDS`` (and its
    small records' bytes within ``MAX_SMALL_BYTES``: beyond, it keeps none)."""
    token = getattr(_LOCAL, "token", None)
    if token is None:
        return False
    with _LOCK:
        _KEPT.pop(ep.path, None)
        held = sum(p.records for _, p in _KEPT.values())
        if held + ep.records > MAX_RECORDS:
            return False
        if sum(len(p.small) for _, p in _KEPT.values()) + len(ep.small) > MAX_SMALL_BYTES:
            ep.small, ep.small_upto = b"", 0
        _KEPT[ep.path] = (token, ep)
    return True


def room() -> int:
    """Records a new pass may still keep (a pass stops collecting beyond it)."""
    with _LOCK:
        return MAX_RECORDS - sum(p.records for _, p in _KEPT.values())


def small_room() -> int:
    """Bytes of small records a new pass may still keep (it stops keeping them beyond)."""
    with _LOCK:
        return MAX_SMALL_BYTES - sum(len(p.small) for _, p in _KEPT.values())


def take(path: str, sig: Optional[tuple]) -> Optional[EventPass]:
    """The kept pass over ``path`` (removed from the store) if the file's ``stat_sig`` is
    still ``sig`` as it was during the pass; None otherwise."""
    real = os.path.realpath(path)
    with _LOCK:
        got = _KEPT.pop(real, None)
    if got is None or sig is None or got[1].stat != sig:
        return None
    return got[1]


def release(token: int) -> None:
    """Drop the passes kept under ``token`` that nobody took."""
    with _LOCK:
        for k in [k for k, (t, _) in _KEPT.items() if t == token]:
            del _KEPT[k]


def held() -> int:
    """Passes kept now (tests, diagnostics)."""
    with _LOCK:
        return len(_KEPT)


__all__ = ["BatchDecode", "EventPass", "MAX_RECORDS", "MAX_SMALL_BYTES", "MIN_BYTES",
           "SMALL_FRAME", "SmallBytes", "gather_small", "held", "keep", "offsets_of", "release", "retaining",
           "room", "small_offsets", "small_room", "take", "wanted"]
