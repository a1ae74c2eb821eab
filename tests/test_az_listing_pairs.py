"""Azure's listing puts each blob's own name back on adlfs's details of it (adlfs strips a trailing
'/', which tells a folder marker from a file). It zipped the blobs with adlfs's private
``_details`` output, trusting one detail a blob in the same order: another adlfs ordering or
dropping one would have named a marker's detail as a file, or a file's size under another's key,
silently. Each pair must now name the same blob (the name without its trailing '/'), else the
listing fails, coded ``list_failed`` and naming the prefix: nothing is listed under a wrong name."""
from __future__ import annotations

import pytest

from objstore_servers import Bucket
from test_retire_bucket_folder_markers import _put_raw
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import remote
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


def _infos(*names):
    return [{"name": n.rstrip("/"), "size": 0 if n.endswith("/") else 5, "type": "file"} for n in names]


def test_each_detail_is_put_under_its_own_blobs_name():
    blobs = ["logs/m/", "logs/m/a.txt"]
    out = remote.az_named("c", blobs, _infos(*("c/" + b for b in blobs)), "c/logs")
    assert sorted(out) == ["c/logs/m/", "c/logs/m/a.txt"]
    assert out["c/logs/m/"]["size"] == 0 and out["c/logs/m/a.txt"]["size"] == 5


@pytest.mark.parametrize("infos", [
    _infos("c/logs/m/a.txt", "c/logs/m/"),  # another order
    _infos("c/logs/m/"),  # one detail missing
    _infos("c/logs/m/", "c/logs/m/a.txt", "c/logs/m/b.txt"),  # one too many
], ids=["reordered", "fewer", "more"])
def test_details_that_name_other_blobs_fail_the_listing_coded(infos):
    with pytest.raises(remote.RemoteError) as e:
        remote.az_named("c", ["logs/m/", "logs/m/a.txt"], infos, "c/logs")
    assert e.value.code == StoreError.LIST_FAILED and "az://c/logs" in str(e.value), str(e.value)


def test_on_azurite_a_listing_whose_details_come_back_reordered_fails_coded(objstore_pool, tmp_path, monkeypatch):
    bucket = Bucket(objstore_pool.get("az"))
    (tmp_path / "src" / "m").mkdir(parents=True)
    (tmp_path / "src" / "m" / "a.txt").write_bytes(b"hello")
    (tmp_path / "src" / "m" / "b.txt").write_bytes(b"bye")
    url = bucket.upload(tmp_path / "src", "logs")
    _put_raw(bucket, "logs/m/plugins/")  # a folder marker, 0 bytes
    store = ObjectStore(url)
    # in order (adlfs 2026.8): the marker is no file, the files under their own names
    assert {e.key: e.size for e in store.list()} == {"m/a.txt": 5, "m/b.txt": 3}
    fs = store.rfs.fs
    real = fs._details

    async def reordered(contents, *a, **kw):
        return list(reversed(await real(contents, *a, **kw)))
    monkeypatch.setattr(fs, "_details", reordered)
    with pytest.raises(StoreFailure) as e:
        list(store.list())
    assert e.value.code == StoreError.LIST_FAILED and f"az://{bucket.name}/logs" in str(e.value), str(e.value)
