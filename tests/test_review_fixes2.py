"""Review fixes: a failed append's undo never cuts another writer's entry; a damaged
vaults.json never makes other vaults' backups disappear."""
import errno
import json
import os
import threading
import time

import pytest

from tb_footprint_plugin.engine import history, oplog, trust


def _enospc():
    return OSError(errno.ENOSPC, "No space left on device")


# --- 5: undoing a torn append --------------------------------------------------------------
def test_undo_keeps_an_entry_another_writer_appended_before_this_one_failed(tmp_path):
    """Another writer (no lock: an older version, say) appends a whole entry; then this append
    fails with ENOSPC having written nothing. The other entry survives the undo."""
    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1, "op_id": "first"}\n')
    other = '{"time": 2, "op_id": "other"}\n'
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path), '{"time": 3, "op_id": "mine"}\n'):
            with open(path, "a") as f:
                f.write(other)
            raise _enospc()
    assert path.read_text() == '{"time": 1, "op_id": "first"}\n' + other


def test_undo_keeps_an_entry_appended_after_a_torn_part_of_this_one(tmp_path):
    """This append took part of a line, another writer's whole entry landed after it: no cut
    (the torn bytes stay and are skipped as one damaged line; the other entry is kept)."""
    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1}\n')
    mine = '{"time": 3, "op_id": "mine"}\n'
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path), mine):
            with open(path, "a") as f:
                f.write(mine[:7])
                f.write('{"time": 2, "op_id": "other"}\n')
            raise _enospc()
    assert '{"time": 2, "op_id": "other"}' in path.read_text()


def test_undo_still_cuts_back_this_appends_own_torn_bytes(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1}\n')
    mine = '{"time": 3, "op_id": "mine"}\n'
    for line in (mine, None):  # the text known, or not (then: at most one line past the old end)
        with pytest.raises(OSError):
            with trust.undo_partial_append(str(path), line):
                with open(path, "a") as f:
                    f.write(mine[:9])
                raise _enospc()
        assert path.read_text() == '{"time": 1}\n'


def test_undo_without_the_line_never_cuts_two_lines(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"a": 1}\n')
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path)):
            with open(path, "a") as f:
                f.write('{"other": 1}\n{"mi')
            raise _enospc()
    assert path.read_text() == '{"a": 1}\n{"other": 1}\n{"mi'


def test_concurrent_history_append_survives_a_failed_one(tmp_path, monkeypatch):
    """Two --jobs threads append to history.jsonl: the first one's append fails with ENOSPC
    after the second one started. The second entry is in the file afterwards."""
    state = str(tmp_path)
    history.append_history(state, {"op_id": "first"})
    real = history.append_line
    started = threading.Event()
    second = threading.Thread(target=history.append_history, args=(state, {"op_id": "second"}))

    def failing_once(path, line, **kw):
        if '"failing"' in line:
            second.start()
            started.set()
            time.sleep(0.5)  # the other thread's append lands now, unless a lock keeps it out
            raise _enospc()
        return real(path, line, **kw)

    monkeypatch.setattr(history, "append_line", failing_once)
    with pytest.raises(OSError):
        history.append_history(state, {"op_id": "failing"})
    assert started.is_set()
    second.join(10)
    ops = [e["op_id"] for e in history.read_history(state)]
    assert ops == ["first", "second"], ops


def test_oplog_append_failure_keeps_a_concurrent_record(tmp_path, monkeypatch):
    vault = str(tmp_path)
    op = "20240101-000000-abcdef"
    oplog.append(vault, op, {"type": "note", "n": 1})
    real = oplog.append_line

    def other_lands_then_fails(path, line, **kw):
        real(path, json.dumps({"type": "note", "n": 2}) + "\n")  # another process's record
        raise _enospc()

    monkeypatch.setattr(oplog, "append_line", other_lands_then_fails)
    with pytest.raises(OSError):
        oplog.append(vault, op, {"type": "note", "n": 3})
    assert [r.get("n") for r in oplog.records(vault, op)] == [1, 2]
