"""A plan's notes on a disk leave alone the runs of unfinished operations (``front_local``'s
``leave_alone_unfinished``), judged by recovery's rule (``health.unfinished_ops``). Since 471828f
that call also forecast what ``recover`` will do with a reduce's journal left before its swap,
looking at each of its originals (``health.not_in_place``: a stat each, a read where one
differs): a forecast only ``status`` prints, which every plan paid. The plan asks without it
(``forecast=False``); status still forecasts."""
from __future__ import annotations

import pytest

from helpers_crash import Killed, kill
from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery, Skip
from tb_footprint_plugin.engine import faults, health

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _journal_before_swap(logdir: str) -> None:
    faults.arm("reduce.verify", kill)  # its backups recorded, no swap record
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()


def test_a_plan_leaves_the_run_alone_without_looking_at_its_originals(tmp_path, monkeypatch):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    _journal_before_swap(logdir)
    [op] = api.unfinished(logdir)["unfinished_operations"]  # status forecasts, looking
    assert op["recover_will"]["action"] == Recovery.ROLLED_BACK, op

    def looked(*_a, **_k):
        raise AssertionError("a plan looked at a journal's originals (status's forecast)")

    monkeypatch.setattr(health, "not_in_place", looked)
    p = api.plan(logdir)
    [rp] = [rp for rp in p.runs if rp.run == op["run"]]
    assert rp.skipped and rp.code == Skip.UNFINISHED, (rp.skipped, rp.code)
    assert any("unfinished operation" in n for n in p.notes), p.notes
