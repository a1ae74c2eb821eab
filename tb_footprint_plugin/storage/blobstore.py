"""Content-addressed, verified, packed blobs on any ``Store`` (restic's repository, blind to its
backend: issue #27 items 2-3, issue #26 item 2).

Layout under the store's root::

    data/<sha[:2]>/<sha>          one blob of PACK_BELOW bytes or more ("lone"), raw or one zstd frame
    data/<xx>/<random id>.pack    PACK_MAGIC, then small blobs of one ``add`` call (each raw or a zstd frame)
    index/<random id>.json        sha -> key, offset, length, form, size, owners; written if absent, never changed
    pending/<random id>.json      the data keys a write not yet listed may write (removed once listed)
    held/<pack id>.json           a pack listed anew only in part: never deleted nor repacked
    gaps/<pack id>/<id>.json      byte ranges a forget let go from a pack that stayed

Why it is safe (invariant 1: the caller deletes an original only after ``add`` returned its ref):

* every data object is written ``if_absent`` and READ BACK (a ranged read of exactly its bytes,
  decompressed and hashed) before a ref to it exists; the index that lists it is written after,
  and ``add`` returns only once that index is durable. A blob stored already is read back too
  before its ref is returned again. A crash anywhere leaves at worst data objects no index lists
  ("leftovers"): the caller got no ref and kept its originals.
* a data object no index lists is not always a leftover: the index object listing it may be
  lost (garbled and removed, deleted by a lifecycle rule), and when its blobs are orphans (their
  manifest went missing) no caller's guard knows they are needed (review R24 F5). So a leftover
  is PROVEN, never guessed: every write of data objects not yet listed (``add``, a repack's new
  pack) first makes a create-only note ``pending/<id>.json`` naming the data keys it may write
  durable (one per batch, none when nothing new is written), and removes it once the index
  object listing them is durable. A sweep deletes an unlisted data object only when a note
  older than the grace names it and the object (past the grace too) is not older than the note
  (one there before was someone else's), then drops the note; every other unlisted object is
  kept and counted (``unlisted_kept``, ``unlisted_kept_bytes``) however old. Notes are untrusted
  input: a malformed one (``pending_damaged``) or a name in it that is no data object name
  proves nothing, and a listed key is never swept whatever names it. Leftovers of versions that
  wrote no notes stay: space, not bytes. A note a write killed after its index was durable left
  (its keys listed) would prove its objects leftovers once that index object is lost, or once
  they are forgotten and written again: so a sweep first drops, whatever their age, the notes
  whose every key is listed or absent, and a forget that deletes an object a note names drops
  that note the same way (``_drop_stale_notes``; dropping a note never deletes data).
* ``forget`` (restic's prune) writes anew, without the forgotten blobs, only the index objects
  that list one (or a blob whose owners change, or that a repack moves) first, then deletes the
  index objects they replace, then the data objects no live blob needs; every other index object
  stays as it is, so a release of one run's blobs costs the objects listing them, not the vault.
  The index is the union of every index object (none can hide another's blobs), so a crash
  before the old index objects are gone leaves the forgotten blobs listed and their objects in
  place: the next ``forget`` of them finishes. Packs are repacked by copying their live blobs into a new pack that is
  read back and verified before the index pointing at it is written; old packs and indexes go
  only after. A sweeping ``forget`` asked to (``small_packs``) also repacks the packs smaller
  than ``MIN_PACK`` together, once there are that many (each ``add`` writes its own pack: a run's
  offload of a few small files leaves one of a few KB, which S3 never moves to a colder class).
  Proven leftovers (above) are deleted only when older than ``grace_seconds`` (another process
  may be between its data upload and its index write), and nothing at all is deleted while an
  index object is damaged (its blobs would look unreferenced).
* index objects are untrusted input: one that does not parse is skipped and reported
  (``stats()["damaged_index"]``), an entry whose key is not a data object name of this layout or
  whose offsets are impossible is ignored, never followed. A sha listed at several places (two
  adds that raced, a planted entry) keeps every candidate: ``open`` takes the first that verifies.
  The blobs a damaged object hid are found again by ``storage.blob_salvage`` (each slice of a
  pack hashed against the sha256 and size a caller needs) and listed anew by ``index_found``
  (each read back and hashed first); the damaged object stays, and so does the rule above.
  Listed anew, a pack may be covered only in part by rows (the blobs of an orphan, whose manifest
  went missing, were listed only by the object lost, and no caller asks for them): ``index_found``
  then marks it held (``held/<pack id>.json``), and no ``forget`` deletes or repacks a held pack,
  whatever rows it forgets (review R25 F2: forgetting the rows listed anew deleted the pack, and
  the orphan's only copy with it). A mark is kept for good: space, never bytes. And with no look
  at all (an index object lost that listed some of a pack's rows: an add of more than
  ``INDEX_ROWS`` small blobs splits them, review R25 F5), ``forget`` itself deletes or repacks a
  pack only when every byte of it is accounted for: by its rows (those it forgets included) and by
  the ranges earlier forgets let go from it while it stayed, which each such forget records first
  (``gaps/<pack id>/<id>.json``, before the index objects it writes anew; removed with the pack).
  A pack with bytes nothing accounts for is kept (``held_kept``). Gaps are untrusted input that can
  only ever account for bytes no row lists; packs partly forgotten by versions that recorded no
  gaps are kept: space, never bytes.

Blobs are shared by content: two vaults offloading into one prefix store a common original once.
Each index row names the owners that added it (``BlobStore(owner=)``, e.g. a vault's identity),
and ``forget`` drops only its own owner's claim; a blob goes when no owner claims it any more.

``forget`` should not run concurrently with an ``add`` on the same store (restic takes an
exclusive lock for prune): the caller holds its vault's lock. What ``forget`` does about the
adds it cannot exclude: it deletes leftovers only past their grace, an ``add`` indexes what it
verified every ``INDEX_EVERY`` seconds, and the index is listed once more right before any data
object is deleted; an ``add`` that finds a blob stored lists it again in its own index. Left
open: the milliseconds between that last listing and the delete.

Each instance caches the index it listed (memory grows with the number of blobs, never with their
bytes; ``reload`` lists it again, reading only the index objects this process has not parsed in
that version yet) and may serve several threads. ``open`` of a packed blob reads
``PACK_READ`` bytes of its pack from the blob on and serves the blobs after it from that window
for ``WINDOW_SECONDS`` (each still hashed): a restore of a run's small files is a request per
window, not one per file; ``check`` always reads the store. ``forget([])`` merges the index
objects of fewer than ``INDEX_ROWS // 2`` rows once there are more than ``CONSOLIDATE_ABOVE``
(each ``add`` writes one, and loading the index reads them all); a pack's rows stay together in
one object. Leftovers are looked for (a listing of every data object) only when ``forget`` is
asked to ``sweep`` (the default; the local vault's release of a run does not, its batch's end
does).

Why one module of ~900 lines: the layout, the index rows, the verifying streams and the
operations over them are one format whose invariants hold only together; split, its private
helpers would have to become public names of another module.

Tests inject crashes through ``FAILPOINT`` (module level) or the ``failpoint`` argument: a
callable given the name of the step just done (``STEPS``); storage never imports the engine's
fault machinery.

Why one module: one content-addressed format on any ``Store`` — blobs,
packs and index objects — where add, read, check and forget must agree on the same index rules
(written before a ref exists, damaged ones named); apart, the rule forget trusts could drift from
the one add writes.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import BlobError, StoreError
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage import zst
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.store import RangeReader, Store, StoreFailure

#: blobs smaller than this go into packs; larger ones get an object each
PACK_BELOW: int = 512 * 1024
#: a pack is closed (written, verified) once it holds this many stored bytes
PACK_TARGET: int = 16 << 20
#: zstd is kept only when the compressed form is at most this share of the original (saves >= 10%)
KEEP_ZST_RATIO = 0.9
#: how much of a lone blob read from a stream that cannot seek is compressed in memory to decide
#: its form; one that seeks is sampled over its whole length (``zst.sample``); small blobs: all
PROBE_BYTES = CHUNK
#: packs whose live blobs fill less than this share of the object are repacked by ``forget``
REPACK_BELOW = 0.5
#: packs smaller than this (stored bytes) are repacked together by a sweeping ``forget`` asked to
#: (``small_packs``: restic's prune of small packs): S3 transitions no object under 128 KiB to a
#: colder class by default, and every object costs requests, while each ``add`` writes its own
#: pack (a small run's offload, a small compaction: a pack of a few KB each)
MIN_PACK = 128 << 10
#: the largest index object read (a planted huge one must not exhaust memory)
INDEX_READ_LIMIT = 64 << 20
#: the most rows an index object is read with: the most any version of this layout wrote in
#: one (100,000: a35cd7b; ``INDEX_ROWS`` since). One with more is not ours (a planted object of
#: 64 MB lists ~475,000 rows, half a gigabyte parsed): refused as damaged, read no further
INDEX_ROWS_READ = 100_000
#: the stored bytes of index objects this process keeps parsed after their stores let go of
#: them (least recently used first out): a long-lived process (TensorBoard's) meets many vaults
INDEX_CACHE_BYTES = 64 << 20
#: rows per index object written (~200 bytes each, ~400 KB an object): far below the read limit
#: (an unreadable one would hide its blobs), and what a ``forget`` of one run's blobs rewrites at
#: most beside them — it rewrites only the objects listing a blob it changes, so an index merged
#: into one object of every blob made each release cost the whole vault (restic's index files
#: are bounded alike). An object holding fewer than half of this is merged with others
INDEX_ROWS = 2048
#: a blob of at most this many original bytes whose stored bytes are in memory (a pack window's,
#: a pack read back) is decoded and checked at once instead of streamed: its size bounds the memory
SMALL_DECODE = CHUNK
#: a long ``add`` writes an index of what it verified this often (seconds): far below the grace
#: after which ``forget`` deletes objects no index lists
INDEX_EVERY = 300.0
#: how many listings of ``index/`` a ``reload`` makes at most when a listed object is gone by
#: its read (replaced by another process's forget: its replacement is in the next listing)
RELISTS = 5
#: ``forget`` merges the index objects of fewer than ``INDEX_ROWS // 2`` rows when there are more
#: than this many of them beyond the objects the merge takes
CONSOLIDATE_ABOVE = 16
#: reads of a pack while verifying or repacking it (a few requests per pack, bounded memory)
PACK_READ = 4 << 20
#: how long ``open`` may serve a packed blob from the pack window it read last (seconds): a
#: restore checks then copies a run's small blobs in pack order, a ranged read each would be two
#: requests a file; ``check`` always reads the store now
WINDOW_SECONDS = 10.0
#: no object of any store is larger (S3's limit is 5 TiB): offsets beyond are damage
MAX_OBJECT = 5 << 40
FORMS = ("zst", "raw")
#: the mode of every object written where the store keeps modes: originals are the user's alone
PRIVATE = 0o600
#: the first bytes of every pack: a pack is recognisable, and never an empty object (some stores
#: drop those) even when it holds only empty blobs
PACK_MAGIC = b"tb-footprint pack v1\n"
#: the two folders (listing prefixes), and the third: the notes of writes not yet listed
DATA = "data"
INDEX = "index"
PENDING = "pending"
HELD = "held"
GAPS = "gaps"
#: the largest pending note read (a planted huge one must not exhaust memory): one names at most
#: ``PENDING_KEYS`` data keys (~60 bytes each)
PENDING_READ_LIMIT = 4 << 20
PENDING_KEYS = 20_000
#: the steps a failpoint is called after
STEPS = ("add.data_written", "add.verified", "add.index_written", "add.pending_removed", "forget.pack_written",
         "forget.index_written", "forget.old_index_deleted", "forget.objects_deleted")

#: tests set this to a callable(step) that raises to simulate a crash right after ``step``
FAILPOINT: Optional[Callable[[str], None]] = None

_SHA = re.compile(r"[0-9a-f]{64}\Z")
_LONE = re.compile(r"data/([0-9a-f]{2})/([0-9a-f]{64})\Z")
_PACK = re.compile(r"data/([0-9a-f]{2})/([0-9a-f]{32})\.pack\Z")
_INDEX = re.compile(r"index/[0-9a-f]{32}\.json\Z")
_NOTE = re.compile(r"pending/[0-9a-f]{32}\.json\Z")
_HELD = re.compile(r"held/([0-9a-f]{32})\.json\Z")
_GAP = re.compile(r"gaps/([0-9a-f]{32})/[0-9a-f]{32}\.json\Z")
_OWNER = re.compile(r"[A-Za-z0-9._:@/+=-]{0,128}\Z")
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class BlobFailure(Exception):
    """A blob refused or found bad: ``code`` (``codes.BlobError``) says why, ``sha`` names the
    blob at fault (empty when the store failed: ``MISSING``, ``STORE``) and ``key`` the object;
    the message names both."""

    def __init__(self, code: BlobError, message: str, *, sha: str = "", key: str = ""):
        where = ", ".join(x for x in (f"blob {sha}" if sha else "", key) if x)
        super().__init__(f"{where}: {message}" if where else message)
        self.code = BlobError(code)
        self.sha = sha
        self.key = key


@dataclass(frozen=True)
class BlobSource:
    """One original to store: its claimed sha256 and size (verified while it is read) and how to
    open it for streaming. ``frame`` (optional) opens one zstd frame of the same original, of
    ``frame_size`` bytes (a compacted backup): stored as it is when it saves what compressing
    would (``KEEP_ZST_RATIO``), checked by decoding it while it is sent, instead of being
    decompressed and compressed again."""

    sha: str
    size: int
    open: Callable[[], BinaryIO]
    frame: Optional[Callable[[], BinaryIO]] = None
    frame_size: int = -1

    def takes_frame(self) -> bool:
        """Whether ``add`` stores the frame as it is."""
        return self.frame is not None and 0 < self.frame_size <= KEEP_ZST_RATIO * self.size


@dataclass(frozen=True)
class BlobRef:
    """Where a verified blob lives: bytes ``[offset, offset+length)`` of ``key``, stored as
    ``form`` ("zst": one zstd frame; "raw": the original bytes), ``size`` bytes once decoded."""

    # no __dict__ per ref: a vault lists one per backup, every process holds them all
    __slots__ = ("sha", "size", "key", "offset", "length", "form")

    sha: str
    size: int
    key: str
    offset: int
    length: int
    form: str

    @property
    def packed(self) -> bool:
        """Whether the blob shares its object with others."""
        return self.key.endswith(".pack")


def _fail(sha: str, key: str, e: StoreFailure) -> BlobFailure:
    """The store's failure on ``key``: ``.sha`` stays empty (not the blob's fault), the message
    names the blob."""
    code = BlobError.MISSING if e.code == StoreError.NOT_FOUND else BlobError.STORE
    about = f" (blob {sha})" if sha else ""
    return BlobFailure(code, f"{e.code.value}{about}: {e}", key=key)


def _hit(hook: Optional[Callable[[str], None]], step: str) -> None:
    fn = hook if hook is not None else FAILPOINT
    if fn is not None:
        fn(step)


# --- reading sources and stored blobs --------------------------------------------------------------
class _Claimed(io.RawIOBase):
    """Reads a source while hashing it; past its claimed size, or at its end with other bytes
    than claimed, ``BlobFailure(MISMATCH)`` (raised inside an upload, it aborts the upload)."""

    def __init__(self, f: BinaryIO, src: BlobSource, prefix: bytes = b""):
        super().__init__()
        self._f, self._src, self._prefix = f, src, prefix
        self._h = hashlib.sha256()
        self._n = 0
        self._checked = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = CHUNK if size is None or size < 0 else size
        if self._prefix:
            data, self._prefix = self._prefix[:want], self._prefix[want:]
        else:
            data = self._f.read(want)
        if data:
            self._n += len(data)
            if self._n > self._src.size:
                raise BlobFailure(BlobError.MISMATCH, f"longer than the {self._src.size} bytes claimed",
                                  sha=self._src.sha)
            self._h.update(data)
        elif not self._checked:
            self._checked = True
            self.verify()
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def verify(self) -> None:
        """Raise unless the bytes read so far are exactly the claimed ones (call at the end)."""
        if self._n != self._src.size:
            raise BlobFailure(BlobError.MISMATCH, f"{self._n} bytes where {self._src.size} were claimed",
                              sha=self._src.sha)
        if self._h.hexdigest() != self._src.sha:
            raise BlobFailure(BlobError.MISMATCH, f"its bytes hash to {self._h.hexdigest()}, not the sha claimed",
                              sha=self._src.sha)

    def drain(self) -> None:
        """Read the rest and verify (a source whose bytes are not uploaded still gets checked)."""
        while self.read(CHUNK):
            pass
        if not self._checked:
            self._checked = True
            self.verify()


def _compressor(size: int) -> Tuple[Callable[[bytes], bytes], Callable[[], bytes]]:
    """An incremental zstd compressor (``zst.LEVEL``, content size and checksum in the frame):
    the upload pulls compressed bytes, where ``zst.compress_stream`` pushes them into a file."""
    try:  # Python 3.14+, as in zst.py
        from compression import zstd as std  # type: ignore[import-not-found]
    except ImportError:
        std = None
    if std is not None:
        c = std.ZstdCompressor(level=zst.LEVEL, options={std.CompressionParameter.checksum_flag: 1})
        c.set_pledged_input_size(size)
        return c.compress, c.flush
    import zstandard

    c = zstandard.ZstdCompressor(level=zst.LEVEL, write_checksum=True, write_content_size=True)
    cobj = c.compressobj(size=size)
    return cobj.compress, cobj.flush


class _FrameCheck:
    """A zstd frame pushed in piece by piece; what it decodes to is counted and hashed against
    the source's claim (``BlobFailure(MISMATCH)`` otherwise), in bounded memory: the decoder
    hands its output on in pieces of at most ``CHUNK``, however much one piece of frame holds."""

    def __init__(self, src: BlobSource):
        self._src = src
        self._h = hashlib.sha256()
        self._n = 0
        try:  # Python 3.14+, as in zst.py
            from compression import zstd as std  # type: ignore[import-not-found]
        except ImportError:
            std = None
        if std is not None:
            self._d, self._w = std.ZstdDecompressor(), None
        else:
            import zstandard

            self._d = None
            self._w = zstandard.ZstdDecompressor().stream_writer(self, write_size=CHUNK, write_return_read=True)

    def _bad(self, why: str) -> BlobFailure:
        return BlobFailure(BlobError.MISMATCH, f"its compressed backup {why}", sha=self._src.sha)

    def write(self, out: bytes) -> int:  # the zstandard writer's output
        self._n += len(out)
        if self._n > self._src.size:
            raise self._bad(f"decodes to more than the {self._src.size} bytes claimed")
        self._h.update(out)
        return len(out)

    def feed(self, data: bytes) -> None:
        try:
            if self._w is not None:
                self._w.write(data)
                return
            out = self._d.decompress(data, max_length=CHUNK)
            while True:
                self.write(out)
                if self._d.eof or self._d.needs_input:
                    break
                out = self._d.decompress(b"", max_length=CHUNK)
            if self._d.eof and self._d.unused_data:
                raise self._bad("holds bytes after its frame")
        except BlobFailure:
            raise
        except Exception as e:  # noqa: BLE001 - each codec raises its own error for bad data
            raise self._bad(f"does not decode ({e})") from None

    def end(self) -> None:
        """Raise unless the frame decoded to exactly the claimed bytes."""
        if self._d is not None and not self._d.eof:
            raise self._bad("ends before its frame does")
        if self._n != self._src.size or self._h.hexdigest() != self._src.sha:
            raise self._bad(f"decodes to {self._n} bytes that are not the ones claimed")


class _Framed(io.RawIOBase):
    """A source's zstd frame as it is, checked by decoding it as it is read (``_FrameCheck``)."""

    def __init__(self, f: BinaryIO, src: BlobSource):
        super().__init__()
        self._f, self._check, self._ended = f, _FrameCheck(src), False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(CHUNK if size is None or size < 0 else size)
        if data:
            self._check.feed(data)
        elif not self._ended:
            self._ended = True
            self._check.end()
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


def _compress(data: bytes) -> bytes:
    return zst.compress_whole(data)


class _Deflating(io.RawIOBase):
    """The zstd frame of a stream, pulled chunk by chunk (bounded memory)."""

    def __init__(self, src: _Claimed, size: int):
        super().__init__()
        self._src = src
        self._step, self._end = _compressor(size)
        self._buf = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = CHUNK if size is None or size < 0 else size
        while len(self._buf) < want and not self._done:
            data = self._src.read(CHUNK)
            if data:
                self._buf += self._step(data)
            else:
                self._buf += self._end()
                self._done = True
        out, self._buf = self._buf[:want], self._buf[want:]
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


class _Verifying(io.RawIOBase):
    """The decoded bytes of a stored blob, hashed as they pass; at the end (or past the size)
    ``BlobFailure(CORRUPT)`` unless they are exactly the blob's."""

    def __init__(self, ref: BlobRef, decoded: BinaryIO):
        super().__init__()
        self._ref, self._in = ref, decoded
        self._h = hashlib.sha256()
        self._n = 0
        self._ended = False

    def readable(self) -> bool:
        return True

    def _corrupt(self, why: str) -> BlobFailure:
        return BlobFailure(BlobError.CORRUPT, why, sha=self._ref.sha, key=self._ref.key)

    def readinto(self, b) -> int:
        if self._ended:
            return 0
        try:
            data = self._in.read(min(len(b), CHUNK))
        except zst.DecodeError as e:
            raise self._corrupt(f"does not decode: {e}") from None
        except StoreFailure as e:
            raise _fail(self._ref.sha, self._ref.key, e) from None
        if data:
            self._n += len(data)
            if self._n > self._ref.size:
                raise self._corrupt(f"decodes to more than its {self._ref.size} bytes")
            self._h.update(data)
            b[:len(data)] = data
            return len(data)
        self._ended = True
        if self._n != self._ref.size:
            raise self._corrupt(f"decodes to {self._n} bytes, not {self._ref.size}")
        if self._h.hexdigest() != self._ref.sha:
            raise self._corrupt("its bytes do not hash to its sha256")
        return 0

    def close(self) -> None:
        try:
            self._in.close()
        finally:
            super().close()


def _decoded(ref: BlobRef, stored: bytes) -> Tuple[bytes, Optional[BlobFailure]]:
    """A small blob's original bytes from its stored bytes in memory, and None; or (b"", why)
    when they are not exactly the blob's (the checks ``_Verifying`` makes, at once). The
    decoder stops past the blob's size whatever the frame declares (``SMALL_DECODE`` bounds it)."""
    def corrupt(why: str) -> Tuple[bytes, BlobFailure]:
        return b"", BlobFailure(BlobError.CORRUPT, why, sha=ref.sha, key=ref.key)

    if ref.form == "zst":
        try:
            data = zst.decompress_bounded(stored, ref.size + 1)
        except zst.DecodeError as e:
            return corrupt(f"does not decode: {e}")
    else:
        data = bytes(stored)
    if len(data) > ref.size:
        return corrupt(f"decodes to more than its {ref.size} bytes")
    if len(data) != ref.size:
        return corrupt(f"decodes to {len(data)} bytes, not {ref.size}")
    if hashlib.sha256(data).hexdigest() != ref.sha:
        return corrupt("its bytes do not hash to its sha256")
    return data, None


class _Failing(io.RawIOBase):
    """A stream whose first read raises ``failure`` (a blob found bad when it was opened)."""

    def __init__(self, failure: BlobFailure):
        super().__init__()
        self._failure = failure

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        raise self._failure


# --- index objects (untrusted input) ---------------------------------------------------------------
def _valid_ref(row) -> Optional[Tuple[BlobRef, FrozenSet[str]]]:
    """A ref and its owners from one index row, or None when the row is not one this layout can
    have written (a row of six fields is owned by the default owner '')."""
    if not (isinstance(row, list) and len(row) in (6, 7)):
        return None
    sha, size, key, offset, length, form = row[:6]
    owners = row[6] if len(row) == 7 else [""]
    if not (isinstance(owners, list) and owners and all(isinstance(o, str) and _OWNER.match(o) for o in owners)):
        return None
    if not (isinstance(sha, str) and _SHA.match(sha) and isinstance(key, str) and form in FORMS):
        return None
    if not all(type(x) is int for x in (size, offset, length)):
        return None
    if size < 0 or offset < 0 or length < 0 or offset + length > MAX_OBJECT or size > MAX_OBJECT:
        return None
    if form == "raw" and length != size:
        return None
    lone = _LONE.match(key)
    if lone:
        if lone.group(2) != sha or lone.group(1) != sha[:2] or offset != 0:
            return None
    elif not _PACK.match(key):
        return None  # outside data/ or not a name this layout writes: never followed
    return BlobRef(sha=sha, size=size, key=key, offset=offset, length=length, form=form), frozenset(owners)


def _row(ref: BlobRef, owners: Iterable[str]) -> list:
    return [ref.sha, ref.size, ref.key, ref.offset, ref.length, ref.form, sorted(owners)]


def _chunks(rows: List[Tuple[BlobRef, FrozenSet[str]]]) -> Iterator[Tuple[Tuple[BlobRef, FrozenSet[str]], ...]]:
    """``rows`` cut into index objects of at most ``INDEX_ROWS``, a new one begun rather than a
    pack's rows split (a forget of one run's blobs, packed together, then rewrites one object)."""
    cur: List[Tuple[BlobRef, FrozenSet[str]]] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0].key == rows[i][0].key:
            j += 1
        group = rows[i:j]
        if cur and len(cur) + len(group) > INDEX_ROWS:
            yield tuple(cur)
            cur = []
        while len(group) > INDEX_ROWS:  # one pack of more blobs than an object lists
            yield tuple(group[:INDEX_ROWS])
            group = group[INDEX_ROWS:]
        cur.extend(group)
        i = j
    if cur:
        yield tuple(cur)


#: one index object as read: its valid rows (ref, owners) and how many rows were ignored
_Rows = Tuple[Tuple[BlobRef, FrozenSet[str]], ...]


_JSON = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER_TAIL = re.compile(r"[0-9.eE+\-]*")
#: the largest value of an index object's document read at once (a row, or a header field)
_VALUE_MAX = 1 << 20
#: what an index object is read in (one ranged read each, a descriptor held on a disk)
_INDEX_READ = 1 << 20


class _Doc:
    """An index object's JSON text, decoded as its bytes come (``_INDEX_READ`` at a time): the
    rows are parsed one by one, never the whole document at once (memory: a chunk, a value and
    the compact rows, whatever the object's size)."""

    def __init__(self, reader: BinaryIO) -> None:
        import codecs

        self._reader = reader
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False

    def _fill(self) -> bool:
        if self.eof:
            return False
        data = self._reader.read(_INDEX_READ)
        if self.pos > _INDEX_READ:
            self.buf, self.pos = self.buf[self.pos:], 0
        self.buf += self._utf8.decode(data, final=not data)
        self.eof = not data
        return True

    def peek(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._fill():
                return self.buf[self.pos:self.pos + 1]

    def take(self, ch: str) -> None:
        if self.peek() != ch:
            raise ValueError(f"not JSON of an index object ({ch!r} expected at character {self.pos})")
        self.pos += 1

    def value(self):
        """The next JSON value (at most ``_VALUE_MAX`` characters)."""
        self.peek()
        while True:
            try:
                got, end = _JSON.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                got, end = None, -1
            except RecursionError:
                raise ValueError(f"not an index object (nested too deep at character {self.pos})") from None
            # a number ending where the text read so far ends, or before a '.', 'e' or digit
            # there, may go on in the next chunk ("123." + "5"): it is read again with more
            cut = (end != -1 and not self.eof and isinstance(got, (int, float))
                   and _NUMBER_TAIL.fullmatch(self.buf, end) is not None)
            if end != -1 and not cut and (end < len(self.buf) or self.eof):
                self.pos = end
                return got
            if len(self.buf) - self.pos > _VALUE_MAX or not self._fill():
                raise ValueError(f"not JSON of an index object (at character {self.pos})")


def _read_index(store: Store, key: str, size: int) -> Tuple[_Rows, int]:
    """The valid rows of index object ``key`` (listed at ``size`` bytes) and how many were
    ignored, read as a stream. ``ValueError`` (a damaged index: not JSON, not a v1 blob index,
    more than ``INDEX_ROWS_READ`` rows, more than ``INDEX_READ_LIMIT`` bytes — the last refused
    before a byte is read); ``StoreFailure`` as the store fails."""
    if size > INDEX_READ_LIMIT:
        raise StoreFailure(StoreError.TOO_LARGE, key, f"{size} bytes, larger than {INDEX_READ_LIMIT}; not read")
    keys: Dict[str, str] = {}  # one string per data object named, one set per set of owners
    owner_sets: Dict[FrozenSet[str], FrozenSet[str]] = {}
    rows: List[Tuple[BlobRef, FrozenSet[str]]] = []
    ignored = 0
    head: dict = {}
    with store.open_read(key, size) as f:
        doc = _Doc(f)
        doc.take("{")
        while doc.peek() != "}":
            name = doc.value()
            if not isinstance(name, str) or name in head:
                raise ValueError("not a blob index (v1)")
            doc.take(":")
            if name != "blobs":
                head[name] = doc.value()
            else:
                head[name] = True
                doc.take("[")
                while doc.peek() != "]":
                    if len(rows) + ignored >= INDEX_ROWS_READ:
                        raise ValueError(f"more than {INDEX_ROWS_READ} rows, more than any index object of "
                                         "this layout; not read")
                    row = doc.value()
                    if isinstance(row, list) and len(row) > 2 and isinstance(row[2], str):
                        row[2] = keys.setdefault(row[2], row[2])
                    got = _valid_ref(row)
                    if got is None:
                        ignored += 1
                    else:
                        rows.append((got[0], owner_sets.setdefault(got[1], got[1])))
                    if doc.peek() == ",":
                        doc.take(",")
                        if doc.peek() == "]":
                            raise ValueError("not JSON of an index object (a trailing comma)")
                    elif doc.peek() != "]":
                        raise ValueError(f"not JSON of an index object (at character {doc.pos})")
                doc.take("]")
            if doc.peek() == ",":
                doc.take(",")
                if doc.peek() == "}":
                    raise ValueError("not JSON of an index object (a trailing comma)")
            elif doc.peek() != "}":
                raise ValueError(f"not JSON of an index object (at character {doc.pos})")
        doc.take("}")
        if doc.peek() != "":
            raise ValueError("not JSON of an index object (more after its end)")
    if head.get("v") != 1 or "blobs" not in head:
        raise ValueError("not a blob index (v1)")
    return tuple(rows), ignored


# Index objects already parsed in this process, by store location and key, with the listing's
# version and size when read: an index object is written once and never changed, so a reload
# (each offload takes a fresh BlobStore, each forget lists again) reads only the ones it has not
# seen; without this the k-th offload of a batch read all k index objects back (N runs: N(N+1)/2
# GETs). The rows are kept validated (a reload of 10,000 rows is dict updates, not 10,000 regex
# checks), and an object this process wrote is remembered as written (never read back). Bounded
# by what the stores' index/ folders list now: keys gone from a listing are dropped; and by
# ``INDEX_CACHE_BYTES`` of objects as stored, the least recently used going first (a store
# still in use holds its rows itself; one let go re-reads what went).
_PARSED: Dict[Tuple[str, str], Tuple[str, int, Tuple[_Rows, int]]] = {}
_PARSED_LOCK = threading.Lock()


def _parsed_index(loc: Optional[str], e) -> Optional[Tuple[_Rows, int]]:
    if loc is None or not e.version:
        return None
    with _PARSED_LOCK:
        got = _PARSED.pop((loc, e.key), None)
        if got is not None:
            _PARSED[(loc, e.key)] = got  # the most recently used last
    return got[2] if got is not None and (got[0], got[1]) == (e.version, e.size) else None


def _remember_index(loc: Optional[str], key: str, version: str, size: int, parsed: Tuple[_Rows, int]) -> None:
    if loc is not None and version:
        with _PARSED_LOCK:
            _PARSED.pop((loc, key), None)
            _PARSED[(loc, key)] = (version, size, parsed)
            total = sum(v[1] for v in _PARSED.values())
            while total > INDEX_CACHE_BYTES and len(_PARSED) > 1:
                total -= _PARSED.pop(next(iter(_PARSED)))[1]


def _forget_unlisted_indexes(loc: Optional[str], listed: Set[str]) -> None:
    if loc is None:
        return
    with _PARSED_LOCK:
        for k in [k for k in _PARSED if k[0] == loc and k[1] not in listed]:
            del _PARSED[k]


def _built(docs: Dict[str, _Rows], prev) -> tuple:
    """(refs, more, owners, where) of the index objects ``docs``. ``prev``: the same of the docs
    cached before, or None; when few objects came or went since (a forget rewrote two of fifty),
    only the blobs they list are worked out again, on copies (a thread may be reading the old
    ones), instead of every row of every object. The first ref of a sha is the one of the lowest
    index key listing it either way."""
    if prev is not None:
        odocs, orefs, omore, oowners, owhere = prev
        added = [k for k in docs if odocs.get(k) is not docs[k]]
        removed = [k for k in odocs if docs.get(k) is not odocs[k]]
        if sum(len(odocs[k]) for k in removed) + sum(len(docs[k]) for k in added) <= len(orefs) // 4:
            shas = {r.sha for k in removed for r, _ in odocs[k]} | {r.sha for k in added for r, _ in docs[k]}
            refs, more, owners, where = dict(orefs), dict(omore), dict(oowners), dict(owhere)
            look = set(added)
            for sha in shas:
                refs.pop(sha, None)
                more.pop(sha, None)
                owners.pop(sha, None)
                look.update(k for k in where.pop(sha, ()) if k in docs)
            _take(docs, sorted(look), refs, more, owners, where, shas)
            return refs, more, owners, where
    refs, more, owners, where = {}, {}, {}, {}
    _take(docs, sorted(docs), refs, more, owners, where, None)
    return refs, more, owners, where


@dataclass(frozen=True)
class _Range:
    """Bytes of a pack an earlier forget let go (``GAPS``): what ``pack_covered`` needs of a row."""
    offset: int
    length: int


def pack_covered(refs: Iterable[BlobRef], size: int) -> bool:
    """Whether the rows ``refs`` of a pack of ``size`` stored bytes account for every byte of it
    from ``PACK_MAGIC`` to its end (no gap a blob no row lists may fill)."""
    at = len(PACK_MAGIC)
    for r in sorted(refs, key=lambda r: r.offset):
        if r.offset > at:
            return False
        at = max(at, r.offset + r.length)
    return at >= size


def _take(docs: Dict[str, _Rows], keys: List[str], refs: dict, more: dict, owners: dict, where: dict,
          only: Optional[Set[str]]) -> None:
    """Add the rows of ``docs[k]`` for ``k`` in ``keys`` (sorted) — only those of ``only`` shas
    when given — to the maps (their entries for those shas are new objects, never shared)."""
    for key in keys:
        for ref, who in docs[key]:
            sha = ref.sha
            if only is not None and sha not in only:
                continue
            first = refs.get(sha)
            if first is None:
                refs[sha] = ref
                owners[sha] = set(who)
                where[sha] = [key]
                continue
            owners[sha].update(who)
            if first is not ref and first != ref and ref not in more.get(sha, ()):
                more.setdefault(sha, []).append(ref)
            w = where[sha]
            if w[-1] != key:
                w.append(key)


def _new_pack_key() -> str:
    pid = secrets.token_hex(16)
    return f"{DATA}/{pid[:2]}/{pid}.pack"


class _Pending:
    """The pending notes of one write of data objects no index lists yet (an ``add``, a repack):
    ``pending/<id>.json`` naming the data keys it may write, written create-only and durable
    before the first of them (nothing is written when nothing new is: a call whose blobs are all
    stored costs no request), removed by ``done`` once the index objects listing them are
    durable. The lone keys are known from the sources; pack keys are drawn here, ``packs`` of them
    at first (an upper bound of what the call writes), more in a further note if ever short."""

    def __init__(self, store: Store, lone: Iterable[str] = (), packs: int = 1) -> None:
        self.store = store
        self.lone = set(lone)
        self.spare: List[str] = [_new_pack_key() for _ in range(max(1, min(packs, PENDING_KEYS)))]
        self.named: Set[str] = set()
        self.notes: List[str] = []

    def _note(self, keys: Iterable[str], kind: str = "write") -> None:
        keys = sorted(set(keys))
        for i in range(0, len(keys), PENDING_KEYS):
            key = f"{PENDING}/{secrets.token_hex(16)}.json"
            doc = {"v": 1, "created": time.time(), "keys": keys[i:i + PENDING_KEYS]}
            if kind != "write":
                doc["kind"] = kind
            try:
                self.store.put(key, json.dumps(doc, separators=(",", ":")).encode(), if_absent=True, mode=PRIVATE)
            except StoreFailure as e:
                raise _fail("", key, e) from None  # no data object written: nothing to sweep
            self.notes.append(key)
        self.named.update(keys)

    def lone_key(self, key: str) -> None:
        """Before ``key`` (a lone blob's) is written: named by a durable note (the first note of
        the call names the spare pack keys too)."""
        if key not in self.named:
            self._note(self.lone | {key} | (set(self.spare) if not self.notes else set()))

    def pack_key(self) -> str:
        """A pack key named by a durable note, to write a new pack at."""
        if not self.spare:
            self.spare = [_new_pack_key() for _ in range(8)]
            self._note(self.spare)
        elif not self.notes:
            self._note(self.lone | set(self.spare))
        return self.spare.pop(0)

    def release(self, keys: List[str]) -> None:
        """Before a ``forget`` un-lists data objects it will delete (it deletes the index objects
        listing them): a note naming them, so that a crash before their delete leaves them proven
        leftovers (``kind: release``: they are older than the note, and dead by the index the
        forget read)."""
        if keys:
            self._note(keys, kind="release")

    def done(self) -> None:
        """The index objects listing what this write wrote are durable: its notes go (one that
        stays is dropped by a sweep past the grace, its keys found listed)."""
        if self.notes:
            try:
                self.store.delete(self.notes)
            except StoreFailure:
                pass  # said nothing wrong: the note only lets a sweep delete what no index lists
            self.notes = []


class BlobStore:
    """Content-addressed blobs on ``store`` (see the module docstring): ``add`` verified originals,
    ``open``/``check`` them by sha256, ``forget`` those no longer needed."""

    def __init__(self, store: Store, *, pack_below: int = PACK_BELOW, pack_target: int = PACK_TARGET,
                 owner: str = "", failpoint: Optional[Callable[[str], None]] = None) -> None:
        if not (isinstance(owner, str) and _OWNER.match(owner)):
            raise ValueError(f"owner {owner!r}: up to 128 letters, digits and ._:@/+=-")
        self.store = store
        # its folders (data/, index/, pending/, data/xx/) are the tool's state: made 0700 where the
        # store makes folders (review R24's note: a bucket's blob folder made them with the umask's)
        private = getattr(store, "private_folders", None)
        if callable(private):
            private()
        self.owner = owner
        self.pack_below = pack_below
        self.pack_target = pack_target
        self.failpoint = failpoint
        self._refs: Optional[Dict[str, BlobRef]] = None  # sha -> its first ref
        self._more: Dict[str, List[BlobRef]] = {}  # sha -> its other refs, for the few listed twice
        self._owners: Dict[str, Set[str]] = {}  # sha -> who added it (forget drops one owner's claim)
        self._index_keys: List[str] = []  # the valid index objects the cache was built from
        self._docs: Dict[str, _Rows] = {}  # index object -> its rows (forget rewrites only those it changes)
        self._where: Dict[str, List[str]] = {}  # sha -> the index objects listing it
        self._damaged: List[dict] = []
        # the index objects the last listing read: key -> (version, size, rows, or the damage
        # found); a reload reads none of these again, whatever the module cache let go
        self._seen: Dict[str, tuple] = {}
        # one instance serves a process's threads (a TensorBoard tab restoring while a purge
        # forgets): the cached index changes under this lock, and is copied under it
        self._lock = threading.RLock()
        # (pack key, offset, bytes, monotonic time read): one window of at most PACK_READ bytes
        self._window: Optional[Tuple[str, int, bytes, float]] = None
        self._window_lock = threading.Lock()

    # --- the index ---------------------------------------------------------------------------
    def reload(self) -> None:
        """List ``index/`` again (one paginated listing) and rebuild the cached index; a store
        failure raises ``BlobFailure(STORE)`` rather than leave a partial index cached. An index
        object listed but gone when read was replaced by another process's forget or merge (the
        replacement is written before it is deleted): the folder is listed again, so the blobs
        it listed are read from their new object, never taken for missing (``RELISTS`` times at
        most, then ``BlobFailure(STORE)``)."""
        for _ in range(RELISTS):
            got = self._read_listing()
            if got is not None:
                break
        else:
            raise BlobFailure(BlobError.STORE, f"the index changed under each of {RELISTS} listings; "
                              "no partial index is cached", key=INDEX)
        docs, damaged, loc = got
        with self._lock:
            prev = None if self._refs is None else (self._docs, self._refs, self._more, self._owners, self._where)
        refs, more, owners, where = _built(docs, prev)
        damaged.sort(key=lambda d: d["key"])
        _forget_unlisted_indexes(loc, set(docs) | {d["key"] for d in damaged})
        with self._lock:
            self._window = None
            self._refs, self._more, self._owners = refs, more, owners
            self._index_keys = sorted(docs)
            self._docs, self._where = docs, where
            self._damaged = damaged

    def _read_listing(self) -> Optional[Tuple[Dict[str, _Rows], List[dict], Optional[str]]]:
        """One listing of ``index/`` read: (rows by index object, damaged ones, location), or None
        when a listed object was gone by its read (``reload`` lists again)."""
        docs: Dict[str, _Rows] = {}
        damaged: List[dict] = []
        loc = self._loc()
        seen, had = {}, self._seen
        for e in self.store.list(INDEX):
            if not _INDEX.match(e.key):
                continue  # not an index name this layout writes
            mine = had.get(e.key) if e.version else None
            mine = mine if mine is not None and mine[:2] == (e.version, e.size) else None
            if mine is not None and mine[3] is not None:
                seen[e.key] = mine  # found damaged as it is now: not read (parsed) again
                damaged.append(dict(mine[3]))
                continue
            parsed = mine[2] if mine is not None else _parsed_index(loc, e)
            if parsed is None:
                try:
                    parsed = _read_index(self.store, e.key, e.size)
                    # only the listing's version of the object is remembered: if it changes, it is read again
                    _remember_index(loc, e.key, e.version, e.size, parsed)
                except (ValueError, UnicodeDecodeError, StoreFailure) as err:
                    if isinstance(err, StoreFailure) and err.code == StoreError.NOT_FOUND:
                        return None  # replaced since the listing (a forget elsewhere): list again
                    if isinstance(err, StoreFailure) and err.code != StoreError.TOO_LARGE:
                        raise _fail("", e.key, err) from None  # the store failed, not the index: no half view
                    damaged.append({"code": BlobError.DAMAGED_INDEX.value, "key": e.key, "message": f"{e.key}: {err}"})
                    if e.version:
                        seen[e.key] = (e.version, e.size, None, dict(damaged[-1]))
                    continue
            rows, ignored = parsed
            if e.version:
                seen[e.key] = (e.version, e.size, parsed, None)
            docs[e.key] = rows
            if ignored:
                damaged.append({"code": BlobError.DAMAGED_INDEX.value, "key": e.key,
                                "message": f"{e.key}: {ignored} entries ignored (not a data object of this store, "
                                           "or impossible offsets)"})
        self._seen = seen
        return docs, damaged, loc

    def _loc(self) -> Optional[str]:
        return str(getattr(self.store, "location", "")) or None

    def _index(self) -> Dict[str, BlobRef]:
        if self._refs is None:
            self.reload()
        return self._refs

    def has(self, sha: str) -> bool:
        """Whether ``sha`` is in the index (its object is not checked: ``check`` does)."""
        return sha in self._index()

    def ref(self, sha: str) -> Optional[BlobRef]:
        """Where ``sha`` is stored, or None."""
        return self._index().get(sha)

    def refs(self) -> Iterator[BlobRef]:
        """Every indexed blob (its first ref; ``candidates`` has them all)."""
        index = self._index()
        with self._lock:
            return iter(list(index.values()))

    def owners(self, sha: str) -> Set[str]:
        """Who added ``sha`` (``BlobStore(owner=)``); it stays until each of them forgot it."""
        return set(self._owners.get(sha, ())) if sha in self._index() else set()

    def candidates(self, sha: str) -> List[BlobRef]:
        """Every place the index lists ``sha`` at (usually one)."""
        index = self._index()
        with self._lock:
            first = index.get(sha)
            return [] if first is None else [first] + self._more.get(sha, [])

    def damaged_index(self) -> List[dict]:
        """The index objects skipped or partly ignored: ``{"code", "key", "message"}`` each."""
        self._index()
        return list(self._damaged)

    def stats(self) -> dict:
        """Blobs indexed, data objects and packs stored (one listing of ``data/``), bytes stored
        (objects as they are, dead space and leftovers included) and original bytes, and the
        damaged index objects."""
        refs = self._index()
        objects = packs = stored = 0
        for e in self.store.list(DATA):
            objects += 1
            packs += e.key.endswith(".pack")
            stored += e.size
        return {"blobs": len(refs), "objects": objects, "packs": packs, "stored_bytes": stored,
                "original_bytes": sum(r.size for r in refs.values()),
                "live_stored_bytes": sum(r.length for r in refs.values()),
                "index_objects": len(self._index_keys), "damaged_index": list(self._damaged)}

    # --- reading ----------------------------------------------------------------------------
    def _stored(self, ref: BlobRef) -> BinaryIO:
        """The stored bytes of ``ref`` (ranged reads of exactly them, a chunk at a time)."""
        store, key, base, length = self.store, ref.key, ref.offset, ref.length

        def fetch(a: int, b: int) -> bytes:
            return store.read_range(key, base + a, base + min(b, length))

        return io.BufferedReader(RangeReader(fetch, length, name=key), PACK_READ)  # a request per 4 MB

    def _open_ref(self, ref: BlobRef, stored: Optional[bytes] = None) -> BinaryIO:
        if stored is not None and ref.size <= SMALL_DECODE:
            # a pack window's small blob: decoded and checked at once (no stream, no 1 MiB
            # buffers, no decoder made per blob); damage is raised by the first read, as a stream's
            data, bad = _decoded(ref, stored)
            return io.BytesIO(data) if bad is None else io.BufferedReader(_Failing(bad))
        raw = self._stored(ref) if stored is None else io.BytesIO(stored)
        decoded = zst.open_decompressed(raw) if ref.form == "zst" else raw
        return io.BufferedReader(_Verifying(ref, decoded), CHUNK)

    def open(self, sha: str) -> BinaryIO:
        """The original bytes of ``sha``, streamed (bounded memory); reading raises
        ``BlobFailure(CORRUPT)`` at the latest at its end when they are not the blob's, and
        ``BlobFailure(MISSING)`` when it is not stored.

        A pack the cached index names but the store no longer holds was repacked by another
        process's ``forget`` after this one listed the index (its blobs are in a new pack, listed
        by an index object written before the old pack went): the index is listed once more and
        the blob opened from it (a packed blob is read whole here, so a gone pack is seen at the
        open, not in the middle of the stream). Still missing then: ``MISSING``."""
        try:
            return self._open_listed(sha)
        except BlobFailure as e:
            if e.code != BlobError.MISSING or not e.key:  # not listed at all: no object to chase
                raise
            gone = e
        try:
            self.reload()
        except BlobFailure:
            raise gone from None  # the index does not list now: what the open found stands
        return self._open_listed(sha)

    def _open_listed(self, sha: str) -> BinaryIO:
        """``open`` from the index as cached now."""
        cands = self.candidates(sha)
        if not cands:
            raise BlobFailure(BlobError.MISSING, "not in the index", sha=sha)
        if len(cands) > 1:  # listed twice (a race, a planted entry): read the first good one
            cands = [r for r in cands if self._verify(r) is None] or cands
        return self._open_ref(cands[0], self._windowed(cands[0]))

    def _windowed(self, ref: BlobRef) -> Optional[bytes]:
        """The stored bytes of a packed blob out of the pack window read last (one ranged read of
        ``PACK_READ`` bytes from the blob on serves the blobs after it for ``WINDOW_SECONDS``);
        None for a lone blob. Packs are never rewritten in place, and every open still hashes
        what it serves."""
        if not ref.packed or ref.length > PACK_READ:
            return None
        now = time.monotonic()
        with self._window_lock:
            w = self._window
            if (w is not None and w[0] == ref.key and w[1] <= ref.offset <= ref.offset + ref.length <= w[1] + len(w[2])
                    and now - w[3] < WINDOW_SECONDS):
                return w[2][ref.offset - w[1]:ref.offset - w[1] + ref.length]
        try:
            data = self.store.read_range(ref.key, ref.offset, ref.offset + PACK_READ)
        except StoreFailure as e:
            raise _fail(ref.sha, ref.key, e) from None
        with self._window_lock:
            self._window = (ref.key, ref.offset, data, now)
        return data[:ref.length]

    def _verify(self, ref: BlobRef) -> Optional[BlobFailure]:
        try:
            with self._open_ref(ref) as f:
                while f.read(CHUNK):
                    pass
        except BlobFailure as e:
            return e
        return None

    def check_ref(self, ref: BlobRef) -> Optional[BlobFailure]:
        """Read the blob at ``ref`` (listed or not) from the store and hash it: None when its
        bytes are exactly the blob's, else the failure."""
        return self._verify(ref)

    def check(self, sha: str) -> Optional[BlobFailure]:
        """Read ``sha`` whole from the store and hash it: None when good, else the failure."""
        cands = self.candidates(sha)
        if not cands:
            return BlobFailure(BlobError.MISSING, "not in the index", sha=sha)
        first = None
        for ref in cands:
            bad = self._verify(ref)
            if bad is None:
                return None
            first = first or bad
        return first

    # --- adding -----------------------------------------------------------------------------
    def add(self, items: Iterable[BlobSource]) -> List[BlobRef]:
        """Store each source (streamed, its claim verified) and return its ref, in order. Every
        ref returned points at bytes read back from the store and verified, and is listed in an
        index object that is durable when ``add`` returns. A source whose bytes are not what it
        claims raises ``BlobFailure(MISMATCH)`` and gets no ref (its data objects stay as leftovers
        for ``forget``; a retry adopts lone ones). A blob stored already is not uploaded again; if
        it is listed again (with this owner's claim) in this call's index. A long call indexes what it verified
        every ``INDEX_EVERY`` seconds, so that no object of it stays unindexed for anywhere near
        ``forget``'s grace. Before its first data object, a pending note naming the data keys it
        may write is made durable (``_Pending``); it goes once the index listing them is."""
        index = self._index()
        # ``items`` is consumed one source at a time, never ahead: a caller streams each original
        # through a scratch file it removes once the next is asked for, and memory must not grow
        # with the number of blobs. So a lone blob's key is named by a note of its own right
        # before it is written, and pack keys are drawn from spares a note names (``_Pending``)
        pending = _Pending(self.store, packs=2)
        out: List[BlobRef] = []
        new: Dict[str, BlobRef] = {}
        claims: Dict[str, BlobRef] = {}  # stored blobs this owner now claims too
        present: Dict[BlobRef, bool] = {}  # stored copies read back in this call
        window: dict = {}  # the part of a pack read last (blobs stored together are added together)
        pack: List[Tuple[BlobRef, bytes]] = []  # refs with a placeholder key, and their stored bytes
        pack_bytes = 0
        slots: List[Tuple[int, str]] = []  # (position in out, sha) of blobs waiting for their pack
        waiting = set()  # the shas in slots

        indexed: Set[str] = set()  # shas of this call already in an index object it wrote
        since = [None]  # when this call's oldest unindexed object was written

        def write_index() -> None:
            rows = [r for s, r in list(new.items()) + list(claims.items()) if s not in indexed]
            if rows:
                mine = frozenset([self.owner])
                written = self._write_index([(r, mine) for r in rows])
                with self._lock:
                    for key, chunk in written:
                        self._index_keys.append(key)
                        self._docs[key] = chunk
                        for r, _ in chunk:
                            self._where.setdefault(r.sha, []).append(key)
                    self._record(rows)
                indexed.update(r.sha for r in rows)
            since[0] = None

        def wrote() -> None:
            if since[0] is None:
                since[0] = time.monotonic()
            elif time.monotonic() - since[0] > INDEX_EVERY:
                write_index()

        def flush() -> None:
            nonlocal pack, pack_bytes
            if pack:
                for ref in self._write_pack(pack, key=pending.pack_key()):
                    new[ref.sha] = ref
                pack, pack_bytes = [], 0
                wrote()

        for src in items:
            if not (isinstance(src.sha, str) and _SHA.match(src.sha)) or src.size < 0:
                raise BlobFailure(BlobError.MISMATCH, "not a sha256 hex digest and size", sha=str(src.sha))
            known = new.get(src.sha) or (self._good_copy(src, present, window) if src.sha in index else None)
            if known is not None:
                if src.sha not in new:
                    # listed again, even by its own owner: a forget elsewhere that dropped it since
                    # this instance loaded the index sees this row before it deletes the object
                    claims[src.sha] = known
                out.append(known)
                continue
            if src.sha in waiting and src.sha not in new:
                self._read_claimed(src)
                out.append(None)  # type: ignore[arg-type]  # filled from its pack below
                slots.append((len(out) - 1, src.sha))
                continue
            if src.size < self.pack_below or src.size == 0:  # (an empty object is not one on every store)
                form, stored = self._small(src)
                pack.append((BlobRef(src.sha, src.size, "", pack_bytes, len(stored), form), stored))
                pack_bytes += len(stored)
                out.append(None)  # type: ignore[arg-type]
                slots.append((len(out) - 1, src.sha))
                waiting.add(src.sha)
                if pack_bytes >= self.pack_target:
                    flush()
            else:
                ref = self._lone(src, pending)
                new[ref.sha] = ref
                out.append(ref)
                wrote()
        flush()
        for i, sha in slots:
            out[i] = new[sha]
        _hit(self.failpoint, "add.verified")
        if len(indexed) < len(set(new) | set(claims)):
            write_index()
            _hit(self.failpoint, "add.index_written")
        pending.done()
        _hit(self.failpoint, "add.pending_removed")
        return out

    def _record(self, rows: List[BlobRef]) -> None:
        """Put refs this instance just indexed into its cached index (hold ``_lock``)."""
        index = self._index()
        for r in rows:
            old = index.get(r.sha)
            if old is not None and old != r:  # stored anew: its old copy did not read back
                self._more[r.sha] = [old] + [m for m in self._more.get(r.sha, []) if m != r]
            index[r.sha] = r
            self._owners.setdefault(r.sha, set()).add(self.owner)

    def _verify_near(self, ref: BlobRef, window: dict) -> Optional[BlobFailure]:
        """``_verify`` for a packed blob through ``window``, one ranged read of ``PACK_READ`` bytes
        kept for the blobs after it (200 small blobs stored already: a request, not 200)."""
        if not ref.packed or ref.length > PACK_READ:
            return self._verify(ref)
        start, data = window.get("start", 0), window.get("data", b"")
        if not (window.get("key") == ref.key and start <= ref.offset
                and ref.offset + ref.length <= start + len(data)):
            try:
                data = self.store.read_range(ref.key, ref.offset, ref.offset + PACK_READ)
            except StoreFailure as e:
                return _fail(ref.sha, ref.key, e)
            start = ref.offset
            window.update(key=ref.key, start=start, data=data)
        return self._check_bytes(ref, data[ref.offset - start:ref.offset - start + ref.length])

    def _good_copy(self, src: BlobSource, checked: Dict[BlobRef, bool], window: dict) -> Optional[BlobRef]:
        """A stored copy of ``src`` that reads back as it now (a ref returned must be verified
        when returned, not only when first stored), after the source is checked against its
        claim; None when there is none (the caller stores the blob again)."""
        cands = [r for r in self.candidates(src.sha) if r.size == src.size]
        if not cands:
            return None
        self._read_claimed(src)
        for ref in cands:
            if ref not in checked:
                checked[ref] = self._verify_near(ref, window) is None
            if checked[ref]:
                return ref
        return None

    def _read_claimed(self, src: BlobSource) -> None:
        with src.open() as f:
            _Claimed(f, src).drain()

    def _small(self, src: BlobSource) -> Tuple[str, bytes]:
        """A small source read whole (it is below ``pack_below``), checked, in its stored form."""
        if src.takes_frame():
            with src.frame() as f:
                framed = _Framed(f, src)
                parts = []
                while True:
                    b = framed.read(CHUNK)
                    if not b:
                        break
                    parts.append(b)
            return "zst", b"".join(parts)
        with src.open() as f:
            c = _Claimed(f, src)
            parts = []
            while True:
                b = c.read(CHUNK)
                if not b:
                    break
                parts.append(b)
        data = b"".join(parts)
        z = _compress(data) if data else b""
        if data and len(z) <= KEEP_ZST_RATIO * len(data):
            return "zst", z
        return "raw", data

    def _lone(self, src: BlobSource, pending: Optional[_Pending] = None) -> BlobRef:
        key = f"{DATA}/{src.sha[:2]}/{src.sha}"
        if pending is not None:
            pending.lone_key(key)
        framed = src.takes_frame()
        with (src.frame if framed else src.open)() as f:
            if framed:  # compressed already: sent as it is, decoded and hashed on the way
                zstd, body = True, _Framed(f, src)
            else:
                # a source that seeks is judged by windows spread over all of it (a file random at
                # its start and compressible after is compressed); a stream by its first chunk
                got = zst.sample(f, src.size)
                if got is not None:
                    probe = b""
                    zstd = got[0] > 0 and got[1] <= KEEP_ZST_RATIO * got[0]
                else:
                    probe = f.read(PROBE_BYTES)
                    z = _compress(probe) if probe else b""
                    zstd = bool(probe) and len(z) <= KEEP_ZST_RATIO * len(probe)
                claimed = _Claimed(f, src, prefix=probe)
                body = _Deflating(claimed, src.size) if zstd else claimed
            try:
                entry = self.store.put_file(key, body, if_absent=True, mode=PRIVATE)
            except StoreFailure as e:
                if e.code != StoreError.ALREADY_EXISTS:
                    raise _fail(src.sha, key, e) from None
                return self._adopt(src, key)
        form = "zst" if zstd else "raw"
        ref = BlobRef(src.sha, src.size, key, 0, entry.size, form)
        _hit(self.failpoint, "add.data_written")
        bad = self._verify(ref)
        if bad is not None:
            if bad.code == BlobError.CORRUPT:
                # ours, just written, unindexed and wrong (a read that failed proves nothing: another
                # add may have adopted the object since, so it stays, a leftover at worst)
                self.store.delete([key])
            raise bad
        return ref

    def _adopt(self, src: BlobSource, key: str) -> BlobRef:
        """``key`` exists without an index entry here (an earlier add that crashed, or another
        process's): check the source, then take the object if it reads back as the blob."""
        self._read_claimed(src)
        try:
            entry = self.store.stat(key)
            head = self.store.read_range(key, 0, 4) if entry is not None else b""
        except StoreFailure as e:
            raise _fail(src.sha, key, e) from None
        if entry is None:
            raise BlobFailure(BlobError.MISSING, "vanished while it was adopted; add again", sha=src.sha, key=key)
        tries = ["zst", "raw"] if head == _ZSTD_MAGIC else ["raw"]
        last = None
        for form in tries:
            ref = BlobRef(src.sha, src.size, key, 0, entry.size, form)
            last = self._verify(ref)
            if last is None:
                return ref
        # a stored object that is not the blob: never adopted, never deleted here (not ours to judge
        # while another add may be writing; forget removes it once it is an old leftover)
        raise BlobFailure(BlobError.CORRUPT, f"an object of this name is there and is not the blob ({last})",
                          sha=src.sha, key=key)

    def _write_pack(self, blobs: List[Tuple[BlobRef, bytes]], step: str = "add.data_written",
                    hook: Optional[Callable[[str], None]] = None, key: str = "") -> List[BlobRef]:
        """Write one pack of ``blobs`` (their offsets relative to the pack's first blob) at ``key``
        (one a pending note names) if absent, read it back and verify every blob in it."""
        key = key or _new_pack_key()
        try:
            self.store.put(key, PACK_MAGIC + b"".join(b for _, b in blobs), if_absent=True, mode=PRIVATE)
        except StoreFailure as e:
            raise _fail("", key, e) from None  # the pack's failure, not one blob's
        _hit(hook if hook is not None else self.failpoint, step)
        refs = [BlobRef(r.sha, r.size, key, len(PACK_MAGIC) + r.offset, r.length, r.form) for r, _ in blobs]
        bad = self._verify_pack(key, refs)
        if bad is not None:
            self.store.delete([key])
            raise bad
        return refs

    def _verify_pack(self, key: str, refs: List[BlobRef]) -> Optional[BlobFailure]:
        """Every blob of a fresh pack read back (a few large ranged reads) and hashed."""
        end = max(r.offset + r.length for r in refs)
        store = self.store

        def fetch(a: int, b: int) -> bytes:
            return store.read_range(key, a, min(b, end))

        try:
            with io.BufferedReader(RangeReader(fetch, end, name=key), PACK_READ) as f:
                for ref in sorted(refs, key=lambda r: r.offset):
                    f.seek(ref.offset)
                    stored = f.read(ref.length)
                    bad = self._check_bytes(ref, stored)
                    if bad is not None:
                        return bad
        except StoreFailure as e:
            return _fail("", key, e)
        return None

    @staticmethod
    def _check_bytes(ref: BlobRef, stored: bytes) -> Optional[BlobFailure]:
        if len(stored) != ref.length:
            return BlobFailure(BlobError.CORRUPT, f"{len(stored)} bytes stored where {ref.length} were written",
                               sha=ref.sha, key=ref.key)
        if ref.size <= SMALL_DECODE:
            return _decoded(ref, stored)[1]
        decoded = io.BytesIO(stored) if ref.form == "raw" else zst.open_decompressed(io.BytesIO(stored))
        v = _Verifying(ref, decoded)
        try:
            while v.read(CHUNK):
                pass
        except BlobFailure as e:
            return e
        return None

    def index_found(self, refs: Iterable[BlobRef]) -> List[str]:
        """List ``refs`` — blobs found in this store's data objects that no valid index object
        lists (``storage.blob_salvage``: a damaged index object hid them) — in new index objects
        of this store's owner; their keys. Each ref must be one this layout can write and is read
        back from the store and hashed first (else ``BlobFailure``, nothing written); each index
        object is written if absent and read back before the cached index takes it. Nothing is
        changed or deleted: a damaged index object stays, and keeps every ``forget`` from
        deleting anything while it stands (it may list blobs no caller named)."""
        mine = frozenset([self.owner])
        rows: Dict[str, BlobRef] = {}
        for ref in refs:
            got = _valid_ref(_row(ref, mine))
            if got is None or got[0] != ref:
                raise BlobFailure(BlobError.CORRUPT, "not a place this layout stores a blob at", sha=ref.sha, key=ref.key)
            bad = self._verify(ref)
            if bad is not None:
                raise bad
            rows.setdefault(ref.sha, ref)
        if not rows:
            return []
        ordered = sorted(rows.values(), key=lambda r: (r.key, r.offset))
        # held first: killed between the two, a mark only keeps (review R25 F4); the other way round
        # the rows would be durable and the pack listed in part, unheld, with no look to come
        self._hold_uncovered(ordered)
        written = self._write_index([(r, mine) for r in ordered], read_back=True)
        self.reload()
        return [key for key, _ in written]

    def _hold_uncovered(self, found: List[BlobRef]) -> None:
        """Mark held (``HELD``, create-only, durable) each pack of ``found`` (rows about to be
        listed) that the rows listed then will not cover from the magic to its end: bytes there no
        row accounts for may be a blob only a lost index object listed (an orphan's), which no
        forget may then delete (review R25 F2)."""
        packs = {r.key for r in found if _PACK.match(r.key)}
        if not packs:
            return
        self._index()  # listed (once) if this instance has not listed it yet
        with self._lock:
            refs, more = self._refs or {}, self._more or {}
        rows: Dict[str, List[BlobRef]] = {}
        for r in found:
            if r.key in packs:
                rows.setdefault(r.key, []).append(r)
        for sha, first in refs.items():
            for r in [first] + more.get(sha, []):
                if r.key in packs:
                    rows.setdefault(r.key, []).append(r)
        sizes = self._stat_all(packs)
        for key in sorted(packs):
            e = sizes.get(key)
            if e is None or pack_covered(rows.get(key, []), e.size):
                continue
            mark = f"{HELD}/{_PACK.match(key).group(2)}.json"
            doc = {"pack": key, "why": "listed anew in part: bytes no row accounts for", "at": time.time()}
            try:
                self.store.put(mark, json.dumps(doc).encode(), if_absent=True, mode=PRIVATE)
            except StoreFailure as e2:
                if e2.code != StoreError.ALREADY_EXISTS:
                    raise _fail("", mark, e2) from None

    def _gaps(self, packs: Set[str]) -> Tuple[Dict[str, List["_Range"]], Dict[str, List[str]]]:
        """The ranges earlier forgets let go from each of ``packs`` (``GAPS``: one listing, then a
        read of each mark of those packs), and the marks' keys per pack. A mark that does not read,
        or a range that is not two non-negative ints, accounts for nothing."""
        if not packs:
            return {}, {}
        ids = {_PACK.match(k).group(2): k for k in packs}
        ranges: Dict[str, List[_Range]] = {}
        marks: Dict[str, List[str]] = {}
        try:
            entries = [e for e in self.store.list(GAPS) if _GAP.match(e.key)]
        except StoreFailure as e:
            if e.code != StoreError.NOT_FOUND:
                raise _fail("", GAPS, e) from None
            entries = []
        for e in entries:
            pack = ids.get(_GAP.match(e.key).group(1))
            if pack is None:
                continue
            marks.setdefault(pack, []).append(e.key)
            try:
                doc = json.loads(self.store.read_range(e.key, 0, min(e.size, 1 << 20)))
            except (StoreFailure, ValueError, UnicodeDecodeError):
                continue
            for r in doc.get("ranges", []) if isinstance(doc, dict) and isinstance(doc.get("ranges"), list) else []:
                if isinstance(r, list) and len(r) == 2 and all(type(x) is int and x >= 0 for x in r):
                    ranges.setdefault(pack, []).append(_Range(r[0], r[1]))
        return ranges, marks

    def _record_gaps(self, packs: Set[str], refs: List[BlobRef]) -> None:
        """A mark per pack of ``packs`` (those that stay) naming the ranges of ``refs`` in it that
        this forget lets go (``GAPS``, create-only, durable before the index objects change)."""
        for key in sorted(packs):
            ranges = sorted({(r.offset, r.length) for r in refs if r.key == key})
            mark = f"{GAPS}/{_PACK.match(key).group(2)}/{secrets.token_hex(16)}.json"
            doc = {"pack": key, "ranges": [list(r) for r in ranges], "at": time.time()}
            try:
                self.store.put(mark, json.dumps(doc).encode(), if_absent=True, mode=PRIVATE)
            except StoreFailure as e:
                raise _fail("", mark, e) from None

    def held_packs(self) -> Set[str]:
        """The packs marked held (``_hold_uncovered``): one listing of ``HELD``. A mark is untrusted
        input that can only keep a pack: a name that is no pack id of this layout is ignored."""
        out = set()
        try:
            for e in self.store.list(HELD):
                m = _HELD.match(e.key)
                if m:
                    out.add(f"{DATA}/{m.group(1)[:2]}/{m.group(1)}.pack")
        except StoreFailure as e:
            if e.code != StoreError.NOT_FOUND:
                raise _fail("", HELD, e) from None
        return out

    def kept_packs(self, sizes: Optional[Dict[str, int]] = None) -> Dict[str, Tuple[int, str]]:
        """The packs some row still lists that no ``forget`` deletes or repacks, whatever it
        forgets (``status`` names them: 843feac's remark, issue #26): pack key -> (its stored size,
        why): ``HELD`` when marked held (``_hold_uncovered``: listed anew only in part after an
        index object was lost), else ``"uncovered"`` when bytes of it neither its rows nor the
        ranges earlier forgets recorded (``GAPS``) account for (an index object lost that listed
        some of its rows, review R25 F5, or a gap a version that recorded none left): the packs a
        forget keeps as ``held_kept``. A pack no row lists is not here (an unlisted object, which
        every sweep keeps unless a note proves it a leftover). ``sizes``: data key -> stored size
        of a listing of ``DATA`` the caller just made (else one is made here); then one listing of
        ``HELD``, and of ``GAPS`` with a read of each mark of a pack its rows do not cover. Nothing
        while an index object is damaged: rows it may list are unknown (its own problem says so).
        Reads the index as last listed; ``BlobFailure`` as the store fails."""
        if self.damaged_index():
            return {}
        if sizes is None:
            try:
                sizes = {e.key: e.size for e in self.store.list(DATA)}
            except StoreFailure as e:
                raise _fail("", DATA, e) from None
        rows: Dict[str, List[BlobRef]] = {}
        for ref in self.refs():
            for r in self.candidates(ref.sha):
                if _PACK.match(r.key) and r.key in sizes:
                    rows.setdefault(r.key, []).append(r)
        if not rows:
            return {}
        held = self.held_packs() & set(rows)
        out: Dict[str, Tuple[int, str]] = {k: (sizes[k], HELD) for k in sorted(held)}
        partial = {k for k, refs in rows.items() if k not in held and not pack_covered(refs, sizes[k])}
        gaps, _marks = self._gaps(partial)
        for k in sorted(partial):
            if not pack_covered(rows[k] + gaps.get(k, []), sizes[k]):
                out[k] = (sizes[k], "uncovered")
        return out

    def damaged_notes(self) -> List[dict]:
        """The pending notes that do not read as notes of this layout (``forget``'s
        ``pending_damaged``): ``{"key", "message"}`` each. Such a note proves nothing, so what it
        may have named (a killed write's leftover) is kept and counted with the data objects no
        index row lists; ``status`` names each (review R25 L6). One listing of ``PENDING`` and a
        read of each note; ``BlobFailure`` as the store fails."""
        fig: dict = {}
        try:
            self._notes(time.time(), float("inf"), fig)
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return []
            raise _fail("", PENDING, e) from None
        return list(fig.get("pending_damaged", []))

    def _write_index(self, rows: List[Tuple[BlobRef, FrozenSet[str]]],
                     read_back: bool = False) -> List[Tuple[str, _Rows]]:
        """Index objects of ``rows`` ((ref, owners) each; none for no rows), ``INDEX_ROWS`` at most
        each (every one stays readable within ``INDEX_READ_LIMIT``), a pack's rows in one object
        where they fit, written if absent and durable on return: (key, its rows) each. Each is
        remembered as written, so that no reload of this process reads it back; ``read_back``:
        each is read back first and must list exactly its rows (``BlobFailure(CORRUPT)``)."""
        out = []
        loc = self._loc()
        for chunk in _chunks(rows):
            key = f"{INDEX}/{secrets.token_hex(16)}.json"
            doc = {"v": 1, "created": time.time(), "blobs": [_row(r, who) for r, who in chunk]}
            data = json.dumps(doc, separators=(",", ":")).encode()
            try:
                version = self.store.put(key, data, if_absent=True, mode=PRIVATE)
                back = _read_index(self.store, key, len(data)) if read_back else (chunk, 0)
            except StoreFailure as e:
                raise _fail("", key, e) from None
            except (ValueError, UnicodeDecodeError) as e:
                raise BlobFailure(BlobError.CORRUPT, f"the index object written does not read back ({e})",
                                  key=key) from None
            if back != (chunk, 0):
                raise BlobFailure(BlobError.CORRUPT, "the index object written reads back other rows", key=key)
            _remember_index(loc, key, version if isinstance(version, str) else "", len(data), (chunk, 0))
            out.append((key, chunk))
        return out

    # --- forgetting (prune) -----------------------------------------------------------------
    def forget(self, shas: Iterable[str], *, grace_seconds: float = 3600,
               consolidate_above: Optional[int] = None, sweep: bool = True, small_packs: int = 0,
               keep_unlisted: bool = False, keep_uncovered: bool = False,
               failpoint: Optional[Callable[[str], None]] = None) -> dict:
        """Drop this owner's claim on ``shas`` (a blob another owner added as well stays, counted
        in ``released``), and free what no live blob needs (restic's prune): the index objects
        listing a blob that goes, whose owners change or that moves are written anew without
        it (durable), then those they replace are deleted, then the data objects no live blob
        needs; every other index object is left as it is. Packs holding a forgotten blob whose
        live share falls below ``REPACK_BELOW`` are repacked first (the new pack verified before
        the index points at it). The index objects of fewer than ``INDEX_ROWS // 2`` rows are
        merged when there are more than ``consolidate_above`` of them beyond what the merge takes.

        ``sweep`` (one listing of every data object): also repack any pack below its live share,
        with ``small_packs`` (0: never) every pack smaller than ``MIN_PACK`` together once there
        are at least that many (and two; then at most one small pack stays: restic's prune of
        small packs, at a batch's end), and delete leftovers older than ``grace_seconds``: objects
        no index lists that an old pending note proves a killed write's (the module docstring);
        every other unlisted object is kept and counted (``unlisted_kept``, bytes); without it
        only the objects the forgotten blobs live in are looked at (a ``stat`` each), so a
        release of one run's blobs costs what it touches, not the whole vault. ``failpoint``:
        this call's hook instead of the instance's. Returns figures.
        Nothing is deleted while an index object is damaged (``blocked_by_damaged_index``).

        ``keep_unlisted``: the caller knows (or cannot rule out) that a blob it needs is listed
        by no index row (an index object removed or lost; another logdir sharing the store whose
        records it cannot see): no data object no index row lists is deleted however old
        (``unlisted_kept``, ``unlisted_kept_bytes``): it may hold that blob (restic's prune never
        deletes a pack holding a blob still referenced). ``keep_uncovered``: nor is a pack whose
        rows do not cover it from the magic to its end (``pack_covered``: bytes there no row
        accounts for) repacked or deleted (``uncovered_kept``) — for a caller that looked for the
        blob and found it nowhere; a forget's own gaps (a blob forgotten from a pack that stays)
        look alike, so such packs stay until that blob is found."""
        hook = failpoint if failpoint is not None else self.failpoint
        self.reload()  # another process's adds since this instance listed the index count too
        fig = {"forgotten": 0, "released": 0, "live_blobs": 0, "index_written": 0, "index_deleted": 0,
               "objects_deleted": 0, "packs_repacked": 0, "blobs_moved": 0, "leftovers_deleted": 0,
               "leftovers_kept_young": 0,
               "bytes_deleted": 0, "bytes_written": 0, "not_repacked": [], "missing_objects": [],
               "blocked_by_damaged_index": [d["key"] for d in self._damaged]}
        if self._damaged:
            return fig  # a damaged index may be the only one listing some blob: nothing is freed
        with self._lock:  # this reload's view (forget runs alone on the store: the caller's lock)
            index, docs, where, old_index = self._refs, self._docs, self._where, list(self._index_keys)
            owners_of, more = self._owners, self._more

        def cands(sha: str) -> List[BlobRef]:
            first = index.get(sha)
            return [] if first is None else [first] + more.get(sha, [])

        shas = set(shas)
        released = {s for s in shas if self.owner in owners_of.get(s, ())}
        owners = {s: frozenset(owners_of[s] - {self.owner}) for s in released}
        drop = {s for s in released if not owners[s]}
        released -= drop
        by_key: Dict[str, List[BlobRef]] = {}  # data object -> the live refs in it
        for s, first in index.items():
            if s not in drop:
                by_key.setdefault(first.key, []).append(first)
                for r in more.get(s, ()):
                    by_key.setdefault(r.key, []).append(r)
        touched = {r.key for s in drop for r in cands(s)}
        all_notes: Dict[str, Tuple[float, List[str], bool]] = {}
        if sweep:
            objects = {e.key: e for e in self.store.list(DATA)}
            looked = set(objects) | set(by_key)
            # before anything is deleted: a note a write killed after its index was durable (or a
            # forget killed after its deletes) names only listed or absent keys; dropped now, while
            # they are listed, it can never prove one of them a leftover once its index object is
            # lost, or after it is forgotten and written again (review R24's note on 12c3f17)
            all_notes = self._notes(time.time(), grace_seconds, fig)
            every_row = {r.key for s in index for r in cands(s)}
            stale = self._drop_stale_notes(all_notes, every_row, set(objects), fig)
            all_notes = {nk: v for nk, v in all_notes.items() if nk not in stale}
        else:
            objects = self._stat_all(touched)
            looked = set(touched)
        live_len = {k: sum(r.length for r in by_key[k]) for k in looked if k in by_key}
        fig["missing_objects"] = sorted(k for k in live_len if k not in objects)
        known_dead = touched - set(live_len)
        uncovered: Set[str] = set()
        if keep_unlisted:
            fig["unlisted_kept"] = fig["unlisted_kept_bytes"] = 0
        if keep_uncovered:
            rows_in: Dict[str, List[BlobRef]] = {}  # every row, the forgotten ones included
            for s in index:
                for r in cands(s):
                    rows_in.setdefault(r.key, []).append(r)
            uncovered = {k for k in objects if k in rows_in and _PACK.match(k)
                         and not pack_covered(rows_in[k], objects[k].size)}
            fig["uncovered_kept"] = len(uncovered)
            known_dead -= uncovered
        repack = sorted(k for k, n in live_len.items()
                        if k in objects and _PACK.match(k) and n < REPACK_BELOW * objects[k].size
                        and k not in uncovered)
        if sweep and small_packs:
            # small packs go together into new ones, exactly as a half-dead pack's live blobs do
            # (new pack verified, then the index, then the old ones): at most one small one stays
            small = sorted(k for k in live_len if k in objects and _PACK.match(k) and k not in repack
                           and k not in uncovered and objects[k].size < MIN_PACK)
            if len(small) >= max(2, small_packs):
                fig["small_packs"] = len(small)
                repack = sorted(repack + small)
        gap_marks: Dict[str, List[str]] = {}
        if repack or any(_PACK.match(k) for k in known_dead):
            # a pack listed anew in part may hold an orphan's blobs no row lists: neither
            # deleted nor repacked (copying its listed rows only would drop them), whatever goes;
            # nor is one with bytes no row (forgotten now or not) nor recorded gap accounts for
            # (an index object lost that listed some of its rows: review R25 F5)
            held = self.held_packs()
            packs = {k for k in known_dead | set(repack) if _PACK.match(k) and k in objects}
            gaps, gap_marks = self._gaps(packs)
            dropped: Dict[str, List[BlobRef]] = {}
            for sha in drop:
                for r in cands(sha):
                    if r.key in packs:
                        dropped.setdefault(r.key, []).append(r)
            held |= {k for k in packs if not pack_covered(
                by_key.get(k, []) + dropped.get(k, []) + gaps.get(k, []), objects[k].size)}
            if held & (known_dead | set(repack)):
                fig["held_kept"] = len(held & (known_dead | set(repack)))
                known_dead -= held
                repack = [k for k in repack if k not in held]

        moved: Dict[str, BlobRef] = {}
        repacked: List[str] = []
        pending: Optional[_Pending] = None
        release: Optional[_Pending] = None
        if repack:
            # a blob listed twice need not be copied if its other copy stays and reads back well
            # (checked: the other entry may be a planted or stale one)
            twice = {ref.sha for k in repack for ref in by_key[k] if len(cands(ref.sha)) > 1}
            seen = self._stat_all({r.key for s in twice for r in cands(s)} - set(objects)) if not sweep else {}
            exists = set(objects) | set(seen)
            elsewhere = {s for s in twice if any(
                r.key in exists and r.key not in repack and self._verify(r) is None for r in cands(s))}
            pending = _Pending(self.store, packs=len(repack))
            moved, repacked = self._repack(repack, {k: by_key[k] for k in repack}, elsewhere, fig, hook, pending)
        gone = set(repacked)

        # the index objects to write anew: those listing a changed blob, and the small ones to merge
        changed = drop | released | {r.sha for k in gone for r in by_key[k]}
        affected = sorted({ik for s in changed for ik in where.get(s, ())})
        if consolidate_above is None:  # read at call time, not at definition: tests set the module constant
            consolidate_above = CONSOLIDATE_ABOVE
        taken = set(affected)
        small = [ik for ik in old_index if ik not in taken and len(docs[ik]) < max(1, INDEX_ROWS // 2)]
        if len(small) > consolidate_above + -(-sum(len(docs[ik]) for ik in small) // INDEX_ROWS):
            affected += small
        written: List[str] = []
        still: Set[str] = set()  # data objects a superseded index object that could not go still lists
        if affected:
            rows: Dict[BlobRef, Tuple[BlobRef, Set[str]]] = {}
            for ik in affected:
                for ref, who in docs[ik]:
                    if ref.sha in drop or ref.key in gone:
                        continue
                    # keyed by the whole entry: two entries of one blob at one place may differ
                    # (length, form: a stale or planted one), and open() needs the good one kept
                    put = rows.setdefault(ref, (ref, set()))
                    put[1].update(owners.get(ref.sha, who))
            for sha, ref in moved.items():
                rows.setdefault(ref, (ref, set()))[1].update(owners.get(sha, owners_of[sha]))
            ordered = sorted(((r, frozenset(w)) for r, w in rows.values()), key=lambda x: (x[0].key, x[0].offset))
            # the ranges let go from packs that stay, recorded before the rows that listed them go:
            # a later forget tells them from the rows of an index object lost (review R25 F5)
            self._record_gaps({r.key for s in drop for r in cands(s)
                               if _PACK.match(r.key) and r.key not in known_dead and r.key not in gone},
                              [r for s in drop for r in cands(s)])
            # the new index objects first, durable; until the ones they replace are deleted the
            # union still lists the forgotten blobs, whose objects are all still there
            written = [k for k, _ in self._write_index(ordered)]
            fig["index_written"] = len(written)
            _hit(hook, "forget.index_written")
            if pending is not None:
                pending.done()  # the new packs are listed: their note goes
            # what this forget deletes once the old index objects are gone is named first: killed
            # in between, those objects are unlisted, and only a note proves them leftovers
            release = _Pending(self.store)
            release.release([k for k in sorted(known_dead | gone)
                             if k in objects and (_LONE.match(k) or _PACK.match(k))])
            for ik in self._delete(affected, fig, "index_deleted"):
                # a superseded index object stays and still lists forgotten and moved blobs: their
                # objects stay with it (the next forget of them deletes both)
                still.update(ref.key for ref, _ in docs[ik])
            _hit(hook, "forget.old_index_deleted")

        now = time.time()
        doomed = [k for k in sorted(known_dead | gone)
                  if k in objects and k not in still and (_LONE.match(k) or _PACK.match(k))]
        notes: Dict[str, Tuple[float, List[str]]] = {}
        if sweep:
            listed = set(by_key) | {r.key for r in moved.values()} | still
            fig["unlisted_kept"] = fig["unlisted_kept_bytes"] = 0
            notes = {nk: (when, keys) for nk, (when, keys, old) in all_notes.items() if old}
            proven: Dict[str, float] = {}  # data key -> the earliest time of an old note naming it
            for when, keys in notes.values():
                for k in keys:
                    proven[k] = min(when, proven.get(k, when))
            for key, e in sorted(objects.items()):
                if key in listed or key in known_dead or key in gone:
                    continue
                if not (_LONE.match(key) or _PACK.match(key)):
                    continue  # not a name this layout writes: not ours to delete
                if keep_unlisted:  # it may hold a blob the caller needs and no row lists
                    fig["unlisted_kept"] += 1
                    fig["unlisted_kept_bytes"] += e.size
                    continue
                # a listing that says no time (0) says nothing of the object's age: young, kept
                if not (e.mtime > 0 and now - e.mtime >= grace_seconds):
                    fig["leftovers_kept_young"] += 1  # maybe another add between its upload and its index
                elif key in proven and e.mtime >= proven[key]:
                    # a killed write's leftover: an old note named it before it was written (an
                    # object older than the note was there before: someone's, kept)
                    doomed.append(key)
                    fig["leftovers_deleted"] += 1
                else:
                    # no note proves it a leftover: an index object listing it may be lost (an
                    # orphan's only copy), or it predates the notes: kept, counted, never deleted
                    fig["unlisted_kept"] += 1
                    fig["unlisted_kept_bytes"] += e.size
        kept_listed: Set[str] = set()
        if doomed:
            # an add elsewhere may have indexed one of them since this forget listed the index (it
            # adopted an old leftover, or claimed a blob): look once more, just before deleting
            mine = set(old_index) | set(written)
            kept = kept_listed = self._keys_listed_by_new_index(mine) & set(doomed)
            if kept:
                doomed = [k for k in doomed if k not in kept]
                fig["kept_for_new_index"] = len(kept)
        failed: List[str] = []
        if doomed:
            fig["bytes_deleted"] = sum(objects[k].size for k in doomed if k in objects)
            failed = self._delete(doomed, fig, "objects_deleted")
            # a deleted pack's recorded gaps go with it (a mark left only keeps nothing: its pack is gone)
            marks = sorted(m for k in set(doomed) - set(failed) for m in gap_marks.get(k, []))
            if marks:
                fig["gaps_dropped"] = 0
                self._delete(marks, fig, "gaps_dropped")
            if not sweep:
                # a note naming an object this forget deleted (it was listed: the note's write was
                # indexed) goes once none of its keys is left unlisted: else, that key written again
                # by a later add and its index object lost, the note would prove it a leftover
                self._settle_after_delete(set(doomed) - set(failed), set(by_key) | {r.key for r in moved.values()}
                                          | still, grace_seconds, fig,
                                          own=set(release.notes) if release is not None else set())
        if notes:
            # an old note goes once nothing it proves a leftover stays: each key it names is listed,
            # absent, deleted now, or older than the note (not this write's)
            gone_now = set(doomed) - set(failed)
            stays = {k for k in objects if k not in gone_now}
            settled = [nk for nk, (when, keys) in sorted(notes.items())
                       if not any(k in stays and k not in listed and k not in kept_listed
                                  and objects[k].mtime >= when for k in keys)]
            if settled:
                fig["pending_dropped"] = 0
                self._delete(settled, fig, "pending_dropped")
        if release is not None and not failed:
            release.done()  # what it named is deleted, or listed by an index object that stays
        _hit(hook, "forget.objects_deleted")
        fig["forgotten"] = len(drop)
        fig["released"] = len(released)
        fig["live_blobs"] = len(index) - len(drop)
        fig["index_kept"] = len(old_index) - len(affected)
        self.reload()
        return fig

    def _drop_stale_notes(self, notes: Dict[str, Tuple[float, List[str], bool]], listed: Set[str],
                          present: Set[str], fig: dict, was_listed: Set[str] = frozenset()) -> Set[str]:
        """Drop the notes (``_notes``) that can prove nothing any more: every key each names is
        ``listed`` by an index row, or not ``present`` (never written, or deleted) — a write killed
        after its index was durable, before its note went (review R24's note on 12c3f17: left, the
        note would prove its pack a leftover once the index object listing it is lost, or after its
        blobs are forgotten and written again). A young note naming no listed key (nor one in
        ``was_listed``: deleted just now, listed until then) may be a write that has not written
        yet: kept. Dropping a note deletes no data object: at worst a leftover stays unproven
        (space). Returns the notes judged stale (counted ``pending_stale_dropped``)."""
        stale = sorted(nk for nk, (_when, keys, old) in notes.items()
                       if all(k in listed or k in was_listed or k not in present for k in keys)
                       and (old or any(k in listed or k in was_listed for k in keys)))
        if stale:
            fig.setdefault("pending_stale_dropped", 0)
            self._delete(stale, fig, "pending_stale_dropped")
        return set(stale)

    def _settle_after_delete(self, deleted: Set[str], listed: Set[str], grace_seconds: float, fig: dict,
                             own: Set[str] = frozenset()) -> None:
        """After a forget that does not sweep deleted the data objects ``deleted``: the notes naming
        one of them (but its ``own``: its release note, which it removes itself) dropped when stale
        (``_drop_stale_notes``; a ``stat`` of each other key they name that no row lists). One
        listing of ``pending/``, and only when something was deleted."""
        if not deleted:
            return
        try:
            notes = {nk: v for nk, v in self._notes(time.time(), grace_seconds, fig).items()
                     if nk not in own and deleted & set(v[1])}
            if not notes:
                return
            unsure = {k for _w, keys, _o in notes.values() for k in keys} - listed - deleted
            present = set(self._stat_all(unsure))
        except (StoreFailure, BlobFailure):
            return  # the notes stay: at worst they prove what they named before, as before this forget
        self._drop_stale_notes(notes, listed, present, fig, was_listed=deleted)

    def _notes(self, now: float, grace_seconds: float, fig: dict) -> Dict[str, Tuple[float, List[str], bool]]:
        """The pending notes (one listing of ``pending/``, each read): note key -> (the time an
        object it names must not predate, the data keys it names, whether it is older than the
        grace: only those prove anything): a write's note, its own time; a forget's release note
        (``kind: release``: it names objects older than itself), none. Notes are untrusted: one
        that does not read as a note of this layout (``pending_damaged``), or a key in it that is
        no data object name this layout writes, proves nothing; and a listed key is never swept
        whatever names it."""
        out: Dict[str, Tuple[float, List[str], bool]] = {}
        for e in self.store.list(PENDING):
            if not _NOTE.match(e.key):
                continue
            old = e.mtime > 0 and now - e.mtime >= grace_seconds
            if not old:
                fig["pending_young"] = fig.get("pending_young", 0) + 1
            try:
                doc = jsondoc.loads(self.store.read_all(e.key, PENDING_READ_LIMIT))
                keys = doc.get("keys") if isinstance(doc, dict) and doc.get("v") == 1 else None
                kind = doc.get("kind", "write") if isinstance(doc, dict) else None
                if not (kind in ("write", "release") and isinstance(keys, list) and len(keys) <= PENDING_KEYS
                        and all(isinstance(k, str) and (_LONE.match(k) or _PACK.match(k)) for k in keys)):
                    raise ValueError("not a pending note of this layout")
            except (ValueError, UnicodeDecodeError, StoreFailure) as err:
                if isinstance(err, StoreFailure) and err.code == StoreError.NOT_FOUND:
                    continue  # removed since the listing (its write finished)
                fig.setdefault("pending_damaged", []).append({"key": e.key, "message": f"{e.key}: {err}"})
                continue
            out[e.key] = (e.mtime if kind == "write" else float("-inf"), keys, old)
        return out

    def _stat_all(self, keys: Iterable[str]) -> Dict[str, object]:
        """key -> its ``Entry`` for those of ``keys`` that exist (a ``stat`` each)."""
        out = {}
        for k in sorted(keys):
            try:
                e = self.store.stat(k)
            except StoreFailure as err:
                raise _fail("", k, err) from None
            if e is not None:
                out[k] = e
        return out

    def _repack(self, packs: List[str], by_key: Dict[str, List[BlobRef]], elsewhere: set, fig: dict,
                hook: Optional[Callable[[str], None]] = None,
                pending: Optional[_Pending] = None) -> Tuple[Dict[str, BlobRef], List[str]]:
        """Copy the live blobs of ``packs`` (as stored, each verified first) into new packs that
        are read back and verified; returns the moved refs and the packs fully moved out. Blobs
        also listed in an object that stays (``elsewhere``) are not copied again. A pack with a
        blob that does not verify is left as it is (named in ``not_repacked``)."""
        moved: Dict[str, BlobRef] = {}
        done: List[str] = []
        batch: List[Tuple[BlobRef, bytes]] = []
        batch_from: List[str] = []
        size = 0
        taken_shas = set(elsewhere)

        def flush() -> None:
            nonlocal batch, batch_from, size
            if batch:
                for ref in self._write_pack(batch, step="forget.pack_written", hook=hook,
                                            key=pending.pack_key() if pending is not None else ""):
                    moved[ref.sha] = ref
                fig["bytes_written"] += size
            done.extend(batch_from)
            batch, batch_from, size = [], [], 0

        for key in packs:
            blobs = sorted((r for r in by_key[key] if r.sha not in taken_shas), key=lambda r: r.offset)
            taken = []
            if blobs:
                end = blobs[-1].offset + blobs[-1].length
                store = self.store

                def fetch(a: int, b: int, key=key, end=end) -> bytes:
                    return store.read_range(key, a, min(b, end))

                try:
                    with io.BufferedReader(RangeReader(fetch, end, name=key), PACK_READ) as f:
                        for ref in blobs:
                            f.seek(ref.offset)
                            stored = f.read(ref.length)
                            bad = self._check_bytes(ref, stored)
                            if bad is not None:
                                raise bad
                            taken.append((ref, stored))
                except (BlobFailure, StoreFailure) as e:
                    fig["not_repacked"].append({"key": key, "message": str(e)})
                    continue
            for ref, stored in taken:
                batch.append((BlobRef(ref.sha, ref.size, "", size, ref.length, ref.form), stored))
                size += ref.length
                taken_shas.add(ref.sha)
            batch_from.append(key)
            fig["packs_repacked"] += 1
            fig["blobs_moved"] += len(taken)
            if size >= self.pack_target:
                flush()
        flush()
        return moved, done

    def _keys_listed_by_new_index(self, seen: Set[str]) -> Set[str]:
        """The data objects listed by index objects not in ``seen`` (written since it was listed)."""
        keys: Set[str] = set()
        for e in self.store.list(INDEX):
            if e.key in seen or not _INDEX.match(e.key):
                continue
            try:
                doc = jsondoc.loads(self.store.read_all(e.key, INDEX_READ_LIMIT))
                rows = doc["blobs"] if isinstance(doc, dict) and isinstance(doc.get("blobs"), list) else []
            except (ValueError, UnicodeDecodeError, StoreFailure):
                raise BlobFailure(BlobError.DAMAGED_INDEX, "appeared during forget and does not read: nothing "
                                  "more deleted", key=e.key) from None
            for row in rows:
                got = _valid_ref(row)
                if got is not None:
                    keys.add(got[0].key)
        return keys

    def _delete(self, keys: List[str], fig: dict, what: str) -> List[str]:
        """Delete ``keys``, counting them in ``fig[what]``; returns those that stay (named in
        ``fig["delete_failed"]``)."""
        failed = []
        for res in self.store.delete(keys):
            if res.ok:
                fig[what] += 1
            else:
                failed.append(res.key)
                fig.setdefault("delete_failed", []).append({"key": res.key, "message": res.message})
        return failed


__all__ = ["PACK_BELOW", "PACK_TARGET", "MIN_PACK", "PACK_MAGIC", "BlobSource", "BlobRef", "BlobFailure", "BlobStore", "FAILPOINT",
           "STEPS", "pack_covered"]
