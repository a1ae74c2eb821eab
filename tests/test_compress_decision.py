"""Issue #27 (remains, task C item 1): whether a backup is stored compressed is decided on the
whole file, not on its start.

Before, ``zst.compress_stream`` gave up after its first ``PROBE_BYTES`` (8 MiB) when they did not
compress, and ``BlobStore`` judged a lone blob by its first MiB: a file random at its start and
compressible after (profile files that were 3/4 zeros behind a packed header, event files whose
first records are PNGs) stayed plain. Now a source that can seek is judged by ``zst.sample``:
windows at its start, its end and evenly between, no more bytes than the old probe read.
"""
import hashlib
import io
import os
from pathlib import Path

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.engine.vault import COMPRESSED, KEPT_INCOMPRESSIBLE, Vault
from tb_footprint_plugin.storage import zst
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore

MIB = 1 << 20


def random_then_zeros(random_mib: int = 9, total_mib: int = 24) -> bytes:
    """Random bytes for the first ``random_mib`` MiB (past the old 8 MiB probe), zeros after."""
    return os.urandom(random_mib * MIB) + bytes((total_mib - random_mib) * MIB)


def stored(v: Vault, tmp_path: Path, data: bytes) -> str:
    """``data`` backed up as a plain blob whose original name is gone (as after a swap)."""
    p = tmp_path / "logs" / "run" / "plugins" / "profile" / "s" / "host.xplane.pb"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    v.store(str(p), sha)
    os.unlink(p)
    return sha


def read_back(v: Vault, sha: str) -> bytes:
    with v.open_blob(sha) as f:
        return f.read()


@pytest.fixture
def counted(monkeypatch):
    """How many bytes the decision compressed in memory (the samples)."""
    seen = []
    real = zst._one_shot

    def one_shot(data, level):
        seen.append(len(data))
        return real(data, level)

    monkeypatch.setattr(zst, "_one_shot", one_shot)
    return seen


def test_compaction_compresses_a_file_random_at_its_start_and_round_trips(tmp_path):
    v = Vault(str(tmp_path / "vault"))
    v.ensure()
    data = random_then_zeros()
    sha = stored(v, tmp_path, data)
    assert v.compact(sha) == COMPRESSED
    assert not os.path.exists(v.blob_path(sha))
    assert os.path.getsize(v.zst_path(sha)) < 0.5 * len(data)
    assert read_back(v, sha) == data
    assert v.check_blob(sha)


def test_compaction_keeps_an_all_random_file_plain_reading_no_more_than_the_old_probe(tmp_path, counted):
    v = Vault(str(tmp_path / "vault"))
    v.ensure()
    data = os.urandom(24 * MIB)
    sha = stored(v, tmp_path, data)
    assert v.compact(sha) == KEPT_INCOMPRESSIBLE
    assert os.path.exists(v.blob_path(sha)) and not os.path.exists(v.zst_path(sha))
    assert not [n for n in os.listdir(os.path.dirname(v.blob_path(sha))) if ".zst.tmp" in n]
    # the decision's cost: the sampled windows, as many bytes as the old give-up compressed
    assert 0 < sum(counted) <= zst.PROBE_BYTES
    assert len(counted) == zst.SAMPLES
    assert read_back(v, sha) == data


def test_samples_cover_the_start_the_end_and_between():
    size = 100 * MIB
    starts = []

    class Spy(io.BytesIO):
        def seek(self, at, whence=0):
            if whence == 0:
                starts.append(at)
            return super().seek(at, whence)

    f = Spy(bytes(size))
    f.seek(123)
    starts.clear()
    got = zst.sample(f, size)
    assert f.tell() == 123  # left where it was
    windows = starts[:-1]
    assert windows[0] == 0 and windows[-1] == size - zst.SAMPLE_BYTES
    assert len(windows) == zst.SAMPLES
    gaps = {b - a for a, b in zip(windows, windows[1:])}
    assert max(gaps) - min(gaps) <= 1  # evenly spaced
    assert got[0] == zst.SAMPLES * zst.SAMPLE_BYTES and got[1] < got[0] // 100


def test_a_stream_that_cannot_seek_still_gives_up_on_its_start():
    """The fallback stays what it was: a source read once is judged by its first PROBE_BYTES."""

    class Once(io.RawIOBase):
        def __init__(self, b):
            self.f = io.BytesIO(b)

        def readable(self):
            return True

        def readinto(self, b):
            d = self.f.read(len(b))
            b[:len(d)] = d
            return len(d)

    data = random_then_zeros()
    assert zst.compress_stream(io.BufferedReader(Once(data)), io.BytesIO(), len(data)) is None
    out = io.BytesIO()
    got = zst.compress_stream(io.BytesIO(data), out, len(data))
    assert got is not None and got[0] == len(data) and got[1] < 0.5 * len(data)
    with zst.open_decompressed(io.BytesIO(out.getvalue())) as d:
        assert d.read() == data


def source(path: Path) -> BlobSource:
    data = path.read_bytes()
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda: open(path, "rb"))


def add_both_and_check(store, tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.bin"
    mixed.write_bytes(random_then_zeros())
    noise = tmp_path / "noise.bin"
    noise.write_bytes(os.urandom(12 * MIB))
    bs = BlobStore(store)
    a, b = bs.add([source(mixed), source(noise)])
    assert not a.packed and a.form == "zst" and a.length < 0.5 * a.size
    assert not b.packed and b.form == "raw" and b.length == b.size
    fresh = BlobStore(store)
    for ref, path in ((a, mixed), (b, noise)):
        assert fresh.check(ref.sha) is None
        with fresh.open(ref.sha) as f:
            assert f.read() == path.read_bytes()


def test_blobstore_add_compresses_a_file_random_at_its_start_posix(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    add_both_and_check(PosixStore(str(root)), tmp_path)


def test_blobstore_add_compresses_a_file_random_at_its_start_s3(tmp_path, s3_bucket: Bucket):
    store = ObjectStore(s3_bucket.url("vault"))
    try:
        add_both_and_check(store, tmp_path)
    finally:
        store.close()
