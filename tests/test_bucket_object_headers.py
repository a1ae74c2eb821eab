"""Review R26 F5: a bucket object comes back with its Content-Type and user metadata, on S3 (moto),
GCS (gcp-storage-emulator) and Azure (Azurite).

An event file the archive policy rewrites in place carries Content-Type ``application/x-custom`` and
the user metadata ``{"team": "vision"}``. Before, the reduced object was written without either
(the staged upload set none, and the copy over the original kept the staged object's), and a
restore from a local blob folder (``--backup-dir``) uploaded the original's bytes alone. Now the
reduce records both in the manifest entry (from the listing on GCS and Azure, a head of the
rewritten original on S3) and writes the reduced object with them, in both backup forms; a restore
from server-side copies keeps them (the copies do). Each is read back through the store's own
client (not the tool's), after the reduce and after the restore; a restore from a blob folder
uploads the original with what its manifest entry recorded.
"""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome

from test_objstore import _logdir_hashes, _write_rewrite_logdir

pytestmark = pytest.mark.usefixtures("disarm_faults")

RUN = "exp/hist"
WANT = ("application/x-custom", {"team": "vision"})


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("headers") / "logs")


def _az_blob(bucket, key: str):
    from azure.storage.blob import BlobServiceClient

    svc = BlobServiceClient.from_connection_string(bucket.server.env["AZURE_STORAGE_CONNECTION_STRING"])
    return svc.get_blob_client(bucket.name, key)


def set_headers(bucket, key: str, content_type: str, metadata: dict) -> None:
    """Write the object at ``key`` (under the bucket) again, same bytes, with these headers, through
    the store's own client."""
    path = bucket.key(key)
    data = bucket.fs.cat_file(path)
    if bucket.scheme == "s3":
        bucket.fs.pipe_file(path, data, ContentType=content_type, Metadata=metadata)
    elif bucket.scheme == "gs":
        bucket.fs.pipe_file(path, data, content_type=content_type, metadata=metadata)
    else:
        from azure.storage.blob import ContentSettings

        _az_blob(bucket, key).upload_blob(data, overwrite=True, metadata=metadata,
                                          content_settings=ContentSettings(content_type=content_type))
    bucket.fs.invalidate_cache()
    assert headers(bucket, key) == (content_type, metadata)


def headers(bucket, key: str):
    """(Content-Type, user metadata) of the object at ``key``, as the store's own client reads them."""
    path = bucket.key(key)
    bucket.fs.invalidate_cache()
    if bucket.scheme == "s3":
        r = bucket.fs.call_s3("head_object", Bucket=bucket.name, Key=key)
        return r.get("ContentType"), dict(r.get("Metadata") or {})
    if bucket.scheme == "gs":
        info = bucket.fs.info(path)
        return info.get("contentType"), dict(info.get("metadata") or {})
    p = _az_blob(bucket, key).get_blob_properties()
    return p.content_settings.content_type, dict(p.metadata or {})


def _reduced(bucket, rewrite_logdir, prefix, backup_dir):
    """The logdir uploaded at ``prefix``, its event file of ``RUN`` given ``WANT``'s headers, then
    reduced (archive rewrites that file): its key and the hashes before; the reduced object and the
    manifest entry are checked to carry the headers."""
    url = bucket.upload(rewrite_logdir, prefix)
    ev = next(k for k in _logdir_hashes(bucket, prefix) if k.startswith(RUN + "/") and "tfevents" in k)
    set_headers(bucket, f"{prefix}/{ev}", *WANT)
    before = _logdir_hashes(bucket, prefix)
    (o,) = api.reduce_logdir(url, backup_dir=backup_dir, policy="archive", dry_run=False, quiet_period=0,
                             runs=[RUN]).outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    assert _logdir_hashes(bucket, prefix)[ev] != before[ev]  # rewritten
    assert headers(bucket, f"{prefix}/{ev}") == WANT  # while reduced
    (m,) = [m for m in api.operations(url, backup_dir=backup_dir) if m.get("op_id") == o.op_id]
    (f,) = [f for f in m["files"] if f["path"] == ev]
    assert f["headers"] == {"content_type": WANT[0], "metadata": WANT[1]}, f
    return url, ev, before


def test_a_rewritten_object_keeps_its_content_type_and_metadata_reduced_and_restored_from_copies(
        bucket, rewrite_logdir):
    url, ev, before = _reduced(bucket, rewrite_logdir, "hd-copies", None)
    (r,) = api.restore(url, run=RUN)
    assert r.status == Outcome.RESTORED, (r.status, r.reason)
    assert _logdir_hashes(bucket, "hd-copies") == before
    assert headers(bucket, f"hd-copies/{ev}") == WANT  # the backup copy kept them, and its copy back
    assert "Content-Type" not in r.reason, r.reason


def test_a_rewritten_object_keeps_its_content_type_and_metadata_reduced_and_restored_from_a_blob_folder(
        bucket, rewrite_logdir, tmp_path):
    backup_dir = str(tmp_path / "blobs")
    url, ev, before = _reduced(bucket, rewrite_logdir, "hd-blobs", backup_dir)
    (r,) = api.restore(url, run=RUN, backup_dir=backup_dir)
    assert r.status == Outcome.RESTORED, (r.status, r.reason)
    assert _logdir_hashes(bucket, "hd-blobs") == before
    assert headers(bucket, f"hd-blobs/{ev}") == WANT  # uploaded with what its manifest entry recorded
    assert "not given back" not in r.reason, r.reason
