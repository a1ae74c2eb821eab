"""Record-level checks of event files: framing, CRCs, and byte-level subsequence.

These run before any TensorBoard reader because the readers hide corruption: the Python
loaders silently stop at a bad CRC (it looks like a truncated file to them), and the Rust
server only checksums records that fail to parse, so a flipped bit inside a value can be
served as a different value (seen on the real Keras fixture).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from typing import Collection, Iterator, Mapping, Optional, Sequence

import numpy as np

from tb_footprint_plugin.scan import categories
from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.storage.regular import open_regular



@dataclass
class RecordCheck:
    """Outcome of re-reading one event file record by record."""

    path: str
    name: str
    status: str  # "ok" | "truncated" | "corrupt" | "unreadable"
    records: int
    size: int
    error_offset: Optional[int] = None
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        """One human line: the file, its state and where it went wrong."""
        if self.ok:
            return f"{self.name}: {self.records} records ok"
        where = f" at offset {self.error_offset}" if self.error_offset is not None else ""
        error = self.error or ""
        if error.startswith(f"{self.name}: "):  # the reader already names the file
            error = error[len(self.name) + 2:]
        return f"{self.name}: {self.status}{where}: {error}"

    def to_dict(self) -> dict:
        return asdict(self)


def event_file_names(run_dir: str) -> list[str]:
    """Names of the event files directly in ``run_dir`` (TensorBoard's rule), sorted.

    Symlinks count (a materialized original run is links into the vault); directories and
    files in subdirectories do not: a run is just its own directory's files.
    """
    try:
        entries = list(os.scandir(run_dir))
    except FileNotFoundError:
        return []
    names = [
        e.name
        for e in entries
        if categories.is_event_file_name(e.name) and e.is_file(follow_symlinks=True)
    ]
    return sorted(names)


def check_file(path: str) -> RecordCheck:
    """Re-read one file with CRC verification and report its framing status."""
    name = os.path.basename(path)
    try:
        size = os.stat(path).st_size
        with tfrecord.RecordReader(path, verify=True, display_name=name) as reader:
            count = sum(len(batch) for batch in reader.batches())  # no per-record objects
    except OSError as e:
        return RecordCheck(path, name, "unreadable", 0, 0, None, f"{type(e).__name__}: {e}")
    return RecordCheck(
        path, name, reader.status, count, size, reader.error_offset, reader.error
    )


def check_event_files(run_dir: str) -> list[RecordCheck]:
    """Check every ``*tfevents*`` file directly in ``run_dir`` (``.profile-empty`` too)."""
    return [check_file(os.path.join(run_dir, n)) for n in event_file_names(run_dir)]


def _iter_records(path: str, tap=None
                  ) -> Iterator[tuple[str, "tfrecord.Record", "tfrecord.RecordReader"]]:
    """``(file name, record, reader)`` for a file, or for a run directory's event files in
    name order (the order TensorBoard's Python loader reads them). ``tap(name)`` (optional)
    returns a fold that is shown every batch of the file (``add``) and then its reader
    (``finish``): another check made in the same pass."""
    paths = (
        [os.path.join(path, n) for n in event_file_names(path)] if os.path.isdir(path) else [path]
    )
    for p in paths:
        name = os.path.basename(p)
        fold = tap(name) if tap is not None else None
        with tfrecord.RecordReader(p, verify=True, display_name=name) as reader:
            for batch in reader.batches():
                if fold is not None:
                    fold.add(batch)
                for rec in batch.records():
                    yield name, rec, reader
        if fold is not None:
            fold.finish(reader)
        if reader.status != "ok":
            # Let the caller see a bad tail: a sentinel with no record.
            yield name, None, reader


def records_subsequence(
    original_path: str, reduced_path: str, inherited: Collection[str] = (),
    substitutes: Optional[Mapping[str, Sequence]] = None, original_tap=None,
) -> tuple[bool, str]:
    """Is every record of ``reduced_path`` byte-identical to one of ``original_path``, in order?

    Both paths are event files, or both run directories (records of all event files
    directly inside, in name order, so renamed or merged files still match). Streams both
    once: greedy matching is exact for subsequence tests. A framing error in the reduced
    side fails unless the file's name is in ``inherited`` (copied unchanged from a
    corrupt original); in the original it only ends that file's records.

    ``substitutes`` maps the sha256 of a record a rewrite re-encoded on purpose to the
    ``(sha256, size)`` of the original record it stands for: that record must then match
    that original record, in order (what changed inside it is the readers' checks' job).

    ``original_tap``: see ``_iter_records``; the original is then read to its end whatever
    the outcome, so the tap sees all of it.
    """
    orig_records = _iter_records(original_path, original_tap)
    try:
        return _subsequence(orig_records, reduced_path, inherited, substitutes)
    finally:
        if original_tap is not None:
            for _ in orig_records:
                pass


def _subsequence(orig_records, reduced_path, inherited, substitutes) -> tuple[bool, str]:
    subs = substitutes or {}
    orig_iter = (item for item in orig_records if item[1] is not None)
    matched = 0
    n_subs = 0
    last = "its start"
    for name, rec, reader in _iter_records(reduced_path):
        if rec is None:
            if name in inherited:
                continue
            return False, (
                f"{name} is {reader.status} at offset {reader.error_offset}: {reader.error}"
            )
        want = subs.get(hashlib.sha256(rec.data).hexdigest()) if subs else None
        for oname, orec, _ in orig_iter:
            if orec.data == rec.data or (
                want is not None and len(orec.data) == want[1]
                and hashlib.sha256(orec.data).hexdigest() == want[0]
            ):
                n_subs += want is not None and orec.data != rec.data
                last = f"{oname} offset {orec.offset}"
                break
        else:
            return False, (
                f"record #{matched} ({name} offset {rec.offset}, {len(rec.data)} bytes) is not "
                f"a record of the original after {last}"
            )
        matched += 1
    if n_subs:
        return True, (f"{matched} records, in order: {matched - n_subs} byte-identical to an original "
                      f"record, {n_subs} re-encoded from the original record they stand for")
    return True, f"{matched} records, each byte-identical to an original record, in order"


class ReducedPass:
    """What other checks need of the reduced run, gathered by ``records_subsequence_indexed``'s
    own pass over it (one read of the reduced run instead of three): each file's
    ``RecordCheck`` (``check_file``) and its ``EventFileStats`` (the tag index,
    ``dashboard.run_index``). ``complete`` once every file was read to its end."""

    def __init__(self, run_dir: str) -> None:
        self.names = event_file_names(run_dir)
        self.checks: list[RecordCheck] = []
        self.stats: list = []
        self._run_dir = run_dir
        #: ``pyside.ProbeTap`` shown each batch with its decode (the Python probe's first pass)
        self.probe = None

    @property
    def complete(self) -> bool:
        return [c.name for c in self.checks] == self.names

    def tap(self, name: str) -> "_ReducedFold":
        return _ReducedFold(self, name)


class _ReducedFold:
    def __init__(self, owner: ReducedPass, name: str) -> None:
        from tb_footprint_plugin.scan import eventfile

        self.owner, self.name, self.count = owner, name, 0
        self.fold = eventfile.StatsFold(name)

    def add(self, batch) -> None:
        self.fold.add(batch)
        self.count += len(batch)
        if self.owner.probe is not None:
            self.owner.probe.add(batch, self.fold.decoded())

    def finish(self, reader) -> None:
        path = os.path.join(self.owner._run_dir, self.name)
        self.owner.checks.append(RecordCheck(path, self.name, reader.status, self.count,
                                             os.stat(path).st_size, reader.error_offset,
                                             reader.error))
        self.owner.stats.append(self.fold.finish(reader))
        if self.owner.probe is not None:
            self.owner.probe.end_file(reader.status)


#: original records of a file above which its batches are not matched at once (the unique-key
#: table costs ~50 bytes a record)
FAST_MAX = 4_000_000


def records_subsequence_indexed(
    original_dir: str, reduced_path: str, facts: Mapping[str, object],
    inherited: Collection[str] = (), substitutes: Optional[Mapping[str, Sequence]] = None,
    reduced_tap=None,
) -> Optional[tuple[bool, str]]:
    """``records_subsequence`` of a run directory whose record index is known
    (``verify.original.FileFacts`` per event file: each record's offset, framed size and data
    CRC), without reading the original again: the index finds the candidate for each reduced
    record (same framed size and stored CRC), and that candidate's bytes, read at its offset in
    ``original_dir``'s file (or, for a small record, taken from the bytes the pass hashed:
    ``FileFacts.small``), must equal the reduced record's frame byte for byte. A 1 GB
    original reduced to a few MB costs a few MB of reads.

    Returns None when the index does not cover ``original_dir`` (the caller streams instead).
    ``reduced_tap``: as ``_iter_records``'s tap, shown the reduced run's batches (a
    ``ReducedPass``); a mismatch ends the pass early (its files are then not all seen).
    """
    names = event_file_names(original_dir)
    if not names or sorted(facts) != names or any(
            getattr(facts[n], "status", "") != "ok" for n in names):
        return None
    subs = substitutes or {}
    files: list = [None] * len(names)
    block = 1 << 16  # index entries turned into Python ints at a time (memory stays flat)
    fi, j, off = 0, 0, int(facts[names[0]].start)  # the next original record and its offset
    cache: dict = {}
    matched = n_subs = 0
    last = "its start"

    def window(i: int, lo: int) -> tuple:
        """``(sizes, crcs)`` of file ``i``'s records ``lo .. lo + block`` as lists."""
        key = (i, lo // block)
        if key not in cache:
            cache.clear()
            f, b = facts[names[i]], (lo // block) * block
            cache[key] = (f.sizes[b:b + block].tolist(), f.crcs[b:b + block].tolist())
        return cache[key]

    # the small records' bytes the pass kept (bytes it hashed, the vault's: the caller vouches
    # for the facts): read there instead of one system call per scalar record
    small: list = [None] * len(names)

    def small_of(i: int) -> tuple:
        """``(each record's offset in the small bytes, the bytes)`` of file ``i``, or ()."""
        if small[i] is None:
            view = facts[names[i]].small_view()
            small[i] = (view[0], memoryview(view[1])) if view is not None else ()
        return small[i]

    def read_orig(i: int, k: int, at: int, size: int):
        """Record ``k`` (at offset ``at``, ``size`` bytes framed) of original file ``i``."""
        sm = small_of(i)
        if sm:
            p = int(sm[0][k])
            if p >= 0:
                return sm[1][p:p + size]
        if files[i] is None:
            files[i] = open_regular(os.path.join(original_dir, names[i]), buffering=0,
                                    follow_symlinks=True)
        return os.pread(files[i].fileno(), size, at)

    def read_many(i: int, cand: np.ndarray, at: np.ndarray, sizes: np.ndarray) -> bytes:
        """Records ``cand`` of original file ``i`` (offsets ``at``, framed ``sizes``), joined:
        records back to back in the small bytes are one slice, the others one read each."""
        sm = small_of(i)
        p = sm[0][cand] if sm else np.full(len(cand), -1, dtype=np.int64)
        cut = np.flatnonzero((p[1:] != p[:-1] + sizes[:-1]) | (p[1:] < 0) | (p[:-1] < 0)) + 1
        bounds = [0] + cut.tolist() + [len(cand)]
        parts = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            if p[a] >= 0:
                parts.append(sm[1][int(p[a]):int(p[b - 1] + sizes[b - 1])])
            else:  # a record alone
                parts.append(read_orig(i, int(cand[a]), int(at[a]), int(sizes[a])))
        return b"".join(parts)

    keyed: dict = {}  # file index -> (unique keys, their first index, counts, offsets)

    def unique_matches(batch) -> Optional[tuple]:
        """The batch's candidates found at once: when every record's (size, CRC) occurs exactly
        once in the current original file, at increasing places from ``j``, the record-by-record
        search below would pick exactly those (the only ones): ``(their indices, their
        offsets)``. None: search record by record."""
        if subs or fi >= len(names) or len(batch) < 64 or len(facts[names[fi]].sizes) > FAST_MAX:
            return None
        if fi not in keyed:
            keyed.clear()
            f = facts[names[fi]]
            k = (f.sizes.astype(np.uint64) << np.uint64(32)) | f.crcs.astype(np.uint64)
            uk, first, counts = np.unique(k, return_index=True, return_counts=True)
            keyed[fi] = (uk, first, counts, f.offsets())
        uk, first, counts, offsets = keyed[fi]
        rk = (batch.sizes.astype(np.uint64) << np.uint64(32)) | batch.crcs().astype(np.uint64)
        at = np.searchsorted(uk, rk)
        inside = at < len(uk)
        at = np.minimum(at, len(uk) - 1)
        if not (inside.all() and (uk[at] == rk).all() and (counts[at] == 1).all()):
            return None
        cand = first[at]
        if cand[0] < j or (len(cand) > 1 and not (np.diff(cand) > 0).all()):
            return None
        return cand, offsets[cand]

    try:
        for path in ([os.path.join(reduced_path, n) for n in event_file_names(reduced_path)]
                     if os.path.isdir(reduced_path) else [reduced_path]):
            name = os.path.basename(path)
            fold = reduced_tap(name) if reduced_tap is not None else None
            with tfrecord.RecordReader(path, verify=True, display_name=name) as reader:
                for batch in reader.batches():
                    if fold is not None:
                        fold.add(batch)
                    buf = batch.buf
                    fast = unique_matches(batch)
                    # the batch's frames are back to back in ``buf``, each the size of its
                    # candidate: equal joined, equal one by one
                    if fast is not None and read_many(fi, fast[0], fast[1], batch.sizes) == buf[
                            int(batch.starts[0]):int(batch.starts[-1] + batch.sizes[-1])]:
                        k, at = int(fast[0][-1]), int(fast[1][-1])
                        matched += len(batch)
                        last = f"{names[fi]} offset {at}"
                        j, off = k + 1, at + int(batch.sizes[-1])
                        continue
                    # else (a candidate's bytes differ: a later file may hold the record)
                    for s, size in zip(batch.starts.tolist(), batch.sizes.tolist()):
                        piece = buf[s:s + size]
                        crc = int.from_bytes(piece[-4:], "little")
                        want = (subs.get(hashlib.sha256(piece[12:-4]).hexdigest())
                                if subs else None)
                        found = False
                        while fi < len(names) and not found:
                            n_recs = len(facts[names[fi]].sizes)
                            while j < n_recs:
                                sizes, crcs = window(fi, j)
                                k = j % block
                                osize, at = sizes[k], off
                                j, off = j + 1, off + osize
                                if osize == size and crcs[k] == crc:
                                    found = read_orig(fi, j - 1, at, osize) == piece
                                elif want is not None and osize == want[1] + 16:
                                    odata = read_orig(fi, j - 1, at, osize)[12:-4]
                                    found = hashlib.sha256(odata).hexdigest() == want[0]
                                    n_subs += found
                                if found:
                                    last = f"{names[fi]} offset {at}"
                                    break
                            if not found:
                                fi, j = fi + 1, 0
                                off = int(facts[names[fi]].start) if fi < len(names) else 0
                        if not found:
                            return False, (
                                f"record #{matched} ({name} offset {batch.base + s}, {size - 16} "
                                f"bytes) is not a record of the original after {last}")
                        matched += 1
            if fold is not None:
                fold.finish(reader)
            if reader.status != "ok" and name not in inherited:
                return False, (f"{name} is {reader.status} at offset {reader.error_offset}: "
                               f"{reader.error}")
    finally:
        for f in files:
            if f is not None:
                f.close()
    if n_subs:
        return True, (f"{matched} records, in order: {matched - n_subs} byte-identical to an original "
                      f"record, {n_subs} re-encoded from the original record they stand for")
    return True, f"{matched} records, each byte-identical to an original record, in order"
