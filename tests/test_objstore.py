"""Logdirs in object storage, against real servers on loopback: moto (S3), gcp-storage-emulator
(GCS) and Azurite (Azure Blob). Every test here runs on each store."""
import hashlib
import os

import pytest

from tb_footprint_plugin.storage.remote import RemoteFS, is_remote, split_scheme
from tb_footprint_plugin.tfrecord import RecordReader, RecordWriter


def test_servers_answer_and_list_recursively(bucket):
    """The harness gives a working store; one recursive listing returns nested keys with
    sizes, mtimes and a version token (ETag or generation)."""
    bucket.fs.pipe_file(bucket.key("logs/a/b/c/deep.bin"), b"x" * 10)
    bucket.fs.pipe_file(bucket.key("logs/top.bin"), b"y" * 3)
    bucket.fs.pipe_file(bucket.key("logsX/not-below.bin"), b"z")
    rfs = RemoteFS(bucket.url("logs"))
    tree = rfs.list_tree()
    assert {k: o.size for k, o in tree.items()} == {"a/b/c/deep.bin": 10, "top.bin": 3}
    assert all(o.version_token and o.mtime > 0 for o in tree.values())
    assert rfs.stats.list == 1 and rfs.stats.read == 0


def test_ranged_reader_streams_records(bucket, tmp_path):
    """The record reader takes a RangedReader: a file read in ranged GETs of the chunk size,
    never whole, gives the same records as the local file."""
    local = tmp_path / "events.out.tfevents.1.host"
    payloads = [os.urandom(3000 + i) for i in range(200)]
    with open(local, "wb") as f:
        w = RecordWriter(f)
        for p in payloads:
            w.write(p)
    data = local.read_bytes()
    bucket.fs.pipe_file(bucket.key("l/run/" + local.name), data)
    rfs = RemoteFS(bucket.url("l"))
    size = rfs.list_tree()["run/" + local.name].size
    assert size == len(data)
    reader = rfs.open_ranged("run/" + local.name, size, chunk=64 << 10)
    got = [r.data for r in RecordReader(reader, verify=True, chunk_size=64 << 10)]
    assert got == payloads
    assert rfs.stats.bytes_down == len(data)
    assert rfs.stats.read >= len(data) // (64 << 10)  # ranged, not one whole-object GET


def test_scheme_helpers():
    assert is_remote("s3://b/x") and is_remote("gs://b") and is_remote("az://c/p")
    assert not is_remote("/tmp/x") and not is_remote("file:///tmp/x") and not is_remote("rel/dir")
    assert split_scheme("S3://b/k") == ("s3", "b/k")
    with pytest.raises(ValueError):
        RemoteFS("s3://b/logs").path("../escape")
