"""``restore`` on a bucket logdir says what it will bring back for a retired run as on a disk (its
plan line, "1 run(s) to restore ..."), and its hint of what can come back names retired runs: the CLI
left a bucket's retired runs out of both (review R21 PD9, PD21)."""
from conftest import copy_real
from helpers_cli import run_cli
from tb_footprint_plugin import api


def test_a_buckets_restore_plans_and_names_its_retired_runs(tmp_path, s3_bucket):
    logdir = tmp_path / "ld"
    for run in ("kept", "gone"):
        copy_real("tf/keras_profiled/train", logdir / run)
    url = s3_bucket.upload(logdir, "plan")
    (ret,) = api.retire(url, api.retire_rule(runs=["gone"]), dry_run=False, quiet_period=0).outcomes
    assert str(ret.status) == "verified", ret.reason
    typo = run_cli("restore", url, "gne", "--yes")
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "runs with something to restore: gone" in typo.stderr, typo.stderr
    back = run_cli("restore", url, "gone", "--yes")
    assert back.returncode == 0, back.stdout + back.stderr
    assert f"gone: retired run {ret.op_id}" in back.stdout and "1 run(s) to restore" in back.stdout, back.stdout
