"""A rollback that does not finish says one sentence on every store and verb
(``recovery_rules.rollback_incomplete_reason``): why the run was rolled back, what stopped the
rollback, and that the journal is kept and the next start settles it. A disk's reduce and
retirement said ", will be retried on next start", a bucket's "; the journal is kept and the next
start settles it". The next start does settle it: every file as it was."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures
from test_recovery_rules import place  # noqa: F401 - the fixture: a fresh logdir on each store

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import bucket_retire, faults, retire, transaction
from tb_footprint_plugin.engine.recovery_rules import ROLLBACK_LEFT_TO_RECOVERY, rollback_incomplete_reason
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

FAILURE = "injected: the step failed"
STOPPED = "injected: the rollback could not write"


def _fail(*a, **kw):
    raise OSError(FAILURE)


def _stop(*a, **kw):
    raise OSError(STOPPED)


def _user(st) -> dict:
    return {e.key: st.read_all(e.key) for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint")}


def _said_once_and_settled(o, url, monkeypatch, files, before) -> None:
    assert (o.status, o.code) == (Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE), o.to_dict()
    assert o.reason.startswith(FAILURE) and o.reason.endswith(f"; {ROLLBACK_LEFT_TO_RECOVERY}"), o.reason
    assert f"; rollback incomplete ({STOPPED}); " in o.reason, o.reason
    assert o.reason.count(ROLLBACK_LEFT_TO_RECOVERY) == 1, o.reason
    monkeypatch.undo()  # the next start, with nothing in its way
    api.recover_logdir(url)
    assert files() == before


@pytest.mark.parametrize("store", KINDS)
def test_a_retirement_whose_rollback_stops_says_the_one_sentence(store, scalar_runs_on, monkeypatch):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    before = _user(st)
    faults.arm("retire.move", _fail)  # every file of the run in the vault, none removed yet
    monkeypatch.setattr(retire, "rollback_retire", _stop)
    monkeypatch.setattr(bucket_retire, "rollback", _stop)
    (o,) = [o for o in api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
            if o.run == "b"]
    faults.disarm_all()
    _said_once_and_settled(o, url, monkeypatch, lambda: _user(st), before)
    assert api.retired(url) == []


def test_a_disk_reduction_whose_rollback_stops_says_the_one_sentence(place, monkeypatch):
    url, files = place("posix")
    before = files()
    faults.arm("reduce.backup", _fail)
    monkeypatch.setattr(transaction, "rollback", _stop)
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()
    (o,) = rep.outcomes
    _said_once_and_settled(o, url, monkeypatch, files, before)


def test_the_sentence_names_why_and_what_stopped_the_rollback():
    assert rollback_incomplete_reason("why", "what") == \
        "why; rollback incomplete (what); the journal is kept and the next start settles it"
