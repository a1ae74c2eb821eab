"""Issue #26: an outcome says what it found besides its one code as coded findings
(``RunOutcome.findings``: ``[{"code", "path"}]``), never in prose only, on every store, through the
API's JSON and the CLI's lines.

- a retired run's restore that leaves an original in the vault (a file written at its path since):
  coded ``not_restored`` and a ``not_restored`` finding naming the path (a folder, three servers);
- a retired run's restore that leaves a recorded folder without its mode and time (a link there,
  never followed): a ``folder_not_settled`` finding naming the folder, printed by the CLI;
- a retirement rolled back (its code the failure's) that leaves such a folder: the same finding,
  next to the cause's code (811f9de/9cea33a said it in prose only);
- a reduction's restore that leaves one: the same finding."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import errno
import json
import os
import time

import pytest

from conftest import copy_real
from tb_footprint_plugin import api, cli, synth
from tb_footprint_plugin.codes import Failure, Finding, Outcome
from tb_footprint_plugin.engine import faults, restore, retire
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

STANDING = b"another file, written at the path before the restore reached it\n"
ORIGINAL = b"lr: 0.1\n" * 40
OLD = time.time() - 7 * 86400


@pytest.mark.parametrize("store", KINDS)
def test_an_original_left_in_the_vault_is_a_finding_on_every_store(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", ORIGINAL)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", STANDING))
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    assert o.findings == [{"code": "not_restored", "path": "b/notes.txt"}], o.to_dict()
    # the API's JSON carries it, as the CLI's --json prints it
    [d] = json.loads(json.dumps(api.restore_summary([o])))["outcomes"]
    assert d["findings"] == [{"code": "not_restored", "path": "b/notes.txt"}], d


def _retirable(logdir):
    with synth.EventWriter(str(logdir / "train")) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    (logdir / "train" / "empty").mkdir(mode=0o750)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (OLD, OLD))


def _link_after_make_dirs(monkeypatch, module, logdir, outside):
    real = module.make_dirs

    def made(ctx, dirs, refuse_theirs=False):  # the folders made; then the empty one becomes a link outside
        got = real(ctx, dirs, refuse_theirs)
        if not os.path.islink(logdir / "train" / "empty"):
            os.rmdir(logdir / "train" / "empty")
            os.symlink(outside, logdir / "train" / "empty")
        return got

    monkeypatch.setattr(module, "make_dirs", made)


def test_a_restored_retirement_finds_its_unsettled_folder_and_the_cli_says_it(tmp_path, monkeypatch, capsys):
    logdir = tmp_path / "logs"
    _retirable(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert rep.outcomes[0].status == Outcome.VERIFIED, rep.outcomes[0].reason
    outside = tmp_path / "outside"
    outside.mkdir()
    mode = os.stat(outside).st_mode
    _link_after_make_dirs(monkeypatch, retire, logdir, outside)
    assert cli.main(["restore", str(logdir), "--run", "train", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "also: [folder_not_settled] train/empty" in out, out
    assert os.stat(outside).st_mode == mode  # never followed
    [m] = [m for m in api.operations(str(logdir)) if m["kind"] == "retire"]
    assert m.get("restored_by"), m


def test_a_retirement_rolled_back_finds_its_unsettled_folder_next_to_its_cause(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    _retirable(logdir)
    outside = tmp_path / "outside"
    outside.mkdir()
    mode = os.stat(outside).st_mode

    def fail():
        _link_after_make_dirs(monkeypatch, retire, logdir, outside)  # for the rollback's put-back
        raise OSError(errno.EIO, "the test's failure")

    faults.arm("retire.move", fail)
    [o] = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0).outcomes
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert o.code == Failure.ERROR, o.to_dict()  # the cause's code
    assert {"code": "folder_not_settled", "path": "train/empty"} in o.findings, o.to_dict()
    assert os.stat(outside).st_mode == mode  # never followed
    assert (logdir / "train").is_dir() and any(p.name.startswith("events") for p in (logdir / "train").iterdir())


def test_a_reductions_restore_finds_its_unsettled_folder(tmp_path, monkeypatch):
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    run = logdir / "tf" / "summary_mix"
    (session,) = (run / "plugins" / "profile").iterdir()
    rel = os.path.relpath(session, logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"])
    [o] = [o for o in rep.outcomes if o.op_id]
    assert o.status == Outcome.VERIFIED and not session.exists(), o.reason
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    real = restore.settle_dirs

    def settle(ctx, dirs, made):
        os.rename(session, aside)  # a link at the instant the folder is settled, then back
        os.symlink(outside, session)
        try:
            return real(ctx, dirs, made)
        finally:
            os.unlink(session)
            os.rename(aside, session)

    monkeypatch.setattr(restore, "settle_dirs", settle)
    [r] = api.restore(str(logdir), op=o.op_id)
    assert (r.status, r.code) == (Outcome.RESTORED, Finding.FOLDER_NOT_SETTLED), r.to_dict()
    assert r.findings == [{"code": "folder_not_settled", "path": rel}], r.to_dict()
