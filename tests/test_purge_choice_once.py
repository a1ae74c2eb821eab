"""A disk's two purges (a reduction's backups, a retired run's vault copy) choose what they may take
by one rule, ``engine.purge_choice`` (review R r20 R15), and pass over what they keep with one
shape of ``kept`` row: ``op_id, run, kind, bytes, code, detail``. Before, a reduction's rows had no
``kind`` and its ``unfinished_operation`` row said ``bytes: 0`` where a retired run's said what
stays in the vault."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from helpers_cli import cli_env
from test_late_records import PY, image_run
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome, Skip
from tb_footprint_plugin.engine import catalogue

pytestmark = pytest.mark.usefixtures("disarm_faults")

KEYS = {"op_id", "run", "kind", "bytes", "code", "detail"}

HOLD = r'''
import sys, time
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.run_lock import run_lock
locks = [run_lock(Context(sys.argv[1]), r).acquire() for r in sys.argv[2:]]
print("held", flush=True)
time.sleep(600)
'''


def _logdir(tmp_path):
    """Run ``r`` reduced (its backup in the vault), run ``t`` retired (its copy there)."""
    logdir = tmp_path / "logdir"
    image_run(logdir / "r")
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY,
                            vault_format="hardlink")
    assert rep.ok and rep.outcomes[0].status == Outcome.VERIFIED, [o.to_dict() for o in rep.outcomes]
    with synth.EventWriter(str(logdir / "t")) as w:
        for step in range(20):
            w.scalar("loss", step, 1.0 / (step + 1))
    (logdir / "t" / "notes.txt").write_bytes(os.urandom(500))
    rep = api.retire(str(logdir), api.retire_rule(runs=["t"]), dry_run=False, quiet_period=0)
    assert rep.ok, rep.to_dict()
    ops = {m["run"]: m for m in api.operations(str(logdir)) if m["kind"] in ("reduce", "retire")}
    assert {r: m["kind"] for r, m in ops.items()} == {"r": "reduce", "t": "retire"}
    return logdir, ops


def _rows(rep):
    return {k["run"]: k for k in json.loads(json.dumps(rep.to_dict()))["kept"]}


def test_a_locked_run_is_kept_with_the_same_row_for_both_kinds(tmp_path):
    logdir, ops = _logdir(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(logdir), "r", "t"], env=cli_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rep = api.purge(str(logdir), yes=True)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    rows = _rows(rep)
    assert rep.ops == [] and set(rows) == {"r", "t"}, rep.to_dict()
    for run, kind in (("r", "reduce"), ("t", "retire")):
        k = rows[run]
        assert set(k) == KEYS, k
        assert (k["op_id"], k["kind"], k["code"]) == (ops[run]["op_id"], kind, Skip.LOCKED.value), k
        assert k["bytes"] > 0 and "another process" in k["detail"], k


def test_an_unfinished_operation_keeps_both_kinds_with_what_stays(tmp_path, monkeypatch):
    """A journal left on each run (one recovery could not settle): both kinds kept
    ``unfinished_operation``, each row saying the bytes that stay in the vault."""
    logdir, ops = _logdir(tmp_path)
    jdir = tmp_path / "journals"
    jdir.mkdir()
    left = []
    for run in ("r", "t"):
        p = jdir / f"op-{run}.jsonl"
        p.write_text(json.dumps({"type": "begin", "run": run}) + "\n")
        left.append(SimpleNamespace(op_id=f"op-{run}", path=str(p)))
    monkeypatch.setattr(catalogue, "pending_journals", lambda journal_dir: iter(left))
    for yes in (False, True):
        rep = api.purge(str(logdir), yes=yes)
        rows = _rows(rep)
        assert rep.ops == [] and set(rows) == {"r", "t"}, rep.to_dict()
        for run, kind in (("r", "reduce"), ("t", "retire")):
            k = rows[run]
            assert set(k) == KEYS, k
            assert (k["kind"], k["code"]) == (kind, Finding.UNFINISHED.value), k
            assert k["bytes"] > 0 and "tb-footprint recover" in k["detail"], k
    monkeypatch.undo()
    rep = api.purge(str(logdir), yes=True)  # nothing of either was deleted: both go now
    assert sorted(o["run"] for o in rep.ops) == ["r", "t"] and rep.kept == [], rep.to_dict()


def test_a_cancel_keeps_both_kinds_with_the_same_row(tmp_path):
    from tb_footprint_plugin.engine.context import CancelToken

    logdir, ops = _logdir(tmp_path)
    token = CancelToken()
    token.cancel()
    rows = _rows(api.purge(str(logdir), yes=True, cancel=token))
    assert {r: (k["kind"], k["code"], set(k) == KEYS) for r, k in rows.items()} == \
        {"r": ("reduce", "interrupted", True), "t": ("retire", "interrupted", True)}, rows


def test_the_filters_are_one_rule():
    from tb_footprint_plugin.engine.purge_choice import PurgeFilter

    m = {"op_id": "o1", "run": "a", "finished_at": 100.0}
    assert PurgeFilter(now=200.0).admits(m)
    assert not PurgeFilter(now=200.0).admits(dict(m, backup_purged=True))
    assert PurgeFilter(now=200.0, older_than=100.0).admits(m)
    assert not PurgeFilter(now=200.0, older_than=101.0).admits(m)
    assert not PurgeFilter(now=200.0, op="o2").admits(m) and PurgeFilter(now=200.0, op="o1").admits(m)
    assert not PurgeFilter(now=200.0, run="b").admits(m)
    assert not PurgeFilter(now=200.0, runs=["b"]).admits(m) and PurgeFilter(now=200.0, runs=["a"]).admits(m)
    assert not PurgeFilter(now=200.0, op_ids=[]).admits(m)
