"""The plan's cache of event-file selection outcomes, beside the scan cache.

A plan runs the event rewrite's own selection on each run its content rules may change (the
bytes a rewrite leaves, the tags it keeps whole and why): one pass over the run's event files
and, for dashboard-exact tags, one load by TensorBoard's Rust data server. Its outcome depends
only on the run's event files and on the rules, so it is kept here keyed by both: every event
file's (name, size, mtime_ns, inode) and the rules' parameters (with the versions of the
tool and of TensorBoard, whose data server decides what the default dashboard shows). A
second plan of an unchanged run reads its outcome back and starts nothing.

The same file keeps, per run, what the plan measured of each PyTorch trace it gzips or slims
(``traces``: the output's exact size, by the transform's own writer into a counting sink),
keyed by the trace's (size, mtime_ns, inode), the options and the versions: a second plan of a
200 MB trace costs a lookup, not another pass.

The file lives where the scan cache does (``storage.paths.cache_dir``: the user's cache until
a reduce made the state folder), as ``selection-cache.json``, written like the scan cache:
atomically, under the scan cache's lock, in a folder of ours, never through a symlink. Read
back, it is untrusted input: entries of another shape are dropped, a damaged or foreign-version
file is only a slower plan, and a file or folder that is not ours is never read
(``storage.ours_read``, the rule of the scan cache and the digests too) nor written.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from typing import Dict, Iterable, Optional, Tuple

from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.paths import UnsafePath, safe_rel
from tb_footprint_plugin.storage.ours_read import open_ours
from tb_footprint_plugin.storage.private import ensure_private_dir, set_aside_stranger

SELCACHE_VERSION = 1
SELCACHE_NAME = "selection-cache.json"
#: the scan cache's lock: one writer at a time for both files of the folder
_LOCK_NAME = "scan-cache.lock"
#: a cache never takes a disk's last free space (a reduce's journal and backups need it): it is
#: not written where less than this, or four times its size, would be left free
MIN_FREE_BYTES = 16 * 1024 * 1024

#: what a process read last, per file, with the file's identity then: a tab that plans the
#: whole logdir again parses the file again only when another process wrote it meanwhile
_MEMO: Dict[str, tuple] = {}
_MEMO_LOCK = threading.Lock()


def _ident(path: str) -> Optional[tuple]:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _safe_run(run) -> bool:
    if not isinstance(run, str):
        return False
    if run != ".":
        try:
            safe_rel(run)
        except UnsafePath:
            return False
    return True


def _well_formed(run, entry) -> bool:
    if not _safe_run(run) or not isinstance(entry, dict):
        return False
    return isinstance(entry.get("key"), str) and isinstance(entry.get("outcome"), dict)


def _well_formed_traces(run, entries) -> bool:
    """A run's trace measures: ``{path: {key, size, same}}`` of whole numbers and flags only."""
    if not _safe_run(run) or not isinstance(entries, dict):
        return False
    for path, e in entries.items():
        if not (isinstance(path, str) and isinstance(e, dict) and isinstance(e.get("key"), str)):
            return False
        size = e.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or not isinstance(e.get("same"), bool):
            return False
    return True


def write_cache_file(folder: str, name: str, data: bytes, what: str) -> Optional[str]:
    """Replace ``folder/name`` (a cache file, the caller holding the folder's lock) with
    ``data`` atomically, never through a link planted there (set aside), and never where less
    than ``MIN_FREE_BYTES`` or four times its size would be left free: then a warning naming
    ``what`` and the folder is returned (None once written)."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < max(MIN_FREE_BYTES, 4 * len(data)):
        return f"{what} not saved in {folder}: {free} bytes free there, left to what a reduction needs"
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        set_aside_stranger(os.path.join(folder, name))  # a link planted there: kept aside, never followed
        os.replace(tmp, os.path.join(folder, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return None


class SelectionCache:
    """Selection outcomes per run (logdir-relative name): ``get(run, key)``, ``put``, ``save``.

    ``key`` is a string the caller builds from the run's file signatures and the rules; an
    entry is served only for exactly that key."""

    def __init__(self, folder: Optional[str]):
        self.folder = folder
        self.entries: Dict[str, dict] = {}
        self.new: Dict[str, dict] = {}
        #: run -> {trace path -> {key, size, same}} (read back, and added by this process)
        self.traces: Dict[str, Dict[str, dict]] = {}
        self.new_traces: Dict[str, Dict[str, dict]] = {}
        self._load()

    @property
    def path(self) -> Optional[str]:
        return os.path.join(self.folder, SELCACHE_NAME) if self.folder else None

    def _read(self) -> Tuple[Dict[str, dict], Dict[str, Dict[str, dict]]]:
        """(selection entries, trace measures) as stored, each entry checked (untrusted input)."""
        path = self.path
        f = open_ours(path)  # a file or folder not ours is never read
        if f is None:
            return {}, {}
        try:
            with f:
                st = os.fstat(f.fileno())
                ident = (st.st_size, st.st_mtime_ns, st.st_ino)
                with _MEMO_LOCK:
                    memo = _MEMO.get(path)
                if memo is not None and memo[0] == ident:
                    return memo[1], memo[2]
                data = json.load(f)
        except (OSError, ValueError, RecursionError):
            return {}, {}  # a damaged cache is only a slower plan
        entries, traces = {}, {}
        if (isinstance(data, dict) and data.get("version") == SELCACHE_VERSION
                and isinstance(data.get("runs"), dict)):
            entries = {r: e for r, e in data["runs"].items() if _well_formed(r, e)}
            if isinstance(data.get("traces"), dict):
                traces = {r: t for r, t in data["traces"].items() if _well_formed_traces(r, t)}
        with _MEMO_LOCK:
            _MEMO[path] = (ident, entries, traces)
        return entries, traces

    def _load(self) -> None:
        if self.folder:
            self.entries, self.traces = self._read()

    def get(self, run: str, key: str) -> Optional[dict]:
        """The outcome stored for ``run`` under exactly ``key``, or None."""
        e = self.new.get(run) or self.entries.get(run)
        if e is not None and e["key"] == key:
            return e["outcome"]
        return None

    def put(self, run: str, key: str, outcome: dict) -> None:
        self.new[run] = {"key": key, "outcome": outcome}

    def get_trace(self, run: str, path: str, key: str) -> Optional[dict]:
        """What was measured of trace ``path`` of ``run`` under exactly ``key``: ``{size, same}``
        (``same``: the transform would write the file's own bytes), or None."""
        for table in (self.new_traces, self.traces):
            e = table.get(run, {}).get(path)
            if e is not None:
                return {"size": e["size"], "same": e["same"]} if e["key"] == key else None
        return None

    def put_trace(self, run: str, path: str, key: str, size: int, same: bool) -> None:
        self.new_traces.setdefault(run, {})[path] = {"key": key, "size": int(size), "same": bool(same)}

    def save(self, live: Optional[Iterable[str]] = None) -> Optional[str]:
        """Write what was added (merged with what another process wrote meanwhile), forgetting
        runs not in ``live`` when given; returns a warning string instead of raising."""
        if not (self.new or self.new_traces) or not self.folder:
            return None
        try:
            ensure_private_dir(self.folder, tighten_root=True)
            with exclusive(os.path.join(self.folder, _LOCK_NAME)):
                stored, stored_traces = self._read()
                entries = dict(stored)
                entries.update(self.new)
                traces = {r: dict(t) for r, t in stored_traces.items()}
                for r, t in self.new_traces.items():
                    traces.setdefault(r, {}).update(t)
                if live is not None:
                    keep = set(live)
                    entries = {r: e for r, e in entries.items() if r in keep}
                    traces = {r: t for r, t in traces.items() if r in keep}
                data = json.dumps({"version": SELCACHE_VERSION, "runs": entries, "traces": traces})
                refused = write_cache_file(self.folder, SELCACHE_NAME, data.encode("utf-8"), "selection cache")
                if refused:
                    return refused
                with _MEMO_LOCK:
                    _MEMO[self.path] = (_ident(self.path), entries, traces)
        except OSError as e:
            return f"selection cache not saved in {self.folder}: {e.strerror or e}"
        self.entries, self.new = entries, {}
        self.traces, self.new_traces = traces, {}
        return None


__all__ = ["SelectionCache", "SELCACHE_NAME", "SELCACHE_VERSION", "write_cache_file"]
