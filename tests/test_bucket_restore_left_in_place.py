"""A restore removes only what the reduction made, and says what it left: a compressed copy the
reduction wrote that was written again since stays as it is, and the outcome says so in the
words a disk's restore uses (``engine.putback.left_said``). A bucket's restore left it silently."""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome

from test_objstore import _write_rewrite_logdir


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("left") / "logs")


def _objects(bucket):
    return {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}


def test_a_compressed_copy_written_again_is_left_and_said(bucket, rewrite_logdir):
    url = bucket.upload(rewrite_logdir, "logs")
    before = _objects(bucket)
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"]).outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    made = sorted(k for k in _objects(bucket) if k not in before)
    assert made and all(k.endswith(".gz") for k in made), made
    bucket.fs.pipe_file(bucket.key("logs/" + made[0]), b"written again since the reduce")

    (r,) = api.restore(url)
    assert r.status == Outcome.RESTORED, r.reason
    now = _objects(bucket)
    assert {k: now[k] for k in before} == before  # every original back
    assert sorted(set(now) - set(before)) == [made[0]]  # the other copy removed, this one left
    assert bucket.fs.cat_file(bucket.key("logs/" + made[0])) == b"written again since the reduce"
    assert made[0] not in r.removed_files and made[1:] == sorted(r.removed_files), r.removed_files
    assert "1 file(s) changed since the reduction were left in place" in r.reason, r.reason
