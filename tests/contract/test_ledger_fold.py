"""A bucket ledger folder's closed objects are folded (``engine.ledger_fold``): a start reads a
bounded number of objects however many batches ran (before: one GET per batch ever run), every
run's newest mark stays what the folder tells, an object a live worker may still write is never
folded (a killed worker's is, once its process is gone, its runs still settled), and a crash or a
second folder at any step loses no mark; on S3, GCS and Azure (moto, the GCS emulator, Azurite)."""
import json
import socket

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from test_ledger_batches import OLD_OBJECTS, _dead_pid, _plant_old
from tb_footprint_plugin.engine import ledger
from tb_footprint_plugin.engine.ledger import Ledger, record_rolled_back_objects
from tb_footprint_plugin.engine.ledger_fold import FOLD_AFTER, fold
from tb_footprint_plugin.engine.ledger_objects import LEDGERS, read_folder_objects, write_waiting
from tb_footprint_plugin.engine.ledger_reads import read_entries, tree

FOLDER = "shard-0-of-2"
BUCKET_KINDS = ["s3", "gs", "az"]


def _batch(store, runs, n, *, done=True):
    """One worker's batch as a reduce runs it: its runs' start, verify marks, outcomes."""
    book = Ledger(store, "archive", None, "0/2", batched=True)
    book.start(runs)
    for r in runs:
        book.mark(r, "reducing", original_size_bytes=10)
    write_waiting()
    for r in runs:
        book.mark(r, "verifying")
    write_waiting()
    if done:
        for r in runs:
            book.mark(r, "done", op_id=f"op-{r}-{n}", original_size_bytes=10, after_size_bytes=4, verified=True)
        book.compact()
    return book


def _view(store):
    v = ledger.merged_of(store)
    assert v["problems"] == []
    return {r: (e["state"], e.get("op_id"), e.get("code")) for r, e in v["runs"].items()}


def _objects(store):
    return sorted(tree(store, f"{LEDGERS}/{FOLDER}"))


def _start_reads(store) -> int:
    """The GETs a start of the folder's next worker makes."""
    before = store.stats.read
    Ledger(store, "archive", None, "0/2", batched=True).start([])
    return store.stats.read - before


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_a_start_reads_a_bounded_number_of_objects_after_many_batches(store):  # noqa: F811
    expected = {}
    for n in range(30):
        runs = [f"r{n}", f"r{n + 1}"]  # each run twice: the later batch's mark tells
        _batch(store, runs, n)
        expected.update({r: ("done", f"op-{r}-{n}", None) for r in runs})
        if n == 12:  # a settling's object among them, ordered as the mark it settled
            assert record_rolled_back_objects(store, FOLDER, ["op-r12-12"]) == ["r12"]
            expected["r12"] = ("pending", "op-r12-12", "rolled_back")
        assert _view(store) == expected, n
    # one object a batch before (30 batches: 30 GETs a start, growing with every batch)
    assert len(_objects(store)) <= FOLD_AFTER + 2
    assert _start_reads(store) <= FOLD_AFTER + 2
    assert _view(store) == expected


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_an_object_a_live_worker_may_still_write_is_never_folded(store):  # noqa: F811
    live = _batch(store, ["live"], 0, done=False)  # its batch in flight: its object open
    (open_key,) = _objects(store)
    opened = store.read_all(open_key)
    assert json.loads(opened)["closed"] is False
    for n in range(FOLD_AFTER + 3):
        _batch(store, [f"r{n}"], n)
    assert len(_objects(store)) < FOLD_AFTER + 3  # folded
    assert open_key in _objects(store) and store.read_all(open_key) == opened
    live.mark("live", "done", op_id="op-live", original_size_bytes=10, after_size_bytes=4, verified=True)
    assert _view(store)["live"] == ("done", "op-live", None)
    assert json.loads(store.read_all(open_key))["closed"] is True


class _DeleteFails:
    """The store, its deletes refused: a fold killed after its object is written and read back."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def delete(self, *a, **kw):
        raise OSError("killed before the delete")


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_a_fold_killed_or_doubled_loses_no_mark(store):  # noqa: F811
    for n in range(FOLD_AFTER):
        _batch(store, [f"r{n}", "again"], n)
    # a settling's object: one closed object more, its own batch folding nothing
    assert record_rolled_back_objects(store, FOLDER, ["op-r3-3"]) == ["r3"]
    expected = _view(store)
    assert len(_objects(store)) == FOLD_AFTER + 1 and expected["r3"][0] == "pending"
    objs = tree(store, f"{LEDGERS}/{FOLDER}")
    _e, _p, reads = read_folder_objects(store, FOLDER, objs)
    # killed between the fold's write and its deletes: both stand, the folder tells the same
    with pytest.raises(OSError):
        fold(_DeleteFails(store), FOLDER, reads)
    assert len(_objects(store)) == len(objs) + 1 and _view(store) == expected
    # two workers folding at once, each from what it read before the other deleted
    _e, _p, reads = read_folder_objects(store, FOLDER)
    first = fold(store, FOLDER, reads)
    second = fold(store, FOLDER, reads)
    assert first and second and first[0].key != second[0].key
    assert _objects(store) == sorted([first[0].key, second[0].key])
    assert _view(store) == expected
    # a reader whose listing named the objects folded since finds the fold
    got, refused = read_entries(store, objs, f"{LEDGERS}/{FOLDER}")
    assert refused == [] and {r: (e["state"], e.get("op_id"), e.get("code")) for r, e, _f, _p in got} == expected


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_objects_earlier_versions_wrote_are_folded_unless_in_flight(store):  # noqa: F811
    _plant_old(store)  # 3f68b74's: a, b, c settled in shard 0/2; d in flight in shard 1/2
    store.put(f"{LEDGERS}/{FOLDER}/w-{'e' * 32}-0.json", json.dumps({  # 1dc6b1e's, no "closed" word
        "version": 1, "kind": "marks", "runs": {"e": {"policy": "archive", "entry": {
            "state": "done", "op_id": "op-e", "updated_at": 1.0}}}}).encode())
    old = [k for k in tree(store, f"{LEDGERS}/{FOLDER}")]
    expected = _view(store)
    for n in range(FOLD_AFTER):
        _batch(store, [f"r{n}"], n)
        expected[f"r{n}"] = ("done", f"op-r{n}-{n}", None)
    now = _objects(store)
    assert not set(old) & set(now) and len(now) < FOLD_AFTER  # the old ones folded too
    assert _view(store) == expected
    # the killed worker's in-flight object of the other folder is left for its settling
    assert [k for k in OLD_OBJECTS if "ledgers/shard-1-of-2" in k][0] in tree(store, LEDGERS)


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_a_killed_workers_open_object_is_folded_and_its_runs_still_settle(store):  # noqa: F811
    dead = _dead_pid()
    key = f"{LEDGERS}/{FOLDER}/w-{'d' * 32}-0.json"
    store.put(key, json.dumps({"version": 1, "kind": "marks", "closed": False, "runs": {"k": {
        "policy": "archive", "entry": {"state": "verifying", "host": socket.gethostname(), "pid": dead,
                                       "shard": "0/2", "updated_at": 1000.0, "original_size_bytes": 10}}}}).encode())
    for n in range(FOLD_AFTER):
        _batch(store, [f"r{n}"], n)
    assert key not in _objects(store) and len(_objects(store)) < FOLD_AFTER  # folded with the closed ones
    view = ledger.merged_of(store)
    assert view["stalled"] == ["k"] and view["runs"]["k"]["pid"] == dead  # its worker kept in the fold
    # its marker found by the next start: the run settled from the fold
    store.put(f".tb-footprint/ledger-inflight/{FOLDER}/{'d' * 32}.json", json.dumps({
        "version": 1, "host": socket.gethostname(), "pid": dead, "pid_start": None, "folder": FOLDER,
        "since": 1000.0}).encode())
    m = [{"run": "k", "kind": "reduce", "outcome": "verified", "finished_at": 1001.0, "op_id": "op-k",
          "bytes_before": 10, "bytes_after": 3}]
    assert ledger.settle_stale(store, lambda: m, journals_of=lambda: (set(), set())) == ["k"]
    assert _view(store)["k"] == ("done", "op-k", "completed")


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)
def test_an_open_object_of_a_live_process_is_not_taken_for_a_gone_one(store):  # noqa: F811
    key = f"{LEDGERS}/{FOLDER}/w-{'a' * 32}-0.json"
    store.put(key, json.dumps({"version": 1, "kind": "marks", "closed": False, "runs": {"k": {
        "policy": "archive", "entry": {"state": "reducing", "host": socket.gethostname(), "pid": 1,
                                       "updated_at": 1000.0}}}}).encode())  # pid 1: alive
    for n in range(FOLD_AFTER + 1):
        _batch(store, [f"r{n}"], n)
    assert key in _objects(store) and len(_objects(store)) < FOLD_AFTER
