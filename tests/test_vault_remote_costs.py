"""What a local vault offloaded to a bucket costs in requests (issue #27, its remains): a restore
downloads each remote blob once (its check keeps the bytes the copy then reads, in memory up to
``remote_vault.STAGE_BYTES``), a lone blob is
created with one conditional put, a compacted ``.zst`` backup is sent as its zstd frame instead
of being decompressed and compressed again, and ``remote.json`` is read once, not per record."""
import os

import pytest

from test_vault_remote import make_logdir, offload_all, reduce_local, snapshot
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage.store import CountingStore
from tb_footprint_plugin.storage.stores import open_store


def make_big_logdir(root):
    """``make_logdir`` with one profile file of ~1.5 MB (a lone blob in the bucket, above
    ``PACK_BELOW``; compressible, so compaction keeps it as a ``.zst``)."""
    logdir = make_logdir(root)
    p = next((logdir / "a").rglob("*.xplane.pb"))
    st = p.stat()
    with open(p, "ab") as f:
        for i in range(20000):
            f.write(b"step %06d: op=MatMul shape=[128,256] dur_us=%d\n" % (i, (i * 7919) % 1000))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    return logdir


@pytest.fixture
def counted(monkeypatch):
    """Every store the remote vault opens from now on counts into one ``StoreStats``."""
    wrapped = []

    def opener(url):
        c = CountingStore(open_store(url))
        wrapped.append(c)
        return c

    monkeypatch.setattr(remote_vault, "open_store", opener)
    remote_vault._stores.clear()

    def total(verb):
        return sum(c.counts.to_dict().get(verb, 0) for c in wrapped)

    def reset():
        for c in wrapped:
            c.counts = type(c.counts)()
    return total, reset


def test_a_restore_from_the_bucket_downloads_each_blob_once(tmp_path, bucket, counted):
    total, reset = counted
    logdir = make_big_logdir(tmp_path)
    before = snapshot(logdir)
    reduce_local(logdir)
    vault = offload_all(logdir, bucket.url("v"))
    url = remote_vault.configured_url(vault.root)
    stored = sum(e.size for e in open_store(url).list("data"))
    live = sum(r.length for r in remote_vault.blobstore(url, fresh=True).refs())  # a pack's header is not a blob's
    reset()
    remote_vault._stores.clear()
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert snapshot(logdir) == before
    down = total("bytes_down")
    # every data object read once (and the index objects, small): was twice, check then copy
    assert live <= down < 1.5 * stored, (down, live, stored)
    # nothing kept is left behind once the restore took it, and nothing was staged on disk
    assert not [at for at in remote_vault._staged if at[0] == vault.root]
    assert not [d for d in os.listdir(os.path.join(vault.root, "offload")) if d.startswith("tbfp-stage-")]


def test_a_staged_copy_changed_before_the_restore_reads_it_is_refused(tmp_path, s3_bucket):
    logdir = make_big_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    remote_vault._stores.clear()
    sha = next(m["files"][0]["sha256"] for m in vault.manifests() if m.get("kind") == "reduce")
    assert vault.check_blob(sha)  # read whole from the bucket: kept (in memory)
    chunks, when, form = remote_vault._staged[(vault.root, sha)]
    last = chunks[-1]  # a byte near the end: a zstd frame's checksum or the bytes themselves
    remote_vault._staged[(vault.root, sha)] = (chunks[:-1] + [last[:-5] + bytes([last[-5] ^ 0xFF]) + last[-4:]], when,
                                               form)
    dest = tmp_path / "out" / "f"
    with pytest.raises(OSError):
        vault.restore_blob(sha, str(dest))
    assert not dest.exists() and (vault.root, sha) not in remote_vault._staged
    vault.restore_blob(sha, str(dest))  # read from the bucket again, whole and checked
    assert dest.exists()


def test_remote_json_is_read_once_for_many_records(tmp_path, s3_bucket, monkeypatch):
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    shas = [f["sha256"] for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]]
    assert len(shas) >= 2
    reads = []
    real = remote_vault._read_small_json
    monkeypatch.setattr(remote_vault, "_read_small_json",
                        lambda p: (reads.append(p), real(p))[1])
    remote_vault._urls.clear()
    assert all(remote_vault.read_record(vault.root, s) for s in shas * 5)
    assert sum(p.endswith(remote_vault.REMOTE_CONFIG) for p in reads) == 1, reads
    # a new remote vault configured is seen at once (the file changed)
    remote_vault.set_configured_url(vault.root, s3_bucket.url("w"))
    assert remote_vault.known_urls(vault.root)[0] == s3_bucket.url("w")
    assert all(remote_vault.read_record(vault.root, s) for s in shas)  # the old URL stays known


def _frame_of(data: bytes) -> bytes:
    import io

    from tb_footprint_plugin.storage import zst
    out = io.BytesIO()
    zst.compress_stream(io.BytesIO(data), out, size=len(data), give_up_ratio=None)
    return out.getvalue()


def _framed_source(data: bytes, frame: bytes):
    import hashlib
    import io

    from tb_footprint_plugin.storage.blobstore import BlobSource
    return BlobSource(sha=hashlib.sha256(data).hexdigest(), size=len(data), open=lambda: io.BytesIO(data),
                      frame=lambda: io.BytesIO(frame), frame_size=len(frame))


@pytest.mark.parametrize("n", [2000, 40000])  # packed, lone
def test_a_compressed_source_is_stored_as_its_frame_not_compressed_again(tmp_path, bucket, monkeypatch, n):
    from tb_footprint_plugin.storage import blobstore
    from tb_footprint_plugin.storage.blobstore import BlobStore

    def no(*a, **k):
        raise AssertionError("compressed again")

    monkeypatch.setattr(blobstore, "_compressor", no)
    monkeypatch.setattr(blobstore, "_compress", no)
    data = b"".join(b"line %06d of a trace: dur=%d\n" % (i, i % 97) for i in range(n))
    frame = _frame_of(data)
    src = _framed_source(data, frame)
    store = open_store(bucket.url("frames"))
    [ref] = BlobStore(store).add([src])
    assert ref.form == "zst" and ref.length == len(frame) and ref.packed == (len(data) < blobstore.PACK_BELOW)
    assert store.read_range(ref.key, ref.offset, ref.offset + ref.length) == frame  # sent as it is
    with BlobStore(store).open(src.sha) as f:
        assert f.read() == data


@pytest.mark.parametrize("n", [2000, 40000])
def test_a_frame_that_does_not_decode_to_the_claim_gets_no_ref(tmp_path, bucket, n):
    from tb_footprint_plugin.codes import BlobError
    from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobStore

    data = b"".join(b"line %06d of a trace\n" % i for i in range(n))
    other = _frame_of(data.replace(b"line 000100", b"LINE 000100"))
    store = open_store(bucket.url("bad-frames"))
    bs = BlobStore(store)
    with pytest.raises(BlobFailure) as e:
        bs.add([_framed_source(data, other)])
    assert e.value.code == BlobError.MISMATCH
    truncated = _frame_of(data)[:-20]
    with pytest.raises(BlobFailure) as e:
        bs.add([_framed_source(data, truncated)])
    assert e.value.code == BlobError.MISMATCH
    assert not BlobStore(store).has(_framed_source(data, other).sha)


def test_the_offload_sends_a_compacted_backup_as_its_frame(tmp_path, s3_bucket, monkeypatch):
    from tb_footprint_plugin.storage import blobstore

    logdir = make_big_logdir(tmp_path)
    before = snapshot(logdir)
    reduce_local(logdir)
    vault = Context(str(logdir)).vault
    big = max((f for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]), key=lambda f: f["size"])
    assert big["size"] >= blobstore.PACK_BELOW and vault.local_form(big["sha256"]) == "zst"
    with open(vault.zst_path(big["sha256"]), "rb") as f:
        local_frame = f.read()
    compressed = []
    real = blobstore._compressor
    monkeypatch.setattr(blobstore, "_compressor", lambda size: (compressed.append(size), real(size))[1])
    vault = offload_all(logdir, s3_bucket.url("v"))
    assert compressed == []  # was: the lone .zst decompressed here and compressed again
    url = remote_vault.configured_url(vault.root)
    ref = remote_vault.blobstore(url, fresh=True).ref(big["sha256"])
    assert ref.form == "zst" and open_store(url).read_all(ref.key) == local_frame
    remote_vault._stores.clear()
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert snapshot(logdir) == before


def test_a_lone_blob_is_created_with_one_conditional_put(tmp_path, bucket):
    import io
    import os as _os

    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.storage.store import StoreFailure
    from tb_footprint_plugin.storage.store_object import STAGE_PREFIX

    store = open_store(bucket.url("lone"))
    data = _os.urandom(600 * 1024)
    before = store.stats.to_dict()
    entry = store.put_file("data/ab/one", io.BytesIO(data), if_absent=True)
    after = store.stats.to_dict()
    spent = {k: after[k] - before[k] for k in ("put", "head", "copy", "delete", "read", "list")}
    # one conditional put and the head the entry is read from (the GCS emulator ignores
    # ifGenerationMatch=0: a head before the put there); was head, upload, copy (+head), delete, head
    emulated = bucket.url("x").startswith("gs://")
    assert spent["put"] == 1 and spent["copy"] == spent["delete"] == 0, spent
    assert sum(spent.values()) <= (3 if emulated else 2), spent
    assert entry.size == len(data) and store.read_all("data/ab/one") == data
    with pytest.raises(StoreFailure) as e:  # the server (or the emulator's check) refuses a second create
        store.put_file("data/ab/one", io.BytesIO(b"other bytes"), if_absent=True)
    assert e.value.code == StoreError.ALREADY_EXISTS and store.read_all("data/ab/one") == data
    # above a part: one conditional streamed upload (tests/test_objstore_create_once.py), no stage
    big = _os.urandom(6 << 20)
    assert store.put_file("data/ab/big", io.BytesIO(big), if_absent=True).size == len(big)
    with pytest.raises(StoreFailure) as e:
        store.put_file("data/ab/big", io.BytesIO(big[:100]), if_absent=True)
    assert e.value.code == StoreError.ALREADY_EXISTS
    assert not [k for k in bucket.fs.find(bucket.key("lone")) if STAGE_PREFIX in k]


def test_a_staged_copy_no_restore_takes_is_dropped_on_its_own(tmp_path, s3_bucket, monkeypatch):
    import time

    logdir = make_big_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    remote_vault._stores.clear()
    monkeypatch.setattr(remote_vault, "STAGE_SECONDS", 0.4)
    for t in remote_vault._expiry:  # a timer an earlier test started runs on the old period
        t.cancel()
    remote_vault._expiry.clear()
    sha = next(m["files"][0]["sha256"] for m in vault.manifests() if m.get("kind") == "reduce")
    assert vault.check_blob(sha)  # a verify: read whole, kept, never taken
    assert (vault.root, sha) in remote_vault._staged
    deadline = time.monotonic() + 10
    while (vault.root, sha) in remote_vault._staged and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (vault.root, sha) not in remote_vault._staged
