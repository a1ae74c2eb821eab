"""A logdir others may write without the sticky bit is named before anything changes (review R13
F2, fix 4): any user of its group (or anyone) may rename this user's ``.tb-footprint`` and put a
folder of their own in its place; a changing verb then stops with ``state_moved``
(tests/test_state_moved.py), and the plan and ``status`` say so beforehand with the code
``logdir_not_sticky``, naming the logdir and the ``chmod +t`` that closes it. A warning, not a
refusal: the reduce still runs."""
import os
import subprocess
import sys

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome

from conftest import REPO


@pytest.fixture
def logdir(tmp_path):
    root = tmp_path / "logs"
    subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "demo", str(root)], check=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True)
    return root


def _plan_out(logdir) -> str:
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "plan", str(logdir), "--quiet-period", "0"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr
    return p.stdout + p.stderr


def _named(logdir):
    return [p for p in api.status(str(logdir))["problems"] if p["code"] == Finding.LOGDIR_NOT_STICKY]


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_an_unsticky_shared_logdir_is_named_by_the_plan_and_status_and_still_reduced(logdir, mode):
    os.chmod(logdir, mode)
    out = _plan_out(logdir)
    assert Finding.LOGDIR_NOT_STICKY in out and f"chmod +t {logdir}" in out, out
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0)
    assert rep.outcomes and all(o.status == Outcome.VERIFIED for o in rep.outcomes if o.status != Outcome.SKIPPED), \
        [(o.run, o.status, o.reason) for o in rep.outcomes]
    (p,) = _named(logdir)
    assert p["file"] == str(logdir) and "no sticky bit" in p["detail"], p


@pytest.mark.parametrize("mode", [0o1777, 0o1775, 0o755, 0o700])
def test_a_sticky_or_private_logdir_is_not_named(logdir, mode):
    os.chmod(logdir, mode)
    assert Finding.LOGDIR_NOT_STICKY not in _plan_out(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0)
    assert rep.outcomes
    assert _named(logdir) == []
