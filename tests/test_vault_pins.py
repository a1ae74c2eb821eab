"""A purge or a compaction never deletes a blob a transaction under way relies on (local vault).

A purge plans which blobs go, then deletes them. Meanwhile another reduce — of the same logdir,
or of another logdir whose ``--backup-dir`` is the same vault folder (the purge reads only its
own logdir's journals) — may back up a file with the same bytes: ``Vault.store`` finds the blob
already there and relies on it. ``store`` now pins the digest under the blob's lock
(``<vault>/tmp/<op_id>/pins/<sha>``, durable before it returns) and ``delete_blob`` skips a
pinned digest under the same lock; a purge also reads the manifests again under the blobs'
locks (a transaction that committed since its plan unpinned only after its manifest was
durable). The interleavings are made deterministic with failpoint callables.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.journal import RunLock
from tb_footprint_plugin.engine.vault import COMPRESSED, KEPT_BUSY, Vault
from tb_footprint_plugin.storage.paths import state_dir

PY = ("python",)
FIXTURE, POLICY = "jax/profiled", "archive"  # whole sessions deleted: every original is only in the vault


pytestmark = pytest.mark.usefixtures("disarm_faults")


def reduce(logdir: Path, vault: Path):
    rep = api.reduce_logdir(str(logdir), str(vault), policy=POLICY, dry_run=False, quiet_period=0,
                            verify_backends=PY, vault_format="hardlink")
    assert rep.ok and [o for o in rep.outcomes if o.status == "verified"], [o.to_dict() for o in rep.outcomes]
    return rep


def restore_exact(logdir: Path, vault: Path, before: dict):
    outs = api.restore(str(logdir), backup_dir=str(vault))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert user_files(logdir) == before


def once(name: str, fn):
    """Arm ``name`` to call ``fn`` the first time it is hit only."""
    def fire():
        faults.disarm_all()
        fn()
    faults.arm(name, fire)


def pins(vault: Path) -> dict:
    tmp = vault / "tmp"
    return {d.name: sorted(p.name for p in (d / "pins").iterdir())
            for d in (tmp.iterdir() if tmp.is_dir() else []) if (d / "pins").is_dir()}


def shas_of(logdir: Path, vault: Path) -> set:
    return {f["sha256"] for m in api.operations(str(logdir), backup_dir=str(vault))
            if m.get("kind") == "reduce" for f in m.get("files", [])}


@pytest.mark.parametrize("when", ["purge_mid_transaction", "transaction_mid_purge"])
def test_purge_of_another_logdir_sharing_the_vault_keeps_what_a_reduce_relies_on(tmp_path, when):
    """Two logdirs, one ``--backup-dir``, the same bytes. ``purge_mid_transaction``: the second
    logdir's reduce has swapped (its originals are gone) and not committed when the first
    logdir's purge runs whole: the pin keeps the blob. ``transaction_mid_purge``: the purge is
    planned (intents written), then the second reduce runs whole, then the purge deletes: the
    second reduce's manifest, read again under the blobs' locks, keeps it. Before the fix both
    purges deleted the blobs and the second logdir could not be restored."""
    vault = tmp_path / "vault"
    a, b = copy_real(FIXTURE, tmp_path / "a"), copy_real(FIXTURE, tmp_path / "b")
    before_b = user_files(b)
    reduce(a, vault)
    shared = shas_of(a, vault)
    assert shared
    reports = []
    if when == "purge_mid_transaction":
        seen = []

        def purge_a():
            seen.append(pins(vault))
            reports.append(api.purge(str(a), yes=True, backup_dir=str(vault)))
        once("reduce.swap", purge_a)
        reduce(b, vault)
        assert [set(x) for p in seen for x in p.values()] == [shared]  # pinned before the swap
    else:
        once("purge.intent", lambda: reduce(b, vault))
        reports.append(api.purge(str(a), yes=True, backup_dir=str(vault)))
    pr = reports[0]
    assert pr.freed_bytes == 0, pr.to_dict()  # nothing freed: every blob is the second run's backup
    kept = {k["sha256"] for k in pr.kept if k.get("code") == Finding.UNFINISHED and "sha256" in k}
    assert kept == shared, pr.to_dict()
    assert pins(vault) == {}  # the second reduce committed: its pins are gone
    assert shas_of(b, vault) == shared
    v = Vault(str(vault))
    assert all(v.check_blob(s) for s in shared)
    restore_exact(b, vault, before_b)


def test_purge_of_the_same_logdir_keeps_what_a_reduce_under_way_relies_on(tmp_path):
    """Same logdir: run ``r1`` reduced, its purge planned, then run ``r2`` (same bytes) reduced
    and committed after the purge was planned: the purge reads the manifests again under the
    blobs' locks and keeps them."""
    vault = tmp_path / "vault"
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    copy_real(FIXTURE, logdir / "r1")
    copy_real(FIXTURE, logdir / "r2")
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), str(vault), policy=POLICY, dry_run=False, quiet_period=0,
                            verify_backends=PY, vault_format="hardlink", runs=["r1"])
    assert rep.ok and [o for o in rep.outcomes if o.status == "verified"], [o.to_dict() for o in rep.outcomes]
    shared = shas_of(logdir, vault)
    reports = []

    # the purge is planned (its intent written) before r2's journal exists; r2 then backs up
    # the same bytes, swaps and commits; then the purge deletes
    def reduce_r2_until_swapped():
        reports.append(api.reduce_logdir(str(logdir), str(vault), policy=POLICY, dry_run=False, quiet_period=0,
                                         verify_backends=PY, vault_format="hardlink", runs=["r2"]))
    once("purge.intent", reduce_r2_until_swapped)
    pr = api.purge(str(logdir), yes=True, run="r1", backup_dir=str(vault))
    assert reports[0].ok, [o.to_dict() for o in reports[0].outcomes]
    assert pr.freed_bytes == 0, pr.to_dict()
    assert {k["sha256"] for k in pr.kept if "sha256" in k} == shared, pr.to_dict()
    # r2 restores byte for byte; r1's backup is purged (its manifest says so) but the bytes
    # are r2's backup now
    outs = api.restore(str(logdir), run="r2", backup_dir=str(vault))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    now = user_files(logdir)
    assert {k: v for k, v in now.items() if k.startswith("r2/")} == \
        {k: v for k, v in before.items() if k.startswith("r2/")}


def test_purge_of_the_same_logdir_while_the_reduce_has_swapped(tmp_path):
    """Same logdir, the other order: run ``r2``'s reduce has swapped (its originals are gone,
    its journal open) when a purge of ``r1`` is planned and run whole: the pin (and the
    journal, which kept it before pins existed: a guard against regressions) keep every blob;
    r2 then commits and restores byte for byte."""
    vault = tmp_path / "vault"
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    copy_real(FIXTURE, logdir / "r1")
    copy_real(FIXTURE, logdir / "r2")
    before = user_files(logdir)
    api.reduce_logdir(str(logdir), str(vault), policy=POLICY, dry_run=False, quiet_period=0,
                      verify_backends=PY, vault_format="hardlink", runs=["r1"])
    shared = shas_of(logdir, vault)
    reports = []
    once("reduce.swap", lambda: reports.append(api.purge(str(logdir), yes=True, run="r1",
                                                         backup_dir=str(vault))))
    rep = api.reduce_logdir(str(logdir), str(vault), policy=POLICY, dry_run=False, quiet_period=0,
                            verify_backends=PY, vault_format="hardlink", runs=["r2"])
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert reports[0].freed_bytes == 0, reports[0].to_dict()
    assert all(Vault(str(vault)).check_blob(s) for s in shared)
    outs = api.restore(str(logdir), run="r2", backup_dir=str(vault))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert {k: v for k, v in user_files(logdir).items() if k.startswith("r2/")} == \
        {k: v for k, v in before.items() if k.startswith("r2/")}


def test_compaction_leaves_a_blob_another_transaction_pinned(tmp_path):
    """Compaction of op A's backup while op B's transaction (any logdir sharing the vault) has
    pinned the same digest: the plain blob stays (``KEPT_BUSY``, its note kept for the next
    start); once B unpins, it is compacted. A pinned blob is not deleted either, and a pin of an
    operation whose manifest says it rolled back protects nothing."""
    vault = Vault(str(tmp_path / "vault"))
    vault.ensure()
    src = tmp_path / "orig"
    src.write_bytes(b"x" * 200_000)
    import hashlib
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    vault.store(str(src), sha, pin="opA")
    src.unlink()  # A's swap: the blob is a file of its own now
    vault.unpin("opA")
    vault.pin_blob("opB", sha)
    assert vault.pinned_by(sha) == ["opB"]
    assert vault.compact(sha) == KEPT_BUSY
    assert vault.blob_form(sha) == "plain"
    assert vault.delete_blob(sha) == 0 and vault.check_blob(sha)
    # a pin name is untrusted: only a digest in an op id's folder counts, never through a link
    (tmp_path / "vault" / "tmp" / "opC").mkdir()
    os.symlink(str(tmp_path / "vault" / "tmp" / "opB" / "pins"), str(tmp_path / "vault" / "tmp" / "opC" / "pins"))
    assert vault.pinned_ops() == ["opB"]
    vault.unpin("opB")
    assert vault.compact(sha) == COMPRESSED
    # a rolled-back op's leftover pin does not keep its blob
    vault.pin_blob("opD", sha)
    vault.write_manifest({"op_id": "opD", "outcome": "rolled_back"})
    assert vault.pinned_by(sha) == []
    assert vault.delete_blob(sha) > 0 and not vault.has_blob(sha)


_KILL = """
import sys
from tb_footprint_plugin import api
api.reduce_logdir(sys.argv[1], sys.argv[2], policy=sys.argv[3], dry_run=False, quiet_period=0,
                  verify_backends=("python",), vault_format="hardlink")
"""


@pytest.mark.parametrize("step", ["reduce.backup", "reduce.swap"])
def test_a_killed_transactions_pins_are_cleared_once_recovery_settled_it(tmp_path, step):
    """SIGKILL after the backups (rolled back on recovery) or after the swap (rolled forward):
    the pins stay while the run's journal is unsettled (its run locked by another process, so
    recovery cannot settle it), and go at the first start that settles it."""
    vault = tmp_path / "vault"
    logdir = copy_real(FIXTURE, tmp_path / "logdir")
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL, str(logdir), str(vault), POLICY], env=env, timeout=300)
    assert p.returncode == -9
    left = pins(vault)
    assert len(left) == 1 and next(iter(left.values())), left
    journal = Path(state_dir(str(logdir))) / "journal"
    (j,) = journal.glob("*.jsonl")
    run = json.loads(j.read_text().splitlines()[0])["run"]
    with RunLock(str(Path(state_dir(str(logdir))) / "locks"), run):
        api.recover_logdir(str(logdir), backup_dir=str(vault))
        assert pins(vault) == left  # not settled yet: the pins stay
    api.recover_logdir(str(logdir), backup_dir=str(vault))
    assert not list(journal.glob("*.jsonl"))
    assert pins(vault) == {}


_KILL_PURGE = """
import sys
from tb_footprint_plugin import api
api.purge(sys.argv[1], yes=True, backup_dir=sys.argv[2])
"""


def test_a_purge_finished_at_the_next_start_keeps_what_a_reduce_under_way_relies_on(tmp_path):
    """Logdir ``b`` (same vault, same bytes as ``a``) is mid-transaction (swapped, not committed)
    when a purge of ``a`` is killed after its intent and ``a``'s next start finishes it from that
    intent (``upkeep``/``finish_purges``): the pinned blobs stay, ``a``'s manifest is marked
    purged, and ``b`` restores byte for byte."""
    vault = tmp_path / "vault"
    a, b = copy_real(FIXTURE, tmp_path / "a"), copy_real(FIXTURE, tmp_path / "b")
    before_b = user_files(b)
    reduce(a, vault)
    shared = shas_of(a, vault)
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS="purge.intent=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    settled = []

    def kill_purge_then_start_a():
        # (a start of b, before its transaction, would finish the purge itself: the vault is shared)
        p = subprocess.run([sys.executable, "-c", _KILL_PURGE, str(a), str(vault)], env=env, timeout=300)
        assert p.returncode == -9
        settled.append(api.recover_logdir(str(a), backup_dir=str(vault)))
    once("reduce.swap", kill_purge_then_start_a)
    reduce(b, vault)
    assert any(o.code == Finding.PURGE_FINISHED for o in settled[0]), [o.to_dict() for o in settled[0]]
    (ma,) = [m for m in api.operations(str(a), backup_dir=str(vault)) if m.get("kind") == "reduce"]
    assert ma.get("backup_purged")
    assert all(Vault(str(vault)).check_blob(s) for s in shared)
    restore_exact(b, vault, before_b)
