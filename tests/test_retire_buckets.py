"""Issue #26.2 on bucket logdirs, against the object-store servers (moto S3, the GCS emulator,
Azurite): retire moves whole runs into the bucket's vault with the guarantees of a disk's retire
(listed by status, history, retired; restored byte for byte; purged), a failure at each of its steps
leaves every object in the logdir or verified in the vault and the next start settles it, a run
written during the retire is left alone, and ``closed_files`` lets a just-closed run be reduced."""
import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome, Recovery, Skip
from tb_footprint_plugin.engine import bucket_retire, faults
from tb_footprint_plugin.engine.bucket_retire import RETIRE_STEPS
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore

from test_objstore import DROP_PROFILES, _write_rewrite_logdir

STATE = ".tb-footprint/"


@pytest.fixture(scope="module")
def sweep_logdir(tmp_path_factory):
    """Three runs (two of a sweep, one with a config file in a sub-folder) and a baseline."""
    root = tmp_path_factory.mktemp("retire") / "logs"
    for name, final in (("sweep/lr0", 0.3), ("sweep/lr1", 0.1), ("baseline", 0.05)):
        with synth.EventWriter(str(root / name)) as w:
            for step, v in enumerate([1.0, 0.6, final]):
                w.scalar("val/loss", step, v)
                w.text("notes", step, f"step {step}")
    (root / "sweep" / "lr0" / "notes").mkdir()
    (root / "sweep" / "lr0" / "notes" / "config.yaml").write_bytes(b"lr: 0.1\n" * 50)
    return root


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("closed") / "logs")


def _user(bucket):
    return {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(STATE)}


def _vault_keys(bucket):
    return {k for k in bucket.hashes("logs") if k.startswith(STATE + "blobs/")}


def _of(hashes, run):
    return {k: v for k, v in hashes.items() if k.startswith(run + "/")}


def test_retire_status_history_restore_purge(bucket, sweep_logdir):
    """Two sweep runs retired on each store: they leave the logdir (the baseline is untouched), the
    vault holds them under numbered keys (no ``tfevents`` name TensorBoard would take for a run),
    `status`, `history`, `operations` and `retired` list them as retirements; one comes back byte
    for byte, then purge frees both (the other's only copy, said with ``originals``)."""
    url = bucket.upload(sweep_logdir, "logs")
    before = _user(bucket)
    rule = api.retire_rule(run_glob="sweep/*")
    dry = api.retire(url, rule, quiet_period=0)
    assert sorted(o.run for o in dry.outcomes if o.status == Outcome.DRY_RUN) == ["sweep/lr0", "sweep/lr1"]
    assert _user(bucket) == before and not _vault_keys(bucket)

    rep = api.retire(url, rule, dry_run=False, quiet_period=0)
    assert sorted(o.run for o in rep.outcomes) == ["sweep/lr0", "sweep/lr1"]
    assert all(o.status == Outcome.VERIFIED for o in rep.outcomes), [(o.run, o.reason) for o in rep.outcomes]
    moved = {k for k in before if k.startswith("sweep/")}
    assert _user(bucket) == {k: v for k, v in before.items() if k not in moved}
    assert rep.retired_bytes == sum(o.bytes_before for o in rep.outcomes) > 0
    vault = _vault_keys(bucket)
    assert len(vault) == len(moved) and not any("tfevents" in k for k in vault)
    assert {r.name for r in api.scan(url).runs} >= {"baseline"} and \
        not any(r.name.startswith("sweep") for r in api.scan(url).runs)

    ops = {o.run: o.op_id for o in rep.outcomes}
    st = api.status(url)
    assert {(o["run"], o["kind"]) for o in st["operations"]} == {("sweep/lr0", "retire"), ("sweep/lr1", "retire")}
    assert not st["unfinished_operations"]
    assert {(e["run"], e["kind"]) for e in api.history(url)} == {("sweep/lr0", "retire"), ("sweep/lr1", "retire")}
    assert {r["run"] for r in api.retired(url)} == {"sweep/lr0", "sweep/lr1"}
    assert {m["kind"] for m in api.operations(url)} == {"retire"}

    (back,) = api.restore(url, run="sweep/lr0")
    assert back.status == Outcome.RESTORED, back.reason
    assert _of(_user(bucket), "sweep/lr0") == _of(before, "sweep/lr0")
    assert {r["run"] for r in api.retired(url)} == {"sweep/lr1"}
    assert any(e["kind"] == "restore" and e["run"] == "sweep/lr0" for e in api.history(url))
    assert next(o for o in api.status(url)["operations"] if o["op_id"] == ops["sweep/lr0"])["restored_by"]

    # the restore let the restored run's copies go (#26, as a disk's does): purge frees the other's
    assert len(_vault_keys(bucket)) == len([k for k in moved if not k.startswith("sweep/lr0/")])
    preview = api.purge(url)
    listed = {o["run"]: o for o in preview.ops}
    assert list(listed) == ["sweep/lr1"] and listed["sweep/lr1"]["originals"] > 0
    assert len(_vault_keys(bucket)) == len([k for k in moved if not k.startswith("sweep/lr0/")])  # a preview deletes nothing
    done = api.purge(url, yes=True)
    assert done.freed_bytes == preview.freed_bytes > 0
    assert not _vault_keys(bucket)
    assert api.retired(url) == []
    assert _user(bucket) == {k: v for k, v in before.items() if not k.startswith("sweep/lr1/")}
    with pytest.raises(TransactionError):
        api.restore(url, run="sweep/lr1")


@pytest.mark.parametrize("step", RETIRE_STEPS)
def test_failure_at_each_step_is_settled_by_the_next_start(s3_bucket, sweep_logdir, step):
    """A failure injected at each step of a bucket retire: every object of the run is in the logdir
    or verified in the vault (a copy with the original's bytes) at that instant; the next start
    settles it (put back before the commit record, finished from it on) and a restore of a finished
    one gives back every byte.

    On S3 (CI time): tests/contract/test_crash_matrix.py injects a failure and a crash at every
    retire step on one of S3, GCS and Azure each (each store several retire steps of each kind, its
    ``SAMPLED`` rule) and checks the settled logdir and the restore on each."""
    bucket = s3_bucket
    url = bucket.upload(sweep_logdir, "logs")
    before = _user(bucket)
    run = "sweep/lr0"
    faults.arm(step, "crash")
    try:
        with pytest.raises(faults.InjectedCrash):
            api.retire(url, api.retire_rule(runs=[run]), dry_run=False, quiet_period=0)
    finally:
        faults.disarm_all()
    now = _user(bucket)
    vault_hashes = set(bucket.hashes("logs/" + STATE + "blobs").values())
    for k, h in _of(before, run).items():
        assert now.get(k) == h or h in vault_hashes, (step, k)
    assert {k: v for k, v in now.items() if not k.startswith(run + "/")} == \
        {k: v for k, v in before.items() if not k.startswith(run + "/")}
    assert api.status(url)["unfinished_operations"]

    (rec,) = api.recover_logdir(url)
    committed = RETIRE_STEPS.index(step) >= RETIRE_STEPS.index("retire.delete_record")
    assert rec.action == (Recovery.COMPLETED if committed else Recovery.ROLLED_BACK), (step, rec.detail)
    assert not api.status(url)["unfinished_operations"]
    if committed:
        assert _user(bucket) == {k: v for k, v in before.items() if not k.startswith(run + "/")}
        assert [r["run"] for r in api.retired(url)] == [run]
        (o,) = api.restore(url, run=run)
        assert o.status == Outcome.RESTORED, o.reason
    else:
        assert api.retired(url) == [] and not _vault_keys(bucket)
    assert _user(bucket) == before
    # the run's locks went with the journal: it can be retired now
    (o,) = api.retire(url, api.retire_rule(runs=[run]), dry_run=False, quiet_period=0).outcomes
    assert o.status == Outcome.VERIFIED, o.reason


@pytest.mark.parametrize("when", ["retire.move", "retire.delete"])
def test_run_written_during_the_retire_is_left_alone(s3_bucket, sweep_logdir, when):
    """An object a trainer writes into the run while it is being retired (after the copies, or
    after the originals were deleted): the run is left in the logdir, every original back byte for
    byte beside the new object, ``Skip.ACTIVE``; the vault keeps no copy and no retirement."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    before = _user(s3_bucket)
    run = "sweep/lr1"
    fresh = s3_bucket.key(f"logs/{run}/events.out.tfevents.999.host")
    faults.arm(when, lambda: s3_bucket.fs.pipe_file(fresh, b"written by the trainer"))
    try:
        (o,) = api.retire(url, api.retire_rule(runs=[run]), dry_run=False, quiet_period=0).outcomes
    finally:
        faults.disarm_all()
    assert o.status == Outcome.SKIPPED and o.code == Skip.ACTIVE, (o.status, o.code, o.reason)
    now = _user(s3_bucket)
    assert now.pop(f"{run}/events.out.tfevents.999.host")
    assert now == before
    assert api.retired(url) == [] and not _vault_keys(s3_bucket)
    assert not api.status(url)["unfinished_operations"]


def test_recently_written_run_is_not_retired(s3_bucket, sweep_logdir):
    """The quiet period is the plan's one rule on a bucket too: a fresh upload is left alone by the
    plan (``Skip.ACTIVE``) and by the engine's own check, which moves nothing."""
    from tb_footprint_plugin.engine import bucket as bk

    url = s3_bucket.upload(sweep_logdir, "logs")
    before = _user(s3_bucket)
    p = api.retire_plan(url, api.retire_rule(runs=["baseline"]))
    (item,) = p.items
    assert not item.selected and item.code == Skip.ACTIVE
    ostore = ObjectStore(url)
    o = bk.retire_run(ostore, bk.BucketVault.for_logdir(ostore), "baseline", quiet_period=600)
    assert o.status == Outcome.SKIPPED and o.code == Skip.ACTIVE, (o.status, o.reason)
    assert _user(s3_bucket) == before and api.retired(url) == []
    assert not api.status(url)["unfinished_operations"]


@pytest.mark.parametrize("policy", ["drop", "archive"])
def test_closed_files_let_a_just_closed_run_be_reduced(s3_bucket, rewrite_logdir, policy):
    """A run whose objects were all just written is active for the quiet period; with every one of
    them named in ``closed_files`` at the mtime it has (the training-end callback's own files), the
    bucket's plan, batch (drop) and rewrite (archive) reduce it; one written since is not excused."""
    url = s3_bucket.upload(rewrite_logdir, "logs")
    run = "torch/resnet" if policy == "drop" else "exp/hist"
    pol = DROP_PROFILES if policy == "drop" else "archive"
    objs = RemoteFS(url).list_tree(run)
    closed = {k: o.mtime for k, o in objs.items()}
    (skipped,) = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=600, runs=[run]).outcomes
    assert skipped.status == Outcome.SKIPPED and skipped.code == Skip.ACTIVE
    stale = {k: m - 1 for k, m in closed.items()}  # an object changed since it was closed counts
    (still,) = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=600, runs=[run],
                                 closed_files=stale).outcomes
    assert still.code == Skip.ACTIVE
    (planned,) = api.reduce_logdir(url, policy=pol, quiet_period=600, runs=[run], closed_files=closed).outcomes
    assert planned.status == Outcome.DRY_RUN, planned.reason
    (o,) = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=600, runs=[run],
                             closed_files=closed).outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.code, o.reason)
    assert o.bytes_after < o.bytes_before


@pytest.mark.parametrize("step", ["retire.mid_move", "retire.delete_record"])
def test_cli_retire_killed_then_settled_from_another_process(s3_bucket, sweep_logdir, step):
    """`tb-footprint retire URL` SIGKILLed before its commit record and right after it: the journal
    and the run's lock are left in the bucket; the next start (another process) puts the run back,
    or finishes the retirement, whose restore gives back every byte."""
    import os
    import signal
    import subprocess
    import sys

    url = s3_bucket.upload(sweep_logdir, "logs")
    before = _user(s3_bucket)
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TB_FOOTPRINT_FAILPOINTS": f"{step}=kill"}
    proc = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "retire", url, "sweep/lr0",
                           "--quiet-period", "0", "--yes"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    assert any(k.startswith(STATE + "locks/") for k in s3_bucket.hashes("logs"))
    (rec,) = api.recover_logdir(url)
    finished = step == "retire.delete_record"
    assert rec.action == (Recovery.COMPLETED if finished else Recovery.ROLLED_BACK), rec.detail
    assert not any(k.startswith((STATE + "locks/", STATE + "journal/")) for k in s3_bucket.hashes("logs"))
    if finished:
        assert [r["run"] for r in api.retired(url)] == ["sweep/lr0"]
        assert not _of(_user(s3_bucket), "sweep/lr0")
        (o,) = api.restore(url, run="sweep/lr0")
        assert o.status == Outcome.RESTORED, o.reason
    assert _user(s3_bucket) == before


def test_restore_never_overwrites_an_object_written_since(bucket, sweep_logdir, monkeypatch):
    """A retired run's key written again while its restore runs (after its look at the run's
    prefix: one written before is a new run of the same name, refused as a disk refuses it,
    tests/test_restore_not_into_a_new_run.py): the restore puts back every other object, leaves
    the new one as it is, says so, and the original of that key stays in the vault (purge keeps it
    and says why)."""
    url = bucket.upload(sweep_logdir, "logs")
    before = _user(bucket)
    run = "sweep/lr0"
    (o,) = api.retire(url, api.retire_rule(runs=[run]), dry_run=False, quiet_period=0).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    key = f"{run}/notes/config.yaml"
    real_hold = bucket_retire.BucketUnretire.hold

    def hold(self):  # written once the restore looked at the run, before it holds it
        bucket.fs.pipe_file(bucket.key(f"logs/{key}"), b"written since the retirement\n")
        bucket.fs.invalidate_cache()
        return real_hold(self)
    monkeypatch.setattr(bucket_retire.BucketUnretire, "hold", hold)
    (back,) = api.restore(url, run=run)
    assert back.status == Outcome.RESTORED and key in back.reason, back.reason
    now = _user(bucket)
    assert bucket.fs.cat_file(bucket.key(f"logs/{key}")) == b"written since the retirement\n"
    assert {k: v for k, v in now.items() if k != key} == {k: v for k, v in before.items() if k != key}
    report = api.purge(url, yes=True)
    assert [k["run"] for k in report.kept] == [run] and not report.ops
    assert before[key] in set(bucket.hashes("logs/" + STATE + "blobs").values())


def test_purge_keeps_the_copies_of_a_retire_still_under_way(s3_bucket, sweep_logdir):
    """A bucket retire writes its manifest (status verified) before its commit record and may
    still roll back onto its vault copies: a purge in that window (another process, the tab's
    Retire page) keeps them and says why (second review: it deleted them, and the rollback then
    had nothing to put back)."""
    from tb_footprint_plugin.engine import bucket as bk

    url = s3_bucket.upload(sweep_logdir, "logs")
    before = _user(s3_bucket)
    run = "sweep/lr0"
    faults.arm("retire.manifest", "crash")
    try:
        with pytest.raises(faults.InjectedCrash):
            api.retire(url, api.retire_rule(runs=[run]), dry_run=False, quiet_period=0)
    finally:
        faults.disarm_all()
    copies = _vault_keys(s3_bucket)
    assert copies and api.status(url)["unfinished_operations"]
    ostore = ObjectStore(url)
    d = bk.purge(ostore, bk.BucketVault.for_logdir(ostore, None), yes=True)  # the engine's, no recovery first
    assert d["ops"] == [] and [h["code"] for h in d["kept"]] == [Skip.LOCKED.value], d
    assert _vault_keys(s3_bucket) == copies
    (rec,) = api.recover_logdir(url)  # rolled back onto the copies it kept
    assert rec.action == Recovery.ROLLED_BACK, rec.detail
    assert _user(s3_bucket) == before
