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


def _well_formed(data, logdir: str) -> bool:
    """The ledger is read back from disk: only one of this version, for this logdir, whose run
    entries are objects with a known state, is used (a run name in it is only ever looked up
    in the plan, never joined onto a path). Anything else starts a fresh ledger."""
    if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION or not isinstance(data.get("runs"), dict):
        return False
    if logdir and isinstance(data.get("logdir"), str) and os.path.realpath(data["logdir"]) != os.path.realpath(logdir):
        return False
    return all(isinstance(k, str) and isinstance(v, dict) and v.get("state", "pending") in RETRY_STATES | TERMINAL_STATES
               for k, v in data["runs"].items())


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
            if _well_formed(data, self.logdir):
                return data
        except (OSError, ValueError, RecursionError):
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

    def should_run(self, entry: Optional[dict]) -> bool:
        """Resume rule: pending, interrupted and failed runs are retried; done and skipped are not,
        except runs skipped for a passing reason (active or locked: ``codes.PASSING_SKIPS``)."""
        if not entry:
            return True
        if entry.get("state") in RETRY_STATES:
            return True
        return entry.get("state") == "skipped" and _skip_code(entry) in PASSING_SKIPS

    def summary(self) -> dict:
        data = self.read()
        counts: Dict[str, int] = {}
        for e in data["runs"].values():
            counts[e.get("state", "?")] = counts.get(e.get("state", "?"), 0) + 1
        return {"path": self.path, "policy": data.get("policy"), "counts": counts, "runs": data["runs"]}


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

