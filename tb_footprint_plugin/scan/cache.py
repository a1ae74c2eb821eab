"""Incremental scan cache: per event file stats keyed on (size, mtime_ns, inode).

It lives in the state directory (``<logdir>/.tb-footprint/`` by default), which the scan
skips and whose file names never contain ``tfevents``, so TensorBoard never reads it as a
run. The file is one JSON document laid out one entry a line, so that neither a scan nor a
save ever holds it whole: loading keeps, per file, only its key and where its line is (a
100,000-run logdir's parsed cache was ~350 MB of dicts); a hit reads and parses its own line;
new entries are streamed to the temp file that will replace the cache. Writes are atomic (temp
file + rename), the rename serialized by an exclusive ``flock``; a reader that finds a corrupt
or foreign-version cache simply starts afresh.
"""
from __future__ import annotations

from array import array
import bisect
import contextlib
import json
import os
import stat
import struct
import tempfile
import time
from typing import Dict, Iterable, Optional

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.paths import UnsafePath, safe_rel
from tb_footprint_plugin.storage.ours_read import open_ours
from tb_footprint_plugin.storage.private import ensure_private_dir, set_aside_stranger
from tb_footprint_plugin.storage.store import READ_ALL_LIMIT, StoreFailure

CACHE_VERSION = 3
CACHE_NAME = "scan-cache.json"
#: the document's first line; every entry is then one line (``"rel": {"key": [..], "stats": {..}}``,
#: the second on prefixed with ``,``) and the last line closes it
_HEAD = b'{"version": %d, "files": {\n' % CACHE_VERSION
_TAIL = b"\n}}\n"
#: an entry of the index: size, mtime_ns, inode, offset and length of its line (one bytes
#: object per file instead of a tuple of five ints)
_REC = struct.Struct("<QqQQI")
_DECODER = json.JSONDecoder()

Key = tuple  # (size, mtime_ns, inode) on disk; (size, ETag or generation) in a bucket
#: the largest bucket scan cache read (one JSON document, parsed whole: ~900 bytes an event file,
#: so a logdir of about a million event files)
REMOTE_CACHE_LIMIT = 1 << 30


def _parse_head(line: str):
    """(rel, key) of one entry line, or None when it is not one of ours."""
    i = 1 if line.startswith(",") else 0
    try:
        rel, i = _DECODER.raw_decode(line, i)
        if not line.startswith(': {"key": ', i):
            return None
        key, _ = _DECODER.raw_decode(line, i + 10)
    except ValueError:
        return None
    if not isinstance(rel, str) or not (isinstance(key, list) and len(key) == 3
                                        and all(isinstance(k, int) and not isinstance(k, bool) for k in key)):
        return None
    try:
        safe_rel(rel)
    except UnsafePath:
        return None
    if not (0 <= key[0] < 1 << 64 and -(1 << 63) <= key[1] < 1 << 63 and 0 <= key[2] < 1 << 64):
        return None
    return rel, key


def _head(rel: str, key: Key) -> bytes:
    """What an entry's line holds before its stats (``_line``)."""
    return (json.dumps(rel) + ': {"key": ' + json.dumps([int(k) for k in key]) + ', "stats": ').encode("ascii")


def _line(rel: str, key: Key, stats: dict) -> bytes:
    # ASCII only (json escapes the rest, a name's lone surrogates too), never a newline inside
    return _head(rel, key) + json.dumps(stats, separators=(",", ":")).encode("ascii") + b"}"


class ScanCache:
    """Relative path -> (key, stats dict), read from and written to disk a line at a time.

    ``write=False``: nothing is ever written (a dry run's scan)."""

    def __init__(self, state_dir: Optional[str], write: bool = True):
        self.state_dir = state_dir
        self.write = write and state_dir is not None
        self.dirty = False
        #: the cache file read, indexed without a copy of any path (a hit's own line names its path,
        #: so a collision is only a miss) and without an object per entry: ``_recs`` holds each
        #: entry's _REC in file order, ``_hashes`` the hash(rel) of each sorted, ``_pos`` the entry
        #: each sorted hash is, ``_seen`` a byte an entry (looked up by this scan); 49 bytes an
        #: entry, where a dict of bytes was ~150 held through the whole scan (issue 28)
        self._recs = bytearray()
        self._hashes = array("q")
        self._pos = array("I")
        self._seen = bytearray()
        self._dropped = 0  # entries superseded by a put (their length zeroed: never copied over)
        self._src: Optional[int] = None  # fd of the cache file read
        self._tmp: Optional[str] = None  # the cache being written
        self._out = None
        self._count = 0  # entries written to it
        self._live: Optional[bool] = None  # retain asked: only the entries looked up are kept
        self._warning: Optional[str] = None
        #: stats text -> (``EventFileStats`` or None, adds up): ``cached_stats``' parses this scan
        self.parsed: Dict[bytes, tuple] = {}
        self._load()

    @property
    def path(self) -> Optional[str]:
        return os.path.join(self.state_dir, CACHE_NAME) if self.state_dir else None

    def __len__(self) -> int:
        return len(self._seen) - self._dropped + self._count

    def _find(self, rel: str) -> int:
        """The entry of the cache read whose path hashes as ``rel``'s (the last in the file), or -1."""
        h = hash(rel)
        i = bisect.bisect_right(self._hashes, h) - 1
        return self._pos[i] if i >= 0 and self._hashes[i] == h else -1

    def _load(self) -> None:
        if not self.path:
            return
        # only a file of ours in a folder of ours, as the selection and digest caches (another
        # user's cache would put made-up stats into the plan; not reading it is a slower scan)
        f = open_ours(self.path)
        if f is None:
            return
        recs, hashes = bytearray(), array("q")
        ok = False
        try:
            with f:
                if f.readline() == _HEAD:
                    offset = len(_HEAD)
                    for raw in f:
                        if raw.startswith(b"}}") and raw.strip() == b"}}":
                            ok = True  # a whole document, not one cut short
                            break
                        try:
                            head = _parse_head(raw.decode("ascii").rstrip("\n"))
                        except (UnicodeDecodeError, RecursionError):
                            head = None
                        # read back from disk: entries of another shape are dropped (rescanned)
                        if head is not None:
                            recs += _REC.pack(*head[1], offset, len(raw))
                            hashes.append(hash(head[0]))
                        offset += len(raw)
                if ok:
                    self._src = os.dup(f.fileno())
        except (OSError, ValueError):
            return  # a damaged cache is only a slower scan
        if ok:
            # sorted by hash (stable: of equal hashes the last in the file is found, as a dict kept it)
            order = sorted(range(len(hashes)), key=hashes.__getitem__)
            self._hashes = array("q", (hashes[i] for i in order))
            self._pos = array("I", order)
            self._recs = recs
            self._seen = bytearray(len(hashes))

    def get(self, rel: str, key: Key) -> Optional[dict]:
        """Cached stats for ``rel`` if its (size, mtime_ns, inode) still match."""
        raw = self.get_raw(rel, key)
        if raw is None:
            return None
        try:
            stats = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        return stats if isinstance(stats, dict) else None

    def get_raw(self, rel: str, key: Key) -> Optional[bytes]:
        """The JSON text of the stats cached for ``rel`` if its (size, mtime_ns, inode) still match
        (not parsed: ``cached_stats`` parses each distinct text once a scan). Only a line exactly
        as ``_line`` writes it for ``rel`` and ``key`` is a hit: any other (a hash collision, a
        line written otherwise) is a miss, which only costs a read of the file."""
        i = self._find(rel)
        if i < 0 or self._src is None:
            return None
        self._seen[i] = 1  # this scan found the file: its entry is kept (``retain_looked_up``)
        size, mtime_ns, ino, offset, length = _REC.unpack_from(self._recs, i * _REC.size)
        if not length or (size, mtime_ns, ino) != tuple(key):
            return None
        try:
            raw = os.pread(self._src, length, offset)
        except OSError:
            return None
        raw = raw[1:] if raw[:1] == b"," else raw
        raw = raw[:-1] if raw[-1:] == b"\n" else raw
        head = _head(rel, key)
        if not raw.startswith(head) or raw[-1:] != b"}":
            return None
        return raw[len(head):-1]

    def put(self, rel: str, key: Key, stats: dict) -> None:
        """Record fresh stats: streamed to the cache being written (dropped when not writing)."""
        i = self._find(rel)
        if i >= 0 and _REC.unpack_from(self._recs, i * _REC.size)[4]:  # superseded: never copied over
            struct.pack_into("<I", self._recs, i * _REC.size + _REC.size - 4, 0)
            self._dropped += 1
        self.dirty = True
        if not self.write or self._warning:
            return
        try:
            self._emit(_line(rel, key, stats))
        except OSError as e:
            self._warning = f"scan cache not saved in {self.state_dir}: {e.strerror or e}"
            self._drop_tmp()

    def _open_out(self) -> None:
        if self._out is None:
            # the state folder, or this logdir's folder in the user's cache: both the tool's own
            # (made 0700; a group-writable one of ours from an old umask is tightened)
            ensure_private_dir(self.state_dir, tighten_root=True)
            fd, self._tmp = tempfile.mkstemp(prefix=".scan-cache.", dir=self.state_dir)
            self._out = os.fdopen(fd, "wb")
            self._out.write(_HEAD)

    def _emit(self, line: bytes) -> None:
        self._open_out()
        self._out.write(b"\n," + line if self._count else line)
        self._count += 1

    def retain(self, live: Iterable[str]) -> None:
        """Forget files that no longer exist, so the cache does not grow forever."""
        self._seen = bytearray(len(self._seen))
        for rel in live:
            i = self._find(rel)
            if i >= 0:
                self._seen[i] = 1
        self.retain_looked_up()

    def retain_looked_up(self) -> None:
        """Forget the entries of files this scan did not look up (``get``): every event file it
        found is looked up, so those are gone (a set of every path found was ~110 bytes a run)."""
        self._live = True
        if self._seen.count(0):
            self.dirty = True

    def save(self) -> Optional[str]:
        """Write the cache atomically; returns a warning string instead of raising."""
        try:
            if self._warning or not self.dirty or not self.write:
                return self._warning
            live = self._live
            try:
                for i in range(len(self._seen)):  # the kept entries, in file order: sequential reads
                    if live is not None and not self._seen[i]:
                        continue
                    _s, _m, _i, offset, length = _REC.unpack_from(self._recs, i * _REC.size)
                    if not length:
                        continue  # superseded by a put
                    raw = os.pread(self._src, length, offset).lstrip(b",").rstrip(b"\n")
                    self._emit(raw)
                self._open_out()  # (nothing kept, nothing new: an empty cache)
                self._out.write(_TAIL)
                self._out.close()
                self._out = None
                with exclusive(os.path.join(self.state_dir, "scan-cache.lock")):
                    set_aside_stranger(self.path)  # a link planted there: kept aside, never followed
                    os.replace(self._tmp, self.path)
                    _sweep(self.state_dir)
                self._tmp = None
            except OSError as e:
                return f"scan cache not saved in {self.state_dir}: {e.strerror or e}"
            self.dirty = False
            return None
        finally:
            self.close()

    def _drop_tmp(self) -> None:
        if self._out is not None:
            with contextlib.suppress(OSError):
                self._out.close()
            self._out = None
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = None

    def close(self) -> None:
        """Let go of the files: the cache read, and a cache being written that was not saved."""
        self._drop_tmp()
        if self._src is not None:
            with contextlib.suppress(OSError):
                os.close(self._src)
            self._src = None


#: the parsed stats ``cached_stats`` remembers at most, by their JSON text (then forgotten, not
#: grown: a logdir of files unlike each other must not hold a parse of each)
PARSED_KEPT = 256


def cached_stats(cache, f):
    """The ``EventFileStats`` ``cache`` (a ``ScanCache`` or ``RemoteScanCache``) holds for the
    walk's file ``f`` if its key still matches, else None. A local cache's text of stats met
    before in this scan (a sweep's like runs: the same bytes per tag) is parsed and checked once,
    and its one ``EventFileStats`` served to each (nothing changes one once parsed)."""
    from tb_footprint_plugin.scan.filestats import EventFileStats

    if isinstance(cache, ScanCache):
        raw = cache.get_raw(f.rel, f.cache_key)
        if raw is None:
            return None
        parsed = cache.parsed.get(raw)
        if parsed is None:
            if len(cache.parsed) >= PARSED_KEPT:
                cache.parsed.clear()
            parsed = cache.parsed[raw] = _parsed(raw)
        stats, adds_up = parsed
        # (its size is in its text: the key's size, which the walk's lstat matched, is checked too)
        return stats if stats is not None and adds_up and stats.size == f.size else None
    cached = cache.get(f.rel, f.cache_key)
    if cached is not None:
        # the cache is read back from disk: an entry of another shape, or one whose sizes do
        # not add up to the file's, is read again instead of believed
        try:
            stats = EventFileStats.from_dict(cached)
            if stats.size == f.size and sum(stats.category_bytes().values()) == f.size:
                return stats
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
    return None


def _parsed(raw: bytes) -> tuple:
    """(``EventFileStats`` or None, whether its categories add up to its size) of one cached text."""
    from tb_footprint_plugin.scan.filestats import EventFileStats

    try:
        doc = json.loads(raw)
        # the cache is read back from disk: an entry of another shape, or one whose sizes do not
        # add up to the file's, is read again instead of believed
        stats = EventFileStats.from_dict(doc) if isinstance(doc, dict) else None
        return (stats, stats is not None and sum(stats.category_bytes().values()) == stats.size)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return (None, False)


def _sweep(folder: str, older_than: float = 3600.0) -> None:
    """Remove the temp caches of scans killed before their save: a live scan writes its own
    every few milliseconds, so one untouched for an hour is nobody's."""
    now = time.time()
    try:
        names = [n for n in os.listdir(folder) if n.startswith(".scan-cache.")]
    except OSError:
        return
    for n in names:
        p = os.path.join(folder, n)
        with contextlib.suppress(OSError):
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and now - st.st_mtime > older_than:
                os.unlink(p)


class RemoteScanCache:
    """The scan cache of a bucket logdir, kept in the bucket beside the journal
    (``<logdir>/.tb-footprint/scan-cache.json``) so any machine's re-scan of an unchanged logdir
    costs one listing. Keys are (size, ETag/generation). Two concurrent writers: the last one
    wins, which only costs the other a slower next scan. One JSON document read and written whole,
    through the ``Store`` interface (``read_all``, ``put``) of the logdir's store: one read, one put.
    """

    def __init__(self, store, rel: str, present: bool, size: Optional[int] = None):
        """``store``: the logdir's ``Store``; ``present``: the listing found ``rel`` (no request to
        find out), ``size`` its listed size: the cache is read whole up to that size or
        ``READ_ALL_LIMIT``, whichever is larger; one listed past ``REMOTE_CACHE_LIMIT`` is not read
        at all (the object is untrusted: the scan reads its event files instead)."""
        self._store = store
        self._rel = rel
        self._present = present
        self._size = size
        self.entries: Dict[str, dict] = {}
        self.dirty = False
        self._looked: set = set()  # the paths this scan looked up (``retain_looked_up``)
        self._load()

    @property
    def path(self) -> Optional[str]:
        return f"{self._store.location}/{self._rel}"

    def _load(self) -> None:
        if not self._present or (self._size or 0) > REMOTE_CACHE_LIMIT:
            return  # (a listed size past the limit: not one byte read)
        try:
            data = jsondoc.loads(self._store.read_all(self._rel, max(READ_ALL_LIMIT, self._size or 0)))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and data.get("version") == 2 and isinstance(data.get("files"), dict):
            self.entries = data["files"]

    def get(self, rel: str, key: Key) -> Optional[dict]:
        """Cached stats for ``rel`` if its (size, version) still match."""
        self._looked.add(rel)
        e = self.entries.get(rel)
        if isinstance(e, dict) and isinstance(e.get("key"), list) and tuple(e["key"]) == tuple(key):
            return e.get("stats")
        return None

    def put(self, rel: str, key: Key, stats: dict) -> None:
        """Record fresh stats (written by ``save``)."""
        self.entries[rel] = {"key": list(key), "stats": stats}
        self.dirty = True

    def retain(self, live) -> None:
        """Forget objects that no longer exist."""
        gone = [k for k in self.entries if k not in live]
        for k in gone:
            del self.entries[k]
        self.dirty = self.dirty or bool(gone)

    def retain_looked_up(self) -> None:
        """Forget the objects this scan did not look up (every event file it found)."""
        self.retain(self._looked)

    def save(self) -> Optional[str]:
        """Write the cache object; returns a warning string instead of raising."""
        if not self.dirty:
            return None
        try:
            self._store.put(self._rel, json.dumps({"version": 2, "files": self.entries}).encode())
        except StoreFailure as e:
            if e.code == StoreError.NOT_SUPPORTED:
                # a store listed and read only (another fsspec scheme) is never written to, its
                # cache included: its re-scan reads its event files again
                self.dirty = False
                return None
            return f"scan cache not saved in {self.path}: {e}"
        except OSError as e:
            return f"scan cache not saved in {self.path}: {e}"
        self.dirty = False
        return None

    def close(self) -> None:
        """Nothing held open."""
