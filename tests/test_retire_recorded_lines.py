"""A retirement and its restore each keep one change-log line (and the restore its manifest)
when a kill comes between their record and their line (#26: one line per operation, never two,
never none — the check every recovery asks, ``ChangeLog.append_once``):

- a retirement killed after its verified manifest, before its line: the next start finds it
  recorded (retired) and writes its line, at the manifest's finish time; never twice;
- a restore of a retirement killed right after the retirement was marked restored
  (``unretire.manifest``): the next start writes the restore's manifest and line; never twice."""
import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome, Recovery
from tb_footprint_plugin.engine import faults, retire_tree

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _logdir(tmp_path):
    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / "b")) as w:
        for s in range(5):
            w.scalar("loss", s, 1.0 / (s + 1))
    return str(logdir)


def _lines(logdir, kind):
    return [e for e in api.history(logdir) if e["kind"] == kind]


def test_a_retirement_killed_before_its_line_gets_it_once(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path)

    def killed(*_a, **_k):
        raise Killed()
    with monkeypatch.context() as mp:
        mp.setattr(retire_tree, "append_history", killed)  # after the verified manifest, before its line
        with pytest.raises(Killed):
            api.retire(logdir, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)
    assert _lines(logdir, "retire") == []
    (m,) = [m for m in api.operations(logdir) if m["kind"] == "retire"]

    outs = api.recover_logdir(logdir)
    assert [(o.op_id, o.action) for o in outs] == [(m["op_id"], Recovery.COMPLETED)], [vars(o) for o in outs]
    assert "its change-log line written" in outs[0].detail
    (line,) = _lines(logdir, "retire")
    assert (line["op_id"], line["outcome"], line["run"], line["time"]) == \
        (m["op_id"], "verified", "b", m["finished_at"]), line
    assert api.recover_logdir(logdir) == [] and len(_lines(logdir, "retire")) == 1
    assert [r["run"] for r in api.retired(logdir)] == ["b"]


def test_a_restore_killed_after_the_retirement_was_marked_restored_gets_its_record_once(tmp_path):
    logdir = _logdir(tmp_path)
    rep = api.retire(logdir, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    faults.arm("unretire.manifest", kill)
    with pytest.raises(Killed):
        api.restore(logdir, run="b")
    faults.disarm_all()
    assert _lines(logdir, "restore") == []

    outs = api.recover_logdir(logdir)
    assert [o.action for o in outs] == [Recovery.COMPLETED], [vars(x) for x in outs]
    (line,) = _lines(logdir, "restore")
    assert (line["of_op"], line["reason"]) == (o.op_id, f"restored retirement {o.op_id}"), line
    (made,) = [m for m in api.operations(logdir) if m["kind"] == "restore"]
    assert made["op_id"] == line["op_id"] and made["of_op"] == o.op_id, made
    assert api.recover_logdir(logdir) == [] and len(_lines(logdir, "restore")) == 1
    assert api.retired(logdir) == []
