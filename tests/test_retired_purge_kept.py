"""A disk's purge of retired runs lists the retired runs it passes over in ``kept``, with their
code, as a reduction's purge lists the backups it keeps: a run another process is changing
(``locked``) and a run with an unfinished operation (``unfinished_operation``). Before,
``purge_retired`` skipped them without a word: the purge reported neither the run nor why, and
the CLI's output and JSON said nothing of it. Nothing of a kept retired run is deleted."""
import json
import signal
import subprocess
import sys

import pytest

from helpers_cli import cli_env, run_cli
from helpers_runs import write_notes_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Skip
from tb_footprint_plugin.engine import purge_choice

RUNS = ("a", "b")

HOLD = r'''
import sys, time
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.run_lock import run_lock
lock = run_lock(Context(sys.argv[1]), sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(600)
'''


def _retired(root):
    """Runs ``a`` and ``b`` retired into the default vault; returns each one's retirement."""
    write_notes_runs(root, RUNS)
    rep = api.retire(str(root), api.retire_rule(runs=list(RUNS)), dry_run=False, quiet_period=0)
    assert rep.ok, rep.to_dict()
    return {m["run"]: m for m in api.operations(str(root)) if m["kind"] == "retire"}


def _folder(root, m):
    d = root / ".tb-footprint" / "retired" / m["op_id"]
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def test_a_locked_retired_run_is_kept_with_its_code_in_the_report_the_cli_and_its_json(tmp_path):
    logdir = tmp_path / "logs"
    ms = _retired(logdir)
    before = _folder(logdir, ms["a"])
    assert before
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(logdir), "a"], env=cli_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = run_cli("purge", logdir, "--yes", "--json", "--run", "a")
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["ops"] == [] and d["freed_bytes"] == 0, d
        (k,) = d["kept"]
        assert (k["op_id"], k["run"], k["kind"], k["code"]) == (ms["a"]["op_id"], "a", "retire", Skip.LOCKED.value), k
        assert k["bytes"] > 0 and "another process" in k["detail"], k
        r = run_cli("purge", logdir, "--yes")
        assert r.returncode == 0, r.stderr
        kept = [line for line in r.stdout.splitlines() if line.strip().startswith("kept ")]
        assert len(kept) == 1 and ms["a"]["op_id"] in kept[0] and "(retired run)" in kept[0] \
            and "[locked]" in kept[0], r.stdout
        assert "being changed by another process" in r.stdout, r.stdout
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert _folder(logdir, ms["a"]) == before  # nothing of the kept run went
    # the other run was purged, and the kept one goes once its lock is free
    assert not (logdir / ".tb-footprint" / "retired" / ms["b"]["op_id"]).exists()
    rep = api.purge(str(logdir), yes=True)
    assert [o["run"] for o in rep.ops] == ["a"] and rep.kept == [], rep.to_dict()


def test_a_retired_run_with_an_unfinished_operation_is_kept_unfinished(tmp_path, monkeypatch):
    """An operation on run ``a`` left unfinished (one recovery could not settle: ``unsettled_op``
    names it, standing in for such a journal): the preview and the purge list ``a`` kept with
    ``unfinished_operation``, never in ``ops``; ``b`` is purged."""
    logdir = tmp_path / "logs"
    ms = _retired(logdir)
    before = _folder(logdir, ms["a"])
    monkeypatch.setattr(purge_choice, "unsettled_op", lambda ctx, run: "op-x" if run == "a" else None)
    for yes in (False, True):
        rep = api.purge(str(logdir), yes=yes)
        assert [o["run"] for o in rep.ops] == ["b"], rep.to_dict()
        (k,) = rep.kept
        assert (k["run"], k["kind"], k["code"]) == ("a", "retire", Finding.UNFINISHED), k
        assert "tb-footprint recover" in k["detail"] and k["bytes"] > 0, k
        assert json.loads(json.dumps(rep.to_dict()))["kept"][0]["code"] == "unfinished_operation"
    assert _folder(logdir, ms["a"]) == before


def test_a_retired_run_a_cancel_kept_says_it_is_a_retired_run(tmp_path):
    """A cancel before the intent keeps the retired runs (``interrupted``): their rows say
    ``kind: "retire"`` as every other kept retired run's does (docs/json-schema.md)."""
    from tb_footprint_plugin.engine.context import CancelToken

    logdir = tmp_path / "logs"
    ms = _retired(logdir)
    token = CancelToken()
    token.cancel()
    rep = api.purge(str(logdir), yes=True, cancel=token)
    assert rep.ops == [] and sorted((k["run"], k["code"], k.get("kind")) for k in rep.kept) == \
        [("a", "interrupted", "retire"), ("b", "interrupted", "retire")], rep.to_dict()
    assert all(_folder(logdir, m) for m in ms.values())
