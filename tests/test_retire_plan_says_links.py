"""The retire plan says a run holding a symbolic link is not retired, before anyone says yes
(review R17 F7): the engine's inventory refuses a link anywhere in the tree (a retirement never
follows or moves one), so the dry run that called the run "selected" did not say what the
retirement then did ("failed [refused]")."""
import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import RetireSkip


def _run(path, with_link=None):
    with synth.EventWriter(str(path)) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    (path / "plugins" / "x").mkdir(parents=True)
    (path / "plugins" / "x" / "a.bin").write_bytes(b"x" * 1000)
    if with_link:
        os.symlink("plugins", path / with_link)
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000), follow_symlinks=False)


def test_a_run_holding_a_link_is_not_selected_and_its_link_is_named(tmp_path):
    _run(tmp_path / "linked", with_link="symdir")
    _run(tmp_path / "plain")
    plan = api.retire(str(tmp_path), api.retire_rule(run_glob="*"), dry_run=True, quiet_period=0).plan
    by_run = {i.run: i for i in plan.items}
    assert not by_run["linked"].selected
    assert by_run["linked"].code == RetireSkip.HOLDS_LINK
    assert "linked/symdir" in by_run["linked"].reason
    assert by_run["plain"].selected

    rep = api.retire(str(tmp_path), api.retire_rule(run_glob="*"), dry_run=False, quiet_period=0)
    assert [o.run for o in rep.outcomes if o.status == "verified"] == ["plain"]
    assert not [o for o in rep.outcomes if o.status == "failed"], [o.to_dict() for o in rep.outcomes]
    assert (tmp_path / "linked" / "symdir").is_symlink() and (tmp_path / "linked" / "plugins" / "x" / "a.bin").exists()


def test_a_link_in_a_nested_run_taken_along_keeps_the_parent(tmp_path):
    _run(tmp_path / "exp")
    _run(tmp_path / "exp" / "eval", with_link="to_plugins")
    plan = api.retire(str(tmp_path), api.retire_rule(runs=["exp"], include_nested=True), dry_run=True,
                      quiet_period=0).plan
    [item] = [i for i in plan.items if i.run == "exp"]
    assert not item.selected and item.code == RetireSkip.HOLDS_LINK
    assert "exp/eval/to_plugins" in item.reason
