"""Review R20 (note on 1d08bfc): ``restore``'s up-front name check let pass every name a
recorded retirement's ``takes_along`` lists, as the manifest says it. A manifest (untrusted
input: written by older code, copied or planted) may list a name outside its run: that name then
passed the check, ``restore LD other c --yes`` restored ``other`` and exited 2 on ``c``. Only the
names inside the retired run (``retire_rules.taken_along``, as ``api.summarize_operations`` gives
them) pass now."""
import os

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import retire as retire_module
from tb_footprint_plugin.engine.front import open_engine


def test_a_name_outside_the_retired_run_is_a_typo_before_anything_is_restored(tmp_path, monkeypatch):
    logdir = tmp_path / "ld"
    for run in ("b", "c"):
        with synth.EventWriter(str(logdir / run)) as w:
            w.scalar("loss", 1, 1.0)
    with monkeypatch.context() as m:  # a manifest naming a run outside b, as older code wrote one
        m.setattr(retire_module, "refused_names", lambda run, along: None)
        o = open_engine(str(logdir), quiet_period=0).retire_run("b", takes_along=["c"], rule={"run_glob": "b"},
                                                                quiet_period=0)
    assert str(o.status) == "verified", o.reason
    assert "c" in next(m for m in api.operations(str(logdir)) if m.get("kind") == "retire")["takes_along"]
    copy_real("tf/keras_profiled/train", logdir / "other")
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0).ok
    assert [o["run"] for o in api.restorable(str(logdir))] == ["other"]

    p = cli("restore", logdir, "other", "c", "--yes")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert [o["run"] for o in api.restorable(str(logdir))] == ["other"], \
        ("'other' was restored by a command that exited 2", p.stdout, p.stderr)
    assert "'c'" in p.stderr and "nothing was restored" in p.stderr, p.stderr
    assert not os.path.exists(logdir / "b") and os.path.isdir(logdir / "c")
