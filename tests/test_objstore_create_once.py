"""A large object created if absent is one streamed upload whose completing request carries the
condition (issue #27 item 3): S3 ``If-None-Match: *`` on CompleteMultipartUpload, Azure
``If-None-Match: *`` on Put Block List, GCS ``ifGenerationMatch=0`` on the resumable upload —
no upload under a temporary key, no server-side copy, no delete of the stage. Each test server is
checked to really refuse a second create of the key (the GCS emulator ignores the condition: a
metadata read guards it there), and the refused upload leaves nothing behind."""
import hashlib
import io
import math
import os
import threading

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.store import STREAM_PART, StoreFailure
from tb_footprint_plugin.storage.store_object import STAGE_PREFIX
from tb_footprint_plugin.storage.stores import open_store

#: three parts: a multipart (resumable, block) upload on every store
SIZE = 2 * STREAM_PART + 12345
VERBS = ("put", "head", "copy", "delete", "read", "list")


def _spy_uploads(store, monkeypatch) -> list:
    """(key, exclusive) of every streamed upload the store starts."""
    seen = []
    real = store.rfs.upload_stream

    def upload(rel, *a, **k):
        seen.append((rel, bool(k.get("exclusive"))))
        return real(rel, *a, **k)

    monkeypatch.setattr(store.rfs, "upload_stream", upload)
    return seen


def _spent(store, fn):
    before = store.stats.to_dict()
    out = fn()
    after = store.stats.to_dict()
    return out, {k: after[k] - before[k] for k in VERBS}


def test_a_large_object_is_created_if_absent_in_one_upload(bucket, monkeypatch):
    store = open_store(bucket.url("big"))
    uploads = _spy_uploads(store, monkeypatch)
    data = os.urandom(SIZE)
    entry, spent = _spent(store, lambda: store.put_file("data/ab/big", io.BytesIO(data), if_absent=True))
    # the key itself, created only if absent: was an upload under .footprint-tmp-…, then a copy
    assert uploads == [("data/ab/big", True)]
    parts = math.ceil(SIZE / STREAM_PART)
    # a head first (an existing blob is never overwritten by a server ignoring the condition),
    # start + parts + completion, and the head the entry is read from; before: a head to fail
    # early, the staged upload, a head and a copy (the condition), a delete of the stage, a head
    assert spent == {"put": parts + 2, "head": 2, "copy": 0, "delete": 0, "read": 0,
                     "list": 0}, spent
    assert entry.size == SIZE
    assert hashlib.sha256(store.read_range("data/ab/big", 0, SIZE)).digest() == hashlib.sha256(data).digest()
    # a second create, sequentially, is refused with the store's "exists" failure: the bytes stay
    with pytest.raises(StoreFailure) as e:
        store.put_file("data/ab/big", io.BytesIO(os.urandom(SIZE)), if_absent=True)
    assert e.value.code == StoreError.ALREADY_EXISTS
    assert store.read_range("data/ab/big", 0, SIZE) == data and store.stat("data/ab/big").version == entry.version
    assert not [k for k in bucket.fs.find(bucket.key("big")) if STAGE_PREFIX in k]
    assert [e.key for e in store.list("")] == ["data/ab/big"]
    if bucket.scheme == "s3":  # the refused multipart upload was aborted, not left billed
        b, _, prefix = store.rfs.root.partition("/")
        assert not store.ops.client.list_multipart_uploads(Bucket=b, Prefix=prefix).get("Uploads")


def test_the_server_itself_refuses_the_second_create(bucket, monkeypatch):
    """Without the metadata read (a create racing another), the refusal is the server's on S3 and
    Azure, at the completing request (the bytes are sent, then not committed). The GCS emulator
    takes ifGenerationMatch=0 and writes anyway: the read is its only guard."""
    store = open_store(bucket.url("srv"))
    data = os.urandom(SIZE)
    store.put_file("k", io.BytesIO(data), if_absent=True)
    monkeypatch.setattr(store.ops, "check_absent", lambda path: None)  # as if raced after the read
    if bucket.scheme == "gs":
        store.put_file("k", io.BytesIO(b"z" * SIZE), if_absent=True)  # the emulator overwrites: why the read stays
        assert store.read_range("k", 0, 4) == b"zzzz"
        return
    monkeypatch.setattr(store, "_head", lambda key: None)  # whatever a head would say
    uploaded = []
    real = store.rfs.upload_stream
    monkeypatch.setattr(store.rfs, "upload_stream", lambda rel, *a, **k: (uploaded.append(rel), real(rel, *a, **k))[1])
    with pytest.raises(StoreFailure) as e:
        store.put_file("k", io.BytesIO(b"z" * SIZE), if_absent=True)
    assert e.value.code == StoreError.ALREADY_EXISTS and uploaded == ["k"]
    assert store.read_range("k", 0, SIZE) == data


# Azurite only: moto 5.2 checks If-None-Match on the completion, then completes, with no lock
# between (two completions at the same instant both landed here, one over the other), and the
# GCS emulator ignores the condition; the staged path is no better on either (moto ignores the
# copy's If-None-Match and the emulator the rewrite's ifGenerationMatch=0: both were guarded by
# the same metadata read). S3 and GCS themselves refuse the second create atomically (S3: 412,
# or 409 ConditionalRequestConflict while the first is completing; GCS: 412).
@pytest.mark.parametrize("scheme", ["az"])
def test_two_concurrent_creates_of_one_key_have_one_winner(objstore_pool, scheme):
    bucket = Bucket(objstore_pool.get(scheme))
    store = open_store(bucket.url("race"))
    store.stat("warm")  # clients made before the race
    bodies = [bytes([65 + i]) * SIZE for i in range(2)]
    results = [None, None]
    start = threading.Barrier(2)

    def create(i):
        start.wait()
        try:
            results[i] = store.put_file("one", io.BytesIO(bodies[i]), if_absent=True)
        except StoreFailure as e:
            results[i] = e

    threads = [threading.Thread(target=create, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    won = [i for i in range(2) if not isinstance(results[i], StoreFailure)]
    lost = [i for i in range(2) if isinstance(results[i], StoreFailure)]
    assert len(won) == 1 and len(lost) == 1, results
    assert results[lost[0]].code == StoreError.ALREADY_EXISTS
    assert store.read_range("one", 0, SIZE) == bodies[won[0]]
    assert [e.key for e in store.list("")] == ["one"]


def test_a_refused_source_leaves_no_object(bucket):
    """A source that breaks (or does not hash to its claim) inside the create-only upload: the
    upload is never committed, whatever part it had reached."""
    store = open_store(bucket.url("broken"))

    class Breaks(io.RawIOBase):
        left = SIZE

        def readable(self):
            return True

        def read(self, n=-1):
            if self.left <= 0:
                raise OSError("the source broke")
            n = min(self.left, 1 << 20 if n is None or n < 0 else n)
            self.left -= n
            return b"y" * n

    with pytest.raises(StoreFailure):
        store.put_file("gone", Breaks(), if_absent=True)
    assert store.stat("gone") is None and list(store.list("")) == []


def test_an_object_already_stored_is_refused_before_any_byte_is_sent(bucket, monkeypatch):
    """A server that ignores the completing request's condition (some S3-compatible servers; the
    GCS emulator) would overwrite a stored blob with a second writer's copy — another encoding of
    the same original, which the first owner's index entry no longer reads (review J7 F2). The
    metadata read first refuses it, before an upload is even started."""
    store = open_store(bucket.url("pre"))
    data = os.urandom(SIZE)
    first = store.put_file("k", io.BytesIO(data), if_absent=True)
    uploads = _spy_uploads(store, monkeypatch)
    with pytest.raises(StoreFailure) as e:
        store.put_file("k", io.BytesIO(b"y" * SIZE), if_absent=True)
    assert e.value.code == StoreError.ALREADY_EXISTS
    assert uploads == []
    assert store.read_range("k", 0, SIZE) == data and store.stat("k").version == first.version
