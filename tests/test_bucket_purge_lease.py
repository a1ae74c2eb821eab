"""A bucket purge keeps its journal's lease while it deletes (review R5 F6, issue #26): the lease
was renewed only between operations, so one operation's deletes outlasting it let a start on
another host judge the purge ended, finish it and remove its journal under it; the live purge
then failed on its next renewal, and a kill after that left later marks with no journal. It is
now renewed per batch of deletes (``bucket_purge.DELETE_BATCH`` keys). The lease is shortened
here, the batch made one key and each delete slowed, so one operation's deletes outlast the
lease while no batch does."""
import os
import time

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine import bucket_purge, lease
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_state import ACTIVE_OPS

OLD = time.time() - 7 * 86400
JOURNALS = ".tb-footprint/journal/"
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
LEASE = 3.0
PER_KEY = 0.5  # a delete's time per key: 8 keys (4 s) outlast the lease, one (0.5 s) does not
FILES = 8


def _logdir(root):
    """Two runs: scalars, and a profile session of ``FILES`` files (what the reduce drops)."""
    for name in ("a", "b"):
        with synth.EventWriter(str(root / name)) as w:
            for step in range(3):
                w.scalar("loss", step, 1.0 / (step + 1))
        session = root / name / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        for i in range(FILES):
            (session / f"host{i}.xplane.pb").write_bytes(os.urandom(500))
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (OLD, OLD))
    return root


def test_a_purge_whose_deletes_outlast_the_lease_keeps_it(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert sorted(o.run for o in rep.outcomes if o.status == "verified" and o.removed_files) == ["a", "b"]
    monkeypatch.setattr(lease, "_lease_s", LEASE)
    monkeypatch.setattr(bucket_purge, "DELETE_BATCH", 1, raising=False)
    real_delete = BucketState.delete
    seen = {"copies": 0, "journals": [], "other": None}

    def another_hosts_start():
        """What a start on another host finds: this process's purge is not its own."""
        mine = set(ACTIVE_OPS)
        ACTIVE_OPS.clear()
        try:
            with monkeypatch.context() as m:
                m.setattr(lease, "HOST", "another-host")
                return api.recover_logdir(url)
        finally:
            ACTIVE_OPS.update(mine)

    def slow_delete(self, paths, versions=None):
        copies = [p for p in paths if "/blobs/" in p]
        if copies and seen["other"] is None:
            time.sleep(PER_KEY * len(copies))
            seen["copies"] += len(copies)
            if seen["copies"] >= FILES:  # the first operation's copies deleted: 4 s since its journal
                seen["journals"] = [k for k in s3_bucket.hashes("logs") if k.startswith(JOURNALS)]
                seen["other"] = []  # its own deletes are not slowed
                seen["other"] = another_hosts_start()
        return real_delete(self, paths, versions)

    monkeypatch.setattr(BucketState, "delete", slow_delete)
    t0 = time.time()
    out = api.purge(url, yes=True)
    assert time.time() - t0 > LEASE  # the first operation's deletes alone took longer than a lease
    assert len(seen["journals"]) == 1, seen
    # the other host's start left the live purge alone: its operations not finished by it
    assert not [o for o in seen["other"] if o.action == Recovery.COMPLETED], [vars(o) for o in seen["other"]]
    assert sorted(r["run"] for r in out.ops) == ["a", "b"], out
    assert not [k for k in s3_bucket.hashes("logs") if k.startswith(JOURNALS) or "/blobs/" in k]
    assert api.recover_logdir(url) == []


def test_a_purge_whose_journal_went_marks_nothing_more_and_says_so(s3_bucket, tmp_path, monkeypatch):
    """Its journal removed under it (a start that judged it ended finished it): the renewal
    fails, the operation already marked still loses its copies (nothing else needs them), no
    later operation is marked (no journal would name it), and the error names the journal."""
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    monkeypatch.setattr(lease, "_lease_s", 0.2)  # every batch renews
    monkeypatch.setattr(bucket_purge, "DELETE_BATCH", 1, raising=False)
    real_delete = BucketState.delete
    gone = []

    def delete(self, paths, versions=None):
        if not gone and any("/blobs/" in p for p in paths):
            keys = [k for k in s3_bucket.hashes("logs") if k.startswith(JOURNALS)]
            gone.extend(keys)
            for k in keys:
                s3_bucket.fs.rm(f"{s3_bucket.key('logs')}/{k}")
        time.sleep(0.15)
        return real_delete(self, paths, versions)

    monkeypatch.setattr(BucketState, "delete", delete)
    with pytest.raises(Exception) as e:
        api.purge(url, yes=True)
    assert len(gone) == 1 and gone[0] in str(e.value) and "purge again" in str(e.value), e.value
    ops = {m["op_id"]: m for m in api.operations(url) if m["kind"] == "reduce"}
    marked = [op for op, m in ops.items() if m["backup_purged"]]
    assert len(marked) == 1, ops
    left = [k for k in s3_bucket.hashes("logs") if "/blobs/" in k]
    assert left and not [k for k in left if f"/blobs/{marked[0]}/" in k]
    monkeypatch.setattr(BucketState, "delete", real_delete)
    assert api.recover_logdir(url) == []
    assert [o.status for o in api.restore(url)] == ["restored"]


def test_an_operations_copies_go_in_the_stores_own_batches(s3_bucket, tmp_path, monkeypatch):
    """Review R6 F2: the lease's batch is the store's own delete batch (one request of up to 1,000
    keys on S3), never less than 256: a fixed 256 made S3 send 300 copies in two requests where
    one took them all before the lease was renewed per batch."""
    many = 300
    root = tmp_path / "logs"
    with synth.EventWriter(str(root / "a")) as w:
        w.scalar("loss", 0, 1.0)
    session = root / "a" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    for i in range(many):
        (session / f"host{i}.xplane.pb").write_bytes(b"x" * 64)
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (OLD, OLD))
    url = s3_bucket.upload(root, "logs")
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"]
    real_delete = BucketState.delete
    batches = []

    def delete(self, paths, versions=None):
        copies = [p for p in paths if "/blobs/" in p]
        if copies:
            batches.append(len(copies))
        return real_delete(self, paths, versions)

    monkeypatch.setattr(BucketState, "delete", delete)
    out = api.purge(url, yes=True)
    assert [r["run"] for r in out.ops] == ["a"]
    assert batches == [many], batches
    assert not [k for k in s3_bucket.hashes("logs") if "/blobs/" in k]
