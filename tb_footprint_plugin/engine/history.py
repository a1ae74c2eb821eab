"""The change log ``history.jsonl``: one line per operation, appended and fsynced."""
from __future__ import annotations

import csv
import io
import json
import os
import time
from typing import List

from tb_footprint_plugin.storage.files import append_line

HISTORY_NAME = "history.jsonl"
CSV_FIELDS = ("time", "op_id", "kind", "run", "policy", "before", "after", "verified", "outcome",
              "backup_kept", "user", "host", "tool_version", "reason", "backup", "freed")


def append_history(state: str, entry: dict) -> None:
    """Append one entry (with the current time) durably."""
    os.makedirs(state, exist_ok=True)
    append_line(os.path.join(state, HISTORY_NAME), json.dumps(dict(entry, time=time.time()), sort_keys=True) + "\n")


def read_history(state: str) -> List[dict]:
    """Every entry, oldest first; unparseable lines are skipped."""
    out = []
    try:
        with open(os.path.join(state, HISTORY_NAME), "r", encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return out


def history_csv(entries: List[dict]) -> str:
    """The entries as CSV with a header row."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for e in entries:
        w.writerow(e)
    return buf.getvalue()
