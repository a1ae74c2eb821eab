"""A restore reads a big remote backup from its bucket once (issue #27): a blob whose check would
not be kept in memory (above ``remote_vault.STAGE_BYTES`` as stored) is checked by streaming it
into its target's temporary, which the put-back renames; a restore whose later backup does not
verify removes those temporaries and changes nothing of the run, its folders' times included."""
import os
from pathlib import Path

import pytest

from test_remote_restore_streamed import temps_in
from test_vault_remote import make_logdir, offload_all, reduce_local, snapshot
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import remote_vault, restore as restore_mod, restore_staged
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import RESTORE_TMP_PREFIX
from tb_footprint_plugin.storage.store import CountingStore
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")


def incompressible(logdir: Path, run: str, name: str, size: int) -> Path:
    """A profile file of ``size`` random bytes beside the run's own (a lone raw blob once offloaded)."""
    first = next((logdir / run).rglob("*.xplane.pb"))
    p = first.with_name(name)
    with open(p, "wb") as f:
        left = size
        while left:
            n = min(left, 4 << 20)
            f.write(os.urandom(n))
            left -= n
    os.chmod(p, 0o604)
    os.utime(p, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns - 123_456_789))
    os.utime(p.parent, ns=(first.parent.stat().st_atime_ns, first.parent.stat().st_mtime_ns))
    return p


def counted(monkeypatch) -> list:
    """Every store the remote vault opens from now on, counting its bytes down."""
    wrapped: list = []
    monkeypatch.setattr(remote_vault, "open_store",
                        lambda url: wrapped.append(CountingStore(open_store(url))) or wrapped[-1])
    remote_vault._stores.clear()
    remote_vault._staged.clear()
    return wrapped


def dir_times(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in [root, *root.rglob("*")]
            if p.is_dir() and ".tb-footprint" not in p.relative_to(root).parts}


def test_a_big_remote_backup_is_read_from_the_bucket_once(tmp_path, s3_bucket, monkeypatch):
    logdir = make_logdir(tmp_path)
    incompressible(logdir, "a", "big.xplane.pb", 40 << 20)
    before = snapshot(logdir)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    big = max((f for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]),
              key=lambda f: f["size"])
    wrapped = counted(monkeypatch)
    ref = remote_vault.blobstore(remote_vault.configured_url(vault.root)).ref(big["sha256"])
    assert ref is not None and not ref.packed and ref.length > remote_vault.STAGE_BYTES  # incompressible: kept raw
    others = sum(f["size"] for m in vault.manifests() if m.get("kind") == "reduce" for f in m["files"]
                 if f["sha256"] != big["sha256"])
    down = sum(c.counts.bytes_down for c in wrapped)
    outs = api.restore(str(logdir))
    down = sum(c.counts.bytes_down for c in wrapped) - down
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    # once: the big blob's stored bytes, plus at most the other (small) backups and the index
    assert ref.length <= down < ref.length + others + (1 << 20), (down, ref.length, others)
    assert snapshot(logdir) == before  # bytes, mtime and mode of every file
    assert not temps_in(logdir)


def two_big_backups(tmp_path: Path, s3_bucket, monkeypatch):
    """Run a with two lone remote backups above a (lowered) ``STAGE_BYTES``; its manifest, the
    vault, and the two files in the manifest's order."""
    logdir = make_logdir(tmp_path)
    incompressible(logdir, "a", "one.xplane.pb", 600 << 10)
    incompressible(logdir, "a", "two.xplane.pb", 700 << 10)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    monkeypatch.setattr(remote_vault, "STAGE_BYTES", 256 << 10)
    m = next(m for m in vault.manifests() if m.get("kind") == "reduce" and m["run"] == "a")
    bigs = [f for f in m["files"] if f["size"] > 256 << 10]
    assert len(bigs) >= 2, [f["size"] for f in m["files"]]
    return logdir, vault, m, bigs


def test_a_corrupt_second_backup_leaves_the_first_target_untouched_and_no_temporary(tmp_path, s3_bucket,
                                                                                   monkeypatch):
    logdir, vault, m, bigs = two_big_backups(tmp_path, s3_bucket, monkeypatch)
    remote_vault._stores.clear()
    bs = remote_vault.blobstore(remote_vault.configured_url(vault.root))
    ref = bs.ref(bigs[1]["sha256"])
    data = bytearray(bs.store.read_range(ref.key, ref.offset, ref.offset + ref.length))
    data[len(data) // 2] ^= 0xFF  # same length, other bytes
    if (ref.offset, ref.length) == (0, bs.store.stat(ref.key).size):
        bs.store.put(ref.key, bytes(data))
    else:
        whole = bytearray(bs.store.read_all(ref.key, 1 << 30))
        whole[ref.offset:ref.offset + ref.length] = data
        bs.store.put(ref.key, bytes(whole))
    remote_vault._stores.clear()
    remote_vault._staged.clear()
    files_before, dirs_before = snapshot(logdir), dir_times(logdir)
    made = []
    real = restore_staged.create_exclusive
    monkeypatch.setattr(restore_staged, "create_exclusive", lambda p, *a: made.append(p) or real(p, *a))
    out = restore_mod.restore_op(Context(str(logdir)), m)
    assert out.status == "failed" and out.code == Failure.BACKUP_DAMAGED, out.to_dict()
    # the first backup was streamed into a temporary in its target's place (it verified), then removed
    first_dir = os.path.dirname(str(logdir / bigs[0]["path"]))
    assert made and os.path.basename(made[0]).startswith(RESTORE_TMP_PREFIX)
    assert first_dir.startswith(os.path.dirname(made[0])), (made, first_dir)
    assert not os.path.lexists(logdir / bigs[0]["path"])  # the reduce removed it; still absent
    assert snapshot(logdir) == files_before and dir_times(logdir) == dirs_before
    assert not temps_in(logdir)
    assert not os.listdir(Context(str(logdir)).journal_dir)  # nothing left for a recovery to finish
    # once the bucket holds the right bytes again, the restore goes through
    remote_vault._stores.clear()
    bs = remote_vault.blobstore(remote_vault.configured_url(vault.root))
    data[len(data) // 2] ^= 0xFF
    if (ref.offset, ref.length) == (0, bs.store.stat(ref.key).size):
        bs.store.put(ref.key, bytes(data))
    else:
        whole[ref.offset:ref.offset + ref.length] = data
        bs.store.put(ref.key, bytes(whole))
    remote_vault._stores.clear()
    out = restore_mod.restore_op(Context(str(logdir)), m)
    assert out.status == "restored", out.to_dict()
    assert all((logdir / f["path"]).is_file() for f in bigs)
    assert not temps_in(logdir)


def test_a_restore_killed_while_checking_leaves_the_run_as_it_was(tmp_path, s3_bucket, monkeypatch):
    """A kill after the first temporary and before the ``verified`` record: the next start
    removes the temporary and puts nothing back (not all backups were checked)."""
    logdir, vault, m, bigs = two_big_backups(tmp_path, s3_bucket, monkeypatch)
    remote_vault._stores.clear()
    files_before = snapshot(logdir)

    class Killed(BaseException):
        pass

    real = restore_staged.hash_and_count
    calls = []

    def kill_at_second(src, out=None):
        calls.append(1)
        if len(calls) == 2:
            raise Killed()
        return real(src, out)

    monkeypatch.setattr(restore_staged, "hash_and_count", kill_at_second)
    monkeypatch.setattr(restore_staged.Prepared, "abandon", lambda self: None)  # a kill cleans nothing up
    monkeypatch.setattr(restore_staged.Prepared, "discard", lambda self: [])
    ctx = Context(str(logdir))
    with pytest.raises(Killed):
        restore_mod.restore_op(ctx, m)
    assert temps_in(logdir)  # the first one, verified, and the second, half written
    monkeypatch.undo()
    monkeypatch.setattr(remote_vault, "STAGE_BYTES", 256 << 10)
    rec = api.recover_logdir(str(logdir))
    # undone, and said so: nothing was put back (it was "completed", its detail alone saying so)
    assert [r.action for r in rec] == ["rolled_back"], [r.to_dict() for r in rec]
    assert not temps_in(logdir)
    assert snapshot(logdir) == files_before
    assert not os.listdir(ctx.journal_dir)


def test_a_verified_temporary_goes_into_a_folder_gone_since_with_its_mode_and_time(tmp_path):
    """The put-back of a staged backup makes its target's folder when it is gone (as a copy from
    the vault does), sets mode and time through the file, and leaves no temporary."""
    import hashlib

    data = b"original bytes" * 1000
    sha = hashlib.sha256(data).hexdigest()
    tmp = tmp_path / (RESTORE_TMP_PREFIX + "0" * 32 + "-" + sha[:12])
    fd = restore_staged.create_exclusive(str(tmp))
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        made = restore_staged.finish_new_file(f)
    prepared = restore_staged.Prepared()
    prepared.temps[sha] = (str(tmp), made)
    dest = tmp_path / "gone" / "deeper" / "f.xplane.pb"
    assert prepared.put(sha, str(dest), 0o640, None, 1_600_000_000_123_456_789)
    st = dest.stat()
    assert dest.read_bytes() == data and st.st_mode & 0o777 == 0o640 and st.st_mtime_ns == 1_600_000_000_123_456_789
    assert not tmp.exists() and not prepared.holds(sha)
