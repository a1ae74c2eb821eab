"""A bucket recovery's rolled-back lines are written though the change log is full, and said when
they cannot be (review R19 P4): with ``.tb-footprint/history.jsonl`` past its limit every append
was refused, and recovery, having no outcome to tell, dropped its lines without a word. Now the
full log rolls over (sealed aside, every line of it still read) and a refused append is said in
the recovery's detail. On moto's S3, the limit made small."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, StoreError
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.engine import history
from tb_footprint_plugin.storage import store_object
from tb_footprint_plugin.storage.store import StoreFailure

pytestmark = pytest.mark.usefixtures("disarm_faults")

LIMIT = 256 << 10
DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _killed_reduce(s3_bucket, tmp_path, prefix: str, planted: bytes) -> str:
    """A demo logdir on moto with ``planted`` as its change log, reduced by a process killed
    before its commit (nothing of it done): recovery rolls each run back."""
    root = tmp_path / prefix
    generate_demo(str(root), scale=0.05)
    os.makedirs(root / ".tb-footprint", exist_ok=True)
    (root / ".tb-footprint" / "history.jsonl").write_bytes(planted)
    url = s3_bucket.upload(root, prefix)
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TB_FOOTPRINT_FAILPOINTS": "reduce.verify=kill"}
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", url, "--policy", str(pol),
                        "--quiet-period", "0", "--yes"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    return url


def _old_lines(n: int) -> bytes:
    return b"".join(history.line_of({"time": 1000.0 + i, "run": f"old{i}", "op_id": f"old-{i}", "kind": "reduce",
                                     "outcome": "verified", "reason": "x" * 200}) for i in range(n))


def test_recovery_writes_its_lines_though_the_log_is_full(s3_bucket, tmp_path, monkeypatch):
    n = LIMIT // 400
    while len(_old_lines(n + 1)) <= LIMIT:
        n += 1
    planted = _old_lines(n)
    assert LIMIT - 300 < len(planted) <= LIMIT  # full: one more line takes it past its limit
    url = _killed_reduce(s3_bucket, tmp_path, "full", planted)
    # the bound a bucket declares for its appends (its change log takes it as its limit)
    monkeypatch.setattr(store_object, "BUCKET_CAPABILITIES",
                        dataclasses.replace(store_object.BUCKET_CAPABILITIES, append_limit=LIMIT))
    monkeypatch.setattr(store_object, "READ_ALL_LIMIT", LIMIT)
    settled = api.recover_logdir(url)
    assert [s.action for s in settled] == ["rolled_back"], settled
    assert "not written" not in settled[0].detail
    runs = {r["run"] for s in settled for r in s.runs}
    entries = api.history(url)
    rolled = [e for e in entries if e.get("outcome") == Outcome.ROLLED_BACK]
    assert runs and {e["run"] for e in rolled} == runs and len(rolled) == len(runs), rolled
    assert [e["run"] for e in entries if e["run"].startswith("old")] == [f"old{i}" for i in range(n)]


def test_recovery_says_when_its_lines_could_not_be_written(s3_bucket, tmp_path, monkeypatch):
    url = _killed_reduce(s3_bucket, tmp_path, "refused", _old_lines(3))

    def refused(self, lines):
        raise StoreFailure(StoreError.PERMISSION, self.own_key(), "access denied")

    monkeypatch.setattr(history.ChangeLog, "append_lines", refused)
    settled = api.recover_logdir(url)
    assert [s.action for s in settled] == ["rolled_back"], settled
    assert "change-log line was not written" in settled[0].detail and "access denied" in settled[0].detail, \
        settled[0].detail
