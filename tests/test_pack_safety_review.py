"""The J6 safety review of the local vault's packs (notes/r6/review_J6.md): each test reproduces
one finding where a packed backup's only copy was lost, or an intact one refused, and asserts
that it no longer is."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path

import pytest

from test_restore_exact import assert_exact, snapshot
from test_vault_packs import DROP, make_logdir, packs, reduce
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import BlobError, Finding
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.blobstore import PACK_MAGIC
from tb_footprint_plugin.storage.paths import state_dir


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


def _reduce_each(root: Path, runs) -> None:
    """One reduce a run: an index object each (a batch's runs share their packs and index)."""
    for r in runs:
        rep = api.reduce_logdir(str(root), policy=DROP, dry_run=False, runs=[r], quiet_period=0,
                                verify_backends=("python",))
        assert {o.status.value for o in rep.outcomes} == {"verified"}, rep.to_dict()


def _age_packs(v: Path, hours: float = 2) -> None:
    old = time.time() - hours * 3600  # reduced long ago: every pack is past the leftovers' grace
    for p in (v / "packs" / "data").rglob("*.pack"):
        os.utime(p, (old, old))


def _index_problems(v: Path) -> list:
    folder = str(v / "packs" / "index")
    return [p for p in Vault(str(v)).pack_problems()
            if p["code"] == BlobError.DAMAGED_INDEX.value and p["file"] == folder]


# --- F8: a pack index gone, replaced or renamed must not turn every pack into a leftover -------
@pytest.mark.parametrize("how", ["missing", "file"])
def test_a_batch_end_deletes_no_pack_while_the_pack_index_folder_is_gone_or_a_file(tmp_path, how):
    """``packs/index`` moved away (or a file in its place) and packs older than the grace: the
    batch end's merge deleted every pack, the only copy of run a's backups. Now nothing is
    deleted, pack_problems and status name the index folder, and with the index put back the
    restore is exact."""
    root = make_logdir(tmp_path / "logs", runs=("a",), files=10)
    before = snapshot(root)
    reduce(root)
    v = Path(state_dir(str(root)))
    _age_packs(v)
    held = packs(root)
    assert held
    aside = tmp_path / "index-aside"
    shutil.move(str(v / "packs" / "index"), str(aside))
    if how == "file":
        (v / "packs" / "index").write_bytes(b"")
    assert Vault(str(v)).merge_pack_index() is False
    assert packs(root) == held
    assert _index_problems(v), Vault(str(v)).pack_problems()
    st = api.status(str(root))
    assert [p for p in st["problems"] if p["code"] == Finding.DAMAGED_FILE
            and str(v / "packs" / "index") in p.get("file", p["detail"])], st["problems"]
    if how == "file":
        (v / "packs" / "index").unlink()
    shutil.move(str(aside), str(v / "packs" / "index"))
    assert not _index_problems(v)
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


def test_a_reduce_of_another_run_keeps_the_packs_an_absent_index_listed(tmp_path):
    """The same through an ordinary reduce of run b (its batch end merges and sweeps): b's
    compaction makes a new index folder listing only b's pack, a's pack stays (its backups are
    listed nowhere and held nowhere else: the reduce's start finds them again in it, each hashed,
    and lists them: R23 T13), and a restores exactly once its index is back."""
    root = make_logdir(tmp_path / "logs", runs=("a",), files=10)
    before = snapshot(root / "a")
    reduce(root)
    v = Path(state_dir(str(root)))
    _age_packs(v)
    a_pack = packs(root)
    aside = tmp_path / "index-aside"
    shutil.move(str(v / "packs" / "index"), str(aside))
    make_logdir(tmp_path / "logs", runs=("b",), files=10)
    rep = api.reduce_logdir(str(root), policy=DROP, dry_run=False, runs=["b"], quiet_period=0,
                            verify_backends=("python",))
    assert {o.status.value for o in rep.outcomes} == {"verified"}, rep.to_dict()
    assert set(a_pack) <= set(packs(root))
    assert not _index_problems(v)  # a's backups found again by the start (each hashed) and listed
    for p in (v / "packs" / "index").iterdir():
        shutil.move(str(p), str(aside / p.name))
    (v / "packs" / "index").rmdir()
    shutil.move(str(aside), str(v / "packs" / "index"))
    outs = api.restore(str(root), run="a")
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root / "a", before)


def test_a_renamed_index_object_keeps_the_pack_it_listed(tmp_path):
    """Two runs, an index object each; one renamed ``<hex>.json.bak`` (a name the index skips):
    the batch end deleted the pack only it listed. Now the stray name is damage, nothing is
    deleted, and both runs restore once it is renamed back."""
    root = make_logdir(tmp_path / "logs", runs=("a", "b"), files=5)
    before = snapshot(root)
    _reduce_each(root, ("a", "b"))
    v = Path(state_dir(str(root)))
    _age_packs(v)
    held = packs(root)
    idx = sorted((v / "packs" / "index").iterdir())
    assert len(idx) == 2
    bak = idx[0].with_name(idx[0].name + ".bak")
    idx[0].rename(bak)
    Vault(str(v)).merge_pack_index()
    assert packs(root) == held
    problems = _index_problems(v)
    assert problems and bak.name in problems[0]["message"]
    bak.rename(idx[0])
    outs = api.restore(str(root))
    assert sorted(o.status.value for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


def test_an_index_object_deleted_outright_keeps_every_pack(tmp_path):
    """One of two index objects deleted (no stray name left): the backups only it listed are
    referenced by a manifest and held nowhere else, so no pack is swept and the gap is named."""
    root = make_logdir(tmp_path / "logs", runs=("a", "b"), files=5)
    _reduce_each(root, ("a", "b"))
    v = Path(state_dir(str(root)))
    _age_packs(v)
    held = packs(root)
    sorted((v / "packs" / "index").iterdir())[0].unlink()
    Vault(str(v)).merge_pack_index()
    assert packs(root) == held
    problems = _index_problems(v)
    assert problems and "listed by no index object" in problems[0]["message"]


def test_a_killed_compactions_unindexed_pack_is_still_swept_past_the_grace(tmp_path):
    """A pack no index lists whose blobs are held elsewhere (a compaction killed before its
    index: its blobs are still plain) is a leftover: the batch end deletes it once past the
    grace, and reports nothing. (Since R24 F5 such a write first leaves a pending note naming the
    pack, which is what proves it a leftover: written here as the killed compaction left it.)"""
    root = make_logdir(tmp_path / "logs", runs=("a",), files=5)
    reduce(root)
    v = Path(state_dir(str(root)))
    held = packs(root)
    name = secrets.token_hex(16)
    note = v / "packs" / "pending" / f"{secrets.token_hex(16)}.json"
    note.parent.mkdir(mode=0o700, exist_ok=True)
    note.write_text(json.dumps({"v": 1, "created": 0, "keys": [f"data/{name[:2]}/{name}.pack"]}))
    stray = v / "packs" / "data" / name[:2] / f"{name}.pack"
    stray.parent.mkdir(mode=0o700, exist_ok=True)
    stray.write_bytes(PACK_MAGIC + b"x" * 100)
    _age_packs(v)
    os.utime(note, (time.time() - 3 * 3600,) * 2)
    assert not _index_problems(v)
    Vault(str(v)).merge_pack_index()
    assert not stray.exists()
    assert not note.exists()
    assert packs(root) == held


# --- F5: a remote record beside a packed blob is not the remote copy ---------------------------
def test_a_record_the_bucket_does_not_back_never_makes_the_offload_forget_the_pack_copy(tmp_path, s3_bucket):
    """A well-formed record of packed blob x (known URL) while the bucket holds no x: the offload
    took it for already remote and forgot the pack copy, x's only one. Now x is read from its
    pack and uploaded (the store's copy verified) before the pack copy goes, and the restore from
    the bucket is exact."""
    from tb_footprint_plugin.engine import offload, remote_vault
    from tb_footprint_plugin.engine.context import Context

    root = make_logdir(tmp_path / "logs", files=4)
    before = snapshot(root)
    reduce(root)
    vault = Context(str(root)).vault
    url = s3_bucket.url("later")
    offload.configure(vault, url)
    m = next(m for m in vault.manifests() if m.get("kind") == "reduce")
    x = m["files"][0]["sha256"]
    assert vault.blob_form(x) == "packed"
    url = remote_vault.configured_url(vault.root)
    remote_vault.write_record(vault.root, x, url, m["files"][0]["size"], f"data/{x[:2]}/{x}")
    got = offload.offload_operation(vault, m["op_id"])
    assert got[x] == offload.OFFLOADED, got
    assert remote_vault.blobstore(url, fresh=True).check(x) is None  # the bucket holds x, verified
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


def test_a_damaged_remote_copy_is_sent_again_before_the_pack_copy_goes(tmp_path, s3_bucket):
    """The bucket lists x (a record names it) but its bytes are damaged: the pack copy is not
    forgotten on the record's word; x is sent again, and the bucket's copy verifies before the
    pack copy goes (the restore from the bucket is exact)."""
    import io

    from tb_footprint_plugin.engine import offload, remote_vault
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.storage.blobstore import BlobSource

    root = make_logdir(tmp_path / "logs", files=4)
    before = snapshot(root)
    reduce(root)
    vault = Context(str(root)).vault
    offload.configure(vault, s3_bucket.url("later"))
    url = remote_vault.configured_url(vault.root)
    m = next(m for m in vault.manifests() if m.get("kind") == "reduce")
    x = m["files"][0]["sha256"]
    bs = remote_vault.blobstore(url, fresh=True)
    with remote_vault.open_packed(vault.root, x) as f:
        body = f.read()
    ref = bs.add([BlobSource(sha=x, size=len(body), open=lambda: io.BytesIO(body))])[0]
    remote_vault.write_record(vault.root, x, url, ref.size, ref.key)
    data = bytearray(bs.store.read_all(ref.key))
    data[ref.offset + ref.length // 2] ^= 0xFF
    bs.store.put(ref.key, bytes(data))
    got = offload.offload_operation(vault, m["op_id"])
    assert got[x] == offload.OFFLOADED, got
    assert remote_vault.blobstore(url, fresh=True).check(x) is None
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


# --- F1 / F1b: a packed backup hidden for a moment by another process's index rewrite ----------
def test_an_index_object_replaced_between_the_listing_and_its_read_is_read_from_its_replacement(tmp_path):
    """A reader lists ``index/``; before it reads the object listing its blobs, another process's
    forget of one of them writes the replacement and deletes that object. The reader skipped the
    gone object and never listed again: the other blobs read as missing. Now it lists again and
    finds them in the replacement."""
    import hashlib
    import io

    from tb_footprint_plugin.storage import blobstore
    from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore

    bodies = [bytes([i]) * (100 + i) for i in range(4)]
    shas = [hashlib.sha256(b).hexdigest() for b in bodies]
    writer = BlobStore(PosixStore(str(tmp_path / "packs"), create=True))
    writer.add([BlobSource(sha=s, size=len(b), open=lambda b=b: io.BytesIO(b)) for s, b in zip(shas, bodies)])
    reader = BlobStore(PosixStore(str(tmp_path / "packs")))
    with blobstore._PARSED_LOCK:
        blobstore._PARSED.clear()  # a fresh process: it has parsed no index object yet
    real = reader.store.open_read  # index objects are read as a stream
    raced = []

    def open_read(key, *a, **kw):
        if key.startswith("index/") and not raced:
            raced.append(key)
            writer.forget([shas[0]], sweep=False)  # writes the replacement, then deletes `key`
        return real(key, *a, **kw)

    reader.store.open_read = open_read
    reader.reload()
    assert raced
    assert [reader.has(s) for s in shas] == [False, True, True, True]
    assert all(reader.check(s) is None for s in shas[1:])


def test_a_backup_hidden_for_a_moment_never_marks_another_restored_operation_purged(tmp_path, monkeypatch):
    """r2 and r3 hold the same file X (packed once); r2 is restored (X kept: r3 claims it) and
    its file then edited, so X is r2's original's only copy. While r1's restore releases its
    backups, one look-up of X misses (another process rewriting the pack index): r2 was marked
    purged on that word, and a purge of r3 then forgot X. Now the miss is looked at again after a
    fresh listing: r2 keeps its claim and X survives the purge of r3."""
    from tb_footprint_plugin.engine import remote_vault

    root = make_logdir(tmp_path / "logs", runs=("r2", "r3"), files=1, shared=1)
    make_logdir(tmp_path / "logs", runs=("r1",), files=1)
    reduce(root)
    v = Path(state_dir(str(root)))
    ops = {m["run"]: m for m in api.operations(str(root))}
    x = ops["r2"]["files"][0]["sha256"]
    assert ops["r3"]["files"][0]["sha256"] == x and Vault(str(v)).blob_form(x) == "packed"
    assert [o.status.value for o in api.restore(str(root), run="r2")] == ["restored"]
    assert Vault(str(v)).blob_form(x) == "packed"  # r3 still claims it
    f2 = root / ops["r2"]["files"][0]["path"]
    f2.write_bytes(b"the user's new bytes")
    real = remote_vault.packed_ref
    real_delete = Vault.delete_blobs
    hidden = []

    def delete_blobs(self, *a, **kw):
        got = real_delete(self, *a, **kw)
        hidden.append("armed")  # the release's blobs are dealt with: its look at the others follows
        return got

    def packed_ref(vault_root, sha):
        if sha == x and hidden == ["armed"]:
            hidden.append(sha)
            return None  # one look-up misses it, as while another process swaps the index object
        return real(vault_root, sha)

    monkeypatch.setattr(Vault, "delete_blobs", delete_blobs)
    monkeypatch.setattr(remote_vault, "packed_ref", packed_ref)
    assert [o.status.value for o in api.restore(str(root), run="r1")] == ["restored"]
    monkeypatch.setattr(remote_vault, "packed_ref", real)
    assert hidden[:2] == ["armed", x]
    ops = {m["run"]: m for m in api.operations(str(root))}
    assert not ops["r2"].get("backup_purged"), ops["r2"]
    api.purge(str(root), run="r3", yes=True)
    assert {m["run"]: m for m in api.operations(str(root))}["r3"].get("backup_purged")
    assert Vault(str(v)).check_blob(x)  # r2's original still exists, r2's claim kept it


# --- F4 / F6: restore reads the pack when the plain blob went, or a record beside it is bad ----
def test_a_restore_whose_plain_blob_another_runs_packing_unlinked_reads_the_pack(tmp_path, monkeypatch):
    """Run b's transaction left a plain blob of bytes already packed for run a; a's restore chose
    it, and b's compaction packed and unlinked it before the copy: the restore failed
    (FileNotFoundError re-raised, only a .zst was a fallback). Now it falls back to the pack."""
    from tb_footprint_plugin.engine import remote_vault
    from tb_footprint_plugin.engine import vault as vault_mod

    root = make_logdir(tmp_path / "logs", files=3)
    reduce(root)
    v = Vault(state_dir(str(root)))
    m = next(m for m in v.manifests() if m.get("kind") == "reduce")
    x = m["files"][0]["sha256"]
    assert v.blob_form(x) == "packed"
    with remote_vault.open_packed(v.root, x) as f:
        body = f.read()
    plain = Path(v.blob_path(x))
    plain.parent.mkdir(mode=0o700, exist_ok=True)
    plain.write_bytes(body)  # b's backup of the same bytes, not compacted yet
    real = vault_mod.copy_new

    def racing(src, *a, **kw):
        if src == str(plain) and plain.exists():
            plain.unlink()  # b's compaction packed it (verified) and unlinked the plain blob
        return real(src, *a, **kw)

    monkeypatch.setattr(vault_mod, "copy_new", racing)
    dest = tmp_path / "out" / "h0.xplane.pb"
    v.restore_blob(x, str(dest), mode=0o640, mtime_ns=1_700_000_000_000_000_000)
    assert not plain.exists()
    assert dest.read_bytes() == body and dest.stat().st_mtime_ns == 1_700_000_000_000_000_000


def test_a_malformed_record_never_hides_an_intact_packed_backup(tmp_path):
    """An unparsable ``.remote`` record beside a packed blob won over the pack: blob_form said
    remote, open_blob tried only the record, the restore was refused. Now the pack is read."""
    from tb_footprint_plugin.engine import remote_vault

    root = make_logdir(tmp_path / "logs", files=4)
    before = snapshot(root)
    reduce(root)
    v = Vault(state_dir(str(root)))
    m = next(m for m in v.manifests() if m.get("kind") == "reduce")
    x = m["files"][0]["sha256"]
    rec = Path(remote_vault.record_path(v.root, x))
    rec.parent.mkdir(mode=0o700, exist_ok=True)
    rec.write_text("{not json")
    assert v.blob_form(x) == "packed" and v.check_blob(x)
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


# --- F3 / F7: a plain blob beside a packed backup ---------------------------------------------
def test_a_grown_plain_blob_beside_a_packed_backup_never_hides_it(tmp_path):
    """A plain blob standing and grown under a packed backup's digest was read unhashed (only a
    .zst beside it made readers hash it): the intact packed backup read as damaged and the
    restore was refused. Now it is hashed, passed over, and the pack restores exactly."""
    root = make_logdir(tmp_path / "logs", files=5)
    before = snapshot(root)
    reduce(root)
    v = Vault(state_dir(str(root)))
    m = next(m for m in v.manifests() if m.get("kind") == "reduce")
    x = m["files"][0]["sha256"]
    with v.open_blob(x) as src:
        grown = src.read() + b"records someone appended"
    plain = Path(v.blob_path(x))
    plain.parent.mkdir(mode=0o700, exist_ok=True)
    plain.write_bytes(grown)
    os.chmod(plain, 0o600)
    assert v.check_blob(x)
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


def test_bytes_already_packed_are_backed_up_again_as_a_copy_never_a_link(tmp_path):
    """Run b's file holding bytes packed for run a: its backup linked b's live inode under the
    digest, where a late writer of b could grow it beside a's pack (salvage disowns it, readers
    took it). Now the backup is a copy of its own."""
    root = make_logdir(tmp_path / "logs", files=3)
    reduce(root)
    v = Vault(state_dir(str(root)))
    m = next(m for m in v.manifests() if m.get("kind") == "reduce")
    x = m["files"][0]["sha256"]
    assert v.blob_form(x) == "packed"
    live = tmp_path / "logs" / "b_live.pb"
    with v.open_blob(x) as src:
        live.write_bytes(src.read())
    blob = v.store(str(live), x)
    assert os.stat(blob).st_ino != live.stat().st_ino and live.stat().st_nlink == 1


def test_status_never_promises_a_salvage_of_a_plain_blob_grown_beside_a_pack(tmp_path):
    """A plain blob grown beside a packed backup is not the run's late records (salvage leaves
    it), yet status said ``late_writes_pending`` ("`recover` puts the complete records back"),
    which no start ever did. Now it says ``backup_changed``: kept as is, not salvaged."""
    root = make_logdir(tmp_path / "logs", files=3)
    reduce(root)
    v = Vault(state_dir(str(root)))
    m = next(m for m in v.manifests() if m.get("kind") == "reduce")
    f = m["files"][0]
    with v.open_blob(f["sha256"]) as src:
        grown = src.read() + b"records someone appended"
    plain = Path(v.blob_path(f["sha256"]))
    plain.parent.mkdir(mode=0o700, exist_ok=True)
    plain.write_bytes(grown)
    os.chmod(plain, 0o600)
    codes = [p["code"] for p in api.status(str(root))["problems"]]
    assert Finding.LATE_WRITES_PENDING not in codes and Finding.BACKUP_CHANGED in codes, codes
