"""``Store.list(prefix, shallow=True)``: the files directly in a folder, none of its subfolders'
(what a state folder's own logs are found with, beside its vault), the same on every store."""
from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.storage.store import CountingStore


def test_a_shallow_listing_gives_the_files_of_the_folder_alone(store):  # noqa: F811
    for k in ("s/a.jsonl", "s/b.jsonl", "s/vault/x/c.bin", "s/vault/d.bin", "top.txt", "s2/e"):
        store.put(k, b"1")
    assert sorted(e.key for e in store.list("s", shallow=True)) == ["s/a.jsonl", "s/b.jsonl"]
    assert sorted(e.key for e in store.list("", shallow=True)) == ["top.txt"]
    assert sorted(e.key for e in store.list("s")) == ["s/a.jsonl", "s/b.jsonl", "s/vault/d.bin", "s/vault/x/c.bin"]
    assert list(store.list("missing", shallow=True)) == []
    # a wrapper passes it on
    assert sorted(e.key for e in CountingStore(store).list("s", shallow=True)) == ["s/a.jsonl", "s/b.jsonl"]
