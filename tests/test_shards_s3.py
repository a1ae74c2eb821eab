"""Sharded batches on a bucket (issue 16), in the moto S3 server: workers started at once with
overlapping shards and one killed mid-run; leases on bucket run locks (renewal, takeover
checked against the bucket journal); the bucket's ledger objects as untrusted input, and read
fresh by a long-lived process on each of the three stores."""
import json
import os
import signal
import subprocess
import time

import pytest

from test_shards import CLI, env, make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket as bk
from tb_footprint_plugin.engine import bucket_lease, lease
from tb_footprint_plugin.engine.context import new_op_id
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _state_keys(url, *prefixes):
    return sorted(k for k in RemoteFS(url).list_tree() if k.startswith(prefixes))


def _worker(url, shard, policy_file, **kw):
    return subprocess.Popen(CLI + ["reduce", url, "--shard", shard, "--policy", str(policy_file), "--quiet-period", "0",
                                   "--lease", "3", "--json", "--yes"],
                            env=env(**kw), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_overlapping_workers_on_a_bucket_and_a_killed_one_reduce_every_run_exactly_once(s3_bucket, tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    # five workers at once: 0/2 and 1/2 cover everything, 0/3 and 1/3 overlap them, and 2/3 is
    # SIGKILLed in the middle of its first transaction, its backups made and its manifest written.
    # 2/3 starts first and the others once its batch's journal stands: started together, the others
    # now and then reduced every run of 2/3 before it locked one (a loaded CI, 3 attempts in a row),
    # and nothing was killed. They still overlap its transaction and each other.
    prefix = "logs"
    url = s3_bucket.upload(make_logdir(tmp_path / prefix, 12), prefix)
    before = s3_bucket.hashes(prefix)
    runs = sorted(r.name for r in api.scan(url).runs)
    assert len(runs) == 12
    plan = {s: api.shard_plan([url], tuple(map(int, s.split("/"))))[url] for s in ("0/2", "1/2", "2/3")}
    assert sorted(plan["0/2"] + plan["1/2"]) == runs and plan["2/3"]
    killed = _worker(url, "2/3", pol, TB_FOOTPRINT_FAILPOINTS="reduce.backup=kill")
    deadline = time.monotonic() + 300
    while not _state_keys(url, ".tb-footprint/journal/") and killed.poll() is None:
        assert time.monotonic() < deadline, "the 2/3 worker wrote no journal in 300 s"
        time.sleep(0.05)
    procs = [_worker(url, s, pol) for s in ("0/2", "1/2", "0/3", "1/3")]
    outs = [p.communicate(timeout=600) for p in procs]
    killed.communicate(timeout=600)
    assert killed.returncode == -signal.SIGKILL, "the 2/3 worker did not reach its failpoint"
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, [(o["run"], o["status"], o["reason"]) for o in json.loads(out)["outcomes"]] \
            if out.startswith("{") else err
        rep = json.loads(out)
        assert rep["ok"] and all(o["status"] in ("verified", "skipped") for o in rep["outcomes"]), rep["outcomes"]
        assert rep["ledger"].startswith(url + "/.tb-footprint/ledgers/shard-") and rep["ledger_problems"] == []

    # the killed worker's run: its journal and lock are left, the merged status shows it stalled
    assert _state_keys(url, ".tb-footprint/journal/") and _state_keys(url, ".tb-footprint/locks/")
    st = api.status(url)
    assert len(st["unfinished_operations"]) == 1 and st["settle_command"]
    b = st["batch"]
    # stalled: runs of the killed worker's batch (its one journal names them) that it had marked
    # "reducing" and never settled. A run of that batch it had not marked yet shows what another
    # worker did: skipped as locked by the dead worker (its journal still stands), or reduced
    # before the batch locked it (the batch's backup copy found the planned version gone; when
    # that was so for every run of the batch, nothing is stalled: each is done, by another shard)
    rfs = RemoteFS(url)
    (jkey,) = _state_keys(url, ".tb-footprint/journal/")
    in_batch = sorted(en["run"] for en in json.loads(rfs.fs.cat_file(rfs.path(jkey)))["runs"])
    assert len(b["ledgers"]) == 5, b["ledgers"]
    assert set(b["stalled"]) <= set(in_batch), (
        in_batch, jkey, {r: (b["runs"][r]["state"], b["runs"][r]["shard"], b["runs"][r]["code"], b["runs"][r]["op_id"])
                         for r in in_batch},
        [(json.loads(o)["shard"], json.loads(o)["recovered"]) for o, _ in outs])
    for r in set(in_batch) - set(b["stalled"]):
        e = b["runs"][r]
        assert e["shard"] != "2/3" and (e["state"] == "done" or (e["state"], e["code"]) == ("skipped", "locked")), e
    assert all(b["runs"][r]["state"] == "reducing" for r in b["stalled"])
    assert set(b["stalled"]) <= set(plan["2/3"])

    # the rerun of the killed shard settles its journal (rolled back) and reduces its runs
    again = _worker(url, "2/3", pol)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    rep = json.loads(out)
    assert [r["action"] for r in rep["recovered"]] == ["rolled_back"]
    assert rep["shard"] == "2/3" and sorted(rep["shard_runs"]) == plan["2/3"]

    # every run reduced and verified exactly once: one manifest per run in the vault, one
    # reduce per run in the history, no journal or lock left
    ops = api.operations(url)
    assert sorted(m["run"] for m in ops if m["kind"] == "reduce") == runs
    hist = api.history(url)
    assert sorted(e["run"] for e in hist if e["kind"] == "reduce" and e["outcome"] == "verified") == runs
    # beside them, a rolled-back line (3fb438d, 63e01a9) for each reduce journaled and put back: the
    # killed worker's batch (recovered) and overlapping workers' runs another worker got first, each
    # with the code that says why (never a silent line)
    assert all(e["code"] for e in hist if e["outcome"] == "rolled_back"), hist
    assert all(e["shard"] in ("0/2", "1/2", "0/3", "1/3", "2/3") for e in hist if e["kind"] == "reduce")
    assert _state_keys(url, ".tb-footprint/journal/", ".tb-footprint/locks/") == []
    assert api.verify(url) and all(r["ok"] for r in api.verify(url))
    # the merged status: every run done, by whom, with its bytes
    st = api.status(url)
    assert st["unfinished_operations"] == []
    b = st["batch"]
    assert b["counts"] == {"done": 12} and b["stalled"] == [] and b["problems"] == []
    by_op = {m["op_id"]: m for m in ops}
    for run, e in b["runs"].items():
        assert e["host"] == lease.HOST and e["shard"] in ("0/2", "1/2", "0/3", "1/3", "2/3")
        assert by_op[e["op_id"]]["run"] == run and e["original_size_bytes"] == by_op[e["op_id"]]["bytes_before"]
    assert b["saved_bytes"] == sum(m["bytes_before"] - m["bytes_after"] for m in ops)
    cli = subprocess.run(CLI + ["status", url, "--runs"], env=env(), capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert "done 12" in cli.stdout
    # each run's line names the worker that did it (which shards did which runs is a race)
    assert all(f"shard {e['shard']}" in cli.stdout for e in b["runs"].values())
    # nothing lost: restore gives back every byte
    outs = api.restore(url)
    assert len(outs) == 12 and all(o.status == "restored" for o in outs)
    now = s3_bucket.hashes(prefix)
    assert {k: v for k, v in now.items() if not k.startswith(".tb-footprint/")} == before
    b = api.status(url)["batch"]
    assert b["counts"] == {"restored": 12} and b["saved_bytes"] == 0


def test_bucket_locks_are_renewed_and_a_lock_taken_over_is_never_written_back_or_deleted(s3_bucket, tmp_path):
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 1), "logs")
    st = bk.BucketState(ObjectStore(url))
    lease.configure(lease_seconds=0.6)
    try:
        path = bk.lock_run(st, "exp0/run000", new_op_id()).path
        first, _ = st.read(path)
        time.sleep(1.5)  # the renewer wakes at least every 0.1 s at this lease; renews after 0.2 s
        renewed, _ = st.read(path)
        assert renewed["expires"] > first["expires"] and renewed["op"] == first["op"]
        assert bucket_lease.still_held(path)
        # another worker takes the lock over (its holder looked gone to it): our next renewal
        # fails its precondition; the lock is never written back, nor deleted as ours
        theirs = dict(renewed, host="other-node", pid=4242, op=new_op_id())
        st.delete([path])  # a takeover as _lock does it: delete, then create-only
        st.create(path, theirs)
        deadline = time.time() + 5
        while bucket_lease.still_held(path) and time.time() < deadline:
            time.sleep(0.1)
        assert not bucket_lease.still_held(path)
        assert bucket_lease.release(path) is None
        assert st.read(path)[0]["host"] == "other-node"
    finally:
        lease.configure(lease_seconds=lease.DEFAULT_LEASE_S)


def test_a_bucket_lock_of_another_host_is_stale_only_when_its_lease_and_its_journal_are_old(s3_bucket, tmp_path):
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 1), "logs")
    ostore = ObjectStore(url)
    rfs = ostore.rfs
    st = bk.BucketState(ostore)
    op = new_op_id()
    now = time.time()
    lock = {"run": "exp0/run000", "op": op, "host": "other-node", "pid": 4242, "at": now - 600,
            "renewed": now - 600, "expires": now + 60}
    assert not bk.owner_gone(lock, st)  # lease live
    lock["expires"] = now - 1
    assert bk.owner_gone(lock, st)  # lease expired, no journal
    st.create(rfs.path(f"{bk.JOURNAL}/{op}.json"), {"op": op, "run": "exp0/run000", "step": "planned"})
    assert not bk.owner_gone(lock, st)  # expired, but its journal was written a moment ago
    assert bk.owner_gone(lock, st) is False
    lease.configure(lease_seconds=0.5)
    try:
        time.sleep(1.2)
        assert bk.owner_gone(lock, st)  # no journal progress within a lease: stale
    finally:
        lease.configure(lease_seconds=lease.DEFAULT_LEASE_S)
    # a lock naming an op id that is no op id never becomes a journal key; a malformed lock is nobody's
    assert bk.owner_gone(dict(lock, op="../../x"), st)
    for junk in ({"corrupt": True}, {"host": 1}, dict(lock, pid=True), dict(lock, expires=float("inf"))):
        assert bucket_lease.holder_gone(junk, lambda op: None)


def test_hostile_ledger_objects_in_a_bucket_are_refused_with_codes(s3_bucket, tmp_path):
    from tb_footprint_plugin.engine import bucket_ledger

    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 2), "logs")
    ostore = ObjectStore(url)
    book = bucket_ledger.BucketLedger(ostore, "drop-profiles", "0/1")
    book.mark("exp0/run000", "done", original_size_bytes=100, after_size_bytes=10, op_id="x")
    book.flush()  # the batch's end
    good = bucket_ledger._run_hash("exp1/run001")
    other = bucket_ledger._run_hash("exp0/run000")
    base = s3_bucket.key("logs/.tb-footprint/ledgers")
    s3_bucket.fs.pipe_file(f"{base}/shard-0-of-1/{good}.json", json.dumps(
        {"version": 1, "run": "exp1/run001", "entry": {"state": "done", "pid": "evil"}}).encode())
    s3_bucket.fs.pipe_file(f"{base}/shard-1-of-2/{other}.json", json.dumps(
        {"version": 1, "run": "exp1/run001", "entry": {"state": "done"}}).encode())  # not its key's run
    s3_bucket.fs.pipe_file(f"{base}/shard-1-of-2/notes.txt", b"hello")
    s3_bucket.fs.pipe_file(f"{base}/batch/{good}.json", b"{not json")
    b = api.status(url)["batch"]
    assert sorted(b["runs"]) == ["exp0/run000"] and b["runs"]["exp0/run000"]["state"] == "done"
    assert sorted(p["code"] for p in b["problems"]) == ["bad_ledger", "bad_ledger_entry", "bad_ledger_entry",
                                                        "bad_ledger_entry"]
    assert any("not its key's" in p["detail"] for p in b["problems"])


def test_status_reads_ledger_objects_another_worker_wrote_since_its_last_listing(bucket, tmp_path):
    """A long-lived process (TensorBoard, or a test) that listed the ledgers once still sees objects
    written under the same folders since: fsspec caches every sub-folder a recursive listing saw,
    and a read answered from that cache said "not found" for the new objects (the merged status
    then showed another shard's older skip for a run this shard had reduced)."""
    from tb_footprint_plugin.engine import bucket_ledger

    url = bucket.upload(make_logdir(tmp_path / "logs", 2), "logs")
    book = bucket_ledger.BucketLedger(ObjectStore(url), "drop-profiles", "0/1")
    book.mark("exp0/run000", "done", original_size_bytes=100, after_size_bytes=10, op_id="a")
    book.flush()  # the batch's end
    assert sorted(api.status(url)["batch"]["runs"]) == ["exp0/run000"]
    # another machine (its own client, no shared cache) marks the second run in the same folder
    key = f"{bucket.key('logs/.tb-footprint/ledgers')}/shard-0-of-1/{bucket_ledger._run_hash('exp1/run001')}.json"
    bucket.fs.pipe_file(key, json.dumps({"version": 1, "run": "exp1/run001", "policy": "drop-profiles",
                                            "entry": {"state": "done", "op_id": "b"}}).encode())
    b = api.status(url)["batch"]
    assert sorted(b["runs"]) == ["exp0/run000", "exp1/run001"] and b["counts"] == {"done": 2}, b
    assert b["problems"] == []


@pytest.mark.parametrize("failpoint, settled", [("reduce.swap_record", "completed"),
                                                ("reduce.backup", "rolled_back")])
def test_runs_recovery_settles_for_a_dead_worker_are_recorded_by_the_worker_that_settled_them(
        s3_bucket, tmp_path, failpoint, settled):
    """Worker 0/2 dies in its batch; worker 1/2 starts later and settles that batch's journal
    (finished when its commit was recorded, rolled back before it). The merged status says so at
    once, run by run, instead of showing the dead worker's runs as still being reduced; after the
    rerun of 0/2 every run is done exactly once."""
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 6), "logs")
    mine = api.shard_plan([url], (0, 2))[url]
    dead = _worker(url, "0/2", pol, TB_FOOTPRINT_FAILPOINTS=f"{failpoint}=kill")
    dead.communicate(timeout=600)
    assert dead.returncode == -signal.SIGKILL
    assert sorted(api.status(url)["batch"]["stalled"]) == sorted(mine)

    other = _worker(url, "1/2", pol)
    out, err = other.communicate(timeout=600)
    assert other.returncode == 0, err
    rep = json.loads(out)
    assert [r["action"] for r in rep["recovered"]] == [settled] and rep["ledger_problems"] == []
    assert sorted(s["run"] for s in rep["recovered"][0]["runs"]) == sorted(mine)
    b = api.status(url)["batch"]
    assert b["stalled"] == [] and b["problems"] == []
    ops = {m["op_id"]: m for m in api.operations(url)}
    for run in mine:
        e = b["runs"][run]
        assert e["shard"] == "1/2" and e["code"] == settled and e["op_id"], e
        if settled == "completed":  # reduced by the dead worker's operation, sizes from its manifest
            assert e["state"] == "done" and e["verified"] is True
            assert ops[e["op_id"]]["run"] == run and e["original_size_bytes"] == ops[e["op_id"]]["bytes_before"]
            assert e["after_size_bytes"] == ops[e["op_id"]]["bytes_after"] < e["original_size_bytes"]
        else:  # back as it was, to be reduced by a rerun
            assert e["state"] == "pending" and e["op_id"] not in ops
    assert b["counts"] == ({"done": 6} if settled == "completed" else {"done": 6 - len(mine), "pending": len(mine)})
    cli = subprocess.run(CLI + ["status", url, "--runs"], env=env(), capture_output=True, text=True)
    assert cli.returncode == 0 and f"[{settled}]" in cli.stdout and "worker that is gone" not in cli.stdout

    # the rerun of 0/2: a finished run has nothing left (its skip does not hide the done entry),
    # a rolled-back one is reduced now
    again = _worker(url, "0/2", pol)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    b = api.status(url)["batch"]
    assert b["counts"] == {"done": 6} and b["stalled"] == [], b["counts"]
    hist = api.history(url)
    assert sorted(e["run"] for e in hist if e["kind"] == "reduce" and e["outcome"] == "verified") == \
        sorted(r.name for r in api.scan(url).runs)


def test_rerunning_a_finished_shard_on_a_bucket_keeps_its_runs_done(s3_bucket, tmp_path):
    """Resubmitting the same array (the documented resume) finds nothing left in the shard's runs:
    the ledger keeps saying done, by whom and how much was saved, instead of "skipped" with the
    reduced size as if nothing had happened."""
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 6), "logs")
    mine = api.shard_plan([url], (0, 2))[url]
    for _ in range(2):
        w = _worker(url, "0/2", pol)
        out, err = w.communicate(timeout=600)
        assert w.returncode == 0, err
        first = api.status(url)["batch"] if _ == 0 else first
    rep = json.loads(out)
    assert sorted(o["run"] for o in rep["outcomes"] if o["status"] == "skipped") == sorted(mine)
    b = api.status(url)["batch"]
    assert b["counts"] == {"done": len(mine)} and b["saved_bytes"] == first["saved_bytes"] > 0
    assert {r: (e["op_id"], e["original_size_bytes"]) for r, e in b["runs"].items()} == \
        {r: (e["op_id"], e["original_size_bytes"]) for r, e in first["runs"].items()}
