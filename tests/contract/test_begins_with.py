""""A grown file still begins with the recorded bytes" is one rule on every store
(``putback.begins_with`` over ``Store.open_read``, r22 task C): what a disk's restore, purge and
retirement ask of a grown file (``placement.starts_with``, a thin call into it) and what a
bucket's restore asks of the grown object it kept. And "the original is already in place" asked
with no size (a folder's form: the store says it) gives the answer the listed form gives.
Run on a folder, moto S3, the GCS emulator and Azurite."""
import hashlib
import os

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import placement, putback
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.store import CountingStore, StoreFailure

RECORDED = bytes(range(256)) * 4096 * 2 + b"tail"  # 2 MiB and 4 bytes: three reads of a MiB
SHA = hashlib.sha256(RECORDED).hexdigest()


def test_a_grown_thing_begins_with_the_recorded_bytes_and_nothing_else_does(store):  # noqa: F811
    store.put("run/grown", RECORDED + b"records written after it")
    store.put("run/same", RECORDED)
    store.put("run/short", RECORDED[:-1])
    store.put("run/other", b"X" + RECORDED[1:] + b"more")
    assert putback.begins_with(store, "run/grown", len(RECORDED), SHA)
    assert putback.begins_with(store, "run/same", len(RECORDED), SHA)
    assert not putback.begins_with(store, "run/short", len(RECORDED), SHA)
    assert not putback.begins_with(store, "run/other", len(RECORDED), SHA)
    with pytest.raises(StoreFailure) as e:  # nothing there: the store's own failure, never a yes
        putback.begins_with(store, "run/gone", len(RECORDED), SHA)
    assert e.value.code == StoreError.NOT_FOUND


def test_it_reads_a_mib_at_a_time_and_asks_nothing_first(store):  # noqa: F811
    """The requests a bucket's restore made with ``stream_digest``: one ranged read a MiB, no head."""
    store.put("run/grown", RECORDED + b"late")
    counted = CountingStore(store)
    assert putback.begins_with(counted, "run/grown", len(RECORDED), SHA)
    calls = counted.counts.to_dict()
    assert calls["read"] == -(-len(RECORDED) // CHUNK) == 3
    assert calls["stat"] == 0 and calls["requests"] == 3


def test_the_original_in_place_asked_with_no_size_answers_as_the_listed_form(store):  # noqa: F811
    store.put("run/f", RECORDED)
    f = {"path": "run/f", "size": len(RECORDED), "sha256": SHA}
    for data, held in ((RECORDED, True), (RECORDED + b"x", False), (RECORDED[:-1], False),
                       (b"X" + RECORDED[1:], False)):
        store.put("run/f", data)
        e = store.stat("run/f")
        listed = putback.holds_original(store, "run/f", dict(f, checksums={}), e.size, {})  # read, not compared
        assert putback.holds_original(store, "run/f", f) is held is listed
    assert not putback.holds_original(store, "run/gone", f)


def test_a_disks_starts_with_is_the_one_rule(tmp_path):
    p = tmp_path / "events"
    p.write_bytes(RECORDED + b"late")
    assert placement.starts_with(str(p), len(RECORDED), SHA)
    assert not placement.starts_with(str(p), len(RECORDED), hashlib.sha256(b"other").hexdigest())
    os.symlink(p, tmp_path / "link")
    assert not placement.starts_with(str(tmp_path / "link"), len(RECORDED), SHA)  # never through a link
    os.mkfifo(tmp_path / "fifo")
    assert not placement.starts_with(str(tmp_path / "fifo"), 1, SHA)  # never blocks on a FIFO
    assert not placement.starts_with(str(tmp_path / "gone" / "events"), 1, SHA)
