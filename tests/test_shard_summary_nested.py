"""Review R10 F3 (the shard summary): a planted ``manifests-summary.json`` of nested brackets (200 kB
of ``[``, far under the read limit) made json raise RecursionError, which bucket_history's summary
reader did not catch (ValueError only): every shard partition of the bucket (``plan --shard``,
``reduce --shard``, ``api.shard_sizes``) failed naming no file, and, planted while a shard batch
ran, the batch's note of its manifests raised past its commit. The summary is untrusted: read
around (``storage.jsondoc.loads``)."""
import os

import boto3
import pytest

from test_shard_emptied_runs_bucket import SHARDS, _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_history, faults

NESTED = b"[" * 200000


def _plant(s3_bucket):
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    s3.put_object(Bucket=s3_bucket.name, Key=f"logs/.tb-footprint/{bucket_history.SUMMARY}", Body=NESTED)


def test_a_summary_nested_too_deep_is_read_around(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    sizes = api.shard_sizes([url])
    rep = api.reduce_logdir(url, dry_run=False, runs=["tb7"], verify_backends=("python",), quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.reason for o in rep.outcomes]
    _plant(s3_bucket)
    assert api.shard_sizes([url]) == sizes  # read around: the manifests decide
    again = api.reduce_logdir(url, dry_run=False, shard=(0, 2), verify_backends=("python",), quiet_period=0)
    assert all(o.status in ("verified", "skipped") for o in again.outcomes), [o.reason for o in again.outcomes]


@pytest.mark.usefixtures("disarm_faults")
def test_a_summary_planted_during_a_shard_batch_leaves_it_verified(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")

    def plant():
        faults.disarm_all()
        _plant(s3_bucket)
    faults.arm("reduce.swap_record", plant)  # after the partition was read, before the batch's note
    rep = api.reduce_logdir(url, dry_run=False, shard=(0, SHARDS), verify_backends=("python",), quiet_period=0)
    assert rep.outcomes and all(o.status == "verified" for o in rep.outcomes), \
        [(o.run, o.status, o.code, o.reason) for o in rep.outcomes]
    assert not api.status(url)["unfinished_operations"]
