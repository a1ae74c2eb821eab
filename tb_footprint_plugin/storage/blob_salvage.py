"""Blobs a damaged index object hid, found again in a ``BlobStore``'s own data objects (review
R22 F3): the caller names the blobs it needs (sha256 and size each: a vault's manifests), and
those no valid index object lists are looked for in the packs and lone objects, then listed in a
new index object (``BlobStore.index_found``).

Why it is safe: nothing is trusted by position. A pack is ``PACK_MAGIC`` then its blobs, each raw
or one zstd frame; it is walked from the magic on: a frame's end is read off its block headers
(``frame_length``), a raw blob's is the size of the blob wanted there. Every candidate slice is
decoded and **hashed**, and only one whose sha256 and size are a wanted blob's becomes a row; the
rows are read back from the store and hashed once more by ``index_found`` before any index object
names them. A slice that hashes to nothing wanted is never used, whatever a planted index or pack
says. Nothing is deleted or changed: the damaged index object stays where it is (it may list
blobs no caller named, and while it stands no ``forget`` deletes anything).

What is read: when an index object is damaged (the rare path), every pack; otherwise only the
packs the valid rows do not cover from the magic to their end. Each pack read whole once, up to
``SALVAGE_READ_LIMIT`` bytes (a pack this layout writes is ``PACK_TARGET`` plus a blob). A walk
that meets bytes that are neither a wanted raw blob nor a zstd frame (a raw blob no caller named)
goes on at the next place a valid row or a zstd frame starts.
"""
from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Collection, Dict, List, Mapping, Optional, Set, Tuple

from tb_footprint_plugin.storage import zst
from tb_footprint_plugin.storage.blobstore import DATA, INDEX_EVERY, PACK_MAGIC, BlobRef, BlobStore, pack_covered
from tb_footprint_plugin.storage.store import StoreFailure

#: the largest pack read to look for blobs (a pack of this layout is ~16 MB; a bigger object is
#: not read whole: named in ``Salvage.unread``)
SALVAGE_READ_LIMIT = 256 << 20
#: the sha256 of no bytes: an empty blob is a raw slice of length 0 anywhere in a pack
EMPTY_SHA = hashlib.sha256(b"").hexdigest()

_PACK_KEY = re.compile(r"data/[0-9a-f]{2}/[0-9a-f]{32}\.pack\Z")
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass
class Salvage:
    """What ``salvage`` did: ``found`` the refs listed anew, ``index`` the index objects written,
    ``missing`` the wanted shas found nowhere, ``unread`` the packs not read (too large, or the
    store failed: each with why), ``packs_read`` how many packs were walked, ``unlisted`` when no
    index object was damaged (the blobs were in data objects no row listed: one removed or lost)."""

    found: List[BlobRef] = field(default_factory=list)
    index: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unread: List[Tuple[str, str]] = field(default_factory=list)
    packs_read: int = 0
    unlisted: bool = False


def frame_length(data: bytes, p: int) -> Optional[int]:
    """The length of the zstd frame starting at ``data[p]`` (its header, blocks and checksum, as
    RFC 8878 lays them out), or None when no whole frame of this form starts there."""
    if data[p:p + 4] != _ZSTD_MAGIC or p + 5 > len(data):
        return None
    fhd = data[p + 4]
    if fhd & 0x08:  # a reserved bit set: no frame
        return None
    single = bool(fhd & 0x20)
    n = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 0x03]
    n += (1 if single else 0, 2, 4, 8)[fhd >> 6]
    q = p + n
    while True:
        if q + 3 > len(data):
            return None
        head = int.from_bytes(data[q:q + 3], "little")
        last, kind, size = head & 1, (head >> 1) & 3, head >> 3
        if kind == 3:
            return None
        q += 3 + (1 if kind == 1 else size)
        if q > len(data):
            return None
        if last:
            break
    if fhd & 0x04:
        q += 4
    return q - p if q <= len(data) else None


def _slice_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Walk:
    """One pack's bytes walked for the wanted blobs (``salvage``)."""

    def __init__(self, key: str, data: bytes, wanted: Dict[str, int], listed: Dict[int, int],
                 known: Optional[Mapping[str, int]] = None):
        self.key, self.data, self.wanted, self.listed = key, data, wanted, listed
        self.known = {s: n for s, n in (known or {}).items() if s not in wanted and n > 0}
        self.found: List[BlobRef] = []

    def _sizes(self) -> List[int]:
        return sorted({s for s in self.wanted.values() if s > 0})

    def _step_sizes(self) -> List[int]:
        """The sizes a raw blob here may have: the wanted ones, and the ``known`` ones (blobs no
        longer wanted, stepped over when their hash says it is one of them)."""
        return sorted({s for s in self.wanted.values() if s > 0} | set(self.known.values()))

    def _raw(self, start: int, size: int) -> Optional[bool]:
        """The raw blob ``data[start:start + size]``: taken (True) when wanted, False when a known
        one (stepped over, not listed), None when neither."""
        sha = _slice_sha(self.data[start:start + size])
        if self.wanted.get(sha) == size:
            self._take(sha, start, size, "raw")
            return True
        return False if self.known.get(sha) == size else None

    def _take(self, sha: str, p: int, length: int, form: str) -> None:
        self.found.append(BlobRef(sha=sha, size=self.wanted.pop(sha), key=self.key, offset=p, length=length, form=form))

    def _frame_at(self, p: int) -> Tuple[Optional[int], bool]:
        """(the end of the zstd frame at ``p`` or None when none is there, whether it decoded to
        a wanted blob: then taken)."""
        n = frame_length(self.data, p)
        if n is None:
            return None, False
        frame = self.data[p:p + n]
        declared = zst.content_size(frame[:zst.HEADER_MAX])
        sizes = self._sizes()
        if not sizes or (declared is not None and declared not in sizes):
            return p + n, False  # a frame of a blob no one wants here: skipped whole
        try:
            out = zst.decompress_bounded(frame, (declared if declared is not None else max(sizes)) + 1)
        except zst.DecodeError:
            return None, False  # not a frame after all (a raw blob that begins like one)
        sha = _slice_sha(out)
        if self.wanted.get(sha) == len(out):
            self._take(sha, p, n, "zst")
            return p + n, True
        return p + n, False

    def _raw_at(self, p: int, only: Optional[int] = None) -> Optional[int]:
        """The end of a wanted raw blob at ``p`` (taken), or None; ``only``: of that size alone."""
        for size in (self._step_sizes() if only is None else [only]):
            if p + size > len(self.data):
                break
            if self._raw(p, size) is not None:
                return p + size
        return None

    def run(self) -> List[BlobRef]:
        """The wanted blobs found in the pack (taken out of ``wanted``)."""
        data, p = self.data, len(PACK_MAGIC)
        starts = sorted(self.listed)
        while p < len(data) and self._sizes():
            if p in self.listed:  # a blob a valid row places here: not read again
                p = self.listed[p]
                continue
            frame_end, taken = self._frame_at(p) if data[p:p + 4] == _ZSTD_MAGIC else (None, False)
            if taken:
                p = frame_end
                continue
            # where a whole frame stands, a raw blob there is that frame itself (a file that is
            # one zstd frame, stored as it is): only its length is tried, not every size wanted
            got = self._raw_at(p, only=None if frame_end is None else frame_end - p)
            if got is not None:
                p = got
            elif frame_end is not None:
                p = frame_end
            else:  # neither a wanted raw blob nor a frame: go on where a listed blob or a frame starts
                nxt = [s for s in starts if s > p]
                magic = data.find(_ZSTD_MAGIC, p + 1)
                p = min([*nxt[:1], *([magic] if magic != -1 else []), len(data)])
        if self._sizes():
            self._from_the_end()
        return self.found

    def _from_the_end(self) -> None:
        """The same walk from the pack's end backwards (review R22 F6): a blob ends where the next
        begins, so the wanted blobs after an orphan raw blob (its size unknown: the forward walk
        cannot step over it, and a pack of raw blobs has no frame to go on at) end where the pack
        or the blob after them ends. Each slice is hashed against a wanted blob as forwards; a
        frame (wanted or not) or a listed blob ending here is stepped over whole."""
        data, q = self.data, len(self.data)
        listed_end = {end: start for start, end in self.listed.items()}
        frame_end: Dict[int, int] = {}
        m = data.find(_ZSTD_MAGIC, len(PACK_MAGIC))
        while m != -1:
            n = frame_length(data, m)
            if n is not None:
                frame_end.setdefault(m + n, m)
            m = data.find(_ZSTD_MAGIC, m + 1)
        while q > len(PACK_MAGIC) and self._sizes():
            if q in listed_end:
                q = listed_end[q]
                continue
            start = frame_end.get(q)
            if start is not None:
                self._frame_at(start)  # taken when wanted; stepped over either way
                q = start
                continue
            taken = None
            for size in self._step_sizes():
                if q - size < len(PACK_MAGIC):
                    break  # sorted: the larger ones do not fit either
                if self._raw(q - size, size) is not None:
                    taken = size
                    break
            if taken is None:
                return  # an unknown blob ends here: the wanted ones before it were the forward walk's
            q -= taken


#: a data object younger than this may be an add's not indexed yet (``BlobStore.add`` indexes what
#: it verified every ``INDEX_EVERY`` seconds): never taken for one an index lost
UNLISTED_AFTER = 2 * INDEX_EVERY


def unlisted_objects(bs: BlobStore, min_age: float = UNLISTED_AFTER, *, gaps: bool = False) -> List[str]:
    """The data objects of ``bs`` no valid index row points into, older than ``min_age`` (by the
    listing's time; one that says none is young): what a removed or lost index object leaves, and
    what a sweep would delete as leftovers. ``gaps``: also each pack whose rows do not cover it
    (``pack_covered``: a pack an index object listed only in part, or one a forget left a gap in:
    the two look alike). One listing of ``data/`` against the index as last read."""
    rows: Dict[str, List[BlobRef]] = {}
    for ref in bs.refs():
        for r in bs.candidates(ref.sha):
            rows.setdefault(r.key, []).append(r)
    now = time.time()
    return sorted(e.key for e in bs.store.list(DATA)
                  if (e.key not in rows or (gaps and _PACK_KEY.match(e.key) and not pack_covered(rows[e.key], e.size)))
                  and e.mtime > 0 and now - e.mtime >= min_age)


def salvage(bs: BlobStore, wanted: Mapping[str, int], known: Optional[Mapping[str, int]] = None, *,
            owners: Optional[Mapping[str, Collection[str]]] = None,
            store_as: Optional[Callable[[str], BlobStore]] = None) -> Salvage:
    """Find the blobs of ``wanted`` (sha256 -> size) that no valid index object of ``bs`` lists
    in its data objects, and list those found in a new index object (see the module docstring).
    ``known``: blobs no longer wanted whose sizes a record still gives (a restored or purged
    operation's), stepped over where their hash says so, never listed (review R22 F6: a raw blob
    of unknown size stops the walk). ``owners`` (sha256 -> the owners that need it: a folder
    several logdirs share) with ``store_as`` (an owner -> ``bs``'s store claiming as that owner):
    each found blob listed under each of its owners (one walk), else under ``bs``'s owner.
    ``BlobFailure``/``StoreFailure`` when the store fails (nothing written then)."""
    out = Salvage()
    bs.reload()
    want = {s: n for s, n in wanted.items() if isinstance(s, str) and isinstance(n, int) and n >= 0
            and not bs.has(s)}
    if not want:
        return out
    damaged = bool(bs.damaged_index())
    out.unlisted = not damaged
    by_key: Dict[str, List[BlobRef]] = {}
    for ref in bs.refs():
        for r in bs.candidates(ref.sha):
            by_key.setdefault(r.key, []).append(r)
    entries = sorted(bs.store.list(DATA), key=lambda e: e.key)
    found: List[BlobRef] = []
    lone = {e.key: e for e in entries if not e.key.endswith(".pack")}
    for sha in sorted(want):
        e = lone.get(f"{DATA}/{sha[:2]}/{sha}")
        if e is None:
            continue
        for form, length in (("raw", want[sha]), ("zst", e.size)):
            ref = BlobRef(sha=sha, size=want[sha], key=e.key, offset=0, length=length, form=form)
            if length == e.size and bs.check_ref(ref) is None:
                found.append(ref)
                want.pop(sha)
                break
    for e in entries:
        if not want or not _PACK_KEY.match(e.key):
            continue
        refs = by_key.get(e.key, [])
        if not damaged and pack_covered(refs, e.size):
            continue
        if e.size > SALVAGE_READ_LIMIT:
            out.unread.append((e.key, f"{e.size} bytes, more than {SALVAGE_READ_LIMIT} read to look for blobs"))
            continue
        try:
            data = bs.store.read_range(e.key, 0, e.size)
        except StoreFailure as err:
            out.unread.append((e.key, str(err)))
            continue
        if not data.startswith(PACK_MAGIC):
            continue  # not a pack of this layout
        out.packs_read += 1
        if want.get(EMPTY_SHA) == 0:
            want.pop(EMPTY_SHA)
            found.append(BlobRef(sha=EMPTY_SHA, size=0, key=e.key, offset=len(PACK_MAGIC), length=0, form="raw"))
        found += _Walk(e.key, data, want, {r.offset: r.offset + r.length for r in refs if r.length > 0}, known).run()
    out.missing = sorted(want)
    if found:
        out.found = found
        if owners is None or store_as is None:
            out.index = bs.index_found(found)
            return out
        by_owner: Dict[str, List[BlobRef]] = {}
        for ref in found:
            for who in sorted(set(owners.get(ref.sha) or ()) or {bs.owner}):
                by_owner.setdefault(who, []).append(ref)
        for who, refs in sorted(by_owner.items()):
            out.index += store_as(who).index_found(refs)
        bs.reload()  # the objects written through another owner's store: listed here too
    return out


__all__ = ["EMPTY_SHA", "SALVAGE_READ_LIMIT", "Salvage", "UNLISTED_AFTER", "frame_length", "salvage",
           "unlisted_objects"]
