"""``storage.blobstore.BlobStore`` on every store: posix, moto S3, the GCS emulator, Azurite.

Each test names one promise of the module: verified round trips (lone and packed, zstd or raw per
blob), claims checked while streaming, read-back before any ref exists, damaged or hostile index
objects skipped and named, corrupted objects found and refused, request economy of packs, and
``forget`` (prune and repack) crash-safe at every step.
"""
import hashlib
import io
import json
import os
import tracemalloc

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import BlobError, StoreError
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobSource, BlobStore
from tb_footprint_plugin.storage.store import CountingStore, DeleteResult, Store, StoreFailure, Wrapper
from tb_footprint_plugin.storage.store_posix import PosixStore





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
    assert counting.counts.calls["put"] == 1 and ref.form == "zst"  # its index row only: no data
    assert counting.counts.bytes_up < 1000 and len(keys(store, "data")) == 1
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
    items = [src(LONE_TEXT), src(LONE_RANDOM), src(b"small and packed " * 20), src(os.urandom(3000))]
    with pytest.raises(Crash):
        BlobStore(store, failpoint=crash_at(step)).add(items)
    fresh = BlobStore(store)
    assert not any(fresh.has(i.sha) for i in items) and keys(store, "index") == []
    refs = fresh.add(items)  # lone leftovers are adopted once they read back as the blobs
    assert [r.sha for r in refs] == [i.sha for i in items]
    again = BlobStore(store)
    for i in items:
        with i.open() as f:
            assert read(again, i.sha) == f.read()


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
    assert bad.sha == "" and ref.sha in str(bad)  # the store's fault, not the blob's: named, not blamed
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


# --- packs ---------------------------------------------------------------------------------------------
def small_items(n: int, seed: int = 0) -> list:
    out = []
    for i in range(n):
        if i % 2:
            data = f"run {seed}.{i}: loss=0.{i:04d} ".encode() * (20 + i % 50)  # compresses
        else:
            data = hashlib.sha256(f"{seed}.{i}".encode()).digest() * (30 + i % 60)  # does not
            data = bytes(b ^ (k * 131 % 251) for k, b in enumerate(data))
        out.append(src(data))
    return out


def original(item: BlobSource) -> bytes:
    with item.open() as f:
        return f.read()


def test_200_small_blobs_cost_one_pack_and_a_handful_of_requests(store):
    items = small_items(200) + [src(b"")]
    counting = CountingStore(store)
    bs = BlobStore(counting)
    refs = bs.add(items)
    calls = counting.counts.to_dict()
    assert len({r.key for r in refs}) == 1 and refs[0].key.endswith(".pack") and refs[0].key.startswith("data/")
    assert {r.form for r in refs[:200]} == {"zst", "raw"}  # decided per blob
    assert calls["put"] == 3, calls  # the pending note, the pack and the index
    assert calls["delete"] == 1, calls  # the note, once the index is durable (R24 F5)
    assert calls["requests"] <= 8, calls  # + one listing of index/, one or two reads of the pack back
    fresh = BlobStore(store)
    for item in items[::10] + items[-2:]:  # a sample: each read is a request or two
        assert read(fresh, item.sha) == original(item)
    st = fresh.stats()
    assert (st["blobs"], st["objects"], st["packs"], st["index_objects"]) == (201, 1, 1, 1)
    assert bs.stats()["index_objects"] == 1  # the instance that wrote it counts it too


def test_empty_originals_round_trip_even_alone(store):
    empty = src(b"")
    [ref] = BlobStore(store, pack_below=0).add([empty])  # never a lone object: some stores drop empty ones
    assert (ref.size, ref.length, ref.form) == (0, 0, "raw") and ref.key.endswith(".pack")
    fresh = BlobStore(store)
    assert read(fresh, empty.sha) == b"" and fresh.check(empty.sha) is None


def test_adding_200_stored_small_blobs_again_reads_their_pack_once(store):
    items = small_items(200)
    BlobStore(store).add(items)
    counting = CountingStore(store)
    refs = BlobStore(counting).add(items)  # each read back before its ref is handed out again
    calls = counting.counts.to_dict()
    assert len({r.key for r in refs}) == 1 and len(keys(store, "data")) == 1
    assert calls["put"] == 1 and calls["read"] <= 3, calls  # an index read, one or two of the pack
    assert calls["requests"] <= 6, calls


def test_packs_close_at_their_target_size_and_duplicates_are_stored_once(store):
    items = small_items(40)
    bs = BlobStore(store, pack_target=6_000)
    refs = bs.add(items + items[:5])
    assert refs[40:] == refs[:5]
    packs = {r.key for r in refs}
    assert 3 <= len(packs) == len(keys(store, "data")), packs
    fresh = BlobStore(store)
    for item in items[::3]:
        assert read(fresh, item.sha) == original(item)


def test_a_corrupted_pack_is_found_for_the_blob_hit_and_only_that_blob(store):
    items = small_items(6)
    refs = BlobStore(store).add(items)
    hit = refs[3]
    raw = bytearray(store.read_all(hit.key))
    raw[hit.offset + hit.length // 2] ^= 0x10
    store.put(hit.key, bytes(raw))
    bs = BlobStore(store)
    bad = bs.check(hit.sha)
    assert bad is not None and bad.code == BlobError.CORRUPT and bad.key == hit.key
    with pytest.raises(BlobFailure):
        read(bs, hit.sha)
    for item in items[:3] + items[4:]:
        assert bs.check(item.sha) is None and read(bs, item.sha) == original(item)


# --- forget (prune, repack) ------------------------------------------------------------------------------
def data_keys_needed(bs: BlobStore) -> list:
    return sorted({c.key for r in bs.refs() for c in bs.candidates(r.sha)})


def assert_all_readable(store: Store, items) -> None:
    bs = BlobStore(store)
    for item in items:
        assert read(bs, item.sha) == original(item)  # (open verifies the sha256 at the end too)


def test_forget_deletes_lone_objects_and_dead_packs_and_rewrites_only_their_index(store):
    lone = [src(LONE_TEXT), src(LONE_RANDOM)]
    pack_a, pack_b = small_items(5, seed=1), small_items(5, seed=2)
    bs = BlobStore(store)
    bs.add(lone)
    bs.add(pack_a)
    index_b = set(keys(store, "index"))
    bs.add(pack_b)
    index_b = set(keys(store, "index")) - index_b
    assert len(keys(store, "index")) == 3 and len(keys(store, "data")) == 4
    fig = BlobStore(store).forget([lone[0].sha] + [i.sha for i in pack_a])
    # the lone blobs' index object is written anew without lone[0], pack_a's goes (nothing of it
    # lives), pack_b's is not touched
    assert (fig["forgotten"], fig["objects_deleted"], fig["index_written"], fig["index_deleted"]) == (6, 2, 1, 2)
    assert fig["packs_repacked"] == 0 and fig["blocked_by_damaged_index"] == [] and fig["index_kept"] == 1
    after = BlobStore(store)
    assert not after.has(lone[0].sha) and not any(after.has(i.sha) for i in pack_a)
    assert keys(store, "data") == data_keys_needed(after) and len(keys(store, "index")) == 2
    assert index_b <= set(keys(store, "index"))
    assert_all_readable(store, [lone[1]] + pack_b)


def test_forget_repacks_a_pack_whose_live_share_fell_below_half(store):
    items = small_items(10)
    refs = BlobStore(store).add(items)
    old_pack = refs[0].key
    keep = [items[i] for i in (1, 4, 8)]
    fig = BlobStore(store).forget([i.sha for i in items if i not in keep])
    assert (fig["packs_repacked"], fig["blobs_moved"], fig["objects_deleted"]) == (1, 3, 1)
    bs = BlobStore(store)
    [new_pack] = data_keys_needed(bs)
    assert new_pack != old_pack and keys(store, "data") == [new_pack]
    assert_all_readable(store, keep)
    # a pack still more than half alive is left as it is
    fig = BlobStore(store).forget([keep[0].sha])
    assert fig["packs_repacked"] == 0 and keys(store, "data") == [new_pack]
    assert_all_readable(store, keep[1:])


class FailingIndexPut(Wrapper):
    """The store fails the write of any index object (a crash while the index is written)."""

    def put(self, key, data, **kw):
        if key.startswith("index/"):
            raise Crash(key)
        return self.inner.put(key, data, **kw)


FORGET_STEPS = ["forget.pack_written", "index put fails", "forget.index_written", "forget.old_index_deleted",
                "forget.objects_deleted"]


@pytest.mark.parametrize("step", FORGET_STEPS)
def test_a_crash_at_any_step_of_forget_keeps_every_live_blob_and_the_next_forget_finishes(store, step):
    lone = [src(LONE_TEXT[:9000]), src(LONE_RANDOM[:7000])]  # lone below: pack_below is 4 kB here
    items = small_items(10)
    bs = BlobStore(store, pack_below=4096)
    bs.add(lone)
    bs.add(items)
    keep = [lone[1]] + [items[i] for i in (2, 7)]
    drop = [lone[0].sha] + [i.sha for i in items if i not in keep]
    with pytest.raises(Crash):
        if step == "index put fails":
            BlobStore(FailingIndexPut(store)).forget(drop)
        else:
            BlobStore(store, failpoint=crash_at(step)).forget(drop)
    assert_all_readable(store, keep)
    BlobStore(store).forget(drop, grace_seconds=3600)  # a young leftover (the new pack) stays...
    assert_all_readable(store, keep)
    fig = BlobStore(store).forget([], grace_seconds=0)  # ...until its grace is over
    assert fig["blocked_by_damaged_index"] == []
    after = BlobStore(store)
    assert sorted(r.sha for r in after.refs()) == sorted(i.sha for i in keep)
    assert keys(store, "data") == data_keys_needed(after) and len(keys(store, "index")) == 1
    assert_all_readable(store, keep)


def test_leftovers_of_an_unfinished_add_are_deleted_only_after_their_grace(store):
    kept = small_items(3, seed=5)
    BlobStore(store).add(kept)
    with pytest.raises(Crash):
        BlobStore(store, failpoint=crash_at("add.verified")).add([src(LONE_RANDOM)] + small_items(3, seed=6))
    assert len(keys(store, "data")) == 3
    fig = BlobStore(store).forget([])
    assert (fig["leftovers_kept_young"], fig["leftovers_deleted"]) == (2, 0) and len(keys(store, "data")) == 3
    fig = BlobStore(store).forget([], grace_seconds=0)
    assert (fig["leftovers_deleted"], fig["objects_deleted"]) == (2, 2)
    assert keys(store, "data") == data_keys_needed(BlobStore(store))
    assert_all_readable(store, kept)


class NoTimes(Wrapper):
    """A store whose listing says no time (mtime 0.0, as ``storage.remote`` gives when a listing
    carries none): an object's age is unknown."""

    def list(self, prefix: str = ""):
        import dataclasses

        for e in self.inner.list(prefix):
            yield dataclasses.replace(e, mtime=0.0)


def test_a_leftover_whose_age_the_listing_does_not_say_is_kept_as_young(store):
    """A listing without times must not make every unindexed object look decades old: an add in
    another process between its upload and its index would lose its object to the grace rule."""
    kept = small_items(3, seed=7)
    BlobStore(store).add(kept)
    with pytest.raises(Crash):
        BlobStore(store, failpoint=crash_at("add.verified")).add([src(LONE_RANDOM)] + small_items(3, seed=8))
    fig = BlobStore(NoTimes(store)).forget([])
    assert (fig["leftovers_kept_young"], fig["leftovers_deleted"]) == (2, 0) and len(keys(store, "data")) == 3
    assert_all_readable(store, kept)


def test_forget_deletes_nothing_while_an_index_object_is_damaged(store):
    items = small_items(4)
    BlobStore(store).add(items)
    with pytest.raises(Crash):  # a leftover, old enough with grace 0
        BlobStore(store, failpoint=crash_at("add.verified")).add([src(LONE_RANDOM)])
    store.put(f"index/{'3' * 32}.json", b"\x00garbage")
    before = (keys(store, "data"), keys(store, "index"))
    fig = BlobStore(store).forget([items[0].sha], grace_seconds=0)
    assert fig["blocked_by_damaged_index"] == [f"index/{'3' * 32}.json"]
    assert (fig["objects_deleted"], fig["index_written"], fig["forgotten"]) == (0, 0, 0)
    assert (keys(store, "data"), keys(store, "index")) == before
    assert_all_readable(store, items)


def test_a_sha_listed_twice_reads_from_the_good_copy_and_forget_keeps_it(store):
    """A planted (or stale) index entry puts a live blob at the wrong place, listed first: open and
    check take the copy that verifies, and a repack does not count on the bad copy."""
    p_items, q_items = small_items(10, seed=7), small_items(10, seed=8)
    bs = BlobStore(store)
    p_refs, q_refs = bs.add(p_items), bs.add(q_items)
    x = p_refs[1]
    wrong = q_refs[1]  # a real pack, other bytes
    store.put(f"index/{'0' * 32}.json", json.dumps(
        {"v": 1, "blobs": [[x.sha, x.size, wrong.key, wrong.offset, wrong.length, wrong.form]]}).encode())
    fresh = BlobStore(store)
    assert fresh.candidates(x.sha)[0].key == wrong.key and len(fresh.candidates(x.sha)) == 2
    assert fresh.check(x.sha) is None and read(fresh, x.sha) == original(p_items[1])
    fig = BlobStore(store).forget([i.sha for k, i in enumerate(p_items) if k not in (1, 2)], grace_seconds=0)
    assert fig["packs_repacked"] == 1 and fig["blobs_moved"] == 2
    assert x.key not in keys(store, "data")
    assert_all_readable(store, [p_items[1], p_items[2]] + q_items)


def test_a_blob_two_owners_added_stays_until_both_forgot_it(store):
    """Two vaults offloading to one prefix share blobs (content addressing): one vault's purge must
    not take the other's only copy."""
    shared = [src(LONE_TEXT)] + small_items(4, seed=9)
    own = small_items(2, seed=10)
    BlobStore(store, owner="vault-a").add(shared)
    counting = CountingStore(store)
    b = BlobStore(counting, owner="vault-b")
    b.add(shared + own)
    assert counting.counts.calls["put"] == 3  # its note, b's own pack, one index with its claims: no shared bytes
    bs = BlobStore(store)
    assert all(bs.owners(i.sha) == {"vault-a", "vault-b"} for i in shared)
    fig = BlobStore(store, owner="vault-a").forget([i.sha for i in shared + own])
    assert (fig["forgotten"], fig["released"], fig["objects_deleted"]) == (0, 5, 0)
    assert_all_readable(store, shared + own)
    assert all(BlobStore(store).owners(i.sha) == {"vault-b"} for i in shared)
    fig = BlobStore(store, owner="vault-b").forget([i.sha for i in shared])
    assert (fig["forgotten"], fig["released"]) == (5, 0)
    after = BlobStore(store)
    assert not any(after.has(i.sha) for i in shared)
    assert keys(store, "data") == data_keys_needed(after)
    assert_all_readable(store, own)
    with pytest.raises(ValueError):
        BlobStore(store, owner="../evil\n")


class FailingDataPut(Wrapper):
    """The store refuses every data object (a full quota, a lost connection)."""

    def put(self, key, data, **kw):
        raise StoreFailure(StoreError.NO_SPACE, key, "quota exceeded")

    def put_file(self, key, src, **kw):
        raise StoreFailure(StoreError.NO_SPACE, key, "quota exceeded")


@pytest.mark.parametrize("size", ["lone", "small"])
def test_a_store_failure_during_add_is_coded_blames_no_blob_and_indexes_nothing(store, size):
    item = src(LONE_TEXT if size == "lone" else b"small original")
    with pytest.raises(BlobFailure) as ei:
        BlobStore(FailingDataPut(store)).add([item])
    e = ei.value
    # the first write refused is the pending note made before any data object (R24 F5)
    assert e.code == BlobError.STORE and e.sha == "" and e.key.startswith(("data/", "pending/")) and "no_space" in str(e)
    assert keys(store) == []


def test_a_long_add_indexes_what_it_verified_as_it_goes(store, monkeypatch):
    """Objects of an add that runs for long must not sit unindexed until they look like old
    leftovers to a forget elsewhere: every INDEX_EVERY seconds the verified ones are indexed."""
    monkeypatch.setattr(blobstore, "INDEX_EVERY", -1.0)  # every second object triggers an index
    items = [src(LONE_TEXT), src(LONE_RANDOM), src(LONE_TEXT[::-1] + b"!")]
    with pytest.raises(Crash):
        BlobStore(store, failpoint=crash_at("add.verified")).add(items)
    fresh = BlobStore(store)
    assert [fresh.has(i.sha) for i in items] == [True, True, False]
    assert read(fresh, items[1].sha) == LONE_RANDOM and len(keys(store, "index")) == 1
    refs = BlobStore(store).add(items)  # and the retry completes
    assert [r.sha for r in refs] == [i.sha for i in items] and len(keys(store, "index")) == 2


class FailingIndexRead(Wrapper):
    """The store fails reads of index objects (a lost connection)."""

    def read_all(self, key, limit=None):
        if key.startswith("index/"):
            raise StoreFailure(StoreError.STORE_ERROR, key, "connection reset")
        return self.inner.read_all(key, limit)

    def open_read(self, key, size=None):  # index objects are read as a stream
        if key.startswith("index/"):
            raise StoreFailure(StoreError.STORE_ERROR, key, "connection reset")
        return self.inner.open_read(key, size)


def test_an_index_that_cannot_be_read_now_is_a_store_failure_and_a_huge_one_is_damaged(store, monkeypatch):
    [ref] = BlobStore(store).add([src(LONE_RANDOM)])
    monkeypatch.setattr(blobstore, "_PARSED", {})  # another process: it never read nor wrote this index
    with pytest.raises(BlobFailure) as ei:  # never a partial index that says the blob is not there
        BlobStore(FailingIndexRead(store)).has(ref.sha)
    assert ei.value.code == BlobError.STORE and ei.value.key.startswith("index/")
    store.put(f"index/{'4' * 32}.json", b" " * 5000)
    monkeypatch.setattr(blobstore, "INDEX_READ_LIMIT", 4096)  # a planted huge index is not read whole
    bs = BlobStore(store)
    assert [d["key"] for d in bs.damaged_index()] == [f"index/{'4' * 32}.json"] and bs.has(ref.sha)


def test_forget_keeps_an_object_an_add_elsewhere_indexed_while_it_ran(store):
    """Another process adds a blob back (adopting its object) after forget listed the index:
    forget looks at the index once more before deleting, and keeps that object."""
    item = src(LONE_TEXT)
    BlobStore(store).add([item])
    concurrent = []

    def add_elsewhere(step: str) -> None:
        if step == "forget.old_index_deleted":
            concurrent.extend(BlobStore(store).add([item]))

    fig = BlobStore(store, failpoint=add_elsewhere).forget([item.sha])
    assert concurrent and fig["forgotten"] == 1 and fig.get("kept_for_new_index") == 1
    bs = BlobStore(store)
    assert bs.check(item.sha) is None and read(bs, item.sha) == LONE_TEXT


@pytest.mark.parametrize("which", ["packed", "lone"])
def test_a_stored_copy_damaged_since_is_not_handed_out_again(store, which):
    """add returns only verified refs: a blob stored already is read back before its ref is
    returned again; a packed one is stored anew, a lone one (its name is taken) is refused."""
    item = src(b"small original, packed " * 30) if which == "packed" else src(LONE_TEXT)
    [ref] = BlobStore(store).add([item])
    raw = bytearray(store.read_all(ref.key))
    raw[ref.offset + ref.length // 2] ^= 0x04
    store.put(ref.key, bytes(raw))
    bs = BlobStore(store)
    if which == "packed":
        [again] = bs.add([item])
        assert again.key != ref.key and bs.check(item.sha) is None
        fresh = BlobStore(store)
        assert len(fresh.candidates(item.sha)) == 2 and read(fresh, item.sha) == original(item)
    else:
        with pytest.raises(BlobFailure) as ei:
            bs.add([item])
        assert ei.value.code == BlobError.CORRUPT and ei.value.key == ref.key


def test_forget_of_nothing_merges_many_index_objects_into_one(store, monkeypatch):
    monkeypatch.setattr(blobstore, "CONSOLIDATE_ABOVE", 3)
    items = small_items(5, seed=11)
    for item in items:
        BlobStore(store, owner="v").add([item])  # one index object per add
    assert len(keys(store, "index")) == 5
    fig = BlobStore(store).forget([])
    assert (fig["index_written"], fig["index_deleted"], fig["forgotten"], fig["objects_deleted"]) == (1, 5, 0, 0)
    assert len(keys(store, "index")) == 1
    bs = BlobStore(store)
    assert all(bs.owners(i.sha) == {"v"} for i in items)  # the owners are kept in the merged index
    assert_all_readable(store, items)


def test_objects_are_private_where_the_store_keeps_modes(tmp_path):
    root = tmp_path / "vault"
    root.mkdir()
    store = PosixStore(str(root))
    BlobStore(store).add([src(LONE_TEXT), src(b"small one")])
    written = [e for e in store.list("")]
    assert len(written) == 3  # a lone blob, a pack, an index
    for e in written:
        assert (os.stat(root / e.key).st_mode & 0o777) == 0o600, e.key


def test_an_add_from_a_stale_cache_lists_its_blob_again_so_a_forget_elsewhere_keeps_it(store):
    """A process whose cached index still lists a blob hands out its ref while another process
    forgets that blob: the add's own index row makes the forget keep the object."""
    item = src(LONE_RANDOM)
    BlobStore(store).add([item])
    stale = BlobStore(store)
    assert stale.has(item.sha)  # loaded before the forget below
    got = []

    def add_from_stale_cache(step: str) -> None:
        if step == "forget.old_index_deleted":
            got.extend(stale.add([item]))

    fig = BlobStore(store, failpoint=add_from_stale_cache).forget([item.sha])
    assert got and fig.get("kept_for_new_index") == 1
    assert BlobStore(store).check(got[0].sha) is None and read(BlobStore(store), item.sha) == LONE_RANDOM


def test_a_symlink_where_a_blob_belongs_is_never_followed(tmp_path):
    root = tmp_path / "vault"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(LONE_RANDOM)  # bytes that would even hash right
    store = PosixStore(str(root))
    [ref] = BlobStore(store).add([src(LONE_RANDOM)])
    os.unlink(root / ref.key)
    os.symlink(secret, root / ref.key)
    bs = BlobStore(store)
    bad = bs.check(ref.sha)
    assert bad is not None and bad.code == BlobError.STORE and "symlink" in str(bad)
    with pytest.raises(BlobFailure):
        read(bs, ref.sha)
    with pytest.raises(BlobFailure) as ei:  # nor adopted as the blob by a new add
        bs.add([src(LONE_RANDOM)])
    assert ei.value.key == ref.key
    assert os.path.islink(root / ref.key) and secret.read_bytes() == LONE_RANDOM


class FailingDataRead(Wrapper):
    """The store fails every read of a data object (a connection lost after the upload)."""

    def read_range(self, key, start, end):
        if key.startswith("data/"):
            raise StoreFailure(StoreError.STORE_ERROR, key, "connection reset")
        return self.inner.read_range(key, start, end)


def test_a_read_back_that_fails_gives_no_ref_and_deletes_nothing(store):
    """Only bytes proven wrong are deleted: an object another add may have adopted meanwhile is
    not removed because this process could not read it."""
    item = src(LONE_RANDOM)
    with pytest.raises(BlobFailure) as ei:
        BlobStore(FailingDataRead(store)).add([item])
    assert ei.value.code == BlobError.STORE and keys(store, "index") == []
    assert keys(store, "data") == [f"data/{item.sha[:2]}/{item.sha}"]
    [ref] = BlobStore(store).add([item])  # adopted once it reads back
    assert BlobStore(store).check(ref.sha) is None


class IndexDeleteRefused(Wrapper):
    """The store refuses to delete index objects (a permission, a retention lock)."""

    def delete(self, keys, versions=None):
        keys = list(keys)
        stay = [k for k in keys if k.startswith("index/")]
        done = {r.key: r for r in self.inner.delete([k for k in keys if k not in stay], versions)}
        return [done.get(k) or DeleteResult(key=k, ok=False, code=StoreError.PERMISSION, message="refused")
                for k in keys]


def test_an_old_index_that_cannot_be_deleted_keeps_the_objects_it_lists(store):
    lone, items = src(LONE_RANDOM), small_items(6, seed=12)
    BlobStore(store).add([lone] + items)
    fig = BlobStore(IndexDeleteRefused(store)).forget([lone.sha] + [i.sha for i in items[:5]])
    assert fig["delete_failed"] and fig["objects_deleted"] == 0  # the old index still lists them
    assert_all_readable(store, [lone] + items)  # whatever the union lists reads back
    fig = BlobStore(store).forget([lone.sha] + [i.sha for i in items[:5]])  # the next forget finishes
    after = BlobStore(store)
    assert sorted(r.sha for r in after.refs()) == [items[5].sha]
    assert keys(store, "data") == data_keys_needed(after)


def test_an_index_is_split_so_that_every_index_object_stays_readable(store, monkeypatch):
    """A merged index of many blobs is written as several objects, none beyond what a reader
    reads whole (one that is too large would be skipped as damaged and hide its blobs)."""
    monkeypatch.setattr(blobstore, "INDEX_ROWS", 3)
    items = small_items(10, seed=13)
    BlobStore(store).add(items)
    assert len(keys(store, "index")) == 4
    before = set(keys(store, "index"))
    fig = BlobStore(store).forget([items[0].sha])
    # only the object listing items[0] is written anew (2 rows): the 3 others stay as they are
    assert fig["forgotten"] == 1 and fig["index_written"] == 1 and fig["index_deleted"] == 1
    assert len(keys(store, "index")) == 4 and len(before & set(keys(store, "index"))) == 3
    bs = BlobStore(store)
    assert bs.damaged_index() == [] and sorted(r.sha for r in bs.refs()) == sorted(i.sha for i in items[1:])
    assert_all_readable(store, items[1:])
    assert BlobStore(store).forget([])["index_written"] == 0  # split is not "too many" to merge again
