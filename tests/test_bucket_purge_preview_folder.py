"""Review R9 F8's follow-up: a bucket logdir's purge preview with ``--backup-dir FOLDER`` says what the folder's forget
frees (``folder_freed_bytes``, stored bytes, "up to") beside what it frees in the bucket, and the purge what it freed
there; a blob another operation not purged still names frees nothing. Before, the preview said nothing of the folder.
On the real moto server."""
import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _logdir(root):
    """r1 and r2 hold the same profile bytes (the same blobs), r0 its own."""
    import time as _time
    for r in range(3):
        run = root / "prof" / f"r{r}"
        with synth.EventWriter(str(run)) as w:
            w.scalar("loss", 0, 1.0)
        plugins = run / "plugins" / "profile" / "2024_01_01_00_00_00"
        plugins.mkdir(parents=True)
        seed = b"r0" if r == 0 else b"twin"
        for i in range(4):
            (plugins / f"host{i}.xplane.pb").write_bytes(seed * 32 + bytes(700_000 + 41 * i))
    old = _time.time() - 3600
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (old, old))
    return root


def _stored(folder):
    return BlobStore(PosixStore(folder)).stats()["stored_bytes"]


def test_the_preview_says_what_the_folder_frees_and_the_purge_frees_it(s3_bucket, tmp_path, capsys):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "pv")
    vault = str(tmp_path / "vault")
    outs = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                             verify_backends=("python",)).outcomes
    assert {o.status for o in outs} == {Outcome.VERIFIED}, [(o.run, o.reason) for o in outs]
    ops = {o.run: o.op_id for o in outs}
    stored = _stored(vault)
    assert stored > 0
    # r1's blobs are r2's too: purging r1 alone frees nothing in the folder
    assert api.purge(url, yes=False, backup_dir=vault, op=ops["prof/r1"]).folder_freed_bytes == 0
    pre = api.purge(url, yes=False, backup_dir=vault)
    assert pre.dry_run and pre.to_dict()["folder_freed_bytes"] == pre.folder_freed_bytes
    assert 0 < pre.folder_freed_bytes <= stored
    assert _stored(vault) == stored  # a preview changes nothing
    from tb_footprint_plugin import cli

    capsys.readouterr()
    assert cli.main(["purge", url, "--backup-dir", vault, "--dry-run"]) == 0
    assert "the local backup folder: would free up to" in capsys.readouterr().out
    done = api.purge(url, yes=True, backup_dir=vault)
    assert done.folder_freed_bytes >= pre.folder_freed_bytes and _stored(vault) == 0


def test_a_purge_of_a_bucket_vault_without_a_folder_says_none(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "pvc")
    outs = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["prof/r0"],
                             verify_backends=("python",)).outcomes
    assert [o.status for o in outs] == [Outcome.VERIFIED]
    assert api.purge(url, yes=False).folder_freed_bytes is None
