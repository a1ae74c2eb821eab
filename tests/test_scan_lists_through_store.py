"""A bucket scan lists through the ``Store`` interface (issue #26): ``scan.scanner`` makes the
logdir's one paginated listing with ``ObjectStore.list`` (every key, as the bucket engine lists),
and a vault in another bucket's with it too, never ``RemoteFS.list_tree``; the same one listing
request, no conditional client built for a scan that only lists, a missing bucket still
``NotADirectoryError``."""
import pytest

from objstore_servers import Bucket
from test_shards import make_logdir
from tb_footprint_plugin.scan import scanner
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore


@pytest.fixture
def listings(monkeypatch):
    """Each ``ObjectStore.list`` call (where, prefix, every_key); ``RemoteFS.list_tree`` fails the test."""
    calls = []
    orig = ObjectStore.list

    def spy(self, prefix="", *, every_key=False):
        calls.append((self.location, prefix, every_key))
        return orig(self, prefix, every_key=every_key)

    def past_the_store(*_a, **_k):
        raise AssertionError("a bucket listed past the Store (RemoteFS.list_tree)")

    monkeypatch.setattr(ObjectStore, "list", spy)
    monkeypatch.setattr(RemoteFS, "list_tree", past_the_store)
    return calls


def test_a_bucket_scan_lists_through_the_store_in_one_request(s3_bucket, tmp_path, listings, monkeypatch):
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 3), "logs")
    monkeypatch.setattr(RemoteFS, "ops", property(lambda self: pytest.fail("a scan built a conditional client")))
    fp = scanner.scan(url, use_cache=False, write_cache=False)
    assert listings == [(url, "", True)]
    assert fp.requests["list"] == 1, fp.requests
    assert sorted(r.name for r in fp.runs) == ["exp0/run000", "exp1/run001", "exp2/run002"]


def test_a_vault_in_another_bucket_is_listed_through_the_store_too(s3_bucket, objstore_pool, tmp_path, listings):
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 1), "logs")
    other = Bucket(objstore_pool.get("s3"))
    other.fs.pipe_file(f"{other.key('vault')}/blobs/ab/abcd", b"x" * 1000)
    other.fs.invalidate_cache()
    fp = scanner.scan(url, backup_dir=other.url("vault"), use_cache=False, write_cache=False)
    assert fp.vault_bytes == 1000
    assert fp.listed_vault == (other.key("vault"), 1000)
    assert [c[0] for c in listings] == [url, other.url("vault")]


def test_a_missing_bucket_is_no_logdir(s3_bucket, listings):
    with pytest.raises(NotADirectoryError, match="no such bucket"):
        scanner.scan("s3://tbfp-no-such-bucket-j6/logs", use_cache=False, write_cache=False)
