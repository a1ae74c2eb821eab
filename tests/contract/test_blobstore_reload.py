"""``BlobStore.reload`` reads only the index objects it has not parsed yet, on every store (posix,
moto S3, the GCS emulator, Azurite). Each offload takes a fresh ``BlobStore`` and each ``add``
writes an index object: the k-th offload of a batch read all k index objects back (100 runs:
5,050 reads). An index object is written once and never changed; one that changes anyway (its
listing's version) is read again, and one deleted is no longer served."""

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from test_blobstore import keys, src
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store import CountingStore


def _item(i: int):
    return src(f"small original {i} ".encode() * (10 + i))


def test_a_batch_of_adds_each_through_a_fresh_blobstore_reads_each_index_object_once(store):
    counting = CountingStore(store)
    n = 30
    for i in range(n):
        BlobStore(counting).add([_item(i)])  # as offload does: remote_vault.blobstore(url, fresh=True)
    reads = counting.counts.to_dict()["read"]
    assert reads <= 2 * n, reads  # a pack read back and one new index object per add; was n(n+1)/2 + n = 495
    fresh = BlobStore(store)
    assert all(fresh.has(_item(i).sha) for i in range(n)) and fresh.stats()["index_objects"] == n


def test_an_index_object_rewritten_in_place_is_read_again(store):
    item = _item(1)
    BlobStore(store).add([item])
    assert BlobStore(store).has(item.sha)  # parsed and remembered
    [key] = keys(store, "index")
    store.put(key, b"not an index")
    bs = BlobStore(store)
    assert not bs.has(item.sha) and [d["key"] for d in bs.damaged_index()] == [key]


def test_a_deleted_index_object_is_no_longer_served_from_memory(store):
    item = _item(2)
    BlobStore(store).add([item])
    assert BlobStore(store).has(item.sha)
    [key] = keys(store, "index")
    store.delete([key])
    assert not BlobStore(store).has(item.sha)
    other = _item(3)
    BlobStore(store).add([other])
    bs = BlobStore(store)
    assert bs.has(other.sha) and not bs.has(item.sha)
