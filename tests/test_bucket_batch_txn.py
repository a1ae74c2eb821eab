"""A bucket's batch of drop-only runs is ``bucket_batch.ObjectBatchReduce`` run by the one driver
``engine.txn.run`` (issue #26: batching of many runs as an option of the one engine): its steps in
``txn.STEPS`` order, the journal object's records and the failpoints where the batch always hit
them, a cancel honoured at the driver's last point and rolled back after the rollback record, and
a run that fails its last look taken out alone while the others are reduced. On moto's S3
(``tests/objstore_servers.py``). Each test fails on the code before (no driver ran the batch)."""
from __future__ import annotations

import pytest

from test_bucket_state_schema import STATE, _keys, _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.recovery_rules import CANCELLED_REASON
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults, journal_object, txn
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.storage.remote import RemoteFS

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _spy(monkeypatch, log):
    """Log the driver's steps on the transaction it runs, the journal object's records, and every
    bucket reduce failpoint as it fires."""
    real_run = txn.run

    def run(t, cancel, report=None):
        log.append(("txn", type(t).__name__))
        for step in (*txn.STEPS, "last_look", "record", "rollback"):
            method = getattr(t, step)

            def logged(*a, _m=method, _s=step):
                log.append(("step", _s if _s != "record" else f"record:{a[0]}"))
                return _m(*a)
            setattr(t, step, logged)
        return real_run(t, cancel, report)

    monkeypatch.setattr(txn, "run", run)
    real_step = journal_object.ObjectJournal.step
    monkeypatch.setattr(journal_object.ObjectJournal, "step",
                        lambda self, name, **kw: (log.append(("journal", name)), real_step(self, name, **kw))[1])
    for name in faults.steps("reduce", faults.BUCKET):
        faults.arm(name, lambda _n=name: log.append(("fp", _n)))


def _data(s3_bucket, prefix="logs") -> dict:
    return {k: v for k, v in s3_bucket.hashes(prefix).items() if not k.startswith(STATE + "/")}


def _collapsed(names):
    out = []
    for n in names:
        if not out or out[-1] != n:
            out.append(n)
    return out


def test_a_bucket_batch_is_the_drivers_steps_in_order(s3_bucket, tmp_path, monkeypatch):
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    log = []
    _spy(monkeypatch, log)
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2, [o.reason for o in rep.outcomes]
    assert [x for x in log if x[0] == "txn"] == [("txn", "ObjectBatchReduce")]  # one transaction, two runs
    assert [s for k, s in log if k == "step" and s in txn.STEPS] == list(txn.STEPS)
    # the journal object's records; the last look, then the commit record, before the deletes
    assert [(k, s) for k, s in log if k in ("journal", "step") or s in ("reduce.swap_record", "reduce.swap")] == [
        ("step", "journal"), ("step", "backup"), ("step", "stage"), ("step", "transform"), ("step", "verify"),
        ("step", "last_look"), ("step", "record:swap"), ("journal", "swapping"), ("fp", "reduce.swap_record"),
        ("step", "swap"), ("fp", "reduce.swap"), ("step", "commit")]
    # the failpoints the batch always hit, in that order (one backup copy per removed file), and
    # none of a rewrite's (stage, upload)
    fired = [s for k, s in log if k == "fp"]
    assert fired.count("reduce.backup_copy") == sum(len(o.removed_files) for o in rep.outcomes) >= 2
    assert _collapsed(fired) == ["reduce.journal", "reduce.backup_copy", "reduce.backup", "reduce.verify",
                                 "reduce.swap_record", "reduce.swap"]
    assert _keys(url, f"{STATE}/journal/") == [] and _keys(url, f"{STATE}/locks/") == []


def test_a_cancel_during_the_batch_is_honoured_at_the_drivers_last_point_after_the_rollback_record(
        s3_bucket, tmp_path, monkeypatch):
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    before = _data(s3_bucket)
    log = []
    _spy(monkeypatch, log)
    token = CancelToken()
    # the manifests written, the last look still to come: the driver's next cancel check is right
    # before the commit record
    faults.arm("reduce.verify", lambda: (log.append(("fp", "reduce.verify")), token.cancel()))
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, cancel=token)
    # coded as a disk codes a cancelled run (Cancelled.code)
    assert [(o.status, o.code) for o in rep.outcomes] == [(Outcome.ROLLED_BACK, Failure.INTERRUPTED)] * 2
    assert all(o.reason == CANCELLED_REASON for o in rep.outcomes)
    tail = log[log.index(("fp", "reduce.verify")):]
    assert tail == [("fp", "reduce.verify"), ("step", "last_look"), ("step", "record:rollback"),
                    ("journal", "rolling_back"), ("step", "rollback")]
    assert ("journal", "swapping") not in log
    assert _data(s3_bucket) == before  # every original as it was, byte for byte
    assert _keys(url, f"{STATE}/journal/") == [] and _keys(url, f"{STATE}/locks/") == []
    assert _keys(url, f"{STATE}/manifests/") == []
    assert api.recover_logdir(url) == []


def test_a_run_failing_the_last_look_is_taken_out_alone_and_the_others_are_reduced(s3_bucket, tmp_path, monkeypatch):
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    planned = api.plan(url, pol, quiet_period=0)
    first, second = sorted(planned.runs, key=lambda rp: rp.run)
    victim = next(a.path for a in first.actions if a.kind == "delete")
    rfs = RemoteFS(url)
    log = []
    _spy(monkeypatch, log)
    # written again after its backup and manifest: its new bytes have no backup, never deleted
    faults.arm("reduce.verify", lambda: (log.append(("fp", "reduce.verify")),
                                         rfs.write_bytes(victim, b"new bytes after the backup")))
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0)
    by = {o.run: o for o in rep.outcomes}
    assert (by[first.run].status, by[first.run].code) == (Outcome.ROLLED_BACK, Failure.CHANGED_SINCE_BACKUP)
    assert by[second.run].status == Outcome.VERIFIED, by[second.run].reason
    assert rfs.read_bytes(victim) == b"new bytes after the backup"
    # one transaction: the commit record and the deletes for the run left, no rollback record
    assert [x for x in log if x[0] == "txn"] == [("txn", "ObjectBatchReduce")]
    assert [s for k, s in log if k == "journal"] == ["swapping"]
    assert not [s for k, s in log if k == "step" and s in ("record:rollback", "rollback")]
    ops = {m["run"] for m in api.operations(url) if m["kind"] == "reduce"}
    # the run taken out keeps the manifest naming its victim's backup, that original's only copy
    # (review R8 F3: status shows it, restore and purge reach it); its reason says so
    assert ops == {first.run, second.run}
    assert victim.split("/", 1)[-1] in by[first.run].reason and "backups are kept" in by[first.run].reason
    assert _keys(url, f"{STATE}/journal/") == [] and _keys(url, f"{STATE}/locks/") == []
