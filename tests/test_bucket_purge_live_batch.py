"""A bucket purge leaves alone the backups of a batch reduction still under way (review R21 PD16,
HIGH). A batch's journal is named by the batch, not by its runs' op ids; the purge looked a
reduction's journal up by its op id, found none, and deleted the copies of a reduction whose
manifest was written (it is, before the swap) but whose commit was not: the live reduce then
committed and deleted the originals, whose only copies were gone (invariant 1). Now every op id a
journal in the bucket names is kept (``locked``), and the reduce's backups stay to restore from."""
import json
import subprocess
import time

from test_shards import CLI, env, make_logdir
from test_shards_s3 import DROP_PROFILES, _state_keys
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Skip


def test_a_purge_keeps_the_backups_of_a_batch_reduction_under_way(s3_bucket, tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 2), "logs")
    before = {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}
    gate = tmp_path / "gate"
    owner = subprocess.Popen(CLI + ["reduce", url, "--policy", str(pol), "--quiet-period", "0", "--json", "--yes"],
                             env=env(TB_FOOTPRINT_FAILPOINTS="reduce.verify=wait",
                                     TB_FOOTPRINT_FAILPOINT_GATE=str(gate)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 100
        manifests = []
        while time.time() < deadline and owner.poll() is None:
            manifests = _state_keys(url, ".tb-footprint/manifests/")
            if len(manifests) == 2:
                break
            time.sleep(0.2)
        # held at verify: its manifests written, its journal (named by the batch) there, no commit
        assert len(manifests) == 2 and owner.poll() is None, owner.communicate(timeout=60)
        assert _state_keys(url, ".tb-footprint/journal/")
        ops = sorted(k.rsplit("/", 1)[-1][: -len(".json")] for k in manifests)
        copies = _state_keys(url, ".tb-footprint/blobs/")
        assert copies
        pur = api.purge(url, yes=True)
        assert pur.ops == [] and pur.freed_bytes == 0, pur.ops
        assert sorted((k["op_id"], k["code"]) for k in pur.kept) == [(op, Skip.LOCKED) for op in ops], pur.kept
        assert _state_keys(url, ".tb-footprint/blobs/") == copies
        gate.write_text("go")
        out, err = owner.communicate(timeout=300)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()
    assert owner.returncode == 0, err
    assert sorted(o["status"] for o in json.loads(out)["outcomes"]) == ["verified", "verified"]
    back = api.restore(url)
    assert sorted(str(o.status) for o in back) == ["restored", "restored"], back
    assert {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")} == before
