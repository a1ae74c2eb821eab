"""``Store.version``: the one "same version" rule of every store (review R5 F8), run on a folder,
moto's S3, the GCS emulator and Azurite. Two looks at a key that give the same version saw the
same bytes unchanged; nothing at a key is None; on a folder, a thing that is not a regular file
(a folder, a link, a FIFO, a folder on the way that is a link) is refused with its code, never
taken for "nothing" nor followed. The put-back of a restore and the swap ask it through the
logdir's store (``swap.put_back``, ``placement``)."""
import os
import time

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.store import CountingStore, StoreFailure
from tb_footprint_plugin.storage.store_posix import PosixStore, version_token


def fails(code, fn, *args):
    with pytest.raises(StoreFailure) as ei:
        fn(*args)
    assert ei.value.code == code, f"{ei.value.code} != {code}: {ei.value}"


def test_version_is_the_entry_s_and_changes_with_the_bytes(store):
    assert store.version("run/missing") is None and store.version("no/such/folder/x") is None
    v1 = store.put("run/f.bin", b"first bytes")
    assert store.version("run/f.bin") == v1 == store.stat("run/f.bin").version
    assert store.version("run/f.bin") == v1  # asked again: the same bytes, the same version
    time.sleep(0.01)  # a folder's version carries the mtime, a bucket's is a new object anyway
    v2 = store.put("run/f.bin", b"other bytes")  # the same size, new bytes
    assert v2 != v1 and store.version("run/f.bin") == v2
    v3 = store.append("run/f.bin", b" and more")
    assert v3 not in (v1, v2) and store.version("run/f.bin") == v3
    store.delete(["run/f.bin"])
    assert store.version("run/f.bin") is None
    fails(StoreError.UNSAFE_KEY, store.version, "../x")
    counted = CountingStore(store)
    counted.version("run/f.bin")
    assert counted.counts.calls["stat"] == 1  # a wrapper forwards it, counted as a look


def test_a_folder_s_version_refuses_what_is_no_file(tmp_path):
    """On a folder a version is a regular file's: a folder at the key is not "nothing" (``stat``
    says None for it), a link at the key or on the way is never followed, a FIFO never opened."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "run" / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "f.bin").write_bytes(b"outside")
    (root / "run" / "f.bin").write_bytes(b"inside")
    os.symlink(outside / "f.bin", root / "run" / "link.bin")
    os.symlink(outside, root / "linked")
    os.mkfifo(root / "run" / "fifo")
    s = PosixStore(str(root))
    assert s.stat("run/sub") is None
    fails(StoreError.NOT_REGULAR, s.version, "run/sub")
    fails(StoreError.NOT_REGULAR, s.version, "run/fifo")
    fails(StoreError.SYMLINK, s.version, "run/link.bin")
    fails(StoreError.SYMLINK, s.version, "linked/f.bin")
    st = os.lstat(root / "run" / "f.bin")
    # a record that kept a file's inode, size and mtime (a retirement's tree) is compared by the same rule
    assert s.version("run/f.bin") == version_token(st.st_ino, st.st_size, st.st_mtime_ns)
    assert s.version("run/f.bin") != version_token(st.st_ino, st.st_size, st.st_mtime_ns + 1)
    # a writer's append by its own open (no store): size and mtime change, so does the version
    before = s.version("run/f.bin")
    with open(root / "run" / "f.bin", "ab") as f:
        f.write(b" appended")
    assert s.version("run/f.bin") != before
    # a file made anew at the name: another inode, another version, even with the same bytes and time
    st = os.lstat(root / "run" / "f.bin")
    before = s.version("run/f.bin")
    os.rename(root / "run" / "f.bin", root / "run" / "old.bin")
    (root / "run" / "f.bin").write_bytes(b"inside appended")
    os.utime(root / "run" / "f.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert s.version("run/f.bin") != before
