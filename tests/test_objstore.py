"""Logdirs in object storage, against real servers on loopback: moto (S3), gcp-storage-emulator
(GCS) and Azurite (Azure Blob). Every test here runs on each store."""
import hashlib
import os

import pytest

from tb_footprint_plugin.storage.paths import DEMO_MARKER
from tb_footprint_plugin.storage.remote import RemoteFS, is_remote, split_scheme
from tb_footprint_plugin.scan.tfrecord import RecordReader, RecordWriter


def test_servers_answer_and_list_recursively(bucket):
    """The harness gives a working store; one recursive listing returns nested keys with
    sizes, mtimes and a version token (ETag or generation)."""
    bucket.fs.pipe_file(bucket.key("logs/a/b/c/deep.bin"), b"x" * 10)
    bucket.fs.pipe_file(bucket.key("logs/top.bin"), b"y" * 3)
    bucket.fs.pipe_file(bucket.key("logsX/not-below.bin"), b"z")
    rfs = RemoteFS(bucket.url("logs"))
    tree = rfs.list_tree()
    assert {k: o.size for k, o in tree.items()} == {"a/b/c/deep.bin": 10, "top.bin": 3}
    assert all(o.version_token and o.mtime > 0 for o in tree.values())
    assert rfs.stats.list == 1 and rfs.stats.read == 0


def test_ranged_reader_streams_records(bucket, tmp_path):
    """The record reader takes a RangedReader: a file read in ranged GETs of the chunk size,
    never whole, gives the same records as the local file."""
    local = tmp_path / "events.out.tfevents.1.host"
    payloads = [os.urandom(3000 + i) for i in range(200)]
    with open(local, "wb") as f:
        w = RecordWriter(f)
        for p in payloads:
            w.write(p)
    data = local.read_bytes()
    bucket.fs.pipe_file(bucket.key("l/run/" + local.name), data)
    rfs = RemoteFS(bucket.url("l"))
    size = rfs.list_tree()["run/" + local.name].size
    assert size == len(data)
    reader = rfs.open_ranged("run/" + local.name, size, chunk=64 << 10)
    got = [r.data for r in RecordReader(reader, verify=True, chunk_size=64 << 10)]
    assert got == payloads
    assert rfs.stats.bytes_down == len(data)
    assert rfs.stats.read >= len(data) // (64 << 10)  # ranged, not one whole-object GET


def test_scheme_helpers():
    assert is_remote("s3://b/x") and is_remote("gs://b") and is_remote("az://c/p")
    assert not is_remote("/tmp/x") and not is_remote("file:///tmp/x") and not is_remote("rel/dir")
    assert split_scheme("S3://b/k") == ("s3", "b/k")
    with pytest.raises(ValueError):
        RemoteFS("s3://b/logs").path("../escape")


# --- scan and plan on bucket logdirs ------------------------------------------------------
from tb_footprint_plugin import api  # noqa: E402
from tb_footprint_plugin.codes import Failure, Skip  # noqa: E402
from tb_footprint_plugin.demo import generate_demo  # noqa: E402
from tb_footprint_plugin.scan import scan  # noqa: E402


def _shape(fp):
    """Everything a scan says about a logdir, minus where it was and when."""
    d = fp.to_dict()
    for k in ("logdir", "scanned_at", "requests", "files_read", "files_cached"):
        d.pop(k)
    for r in d["runs"]:
        r.pop("newest_mtime")
        for f in r["files"]:
            f.pop("mtime")
        for s in r["sessions"]:
            s.pop("mtime")
        # objects' mtimes are upload times, which order sessions differently than on disk
        r["sessions"].sort(key=lambda s: s["path"])
    return d


@pytest.fixture(scope="module")
def demo_logdir(tmp_path_factory):
    """A small multi-framework demo logdir (TF, Keras, PyTorch, JAX; profiles, traces), plus a
    stray file outside every run, as on disk."""
    root = tmp_path_factory.mktemp("demo") / "logs"
    generate_demo(str(root), scale=0.05)
    (root / "README.txt").write_bytes(b"notes outside every run\n")
    (root / "tf_summary_mix" / "assets").mkdir()
    (root / "tf_summary_mix" / "assets" / "vocab.txt").write_bytes(b"a\nb\n" * 100)
    return root


def test_scan_bucket_equals_scan_on_disk(bucket, demo_logdir):
    """Scan totals on a bucket are exact: per run, per category, per file, the same as the scan
    of the same files on disk; the listing is one request; event files are read by ranged
    GETs and nothing else is downloaded."""
    url = bucket.upload(demo_logdir, "team/logs")
    local = scan(str(demo_logdir), use_cache=False)
    remote = scan(url)
    assert remote.logdir == url
    assert _shape(remote) == _shape(local)
    # every file but the demo's own bookkeeping at the top (no run's, on disk as in the bucket)
    assert remote.total_bytes == sum(os.path.getsize(os.path.join(r, n)) for r, _, fs in os.walk(demo_logdir)
                                     for n in fs if not (n == DEMO_MARKER and r == str(demo_logdir)))
    req = remote.requests
    assert req["list"] == 1
    event_bytes = sum(f.size for r in remote.runs for f in r.files if f.kind == "event")
    assert req["bytes_down"] == event_bytes  # only event files are read, each once
    assert req["put"] == 1  # the scan cache, in the bucket
    assert remote.files_read == sum(1 for r in remote.runs for f in r.files if f.kind == "event")


def test_rescan_of_unchanged_bucket_is_one_listing(bucket, demo_logdir):
    """The cache in the bucket keys on size + ETag/generation: a re-scan of an unchanged logdir
    costs one listing and one read of the cache; a changed object is read again."""
    url = bucket.upload(demo_logdir, "logs")
    first = scan(url)
    again = scan(url)
    assert again.files_read == 0 and again.files_cached == first.files_read
    assert again.requests["list"] == 1
    assert again.requests["read"] == 1  # the cache object itself
    assert again.requests["put"] == 0  # nothing changed: nothing written
    assert _shape(again) == _shape(first)
    ev = next(f.path for r in first.runs for f in r.files if f.kind == "event")
    data = bucket.fs.cat_file(bucket.key("logs/" + ev))
    bucket.fs.pipe_file(bucket.key("logs/" + ev), data)  # same bytes, new ETag/generation on most stores
    bucket.fs.pipe_file(bucket.key("logs/tf1_legacy/events.out.tfevents.9.extra"), data[:0])
    third = scan(url)
    assert third.files_read >= 1 and third.total_bytes == first.total_bytes


def test_listing_pages_past_1000_keys(s3_bucket):
    """Every page of a listing is read (S3 returns at most 1,000 keys a page; code that reads
    only the first page is a known bug class): 1,050 objects under one run all count."""
    bucket = s3_bucket
    blobs = {bucket.key(f"big/run/plugins/x/f{i:05d}.bin"): b"z" * 7 for i in range(1050)}
    blobs[bucket.key("big/run/events.out.tfevents.1.h")] = b""
    bucket.fs.pipe(blobs)
    fp = scan(bucket.url("big"), use_cache=False)
    assert fp.total_bytes == 1050 * 7
    assert len(fp.run("run").files) == 1051
    assert fp.requests["list"] == 2


def test_scan_missing_bucket_is_a_clear_error(objstore_pool):
    objstore_pool.get("s3")
    with pytest.raises(NotADirectoryError, match="no-such-bucket"):
        scan("s3://no-such-bucket-tbfp/logs")


def _plan_shape(p):
    d = p.to_dict()
    # notes: a bucket's say when bytes are freed; disk_in_use_bytes: a disk's blocks (None on a bucket)
    for k in ("logdir", "created_at", "cost", "notes", "disk_in_use_bytes"):
        d.pop(k)
    for r in d["runs"]:
        r.pop("newest_mtime")
        r.pop("planned_at")  # when each side was scanned
        r["actions"].sort(key=lambda a: (a["kind"], a["path"]))
    return d


#: Remove every profile file and nothing else: a drop-only reduction (no file is rewritten).
DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def test_plan_bucket_equals_plan_on_disk(bucket, demo_logdir):
    """A plan of a bucket logdir lists the same actions and bytes as the plan of the same files
    on disk, under each policy, and carries its cost: a drop-only reduction downloads nothing,
    backs up every removed file by one server-side copy and deletes in batches. (One upload per
    store for the three policies: the uploads were most of this test's time.)"""
    url = bucket.upload(demo_logdir, "logs")
    for policy in ("archive", "lossless", DROP_PROFILES):
        local = api.plan(str(demo_logdir), policy, quiet_period=0)
        remote = api.plan(url, policy, quiet_period=0)
        assert _plan_shape(remote) == _plan_shape(local), policy
        assert remote.removable_bytes > 0
        cost = remote.cost
        assert cost["scan"]["list"] == 1 and cost["scan"]["put"] == 0  # a dry run writes nothing
        acted = [rp for rp in remote.runs if not rp.skipped]
        files = [a for rp in acted for a in rp.actions if a.kind != "remove_dir"]
        assert cost["reduce"]["copy"] >= len(files)
        drop_only = [rp for rp in acted if all(a.kind in ("delete", "remove_dir") for a in rp.actions)]
        if policy is DROP_PROFILES:
            assert drop_only == acted and cost["reduce"]["bytes_down"] == 0
            assert cost["reduce"]["copy"] == len(files)
        assert local.cost is None


def test_plan_leaves_recently_written_bucket_runs_alone(s3_bucket, demo_logdir):
    """Objects just written count as a run being written: with the default quiet period every
    run of a fresh upload is skipped, as on disk."""
    url = s3_bucket.upload(demo_logdir, "logs")
    p = api.plan(url, DROP_PROFILES)
    assert p.runs and all(rp.skipped for rp in p.runs)
    assert any(rp.code == Skip.ACTIVE for rp in p.runs)


def test_cli_plan_reduce_restore_on_a_bucket(s3_bucket, demo_logdir, tmp_path):
    """`tb-footprint plan s3://…` shows requests per verb and bytes downloaded (0 B for a
    drop-only reduction); `reduce` and `restore` on the bucket URL work from the command line and
    restore puts back every byte."""
    import json
    import subprocess
    import sys

    url = s3_bucket.upload(demo_logdir, "logs")
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args],
                              capture_output=True, text=True, env=env, timeout=300)

    out = cli("plan", url, "--policy", str(pol), "--quiet-period", "0")
    assert out.returncode == 0, out.stderr
    assert "requests to the store:" in out.stdout
    assert "scan (measured)" in out.stdout and "reduce (estimate)" in out.stdout
    assert "0 B downloaded" in out.stdout.split("reduce (estimate)")[1].splitlines()[0]
    before = _logdir_hashes(s3_bucket, "logs")
    red = cli("reduce", url, "--policy", str(pol), "--quiet-period", "0", "--yes")
    assert red.returncode == 0, red.stdout + red.stderr
    assert len(_logdir_hashes(s3_bucket, "logs")) < len(before)
    ver = cli("verify", url)
    assert ver.returncode == 0 and "backups intact" in ver.stdout, ver.stdout + ver.stderr
    st = cli("status", url, "--json")
    assert st.returncode == 0, st.stderr
    st = json.loads(st.stdout)
    assert st["unfinished_operations"] == [] and st["vault_bytes"] > 0 and st["operations"]
    res = cli("restore", url, "--all", "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    assert _logdir_hashes(s3_bucket, "logs") == before
    hist = cli("history", url, "--json")
    assert hist.returncode == 0, hist.stderr
    kinds = [e["kind"] for e in json.loads(hist.stdout)]
    assert sorted(set(kinds)) == ["reduce", "restore"] and kinds.count("reduce") == kinds.count("restore")


# --- the store primitives a bucket transaction stands on -----------------------------------
from tb_footprint_plugin.storage.remote import (  # noqa: E402
    ALREADY_EXISTS, PRECONDITION_FAILED, RemoteError, content_checksums, same_content)


def test_conditional_put_copy_and_batched_delete(bucket):
    """Create-only puts refuse an existing key; a put conditional on a version refuses a changed
    object; a server-side copy returns store-computed checksums equal to the source's; a batch
    delete removes every key and reports none as failed."""
    rfs = RemoteFS(bucket.url("l"))
    ops = rfs.ops
    a = rfs.path("a.bin")
    v1 = ops.put(a, b"hello", if_absent=True)
    with pytest.raises(RemoteError) as e:
        ops.put(a, b"other", if_absent=True)
    assert e.value.code == ALREADY_EXISTS
    with pytest.raises(RemoteError) as e:
        ops.put(a, b"x", if_version="12345" if bucket.scheme == "gs" else "deadbeef")
    assert e.value.code == PRECONDITION_FAILED
    with pytest.raises(RemoteError) as e:
        ops.copy(a, rfs.path("c.bin"), if_source_version={"gs": "12345", "az": "0x1"}.get(bucket.scheme, "0" * 32))
    assert e.value.code == PRECONDITION_FAILED
    assert "c.bin" not in rfs.list_tree()
    v2 = ops.put(a, b"hello!", if_version=v1)
    assert v2 and bucket.fs.cat_file(a) == b"hello!"
    res = ops.copy(a, rfs.path("vault/a.bin"), if_source_version=v2)
    src = content_checksums(rfs.list_tree()["a.bin"])
    assert same_content(res.checksums, src) is True
    assert bucket.fs.cat_file(rfs.path("vault/a.bin")) == b"hello!"
    with pytest.raises(RemoteError) as e:  # a restore never overwrites what exists again
        ops.copy(a, rfs.path("vault/a.bin"), if_absent=True)
    assert e.value.code == ALREADY_EXISTS
    keys = [rfs.path(f"d/{i}") for i in range(5)]
    for k in keys:
        ops.put(k, b"z")
    before = rfs.stats.delete
    assert ops.delete(keys) == {}
    assert not any(k.startswith("d/") for k in rfs.list_tree())
    assert rfs.stats.delete - before == (1 if bucket.scheme in ("s3", "az") else 5)


# --- reduce / verify / restore in the bucket ------------------------------------------------
def _logdir_hashes(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(".tb-footprint/")}


def test_reduce_and_restore_byte_identical(bucket, demo_logdir):
    """A drop-only reduction of a bucket logdir: backups by server-side copy (checksums recorded),
    batched deletes, verified by a fresh listing; what is left is byte-identical; restore brings
    back every original byte; nothing left the store for the removed files."""
    url = bucket.upload(demo_logdir, "logs")
    before = _logdir_hashes(bucket, "logs")
    planned = api.plan(url, DROP_PROFILES, quiet_period=0)
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    acted = [o for o in rep.outcomes if o.status != "skipped"]
    assert acted and all(o.status == "verified" for o in acted), [(o.run, o.status, o.reason) for o in acted]
    removed = set(rep.removed_files)
    assert removed == {a.path for rp in planned.runs if not rp.skipped for a in rp.actions if a.kind == "delete"}
    after = _logdir_hashes(bucket, "logs")
    assert after == {k: v for k, v in before.items() if k not in removed}
    assert rep.saved_bytes == planned.removable_bytes
    assert scan(url).total_bytes == sum(os.path.getsize(os.path.join(r, n)) for r, _, fs in os.walk(demo_logdir)
                                        for n in fs if not (n == DEMO_MARKER and r == str(demo_logdir))) \
        - rep.saved_bytes
    # every removed byte was copied server-side: one copy request per file, nothing downloaded
    # beyond the scan's event files and the small state objects
    event_bytes = sum(f.size for r in scan(url).runs for f in r.files if f.kind == "event")
    assert rep.requests["copy"] == len(removed)
    assert rep.requests["bytes_down"] <= event_bytes + 64 * 1024
    for o in acted:
        assert o.verification["method"] == "listing" and o.verification["removed"] == len(o.removed_files)
    # manifests record the store's checksums of each backup
    from tb_footprint_plugin.engine import bucket as bk
    from tb_footprint_plugin.storage.store_object import ObjectStore
    ostore = ObjectStore(url)
    rfs = ostore.rfs
    mans = bk.manifests(ostore, bk.BucketVault.for_logdir(ostore))
    assert {f["path"] for m in mans for f in m["files"]} == removed
    assert all(f["backup_checksums"] and f["checksums"] for m in mans for f in m["files"])
    # nothing pending, no lock left
    assert not [k for k in rfs.list_tree() if k.startswith((".tb-footprint/journal/", ".tb-footprint/locks/"))]
    # verify, status, operations: read from the bucket's own manifests, nothing downloaded
    checked = api.verify(url)
    assert sorted(r["op_id"] for r in checked) == sorted(o.op_id for o in acted)
    assert all(r["ok"] and r["backups_ok"] for r in checked), checked
    st = api.status(url)
    assert st["unfinished_operations"] == [] and len(st["operations"]) == len(acted)
    assert st["vault_bytes"] == rep.saved_bytes
    ops = api.operations(url)
    assert {o["op_id"] for o in ops} == {o.op_id for o in acted}
    assert all(s["restorable"] for s in api.summarize_operations(ops))
    # a damaged backup is caught (and the intact ones are not blamed)
    victim = mans[0]["files"][0]
    good = bucket.fs.cat_file(victim["backup"])
    bucket.fs.pipe_file(victim["backup"], b"not the original" + good[16:])
    bad = {r["op_id"]: r for r in api.verify(url)}
    assert bad[mans[0]["op_id"]]["damaged_backups"] == [victim["path"]] and not bad[mans[0]["op_id"]]["ok"]
    assert all(r["ok"] for k, r in bad.items() if k != mans[0]["op_id"])
    bucket.fs.pipe_file(victim["backup"], good)
    assert all(r["ok"] for r in api.verify(url))
    outs = api.restore(url)
    assert outs and all(o.status == "restored" for o in outs), [(o.run, o.reason) for o in outs]
    assert _logdir_hashes(bucket, "logs") == before
    assert api.restore(url) == []  # restored operations are not restored twice
    assert api.verify(url) == []  # nothing kept to check any more
    hist = api.history(url)
    assert sorted(e["kind"] for e in hist) == ["reduce"] * len(acted) + ["restore"] * len(acted)
    assert [e["time"] for e in hist] == sorted(e["time"] for e in hist)
    assert all(e["policy"] == "drop-profiles" and e["user"] and e["host"] for e in hist), hist
    assert all(o["restored_by"] for o in api.operations(url))


# --- crashes, races and store faults ---------------------------------------------------------
CRASH_POINTS = ["reduce.journal", "reduce.backup_copy", "reduce.backup",
                "reduce.verify", "reduce.swap_record", "reduce.swap"]


def _reduce_in_subprocess(url, policy_file, failpoint=None):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    if failpoint:
        env["TB_FOOTPRINT_FAILPOINTS"] = f"{failpoint}=kill"
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", url, "--policy",
                           str(policy_file), "--quiet-period", "0", "--yes"], capture_output=True, text=True,
                          env=env, timeout=300)


# a real SIGKILL and a settle from another process: on GCS and Azure one step on each side of the
# delete record, on S3 three steps beside them (CI time: a case is a CLI start, a settle and a
# second reduce of the demo logdir, ~7.5 s on moto). A crash at every one of CRASH_POINTS (and at
# every other declared step) is settled on every store in tests/contract/test_crash_matrix.py
# (in-process: nothing after the instant runs); here the kill at each side of the commit record
# is what differs (rolled back before it, completed after it), and each side is killed on every store
CRASH_CASES = [("s3", f) for f in ("reduce.journal", "reduce.verify", "reduce.swap")] + [
    (s, f) for s in ("gs", "az") for f in ("reduce.backup_copy", "reduce.swap_record")]
assert set(CRASH_POINTS) - {f for _, f in CRASH_CASES} == {"reduce.backup"}  # in the crash matrix


@pytest.mark.parametrize("scheme,failpoint", CRASH_CASES)
def test_crash_at_each_step_then_recovery_from_another_process(objstore_pool, demo_logdir, tmp_path,
                                                               scheme, failpoint):
    """A process killed (SIGKILL) at each step of a bucket transaction leaves its lock and journal
    in the bucket; recovery from another process settles it: every run is as it was or reduced
    with a verified backup, no lock or journal is left, and restore gives back every byte."""
    import json
    import signal

    from objstore_servers import Bucket

    bucket = Bucket(objstore_pool.get(scheme))
    url = bucket.upload(demo_logdir, "logs")
    before = _logdir_hashes(bucket, "logs")
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    crashed = _reduce_in_subprocess(url, pol, failpoint)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    state = [k for k in RemoteFS(url).list_tree() if k.startswith(".tb-footprint/")]
    assert any(k.startswith(".tb-footprint/journal/") for k in state)
    assert any(k.startswith(".tb-footprint/locks/") for k in state)
    settled = api.recover_logdir(url)  # this process: the lock's owner is gone
    assert len(settled) == 1 and settled[0].action in ("rolled_back", "completed"), settled
    expected = "completed" if failpoint in ("reduce.swap_record", "reduce.swap") else "rolled_back"
    assert settled[0].action == expected
    left = [k for k in RemoteFS(url).list_tree() if k.startswith((".tb-footprint/journal/", ".tb-footprint/locks/"))]
    assert left == []
    now = _logdir_hashes(bucket, "logs")
    assert all(now[k] == v for k, v in before.items() if k in now)  # nothing changed, only removed
    gone = set(before) - set(now)
    if expected == "rolled_back":
        assert not gone
    else:
        assert gone
    # a second reduction finishes the job (in this process: the crash above is what needs a
    # process of its own); a restore brings back everything
    again = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    assert again.outcomes and all(o.status in ("verified", "skipped") for o in again.outcomes), \
        [(o.run, o.status, o.reason) for o in again.outcomes]
    assert any(o.status == "verified" for o in again.outcomes) or expected == "completed"
    outs = api.restore(url)
    assert outs and all(o.status == "restored" for o in outs)
    assert _logdir_hashes(bucket, "logs") == before


def test_object_changed_after_backup_is_never_deleted(bucket, demo_logdir):
    """An object rewritten between its backup and the delete step: the run is rolled back (its
    new bytes kept, the backups of the originals in place dropped) with the code
    ``changed_since_backup``, other runs proceed. The rewritten object's backup is its original's
    only copy: kept (R7 F2's rule, rollback_entry), with the manifest naming it and the run's other
    backups (R8 F3: named, so status shows it and purge frees it)."""
    from tb_footprint_plugin.engine import faults

    url = bucket.upload(demo_logdir, "logs")
    before = _logdir_hashes(bucket, "logs")
    planned = api.plan(url, DROP_PROFILES, quiet_period=0)
    victim_run = next(rp for rp in planned.runs if not rp.skipped)
    victim = next(a.path for a in victim_run.actions if a.kind == "delete")
    hit = []

    def rewrite():
        if not hit:
            hit.append(1)
            bucket.fs.pipe_file(bucket.key("logs/" + victim), b"new bytes written by the trainer")

    faults.arm("reduce.verify", rewrite)
    try:
        rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    finally:
        faults.disarm_all()
    o = next(o for o in rep.outcomes if o.run == victim_run.run)
    assert o.status == "rolled_back" and o.code == Failure.CHANGED_SINCE_BACKUP, (o.status, o.code, o.reason)
    now = _logdir_hashes(bucket, "logs")
    import hashlib
    assert now[victim] == hashlib.sha256(b"new bytes written by the trainer").hexdigest()
    for a in victim_run.actions:
        if a.kind == "delete" and a.path != victim:
            assert now[a.path] == before[a.path]
    assert any(x.status == "verified" for x in rep.outcomes)  # the other runs were reduced
    leftovers = [k for k in RemoteFS(url).list_tree() if f"/{o.op_id}/" in k or k.endswith(f"{o.op_id}.json")]
    assert f".tb-footprint/blobs/{o.op_id}/{victim}" in leftovers  # the rewritten one's original kept
    assert f".tb-footprint/manifests/{o.op_id}.json" in leftovers  # and named
    assert not [k for k in leftovers if "/tmp/" in k or "/journal/" in k]


def test_failure_codes_are_the_local_engines():
    """A failed bucket step is reported with the ``codes.py`` code the local engine uses for the
    same failure (its own code for a step of ours, no space, a store error, a key that is not
    plain), never a code spelled into the reason."""
    import errno

    from tb_footprint_plugin.engine.bucket import BucketTxnError, failure_code
    from tb_footprint_plugin.engine.bucket_state import lock_failure_code
    from tb_footprint_plugin.engine.context import TransactionError
    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.storage.remote import RemoteError
    from tb_footprint_plugin.storage.store import StoreFailure  # what the bucket engine's Store calls raise

    assert failure_code(BucketTxnError(Failure.CHANGED_SINCE_BACKUP, "x")) == Failure.CHANGED_SINCE_BACKUP
    assert failure_code(StoreFailure(StoreError.STORE_ERROR, "k", "500")) == Failure.STORE_ERROR
    assert failure_code(StoreFailure(StoreError.PRECONDITION_FAILED, "k", "412")) == Failure.STORE_ERROR
    assert failure_code(StoreFailure(StoreError.NO_SPACE, "k", "quota")) == Failure.NO_SPACE
    assert failure_code(OSError(errno.ENOSPC, "full")) == Failure.NO_SPACE  # local staging of a rewrite
    assert failure_code(ValueError("../escape")) == Failure.REFUSED
    assert failure_code(TransactionError("verification failed")) == Failure.ERROR
    assert failure_code(TransactionError("busy", Skip.ACTIVE)) == Skip.ACTIVE
    assert lock_failure_code(RemoteError("store_error", "500")) == Failure.LOCK_ERROR
    assert lock_failure_code(RemoteError("no_space", "quota")) == Failure.NO_SPACE


@pytest.mark.parametrize("policy", ["drop", "archive"])
def test_run_written_during_the_reduce_is_left_alone_by_the_plans_rule(s3_bucket, rewrite_logdir, policy):
    """An object written into a run between the plan and the destructive step, inside the quiet
    period: the batch (drop-only) and the rewrite transaction both leave the run as it was with
    ``Skip.ACTIVE``, the plan's own rule (a plan made now says the same), and nothing is changed."""
    import time

    from tb_footprint_plugin.engine import faults

    url = s3_bucket.upload(rewrite_logdir, "logs")
    before = _logdir_hashes(s3_bucket, "logs")
    run = "torch/resnet" if policy == "drop" else "exp/hist"
    pol = DROP_PROFILES if policy == "drop" else "archive"
    time.sleep(4)  # the uploaded objects are older than the quiet period
    fresh = s3_bucket.key(f"logs/{run}/notes-{policy}.txt")
    faults.arm("reduce.verify", lambda: s3_bucket.fs.pipe_file(fresh, b"written by the trainer"))
    try:
        rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=3, runs=[run])
    finally:
        faults.disarm_all()
    (o,) = rep.outcomes
    assert o.status == "skipped" and o.code == Skip.ACTIVE, (o.status, o.code, o.reason)
    now = _logdir_hashes(s3_bucket, "logs")
    assert {k: h for k, h in now.items() if not k.endswith(f"notes-{policy}.txt")} == before
    (rp,) = [rp for rp in api.plan(url, pol, quiet_period=3, runs=[run]).runs]
    assert rp.code == Skip.ACTIVE


@pytest.fixture
def s3_via_proxy(s3_bucket, monkeypatch):
    """The S3 test server behind a fault-injecting proxy; the code under test talks to the proxy."""
    from faulty_proxy import FaultyProxy

    proxy = FaultyProxy(upstream=s3_bucket.server.endpoint).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("S3_ENDPOINT", proxy.endpoint)
    try:
        yield s3_bucket, proxy
    finally:
        proxy.stop()


def test_the_fault_proxy_passes_an_objects_size_on_a_head(s3_via_proxy):
    """A HEAD has no body but names the object's size: the proxy must pass the server's on, or
    every stat through it reads 0 bytes (the benches that count requests through it saw every
    lone blob's read-back as empty)."""
    import fsspec

    bucket, proxy = s3_via_proxy
    bucket.fs.pipe_file(bucket.key("sized/object.bin"), b"x" * 12345)
    via = fsspec.filesystem("s3", skip_instance_cache=True, client_kwargs={"endpoint_url": proxy.endpoint})
    heads = proxy.counts.get("head", 0)
    assert via.info(bucket.key("sized/object.bin"))["size"] == 12345
    assert proxy.counts.get("head", 0) == heads + 1, proxy.counts  # it was the HEAD's answer


def _is_backup_copy(method, path):
    return method == "PUT" and "/.tb-footprint/blobs/" in path


def _is_batch_delete(method, path):
    return method == "POST" and "delete" in path.split("?", 1)[-1]


def _is_listing(method, path):
    return method == "GET" and "list-type=2" in path.split("?", 1)[-1]


def test_checking_listing_refused_after_the_delete_is_a_store_error(s3_via_proxy, demo_logdir, monkeypatch):
    """Past the commit point the reduction stands; when the store refuses the listing that checks
    it, the run is reported failed (unverified) with ``Failure.STORE_ERROR``, not a catch-all."""
    from faulty_proxy import S3_INTERNAL, Rule

    from tb_footprint_plugin.engine import faults

    bucket, proxy = s3_via_proxy
    url = bucket.upload(demo_logdir, "logs")
    planned = api.plan(url, DROP_PROFILES, quiet_period=0)
    run = next(rp.run for rp in planned.runs if not rp.skipped)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # the fault is permanent: fewer retries
    faults.arm("reduce.swap", lambda: proxy.rules.append(Rule(_is_listing, S3_INTERNAL, times=10 ** 6)))
    try:
        rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, runs=[run])
    finally:
        faults.disarm_all()
        proxy.rules.clear()
    (o,) = rep.outcomes
    assert o.status == "failed" and o.code == Failure.STORE_ERROR, (o.status, o.code, o.reason)
    assert o.removed_files  # the reduction stands: its backups are verified, `verify` checks it
    assert [m["op_id"] for m in api.status(url)["operations"]] == [o.op_id]


@pytest.mark.parametrize("case", ["slowdown", "dropped_copy", "500_after_delete"])
def test_transient_store_faults_are_retried(s3_via_proxy, demo_logdir, case):
    """503 SlowDown on copies, a connection dropped mid-copy, a 500 after the server already did a
    batch delete: retried with back-off, and the reduction ends verified and byte-correct."""
    from faulty_proxy import AFTER_500, DROP, S3_SLOWDOWN, Rule

    bucket, proxy = s3_via_proxy
    url = bucket.upload(demo_logdir, "logs")
    before = _logdir_hashes(bucket, "logs")
    rule = {"slowdown": Rule(_is_backup_copy, S3_SLOWDOWN, times=4),
            "dropped_copy": Rule(_is_backup_copy, DROP, times=2),
            "500_after_delete": Rule(_is_batch_delete, AFTER_500, times=1)}[case]
    proxy.rules.append(rule)
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    assert rule.hits == rule.times  # the fault really happened
    acted = [o for o in rep.outcomes if o.status != "skipped"]
    assert acted and all(o.status == "verified" for o in acted), [(o.run, o.status, o.reason) for o in acted]
    after = _logdir_hashes(bucket, "logs")
    assert after == {k: v for k, v in before.items() if k not in set(rep.removed_files)}
    assert all(o.status == "restored" for o in api.restore(url))
    assert _logdir_hashes(bucket, "logs") == before


@pytest.mark.parametrize("case", ["delete_500", "copy_dropped"])
def test_persistent_store_faults_roll_back_cleanly(s3_via_proxy, demo_logdir, case, monkeypatch):
    """A batch delete that keeps failing with 500, or copies that keep being dropped: each run is
    rolled back (or never started), every original is in place, no backup copy or lock is left."""
    from faulty_proxy import DROP, S3_INTERNAL, Rule

    bucket, proxy = s3_via_proxy
    url = bucket.upload(demo_logdir, "logs")
    before = _logdir_hashes(bucket, "logs")
    rule = Rule(_is_batch_delete if case == "delete_500" else _is_backup_copy,
                S3_INTERNAL if case == "delete_500" else DROP, times=10 ** 6)
    proxy.rules.append(rule)
    planned = api.plan(url, DROP_PROFILES, quiet_period=0)
    first = next(rp.run for rp in planned.runs if not rp.skipped)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # fewer retries: the fault is permanent anyway
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, runs=[first])
    assert rule.hits > 0
    (o,) = [o for o in rep.outcomes if o.status != "skipped"]
    assert o.status in ("rolled_back", "failed"), (o.status, o.reason)
    assert _logdir_hashes(bucket, "logs") == before  # every original in place, whatever happened
    if case == "delete_500":
        # the store refuses every batch delete, so the backups cannot be dropped yet: the run is
        # marked rolling back and the next start (with the store back) finishes the cleanup
        assert o.status == "failed" and o.code == "rollback_incomplete"
    else:
        assert o.status == "rolled_back" and o.code == Failure.STORE_ERROR, (o.code, o.reason)
    proxy.rules.clear()
    settled = api.recover_logdir(url)
    assert all(r.action == "rolled_back" for r in settled)
    assert _logdir_hashes(bucket, "logs") == before
    state = [k for k in RemoteFS(url).list_tree() if k.startswith(".tb-footprint/")]
    # nothing but the scan cache and the change log (a rolled-back reduce's line, as on a disk)
    assert [k for k in state if not k.endswith(("scan-cache.json", "/history.jsonl"))] == []


# --- versioned buckets, soft delete, purge -------------------------------------------------
def test_freed_numbers_follow_the_buckets_retention(bucket, demo_logdir):
    """The plan says separately what leaves the logdir, what purge frees and what the bucket keeps
    after a delete: GCS soft delete (the emulator reports Google's 7-day default), Azure without
    soft delete, S3 without versioning."""
    url = bucket.upload(demo_logdir, "logs")
    p = api.plan(url, DROP_PROFILES, quiet_period=0)
    freed = p.cost["freed"]
    assert freed["removed_from_logdir"] == p.removable_bytes > 0
    assert freed["freed_now"] == 0  # backups are copies in the same store until purge
    if bucket.scheme == "gs":
        assert freed["retention_days"] == 7 and freed["freed_after_purge"] == 0
        assert any("7 day(s) after purge" in n for n in p.notes)
    else:
        assert freed["retention_days"] is None and freed["freed_after_purge"] == p.removable_bytes
        assert any("at purge" in n for n in p.notes)


@pytest.mark.parametrize("lifecycle", [False, True])
def test_versioned_s3_bucket_is_reported_honestly(s3_bucket, demo_logdir, lifecycle):
    """On a versioned bucket a delete only adds a delete marker: without a lifecycle rule that
    expires noncurrent versions nothing is ever freed, and the plan says so; with one, it says when."""
    import boto3

    c = boto3.client("s3")
    c.put_bucket_versioning(Bucket=s3_bucket.name, VersioningConfiguration={"Status": "Enabled"})
    if lifecycle:
        c.put_bucket_lifecycle_configuration(Bucket=s3_bucket.name, LifecycleConfiguration={"Rules": [{
            "ID": "expire-noncurrent", "Status": "Enabled", "Filter": {"Prefix": ""},
            "NoncurrentVersionExpiration": {"NoncurrentDays": 30}}]})
    url = s3_bucket.upload(demo_logdir, "logs")
    p = api.plan(url, DROP_PROFILES, quiet_period=0)
    freed = p.cost["freed"]
    assert freed["versioning"] is True and freed["freed_after_purge"] == 0
    if lifecycle:
        assert freed["retention_days"] == 30 and freed["freed_after_retention"] == p.removable_bytes
    else:
        assert freed["freed_after_retention"] is None
        assert any("lifecycle rule" in n and "delete marker" in n for n in p.notes)
    # reduce and restore still byte-identical on a versioned bucket
    before = _logdir_hashes(s3_bucket, "logs")
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    assert all(o.status in ("verified", "skipped") for o in rep.outcomes)
    assert all(o.status == "restored" for o in api.restore(url))
    assert _logdir_hashes(s3_bucket, "logs") == before


def test_purge_deletes_backups_and_ends_restorability(bucket, demo_logdir):
    url = bucket.upload(demo_logdir, "logs")
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    listed = api.purge(url)
    assert listed.dry_run and listed.freed_bytes == rep.saved_bytes > 0
    assert any(k.startswith(".tb-footprint/blobs/") for k in RemoteFS(url).list_tree())
    done = api.purge(url, yes=True)
    assert not done.dry_run and done.freed_bytes == rep.saved_bytes
    assert not any(k.startswith(".tb-footprint/blobs/") for k in RemoteFS(url).list_tree())
    assert api.restore(url) == []
    assert api.purge(url).ops == []


def test_two_processes_never_reduce_one_run_and_a_dead_lock_is_taken_over(s3_bucket, demo_logdir):
    """A run whose lock is held by a live owner is left alone (skipped: locked); a lock whose owner
    is gone and that guards no journal is taken over."""
    import json
    import socket

    from tb_footprint_plugin.engine import bucket as bk

    url = s3_bucket.upload(demo_logdir, "logs")
    planned = api.plan(url, DROP_PROFILES, quiet_period=0)
    run = next(rp.run for rp in planned.runs if not rp.skipped)
    lock = s3_bucket.key("logs/" + bk.lock_key(run))
    live = {"run": run, "op": "other-op", "host": socket.gethostname(), "pid": os.getppid(),
            "at": 0, "expires": 4e9}
    s3_bucket.fs.pipe_file(lock, json.dumps(live).encode())
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, runs=[run])
    (o,) = rep.outcomes
    assert o.status == "skipped" and o.code == "locked" and "other-op" in o.reason
    dead = dict(live, pid=2 ** 22 + 12345)  # no such process
    s3_bucket.fs.pipe_file(lock, json.dumps(dead).encode())
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, runs=[run])
    (o,) = rep.outcomes
    assert o.status == "verified", (o.status, o.reason)


def _tensorboard_view(url, runs):
    """What TensorBoard's own Python loader reads from each run over the bucket URL: every
    tag's (step, value) series, through the gfile of TensorBoard (s3:// via boto3 and
    S3_ENDPOINT, other schemes via fsspec)."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea

    view = {}
    for run in runs:
        acc = pea.EventAccumulator(f"{url}/{run}" if run != "." else url, size_guidance={"tensors": 0})
        acc.Reload()
        tags = acc.Tags()
        view[run] = {t: [(e.step, e.tensor_proto.SerializeToString()) for e in acc.Tensors(t)]
                     for t in tags.get("tensors", [])}
        assert view[run] or not tags.get("tensors")
    return view


def test_tensorboard_reads_the_reduced_bucket_the_same(bucket, demo_logdir):
    """After a reduction, TensorBoard's Python loader reading the bucket over the same URL scheme
    sees exactly the series it saw before, run by run."""
    url = bucket.upload(demo_logdir, "logs")
    runs = [r.name for r in scan(url).runs if r.has_event_files]
    before = _tensorboard_view(url, runs)
    assert sum(len(v) for v in before.values()) > 0
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    assert any(o.status == "verified" for o in rep.outcomes)
    assert _tensorboard_view(url, runs) == before


# --- rewrite and compress in the bucket ------------------------------------------------------
def _write_rewrite_logdir(root):
    """``exp/hist``: one event file with 1,500 histogram steps, images, scalars, text and hparams
    (archive rewrites it: the dashboard shows a sample); ``torch/resnet``: two PyTorch traces
    next to an event file (lossless gzips them)."""
    import time as _time

    from tb_footprint_plugin import synth

    run = root / "exp" / "hist"
    with synth.EventWriter(str(run)) as w:
        w.hparams({"lr": 0.1, "opt": "adam"}, ["acc"])
        for s in range(1500):
            w.histogram("weights", s, [(i, i + 1, (i * s) % 7) for i in range(30)])
            if s % 10 == 0:
                w.scalar("acc", s, s / 1500)
            if s % 30 == 0:
                w.image("input", s, synth.make_png(4, 4, seed=s % 3), 4, 4)
            if s % 300 == 0:
                w.text("notes", s, f"step {s}")
    torch = root / "torch" / "resnet"
    with synth.EventWriter(str(torch), style="torch") as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    for i in range(2):
        ns = (1795990000 + 60 * i) * 10 ** 9
        synth.write_torch_trace(str(torch / synth.torch_trace_name(ns=ns)), n_steps=2, seed=i, start_ns=ns)
    old = _time.time() - 3600
    for dirpath, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(dirpath, n), (old, old))
    return root


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("rewrite") / "logs")


def _exact_view(url, run):
    """Scalars, hparams and text as TensorBoard's Python loader reads them over the URL: every
    (step, wall time, tensor bytes), and the hparams session records, bit for bit."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea

    acc = pea.EventAccumulator(f"{url}/{run}", size_guidance={"tensors": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags().get("tensors", []):
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        if plugin in ("scalars", "hparams", "text"):
            out[tag] = [(e.step, e.wall_time, e.tensor_proto.SerializeToString()) for e in acc.Tensors(tag)]
    return out


def test_rewrite_and_gzip_in_the_bucket_then_restore(bucket, rewrite_logdir):
    """archive rewrites a histogram/image-heavy event file in the bucket and lossless gzips the
    PyTorch traces: staged and verified by TensorBoard's readers, uploaded under a temporary key,
    read back over the URL, put over the original with a precondition (a .gz created beside
    it); scalars, hparams and text stay bit-exact through TensorBoard's loader over the URL;
    restore gives back every original byte and removes the .gz copies."""
    import gzip as _gzip

    url = bucket.upload(rewrite_logdir, "logs")
    before = _logdir_hashes(bucket, "logs")
    exact0 = _exact_view(url, "exp/hist")
    assert {"acc", "notes"} <= set(exact0)
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"])
    (o,) = rep.outcomes
    assert o.status == "verified", (o.status, o.reason)
    v = o.verification
    assert v["rewritten"] == 1 and any("TensorBoard readers" in b for b in v["checked_backends"])
    assert any(c["name"] == "event_rewrite" for c in v["checks"])
    ev = next(k for k in before if k.startswith("exp/hist/") and "tfevents" in k)
    now = _logdir_hashes(bucket, "logs")
    assert set(now) == set(before) and now[ev] != before[ev]
    assert all(now[k] == h for k, h in before.items() if k != ev)
    assert RemoteFS(url).list_tree()[ev].size < 0.3 * rewrite_logdir.joinpath(ev).stat().st_size
    assert _exact_view(url, "exp/hist") == exact0  # scalars/hparams/text bit-exact
    state = RemoteFS(url).list_tree()
    assert not [k for k in state if k.startswith((".tb-footprint/tmp/", ".tb-footprint/journal/",
                                                    ".tb-footprint/locks/"))]
    assert not [k for k in state if k.startswith(".tb-footprint/") and "tfevents" in k]  # backups: no reader name

    rep2 = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"])
    (o2,) = rep2.outcomes
    assert o2.status == "verified", (o2.status, o2.reason)
    traces = sorted(k for k in before if k.endswith(".pt.trace.json"))
    assert len(traces) == 2 and sorted(o2.removed_files) == traces
    now = _logdir_hashes(bucket, "logs")
    for t in traces:
        assert t not in now and t + ".gz" in now
        data = _gzip.decompress(bucket.fs.cat_file(bucket.key("logs/" + t + ".gz")))
        assert hashlib.sha256(data).hexdigest() == before[t]
    assert all(api.verify(url)[i]["ok"] for i in range(2))
    outs = api.restore(url)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [(o.run, o.reason) for o in outs]
    assert _logdir_hashes(bucket, "logs") == before
    assert not [k for k in RemoteFS(url).list_tree() if k.startswith(".tb-footprint/tmp/")]


REWRITE_CRASH_POINTS = ["reduce.stage", "reduce.upload", "reduce.swap_record",
                        "reduce.mid_swap", "reduce.swap"]
#: a real SIGKILL at every step on S3 (a CLI start and a settle cost ~12 s a case on a bucket);
#: GCS and Azure reach these steps in tests/contract/test_crash_matrix.py (every declared step on
#: one of the three object stores and on the disk, settled by the next start; each store every verb)
#: and are SIGKILLed mid-swap and at verify there
REWRITE_CRASH_CASES = [("s3", f) for f in REWRITE_CRASH_POINTS]


@pytest.mark.parametrize("scheme,failpoint", REWRITE_CRASH_CASES)
def test_rewrite_crash_at_each_new_step_then_recovery(objstore_pool, rewrite_logdir, tmp_path, scheme, failpoint):
    """A process killed at each new step of a rewrite (staged, uploaded, commit record, one object
    put over, all put over) is settled from another process: before the commit record the run is
    as it was and no temporary key is left; after it the swap is finished; restore gives back
    every byte either way."""
    import json
    import signal
    import subprocess
    import sys

    from objstore_servers import Bucket

    bucket = Bucket(objstore_pool.get(scheme))
    url = bucket.upload(rewrite_logdir, "logs")
    before = _logdir_hashes(bucket, "logs")
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TB_FOOTPRINT_FAILPOINTS": f"{failpoint}=kill"}
    from tb_footprint_plugin.storage import scratch

    proc = subprocess.Popen([sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", url, "--policy",
                             "archive", "--quiet-period", "0", "--run", "exp/hist", "--yes"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, stdout + stderr

    def left_scratch():
        return [n for n in os.listdir(scratch.system_root()) if n.startswith(f"tbfp-bucket-p{proc.pid}-")]

    # killed while staging: its local scratch is left behind, and the next start sweeps it
    assert bool(left_scratch()) == (failpoint in ("reduce.stage", "reduce.upload"))
    settled = api.recover_logdir(url)
    assert left_scratch() == []
    expected = "rolled_back" if failpoint in ("reduce.stage", "reduce.upload") else "completed"
    assert [s.action for s in settled] == [expected], settled
    state = [k for k in RemoteFS(url).list_tree() if k.startswith((".tb-footprint/journal/",
                                                                    ".tb-footprint/locks/", ".tb-footprint/tmp/"))]
    assert state == []
    now = _logdir_hashes(bucket, "logs")
    ev = next(k for k in before if k.startswith("exp/hist/") and "tfevents" in k)
    if expected == "rolled_back":
        assert now == before
        assert not [k for k in RemoteFS(url).list_tree() if k.startswith(".tb-footprint/blobs/")]
    else:
        assert now[ev] != before[ev] and all(now[k] == h for k, h in before.items() if k != ev)
        assert _exact_view(url, "exp/hist") == _exact_view(bucket.upload(rewrite_logdir, "orig"), "exp/hist")
        outs = api.restore(url)
        assert [o.status for o in outs] == ["restored"], [(o.run, o.reason) for o in outs]
        assert _logdir_hashes(bucket, "logs") == before


def test_rewrite_original_changed_before_swap_rolls_back(s3_bucket, rewrite_logdir):
    """The event file rewritten by its writer between the plan and the swap: the precondition
    refuses the put over it, the run is left with the writer's new bytes, nothing of the
    operation is left in the bucket."""
    from tb_footprint_plugin.engine import faults

    url = s3_bucket.upload(rewrite_logdir, "logs")
    ev = next(k for k in _logdir_hashes(s3_bucket, "logs") if k.startswith("exp/hist/") and "tfevents" in k)
    new = s3_bucket.fs.cat_file(s3_bucket.key("logs/" + ev)) + b"appended"
    faults.arm("reduce.swap_record", lambda: s3_bucket.fs.pipe_file(s3_bucket.key("logs/" + ev), new))
    try:
        rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"])
    finally:
        faults.disarm_all()
    (o,) = rep.outcomes
    assert o.status == "rolled_back" and o.code == Failure.CHANGED_SINCE_BACKUP, (o.status, o.code, o.reason)
    assert s3_bucket.fs.cat_file(s3_bucket.key("logs/" + ev)) == new
    left = [k for k in RemoteFS(url).list_tree() if k.startswith(".tb-footprint/")
            and not k.endswith(("scan-cache.json", "/history.jsonl"))]  # the change log keeps its line
    assert left == []
    assert [(e["op_id"], e["code"]) for e in api.history(url) if e["outcome"] == "rolled_back"] == [
        (o.op_id, Failure.CHANGED_SINCE_BACKUP)]


def test_lock_owner_on_another_host_is_live_while_its_journal_progresses():
    """A lock past its lease on another host still belongs to a live owner while that operation's
    journal was written within a lease (a long rewrite journals each phase); once the journal is
    older than a lease too, the owner counts as gone and recovery may settle it."""
    import time

    from tb_footprint_plugin.engine import bucket as bk
    from tb_footprint_plugin.engine import bucket_lease, lease
    from tb_footprint_plugin.engine.context import new_op_id

    now = time.time()
    period = lease.lease_seconds()
    lock = {"run": "r", "op": new_op_id(), "host": "another-host", "pid": 1, "at": now - 3 * period,
            "expires": now - period}
    assert bk.owner_gone(lock)  # no journal to show progress
    # the journal object's last write (its mtime in the store) is the progress _owner_gone reads
    assert not bucket_lease.holder_gone(lock, lambda op: now - 60 if op == lock["op"] else None)
    assert bucket_lease.holder_gone(lock, lambda op: now - 2 * period)
    assert not bk.owner_gone(dict(lock, expires=now + 60))  # within its lease


# --- objects beyond a store's single-copy limit ---------------------------------------------
@pytest.fixture
def small_copy_limits(monkeypatch):
    """S3's 5 GiB CopyObject limit and Azure's 256 MiB synchronous-copy limit, scaled down so a
    12 MiB object takes the large-object path (S3 parts must be at least 5 MiB but the last)."""
    from tb_footprint_plugin.storage import remote

    monkeypatch.setattr(remote, "S3_COPY_MAX", 8 << 20)
    monkeypatch.setattr(remote, "S3_COPY_PART", 5 << 20)
    monkeypatch.setattr(remote, "AZ_SYNC_COPY_MAX", 1 << 20)
    return remote


@pytest.mark.parametrize("scheme", ["s3", "az"])
def test_copies_above_the_single_copy_limit_go_in_parts_or_in_the_background(objstore_pool, small_copy_limits,
                                                                           scheme, monkeypatch):
    """S3: a multipart upload of ranges copied server-side, each conditional on the source's
    version; Azure: the asynchronous copy, polled to its end. Same bytes, same conditions, and a
    copy refused by its condition leaves nothing behind (no object, no open upload)."""
    from objstore_servers import Bucket

    bucket = Bucket(objstore_pool.get(scheme))
    rfs = RemoteFS(bucket.url("l"))
    ops = rfs.ops
    data = os.urandom(12 << 20)
    a = rfs.path("big.bin")
    v = ops.put(a, data, if_absent=True)
    calls = []
    if scheme == "s3":
        real = ops.client.upload_part_copy
        monkeypatch.setattr(ops.client, "upload_part_copy", lambda **kw: calls.append(kw) or real(**kw))
    else:
        from azure.storage.blob import BlobClient

        real = BlobClient.start_copy_from_url
        monkeypatch.setattr(BlobClient, "start_copy_from_url",
                            lambda self, url, **kw: calls.append(kw) or real(self, url, **kw))
    with pytest.raises(RemoteError) as e:
        ops.copy(a, rfs.path("vault/x.bin"), if_source_version="0" * 32 if scheme == "s3" else "0x1",
                 size=len(data))
    assert e.value.code == PRECONDITION_FAILED
    assert "vault/x.bin" not in rfs.list_tree()
    if scheme == "s3":
        assert not ops.client.list_multipart_uploads(Bucket=bucket.name).get("Uploads")
    calls.clear()
    res = ops.copy(a, rfs.path("vault/big.bin"), if_source_version=v, size=len(data))
    assert bucket.fs.cat_file(rfs.path("vault/big.bin")) == data and res.version
    if scheme == "s3":
        assert [c["CopySourceRange"] for c in calls] == ["bytes=0-5242879", "bytes=5242880-10485759",
                                                         "bytes=10485760-12582911"]
        assert all(c["CopySourceIfMatch"] == f'"{v}"' for c in calls)
        assert res.checksums == {}  # a checksum of parts says nothing of the bytes: the caller reads them
    else:
        assert len(calls) == 1 and "requires_sync" not in calls[0]
    with pytest.raises(RemoteError) as e:  # the destination's condition holds on this path too
        ops.copy(a, rfs.path("vault/big.bin"), if_absent=True, size=len(data))
    assert e.value.code == ALREADY_EXISTS


@pytest.mark.parametrize("scheme", ["s3", "az"])
def test_reduce_and_restore_of_objects_above_the_single_copy_limit(objstore_pool, small_copy_limits, tmp_path,
                                                                   scheme):
    """A 12 MiB PyTorch trace in a bucket run: backed up by the large-object copy, its bytes
    checked, removed, and put back byte for byte by restore (same path, the other way)."""
    from objstore_servers import Bucket
    from tb_footprint_plugin.synth.events import EventWriter

    bucket = Bucket(objstore_pool.get(scheme))
    run = tmp_path / "logs" / "run"
    with EventWriter(str(run)) as w:
        for step in range(20):
            w.scalar("loss", step, 1.0 / (step + 1))
    (run / "host_1.1.pt.trace.json").write_bytes(b'{"traceEvents": [' + b" " * (12 << 20) + b"]}")
    url = bucket.upload(tmp_path / "logs", "logs")
    before = _logdir_hashes(bucket, "logs")
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    assert [(o.run, o.status) for o in rep.outcomes] == [("run", "verified")], [o.reason for o in rep.outcomes]
    assert rep.removed_files == ["run/host_1.1.pt.trace.json"]
    outs = api.restore(url)
    assert [o.status for o in outs] == ["restored"], [o.reason for o in outs]
    assert _logdir_hashes(bucket, "logs") == before
