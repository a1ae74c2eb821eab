"""A plan's folder removals (an emptied profile session, its ``plugins/profile`` and ``plugins``
folders: ~3 a run) are ``DirRemoval``s, a third of an ``Action``'s memory (issue #28 item 1: a
plan of 100,000 runs peaked at 284 MB of its 300, ~540 bytes a run in these). What the plan
says, compares equal to and hands the engine is what full ``Action``s said: the reduce removes
the same folders."""
import copy
import dataclasses
import gc
import json
import os
import sys

import pytest

from tb_footprint_plugin.plan.model import Action
from tb_footprint_plugin.plan.planner import make_plan
from tb_footprint_plugin.scan.scanner import scan

from helpers_runs import copy_runs, small_run_template


@pytest.fixture
def planned(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = copy_runs(tmp_path / "logs", small_run_template(str(tmp_path)), 3, mtime=1_000_000_000)
    fp = scan(root)
    return root, make_plan(fp, "archive", now=1_000_000_000 + 30 * 86400)


def _removals(p):
    return [a for rp in p.runs for a in rp.actions if a.kind == "remove_dir"]


def test_a_folder_removal_takes_a_third_of_an_actions_memory(planned):
    _root, p = planned
    removals = _removals(p)
    assert len(removals) == 3 * 3  # the session, plugins/profile, plugins: in each of 3 runs
    full = Action("remove_dir", removals[0].path, removals[0].category, 0, 0, removals[0].reason)
    # before: an Action each (128 bytes with its GC header on CPython 3.11)
    assert all(sys.getsizeof(a) * 2 <= sys.getsizeof(full) for a in removals)


def test_a_folder_removal_says_what_an_action_says(planned):
    _root, p = planned
    plain = copy.deepcopy(p)  # a copy is made of plain Actions
    assert all(type(a) is Action for a in _removals(plain))
    assert json.dumps(p.to_dict(), sort_keys=True) == json.dumps(plain.to_dict(), sort_keys=True)
    assert p.runs == plain.runs and plain.runs == p.runs
    for a, b in zip(_removals(p), _removals(plain)):
        assert a == b and b == a and repr(a) == repr(b)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert [f.name for f in dataclasses.fields(a)] == [f.name for f in dataclasses.fields(Action)]
        assert (a.disk_before, a.links, a.allocated, a.params, a.categories) == (0, 1, None, {}, {})
    other = _removals(p)[0]
    assert other != dataclasses.replace(_removals(plain)[0], reason="another")
    with pytest.raises(AttributeError):
        other.bytes_before = 5  # a folder's removal removes no bytes of its own


def test_the_folders_above_a_session_are_said_as_before_without_strings_of_their_own(planned):
    """plugins/profile and plugins: os.path.dirname of the session's path, once and twice, as the
    plan said them, held as that path (the one string its session's removal holds)."""
    _root, p = planned
    for rp in p.runs:
        session, profile, plugins = [a for a in rp.actions if a.kind == "remove_dir"]
        assert (profile.path, plugins.path) == (os.path.dirname(session.path),
                                                os.path.dirname(os.path.dirname(session.path)))
        assert profile.path == rp.run + "/plugins/profile" and plugins.path == rp.run + "/plugins"
        assert [(a.category, a.reason) for a in (session, profile, plugins)] == [
            ("profile_xplane", "emptied profile session"),
            ("profile_xplane", "no sessions left (xprof would list an empty run)"),
            ("plugin_assets", "only if empty")]
        held = [s for a in (session, profile, plugins) for s in gc.get_referents(a) if isinstance(s, str)]
        # before: two strings of their own for the two folders
        assert not [s for s in held if s in (profile.path, plugins.path)]
    moved = _removals(p)[1]
    moved.path = "elsewhere"  # a path set is the path said
    assert moved.path == "elsewhere" and dataclasses.asdict(moved)["path"] == "elsewhere"


def test_the_reduce_removes_the_folders_the_plan_says(planned):
    from tb_footprint_plugin import api

    root, p = planned
    gone = sorted(a.path for a in _removals(p))
    out = api.reduce_logdir(root, policy="archive", dry_run=False)
    assert out is not None
    for rel in gone:
        assert not os.path.exists(os.path.join(root, rel)), rel
    for rp in p.runs:
        assert os.path.isdir(os.path.join(root, rp.run))
