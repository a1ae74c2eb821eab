"""A restore on a bucket whose reduced in-place object was deleted since the reduce (review R12 F4).

The archive policy rewrites ``exp/hist``'s event file in place (the reduced bytes under the
original's key). When that reduced object is gone by the time of the restore — deleted before the
restore looked, or between its look and its conditional put (S3 and Azure answer a put conditional
on a version of a missing key with a failed precondition) — the original goes back create-only,
as a dropped file's does. Before, the restore called it a conflict: the file "exists again", left
in the vault and named ``not_restored``, which was wrong on both counts.
"""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import bucket_objects

from test_objstore import _logdir_hashes, _write_rewrite_logdir

RUN = "exp/hist"


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("reduced-gone") / "logs")


def _reduce(bucket, rewrite_logdir, prefix):
    url = bucket.upload(rewrite_logdir, prefix)
    before = _logdir_hashes(bucket, prefix)
    (o,) = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=[RUN]).outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    ev = next(k for k in before if k.startswith(RUN + "/") and "tfevents" in k)
    assert _logdir_hashes(bucket, prefix)[ev] != before[ev]
    return url, before, ev, o.op_id


def _restored_whole(bucket, url, prefix, before, op_id):
    (o,) = api.restore(url, run=RUN)
    assert o.status == Outcome.RESTORED, (o.status, o.reason)
    assert "exist again" not in o.reason, o.reason
    assert _logdir_hashes(bucket, prefix) == before
    (m,) = [m for m in api.operations(url) if m.get("op_id") == op_id]
    assert not m.get("not_restored"), m


def test_a_reduced_object_deleted_before_the_restore_gets_its_original_back(s3_bucket, rewrite_logdir):
    url, before, ev, op_id = _reduce(s3_bucket, rewrite_logdir, "gone-before")
    s3_bucket.fs.rm(s3_bucket.key(f"gone-before/{ev}"))
    s3_bucket.fs.invalidate_cache()
    _restored_whole(s3_bucket, url, "gone-before", before, op_id)


@pytest.mark.parametrize("scheme", ["s3", "az"])
def test_a_reduced_object_deleted_between_the_look_and_the_put_gets_its_original_back(
        objstore_pool, rewrite_logdir, monkeypatch, scheme):
    from objstore_servers import Bucket

    bucket = Bucket(objstore_pool.get(scheme))
    prefix = f"gone-{scheme}"
    url, before, ev, op_id = _reduce(bucket, rewrite_logdir, prefix)
    real_head = bucket_objects.BucketState.head
    deleted = []

    def head(self, key, *a, **kw):
        info = real_head(self, key, *a, **kw)
        if key.endswith("/" + ev) and info is not None and not deleted:
            # the restore's look saw the reduced object; it goes before the conditional put
            bucket.fs.rm(bucket.key(f"{prefix}/{ev}"))
            bucket.fs.invalidate_cache()
            deleted.append(key)
        return info

    monkeypatch.setattr(bucket_objects.BucketState, "head", head)
    _restored_whole(bucket, url, prefix, before, op_id)
    assert deleted
