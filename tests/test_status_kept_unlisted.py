"""Status names what the sweep keeps (issue #26; review R24's note "the disk status not counting kept
unlisted packs"): since a sweep deletes only the data objects a pending note proves a killed
write's leftover (``storage.blobstore``), every other data object no index row lists stays however
old — a leftover of a write killed before notes existed, what a lost index object listed. Status
said nothing of them (a disk's packs) or only while a backup the manifests need was among them (a
bucket's blob folder). Now each store's status counts them (``Finding.ORPHAN_BLOBS``: count and
bytes, from a listing, nothing read), says who lists anew what a lost index hid, and that no
command frees what stays (a leftover cannot be told from an only copy).

And the words of a damaged index object say what removing it does now: nothing is freed or
deleted, what only it listed is hidden until ``recover`` (or a purge's look) lists it anew."""
import glob
import os
import secrets
import time

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import BlobError, Finding
from test_bucket_blob_folder_recorded import demo_logdir, reduced  # noqa: F401
from test_pack_index_rebuilt_bucket import offloaded  # noqa: F401
from test_unlisted_packs_kept_disk import _age, _fresh_packs, disk_packed  # noqa: F401

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _plant_pack(folder, age):
    """A data object of the store's layout that no index object lists (what a compaction of a
    version that wrote no pending notes leaves when killed), ``age`` seconds old."""
    name = secrets.token_hex(16)
    p = os.path.join(folder, "data", name[:2], f"{name}.pack")
    os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
    with open(p, "wb") as f:
        f.write(b"TBFPACK1" + os.urandom(3000))
    old = time.time() - age
    os.utime(p, (old, old))
    return p


def _kept(problems, where):
    return [p for p in problems if p["code"] == Finding.ORPHAN_BLOBS and p.get("path") == where]


def test_disk_status_counts_the_unlisted_packs_every_sweep_keeps(disk_packed):
    root, _before, sd, _index = disk_packed
    packs = os.path.join(sd, "packs")
    assert not _kept(api.status(str(root))["problems"], packs)
    old = _plant_pack(packs, 3 * 3600)
    young = _plant_pack(packs, 5)  # maybe an add between its upload and its index: not counted
    _fresh_packs(sd)
    (row,) = _kept(api.status(str(root))["problems"], packs)
    assert row["count"] == 1 and row["bytes"] == os.path.getsize(old), row
    assert packs in row["detail"] and "no tb-footprint command frees it" in row["detail"]
    assert "pending note" in row["detail"] and "`tb-footprint recover`" in row["detail"]
    assert os.path.exists(young)


def test_disk_status_counts_what_a_lost_index_object_hid_until_recover_lists_it(disk_packed):
    root, _before, sd, index = disk_packed
    packs = os.path.join(sd, "packs")
    data = sorted(p for p in glob.glob(os.path.join(packs, "data", "*", "*")) if os.path.isfile(p))
    for p in index:
        os.unlink(p)
    _age(packs)
    _fresh_packs(sd)
    (row,) = _kept(api.status(str(root))["problems"], packs)
    assert row["count"] == len(data) and row["bytes"] == sum(os.path.getsize(p) for p in data), row
    api.recover_logdir(str(root))
    _fresh_packs(sd)
    assert not _kept(api.status(str(root))["problems"], packs)  # every pack listed anew


def test_bucket_blob_folder_status_counts_the_unlisted_objects_kept(reduced):
    url, folder, _before, _prefix = reduced
    assert not _kept(api.status(url, backup_dir=folder)["problems"], folder)
    old = _plant_pack(folder, 3 * 3600)
    _plant_pack(folder, 5)
    (row,) = _kept(api.status(url, backup_dir=folder)["problems"], folder)
    assert row["count"] == 1 and row["bytes"] == os.path.getsize(old), row
    assert "A restore or a purge" in row["detail"] and "no tb-footprint command frees it" in row["detail"]
    # no backup the manifests need is hidden: no backup_index_damaged row beside it
    assert not [p for p in api.status(url, backup_dir=folder)["problems"]
                if "listed by no index object" in str(p.get("detail"))]
    # given no --backup-dir, the folder the manifests record is counted too (R21 PD20's status half)
    (row,) = _kept(api.status(url)["problems"], folder)
    assert row["count"] == 1


def test_a_removable_damaged_index_object_says_what_removing_it_does(disk_packed):
    from tb_footprint_plugin.engine.vault import Vault

    root, _before, sd, index = disk_packed
    with open(index[0], "wb") as f:
        f.write(b"\x00garbage{not json")
    _fresh_packs(sd)
    api.recover_logdir(str(root))  # every backup it hid listed anew: it may be removed now
    _fresh_packs(sd)
    problems = Vault(sd).pack_problems()
    assert [p["code"] for p in problems] == [BlobError.DAMAGED_INDEX.value], problems
    words = problems[0]["message"]
    assert "you may remove this file" in words
    assert "Removing it frees no space and deletes no backup" in words and "kept by every sweep" in words
    assert "reads as missing until `tb-footprint recover` (or a purge's look) lists it anew" in words


def test_remote_vault_status_counts_the_unlisted_objects_kept(offloaded, monkeypatch):  # noqa: F811
    """A disk logdir's remote vault (``--backup-dir s3://…``, moto) whose index objects were lost:
    beside the backups its records name (``damaged_file``), what every sweep keeps there is counted."""
    import types

    from test_remote_index_lost import _lose_index
    from tb_footprint_plugin.engine import vault_packs
    from tb_footprint_plugin.storage.stores import open_store

    root, _before, url = offloaded
    _lose_index(url)
    data = list(open_store(url).list("data"))
    assert not _kept(api.status(str(root))["problems"], url)  # just written: maybe an add in flight
    monkeypatch.setattr(vault_packs, "time", types.SimpleNamespace(time=lambda: time.time() + 7200), raising=False)
    (row,) = _kept(api.status(str(root))["problems"], url)
    assert row["count"] == len(data) and row["bytes"] == sum(e.size for e in data), row
    assert "`tb-footprint recover` lists anew" in row["detail"]
