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
import threading
import time
from typing import Dict, List, Optional, Tuple

from tb_footprint_plugin.engine.trust import MAX_STATE_BYTES, Untrusted, read_json_lines, undo_partial_append
from tb_footprint_plugin.engine.vault_reads import refuse_unreadable, unreadable_file
from tb_footprint_plugin.storage.files import append_line
from tb_footprint_plugin.storage.regular import NotRegularFile, open_regular

HISTORY_NAME = "history.jsonl"
_WORKER_FILE = re.compile(r"^history-shard-\d+-of-\d+@[A-Za-z0-9._-]{1,64}\.jsonl$")
CSV_FIELDS = ("time", "op_id", "kind", "run", "policy", "before", "after", "verified", "outcome", "code",
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
    # compact separators: a reduce's entry is ~265 bytes instead of ~297, a tenth of what its run
    # leaves in the state folder beside its backups (issue #28 item 2); readers parse JSON, so
    # lines of older versions (", " and ": ") read the same
    line = json.dumps(dict(entry, time=time.time()), sort_keys=True, separators=(",", ":")) + "\n"
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
    itself: ``history_damage`` names it). A state folder or history file this user may not read
    raises ``vault_reads.StateUnreadable`` naming it: never an empty log (review R16 F16)."""
    out = []
    refuse_unreadable(state)
    for path in history_files(state):
        try:
            # a planted symlink or fifo under a history name is not followed (invariant 4)
            entries = read_json_lines(path).records
        except PermissionError as e:
            raise unreadable_file(path, "change log", e) from None
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


#: per history file this process follows: (dev, inode), bytes read, and the entries read so far
#: that say a run changed (``changes_since``); only what was appended since is read again
_FOLLOWED: Dict[str, Tuple[Tuple[int, int], int, List[dict]]] = {}
_FOLLOW_LOCK = threading.Lock()
#: the fields ``changes_since`` keeps of an entry (a few hundred bytes a run at most)
_KEPT = ("time", "run", "op_id", "kind", "outcome", "user", "host")


def changes_since(state: str, run: str, since: float, outcomes) -> List[dict]:
    """The entries of ``run`` newer than ``since`` whose outcome is one of ``outcomes``, oldest
    first. Each history file is read once per process and then only from where it was left
    (a batch asked this for every run: reading every file whole each time was quadratic); a
    file replaced, truncated or set aside since is read again from its start. Lines are
    untrusted: only JSON objects with a finite ``time`` count, as in ``read_history``."""
    out: List[dict] = []
    with _FOLLOW_LOCK:
        for path in history_files(state):
            try:
                entries = _follow(path)
            except OSError:  # gone, or not a regular file: nothing of ours to read
                _FOLLOWED.pop(path, None)
                continue
            out += [e for e in entries if e.get("run") == run and e["time"] > since and e.get("outcome") in outcomes]
    out.sort(key=lambda e: e["time"])
    return out


def _follow(path: str) -> List[dict]:
    """The kept entries of ``path``, reading only the complete lines appended since last time."""
    with open_regular(path) as f:
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino)
        known = _FOLLOWED.get(path)
        if known is None or known[0] != ident or st.st_size < known[1]:
            known = (ident, 0, [])
        _ident, offset, entries = known
        if st.st_size > offset:
            f.seek(offset)
            raw = f.read(min(st.st_size - offset, MAX_STATE_BYTES))
            end = raw.rfind(b"\n") + 1  # a torn last line is read again once it is whole
            for chunk in raw[:end].split(b"\n"):
                if not chunk.strip():
                    continue
                try:
                    e = json.loads(chunk.decode("utf-8"))
                except (ValueError, RecursionError):
                    continue  # a damaged line costs only itself (``history_damage`` names it)
                if _timed(e) and isinstance(e.get("run"), str):
                    entries.append({k: e.get(k) for k in _KEPT})
            offset += end
        _FOLLOWED[path] = (ident, offset, entries)
        return entries
