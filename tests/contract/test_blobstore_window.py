"""``BlobStore.open`` of packed blobs through a pack window, on every store (posix, moto S3, the
GCS emulator, Azurite): a restore checks then copies a run's small files in pack order, and each
open was a ranged read of its own (bench/vault.py: 96 GETs to restore 42 blobs of two packs).
The window must never let ``check`` answer from memory, and expires."""
import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from test_blobstore import original, read, small_items
from tb_footprint_plugin.codes import BlobError
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobStore
from tb_footprint_plugin.storage.store import CountingStore


def test_reading_a_packs_small_blobs_in_order_twice_costs_a_read_per_window_not_one_per_blob(store):
    items = small_items(60)
    BlobStore(store).add(items)
    counting = CountingStore(store)
    bs = BlobStore(counting)
    bs.reload()
    before = counting.counts.to_dict().get("read", 0)  # the index
    for _ in range(2):  # restore's check pass, then its copy pass
        for item in items:
            assert read(bs, item.sha) == original(item)
    reads = counting.counts.to_dict()["read"] - before
    assert reads <= 2, reads  # was 120: one ranged read per blob per pass


def test_check_reads_the_store_now_and_open_sees_damage_once_the_window_expired(store, monkeypatch):
    items = small_items(6)
    refs = BlobStore(store).add(items)
    bs = BlobStore(store)
    assert read(bs, items[0].sha) == original(items[0])  # the window now holds the whole pack
    hit = refs[3]
    raw = bytearray(store.read_all(hit.key))
    raw[hit.offset + hit.length // 2] ^= 0x10
    store.put(hit.key, bytes(raw))
    bad = bs.check(hit.sha)
    assert bad is not None and bad.code == BlobError.CORRUPT and bad.key == hit.key
    monkeypatch.setattr(blobstore, "WINDOW_SECONDS", 0.0)
    with pytest.raises(BlobFailure) as ei:
        read(bs, hit.sha)
    assert ei.value.code == BlobError.CORRUPT
    for item in items[:3] + items[4:]:
        assert read(bs, item.sha) == original(item)


def test_a_forget_drops_the_window(store):
    items = small_items(8)
    BlobStore(store).add(items)
    bs = BlobStore(store)
    assert read(bs, items[1].sha) == original(items[1])
    bs.forget([i.sha for i in items], grace_seconds=0)
    with pytest.raises(BlobFailure) as ei:
        read(bs, items[2].sha)
    assert ei.value.code == BlobError.MISSING


def test_threads_opening_blobs_of_different_packs_each_get_their_own_bytes(store):
    import random
    import threading

    items = small_items(40)
    refs = BlobStore(store, pack_target=6_000).add(items)
    assert len({r.key for r in refs}) >= 3
    bs = BlobStore(store)
    wrong = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(30):
            item = rng.choice(items)
            if read(bs, item.sha) != original(item):
                wrong.append(item.sha)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
