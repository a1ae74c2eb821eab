"""The change log: one JSON line per operation, appended and fsynced.

A single machine appends to ``history.jsonl``. A worker of a sharded batch appends to a file of
its own, ``history-shard-I-of-N@HOST.jsonl`` beside it (``configure_writer``): appends from two
NFS clients to one file can interleave or lose data, so no two machines ever append to one
file. ``read_history`` merges every one of them (the old single file included) into one log
ordered by time. Lines are untrusted input: only JSON objects with a finite number as ``time``
are kept (an entry that cannot be placed in time is no entry of this log).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import socket
import time
from typing import List, Optional

from tb_footprint_plugin.engine.trust import Untrusted, read_json_lines, undo_partial_append
from tb_footprint_plugin.storage.files import append_line
from tb_footprint_plugin.storage.regular import NotRegularFile

HISTORY_NAME = "history.jsonl"
_WORKER_FILE = re.compile(r"^history-shard-\d+-of-\d+@[A-Za-z0-9._-]{1,64}\.jsonl$")
CSV_FIELDS = ("time", "op_id", "kind", "run", "policy", "before", "after", "verified", "outcome",
              "backup_kept", "user", "host", "tool_version", "reason", "backup", "freed", "shard")
_process_writer: Optional[str] = None
_process_shard: Optional[str] = None


def worker_file_name(shard: str, host: Optional[str] = None) -> str:
    """The history file of one worker of a sharded batch: its shard label and its host."""
    i, n = (int(x) for x in shard.split("/"))
    h = re.sub(r"[^A-Za-z0-9._-]", "_", host or socket.gethostname())[:64] or "host"
    return f"history-shard-{i}-of-{n}@{h}.jsonl"


def configure_writer(shard: Optional[str]) -> Optional[str]:
    """Make this process append to the history file of worker ``shard`` ("I/N"), or to the single
    ``history.jsonl`` again with None. Returns the previous shard (``configure_writer(it)`` restores it)."""
    global _process_writer, _process_shard
    before = _process_shard
    _process_writer = worker_file_name(shard) if shard else None
    _process_shard = shard
    return before


def history_files(state: str) -> List[str]:
    """Every history file of a state directory: the single one and each worker's (sorted)."""
    try:
        names = os.listdir(state)
    except OSError:
        return []
    return sorted(os.path.join(state, n) for n in names if n == HISTORY_NAME or _WORKER_FILE.match(n))


def history_path(state: str) -> str:
    """The history file this process appends to (its worker's own in a sharded batch)."""
    return os.path.join(state, _process_writer or HISTORY_NAME)


def append_history(state: str, entry: dict) -> None:
    """Append one entry (with the current time) durably, to this worker's own file."""
    os.makedirs(state, exist_ok=True)
    shard = _process_shard
    if shard:
        entry = dict(entry, shard=shard)
    path = history_path(state)
    line = json.dumps(dict(entry, time=time.time()), sort_keys=True) + "\n"
    try:
        with undo_partial_append(path, line):  # a full disk's torn line never glues onto the next entry
            append_line(path, line)
    except NotRegularFile:
        # a symlink, FIFO or device planted in its place: renamed aside (the link itself, never
        # its target; kept for inspection, as a refused ledger is) and a fresh file started
        os.replace(path, f"{path}.refused-{int(time.time())}")
        append_line(path, line)


def _timed(e) -> bool:
    t = e.get("time") if isinstance(e, dict) else None
    return isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)


def read_history(state: str) -> List[dict]:
    """Every entry of every history file, oldest first (entries of one time keep their file's
    order); lines that are not JSON objects with a time are skipped (a damaged line costs only
    itself: ``history_damage`` names it)."""
    out = []
    for path in history_files(state):
        try:
            # a planted symlink or fifo under a history name is not followed (invariant 4)
            entries = read_json_lines(path).records
        except OSError:  # gone, or not a regular file: nothing of ours to read
            continue
        out += [e for e in entries if _timed(e)]
    out.sort(key=lambda e: e["time"])  # stable: one file's entries of one time stay in order
    return out


def history_damage(state: str) -> List[Untrusted]:
    """The damaged lines of every history file (``trust.DAMAGED_LINE``: file and line)."""
    out: List[Untrusted] = []
    for path in history_files(state):
        try:
            out += read_json_lines(path).damaged
        except OSError:
            continue
    return out


def history_csv(entries: List[dict]) -> str:
    """The entries as CSV with a header row."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for e in entries:
        w.writerow(e)
    return buf.getvalue()
