"""A batch killed after one of its runs was rolled back, before the batch ended, keeps that run's
change-log line, and recovery leaves exactly one line per rolled-back operation (review: r18
report E, "a batch's lines are written at its end()").

A bucket batch of drop-only runs (``engine.bucket_batch``) collected the lines of the runs it took
out or rolled back and appended them at its ``end()``; a SIGKILL between the rollback and that
append lost them: after the commit record recovery finishes the batch and re-settles the runs taken
out (``dropped``) without a line, and a rollback that closed the journal left recovery nothing to
settle. A disk's rollback writes its line itself, but a kill after that line and before its
journal was closed had recovery roll back again and write a second line.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.engine.recovery_rules import CANCELLED_REASON
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.demo import generate_demo

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}

#: the child's preamble: its reduce, with failpoints armed by callables (``faults.arm``)
_CHILD = """
import json, os, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.store import StoreFailure
def kill(*a, **k):
    os.kill(os.getpid(), 9)
"""


def _run_child(body: str, logdir: str, policy) -> subprocess.CompletedProcess:
    code = _CHILD + textwrap.dedent(body) + textwrap.dedent("""
        api.reduce_logdir(sys.argv[1], policy=json.loads(sys.argv[2]), dry_run=False, quiet_period=0,
                          verify_backends=("python",))
        """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("TB_FOOTPRINT_FAILPOINTS", None)
    return subprocess.run([sys.executable, "-c", code, logdir, json.dumps(policy)], capture_output=True,
                          text=True, env=env, timeout=300)


def _rolled_back(logdir: str) -> list:
    return [e for e in api.history(logdir) if e.get("outcome") == Outcome.ROLLED_BACK]


def _one_line_each(logdir: str) -> dict:
    lines = _rolled_back(logdir)
    twice = [op for op, n in Counter(e["op_id"] for e in lines).items() if n > 1]
    assert not twice, f"operations with more than one rolled-back line: {twice}: {lines}"
    return {e["run"]: e for e in lines}


@pytest.fixture
def demo_bucket(s3_bucket, tmp_path):
    root = tmp_path / "demo"
    generate_demo(str(root), scale=0.05)
    return s3_bucket.upload(root, "k")


def test_a_bucket_batch_killed_after_its_commit_record_keeps_the_line_of_a_run_it_took_out(demo_bucket):
    """The first run's backup copy is refused (it is taken out, rolled back alone); the batch goes on
    and is killed right after its commit record: recovery finishes the others, and the run taken
    out has its line, with the code it was taken out for."""
    p = _run_child("""
        n = [0]
        def refuse_first():
            n[0] += 1
            if n[0] == 1:
                raise StoreFailure(StoreError.PERMISSION, "runs/x", "refused by the test")
        faults.arm("reduce.backup_copy", refuse_first)
        faults.arm("reduce.swap_record", kill)
        """, demo_bucket, DROP_PROFILES)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    settled = api.recover_logdir(demo_bucket)
    assert [str(s.action) for s in settled] == ["completed"], settled
    lines = _one_line_each(demo_bucket)
    assert len(lines) == 1, lines
    (line,) = lines.values()
    assert line["code"] == "store_error" and "refused by the test" in line["reason"], line
    assert line["run"] not in {r["run"] for s in settled for r in s.runs}, (line, settled)
    assert api.pending_operations(demo_bucket) == []


def test_a_cancelled_bucket_batch_killed_before_its_end_keeps_every_line(demo_bucket):
    """A cancel after the backups rolls every run back and closes the journal; a kill before the
    batch's end (where its lines were appended) left no journal and no line."""
    p = _run_child("""
        from tb_footprint_plugin.engine import bucket_batch, context
        token = context.CancelToken()
        faults.arm("reduce.backup", token.cancel)
        real_end = bucket_batch.ObjectBatchReduce.end
        def end(self):
            if self.outs and all(o.status == "rolled_back" for o in self.outs.values() if o.op_id):
                kill()
            real_end(self)
        bucket_batch.ObjectBatchReduce.end = end
        _reduce = api.reduce_logdir
        api.reduce_logdir = lambda *a, **k: _reduce(*a, cancel=token, **k)
        """, demo_bucket, DROP_PROFILES)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    api.recover_logdir(demo_bucket)
    lines = _one_line_each(demo_bucket)
    assert len(lines) >= 2, lines
    assert {e["code"] for e in lines.values()} == {"interrupted"}, lines
    assert api.pending_operations(demo_bucket) == []


def test_a_bucket_batch_killed_after_writing_its_lines_gets_no_second_line(demo_bucket):
    """The lines were appended, then the kill came before the journal was closed: recovery rolls
    the runs back (again) and writes no second line."""
    p = _run_child("""
        from tb_footprint_plugin.engine import bucket_batch, context
        token = context.CancelToken()
        faults.arm("reduce.backup", token.cancel)
        real_append = bucket_batch.append_rolled_back
        def append(store, lines, outs=None):
            real_append(store, lines, outs)
            if lines:
                kill()
        bucket_batch.append_rolled_back = append
        _reduce = api.reduce_logdir
        api.reduce_logdir = lambda *a, **k: _reduce(*a, cancel=token, **k)
        """, demo_bucket, DROP_PROFILES)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    settled = api.recover_logdir(demo_bucket)
    assert [str(s.action) for s in settled] == ["rolled_back"], settled
    lines = _one_line_each(demo_bucket)  # (a journal's own runs are not shown before it is settled)
    assert len(lines) >= 2 and lines.keys() == {r["run"] for r in settled[0].runs}, (lines, settled)
    # the batch's own lines stand (its cancel), none of recovery's "interrupted (crash or kill)"
    assert {(e["code"], e["reason"]) for e in lines.values()} == {("interrupted", CANCELLED_REASON)}
    assert api.pending_operations(demo_bucket) == []


def test_a_bucket_rewrite_killed_before_its_line_keeps_it(s3_bucket, tmp_path):
    """One run's rewrite (``bucket_rewrite.ObjectReduce``) whose verification fails: its rollback
    closed the journal, then appended the line; a kill in between left neither journal nor line."""
    from test_objstore import _write_rewrite_logdir

    url = s3_bucket.upload(_write_rewrite_logdir(tmp_path / "logs"), "w")
    p = _run_child("""
        from tb_footprint_plugin.engine import bucket_rewrite
        bucket_rewrite.compare_views = lambda *a, **kw: {"ok": False, "failed": ["forced by the test"], "checks": []}
        bucket_rewrite.append_rolled_back = kill
        _reduce = api.reduce_logdir
        api.reduce_logdir = lambda *a, **k: _reduce(*a, runs=["exp/hist"], **k)
        """, url, "archive")
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    api.recover_logdir(url)
    lines = _one_line_each(url)
    assert list(lines) == ["exp/hist"] and lines["exp/hist"]["code"] == "interrupted", lines
    assert api.pending_operations(url) == []


def test_a_disk_rollback_killed_after_its_line_gets_no_second_line(tmp_path):
    """A disk's rollback writes the manifest and the line, then drops the backups: a kill there
    leaves the journal, and recovery's rollback wrote a second line for the same operation."""
    root = tmp_path / "demo"
    generate_demo(str(root), scale=0.05)
    p = _run_child("""
        from tb_footprint_plugin.engine import vault
        faults.arm("reduce.verify", "raise")
        vault.Vault.delete_blobs = kill
        """, str(root), "archive")
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    (first,) = _one_line_each(str(root)).values()
    assert first["code"] == "error", first
    settled = api.recover_logdir(str(root))
    assert [str(s.action) for s in settled] == ["rolled_back"], settled
    assert list(_one_line_each(str(root))) == [first["run"]]
    assert api.pending_operations(str(root)) == []
