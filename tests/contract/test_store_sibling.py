"""``ObjectStore.root`` and ``ObjectStore.sibling`` on every object store (moto's S3, the GCS
emulator, Azurite): what a caller holding only the logdir's ``Store`` (the scan) needs to list a
vault in another prefix or bucket, counted with the logdir's requests, and to name it as the
engine does (its store path)."""
import itertools

import pytest

from contract_stores import buckets  # noqa: F401 - the fixture
from tb_footprint_plugin.storage.store import CountingStore
from tb_footprint_plugin.storage.store_object import ObjectStore

_prefixes = itertools.count()


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_root_is_the_store_path_keys_are_under(buckets, scheme):  # noqa: F811
    b = buckets(scheme)
    prefix = f"sib{next(_prefixes)}/logs"
    store = ObjectStore(b.url(prefix))
    assert store.root == b.key(prefix)
    store.put("run/a.bin", b"abc")
    b.fs.invalidate_cache()
    assert b.fs.cat_file(f"{store.root}/run/a.bin") == b"abc"


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_a_sibling_is_on_the_same_client_and_counters(buckets, scheme):  # noqa: F811
    b = buckets(scheme)
    n = next(_prefixes)
    store = ObjectStore(b.url(f"sib{n}/logs"))
    store.prepare_writes()
    other = store.sibling(b.url(f"sib{n}/vault"))
    assert other.root == b.key(f"sib{n}/vault") and other.location == b.url(f"sib{n}/vault")
    assert other.ops is store.ops  # no second client built
    other.put("blobs/x", b"12345")
    before = store.stats.to_dict()
    assert [e.key for e in other.list()] == ["blobs/x"]
    assert [e.key for e in store.list()] == []  # each store's keys under its own root
    after = store.stats.to_dict()
    assert after["list"] - before["list"] == 2  # both listings counted where the logdir's are


def test_a_sibling_through_a_wrapper_and_of_another_store_is_counted_too(buckets):  # noqa: F811
    """Through a ``CountingStore`` (the wrapper forwards what is not a ``Store`` verb), and for a
    URL of another store, which gets a client of its own: its requests still counted here."""
    s3, gs = buckets("s3"), buckets("gs")
    n = next(_prefixes)
    store = CountingStore(ObjectStore(s3.url(f"sib{n}/logs")))
    gs.fs.pipe_file(f"{gs.key(f'sib{n}/vault')}/blobs/y", b"1")
    gs.fs.invalidate_cache()
    other = store.sibling(gs.url(f"sib{n}/vault"))
    assert other.root == gs.key(f"sib{n}/vault")
    before = store.stats.list
    assert [e.key for e in other.list()] == ["blobs/y"]
    assert store.stats.list - before == 1
