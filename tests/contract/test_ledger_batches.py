"""A bucket's batch ledger written per batch, not per mark (issue #28 item 5): a reduce's worker
writes its marks at its batch's steps (``engine.ledger_objects``: one object per worker and batch),
and the objects earlier versions wrote, one per (shard, run), still read beside them."""
import json
import socket
import subprocess
import sys

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.engine import ledger
from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.engine.ledger_objects import INFLIGHT, LEDGERS, write_waiting

BUCKET_KINDS = ["s3", "gs", "az"]

#: every ledger object 3f68b74 wrote for: worker 0/2 (a done, b failed, c skipped as active) and
#: worker 1/2 (d left reducing, its in-flight marker kept), as it wrote them (made by 3f68b74's
#: ``Ledger`` on moto; host and pid are put to this host and a dead pid below)
OLD_OBJECTS = {
    '.tb-footprint/ledger-inflight/shard-1-of-2/7b1e0b4e2c7a1aa195323dc29bf56ca0.json': (
        '{"folder": "shard-1-of-2", "host": "vm", "pid": 10550, "pid_start": 7355143, "since": 1796542651'
        '.3723123, "version": 1}'),
    '.tb-footprint/ledgers/shard-0-of-2/2e7d2c03a9507ae265ecf5b5356885a5.json': (
        '{"entry": {"code": "active", "host": "vm", "pid": 10550, "pid_start": 7355143, "shard": "0/2", "'
        'state": "skipped", "updated_at": 1796542651.3639197}, "policy": "archive", "run": "c", "version"'
        ': 1}'),
    '.tb-footprint/ledgers/shard-0-of-2/3e23e8160039594a33894f6564e1b134.json': (
        '{"entry": {"code": "store_error", "error": "refused", "host": "vm", "op_id": "op-b", "pid": 1055'
        '0, "pid_start": 7355143, "shard": "0/2", "state": "failed", "updated_at": 1796542651.3601575}, "'
        'policy": "archive", "run": "b", "version": 1}'),
    '.tb-footprint/ledgers/shard-0-of-2/ca978112ca1bbdcafac231b39a23dc4d.json': (
        '{"entry": {"after_size_bytes": 4, "host": "vm", "op_id": "op-a", "original_size_bytes": 10, "pid'
        '": 10550, "pid_start": 7355143, "reduced_ratio": 0.6, "shard": "0/2", "state": "done", "updated_'
        'at": 1796542651.3344295, "verified": true}, "policy": "archive", "run": "a", "version": 1}'),
    '.tb-footprint/ledgers/shard-1-of-2/18ac3e7343f016890c510e93f9352611.json': (
        '{"entry": {"host": "vm", "original_size_bytes": 8, "pid": 10550, "pid_start": 7355143, "shard": '
        '"1/2", "state": "reducing", "updated_at": 1796542651.3722992}, "policy": "archive", "run": "d", '
        '"version": 1}'),
}


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _plant_old(store) -> None:
    dead = _dead_pid()
    for key, text in OLD_OBJECTS.items():
        doc = json.loads(text)
        if doc.get("run") in ("d", None):  # the worker killed with d in flight: its entry and marker
            doc.get("entry", doc).update(host=socket.gethostname(), pid=dead)
            text = json.dumps(doc, sort_keys=True)
        store.put(key, text.encode())


def _requests(store) -> dict:
    return dict(store.stats.to_dict())


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_a_reduce_worker_writes_its_batch_marks_in_five_requests_not_three_a_run(store):  # noqa: F811
    """The worker's marker, its runs' start (one PUT), their verify marks (one PUT), their outcomes
    (one PUT, with which the marker goes): whatever the batch's size. Before: 3 PUTs a run."""
    runs = [f"r{i}" for i in range(12)]
    book = Ledger(store, "archive", None, "0/4", listing={}, batched=True)
    before = _requests(store)
    book.start(runs)
    for r in runs:
        book.mark(r, "reducing", original_size_bytes=10)
    assert _requests(store) == before  # nothing yet: the batch's journal step writes them
    write_waiting()
    assert len(list(store.list(INFLIGHT))) == 1  # the marker, before the entries
    assert ledger.merged_of(store)["counts"] == {"reducing": 12}
    for r in runs:
        book.mark(r, "verifying")
    write_waiting()
    assert ledger.merged_of(store)["counts"] == {"verifying": 12}
    mid = _requests(store)
    for r in runs:
        book.mark(r, "done", op_id=f"op-{r}", original_size_bytes=10, after_size_bytes=4, verified=True)
    after = _requests(store)
    assert (after["put"] - mid["put"], after["delete"] - mid["delete"]) == (1, 1)  # the last outcome's
    assert (after["put"] - before["put"], after["delete"] - before["delete"]) == (4, 1)
    assert list(store.list(INFLIGHT)) == []
    view = ledger.merged_of(store)
    assert view["counts"] == {"done": 12} and view["saved_bytes"] == 72 and view["problems"] == []
    assert len(list(store.list(LEDGERS))) == 1  # one object for the batch
    # the next batch of the same worker: a new object, the first stays as it is
    book.mark("r0", "reducing", original_size_bytes=4)
    write_waiting()
    book.mark("r0", "done", op_id="op-again", original_size_bytes=4, after_size_bytes=2, verified=True)
    assert len(list(store.list(LEDGERS))) == 2
    assert ledger.merged_of(store)["runs"]["r0"]["op_id"] == "op-again"  # the newest mark tells


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_ledger_objects_3f68b74_wrote_still_read_and_settle_beside_todays(store):  # noqa: F811
    _plant_old(store)
    view = ledger.merged_of(store)
    assert {r: e["state"] for r, e in view["runs"].items()} == {
        "a": "done", "b": "failed", "c": "skipped", "d": "reducing"}
    assert view["stalled"] == ["d"] and view["problems"] == [] and view["saved_bytes"] == 6
    # a rerun of shard 0/2 reads them: a done stays done, the failed run and the passing skip go again
    book = Ledger(store, "archive", None, "0/2", batched=True)
    runs = book.start(["a", "b", "c"])
    assert book.problems == [] and runs["a"]["op_id"] == "op-a"
    assert [book.should_run(runs.get(r), 4) for r in "abc"] == [False, True, True]
    book.mark("b", "reducing", original_size_bytes=10)
    write_waiting()
    book.mark("b", "done", op_id="op-b2", original_size_bytes=10, after_size_bytes=5, verified=True)
    book.mark("c", "skipped", code="nothing_to_reduce", original_size_bytes=7)
    book.compact()
    # the dead worker's run: its old marker found, its commit proven, settled beside its old object
    t = float(json.loads(OLD_OBJECTS[next(k for k in OLD_OBJECTS if "shard-1-of-2/" in k and LEDGERS in k)])
              ["entry"]["updated_at"])
    m = [{"run": "d", "kind": "reduce", "outcome": "verified", "finished_at": t + 1, "op_id": "op-d",
          "bytes_before": 8, "bytes_after": 3}]
    assert ledger.settle_stale(store, lambda: m, journals_of=lambda: (set(), set())) == ["d"]
    view = ledger.merged_of(store)
    assert {r: (e["state"], e.get("op_id")) for r, e in view["runs"].items()} == {
        "a": ("done", "op-a"), "b": ("done", "op-b2"), "c": ("skipped", None), "d": ("done", "op-d")}
    assert view["stalled"] == [] and view["problems"] == [] and list(store.list(INFLIGHT)) == []
    # read again as the next worker of shard 1/2 does: the settled entry, not the old in-flight one
    assert Ledger(store, "archive", None, "1/2", batched=True).start([])["d"]["state"] == "done"
