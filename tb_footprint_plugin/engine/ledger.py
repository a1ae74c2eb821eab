"""The batch ledger: a JSON file rewritten atomically after every state transition, so a
batch interrupted at any point resumes where it stopped.

Per run: ``pending → reducing → verifying → done | failed | skipped`` with sizes, ratio,
verified flag, the error and the operation id. Several processes may share one ledger (array
jobs over one logdir): every update re-reads the file under an exclusive ``flock``.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Dict, Iterable, Optional

from tb_footprint_plugin.codes import PASSING_SKIPS, Skip
from tb_footprint_plugin.storage.files import atomic_write_json
from tb_footprint_plugin.storage.lock import exclusive

LEDGER_VERSION = 1
RETRY_STATES = {"pending", "reducing", "verifying", "failed"}
TERMINAL_STATES = {"done", "failed", "skipped"}


class Ledger:
    """One batch's ledger file."""

    def __init__(self, path: str, policy: str, logdir: str):
        self.path = os.path.abspath(path)
        self.policy = policy
        self.logdir = logdir
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _locked(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with self._lock, exclusive(self.path + ".lock"):
            yield

    def read(self) -> dict:
        try:
            with open(self.path, "r", encoding="utf-8") as f:
                data = json.load(f)
            if data.get("version") == LEDGER_VERSION:
                return data
        except (OSError, ValueError):
            pass
        return {"version": LEDGER_VERSION, "logdir": self.logdir, "policy": self.policy,
                "created_at": time.time(), "runs": {}}

    def start(self, runs: Iterable[str]) -> Dict[str, dict]:
        """Register runs as pending (keeping what an earlier batch recorded); returns all entries.

        A ledger written for another policy is archived and a fresh one started: its states
        say nothing about this policy.
        """
        with self._locked():
            data = self.read()
            if data.get("policy") != self.policy and data["runs"]:
                os.replace(self.path, f"{self.path}.{int(time.time())}.old")
                data = self.read()
            for r in runs:
                data["runs"].setdefault(r, {"state": "pending", "updated_at": time.time()})
            atomic_write_json(self.path, data)
            return dict(data["runs"])

    def mark(self, run: str, state: str, **fields) -> None:
        """Record a transition of ``run`` durably."""
        with self._locked():
            data = self.read()
            entry = data["runs"].setdefault(run, {})
            entry.update(fields, state=state, updated_at=time.time())
            atomic_write_json(self.path, data)

    def should_run(self, entry: Optional[dict], current_bytes: Optional[int] = None) -> bool:
        """Resume rule: pending, interrupted and failed runs are retried; done and skipped are not,
        except runs skipped for a passing reason (active or locked: ``codes.PASSING_SKIPS``) and
        stale entries (``is_stale``)."""
        if not entry:
            return True
        if entry.get("state") in RETRY_STATES:
            return True
        if is_stale(entry, current_bytes):
            return True
        return entry.get("state") == "skipped" and _skip_code(entry) in PASSING_SKIPS

    def summary(self) -> dict:
        data = self.read()
        counts: Dict[str, int] = {}
        for e in data["runs"].values():
            counts[e.get("state", "?")] = counts.get(e.get("state", "?"), 0) + 1
        return {"path": self.path, "policy": data.get("policy"), "counts": counts, "runs": data["runs"]}


def is_stale(entry: dict, current_bytes: Optional[int]) -> bool:
    """A settled entry says what the run was right after the batch handled it; once the run changed
    since (restored, new files written, files removed) its size differs and the entry no longer holds."""
    if current_bytes is None or entry.get("state") not in ("done", "skipped"):
        return False
    after = entry.get("after_size_bytes")
    return isinstance(after, int) and after != current_bytes


def _skip_code(entry: dict) -> Optional[str]:
    """The skip code of a ledger entry. Entries written before codes existed carry only the
    prose of the reason; the two passing reasons of that format are mapped once, here."""
    if "code" in entry:
        return entry["code"]
    err = entry.get("error") or ""
    if "active" in err:
        return Skip.ACTIVE
    if "another process" in err:
        return Skip.LOCKED
    return None

