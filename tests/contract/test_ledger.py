"""The batch ledger is one ``Ledger`` over the ``Store`` interface (issue #26 item 2: "one journal,
one lock, ledger ... written once"): the same cases, with the same assertions, on a folder (its
file layout: a snapshot and appended lines) and on moto's S3, the GCS emulator and Azurite (the
bucket layout: one object per worker and batch), the layout chosen from ``capabilities.append``.
What only one layout has stays in its own suites (a folder's flock between processes and torn
lines: test_scale_batch, test_shards; a bucket's markers and journals: test_bucket_ledger_*)."""
import json
import subprocess
import sys

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import Recovery, Skip
from tb_footprint_plugin.engine import ledger
from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.engine.ledger_objects import LEDGERS, entry_key

#: the stores whose ledger is the bucket layout (a folder's is one file: test_scale_batch, test_shards)
BUCKET_KINDS = ["s3", "gs", "az"]


def _dead_pid() -> int:
    """The pid of a process that has ended (a killed worker's)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _plant(store, entries: dict, shard: str) -> None:
    """Entries written as another worker of the shard would, in the layout's own form (lines after
    the snapshot, or one object a run), for the untrusted-input cases."""
    if ledger.folder_layout(store):
        book = Ledger(store, "archive", None, shard)
        book.start([])
        with open(book.path, "ab") as f:
            for run, entry in entries.items():  # (the snapshot has no newline after it)
                f.write(b"\n" + json.dumps({"run": run, "entry": entry}).encode())
            f.write(b"\n")
    else:
        folder = "shard-{}-of-{}".format(*shard.split("/"))
        for run, entry in entries.items():
            store.put(entry_key(folder, run),
                      json.dumps({"version": 1, "run": run, "policy": "archive", "entry": entry}).encode())


def test_a_ledger_reads_back_what_it_marked_by_the_same_rules(store):  # noqa: F811
    book = Ledger(store, "archive", None, "0/2")
    book.start(["a", "b", "c", "d"], sizes={"a": 10})
    book.mark("a", "reducing")
    book.mark("a", "done", op_id="op-a", original_size_bytes=10, after_size_bytes=4, verified=True)
    book.mark("b", "failed", error="x" * 10000)  # cut to what the entry check accepts
    book.mark("c", "skipped", code=Skip.ACTIVE)
    book.compact()
    again = Ledger(store, "archive", None, "0/2")
    runs = again.start(["a", "b", "c", "d"])
    assert runs["a"]["state"] == "done" and runs["a"]["op_id"] == "op-a" and runs["a"]["shard"] == "0/2"
    assert runs["b"]["state"] == "failed" and len(runs["b"]["error"]) == ledger.MAX_ERROR_CHARS
    assert again.problems == []
    # the one resume rule: done stays done (same size), failed and a passing skip are retried
    assert [again.should_run(runs.get(r), 4) for r in "abcd"] == [False, True, True, True]
    assert again.should_run(runs["a"], 5)  # changed since: the entry no longer holds
    # another shard's ledger is another one: nothing of shard 0/2 in it
    assert Ledger(store, "archive", None, "1/2").start([]).get("a") is None


def test_a_skip_from_another_worker_never_unmarks_a_done_run(store):  # noqa: F811
    first = Ledger(store, "archive", None, "0/1")
    first.start(["a"])
    first.mark("a", "done", op_id="op-a", after_size_bytes=4)
    other = Ledger(store, "archive", None, "0/1")  # a worker of the same shard that read nothing
    other.mark("a", "skipped", code=Skip.LOCKED)
    other.mark("a", "skipped", code=Skip.NOTHING, original_size_bytes=4)
    assert Ledger(store, "archive", None, "0/1").start([])["a"]["state"] == "done"


def test_a_bad_entry_is_refused_with_its_code_and_not_used(store):  # noqa: F811
    _plant(store, {"a": {"state": "done", "pid": "evil"}, "b": {"state": "exploded"},
                   "c": {"state": "done", "after_size_bytes": 3}}, "0/1")
    view = ledger.merged_of(store)
    assert sorted(view["runs"]) == ["c"] and [p["code"] for p in view["problems"]] == ["bad_ledger_entry"] * 2
    book = Ledger(store, "archive", None, "0/1")
    runs = book.start([])
    assert "a" not in runs and "b" not in runs and runs["c"]["state"] == "done"
    assert sorted(p["code"] for p in book.problems) == ["bad_ledger_entry", "bad_ledger_entry"]
    assert not book.should_run(runs["c"], 3)


class _Outcome:
    def __init__(self, action, runs, detail="settled"):
        self.action, self.runs, self.detail = action, runs, detail


def test_what_recovery_settled_is_marked_the_same_way(store):  # noqa: F811
    book = Ledger(store, "archive", None, "0/1")
    book.start(["a", "b"])
    problems = ledger.mark_recovered(book, [
        _Outcome(Recovery.COMPLETED, [{"run": "a", "op_id": "op-a", "bytes_before": 10, "bytes_after": 4}]),
        _Outcome(Recovery.ROLLED_BACK, [{"run": "b", "op_id": "op-b", "bytes_before": 8}])])
    assert problems == []
    runs = Ledger(store, "archive", None, "0/1").start([])
    assert (runs["a"]["state"], runs["a"]["code"], runs["a"]["reduced_ratio"]) == ("done", "completed", 0.6)
    assert (runs["b"]["state"], runs["b"]["code"], runs["b"]["op_id"]) == ("pending", "rolled_back", "op-b")


def test_a_dead_workers_run_is_settled_done_only_when_its_commit_is_proven(store):  # noqa: F811
    dead = _dead_pid()
    book = Ledger(store, "archive", None, "0/1")
    book.start(["a", "b", "c"])
    book.who.update(pid=dead, pid_start=None)  # marks written by a worker that is gone now
    for r in "abc":
        book.mark(r, "reducing")
    t = book.read()["runs"]["a"]["updated_at"]
    manifests = [
        {"run": "a", "kind": "reduce", "outcome": "verified", "finished_at": t + 1, "op_id": "op-a",
         "bytes_before": 10, "bytes_after": 5},
        # c's reduction finished before its mark: not the attempt the mark was for
        {"run": "c", "kind": "reduce", "outcome": "verified", "finished_at": t - 100, "op_id": "op-c",
         "bytes_before": 10, "bytes_after": 5}]
    assert ledger.merged_of(store)["stalled"] == ["a", "b", "c"]
    done = ledger.settle_stale(store, lambda: manifests, journals_of=lambda: (set(), set()))
    assert done == ["a"]
    view = ledger.merged_of(store)
    a = view["runs"]["a"]
    assert (a["state"], a["code"], a["op_id"], a["after_size_bytes"]) == ("done", "completed", "op-a", 5)
    assert a["shard"] == "0/1" and a["pid"] != dead
    assert view["runs"]["b"]["state"] == "reducing" and view["runs"]["c"]["state"] == "reducing"
    assert view["counts"] == {"done": 1, "reducing": 2}


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)  # the bucket layout only
def test_a_journal_left_keeps_a_bucket_run_in_flight(store):  # noqa: F811
    """A bucket's proof of a commit also asks that no journal names the run (its manifest is written
    before the commit record); a folder's recovery settled its journals before a start settles."""
    book = Ledger(store, "archive", None, "0/1")
    book.start(["a"])
    book.who.update(pid=_dead_pid(), pid_start=None)
    book.mark("a", "reducing")
    t = book.read()["runs"]["a"]["updated_at"]
    m = [{"run": "a", "kind": "reduce", "outcome": "verified", "finished_at": t + 1, "op_id": "op-a",
          "bytes_before": 10, "bytes_after": 5}]
    assert ledger.settle_stale(store, m, journals_of=lambda: ({"op-a"}, set())) == []
    assert ledger.merged_of(store)["runs"]["a"]["state"] == "reducing"
    assert ledger.settle_stale(store, m, journals_of=lambda: (set(), set())) == ["a"]
    with pytest.raises(ValueError):
        ledger.settle_stale(store, m)  # no journals: nothing proven, nothing settled


@pytest.mark.parametrize("store", BUCKET_KINDS, indirect=True)  # the bucket layout only
def test_a_bucket_mark_is_one_put_and_a_start_writes_nothing(store):  # noqa: F811
    """The bucket layout's requests outside a batch (a reduce's worker writes at its batch's steps:
    test_ledger_batches): a run's two marks are two PUTs, the worker's in-flight marker one PUT and
    one DELETE; the worker's object holds its runs' entries."""
    stats = store.stats
    book = Ledger(store, "archive", None, "0/1", listing={})  # found in the batch's listing: none
    before = stats.to_dict()
    book.start(["a"])
    assert stats.to_dict() == before  # nothing read, nothing written
    book.mark("a", "reducing")
    book.mark("a", "done", op_id="op-a")
    after = stats.to_dict()
    assert (after["put"] - before["put"], after["delete"] - before["delete"], after["read"] - before["read"],
            after["head"] - before["head"], after["list"] - before["list"]) == (3, 1, 0, 0, 0)
    (key,) = [e.key for e in store.list(LEDGERS)]
    assert key.startswith(f"{LEDGERS}/shard-0-of-1/w-") and key.endswith("-0.json")  # its first batch's
    raw = store.read_all(key)
    doc = json.loads(raw)
    assert raw == json.dumps(doc, sort_keys=True).encode()
    assert set(doc) == {"version", "kind", "closed", "runs"} and doc["runs"]["a"]["entry"]["state"] == "done"
    assert doc["closed"] is True  # its worker writes it no more: a fold may take it (``engine.ledger_fold``)
    assert doc["runs"]["a"]["policy"] == "archive"


def test_a_settle_never_writes_over_a_mark_made_after_its_judging_read(store):  # noqa: F811
    """Review R2-5: a start reads the ledger, judges a dead worker's in-flight entry, and settles it;
    a live worker that marked the run between that read and the settle's write keeps its mark (a
    folder: the entry compared under the file's flock; a bucket: the put conditional on the version
    listed). The manifests are read between the two, so the live mark is made there."""
    book = Ledger(store, "archive", None, "0/1")
    book.start(["a"])
    book.who.update(pid=_dead_pid(), pid_start=None)
    book.mark("a", "reducing")
    t = book.read()["runs"]["a"]["updated_at"]
    m = [{"run": "a", "kind": "reduce", "outcome": "verified", "finished_at": t + 1, "op_id": "op-a",
          "bytes_before": 10, "bytes_after": 5}]
    live = Ledger(store, "archive", None, "0/1")  # this process: a rerun of the shard

    def manifests():
        live.mark("a", "reducing")  # after the settle judged the dead worker's entry, before it writes
        return m

    done = ledger.settle_stale(store, manifests, journals_of=lambda: (set(), set()))
    # a bucket's settling writes its own object, ordered as the mark it judged: it records "a", and
    # the live mark made since still tells (a folder's compares the entry and writes nothing)
    assert done == ([] if ledger.folder_layout(store) else ["a"])
    a = ledger.merged_of(store)["runs"]["a"]
    assert (a["state"], a.get("code"), a.get("op_id")) == ("reducing", None, None)  # the live mark, not "done"
    # judged again, the entry is the live worker's: nothing to settle, and it stays
    assert ledger.settle_stale(store, lambda: m, journals_of=lambda: (set(), set())) == []
    assert ledger.merged_of(store)["runs"]["a"]["state"] == "reducing"
    live.mark("a", "done", op_id="op-live")  # the live worker's marker goes with its last in-flight run
