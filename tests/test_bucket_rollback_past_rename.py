"""A bucket reduction that fails past its swap's first rename (trace.json -> trace.json.gz made) is
rolled back with the run as it was: the original back and the new name's copy gone (review R8 F5,
a regression of 98c3f13: ``rollback_entry``'s ``_verdicts`` refactor collected the renamed files
but no longer deleted their new-name objects, so TensorBoard listed the trace twice and nothing
named the .gz). No other test rolls a bucket reduction back past a rename."""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.bucket_state import BucketTxnError

from test_objstore import _logdir_hashes, demo_logdir  # noqa: F401


def test_a_rollback_past_the_commit_leaves_the_run_as_it_was(s3_bucket, demo_logdir):  # noqa: F811
    url = s3_bucket.upload(demo_logdir, "logs")
    before = _logdir_hashes(s3_bucket, "logs")
    plan = api.plan(url, "lossless", quiet_period=0)
    rp = next(r for r in plan.runs if not r.skipped and any(
        str(getattr(a, "new_path", "") or "").endswith(".gz") or a.kind in ("compress", "gzip") for a in r.actions))

    def fail():  # a store failure right after the first object was swapped (its .gz made)
        raise BucketTxnError(Failure.STORE_ERROR, "the store failed mid-swap")

    faults.arm("reduce.mid_swap", fail)
    try:
        rep = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=[rp.run])
    finally:
        faults.disarm_all()
    (o,) = [x for x in rep.outcomes if x.run == rp.run]
    assert o.status == "rolled_back", (o.status, o.reason)
    now = {k: v for k, v in _logdir_hashes(s3_bucket, "logs").items() if not k.startswith(".tb-footprint/")}
    user_before = {k: v for k, v in before.items() if not k.startswith(".tb-footprint/")}
    assert now == user_before, sorted(set(now) ^ set(user_before))
