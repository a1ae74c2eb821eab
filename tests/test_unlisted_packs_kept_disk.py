"""The disk twin of test_unlisted_packs_kept (issue #26, R23 T12/T13): a disk vault's packs
(``<state>/packs``) whose index object was deleted, or removed after a rebuild listed only what
the readable manifests needed (a pack listed in part). Before: nothing rebuilt the index unless an
object was damaged (every run whose backups were packed read as missing for good), and a pack
listed in part counted as listed, so the batch end's sweep repacked it below its live share,
copying only what its rows listed: the rest was destroyed. Now the start looks in the packs no row
covers for the backups the manifests need (each slice hashed) and lists them, once per set of
objects and backups (a look in vain is not made at every start), and no sweep runs while a needed
backup is listed by nothing, a pack listed in part included."""
import glob
import os
import time

import pytest

from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import Finding

pytestmark = pytest.mark.usefixtures("disarm_faults")
#: older than a purge's grace (1 h): what a sweep deletes when no index row lists it
AGED = 2 * 3600


def _age(folder, by=AGED):
    """Every data object of the folder made ``by`` seconds older (time passing since the reduce)."""
    old = time.time() - by
    for p in glob.glob(os.path.join(folder, "data", "**", "*"), recursive=True):
        if os.path.isfile(p):
            os.utime(p, (old, old))


def _data_objects(folder):
    return sorted(p for p in glob.glob(os.path.join(folder, "data", "**", "*"), recursive=True) if os.path.isfile(p))


@pytest.fixture
def disk_packed(tmp_path, monkeypatch):
    """The demo on a disk, archived (small backups packed in the vault's packs): (root, its files
    before, the state folder, the index objects)."""
    from test_restore_exact import snapshot
    from tb_footprint_plugin import demo
    from tb_footprint_plugin.storage.paths import state_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "demo"
    demo.generate_demo(str(root), scale=0.05)
    for p in root.glob(".footprint-demo*"):
        p.unlink()
    before = snapshot(root)
    rep = api.reduce_logdir(str(root), policy="archive", dry_run=False, quiet_period=0)
    assert len([o for o in rep.outcomes if o.status == codes.Outcome.VERIFIED]) == 6, rep.to_dict()
    sd = state_dir(str(root))
    index = sorted(glob.glob(os.path.join(sd, "packs", "index", "*.json")))
    assert index and glob.glob(os.path.join(sd, "packs", "data", "*", "*.pack"))
    return root, before, sd, index


def _fresh_packs(sd):
    from tb_footprint_plugin.engine import remote_vault

    remote_vault.pack_store(sd, fresh=True)  # as a new process (a CLI verb) lists it


def test_disk_index_object_deleted_status_names_it_and_restore_finds_it_again(disk_packed):
    from test_restore_exact import assert_exact

    root, before, sd, index = disk_packed
    for p in index:
        os.unlink(p)
    _age(os.path.join(sd, "packs"))
    _fresh_packs(sd)
    said = [p for p in api.status(str(root))["problems"]
            if "listed by no index object" in str(p.get("detail") or p.get("message") or "")]
    assert said, api.status(str(root))["problems"]
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert_exact(root, before)


@pytest.mark.parametrize("listed", ["all but one run", "one run"])
def test_disk_pack_listed_in_part_batch_end_sweeps_nothing_and_restore_finds_the_rest(disk_packed, listed):
    """T12's disk form: the index object removed after a rebuild listed anew only what the
    readable manifests needed (Y's manifest damaged then): the pack is listed in part. The batch
    end's sweep keeps it whole (a backup is listed by nothing; listed below its live share it was
    repacked, what no row listed lost), and the next start finds Y's blobs in it (each hashed);
    every run restores byte for byte."""
    from test_restore_exact import assert_exact
    from tb_footprint_plugin.engine import remote_vault
    from tb_footprint_plugin.engine.vault import Vault

    root, before, sd, index = disk_packed
    bs = remote_vault.pack_store(sd, fresh=True)
    refs = sorted(bs.refs(), key=lambda r: (r.key, r.offset))
    runs = sorted({m["run"] for m in api.operations(str(root))})
    one = {f["sha256"] for m in api.operations(str(root), run=runs[0]) for f in m.get("files", [])
           if f.get("sha256")}
    others = [r for r in refs if (r.sha in one) == (listed == "one run")]
    assert others and len(others) < len(refs)
    for p in index:
        os.unlink(p)
    _fresh_packs(sd)
    remote_vault.pack_store(sd).index_found(others)  # what a rebuild that could not read Y's wrote
    _age(os.path.join(sd, "packs"))
    _fresh_packs(sd)
    packs = _data_objects(os.path.join(sd, "packs"))
    Vault(sd).merge_pack_index()  # a batch's end
    assert set(packs) <= set(_data_objects(os.path.join(sd, "packs")))
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert_exact(root, before)


def test_disk_a_backup_found_nowhere_is_not_walked_for_at_every_start(disk_packed, monkeypatch):
    """The start's look in the packs no row covers (index object deleted) lists what it finds and
    says what it found nowhere (one pack slice changed); the next start, with the same objects and
    the same backups missing, does not walk them again."""
    from tb_footprint_plugin.engine import remote_vault, vault_packs

    root, _before, sd, index = disk_packed
    bs = remote_vault.pack_store(sd, fresh=True)
    ref = max((r for r in bs.refs() if r.form == "raw"), key=lambda r: r.length)
    with open(os.path.join(sd, "packs", ref.key), "r+b") as f:
        f.seek(ref.offset + ref.length // 2)
        b = f.read(1)
        f.seek(ref.offset + ref.length // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    for p in index:
        os.unlink(p)
    _age(os.path.join(sd, "packs"))
    _fresh_packs(sd)
    walks = []
    real = vault_packs.salvage
    monkeypatch.setattr(vault_packs, "salvage", lambda *a, **k: walks.append(1) or real(*a, **k))
    outs = api.recover_logdir(str(root))
    assert len(walks) == 1
    assert [o for o in outs if o.code == Finding.PACK_INDEX_REBUILT], [vars(o) for o in outs]
    assert [o for o in outs if o.code == Finding.BACKUP_DAMAGED and ref.sha[:12] in o.detail], [vars(o) for o in outs]
    _fresh_packs(sd)
    api.recover_logdir(str(root))
    assert len(walks) == 1
