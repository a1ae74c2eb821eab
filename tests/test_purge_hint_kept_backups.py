"""A purge whose ``--run`` matches no run names the runs with backups to purge: those whose backups
the vault still keeps, on a disk and on a bucket alike. A run whose only backup was purged keeps
its manifest, and the hint listed it among "runs with backups" on both engines (review R21 PD21)."""
import json

from helpers_cli import run_cli
from test_shards import make_logdir
from test_shards_s3 import DROP_PROFILES


def _purged_one_then_mistyped(logdir, pol):
    red = run_cli("reduce", logdir, "--policy", pol, "--quiet-period", "0", "--yes")
    assert red.returncode == 0, red.stdout + red.stderr
    ops = json.loads(run_cli("status", logdir, "--json").stdout)["operations"]
    assert sorted(o["run"] for o in ops) == ["exp0/run000", "exp1/run001"], ops
    gone = run_cli("purge", logdir, "--run", "exp0/run000", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    typo = run_cli("purge", logdir, "--run", "exp1/run00", "--yes")
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "(runs with backups: exp1/run001)" in typo.stderr, typo.stderr
    # the purged run is still selectable (its manifest stays): purging it again purges nothing, exit 0
    again = run_cli("purge", logdir, "--run", "exp0/run000", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr


def test_disk_purge_hint_names_runs_with_kept_backups_only(tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    _purged_one_then_mistyped(make_logdir(tmp_path / "logs", 2), pol)


def test_bucket_purge_hint_names_runs_with_kept_backups_only(s3_bucket, tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    _purged_one_then_mistyped(s3_bucket.upload(make_logdir(tmp_path / "logs", 2), "logs"), pol)
