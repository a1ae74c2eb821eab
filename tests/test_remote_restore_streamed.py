"""A restore from a remote vault streams each blob into its place (issue #27 item 3): the copy is
written under a temporary name beside its target, hashed on the way, and renamed into place with
its mode and mtime; nothing is staged on the local disk (the vault, where a check's download was
kept before, grows by its state records only), one temporary file stands at a time, never larger
than the largest blob, and memory stays bounded whatever the blob's size."""
import hashlib
import os
import tracemalloc
from pathlib import Path
from unittest import mock

import pytest

from test_vault_remote import make_logdir, offload_all, reduce_local, snapshot
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults, remote_vault
from tb_footprint_plugin.engine.vault import RESTORE_TMP_PREFIX

pytestmark = pytest.mark.usefixtures("disarm_faults")


def tree_bytes(root: str) -> int:
    total = 0
    for d, _dirs, files in os.walk(root):
        for n in files:
            try:
                total += os.lstat(os.path.join(d, n)).st_size
            except OSError:
                pass  # renamed or removed meanwhile
    return total


def temps_in(root: Path) -> list:
    return [p for p in root.rglob(RESTORE_TMP_PREFIX + "*") if ".tb-footprint" not in p.parts]


def grow_profile(logdir: Path, run: str, lines: int) -> None:
    """The run's profile file made ``lines`` lines larger (a lone blob, compressible), its time kept."""
    p = next((logdir / run).rglob("*.xplane.pb"))
    st = p.stat()
    with open(p, "ab") as f:
        for i in range(lines):
            f.write(b"%s step %07d: op=MatMul shape=[128,256] dur_us=%d\n" % (run.encode(), i, (i * 7919) % 1000))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_restore_of_n_blobs_stages_nothing_beyond_one_temporary_copy(tmp_path, s3_bucket):
    logdir = make_logdir(tmp_path)
    grow_profile(logdir, "a", 20000)
    grow_profile(logdir, "b", 12000)
    first = next((logdir / "a").rglob("*.xplane.pb"))  # a second lone blob in run a: its check
    second = first.with_name("host2.xplane.pb")       # comes before the first copy
    second.write_bytes(first.read_bytes().replace(b"step", b"STEP"))
    os.utime(second, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns))
    before = snapshot(logdir)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    files = [f for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]]
    assert len(files) >= 2
    largest = max(f["size"] for f in files)
    remote_vault._stores.clear()
    vault_before = tree_bytes(vault.root)
    seen = []
    checked = []
    real_check = type(vault).check_blob_extents

    def check_blob(self, sha, block):  # the restore reads every backup of a run before its first copy
        ok = real_check(self, sha, block)  # (and counts what its put-back allocates: task N3)
        checked.append(tree_bytes(vault.root) - vault_before)
        return ok

    def at_copy():  # each blob written under its temporary name, before the rename
        temps = temps_in(logdir)
        seen.append(([p.stat().st_size for p in temps], tree_bytes(vault.root) - vault_before))

    faults.arm("restore_copied", at_copy)
    with mock.patch.object(type(vault), "check_blob_extents", check_blob):
        outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert snapshot(logdir) == before  # bytes, mtime and mode of every file
    assert len(seen) == len(files)
    for temps, grown in seen:
        assert len(temps) == 1 and temps[0] <= largest, seen  # one copy at a time, beside its target
        # no copy of a blob in the vault (it was staged there before: each blob's bytes), only its
        # state (manifests, journal, log lines)
        assert grown < min(f["size"] for f in files), seen
    assert checked and max(checked) < min(f["size"] for f in files), checked  # nothing kept on disk by a check
    assert not temps_in(logdir)
    assert not [d for d in os.listdir(os.path.join(vault.root, "offload")) if d.startswith("tbfp-stage-")]


def test_a_blob_above_the_memory_bound_is_streamed_from_the_store(tmp_path, s3_bucket, monkeypatch):
    logdir = make_logdir(tmp_path)
    grow_profile(logdir, "a", 750000)  # ~40 MB
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    big = max((f for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]),
              key=lambda f: f["size"])
    assert big["size"] > 32 << 20
    monkeypatch.setattr(remote_vault, "STAGE_BYTES", 64 << 10)  # below its frame too
    remote_vault._stores.clear()
    assert vault.check_blob(big["sha256"])  # warms the clients too
    assert (vault.root, big["sha256"]) not in remote_vault._staged  # above the bound: not kept
    dest = tmp_path / "out" / "f.bin"
    tracemalloc.start()
    try:
        assert vault.check_blob(big["sha256"])
        vault.restore_blob(big["sha256"], str(dest), 0o640, mtime_ns=1_600_000_000_123_456_789)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the blob store reads 4 MiB ranges (a buffer and the range read), decoded and hashed in chunks
    assert peak < 16 << 20, f"peak {peak >> 20} MiB for a {big['size'] >> 20} MiB blob"
    h = hashlib.sha256()
    with open(dest, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    st = dest.stat()
    assert h.hexdigest() == big["sha256"] and st.st_mtime_ns == 1_600_000_000_123_456_789 and st.st_mode & 0o777 == 0o640
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(RESTORE_TMP_PREFIX)]


def test_a_blob_within_the_bound_is_kept_in_memory_not_on_disk(tmp_path, s3_bucket):
    logdir = make_logdir(tmp_path)
    grow_profile(logdir, "a", 20000)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    big = max((f for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]),
              key=lambda f: f["size"])
    remote_vault._stores.clear()
    grown = tree_bytes(vault.root)
    assert vault.check_blob(big["sha256"])
    ref = remote_vault.blobstore(remote_vault.configured_url(vault.root)).ref(big["sha256"])
    chunks, _when, form = remote_vault._staged[(vault.root, big["sha256"])]
    assert (sum(map(len, chunks)), form) == (ref.length, ref.form)  # as stored: its zstd frame
    assert tree_bytes(vault.root) == grown  # the check wrote nothing to the disk
    dest = tmp_path / "out" / "f.bin"
    vault.restore_blob(big["sha256"], str(dest))
    assert (vault.root, big["sha256"]) not in remote_vault._staged  # taken by the copy
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == big["sha256"]


def test_a_blob_many_times_the_bound_is_downloaded_once_when_its_frame_fits(tmp_path, s3_bucket, monkeypatch):
    """A lone blob is kept as stored (its zstd frame), so a 40 MB original whose frame is under
    ``STAGE_BYTES`` is read from the store once by a check and the copy that follows."""
    from tb_footprint_plugin.storage.store import CountingStore
    from tb_footprint_plugin.storage.stores import open_store

    logdir = make_logdir(tmp_path)
    grow_profile(logdir, "a", 750000)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    big = max((f for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]),
              key=lambda f: f["size"])
    assert big["size"] > remote_vault.STAGE_BYTES
    wrapped = []
    monkeypatch.setattr(remote_vault, "open_store", lambda url: wrapped.append(CountingStore(open_store(url))) or wrapped[-1])
    remote_vault._stores.clear()
    ref = remote_vault.blobstore(remote_vault.configured_url(vault.root)).ref(big["sha256"])
    assert ref.form == "zst" and ref.length < remote_vault.STAGE_BYTES < big["size"]
    down = sum(c.counts.bytes_down for c in wrapped)
    dest = tmp_path / "out" / "f.bin"
    tracemalloc.start()
    try:
        assert vault.check_blob(big["sha256"])
        vault.restore_blob(big["sha256"], str(dest))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    down = sum(c.counts.bytes_down for c in wrapped) - down
    assert ref.length <= down < 1.5 * ref.length, (down, ref.length)  # once, not twice
    assert peak < (16 << 20) + ref.length, f"peak {peak >> 20} MiB"
    h = hashlib.sha256()
    with open(dest, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    assert h.hexdigest() == big["sha256"] and (vault.root, big["sha256"]) not in remote_vault._staged


def test_disk_stages_an_earlier_version_left_are_swept(tmp_path, s3_bucket):
    """A process of the earlier version killed mid-restore left copies of remote blobs under
    ``<vault>/offload/tbfp-stage-…``: the first remote read of the vault removes its folder (its
    process is gone), and leaves a live process's folder and everything else there alone."""
    import subprocess
    import sys

    from tb_footprint_plugin.storage import scratch

    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    base = Path(vault.root) / "offload"
    gone = base / f"tbfp-stage-p{dead.pid}-n{scratch.pid_namespace()}-abc123"
    alive = base / f"tbfp-stage-p{os.getpid()}-n{scratch.pid_namespace()}-def456"
    for d in (gone, alive):
        d.mkdir(mode=0o700)
        (d / ("0" * 64 + "-1a2b3c")).write_bytes(b"a staged copy")
    notes = sorted(p.name for p in base.iterdir() if not p.name.startswith("tbfp-stage-"))
    remote_vault._swept.discard(vault.root)
    remote_vault._stores.clear()
    sha = next(f["sha256"] for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"])
    assert vault.check_blob(sha)
    assert not gone.exists() and alive.exists()
    assert sorted(p.name for p in base.iterdir() if not p.name.startswith("tbfp-stage-")) == notes
