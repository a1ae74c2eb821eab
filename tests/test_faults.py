"""Fault injection at every step of the transaction and of restore.

After any failure — an exception, a full disk, a permission error, or a SIGKILL at that
instant followed by recovery — each run is either byte-identical to how it was, or fully
reduced and verified. Never a mix, never a lost byte.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.paths import state_dir

REDUCE_STEPS = ["reduce.journal", "reduce.backup_record", "reduce.backup", "reduce.stage_record", "reduce.stage",
                "reduce.verify", "reduce.swap_record", "reduce.mid_swap", "reduce.swap", "reduce.commit"]
#: Steps at or past the commit point: a crash there ends fully reduced (finished on recovery).
COMMITTED_ON_CRASH = {"reduce.swap_record", "reduce.mid_swap", "reduce.swap", "reduce.commit"}
SCENARIOS = {
    # one run that gets every kind of action: whole sessions deleted (files + directories),
    # caches and secondary traces deleted, old traces deleted, the newest trace compressed
    "keep-latest": ("mixed", "keep-latest"),
    # compresses traces: new files written under temp names, then renamed into place
    "lossless": ("torch/profiled", "lossless"),
}


def copy_fixture(name, dest: Path) -> Path:
    if name != "mixed":
        return copy_real(name, dest)
    copy_real("viewed/jax_profiled", dest)
    torch = copy_real("torch/profiled", dest.parent / (dest.name + "-torch"))
    for p in torch.iterdir():
        if p.is_file():
            shutil.copy2(p, dest / p.name)
    shutil.rmtree(torch)
    return dest


@pytest.fixture(scope="module")
def expected_reduced(tmp_path_factory):
    """The tree a clean reduction produces, per scenario."""
    out = {}
    for key, (fixture, policy) in SCENARIOS.items():
        d = copy_fixture(fixture, tmp_path_factory.mktemp(key) / "logdir")
        rep = api.reduce_logdir(str(d), policy=policy, dry_run=False, verify_backends=("python",))
        assert rep.ok, [o.to_dict() for o in rep.outcomes]
        out[key] = user_files(d)
    return out


pytestmark = pytest.mark.usefixtures("disarm_faults")


def _no_leftovers(logdir: Path):
    assert not [n for n in user_files(logdir) if ".footprint-" in n], "temp files left in the logdir"
    journal = Path(state_dir(str(logdir))) / "journal"
    assert not (journal.is_dir() and os.listdir(journal)), "an operation was left unsettled"


@pytest.mark.parametrize("kind", ["raise", "enospc", "eacces"])
@pytest.mark.parametrize("step", REDUCE_STEPS)
def test_in_process_failure_rolls_back(tmp_path, expected_reduced, step, kind):
    fixture, policy = SCENARIOS["keep-latest"]
    logdir = copy_fixture(fixture, tmp_path / "logdir")
    before = user_files(logdir)
    hits = []
    faults.arm(step, lambda: (hits.append(step), faults.arm(step, kind), faults.hit(step)))
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    o = rep.outcomes[0]
    assert hits, f"failpoint {step} was never reached"
    if step == "reduce.commit":
        assert o.status == "verified"
        assert user_files(logdir) == expected_reduced["keep-latest"]
    else:
        assert o.status == "rolled_back", o.to_dict()
        assert step in o.reason or "injected" in o.reason or "No space" in o.reason or "Permission" in o.reason
        assert user_files(logdir) == before
    _no_leftovers(logdir)
    if o.status == "rolled_back":
        m = api.operation(str(logdir), o.op_id)
        assert m["outcome"] == "rolled_back" and m["reason"]


_KILL_SCRIPT = """
import sys
from tb_footprint_plugin import api
api.reduce_logdir(sys.argv[1], policy=sys.argv[2], dry_run=False, verify_backends=("python",))
"""


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("step", REDUCE_STEPS)
def test_sigkill_then_recovery(tmp_path, expected_reduced, scenario, step):
    fixture, policy = SCENARIOS[scenario]
    logdir = copy_fixture(fixture, tmp_path / "logdir")
    before = user_files(logdir)
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(logdir), policy], env=env, timeout=300)
    assert p.returncode == -9, "the failpoint should have killed the process"
    recovered = api.recover_logdir(str(logdir))
    now = user_files(logdir)
    if step in COMMITTED_ON_CRASH:
        assert now == expected_reduced[scenario], recovered
        ops = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
        assert ops and ops[0]["outcome"] == "verified"
    else:
        assert now == before, recovered
    _no_leftovers(logdir)
    # and the next reduction works normally from there
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    assert rep.ok
    assert user_files(logdir) == expected_reduced[scenario]


@pytest.mark.parametrize("step", ["restore.dirs", "restore.file"])
@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_restore_interrupted_is_finished(tmp_path, step, mode):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).ok
    if mode == "raise":
        faults.arm(step, "raise")
        outs = api.restore(str(logdir))
        assert outs[0].status == "failed" and "finished on the next start" in outs[0].reason
        faults.disarm_all()
    else:
        env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        code = "import sys; from tb_footprint_plugin import api; api.restore(sys.argv[1])"
        p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300)
        assert p.returncode == -9
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"]
    assert user_files(logdir) == before
    _no_leftovers(logdir)


def test_disk_full_before_anything_is_written(tmp_path, monkeypatch):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    before = user_files(logdir)
    from tb_footprint_plugin.engine import transaction

    monkeypatch.setattr(transaction.shutil, "disk_usage",
                        lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1000))
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",))
    o = next(o for o in rep.outcomes if o.run == ".")
    assert o.status == "failed"
    assert "not enough free space" in o.reason and "needs" in o.reason and "has 1.0 KB" in o.reason
    assert user_files(logdir) == before


def test_file_appended_mid_reduce_is_rolled_back_and_kept(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    victim = logdir / "plugins" / "profile" / "2026_11_30_00_21_35" / "vm.trace.json.gz"

    def append():
        with open(victim, "ab") as f:
            f.write(b"late bytes")

    faults.arm("reduce.stage", append)
    before_victim = victim.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",))
    o = rep.outcomes[0]
    assert o.status == "rolled_back" and "changed during the reduction" in o.reason
    assert o.code == Failure.CHANGED_SINCE_BACKUP  # the bucket engine's code for the same failure
    assert victim.read_bytes() == before_victim + b"late bytes"  # the writer's bytes survive


def _synth_rewrite_logdir(root: Path) -> Path:
    """One run whose 'archive' reduce rewrites its event file (images dropped)."""
    from tb_footprint_plugin import synth

    with synth.EventWriter(str(root / "r")) as w:
        for s in range(30):
            w.scalar("x", s, float(s))
            w.image("im", s, synth.make_png(2, 2, seed=s % 2), 2, 2)
    old = time.time() - 7200
    for p in (root / "r").iterdir():
        os.utime(p, (old, old))
    return root


def _journal_records(logdir: Path):
    (j,) = (Path(state_dir(str(logdir))) / "journal").glob("*.jsonl")
    return [json.loads(line) for line in j.read_text().splitlines()]


@pytest.mark.parametrize("transform", ["compress", "event_rewrite"])
def test_a_file_written_while_it_is_staged_fails_as_changed_since_backup(tmp_path, transform):
    if transform == "compress":
        logdir, policy = copy_real("torch/profiled", tmp_path / "logdir"), "lossless"
    else:
        logdir, policy = _synth_rewrite_logdir(tmp_path / "logdir"), "archive"
    written = []

    def write_the_source():  # a writer appends to the file the transform is about to read
        # the stage records are journaled with the backup records (one fsync for them all)
        stage = next(r for r in _journal_records(logdir) if r["type"] == "stage")
        if not written:
            with open(logdir / stage["src"], "ab") as f:
                f.write(b"late bytes")
            written.append(stage["src"])

    faults.arm("reduce.stage_record", write_the_source)
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    o = next(o for o in rep.outcomes if o.op_id)
    assert written and o.status == "rolled_back", o.to_dict()
    assert o.code == Failure.CHANGED_SINCE_BACKUP, (o.code, o.reason)
    assert (logdir / written[0]).read_bytes().endswith(b"late bytes")
    _no_leftovers(logdir)


@pytest.mark.parametrize("step", ["reduce.swap_record", "reduce.swap"])
def test_a_file_written_at_the_swap_fails_as_changed_since_backup(tmp_path, step):
    # reduce.swap_record: the swap finds a backed-up original changed; reduce.swap: a profile-only
    # run's event file is no longer the bytes hashed under the lock
    if step == "reduce.swap_record":
        logdir, policy = copy_real("viewed/jax_profiled", tmp_path / "logdir"), "archive"
        victim = logdir / "plugins" / "profile" / "2026_11_30_00_21_35" / "vm.trace.json.gz"
    else:
        logdir, policy = copy_real("torch/profiled", tmp_path / "logdir"), "lossless"
        victim = next(logdir.glob("events.out.tfevents.*"))
    before_victim = victim.read_bytes()

    def append():
        with open(victim, "ab") as f:
            f.write(b"late bytes")

    faults.arm(step, append)
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    o = next(o for o in rep.outcomes if o.op_id)
    assert o.status == "rolled_back", o.to_dict()
    assert o.code == Failure.CHANGED_SINCE_BACKUP, (o.code, o.reason)
    assert victim.read_bytes() == before_victim + b"late bytes"  # the writer's bytes survive
    _no_leftovers(logdir)


def test_run_deleted_mid_batch(tmp_path):
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    copy_real("jax/profiled", logdir / "a")
    copy_real("viewed/jax_profiled", logdir / "b")
    calls = []

    def delete_other():
        if not calls:
            calls.append(1)
            shutil.rmtree(logdir / "a")  # 'b' (larger) runs first; 'a' vanishes meanwhile

    faults.arm("reduce.verify", delete_other)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    by_run = {o.run: o for o in rep.outcomes}
    assert by_run["b"].status == "verified"
    assert by_run["a"].status == "failed" and "no longer exists" in by_run["a"].reason
    assert not rep.ok


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory_is_refused_up_front(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    session = logdir / "plugins" / "profile" / "2026_11_30_00_21_35"
    os.chmod(session, 0o555)
    try:
        before = user_files(logdir)
        rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
        o = rep.outcomes[0]
        assert o.status == "failed" and "not writable" in o.reason
        assert user_files(logdir) == before
    finally:
        os.chmod(session, 0o755)


def test_damaged_backup_is_detected_by_verify_and_restore(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).ok
    blobs = [p for p in (logdir / ".tb-footprint" / "blobs").rglob("*") if p.is_file()]
    os.chmod(blobs[0], 0o644)
    with open(blobs[0], "r+b") as f:
        f.write(b"X")
    res = api.verify(str(logdir), verify_backends=("python",))
    assert res and not res[0]["ok"] and res[0]["damaged_backups"]
    outs = api.restore(str(logdir))
    assert outs[0].status == "failed" and "damaged" in outs[0].reason


def test_shared_backup_dir_keeps_logdirs_apart(tmp_path):
    vault = tmp_path / "shared-vault"
    l1 = copy_real("jax/profiled", tmp_path / "l1")
    l2 = copy_real("viewed/jax_profiled", tmp_path / "l2")
    before1, before2 = user_files(l1), user_files(l2)
    for d in (l1, l2):
        assert api.reduce_logdir(str(d), backup_dir=str(vault), dry_run=False, verify_backends=("python",)).ok
    after1 = user_files(l1)
    freed = api.purge(str(l2), backup_dir=str(vault), yes=True)
    assert [o["run"] for o in freed.ops] == ["."] and len(freed.ops) == 1
    assert user_files(l1) == after1
    assert [o.status for o in api.restore(str(l1), backup_dir=str(vault))] == ["restored"]
    assert user_files(l1) == before1  # l1's backup survived l2's purge
    assert api.restore(str(l2), backup_dir=str(vault)) == []  # nothing of l1's leaks into l2
    assert user_files(l2) != before2 and not (l2 / "plugins").exists()


def test_restore_keeps_bytes_written_since_the_reduction(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    before = user_files(logdir)
    assert api.reduce_logdir(str(logdir), dry_run=False, verify_backends=("python",)).ok
    path = logdir / "plugins" / "profile" / "2026_11_30_00_21_35" / "vm.xplane.pb"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a newer profile written after the reduction")
    (o,) = api.restore(str(logdir))
    assert o.status == "restored" and "kept in the vault" in o.reason
    assert user_files(logdir) == before
    m = next(m for m in api.operations(str(logdir)) if m["kind"] == "restore")
    (d,) = m["displaced"]
    blob = logdir / ".tb-footprint" / d["blob"]
    assert blob.read_bytes() == b"a newer profile written after the reduction"


def test_restore_refuses_a_symlinked_folder(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    outside = tmp_path / "outside"
    outside.mkdir()
    assert api.reduce_logdir(str(logdir), dry_run=False, verify_backends=("python",)).ok
    os.symlink(outside, logdir / "plugins")
    (o,) = api.restore(str(logdir))
    assert o.status == "failed" and "symlink" in o.reason
    assert os.listdir(outside) == []


def test_crash_then_append_before_recovery_keeps_the_new_bytes(tmp_path):
    logdir = copy_fixture("mixed", tmp_path / "logdir")
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS="reduce.swap_record=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(logdir), "keep-latest"], env=env, timeout=300)
    assert p.returncode == -9
    victim = logdir / "plugins" / "profile" / "2026_11_30_00_21_35" / "vm.trace.json.gz"
    with open(victim, "ab") as f:
        f.write(b"late bytes")
    expected = victim.read_bytes()
    (r,) = api.recover_logdir(str(logdir))
    assert r.action == "rolled_back", r
    assert victim.read_bytes() == expected  # the writer's bytes survive recovery


def test_a_lock_file_the_disk_refuses_after_the_commit_leaves_the_compaction_to_the_next_start(tmp_path,
                                                                                               monkeypatch):
    """The compaction's run lock is taken after the commit: an OSError there (a full disk, no
    file descriptor left) must not turn the committed run into a failed one."""
    import errno

    from tb_footprint_plugin.codes import Finding
    from tb_footprint_plugin.engine.vault import Vault

    class RefusedLock:
        def __init__(self, *a):
            pass

        def __enter__(self):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

        def __exit__(self, *exc):
            return None

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    from tb_footprint_plugin.engine import compactor  # where a run's compaction looks its lock up
    monkeypatch.setattr(compactor, "run_lock", RefusedLock)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    monkeypatch.undo()
    acted = [o for o in rep.outcomes if o.op_id]
    assert acted and all(o.status == "verified" for o in acted), [o.to_dict() for o in rep.outcomes]
    assert rep.ok
    vault = Vault(state_dir(str(logdir)))
    assert set(vault.pending_compactions()) == {o.op_id for o in acted}  # noted for the next start
    recovered = api.recover_logdir(str(logdir))
    assert any(r.code == Finding.COMPACTION_FINISHED for r in recovered), [r.to_dict() for r in recovered]
    assert not vault.pending_compactions()
