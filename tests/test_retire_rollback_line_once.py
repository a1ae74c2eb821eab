"""A retirement rolled back writes its change-log line once, even when recovery redoes the
rollback: a kill between the line and the journal's removal leaves the journal, and the next
start rolls back again (idempotent) — its line is the first attempt's (``ChangeLog.append_once``,
the one check of every recovery, as a reduction's rollback and a bucket's)."""
import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.journal import Journal

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_retirement_rolled_back_again_on_recovery_keeps_one_line(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / "b")) as w:
        for s in range(5):
            w.scalar("loss", s, 1.0 / (s + 1))
    faults.arm("retire.move", "raise")  # every file in the vault: a failure rolls the run back
    with monkeypatch.context() as mp:
        # a kill right after the rollback's manifest and line: the journal stays
        mp.setattr(Journal, "close", lambda self, durable=True: None)
        rep = api.retire(str(logdir), api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)
    faults.disarm_all()
    (o,) = rep.outcomes
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    lines = [e for e in api.history(str(logdir)) if e["kind"] == "retire"]
    assert [(e["op_id"], e["outcome"]) for e in lines] == [(o.op_id, "rolled_back")], lines

    outs = api.recover_logdir(str(logdir))
    assert [(x.op_id, x.action) for x in outs] == [(o.op_id, Recovery.ROLLED_BACK)], [x.to_dict() for x in outs]
    lines = [e for e in api.history(str(logdir)) if e["kind"] == "retire"]
    assert [(e["op_id"], e["outcome"]) for e in lines] == [(o.op_id, "rolled_back")], lines
    assert api.recover_logdir(str(logdir)) == []
