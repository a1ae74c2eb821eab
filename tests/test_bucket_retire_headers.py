"""Review R26 F5 for a bucket retirement with a local blob folder (``--backup-dir``): every object of
the retired run goes to the folder (bytes only), so its entry records its Content-Type and user
metadata (from the listing on GCS and Azure, the GET that reads it on S3) and its restore uploads it
with them, on all three stores. Before, GCS and Azure objects came back with the store's defaults."""
import itertools

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome

from test_bucket_blob_rollback_releases import prof_logdir  # noqa: F401 - the fixture
from test_bucket_object_headers import WANT, headers, set_headers
from test_objstore import _logdir_hashes

_n = itertools.count()
RUN = "prof/r0"


def test_a_retired_run_comes_back_from_a_blob_folder_with_each_objects_headers(bucket, prof_logdir, tmp_path):
    prefix = f"rt{next(_n)}"
    url = bucket.upload(prof_logdir, prefix)
    keys = sorted(k for k in _logdir_hashes(bucket, prefix) if k.startswith(RUN + "/"))
    for k in keys:
        set_headers(bucket, f"{prefix}/{k}", *WANT)
    before = _logdir_hashes(bucket, prefix)
    folder = str(tmp_path / "blobs")
    (o,) = api.retire(url, api.retire_rule(runs=[RUN]), dry_run=False, backup_dir=folder, quiet_period=0).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    assert not [k for k in _logdir_hashes(bucket, prefix) if k.startswith(RUN + "/")]  # gone from the bucket
    (back,) = api.restore(url, run=RUN, backup_dir=folder)
    assert back.status == Outcome.RESTORED, back.reason
    assert _logdir_hashes(bucket, prefix) == before
    assert {k: headers(bucket, f"{prefix}/{k}") for k in keys} == {k: WANT for k in keys}
