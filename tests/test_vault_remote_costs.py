"""What a local vault offloaded to a bucket costs in requests (issue #27, its remains): a restore
downloads each remote blob once (its check stages the bytes the copy then reads), a lone blob is
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


def test_a_restore_from_the_bucket_downloads_each_blob_once(tmp_path, s3_bucket, counted):
    total, reset = counted
    logdir = make_big_logdir(tmp_path)
    before = snapshot(logdir)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    url = remote_vault.configured_url(vault.root)
    stored = sum(e.size for e in open_store(url).list("data"))
    reset()
    remote_vault._stores.clear()
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert snapshot(logdir) == before
    down = total("bytes_down")
    # every data object read once (and the index objects, small): was twice, check then copy
    assert stored <= down < 1.5 * stored, (down, stored)
    # nothing staged is left behind once the restore took it
    assert not [at for at in remote_vault._staged if at[0] == vault.root]
    stage_dirs = [d for d in os.listdir(os.path.join(vault.root, "offload")) if d.startswith("tbfp-stage-")]
    assert all(not os.listdir(os.path.join(vault.root, "offload", d)) for d in stage_dirs)


def test_a_staged_copy_changed_before_the_restore_reads_it_is_refused(tmp_path, s3_bucket):
    logdir = make_big_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    remote_vault._stores.clear()
    sha = next(m["files"][0]["sha256"] for m in vault.manifests() if m.get("kind") == "reduce")
    assert vault.check_blob(sha)  # read whole from the bucket: staged
    path = remote_vault._staged[(vault.root, sha)][0]
    with open(path, "r+b") as f:
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 0xFF]))
    dest = tmp_path / "out" / "f"
    with pytest.raises(OSError):
        vault.restore_blob(sha, str(dest))
    assert not dest.exists() and not os.path.exists(path)
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
