"""A shard worker killed in a bucket run's rewrite, right after its journal object, leaves the run in
its batch ledger as ``reducing`` and stalled, as a drop-only batch's run is left (helper L's note,
r30): the rewrite's ``reducing`` mark waited to be written with its first ``verifying`` mark, so a
kill before the verify step left no ledger entry at all. ``BucketRewrite.journal`` writes the
waiting marks right before the journal object, as ``bucket_batch``'s does; the next start settles
the run and it is reduced once."""
import json
import signal

from test_objstore import _write_rewrite_logdir
from test_shard_ledger_per_batch_bucket import counted  # noqa: F401 - the counting proxy fixture
from test_shards_s3 import _state_keys, _worker
from tb_footprint_plugin import api

RUN = "torch/resnet"  # lossless gzips its traces: a rewrite run (``bucket_rewrite``)


def _run(url, shard, **kw):
    p = _worker(url, shard, "lossless", **kw)
    out, err = p.communicate(timeout=600)
    return p, out, err


def test_a_rewrite_run_killed_after_its_journal_is_in_the_ledger_as_reducing(s3_bucket, tmp_path):
    url = s3_bucket.upload(_write_rewrite_logdir(tmp_path / "logs"), "logs")
    p, _out, err = _run(url, "0/1", TB_FOOTPRINT_FAILPOINTS="reduce.journal=kill")
    assert p.returncode == -signal.SIGKILL, err
    b = api.status(url)["batch"]
    assert b is not None, "no ledger entry of the killed run"
    assert b["stalled"] == [RUN] and b["runs"].get(RUN, {}).get("state") == "reducing", b
    p, out, err = _run(url, "0/1")  # the next start settles it, then reduces it
    assert p.returncode == 0, err
    assert json.loads(out)["ledger_problems"] == []
    b = api.status(url)["batch"]
    assert b["stalled"] == [] and b["runs"][RUN]["state"] == "done", b
    ops = [m for m in api.operations(url) if m["kind"] == "reduce"]
    assert [m["run"] for m in ops if m["outcome"] == "verified"] == [RUN], ops
    assert _state_keys(url, ".tb-footprint/ledger-inflight/", ".tb-footprint/journal/", ".tb-footprint/locks/") == []


def test_a_rewrite_run_pays_one_ledger_put_more_for_its_start_mark(counted, tmp_path):
    """The cost: a shard worker's rewrite run writes its ledger's marks at its start (new), verify
    and end, after its marker: 4 PUTs (3 before)."""
    s3_bucket, seen = counted
    url = s3_bucket.upload(_write_rewrite_logdir(tmp_path / "logs"), "logs")
    seen.clear()
    p, out, err = _run(url, "0/1")
    assert p.returncode == 0, err
    assert [o["status"] for o in json.loads(out)["outcomes"] if o["run"] == RUN] == ["verified"], out
    puts = [path for m, path in seen if m == "PUT" and "/.tb-footprint/ledger" in path]
    assert len(puts) == 4 and sum("/ledger-inflight/" in x for x in puts) == 1, puts
