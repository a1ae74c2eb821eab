"""A shard worker's batch ledger on a bucket costs requests per batch, not per run (issue #28 item
5: 6 PUTs a run against 2 outside a shard), and a SIGKILL at any of the batch's steps still leaves
the merged status right once the next start settled it: each run done once, by its shard, with its
manifest's bytes."""
import json
import signal

import pytest

from test_shards import make_logdir
from test_shards_s3 import DROP_PROFILES, _state_keys, _worker
from tb_footprint_plugin import api

N = 8


@pytest.fixture
def counted(s3_bucket, monkeypatch):
    """The S3 server behind a counting proxy (the workers' endpoint too); each request's method and path."""
    from faulty_proxy import FaultyProxy, Rule

    proxy = FaultyProxy(upstream=s3_bucket.server.endpoint).start()
    seen = []

    def record(method, path):
        seen.append((method, path))
        return False

    proxy.rules.append(Rule(match=record, fault=(500, b""), times=0))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("S3_ENDPOINT", proxy.endpoint)
    try:
        yield s3_bucket, seen
    finally:
        proxy.stop()


def _setup(s3_bucket, tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    return s3_bucket.upload(make_logdir(tmp_path / "logs", N), "logs"), pol


def _run(url, shard, pol, **kw):
    p = _worker(url, shard, pol, **kw)
    out, err = p.communicate(timeout=600)
    return p, out, err


def _done_once_by_its_shard(url, shards):
    """Every run done once: one verified reduce manifest, the merged entry naming it, its sizes, and
    the shard whose partition holds the run (or that finished it for a dead worker)."""
    owner = {r: s for s in shards for r in api.shard_plan([url], tuple(map(int, s.split("/"))))[url]}
    ops = [m for m in api.operations(url) if m["kind"] == "reduce"]
    assert sorted(m["run"] for m in ops) == sorted(owner)  # one reduction a run
    b = api.status(url)["batch"]
    assert b["counts"] == {"done": N} and b["stalled"] == [] and b["problems"] == [], b
    for m in ops:
        e = b["runs"][m["run"]]
        assert (e["op_id"], e["original_size_bytes"], e["after_size_bytes"]) == (
            m["op_id"], m["bytes_before"], m["bytes_after"]), (e, m)
        # its shard's worker, or the worker whose start finished a dead one's reduction (as recorded)
        assert e["shard"] == owner[m["run"]] or e["code"] == "completed", (e, m)
    assert b["saved_bytes"] == sum(m["bytes_before"] - m["bytes_after"] for m in ops)
    assert _state_keys(url, ".tb-footprint/ledger-inflight/", ".tb-footprint/journal/", ".tb-footprint/locks/") == []


def test_a_shard_worker_writes_its_ledger_per_batch(counted, tmp_path):
    s3_bucket, seen = counted
    url, pol = _setup(s3_bucket, tmp_path)
    seen.clear()
    p, out, err = _run(url, "0/1", pol)
    assert p.returncode == 0, err
    assert all(o["status"] == "verified" for o in json.loads(out)["outcomes"])
    puts = [path for m, path in seen if m == "PUT" and "/.tb-footprint/ledger" in path]
    # its marker, then one object of marks written at the batch's start, verify and end: 4
    # (before: a PUT per run and mark, 3 a run, 25 for 8 runs)
    assert len(puts) == 4, puts
    assert sum("/ledger-inflight/" in x for x in puts) == 1
    _done_once_by_its_shard(url, ["0/1"])


@pytest.mark.parametrize("failpoint,state", [("reduce.journal", "reducing"), ("reduce.backup", "reducing"),
                                             ("reduce.verify", "verifying"), ("reduce.swap", "verifying")])
def test_a_shard_worker_killed_at_a_batch_step_is_settled_right(s3_bucket, tmp_path, failpoint, state):
    url, pol = _setup(s3_bucket, tmp_path)
    mine = api.shard_plan([url], (0, 2))[url]
    p, _out, _err = _run(url, "0/2", pol, TB_FOOTPRINT_FAILPOINTS=f"{failpoint}=kill")
    assert p.returncode == -signal.SIGKILL
    b = api.status(url)["batch"]
    # the batch's runs as its last written step left them, in flight for a worker that is gone
    assert sorted(b["stalled"]) == sorted(mine) and {b["runs"][r]["state"] for r in mine} == {state}, b
    assert len(_state_keys(url, ".tb-footprint/ledgers/")) == 1  # one object for the batch (before: one a run)
    for shard in ("1/2", "0/2"):  # the next starts settle the dead worker's batch, then its shard again
        p, out, err = _run(url, shard, pol)
        assert p.returncode == 0, err
        assert json.loads(out)["ledger_problems"] == []
    _done_once_by_its_shard(url, ["0/2", "1/2"])
