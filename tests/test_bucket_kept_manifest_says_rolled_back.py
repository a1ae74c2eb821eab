"""A bucket rollback that keeps backups (a key not holding its recorded original) rewrites the kept
manifest as what happened (review R8 F6, R8's reproduction): a reduction killed before its swap
record, one original rewritten by a writer before the next start. Before, the manifest kept was the
one written at the verify step, outcome 'verified' with the reduced size: operations/status listed
a reduction that never swapped, with savings it never made. Now it says rolled back, nothing saved,
and ``status`` lists the kept original as one left in the vault, with its bring-back command."""
import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import faults

from test_bucket_status_judges_journals import RUN, _logdir


def test_a_kept_unswapped_reduction_is_not_listed_as_verified(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path), "logs")
    plan = api.plan(url, "archive", quiet_period=0)
    victim = next(a.path for rp in plan.runs for a in rp.actions if a.kind == "delete")
    faults.arm("reduce.verify", kill)  # the manifest is written, no swap record
    try:
        with pytest.raises(Killed):
            api.reduce_logdir(url, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    finally:
        faults.disarm_all()
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/" + victim), b"a writer's new bytes")
    outs = api.recover_logdir(url)
    ops = [o for o in api.operations(url) if o.get("run") == RUN]
    said = [(o.get("outcome"), o.get("bytes_before"), o.get("bytes_after")) for o in ops]
    assert not [o for o in ops if o.get("outcome") == "verified"], (said, [(r.action, r.code, r.detail) for r in outs])
    [op] = ops
    assert (op["outcome"], op["bytes_after"]) == ("rolled_back", op["bytes_before"]), op
    rows = [k for k in api.status(url)["kept_blobs"] if k["code"] == Finding.NOT_RESTORED and k["of_op"] == op["op_id"]]
    assert [(k["path"], k["present"]) for k in rows] == [(victim, True)], rows
    assert "rollback" in rows[0]["holds"] and rows[0]["bring_back"], rows[0]
    # and the history says it as a rollback: nothing saved or removed, never 'verified'
    [line] = [e for e in api.history(url) if e.get("op_id") == op["op_id"] and e.get("kind") == "reduce"]
    assert (line["outcome"], line["verified"], line["before"] == line["after"]) == ("rolled_back", False, True), line
    assert (line["removed_from_logdir_bytes"], line["freed_now_bytes"], line["freed_after_purge_bytes"]) == (0, 0, 0), line
