"""A pack's small blobs are decoded at once from the bytes in memory (a pack window, a pack read
back) instead of streamed through a decoder made per blob (issue #27 item 5: a restore of 1,500
packed profile files made 5,400 decoders). The checks stay: a frame that decodes to other bytes,
to more or fewer bytes than its blob, or not at all is refused with ``corrupt`` when read (as the
stream refused it), and a frame declaring far more than its blob is decoded no further than the
blob's size (memory bounded whatever an untrusted pack says)."""
import hashlib
import json
import secrets

import pytest
import zstandard

from tb_footprint_plugin.codes import BlobError
from tb_footprint_plugin.storage import blobstore, zst
from tb_footprint_plugin.storage.blobstore import PACK_MAGIC, BlobFailure, BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore


def _planted(tmp_path, entries):
    """A store with one pack holding ``entries`` (stored bytes, claimed original, form) as listed
    by one index object; returns (store, [sha claimed of each])."""
    (tmp_path / "root").mkdir()
    store = PosixStore(str(tmp_path / "root"))
    pid = secrets.token_hex(16)
    key = f"data/{pid[:2]}/{pid}.pack"
    body, rows, shas, at = b"", [], [], len(PACK_MAGIC)
    for stored, claimed, form in entries:
        sha = hashlib.sha256(claimed).hexdigest()
        rows.append([sha, len(claimed), key, at, len(stored), form, [""]])
        shas.append(sha)
        body += stored
        at += len(stored)
    store.put(key, PACK_MAGIC + body)
    store.put(f"index/{secrets.token_hex(16)}.json", json.dumps({"v": 1, "blobs": rows}).encode())
    return store, shas


def _read(bs, sha):
    with bs.open(sha) as f:
        return f.read()


def test_good_small_blobs_read_back_from_the_window(tmp_path):
    a, b = b"loss=0.1 " * 300, bytes(range(256)) * 4
    store, shas = _planted(tmp_path, [(zstandard.ZstdCompressor().compress(a), a, "zst"), (b, b, "raw")])
    bs = BlobStore(store)
    assert _read(bs, shas[0]) == a and _read(bs, shas[1]) == b


@pytest.mark.parametrize("case", ["other_bytes", "raw_changed", "truncated", "not_zstd", "longer", "shorter"])
def test_a_bad_small_blob_opens_and_is_refused_as_corrupt_when_read(tmp_path, case):
    good = b"step 1 loss 0.5\n" * 200
    frame = zstandard.ZstdCompressor().compress(good)
    stored, form, claimed = {
        "other_bytes": (zstandard.ZstdCompressor().compress(good.replace(b"5", b"6")), "zst", good),
        "raw_changed": (good[:-1] + b"!", "raw", good),
        "truncated": (frame[:-6], "zst", good),
        "not_zstd": (b"x" * len(frame), "zst", good),
        "longer": (zstandard.ZstdCompressor().compress(good + b"more"), "zst", good),
        "shorter": (zstandard.ZstdCompressor().compress(good[:-1]), "zst", good),
    }[case]
    store, shas = _planted(tmp_path, [(stored, claimed, form)])
    bs = BlobStore(store)
    f = bs.open(shas[0])  # a stream: the failure comes with the read, as before
    with pytest.raises(BlobFailure) as ei:
        f.read()
    f.close()
    assert ei.value.code == BlobError.CORRUPT and ei.value.sha == shas[0]
    assert bs.check(shas[0]).code == BlobError.CORRUPT


def test_a_frame_declaring_far_more_than_its_blob_is_decoded_no_further_than_the_blob(tmp_path, monkeypatch):
    bomb = zstandard.ZstdCompressor().compress(b"a" * (64 << 20))  # ~2 KB stored, 64 MB declared
    claimed = b"a" * 1000
    store, shas = _planted(tmp_path, [(bomb, claimed, "zst")])
    limits = []
    real = zst.decompress_bounded

    def spy(data, limit):
        out = real(data, limit)
        limits.append((limit, len(out)))
        return out

    monkeypatch.setattr(zst, "decompress_bounded", spy)
    with pytest.raises(BlobFailure) as ei:
        _read(BlobStore(store), shas[0])
    assert ei.value.code == BlobError.CORRUPT
    assert limits == [(1001, 1001)]  # the blob's size and one byte: never the 64 MB


def test_decompress_bounded_stops_at_its_limit_and_names_damage():
    bomb = zstandard.ZstdCompressor().compress(b"a" * (64 << 20))
    assert len(zst.decompress_bounded(bomb, 4096)) == 4096
    with pytest.raises(zst.DecodeError):
        zst.decompress_bounded(b"not a zstd frame at all", 100)
    ok = zstandard.ZstdCompressor().compress(b"fine" * 100)
    assert zst.decompress_bounded(ok, 1000) == b"fine" * 100  # the context is usable after a failure


def test_a_pack_read_back_with_a_damaged_small_blob_is_refused_by_add(tmp_path, monkeypatch):
    """``add`` reads its pack back and checks every blob (the same decode at once): a pack whose
    stored bytes changed before the read back is refused and no ref returned."""
    from tb_footprint_plugin.storage.blobstore import BlobSource
    import io

    data = [b"xplane %d " % i * 100 for i in range(5)]
    items = [BlobSource(sha=hashlib.sha256(d).hexdigest(), size=len(d), open=lambda d=d: io.BytesIO(d)) for d in data]
    (tmp_path / "root").mkdir()
    store = PosixStore(str(tmp_path / "root"))
    put = store.put

    def damaging_put(key, body, **kw):
        if key.endswith(".pack"):
            body = body[:-3] + bytes(3)  # the last blob's stored bytes are not what was written
        return put(key, body, **kw)

    monkeypatch.setattr(store, "put", damaging_put)
    with pytest.raises(BlobFailure) as ei:
        BlobStore(store).add(items)
    assert ei.value.code == BlobError.CORRUPT
    assert not list(store.list("index"))  # nothing indexed: the originals stay the only copies
    assert blobstore.SMALL_DECODE >= max(map(len, data))  # the path this test is about
