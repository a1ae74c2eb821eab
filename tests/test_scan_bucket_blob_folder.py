"""A bucket logdir whose backups are blobs in a local folder (``--backup-dir /folder``) has its
vault total counted by the scan, ``api.scan``'s ``vault_bytes`` and the tab's header (the
``/runs`` overview) alike, as ``status`` counts that folder (``vault_stored_bytes``: its data
objects as stored, not its index), once (issue #28, r26 K3). Before, the scan counted a bucket's
own ``.tb-footprint/blobs/`` and a vault in another bucket only: the header said no backup kept
while the folder held them all. A ``data`` that is a link leads out of the vault: not followed."""
from __future__ import annotations

import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.scan.discovery import dir_size


def _reduced(bucket, tmp_path) -> tuple:
    src = tmp_path / "src"
    for i in range(3):
        run = src / f"exp/run{i}"
        with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
            w.scalar("loss", 0, 1.0)
        synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=50, seed=i)
    url = bucket.upload(src, "blobfolder")
    folder = str(tmp_path / "vault")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                            backup_dir=folder)
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == 3, [o.to_dict() for o in rep.outcomes]
    return url, folder


def test_the_scan_and_the_header_count_a_bucket_logdirs_blob_folder(s3_bucket, tmp_path):
    from test_plugin_routes import App

    url, folder = _reduced(s3_bucket, tmp_path)
    held = dir_size(os.path.join(folder, "data"))
    assert held > 0 and dir_size(os.path.join(folder, "index")) > 0
    st = api.status(url, backup_dir=folder)
    assert st["vault_stored_bytes"] == held  # the one figure status gives of the folder
    fp = api.scan(url, backup_dir=folder)
    assert fp.vault_bytes == held, (fp.vault_bytes, held)  # once: its index is no backup
    assert api.scan(url).vault_bytes == 0  # no folder given: the bucket holds no backup
    a = App(url, footprint_backup_dir=folder)
    try:
        r = a.get("/runs")
        assert r.status_code == 200, r.get_data(as_text=True)
        assert r.get_json()["vault_bytes"] == held
    finally:
        a.close()
    # a ``data`` that is a link to a folder outside: not followed, nothing counted from it
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 100_000)
    os.rename(os.path.join(folder, "data"), str(tmp_path / "data-aside"))
    os.symlink(str(outside), os.path.join(folder, "data"))
    assert api.scan(url, backup_dir=folder).vault_bytes == 0
