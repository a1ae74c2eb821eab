"""A ledger fold made on a host whose clock runs over an hour ahead keeps, beside each run's newest
mark, the run's newest mark every host within the allowed skew accepts (``ledger_fold``'s
``earlier``). Before, the fold kept only the folding host's own mark; a host an hour or more behind
refuses it as future-dated (``check_entry``) and, where it read the run's earlier mark from the
objects before the fold, found no mark of the run at all: the run looked never reduced (review R15
L2). A fold of marks all made within the hour writes nothing more (the ordinary case)."""
import json
import secrets
import time
import types

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.engine import ledger_entries, ledger_fold
from tb_footprint_plugin.engine.ledger_entries import LEDGER_VERSION
from tb_footprint_plugin.engine.ledger_fold import FOLD_AFTER, fold
from tb_footprint_plugin.engine.ledger_reads import LEDGERS, marks_key, read_entries, read_listed, tree

FOLDER = "shard-0-of-2"
HOUR = ledger_entries.FUTURE_SKEW_SECONDS


def _put_marks(store, marks: dict) -> None:
    """One closed object of marks, as a worker's batch closes it: {run: (state, op_id, updated_at)}."""
    doc = {"version": LEDGER_VERSION, "kind": "marks", "closed": True,
           "runs": {run: {"policy": "archive", "entry": {"state": st, "op_id": op, "updated_at": at, "pid": 1,
                                                         "host": "h"}}
                    for run, (st, op, at) in marks.items()}}
    store.put(marks_key(FOLDER, secrets.token_hex(16), 0), json.dumps(doc).encode(), if_absent=True)


def _clock(monkeypatch, offset: float) -> None:
    """This host's clock ``offset`` seconds from the real one, for marks, their checks and folds."""
    fake = types.SimpleNamespace(time=lambda: time.time() + offset)
    monkeypatch.setattr(ledger_entries, "time", fake)
    monkeypatch.setattr(ledger_fold, "time", fake)


def _states(store) -> dict:
    prefix = f"{LEDGERS}/{FOLDER}"
    entries, _refused = read_entries(store, tree(store, prefix), prefix)
    return {run: (e["state"], e.get("op_id")) for run, e, _f, _p in entries}


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_slower_host_still_reads_a_runs_mark_after_a_fold_made_over_an_hour_ahead(store, monkeypatch):  # noqa: F811
    now = time.time()
    # the slow host (two hours behind) reduced r; the fast host, two hours ahead of it, marked r since
    _put_marks(store, {"r": ("done", "op-slow", now - 2 * HOUR)})
    for n in range(FOLD_AFTER + 1):
        _put_marks(store, {"r": ("reducing", "op-fast", now), f"o{n}": ("done", f"op-{n}", now)})
    _clock(monkeypatch, -2 * HOUR)  # before the fold the slow host read r's mark of its own
    assert _states(store)["r"] == ("done", "op-slow")
    _clock(monkeypatch, 0)  # the fast host folds
    reads, _ = read_listed(store, f"{LEDGERS}/{FOLDER}")
    folded = fold(store, FOLDER, reads)
    assert folded is not None and len(folded[1]) == FOLD_AFTER + 2
    assert len(tree(store, f"{LEDGERS}/{FOLDER}")) == 1
    assert _states(store)["r"] == ("reducing", "op-fast")  # the fast host reads its newest mark
    _clock(monkeypatch, -2 * HOUR)
    assert _states(store)["r"] == ("done", "op-slow"), "the slow host lost the run's mark it used"


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_fold_of_marks_made_within_the_hour_keeps_one_mark_a_run(store):  # noqa: F811
    now = time.time()
    for n in range(FOLD_AFTER + 1):
        _put_marks(store, {"r": ("done", f"op-{n}", now + n), f"o{n}": ("done", f"op-o{n}", now)})
    reads, _ = read_listed(store, f"{LEDGERS}/{FOLDER}")
    folded = fold(store, FOLDER, reads)
    assert folded is not None
    (key,) = tree(store, f"{LEDGERS}/{FOLDER}")
    doc = json.loads(store.read_all(key))
    assert not any("earlier" in rec for rec in doc["runs"].values())
    assert _states(store)["r"] == ("done", f"op-{FOLD_AFTER}")
