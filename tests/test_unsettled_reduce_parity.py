"""A reduction killed past its commit record, before recovery, on a disk and on a bucket alike
(review R21 PD14's leftovers): ``status --json`` gives the run's size before in
``unfinished[].bytes_before`` (a bucket's said null though its journal records it), and ``history``
says nothing of the reduction until recovery settles it (a bucket's listed it ``verified … kept``:
its manifest is written before the swap). Once recovered, both list it as verified."""
import json

from helpers_cli import cli_env, run_cli
from test_shards import make_logdir
from test_shards_s3 import DROP_PROFILES
from tb_footprint_plugin import api


def _killed_then_recovered(logdir, pol):
    killed = run_cli("reduce", logdir, "--policy", pol, "--quiet-period", "0", "--yes",
                     env=cli_env(TB_FOOTPRINT_FAILPOINTS="reduce.swap_record=kill"))
    assert killed.returncode == -9, killed.stdout + killed.stderr
    st = json.loads(run_cli("status", logdir, "--json").stdout)
    rows = st["unfinished"]
    assert [r["run"] for r in rows] == ["exp0/run000"], rows
    assert isinstance(rows[0]["bytes_before"], int) and rows[0]["bytes_before"] > 0, rows
    op = rows[0]["op_id"]
    assert not [e for e in api.history(logdir) if e.get("op_id") == op], api.history(logdir)
    assert not [e for e in api.history_page(logdir, newest=10)["entries"] if e.get("op_id") == op]
    rec = run_cli("recover", logdir)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    after = [e for e in api.history(logdir) if e.get("op_id") == op]
    assert [(e["kind"], e["outcome"]) for e in after] == [("reduce", "verified")], after
    return rows[0]["bytes_before"], after[0]["before"]


def test_disk_reduce_killed_past_commit_says_its_size_and_no_history(tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    ld = make_logdir(tmp_path / "logs", 1)
    unfinished_bytes, history_before = _killed_then_recovered(ld, pol)
    assert unfinished_bytes == history_before


def test_bucket_reduce_killed_past_commit_says_its_size_and_no_history(s3_bucket, tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 1), "logs")
    unfinished_bytes, history_before = _killed_then_recovered(url, pol)
    assert unfinished_bytes == history_before
