"""Status advises only what is true for backups pinned by an operation whose journal was lost
(``Finding.PINS_UNSETTLED``, task N6 item 1). Before, ``status`` and the warnings said "run
`tb-footprint recover` to settle this", but recover keeps such pins (they may hold the only copy
of a run's originals, and no record says whether the run still needs them), so the advice was
repeated after every recover. Now no settle command is offered for them; the finding itself
says recover leaves them and what the user can do."""
from __future__ import annotations

import os

import pytest

from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Outcome
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _plant_over_journal(logdir):
    journals = os.path.join(logdir, ".tb-footprint", "journal")

    def act():
        for n in os.listdir(journals):
            if n.endswith(".jsonl"):
                with open(os.path.join(journals, "planted"), "w") as f:
                    f.write("not a journal of this operation\n")
                os.replace(os.path.join(journals, "planted"), os.path.join(journals, n))
    return act, journals


def test_status_does_not_offer_recover_for_pins_recover_keeps(tmp_path):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    act, journals = _plant_over_journal(logdir)
    faults.arm("reduce.swap", act)
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    (out,) = rep.outcomes
    assert out.status == Outcome.FAILED and out.code == Failure.JOURNAL_GONE, out.reason
    faults.disarm_all()
    os.unlink(os.path.join(journals, f"{out.op_id}.jsonl"))  # neither a journal nor a manifest now
    pins = os.path.join(logdir, ".tb-footprint", "tmp", out.op_id, "pins")
    held = sorted(os.listdir(pins))
    assert held
    for _ in range(2):  # what status says stays true after the recover it would have advised
        st = api.status(logdir)
        (found,) = [p for p in st["problems"] if p["code"] == Finding.PINS_UNSETTLED]
        assert [p for p in st["problems"] if p["code"] != Finding.PINS_UNSETTLED] == [], st["problems"]
        assert st["settle_command"] is None, st["settle_command"]
        assert api.unfinished(logdir)["settle_command"] is None
        assert "`recover` does not release them" in found["detail"] and "remove them and this folder yourself" in found["detail"]
        api.recover_logdir(logdir)
        assert sorted(os.listdir(pins)) == held  # recover keeps them: they may be the only copy
