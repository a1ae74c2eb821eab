"""Review R16 F1: ``status`` sent the user to ``recover`` for a backup gone from the vault, and
``recover`` then printed "no damage found" above its own ``still: [backup_damaged]`` line.
Recover is offered only for what it settles (``health.RECOVER_SETTLES``), and never says
"no damage found" above damage it lists."""
import os
import shutil

from conftest import copy_real
from helpers_cli import cli_env, run_cli as tbf
from test_issue29_gaps_purge import reduced_copies
from tb_footprint_plugin import api


def _drop_blobs(logdir):
    gone = 0  # loose blobs and the packs' data: whichever the vault used
    for top in ("blobs", os.path.join("packs", "data")):
        for root, _dirs, names in os.walk(logdir / ".tb-footprint" / top):
            for n in names:
                os.unlink(os.path.join(root, n))
                gone += 1
    assert gone, "no backup blob to take away"


def test_missing_backup_is_not_sent_to_recover(tmp_path):
    logdir = reduced_copies(tmp_path, ("a", "b"))
    _drop_blobs(logdir)
    left = api.unfinished(str(logdir))
    assert any(p["code"] == "backup_damaged" for p in left["problems"]), left
    assert left["settle_command"] is None, left
    p = tbf("status", logdir)
    assert "backup_damaged" in p.stdout and "tb-footprint recover" not in p.stdout, p.stdout
    p = tbf("recover", logdir)
    assert "still: [backup_damaged]" in p.stdout, p.stdout
    assert "no damage found" not in p.stdout, p.stdout


def test_unfinished_operation_is_still_sent_to_recover(tmp_path):
    """The advice stays where recover does settle: a reduce killed (SIGKILL) mid-swap."""
    logdir = tmp_path / "logdir"
    shutil.copytree(copy_real("tf/keras_profiled", tmp_path / "src") / "train", logdir / "a")
    env = dict(cli_env(), TB_FOOTPRINT_FAILPOINTS="reduce.swap=kill")
    p = tbf("reduce", logdir, "--verify", "python", "--quiet-period", "0", "-y", env=env)
    assert p.returncode == -9, p.stdout + p.stderr
    left = api.unfinished(str(logdir))
    assert left["unfinished_operations"], left
    assert left["settle_command"] and "recover" in left["settle_command"], left
