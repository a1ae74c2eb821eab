"""A bucket reduce honours every option a disk reduce does (issue #26, item 2: "one rule, every
store"): a per-run ``timeout``, progress steps with the ledger's ``verifying`` mark, ``jobs``, a
custom ``--ledger`` path, ``vault_format``, and ``finished_at`` as the commit record's time. On the
object-store servers of ``tests/objstore_servers.py``; each test fails on the code before.
"""
import time

import pytest

from test_bucket_state_schema import DROP_PROFILES, STATE, _keys, _logdir
from test_objstore import _write_rewrite_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")

_n = iter(range(10_000))


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    """``torch/resnet``: two PyTorch traces the lossless policy gzips (a rewrite transaction);
    ``exp/hist``: an event file the archive policy rewrites."""
    return _write_rewrite_logdir(tmp_path_factory.mktemp("options") / "logs")


def _data(bucket, prefix) -> dict:
    """rel key -> sha256 of the logdir's objects, our state left out."""
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(STATE + "/")}


def _nothing_left(url) -> None:
    """No journal, lock, backup, temporary key or manifest of ours left behind."""
    for folder in ("journal", "locks", "manifests", "tmp"):
        assert _keys(url, f"{STATE}/{folder}/") == [], folder
    assert api.operations(url) == []


# -- 1. timeout -----------------------------------------------------------------------------------
def test_a_rewrite_transaction_past_its_timeout_is_rolled_back_and_said_so(s3_bucket, rewrite_logdir):
    prefix = f"t{next(_n)}"
    url = s3_bucket.upload(rewrite_logdir, prefix)
    before = _data(s3_bucket, prefix)
    faults.arm("reduce.backup", lambda: time.sleep(1.0))  # its backups take longer than its timeout
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"],
                             verify_backends=("python",), timeout=0.5).outcomes
    # before: the timeout was ignored and the run reduced
    assert (o.status, o.code) == (Outcome.ROLLED_BACK, Failure.ERROR), (o.status, o.reason)
    assert "timed out before the commit point" in o.reason  # as a disk says it
    assert _data(s3_bucket, prefix) == before
    _nothing_left(url)


def test_a_drop_batch_past_its_timeout_rolls_back_every_run_and_leaves_nothing(bucket, tmp_path):
    url, pol = _logdir(bucket, tmp_path, n=3)
    before = _data(bucket, "logs")
    faults.arm("reduce.backup", lambda: time.sleep(1.0))  # the batch's backups made, past the timeout
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, timeout=0.5, ledger="default")
    assert [(o.status, o.code) for o in rep.outcomes] == [(Outcome.ROLLED_BACK, Failure.ERROR)] * 3, \
        [(o.status, o.reason) for o in rep.outcomes]
    assert all("timed out before the commit point" in o.reason for o in rep.outcomes)
    assert _data(bucket, "logs") == before
    _nothing_left(url)
    assert api.status(url)["batch"]["counts"] == {"failed": 3}
    # within its timeout the same batch reduces
    faults.disarm_all()
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, timeout=600)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 3
