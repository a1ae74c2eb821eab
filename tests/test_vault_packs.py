"""Packs for the local vault (issue #27 item 2, issue #26 "one vault on any store"): a compaction
puts small backups into one pack of the vault's own BlobStore over a PosixStore
(``<vault>/packs``) instead of a ``.zst`` each; every reader finds them, purge forgets them through
``BlobStore.forget`` (repacking half-dead packs), and a kill or damage at any step loses nothing."""
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from test_restore_exact import assert_exact, dress, snapshot
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import BlobError, Finding
from tb_footprint_plugin.engine import faults, remote_vault
from tb_footprint_plugin.engine import vault as vault_mod
from tb_footprint_plugin.engine.vault import KEPT_OPEN, KEPT_SHARED, PACKED, Vault
from tb_footprint_plugin.storage.paths import state_dir

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
OLD = 1_700_000_000


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


def make_logdir(root: Path, runs=("a",), files: int = 30, shared: int = 0, big: int = 0) -> Path:
    """Runs of scalars, each with a profile session of ``files`` small files (distinct bytes per
    run, but the first ``shared`` the same in every run) and ``big`` compressible files of 600 KiB."""
    for r in runs:
        with synth.EventWriter(str(root / r)) as w:
            for s in range(20):
                w.scalar("acc", s, s / 20)
        sess = root / r / "plugins" / "profile" / "2026_01_01_00_00_00"
        sess.mkdir(parents=True)
        for i in range(files):
            seed = b"shared" if i < shared else r.encode()
            body = hashlib.sha256(seed + bytes([i])).digest() * (30 + 7 * i)
            (sess / f"h{i}.xplane.pb").write_bytes(body)
        for i in range(big):
            (sess / f"big{i}.trace.json").write_bytes((b'{"ph":"X","name":"op%d"},' % i) * 25_000)
    dress(root)
    for d, ds, fs in os.walk(root):
        for n in fs + ds:
            os.utime(os.path.join(d, n), (OLD, OLD))
    return root


def reduce(root: Path):
    rep = api.reduce_logdir(str(root), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert {o.status.value for o in rep.outcomes} == {"verified"}, rep.to_dict()
    return rep


def reduce_each(root: Path, runs) -> None:
    """One reduce a run, so each run's backups get a pack and an index object of their own (a
    batch compacts its runs together, ``engine.compactor``)."""
    for r in runs:
        rep = api.reduce_logdir(str(root), policy=DROP, dry_run=False, quiet_period=0, runs=[r],
                                verify_backends=("python",))
        assert {o.status.value for o in rep.outcomes} == {"verified"}, rep.to_dict()


def vault_files(root: Path) -> dict:
    """rel path -> size of every file under the vault's blobs/ and packs/."""
    v = Path(state_dir(str(root)))
    return {str(p.relative_to(v)): p.stat().st_size for d in ("blobs", "packs") for p in (v / d).rglob("*")
            if p.is_file()}


def packs(root: Path):
    return [k for k in vault_files(root) if k.endswith(".pack")]


def test_small_backups_go_into_one_pack_and_restore_exactly(tmp_path):
    """30 small backups of a profile session: one pack and one index object, no blob file each;
    restore gives back every file byte for byte with its mode and mtime."""
    root = make_logdir(tmp_path / "logs")
    before = snapshot(root)
    reduce(root)
    held = vault_files(root)
    assert len(packs(root)) == 1 and len([k for k in held if k.startswith("packs/index/")]) == 1, held
    assert not [k for k in held if k.startswith("blobs/")], held  # no plain, no .zst: all packed
    vault = Vault(state_dir(str(root)))
    m = api.operations(str(root))[0]
    assert {vault.blob_form(f["sha256"]) for f in m["files"]} == {"packed"}
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


def test_a_big_backup_is_still_its_own_zst(tmp_path):
    """Above PACK_BELOW a compressible backup is compacted to a .zst of its own, as before."""
    root = make_logdir(tmp_path / "logs", files=3, big=1)
    before = snapshot(root)
    reduce(root)
    held = vault_files(root)
    assert len([k for k in held if k.endswith(".zst")]) == 1 and len(packs(root)) == 1, held
    api.restore(str(root))
    assert_exact(root, before)


def test_packed_backups_are_read_by_verify_status_and_usage(tmp_path):
    """verify re-hashes packed backups, status names no problem, and the disk in use counts the
    pack as stored (within 1% of du)."""
    root = make_logdir(tmp_path / "logs", files=60)
    reduce(root)
    res = api.verify(str(root), verify_backends=("python",))
    assert res and all(r["ok"] and r["backups_ok"] for r in res), res
    st = api.status(str(root))
    assert not [p for p in st["problems"] if p["code"] in (Finding.BACKUP_DAMAGED, Finding.DAMAGED_FILE)], st["problems"]
    du = subprocess.run(["du", "-sc", "--block-size=1", str(root)], capture_output=True, text=True).stdout
    total = int(du.strip().splitlines()[-1].split()[0])
    got = st["disk_in_use_bytes"] if "disk_in_use_bytes" in st else st["disk"]["disk_in_use_bytes"]
    assert abs(got - total) <= 0.01 * total, (got, total)
    vault = Vault(state_dir(str(root)))
    m = api.operations(str(root))[0]
    ref = remote_vault.packed_ref(vault.root, m["files"][0]["sha256"])
    assert vault.blob_size_on_disk(m["files"][0]["sha256"]) == ref.length > 0


def test_a_blob_a_writer_may_hold_or_a_live_file_shares_stays_plain(tmp_path):
    """The compaction's rules: a plain blob held open for writing, or with a second link, is not
    packed and stays."""
    vault = Vault(str(tmp_path / "v"))
    vault.ensure()
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"a" * 5000)
    b.write_bytes(b"b" * 5000)
    sa, sb = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b))
    vault.store(str(a), sa)  # a hard link: the live file shares it
    vault.store(str(b), sb)
    os.unlink(b)
    out = vault.pack([sa, sb], held=[vault.blob_path(sb)])
    assert out == {sa: KEPT_SHARED, sb: KEPT_OPEN}
    assert os.path.exists(vault.blob_path(sa)) and os.path.exists(vault.blob_path(sb))
    assert remote_vault.packed_ref(vault.root, sa) is None and remote_vault.packed_ref(vault.root, sb) is None
    assert vault.pack([sb]) == {sb: PACKED}
    assert not os.path.exists(vault.blob_path(sb)) and vault.check_blob(sb)


def test_purge_forgets_packed_blobs_and_repacks_a_half_dead_pack(tmp_path):
    """Run b shares 3 of run a's 30 backups: purging a forgets 27, and a's pack (3/30 live) is
    repacked into a new verified pack; b still restores exactly, then the vault holds no pack."""
    root = make_logdir(tmp_path / "logs", runs=("a", "b"), files=30, shared=3)
    before = snapshot(root)
    reduce_each(root, ("a", "b"))
    assert len(packs(root)) == 2
    old = set(packs(root))
    rep = api.purge(str(root), run="a", yes=True)
    assert rep.to_dict()["ops"] and not rep.to_dict()["kept"], rep.to_dict()
    now = set(packs(root))
    assert len(now) == 2 and len(now & old) == 1, (old, now)  # a's pack replaced by a new one
    bs = remote_vault.pack_store(state_dir(str(root)), fresh=True)
    assert len(list(bs.refs())) == 30  # b's 27 own + the 3 shared
    api.restore(str(root), run="b")
    after = snapshot(root)
    assert {k: v for k, v in after.items() if k.startswith("b")} == {k: v for k, v in before.items()
                                                                     if k.startswith("b")}
    api.purge(str(root), yes=True)
    assert not packs(root)


def test_a_corrupted_pack_is_named_and_nothing_is_restored(tmp_path):
    """One flipped byte in the pack: status names the pack file, verify fails with its code,
    the restore refuses before any original goes back, and purge keeps it."""
    root = make_logdir(tmp_path / "logs")
    reduce(root)
    start = snapshot(root)
    pack = Path(state_dir(str(root))) / packs(root)[0]
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(pack, 0o600)
    pack.write_bytes(bytes(data))
    res = api.verify(str(root), verify_backends=("python",))
    assert not res[0]["backups_ok"], res
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["failed"], [o.to_dict() for o in outs]
    assert str(pack) in outs[0].reason and outs[0].code, outs[0].to_dict()
    assert snapshot(root) == start  # nothing put back, nothing removed
    rep = api.purge(str(root), yes=True).to_dict()
    assert rep["kept"] and rep["freed_bytes"] == 0, rep
    assert pack.exists()


def test_a_damaged_index_is_named_and_blocks_every_forget(tmp_path):
    """An index object that does not parse: status names it (damaged_state_file), a purge
    forgets nothing (its blobs may be listed only there) and stays unfinished with the code."""
    root = make_logdir(tmp_path / "logs", runs=("a", "b"))
    reduce_each(root, ("a", "b"))
    v = Path(state_dir(str(root)))
    index = sorted((v / "packs" / "index").iterdir())[0]
    index.write_bytes(b"{not json")
    st = api.status(str(root))
    named = [p for p in st["problems"] if p["code"] == Finding.DAMAGED_FILE and str(index) in p["detail"]]
    assert named, st["problems"]
    held = set(packs(root))
    problems = Vault(str(v)).pack_problems()
    assert [p["code"] for p in problems] == [BlobError.DAMAGED_INDEX.value]
    with pytest.raises(OSError) as e:
        Vault(str(v)).delete_blobs([hashlib.sha256(b"x").hexdigest()] + [
            f["sha256"] for m in api.operations(str(root)) for f in m["files"]], lambda: set())
    assert getattr(e.value, "code", None) == BlobError.DAMAGED_INDEX and str(index.name) in str(e.value)
    assert set(packs(root)) == held


def test_a_pack_that_does_not_read_back_is_refused_and_the_blobs_stay_plain(tmp_path):
    """The pack is damaged between its write and its read-back: add refuses it, every plain blob
    stays, the note stays, and the next start packs them."""
    root = make_logdir(tmp_path / "logs")

    def corrupt():
        faults.disarm_all()
        for p in (Path(state_dir(str(root))) / "packs" / "data").rglob("*.pack"):
            data = bytearray(p.read_bytes())
            data[-1] ^= 0xFF
            p.write_bytes(bytes(data))

    faults.arm("reduce.pack_written", corrupt)
    before = snapshot(root)
    reduce(root)
    held = vault_files(root)
    assert not packs(root) and len([k for k in held if k.startswith("blobs/")]) == 30, held
    assert Vault(state_dir(str(root))).pending_compactions()
    api.recover_logdir(str(root))
    assert len(packs(root)) == 1 and not [k for k in vault_files(root) if k.startswith("blobs/")]
    api.restore(str(root))
    assert_exact(root, before)


def _cli(args, step):
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli"] + args, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("step", ["reduce.pack_written", "reduce.pack_verified", "reduce.pack_indexed",
                                  "reduce.pack_unlinked"])
def test_sigkill_while_packing_loses_nothing(tmp_path, step):
    """SIGKILL of the CLI's reduce at each packing step: the next start finishes the packing
    and every original comes back byte for byte."""
    root = make_logdir(tmp_path / "logs")
    before = snapshot(root)
    r = _cli(["reduce", str(root), "--quiet-period", "0", "--verify", "python", "--yes",
              "--delete", "profile_xplane"], step)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    api.recover_logdir(str(root))
    assert len(packs(root)) >= 1 and not [k for k in vault_files(root) if k.startswith("blobs/")]
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


@pytest.mark.parametrize("step", ["purge.pack_index_written", "purge.pack_old_index_deleted",
                                  "purge.pack_objects_deleted", "repack.pack_written"])
def test_sigkill_while_forgetting_packed_blobs_loses_nothing(tmp_path, step):
    """SIGKILL of the CLI's purge of run a at each forget/repack step (b shares 3 blobs): the
    next start finishes the purge, and b still restores byte for byte."""
    root = make_logdir(tmp_path / "logs", runs=("a", "b"), files=30, shared=3)
    before = snapshot(root)
    reduce_each(root, ("a", "b"))
    r = _cli(["purge", str(root), "--run", "a", "--yes"], step)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    api.recover_logdir(str(root))
    ops = {m["run"]: m for m in api.operations(str(root))}
    assert ops["a"].get("backup_purged") and not ops["b"].get("backup_purged")
    assert not api.status(str(root))["unfinished_operations"]
    bs = remote_vault.pack_store(state_dir(str(root)), fresh=True)
    assert len(list(bs.refs())) == 30 and not Vault(state_dir(str(root))).pack_problems()
    outs = api.restore(str(root), run="b")
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    after = snapshot(root)
    assert {k: v for k, v in after.items() if k.startswith("b")} == {k: v for k, v in before.items()
                                                                     if k.startswith("b")}
    assert not list(remote_vault.pack_store(state_dir(str(root)), fresh=True).refs())  # released by the restore


def test_packed_backups_are_offloaded_when_a_remote_vault_is_added_later(tmp_path, s3_bucket):
    """A vault that packed its backups, then given a remote vault: the offload reads each from its
    pack (hashed), records it, and only then forgets the pack copy; restore from the bucket exact."""
    from tb_footprint_plugin.engine import offload
    from tb_footprint_plugin.engine.context import Context

    root = make_logdir(tmp_path / "logs")
    before = snapshot(root)
    reduce(root)
    assert len(packs(root)) == 1
    vault = Context(str(root)).vault
    offload.configure(vault, s3_bucket.url("later"))
    m = next(m for m in vault.manifests() if m.get("kind") == "reduce")
    got = offload.offload_operation(vault, m["op_id"])
    assert got and set(got.values()) == {offload.OFFLOADED}, got
    assert all(remote_vault.read_record(vault.root, f["sha256"]) for f in m["files"])
    assert not packs(root)  # the pack copies forgotten once the records were durable
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)


def test_history_counts_a_packed_backup_as_what_it_keeps_on_the_disk(tmp_path):
    """freed now / freed after purge of a reduction whose backups are packed: the pack's share
    is kept on the logdir's disk (not freed yet) and is what a purge would free."""
    root = make_logdir(tmp_path / "logs", files=40)
    reduce(root)
    e = next(e for e in api.history(str(root)) if e.get("kind") == "reduce")
    bs = remote_vault.pack_store(state_dir(str(root)), fresh=True)
    stored = sum(r.length for r in bs.refs())
    assert stored > 0
    assert e["freed_after_purge_bytes"] == stored, e
    assert e["freed_now_bytes"] == e["removed_from_logdir_bytes"] - stored, e


def test_a_plain_blob_growing_beside_a_packed_backup_is_never_taken_for_its_runs_late_records(tmp_path):
    """A packed backup was packed once nothing wrote it: a plain blob that later stands and grows
    under its digest (another run's live file backed up again) is not this run's late writer's,
    as beside a .zst (salvage.grown_backups leaves it)."""
    from tb_footprint_plugin.engine import salvage

    root = make_logdir(tmp_path / "logs", files=5)
    reduce(root)
    vault = Vault(state_dir(str(root)))
    m = next(m for m in vault.manifests() if m.get("kind") == "reduce")
    f = m["files"][0]
    assert vault.blob_form(f["sha256"]) == "packed"
    with vault.open_blob(f["sha256"]) as src:
        grown = src.read() + b"records someone appended"
    # its shard folder, emptied by the packing, went with it (``Vault.prune_shards``): made again
    Path(vault.blob_path(f["sha256"])).parent.mkdir(mode=0o700, exist_ok=True)
    Path(vault.blob_path(f["sha256"])).write_bytes(grown)
    assert not [x for x in salvage.grown_backups(vault.manifests()) if x[1]["sha256"] == f["sha256"]]


def test_packed_backups_no_manifest_names_are_reported_and_never_purged(tmp_path):
    """The manifests lost: status reports the packed backups as orphan blobs (with their bytes),
    and a purge forgets none of them."""
    import shutil

    root = make_logdir(tmp_path / "logs")
    reduce(root)
    vault = Path(state_dir(str(root)))
    held = set(packs(root))
    shutil.rmtree(vault / "ops")
    shutil.rmtree(vault / "oplog")
    st = api.status(str(root))
    (x,) = [x for x in st["problems"] if x["code"] == Finding.ORPHAN_BLOBS]
    assert x["bytes"] > 0 and "30 backup blob(s)" in x["detail"], x
    api.purge(str(root), older_than=0, yes=True)
    assert set(packs(root)) == held
    assert len(list(remote_vault.pack_store(str(vault), fresh=True).refs())) == 30


def test_a_damaged_pack_holding_the_same_bytes_is_never_taken_for_a_new_backup(tmp_path):
    """Run a's pack is damaged; run b backs up the same bytes later: b's compaction reads the
    stored copy back before it would claim it, refuses it, and packs b's own copy anew before
    any of b's plain blobs goes; b restores exactly."""
    root = make_logdir(tmp_path / "logs", runs=("a",), files=10, shared=10)
    rep = api.reduce_logdir(str(root), policy=DROP, dry_run=False, quiet_period=0, run_glob="a",
                            verify_backends=("python",))
    assert {o.status.value for o in rep.outcomes} == {"verified"}
    (pack,) = [Path(state_dir(str(root))) / k for k in packs(root)]
    data = bytearray(pack.read_bytes())
    for i in range(len(data) // 3, len(data) - 10, 97):
        data[i] ^= 0xFF
    pack.write_bytes(bytes(data))
    make_logdir(tmp_path / "logs", runs=("b",), files=10, shared=10)
    before_b = {k: v for k, v in snapshot(root).items() if k.startswith("b")}
    rep = api.reduce_logdir(str(root), policy=DROP, dry_run=False, quiet_period=0, run_glob="b",
                            verify_backends=("python",))
    assert {o.status.value for o in rep.outcomes} == {"verified"}
    assert len(packs(root)) == 2 and not [k for k in vault_files(root) if k.startswith("blobs/")]
    outs = api.restore(str(root), run="b")
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert {k: v for k, v in snapshot(root).items() if k.startswith("b")} == before_b


def _index_files(root: Path) -> dict:
    d = Path(state_dir(str(root))) / "packs" / "index"
    return {p.name: p.stat().st_ino for p in d.iterdir()}


def test_a_restore_of_one_run_rewrites_only_the_pack_index_listing_its_backups(tmp_path, monkeypatch):
    """Four runs, each run's backups in a pack and an index object of its own: restoring run b
    releases its backups by deleting b's pack and the one index object listing it; the three
    others (and their packs) stay the same files (issue #27 item 2: a release costs what it
    touches, not the whole vault)."""
    from tb_footprint_plugin.storage import blobstore

    monkeypatch.setattr(blobstore, "INDEX_ROWS", 40)  # 30 rows a run: full, so no batch's end merges them
    root = make_logdir(tmp_path / "logs", runs=("a", "b", "c", "d"), files=30)
    before = snapshot(root)
    reduce_each(root, ("a", "b", "c", "d"))
    index = _index_files(root)
    held = set(packs(root))
    assert len(index) == 4 and len(held) == 4
    vault = Vault(state_dir(str(root)))
    b_shas = {f["sha256"] for m in api.operations(str(root)) if m["run"] == "b" for f in m["files"]}
    b_pack = {remote_vault.packed_ref(vault.root, s).key for s in b_shas}
    outs = api.restore(str(root), run="b")
    assert [o.status.value for o in outs] == ["restored"], [o.to_dict() for o in outs]
    after = _index_files(root)
    assert len(after) == 3 and all(index[k] == ino for k, ino in after.items())  # the same files
    assert set(packs(root)) == held - {"packs/" + k for k in b_pack}
    outs = api.restore(str(root))
    assert {o.status.value for o in outs} == {"restored"}, [o.to_dict() for o in outs]
    assert_exact(root, before)


@pytest.mark.parametrize("step", ["merge.pack_index_written", "merge.pack_old_index_deleted", "merge.pack_swept"])
def test_sigkill_while_a_batchs_end_merges_the_pack_index_loses_nothing(tmp_path, step):
    """SIGKILL of the CLI's reduce of runs c and d at each step of its batch's end merging its
    index object with the two earlier reduces of a and b left: the union of the index objects
    lists every packed backup, the next batch's end merges what is left, and every original
    comes back byte for byte."""
    root = make_logdir(tmp_path / "logs", runs=("a", "b", "c", "d"), files=20)
    before = snapshot(root)
    reduce_each(root, ("a", "b"))
    assert len(_index_files(root)) == 2  # two small index objects are left for a later merge
    r = _cli(["reduce", str(root), "--quiet-period", "0", "--verify", "python", "--yes",
              "--delete", "profile_xplane"], step)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    api.recover_logdir(str(root))
    assert not api.status(str(root))["unfinished_operations"]
    v = state_dir(str(root))
    bs = remote_vault.pack_store(v, fresh=True)
    shas = {f["sha256"] for m in api.operations(str(root)) for f in m["files"]}
    assert len(shas) == 80 and all(bs.check(s) is None for s in shas) and not Vault(v).pack_problems()
    left = len(_index_files(root))
    # killed after the merged object was durable: the three it replaces are still there beside it
    assert left == (4 if step == "merge.pack_index_written" else 1), left
    assert Vault(v).merge_pack_index() is (left == 4)  # the next batch's end merges them
    assert len(_index_files(root)) == 1
    outs = api.restore(str(root))
    assert {o.status.value for o in outs} == {"restored"}, [o.to_dict() for o in outs]
    assert_exact(root, before)
