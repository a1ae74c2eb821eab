"""A ``PosixStore`` opens a key's folder in one ``openat2`` (RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH:
no symlink on the way, never above its root) where the system has it, instead of two calls a
folder (r22 task C: the local engine's checks go through the logdir's store, and a restore's
system calls must not grow); every refusal is still the walk's, with the walk's code.
"""
import hashlib
import os

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import store_posix
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import PosixStore

DATA = bytes(range(256)) * 40
SHA = hashlib.sha256(DATA).hexdigest()


def _code(fn, *args):
    with pytest.raises(StoreFailure) as e:
        fn(*args)
    return e.value.code


@pytest.fixture(params=["openat2", "walk"])
def resolving(request, monkeypatch):
    if request.param == "walk":
        monkeypatch.setattr(store_posix, "_openat2_off", True, raising=False)
    elif not _has_openat2():
        pytest.skip("no openat2 on this system")
    return request.param


def _has_openat2() -> bool:
    # (a version without the one-call resolution is no system without openat2: its test runs)
    return getattr(store_posix, "_openat2", lambda: True)() is not None


@pytest.fixture
def planted(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b" / "c" / "d").mkdir(parents=True)
    (root / "a" / "b" / "c" / "d" / "f").write_bytes(DATA)
    (root / "a" / "b" / "file").write_bytes(b"x")
    outside.mkdir()
    (outside / "d").mkdir()
    (outside / "d" / "f").write_bytes(DATA)
    os.symlink(outside, root / "a" / "b" / "lnk")
    os.symlink(root / "a" / "b" / "c" / "d" / "f", root / "a" / "flink")
    os.mkfifo(root / "a" / "fifo")
    return PosixStore(str(root)), outside


def test_a_key_deep_in_folders_reads_and_refuses_as_the_walk_does(resolving, planted):
    store, outside = planted
    assert store.read_all("a/b/c/d/f") == DATA
    with store.open_read("a/b/c/d/f") as r:
        assert r.seek(0, os.SEEK_END) == len(DATA)
    assert _code(store.read_all, "a/b/lnk/d/f") == StoreError.SYMLINK  # a link half-way: never followed
    assert _code(store.stat, "a/b/lnk/d/f") == StoreError.SYMLINK
    assert _code(store.put, "a/b/lnk/d/new", b"x") == StoreError.SYMLINK
    assert _code(store.read_all, "a/flink") == StoreError.SYMLINK
    assert _code(store.read_all, "a/b/file/x") == StoreError.NOT_REGULAR  # a file on the way
    assert _code(store.read_all, "a/fifo") == StoreError.NOT_REGULAR  # never blocks
    assert _code(store.read_all, "a/gone/f") == StoreError.NOT_FOUND
    assert store.stat("a/gone/f") is None
    assert list(store.list("a/gone")) == []
    store.put("a/new/deeper/g", b"g")  # folders made on the way
    assert store.read_all("a/new/deeper/g") == b"g"
    assert sorted(os.listdir(outside)) == ["d"] and os.listdir(outside / "d") == ["f"]


def test_a_deep_key_is_opened_in_one_resolution(planted, monkeypatch):
    if not _has_openat2():
        pytest.skip("no openat2 on this system")
    store, _ = planted
    opened = []
    real_open = os.open

    def spy(path, *a, **kw):
        opened.append(path)
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", spy)
    assert store.read_all("a/b/c/d/f") == DATA
    # the root and the file: not a call a folder (the walk made 6 opens and 5 closes here)
    assert len(opened) == 2, opened
