"""``restore LD other other/typo --yes`` restored ``other``, then exited 2 on the typo (review R19
F2): the up-front name check took any name under a recorded run as known. Only a run a recorded
retirement took along (its ``takes_along``, as ``api.operations`` reads it) may pass that way."""
import os

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api


def test_a_typo_under_a_recorded_run_restores_nothing(tmp_path):
    logdir = tmp_path / "ld"
    for n in ("sp ace", "other"):
        copy_real("tf/keras_profiled/train", logdir / n)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0).ok
    p = cli("restore", logdir, "other", "other/typo", "--yes")
    assert p.returncode == 2 and "other/typo" in p.stderr and "nothing was restored" in p.stderr, (p.stdout, p.stderr)
    assert len(api.restorable(str(logdir))) == 2, ("a run was restored by a command that exited 2", p.stdout, p.stderr)


def test_a_typo_beside_a_run_taken_along_restores_nothing(tmp_path):
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "exp")
    copy_real("tf/keras_profiled/train", logdir / "exp" / "eval")
    assert api.retire(str(logdir), api.retire_rule(runs=["exp"], include_nested=True), dry_run=False,
                      quiet_period=0).ok
    p = cli("restore", logdir, "exp/eval", "exp/evl", "--yes")
    assert p.returncode == 2 and "exp/evl" in p.stderr, (p.stdout, p.stderr)
    assert not os.path.exists(logdir / "exp") and api.retired(str(logdir)), "a retired run came back on exit 2"
    p = cli("restore", logdir, "exp/eval", "--yes")  # the run taken along still passes the check
    assert p.returncode == 0 and os.path.isdir(logdir / "exp" / "eval"), (p.stdout, p.stderr)
