"""A bucket start's recovery settles a journal only as it stands once its owner is known gone.

bucket_recover.recover reads a journal object, then the run's lock object: an owner that goes on
in between (past its commit step, to its end: journal closed, lock dropped) leaves the recovery
acting on the journal as read before, a reduction stopped before its commit. Shown on moto at
4d9d2db: the journal read at step 'planned' (no backup checksums yet), rollback_entry(deleted=False)
copies nothing back ("never backed up, nothing of ours") and deletes the manifest and the backup
copies, which after the owner's commit were the only copies: the run's profile file is gone from
the bucket and from the vault (data loss, invariant 1) while its worker reported it verified."""
import json
import subprocess
import time

from test_shards import CLI, env, make_logdir
from test_shards_s3 import DROP_PROFILES, _state_keys
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.front import open_engine


def test_an_owner_finishing_between_the_journal_read_and_the_lock_read_keeps_its_reduction(
        s3_bucket, tmp_path, monkeypatch):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 1), "logs")
    gate = tmp_path / "gate"
    owner = subprocess.Popen(CLI + ["reduce", url, "--policy", str(pol), "--quiet-period", "0", "--json", "--yes"],
                             env=env(TB_FOOTPRINT_FAILPOINTS="reduce.backup=wait",
                                     TB_FOOTPRINT_FAILPOINT_GATE=str(gate)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not _state_keys(url, ".tb-footprint/journal/") and time.time() < deadline and owner.poll() is None:
            time.sleep(0.1)
        assert _state_keys(url, ".tb-footprint/journal/"), owner.communicate(timeout=60)
        time.sleep(1.0)  # at the gate, its backups made, holding its run
        real = BucketState.read
        said = {}

        def read(self, path, info=None):
            if "/journal/" in path:
                said["journal"] = True
            elif "/locks/" in path and said.get("journal") and "out" not in said:
                gate.write_text("go")  # the owner goes on, to its end, before the lock is read
                said["out"] = owner.communicate(timeout=300)
            return real(self, path, info)

        monkeypatch.setattr(BucketState, "read", read)
        eng = open_engine(url)
        settled = eng.bk.recover(eng.ostore, eng.vault)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()
    assert owner.returncode == 0 and "out" in said
    assert [o["status"] for o in json.loads(said["out"][0])["outcomes"]] == ["verified"]
    assert [o.action for o in settled if o.action != Recovery.SKIPPED_LIVE] == [], settled
    ops = [m for m in api.operations(url) if m["kind"] == "reduce"]
    assert [m["outcome"] for m in ops] == ["verified"], ops
