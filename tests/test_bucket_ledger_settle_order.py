"""A bucket ledger's settling lists the journals before it reads the manifests: another start's
recovery rolling the run back in between (its manifest deleted, then its journal) must never leave
the run recorded done from a manifest read before the rollback (review R3 F2). On moto S3."""
import json
import time

import pytest

from test_bucket_state_schema import STATE, _keys, _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_ledger
from tb_footprint_plugin.engine.bucket_state import JOURNAL
from tb_footprint_plugin.storage.store_object import ObjectStore

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_run_rolled_back_while_its_ledger_is_settled_is_never_recorded_done(s3_bucket, tmp_path):
    url, _pol = _logdir(s3_bucket, tmp_path, n=1)
    ostore = ObjectStore(url)
    rfs = ostore.rfs
    book = bucket_ledger.BucketLedger(ostore, "archive", None)
    book.mark("run-b", "reducing", original_size_bytes=10)
    book.flush()  # its batch's step (1dc6b1e: a bucket ledger writes its marks per batch): the run's start written
    jkey = rfs.path(f"{JOURNAL}/op-b.json")
    rfs.ops.put(jkey, json.dumps({"op": "op-b", "runs": [{"run": "run-b", "op": "op-b", "files": []}]}).encode())
    later = time.time() + 5
    verified = [{"run": "run-b", "kind": "reduce", "outcome": "verified", "finished_at": later,
                 "bytes_before": 10, "bytes_after": 5, "op_id": "op-b"}]

    def manifests_then_other_process_rolls_back():
        out = [dict(m) for m in verified]  # read while the verified manifest stood
        rfs.ops.delete([jkey])  # another start's recovery: manifest dropped, then its journal
        return out

    done = bucket_ledger.settle_stale(ostore, manifests_then_other_process_rolls_back, mine=True)
    state = api.status(url)["batch"]["runs"]["run-b"]["state"]
    # the run was rolled back: it is to do again (pending or still reducing), never done
    assert done == [] and state != "done", (done, state)
