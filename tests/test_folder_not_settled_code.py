"""Review R7 F6's code: a restore that leaves a recorded folder without its mode and time (a link
there, or on its way, never followed) says so with ``Finding.FOLDER_NOT_SETTLED``, a code a caller
can branch on, next to the detail naming the folder (811f9de named it in prose only; a reduction's
restore, ``restore.finish_restore``'s own ``settle_dirs``, did not even name it).

- a retired run's restore (``retire.DiskUnretire.settle``): a recorded empty folder made a link
  after the folders were made;
- a reduction's restore (``restore.finish_restore``): the profile's removed folder is a link at
  the instant its recorded mode and time are given back (swapped for one, then back: a race)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import copy_real
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import restore, retire

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400


def test_a_restored_retirement_codes_a_folder_it_could_not_settle(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / "train")) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    (logdir / "train" / "empty").mkdir(mode=0o750)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert rep.outcomes[0].status == Outcome.VERIFIED, rep.outcomes[0].reason
    outside = tmp_path / "outside"
    outside.mkdir()
    mode = os.stat(outside).st_mode
    real = retire.make_dirs

    def made(ctx, dirs, refuse_theirs=False):  # the folders made; then one of them becomes a link outside
        got = real(ctx, dirs, refuse_theirs)
        os.rmdir(logdir / "train" / "empty")
        os.symlink(outside, logdir / "train" / "empty")
        return got

    monkeypatch.setattr(retire, "make_dirs", made)
    [o] = api.restore(str(logdir), op=rep.outcomes[0].op_id)
    assert o.status == Outcome.RESTORED, (o.status, o.reason)
    assert o.code == Finding.FOLDER_NOT_SETTLED, (o.code, o.reason)
    assert "train/empty" in o.reason, o.reason
    assert os.stat(outside).st_mode == mode  # never followed


def test_a_reductions_restore_codes_and_names_a_folder_it_could_not_settle(tmp_path, monkeypatch):
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    run = logdir / "tf" / "summary_mix"
    (session,) = (run / "plugins" / "profile").iterdir()
    rel = os.path.relpath(session, logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"])
    [o] = [o for o in rep.outcomes if o.op_id]
    assert o.status == Outcome.VERIFIED and not session.exists(), o.reason
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    mode = os.stat(outside).st_mode
    real, seen = restore.settle_dirs, []

    def settle(ctx, dirs, made):
        # the removed folder (its file back in it) is a link at the instant it is settled, then back
        os.rename(session, aside)
        os.symlink(outside, session)
        try:
            got = real(ctx, dirs, made)
        finally:
            os.unlink(session)
            os.rename(aside, session)
        seen.append(got)
        return got

    monkeypatch.setattr(restore, "settle_dirs", settle)
    [r] = api.restore(str(logdir), op=o.op_id)
    assert seen == [[rel]], seen
    assert r.status == Outcome.RESTORED, (r.status, r.reason)
    assert r.code == Finding.FOLDER_NOT_SETTLED, (r.code, r.reason)
    assert rel in r.reason and "mode and time" in r.reason, r.reason
    assert os.stat(outside).st_mode == mode  # never followed
    assert next(session.iterdir()).is_file()  # the profile is back
