"""Issue #26: the blob stores say exactly what they keep (review R25's L1, L6 and 843feac remarks,
helper S's note on R24 F8).

1. An offloaded backup whose remote object is archived (S3 GLACIER, as a ``vault lifecycle`` rule
   leaves it) is not damaged: a restore's reason began "backup damaged or missing" (with the
   archived words appended after), now it says archived, names each object and what to ask the
   store for, coded ``archived``; never "damaged".
2. L1: a disk pack written less than ``UNLISTED_AFTER`` (10 min) ago whose index object was lost
   read "damaged or missing" to restore and recover until it aged; the start's look now lists
   what it hid whatever the pack's age (only backups the manifests need that the vault holds in no
   other form: none of an add under way, whose blobs stay plain until their index is durable).
3. L6: a pending note that does not read was named nowhere; status names it (its path) and says
   what it means: what it was to prove a leftover is kept, removing it changes nothing.
4. 843feac's remark: a pack still listed in part that no forget deletes (held, or with bytes
   neither its rows nor recorded gaps account for) was counted nowhere; status counts such packs
   and their bytes per store, says they are kept whatever is restored or purged, and that nothing
   frees them.
"""
import glob
import hashlib
import io
import os
import secrets

import pytest

from test_pack_index_rebuilt_bucket import offloaded  # noqa: F401 - the fixture
from test_remote_archived import _archive, _unarchive
from test_restore_exact import assert_exact
from test_unlisted_packs_kept_disk import _fresh_packs, disk_packed  # noqa: F401 - the fixture
from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import Finding, StoreError
from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")


# --- 1. archived, never damaged -------------------------------------------------------------------
@pytest.mark.parametrize("streamed", [False, True])
def test_a_restore_of_archived_backups_says_archived_and_never_damaged(offloaded, s3_bucket, monkeypatch,  # noqa: F811
                                                                        streamed):
    root, before, url = offloaded
    if streamed:  # every backup streamed into its target's temporary (the path of backups > 32 MB)
        monkeypatch.setattr(remote_vault, "STAGE_BYTES", 1)
    keys = _archive(s3_bucket, url)
    res = api.restore(str(root))
    assert res and all(o.status == codes.Outcome.FAILED for o in res), [o.to_dict() for o in res]
    for o in res:
        assert o.code == StoreError.ARCHIVED, o.to_dict()
        assert "damaged or missing" not in o.reason and not o.reason.startswith("backup damaged"), o.reason
        assert "archived" in o.reason and "ask the store to restore it" in o.reason, o.reason
        assert "the backup is not damaged, nothing was lost" in o.reason, o.reason
        assert any(f"{url.rstrip('/')}/{k}" in o.reason for k in keys), o.reason
    _unarchive(s3_bucket, url, keys)
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert_exact(root, before)


def test_a_failure_met_once_is_not_taken_for_archived_after_the_store_served_the_object(offloaded,  # noqa: F811
                                                                                        s3_bucket):
    """What a read met is remembered per object (``last_failure``) for the words; once the store
    serves the object again the memory is cleared, so a later miss is never said "archived"."""
    from tb_footprint_plugin.engine.vault import Vault
    from tb_footprint_plugin.engine.vault_reads import ARCHIVED, DAMAGED, missing_backup
    from tb_footprint_plugin.storage.paths import state_dir

    root, _before, url = offloaded
    vault = Vault(state_dir(str(root)))
    m = next(m for m in api.operations(str(root)) if m.get("kind") == "reduce" and m.get("files"))
    f = next(f for f in m["files"] if vault.blob_form(f["sha256"]) == "remote")
    keys = _archive(s3_bucket, url)
    assert not vault.check_blob(f["sha256"])
    assert missing_backup(vault, f["path"], f["sha256"])[0] == ARCHIVED
    _unarchive(s3_bucket, url, keys)
    assert vault.check_blob(f["sha256"])  # served: nothing remembered stands
    assert remote_vault.last_failure(vault.root, f["sha256"]) is None
    assert missing_backup(vault, f["path"], f["sha256"])[0] == DAMAGED  # (as asked of a backup not checking)


# --- 2. L1: a young pack whose index object was lost ------------------------------------------------
def test_a_young_pack_whose_index_object_was_lost_is_found_by_restore(disk_packed):  # noqa: F811
    root, before, sd, index = disk_packed
    for p in index:  # lost a moment after the reduce: every pack younger than UNLISTED_AFTER
        os.unlink(p)
    packs = sorted(glob.glob(os.path.join(sd, "packs", "data", "*", "*.pack")))
    _fresh_packs(sd)
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert_exact(root, before)
    # nothing was deleted by the look: each pack is still there or was let go by the restores' releases
    assert not [o for o in res if "damaged" in (o.reason or "")], [o.to_dict() for o in res]
    assert packs


def test_a_young_pack_whose_index_object_was_lost_is_listed_anew_by_recover(disk_packed):  # noqa: F811
    root, _before, sd, index = disk_packed
    for p in index:
        os.unlink(p)
    packs = sorted(glob.glob(os.path.join(sd, "packs", "data", "*", "*.pack")))
    _fresh_packs(sd)
    outs = api.recover_logdir(str(root))
    assert [o for o in outs if o.code == Finding.PACK_INDEX_REBUILT], [vars(o) for o in outs]
    assert not [o for o in outs if o.code == Finding.BACKUP_DAMAGED], [vars(o) for o in outs]
    assert sorted(glob.glob(os.path.join(sd, "packs", "data", "*", "*.pack"))) == packs  # nothing deleted
    _fresh_packs(sd)
    assert not [p for p in api.status(str(root))["problems"]
                if "listed by no index object" in str(p.get("detail"))], api.status(str(root))["problems"]


# --- 3. L6: a pending note that does not read ----------------------------------------------------------
def _note_rows(problems, path):
    return [p for p in problems if p["code"] == Finding.DAMAGED_FILE and p.get("path") == path]


def test_status_names_a_pending_note_that_does_not_read_on_a_disk(disk_packed):  # noqa: F811
    root, _before, sd, _index = disk_packed
    pending = os.path.join(sd, "packs", "pending")
    os.makedirs(pending, mode=0o700, exist_ok=True)
    note = os.path.join(pending, f"{secrets.token_hex(16)}.json")
    with open(note, "wb") as f:
        f.write(b'{"v": 1, "keys": [')  # cut short
    _fresh_packs(sd)
    (row,) = _note_rows(api.status(str(root))["problems"], note)
    assert "pending note" in row["detail"] and "proves nothing" in row["detail"], row
    assert "is kept" in row["detail"] and "never deleted" in row["detail"], row
    assert "Removing the note frees nothing and deletes nothing" in row["detail"], row
    os.unlink(note)
    _fresh_packs(sd)
    assert not _note_rows(api.status(str(root))["problems"], note)


def test_status_names_a_pending_note_that_does_not_read_in_a_remote_vault(offloaded):  # noqa: F811
    root, _before, url = offloaded
    key = f"pending/{secrets.token_hex(16)}.json"
    open_store(url).put(key, b"\x00 not json")
    (row,) = _note_rows(api.status(str(root))["problems"], f"{url.rstrip('/')}/{key}")
    assert "proves nothing" in row["detail"], row


# --- 4. packs kept whatever is restored or purged ----------------------------------------------------
def _src(data: bytes) -> BlobSource:
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda d=data: io.BytesIO(d))


def _index_objects(root):
    return sorted(glob.glob(os.path.join(root, "index", "*.json")))


def test_kept_packs_held_uncovered_and_a_releases_own_gap(tmp_path, monkeypatch):
    """The library's answer: a pack listed anew in part is ``held``; one whose rows fill two index
    objects, the one listing only w's rows lost, is ``uncovered`` (bytes nothing accounts for); a
    pack a release left a recorded gap in is neither."""
    def store(name):
        return BlobStore(PosixStore(str(tmp_path / name), create=True), pack_below=4096)

    x = [os.urandom(700) + b"x" * i for i in range(3)]
    w = [os.urandom(900) + b"w" * i for i in range(2)]
    # held: one pack, one index object lost, x's rows listed anew
    bs = store("held")
    refs = bs.add([_src(b) for b in x + w])
    for p in _index_objects(str(tmp_path / "held")):
        os.unlink(p)
    bs = store("held")
    bs.index_found(refs[:3])
    pack = refs[0].key
    size = os.path.getsize(str(tmp_path / "held" / pack))
    assert bs.kept_packs() == {pack: (size, "held")}
    # uncovered: the rows split over two index objects (INDEX_ROWS of 3), the one with w's rows lost
    monkeypatch.setattr(blobstore, "INDEX_ROWS", 3)
    bs = store("split")
    refs = bs.add([_src(b) for b in x + w])
    index = _index_objects(str(tmp_path / "split"))
    assert len(index) == 2 and len({r.key for r in refs}) == 1
    w_only = [p for p in index if refs[0].sha not in open(p).read()]
    assert len(w_only) == 1
    os.unlink(w_only[0])
    bs = store("split")
    pack = refs[0].key
    assert bs.kept_packs() == {pack: (os.path.getsize(str(tmp_path / "split" / pack)), "uncovered")}
    # a release's own gap (recorded): nothing kept beyond what the rows list
    monkeypatch.setattr(blobstore, "INDEX_ROWS", 2048)
    bs = store("gap")
    refs = bs.add([_src(b) for b in x + w])
    bs.forget([refs[0].sha], grace_seconds=0, sweep=False)  # still above half live: the pack stays
    assert os.path.exists(str(tmp_path / "gap" / refs[0].key))
    assert store("gap").kept_packs() == {}


def test_status_counts_the_held_packs_of_a_disk_vault(disk_packed):  # noqa: F811
    root, _before, sd, index = disk_packed
    packs_root = os.path.join(sd, "packs")
    bs = remote_vault.pack_store(sd, fresh=True)
    refs = sorted(bs.refs(), key=lambda r: (r.key, r.offset))
    assert not [p for p in api.status(str(root))["problems"] if p["code"] == Finding.PACKS_KEPT]
    for p in index:
        os.unlink(p)
    _fresh_packs(sd)
    half = [r for i, r in enumerate(refs) if i % 2 == 0]
    remote_vault.pack_store(sd).index_found(half)  # listed anew in part (the others' manifests unread)
    held = remote_vault.pack_store(sd).held_packs()
    assert held
    _fresh_packs(sd)
    rows = [p for p in api.status(str(root))["problems"] if p["code"] == Finding.PACKS_KEPT]
    assert len(rows) == 1 and rows[0]["path"] == packs_root, rows
    (row,) = rows
    assert row["count"] == len(held) and row["bytes"] == sum(os.path.getsize(os.path.join(packs_root, k))
                                                              for k in held), row
    assert "marked held" in row["detail"] and "kept whatever is restored or purged" in row["detail"], row
    assert "No tb-footprint command frees them" in row["detail"], row
    assert os.path.join(packs_root, sorted(held)[0]) in row["detail"], row
