"""``BlobStore.forget`` rewrites only the index objects it changes (issue #27 item 2, restic's
prune), on every store: posix, moto S3, the GCS emulator, Azurite.

A forget of a few blobs of a store with many index objects writes anew only the objects that
list a blob it drops, releases (its owners change) or moves (a repack), deletes only those, and
leaves every other index object as it was (same key, same version); without ``sweep`` it does not
list the data objects either. A crash between the new index objects and the deletion of the old
ones keeps every blob readable, and an old index object that cannot be deleted keeps every data
object it lists, whatever the grace.
"""
import hashlib
import json
import random
import io

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store import DeleteResult, Store, Wrapper


def src(data: bytes) -> BlobSource:
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda: io.BytesIO(data))


def small_items(n: int, seed: int) -> list:
    return [src(hashlib.sha256(f"{seed}.{i}".encode()).digest() * (20 + i)) for i in range(n)]


def original(item: BlobSource) -> bytes:
    with item.open() as f:
        return f.read()


def versions(store: Store, prefix: str) -> dict:
    return {e.key: e.version for e in store.list(prefix)}


def assert_all_readable(store: Store, items) -> None:
    bs = BlobStore(store)
    for item in items:
        with bs.open(item.sha) as f:
            assert f.read() == original(item)


class Recording(Wrapper):
    """Records the keys written and deleted and the prefixes listed."""

    def __init__(self, inner: Store):
        super().__init__(inner)
        self.puts, self.deletes, self.lists = [], [], []

    def put(self, key, data, **kw):
        self.puts.append(key)
        return self.inner.put(key, data, **kw)

    def put_file(self, key, src, **kw):
        self.puts.append(key)
        return self.inner.put_file(key, src, **kw)

    def delete(self, keys, versions=None):
        keys = list(keys)
        self.deletes.extend(keys)
        return self.inner.delete(keys, versions)

    def list(self, prefix: str = ""):
        self.lists.append(prefix)
        yield from self.inner.list(prefix)


def many_adds(store: Store, n: int = 12, per: int = 3) -> list:
    """``n`` adds of ``per`` small blobs each: a pack and an index object each."""
    groups = []
    for g in range(n):
        items = small_items(per, seed=100 + g)
        BlobStore(store).add(items)
        groups.append(items)
    return groups


@pytest.mark.parametrize("sweep", [False, True])
def test_a_forget_of_one_blob_rewrites_only_the_index_object_listing_it(store, sweep):
    groups = many_adds(store)
    index_before = versions(store, "index")
    assert len(index_before) == 12
    hit = groups[5][1]
    listing_it = {k for k in index_before if hit.sha in store.read_all(k).decode()}
    assert len(listing_it) == 1
    rec = Recording(store)
    fig = BlobStore(rec).forget([hit.sha], sweep=sweep)
    assert (fig["forgotten"], fig["index_written"], fig["index_deleted"], fig["index_kept"]) == (1, 1, 1, 11)
    # 2 of 3 live: no repack; the range let go from the pack that stays recorded (review R25 F5)
    assert [k for k in rec.puts if not k.startswith(("index/", "gaps/"))] == []
    assert len([k for k in rec.puts if k.startswith("gaps/")]) == 1, rec.puts
    puts = [k for k in rec.puts if k.startswith("index/")]
    assert len(puts) == 1 and [k for k in rec.deletes if k.startswith("index/")] == sorted(listing_it)
    assert ("data" in rec.lists) == sweep  # no listing of every data object unless asked
    after = versions(store, "index")
    unchanged = {k: v for k, v in index_before.items() if k not in listing_it}
    assert {k: after.get(k) for k in unchanged} == unchanged  # the 11 others: same objects, same versions
    assert set(after) == set(unchanged) | set(puts)
    bs = BlobStore(store)
    assert not bs.has(hit.sha)
    assert_all_readable(store, [i for g in groups for i in g if i is not hit])


def test_a_release_of_a_shared_blob_rewrites_only_the_objects_listing_it(store):
    groups = [small_items(3, seed=200 + g) for g in range(6)]
    for items in groups:
        BlobStore(store, owner="vault-a").add(items)
    shared = groups[2][0]
    BlobStore(store, owner="vault-b").add([shared])  # b's claim: a row in an index object of its own
    index_before = versions(store, "index")
    listing_it = {k for k in index_before if shared.sha in store.read_all(k).decode()}
    assert len(listing_it) == 2
    rec = Recording(store)
    fig = BlobStore(rec, owner="vault-a").forget([shared.sha], sweep=False)
    assert (fig["forgotten"], fig["released"], fig["objects_deleted"]) == (0, 1, 0)
    assert sorted(k for k in rec.deletes if k.startswith("index/")) == sorted(listing_it)
    after = versions(store, "index")
    assert all(after.get(k) == v for k, v in index_before.items() if k not in listing_it)
    bs = BlobStore(store)
    assert bs.owners(shared.sha) == {"vault-b"}
    assert all(bs.owners(i.sha) == {"vault-a"} for g in groups for i in g if i is not shared)
    assert_all_readable(store, [i for g in groups for i in g])


def test_a_repack_rewrites_only_the_objects_listing_the_moved_blobs(store):
    groups = many_adds(store, n=6, per=10)
    index_before = versions(store, "index")
    target = groups[3]
    keep = [target[2], target[7]]
    listing = {k for k in index_before if target[0].sha in store.read_all(k).decode()}
    old_pack = BlobStore(store).ref(target[0].sha).key
    rec = Recording(store)
    fig = BlobStore(rec).forget([i.sha for i in target if i not in keep], sweep=False)
    assert (fig["packs_repacked"], fig["blobs_moved"], fig["objects_deleted"]) == (1, 2, 1)
    assert fig["index_written"] == 1 and sorted(k for k in rec.deletes if k.startswith("index/")) == sorted(listing)
    after = versions(store, "index")
    assert all(after.get(k) == v for k, v in index_before.items() if k not in listing)
    assert_all_readable(store, keep + [i for g in groups if g is not target for i in g])
    bs = BlobStore(store)
    assert old_pack not in {bs.ref(i.sha).key for i in keep} and store.stat(old_pack) is None


@pytest.mark.parametrize("step", ["forget.index_written", "forget.old_index_deleted"])
def test_a_crash_between_the_new_index_and_the_old_ones_going_keeps_every_blob(store, step):
    groups = many_adds(store, n=8, per=4)
    drop = [groups[2][0], groups[2][1], groups[2][2], groups[5][3]]  # a repack of group 2, one of group 5

    def crash(s: str) -> None:
        if s == step:
            raise RuntimeError(f"killed at {s}")

    with pytest.raises(RuntimeError):
        BlobStore(store, failpoint=crash).forget([i.sha for i in drop], sweep=False)
    keep = [i for g in groups for i in g if i not in drop]
    assert_all_readable(store, keep)  # the union of the old and the new index lists every live blob
    bs = BlobStore(store)
    if step == "forget.index_written":  # the old index objects are all still there: so are the dropped blobs
        assert all(bs.has(i.sha) for i in drop)
        assert_all_readable(store, drop)
    BlobStore(store).forget([i.sha for i in drop], sweep=False)  # the next forget of them finishes
    BlobStore(store).forget([], grace_seconds=0)  # and the new pack of a killed repack is a leftover
    after = BlobStore(store)
    assert sorted(r.sha for r in after.refs()) == sorted(i.sha for i in keep)
    assert sorted(e.key for e in store.list("data")) == sorted({c.key for r in after.refs()
                                                               for c in after.candidates(r.sha)})
    assert_all_readable(store, keep)


def test_leftovers_are_swept_only_when_asked(store):
    groups = many_adds(store, n=3, per=3)

    def crash(s: str) -> None:
        if s == "add.verified":
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        BlobStore(store, failpoint=crash).add(small_items(3, seed=999))  # a pack no index lists
    data = sorted(e.key for e in store.list("data"))
    fig = BlobStore(store).forget([groups[0][0].sha], grace_seconds=0, sweep=False)
    assert fig["leftovers_deleted"] == 0 and sorted(e.key for e in store.list("data")) == data
    fig = BlobStore(store).forget([], grace_seconds=0)
    assert fig["leftovers_deleted"] == 1 and len(list(store.list("data"))) == len(data) - 1
    assert_all_readable(store, [i for g in groups for i in g if i is not groups[0][0]])


class IndexDeleteRefused(Wrapper):
    """The store refuses to delete index objects (a permission, a retention lock)."""

    def delete(self, keys, versions=None):
        keys = list(keys)
        stay = [k for k in keys if k.startswith("index/")]
        done = {r.key: r for r in self.inner.delete([k for k in keys if k not in stay], versions)}
        return [done.get(k) or DeleteResult(key=k, ok=False, code=StoreError.PERMISSION, message="refused")
                for k in keys]


def test_an_old_index_object_that_cannot_be_deleted_keeps_what_it_lists_past_the_grace(store):
    """Its rows still list the forgotten blobs: their objects stay with it even with no grace
    (a leftover sweep must not take an object an index object lists)."""
    lone = src(hashlib.sha256(b"lone").digest() * 20_000)  # 640 kB: an object of its own
    items = small_items(6, seed=300)
    BlobStore(store).add([lone] + items)
    fig = BlobStore(IndexDeleteRefused(store)).forget([lone.sha] + [i.sha for i in items[:5]], grace_seconds=0)
    assert fig["delete_failed"] and fig["objects_deleted"] == 0
    bs = BlobStore(store)
    listed = {c.key for r in bs.refs() for c in bs.candidates(r.sha)}
    assert listed <= {e.key for e in store.list("data")}  # nothing an index object lists is gone
    assert_all_readable(store, [lone] + items)


def test_consolidation_merges_the_small_index_objects_and_leaves_the_full_ones(store, monkeypatch):
    monkeypatch.setattr(blobstore, "INDEX_ROWS", 8)
    full = small_items(8, seed=400)
    BlobStore(store).add(full)  # one object of 8 rows: full
    full_index = versions(store, "index")
    singles = small_items(5, seed=401)
    for item in singles:
        BlobStore(store).add([item])  # five objects of one row
    fig = BlobStore(store).forget([], consolidate_above=1)
    assert (fig["index_written"], fig["index_deleted"], fig["index_kept"]) == (1, 5, 1)
    after = versions(store, "index")
    assert len(after) == 2 and all(after.get(k) == v for k, v in full_index.items())
    assert_all_readable(store, full + singles)


@pytest.mark.parametrize("how", ["release", "merge"])
def test_a_stale_entry_of_a_blob_never_replaces_its_good_one_when_index_objects_are_rewritten(store, how):
    """An index object whose key sorts first lists the same blob at the same object and offset
    with another form (stale, planted, or an older writer's): ``open`` skips it and reads the good
    entry. A forget that rewrites both index objects (another owner's release, or the batch end's
    merge) must keep both entries — it kept only the first of each (sha, key, offset), and the
    only backup of the blob stopped reading (review J7 F1)."""
    data = random.Random(71).randbytes(700 * 1024)  # a lone raw object (incompressible), above PACK_BELOW
    item = src(data)
    BlobStore(store, owner="A").add([item])
    b = BlobStore(store, owner="B")
    b.add([item])  # B claims it too: its release below changes the good entry's owners
    good = b.ref(item.sha)
    assert good.form == "raw"
    stale = [item.sha, item.size, good.key, good.offset, good.length, "zst", ["B"]]
    store.put("index/" + "0" * 32 + ".json",
              json.dumps({"v": 1, "created": 0, "blobs": [stale]}).encode(), if_absent=True)
    b.reload()
    assert len(b.candidates(item.sha)) == 2
    assert original_read(b, item.sha) == data  # open skips the stale entry
    if how == "release":
        b.forget([item.sha], sweep=False)
    else:
        b.forget([], consolidate_above=0, sweep=True)
    a = BlobStore(store, owner="A")
    assert "A" in a.owners(item.sha)
    assert original_read(a, item.sha) == data


def original_read(bs: BlobStore, sha: str) -> bytes:
    with bs.open(sha) as f:
        return f.read()
