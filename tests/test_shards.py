"""Sharded batches (issue 16): the partition, the scheduler's environment, leases, throttling,
and workers started at once on one logdir with overlapping shards and one killed mid-run."""
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import REPO, tree_hashes, user_files
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.journal import RunLock, RunLocked
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.plan.shard import ShardError, parse_shard, partition, shard_from_env
from tb_footprint_plugin.storage import throttle
from tb_footprint_plugin.storage.paths import state_dir

CLI = [sys.executable, "-m", "tb_footprint_plugin.cli"]
OLD = time.time() - 86400


def make_logdir(root, n_runs, seed=0):
    """``n_runs`` small runs (scalars + one xprof session each, sizes varied), aged past the quiet period."""
    rng = random.Random(seed)
    for i in range(n_runs):
        run = os.path.join(root, f"exp{i % 3}", f"run{i:03d}")
        os.makedirs(run)
        with synth.EventWriter(run, timestamp=1_700_000_000 + i) as w:
            for step in range(10 + rng.randrange(60)):
                w.scalar("loss", step, 1.0 / (step + 1))
        synth.write_profile_session(run, synth.session_name_for(1_700_000_000 + i), "host",
                                    n_events=10 + rng.randrange(300), seed=i)
    for d, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(d, f), (OLD, OLD))
    return str(root)


def env(**kw):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SLURM_", "JOB_COMPLETION_INDEX", "TB_FOOTPRINT_SHARD_COUNT", "TB_FOOTPRINT_FAILPOINTS"))}
    e.update(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **kw)
    return e


# ---------------------------------------------------------------------------------------------
# the partition
# ---------------------------------------------------------------------------------------------
def _sizes(n, seed=1):
    rng = random.Random(seed)
    return {f"logs\0team{rng.randrange(9)}/run-{i:05d}": int(rng.lognormvariate(16, 1.5)) for i in range(n)}


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16, 100])
def test_every_run_in_exactly_one_shard_and_stable_under_listing_order(count):
    sizes = _sizes(2000)
    a = partition(sizes, count)
    keys = list(sizes)
    random.Random(5).shuffle(keys)
    b = partition({k: sizes[k] for k in keys}, count)
    assert a == b
    assert set(a) == set(sizes) and set(a.values()) <= set(range(count))
    shards = [sharding.select(sizes, (i, count)) for i in range(count)]
    assert sorted(k for s in shards for k in s) == sorted(sizes)  # each key once, none lost


@pytest.mark.parametrize("count", [2, 4, 16, 100])
def test_shards_balance_by_bytes_within_the_stated_bound(count):
    sizes = _sizes(2000, seed=count)
    loads = [0] * count
    for k, s in partition(sizes, count).items():
        loads[s] += sizes[k]
    total, largest = sum(sizes.values()), max(sizes.values())
    assert max(loads) <= 9 / 8 * (total / count + largest)  # the bound of plan/shard.py
    if count <= 16:  # many runs per shard: within a few percent of the mean
        assert max(loads) <= 1.15 * total / count + largest, (max(loads), total / count)


def test_the_partition_holds_when_runs_grow_a_little_or_were_reduced_by_another_worker():
    sizes = _sizes(500)
    a = partition(sizes, 4)
    # a few records appended: the weights are rounded to 1/8 octave; most runs stay put
    grown = {k: v + 100 for k, v in sizes.items()}
    moved = sum(1 for k in sizes if partition(grown, 4)[k] != a[k])
    assert moved <= 0.05 * len(sizes), moved
    # a run reduced by another worker counts with its size before, from the change log
    run = next(iter(sizes)).split("\0")[1]
    cur = {run: 1000}
    hist = [{"kind": "reduce", "run": run, "outcome": "verified", "before": 5_000_000, "after": 1000}]
    assert sharding.original_sizes(cur, hist) == {run: 5_000_000}
    # hostile or unrelated entries change nothing
    assert sharding.original_sizes(cur, [{"kind": "reduce", "run": run, "outcome": "verified", "before": "x"},
                                         "junk", {"run": "other", "before": 9}]) == cur


def test_shard_specs_and_scheduler_environments():
    assert parse_shard("0/4") == (0, 4) and parse_shard("3/4") == (3, 4)
    for bad in ("4/4", "-1/4", "1/0", "a/b", "1", "1/2/3", "1_0/30", "\uff11/4", " 1/4"):
        with pytest.raises(ShardError):
            parse_shard(bad)
    assert shard_from_env({}) is None
    # Slurm: --array=0-7
    assert shard_from_env({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "8"}) == (5, 8)
    # --array=1-8: the index counts from the array's first task
    assert shard_from_env({"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_MIN": "1",
                           "SLURM_ARRAY_TASK_COUNT": "8"}) == (7, 8)
    # --array=10-40:10 -> tasks 10, 20, 30, 40
    assert shard_from_env({"SLURM_ARRAY_TASK_ID": "30", "SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_STEP": "10",
                           "SLURM_ARRAY_TASK_COUNT": "4"}) == (2, 4)
    with pytest.raises(ShardError, match="SLURM_ARRAY_TASK_COUNT"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "1"})
    # only indices 3 and 7 of a 0-15 array submitted again (sbatch --array=3,7): Slurm calls it
    # an array of 2 from 3; with the first array's size the task ids are the shards themselves
    again = {"SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_MAX": "7", "SLURM_ARRAY_TASK_COUNT": "2"}
    with pytest.raises(ShardError, match="--shard-count"):
        shard_from_env(dict(again, SLURM_ARRAY_TASK_ID="7"))
    assert shard_from_env(dict(again, SLURM_ARRAY_TASK_ID="3"), count=16) == (3, 16)
    assert shard_from_env(dict(again, SLURM_ARRAY_TASK_ID="7", TB_FOOTPRINT_SHARD_COUNT="16")) == (7, 16)
    with pytest.raises(ShardError, match="0 to 15"):
        shard_from_env(dict(again, SLURM_ARRAY_TASK_ID="16"), count=16)
    with pytest.raises(ShardError, match="not an integer"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "1_0", "SLURM_ARRAY_TASK_COUNT": "20"})
    # Kubernetes Indexed Job: the count from the flag, else from the environment
    assert shard_from_env({"JOB_COMPLETION_INDEX": "2"}, count=8) == (2, 8)
    assert shard_from_env({"JOB_COMPLETION_INDEX": "2", "TB_FOOTPRINT_SHARD_COUNT": "3"}) == (2, 3)
    with pytest.raises(ShardError, match="shard count"):
        shard_from_env({"JOB_COMPLETION_INDEX": "2"})
    with pytest.raises(ShardError, match="out of range"):
        shard_from_env({"JOB_COMPLETION_INDEX": "3", "TB_FOOTPRINT_SHARD_COUNT": "3"})
    with pytest.raises(ShardError, match="not an integer"):
        shard_from_env({"JOB_COMPLETION_INDEX": "two", "TB_FOOTPRINT_SHARD_COUNT": "3"})


def test_cli_refuses_a_bad_shard_as_a_usage_error(tmp_path):
    logdir = make_logdir(tmp_path / "logs", 2)
    out = subprocess.run(CLI + ["reduce", logdir, "--shard", "2/2", "--yes"], env=env(), capture_output=True, text=True)
    assert out.returncode == 2 and "out of range" in out.stderr
    out = subprocess.run(CLI + ["reduce", logdir, "--yes"], env=env(JOB_COMPLETION_INDEX="1"), capture_output=True, text=True)
    assert out.returncode == 2 and "TB_FOOTPRINT_SHARD_COUNT" in out.stderr
    for flag, value in [("--max-file-ops-per-second", "0"), ("--max-file-ops-per-second", "-5"),
                        ("--max-file-ops-per-second", "inf"), ("--lease", "0"), ("--lease", "-1s")]:
        out = subprocess.run(CLI + ["reduce", logdir, "--shard", "0/2", f"{flag}={value}", "--yes"], env=env(),
                             capture_output=True, text=True)
        assert out.returncode == 2 and "above 0" in out.stderr, (flag, value, out.stderr)


# ---------------------------------------------------------------------------------------------
# leases
# ---------------------------------------------------------------------------------------------
def _write_lease(lock, **kw):
    d = {"run": lock.run, "host": lease.HOST, "pid": os.getpid(), "shard": "0/2", "started": time.time(),
         "renewed": time.time(), "expires": time.time() + 60, "token": "t"}
    d.update(kw)
    os.makedirs(lock.lock_dir, exist_ok=True)
    with open(lock.lease_path, "w") as f:
        json.dump(d, f)


def test_a_live_lease_keeps_a_run_even_where_flock_does_not(tmp_path):
    locks = str(tmp_path / "state" / "locks")
    lk = RunLock(locks, "a/run")
    # another machine (flock not shared over NFS): its lease is live until it expires
    _write_lease(lk, host="other-node", pid=1234)
    with pytest.raises(RunLocked, match=r"other-node pid 1234, shard 0/2"):
        lk.acquire()
    # expired, and its journal shows no progress: taken over
    _write_lease(lk, host="other-node", pid=1234, expires=time.time() - 1)
    with lk:
        held = lease.read_lease(lk.lease_path)
        assert held["host"] == lease.HOST and held["pid"] == os.getpid()
    assert not os.path.exists(lk.lease_path)  # released with the lock
    # expired but the holder's journal was written a moment ago: still its run
    jdir = tmp_path / "state" / "journal"
    jdir.mkdir()
    (jdir / "op1.jsonl").write_text(json.dumps({"type": "begin", "run": "a/run"}) + "\n")
    _write_lease(lk, host="other-node", pid=1234, expires=time.time() - 1)
    with pytest.raises(RunLocked):
        lk.acquire()
    (jdir / "op1.jsonl").unlink()


def test_a_dead_pids_lease_on_this_host_is_taken_over_at_once_and_garbage_is_ignored(tmp_path):
    lk = RunLock(str(tmp_path / "locks"), "r")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _write_lease(lk, pid=dead.pid, expires=time.time() + 3600)
    with lk:
        assert lease.read_lease(lk.lease_path)["pid"] == os.getpid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _write_lease(lk, pid=live.pid, expires=time.time() + 3600)
        with pytest.raises(RunLocked):
            lk.acquire()
    finally:
        live.kill()
        live.wait()
    for junk in ("{", "[]", json.dumps({"host": 1, "pid": "x"}), json.dumps({"host": "h", "pid": True, "token": "t",
                                                                              "expires": 1e300, "renewed": 0})):
        with open(lk.lease_path, "w") as f:
            f.write(junk)
        with lk:
            pass


def test_held_leases_are_renewed(tmp_path):
    lease.configure(lease_seconds=0.3)
    try:
        lk = RunLock(str(tmp_path / "locks"), "r")
        with lk:
            first = lease.read_lease(lk.lease_path)["expires"]
            # the renewer wakes at least every second; waited for, not slept: on a loaded CI the
            # thread may not run within a fixed 1.3 s
            deadline = time.monotonic() + 60
            while lease.read_lease(lk.lease_path)["expires"] <= first and time.monotonic() < deadline:
                time.sleep(0.05)
            assert lease.read_lease(lk.lease_path)["expires"] > first
    finally:
        lease.configure(lease_seconds=lease.DEFAULT_LEASE_S)


# ---------------------------------------------------------------------------------------------
# throttling
# ---------------------------------------------------------------------------------------------
def test_token_bucket_paces_operations():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    b = throttle.TokenBucket(10, clock=lambda: now[0], sleep=sleep)
    for _ in range(30):
        b.take()
    assert now[0] == pytest.approx(2.0)  # 10 from the burst, 20 more at 10/s
    with pytest.raises(ValueError):
        throttle.TokenBucket(0)


def test_max_file_ops_per_second_throttles_scan_and_transaction(tmp_path):
    logdir = make_logdir(tmp_path / "logs", 3)
    throttle.configure(None)
    n0 = throttle.ops_count
    throttle.op()
    assert throttle.ops_count == n0  # unset: nothing counted, nothing waited
    t = time.monotonic()
    rep = api.reduce_logdir(logdir, dry_run=False, verify_backends=("python",), max_file_ops_per_second=50)
    took = time.monotonic() - t
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == 3
    ops = throttle.ops_count - n0
    # stat/open/rename/unlink/link of the scan and the transactions counted one by one, and each
    # run charged what its transaction and verification take beyond them
    from tb_footprint_plugin.engine.transaction import UNCOUNTED_RUN_OPS
    assert ops > 100 + 3 * UNCOUNTED_RUN_OPS, ops
    assert took >= (ops - 50) / 50 * 0.95, (ops, took)  # never faster than the cap after the burst
    assert throttle.limit() is None  # lifted again after the call


# ---------------------------------------------------------------------------------------------
# workers at once
# ---------------------------------------------------------------------------------------------
def _worker(logdir, shard, **kw):
    return subprocess.Popen(CLI + ["reduce", logdir, "--shard", shard, "--verify", "python", "--json", "--yes"],
                            env=env(**kw), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _what_workers_said(missing: set, said: dict) -> dict:
    """Per missing run, each worker's outcome for it (or the tail of its stderr)."""
    out: dict = {}
    for shard, (stdout, stderr) in said.items():
        try:
            outcomes = json.loads(stdout).get("outcomes", [])
        except ValueError:
            out[shard] = (stderr or "")[-500:]
            continue
        for o in outcomes:
            if o.get("run") in missing:
                out.setdefault(o["run"], {})[shard] = {k: o.get(k) for k in ("status", "code", "reason")}
    return out


def _why_failed(stdout: str, stderr: str) -> dict:
    """What a worker that exited non-zero said: its JSON error, or each outcome that is not
    ``verified`` (status, code, reason), what its start recovered, its ledger's problems and the
    runs it left unread; the tail of its stderr beside (a traceback)."""
    said: dict = {"stderr": (stderr or "")[-1500:]}
    try:
        d = json.loads(stdout)
    except ValueError:
        said["stdout"] = (stdout or "")[-1500:]
        return said
    if "error" in d:
        said["error"] = d["error"]
        return said
    said["outcomes"] = [{k: o.get(k) for k in ("run", "status", "code", "reason")}
                        for o in d.get("outcomes", []) if o.get("status") != "verified"]
    said.update({k: d.get(k) for k in ("recovered", "ledger_problems", "unread_warnings")})
    return said


def _all_exit_zero(procs) -> None:
    """Wait for every worker, then assert each exited 0, saying why one did not (``_why_failed``):
    all are waited for first, so a failure leaves no worker running in the test's folder."""
    said = [(p, *p.communicate(timeout=300)) for p in procs]
    failed = {f"worker {i} (--shard {p.args[p.args.index('--shard') + 1]})":
              dict(_why_failed(out, err), returncode=p.returncode)
              for i, (p, out, err) in enumerate(said) if p.returncode != 0}
    assert not failed, failed


def test_overlapping_workers_and_a_killed_one_reduce_every_run_exactly_once(tmp_path):
    logdir = make_logdir(tmp_path / "logs", 24)
    before = user_files(logdir)
    runs = sorted(r.name for r in api.scan(logdir).runs)
    assert len(runs) == 24
    # five workers: 0/2 and 1/2 cover everything, 0/3 and 1/3 overlap them, and 2/3 is killed
    # (SIGKILL) with its first run backed up, in the middle of its transaction. 2/3 starts first
    # and the others the moment its first journal exists: started together, the others could lock
    # every run of 2/3 first, and it then ended without a backup to be killed at (a CI flake)
    killed = _worker(logdir, "2/3", TB_FOOTPRINT_FAILPOINTS="reduce.backup=kill")
    journals = os.path.join(state_dir(str(logdir)), "journal")
    deadline = time.monotonic() + 120
    while killed.poll() is None and time.monotonic() < deadline and \
            not (os.path.isdir(journals) and any(n.endswith(".jsonl") for n in os.listdir(journals))):
        time.sleep(0.005)
    procs = [_worker(logdir, s) for s in ("0/2", "1/2", "0/3", "1/3")]
    said = {}  # each worker's own report, to name what happened to a run that is missing below
    for s, p in zip(("0/2", "1/2", "0/3", "1/3", "2/3"), procs + [killed]):
        said[s] = p.communicate(timeout=600)
    assert killed.returncode == -signal.SIGKILL
    st = api.status(logdir)
    assert len(st["batch"]["ledgers"]) == 5
    # the rerun of the killed shard settles its journal and takes its runs over
    again = _worker(logdir, "2/3")
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    rep = json.loads(out)
    assert rep["shard"] == "2/3" and sorted(rep["shard_runs"]) == api.shard_plan([logdir], (2, 3))[logdir]

    # every run reduced and verified exactly once: one verified operation per run in the vault and the history
    ops = api.operations(logdir)
    verified = sorted(m["run"] for m in ops if m["kind"] == "reduce" and m["outcome"] == "verified")
    assert verified == runs, _what_workers_said(set(runs) - set(verified), said)
    hist = api.history(logdir)
    assert sorted(e["run"] for e in hist if e["kind"] == "reduce" and e["outcome"] == "verified") == runs
    others = [e for e in hist if e["outcome"] != "verified"]
    assert len(others) <= 1 and all(e["outcome"] == "rolled_back" for e in others)  # the killed transaction
    assert api.verify(logdir) and all(r["ok"] for r in api.verify(logdir, verify_backends=("python",)))
    # the merged status: one view of the batch, every run done, who did it, bytes
    st = api.status(logdir)
    assert st["unfinished_operations"] == [] and st["problems"] == []
    b = st["batch"]
    assert b["counts"] == {"done": 24} and b["stalled"] == [] and b["problems"] == []
    by_op = {m["op_id"]: m for m in ops}
    for run, e in b["runs"].items():
        assert e["host"] == lease.HOST and isinstance(e["pid"], int) and e["shard"] in ("0/2", "1/2", "0/3", "1/3", "2/3")
        assert by_op[e["op_id"]]["run"] == run and e["original_size_bytes"] == by_op[e["op_id"]]["bytes_before"]
    assert b["saved_bytes"] == sum(m["bytes_before"] - m["bytes_after"] for m in ops if m["outcome"] == "verified")
    cli = subprocess.run(CLI + ["status", logdir, "--runs"], env=env(), capture_output=True, text=True)
    assert cli.returncode == 0 and "done 24" in cli.stdout and "shard 2/3" in cli.stdout
    # nothing lost: every original comes back byte for byte
    outs = api.restore(logdir)
    assert len(outs) == 24 and all(o.status == "restored" for o in outs)
    assert user_files(logdir) == before
    # the batch's record says so: every run restored, nothing saved any more
    b = api.status(logdir)["batch"]
    assert b["counts"] == {"restored": 24} and b["saved_bytes"] == 0


def test_a_stalled_worker_shows_in_the_merged_status(tmp_path):
    logdir = make_logdir(tmp_path / "logs", 4)
    w = _worker(logdir, "0/1", TB_FOOTPRINT_FAILPOINTS="reduce.backup=kill")
    w.communicate(timeout=300)
    assert w.returncode == -signal.SIGKILL
    b = api.status(logdir)["batch"]
    assert len(b["stalled"]) == 1 and b["runs"][b["stalled"][0]]["state"] == "reducing"
    assert b["counts"].get("pending") == 3
    # pending runs weigh what they will be reduced from
    sizes = {r.name: r.total_bytes for r in api.scan(logdir).runs}
    assert all(e["original_size_bytes"] == sizes[r] for r, e in b["runs"].items() if e["state"] == "pending")
    assert b["bytes"]["pending"] == sum(e["original_size_bytes"] for e in b["runs"].values() if e["state"] == "pending")
    cli = subprocess.run(CLI + ["status", logdir], env=env(), capture_output=True, text=True)
    assert "worker that is gone" in cli.stdout
    # a damaged ledger is named, not dropped silently
    with open(os.path.join(state_dir(logdir), "ledger-shard-1-of-2.json"), "w") as f:
        f.write(json.dumps({"version": 1, "runs": {"x": {"state": "done", "pid": "evil"}, "y": []}}))
    b = api.status(logdir)["batch"]
    assert "x" not in b["runs"] and "y" not in b["runs"]
    assert sorted(p["code"] for p in b["problems"]) == ["bad_ledger_entry"] * 2


def test_a_worker_settles_the_run_a_killed_worker_left_and_reduces_it(tmp_path):
    """A run whose worker died after this worker started: its journal is settled in the transaction
    (the lock proves its process gone), not left as a failure for a rerun."""
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.engine.transaction import reduce_run

    logdir = make_logdir(tmp_path / "logs", 1)
    before = user_files(logdir)
    rp = next(r for r in api.plan(logdir).runs if r.actions)  # planned before the other worker started
    w = _worker(logdir, "0/1", TB_FOOTPRINT_FAILPOINTS="reduce.backup=kill")
    w.communicate(timeout=300)
    assert w.returncode == -signal.SIGKILL and api.pending_operations(logdir)
    o = reduce_run(Context(logdir, verify_backends=("python",)), rp)
    assert o.status == "verified", o.to_dict()
    assert api.pending_operations(logdir) == []
    assert [e["outcome"] for e in api.history(logdir)] == ["rolled_back", "verified"]
    api.restore(logdir)
    assert user_files(logdir) == before


def test_a_sharded_dry_run_writes_nothing_and_plans_only_its_shard(tmp_path):
    logdir = make_logdir(tmp_path / "logs", 6)
    before = tree_hashes(logdir)
    rep = api.reduce_logdir(logdir, shard=(1, 2))
    mine = api.shard_plan([logdir], (1, 2))[logdir]
    assert rep.dry_run and sorted(rp.run for rp in rep.plan.runs) == mine == sorted(rep.shard_runs)
    assert tree_hashes(logdir) == before  # not even a scan cache or a ledger
    with pytest.raises(ValueError, match="shard_with"):
        api.reduce_logdir(logdir, shard=(0, 2), shard_with=[str(tmp_path)])


def test_several_logdirs_are_sharded_together(tmp_path):
    a = make_logdir(tmp_path / "a", 3, seed=1)
    b = make_logdir(tmp_path / "b", 3, seed=2)
    listing = tmp_path / "logdirs.txt"
    listing.write_text(f"# the team's logdirs\n{b}\n")
    # the second worker reaches both logdirs through a symlink (another mount path, a home link):
    # the partition is the same, so no run falls between the shards
    os.symlink(str(tmp_path), str(tmp_path.parent / f"{tmp_path.name}-link"))
    via = {a: a.replace(str(tmp_path), f"{tmp_path}-link"), b: b.replace(str(tmp_path), f"{tmp_path}-link")}
    (tmp_path / "via.txt").write_text(f"{via[b]}\n")
    for i, (first, listed) in enumerate([(a, listing), (via[a], tmp_path / "via.txt")]):
        out = subprocess.run(CLI + ["reduce", first, "--logdirs-from", str(listed), "--shard", f"{i}/2",
                                    "--verify", "python", "--json", "--yes"], env=env(), capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        reps = json.loads(out.stdout)
        plan = api.shard_plan([a, b], (i, 2))
        assert [sorted(r["shard_runs"]) for r in reps] == [plan[a], plan[b]]
        assert [r["logdir"] for r in reps] == [first, via[b] if i else b]
    for ld in (a, b):
        assert api.status(ld)["batch"]["counts"] == {"done": 3}
    with pytest.raises(ValueError, match="listed twice"):
        api.reduce_logdirs([a, via[a]], shard=(0, 2))


# ---------------------------------------------------------------------------------------------
# the launchers in examples/
# ---------------------------------------------------------------------------------------------
def _ledger_runs(logdir, i, n):
    with open(os.path.join(state_dir(logdir), f"ledger-shard-{i}-of-{n}.json")) as f:
        return sorted(json.load(f)["runs"])


def test_slurm_array_script_takes_its_task_shard(tmp_path):
    logdir = make_logdir(tmp_path / "logs", 9)
    # --array=4-6: task 5 is shard 1 of 3
    out = subprocess.run(["bash", str(REPO / "examples" / "slurm_reduce.sbatch"), logdir, "--verify", "python"],
                         env=env(SLURM_ARRAY_TASK_ID="5", SLURM_ARRAY_TASK_MIN="4", SLURM_ARRAY_TASK_MAX="6",
                                 SLURM_ARRAY_TASK_COUNT="3", TB_FOOTPRINT=" ".join(map(shlex.quote, CLI))),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "shard 1/3" in out.stdout
    mine = api.shard_plan([logdir], (1, 3))[logdir]
    assert mine and _ledger_runs(logdir, 1, 3) == mine
    assert sorted(m["run"] for m in api.operations(logdir)) == mine
    # only index 2 of that array submitted again (sbatch --array=2 --export=ALL,SHARDS=3): shard 2/3
    out = subprocess.run(["bash", str(REPO / "examples" / "slurm_reduce.sbatch"), logdir, "--verify", "python"],
                         env=env(SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_TASK_MIN="2", SLURM_ARRAY_TASK_MAX="2",
                                 SLURM_ARRAY_TASK_COUNT="1", SHARDS="3", TB_FOOTPRINT=" ".join(map(shlex.quote, CLI))),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "shard 2/3" in out.stdout
    assert _ledger_runs(logdir, 2, 3) == api.shard_plan([logdir], (2, 3))[logdir]
    # outside an array job the script refuses instead of reducing everything
    out = subprocess.run(["bash", str(REPO / "examples" / "slurm_reduce.sbatch"), logdir], env=env(),
                         capture_output=True, text=True)
    assert out.returncode != 0 and "array job" in out.stderr


def test_kubernetes_indexed_job_takes_its_completion_index(tmp_path):
    with open(REPO / "examples" / "k8s-indexed-job.yaml") as f:
        job = yaml.safe_load(f)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    c = spec["template"]["spec"]["containers"][0]
    menv = {e["name"]: e["value"] for e in c["env"]}
    assert int(menv["TB_FOOTPRINT_SHARD_COUNT"]) == spec["completions"]
    mount = c["volumeMounts"][0]["mountPath"]
    logdir = make_logdir(tmp_path / "logs", 10)
    cmd = [logdir if a == mount else a for a in c["command"] + c["args"]]
    assert cmd[0] == "tb-footprint"
    out = subprocess.run(CLI + cmd[1:] + ["--verify", "python"], env=env(JOB_COMPLETION_INDEX="2", **menv),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    n = spec["completions"]
    assert f"shard 2/{n}" in out.stdout
    mine = api.shard_plan([logdir], (2, n))[logdir]
    assert _ledger_runs(logdir, 2, n) == mine
    assert sorted(m["run"] for m in api.operations(logdir)) == mine


# ---------------------------------------------------------------------------------------------
# the ledger is untrusted input
# ---------------------------------------------------------------------------------------------
def test_a_hostile_ledger_is_refused_entry_by_entry_with_codes(tmp_path):
    from tb_footprint_plugin.engine.ledger import Ledger, check_entry
    from tb_footprint_plugin.engine.trust import Untrusted

    logdir = make_logdir(tmp_path / "logs", 3)
    runs = sorted(r.name for r in api.scan(logdir).runs)
    path = os.path.join(state_dir(logdir), "ledger-shard-0-of-1.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    hostile = {
        runs[0]: {"state": "done", "pid": -1},                    # negative pid
        runs[1]: {"state": "done", "original_size_bytes": "9e9"},  # a size that is a string
        runs[2]: {"state": "done", "verified": "yes", "updated_at": 1.0},
        "../../etc": {"state": "rm -rf"},                          # unknown state
        "nested": {"state": "done", "host": {"$ref": "x"}},
        "ratio": {"state": "done", "reduced_ratio": float("nan")},
        "list": ["done"],
        "ok": {"state": "skipped", "code": "nothing", "extra": {"ignored": True}},
    }
    with open(path, "w") as f:
        json.dump({"version": 1, "logdir": logdir, "policy": "archive", "runs": hostile}, f)
    book = Ledger(path, "archive", logdir, shard="0/1")
    data = book.read()
    assert sorted(data["runs"]) == ["ok"] and data["runs"]["ok"] == {"state": "skipped", "code": "nothing"}
    assert len(book.problems) == 7 and {p["code"] for p in book.problems} == {"bad_ledger_entry"}
    assert all(p["file"] == path for p in book.problems)
    assert any("'../../etc'" in p["detail"] and "unknown state" in p["detail"] for p in book.problems)
    with pytest.raises(Untrusted) as e:
        check_entry(runs[0], {"state": "done", "pid": True}, path)
    assert e.value.code == "bad_ledger_entry"

    # a reduction with that ledger: the refused "done" entries do not stop their runs; the
    # refusals are in the report and on the command line
    out = subprocess.run(CLI + ["reduce", logdir, "--shard", "0/1", "--verify", "python", "--yes"], env=env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("refused [bad_ledger_entry] ledger:") == 7
    assert sorted(m["run"] for m in api.operations(logdir) if m["outcome"] == "verified") == runs
    assert api.status(logdir)["batch"]["counts"] == {"done": 3, "skipped": 1}  # "ok" stays as it was


@pytest.mark.parametrize("content,code", [
    ("{", "bad_ledger"),
    ("[1, 2]", "bad_ledger"),
    (json.dumps({"version": 2, "runs": {}}), "bad_ledger"),
    (json.dumps({"version": 1, "runs": {}, "policy": ["archive"]}), "bad_ledger"),
    ("[" * 100000, "bad_ledger"),
    (json.dumps({"version": 1, "runs": {}, "logdir": "/somewhere/else"}), "foreign_ledger"),
])
def test_a_ledger_that_is_no_ledger_is_refused_whole_and_kept_aside(tmp_path, content, code):
    from tb_footprint_plugin.engine.ledger import Ledger, merged

    logdir = str(tmp_path)
    path = str(tmp_path / ".tb-footprint" / "ledger-shard-0-of-2.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(content)
    b = merged([path], logdir)
    assert b["runs"] == {} and [p["code"] for p in b["problems"]] == [code]
    book = Ledger(path, "archive", logdir, shard="0/2")
    book.start(["a"])
    assert [p["code"] for p in book.problems] == [code]
    aside = book.problems[0]["kept_as"]
    with open(aside) as f:
        assert f.read() == content  # set aside byte for byte, never rewritten
    assert merged([path], logdir)["runs"]["a"]["state"] == "pending" and merged([path], logdir)["problems"] == []


# ---------------------------------------------------------------------------------------------
# history: one file per worker, read as one log
# ---------------------------------------------------------------------------------------------
def test_each_worker_appends_to_its_own_history_file_and_history_merges_them(tmp_path):
    from tb_footprint_plugin.engine import history as hist

    logdir = make_logdir(tmp_path / "logs", 6)
    state = state_dir(logdir)
    os.makedirs(state, exist_ok=True)
    # an old single-file history, written before per-worker files existed
    with open(os.path.join(state, "history.jsonl"), "w") as f:
        f.write(json.dumps({"time": 1.0, "kind": "reduce", "run": "old/run", "outcome": "verified",
                            "op_id": "old"}) + "\n")
        f.write("not json\n[1]\n")
        f.write(json.dumps({"time": "later", "kind": "purge", "run": "old/run", "outcome": "purged"}) + "\n")
    procs = [_worker(logdir, s) for s in ("0/2", "1/2")]
    for p in procs:
        _out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    files = sorted(os.path.basename(p) for p in hist.history_files(state))
    assert files == ["history-shard-0-of-2@%s.jsonl" % lease.HOST.replace("/", "_"),
                     "history-shard-1-of-2@%s.jsonl" % lease.HOST.replace("/", "_"), "history.jsonl"]
    for i in (0, 1):
        with open(os.path.join(state, files[i])) as f:
            lines = [json.loads(x) for x in f]
        assert lines and all(e["shard"] == f"{i}/2" for e in lines)
        assert sorted(e["run"] for e in lines) == api.shard_plan([logdir], (i, 2))[logdir]
    merged = api.history(logdir)
    runs = sorted(r.name for r in api.scan(logdir).runs)
    assert sorted(e["run"] for e in merged if e.get("op_id") != "old" and e["kind"] == "reduce") == runs
    assert merged[0]["op_id"] == "old" and all(e["kind"] != "purge" for e in merged)  # no time: not an entry
    times = [e["time"] for e in merged]
    assert times == sorted(times)
    out = subprocess.run(CLI + ["history", logdir, "--csv"], env=env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.strip().splitlines()
    assert "shard" in rows[0].split(",") and len(rows) == 1 + len(merged)  # ee6e41b appended columns after it
    assert sum(",0/2" in r for r in rows) + sum(",1/2" in r for r in rows) == 6
    # a planted symlink under a worker's history name is not followed
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"time": 2.0, "kind": "reduce", "run": "planted"}) + "\n")
    os.symlink(secret, os.path.join(state, "history-shard-5-of-9@evil.jsonl"))
    assert all(e.get("run") != "planted" for e in api.history(logdir))


def test_the_ledger_rereads_a_file_another_process_replaced_and_checks_it_again(tmp_path):
    from tb_footprint_plugin.engine.ledger import Ledger

    path = str(tmp_path / ".tb-footprint" / "ledger-shard-0-of-1.json")
    a = Ledger(path, "archive", str(tmp_path), shard="0/1")
    b = Ledger(path, "archive", str(tmp_path), shard="0/1")
    a.start(["r1", "r2"])
    b.mark("r1", "done", op_id="x")  # another writer of the same ledger
    a.mark("r2", "reducing")
    assert a.read()["runs"]["r1"]["state"] == "done"  # a's write kept b's: it read b's file first
    data = a.read()  # the snapshot and the transitions appended after it, as one ledger
    data["runs"]["r2"] = {"state": "done", "pid": "evil"}
    with open(path + ".new", "w") as f:
        json.dump(data, f)
    os.replace(path + ".new", path)  # replaced behind a's back
    assert "r2" not in a.read()["runs"] and [p["code"] for p in a.problems] == ["bad_ledger_entry"]


@pytest.mark.parametrize("failpoint, settled", [("reduce.swap", "completed"), ("reduce.backup", "rolled_back")])
def test_a_run_recovery_settles_for_a_dead_worker_is_recorded_by_the_worker_that_settled_it(
        tmp_path, failpoint, settled):
    """Worker 0/2 dies inside its first run; worker 1/2 starts later, and its recovery settles that
    run (rolled forward after a passed verification, or rolled back before it). The merged status
    says so at once instead of showing the run as still being reduced by a worker that is gone."""
    logdir = make_logdir(tmp_path / "logs", 4)
    mine = api.shard_plan([logdir], (0, 2))[logdir]
    dead = _worker(logdir, "0/2", TB_FOOTPRINT_FAILPOINTS=f"{failpoint}=kill")
    dead.communicate(timeout=300)
    assert dead.returncode == -signal.SIGKILL
    (hit,) = api.status(logdir)["batch"]["stalled"]
    assert hit in mine
    other = _worker(logdir, "1/2")
    out, err = other.communicate(timeout=300)
    assert other.returncode == 0, err
    rep = json.loads(out)
    settles = [(r["action"], r["run"]) for r in rep["recovered"] if r.get("code") != "compaction_finished"]
    assert settles == [(settled, hit)] and rep["ledger_problems"] == []
    # past the swap, the compaction its transaction noted before the swap is finished too (R8 F2);
    # a run rolled back has none
    compacted = [(r["action"], r["run"]) for r in rep["recovered"] if r.get("code") == "compaction_finished"]
    assert compacted == ([("completed", hit)] if settled == "completed" else []), rep["recovered"]
    b = api.status(logdir)["batch"]
    e = b["runs"][hit]
    assert b["stalled"] == [] and e["shard"] == "1/2" and e["code"] == settled
    ops = {m["op_id"]: m for m in api.operations(logdir)}
    if settled == "completed":
        assert e["state"] == "done" and e["verified"] is True and ops[e["op_id"]]["run"] == hit
        assert (e["original_size_bytes"], e["after_size_bytes"]) == \
            (ops[e["op_id"]]["bytes_before"], ops[e["op_id"]]["bytes_after"])
    else:
        assert e["state"] == "pending"
    # the rerun of 0/2 finishes the batch: every run done once, whoever did it
    again = _worker(logdir, "0/2")
    again.communicate(timeout=300)
    assert again.returncode == 0
    b = api.status(logdir)["batch"]
    assert b["counts"] == {"done": 4} and b["stalled"] == [], b["counts"]
    assert sorted(e["run"] for e in api.history(logdir) if e["kind"] == "reduce" and e["outcome"] == "verified") \
        == sorted(r.name for r in api.scan(logdir).runs)


def test_a_holders_pid_reused_by_another_process_does_not_keep_its_run(tmp_path):
    """Pids are reused (32,768 by default): a lease, a bucket lock or a ledger entry names its
    process by pid *and* start time, so a dead holder whose pid now belongs to another process
    is gone — its run is taken over, its in-flight entry shows as stalled."""
    from tb_footprint_plugin.engine import bucket_lease
    from tb_footprint_plugin.engine.ledger import merged_view

    lk = RunLock(str(tmp_path / "locks"), "r")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = lease.process_start(other.pid)
        assert isinstance(start, int) and lease.me()["pid_start"] == lease.process_start(os.getpid())
        _write_lease(lk, pid=other.pid, pid_start=start, expires=time.time() + 3600)
        with pytest.raises(RunLocked):
            lk.acquire()
        _write_lease(lk, pid=other.pid, pid_start=start - 1, expires=time.time() + 3600)  # its pid, reused
        with lk:
            assert lease.read_lease(lk.lease_path)["pid"] == os.getpid()
        lock = {"host": lease.HOST, "pid": other.pid, "expires": time.time() + 3600, "op": "x"}
        assert not bucket_lease.holder_gone(dict(lock, pid_start=start), lambda op: None)
        assert bucket_lease.holder_gone(dict(lock, pid_start=start - 1), lambda op: None)
        entry = {"state": "reducing", "host": lease.HOST, "pid": other.pid}
        assert merged_view([], [("r", dict(entry, pid_start=start), "L")], [])["stalled"] == []
        assert merged_view([], [("r", dict(entry, pid_start=start - 1), "L")], [])["stalled"] == ["r"]
    finally:
        other.kill()
        other.wait()


def test_workers_starting_at_once_on_a_new_logdir_share_one_identity(tmp_path):
    """The state folder's identity binds journals and manifests to their logdir. Workers of a job
    array starting together on a logdir nobody reduced before each wrote their own, the last one
    won, and the others' manifests then named "another logdir": their backups were out of reach
    of restore. It is created only where none exists, so every worker takes the same."""
    import threading

    from tb_footprint_plugin.engine import trust

    logdir = tmp_path / "logs"
    logdir.mkdir()
    state = str(logdir / ".tb-footprint")
    gate = threading.Barrier(12)
    ids = []

    def one():
        gate.wait()
        ids.append(trust.bind(str(logdir), state)["id"])

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 12 and set(ids) == {trust.read_identity(state)["id"]}
    assert [n for n in os.listdir(state) if n.startswith(".tmp-")] == []

    # end to end, as a Slurm array starts: three shards at once, then everything restores
    logdir = make_logdir(tmp_path / "array", 12)
    before = user_files(logdir)
    _all_exit_zero([_worker(logdir, f"{i}/3") for i in range(3)])
    ident = trust.read_identity(state_dir(logdir))["id"]
    ops = api.operations(logdir)
    assert len(ops) == 12 and all(api.restore_target(logdir, run=m["run"]) for m in ops)
    opsdir = os.path.join(state_dir(logdir), "ops")
    for name in os.listdir(opsdir):
        with open(os.path.join(opsdir, name)) as f:
            assert json.load(f)["logdir_id"] == ident, name
    outs = api.restore(logdir)
    assert len(outs) == 12 and all(o.status == "restored" for o in outs)
    assert user_files(logdir) == before


def test_identical_shards_running_at_once_leave_every_run_done_in_their_shared_ledger(tmp_path):
    """A requeued Slurm task or a replacement pod overlapping the live one: three workers of the
    same shard at once share one ledger file. Each run is reduced once, and the ledger says done
    with the operation that did it, not the losers' "changed by another" or "reducing"."""
    logdir = make_logdir(tmp_path / "logs", 12)
    _all_exit_zero([_worker(logdir, "0/1") for _ in range(3)])
    ops = {m["op_id"]: m for m in api.operations(logdir)}
    assert sorted(m["run"] for m in ops.values()) == sorted(r.name for r in api.scan(logdir).runs)
    b = api.status(logdir)["batch"]
    assert b["counts"] == {"done": 12}, {r: (e["state"], e.get("code")) for r, e in b["runs"].items()}
    assert all(ops[e["op_id"]]["run"] == r for r, e in b["runs"].items())
    assert b["saved_bytes"] == sum(m["bytes_before"] - m["bytes_after"] for m in ops.values())


def test_status_table_keeps_its_columns_with_odd_run_names(tmp_path):
    """A tab or newline in a run name is shown escaped in `status --runs`, one line per run; a
    pending run (no worker yet) shows no pid."""
    logdir = make_logdir(tmp_path / "logs", 2)
    os.rename(os.path.join(logdir, "exp1", "run001"), os.path.join(logdir, "exp1", "odd\tname"))
    w = _worker(logdir, "0/1", TB_FOOTPRINT_FAILPOINTS="reduce.backup=kill")
    w.communicate(timeout=300)
    assert w.returncode == -signal.SIGKILL
    cli = subprocess.run(CLI + ["status", logdir, "--runs"], env=env(), capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    rows = [ln for ln in cli.stdout.splitlines() if ln.strip().startswith(("exp0/", "exp1/"))]
    assert len(rows) == 2 and any("exp1/odd\\tname" in r for r in rows), cli.stdout
    assert "\t" not in cli.stdout
    pending = [r for r in rows if " pending " in r]
    assert pending and all("pid" not in r and "—" in r for r in pending), rows


def test_a_run_held_by_a_live_worker_elsewhere_is_planned_as_locked_not_interrupted(tmp_path):
    """A run whose journal belongs to a worker on another host that still holds its lease is
    being reduced, not interrupted: the plan says locked and names the holder (no "run recover"
    advice that could not help); once the lease is stale it is an interrupted operation."""
    logdir = make_logdir(tmp_path / "logs", 2)
    w = _worker(logdir, "0/1", TB_FOOTPRINT_FAILPOINTS="reduce.backup=kill")
    w.communicate(timeout=300)
    assert w.returncode == -signal.SIGKILL
    assert len(api.pending_operations(logdir)) == 1
    (run,) = api.status(logdir)["batch"]["stalled"]  # the run the killed worker was reducing
    lk = RunLock(os.path.join(state_dir(logdir), "locks"), run)
    _write_lease(lk, host="node-b", pid=4242, expires=time.time() + 600)
    rp = next(r for r in api.plan(logdir).runs if r.run == run)
    assert rp.code == "locked" and "node-b pid 4242" in rp.skipped, rp.skipped
    # stale: the lease expired and the journal shows no progress within a lease
    _write_lease(lk, host="node-b", pid=4242, expires=time.time() - 1)
    jdir = os.path.join(state_dir(logdir), "journal")
    for n in os.listdir(jdir):
        os.utime(os.path.join(jdir, n), (OLD, OLD))
    rp = next(r for r in api.plan(logdir).runs if r.run == run)
    assert rp.code == "unfinished_operation" and "recover" in rp.skipped, rp.skipped


def test_an_unsharded_reduction_after_a_sharded_one_in_one_process_names_no_shard(tmp_path):
    """The API in one long-lived process (a notebook, the TensorBoard plugin): the shard label a
    sharded reduction set for its leases, locks and bucket manifests is not carried into the next,
    unsharded one."""
    logdir = make_logdir(tmp_path / "logs", 2)
    api.reduce_logdir(logdir, dry_run=False, shard=(0, 2), verify_backends=("python",))
    assert lease.shard_label() is None  # given back when the sharded reduction ends (test_shard_label_reset)
    api.reduce_logdir(logdir, dry_run=False, verify_backends=("python",))
    assert lease.shard_label() is None


def test_the_partition_holds_while_another_worker_is_between_its_swap_and_its_change_log_line(tmp_path):
    """A worker that scans while another has swapped a run's files but not yet written its change
    log line saw that run at its reduced size, computed another partition, and the run could fall
    between the shards (a 4-worker batch once verified 59 of 60 runs). The in-flight operation's
    journal says the size the run had."""
    logdir = make_logdir(tmp_path / "logs", 6)
    sizes = api.shard_sizes([logdir])
    w = _worker(logdir, "0/1", TB_FOOTPRINT_FAILPOINTS="reduce.swap=kill")
    w.communicate(timeout=300)
    assert w.returncode == -signal.SIGKILL and len(api.pending_operations(logdir)) == 1
    assert {r.name: r.total_bytes for r in api.scan(logdir).runs} != {k.split("\0")[1]: v for k, v in sizes.items()}
    assert api.shard_sizes([logdir]) == sizes
    for i in range(3):  # every shard as it was before the other worker started
        assert api.shard_plan([logdir], (i, 3)) == api.shard_plan([logdir], (i, 3), sizes=sizes)
