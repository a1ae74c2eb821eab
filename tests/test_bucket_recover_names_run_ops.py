"""``recover`` of a killed bucket batch names each run's own op id, the one ``status``, ``history``
and ``restore`` name: a batch's journal is named by the batch, and recover's line gave only that id,
which no other command knows (review R21 PD14)."""
import json

from helpers_cli import cli_env, run_cli
from test_shards import make_logdir
from test_shards_s3 import DROP_PROFILES
from tb_footprint_plugin import api


def test_recover_of_a_killed_bucket_batch_names_each_runs_op_id(s3_bucket, tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 2), "logs")
    killed = run_cli("reduce", url, "--policy", pol, "--quiet-period", "0", "--yes",
                     env=cli_env(TB_FOOTPRINT_FAILPOINTS="reduce.swap_record=kill"))
    assert killed.returncode == -9, killed.stdout + killed.stderr
    # what status names of an unsettled reduction: its unfinished rows (not yet an operation, as on a disk)
    run_ops = sorted(m["op_id"] for m in json.loads(run_cli("status", url, "--json").stdout)["unfinished"])
    assert len(run_ops) == 2, run_ops
    rec = run_cli("recover", url)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    for op in run_ops:
        assert f"op {op}" in rec.stdout, rec.stdout
    hist = {e["op_id"] for e in api.history(url) if e.get("kind") == "reduce"}
    assert hist == set(run_ops), (hist, run_ops)
