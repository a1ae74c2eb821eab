"""A pack's small blobs are compressed by one encoder context a thread (``zst.compress_whole``),
not one made per blob (issue #27 item 5: the packed vault's heavy reduce made 1,500 for 1,500
profile files). The frames stay what ``compress_stream`` writes: content size and checksum in
each, each one frame on its own, whatever was compressed before it on the thread."""
import hashlib
import io
import threading

import pytest

from tb_footprint_plugin.storage import blobstore, zst
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore


def _data(i: int) -> bytes:
    return b"".join(b"event %05d of blob %d\n" % (j, i) for j in range(40 + i))


def test_each_frame_holds_its_size_and_checksum_and_stands_alone():
    frames = [zst.compress_whole(_data(i)) for i in range(5)]
    for i, f in enumerate(frames):
        assert zst.content_size(f[:zst.HEADER_MAX]) == len(_data(i))
        assert zst.decompress_bounded(f, len(_data(i))) == _data(i)
        with zst.open_decompressed(io.BytesIO(f)) as r:
            assert r.read() == _data(i)
        bad = f[:-1] + bytes([f[-1] ^ 0xFF])  # the frame's checksum is its last 4 bytes
        with pytest.raises(zst.DecodeError):
            zst.decompress_bounded(bad, len(_data(i)))
    assert zst.compress_whole(_data(3)) == frames[3]  # nothing of an earlier frame carries over


def test_threads_each_get_frames_of_their_own_data():
    out, errors = {}, []

    def work(k: int) -> None:
        try:
            for i in range(30):
                d = _data(i) + b"thread %d" % k
                assert zst.decompress_bounded(zst.compress_whole(d), len(d)) == d
            out[k] = True
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(out) == 4


def test_a_pack_of_small_blobs_makes_no_encoder_per_blob(tmp_path, monkeypatch):
    if zst._zs is None:
        cls, name = zst._std, "ZstdCompressor"
    else:
        cls, name = zst._zs, "ZstdCompressor"
    real = getattr(cls, name)
    made = []

    def counting(*a, **k):
        made.append(1)
        return real(*a, **k)

    # a fresh thread: its context is made here, once
    srcs = []
    for i in range(50):
        d = _data(i)
        srcs.append(BlobSource(sha=hashlib.sha256(d).hexdigest(), size=len(d), open=lambda d=d: io.BytesIO(d)))
    got = []

    def add() -> None:
        monkeypatch.setattr(cls, name, counting)
        got.extend(BlobStore(PosixStore(str(tmp_path / "packs"), create=True)).add(srcs))

    t = threading.Thread(target=add)
    t.start()
    t.join()
    assert len(got) == 50 and all(r.packed and r.form == "zst" for r in got)
    assert len(made) <= 1, f"{len(made)} encoders for 50 blobs"
    bs = BlobStore(PosixStore(str(tmp_path / "packs"), create=True))
    for i, r in enumerate(got):
        with bs.open(r.sha) as f:
            assert f.read() == _data(i)
    assert blobstore._compress(_data(1)) == zst.compress_whole(_data(1))
