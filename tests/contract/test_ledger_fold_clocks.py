"""A ledger fold on a host whose clock runs ahead loses no mark a slower host reads (review R15 L2):
a fold keeps each run's newest mark only, and a host refuses a mark dated more than
``FUTURE_SKEW_SECONDS`` past its own clock, telling the run by its earlier marks. A fold by a host
an hour and a half ahead, of its own just-made mark with a slower host's earlier one, left that host
only the mark it refuses: the run looked unmarked. Only marks older than ``FUTURE_SKEW_SECONDS`` by
the folding host's clock are folded now (``ledger_fold.aged``); the newer object waits beside."""
import json
import time
import types

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import ledger, ledger_entries, ledger_fold
from tb_footprint_plugin.engine.ledger_entries import FUTURE_SKEW_SECONDS
from tb_footprint_plugin.engine.ledger_fold import FOLD_AFTER, fold
from tb_footprint_plugin.engine.ledger_objects import read_folder_objects
from tb_footprint_plugin.engine.ledger_reads import marks_key

FOLDER = "shard-0-of-2"
AHEAD = 1.5 * FUTURE_SKEW_SECONDS  # the fast host's clock, past what a slower host accepts


def _plant(store, token: str, run: str, op: str, at: float) -> str:
    """A worker's closed object of marks: ``run`` done by ``op`` at ``at`` (its writer's clock)."""
    key = marks_key(FOLDER, token * 32, 0)
    store.put(key, json.dumps({"version": 1, "kind": "marks", "closed": True, "runs": {run: {
        "policy": "archive", "entry": {"state": "done", "op_id": op, "shard": "0/2", "updated_at": at}}}}).encode())
    return key


@pytest.mark.parametrize("store", ["s3", "gs", "az"], indirect=True)
def test_a_fold_by_a_host_whose_clock_runs_ahead_keeps_the_mark_a_slower_host_reads(store, monkeypatch):  # noqa: F811
    now = time.time()
    # this (slower) host's marks: run r done by op-slow, and enough closed objects for a fold
    _plant(store, "0", "r", "op-slow", now - 60)
    for n in range(1, FOLD_AFTER + 1):
        _plant(store, "%x" % n, f"o{n}", f"op-o{n}", now - 60)
    # a host 1.5 h ahead marks r again, by its clock, just now
    fast = _plant(store, "f", "r", "op-fast", now + AHEAD)
    slow_view = ledger.merged_of(store)
    assert slow_view["runs"]["r"]["op_id"] == "op-slow"  # the fast host's mark refused, named
    assert [p["code"] for p in slow_view["problems"]] == [Finding.BAD_LEDGER_ENTRY], slow_view["problems"]
    # the fast host folds what it reads (its clock accepts its own mark)
    fast_clock = types.SimpleNamespace(time=lambda: time.time() + AHEAD)
    with monkeypatch.context() as mp:
        mp.setattr(ledger_entries, "time", fast_clock)
        mp.setattr(ledger_fold, "time", fast_clock, raising=False)  # none before R15 L2
        _e, problems, reads = read_folder_objects(store, FOLDER)
        assert problems == [] and len(reads) == FOLD_AFTER + 2
        done = fold(store, FOLDER, reads)
    # the slower host still tells r by its own mark, as before the fold
    after = ledger.merged_of(store)
    assert after["runs"].get("r", {}).get("op_id") == "op-slow", after
    assert done is not None and fast not in done[1] and len(done[1]) == FOLD_AFTER + 1, done
    assert {r: e["op_id"] for r, e in after["runs"].items()} == {r: e["op_id"] for r, e in slow_view["runs"].items()}


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_marks_made_within_the_allowed_skew_wait_for_a_later_fold(store, monkeypatch):  # noqa: F811
    now = time.time()
    for n in range(FOLD_AFTER + 2):
        _plant(store, "%x" % (n + 1), f"o{n}", f"op-o{n}", now - 60)
    _e, _p, reads = read_folder_objects(store, FOLDER)
    assert fold(store, FOLDER, reads) is None  # every mark a minute old: not yet
    later = types.SimpleNamespace(time=lambda: time.time() + FUTURE_SKEW_SECONDS)
    monkeypatch.setattr(ledger_fold, "time", later, raising=False)
    done = fold(store, FOLDER, reads)
    assert done is not None and len(done[1]) == FOLD_AFTER + 2
