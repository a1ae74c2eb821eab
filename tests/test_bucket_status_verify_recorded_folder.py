"""Review R21 PD20, its status and verify halves: a bucket reduction records its local blob folder
(``blob_folder``, ``host``), and a restore and a purge given no ``--backup-dir`` use it (ee86689,
0f2b57c) — but ``status`` and ``verify`` looked in it only when ``--backup-dir`` was given: status
named no blob folder and counted nothing there, verify failed every blob-backed run as if its
backups were missing. Now they take the recorded folder by the same rule (on its host, only when a
folder of ours: ``bucket_blob_folder.with_recorded_folder``); one refused is named with the
refusal's code, and nothing is read or written there. On moto."""
import os

import pytest

from tb_footprint_plugin import api, codes
from test_bucket_blob_folder_recorded import STATE, _tree, demo_logdir, reduced  # noqa: F401

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_status_without_backup_dir_names_the_recorded_folder_and_what_it_stores(reduced):
    url, folder, _before, _prefix = reduced
    given = api.status(url, backup_dir=folder)
    st = api.status(url)
    assert folder in st["vaults"], st["vaults"]
    assert st["vault_stored_bytes"] == given["vault_stored_bytes"] > 0
    assert st["vault_objects"] == given["vault_objects"]


def test_verify_without_backup_dir_checks_the_blobs_in_the_recorded_folder(reduced):
    url, folder, _before, _prefix = reduced
    res = api.verify(url)
    assert res and all(r["ok"] for r in res), res
    given = api.verify(url, backup_dir=folder)
    assert sorted((r["op_id"], r["ok"]) for r in res) == sorted((r["op_id"], r["ok"]) for r in given)


def test_verify_without_backup_dir_finds_a_damaged_blob_in_the_recorded_folder(reduced):
    """Not only "every run ok": a blob whose bytes changed in the recorded folder fails its run."""
    from tb_footprint_plugin.storage.blobstore import BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore

    url, folder, _before, _prefix = reduced
    ref = sorted(BlobStore(PosixStore(folder)).refs(), key=lambda r: r.key)[0]
    p = os.path.join(folder, ref.key)
    with open(p, "r+b") as f:
        f.seek(ref.offset + ref.length - 1)
        last = f.read(1)
        f.seek(ref.offset + ref.length - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    res = api.verify(url)
    bad = [r for r in res if not r["ok"]]
    assert bad and all(r["damaged_backups"] for r in bad), res
    assert [r["op_id"] for r in bad] == [r["op_id"] for r in api.verify(url, backup_dir=folder) if not r["ok"]]


def test_a_recorded_folder_not_ours_is_named_by_status_and_verify_and_left_alone(reduced):
    url, folder, _before, _prefix = reduced
    os.chmod(folder, 0o777)  # writable by others: not a folder of ours by the disk vault's rule
    seen = _tree(folder)
    st = api.status(url)
    said = [p for p in st["problems"] if p["code"] == codes.Failure.STATE_NOT_OURS]
    assert said and folder in said[0]["detail"], st["problems"]
    assert folder not in st["vaults"]
    res = api.verify(url)
    refused = [r for r in res if r.get("code") == codes.Failure.STATE_NOT_OURS]
    assert refused and not refused[0]["ok"] and folder in refused[0]["verification"]["checks"][0]["detail"], res
    assert _tree(folder) == seen
