"""A retired run's purge writes its change-log line once, never twice, and never over what an
unretire recorded (review R19 P1, P2).

P1: the version before this purge (4f40444) marked a retirement's manifest purged, deleted its
folder, and wrote the run's line only after every run: killed in between, the retirement is
purged, its folder gone and its line missing, and ``finish_retired_purges`` looked only at
retirements whose folder still stands. Now a purge marks its manifests ``purge_line_first`` (its
line is written before its folder goes); one marked purged without it and whose folder is gone is
looked up in the change log once: its line written when missing, then the mark set, so later
starts read nothing.

P2: ``purge_retired`` read each retirement's manifest before taking its run's lock and wrote that
copy marked purged: an unretire finishing in between had its ``restored_by`` overwritten (and a
purge line said the run's only copy was deleted), and a second purge finishing in between gave
the run a second line. The manifest is now read again under the lock.
"""
import shutil

import pytest

from conftest import user_files
from helpers_runs import write_notes_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome, Recovery
from tb_footprint_plugin.engine import purge_choice, retire_purge
from tb_footprint_plugin.engine.front import local_context
from tb_footprint_plugin.engine.vault import Vault

pytestmark = pytest.mark.usefixtures("disarm_faults")

RUNS = ("a", "b")


def _retired_logdir(root):
    """Two runs of scalars and a file each, both retired; returns the user's files before."""
    write_notes_runs(root, RUNS, note_bytes=300)
    original = user_files(root)
    rep = api.retire(str(root), api.retire_rule(runs=list(RUNS)), dry_run=False, quiet_period=0)
    assert rep.ok and sorted(o.run for o in rep.outcomes) == list(RUNS), rep.to_dict()
    return original


def _retirements(logdir):
    return {m["run"]: m for m in api.operations(str(logdir)) if m["kind"] == "retire"}


def _manifest(logdir, run):
    m = _retirements(logdir)[run]
    return Vault(str(logdir / ".tb-footprint")).read_manifest(m["op_id"])


def _purge_lines(logdir):
    return sorted(e["run"] for e in api.history(str(logdir)) if e["kind"] == "purge")


def _as_the_old_purge_left_it(logdir, runs):
    """What 4f40444's purge_retired did for each run before its lines: the manifest marked
    purged (no ``purge_line_first``), the folder deleted whole."""
    for run in runs:
        m = _manifest(logdir, run)
        m["backup_purged"], m["purged_at"] = True, m["finished_at"] + 1
        Vault(m["vault"]).write_manifest(m)
        shutil.rmtree(logdir / ".tb-footprint" / "retired" / m["op_id"])


def _count_history_reads(monkeypatch):
    reads = []
    real = retire_purge.logged_operations

    def counted(state, **kw):
        reads.append(state)
        return real(state, **kw)
    monkeypatch.setattr(retire_purge, "logged_operations", counted)
    return reads


def test_an_old_purge_killed_after_its_rmtree_gets_its_line_once(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    sizes = {run: m["bytes_before"] for run, m in _retirements(logdir).items()}
    _as_the_old_purge_left_it(logdir, RUNS)
    assert _purge_lines(logdir) == []
    reads = _count_history_reads(monkeypatch)
    outs = api.recover_logdir(str(logdir))
    assert sorted((o.run, o.action, o.code) for o in outs) == \
        [(r, Recovery.COMPLETED, Finding.PURGE_FINISHED) for r in RUNS], [(o.run, o.detail) for o in outs]
    assert len(reads) == 1  # one read of the change log for both
    lines = [e for e in api.history(str(logdir)) if e["kind"] == "purge"]
    assert sorted((e["run"], e["freed"], e["outcome"]) for e in lines) == \
        sorted((r, sizes[r], "purged") for r in RUNS)
    assert all(_manifest(logdir, r).get(retire_purge.LINE_FIRST) for r in RUNS)
    del reads[:]
    assert api.recover_logdir(str(logdir)) == []
    assert reads == []  # settled for good: later starts read no change log
    assert _purge_lines(logdir) == list(RUNS)
    status = api.status(str(logdir))
    assert status["unfinished_operations"] == [] and status["problems"] == [], status


def test_an_old_purge_that_wrote_its_lines_gets_no_second_one(tmp_path, monkeypatch):
    """The version before finished (lines written): the next start reads the log once, writes
    nothing, says nothing, and marks the manifests so that no later start reads it."""
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    _as_the_old_purge_left_it(logdir, RUNS)
    for run in RUNS:
        retire_purge.log_retired_purge(local_context(str(logdir), None), _manifest(logdir, run), 1)
    reads = _count_history_reads(monkeypatch)
    assert api.recover_logdir(str(logdir)) == []
    assert len(reads) == 1 and _purge_lines(logdir) == list(RUNS)
    assert api.recover_logdir(str(logdir)) == [] and len(reads) == 1


def test_a_purge_of_this_version_reads_no_change_log_at_the_next_start(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    api.purge(str(logdir), yes=True)
    assert _purge_lines(logdir) == list(RUNS)
    assert all(_manifest(logdir, r).get(retire_purge.LINE_FIRST) for r in RUNS)
    reads = _count_history_reads(monkeypatch)
    assert api.recover_logdir(str(logdir)) == [] and reads == []
    assert _purge_lines(logdir) == list(RUNS)


def _before_the_lock(monkeypatch, what):
    """Run ``what(run)`` once, when the purge has chosen ``a`` and before it takes its lock."""
    real = purge_choice.lock_for_purge
    done = []

    def hooked(ctx, run, locks):
        if run == "a" and not done:
            done.append(run)
            what(run)
        return real(ctx, run, locks)
    monkeypatch.setattr(purge_choice, "lock_for_purge", hooked)
    return done


def test_an_unretire_finishing_before_the_purge_locks_keeps_its_record(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    original = _retired_logdir(logdir)
    restored = []
    done = _before_the_lock(monkeypatch, lambda run: restored.extend(api.restore(str(logdir), run=run)))
    rep = api.purge(str(logdir), yes=True)
    assert done == ["a"] and [o.status for o in restored] == [Outcome.RESTORED], [o.to_dict() for o in restored]
    m = _manifest(logdir, "a")
    assert m.get("restored_by") and m.get("backup_released_by_restore"), m  # the unretire's record stands
    assert [o["run"] for o in rep.ops] == ["b"], rep.to_dict()
    assert _purge_lines(logdir) == ["b"]  # no line says a's only copy was deleted
    assert {k: v for k, v in user_files(logdir).items() if k.startswith("a/")} == \
        {k: v for k, v in original.items() if k.startswith("a/")}
    assert api.recover_logdir(str(logdir)) == [] and _purge_lines(logdir) == ["b"]


def test_a_second_purge_of_the_same_retirement_gives_no_second_line(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    _retired_logdir(logdir)
    first, stamps = [], []

    def purge_first(run):
        first.append(api.purge(str(logdir), run=run, yes=True))  # b's lock is the outer purge's
        stamps.append(_manifest(logdir, run)["purged_at"])
    done = _before_the_lock(monkeypatch, purge_first)
    second = api.purge(str(logdir), yes=True)
    assert done == ["a"] and [o["run"] for o in first[0].ops] == ["a"], first[0].to_dict()
    assert [o["run"] for o in second.ops] == ["b"], second.to_dict()
    assert _purge_lines(logdir) == list(RUNS)
    assert _manifest(logdir, "a")["purged_at"] == stamps[0]  # the first purge's record, not rewritten
