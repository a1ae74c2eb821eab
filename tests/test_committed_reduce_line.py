"""A disk reduce killed after its verified manifest and before its change-log line gets that
line from recovery, exactly once (review R20 P5).

The commit writes the manifest (durable), then the change-log line, then the commit record.
A SIGKILL between the first two left a journal without its commit record; recovery found the
run's own verified manifest and said "completed", but nothing wrote the line: ``status`` listed
the operation and ``history`` had no reduce line of it, for good. A kill after the line (before
the commit record) must not get a second one.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.demo import generate_demo

RUN = "resnet_torch"

_CHILD = """
import os, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import catalogue, transaction
def kill(*a, **k):
    os.kill(os.getpid(), 9)
"""

_REDUCE = """
api.reduce_logdir(sys.argv[1], policy="lossless", dry_run=False, quiet_period=0, runs=[sys.argv[2]],
                  verify_backends=("python",))
"""


def _child(body: str, logdir: str) -> subprocess.CompletedProcess:
    code = _CHILD + textwrap.dedent(body) + _REDUCE
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("TB_FOOTPRINT_FAILPOINTS", None)
    return subprocess.run([sys.executable, "-c", code, logdir, RUN], capture_output=True, text=True, env=env,
                          timeout=300)


def _reduce_lines(logdir: str) -> list:
    return [e for e in api.history(logdir) if e.get("kind") == "reduce"]


def _verified_ops(logdir: str) -> list:
    return [o for o in api.operations(logdir) if o.get("kind") == "reduce" and o.get("outcome") == Outcome.VERIFIED]


def _killed_demo(tmp_path, body: str) -> str:
    root = str(tmp_path / "demo")
    generate_demo(root, scale=0.05)
    p = _child(body, root)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    return root


def test_a_reduce_killed_before_its_line_gets_it_from_recovery_once(tmp_path):
    root = _killed_demo(tmp_path, """
        _append = catalogue.append_history
        def append(state, entry):
            if entry.get("kind") == "reduce" and entry.get("outcome") == "verified":
                kill()
            _append(state, entry)
        catalogue.append_history = append
        """)
    assert _reduce_lines(root) == []  # the kill came before the line
    settled = api.recover_logdir(root)
    assert [str(s.action) for s in settled if s.kind == "reduce"] == ["completed"], settled
    (op,) = _verified_ops(root)
    (line,) = _reduce_lines(root)
    assert (line["op_id"], line["run"], line["outcome"], line["verified"], line["backup_kept"]) == \
        (op["op_id"], RUN, "verified", True, True)
    assert (line["before"], line["after"], line["policy"]) == (op["bytes_before"], op["bytes_after"], "lossless")
    assert line["after"] < line["before"]
    assert line["time"] == op["finished_at"]  # when the line would have been written
    assert api.pending_operations(root) == []
    assert api.recover_logdir(root) == []
    assert len(_reduce_lines(root)) == 1


def test_a_reduce_killed_after_its_line_gets_no_second_one(tmp_path):
    """The line written, the commit record not: recovery finds the manifest and the line."""
    root = _killed_demo(tmp_path, """
        _record = transaction.append_record
        def record(journal, rec, *a, **k):
            if rec.get("type") == "commit":
                kill()
            return _record(journal, rec, *a, **k)
        transaction.append_record = record
        """)
    (first,) = _reduce_lines(root)
    settled = api.recover_logdir(root)
    assert [str(s.action) for s in settled if s.kind == "reduce"] == ["completed"], settled
    lines = _reduce_lines(root)
    assert Counter(e["op_id"] for e in lines) == {first["op_id"]: 1}, json.dumps(lines)[:2000]
    assert api.pending_operations(root) == []
