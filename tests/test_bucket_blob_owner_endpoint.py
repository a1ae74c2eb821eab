"""Review R11 G2 (same root): a bucket logdir's claims in a local folder of blobs were owned by a hash
of protocol://bucket/prefix alone, so the same URL on two S3 endpoints (MinIO and AWS, two moto servers
here) sharing one --backup-dir was ONE owner: one's purge dropped the other's claims on common bytes and
its only copies went. The owner now names where the logdir stands, endpoint included
(``engine.bucket_identity``)."""
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome

from objstore_servers import Bucket, start_moto
from test_bucket_prefix_moved_blob_folder import DROP, _blobs, prof_logdir  # noqa: F401


def _user(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(".tb-footprint/")}


def test_the_same_url_on_two_endpoints_never_frees_the_others_blobs(s3_bucket, prof_logdir, tmp_path, monkeypatch):
    vault = str(tmp_path / "V")
    url = s3_bucket.upload(prof_logdir, "runs")
    before = _user(s3_bucket, "runs")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
    kept = _blobs(vault)
    assert kept
    other = start_moto()  # another service: the same bucket name and prefix there, the same bytes
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", other.endpoint)
        monkeypatch.setenv("S3_ENDPOINT", other.endpoint)
        twin = Bucket.__new__(Bucket)
        import fsspec
        twin.server, twin.scheme, twin.name = other, "s3", s3_bucket.name
        twin.fs = fsspec.filesystem("s3", skip_instance_cache=True, endpoint_url=other.endpoint)
        twin.fs.mkdir(twin.name)
        assert twin.upload(prof_logdir, "runs") == url
        rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                                verify_backends=("python",))
        assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
        api.purge(url, yes=True, backup_dir=vault)  # the twin's own backups only
        assert kept <= _blobs(vault), "a purge on the other endpoint freed this one's only copies"
    finally:
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_bucket.server.endpoint)
        monkeypatch.setenv("S3_ENDPOINT", s3_bucket.server.endpoint)
        other.stop()
    outs = api.restore(url, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs") == before
