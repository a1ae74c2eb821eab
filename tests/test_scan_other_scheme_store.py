"""A logdir under a URL of another fsspec scheme (not s3/gs/az: scanned and planned only, never
changed) is listed through the ``Store`` interface too (#26: "other fsspec schemes list through
RemoteFS"): ``scan.scanner._listing`` made a bucket's listing with ``ObjectStore.list`` but another
scheme's with ``RemoteFS.list_tree``, beside the interface. Now one ``ObjectStore`` lists both;
for another scheme it declares itself listed and read only (``LISTED_ONLY_CAPABILITIES``) and
refuses a write with ``StoreError.NOT_SUPPORTED``. The scheme here is an in-memory fsspec
filesystem registered by the test (keys without a leading slash, as a bucket's).
"""
from __future__ import annotations

import os

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.storage import store_object
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store import StoreFailure

SCHEME = "tbfpkeys"


class _KeyFS(MemoryFileSystem):
    """An in-memory store whose paths are ``bucket/key`` (no root slash), like a bucket's."""

    protocol = SCHEME
    root_marker = ""
    store: dict = {}
    pseudo_dirs = [""]

    @classmethod
    def _strip_protocol(cls, path):
        if path.startswith(f"{SCHEME}://"):
            path = path[len(SCHEME) + 3:]
        return path.rstrip("/")


@pytest.fixture
def keyfs_logdir(tmp_path):
    fsspec.register_implementation(SCHEME, _KeyFS, clobber=True)
    _KeyFS.store.clear()
    local = tmp_path / "logs"
    generate_demo(str(local), scale=0.02)
    fs = fsspec.filesystem(SCHEME)
    for root, _dirs, files in os.walk(local):
        for n in files:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                fs.pipe_file(f"b/logs/{os.path.relpath(p, local)}", f.read())
    yield local, f"{SCHEME}://b/logs"
    _KeyFS.store.clear()


def test_another_schemes_logdir_is_listed_through_the_store(keyfs_logdir, monkeypatch):
    local, url = keyfs_logdir
    listed = []
    real = store_object.ObjectStore.list

    def spy(self, prefix="", **kw):
        listed.append((self.location, self.capabilities))
        return real(self, prefix, **kw)

    monkeypatch.setattr(store_object.ObjectStore, "list", spy)
    fp = api.scan(url, write_cache=False)
    assert listed == [(url, store_object.LISTED_ONLY_CAPABILITIES)], listed
    assert fp.requests["list"] == 1  # one listing, counted where RemoteFS counts it
    on_disk = api.scan(str(local), write_cache=False)
    assert {r.name: r.total_bytes for r in fp.runs} == {r.name: r.total_bytes for r in on_disk.runs}


def test_another_schemes_store_refuses_writes(keyfs_logdir):
    _local, url = keyfs_logdir
    store = store_object.ObjectStore(url, rfs=RemoteFS(url))
    caps = store.capabilities
    assert not (caps.conditional_put or caps.versions or caps.server_side_copy), caps
    assert any(e.key.endswith(".xplane.pb") for e in store.list())  # read: as a bucket's store
    with pytest.raises(StoreFailure) as e:
        store.put("x.bin", b"never written")
    assert e.value.code == StoreError.NOT_SUPPORTED
    assert "b/logs/x.bin" not in fsspec.filesystem(SCHEME).store


def test_a_scheme_that_names_paths_from_the_root_slash_is_not_an_empty_logdir(tmp_path):
    """fsspec's ``memory://`` (as sftp://, hdfs://) names its paths ``/logs/...`` where the logdir's
    root is spelt ``logs``: every key was passed over and the logdir scanned as 0 runs, 0 bytes,
    with no error. Now it scans as the same folder on disk does."""
    local = tmp_path / "logs"
    generate_demo(str(local), scale=0.02)
    fs = fsspec.filesystem("memory")
    base = f"/tbfp-{os.getpid()}-{tmp_path.name}"
    try:
        for root, _dirs, files in os.walk(local):
            for n in files:
                p = os.path.join(root, n)
                with open(p, "rb") as f:
                    fs.pipe_file(f"{base}/logs/{os.path.relpath(p, local)}", f.read())
        fp = api.scan(f"memory:/{base}/logs", write_cache=False)
        on_disk = api.scan(str(local), write_cache=False)
        assert fp.runs and {r.name: r.total_bytes for r in fp.runs} == {r.name: r.total_bytes for r in on_disk.runs}
    finally:
        fs.rm(base, recursive=True)
