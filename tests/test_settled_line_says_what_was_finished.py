"""What an interrupt's settling says of each operation it finished (``tb-footprint reduce``, Ctrl-C):
a reduction past its commit point is "reduced and verified"; a restore a crash stopped midway and
this start finished is a restore finished — it said "reduced and verified" of every finished
operation, whatever it was (a restore, a purge, a vault's upkeep)."""
import pytest

from helpers_crash import Killed, kill
from test_vault_remote import make_logdir
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_finished_restore_is_not_said_reduced(tmp_path):
    logdir = make_logdir(tmp_path)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok
    faults.arm("restore.file", kill)
    with pytest.raises(Killed):
        api.restore(str(logdir))
    faults.disarm_all()
    rows = api.settle_interrupted(str(logdir), None, policy="archive")
    done = [r for r in rows if r["action"] == Recovery.COMPLETED]
    assert done and all(r["kind"] != "reduce" for r in done), rows
    lines = [cli._recovered_line(r) for r in done]
    assert all("reduced" not in line and "finished" in line for line in lines), lines


def test_a_reduction_past_its_commit_point_is_said_reduced_and_verified(tmp_path):
    logdir = make_logdir(tmp_path)
    faults.arm("reduce.commit", kill)
    with pytest.raises(Killed):
        api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    faults.disarm_all()
    rows = api.settle_interrupted(str(logdir), None, policy="archive")
    done = [r for r in rows if r["action"] == Recovery.COMPLETED and r["code"] == Finding.RECOVERED]
    assert done and all(r["kind"] == "reduce" for r in done), rows
    assert all("reduced and verified" in cli._recovered_line(r) for r in done)
    # and its backups' compaction, noted before its swap (R8 F2), is finished by the same settling
    compacted = [r for r in rows if r["code"] == Finding.COMPACTION_FINISHED]
    assert [r["op_id"] for r in compacted] == [r["op_id"] for r in done], rows
    assert all("compacted now" in cli._recovered_line(r) for r in compacted)
