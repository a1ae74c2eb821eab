"""Review R26 F5: a bucket logdir whose backups went to a local blob folder (``--backup-dir``) got each
object's bytes back but neither its Content-Type nor its user metadata (the folder keeps bytes only);
8dbbf26 made the restore say so. Now the reduce records both in each manifest entry (from the listing
on GCS and Azure, from the GET that reads the object for its blob on S3: no request more) and the
restore uploads the original with them, on all three stores: the sentence is gone. What no form
records (Content-Encoding, Content-Disposition, Content-Language, Cache-Control, tags) is named.
A manifest of an older version records none: said, object by object. A record larger than the
store takes (untrusted input) is never sent: the object goes back with the store's defaults, and
the outcome notes ``bad_record``. Server-side copies (no ``--backup-dir``) keep every header and
their restore says nothing of it."""
import itertools
import json

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome

from test_bucket_blob_rollback_releases import DROP, STATE, prof_logdir  # noqa: F401 - the fixture
from test_bucket_object_headers import headers, set_headers
from test_objstore import _logdir_hashes

pytestmark = pytest.mark.usefixtures("disarm_faults")

_n = itertools.count()
SAID = "Content-Type and user metadata"
WANT = ("application/x-custom", {"team": "vision"})
RUN = "prof/r0"


def _reduce(url, backup_dir):
    (o,) = api.reduce_logdir(url, backup_dir=backup_dir, policy=DROP, dry_run=False, quiet_period=0,
                             runs=[RUN], verify_backends=("python",)).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    return o


def _restore(url, backup_dir):
    (r,) = api.restore(url, run=RUN, backup_dir=backup_dir)
    assert r.status == Outcome.RESTORED, r.reason
    return r


def _dropped(bucket, prefix):
    return sorted(k for k in _logdir_hashes(bucket, prefix) if k.startswith(RUN + "/") and k.endswith(".xplane.pb"))


def _edit_manifest(bucket, prefix, op_id, edit):
    """Rewrite the operation's manifest object in the bucket's vault, each file entry through ``edit``."""
    path = bucket.key(f"{prefix}/{STATE}/manifests/{op_id}.json")
    doc = json.loads(bucket.fs.cat_file(path))
    for f in doc["files"]:
        edit(f)
    bucket.fs.pipe_file(path, json.dumps(doc, sort_keys=True).encode())
    bucket.fs.invalidate_cache()


def test_a_restore_from_a_blob_folder_gives_back_each_objects_content_type_and_metadata(bucket, prof_logdir, tmp_path):
    prefix = f"md{next(_n)}"
    url = bucket.upload(prof_logdir, prefix)
    keys = _dropped(bucket, prefix)
    for k in keys:
        set_headers(bucket, f"{prefix}/{k}", *WANT)
    before = _logdir_hashes(bucket, prefix)
    o = _reduce(url, str(tmp_path / "blobs"))
    (m,) = [m for m in api.operations(url, backup_dir=str(tmp_path / "blobs")) if m.get("op_id") == o.op_id]
    assert {f["path"]: f.get("headers") for f in m["files"]} == \
        {k: {"content_type": WANT[0], "metadata": WANT[1]} for k in keys}
    r = _restore(url, str(tmp_path / "blobs"))
    assert _logdir_hashes(bucket, prefix) == before
    assert {k: headers(bucket, f"{prefix}/{k}") for k in keys} == {k: WANT for k in keys}
    assert "not given back" not in r.reason, r.reason
    # what no form records is named, exactly
    assert "Content-Encoding, Content-Disposition, Content-Language, Cache-Control and tags are not recorded" \
        in r.reason, r.reason


def test_a_manifest_that_records_no_headers_is_said_object_by_object(s3_bucket, prof_logdir, tmp_path):
    prefix = f"md{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    for k in _dropped(s3_bucket, prefix):
        set_headers(s3_bucket, f"{prefix}/{k}", *WANT)
    o = _reduce(url, str(tmp_path / "blobs"))
    _edit_manifest(s3_bucket, prefix, o.op_id, lambda f: f.pop("headers", None))  # as an older version wrote it
    r = _restore(url, str(tmp_path / "blobs"))
    assert "6 object(s) have no Content-Type or user metadata recorded (a manifest of an older version" in r.reason \
        and "theirs are not given back (the store's defaults)" in r.reason, r.reason


def test_a_recorded_metadata_larger_than_the_store_takes_is_never_sent(s3_bucket, prof_logdir, tmp_path):
    prefix = f"md{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    keys = _dropped(s3_bucket, prefix)
    for k in keys:
        set_headers(s3_bucket, f"{prefix}/{k}", *WANT)
    before = _logdir_hashes(s3_bucket, prefix)
    o = _reduce(url, str(tmp_path / "blobs"))
    huge = {"content_type": "application/x-custom", "metadata": {"team": "v" * 3000}}  # S3 takes 2 KB
    _edit_manifest(s3_bucket, prefix, o.op_id, lambda f: f.__setitem__("headers", huge))
    r = _restore(url, str(tmp_path / "blobs"))
    assert _logdir_hashes(s3_bucket, prefix) == before  # the bytes go back all the same
    assert {k: headers(s3_bucket, f"{prefix}/{k}")[1] for k in keys} == {k: {} for k in keys}  # nothing sent
    assert {f["path"] for f in r.findings if f["code"] == Finding.BAD_RECORD} == set(keys), r.findings
    assert "record headers that are not sent" in r.reason and "more than the 2048 the store takes" in r.reason, r.reason


def test_a_restore_from_server_side_copies_keeps_them_and_says_nothing_of_it(s3_bucket, prof_logdir):
    prefix = f"md{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    keys = _dropped(s3_bucket, prefix)
    for k in keys:
        set_headers(s3_bucket, f"{prefix}/{k}", *WANT)
    _reduce(url, None)
    r = _restore(url, None)
    assert {k: headers(s3_bucket, f"{prefix}/{k}") for k in keys} == {k: WANT for k in keys}
    assert SAID not in r.reason, r.reason
