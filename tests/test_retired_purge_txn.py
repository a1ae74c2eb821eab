"""The purge of retired runs on a disk is one transaction on the one driver (issue #26 item 2):
the one ``txn.Purge`` over ``retire_purge.DiskRetired`` (``engine.purge_run``), run by ``engine.txn.run``. Its intent (each
retirement's manifest marked purged, the record the purge always wrote) is its commit record:
a cancel that arrives before it deletes nothing and records nothing, one after it does not stop
the purge; ``purge.intent`` fires right after the marks and ``purge.blob`` after each retired
run's files went. A purge killed at either (by this code, or by the one before it, which marked
the manifest and then deleted the folder) is finished by the next ``recover``: the folder gone,
one change-log line per run."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import REPO, user_files
from helpers_runs import write_notes_runs
from helpers_txn import observe_txn
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.engine.vault import Vault

pytestmark = pytest.mark.usefixtures("disarm_faults")

RUNS = ("a", "b")
BEFORE_INTENT = ["journal", "backup", "stage", "transform", "verify", "last_look", "record:swap"]


def _retired_logdir(root):
    """Two runs of scalars and a few files each, both retired into the default vault; returns the
    user's files before the retirement."""
    write_notes_runs(root, RUNS)
    original = user_files(root)
    rep = api.retire(str(root), api.retire_rule(runs=list(RUNS)), dry_run=False, quiet_period=0)
    assert rep.ok and sorted(o.run for o in rep.outcomes) == list(RUNS), rep.to_dict()
    return original


def _retirements(logdir):
    return {m["run"]: m for m in api.operations(str(logdir)) if m["kind"] == "retire"}


def _folders(logdir):
    """Each retirement's folder in the vault: its files' bytes, or None once it is gone."""
    out = {}
    for run, m in _retirements(logdir).items():
        d = logdir / ".tb-footprint" / "retired" / m["op_id"]
        out[run] = {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()} \
            if d.exists() else None
    return out


def _purge_lines(logdir):
    return sorted(e["run"] for e in api.history(str(logdir)) if e["kind"] == "purge")


def test_a_retired_purge_is_the_one_Purge_run_by_the_driver_step_by_step(tmp_path, monkeypatch):
    """Nothing before the swap record, the marks as the swap record (``purge.intent`` right
    after), each retired run's files deleted in the swap (``purge.blob`` after each), the change
    log in the commit. Before, ``purge_retired`` ordered its own steps, off the driver."""
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    sizes = {run: m["bytes_before"] for run, m in _retirements(logdir).items()}
    seen, log = observe_txn(monkeypatch, ["purge.intent", "purge.blob", "purge.marked"])
    rep = api.purge(str(logdir), yes=True)
    assert seen == ["Purge"]
    assert log == BEFORE_INTENT + ["purge.intent", "swap", "purge.blob", "purge.blob", "commit"], log
    assert sorted((o["run"], o["bytes"]) for o in rep.ops) == sorted(sizes.items()) and rep.kept == []
    assert rep.freed_bytes == sum(sizes.values()) and rep.originals_lost == 4
    assert _folders(logdir) == {r: None for r in RUNS}
    assert all(m["backup_purged"] for m in _retirements(logdir).values())
    assert _purge_lines(logdir) == list(RUNS)


class _CancelledOnCheck(CancelToken):
    """A cancel that arrives while the purge is under way: the token says cancelled from its
    ``n``-th look on (the user pressing Ctrl-C after the purge started)."""

    def __init__(self, n):
        super().__init__()
        self.n, self.looks = n, 0

    def check(self):
        self.looks += 1
        if self.looks >= self.n:
            self.cancel()
        super().check()


def test_a_cancel_before_the_intent_deletes_nothing_and_records_nothing(tmp_path):
    """A cancel that arrives once the purge has started, before its intent: no manifest marked,
    no file deleted, no change-log line; both runs listed as kept with code ``interrupted``,
    nothing freed, and both still restore byte for byte. Before, the retired runs' purge looked
    at the cancel once, before it started, and then purged them whatever came."""
    logdir = tmp_path / "logs"
    original = _retired_logdir(logdir)
    folders, history = _folders(logdir), api.history(str(logdir))
    token = _CancelledOnCheck(2)
    rep = api.purge(str(logdir), yes=True, cancel=token)
    assert rep.ops == [] and rep.freed_bytes == 0 and rep.originals_lost == 0, rep.to_dict()
    assert token.cancelled
    assert sorted((k["run"], k["code"]) for k in rep.kept) == [(r, Failure.INTERRUPTED) for r in RUNS]
    assert all("not purged" in k["detail"] for k in rep.kept)
    assert _folders(logdir) == folders
    assert not any(m["backup_purged"] for m in _retirements(logdir).values())
    assert api.history(str(logdir)) == history
    assert [o.action for o in api.recover_logdir(str(logdir))] == []
    for run in RUNS:
        [o] = api.restore(str(logdir), run=run)
        assert o.status == "restored", o.to_dict()
    assert user_files(logdir) == original


def test_a_cancel_after_the_intent_does_not_stop_the_retired_purge(tmp_path):
    """A cancel right after the marks: every retired run's folder goes, each its change-log line,
    nothing kept, nothing left for the next start."""
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    token = CancelToken()
    faults.arm("purge.intent", token.cancel)
    rep = api.purge(str(logdir), yes=True, cancel=token)
    assert token.cancelled
    assert sorted(o["run"] for o in rep.ops) == list(RUNS) and rep.kept == [], rep.to_dict()
    assert _folders(logdir) == {r: None for r in RUNS}
    assert _purge_lines(logdir) == list(RUNS)
    assert [o.action for o in api.recover_logdir(str(logdir))] == []


@pytest.mark.parametrize("step", ["purge.intent", "purge.blob"])
def test_a_retired_purge_killed_at_its_failpoint_is_finished_by_the_next_recover(tmp_path, step):
    """``tb-footprint purge --yes`` SIGKILLed at ``step``: the runs are marked purged and some of
    their files are still in the vault; the next ``recover`` finishes each (its folder gone, one
    change-log line per run, never two), and a second finds nothing left."""
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "purge", str(logdir), "--yes"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    assert all(m["backup_purged"] for m in _retirements(logdir).values())  # the intent is durable
    left = [run for run, files in _folders(logdir).items() if files]
    assert left, "some retired files are still in the vault"
    assert _purge_lines(logdir) == []
    # status names each as unfinished, for `recover` to finish
    status = api.status(str(logdir))
    assert sorted(p["run"] for p in status["problems"] if p["code"] == Finding.UNFINISHED) == list(RUNS), status
    outs = api.recover_logdir(str(logdir))
    finished = sorted(o.run for o in outs if o.action == Recovery.COMPLETED and o.code == Finding.PURGE_FINISHED)
    assert finished == list(RUNS), [(o.run, o.action, o.detail) for o in outs]
    assert _folders(logdir) == {r: None for r in RUNS}
    assert _purge_lines(logdir) == list(RUNS)
    assert [o.action for o in api.recover_logdir(str(logdir))] == []
    assert _purge_lines(logdir) == list(RUNS)
    status = api.status(str(logdir))
    assert status["unfinished_operations"] == [] and status["problems"] == [], status


def test_a_retired_purge_the_previous_version_left_after_its_mark_is_finished(tmp_path):
    """The state a purge of the version before left when killed between its one record (the
    manifest marked purged) and its ``rmtree``: the next ``recover`` deletes the folder and
    writes the run's line; one killed after the line was written gets no second line."""
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    ms = _retirements(logdir)
    for m in ms.values():  # what the earlier purge_retired recorded before its rmtree
        vault = Vault(m["vault"])
        fresh = vault.read_manifest(m["op_id"])
        fresh["backup_purged"], fresh["purged_at"] = True, fresh["finished_at"]
        vault.write_manifest(fresh)
    assert all(files for files in _folders(logdir).values())
    outs = api.recover_logdir(str(logdir))
    assert sorted(o.run for o in outs if o.code == Finding.PURGE_FINISHED) == list(RUNS), \
        [(o.run, o.action, o.detail) for o in outs]
    assert _folders(logdir) == {r: None for r in RUNS}
    lines = [e for e in api.history(str(logdir)) if e["kind"] == "purge"]
    assert sorted((e["run"], e["freed"]) for e in lines) == sorted((r, ms[r]["bytes_before"]) for r in RUNS)


def test_a_folder_left_after_the_line_gets_no_second_line(tmp_path):
    """Killed after a run's change-log line and before its emptied folder went: the next start
    removes the folder and writes no second line."""
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    api.purge(str(logdir), yes=True)
    assert _purge_lines(logdir) == list(RUNS)
    m = _retirements(logdir)["a"]
    (logdir / ".tb-footprint" / "retired" / m["op_id"]).mkdir(mode=0o700)  # as the kill left it: empty
    outs = api.recover_logdir(str(logdir))
    assert [(o.run, o.code) for o in outs] == [("a", Finding.PURGE_FINISHED)], [(o.run, o.detail) for o in outs]
    assert not (logdir / ".tb-footprint" / "retired" / m["op_id"]).exists()
    assert _purge_lines(logdir) == list(RUNS)



def test_a_folder_made_a_link_after_the_choice_is_never_deleted_through(tmp_path):
    """A retired run's folder replaced by a link to another folder between the purge's choice and
    its deletes (here: at its intent): nothing is deleted through the link, nor by the next start,
    and no line says the run's files went."""
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    m = _retirements(logdir)["a"]
    folder = logdir / ".tb-footprint" / "retired" / m["op_id"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.bin").write_bytes(b"someone else's bytes")

    def plant():
        os.rename(folder, tmp_path / "aside")
        os.symlink(elsewhere, folder)

    faults.arm("purge.intent", plant)
    api.purge(str(logdir), yes=True)
    faults.disarm_all()
    assert (elsewhere / "keep.bin").read_bytes() == b"someone else's bytes"
    assert _purge_lines(logdir) == ["b"]
    api.recover_logdir(str(logdir))
    assert (elsewhere / "keep.bin").read_bytes() == b"someone else's bytes"
    assert folder.is_symlink() and _purge_lines(logdir) == ["b"]
