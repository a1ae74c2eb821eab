"""A bucket's rolled-back reduce leaves its change-log line with its code, as a disk's does (#26
loose end): a disk's rollback writes ``history.jsonl`` a line ``outcome: rolled_back`` with the
outcome's code (``test_rollback_history_code``); a bucket's rollback dropped the manifest, its
only record, and wrote nothing, so ``history`` on a bucket never showed a failed reduce. On
moto's S3: a rewrite whose verification fails, and a batch of drop-only runs cancelled after its
backups, each show in ``api.history`` with the disk's fields, outcome and code.
"""
from __future__ import annotations

import pytest

from test_objstore import _write_rewrite_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.engine import bucket_rewrite, faults
from tb_footprint_plugin.engine.history import CSV_FIELDS

pytestmark = pytest.mark.usefixtures("disarm_faults")

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _rolled_back_lines(url: str) -> list:
    return [e for e in api.history(url) if e.get("outcome") == Outcome.ROLLED_BACK]


def _as_a_disk_says_it(line: dict, o, policy: str, code: str) -> None:
    """The fields a disk's rolled-back line has (every column of ``history --csv`` but a purge's
    ``freed``, a shard's label and a verified reduce's figures, which the history adds as things
    stand when read), with the run's own values and the outcome's code."""
    figures = {"removed_from_logdir_bytes", "freed_now_bytes", "freed_after_purge_bytes"}
    assert set(CSV_FIELDS) - {"freed", "shard"} - figures <= set(line), sorted(set(CSV_FIELDS) - set(line))
    assert (line["op_id"], line["run"], line["kind"], line["policy"]) == (o.op_id, o.run, "reduce", policy), line
    assert (line["verified"], line["backup_kept"], line["backup"]) == (False, False, "none"), line
    assert line["before"] == line["after"] == o.bytes_before, line
    assert line["code"] == code and line["reason"] == o.reason, line
    assert line["user"] and line["host"] and line["tool_version"], line


def test_a_bucket_rewrite_whose_verification_fails_is_in_the_history_with_its_code(s3_bucket, tmp_path,
                                                                                   monkeypatch):
    url = s3_bucket.upload(_write_rewrite_logdir(tmp_path / "logs"), "v")
    before = s3_bucket.hashes("v")
    monkeypatch.setattr(bucket_rewrite, "compare_views",
                        lambda *a, **kw: {"ok": False, "failed": ["forced by the test"], "checks": []})
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"],
                            verify_backends=("python",))
    (o,) = rep.outcomes
    assert (o.status, o.code) == (Outcome.ROLLED_BACK, Failure.ERROR), o.to_dict()
    assert o.reason.startswith("verification failed"), o.reason
    (line,) = _rolled_back_lines(url)
    _as_a_disk_says_it(line, o, "archive", "error")
    # the run as it was; the change log is the one object of the state folder it leaves
    after = {k: v for k, v in s3_bucket.hashes("v").items() if not k.startswith(".tb-footprint/")}
    assert after == before
    assert api.pending_operations(url) == []


def test_a_cancelled_bucket_batch_is_in_the_history_with_its_code(s3_bucket, tmp_path):
    root = tmp_path / "demo"
    generate_demo(str(root), scale=0.05)
    url = s3_bucket.upload(root, "b")
    cancel = api.CancelToken()
    faults.arm("reduce.backup", cancel.cancel)  # the driver honours it right after the backups
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, cancel=cancel)
    rolled = [o for o in rep.outcomes if o.status == Outcome.ROLLED_BACK]
    assert rolled and all(o.code == Failure.INTERRUPTED for o in rolled), [o.to_dict() for o in rep.outcomes]
    lines = {e["run"]: e for e in _rolled_back_lines(url)}
    assert sorted(lines) == sorted(o.run for o in rolled)
    for o in rolled:
        _as_a_disk_says_it(lines[o.run], o, "drop-profiles", "interrupted")
    assert api.pending_operations(url) == []


def test_a_killed_bucket_reduce_rolled_back_by_recovery_is_in_the_history_coded_interrupted(s3_bucket, tmp_path):
    """Recovery's rollback of a reduce killed before its commit (a disk's recovery writes the line
    'interrupted (crash or kill)', code interrupted): each run of the batch gets that line."""
    import json
    import os
    import signal
    import subprocess
    import sys

    root = tmp_path / "demo"
    generate_demo(str(root), scale=0.05)
    url = s3_bucket.upload(root, "k")
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TB_FOOTPRINT_FAILPOINTS": "reduce.verify=kill"}
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", url, "--policy", str(pol),
                        "--quiet-period", "0", "--yes"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    settled = api.recover_logdir(url)
    assert [s.action for s in settled] == ["rolled_back"], settled
    runs = {r["run"] for s in settled for r in s.runs}
    lines = _rolled_back_lines(url)
    assert runs and {e["run"] for e in lines} == runs and len(lines) == len(runs), lines
    for e in lines:
        assert (e["code"], e["outcome"], e["verified"], e["backup"]) == ("interrupted", "rolled_back", False, "none")
        assert e["reason"].startswith("interrupted (crash or kill)") and e["before"] == e["after"], e
