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

import contextlib
import json
import os
import stat
import struct
import tempfile
import time
from typing import Dict, Iterable, Optional

from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.paths import UnsafePath, safe_rel
from tb_footprint_plugin.storage.private import ensure_private_dir, set_aside_stranger
from tb_footprint_plugin.storage.regular import open_regular

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


def _line(rel: str, key: Key, stats: dict) -> bytes:
    # ASCII only (json escapes the rest, a name's lone surrogates too), never a newline inside
    return (json.dumps(rel) + ': {"key": ' + json.dumps([int(k) for k in key]) + ', "stats": '
            + json.dumps(stats, separators=(",", ":")) + "}").encode("ascii")


class ScanCache:
    """Relative path -> (key, stats dict), read from and written to disk a line at a time.

    ``write=False``: nothing is ever written (a dry run's scan)."""

    def __init__(self, state_dir: Optional[str], write: bool = True):
        self.state_dir = state_dir
        self.write = write and state_dir is not None
        self.dirty = False
        #: hash(rel) -> _REC of the cache file read: no copy of the path (~120 bytes an entry); a hit's
        #: own line names its path, so a collision is only a miss
        self._index: Dict[int, bytes] = {}
        self._src: Optional[int] = None  # fd of the cache file read
        self._tmp: Optional[str] = None  # the cache being written
        self._out = None
        self._count = 0  # entries written to it
        self._live: Optional[set] = None
        self._warning: Optional[str] = None
        self._load()

    @property
    def path(self) -> Optional[str]:
        return os.path.join(self.state_dir, CACHE_NAME) if self.state_dir else None

    def __len__(self) -> int:
        return len(self._index) + self._count

    def _load(self) -> None:
        if not self.path:
            return
        try:
            f = open_regular(self.path)  # never through a symlink, never a FIFO
        except OSError:
            return
        index: Dict[str, bytes] = {}
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
                            index[hash(head[0])] = _REC.pack(*head[1], offset, len(raw))
                        offset += len(raw)
                if ok:
                    self._src = os.dup(f.fileno())
        except (OSError, ValueError):
            return  # a damaged cache is only a slower scan
        if ok:
            self._index = index

    def get(self, rel: str, key: Key) -> Optional[dict]:
        """Cached stats for ``rel`` if its (size, mtime_ns, inode) still match."""
        rec = self._index.get(hash(rel))
        if rec is None or self._src is None:
            return None
        size, mtime_ns, ino, offset, length = _REC.unpack(rec)
        if (size, mtime_ns, ino) != tuple(key):
            return None
        try:
            raw = os.pread(self._src, length, offset)
            entry = json.loads(b"{" + raw.lstrip(b",").rstrip(b"\n") + b"}").get(rel)
        except (OSError, ValueError, RecursionError):
            return None
        stats = entry.get("stats") if isinstance(entry, dict) else None
        return stats if isinstance(stats, dict) else None

    def put(self, rel: str, key: Key, stats: dict) -> None:
        """Record fresh stats: streamed to the cache being written (dropped when not writing)."""
        self._index.pop(hash(rel), None)  # superseded: never copied over
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
        live = {hash(rel) for rel in live}
        self._live = live
        if any(k not in live for k in self._index):
            self.dirty = True

    def save(self) -> Optional[str]:
        """Write the cache atomically; returns a warning string instead of raising."""
        try:
            if self._warning or not self.dirty or not self.write:
                return self._warning
            live = self._live
            try:
                for h, rec in self._index.items():  # the kept entries, in file order: sequential reads
                    if live is not None and h not in live:
                        continue
                    _s, _m, _i, offset, length = _REC.unpack(rec)
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
    wins, which only costs the other a slower next scan. One JSON document read and written whole.
    """

    def __init__(self, rfs, rel: str, present: bool):
        self._rfs = rfs
        self._rel = rel
        self._present = present  # known from the listing: no request to find out
        self.entries: Dict[str, dict] = {}
        self.dirty = False
        self._load()

    @property
    def path(self) -> Optional[str]:
        return self._rfs.url_of(self._rel)

    def _load(self) -> None:
        if not self._present:
            return
        try:
            data = json.loads(self._rfs.read_bytes(self._rel).decode("utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and data.get("version") == 2 and isinstance(data.get("files"), dict):
            self.entries = data["files"]

    def get(self, rel: str, key: Key) -> Optional[dict]:
        """Cached stats for ``rel`` if its (size, version) still match."""
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

    def save(self) -> Optional[str]:
        """Write the cache object; returns a warning string instead of raising."""
        if not self.dirty:
            return None
        try:
            self._rfs.write_bytes(self._rel, json.dumps({"version": 2, "files": self.entries}).encode())
        except OSError as e:
            return f"scan cache not saved in {self.path}: {e}"
        self.dirty = False
        return None

    def close(self) -> None:
        """Nothing held open."""
