"""A run's reduce on a disk is ``transaction.LocalReduce`` run by the one driver ``engine.txn.run``
(issue #26, J6's plan step 1, the local half): its steps in ``txn.STEPS`` order, the journal's
records and the failpoints at the instants the crash matrix fires them (``reduce.backup_record``
and ``reduce.stage_record`` between a file's record and its action, ``reduce.commit`` between the
commit record and the journal's close), the swap after its record, the rollback after its own."""
from __future__ import annotations

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults, reduce_journal, transaction, txn

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _spy(monkeypatch, log):
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
    real_append = reduce_journal.append_record
    for mod in (transaction, reduce_journal):  # the steps' records, and the rollback's (``append_rollback``)
        monkeypatch.setattr(mod, "append_record",
                            lambda j, rec, sync=True: (log.append(("rec", rec["type"])), real_append(j, rec, sync))[1])
    for name in ("apply_swap", "rollback"):
        real = getattr(transaction, name)
        monkeypatch.setattr(transaction, name, lambda *a, _r=real, _n=name, **kw: (log.append(("do", _n)),
                                                                                   _r(*a, **kw))[1])
    for name in faults.steps("reduce", faults.LOCAL):
        if not name.startswith("reduce.pack_") and name != "reduce.mid_swap":
            faults.arm(name, lambda _n=name: log.append(("fp", _n)))


def test_a_local_reduce_is_the_drivers_steps_in_order(tmp_path, monkeypatch):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    log = []
    _spy(monkeypatch, log)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    (o,) = [o for o in rep.outcomes if o.op_id]
    assert o.status == Outcome.VERIFIED, o.reason
    assert ("txn", "LocalReduce") in log
    assert [s for k, s in log if k == "step" and s in txn.STEPS] == list(txn.STEPS)
    recs = [s for k, s in log if k == "rec"]
    assert recs[-4:] == ["verified", "swap", "swapped", "commit"] and "rollback" not in recs
    # each file's record before its failpoint and its action; the swap after its record
    order = [x for x in log if x[0] in ("rec", "do", "fp") or x[1] in ("record:swap",)]
    i = order.index(("rec", "swap"))
    assert order[i - 1:i + 5] == [("step", "record:swap"), ("rec", "swap"), ("fp", "reduce.swap_record"),
                                  ("do", "apply_swap"), ("rec", "swapped"), ("fp", "reduce.swap")]
    assert order[-2:] == [("rec", "commit"), ("fp", "reduce.commit")]
    assert recs.count("backup") > 0
    for kind in ("backup", "stage"):
        assert [s for k, s in log if k == "fp"].count(f"reduce.{kind}_record") == recs.count(kind)
    fps = [s for k, s in log if k == "fp" and not s.endswith("_record")]
    assert fps == ["reduce.journal", "reduce.backup", "reduce.stage", "reduce.verify", "reduce.swap", "reduce.commit"]


@pytest.mark.parametrize("step,action", [("reduce.swap_record", "enospc"), ("reduce.stage", "raise")])
def test_a_failure_is_rolled_back_after_its_record(tmp_path, monkeypatch, step, action):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    log = []
    _spy(monkeypatch, log)
    faults.arm(step, action)  # a disk's engine rolls back an injected raise too, as it always did
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    (o,) = [o for o in rep.outcomes if o.op_id]
    assert o.status == Outcome.ROLLED_BACK, o.reason
    assert o.code == (Failure.NO_SPACE if action == "enospc" else Failure.ERROR)
    tail = log[log.index(("step", "record:rollback")):]
    assert tail[:4] == [("step", "record:rollback"), ("rec", "rollback"), ("step", "rollback"), ("do", "rollback")]
    assert ("do", "apply_swap") not in log
    assert user_files(logdir) == before
