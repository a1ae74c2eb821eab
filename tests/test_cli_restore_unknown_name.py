"""``restore A TYPO`` refuses before anything (review R17 F15): it restored A, then exited 2 —
which the README's table says means nothing changed — and its dry run said nothing of TYPO. Now a
named run of which no operation is recorded is a usage error up front, dry run included, naming
it; a run restored already still says "already restored"; a nested run taken along by its parent's
retirement is still found."""
import os

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api


def _two_reduced(tmp_path):
    logdir = tmp_path / "ld"
    for n in ("sp ace", "other"):
        copy_real("tf/keras_profiled/train", logdir / n)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0)
    assert sorted(o.run for o in rep.outcomes if o.status == "verified") == ["other", "sp ace"]
    return logdir


def test_a_typo_among_the_names_restores_nothing_and_is_named(tmp_path):
    logdir = _two_reduced(tmp_path)
    p = cli("restore", logdir, "sp ace", "nosuchrun", "-n")
    assert p.returncode == 2 and "nosuchrun" in p.stderr, (p.stdout, p.stderr)
    p = cli("restore", logdir, "sp ace", "nosuchrun", "--yes")
    assert p.returncode == 2 and "nosuchrun" in p.stderr and "nothing was restored" in p.stderr, (p.stdout, p.stderr)
    assert len(api.restorable(str(logdir))) == 2, "a run was restored by a command that exited 2"
    p = cli("restore", logdir, "--", "sp ace", "--yes")
    assert p.returncode == 2 and "`--yes` after `--` is taken as a run name" in p.stderr, p.stderr
    assert len(api.restorable(str(logdir))) == 2


def test_a_run_restored_already_still_says_so(tmp_path):
    logdir = _two_reduced(tmp_path)
    assert cli("restore", logdir, "sp ace", "--yes").returncode == 0
    p = cli("restore", logdir, "sp ace", "other", "--yes")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "already" in p.stdout and not api.restorable(str(logdir)), p.stdout


def test_a_nested_run_taken_along_is_found_by_its_name(tmp_path):
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "exp")
    copy_real("tf/keras_profiled/train", logdir / "exp" / "eval")
    rep = api.retire(str(logdir), api.retire_rule(runs=["exp"], include_nested=True), dry_run=False, quiet_period=0)
    assert rep.ok, rep.to_dict()
    p = cli("restore", logdir, "exp/eval", "--yes")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert os.path.isdir(logdir / "exp" / "eval")
