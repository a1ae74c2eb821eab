"""engine/txn.py: the one driver of a transaction's named steps (issue #26).

A spy transaction logs every call; its journal is a list of records. The driver must run the
steps in ``STEPS`` order, journal the commit record before the swap and the rollback record
before the rollback, hit each step's failpoint after it, honour a cancel up to the commit record
and never after, and leave an injected crash unrolled-back."""
from __future__ import annotations

import pytest

from tb_footprint_plugin.engine import faults, txn
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, TransactionError


class Spy(txn.Txn):
    errors = (TransactionError, Cancelled, OSError)
    rollback_errors = (OSError,)

    def __init__(self, fail_at=None, on=None, refuse=False, rollback_fails=False, settled_at=None):
        self.log, self.journal_records = [], []
        self.fail_at, self.on, self.refuse, self.rollback_fails = fail_at, on or {}, refuse, rollback_fails
        self.settled_at = settled_at
        self.outcome = None

    def _step(self, name):
        self.log.append(name)
        if name in self.on:
            self.on[name]()
        if name == self.fail_at:
            raise TransactionError(f"failed at {name}")
        if name == self.settled_at:
            raise txn.Settled()  # every entry taken out and settled on its own

    def journal(self, report):
        if self.refuse:
            self.log.append("refused")
            raise txn.NotStarted()
        self.journal_records.append("begin")
        self._step("journal")

    def backup(self, report):
        self._step("backup")

    def stage(self, report):
        self._step("stage")

    def transform(self, report):
        self._step("transform")

    def verify(self, report):
        self._step("verify")

    def last_look(self):
        self._step("last_look")

    def record(self, step):
        self.log.append(f"record:{step}")
        self.journal_records.append(step)

    def swap(self, report):
        self._step("swap")

    def commit(self, report):
        self._step("commit")

    def journaled(self):
        return bool(self.journal_records)

    def committed(self):
        return "swap" in self.journal_records

    def failed(self, error):
        self.outcome = str(error)

    def rollback(self, committed):
        self.log.append(f"rollback:{committed}")
        if self.rollback_fails:
            raise OSError("store unreachable")

    def incomplete(self, error):
        self.outcome += f"; rollback incomplete ({error})"

    def unwind(self):
        self.log.append("unwind")

    def end(self):
        self.log.append("end")


@pytest.fixture(autouse=True)
def _fired(monkeypatch):
    fired = []
    monkeypatch.setattr(faults, "hit", lambda name: fired.append(name))
    yield fired


def _steps(log):
    return [x for x in log if x in txn.STEPS]


def test_steps_in_order_each_destructive_one_after_its_record(_fired):
    t = Spy()
    txn.run(t, CancelToken())
    assert _steps(t.log) == list(txn.STEPS)
    assert t.journal_records == ["begin", "swap"]
    # the swap comes after the last look and its (commit) record, nothing destructive before
    assert t.log.index("last_look") < t.log.index("record:swap") < t.log.index("swap")
    assert "rollback:False" not in t.log and "rollback:True" not in t.log
    assert t.log[-2:] == ["unwind", "end"]
    # each step's failpoint after it, the swap record's between the record and the swap
    assert _fired == ["reduce.journal", "reduce.backup", "reduce.stage", "reduce.verify",
                      "reduce.swap_record", "reduce.swap", "reduce.commit"]


def test_a_failpoint_fires_at_its_instant(monkeypatch):
    t = Spy()
    seen = {}

    def hit(name):
        seen[name] = list(t.log)

    monkeypatch.setattr(faults, "hit", hit)
    txn.run(t, CancelToken())
    assert seen["reduce.swap_record"][-1] == "record:swap"
    assert "swap" not in seen["reduce.swap_record"]
    assert seen["reduce.verify"][-1] == "verify" and "last_look" not in seen["reduce.verify"]


@pytest.mark.parametrize("step", ["journal", "backup", "stage", "transform", "verify", "last_look"])
def test_a_failure_before_the_commit_record_rolls_back_after_its_record(step):
    t = Spy(fail_at=step)
    txn.run(t, CancelToken())
    assert "swap" not in t.log and "record:swap" not in t.log
    assert t.log.index("unwind") < t.log.index("record:rollback") < t.log.index("rollback:False")
    assert t.journal_records[-1] == "rollback"
    assert t.outcome == f"failed at {step}"


def test_a_failure_past_the_commit_record_rolls_back_committed():
    t = Spy(fail_at="swap")
    txn.run(t, CancelToken())
    assert t.log.index("record:swap") < t.log.index("record:rollback") < t.log.index("rollback:True")
    assert "commit" not in t.log


@pytest.mark.parametrize("step", ["journal", "backup", "stage", "transform", "verify"])
def test_a_cancel_is_honoured_after_each_step_up_to_verify(step):
    cancel = CancelToken()
    t = Spy(on={step: cancel.cancel})
    txn.run(t, cancel)
    after = txn.STEPS[txn.STEPS.index(step) + 1:]
    assert not set(after) & set(t.log), t.log
    assert "rollback:False" in t.log and "cancelled before the commit point" in t.outcome


def test_a_cancel_during_verify_is_honoured_after_the_last_look():
    # no check between verify and the last look: a bucket's manifest is followed by its last look
    cancel = CancelToken()
    t = Spy(on={"verify": cancel.cancel})
    txn.run(t, cancel)
    assert t.log.index("verify") < t.log.index("last_look") < t.log.index("rollback:False")
    assert "record:swap" not in t.log


def test_a_cancel_during_the_last_look_stops_before_the_commit_record():
    cancel = CancelToken()
    t = Spy(on={"last_look": cancel.cancel})
    txn.run(t, cancel)
    assert "record:swap" not in t.log and "rollback:False" in t.log


@pytest.mark.parametrize("step", ["swap", "commit"])
def test_no_cancel_past_the_commit_record(step):
    cancel = CancelToken()
    t = Spy(on={step: cancel.cancel})
    txn.run(t, cancel)
    assert _steps(t.log) == list(txn.STEPS)
    assert not [x for x in t.log if x.startswith("rollback")]


def test_an_injected_crash_is_not_rolled_back(monkeypatch):
    def hit(name):
        if name == "reduce.stage":
            raise faults.InjectedCrash("injected crash at reduce.stage")

    monkeypatch.setattr(faults, "hit", hit)
    t = Spy()
    with pytest.raises(faults.InjectedCrash):
        txn.run(t, CancelToken())
    assert not [x for x in t.log if x.startswith("rollback") or x.startswith("record:")]
    assert t.log[-2:] == ["unwind", "end"]


@pytest.mark.parametrize("errors", [(Exception,), (OSError,)], ids=["any", "store_failures"])
def test_an_injected_failure_is_rolled_back_whatever_failures_the_store_catches(monkeypatch, errors):
    # one rule on every store (#26): a disk's transaction catches any failure, a bucket's its
    # store's failures; an injected failure is a failure on both, rolled back after its record
    def hit(name):
        if name == "reduce.stage":
            raise faults.InjectedFault("injected failure at reduce.stage")

    monkeypatch.setattr(faults, "hit", hit)
    t = Spy()
    t.errors = errors
    txn.run(t, CancelToken())
    assert t.log.index("record:rollback") < t.log.index("rollback:False")
    assert t.outcome == "injected failure at reduce.stage"


def test_a_transaction_that_never_rolls_back_lets_an_injected_failure_through(monkeypatch):
    # a purge past its intent is finished by the next start, never undone: any failure propagates
    def hit(name):
        if name == "reduce.stage":
            raise faults.InjectedFault("injected failure at reduce.stage")

    monkeypatch.setattr(faults, "hit", hit)
    t = Spy()
    t.rolls_back = False
    with pytest.raises(faults.InjectedFault):
        txn.run(t, CancelToken())
    assert not [x for x in t.log if x.startswith("rollback") or x.startswith("record:")]


def test_a_refused_start_is_not_rolled_back():
    t = Spy(refuse=True)
    txn.run(t, CancelToken())
    assert t.log == ["refused", "unwind", "end"]


@pytest.mark.parametrize("step", ["backup", "verify", "last_look"])
def test_a_step_that_settles_every_entry_ends_the_transaction_there(step, _fired):
    # a batch whose every run was taken out (each rolled back alone): no further step, no record,
    # no rollback, no failpoint of that step; what the transaction holds is still left
    t = Spy(settled_at=step)
    txn.run(t, CancelToken())
    assert t.log[-3:] == [step, "unwind", "end"]
    assert t.journal_records == ["begin"]
    assert not [x for x in t.log if x.startswith("rollback") or x.startswith("record:")]
    assert f"reduce.{step}" not in _fired and "reduce.swap_record" not in _fired


def test_a_rollback_that_fails_is_said_incomplete():
    t = Spy(fail_at="verify", rollback_fails=True)
    txn.run(t, CancelToken())
    assert t.outcome == "failed at verify; rollback incomplete (store unreachable)"
    assert t.log[-2:] == ["unwind", "end"]


def test_an_undeclared_step_has_no_failpoint():
    assert Spy().failpoint("transform") is None  # 'reduce.transform' is not in faults.STEPS
    assert Spy().failpoint("swap_record") == "reduce.swap_record"
