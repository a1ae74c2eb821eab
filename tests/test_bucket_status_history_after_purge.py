"""A bucket logdir's status and history after restores and a purge say what a disk's say (review R21
PD1, PD2, PD8):
- status's ``freed_now_bytes`` counted a restored-then-purged reduction as freed (its bytes are back
  in the logdir): the header said more than the batch line's "saved";
- a purge line in history had no ``freed`` (the CLI printed "freed 0 B"), where a disk's has it;
- a restored retirement got a purge line nobody ran (the restore moved its objects back and marked
  the manifest purged-by-restore), where a disk's history has none;
- a purge line did not say who purged (PD18)."""
import getpass
import socket

import pytest

from conftest import copy_real
from tb_footprint_plugin import api

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_buckets_status_and_history_after_restores_and_a_purge(tmp_path, s3_bucket):
    logdir = tmp_path / "ld"
    for run in ("a", "b", "c"):
        copy_real("tf/keras_profiled/train", logdir / run)
    url = s3_bucket.upload(logdir, "purged")
    rep = api.reduce_logdir(url, runs=["a", "b"], policy="archive", dry_run=False, quiet_period=0)
    by_run = {o.run: o for o in rep.outcomes}
    assert {r: str(o.status) for r, o in by_run.items()} == {"a": "verified", "b": "verified"}
    (ret,) = api.retire(url, api.retire_rule(runs=["c"]), dry_run=False, quiet_period=0).outcomes
    assert str(ret.status) == "verified", ret.reason
    assert [str(o.status) for o in api.restore(url, run="a")] == ["restored"]
    assert [str(o.status) for o in api.restore(url, run="c")] == ["restored"]
    pur = api.purge(url, yes=True)
    freed = {row["op_id"]: row for row in pur.ops}
    assert by_run["a"].op_id in freed and by_run["b"].op_id in freed, pur.ops

    st = api.status(url)
    b_removed = by_run["b"].bytes_before - by_run["b"].bytes_after
    assert b_removed > 0
    assert st["freed_now_bytes"] == b_removed, (st["freed_now_bytes"], b_removed)
    assert api.disk_numbers(url)["freed_now_bytes"] == b_removed

    hist = api.history(url)
    purges = [e for e in hist if e.get("kind") == "purge"]
    assert sorted(e["op_id"] for e in purges) == sorted([by_run["a"].op_id, by_run["b"].op_id]), purges
    for e in purges:
        assert e["freed"] == freed[e["op_id"]]["bytes"] > 0, (e, freed[e["op_id"]])
        # who purged, as a disk's purge line says it (review R21 PD18)
        assert (e["user"], e["host"]) == (getpass.getuser(), socket.gethostname()), e
