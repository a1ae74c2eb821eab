"""The bucket engine's state through the one schema (issue #26 items 2 and 4), in the moto S3 server:
its manifests are read through ``engine.manifest.read`` (the aliases written for older workers
are read by no current code), a reduce records when its transaction began and when its backups
were verified, and a start settles the ledger objects a killed worker left in flight although
its runs committed — with one listing when nothing is stale."""
import json
import os
import signal
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from test_shards import env, make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket as bk
from tb_footprint_plugin.engine import bucket_ledger, faults, manifest
from tb_footprint_plugin.engine.bucket_state import JOURNAL
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore

pytestmark = pytest.mark.usefixtures("disarm_faults")

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
STATE = ".tb-footprint"

#: a reduce with a ledger, SIGKILLed right before its first ledger "done" PUT: every run of the
#: batch committed, its journal and locks deleted, its ledger entries still "verifying" (in flight)
KILLED_BEFORE_DONE = """
import os, signal, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_ledger
real = bucket_ledger.BucketLedger.mark
def mark(self, run, state, **kw):
    if state == "done":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, run, state, **kw)
bucket_ledger.BucketLedger.mark = mark
api.reduce_logdir(sys.argv[1], policy=sys.argv[2], dry_run=False, quiet_period=0, ledger="default")
"""


def _logdir(s3_bucket, tmp_path, n=3, prefix="logs"):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    return s3_bucket.upload(make_logdir(tmp_path / prefix, n), prefix), str(pol)


def _keys(url, prefix):
    return sorted(k for k in RemoteFS(url).list_tree() if k.startswith(prefix))


def _reduced_ops(url):
    return {m["run"]: m for m in api.operations(url) if m["kind"] == "reduce" and m["outcome"] == "verified"}


def test_manifests_are_read_in_the_one_schema_while_the_aliases_are_still_written(s3_bucket, tmp_path):
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"] * 2
    ostore = ObjectStore(url)
    rfs = ostore.rfs
    read = bk.manifests(ostore, bk.BucketVault.for_logdir(ostore))
    assert len(read) == 2
    for m in read:
        stored = json.loads(rfs.read_bytes(f"{STATE}/manifests/{m['op_id']}.json"))
        # written for older workers sharing the bucket ...
        assert (stored["op"], stored["status"], stored["created"]) == (m["op_id"], "verified", m["finished_at"])
        # ... and read by no current code: the catalogue answers the one schema only
        assert set(manifest.FIELDS) <= set(m) and not set(manifest.BUCKET_ALIASES) & set(m), sorted(m)
    assert all(not set(manifest.BUCKET_ALIASES) & set(o) for o in api.operations(url))


def test_a_reduce_records_when_its_transaction_began_and_when_its_backups_were_verified(s3_bucket, tmp_path):
    url, pol = _logdir(s3_bucket, tmp_path, n=1)
    rfs = RemoteFS(url)
    created = []

    def journal_written():
        (key,) = [k for k in rfs.list_tree(JOURNAL)]
        created.append(json.loads(rfs.read_bytes(key))["created"])

    faults.arm("reduce.journal", journal_written)
    faults.arm("reduce.backup_copy", lambda: time.sleep(0.3))  # the backups take time
    t0 = time.time()
    (o,) = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0).outcomes
    t1 = time.time()
    assert o.status == "verified" and len(o.removed_files) >= 1
    (m,) = [m for m in api.operations(url) if m["op_id"] == o.op_id]
    assert m["started_at"] == created[0]  # the journal's creation: the transaction began
    assert t0 <= m["started_at"] < m["finished_at"] <= t1
    assert m["finished_at"] - m["started_at"] >= 0.3 * len(o.removed_files)


def test_a_start_records_done_the_runs_a_worker_killed_before_its_ledger_done_had_committed(s3_bucket, tmp_path):
    url, pol = _logdir(s3_bucket, tmp_path)
    p = subprocess.run([sys.executable, "-c", KILLED_BEFORE_DONE, url, pol], env=env(), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    ops = _reduced_ops(url)
    runs = sorted(ops)
    assert len(runs) == 3  # every run committed ...
    assert _keys(url, f"{STATE}/journal/") == [] and _keys(url, f"{STATE}/locks/") == []  # ... nothing to recover
    b = api.status(url)["batch"]
    assert {r: e["state"] for r, e in b["runs"].items()} == {r: "verifying" for r in runs}
    assert sorted(b["stalled"]) == runs
    assert len(_keys(url, f"{STATE}/ledger-inflight/")) == 1  # the killed worker's marker

    assert api.recover_logdir(url) == []  # a start: no journal to settle, the ledger settled
    b = api.status(url)["batch"]
    assert b["counts"] == {"done": 3} and b["stalled"] == [] and b["problems"] == [], b
    for r in runs:
        e, m = b["runs"][r], ops[r]
        assert (e["op_id"], e["verified"], e["code"]) == (m["op_id"], True, "completed"), e
        assert (e["original_size_bytes"], e["after_size_bytes"]) == (m["bytes_before"], m["bytes_after"])
    assert _keys(url, f"{STATE}/ledger-inflight/") == []


def test_a_start_settles_the_ledger_of_a_batch_killed_after_its_commit_record(s3_bucket, tmp_path):
    """Killed in the swap (its journal says committed): the start finishes the reduction from the
    journal and, with no ledger of its own open, records the dead worker's runs done."""
    url, pol = _logdir(s3_bucket, tmp_path)
    p = subprocess.run([sys.executable, "-c", KILLED_BEFORE_DONE.replace('state == "done"', "False"), url, pol],
                       env=env(TB_FOOTPRINT_FAILPOINTS="reduce.swap=kill"), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert len(_keys(url, f"{STATE}/journal/")) == 1
    (rec,) = api.recover_logdir(url)
    assert rec.action == "completed"
    ops = _reduced_ops(url)
    b = api.status(url)["batch"]
    assert b["counts"] == {"done": 3} and b["stalled"] == [], b
    assert {r: e["op_id"] for r, e in b["runs"].items()} == {r: m["op_id"] for r, m in ops.items()}
    assert _keys(url, f"{STATE}/ledger-inflight/") == []


@pytest.fixture
def counted(s3_bucket, monkeypatch):
    """The S3 server behind a counting proxy; every request's method and key path."""
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


def test_a_start_with_nothing_stale_lists_the_markers_once_and_reads_no_ledger_entry(counted, tmp_path):
    s3_bucket, seen = counted
    url, pol = _logdir(s3_bucket, tmp_path)
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default")
    assert all(o.status == "verified" for o in rep.outcomes)
    assert _keys(url, f"{STATE}/ledger-inflight/") == []  # the batch's marker went with its last "done"
    # a live worker of this host keeps a marker (this process): never a reason to read its entries
    book = bucket_ledger.BucketLedger(ObjectStore(url), "drop-profiles", "0/2")
    book.mark("exp0/run000", "reducing", original_size_bytes=1)
    book.flush()  # its batch's step: the run's start written, after the marker
    assert len(_keys(url, f"{STATE}/ledger-inflight/")) == 1

    seen.clear()
    api.recover_logdir(url)
    listed = [parse_qs(urlsplit(p).query).get("prefix", [""])[0] for m, p in seen
              if m == "GET" and "list-type" in parse_qs(urlsplit(p).query)]
    assert sum("/ledger-inflight/" in x for x in listed) == 1, listed
    assert not [p for m, p in seen if "/ledgers/" in p or "/manifests/" in p], seen
    book.mark("exp0/run000", "skipped", code="nothing_to_reduce")
    assert _keys(url, f"{STATE}/ledger-inflight/") == []


def test_a_manifest_that_does_not_read_keeps_the_blobs_it_names_whatever_its_purged_alias_says(s3_bucket, tmp_path):
    """The blob vault's forget asks ``manifest.read`` whether a manifest was purged: one it refuses
    (here a planted copy whose op id is not one, marked purged under the older workers' name) is
    no manifest of a purged operation, so the blobs it names stay (they may exist nowhere else)."""
    from tb_footprint_plugin.storage.blobstore import BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore

    url, pol = _logdir(s3_bucket, tmp_path, n=1)
    vault = str(tmp_path / "vault")
    (o,) = api.reduce_logdir(url, backup_dir=vault, policy=pol, dry_run=False, quiet_period=0).outcomes
    assert o.status == "verified", o.reason
    rfs = RemoteFS(url)
    doc = json.loads(rfs.read_bytes(f"{STATE}/manifests/{o.op_id}.json"))
    digests = [f["sha256"] for f in doc["files"]]
    assert digests
    rfs.write_bytes(f"{STATE}/manifests/planted.json",
                    json.dumps(dict(doc, op_id="../planted", op="../planted", purged=1.0)).encode())
    res = api.purge(url, yes=True, op=o.op_id, backup_dir=vault)
    assert [p["op_id"] for p in res.ops] == [o.op_id], res.to_dict()
    bs = BlobStore(PosixStore(vault))
    assert all(bs.check(d) is None for d in digests)  # still there: the planted manifest names them


def test_an_interrupted_reduce_records_its_own_committed_runs_done_when_it_settles(s3_bucket, tmp_path, monkeypatch):
    """Ctrl-C right before the ledger's first "done": the reduce settles what it left on its way
    out (``settle_interrupted``, as on a disk; ``api.Interrupted``) and its own in-flight entries
    whose run committed say done; its process is alive, so only ``mine`` makes them count (a
    start of another process leaves them: ``recover_logdir`` settles nothing)."""
    url, pol = _logdir(s3_bucket, tmp_path)
    real = bucket_ledger.BucketLedger.mark

    def mark(self, run, state, **kw):
        if state == "done":
            raise KeyboardInterrupt
        return real(self, run, state, **kw)

    monkeypatch.setattr(bucket_ledger.BucketLedger, "mark", mark)
    with pytest.raises(api.Interrupted):
        api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default")
    monkeypatch.setattr(bucket_ledger.BucketLedger, "mark", real)
    for _settling in range(2):  # the reduce's own settling, then the CLI's again: the same
        ops = _reduced_ops(url)
        b = api.status(url)["batch"]
        assert b["counts"] == {"done": 3}, b
        assert {r: e["op_id"] for r, e in b["runs"].items()} == {r: m["op_id"] for r, m in ops.items()}
        assert _keys(url, f"{STATE}/ledger-inflight/") == []
        assert api.recover_logdir(url) == []
        api.settle_interrupted(url, policy=pol, ledger="default")
