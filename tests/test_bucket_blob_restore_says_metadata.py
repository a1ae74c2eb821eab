"""Review R26 F5: a bucket logdir whose backups went to a local blob folder (``--backup-dir``) gets each
object's bytes back but neither its Content-Type nor its user metadata (the folder keeps bytes only), and
the restore said only that times and modes are not kept. It now says so; server-side copies (no
``--backup-dir``) keep both, and their restore says nothing of it. On moto."""
import itertools

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome

from test_bucket_blob_rollback_releases import DROP, prof_logdir  # noqa: F401 - the fixture

_n = itertools.count()
SAID = "Content-Type and user metadata"


def _round_trip(url, backup_dir):
    (o,) = api.reduce_logdir(url, backup_dir=backup_dir, policy=DROP, dry_run=False, quiet_period=0,
                             runs=["prof/r0"], verify_backends=("python",)).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    (r,) = api.restore(url, run="prof/r0", backup_dir=backup_dir)
    assert r.status == Outcome.RESTORED, r.reason
    return r.reason


def test_a_restore_from_a_blob_folder_says_the_objects_headers_are_not_given_back(s3_bucket, prof_logdir, tmp_path):
    reason = _round_trip(s3_bucket.upload(prof_logdir, f"md{next(_n)}"), str(tmp_path / "blobs"))
    assert SAID in reason and "not given back" in reason, reason


def test_a_restore_from_server_side_copies_does_not(s3_bucket, prof_logdir):
    reason = _round_trip(s3_bucket.upload(prof_logdir, f"md{next(_n)}"), None)
    assert SAID not in reason, reason
