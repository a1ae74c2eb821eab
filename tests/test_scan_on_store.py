"""The scan layer reaches a bucket through the ``Store`` interface only (issue #26: ``RemoteFS`` is
the object stores' client below ``ObjectStore``, nothing above it): its listing, its ranged reads
of event files, its cache in the bucket (``read_all``/``put``), the plan's trace measures and
selections (``transforms.plan_cache.BucketTraces``) and the survey's stored figure. Before, the
scanner built a ``RemoteFS`` and read with ``open_ranged``/``read_bytes``/``write_bytes``, the plan
cache built its own ``RemoteFS``, and ``api.survey`` handed the engine's ``RemoteFS`` on.

A logdir given only as a ``Store`` (a ``CountingStore`` around moto's ``ObjectStore``) is scanned
with every request through that wrapper: what it counts is what the store's own request counters
say the scan cost.
"""
import ast
from pathlib import Path

import pytest

from conftest import copy_real
from test_engine_on_store import store_bypasses
from test_scan_other_scheme_store import SCHEME, keyfs_logdir  # noqa: F401  (a fixture)
from test_shards import make_logdir
from tb_footprint_plugin.scan import scanner
from tb_footprint_plugin.scan.selcache import SelectionCache
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store import CountingStore
from tb_footprint_plugin.storage.store_object import ObjectStore

PKG = Path(__file__).resolve().parents[1] / "tb_footprint_plugin"
#: the modules of the scan layer, and those above it that reached a bucket for it
SCAN_SIDE = sorted(PKG.glob("scan/*.py")) + [PKG / "transforms" / "plan_cache.py", PKG / "api" / "survey.py"]


def remote_fs_uses(source: str, filename: str = "<module>") -> list:
    """``(line, text)`` of each way ``source`` takes the client below the ``Store``: ``RemoteFS``
    imported or named, anything reached on a name or attribute ``rfs``/``*_rfs``, and every
    listing or read past the interface (``test_engine_on_store.store_bypasses``)."""
    found = list(store_bypasses(source, filename))
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom) and any(a.name == "RemoteFS" for a in node.names):
            found.append((node.lineno, f"import RemoteFS from {node.module}"))
        elif isinstance(node, ast.Name) and (node.id == "RemoteFS" or node.id == "rfs" or node.id.endswith("_rfs")):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and (node.attr in ("RemoteFS", "rfs") or node.attr.endswith("_rfs")):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(set(found))


def test_the_checker_sees_each_way_to_the_client():
    src = ("from tb_footprint_plugin.storage.remote import RemoteFS, is_remote\n"
           "x = RemoteFS(url)\nself._rfs.url_of(k)\neng.rfs\nrfs = 1\nremote.RemoteFS\n"
           "store.open_read(k, 3)\nis_remote(u)\nother_rfs.read_bytes(k)\n")
    assert sorted({n for n, _ in remote_fs_uses(src)}) == [1, 2, 3, 4, 5, 6, 9]


def test_the_scan_layer_takes_no_remote_fs():
    found = {}
    for path in SCAN_SIDE:
        uses = remote_fs_uses(path.read_text(encoding="utf-8"), str(path))
        if uses:
            found[str(path.relative_to(PKG))] = uses
    assert not found, f"past the Store interface, onto RemoteFS: {found}"


@pytest.fixture
def past_the_store(monkeypatch):
    """Every way the scan reached a bucket before, past the ``Store``, fails the test."""
    def fail(*_a, **_k):
        raise AssertionError("a bucket reached past the Store interface")

    for name in ("list_tree", "open_ranged", "read_bytes", "write_bytes"):
        monkeypatch.setattr(RemoteFS, name, fail)


def _event_files(fp) -> int:
    return sum(1 for r in fp.runs for f in r.files if f.kind == "event")


def test_a_logdir_given_as_a_store_is_scanned_through_it(s3_bucket, tmp_path, past_the_store):
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 3), "logs")
    counted = CountingStore(ObjectStore(url))

    fp = scanner.scan_store(counted)
    events = _event_files(fp)
    assert sorted(r.name for r in fp.runs) == ["exp0/run000", "exp1/run001", "exp2/run002"] and events == 3
    calls = counted.counts.calls
    # one listing, each event file's ranged reads, one put of the cache: all through the wrapper,
    # and each call one request of the store's own counters (nothing else was asked of it)
    assert calls["list"] == fp.requests["list"] == 1, (calls, fp.requests)
    assert calls["read"] == fp.requests["read"] >= events, (calls, fp.requests)
    assert calls["put"] == fp.requests["put"] == 1, (calls, fp.requests)
    assert fp.requests["head"] == 0 and counted.counts.bytes_down == fp.requests["bytes_down"] > 0
    assert fp.files_read == events and fp.files_cached == 0

    again = CountingStore(ObjectStore(url))
    fp2 = scanner.scan_store(again)  # unchanged: one listing, one read of the cache, nothing written
    assert fp2.files_cached == events and fp2.files_read == 0
    assert {k: v for k, v in again.counts.calls.items() if v} == {"list": 1, "read": 1}, again.counts.calls
    assert fp2.requests["requests"] == 2 and fp2.total_bytes == fp.total_bytes


def test_the_scan_of_a_url_goes_through_its_object_store(s3_bucket, tmp_path, past_the_store):
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 2), "logs")
    fp = scanner.scan(url)
    assert len(fp.runs) == 2 and fp.files_read == 2 and fp.requests["put"] == 1
    assert scanner.scan(url).files_cached == 2


def test_a_key_no_call_can_address_is_an_unreadable_file_not_a_failed_scan(s3_bucket, tmp_path):
    """A planted ``a/../b`` event file (S3 keeps such a name) is listed; the ``Store`` refuses to
    read it (``UNSAFE_KEY``): the scan says that file is unreadable and scans the rest."""
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 1), "logs")
    s3_bucket.fs.pipe_file(f"{s3_bucket.key('logs')}/exp0/x/../events.out.tfevents.1700000000.h", b"planted")
    s3_bucket.fs.invalidate_cache()
    fp = scanner.scan(url, use_cache=False, write_cache=False)
    entries = [f for r in fp.runs for f in r.files if f.path.endswith("events.out.tfevents.1700000000.h")]
    assert entries and entries[0].warning and "exp0/x/../events" in entries[0].warning, entries
    assert "exp0/run000" in [r.name for r in fp.runs]


def test_the_plans_trace_measures_read_through_the_store_given(s3_bucket, tmp_path, past_the_store):
    from tb_footprint_plugin.transforms.plan_cache import BucketTraces

    url = s3_bucket.upload(copy_real("torch/profiled", tmp_path / "logdir"), "logs")
    fp = scanner.scan_store(ObjectStore(url), use_cache=False, write_cache=False)
    traced = [(r, f) for r in fp.runs for f in r.files if ".pt.trace.json" in f.path]
    assert traced
    counted = CountingStore(ObjectStore(url))
    measures = BucketTraces(url, cache=SelectionCache(str(tmp_path / "cache")), store=counted)
    run, f = traced[0]
    out = measures.trace_after(run, f.path)
    assert out and out.get("size", 0) > 0, out
    assert counted.counts.calls["read"] >= 1 and counted.counts.bytes_down == f.size
    assert measures.stats is counted.stats  # the plan's cost counts them where the store does


def test_a_store_listed_and_read_only_gets_no_scan_cache_written(keyfs_logdir):  # noqa: F811
    """A logdir under another fsspec scheme is scanned and planned, never changed: its store takes
    no write (``LISTED_ONLY_CAPABILITIES``), so its scan leaves no cache object there (before, it
    was written past the Store, through fsspec), says nothing about it, and scans again alike."""
    import fsspec

    from tb_footprint_plugin import api

    _local, url = keyfs_logdir
    fp = api.scan(url)
    assert fp.runs and fp.files_read > 0
    assert not [k for k in fsspec.filesystem(SCHEME).store if k.endswith("scan-cache.json")]
    assert not [w for w in fp.warnings if "scan cache" in w], fp.warnings
    again = api.scan(url)
    assert (again.files_read, again.total_bytes) == (fp.files_read, fp.total_bytes)


def test_a_cache_object_listed_past_its_limit_is_not_read(s3_bucket, tmp_path, monkeypatch):
    """The bucket's scan cache is untrusted: one the listing says is larger than
    ``REMOTE_CACHE_LIMIT`` is not read at all (no request; before, it was read whole however
    large), and the scan reads the event files instead."""
    from tb_footprint_plugin.scan import cache

    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 2), "logs")
    scanner.scan(url)  # writes the cache
    size = s3_bucket.fs.size(f"{s3_bucket.key('logs')}/.tb-footprint/scan-cache.json")
    monkeypatch.setattr(cache, "REMOTE_CACHE_LIMIT", size - 1, raising=False)
    counted = CountingStore(ObjectStore(url))
    fp = scanner.scan_store(counted, write_cache=False)
    assert fp.files_read == 2 and fp.files_cached == 0
    assert counted.counts.calls["read"] == fp.requests["read"] == 2, counted.counts.calls  # the event files only
    monkeypatch.setattr(cache, "REMOTE_CACHE_LIMIT", size)
    assert scanner.scan_store(ObjectStore(url), write_cache=False).files_cached == 2
