"""One reduce driver for every store (issue #26, item 2): what a local reduce did and a bucket's
did not, now that ``api.reduce`` drives both through one sequence — a ledger's settled runs
skipped as ``Skip.LEDGER_DONE``, progress callbacks, a cancel token, Ctrl-C settled at once
(``api.Interrupted``). On the moto S3 server; each test fails on the two-driver code before.
"""
import pytest

from test_bucket_state_schema import STATE, _keys, _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery, Skip
from tb_footprint_plugin.engine import bucket_reduce, faults
from tb_footprint_plugin.engine.context import CancelToken

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _data(s3_bucket) -> dict:
    """rel key -> sha256 of the logdir's objects, our state left out."""
    return {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(STATE + "/")}


def test_a_rerun_with_its_ledger_skips_the_runs_it_settled_as_ledger_done(s3_bucket, tmp_path):
    url, pol = _logdir(s3_bucket, tmp_path, n=3)
    first = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default")
    assert [o.status for o in first.outcomes] == ["verified"] * 3, [o.reason for o in first.outcomes]
    assert first.ledger_path.startswith(url + "/.tb-footprint/ledgers/")
    seen = []
    again = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default",
                              on_outcome=seen.append)
    # before: each run planned again and said "nothing to remove" (Skip.NOTHING), as if the
    # ledger had never been read
    assert {(o.status, o.code) for o in again.outcomes} == {("skipped", Skip.LEDGER_DONE)}, \
        [(o.run, o.code, o.reason) for o in again.outcomes]
    assert sorted(o.run for o in seen) == sorted(o.run for o in first.outcomes)
    assert all("in the ledger " + again.ledger_path in o.reason for o in again.outcomes)
    b = api.status(url)["batch"]
    assert b["counts"] == {"done": 3} and b["problems"] == [], b
    # the runs' done entries are the first batch's (the skips wrote nothing over them)
    assert {r: e["op_id"] for r, e in b["runs"].items()} == {o.run: o.op_id for o in first.outcomes}


def test_a_bucket_reduce_reports_progress_per_run(s3_bucket, tmp_path):
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    calls = []
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0,
                            progress=lambda run, step, frac: calls.append((run, step, frac)))
    runs = sorted(o.run for o in rep.outcomes)
    assert [o.status for o in rep.outcomes] == ["verified"] * 2
    # before: no call at all on a bucket
    assert sorted(c for c in calls if c[1] == "start") == [(r, "start", 0.0) for r in runs]
    assert sorted(c for c in calls if c[1] == "done") == [(r, "done", 1.0) for r in runs]


def test_a_cancel_stops_a_bucket_batch_before_its_next_transaction(s3_bucket, tmp_path, monkeypatch):
    url, pol = _logdir(s3_bucket, tmp_path, n=3)
    before = _data(s3_bucket)
    monkeypatch.setattr(bucket_reduce, "BATCH_RUNS", 1)  # each drop-only run a batch of its own
    token = CancelToken()
    done = []

    def first_then_cancel(o):
        done.append(o)
        token.cancel()  # the button of the tab, or the job's cancel

    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, cancel=token,
                            on_outcome=first_then_cancel, ledger="default")
    by_status = sorted((o.status, o.code) for o in rep.outcomes)
    # before: the cancel was not looked at and every run was reduced
    assert by_status == [("skipped", Skip.CANCELLED)] * 2 + [("verified", None)], \
        [(o.run, o.status, o.reason) for o in rep.outcomes]
    (reduced,) = [o.run for o in rep.outcomes if o.status == "verified"]
    after = _data(s3_bucket)
    untouched = {k: v for k, v in before.items() if not k.startswith(reduced + "/")}
    assert {k: after.get(k) for k in untouched} == untouched  # the cancelled runs: every object as it was
    assert _keys(url, f"{STATE}/journal/") == [] and _keys(url, f"{STATE}/ledger-inflight/") == []
    # the cancelled runs were never marked in flight: the ledger names the one run it reduced
    assert api.status(url)["batch"]["counts"] == {"done": 1}


def test_ctrl_c_in_a_bucket_transaction_puts_the_run_back_at_once(s3_bucket, tmp_path):
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    before = _data(s3_bucket)

    def ctrl_c():
        raise KeyboardInterrupt

    faults.arm("reduce.backup", ctrl_c)  # every backup of the batch made, nothing deleted yet
    with pytest.raises(api.Interrupted) as e:  # before: a bare KeyboardInterrupt, the journal left
        api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default")
    faults.disarm_all()
    assert [r["action"] for r in e.value.settled] == [Recovery.ROLLED_BACK], e.value.settled
    assert _data(s3_bucket) == before  # every original as it was, byte for byte
    assert _keys(url, f"{STATE}/journal/") == [] and _keys(url, f"{STATE}/ledger-inflight/") == []
    assert api.recover_logdir(url) == []  # nothing left for the next start
    b = api.status(url)["batch"]
    assert b["counts"] == {"pending": 2} and {e["code"] for e in b["runs"].values()} == {"rolled_back"}, b
    # and a rerun reduces both
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default")
    assert [o.status for o in rep.outcomes] == ["verified"] * 2


def test_the_question_before_a_resumed_bucket_reduce_skips_what_the_reduce_skips(s3_bucket, tmp_path):
    """The CLI's question counts a resumed batch by ``ledger_skips``: on a bucket it now reads the
    shard's ledger folder as the reduce does, so both name the same run (here one another worker
    of the shard recorded done at its present size)."""
    from tb_footprint_plugin.engine.bucket_ledger import BucketLedger
    from tb_footprint_plugin.storage.store_object import ObjectStore

    url, pol = _logdir(s3_bucket, tmp_path, n=3)
    rp = next(r for r in api.plan(url, pol, quiet_period=0).runs if r.actions)
    other = BucketLedger(ObjectStore(url), "drop-profiles", "0/1")
    other.mark(rp.run, "done", original_size_bytes=rp.bytes_before, after_size_bytes=rp.bytes_before, op_id="elsewhere")
    other.flush()  # its batch's end
    q = api.plan(url, pol, quiet_period=0)
    assert api.ledger_skips(q, pol, ledger="default", shard=(0, 1)) == [rp.run]  # before: [] on a bucket
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, shard=(0, 1))
    assert {o.run: (o.status, o.code) for o in rep.outcomes} == {
        o.run: ("skipped", Skip.LEDGER_DONE) if o.run == rp.run else ("verified", None) for o in rep.outcomes}
