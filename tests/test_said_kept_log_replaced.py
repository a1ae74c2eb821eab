"""Review R27 F2: ``history.backups_said_kept_now`` reads, after its first call in a process, only what was
appended to each change log since. It took "the log was replaced" only from a smaller size: a log set aside (as a
seal does, or put back from a copy) and a new one at least as large before the next call was read from the old
offset, so the new log's first lines were never read in that process (the tab's, which lives for days): an
operation they said was verified could lose R26 F1's guard. Now another file at a log's name is read whole."""
import json
import os
import time

from tb_footprint_plugin.engine import history


def _line(op: str, kind: str = "reduce", outcome: str = "verified") -> str:
    return json.dumps({"time": time.time(), "op_id": op, "kind": kind, "run": "r", "outcome": outcome}) + "\n"


def test_a_log_replaced_by_a_larger_one_is_read_whole(tmp_path):
    state = tmp_path / ".tb-footprint"
    state.mkdir(mode=0o700)
    log = state / "history.jsonl"
    log.write_text("".join(_line(f"20261207T170000-0000a{i}") for i in range(5)))
    first = history.backups_said_kept_now(str(state))
    assert len(first) == 5
    os.rename(log, state / "history.sealed-0000000000001-abcdefabcdef.jsonl")  # as a seal sets it aside
    log.write_text(_line("20261207T180000-0000b0") + "".join(
        _line(f"20261207T180000-0000c{i}", kind="scan", outcome="done") for i in range(6)))
    assert os.path.getsize(log) >= 5 * len(_line("20261207T170000-0000a0"))  # not smaller: the old rule's blind spot
    now = history.backups_said_kept_now(str(state))
    assert "20261207T180000-0000b0" in now, sorted(now)  # before: missing until the process restarted
    assert now == history.backups_said_kept(str(state))


def test_lines_appended_to_the_same_log_are_still_read_incrementally(tmp_path):
    state = tmp_path / ".tb-footprint"
    state.mkdir(mode=0o700)
    log = state / "history.jsonl"
    log.write_text(_line("20261207T170000-0000a0"))
    assert history.backups_said_kept_now(str(state)) == {"20261207T170000-0000a0"}
    with open(log, "a") as f:
        f.write(_line("20261207T170000-0000a1") + _line("20261207T170000-0000a0", kind="purge", outcome="done"))
    assert history.backups_said_kept_now(str(state)) == {"20261207T170000-0000a1"}
