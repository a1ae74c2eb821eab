"""A cancel reaches a bucket's retirement (report B, left open): ``bucket_retire.retire_run``
takes a ``cancel`` and honours it at the driver's points, but ``front_bucket.retire_run`` passed
none, so ``api.retire`` on a bucket ignored a cancel inside a run that a disk's retirement honours.
A cancel after the copies (before the commit record) now puts every object back, as on a disk.
"""
from __future__ import annotations

import pytest

from test_retire_txn import STATE, _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import CancelToken

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_cancel_before_the_commit_record_rolls_a_bucket_retire_back(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")

    def user():
        return {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(STATE)}

    before = user()
    token = CancelToken()
    faults.arm("retire.move", token.cancel)  # every copy made, nothing deleted yet
    rep = api.retire(url, api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0, cancel=token)
    [o] = rep.outcomes
    assert o.status == Outcome.ROLLED_BACK and "cancelled" in o.reason, o.to_dict()
    assert o.code == Failure.INTERRUPTED, o.to_dict()  # as a disk's cancelled run is coded
    assert user() == before  # every object of the run where it was, byte for byte
    left = {k for k in s3_bucket.hashes("logs") if k.startswith(STATE)}
    assert not [k for k in left if o.op_id in k], sorted(left)  # no copy, manifest, journal or lock of it
    assert api.retired(url) == []
