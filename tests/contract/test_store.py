"""One conformance suite for every ``Store`` (the restic model: one test body, every backend).

Each test runs against a POSIX folder, moto's S3, the GCS emulator and Azurite (the servers of
``tests/objstore_servers.py``), and checks what ``storage/store.py`` promises: list after put,
ranged reads at the edges, conditional puts and copies, replace, batch deletes, appends, streaming
puts in bounded memory, names with spaces and non-ASCII letters, refused keys, the declared
capabilities against behaviour, and the two wrappers (counting, throttling).
"""
import hashlib
import io
import os
import threading
import time
import tracemalloc

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from objstore_servers import Bucket
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.remote import RequestStats
from tb_footprint_plugin.storage.store import TMP_PREFIX, CountingStore, Store, StoreFailure, ThrottledStore, check_key
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.stores import open_store
from tb_footprint_plugin.storage.throttle import TokenBucket

UNSAFE = ["../x", "a/../../x", "/etc/passwd", "", "a//b", "./a", "a/.", "a\x00b"]




def fails(code, fn, *args, **kw) -> StoreFailure:
    with pytest.raises(StoreFailure) as ei:
        fn(*args, **kw)
    assert ei.value.code == code, f"{ei.value.code} != {code}: {ei.value}"
    return ei.value


def keys_of(store, prefix=""):
    return sorted(e.key for e in store.list(prefix))


# --- listing, stat, reading ----------------------------------------------------------------------
def test_list_after_put_with_spaces_and_unicode(store):
    files = {"a.txt": b"1", "run 1/events.out.tfevents.x": b"22", "run 1/plugins/ü ß/trace.json": b"333",
             "ünï/cödé 名前.bin": b"4444",
             # a leading '~' is a name like any other (a run called '~old'), never a home folder
             "~old/run/x": b"55555"}
    versions = {k: store.put(k, v) for k, v in files.items()}
    entries = {e.key: e for e in store.list()}
    assert sorted(entries) == sorted(files)
    for k, v in files.items():
        assert entries[k].size == len(v)
        assert entries[k].version == versions[k] == store.stat(k).version
        assert entries[k].mtime > 0
        assert store.read_all(k) == v
    assert keys_of(store, "run 1") == ["run 1/events.out.tfevents.x", "run 1/plugins/ü ß/trace.json"]
    assert keys_of(store, "run 1/plugins") == ["run 1/plugins/ü ß/trace.json"]
    assert keys_of(store, "run") == []  # a prefix is a folder, not a name's beginning
    assert keys_of(store, "nothing/here") == []
    assert store.stat("run 1/missing") is None and store.stat("no/such/folder") is None


def test_every_key_lists_staged_writes_and_keys_no_call_can_address(store):
    """``list(every_key=True)`` also yields the names of writes in progress and, on a bucket, a
    planted key with ``..`` or empty parts (as listed, never normalised): what the trust checks
    must see to keep them; a plain listing leaves both out. Still one listing request."""
    store.put("run/events.bin", b"data")
    store.put(f"run/{TMP_PREFIX}0123", b"staged")  # what a killed write leaves behind
    planted = []  # (the GCS emulator and Azurite refuse to store such names; S3 keeps them)
    if isinstance(store, ObjectStore) and store.rfs.protocol == "s3":
        for name in ("run/a/../b/x.bin", "run/c//d.bin"):
            store.rfs.fs.pipe_file(f"{store.rfs.root}/{name}", b"planted")
            planted.append(name)
    assert keys_of(store, "run") == ["run/events.bin"]
    before = store.stats.list
    every = {e.key: e for e in store.list("run", every_key=True)}
    assert store.stats.list - before == 1
    assert sorted(every) == sorted(["run/events.bin", f"run/{TMP_PREFIX}0123", *planted])
    for name in planted:
        assert every[name].size == len(b"planted") and every[name].version
        fails(StoreError.UNSAFE_KEY, store.stat, name)  # seen, and still no call takes it
    assert sorted(e.key for e in store.list(every_key=True)) == sorted(every)
    assert [e.key for e in store.list("nothing", every_key=True)] == []


def test_checksums_where_the_store_gives_them(store):
    import base64

    import google_crc32c

    data = b"checksum me"
    store.put("c.bin", data)
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    want = {"md5": b64(hashlib.md5(data).digest()), "sha256": b64(hashlib.sha256(data).digest()),
            "crc32c": b64(google_crc32c.value(data).to_bytes(4, "big"))}
    for e in (store.stat("c.bin"), {x.key: x for x in store.list()}["c.bin"]):
        if isinstance(store, ObjectStore):
            assert e.checksums, "every object store computes a checksum of what it stores"
        else:
            assert e.checksums == {}  # a folder keeps none; the engine hashes itself
        for kind, value in e.checksums.items():
            assert value == want[kind], kind


def test_ranged_reads_at_the_edges(store):
    data = bytes(range(256)) * 4  # 1024 bytes
    store.put("r.bin", data)
    assert store.read_range("r.bin", 0, 0) == b""
    assert store.read_range("r.bin", 0, 1) == data[:1]
    assert store.read_range("r.bin", 1023, 1024) == data[1023:]
    assert store.read_range("r.bin", 1000, 5000) == data[1000:]  # short at the end
    assert store.read_range("r.bin", 1024, 1030) == b""  # at the end
    assert store.read_range("r.bin", 9000, 9100) == b""  # past it
    assert store.read_range("r.bin", 100, 612) == data[100:612]
    store.put_file("empty", io.BytesIO(b""))  # (gcp-storage-emulator drops a media upload of no bytes)
    assert store.read_all("empty") == b"" and store.read_range("empty", 0, 10) == b""
    fails(StoreError.NOT_FOUND, store.read_range, "nope.bin", 0, 10)
    fails(StoreError.NOT_FOUND, store.read_all, "nope/deeper.bin")
    fails(StoreError.NOT_FOUND, store.open_read, "nope.bin")
    with pytest.raises(ValueError):
        store.read_range("r.bin", 10, 5)


def test_open_read_fetches_ranges_on_demand(store):
    data = os.urandom(3 << 20)
    store.put("big.bin", data)
    before = store.stats.bytes_down
    with store.open_read("big.bin") as r:
        assert r.seek(0, os.SEEK_END) == len(data)
        r.seek(2_000_000)
        assert r.read(100) == data[2_000_000:2_000_100]
        assert r.tell() == 2_000_100
        assert store.stats.bytes_down - before == 100  # only the range asked for, never the object
        r.seek(len(data) - 10)
        assert r.read(1000) == data[-10:] and r.read(10) == b""
        r.seek(0)
        h = hashlib.sha256()
        for chunk in iter(lambda: r.read(1 << 18), b""):
            assert len(chunk) <= 1 << 18
            h.update(chunk)
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    with store.open_read("big.bin", size=1000) as r:  # a listed size spares the head
        assert r.read() == data[:1000]


def test_read_all_refuses_what_is_too_large(store):
    store.put("state.json", b"x" * 5000)
    assert store.read_all("state.json", limit=5000) == b"x" * 5000
    fails(StoreError.TOO_LARGE, store.read_all, "state.json", limit=4999)
    store.put("planted.json", b"x" * 50_000)
    before = store.stats.bytes_down
    fails(StoreError.TOO_LARGE, store.read_all, "planted.json", limit=1000)
    assert store.stats.bytes_down - before <= 1001  # never more than the limit is read


# --- conditional writes ----------------------------------------------------------------------------
def test_put_if_absent_conflicts_on_an_existing_key(store, tmp_path):
    v = store.put("k/lock.json", b"first", if_absent=True)
    fails(StoreError.ALREADY_EXISTS, store.put, "k/lock.json", b"second", if_absent=True)
    src = tmp_path / "src.bin"
    src.write_bytes(b"third")
    fails(StoreError.ALREADY_EXISTS, store.put_file, "k/lock.json", str(src), if_absent=True)
    assert store.read_all("k/lock.json") == b"first" and store.stat("k/lock.json").version == v
    assert keys_of(store) == ["k/lock.json"]  # no temporary or staged file left


def test_put_if_version_refuses_a_stale_token(store, tmp_path):
    v1 = store.put("j.json", b"one")
    v2 = store.put("j.json", b"two!", if_version=v1)
    assert v2 != v1 and store.stat("j.json").version == v2
    fails(StoreError.PRECONDITION_FAILED, store.put, "j.json", b"three", if_version=v1)
    src = tmp_path / "s.bin"
    src.write_bytes(b"streamed")
    fails(StoreError.PRECONDITION_FAILED, store.put_file, "j.json", str(src), if_version=v1)
    assert store.read_all("j.json") == b"two!"
    fails(StoreError.PRECONDITION_FAILED, store.put, "never.json", b"x", if_version=v1)
    assert store.stat("never.json") is None
    e = store.put_file("j.json", str(src), if_version=v2)
    assert store.read_all("j.json") == b"streamed" and e.version == store.stat("j.json").version
    assert keys_of(store) == ["j.json"]


def test_copy_and_its_conditions(store):
    v = store.put("src dir/ä.bin", b"payload")
    nv = store.copy("src dir/ä.bin", "dst/ä copy.bin", if_source_version=v)
    assert store.read_all("dst/ä copy.bin") == b"payload" and store.stat("dst/ä copy.bin").version == nv
    store.put("src dir/ä.bin", b"changed payload")
    fails(StoreError.PRECONDITION_FAILED, store.copy, "src dir/ä.bin", "dst/fresh.bin", if_source_version=v)
    assert store.stat("dst/fresh.bin") is None  # nothing written when the source moved
    fails(StoreError.ALREADY_EXISTS, store.copy, "src dir/ä.bin", "dst/ä copy.bin", if_absent=True)
    assert store.read_all("dst/ä copy.bin") == b"payload"
    fails(StoreError.PRECONDITION_FAILED, store.copy, "src dir/ä.bin", "dst/ä copy.bin", if_version="stale")
    assert store.read_all("dst/ä copy.bin") == b"payload"
    store.copy("src dir/ä.bin", "dst/ä copy.bin", if_version=nv)
    assert store.read_all("dst/ä copy.bin") == b"changed payload"
    fails(StoreError.NOT_FOUND, store.copy, "missing.bin", "dst/x.bin")


def _another_store_beside(store, tmp_path):
    """A second store of the same kind: another folder, or another prefix on the same client."""
    if isinstance(store, ObjectStore):
        return ObjectStore.on_client(store.rfs, store.location.rsplit("/", 1)[0] + "/other side")
    (tmp_path / "other side").mkdir()
    return PosixStore(str(tmp_path / "other side"))


def test_copy_from_another_store_with_the_copy_s_checksums(store, tmp_path):
    other = _another_store_beside(store, tmp_path)
    v = other.put("vault/ü b.bin", b"kept bytes")
    res = store.copy("vault/ü b.bin", "run/back.bin", source=other, if_source_version=v, if_absent=True, detail=True)
    assert store.read_all("run/back.bin") == b"kept bytes" and other.read_all("vault/ü b.bin") == b"kept bytes"
    e = store.stat("run/back.bin")
    assert res.version == e.version
    assert res.checksums == {k: c for k, c in e.checksums.items() if k in res.checksums}  # the copy's own
    if isinstance(store, ObjectStore):
        assert res.checksums, "a bucket's copy says the checksum it computed"
    fails(StoreError.ALREADY_EXISTS, store.copy, "vault/ü b.bin", "run/back.bin", source=other, if_absent=True)
    other.put("vault/ü b.bin", b"moved on")
    fails(StoreError.PRECONDITION_FAILED, store.copy, "vault/ü b.bin", "run/new.bin", source=other,
          if_source_version=v)
    assert store.stat("run/new.bin") is None
    # CountingStore around the source is the same source
    assert store.copy("vault/ü b.bin", "run/counted.bin", source=CountingStore(other)) == store.stat("run/counted.bin").version
    # a store of another kind has no copy into this one
    if isinstance(store, ObjectStore):
        (tmp_path / "folder").mkdir()
        (tmp_path / "folder" / "f.bin").write_bytes(b"local")
        fails(StoreError.NOT_SUPPORTED, store.copy, "f.bin", "run/x.bin", source=PosixStore(str(tmp_path / "folder")))
        assert store.stat("run/x.bin") is None
        # nor does one on a client of its own (another endpoint or credentials, as far as this
        # store can tell): one server-side copy needs one client (review R12 F7)
        apart = ObjectStore(other.location)
        fails(StoreError.NOT_SUPPORTED, store.copy, "vault/ü b.bin", "run/y.bin", source=apart)
        assert store.stat("run/y.bin") is None


def test_copy_without_reads_first_keeps_its_conditions(store):
    """``precheck=False``, ``size`` and ``listed_absent`` spare metadata reads (a bucket's heads),
    never a condition: a source that moved is refused and leaves no destination."""
    v = store.put("s/a.bin", b"abc")

    def heads(fn):
        before = store.stats.head
        fn()
        return store.stats.head - before

    checked = heads(lambda: store.copy("s/a.bin", "d/1.bin", if_source_version=v, size=3))
    spared = heads(lambda: store.copy("s/a.bin", "d/2.bin", if_source_version=v, size=3, precheck=False))
    listed = heads(lambda: store.copy("s/a.bin", "d/3.bin", if_absent=True, size=3, listed_absent=True))
    unlisted = heads(lambda: store.copy("s/a.bin", "d/4.bin", if_absent=True, size=3))
    for k in ("d/1.bin", "d/2.bin", "d/3.bin", "d/4.bin"):
        assert store.read_all(k) == b"abc"
    if isinstance(store, ObjectStore):
        assert spared < checked and listed <= unlisted
    else:
        assert spared == checked and listed == unlisted  # a folder checks under its lock, always
    store.put("s/a.bin", b"abcd")
    fails(StoreError.PRECONDITION_FAILED, store.copy, "s/a.bin", "d/5.bin", if_source_version=v, size=3,
          precheck=False)
    assert store.stat("d/5.bin") is None


def test_put_file_with_the_whole_object_s_checksum(store, tmp_path):
    import base64

    data = os.urandom(6 << 20)  # above a streamed upload's part
    src = tmp_path / "staged.bin"
    src.write_bytes(data)
    e = store.put_file("up/staged.bin", str(src), whole_checksum=True)
    assert store.read_all("up/staged.bin") == data and e.size == len(data)
    assert e.version == store.stat("up/staged.bin").version and e.checksums == store.stat("up/staged.bin").checksums
    if isinstance(store, ObjectStore):
        want = {"md5": base64.b64encode(hashlib.md5(data).digest()).decode(),
                "sha256": base64.b64encode(hashlib.sha256(data).digest()).decode()}
        common = [k for k in e.checksums if k in want]
        assert common, f"a checksum of the whole object: {e.checksums}"
        assert all(e.checksums[k] == want[k] for k in common)
    else:
        assert e.checksums == {}
    fails(StoreError.NOT_SUPPORTED, store.put_file, "up/x.bin", str(src), whole_checksum=True, if_absent=True)
    fails(StoreError.NOT_SUPPORTED, store.put_file, "up/x.bin", io.BytesIO(b"x"), whole_checksum=True)
    assert store.stat("up/x.bin") is None


def test_retention_is_said_where_the_store_can_tell(store):
    r = store.retention()
    assert (r is not None) == store.capabilities.retention_query
    if r is not None:
        assert {"versioning", "noncurrent_expiry_days", "soft_delete_seconds"} <= set(r)
        assert r["versioning"] is False  # the test servers' buckets keep no old versions
    assert CountingStore(store).retention() == r


def test_replace_semantics(store):
    store.put("a/tmp.bin", b"new bytes")
    store.put("b/final.bin", b"old bytes")
    res = store.replace("a/tmp.bin", "b/final.bin")
    assert res.atomic == store.capabilities.rename_atomic
    assert store.stat("a/tmp.bin") is None and store.read_all("b/final.bin") == b"new bytes"
    assert res.version == store.stat("b/final.bin").version
    # if absent: never over an existing key, both kept
    store.put("a/other.bin", b"other")
    fails(StoreError.ALREADY_EXISTS, store.replace, "a/other.bin", "b/final.bin", if_absent=True)
    assert store.read_all("a/other.bin") == b"other" and store.read_all("b/final.bin") == b"new bytes"
    store.replace("a/other.bin", "c/ñew.bin", if_absent=True)
    assert store.stat("a/other.bin") is None and store.read_all("c/ñew.bin") == b"other"
    # a stale source version moves nothing
    v = store.put("a/moving.bin", b"v1")
    store.put("a/moving.bin", b"v2 longer")
    fails(StoreError.PRECONDITION_FAILED, store.replace, "a/moving.bin", "b/final.bin", if_source_version=v)
    assert store.read_all("a/moving.bin") == b"v2 longer" and store.read_all("b/final.bin") == b"new bytes"
    # a stale destination version too
    fails(StoreError.PRECONDITION_FAILED, store.replace, "a/moving.bin", "b/final.bin", if_version="stale")
    assert store.read_all("a/moving.bin") == b"v2 longer" and store.read_all("b/final.bin") == b"new bytes"
    fails(StoreError.NOT_FOUND, store.replace, "a/none.bin", "b/final.bin")


def test_delete_is_idempotent_with_per_key_results(store):
    for k in ("d/1", "d/2", "d/ü 3"):
        store.put(k, b"x")
    res = store.delete(["d/1", "d/missing", "../escape", "d/ü 3"])
    assert [r.key for r in res] == ["d/1", "d/missing", "../escape", "d/ü 3"]
    assert [r.ok for r in res] == [True, True, False, True]
    assert res[2].code == StoreError.UNSAFE_KEY
    assert keys_of(store) == ["d/2"]
    assert all(r.ok for r in store.delete(["d/1", "d/ü 3", "never/there"]))  # again: nothing to do, ok
    v = store.stat("d/2").version
    store.put("d/2", b"rewritten")
    res = store.delete(["d/2"], versions={"d/2": v})
    assert not res[0].ok and res[0].code == StoreError.PRECONDITION_FAILED
    assert store.read_all("d/2") == b"rewritten"
    assert store.delete(["d/2"], versions={"d/2": store.stat("d/2").version})[0].ok
    assert keys_of(store) == []
    many = [f"m/{i:03d}" for i in range(30)]
    for k in many:
        store.put(k, b"-")
    assert all(r.ok for r in store.delete(many)) and keys_of(store) == []


#: stores whose server ignores the condition a delete carries (where ``precheck`` reads first)
DELETE_CONDITION_IGNORED = {
    "s3": "moto ignores the ETag of a DeleteObjects entry (S3 itself enforces it)",
    "gs": "the GCS emulator ignores ifGenerationMatch on a delete (GCS itself enforces it)",
}


def test_delete_at_a_version_without_a_read_first(store, request):
    """``precheck=False``: the condition goes with the delete alone (the bucket engine's lock,
    journal and swap deletes): no metadata read, one request for the batch; a key at its version
    is deleted, and a key that moved stays where the server enforces the condition."""
    v1, v2 = store.put("p/1", b"one"), store.put("p/2", b"two")
    store.put("p/3", b"three")
    before = store.stats.to_dict()
    res = store.delete(["p/1", "p/2", "p/3", "p/missing"], versions={"p/1": v1, "p/2": v2}, precheck=False)
    after = store.stats.to_dict()
    assert [r.ok for r in res] == [True, True, True, True] and keys_of(store, "p") == []
    if store.capabilities.server_side_copy:  # a bucket: the server checks, nothing is read first
        assert after["head"] == before["head"] and after["read"] == before["read"]
        assert after["delete"] - before["delete"] <= 4  # batched where the store batches (GCS: a key each)
    v = store.put("p/moved", b"first")
    store.put("p/moved", b"second, longer")
    res = store.delete(["p/moved"], versions={"p/moved": v}, precheck=False)[0]
    kept = not res.ok and res.code == StoreError.PRECONDITION_FAILED and store.read_all("p/moved") == b"second, longer"
    gap = DELETE_CONDITION_IGNORED.get(request.node.callspec.params["store"])
    if gap:
        assert not kept, "the server enforces a delete's condition now: drop it from DELETE_CONDITION_IGNORED"
        pytest.xfail(gap)
    assert kept


def test_durable_append_keeps_order(store):
    for i in range(12):
        v = store.append("logs/history.jsonl", f'{{"n": {i}}}\n'.encode())
        assert v == store.stat("logs/history.jsonl").version
    lines = store.read_all("logs/history.jsonl").decode().splitlines()
    assert lines == [f'{{"n": {i}}}' for i in range(12)]


def test_lines_appended_after_a_last_line_without_its_newline_start_a_line_of_their_own(store):
    """A last line left without its newline (torn by a crash, or planted) is never glued onto the
    first line appended after it (it would be lost with it as one damaged line); bytes that are
    not whole lines are appended as they are."""
    store.put("logs/torn.jsonl", b'{"n": 0}\n{"n": 1, "to')
    store.append("logs/torn.jsonl", b'{"n": 2}\n{"n": 3}\n')
    store.append("logs/torn.jsonl", b'{"n": 4}\n')
    assert store.read_all("logs/torn.jsonl") == b'{"n": 0}\n{"n": 1, "to\n{"n": 2}\n{"n": 3}\n{"n": 4}\n'
    store.append("logs/bytes", b"abc")
    store.append("logs/bytes", b"def")
    assert store.read_all("logs/bytes") == b"abcdef"
    store.append("logs/bytes", b"g\n")
    assert store.read_all("logs/bytes") == b"abcdef\ng\n"

def test_concurrent_appends_each_land_whole(store):
    def writer(t):
        for i in range(5):
            store.append("log", f"{t}:{i}:{'x' * 50}\n".encode())

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = store.read_all("log").decode().splitlines()
    assert sorted(lines) == sorted(f"{t}:{i}:{'x' * 50}" for t in range(3) for i in range(5))
    for t in range(3):  # each writer's records in its own order
        assert [ln for ln in lines if ln.startswith(f"{t}:")] == [f"{t}:{i}:{'x' * 50}" for i in range(5)]


def test_an_append_past_its_limit_is_refused_and_nothing_is_written(store):
    """``append(limit=)``: a key holding bytes is not taken past ``limit`` (its size + the data + 1,
    the newline a torn last line gets): ``TOO_LARGE`` naming the key, no byte written, no write
    request; at exactly the limit it lands; an absent key takes any first append. Through a
    wrapper too. One refusal costs a bucket no read: its head alone (the size its rewrite is on)."""
    key = "logs/limited.jsonl"
    first = b"x" * 10 + b"\n"
    store.append(key, first, limit=5)  # absent: any first append
    assert store.read_all(key) == first
    puts, reads = store.stats.put, store.stats.read
    e = fails(StoreError.TOO_LARGE, store.append, key, b"ab\n", limit=len(first) + 3)
    assert e.key == key
    e = fails(StoreError.TOO_LARGE, CountingStore(store).append, key, b"ab\n", limit=len(first) + 3)
    assert e.key == key
    assert (store.stats.put, store.stats.read) == (puts, reads)  # nothing written, nothing read
    assert store.read_all(key) == first
    store.append(key, b"ab\n", limit=len(first) + 3 + 1)  # exactly at the limit
    assert store.read_all(key) == first + b"ab\n"
    store.append(key, b"cd\n")  # no limit given: the store's own bound only
    assert store.read_all(key) == first + b"ab\ncd\n"


def test_streaming_put_stays_in_bounded_memory(store, tmp_path):
    size = 32 << 20
    src = tmp_path / "big.bin"
    block = os.urandom(1 << 20)
    with open(src, "wb") as f:
        for _ in range(size >> 20):
            f.write(block)
    want = hashlib.sha256(src.read_bytes()).hexdigest()
    warm = tmp_path / "warm.bin"  # the clients load their models on first use: not the upload's memory
    warm.write_bytes(b"warm")
    store.put_file("warm/a", str(warm))
    store.put_file("warm/b", str(warm), if_absent=True)
    store.delete(["warm/a", "warm/b"])
    tracemalloc.start()
    try:
        e = store.put_file("up/big.bin", str(src))
        with open(src, "rb") as f:
            e2 = store.put_file("up/big2.bin", f, if_absent=True)  # a file object, staged on buckets
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, f"peak {peak >> 20} MiB for a {size >> 20} MiB upload"
    assert e.size == e2.size == size
    for k in ("up/big.bin", "up/big2.bin"):
        h = hashlib.sha256()
        with store.open_read(k) as r:
            for chunk in iter(lambda: r.read(4 << 20), b""):
                h.update(chunk)
        assert h.hexdigest() == want
    assert keys_of(store) == ["up/big.bin", "up/big2.bin"]


class _FailingReader(io.RawIOBase):
    """A source that breaks after ``good`` bytes (a disk error, a cancelled job)."""

    def __init__(self, good: int):
        super().__init__()
        self.left = good

    def readable(self):
        return True

    def read(self, n=-1):
        if self.left <= 0:
            raise OSError("the source broke")
        n = min(self.left, 1 << 20 if n is None or n < 0 else n)
        self.left -= n
        return b"y" * n


def test_failed_streaming_put_changes_nothing(store):
    """A put whose source breaks after more than one part: the key keeps its bytes (or stays
    absent), and no partial object, temporary file or staged upload is left to list."""
    v = store.put("keep.bin", b"old bytes")
    for kw in ({}, {"if_version": v}):
        with pytest.raises(StoreFailure):
            store.put_file("keep.bin", _FailingReader(7 << 20), **kw)
        assert store.read_all("keep.bin") == b"old bytes" and store.stat("keep.bin").version == v
    with pytest.raises(StoreFailure):
        store.put_file("new.bin", _FailingReader(7 << 20), if_absent=True)
    with pytest.raises(StoreFailure):
        store.put_file("new2.bin", _FailingReader(100))
    assert store.stat("new.bin") is None and store.stat("new2.bin") is None
    assert keys_of(store) == ["keep.bin"]
    if isinstance(store, ObjectStore) and store.rfs.protocol == "s3":  # the multipart uploads were aborted
        bucket, _, prefix = store.rfs.root.partition("/")
        assert not store.ops.client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads")


_CHILD = """
import sys
from tb_footprint_plugin.storage.stores import open_store
store = open_store(sys.argv[1])
store.stat(sys.argv[2])  # clients made before the upload starts
print("ready", flush=True)
store.put_file(sys.argv[2], sys.stdin.buffer)
print("done", flush=True)
"""


def test_writer_killed_mid_put_leaves_the_key_as_it_was(store):
    """SIGKILL while a put streams (more than a part sent): the key keeps its old bytes, and
    nothing half-written is listed."""
    import signal
    import subprocess
    import sys

    store.put("run/events.bin", b"original")
    v = store.stat("run/events.bin").version
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, store.location, "run/events.bin"], cwd=repo,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        child.stdin.write(b"n" * (7 << 20))  # returns once the child has read all but a pipe's worth
        child.stdin.flush()
        time.sleep(0.3)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert store.read_all("run/events.bin") == b"original" and store.stat("run/events.bin").version == v
    assert keys_of(store) == ["run/events.bin"]


# --- containment ---------------------------------------------------------------------------------------
def test_unsafe_keys_are_refused_with_a_code(store, tmp_path):
    before = sorted(os.listdir(tmp_path))
    store.put("ok", b"ok")
    for key in UNSAFE:
        calls = [(store.stat, key), (store.read_range, key, 0, 1), (store.read_all, key), (store.open_read, key),
                 (store.put, key, b"x"), (store.put_file, key, io.BytesIO(b"x")), (store.append, key, b"x"),
                 (store.copy, key, "ok"), (store.copy, "ok", key), (store.replace, "ok", key),
                 (store.replace, key, "ok"), (store.link, "ok", key), (store.mkdir, key)]
        for fn, *args in calls:
            fails(StoreError.UNSAFE_KEY, fn, *args)
        if key not in ("", "."):
            fails(StoreError.UNSAFE_KEY, lambda: list(store.list(key)))
        res = store.delete([key])
        assert not res[0].ok and res[0].code == StoreError.UNSAFE_KEY
    assert keys_of(store) == ["ok"] and store.read_all("ok") == b"ok"
    assert sorted(os.listdir(tmp_path)) == before  # nothing made beside the store's root


def test_check_key_accepts_plain_keys():
    for k in ("a", "a/b c/ü.txt", "run.1/..x", "a/...", "x\\y"):
        assert check_key(k) == k
    assert check_key("", allow_root=True) == ""


# --- capabilities against behaviour ------------------------------------------------------------------
def test_declared_capabilities_hold(store, tmp_path, monkeypatch):
    caps = store.capabilities
    assert caps.conditional_put and caps.versions  # every store the engine changes has both
    assert caps.append in ("o_append", "conditional_rewrite")
    v1 = store.put("cap/f.bin", b"one")
    assert store.put("cap/f.bin", b"two") != v1  # versions: a write moves the token
    # hard_link
    if caps.hard_link:
        e = store.link("cap/f.bin", "cap/link.bin")
        assert store.read_all("cap/link.bin") == b"two" and e.size == 3
        fails(StoreError.ALREADY_EXISTS, store.link, "cap/f.bin", "cap/link.bin")
    else:
        fails(StoreError.NOT_SUPPORTED, store.link, "cap/f.bin", "cap/link.bin")
        assert store.stat("cap/link.bin") is None
    # mode_kept / mtime_kept
    src = tmp_path / "m.bin"
    src.write_bytes(b"timed")
    old = 1_500_000_000 * 10**9
    e = store.put_file("cap/timed.bin", str(src), mtime_ns=old, mode=0o640)
    assert (store.stat("cap/timed.bin").mtime == old / 1e9) == caps.mtime_kept
    assert (e.mode == 0o640) == caps.mode_kept
    if not caps.mode_kept:
        assert e.mode is None
    # copy keeps time and mode where the store keeps them
    store.copy("cap/timed.bin", "cap/timed copy.bin")
    assert (store.stat("cap/timed copy.bin").mtime == old / 1e9) == caps.mtime_kept
    # folders
    store.mkdir("cap/empty folder/deeper")
    assert keys_of(store, "cap/empty folder") == []
    if caps.folders:
        assert os.path.isdir(os.path.join(store.root, "cap", "empty folder", "deeper"))
    # server_side_copy: no byte of the object passes through this process
    store.put("cap/one-mb.bin", b"z" * (1 << 20))
    down, up = store.stats.bytes_down, store.stats.bytes_up
    store.copy("cap/one-mb.bin", "cap/one-mb copy.bin")
    moved = (store.stats.bytes_down - down) + (store.stats.bytes_up - up)
    assert (moved == 0) == caps.server_side_copy and (moved >= 2 << 20) == (not caps.server_side_copy)
    # open_writer_detection
    if caps.open_writer_detection:
        with open(os.path.join(store.root, "cap", "f.bin"), "ab"):
            writers = store.open_writers(["cap/f.bin", "cap/timed.bin"])
        assert list(writers) == ["cap/f.bin"] and str(os.getpid()) in writers["cap/f.bin"][0]
        assert store.open_writers(["cap/f.bin"]) == {}
    else:
        assert store.open_writers(["cap/f.bin"]) is None
    # fsync: writes are fsynced where the store has it, and nothing is where it has none
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    store.put("cap/durable.bin", b"d")
    store.append("cap/log", b"line\n")
    store.replace("cap/durable.bin", "cap/durable2.bin")
    store.delete(["cap/durable2.bin"])
    assert bool(calls) == caps.fsync and (len(calls) >= 6) == caps.fsync


# --- wrappers ------------------------------------------------------------------------------------------
def test_counting_store_counts_the_same_verbs_everywhere(store):
    c = CountingStore(store)
    assert c.capabilities == store.capabilities and c.location == store.location
    c.put("w/a.bin", b"12345")
    c.put("w/b.bin", b"67")
    c.append("w/log", b"abc")
    assert c.read_range("w/a.bin", 1, 4) == b"234"
    assert c.read_all("w/b.bin") == b"67"
    assert len(list(c.list("w"))) == 3
    assert c.stat("w/a.bin").size == 5
    c.copy("w/a.bin", "w/c.bin")
    c.replace("w/c.bin", "w/d.bin")
    with c.open_read("w/a.bin") as r:
        assert r.read(2) == b"12" and r.read(10) == b"345"
    assert [r.ok for r in c.delete(["w/a.bin", "w/b.bin"])] == [True, True]
    calls = c.counts.calls
    assert (calls["put"], calls["append"], calls["list"], calls["copy"], calls["replace"], calls["delete"]) == \
        (2, 1, 1, 1, 1, 1)
    assert calls["read"] == 4 and calls["stat"] == 2  # two ranged reads of the reader; its size: a stat
    assert c.counts.bytes_up == 10 and c.counts.bytes_down == 3 + 2 + 5
    d = c.counts.to_dict()
    assert d["requests"] == sum(calls.values()) and d["bytes_up"] == 10
    # the requests behind them: the same RequestStats on a folder as on a bucket
    assert isinstance(store.stats, RequestStats)
    s = store.stats.to_dict()
    assert s["put"] >= 3 and s["read"] >= 4 and s["list"] >= 1 and s["head"] >= 1 and s["delete"] >= 1
    assert s["bytes_up"] >= 10 and s["bytes_down"] >= 10


def test_throttled_store_holds_the_rate(store):
    clock = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        clock[0] += s

    bucket = TokenBucket(10, burst=1, clock=lambda: clock[0], sleep=sleep)
    t = ThrottledStore(store, bucket=bucket)
    t.put("t/a", b"0123456789")
    for _ in range(10):
        t.stat("t/a")
    t.delete(["t/a", "t/b", "t/c"])  # one token per key
    # 14 metadata operations at 10 per second with a burst of one: 1.3 s of waiting
    assert sum(slept) == pytest.approx(1.3, abs=1e-6)
    before = sum(slept)
    t.put("t/d", b"x" * 100)
    clock[0] += 10  # refill
    with t.open_read("t/d", size=100) as r:  # ranged reads are data, not metadata: no token
        for _ in range(20):
            r.read(5)
    assert t.read_range("t/d", 0, 1) == b"x"
    assert sum(slept) == pytest.approx(before + 0.1, abs=1e-6)
    # in real time too: 6 stats at 20/s after the burst take >= 0.25 s
    real = ThrottledStore(store, 20)
    real.bucket.tokens = 0
    t0 = time.monotonic()
    for _ in range(6):
        real.stat("t/d")
    assert time.monotonic() - t0 >= 0.25


def test_throttled_store_shares_the_process_limit(store):
    from tb_footprint_plugin.storage import throttle

    t = ThrottledStore(store)  # no rate of its own: --max-file-ops-per-second's bucket
    t.stat("x")  # unset: free, and not counted
    throttle.configure(1e6)
    try:
        before = throttle.ops_count
        t.put("x", b"1")
        t.stat("x")
        t.delete(["x", "y"])
        assert throttle.ops_count - before >= 4
    finally:
        throttle.configure(None)


# --- opening --------------------------------------------------------------------------------------------
def test_open_store_picks_the_implementation(tmp_path, objstore_pool):
    assert isinstance(open_store(str(tmp_path)), PosixStore)
    assert isinstance(open_store(f"file://{tmp_path}"), PosixStore)
    b = Bucket(objstore_pool.get("s3"))
    s = open_store(b.url("logs"))
    assert isinstance(s, ObjectStore) and s.location == b.url("logs")
    fails(StoreError.NOT_SUPPORTED, open_store, "memory://somewhere/x")
    fails(StoreError.UNSAFE_KEY, open_store, "s3://")
    fails(StoreError.NOT_FOUND, open_store, str(tmp_path / "missing"))


# --- POSIX: symlinks and special files are never followed or opened -------------------------------------
@pytest.fixture
def planted(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    (root / "run" / "ok.txt").write_bytes(b"ok")
    os.symlink(outside, root / "linkdir")
    os.symlink(outside / "secret.txt", root / "run" / "link.txt")
    os.mkfifo(root / "run" / "fifo")
    return PosixStore(str(root)), outside


def test_posix_refuses_symlinks_and_special_files(planted):
    store, outside = planted
    assert keys_of(store) == ["run/ok.txt"]  # links and the FIFO are not entries
    for key in ("linkdir/secret.txt", "linkdir/new.txt"):
        fails(StoreError.SYMLINK, store.stat, key)
        fails(StoreError.SYMLINK, store.read_all, key)
        fails(StoreError.SYMLINK, store.put, key, b"x")
        fails(StoreError.SYMLINK, store.append, key, b"x")
        fails(StoreError.SYMLINK, store.copy, "run/ok.txt", key)
        fails(StoreError.SYMLINK, store.replace, "run/ok.txt", key)
        assert store.delete([key])[0].code == StoreError.SYMLINK
    fails(StoreError.SYMLINK, lambda: list(store.list("linkdir")))
    fails(StoreError.SYMLINK, store.mkdir, "linkdir/sub")
    fails(StoreError.SYMLINK, store.read_all, "run/link.txt")
    fails(StoreError.SYMLINK, store.stat, "run/link.txt")
    fails(StoreError.SYMLINK, store.append, "run/link.txt", b"x")
    fails(StoreError.SYMLINK, store.copy, "run/link.txt", "run/copy.txt")
    assert store.delete(["run/link.txt"])[0].code == StoreError.SYMLINK  # the planted link is kept
    assert os.path.islink(os.path.join(store.root, "run", "link.txt"))
    res = store.delete(["run", "run/fifo"])  # a folder or a FIFO is not a file: kept, and said so
    assert [r.code for r in res] == [StoreError.NOT_REGULAR, StoreError.NOT_REGULAR]
    fails(StoreError.NOT_REGULAR, store.read_all, "run/fifo")  # never blocks on a FIFO
    fails(StoreError.NOT_REGULAR, store.append, "run/fifo", b"x")
    assert sorted(os.listdir(outside)) == ["secret.txt"] and (outside / "secret.txt").read_bytes() == b"secret"
    # a put over a planted symlink's name neither writes through it nor destroys it
    fails(StoreError.SYMLINK, store.put, "run/link.txt", b"mine")
    fails(StoreError.SYMLINK, store.replace, "run/ok.txt", "run/link.txt")
    fails(StoreError.NOT_REGULAR, store.put, "run/fifo", b"mine")
    assert os.path.islink(os.path.join(store.root, "run", "link.txt"))
    assert (outside / "secret.txt").read_bytes() == b"secret" and store.read_all("run/ok.txt") == b"ok"
    assert keys_of(store) == ["run/ok.txt"]  # and no temporary file left behind


def test_posix_folder_swapped_for_a_link_mid_walk_is_not_followed(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    store = PosixStore(str(root))
    store.put("a/f", b"1")
    os.rename(root / "a", tmp_path / "a-moved")
    os.symlink(tmp_path / "outside", root / "a")
    fails(StoreError.SYMLINK, store.put, "a/f", b"2")
    assert os.listdir(tmp_path / "outside") == []


def test_posix_conditional_writes_have_one_winner(tmp_path):
    """Racing writers through PosixStore: of those holding the same version (or none), exactly one
    wins each round, the others get the conflict code (the flock and the re-check)."""
    store = PosixStore(str(tmp_path))
    for rnd in range(12):
        v = store.stat("lease.json").version if rnd else None
        outcomes = []
        barrier = threading.Barrier(6)

        def racer(i):
            barrier.wait()
            try:
                if v is None:
                    store.put("lease.json", f"{rnd}:{i}".encode(), if_absent=True)
                else:
                    store.put("lease.json", f"{rnd}:{i}".encode(), if_version=v)
                outcomes.append(("won", i))
            except StoreFailure as e:
                outcomes.append((e.code, i))

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for what, i in outcomes if what == "won"]
        assert len(winners) == 1, outcomes
        lost = {what for what, _ in outcomes if what != "won"}
        assert lost == {StoreError.ALREADY_EXISTS if v is None else StoreError.PRECONDITION_FAILED}
        assert store.read_all("lease.json") == f"{rnd}:{winners[0]}".encode()
    assert keys_of(store) == ["lease.json"]
