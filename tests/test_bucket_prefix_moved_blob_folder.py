"""Review R11 G2 (R10 F1's bucket counterpart): a bucket logdir whose backups are in a local blob folder
(--backup-dir FOLDER) is moved to another prefix (`aws s3 mv --recursive`, `rclone move`: its state objects go
along). The folder's claims were owned by a hash of the logdir URL, so the moved logdir's restore did not find
its blobs, and a new logdir made at the old URL owned the moved one's claims (its purge dropped them: the only
copies went). Now the owner is the logdir's id (in its state) and where it stands, each blob entry records it
(``engine.bucket_identity``): a restore reads the claim its entry names, a purge drops only the owner standing
here; the old place's claims are kept (a copy left there may need them) and ``status`` names them."""
import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


@pytest.fixture
def prof_logdir(tmp_path):
    import os
    import time as _time
    root = tmp_path / "logs"
    for r in range(2):
        run = root / f"r{r}"
        with synth.EventWriter(str(run)) as w:
            w.scalar("loss", 0, 1.0)
        plugins = run / "plugins" / "profile" / "2024_01_01_00_00_00"
        plugins.mkdir(parents=True)
        for i in range(3):
            (plugins / f"host{i}.xplane.pb").write_bytes(f"r{r}".encode() * 32 + bytes(3000 + 41 * i))
    old = _time.time() - 3600
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (old, old))
    return root


def _blobs(folder):
    import os
    from tb_footprint_plugin.storage.blobstore import BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore
    return {r.sha for r in BlobStore(PosixStore(folder)).refs()} if os.path.isdir(folder) else set()


def _move(bucket, src, dst):
    bucket.fs.invalidate_cache()
    base = bucket.key(src)
    for name in bucket.fs.find(base):
        rel = name[len(base) + 1:]
        bucket.fs.copy(name, f"{bucket.key(dst)}/{rel}")
        bucket.fs.rm_file(name)
    bucket.fs.invalidate_cache()


def test_a_bucket_logdir_moved_to_another_prefix_restores_from_its_blob_folder(s3_bucket, prof_logdir, tmp_path):
    url = s3_bucket.upload(prof_logdir, "runs")
    before = s3_bucket.hashes("runs")
    vault = str(tmp_path / "V")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2, [o.reason for o in rep.outcomes]
    _move(s3_bucket, "runs", "runs-old")
    moved = s3_bucket.url("runs-old")
    outs = api.restore(moved, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    after = {k: v for k, v in s3_bucket.hashes("runs-old").items() if not k.startswith(".tb-footprint/")}
    assert after == {k: v for k, v in before.items() if not k.startswith(".tb-footprint/")}
    # restored, then purged here: the claims made at the old place stay (never dropped from here), named
    kept = _blobs(vault)
    api.purge(moved, yes=True, backup_dir=vault)
    assert _blobs(vault) == kept
    st = api.status(moved, backup_dir=vault)
    st = st.to_dict() if hasattr(st, "to_dict") else st
    rows = [p for p in st["problems"] if p["code"] == "orphan_blobs"]
    assert len(rows) == 1 and rows[0]["count"] == len(kept) and "earlier location" in rows[0]["detail"], st["problems"]


def test_a_new_logdir_at_the_old_url_never_frees_the_moved_ones_blobs(s3_bucket, prof_logdir, tmp_path):
    url = s3_bucket.upload(prof_logdir, "runs")
    before = s3_bucket.hashes("runs")
    vault = str(tmp_path / "V")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
    kept = _blobs(vault)
    assert kept
    _move(s3_bucket, "runs", "runs-old")
    # a new logdir at the old URL (the same runs synced again: the same bytes), same folder; it reduces and
    # purges its own
    s3_bucket.upload(prof_logdir, "runs")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
    api.purge(url, yes=True, backup_dir=vault)  # its own backups only
    assert kept <= _blobs(vault), "the new logdir's purge freed the moved logdir's only copies"
    moved = s3_bucket.url("runs-old")
    outs = api.restore(moved, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    after = {k: v for k, v in s3_bucket.hashes("runs-old").items() if not k.startswith(".tb-footprint/")}
    assert after == {k: v for k, v in before.items() if not k.startswith(".tb-footprint/")}
