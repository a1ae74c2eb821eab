"""The rewrite's selection as a plan asks for it, its outcome kept across plans.

``PlanRewrites(logdir)`` is the ``rewrite`` a plan hands to ``plan.content``: for each run it
returns ``event_rewrite.plan_rewrite``'s outcome, from ``scan.selcache`` when the run's event
files and the rules are those it was made for, else by making the selection (and storing its
outcome). The outcome is what the plan shows (bytes after, kept tags and why, fidelity
notes); the reduce that follows makes the selection itself, from the same files under the same
rules, so a cached outcome and the reduce's rewrite agree as a fresh plan's would.

``PlanRewrites.trace_after`` does the same for PyTorch traces: the bytes a ``compress`` (gzip)
or a ``trace_slim`` action leaves are those of the transform's own writer run into a counting
sink (``gzip_trace.gzip_size``, ``trace_slim.slim_size``: nothing written, memory bounded),
stored per trace under its (size, mtime_ns, inode), the options and the versions (zlib's
included: it makes the bytes).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import zlib
from typing import Iterable, Optional, Tuple

from tb_footprint_plugin.codes import TagKeep
from tb_footprint_plugin.plan.rules import Rules, TraceOptions
from tb_footprint_plugin.scan.selcache import SelectionCache
from tb_footprint_plugin.storage.paths import cache_dir
from tb_footprint_plugin.storage.store import Store
from tb_footprint_plugin.transforms.event_rewrite import (FileOutcome, RewriteError, RewriteOutcome,
                                                          event_file_names, plan_rewrite)
from tb_footprint_plugin.transforms.gzip_trace import LEVEL, gzip_size
from tb_footprint_plugin.transforms.trace_slim import TraceFormatError, slim_size
from tb_footprint_plugin.verify.original import release_parked
from tb_footprint_plugin.version import __version__


def _versions() -> list:
    """What besides the files and rules decides a selection: this tool's rules and the Rust
    data server's sampling, which comes with TensorBoard's version."""
    try:
        from tensorboard.version import VERSION as tb
    except ImportError:  # pragma: no cover - TensorBoard is a requirement
        tb = None
    return [__version__, tb]


def _signature(run_dir: str) -> list:
    out = []
    for n in event_file_names(run_dir):
        st = os.stat(os.path.join(run_dir, n))
        out.append([n, st.st_size, st.st_mtime_ns, st.st_ino])
    return out


def outcome_to_dict(o: RewriteOutcome) -> dict:
    """A JSON-ready form of a selection outcome (``outcome_from_dict`` reads it back)."""
    return {"rewritten": list(o.rewritten), "notes": list(o.notes), "tags": o.tags,
            "expectations": dict(o.expectations),
            "files": {n: {"size_before": f.size_before, "size_after": f.size_after,
                          "records_before": f.records_before, "records_after": f.records_after,
                          "substituted": f.substituted, "removed": f.removed, "resized": f.resized}
                      for n, f in o.files.items()}}


def _int(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not a whole number: {v!r}")
    return v


def _str(v) -> str:
    if not isinstance(v, str):
        raise ValueError(f"not a string: {v!r}")
    return v


def outcome_from_dict(d: dict) -> RewriteOutcome:
    """The outcome stored by ``outcome_to_dict``; ``ValueError`` for anything of another shape
    (the cache file is read back from disk: untrusted)."""
    if not isinstance(d, dict):
        raise ValueError("not an outcome")
    rewritten = [_str(n) for n in d["rewritten"]]
    files = {}
    for name, f in dict(d["files"]).items():
        removed = {_str(k): [_int(v[0]), _int(v[1])] for k, v in dict(f["removed"]).items()}
        resized = {_str(k): _int(v) for k, v in dict(f["resized"]).items()}
        files[_str(name)] = FileOutcome(name, _int(f["size_before"]), _int(f["size_after"]),
                                        _int(f["records_before"]), _int(f["records_after"]),
                                        _int(f["substituted"]), removed, resized)
    if set(rewritten) - set(files):
        raise ValueError("a rewritten file without its outcome")
    tags = {}
    for tag, r in dict(d["tags"]).items():
        r = dict(r)
        _str(r["plugin"]), _int(r["records"]), _int(r["kept"]), _str(r.get("why", ""))
        r["how"] = TagKeep(r["how"])  # a cached entry written without it: a miss, computed again
        tags[_str(tag)] = r
    notes = [_str(n) for n in d["notes"]]
    expectations = {_str(k): _str(v) for k, v in dict(d["expectations"]).items()}
    return RewriteOutcome(rewritten, files, notes, tags, expectations)


def measure_trace(src: str, trace: Optional[dict], opener=None) -> Tuple[int, bool]:
    """``(bytes the reduce's transform writes, whether they are the source's own bytes)`` for a
    gzip (``trace`` None) or a slim with options ``trace``, by the transform's own writer into a
    counting sink; ``opener`` reads the source from elsewhere than ``src`` (a bucket object)."""
    if trace is None:
        size, _sha = gzip_size(src, opener=opener)
        return size, False  # a .gz beside the plain file: a new file, never the same one
    out = slim_size(src, TraceOptions.from_dict(trace), opener=opener)
    return out["size"], out["sha256"] == out["source_sha256"]


class PlanRewrites:
    """``rewrite(run, rules, names)`` for ``plan.make_plan`` over one local logdir, with its
    outcomes cached (``scan.selcache``); ``save()`` once the plan is made."""

    def __init__(self, logdir: str, cache: Optional[SelectionCache] = None):
        self.logdir = logdir
        self.cache = cache if cache is not None else SelectionCache(cache_dir(logdir))
        self.made = 0  # selections made by this plan (the others came from the cache)
        self.served = 0
        self._versions = _versions()

    def _key(self, rules: Rules, names, signature) -> str:
        return json.dumps([self._versions, sorted(rules.to_params().items()), sorted(names), signature],
                          sort_keys=True)

    def __call__(self, run, rules: Rules, names) -> Optional[RewriteOutcome]:
        run_dir = self.logdir if run.name == "." else os.path.join(self.logdir, run.name)
        try:
            signature = _signature(run_dir)
        except OSError:
            return None
        key = self._key(rules, names, signature)
        hit = self.cache.get(run.name, key)
        if hit is not None:
            try:
                out = outcome_from_dict(hit)
            except (KeyError, TypeError, ValueError, IndexError):
                out = None  # another shape: made again (and stored again)
            if out is not None:
                self.served += 1
                return out
        try:
            out = plan_rewrite(run_dir, rules, names)
            unchanged = _signature(run_dir) == signature
        except (RewriteError, OSError):
            return None
        self.made += 1
        if unchanged:  # a file written meanwhile: this outcome is not stored under the old key
            self.cache.put(run.name, key, outcome_to_dict(out))
        return out

    def _trace_key(self, trace: Optional[dict], identity: list) -> str:
        return json.dumps([self._versions, zlib.ZLIB_RUNTIME_VERSION, list(sys.version_info[:2]), LEVEL,
                           trace, identity], sort_keys=True)

    def trace_after(self, run, path: str, trace: Optional[dict] = None) -> Optional[dict]:
        """What the reduce's transform leaves of the trace ``path`` (logdir-relative) of ``run``:
        ``{"size": bytes, "same": the output is the file's own bytes}``; ``trace`` is the slim's
        options (``TraceOptions`` as a dict), None for a plain gzip. ``{"error": why}`` for a
        trace the slim cannot read (the reduce would refuse it too); None when it could not be
        measured now (unreadable, or written meanwhile): the plan then estimates."""
        full = os.path.join(self.logdir, path)
        try:
            st = os.lstat(full)
        except OSError:
            return None
        key = self._trace_key(trace, [st.st_size, st.st_mtime_ns, st.st_ino])
        hit = self.cache.get_trace(run.name, path, key)
        if hit is not None:
            self.served += 1
            return hit
        try:
            size, same = measure_trace(full, trace)
            now = os.lstat(full)
        except (TraceFormatError, ValueError, EOFError, zlib.error, gzip.BadGzipFile) as e:
            # not a trace the transform can read (a truncated or damaged .gz too): refused alike
            return {"error": str(e) or type(e).__name__}
        except OSError:
            return None
        self.made += 1
        if (now.st_size, now.st_mtime_ns, now.st_ino) != (st.st_size, st.st_mtime_ns, st.st_ino):
            return None  # written while it was measured: this size is of no file that exists
        self.cache.put_trace(run.name, path, key, size, same)
        return {"size": size, "same": same}

    def save(self, live: Optional[Iterable[str]] = None) -> Optional[str]:
        """Store the outcomes this plan made (forgetting runs not in ``live``); a warning or None."""
        return self.cache.save(live)


class BucketTraces(PlanRewrites):
    """``trace_after`` for a bucket logdir's plan: each trace is measured as on disk, its bytes
    streamed by ranged reads (memory one read window), and cached under the object's size and
    modification time in the user's cache folder for that URL (``save``); ``stats`` counts the
    requests the measures issued (the plan adds them to what its scan cost). Every read goes
    through the ``Store`` interface: ``store`` (any ``Store`` over the logdir's objects), else the
    URL's own ``ObjectStore`` (its own request counters, apart from the scan's)."""

    def __init__(self, url: str, cache: Optional[SelectionCache] = None, store: Optional[Store] = None):
        from tb_footprint_plugin.storage.store_object import ObjectStore

        folder = None
        if cache is None:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            folder = os.path.join(os.path.abspath(base), "tb-footprint",
                                  "bucket-" + hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:24])
        super().__init__(url, cache if cache is not None else SelectionCache(folder))
        self.store = store if store is not None else ObjectStore(url)
        self.stats = self.store.stats

    def __call__(self, run, rules: Rules, names) -> Optional[RewriteOutcome]:
        """The rewrite's own selection over the run's event files, streamed from the store into a
        private scratch folder as the bucket reduce stages them (every event file of the run: a
        file kept whole is part of what the others' selection keeps), so a bucket plan's bytes
        after are the reduce's, not an estimate. Cached under each object's size and time; None
        when the store did not answer or an object changed while it was read (then estimated)."""
        from tb_footprint_plugin.storage import scratch

        files = {os.path.basename(f.path): f for f in run.files if f.kind == "event"}
        if not names or any(n not in files for n in names):
            return None
        key = self._key(rules, names, [[n, f.size, f.mtime] for n, f in sorted(files.items())])
        hit = self.cache.get(run.name, key)
        if hit is not None:
            try:
                out = outcome_from_dict(hit)
            except (KeyError, TypeError, ValueError, IndexError):
                out = None
            if out is not None:
                self.served += 1
                return out
        try:
            with scratch.scratch("plan", scratch.system_root()) as work:
                run_dir = os.path.join(work, "run")
                os.makedirs(run_dir, mode=0o700)
                for n, f in sorted(files.items()):
                    self._fetch(f.path, f.size, os.path.join(run_dir, n))
                prev = scratch.current_root()
                scratch.use_root(os.path.join(work, "readers"))  # the readers' scratch: inside ours
                try:
                    out = plan_rewrite(run_dir, rules, names)
                finally:
                    scratch.use_root(prev)
                    # no reduce takes a Rust load of this copy (``verify.original.park``): its
                    # data server stops before the copy and its scratch are deleted
                    release_parked(run_dir)
        except (RewriteError, OSError):
            return None
        self.made += 1
        self.cache.put(run.name, key, outcome_to_dict(out))
        return out

    def _fetch(self, path: str, size: int, dest: str) -> None:
        """Stream the object ``path`` to ``dest`` in ranged reads (memory one read window); an
        object that is not ``size`` bytes now changed since the listing (``OSError``)."""
        reader = self.store.open_read(path, size)
        with open(dest, "wb") as fo:
            while True:
                b = reader.read(1 << 20)
                if not b:
                    break
                fo.write(b)
        if os.path.getsize(dest) != size:
            raise OSError(f"{path}: changed while it was read")

    def trace_after(self, run, path: str, trace: Optional[dict] = None) -> Optional[dict]:
        """As ``PlanRewrites.trace_after``, for the object ``path`` (logdir-relative) as the
        plan's listing found it."""
        f = next((f for f in run.files if f.path == path), None)
        if f is None:
            return None
        key = self._trace_key(trace, [f.size, f.mtime])
        hit = self.cache.get_trace(run.name, path, key)
        if hit is not None:
            self.served += 1
            return hit
        try:
            size, same = measure_trace(path, trace, opener=lambda: self.store.open_read(path, f.size))
        except (TraceFormatError, ValueError, EOFError, zlib.error, gzip.BadGzipFile) as e:
            return {"error": str(e) or type(e).__name__}
        except OSError:
            return None  # the store did not answer: the plan estimates, and says so
        self.made += 1
        self.cache.put_trace(run.name, path, key, size, same)
        return {"size": size, "same": same}


__all__ = ["BucketTraces", "PlanRewrites", "measure_trace", "outcome_from_dict", "outcome_to_dict"]
