"""Issue #26, the last outcomes whose second finding was prose only: a recorded folder left
without its mode and time (a link at the instant it is settled, never followed) is a coded
``folder_not_settled`` finding naming the folder

- on a disk reduction's own rollback (``swap.rollback(unsettled=)``; its code stays the cause's),
  where only the rolled-back manifest's reason named it;
- on a restore finished at the next start (``RecoveryOutcome.findings``, in ``recover --json`` and
  under the CLI's recover line), where only the detail named it;
- on a reduction recovery rolls back (the same field)."""
from __future__ import annotations

import json
import os

import pytest

from conftest import copy_real
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery
from tb_footprint_plugin.engine import faults, restore, swap, transaction

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _reducible(tmp_path):
    """A real run whose archive reduction removes its profile session folder (an ``rmdir`` record)."""
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    (session,) = (logdir / "tf" / "summary_mix" / "plugins" / "profile").iterdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    return logdir, session, os.path.relpath(session, logdir), outside


def _link_while_settled(monkeypatch, module, session, outside, aside, seen=None):
    """``module.settle_dirs`` meets the folder as a link to ``outside`` (swapped, then back)."""
    real = module.settle_dirs

    def settle(ctx, dirs, made):
        os.rename(session, aside)
        os.symlink(outside, session)
        try:
            got = real(ctx, dirs, made)
        finally:
            os.unlink(session)
            os.rename(aside, session)
        if seen is not None:
            seen.append(got)
        return got

    monkeypatch.setattr(module, "settle_dirs", settle)


def _reduce(logdir):
    return api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"])


def test_a_reductions_rollback_finds_its_unsettled_folder_next_to_its_cause(tmp_path, monkeypatch):
    logdir, session, rel, outside = _reducible(tmp_path)
    mode = os.stat(outside).st_mode
    real = transaction.write_manifest

    def manifest(ctx, records, outcome, *a, **k):  # the commit's manifest fails: rolled back after the swap
        if outcome == "verified":
            raise OSError(5, "the test's failure")
        return real(ctx, records, outcome, *a, **k)

    monkeypatch.setattr(transaction, "write_manifest", manifest)
    seen = []
    _link_while_settled(monkeypatch, swap, session, outside, tmp_path / "aside", seen)
    [o] = [o for o in _reduce(logdir).outcomes if o.op_id]
    assert seen == [[rel]], seen
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert o.code == Failure.ERROR, o.to_dict()  # the cause's code
    assert o.findings == [{"code": "folder_not_settled", "path": rel}], o.to_dict()
    assert os.stat(outside).st_mode == mode and not os.listdir(outside)  # never followed
    assert next(session.iterdir()).is_file()  # the profile is back


def test_a_restore_finished_at_the_next_start_finds_its_unsettled_folder(tmp_path, monkeypatch, capsys):
    logdir, session, rel, outside = _reducible(tmp_path)
    mode = os.stat(outside).st_mode
    [o] = [o for o in _reduce(logdir).outcomes if o.op_id]
    assert o.status == Outcome.VERIFIED and not session.exists(), o.reason
    faults.arm("restore.check", "crash")  # every original back, the restore not recorded: the next start finishes it
    with pytest.raises(faults.InjectedCrash):
        api.restore(str(logdir), op=o.op_id)
    faults.disarm_all()
    _link_while_settled(monkeypatch, restore, session, outside, tmp_path / "aside")
    assert cli.main(["recover", str(logdir), "--json"]) == 0
    [d] = [d for d in json.loads(capsys.readouterr().out) if d["run"] == "tf/summary_mix"]
    assert (d["action"], d["code"]) == (Recovery.COMPLETED, Finding.RECOVERED), d
    assert d["findings"] == [{"code": "folder_not_settled", "path": rel}], d
    assert os.stat(outside).st_mode == mode and not os.listdir(outside)  # never followed
    assert next(session.iterdir()).is_file()


def test_the_cli_recover_line_says_a_finished_restores_findings(tmp_path, monkeypatch, capsys):
    logdir, session, rel, outside = _reducible(tmp_path)
    [o] = [o for o in _reduce(logdir).outcomes if o.op_id]
    faults.arm("restore.check", "crash")
    with pytest.raises(faults.InjectedCrash):
        api.restore(str(logdir), op=o.op_id)
    faults.disarm_all()
    _link_while_settled(monkeypatch, restore, session, outside, tmp_path / "aside")
    assert cli.main(["recover", str(logdir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if "completed [recovered]" in ln)
    assert lines[i + 1] == f"    also: [folder_not_settled] {rel}", out  # under its line, as an outcome's


def test_a_reduction_recovery_rolls_back_finds_its_unsettled_folder(tmp_path, monkeypatch):
    logdir, session, rel, outside = _reducible(tmp_path)
    mode = os.stat(outside).st_mode
    real = transaction.write_manifest

    def manifest(ctx, records, outcome, *a, **k):
        if outcome == "verified":
            raise OSError(5, "the test's failure")
        return real(ctx, records, outcome, *a, **k)

    monkeypatch.setattr(transaction, "write_manifest", manifest)

    def crash(ctx, dirs, made):  # the process stops within its rollback (its record written)
        raise faults.InjectedCrash("the test's crash")

    monkeypatch.setattr(swap, "settle_dirs", crash)
    with pytest.raises(faults.InjectedCrash):
        _reduce(logdir)
    monkeypatch.undo()
    _link_while_settled(monkeypatch, swap, session, outside, tmp_path / "aside")
    [r] = [r for r in api.recover_logdir(str(logdir)) if r.run == "tf/summary_mix"]
    assert (r.action, r.kind) == (Recovery.ROLLED_BACK, "reduce"), vars(r)
    assert r.findings == [{"code": "folder_not_settled", "path": rel}], vars(r)
    assert os.stat(outside).st_mode == mode and not os.listdir(outside)
    assert next(session.iterdir()).is_file()
