"""Review J7 S2: a bucket ledger's settling records a run ``done`` only when its commit is proven,
records a rolled-back run ``pending`` (code ``rolled_back``) as a disk's ledger does, and an
interrupt's settling (``mine``) takes only its own batch's marker, never that of another batch of
the same process (TensorBoard's plugin process runs several jobs). On moto S3."""
import json
import signal
import subprocess
import sys
import threading

import pytest

from test_bucket_state_schema import KILLED_BEFORE_DONE, STATE, _keys, _logdir
from test_shards import env
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_ledger, bucket_recover
from tb_footprint_plugin.engine.bucket_state import BucketTxnError
from tb_footprint_plugin.storage.store_object import ObjectStore

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _batch(url):
    return api.status(url)["batch"]


def test_a_run_whose_journal_recovery_could_not_roll_back_is_not_recorded_done(s3_bucket, tmp_path, monkeypatch):
    """Killed after the runs' verified manifests, before the commit record; the next start's
    rollback fails (store error: journal and manifests kept). The ledger must not say done for
    runs a later start rolls back; that later start records them pending (rolled_back)."""
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    p = subprocess.run([sys.executable, "-c", KILLED_BEFORE_DONE.replace('state == "done"', "False"), url, pol],
                       env=env(TB_FOOTPRINT_FAILPOINTS="reduce.verify=kill"), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert len(_keys(url, f"{STATE}/journal/")) == 1
    assert len(_keys(url, f"{STATE}/manifests/")) == 2  # written before the commit record: they prove nothing
    assert [m for m in api.operations(url) if m["kind"] == "reduce"] == []  # nor are listed (review R6 F2)

    def refuse(*a, **k):
        raise BucketTxnError("store_error", "simulated: the store refused the rollback's delete")

    monkeypatch.setattr(bucket_recover, "rollback_entry", refuse)
    (rec,) = api.recover_logdir(url)
    assert rec.action == "failed"
    assert len(_keys(url, f"{STATE}/journal/")) == 1  # kept: the next start rolls it back
    b = _batch(url)
    assert b["counts"] == {"verifying": 2}, b  # in flight (before the fix: {"done": 2})
    assert len(_keys(url, f"{STATE}/ledger-inflight/")) == 1  # kept for the next start

    monkeypatch.undo()
    (rec,) = api.recover_logdir(url)
    assert rec.action == "rolled_back"
    b = _batch(url)
    assert b["counts"] == {"pending": 2}, b
    assert {e["code"] for e in b["runs"].values()} == {"rolled_back"}
    assert _keys(url, f"{STATE}/ledger-inflight/") == []


def test_an_interrupt_settles_its_own_batch_marker_not_another_batch_of_the_same_process(s3_bucket, tmp_path,
                                                                                          monkeypatch):
    """Another batch of this process (another thread, its own ledger) has a run in flight while
    this thread's reduce is interrupted: settling the interrupt leaves that batch's marker and
    entry, and a start of another process does not take them (this process is alive)."""
    url, pol = _logdir(s3_bucket, tmp_path)
    other = {}

    def other_batch():
        book = bucket_ledger.BucketLedger(ObjectStore(url), "archive", "1/2")
        book.mark("elsewhere/run", "reducing", original_size_bytes=10)
        book.flush()  # its batch's step: the run's start written
        other["book"] = book

    t = threading.Thread(target=other_batch)
    t.start()
    t.join()
    (other_marker,) = _keys(url, f"{STATE}/ledger-inflight/")

    real = bucket_ledger.BucketLedger.mark

    def mark(self, run, state, **kw):
        if state == "done":
            raise KeyboardInterrupt
        return real(self, run, state, **kw)

    monkeypatch.setattr(bucket_ledger.BucketLedger, "mark", mark)
    with pytest.raises(api.Interrupted):  # the reduce settles its own batch on its way out, as on a disk
        api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default")
    monkeypatch.setattr(bucket_ledger.BucketLedger, "mark", real)
    for _settling in range(2):  # the reduce's own settling, then the CLI's again: the same
        assert _keys(url, f"{STATE}/ledger-inflight/") == [other_marker]  # before the fix: []
        b = _batch(url)
        assert b["runs"]["elsewhere/run"]["state"] == "reducing"
        assert b["counts"] == {"done": 3, "reducing": 1}, b
        api.settle_interrupted(url, policy=pol, ledger="default")
    # the other batch goes on: its end deletes its own marker
    other["book"].mark("elsewhere/run", "failed", error="gone")
    assert _keys(url, f"{STATE}/ledger-inflight/") == []


def test_a_run_its_own_thread_rolled_back_at_an_interrupt_is_recorded_pending(s3_bucket, tmp_path):
    """``settle_interrupted(rolled_back=...)``: the operations the batch's threads rolled back
    themselves are recorded pending (code rolled_back) as a disk's ledger records them; before,
    the argument was ignored on a bucket."""
    url, pol = _logdir(s3_bucket, tmp_path, n=1)
    ostore = ObjectStore(url)
    book = bucket_ledger.BucketLedger(ostore, "archive", None)
    book.mark("exp0/run000", "reducing", original_size_bytes=10)
    book.mark("exp0/run000", "failed", op_id="op-rolled", code="rolled_back", error="interrupted")
    book.flush()  # the batch's end
    api.settle_interrupted(url, policy=pol, ledger="default", rolled_back=["op-rolled"])
    e = _batch(url)["runs"]["exp0/run000"]
    assert (e["state"], e["code"], e["op_id"]) == ("pending", "rolled_back", "op-rolled"), e
    # written: the settling's own object of marks, beside the batch's
    assert len(_keys(url, f"{STATE}/ledgers/batch/")) == 2


def test_a_journal_read_that_fails_for_one_marker_is_read_again_for_the_next(s3_bucket, tmp_path, monkeypatch):
    """Two stale markers; the journals' read fails while settling the first (it stays). The
    second's run, whose verified manifest a kept journal still names, must not be recorded done
    with no journal checked."""
    import time

    from tb_footprint_plugin.engine.bucket_state import JOURNAL

    url, _pol = _logdir(s3_bucket, tmp_path, n=1)
    ostore = ObjectStore(url)
    rfs = ostore.rfs
    for shard, run in (("1/2", "run-a"), ("2/2", "run-b")):
        book = bucket_ledger.BucketLedger(ostore, "archive", shard)
        book.mark(run, "reducing", original_size_bytes=10)
        book.flush()  # its batch's step
    rfs.ops.put(rfs.path(f"{JOURNAL}/op-x.json"),
                json.dumps({"op": "op-x", "runs": [{"run": "run-b", "op": "op-b", "files": []}]}).encode())
    later = time.time() + 5
    manifests = [{"run": r, "kind": "reduce", "outcome": "verified", "finished_at": later, "bytes_before": 10,
                  "bytes_after": 5, "op_id": f"op-{r[-1]}"} for r in ("run-a", "run-b")]
    real, calls = bucket_ledger._journals_left, []

    def flaky(r):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("simulated: the journal listing failed")
        return real(r)

    monkeypatch.setattr(bucket_ledger, "_journals_left", flaky)
    assert bucket_ledger.settle_stale(ostore, lambda: manifests, mine=True) == []  # before the fix: ["run-b"]
    assert len(calls) == 2
    assert len(_keys(url, f"{STATE}/ledger-inflight/")) == 2  # both stay: the next start looks again
    assert {r: e["state"] for r, e in _batch(url)["runs"].items()} == {"run-a": "reducing", "run-b": "reducing"}
