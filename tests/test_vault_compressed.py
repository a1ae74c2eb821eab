"""Issue #27 item 1: the compressed vault, the default, frees the disk at once and keeps every
original.

After a run's reduction commits, its hard-link backups (the originals' own inodes, which the
transaction verified against) are compacted into ``<sha>.zst`` blobs: written as a temp, fsynced,
decompressed and hashed, renamed, and only then the plain blob unlinked. These tests reduce real
fixtures of every file kind with the default vault and restore them byte for byte with mtime_ns
and mode; a file that does not compress stays plain; a failure or a SIGKILL at each compaction
step leaves every original in the vault and the next start finishes the job; a damaged ``.zst``
is found by ``verify``, ``status`` (its header) and refused by restore naming the file; purge
removes compressed blobs; a hard-link vault (``vault_format="hardlink"``, as every vault was
before) still restores; and ``du`` of the logdir agrees with what ``status`` says.
"""
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_real, tree_hashes
from test_restore_exact import assert_exact, dress, snapshot
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine import vault as vault_mod
from tb_footprint_plugin.engine.vault import COMPRESSED, KEPT_INCOMPRESSIBLE, KEPT_SHARED, Vault, compact_operation
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.synth import EventWriter, make_png

PY = ("python",)
#: every kind of file a reduce takes out of a logdir, with the policy that takes it
KINDS = {
    "torch_traces_gzipped": ("torch/profiled", "lossless"),     # PyTorch JSON traces, replaced by .gz
    "keras_xplane_sessions": ("tf/keras_profiled", "archive"),  # xplane sessions deleted, folders too
    "jax_sessions": ("jax/profiled", "archive"),
    "summary_mix_events": ("tf/summary_mix", "archive"),        # histogram/image event files rewritten
}
COMPACT_STEPS = ["compact_written", "compact_verified", "compact_renamed"]


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


@pytest.fixture(autouse=True)
def _one_zst_a_blob(monkeypatch):
    """This file pins the ``.zst`` form (a blob each); small blobs go into packs by default since
    issue #27 item 2, tested in test_vault_packs.py: here no blob is packed (in-process calls)."""
    monkeypatch.setattr(vault_mod, "PACK_BELOW", 0)


def blobs(logdir: Path) -> dict:
    """name -> (size, nlink) of every file in the default vault's blob folders."""
    root = Path(state_dir(str(logdir))) / "blobs"
    return {p.name: (p.stat().st_size, p.stat().st_nlink) for p in root.rglob("*") if p.is_file()}


def user_files(root: Path) -> dict:
    return {k: v for k, v in tree_hashes(root).items() if not k.startswith(".tb-footprint")}


def du(*paths) -> int:
    out = subprocess.run(["du", "-sc", "--block-size=1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def reduce(logdir: Path, policy: str, **kw):
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, quiet_period=0, verify_backends=PY, **kw)
    acted = [o for o in rep.outcomes if o.status == "verified"]
    assert acted and rep.ok, [o.to_dict() for o in rep.outcomes]
    return rep


def restore_all(logdir: Path):
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]


def manifest_files(logdir: Path):
    return [(m, f) for m in api.operations(str(logdir)) if m.get("kind") == "reduce" for f in m.get("files", [])]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_round_trips_through_the_compressed_vault(tmp_path, kind):
    fixture, policy = KINDS[kind]
    logdir = copy_real(fixture, tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    reduce(logdir, policy)
    held = blobs(logdir)
    zst = [n for n in held if n.endswith(".zst")]
    plain = [n for n in held if not n.endswith(".zst")]
    assert zst, held
    # nothing is left behind by the compaction: no temp, no plain blob beside its .zst
    assert not [n for n in held if n.endswith(".tmp")]
    assert not [n for n in plain if n + ".zst" in held]
    # each backup is in the vault once, hashing to its name (decompressed)
    vault = Vault(str(Path(state_dir(str(logdir)))))
    for _m, f in manifest_files(logdir):
        assert vault.check_blob(f["sha256"]), f["path"]
    # a compressed blob is smaller than its original, which is gone from the logdir
    sizes = {f["sha256"]: f["size"] for _m, f in manifest_files(logdir)}
    assert all(held[n][0] < sizes[n[:-4]] for n in zst)
    restore_all(logdir)
    assert_exact(logdir, before)


def test_a_file_that_does_not_compress_stays_plain(tmp_path):
    """A profile file of incompressible bytes (as an already-gzipped trace or a PNG-heavy file
    is): its backup stays the plain file it was (the original's own inode, no extra space), the
    rest is compressed, and everything restores exactly."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    xplane = next(logdir.rglob("*.xplane.pb"))
    xplane.write_bytes(os.urandom(1 << 20))
    dress(logdir)
    before = snapshot(logdir)
    sha = hashlib.sha256(xplane.read_bytes()).hexdigest()
    reduce(logdir, "archive")
    held = blobs(logdir)
    assert held[sha] == (1 << 20, 1), held  # plain, a file of its own: the original name is gone
    assert sha + ".zst" not in held, held
    restore_all(logdir)
    assert_exact(logdir, before)


def test_compact_keeps_a_shared_or_incompressible_blob_plain(tmp_path):
    """``Vault.compact``'s own decisions: a blob a live file still shares stays a link (compressing
    it would free nothing); one that compresses by less than MIN_SAVING stays plain."""
    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    src = tmp_path / "noise"
    src.write_bytes(os.urandom(1 << 20))
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    v.store(str(src), sha)
    assert v.compact(sha) == KEPT_SHARED
    os.unlink(src)
    assert v.compact(sha) == KEPT_INCOMPRESSIBLE
    assert v.blob_form(sha) == "plain" and not os.path.exists(v.zst_path(sha) + ".tmp")
    src.write_bytes(b"compressible " * 100_000)
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    v.store(str(src), sha)
    os.unlink(src)
    assert v.compact(sha) == COMPRESSED
    assert v.blob_form(sha) == "zst" and not os.path.exists(v.blob_path(sha))
    assert v.check_blob(sha) and v.blob_size_on_disk(sha) < 20_000


def test_hardlink_format_keeps_links_and_an_old_vault_still_restores(tmp_path):
    """``vault_format="hardlink"`` leaves the backups as they were before the compressed vault
    (no .zst): such a vault restores exactly with this code."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    reduce(logdir, "archive", vault_format="hardlink")
    held = blobs(logdir)
    assert held and not [n for n in held if n.endswith(".zst")], held
    restore_all(logdir)
    assert_exact(logdir, before)


def test_disk_in_use_agrees_with_du_and_the_disk_is_freed_now(tmp_path):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    du_before = du(logdir)
    rep = reduce(logdir, "lossless")
    now = du(logdir)  # the vault is inside the logdir: du of it is logdir + vault, links once
    assert abs(rep.disk_in_use_after_bytes - now) <= 0.01 * now, (rep.disk_in_use_after_bytes, now)
    st = api.status(str(logdir))
    assert abs(st["disk_in_use_bytes"] - now) <= 0.01 * now, (st["disk_in_use_bytes"], now)
    # freed now: the removed originals' bytes less their compressed backups, on disk at once
    assert rep.freed_now_bytes == rep.disk_in_use_before_bytes - rep.disk_in_use_after_bytes
    assert rep.freed_now_bytes > 0.5 * du_before, (rep.freed_now_bytes, du_before)
    # after purge: the compressed blobs' own bytes
    zst_bytes = sum(s for n, (s, _l) in blobs(logdir).items() if n.endswith(".zst"))
    assert abs(st["freed_after_purge_bytes"] - zst_bytes) <= 4096 * len(blobs(logdir)), (st, zst_bytes)
    nums = api.disk_numbers(str(logdir))
    assert nums["freed_now_bytes"] > 0.5 * du_before, nums


def test_purge_removes_compressed_blobs(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    reduce(logdir, "archive")
    held = blobs(logdir)
    assert any(n.endswith(".zst") for n in held)
    pr = api.purge(str(logdir), yes=True)
    assert pr.freed_bytes == sum(s for s, _l in held.values()), (pr.freed_bytes, held)
    assert blobs(logdir) == {}


@pytest.mark.parametrize("step", COMPACT_STEPS)
def test_failure_at_each_compaction_step_keeps_the_originals_and_the_next_start_finishes(tmp_path, step):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    hits = []
    faults.arm(step, lambda: (hits.append(step), faults.arm(step, "raise"), faults.hit(step)))
    reduce(logdir, "lossless")  # the reduction stands: compaction comes after the commit
    assert hits, f"failpoint {step} was never reached"
    faults.disarm_all()
    vault = Vault(state_dir(str(logdir)))
    for _m, f in manifest_files(logdir):
        assert vault.check_blob(f["sha256"]), f["path"]  # every original is whole in the vault
    assert vault.pending_compactions(), "the compaction's note is what the next start finishes"
    recovered = api.recover_logdir(str(logdir))
    assert any(r.code == Finding.COMPACTION_FINISHED for r in recovered), [r.to_dict() for r in recovered]
    held = blobs(logdir)
    assert not vault.pending_compactions()
    assert not [n for n in held if n.endswith(".tmp")] and not [n for n in held if n + ".zst" in held], held
    assert all(vault.blob_form(f["sha256"]) == "zst" for _m, f in manifest_files(logdir)), held
    restore_all(logdir)
    assert_exact(logdir, before)


_KILL_SCRIPT = """
import sys
from tb_footprint_plugin import api
api.reduce_logdir(sys.argv[1], policy="lossless", dry_run=False, quiet_period=0, verify_backends=("python",))
"""


@pytest.mark.parametrize("step", COMPACT_STEPS + ["compact_before_unlink"])
def test_sigkill_at_each_compaction_step_then_the_next_start_settles_it(tmp_path, step):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    first = "compact_renamed" if step == "compact_before_unlink" else step
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(logdir)], timeout=300,
                       env=dict(env, TB_FOOTPRINT_FAILPOINTS=f"{first}=kill"))
    assert p.returncode == -9, "the failpoint should have killed the process"
    vault = Vault(state_dir(str(logdir)))
    for _m, f in manifest_files(logdir):
        assert vault.check_blob(f["sha256"]), f["path"]
    if step == "compact_before_unlink":
        # the next start is killed too, at the one step only a resumed compaction reaches
        code = "import sys; from tb_footprint_plugin import api; api.recover_logdir(sys.argv[1])"
        p = subprocess.run([sys.executable, "-c", code, str(logdir)], timeout=300,
                           env=dict(env, TB_FOOTPRINT_FAILPOINTS="compact_before_unlink=kill"))
        assert p.returncode == -9, "the resumed compaction should have reached compact_before_unlink"
        for _m, f in manifest_files(logdir):
            assert vault.check_blob(f["sha256"]), f["path"]
    api.recover_logdir(str(logdir))
    held = blobs(logdir)
    assert not vault.pending_compactions()
    assert not [n for n in held if n.endswith(".tmp")] and not [n for n in held if n + ".zst" in held], held
    assert all(vault.blob_form(f["sha256"]) == "zst" for _m, f in manifest_files(logdir)), held
    journal = Path(state_dir(str(logdir))) / "journal"
    assert not (journal.is_dir() and os.listdir(journal))
    restore_all(logdir)
    assert_exact(logdir, before)


def test_a_corrupted_compressed_blob_is_found_and_never_restored(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    reduce(logdir, "archive")
    after = user_files(logdir)
    vault = Vault(state_dir(str(logdir)))
    (m, f), = [(m, f) for m, f in manifest_files(logdir) if f["path"].endswith(".xplane.pb")][:1]
    z = Path(vault.zst_path(f["sha256"]))
    assert z.exists()
    data = bytearray(z.read_bytes())
    data[len(data) // 2] ^= 0x40  # one flipped bit in the compressed body
    os.chmod(z, 0o600)
    z.write_bytes(bytes(data))
    assert not vault.check_blob(f["sha256"])
    res = api.verify(str(logdir), verify_backends=PY)
    assert res and not res[0]["ok"] and f["path"] in res[0]["damaged_backups"], res
    outs = api.restore(str(logdir))
    assert outs[0].status == "failed" and f["path"] in outs[0].reason, outs[0].to_dict()
    assert user_files(logdir) == after  # nothing written, not even a temp
    # a damaged header (the cheap check status runs) is named by status as a damaged backup
    data[5] ^= 0xFF
    z.write_bytes(bytes(data))
    problems = api.status(str(logdir))["problems"]
    assert any(p.get("code") == Finding.BACKUP_DAMAGED and f["path"] in p.get("detail", "") for p in problems), \
        problems
    # and restore_blob itself never lets a bad decode take the file's name
    dest = tmp_path / "out" / "x"
    with pytest.raises(OSError) as e:
        vault.restore_blob(f["sha256"], str(dest))
    assert str(dest) in str(e.value)
    assert not dest.exists() and not list((tmp_path / "out").iterdir())


def test_a_compressed_backup_is_read_by_the_recheck_and_samples(tmp_path):
    """Readers that need a path (TensorBoard's, for ``verify`` and the check page's samples) get
    the compressed original decompressed into the vault's scratch space."""
    logdir = tmp_path / "logdir"
    with EventWriter(str(logdir / "run")) as w:
        for s in range(3000):  # scalars enough that the file compresses (PNGs alone would not)
            w.scalar("loss", s, 1.0 / (s + 1))
            if s < 30:
                w.image("img", s, make_png(32, 32, seed=s), 32, 32)
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (1_500_000_000, 1_500_000_000))
    rep = reduce(logdir, "archive")
    vault = Vault(state_dir(str(logdir)))
    assert all(vault.blob_form(f["sha256"]) == "zst" for _m, f in manifest_files(logdir))
    res = api.verify(str(logdir), verify_backends=PY)
    assert res and res[0]["ok"], res
    data, ctype = api.sample(str(logdir), rep.outcomes[0].op_id, "before", "images", "img", 1)
    assert ctype == "image/png" and data == make_png(32, 32, seed=1)
    tmp = Path(state_dir(str(logdir))) / "tmp"
    assert not [p for p in tmp.rglob("*") if p.is_file()], "scratch copies are removed after use"


def test_compact_operation_never_fails_the_reduction(tmp_path):
    """A compaction that cannot run (an op id with no manifest) reports nothing and raises nothing."""
    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    assert compact_operation(v, "20260101T000000-abcdef") == {}


def test_a_blob_another_transaction_backs_up_stays_plain_until_its_turn(tmp_path):
    """With ``--jobs``, two runs may back up the same bytes (one blob): the run that commits
    first leaves it plain while the other's transaction reads it as its original; that run's own
    compaction compresses it after its commit. Both restore exactly."""
    src = copy_real("tf/keras_profiled", tmp_path / "src")
    logdir = tmp_path / "logdir"
    for run in ("a", "b"):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
    dress(logdir)
    before = snapshot(logdir)
    rep = reduce(logdir, "archive", jobs=2)
    assert sorted(o.status for o in rep.outcomes) == ["verified", "verified"]
    vault = Vault(state_dir(str(logdir)))
    ops = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    shared = {f["sha256"] for f in ops[0]["files"]} & {f["sha256"] for f in ops[1]["files"]}
    assert shared
    assert all(vault.check_blob(s) for s in shared)
    restore_all(logdir)
    assert_exact(logdir, before)


def test_compact_operation_leaves_digests_in_use_plain(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    rep = reduce(logdir, "archive", vault_format="hardlink")
    op = rep.outcomes[0].op_id
    vault = Vault(state_dir(str(logdir)))
    shas = [f["sha256"] for f in vault.read_manifest(op)["files"]]
    big = max(shas, key=lambda s: os.path.getsize(vault.blob_path(s)))
    done = compact_operation(vault, op, in_use={big})
    assert big not in done and vault.blob_form(big) == "plain"
    assert compact_operation(vault, op)[big] == COMPRESSED and vault.blob_form(big) == "zst"


def test_the_plan_says_what_the_compressed_vault_frees_now(tmp_path):
    """The dry run of the default vault counts the backups at their (sampled) compressed size:
    freed now and after purge come close to what the reduce then reports, and its note says
    the backups are compressed; the hard-link vault's dry run says nothing is freed now, and what
    the reduce writes (the traces' .gz) costs its size until purge (R14 F2: measured so)."""
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    hard = api.reduce_logdir(str(logdir), policy="lossless", dry_run=True, vault_format="hardlink")
    written = sum(a.bytes_after for rp in hard.plan.runs for a in rp.actions if a.kind in ("compress", "rewrite"))
    assert written > 0 and hard.freed_now_bytes == -written
    dry = api.reduce_logdir(str(logdir), policy="lossless", dry_run=True)
    assert any("compressed in the vault" in n for n in dry.plan.notes), dry.plan.notes
    rep = reduce(logdir, "lossless")
    assert abs(dry.freed_now_bytes - rep.freed_now_bytes) <= 0.1 * rep.freed_now_bytes, (dry, rep)
    assert dry.freed_on_disk_after_purge_bytes > 0
    assert abs(dry.freed_on_disk_after_purge_bytes - rep.freed_on_disk_after_purge_bytes) <= \
        0.25 * rep.freed_on_disk_after_purge_bytes + 65536, (dry.freed_on_disk_after_purge_bytes,
                                                             rep.freed_on_disk_after_purge_bytes)


def test_a_compaction_left_to_the_next_start_waits_for_its_run(tmp_path):
    """A compaction noted for the next start (its run was busy) runs under the run's lock: while
    another process holds the run it waits (said, with a code), then it is done."""
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.engine.journal import RunLock
    from tb_footprint_plugin.engine.vault import note_compaction

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    rep = reduce(logdir, "archive", vault_format="hardlink")
    o = next(o for o in rep.outcomes if o.status == "verified")
    vault = Vault(state_dir(str(logdir)))
    note_compaction(vault, o.op_id)
    shas = [f["sha256"] for f in vault.read_manifest(o.op_id)["files"]]
    ctx = Context(str(logdir))
    with RunLock(ctx.lock_dir, o.run):
        recovered = api.recover_logdir(str(logdir))
        assert any(r.code == Finding.RUN_LOCKED and r.op_id == o.op_id for r in recovered), \
            [r.to_dict() for r in recovered]
        assert all(vault.blob_form(s) == "plain" for s in shas)
    recovered = api.recover_logdir(str(logdir))
    assert any(r.code == Finding.COMPACTION_FINISHED for r in recovered), [r.to_dict() for r in recovered]
    assert any(vault.blob_form(s) == "zst" for s in shas) and all(vault.check_blob(s) for s in shas)
    assert not vault.pending_compactions()


def test_a_compressed_blob_no_manifest_names_is_reported_not_deleted(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    reduce(logdir, "archive")
    vault = Vault(state_dir(str(logdir)))
    stray = "ab" * 32
    z = Path(vault.zst_path(stray))
    z.parent.mkdir(mode=0o700, exist_ok=True)
    z.write_bytes(b"\x28\xb5\x2f\xfd" + b"x" * 100)
    problems = api.status(str(logdir))["problems"]
    assert any(p.get("code") == Finding.ORPHAN_BLOBS for p in problems), problems
    api.purge(str(logdir), yes=True)
    assert z.exists()


def test_a_blob_a_writer_holds_open_stays_plain(tmp_path):
    """A late writer still appending to the original's inode (the backup after the swap) keeps
    it a plain file: its next records go there and are salvaged later; compacting it would
    leave them in an unlinked inode. Once the writer is gone the blob is compressed."""
    import time

    from tb_footprint_plugin.engine.vault import KEPT_OPEN
    from tb_footprint_plugin.storage.openfiles import find_writers

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    src = tmp_path / "events"
    src.write_bytes(b"compressible " * 100_000)
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    v.store(str(src), sha)
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'ab'); "
                               "print('open', flush=True); time.sleep(60)", str(src)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline().strip() == b"open"
        os.unlink(src)  # the swap: only the vault's name is left for the writer's inode
        deadline = time.monotonic() + 10
        while not find_writers([v.blob_path(sha)]).holders and time.monotonic() < deadline:
            time.sleep(0.05)
        assert v.compact(sha) == KEPT_OPEN
        assert v.blob_form(sha) == "plain"
    finally:
        writer.kill()
        writer.wait()
    assert v.compact(sha) == COMPRESSED and v.check_blob(sha)


def _stored(v: Vault, path: Path, data: bytes) -> str:
    """``data`` written at ``path`` and backed up (a hard link); the original name then removed,
    as the swap does. Returns its digest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    v.store(str(path), sha)
    os.unlink(path)
    return sha


def test_a_writer_proc_cannot_see_keeps_the_blob_plain_and_its_records_are_salvaged(tmp_path, monkeypatch):
    """Review item 1: a writer /proc cannot attribute (another container, an NFS client) holds the
    backup's inode. Only the kernel's answer (no descriptor anywhere writes it) lets compaction
    unlink the plain blob: here it stays plain, the note stays for the next start, and the
    writer's next records land in the blob where the salvage finds them."""
    import tb_footprint_plugin.engine.vault as vm
    from tb_footprint_plugin.engine.salvage import grown_backups
    from tb_footprint_plugin.engine.vault import KEPT_OPEN
    from tb_footprint_plugin.storage.openfiles import WriterScan, no_writer_anywhere

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    data = b"scalar record " * 100_000
    ev = tmp_path / "logs" / "events.out.tfevents.1.host"
    ev.parent.mkdir()
    ev.write_bytes(data)
    writer = open(ev, "ab")  # the training job's descriptor, opened before the reduce
    try:
        sha = hashlib.sha256(data).hexdigest()
        v.store(str(ev), sha)
        os.unlink(ev)  # the swap
        monkeypatch.setattr(vm, "find_writers", lambda paths: WriterScan(supported=True))  # /proc sees nobody
        assert no_writer_anywhere(v.blob_path(sha)) is False
        assert v.compact_all("20260101T000000-abcdef", [sha]) == {sha: KEPT_OPEN}
        assert v.blob_form(sha) == "plain" and not os.path.exists(v.zst_path(sha))
        assert v.pending_compactions() == {"20260101T000000-abcdef": [sha]}  # tried again at the next start
        writer.write(b"LATE step 1001")
        writer.flush()
    finally:
        writer.close()
    m = {"kind": "reduce", "outcome": "verified", "vault": v.root, "files": [{"sha256": sha, "size": len(data),
                                                                              "path": "events.out.tfevents.1.host"}]}
    assert [(f["sha256"], size) for _m, f, size in grown_backups([m])] == [(sha, len(data) + 14)]


def test_two_compactions_of_one_blob_never_leave_a_partial_zst_or_lose_the_plain(tmp_path):
    """Review item 2: a second compaction of the same blob (another process: two runs with the
    same bytes, the tab and the CLI) starting while the first is between its verification and
    its rename is refused by the blob's lock (the blob is busy, kept plain by it), never
    deletes or overwrites the first one's temp; the first finishes with a .zst that verifies."""
    from tb_footprint_plugin.engine.vault import KEPT_BUSY

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    sha = _stored(v, tmp_path / "logs" / "f.bin", os.urandom(1000) * 2000)
    seen = []

    def second_compaction():
        script = ("import sys; from tb_footprint_plugin.engine.vault import Vault; "
                  "print(Vault(sys.argv[1]).compact(sys.argv[2]))")
        out = subprocess.run([sys.executable, "-c", script, v.root, sha], capture_output=True, text=True, check=True,
                             cwd=REPO)
        seen.append(out.stdout.strip())

    faults.arm("compact_verified", second_compaction)
    assert v.compact(sha) == COMPRESSED
    assert seen == [KEPT_BUSY]
    assert v.blob_form(sha) == "zst" and not os.path.exists(v.blob_path(sha)) and v.check_blob(sha)
    assert sorted(os.listdir(os.path.dirname(v.blob_path(sha)))) == [sha + ".zst"]  # no temp left
    assert not os.path.exists(os.path.join(v.root, "compact", sha + ".lock"))


def test_a_leftover_temp_of_a_killed_compaction_is_swept_under_the_lock(tmp_path):
    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    sha = _stored(v, tmp_path / "logs" / "f.bin", b"compressible " * 100_000)
    for name in (v.blob_path(sha) + ".zst.tmp", v.blob_path(sha) + ".zst.tmp-1-deadbeef"):
        Path(name).write_bytes(b"\x28\xb5\x2f\xfd partial")
    assert v.compact(sha) == COMPRESSED and v.check_blob(sha)
    assert sorted(os.listdir(os.path.dirname(v.blob_path(sha)))) == [sha + ".zst"]


def test_a_plain_blob_that_no_longer_hashes_never_costs_the_good_zst(tmp_path):
    """Review item 3 (f1): a compaction killed after its rename leaves the plain blob and its
    verified .zst; the plain then changes (grown or truncated). Readers fall back to the .zst,
    compaction deletes neither (the plain is not the backup, the .zst is), restore is exact."""
    from tb_footprint_plugin.engine.vault import KEPT_DAMAGED

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    data = b"hello world record " * 50_000
    sha = _stored(v, tmp_path / "logs" / "f.bin", data)
    plain = Path(v.blob_path(sha))
    keep = tmp_path / "plain-copy"
    shutil.copy2(plain, keep)
    assert v.compact(sha) == COMPRESSED
    for changed in (data + b"late records", data[:1000]):
        shutil.copy2(keep, plain)  # the state after a kill between the rename and the unlink
        plain.write_bytes(changed)
        assert v.check_blob(sha)
        with v.open_blob(sha) as f:
            assert hashlib.sha256(f.read()).hexdigest() == sha
        assert Path(v.materialise(sha, str(tmp_path))).read_bytes() == data
        assert v.compact(sha) == KEPT_DAMAGED
        assert plain.read_bytes() == changed and v.blob_form(sha) == "plain" and v.check_blob(sha)
        dest = tmp_path / "back" / "f.bin"
        v.restore_blob(sha, str(dest), mode=0o640, mtime_ns=1_700_000_000_123_456_789)
        assert dest.read_bytes() == data and dest.stat().st_mtime_ns == 1_700_000_000_123_456_789
        assert (dest.stat().st_mode & 0o777) == 0o640
        plain.unlink()
    assert v.compact(sha) == COMPRESSED and v.check_blob(sha)


def test_a_live_file_stored_beside_a_zst_never_stands_for_that_backup(tmp_path):
    """Review item 3 (f5): run A's backup S is compacted; run B holds the same bytes and is backed
    up, then changed by its writer before its swap and rolled back (``unshare``). B's store
    copies (never links its live file under S's name), so A's backup still verifies, compaction
    keeps S.zst, and the salvage attributes nothing of B's to A."""
    from tb_footprint_plugin.engine.salvage import grown_backups

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    data = b"same trace bytes " * 100_000
    sha = _stored(v, tmp_path / "logs" / "A" / "t.json", data)
    assert v.compact(sha) == COMPRESSED
    b = tmp_path / "logs" / "B" / "t.json"
    b.parent.mkdir()
    b.write_bytes(data)
    v.store(str(b), sha)
    assert os.lstat(v.blob_path(sha)).st_nlink == 1 and not os.path.samefile(v.blob_path(sha), b)
    with open(b, "ab") as f:
        f.write(b"appended by a writer")  # B changes before its swap -> rolled back
    v.unshare(sha)
    assert v.check_blob(sha)
    assert v.compact(sha) == COMPRESSED and v.check_blob(sha)
    m = {"kind": "reduce", "outcome": "verified", "vault": v.root, "files": [{"sha256": sha, "size": len(data),
                                                                              "path": "t.json"}]}
    assert grown_backups([m]) == []


def test_unshare_never_puts_other_bytes_under_a_blobs_name(tmp_path):
    """A link of a live file that changed since it was stored (a vault from before the fix, or
    another filesystem's rules) is never replaced by a copy of the changed bytes: the name keeps
    the link, readers fall back to the .zst, the salvage skips a blob a live file shares."""
    from tb_footprint_plugin.engine.salvage import grown_backups

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    data = b"same trace bytes " * 100_000
    sha = _stored(v, tmp_path / "logs" / "A" / "t.json", data)
    assert v.compact(sha) == COMPRESSED
    b = tmp_path / "logs" / "B" / "t.json"
    b.parent.mkdir()
    b.write_bytes(data)
    os.link(b, v.blob_path(sha))  # what store() did before: B's live file under S's name
    with open(b, "ab") as f:
        f.write(b"appended by a writer")
    v.unshare(sha)
    assert os.path.samefile(v.blob_path(sha), b) and v.check_blob(sha)
    m = {"kind": "reduce", "outcome": "verified", "vault": v.root, "files": [{"sha256": sha, "size": len(data),
                                                                              "path": "t.json"}]}
    assert grown_backups([m]) == []
    assert v.compact(sha) == KEPT_SHARED and v.check_blob(sha) and os.path.exists(v.zst_path(sha))


def test_a_blob_deleted_during_its_compaction_leaves_no_orphan_zst(tmp_path):
    """A purge or rollback deleting a blob while a compaction of it is under way waits for the
    blob's lock: the compaction ends (its .zst verified and renamed), then every form goes: no
    .zst is left that no manifest names, and the compaction never fails midway."""
    import threading
    import time

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    sha = _stored(v, tmp_path / "logs" / "f.bin", b"compressible " * 100_000)
    freed = []
    t = threading.Thread(target=lambda: freed.append(v.delete_blob(sha)))

    def purge_meanwhile():
        t.start()
        time.sleep(0.5)
        assert t.is_alive()  # waiting for the compaction, not deleting under it

    faults.arm("compact_verified", purge_meanwhile)
    assert v.compact(sha) == COMPRESSED
    t.join(10)
    assert not t.is_alive() and freed and freed[0] > 0
    assert v.blob_form(sha) is None and os.listdir(os.path.dirname(v.blob_path(sha))) == []


def test_the_next_start_never_compacts_without_its_runs_lock(tmp_path):
    """A compaction note whose operation has no manifest (so no run to lock) is left for a later
    start; its blobs stay plain meanwhile (a purge of that run could otherwise race it)."""
    from tb_footprint_plugin.engine.vault import note_compaction

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    rep = reduce(logdir, "archive", vault_format="hardlink")
    o = next(o for o in rep.outcomes if o.status == "verified")
    vault = Vault(state_dir(str(logdir)))
    note_compaction(vault, o.op_id)
    shas = [f["sha256"] for f in vault.read_manifest(o.op_id)["files"]]
    stray = "20260101T000000-abcdef"
    vault.note_compaction(stray, shas)
    from tb_footprint_plugin.engine import oplog
    os.rename(oplog.segments_dir(vault.root), tmp_path / "aside")  # the manifests' only record
    os.rename(oplog.twins_dir(vault.root), tmp_path / "aside-twins")  # ... and its pieces' second copies
    from tb_footprint_plugin.engine import upkeep
    from tb_footprint_plugin.engine.context import Context
    upkeep._finish_compactions(Context(str(logdir)), vault)
    assert all(vault.blob_form(s) == "plain" for s in shas)
    assert set(vault.pending_compactions()) == {o.op_id, stray}
    os.rename(tmp_path / "aside", oplog.segments_dir(vault.root))
    os.rename(tmp_path / "aside-twins", oplog.twins_dir(vault.root))
    upkeep._finish_compactions(Context(str(logdir)), vault)
    assert any(vault.blob_form(s) == "zst" for s in shas) and all(vault.check_blob(s) for s in shas)
    assert set(vault.pending_compactions()) == {stray}


def test_the_next_start_says_a_compaction_waits_for_a_writer(tmp_path, monkeypatch):
    """A noted compaction whose backup a process may still write is not reported as finished:
    the start says it waits (code ``backup_open_for_writing``), the blob stays plain, the note stays."""
    from tb_footprint_plugin.codes import Recovery
    from tb_footprint_plugin.engine import upkeep
    from tb_footprint_plugin.engine.context import Context
    import tb_footprint_plugin.engine.vault as vm

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    rep = reduce(logdir, "archive", vault_format="hardlink")
    o = next(o for o in rep.outcomes if o.status == "verified")
    vault = Vault(state_dir(str(logdir)))
    vm.note_compaction(vault, o.op_id)
    shas = [f["sha256"] for f in vault.read_manifest(o.op_id)["files"]]
    monkeypatch.setattr(vm, "no_writer_anywhere", lambda path: None)  # NFS: the kernel cannot tell
    outs = upkeep._finish_compactions(Context(str(logdir)), vault)
    assert [(r.action, r.code) for r in outs] == [(Recovery.SKIPPED_LIVE, Finding.BACKUP_OPEN_FOR_WRITING)]
    assert all(vault.blob_form(s) == "plain" for s in shas) and o.op_id in vault.pending_compactions()


def test_the_oplog_logs_each_change_once_and_reads_back_the_newest_manifest(tmp_path):
    """Issue #28 item 2: the operation log is the manifest's only record (no file of its own):
    its first state in full, each later state only as the fields it changed, each written twice
    in a row. The manifest read back is the newest state (here: purged). Both copies of a change
    damaged: the damage is named, recovery would not replay over it, and every blob its records
    name stays claimed."""
    import json

    from tb_footprint_plugin.engine import oplog

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    o = reduce(logdir, "archive").outcomes[0]
    vault = Vault(state_dir(str(logdir)))
    assert not os.path.exists(vault.manifest_path(o.op_id))
    api.purge(str(logdir), yes=True)
    newest = vault.read_manifest(o.op_id)
    assert newest["backup_purged"] is True
    recs = oplog.records(vault.root, o.op_id)
    assert [x["type"] for x in recs].count("manifest") == 2  # one state, two copies
    changes = [x for x in recs if x["type"] == "manifest_change" and x["set"].get("backup_purged") is True]
    assert len(changes) == 2 and changes[0] == changes[1]
    assert set(changes[0]["set"]) <= {"backup_purged", "purged_at"}
    # both copies of the purge's change damaged: what it said is unknown
    seg = Path(vault.manifest_where(o.op_id))
    text = seg.read_bytes().splitlines(keepends=True)
    hit = [n for n, line in enumerate(text) if line.startswith(b'{"op":"%s"' % o.op_id.encode())
           and b'"backup_purged":true' in line]
    assert len(hit) == 2
    for n in hit:
        text[n] = text[n][:60] + b"\xff garbage\n"
    seg.write_bytes(b"".join(text))
    assert vault.manifest_damage(o.op_id) and str(seg) in vault.manifest_damage(o.op_id)
    assert {f["sha256"] for f in newest["files"]} <= vault.referenced_blobs()


def test_a_grown_blob_is_never_replaced_by_another_runs_backup(tmp_path):
    """A plain blob that grew (a late writer's records, salvaged at the next start) is a file of
    its own whose appended bytes exist nowhere else: backing up another file with the blob's
    original content refuses (naming the blob) instead of replacing it."""
    from tb_footprint_plugin.engine.vault import VaultError

    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    data = b"scalar record " * 10_000
    sha = _stored(v, tmp_path / "logs" / "A" / "events.out.tfevents.1.host", data)
    with open(v.blob_path(sha), "ab") as f:
        f.write(b"LATE step 1001")
    other = tmp_path / "logs" / "B" / "events.out.tfevents.1.host"
    other.parent.mkdir()
    other.write_bytes(data)
    with pytest.raises(VaultError, match="never replaced"):
        v.store(str(other), sha)
    assert Path(v.blob_path(sha)).read_bytes() == data + b"LATE step 1001"
