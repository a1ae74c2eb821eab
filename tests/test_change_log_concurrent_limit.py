"""Concurrent appenders never push a disk change log past its limit (review R2-6): the size is
decided under the append's flock, so every sealed log is read whole, every line exactly once,
and no log is named damaged."""
import collections
import multiprocessing
import os
import threading

import pytest

from tb_footprint_plugin.engine import history

LIMIT = 1500
WRITERS = 4
EACH = 60


def _write(state: str, w: int) -> None:
    history.MAX_STATE_BYTES = LIMIT  # a forked child keeps the parent's patch; set it anyway
    for i in range(EACH):
        history.append_history(state, {"op_id": f"w{w}-{i}", "kind": "reduce", "run": "r", "outcome": "verified"})


def _check(state: str) -> None:
    lines = history.read_history(state)
    seen = collections.Counter(e.get("op_id") for e in lines)
    want = {f"w{w}-{i}" for w in range(WRITERS) for i in range(EACH)}
    assert set(seen) == want, f"{len(want - set(seen))} lines hidden"
    assert all(n == 1 for n in seen.values())
    assert history.history_damage(state) == []
    sizes = {n: os.path.getsize(os.path.join(state, n)) for n in os.listdir(state)}
    assert sum(".sealed-" in n for n in sizes) >= 3  # the stress really rolled logs over
    assert all(s <= LIMIT for s in sizes.values()), sizes


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "MAX_STATE_BYTES", LIMIT)
    s = tmp_path / ".tb-footprint"
    s.mkdir(mode=0o700)
    return str(s)


def test_appending_processes_keep_every_log_within_its_limit(state):
    ctx = multiprocessing.get_context("fork")
    ps = [ctx.Process(target=_write, args=(state, w)) for w in range(WRITERS)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(120)
    assert [p.exitcode for p in ps] == [0] * WRITERS
    _check(state)


def test_appending_threads_keep_every_log_within_its_limit(state):
    ts = [threading.Thread(target=_write, args=(state, w)) for w in range(WRITERS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    _check(state)


def test_a_disk_append_past_the_limit_is_refused_and_writes_nothing(tmp_path):
    s = tmp_path / ".tb-footprint"
    s.mkdir(mode=0o700)
    folder = history.StateFolder(str(s))
    folder.append("history.jsonl", b"x" * 90 + b"\n", limit=100)  # an empty log takes any first line
    with pytest.raises(history.StoreFailure) as e:
        folder.append("history.jsonl", b"y\n", limit=93)  # 91 + 2 + 1 > 93
    assert e.value.code == history.StoreError.TOO_LARGE and e.value.key == "history.jsonl"
    assert (s / "history.jsonl").read_bytes() == b"x" * 90 + b"\n"
    folder.append("history.jsonl", b"y\n", limit=94)  # 91 + 2 + 1 = 94: room
    assert (s / "history.jsonl").read_bytes() == b"x" * 90 + b"\ny\n"
