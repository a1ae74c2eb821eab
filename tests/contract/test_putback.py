"""The rules a restore writes once for every store (``engine.putback``), run on a folder and the
three bucket servers: "the original is already in place" (size and digest: the store's checksums
where it keeps them, the bytes' sha256 where it keeps none), a grown file's complete records
copied out record by record (a trailing partial record left behind), and the outcome's code from
what a restore found in the originals' places."""
import hashlib
import io

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import putback
from tb_footprint_plugin.scan.tfrecord import RecordWriter


def _framed(payloads):
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for p in payloads:
        w.write(p)
    return buf.getvalue()


def _recorded(store, key, data):  # noqa: F811
    """The file entry a reduce records of ``data`` at ``key``: size, sha256, the store's checksums."""
    store.put(key, data)
    e = store.stat(key)
    return {"path": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "checksums": dict(e.checksums)}


def _in_place(store, key, f) -> bool:
    """``putback.holds_original`` of what stands at ``key`` now, as a restore asks it (one stat)."""
    e = store.stat(key)
    return e is not None and putback.holds_original(store, key, f, e.size, e.checksums)


def test_the_original_is_in_place_only_with_its_size_and_digest(store):  # noqa: F811
    original = b"original bytes " * 100
    f = _recorded(store, "run/events.out.tfevents.1", original)
    assert _in_place(store, "run/events.out.tfevents.1", f)
    # the same size, other bytes: not the original (a folder reads them, a bucket compares checksums)
    store.put("run/events.out.tfevents.1", b"X" + original[1:])
    assert not _in_place(store, "run/events.out.tfevents.1", f)
    # grown past it, or shorter: not it either, whatever its first bytes
    store.put("run/events.out.tfevents.1", original + b"more")
    assert not _in_place(store, "run/events.out.tfevents.1", f)
    store.put("run/events.out.tfevents.1", original[:-1])
    assert not _in_place(store, "run/events.out.tfevents.1", f)
    # nothing there
    assert not _in_place(store, "run/gone", dict(f, path="run/gone"))
    # written again byte for byte: it is the original
    store.put("run/events.out.tfevents.1", original)
    assert _in_place(store, "run/events.out.tfevents.1", f)


def test_an_entry_without_a_digest_in_common_is_not_taken_for_the_original(store):  # noqa: F811
    """Neither a sha256 nor a checksum the store computed: nothing proves the bytes, so no."""
    data = b"abc" * 50
    store.put("run/f", data)
    e = store.stat("run/f")
    f = {"path": "run/f", "size": len(data)}
    assert not putback.holds_original(store, "run/f", f, e.size, e.checksums)


def test_a_grown_files_complete_records_are_copied_out_and_its_partial_one_left(store):  # noqa: F811
    reduced = _framed([b"reduced %d" % i for i in range(20)])
    late = [b"late record %d" % i * (i + 1) for i in range(5)]
    framed = _framed(late)
    grown = reduced + framed + framed[:7]  # and a record the writer is in the middle of
    store.put("run/events.out.tfevents.1", grown)
    sink = io.BytesIO()
    with store.open_read("run/events.out.tfevents.1", len(grown)) as src:
        got = putback.copy_late_records(src, len(reduced), len(grown), sink, "late records of run/events")
    assert sink.getvalue() == framed
    assert got == {"records": 5, "bytes": len(framed), "sha256": hashlib.sha256(framed).hexdigest(),
                   "partial_bytes": 7, "corrupt": False}
    # only up to ``size``: the bytes past it are not looked at
    sink = io.BytesIO()
    with store.open_read("run/events.out.tfevents.1", len(grown)) as src:
        got = putback.copy_late_records(src, len(reduced), len(reduced) + len(_framed(late[:2])), sink, "x")
    assert got["records"] == 2 and got["partial_bytes"] == 0 and sink.getvalue() == _framed(late[:2])
    # a damaged record: nothing from it on is passed off as a record
    bad = bytearray(framed)
    bad[len(_framed(late[:1])) + 14] ^= 0xFF  # inside the second record's payload
    store.put("run/events.out.tfevents.2", reduced + bytes(bad))
    sink = io.BytesIO()
    with store.open_read("run/events.out.tfevents.2") as src:
        got = putback.copy_late_records(src, len(reduced), len(reduced) + len(bad), sink, "x")
    assert got["records"] == 1 and got["corrupt"] and sink.getvalue() == _framed(late[:1])
    assert got["partial_bytes"] == len(bad) - len(_framed(late[:1]))


def test_a_restores_code_says_what_it_found_in_the_originals_places_on_every_store():
    """Records back in the run first, then bytes kept in the vault (a disk's blob by sha256, a
    bucket's kept object), then the store's own finding."""
    late = {"file": "run/e.salvaged-001", "records": 2, "bytes": 10}
    disk_kept = {"path": "run/e", "sha256": "a" * 64, "size": 3}
    bucket_kept = {"path": "run/e", "kept": "b/v/kept/op/x", "size": 3, "late_records": None}
    assert putback.restore_code([]) is None
    assert putback.restore_code([], Finding.MTIME_NOT_KEPT) == Finding.MTIME_NOT_KEPT
    for kept in (disk_kept, bucket_kept):
        assert putback.restore_code([kept], Finding.MTIME_NOT_KEPT) == Finding.DISPLACED_KEPT
        assert putback.restore_code([kept, dict(kept, late_records=late)]) == Finding.LATE_RECORDS_RESTORED
    said = putback.late_records_said([dict(bucket_kept, late_records=late)])
    assert said == "; 2 record(s) written after the reduction kept in the run as run/e.salvaged-001"
    assert putback.kept_said(0, "object", "x") == ""
