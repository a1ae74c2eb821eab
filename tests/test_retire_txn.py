"""Retire as one transaction on the one driver (issue #26): a run's retirement on a disk is
``retire_run.Retire`` over ``retire.DiskRetire`` and on a bucket over ``bucket_retire.BucketRetire``, run by
``engine.txn.run`` in the order of ``txn.STEPS``, with the journal records and the failpoints of
``engine.faults`` (``retire.*``) at their historical instants, and a cancel honoured at the
driver's points: after the moves into the vault (before anything is deleted) the run is put
back, byte for byte."""
import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from conftest import user_files
from helpers_txn import observe_txn
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import bucket_retire, faults, retire, txn
from tb_footprint_plugin.engine.bucket_state import BucketVault
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.storage.store_object import ObjectStore

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400
STATE = ".tb-footprint/"


def _logdir(root: Path) -> Path:
    """Two runs, one with a file in a sub-folder, old enough for any quiet period."""
    for name in ("train", "baseline"):
        with synth.EventWriter(str(root / name)) as w:
            for step, v in enumerate([1.0, 0.5, 0.25]):
                w.scalar("val/loss", step, v)
    (root / "train" / "notes").mkdir()
    (root / "train" / "notes" / "config.yaml").write_bytes(b"lr: 0.1\n" * 40)
    for dirpath, _dirs, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(dirpath, n), (OLD, OLD))
    return root


def _observe(monkeypatch, failpoints):
    return observe_txn(monkeypatch, failpoints)


@pytest.fixture
def other_fs():
    vault = Path("/dev/shm") / f"tbfp-retire-txn-{uuid.uuid4().hex[:8]}"
    vault.mkdir()
    yield str(vault)
    shutil.rmtree(vault, ignore_errors=True)


def test_a_local_retire_is_a_LocalRetire_run_by_the_driver_step_by_step(tmp_path, monkeypatch, other_fs):
    """The driver's steps in order, each failpoint at its instant inside them: on one filesystem
    (renames: no delete record, nothing to unlink) and across two (copies, then the originals
    unlinked after the delete record)."""
    for backup, tail in ((None, []), (other_fs, ["retire.mid_delete"])):
        logdir = _logdir(tmp_path / ("same" if backup is None else "cross"))
        before = user_files(logdir)
        seen, log = _observe(monkeypatch, retire.RETIRE_STEPS)
        rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup)
        [o] = rep.outcomes
        assert o.status == Outcome.VERIFIED, o.to_dict()
        assert seen == ["Retire"]
        assert log == ["journal", "retire.journal",
                       "backup", "retire.move_record", "retire.mid_move", "retire.move",
                       "stage", "transform", "verify", "last_look", "record:swap",
                       "swap", *tail, "retire.delete",
                       "commit", "retire.manifest"], log
        assert user_files(logdir) == {k: v for k, v in before.items() if not k.startswith("train")}
        # the journal's records as they always were: the delete record only where originals are unlinked
        [m] = [m for m in api.operations(str(logdir), backup_dir=backup) if m["kind"] == "retire"]
        assert m["outcome"] == Outcome.VERIFIED and len(m["tree"]) == 2
        assert [o.status for o in api.restore(str(logdir), run="train", backup_dir=backup)] == ["restored"]
        assert user_files(logdir) == before
        faults.disarm_all()


@pytest.mark.parametrize("where", ["same_fs", "cross_fs"])
def test_a_cancel_after_the_moves_puts_the_local_run_back(tmp_path, where, other_fs):
    """The driver honours a cancel after the backup step (every file in the vault, none deleted):
    the run is rolled back after its rollback record, byte for byte, nothing is retired and no
    journal is left. Before, a retirement past its move record ignored any cancel."""
    logdir = _logdir(tmp_path / "logdir")
    backup = other_fs if where == "cross_fs" else None
    before = user_files(logdir)
    token = CancelToken()
    faults.arm("retire.move", token.cancel)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup, cancel=token)
    [o] = rep.outcomes
    assert o.status == Outcome.ROLLED_BACK and "cancelled" in o.reason, o.to_dict()
    assert user_files(logdir) == before
    assert api.retired(str(logdir), backup_dir=backup) == []
    journal = Path(state_dir(str(logdir))) / "journal"
    assert not os.listdir(journal), "the rolled-back retirement left its journal"
    vault = Path(backup) if backup else Path(state_dir(str(logdir)))
    assert not os.listdir(vault / "retired"), "the rolled-back retirement left files in the vault"
    [m] = [m for m in api.operations(str(logdir), backup_dir=backup) if m["kind"] == "retire"]
    assert m["outcome"] == Outcome.ROLLED_BACK


def test_a_bucket_retire_is_an_ObjectRetire_run_by_the_driver(s3_bucket, tmp_path, monkeypatch):
    """On a bucket: the driver's steps in order with the bucket's failpoints (the manifest after
    verify, the delete record after the commit record), then a cancel after the copies puts every
    object back and leaves no copy, manifest or journal behind."""
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")

    def user():
        return {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(STATE)}

    before = user()
    ostore = ObjectStore(url)
    vault = BucketVault.for_logdir(ostore)
    seen, log = _observe(monkeypatch, bucket_retire.RETIRE_STEPS)
    out = bucket_retire.retire_run(ostore, vault, "train", quiet_period=0)
    assert out.status == Outcome.VERIFIED, out.to_dict()
    assert seen == ["Retire"]
    assert log == ["journal", "retire.journal",
                   "backup", "retire.mid_move", "retire.move",
                   "stage", "transform", "verify", "retire.manifest",
                   "last_look", "record:swap", "retire.delete_record",
                   "swap", "retire.delete", "commit"], log
    assert user() == {k: v for k, v in before.items() if not k.startswith("train/")}

    faults.disarm_all()
    token = CancelToken()
    faults.arm("retire.move", token.cancel)
    out = bucket_retire.retire_run(ostore, vault, "baseline", quiet_period=0, cancel=token)
    assert out.status == Outcome.ROLLED_BACK and "cancelled" in out.reason, out.to_dict()
    assert user() == {k: v for k, v in before.items() if not k.startswith("train/")}
    left = {k for k in s3_bucket.hashes("logs") if k.startswith(STATE)}
    assert not [k for k in left if out.op_id in k], sorted(left)  # no copy, manifest, journal or lock of it


def test_a_local_unretire_is_the_one_Unretire_run_by_the_driver(tmp_path, monkeypatch, other_fs):
    """A retired run's restore passes the driver's steps too: the begin record is its commit point
    (nothing is recorded before the put-backs, nothing is ever rolled back), the put-backs are its
    swap, the tree check and the manifests its commit."""
    for backup in (None, other_fs):
        logdir = _logdir(tmp_path / ("same" if backup is None else "cross"))
        before = user_files(logdir)
        assert api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup).ok
        seen, log = _observe(monkeypatch, retire.UNRETIRE_STEPS)
        outs = api.restore(str(logdir), run="train", backup_dir=backup)
        assert [o.status for o in outs] == [Outcome.RESTORED], [o.to_dict() for o in outs]
        assert seen == ["Unretire"]
        assert log == ["journal", "unretire.journal", "backup", "stage", "transform", "verify",
                       "last_look", "record:swap", "swap", "unretire.mid_move", "unretire.move",
                       "commit", "unretire.manifest"], log
        assert user_files(logdir) == before
        faults.disarm_all()


def test_a_failure_right_after_the_unretire_journal_is_an_outcome_and_leaves_no_journal(tmp_path):
    """A full disk right after the restore's begin record, before anything is put back: an
    outcome that says why (never an exception out of the verb), coded as the failure is
    (``no_space``), and no journal left for every start to meet (``unretire_run``: the journal
    goes when nothing was put back, on every store): the run stays retired, as it was, and the
    next restore brings it back byte for byte."""
    logdir = _logdir(tmp_path / "logdir")
    before = user_files(logdir)
    assert api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False).ok
    faults.arm("unretire.journal", "enospc")
    [o] = api.restore(str(logdir), run="train")
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.FAILED, "no_space"), o.to_dict()
    assert o.reason.startswith("disk full") and "journal is kept" not in o.reason, o.reason
    assert api.recover_logdir(str(logdir)) == []
    assert [r["run"] for r in api.retired(str(logdir))] == ["train"]
    [o] = api.restore(str(logdir), run="train")
    assert o.status == Outcome.RESTORED, o.to_dict()
    assert user_files(logdir) == before and api.retired(str(logdir)) == []


def test_a_bucket_unretire_is_the_one_Unretire_run_by_the_driver(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    before = {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(STATE)}
    assert api.retire(url, api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0).ok
    seen, log = _observe(monkeypatch, bucket_retire.UNRETIRE_STEPS)
    outs = api.restore(url, run="train")
    assert [o.status for o in outs] == [Outcome.RESTORED], [o.to_dict() for o in outs]
    assert seen == ["Unretire"]
    assert log == ["journal", "unretire.journal", "backup", "stage", "transform", "verify", "last_look",
                   "record:swap", "swap", "unretire.mid_move", "unretire.move", "commit", "unretire.manifest"], log
    assert {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(STATE)} == before
