"""A disk's ``status`` says beforehand what ``recover`` does with a journal whose original is not in
place (r27 W5 item 1): a reduce's journal with no swap record, put back over the one a kill after
the swap left (a state folder copied back), is refused by recover (``recovery`` and
``health.not_in_place``, 7401d91: its blobs may be the originals' only copies) and left. Status
forecast "stopped before its swap ... rolled back" for it, recover's words and deeds being others.
Now both go by ``health.not_in_place``: the forecast is the refusal, in the same words and code."""
from __future__ import annotations

import os

import pytest

from helpers_cli import run_cli as tbf
from helpers_crash import Killed, kill
from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults, health

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _stale_journal(logdir: str) -> None:
    """The run reduced and swapped, its journal put back as it stood before the swap."""
    jdir = os.path.join(logdir, ".tb-footprint", "journal")
    stale = {}

    def capture():
        [name] = [n for n in os.listdir(jdir) if n.endswith(".jsonl")]
        with open(os.path.join(jdir, name), "rb") as f:
            stale[name] = f.read()

    faults.arm("reduce.backup", capture)
    faults.arm("reduce.swap", kill)
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()
    [(name, doc)] = stale.items()
    with open(os.path.join(jdir, name), "wb") as f:
        f.write(doc)


def test_status_forecasts_the_refusal_recover_makes(tmp_path):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    _stale_journal(logdir)
    [op] = api.unfinished(logdir)["unfinished_operations"]
    will = op["recover_will"]
    said = tbf("status", logdir)
    [out] = [o for o in api.recover_logdir(logdir) if o.run is not None]
    assert out.action == Recovery.REFUSED and out.code == Finding.ORIGINAL_NOT_IN_PLACE, out
    assert will == {"action": out.action, "detail": out.detail, "code": out.code}
    assert out.detail in said.stdout and health.BEFORE_SWAP not in said.stdout, said.stdout
    # left as recover said: the journal is still there, and forecast the same again
    [again] = api.unfinished(logdir)["unfinished_operations"]
    assert again["recover_will"] == will


def test_a_journal_whose_originals_are_in_place_is_still_forecast_rolled_back(tmp_path):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    faults.arm("reduce.verify", kill)  # before its swap record
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()
    [op] = api.unfinished(logdir)["unfinished_operations"]
    [out] = [o for o in api.recover_logdir(logdir) if o.run is not None]
    assert op["recover_will"] == {"action": Recovery.ROLLED_BACK, "detail": health.BEFORE_SWAP,
                                  "code": Finding.RECOVERED}
    assert (out.action, out.detail, out.code) == (Recovery.ROLLED_BACK, health.BEFORE_SWAP, Finding.RECOVERED)
