"""The change log's file names, what an entry of it is, and which operations a disk state
folder's logs name: the part of the change log both ``trust`` and ``history`` read.

``history`` (the change log's reader and writer, for every store) imports ``trust``; ``trust``
takes a deleted or damaged identity.json's id back from a vault other than the state folder only
for manifests whose operation this state folder's own change log (or a journal of it) names
(review R10 F6 and F9: a new logdir made where a renamed one stood has logged none of that one's
operations). So the names of the logs and what an entry is live here, once, below both; this
module imports neither. What an entry says beyond its operation (merging by time, a seal cut
short, damage named) is ``history.ChangeLog``'s.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import FrozenSet, Iterable

from tb_footprint_plugin.storage.paths import is_op_id
from tb_footprint_plugin.storage.regular import open_regular

HISTORY_NAME = "history.jsonl"
#: the log of one worker of a sharded batch (``history.worker_file_name``)
WORKER_FILE = re.compile(r"^history-shard-\d+-of-\d+@[A-Za-z0-9._-]{1,64}\.jsonl$")
#: a log set aside full (``ChangeLog.seal``): the name of the log it was, its mtime (ms) and a tag of its version
SEALED = re.compile(r"^(history(?:-shard-\d+-of-\d+@[A-Za-z0-9._-]{1,64})?)\.sealed-\d{1,16}-([0-9a-f]{12})\.jsonl$")
#: the bytes of a log ``named_operations`` reads at once
_BLOCK = 256 << 10


def is_log_name(name: str) -> bool:
    """Whether a file of a disk state folder named ``name`` is one of its change logs: the single
    one, a worker's, or one sealed aside."""
    return name == HISTORY_NAME or WORKER_FILE.match(name) is not None or SEALED.match(name) is not None


def is_entry(record) -> bool:
    """Whether a parsed line (untrusted) is an entry of the log: an object with a finite number
    as its ``time`` (an entry that cannot be placed in time is no entry of this log)."""
    t = record.get("time") if isinstance(record, dict) else None
    return isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)


def log_names(state: str) -> list:
    """The names of the change logs in the disk state folder ``state`` (sorted; none when it
    cannot be listed): what is read before any vault is, a new state folder having none."""
    try:
        return sorted(n for n in os.listdir(state) if is_log_name(n))
    except OSError:
        return []


def named_operations(state: str, among: Iterable[str], limit: int) -> FrozenSet[str]:
    """Those of the op ids ``among`` that an entry of a change log of the disk state folder
    ``state`` names (its ``op_id``). Each log is read a block at a time, at most the whole lines
    of its first ``limit`` bytes (what ``ChangeLog`` reads of an oversize log), and only ids of
    ``among`` are kept; a torn last line, a damaged line and a log that cannot be read (absent, a
    planted link, FIFO or folder: never followed nor opened) name none."""
    wanted = {op for op in among if is_op_id(op)}
    found: set = set()
    if not wanted:
        return frozenset()
    for name in log_names(state):
        try:
            f = open_regular(os.path.join(state, name), buffering=0)
        except OSError:
            continue
        with f:
            try:
                _read_ops(f, limit, wanted, found)
            except OSError:
                continue
        if found == wanted:
            break
    return frozenset(found)


def _read_ops(f, limit: int, wanted: set, found: set) -> None:
    """Add to ``found`` the ids of ``wanted`` that whole lines of ``f``'s first ``limit`` bytes name."""
    left, carry = limit, b""
    while left > 0:
        piece = f.read(min(_BLOCK, left))
        if not piece:
            break
        left -= len(piece)
        buf = carry + piece if carry else piece
        cut = buf.rfind(b"\n") + 1
        lines, carry = buf[:cut], buf[cut:]
        for line in lines.split(b"\n"):
            try:
                rec = json.loads(line.decode("utf-8"))
            except (ValueError, RecursionError):  # a damaged line names nothing (history names it)
                continue
            op = rec.get("op_id") if isinstance(rec, dict) else None
            if isinstance(op, str) and op in wanted and is_entry(rec):
                found.add(op)
    # what follows the last newline is a torn append, or past ``limit``: no entry


__all__ = ["HISTORY_NAME", "SEALED", "WORKER_FILE", "is_entry", "is_log_name", "log_names", "named_operations"]
