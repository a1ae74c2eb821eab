"""The state folder replaced at ``reduce.verify`` (task N3 item 2).

Before: the run rolled back with a reason that began "…: changed during the reduction (is the run
still being written?)": the last look at the backups (``vault.check_blob``) read through the folder
now standing at the state folder's name, and the state_moved text came only after it. Now the
reason leads with what happened (the state folder moved, naming it and where it went), the code is
``state_moved``, and no file is said to have changed."""
from __future__ import annotations

import os

import pytest

from helpers_runs import aged_small_runs
from test_state_moved import _move_back, _move_state, _reduce, _tree
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.fixture
def logdir(tmp_path):
    return aged_small_runs(str(tmp_path / "logs"), 1)


@pytest.mark.parametrize("link", [False, True], ids=["folder", "link"])
def test_state_moved_at_verify_leads_the_reason(logdir, link):
    before = _tree(logdir)
    faults.arm("reduce.verify", _move_state(logdir, link))
    out = _reduce(logdir)
    state = os.path.join(logdir, ".tb-footprint")
    hidden = os.path.join(logdir, ".hidden")
    assert out.status == Outcome.ROLLED_BACK and out.code == Failure.STATE_MOVED, out.reason
    assert out.reason.startswith(f"{state}: the state folder is no longer the one this operation started with")
    assert f"is now {hidden}" in out.reason
    assert "changed during the reduction" not in out.reason
    assert _tree(logdir) == before
    _move_back(logdir)
    api.recover_logdir(logdir)
    assert _tree(logdir) == before
    assert not [n for n in os.listdir(os.path.join(state, "journal")) if n.endswith(".jsonl")]


def test_a_step_failing_after_the_move_is_said_after_it(logdir):
    """Any step's own failure once the folder moved comes second: the move is what happened."""
    move = _move_state(logdir)

    def move_then_fail():
        move()
        raise OSError(5, "Input/output error (the step's own failure)")

    faults.arm("reduce.stage", move_then_fail)
    out = _reduce(logdir)
    state = os.path.join(logdir, ".tb-footprint")
    assert out.code == Failure.STATE_MOVED and out.status == Outcome.ROLLED_BACK, out.reason
    assert out.reason.startswith(f"{state}: the state folder is no longer")
    assert "the step under way then failed: [Errno 5] Input/output error" in out.reason
    assert out.reason.count("the state folder is no longer") == 1
