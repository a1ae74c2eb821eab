"""The change log's lines are compact JSON (issue #28 item 2: a reduced run's history line is a
tenth of the state it leaves beside its backups), and lines an older version wrote with spaces
read the same."""
import json

from tb_footprint_plugin.engine import history

#: what ``catalogue`` appends for a verified reduce of a small run (the fields and their kinds)
ENTRY = {"op_id": "20261204T083937-b3ec9b", "kind": "reduce", "run": "exp0001/run000130", "policy": "archive",
         "before": 47080, "after": 42746, "verified": True, "outcome": "verified", "reason": None,
         "backup_kept": True, "user": "root", "host": "vm", "tool_version": "0.1.0"}


def test_a_reduce_entry_is_written_without_separator_spaces(tmp_path):
    state = str(tmp_path)
    history.append_history(state, dict(ENTRY))
    line = (tmp_path / history.HISTORY_NAME).read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    entry = json.loads(line)
    assert line[:-1] == json.dumps(entry, sort_keys=True, separators=(",", ":"))
    # the default separators' ", " and ": " cost a byte each: 27 of this entry's 297
    assert len(line) == len(json.dumps(entry, sort_keys=True)) + 1 - (2 * len(entry) - 1) <= 271


def test_lines_of_an_older_version_read_the_same(tmp_path):
    state = str(tmp_path)
    old = dict(ENTRY, time=1_700_000_000.5)
    (tmp_path / history.HISTORY_NAME).write_text(json.dumps(old, sort_keys=True) + "\n")
    history.append_history(state, dict(ENTRY, op_id="20261204T083938-2ce04d"))
    entries = history.read_history(state)
    assert entries[0] == old
    assert {k: v for k, v in entries[1].items() if k != "time"} == dict(ENTRY, op_id="20261204T083938-2ce04d")
    assert history.changes_since(state, ENTRY["run"], 0, {"verified"})[0]["op_id"] == ENTRY["op_id"]
    assert history.history_damage(state) == []
