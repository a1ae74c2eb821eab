"""The change log's damage check (``ChangeLog.problems``: what ``status`` and every start name of
the logs) reads each log a block at a time and keeps only what it names (r20 task J, review R's
measure): it kept every record of every log as a dict, ~10x the log's bytes at once (64 MB of
reduce lines: ~650 MB), paid at every TensorBoard start. Its findings are the reader's
(``read_logs``): the same items in the same order, sealed logs, a seal cut short and an
oversize log included."""
import json
import os
import tracemalloc

from tb_footprint_plugin.engine import history
from tb_footprint_plugin.engine.trust import DAMAGED_FILE, DAMAGED_LINE, Untrusted

MB = 1 << 20


def _reduce_line(i: int) -> bytes:
    return (json.dumps({"op_id": f"op-{i:08d}", "kind": "reduce", "run": f"runs/exp{i % 97}/seed{i % 7}",
                        "policy": "keep-last-100", "before": 123456789 + i, "after": 2345678, "verified": True,
                        "outcome": "verified", "reason": None, "code": None, "backup_kept": True,
                        "user": "someone", "host": "gpu-node-17", "tool_version": "0.9.0", "time": 1.7e9 + i},
                       separators=(",", ":")) + "\n").encode()


def _reference(log: history.ChangeLog):
    """What ``problems`` said before it streamed (over ``read_logs``, which holds every record)."""
    out = []
    for parsed in log.read_logs():
        found = list(parsed.damaged)
        for rec, n in zip(parsed.records, parsed.lines):
            if not history._timed(rec):
                d = Untrusted(DAMAGED_LINE, parsed.path, f"line {n}: a JSON object but no history entry "
                                                         "(no time); skipped")
                d.line = n
                found.append(d)
        out += sorted(found, key=lambda d: d.line)
    return [d.to_dict() for d in out]


def test_the_damage_check_of_a_large_log_holds_a_block_not_the_log(tmp_path):
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    size = 0
    with open(state / "history.jsonl", "wb") as f:
        f.write(b"not json\n")
        i = 0
        while size < 24 * MB:
            line = _reduce_line(i)
            f.write(line)
            size += len(line)
            i += 1
        f.write(b'{"kind":"reduce"}\n')  # an object with no time, at the end
    tracemalloc.start()
    try:
        found = history.history_problems(str(state))
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(d.code, d.line) for d in found] == [(DAMAGED_LINE, 1), (DAMAGED_LINE, i + 2)]
    assert found[0].file.endswith("history.jsonl")
    # the log's bytes are 24 MB: a block (256 KB) and its records, not the log nor its dicts
    assert peak < 6 * MB, f"{peak / MB:.0f} MB at once to check a {size / MB:.0f} MB log"


def test_the_damage_check_of_an_oversize_log_holds_a_block(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "MAX_STATE_BYTES", 64 * MB)
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    with open(state / "history.jsonl", "wb") as f:  # a line, then sparse: a planted file's NUL bytes
        f.write(b'{"kind":"reduce"}\n')
        f.truncate(70 * MB)
    tracemalloc.start()
    try:
        found = history.history_problems(str(state))
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(d.code, d.line) for d in found] == [(DAMAGED_FILE, 0), (DAMAGED_LINE, 1)]
    assert peak < 6 * MB, f"{peak / MB:.0f} MB at once to check a planted 70 MB log"


def test_the_streamed_check_names_what_the_reader_names(tmp_path, monkeypatch):
    """Damaged and untimed lines across block edges, a worker's log, a sealed log with a torn last
    line, a seal cut short (its lines named once), a live log's torn line (not named), an
    oversize log: the same items, in the same order, as the reader's."""
    monkeypatch.setattr(history, "_BLOCK", 64, raising=False)  # many blocks, lines cut at their edges
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    good = [_reduce_line(i) for i in range(6)]
    head = good[0] + b"\xff\xfe broken\n" + good[1] + b'{"kind":"no time"}\n' + b"[1, 2]\n"
    (state / "history.sealed-0000000000001-0123456789ab.jsonl").write_bytes(head)
    (state / "history.jsonl").write_bytes(head + good[2] + b"{oops\n\n" + good[3] + b'{"time": "x"}\n'
                                          + b'{"torn": ')
    (state / "history-shard-1-of-2@host.jsonl").write_bytes(b'{"time": 1}\n' * 3 + b"nope\n" + good[4])
    (state / "history-shard-2-of-2@host.sealed-0000000000002-ba9876543210.jsonl").write_bytes(
        good[5] + b'{"a": 1}\n' + b'{"cut')
    (state / "history-shard-2-of-2@host.jsonl").write_bytes(b'{"time": 2}\n' + b"x" * 300 + b"\n"
                                                            + b'{"b": 2}\n')
    log = history.disk_log(str(state))
    want = _reference(log)
    assert [d.to_dict() for d in log.problems()] == want
    assert len(want) == 10  # what the files above hold to name (a guard of the test itself)

    monkeypatch.setattr(log, "limit", 200)  # each larger log read as an oversize one
    assert [d.to_dict() for d in log.problems()] == _reference(log)
    assert any(d["code"] == DAMAGED_FILE for d in _reference(log))


def test_an_unreadable_or_planted_log_is_skipped_as_the_reader_skips_it(tmp_path):
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    (state / "elsewhere.jsonl").write_bytes(b"nope\n")
    os.symlink(state / "elsewhere.jsonl", state / "history.jsonl")
    (state / "history-shard-1-of-2@host.jsonl").mkdir()
    log = history.disk_log(str(state))
    assert log.problems() == [] == _reference(log)


def test_one_line_per_operation_is_checked_a_block_at_a_time(tmp_path):
    """``logged_operations`` (recovery's "one line per operation", at a start with a purged
    retirement or a killed commit) keeps the operations it answers, not every record."""
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    size, i = 0, 0
    with open(state / "history.jsonl", "wb") as f:
        while size < 24 * MB:
            line = _reduce_line(i)
            f.write(line)
            size += len(line)
            i += 1
        f.write(b'{"op_id": "no-time", "kind": "purge"}\n{"op_id": "p1", "kind": "purge", "time": 3}\n')
    tracemalloc.start()
    try:
        got = history.logged_operations(str(state), kind="purge")
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == {"p1"}
    # the operations it answers and a block, not 24 MB of dicts
    assert peak < 6 * MB, f"{peak / MB:.0f} MB at once to check a {size / MB:.0f} MB log"


def test_the_logged_operations_are_the_readers(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "_BLOCK", 64, raising=False)
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    good = [_reduce_line(i) for i in range(4)]
    head = good[0] + b"broken\n" + good[1]
    (state / "history.sealed-0000000000001-0123456789ab.jsonl").write_bytes(head)
    (state / "history.jsonl").write_bytes(head + good[2] + b'{"op_id": "x", "kind": 3}\n{"op_id": "t"}\n{"cut')
    (state / "history-shard-1-of-2@host.jsonl").write_bytes(good[3] + b'{"op_id": 5, "time": 1}\n')
    log = history.disk_log(str(state))
    want = {(e["op_id"], e.get("kind"), e.get("outcome")) for e in log.read() if isinstance(e.get("op_id"), str)}
    want = {(o, k if isinstance(k, str) else None, r if isinstance(r, str) else None) for o, k, r in want}
    assert log._operation_lines() == want
    assert len(want) == 4
