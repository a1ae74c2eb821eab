"""A restore of several recorded operations (a vault elsewhere: ``bucket_op_records``) lists this
logdir's records once for its operations' re-judging, not once per operation (report_B's cost:
``marked_afresh`` made one LIST of ``.tb-footprint/ops`` per restored operation)."""
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_objects

from test_bucket_prefix_moved_blob_folder import prof_logdir  # noqa: F401
from test_bucket_prefix_moved_copies import _user
from test_bucket_vault_of_other_logdirs import _reduce_and_retire


def test_a_restore_lists_the_records_once_for_its_operations(s3_bucket, prof_logdir, monkeypatch):
    url = s3_bucket.upload(prof_logdir, "runs")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runs")
    _reduce_and_retire(url, vault)
    real = bucket_objects.BucketState.listing
    lists = []

    def listing(self, prefix, *args, **kw):
        if prefix.endswith("/.tb-footprint/ops"):
            lists.append(prefix)
        return real(self, prefix, *args, **kw)
    monkeypatch.setattr(bucket_objects.BucketState, "listing", listing)
    outs = api.restore(url, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs") == before
    # one for the catalogue's reading, one for the restore's two operations
    assert len(lists) == 2, lists
