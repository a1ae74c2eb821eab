"""A bucket run's rewrite is ``bucket_rewrite.ObjectReduce`` run by the one driver ``engine.txn.run``
(issue #26, J6's plan step 2): its steps in ``txn.STEPS`` order, the journal object's records
and the failpoints at the instants the crash matrix fires them, the rollback record before the
rollback. On moto's S3 (``tests/objstore_servers.py``). The request sequence and journal bodies
were compared with the code before (27 and 22 S3 requests for a lossless and an archive run, and
three rollbacks: the same, modulo ids, times and checksums) when this landed."""
from __future__ import annotations

import pytest

from test_objstore import _write_rewrite_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import bucket_rewrite, faults, journal_object, txn

pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("txn") / "logs")


def _spy(monkeypatch, log):
    """Log the driver's steps on the transaction it runs, the journal object's records, and
    every bucket reduce failpoint as it fires."""
    real_run = txn.run

    def run(t, cancel, report=None):
        log.append(("txn", type(t).__name__))
        for step in (*txn.STEPS, "record", "rollback"):
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


def test_a_bucket_rewrite_is_the_drivers_steps_in_order(s3_bucket, rewrite_logdir, monkeypatch):
    url = s3_bucket.upload(rewrite_logdir, "ok")
    log = []
    _spy(monkeypatch, log)
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"],
                             verify_backends=("python",)).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    assert log[0] == ("txn", "ObjectReduce")
    assert [s for k, s in log if k == "step" and s in txn.STEPS] == list(txn.STEPS)
    # the journal object's records, each where the step puts it; the commit record before the swap
    assert [(k, s) for k, s in log if k in ("journal", "step") or s in ("reduce.swap_record", "reduce.swap")] == [
        ("step", "journal"), ("step", "backup"), ("step", "stage"), ("journal", "staged"),
        ("step", "transform"), ("journal", "uploaded"), ("step", "verify"),
        ("step", "record:swap"), ("journal", "swapping"), ("fp", "reduce.swap_record"),
        ("step", "swap"), ("fp", "reduce.swap"), ("step", "commit")]
    # the failpoints in the crash matrix's order (two originals: two backup copies)
    assert [s for k, s in log if k == "fp" and s != "reduce.mid_swap"] == [
        "reduce.journal", "reduce.backup_copy", "reduce.backup_copy", "reduce.backup", "reduce.stage",
        "reduce.upload", "reduce.verify", "reduce.swap_record", "reduce.swap"]


def test_a_refused_swap_is_rolled_back_after_its_record(s3_bucket, rewrite_logdir, monkeypatch):
    url = s3_bucket.upload(rewrite_logdir, "rb")
    before = s3_bucket.hashes("rb")
    log = []
    _spy(monkeypatch, log)
    faults.arm("reduce.swap_record", "enospc")  # past the commit record: undone from the backups
    real = bucket_rewrite.rollback_entry
    monkeypatch.setattr(bucket_rewrite, "rollback_entry",
                        lambda *a, **kw: (log.append(("rollback_entry", kw["deleted"])), real(*a, **kw))[1])
    (o,) = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"],
                             verify_backends=("python",)).outcomes
    assert (o.status, o.code) == (Outcome.ROLLED_BACK, Failure.NO_SPACE), o.reason
    tail = log[log.index(("journal", "swapping")):]
    assert tail == [("journal", "swapping"), ("step", "record:rollback"), ("journal", "rolling_back"),
                    ("step", "rollback"), ("rollback_entry", True)]
    assert "swap" not in [s for k, s in log if k == "step"]
    after = s3_bucket.hashes("rb")
    assert {k: v for k, v in after.items() if "/.tb-footprint/" not in f"/{k}"} == \
        {k: v for k, v in before.items() if "/.tb-footprint/" not in f"/{k}"}
