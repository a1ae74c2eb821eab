"""A reduce whose journal was lost under way is rolled back through the journal written again
(``reduce_journal.settle_again``); a recorded folder that rollback leaves without its mode and time
(a link at the instant it is settled, never followed) is a coded ``folder_not_settled`` finding
naming it, as on every other rollback (0bf47cb, issue #26). Before, only the rolled-back
manifest's prose named it: ``settle_again`` called the rollback without collecting them."""
from __future__ import annotations

import os

import pytest

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Outcome
from tb_footprint_plugin.engine import faults, swap

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_lost_journals_rollback_finds_its_unsettled_folder(tmp_path, monkeypatch):
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    (session,) = (logdir / "tf" / "summary_mix" / "plugins" / "profile").iterdir()
    rel = os.path.relpath(session, logdir)
    outside = tmp_path / "outside"
    outside.mkdir()
    mode = os.stat(outside).st_mode
    jdir = logdir / ".tb-footprint" / "journal"

    def lose_journal():
        for n in os.listdir(jdir):
            if n.endswith(".jsonl"):
                os.unlink(jdir / n)

    real = swap.settle_dirs
    seen = []

    def settle(ctx, dirs, made):  # the removed folder, made again, meets its settling as a link
        aside = tmp_path / "aside"
        os.rename(session, aside)
        os.symlink(outside, session)
        try:
            got = real(ctx, dirs, made)
        finally:
            os.unlink(session)
            os.rename(aside, session)
        seen.append(got)
        return got

    monkeypatch.setattr(swap, "settle_dirs", settle)
    faults.arm("reduce.swap", lose_journal)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"])
    [o] = [o for o in rep.outcomes if o.op_id]
    assert seen == [[rel]], seen
    assert (o.status, o.code) == (Outcome.ROLLED_BACK, Failure.JOURNAL_GONE), o.to_dict()
    assert "was written again" in o.reason, o.reason
    assert o.findings == [{"code": Finding.FOLDER_NOT_SETTLED, "path": rel}], o.to_dict()
    assert os.stat(outside).st_mode == mode and not os.listdir(outside)  # never followed
    assert next(session.iterdir()).is_file()  # the profile is back
