"""A bucket reduction says what it verified as a disk's does, whichever bucket transaction ran it.

- A rewrite that only gzipped PyTorch traces (lossless: no event file rewritten, so no reader is
  started, as for a disk's run whose event files stay) wrote its manifest without a
  ``verification``: the operations list and the tab's check page then said "Not verified" of a run
  the reduce reported verified. Now the manifest carries the checks made (each copy decompresses to
  the original, read back through TensorBoard's reader after upload, the removed files' backups,
  the plan's lines), ``ok``, in the drop-only run's ``listing`` mode.
- A drop-only batch's outcome (``reduce --json``) carried the after-swap listing's figures alone;
  a rewrite's and a disk's carry the checks as well. Now it carries its manifest's checks, then the
  listing's line.
"""
import json

from helpers_cli import run_cli
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome

from test_objstore import _write_rewrite_logdir


def test_a_compress_only_bucket_rewrite_records_what_it_verified(bucket, tmp_path):
    url = bucket.upload(_write_rewrite_logdir(tmp_path / "logs"), "gz")
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"]).outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    (m,) = [m for m in api.operations(url) if m["op_id"] == o.op_id]
    v = m.get("verification") or {}
    assert v.get("ok") is True and v.get("mode") == "listing", m
    names = [c["name"] for c in v["checks"]]
    assert names.count("compress") == 2 and "read back" in names and "plan" in names, v["checks"]
    assert all(c["ok"] for c in v["checks"]), v["checks"]
    assert all("decompressed content identical (sha256)" in c["detail"] for c in v["checks"] if c["name"] == "compress")
    # the run's outcome: the same checks, then the listing after the swap
    assert [c["name"] for c in o.verification["checks"]] == names + ["store listing"], o.verification


def test_a_drop_only_bucket_batch_outcome_carries_its_manifests_checks(bucket, tmp_path):
    from conftest import copy_real

    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "a")
    url = bucket.upload(logdir, "drop")
    p = run_cli("reduce", url, "--policy", "archive", "--quiet-period", "0", "--yes", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    (o,) = json.loads(p.stdout)["outcomes"]
    assert o["status"] == "verified", o
    (m,) = [m for m in api.operations(url) if m["op_id"] == o["op_id"]]
    manifest_checks = m["verification"]["checks"]
    assert manifest_checks and [c["name"] for c in manifest_checks][-1] == "plan", manifest_checks
    assert o["verification"]["checks"][:-1] == manifest_checks, o["verification"]
    assert o["verification"]["checks"][-1]["name"] == "store listing", o["verification"]
    assert o["verification"]["removed"] >= 1, o["verification"]  # the listing's figures stay
