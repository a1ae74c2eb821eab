"""A ledger entry dated beyond this host's clock (plus ``FUTURE_SKEW_SECONDS``) is refused as
untrusted input (review R11's note): before, ``check_entry`` asked only that its time be finite,
and of several marks of a run the newest tells, so an entry dated years ahead told its run's state
for years, over every real mark made since."""
import json
import time

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.engine import ledger
from tb_footprint_plugin.engine.ledger import Ledger, check_entry
from tb_footprint_plugin.engine.ledger_entries import FUTURE_SKEW_SECONDS
from tb_footprint_plugin.engine.ledger_objects import LEDGERS, write_waiting
from tb_footprint_plugin.engine.trust import Untrusted

YEARS_AHEAD = time.time() + 10 * 365 * 86400


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_an_entry_dated_in_the_future_is_refused_and_the_real_mark_tells(store):  # noqa: F811
    planted = f"{LEDGERS}/shard-0-of-2/w-{'f' * 32}-0.json"
    store.put(planted, json.dumps({"version": 1, "kind": "marks", "closed": True, "runs": {"a": {
        "policy": "archive", "entry": {"state": "done", "op_id": "op-planted", "updated_at": YEARS_AHEAD}}}}).encode())
    book = Ledger(store, "archive", None, "0/2", batched=True)
    runs = book.start(["a"])
    assert "a" not in runs  # not taken as done: the run is reduced
    assert [p["code"] for p in book.problems] == ["bad_ledger_entry"] and "later than" in book.problems[0]["detail"]
    book.mark("a", "reducing", original_size_bytes=10)
    write_waiting()
    book.mark("a", "done", op_id="op-real", original_size_bytes=10, after_size_bytes=4, verified=True)
    view = ledger.merged_of(store)
    assert view["runs"]["a"]["op_id"] == "op-real"
    assert [p["code"] for p in view["problems"]] == ["bad_ledger_entry"]


@pytest.mark.parametrize("field", ["updated_at", "of_mark"])
def test_a_clock_a_little_ahead_is_allowed_and_beyond_it_refused(field):
    assert check_entry("r", {"state": "done", field: time.time() + 60}, "f")[field]
    with pytest.raises(Untrusted) as u:
        check_entry("r", {"state": "done", field: time.time() + FUTURE_SKEW_SECONDS + 60}, "f")
    assert u.value.code == "bad_ledger_entry"
