"""The rewrite's selection as a plan asks for it, its outcome kept across plans.

``PlanRewrites(logdir)`` is the ``rewrite`` a plan hands to ``plan.content``: for each run it
returns ``event_rewrite.plan_rewrite``'s outcome, from ``scan.selcache`` when the run's event
files and the rules are those it was made for, else by making the selection (and storing its
outcome). The outcome is what the plan shows (bytes after, kept tags and why, fidelity
notes); the reduce that follows makes the selection itself, from the same files under the same
rules, so a cached outcome and the reduce's rewrite agree as a fresh plan's would.
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional

from tb_footprint_plugin.plan.rules import Rules
from tb_footprint_plugin.scan.selcache import SelectionCache
from tb_footprint_plugin.storage.paths import cache_dir
from tb_footprint_plugin.transforms.event_rewrite import (FileOutcome, RewriteError, RewriteOutcome,
                                                          event_file_names, plan_rewrite)
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
        tags[_str(tag)] = r
    notes = [_str(n) for n in d["notes"]]
    expectations = {_str(k): _str(v) for k, v in dict(d["expectations"]).items()}
    return RewriteOutcome(rewritten, files, notes, tags, expectations)


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

    def save(self, live: Optional[Iterable[str]] = None) -> Optional[str]:
        """Store the outcomes this plan made (forgetting runs not in ``live``); a warning or None."""
        return self.cache.save(live)


__all__ = ["PlanRewrites", "outcome_from_dict", "outcome_to_dict"]
