"""Incremental scan cache: per event file stats keyed on (size, mtime_ns, inode).

It lives in the state directory (``<logdir>/.tb-footprint/`` by default), which the scan
skips and whose file names never contain ``tfevents``, so TensorBoard never reads it as a
run. Writes are atomic (temp file + rename) and serialized by an exclusive ``flock`` so two
concurrent scans never interleave; a reader that finds a corrupt or foreign-version cache
simply starts afresh.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Dict, Optional

from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.paths import UnsafePath, safe_rel
from tb_footprint_plugin.storage.private import ensure_private_dir, set_aside_stranger
from tb_footprint_plugin.storage.regular import open_regular

CACHE_VERSION = 2
CACHE_NAME = "scan-cache.json"

Key = tuple  # (size, mtime_ns, inode) on disk; (size, ETag or generation) in a bucket


def _well_formed(rel, entry) -> bool:
    if not isinstance(rel, str) or not isinstance(entry, dict) or not isinstance(entry.get("stats"), dict):
        return False
    try:
        safe_rel(rel)
    except UnsafePath:
        return False
    key = entry.get("key")
    return (isinstance(key, list) and len(key) == 3
            and all(isinstance(k, int) and not isinstance(k, bool) for k in key))


class ScanCache:
    """A mapping from relative path to (key, stats dict), loaded from and saved to disk."""

    def __init__(self, state_dir: Optional[str]):
        self.state_dir = state_dir
        self.entries: Dict[str, dict] = {}
        self.dirty = False
        self._load()

    @property
    def path(self) -> Optional[str]:
        return os.path.join(self.state_dir, CACHE_NAME) if self.state_dir else None

    def _load(self) -> None:
        if not self.path:
            return
        try:
            with open_regular(self.path) as f:  # never through a symlink, never a FIFO
                data = json.load(f)
        except (OSError, ValueError, RecursionError):
            return  # a damaged cache is only a slower scan
        if isinstance(data, dict) and data.get("version") == CACHE_VERSION and isinstance(data.get("files"), dict):
            # read back from disk: entries of another shape are dropped (rescanned), never used
            self.entries = {rel: e for rel, e in data["files"].items() if _well_formed(rel, e)}

    def get(self, rel: str, key: Key) -> Optional[dict]:
        """Cached stats for ``rel`` if its (size, mtime_ns, inode) still match."""
        e = self.entries.get(rel)
        if e is not None and tuple(e["key"]) == tuple(key):
            return e["stats"]
        return None

    def put(self, rel: str, key: Key, stats: dict) -> None:
        self.entries[rel] = {"key": list(key), "stats": stats}
        self.dirty = True

    def retain(self, live: set) -> None:
        """Forget files that no longer exist, so the cache does not grow forever."""
        gone = [k for k in self.entries if k not in live]
        for k in gone:
            del self.entries[k]
        self.dirty = self.dirty or bool(gone)

    def save(self) -> Optional[str]:
        """Write the cache atomically; returns a warning string instead of raising."""
        if not self.dirty or not self.state_dir:
            return None
        try:
            # the state folder, or this logdir's folder in the user's cache: both the tool's own
            # (made 0700; a group-writable one of ours from an old umask is tightened)
            ensure_private_dir(self.state_dir, tighten_root=True)
            with exclusive(os.path.join(self.state_dir, "scan-cache.lock")):
                fd, tmp = tempfile.mkstemp(prefix=".scan-cache.", dir=self.state_dir)
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        json.dump({"version": CACHE_VERSION, "files": self.entries}, f)
                    set_aside_stranger(self.path)  # a link planted there: kept aside, never followed
                    os.replace(tmp, self.path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
        except OSError as e:
            return f"scan cache not saved in {self.state_dir}: {e.strerror or e}"
        self.dirty = False
        return None


class RemoteScanCache(ScanCache):
    """The scan cache of a bucket logdir, kept in the bucket beside the journal
    (``<logdir>/.tb-footprint/scan-cache.json``) so any machine's re-scan of an unchanged logdir
    costs one listing. Keys are (size, ETag/generation). Two concurrent writers: the last one
    wins, which only costs the other a slower next scan.
    """

    def __init__(self, rfs, rel: str, present: bool):
        self._rfs = rfs
        self._rel = rel
        self._present = present  # known from the listing: no request to find out
        super().__init__(None)

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
        if isinstance(data, dict) and data.get("version") == CACHE_VERSION and isinstance(data.get("files"), dict):
            self.entries = data["files"]

    def save(self) -> Optional[str]:
        if not self.dirty:
            return None
        try:
            self._rfs.write_bytes(self._rel, json.dumps({"version": CACHE_VERSION, "files": self.entries}).encode())
        except OSError as e:
            return f"scan cache not saved in {self.path}: {e}"
        self.dirty = False
        return None
