"""A bucket's ``status`` judges its journal objects by recovery's own rules, as a disk's does
(issue #26: one rule, every store; review R16 F6 on a disk). Before, every journal object was an
unfinished operation with ``recover_will`` None: the CLI fell back to "settling rolls it back or
finishes it", and a journal recover refuses (a key outside the logdir) was counted as an operation
``recover`` would settle, with its settle command.

Now each row carries what ``recover`` will do (``bucket_recover.reduce_will``), and it is what
``recover`` then does, in the same words; a journal recover leaves alone is a problem with its code,
never an operation."""
import json
import os

import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine import faults, trust

RUN = "r"


def _logdir(root) -> str:
    """One run whose profile session ``archive`` drops and whose event file it rewrites, dated long ago."""
    logdir = os.path.join(str(root), "logs")
    with synth.EventWriter(os.path.join(logdir, RUN)) as w:
        for s in range(100):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.histogram("h", s, [((i * 37 + s) % 1000) / 1000.0 for i in range(100)], buckets=50)
    synth.write_profile_session(os.path.join(logdir, RUN), synth.session_name_for(1_700_000_600), "host",
                                n_events=50, seed=1, trace_json=True)
    for dp, _, fs in os.walk(logdir):
        for f in fs:
            os.utime(os.path.join(dp, f), (1_000_000_000, 1_000_000_000))
    return logdir


def _killed_at(url: str, point: str) -> None:
    faults.arm(point, kill)
    try:
        with pytest.raises(Killed):
            api.reduce_logdir(url, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    finally:
        faults.disarm_all()


@pytest.mark.parametrize("point, action", [("reduce.backup", Recovery.ROLLED_BACK),
                                           ("reduce.swap_record", Recovery.COMPLETED)])
def test_status_says_what_recover_will_do_and_recover_does_it(s3_bucket, tmp_path, point, action):
    url = s3_bucket.upload(_logdir(tmp_path), f"logs-{point.replace('.', '-')}")
    _killed_at(url, point)
    found = api.unfinished(url)
    assert found["problems"] == []
    [op] = found["unfinished_operations"]
    assert op["run"] == RUN and op["recover_will"] is not None, op
    assert op["recover_will"]["action"] == action, op
    # the journal's outcome names each run's own operation (a batch's journal holds several)
    done = [r for r in api.recover_logdir(url) if op["op_id"] in [x["op_id"] for x in r.runs or []]]
    assert [(r.action, r.detail) for r in done] == [(op["recover_will"]["action"], op["recover_will"]["detail"])]
    assert api.unfinished(url)["unfinished_operations"] == []


def test_a_journal_recover_refuses_is_a_problem_with_its_code_not_an_operation(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path), "logs-planted")
    op_id = "20200101-000000-0000-aaaa"
    # a journal of the right shape naming a key outside its run: recover refuses it (path_outside)
    doc = {"op": op_id, "step": "swapping", "runs": [{"run": RUN, "op": op_id, "files": [
        {"path": "elsewhere/x.tfevents", "final": None, "backup": None}]}]}
    key = f"{s3_bucket.key('logs-planted')}/.tb-footprint/journal/{op_id}.json"
    s3_bucket.fs.pipe_file(key, json.dumps(doc).encode())
    found = api.unfinished(url)
    assert found["unfinished_operations"] == [] and found["settle_command"] is None, found
    [p] = found["problems"]
    assert p["code"] in (trust.PATH_OUTSIDE, trust.BAD_RECORD) and p["file"].endswith(f"/journal/{op_id}.json"), p
    refused = [r for r in api.recover_logdir(url) if r.op_id == op_id]
    assert [(r.action, r.code, r.detail) for r in refused] == [(Recovery.REFUSED, p["code"], p["detail"])]
    assert s3_bucket.fs.exists(key)  # left in place for the user to look at
