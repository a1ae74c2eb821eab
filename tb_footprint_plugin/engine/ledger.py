"""The batch ledger: a JSON file rewritten atomically after every state transition, so a
batch interrupted at any point resumes where it stopped.

Per run: ``pending → reducing → verifying → done | failed | skipped`` with sizes, ratio,
verified flag, the error, the operation id and who did it (host, pid, shard). Several processes
may share one ledger: every update re-reads the file under an exclusive ``flock``. A sharded
batch keeps one ledger per shard beside the others (``ledger-shard-I-of-N.json``), so no lock
is shared between machines; ``merged`` reads them all back as one batch.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import threading
import time
from typing import Dict, Iterable, List, Optional, Tuple

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

    def __init__(self, path: str, policy: str, logdir: str, shard: Optional[str] = None):
        self.path = os.path.abspath(path)
        self.policy = policy
        self.logdir = logdir
        self._lock = threading.Lock()
        #: written into every transition: which worker did it
        self.who = {"host": socket.gethostname(), "pid": os.getpid(), "shard": shard}

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
            entry.update(fields, state=state, updated_at=time.time(), **self.who)
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



LEDGER_NAME = "ledger.json"
STATES = ("pending", "reducing", "verifying", "done", "failed", "skipped")
_SHARD_LEDGER = re.compile(r"^ledger-shard-(\d+)-of-(\d+)\.json$")


def ledger_path(state: str, shard: Optional[Tuple[int, int]] = None) -> str:
    """The default ledger of a batch, or of one shard of it."""
    name = LEDGER_NAME if shard is None else f"ledger-shard-{shard[0]}-of-{shard[1]}.json"
    return os.path.join(state, name)


def ledger_paths(state: str) -> List[str]:
    """Every default ledger in the state folder: the batch's and each shard's (sorted)."""
    try:
        names = os.listdir(state)
    except OSError:
        return []
    return sorted(os.path.join(state, n) for n in names if n == LEDGER_NAME or _SHARD_LEDGER.match(n))


def _valid_entry(run, e) -> bool:
    """A ledger entry read back from disk is untrusted: the fields the merge uses must have their types."""
    if not isinstance(run, str) or not isinstance(e, dict) or e.get("state") not in STATES:
        return False
    num = (int, float)
    return (isinstance(e.get("updated_at", 0), num) and not isinstance(e.get("updated_at", 0), bool)
            and math.isfinite(e.get("updated_at", 0))
            and all(e.get(k) is None or (isinstance(e[k], int) and not isinstance(e[k], bool))
                    for k in ("original_size_bytes", "after_size_bytes", "pid"))
            and all(e.get(k) is None or isinstance(e[k], str) for k in ("host", "shard", "op_id", "code", "error")))


def _pid_gone(e: dict) -> bool:
    """An in-flight entry written on this host by a process that no longer exists (a killed worker)."""
    if e.get("host") != socket.gethostname() or not isinstance(e.get("pid"), int) or e["pid"] <= 0:
        return False
    try:
        os.kill(e["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _rank(e: dict) -> Tuple[int, float]:
    """Which of several ledgers' entries for one run tells its state: a settled or live transition
    (newest first), then an in-flight one of a dead worker, then a skip, then pending."""
    st = e["state"]
    if st in ("done", "failed") or (st in ("reducing", "verifying") and not e.get("stalled")):
        cls = 3
    elif st in ("reducing", "verifying"):
        cls = 2
    elif st == "skipped":
        cls = 1
    else:
        cls = 0
    return cls, float(e.get("updated_at", 0))


def merged(paths: Iterable[str]) -> dict:
    """One view of a batch kept in several ledgers (one per shard): per run the entry that tells its
    state, with who did it; counts and bytes per state; ledgers that could not be read are named in
    ``problems`` (a damaged ledger is reported, never silently dropped)."""
    runs: Dict[str, dict] = {}
    ledgers, problems = [], []
    for p in paths:
        try:
            with open(p, "r", encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            problems.append({"path": p, "detail": f"{p}: unreadable ledger ({e})"})
            continue
        if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION or not isinstance(data.get("runs"), dict):
            problems.append({"path": p, "detail": f"{p}: not a ledger of version {LEDGER_VERSION}"})
            continue
        ledgers.append({"path": p, "policy": data.get("policy") if isinstance(data.get("policy"), str) else None})
        bad = 0
        for run, e in data["runs"].items():
            if not _valid_entry(run, e):
                bad += 1
                continue
            e = dict(e, ledger=p)
            if e["state"] in ("reducing", "verifying") and _pid_gone(e):
                e["stalled"] = True  # its worker died: a rerun of any shard takes the run over
            if run not in runs or _rank(e) > _rank(runs[run]):
                runs[run] = e
        if bad:
            problems.append({"path": p, "detail": f"{p}: {bad} malformed entr{'y' if bad == 1 else 'ies'} ignored"})
    counts: Dict[str, int] = {}
    nbytes: Dict[str, int] = {}
    for e in runs.values():
        counts[e["state"]] = counts.get(e["state"], 0) + 1
        nbytes[e["state"]] = nbytes.get(e["state"], 0) + (e.get("original_size_bytes") or 0)
    saved = sum((e.get("original_size_bytes") or 0) - (e.get("after_size_bytes") or 0)
                for e in runs.values() if e["state"] == "done" and e.get("after_size_bytes") is not None)
    return {"ledgers": ledgers, "runs": dict(sorted(runs.items())), "counts": counts, "bytes": nbytes,
            "saved_bytes": saved, "stalled": sorted(r for r, e in runs.items() if e.get("stalled")),
            "problems": problems}
