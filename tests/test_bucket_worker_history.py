"""A worker of a sharded batch on a bucket writes its change-log lines to an object of its own
(``.tb-footprint/history-shards/history-shard-I-of-N@HOST.jsonl``), as a disk's worker writes a
file of its own, instead of taking turns with the other workers on one object by conditional
rewrites; ``history`` merges it with the single object (issue #26 item 2)."""
from __future__ import annotations

import pytest

from test_objstore import _write_rewrite_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import bucket_rewrite, history, lease

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_sharded_bucket_workers_rolled_back_line_is_in_its_own_object_and_in_the_history(s3_bucket, tmp_path,
                                                                                           monkeypatch):
    url = s3_bucket.upload(_write_rewrite_logdir(tmp_path / "logs"), "w")
    monkeypatch.setattr(bucket_rewrite, "compare_views",
                        lambda *a, **kw: {"ok": False, "failed": ["forced by the test"], "checks": []})
    before = lease.shard_label()
    try:
        rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"],
                                verify_backends=("python",), shard=(0, 1))
    finally:
        lease.configure(shard=before)  # the batch leaves its label on this process's leases
    (o,) = rep.outcomes
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    state = {k for k in s3_bucket.hashes("w") if k.startswith(".tb-footprint/history")}
    own = f"{history.BUCKET_WORKERS}/{history.worker_file_name('0/1', lease.HOST)}"
    assert state == {own}, state  # the worker's own object; the single one is not written
    (line,) = [e for e in api.history(url) if e.get("outcome") == Outcome.ROLLED_BACK]
    assert (line["run"], line["op_id"], line["shard"], line["code"]) == ("exp/hist", o.op_id, "0/1", "error"), line
    assert history.configure_writer(None) is None  # the batch put the writer back as it was
