"""Learning that nothing is there costs one request (review R20-R, R3): a listing of an empty
prefix is one LIST on every store, and a listing with objects is one LIST a page with no HEAD.
s3fs's ``find`` of an empty prefix asked twice more whether the prefix was itself an object (a HEAD
and a LIST), gcsfs's listed it a second time, adlfs's HEADed the prefix before every listing and
twice for an empty one; every empty state folder a ``status`` lists paid it. On each store's
server behind the faulty proxy (recording only): what the server was sent is what is counted."""
from urllib.parse import urlsplit

import pytest

from faulty_proxy import FaultyProxy, Rule
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


@pytest.fixture
def watched(bucket, monkeypatch):
    """A logdir with one object, behind a proxy recording every request: (store, requests)."""
    bucket.fs.pipe_file(bucket.key("logs/run/a.txt"), b"hello\n")
    bucket.fs.pipe_file(bucket.key("logs/run/empty"), b"")  # straight to the server (the proxy drops an empty GCS upload)
    bucket.fs.invalidate_cache()
    up = urlsplit(bucket.server.endpoint)
    proxy = FaultyProxy(upstream=f"{up.scheme}://{up.netloc}").start()
    seen = []
    proxy.rules.append(Rule(match=lambda method, path: seen.append((method, path)) or False,
                            fault=(500, b""), times=0))
    if bucket.scheme == "s3":
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("S3_ENDPOINT", proxy.endpoint)
    elif bucket.scheme == "gs":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.endpoint)
    else:
        conn = bucket.server.env["AZURE_STORAGE_CONNECTION_STRING"]
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn.replace(f"{up.scheme}://{up.netloc}", proxy.endpoint))
    try:
        yield ObjectStore(bucket.url("logs")), seen
    finally:
        proxy.stop()


def test_an_empty_prefix_is_listed_with_one_request(watched):
    store, seen = watched
    assert list(store.list("nothing-here", shallow=True)) == []
    assert len(seen) == 1 and seen[0][0] == "GET" and "nothing-here%2F" in seen[0][1].replace("/", "%2F"), seen
    seen.clear()
    assert list(store.list("nothing/deeper")) == []
    assert len(seen) == 1, seen


def test_a_prefix_with_objects_is_still_one_request_and_lists_them_all(watched):
    store, seen = watched
    store.put("run/sub/b.txt", b"b")
    store.put("runs-beside/c.txt", b"c")  # a sibling whose name starts alike: not under run/
    seen.clear()
    assert [e.key for e in store.list("run")] == ["run/a.txt", "run/empty", "run/sub/b.txt"]
    assert [e.key for e in store.list("run", shallow=True)] == ["run/a.txt", "run/empty"]
    assert [e.key for e in store.list("")] == ["run/a.txt", "run/empty", "run/sub/b.txt", "runs-beside/c.txt"]
    assert len(seen) == 3 and all(m == "GET" for m, _ in seen), seen


def test_a_listing_sees_what_was_written_after_an_empty_one(watched):
    """Nothing of an empty listing is kept: an object written after it is listed by the next."""
    store, seen = watched
    assert list(store.list("later")) == []
    store.put("later/x.txt", b"x")
    assert [e.key for e in store.list("later")] == ["later/x.txt"]


def test_a_missing_object_is_not_found_with_one_request(watched):
    """A GET that finds no object says so (the client's ``FileNotFoundError``, a type): no HEAD
    is sent to ask again (every ``status`` reads the change log, normally absent, this way)."""
    store, seen = watched
    seen.clear()
    with pytest.raises(StoreFailure) as e:
        store.read_all("nothing/there.jsonl")
    assert e.value.code == StoreError.NOT_FOUND and e.value.key == "nothing/there.jsonl"
    assert len(seen) == 1 and seen[0][0] == "GET", seen


def test_a_range_past_the_end_still_reads_short_or_empty(watched):
    """The HEAD stays where it is needed: a range at or past an object's end (416 on S3 and Azure)
    reads what is there, as a file does."""
    store, _ = watched
    assert store.read_range("run/a.txt", 3, 100) == b"lo\n"
    assert store.read_range("run/a.txt", 6, 10) == b""
    assert store.read_range("run/a.txt", 50, 60) == b""
    assert store.read_all("run/empty") == b""
