"""An operation killed, then its logdir renamed (``mv L L2``) and a NEW logdir made at the old path
L holding a run of the same name (review R10 F1). Recovery in L2 settles it where its state is
now: its journal names its vault at the old path (``L/.tb-footprint``), which is L2's own state
folder (the one holding the journal), never the new logdir's state at that path. L2 ends as it
was, or retired/reduced and restorable, byte for byte; nothing at L is touched. Before: recovery
refused it (foreign_vault), the run left half in the vault, or its manifest was hidden."""
import os
import subprocess
import sys

import pytest

from conftest import REPO, copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine.retire import RETIRE_STEPS

RETIRE = """
import sys
from tb_footprint_plugin import api
api.retire(sys.argv[1], api.retire_rule(runs=["train"], include_nested=True), dry_run=False,
           backup_dir=(sys.argv[2] or None))
"""
REDUCE = """
import sys
from tb_footprint_plugin import api
api.reduce_logdir(sys.argv[1], backup_dir=(sys.argv[2] or None), policy="archive", dry_run=False, quiet_period=0)
"""
#: every retire step a run of one file system reaches (a move by rename: no copy to delete)
RETIRE_KILLS = [s for s in RETIRE_STEPS if s != "retire.mid_delete"]
REDUCE_KILLS = ["reduce.backup", "reduce.verify", "reduce.swap_record", "reduce.swap",
                "reduce.commit"]


def _killed(script, logdir, vault, step):
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", script, str(logdir), vault or ""], env=env, timeout=300)
    assert p.returncode == -9, f"{step} not reached (rc {p.returncode})"


def _settled(outcomes) -> bool:
    """Recovery settled the operation: completed or rolled back, nothing refused or failed."""
    acts = [o.action for o in outcomes]
    return any(a in (Recovery.COMPLETED, Recovery.ROLLED_BACK) for a in acts) and not any(
        a in (Recovery.REFUSED, Recovery.FAILED) for a in acts)


def _rename_and_make_new(tmp_path, logdir, fixture):
    l2 = tmp_path / "L2"
    os.rename(logdir, l2)
    other = user_files(copy_real(fixture, logdir))
    return l2, other


@pytest.mark.parametrize("external", [False, True])
def test_whole_retirement_then_rename(tmp_path, external):
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    vault = str(tmp_path / "V") if external else None
    before = user_files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False,
                     backup_dir=vault)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    l2, other = _rename_and_make_new(tmp_path, logdir, "tf/keras_profiled")
    outs = api.restore(str(l2), run="train", backup_dir=vault)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(l2) == before
    assert user_files(logdir) == other


@pytest.mark.parametrize("external", [False, True])
@pytest.mark.parametrize("step", RETIRE_KILLS)
def test_killed_retirement_then_rename(tmp_path, step, external):
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    vault = str(tmp_path / "V") if external else None
    before = user_files(logdir)
    _killed(RETIRE, logdir, vault, step)
    l2, other = _rename_and_make_new(tmp_path, logdir, "tf/keras_profiled")
    rec = api.recover_logdir(str(l2), backup_dir=vault)
    assert _settled(rec), rec
    assert api.status(str(l2), backup_dir=vault)["unfinished_operations"] == []
    assert user_files(logdir) == other, "the new logdir at the old path was touched"
    now = user_files(l2)
    retired = [r["run"] for r in api.retired(str(l2), backup_dir=vault)]
    if retired:  # retired and verified: the rest as it was, and the run restorable
        assert retired == ["train"] and now == {k: v for k, v in before.items() if not k.startswith("train")}
        outs = api.restore(str(l2), run="train", backup_dir=vault)
        assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(l2) == before
    assert user_files(logdir) == other


@pytest.mark.parametrize("external", [False, True])
@pytest.mark.parametrize("step", REDUCE_KILLS)
def test_killed_reduction_then_rename(tmp_path, step, external):
    logdir = copy_real("jax/profiled", tmp_path / "L")
    vault = str(tmp_path / "V") if external else None
    before = user_files(logdir)
    _killed(REDUCE, logdir, vault, step)
    l2, other = _rename_and_make_new(tmp_path, logdir, "jax/profiled")
    rec = api.recover_logdir(str(l2), backup_dir=vault)
    assert _settled(rec), rec
    assert api.status(str(l2), backup_dir=vault)["unfinished_operations"] == []
    assert user_files(logdir) == other, "the new logdir at the old path was touched"
    assert api.status(str(logdir), backup_dir=vault)["operations"] == []  # none of L2's
    outs = api.restore(str(l2), backup_dir=vault)
    assert all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert user_files(l2) == before
    assert user_files(logdir) == other
