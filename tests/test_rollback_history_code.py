"""A rolled-back reduce's history line carries the outcome's code (issue #26 loose end, reports
D and G): before, ``LocalReduce.rollback`` knew the code but ``swap.rollback`` wrote the manifest
and the change-log line without it, so ``history --json`` said ``code: null`` for a cancel, a
file changed since its backup and a failed verification alike.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import faults, transaction
from tb_footprint_plugin.storage.paths import state_dir
from test_faults import _KILL_SCRIPT

pytestmark = pytest.mark.usefixtures("disarm_faults")

VICTIM = Path("plugins") / "profile" / "2026_11_30_00_21_35" / "vm.trace.json.gz"


def _rolled_back_line(logdir: Path, code: str) -> dict:
    """The one rolled-back line of the history, checked to carry ``code``, in the API, the
    change-log file itself, and the operation's manifest."""
    lines = [e for e in api.history(str(logdir)) if e.get("outcome") == "rolled_back"]
    assert len(lines) == 1, lines
    assert lines[0]["code"] == code, lines[0]
    with open(os.path.join(state_dir(str(logdir)), "history.jsonl"), encoding="utf-8") as f:
        raw = [json.loads(x) for x in f if x.strip()]
    assert [e.get("code") for e in raw if e.get("outcome") == "rolled_back"] == [code]
    return lines[0]


def _reduce(logdir: Path, **kw):
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",), **kw)
    (o,) = rep.outcomes
    return o


def test_a_cancelled_reduce_has_its_code_in_the_history(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    cancel = api.CancelToken()
    faults.arm("reduce.stage", cancel.cancel)  # the driver honours it right after the stage step
    o = _reduce(logdir, cancel=cancel)
    assert o.status == "rolled_back" and o.code == Failure.INTERRUPTED, o
    _rolled_back_line(logdir, "interrupted")


def test_a_reduce_rolled_back_by_a_change_since_backup_has_its_code_in_the_history(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")

    def append():
        with open(logdir / VICTIM, "ab") as f:
            f.write(b"late bytes")

    faults.arm("reduce.stage", append)
    o = _reduce(logdir)
    assert o.status == "rolled_back" and o.code == Failure.CHANGED_SINCE_BACKUP, o
    _rolled_back_line(logdir, "changed_since_backup")


def test_a_reduce_whose_verification_failed_has_its_code_in_the_history(tmp_path, monkeypatch):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    for name in ("verify_run", "verify_unchanged"):  # a run whose event files stay takes the second
        def failing(*a, _real=getattr(transaction, name), **kw):
            v = _real(*a, **kw)
            return dict(v, ok=False, failed=list(v.get("failed", [])) + ["forced by the test"])

        monkeypatch.setattr(transaction, name, failing)
    o = _reduce(logdir)
    assert o.status == "rolled_back" and o.code == Failure.ERROR and "verification failed" in o.reason, o
    line = _rolled_back_line(logdir, "error")
    assert line["reason"].startswith("verification failed"), line


def test_a_reduce_killed_and_rolled_back_by_recovery_has_its_code_in_the_history(tmp_path):
    """Recovery's rollback of a killed reduce says "interrupted (crash or kill)": coded so too."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS="reduce.stage=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(logdir), "lossless"], env=env, timeout=300)
    assert p.returncode == -9, "the failpoint should have killed the process"
    api.recover_logdir(str(logdir))
    line = _rolled_back_line(logdir, "interrupted")
    assert line["reason"].startswith("interrupted (crash or kill)"), line
