"""Learning that nothing is there costs one request (review R20-R, R3): a listing of an empty
prefix is one LIST (s3fs's ``find`` asked twice more whether the prefix was itself an object: a
HEAD and a LIST), and every empty state folder a ``status`` lists paid it. On moto behind the
counting proxy: what the server was sent is what is counted."""
import pytest

from faulty_proxy import FaultyProxy, Rule
from tb_footprint_plugin.storage.store_object import ObjectStore


@pytest.fixture
def watched(s3_bucket, monkeypatch):
    """A logdir with one object, behind a proxy recording every request: (store, requests)."""
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/run/a.txt"), b"hello\n")
    s3_bucket.fs.invalidate_cache()
    proxy = FaultyProxy(upstream=s3_bucket.server.endpoint).start()
    seen = []
    proxy.rules.append(Rule(match=lambda method, path: seen.append((method, path)) or False,
                            fault=(500, b""), times=0))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("S3_ENDPOINT", proxy.endpoint)
    try:
        yield ObjectStore(s3_bucket.url("logs")), seen
    finally:
        proxy.stop()


def test_an_empty_prefix_is_listed_with_one_request(watched):
    store, seen = watched
    assert list(store.list("nothing-here", shallow=True)) == []
    assert len(seen) == 1 and seen[0][0] == "GET" and "prefix=logs%2Fnothing-here%2F" in seen[0][1], seen
    seen.clear()
    assert list(store.list("nothing/deeper")) == []
    assert len(seen) == 1, seen


def test_a_prefix_with_objects_is_still_one_request_and_lists_them_all(watched):
    store, seen = watched
    store.put("run/sub/b.txt", b"b")
    store.put("runs-beside/c.txt", b"c")  # a sibling whose name starts alike: not under run/
    seen.clear()
    assert [e.key for e in store.list("run")] == ["run/a.txt", "run/sub/b.txt"]
    assert [e.key for e in store.list("run", shallow=True)] == ["run/a.txt"]
    assert [e.key for e in store.list("")] == ["run/a.txt", "run/sub/b.txt", "runs-beside/c.txt"]
    assert len(seen) == 3 and all(m == "GET" for m, _ in seen), seen


def test_a_listing_sees_what_was_written_after_an_empty_one(watched):
    """Nothing of an empty listing is kept: an object written after it is listed by the next."""
    store, seen = watched
    assert list(store.list("later")) == []
    store.put("later/x.txt", b"x")
    assert [e.key for e in store.list("later")] == ["later/x.txt"]
