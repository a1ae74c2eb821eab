"""Issue #26 item 3: a bucket retire with a local folder as its vault (``--backup-dir /folder``)
puts every object of the run into the folder's blob store, as a bucket reduce does (streamed,
size and MD5 checked, read back and hashed), leaves no copy in the bucket, names each blob by
sha256 in the journal's commit record and the manifest (``kind: retire``), and a restore streams
them back create-only, byte for byte. Purge forgets them only once nothing unpurged names them.
A SIGKILL at each step of the retire leaves the run as it was or retired and verified, and the
next start settles it."""
import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome, Recovery, Skip
from tb_footprint_plugin.engine import bucket as bk
from tb_footprint_plugin.engine import bucket_retire, faults
from tb_footprint_plugin.engine.bucket_retire import RETIRE_STEPS
from tb_footprint_plugin.engine.bucket_state import BlobVault
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore

STATE = ".tb-footprint/"

pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.fixture(scope="module")
def sweep_logdir(tmp_path_factory):
    """Two runs of a sweep (one with a config file in a sub-folder) and a baseline, written an
    hour ago (no quiet period keeps them)."""
    root = tmp_path_factory.mktemp("retireblobs") / "logs"
    for name, final in (("sweep/lr0", 0.3), ("sweep/lr1", 0.1), ("baseline", 0.05)):
        with synth.EventWriter(str(root / name)) as w:
            for step, v in enumerate([1.0, 0.6, final]):
                w.scalar("val/loss", step, v)
                w.text("notes", step, f"{name} step {step}")
    (root / "sweep" / "lr0" / "notes").mkdir()
    (root / "sweep" / "lr0" / "notes" / "config.yaml").write_bytes(b"lr: 0.1\n" * 50)
    return root


def _user(bucket):
    return {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(STATE)}


def _of(hashes, run):
    return {k: v for k, v in hashes.items() if k.startswith(run + "/")}


def _bucket_copies(bucket):
    return [k for k in bucket.hashes("logs") if k.startswith(STATE + "blobs/")]


def _blobs(vault):
    """sha256 of every blob the folder holds now (read again from its index)."""
    if not os.path.isdir(vault):
        return set()
    return {r.sha for r in BlobStore(PosixStore(vault)).refs()}


def _manifests(url):
    rfs = RemoteFS(url)
    try:
        keys = rfs.list_tree(STATE + "manifests")
    except FileNotFoundError:
        return []
    return [json.loads(rfs.read_bytes(k)) for k in keys]


def _retire(url, run, vault):
    (o,) = api.retire(url, api.retire_rule(runs=[run]), dry_run=False, backup_dir=vault, quiet_period=0).outcomes
    return o


def test_retire_into_the_folder_then_restore_and_purge(bucket, sweep_logdir, tmp_path):
    """On each store: two runs retired into the folder leave the bucket entirely (no copy under
    ``.tb-footprint/blobs``), the folder holds every object's bytes under its sha256, the manifests
    name them; status, history and retired list the retirements; the restore of one forgets its
    blobs (as every store's restore releases its copies, #26) and keeps the other's (still
    retired), whose restore is byte for byte and leaves the folder empty: nothing for a purge."""
    url = bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(bucket)
    dry = api.retire(url, api.retire_rule(run_glob="sweep/*"), backup_dir=vault, quiet_period=0)
    assert {o.status for o in dry.outcomes} == {Outcome.DRY_RUN} and not os.path.exists(vault)

    rep = api.retire(url, api.retire_rule(run_glob="sweep/*"), dry_run=False, backup_dir=vault, quiet_period=0)
    assert sorted(o.run for o in rep.outcomes) == ["sweep/lr0", "sweep/lr1"]
    assert all(o.status == Outcome.VERIFIED for o in rep.outcomes), [(o.run, o.reason) for o in rep.outcomes]
    assert _user(bucket) == {k: v for k, v in before.items() if not k.startswith("sweep/")}
    assert not _bucket_copies(bucket)  # nothing of the runs is billed on the bucket any more
    want = {k: v for k, v in before.items() if k.startswith("sweep/")}
    assert set(want.values()) <= _blobs(vault)
    ms = {m["run"]: m for m in _manifests(url)}
    assert {m["kind"] for m in ms.values()} == {"retire"}
    for run, m in ms.items():
        assert m["blob_folder"] == os.path.abspath(vault)
        assert {f["path"]: f["sha256"] for f in m["files"]} == _of(want, run)
        assert all(f["kept_in"] == "blobstore" and "backup" not in f for f in m["files"])
    ops = {o.run: o.op_id for o in rep.outcomes}
    st = api.status(url, backup_dir=vault)
    assert {(o["run"], o["kind"]) for o in st["operations"]} == {("sweep/lr0", "retire"), ("sweep/lr1", "retire")}
    assert not st["unfinished_operations"]
    assert {(e["run"], e["kind"]) for e in api.history(url, backup_dir=vault)} >= \
        {("sweep/lr0", "retire"), ("sweep/lr1", "retire")}
    assert {r["run"] for r in api.retired(url, backup_dir=vault)} == {"sweep/lr0", "sweep/lr1"}

    (back,) = api.restore(url, run="sweep/lr0", backup_dir=vault)
    assert back.status == Outcome.RESTORED, back.reason
    assert _of(_user(bucket), "sweep/lr0") == _of(before, "sweep/lr0")
    assert {r["run"] for r in api.retired(url, backup_dir=vault)} == {"sweep/lr1"}

    # the restored one's blobs went with its restore, the retired run's (its only copy) stay
    left = _blobs(vault)
    assert set(_of(want, "sweep/lr1").values()) <= left
    assert not (set(_of(want, "sweep/lr0").values()) - set(_of(want, "sweep/lr1").values())) & left
    assert [o["op_id"] for o in api.purge(url, backup_dir=vault).ops] == [ops["sweep/lr1"]]
    (back,) = api.restore(url, run="sweep/lr1", backup_dir=vault)
    assert back.status == Outcome.RESTORED, back.reason
    assert _user(bucket) == before
    assert _blobs(vault) == set()
    done = api.purge(url, yes=True, backup_dir=vault)
    assert not done.ops and not done.kept, done.to_dict()
    assert _user(bucket) == before


def test_without_a_folder_the_retire_still_makes_server_side_copies(s3_bucket, sweep_logdir):
    """No ``--backup-dir`` (or a prefix of the bucket): today's numbered copies in the bucket."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    o = _retire(url, "sweep/lr1", None)
    assert o.status == Outcome.VERIFIED, o.reason
    (m,) = _manifests(url)
    assert all(f.get("backup") and "kept_in" not in f for f in m["files"])
    assert len(_bucket_copies(s3_bucket)) == len(m["files"])


def test_restore_never_overwrites_an_object_written_since(bucket, sweep_logdir, tmp_path, monkeypatch):
    """On each store: a key of the retired run written again while the restore runs (after its look
    at the run's prefix: one written before is a new run of the same name, refused,
    tests/test_restore_not_into_a_new_run.py): the restore streams back every other blob, leaves
    the new object as it is and says so; purge keeps that original's blob."""
    url = bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(bucket)
    run = "sweep/lr0"
    assert _retire(url, run, vault).status == Outcome.VERIFIED
    key = f"{run}/notes/config.yaml"
    real_hold = bucket_retire.BucketUnretire.hold

    def hold(self):  # written once the restore looked at the run, before it holds it
        bucket.fs.pipe_file(bucket.key(f"logs/{key}"), b"written since the retirement\n")
        bucket.fs.invalidate_cache()
        return real_hold(self)
    monkeypatch.setattr(bucket_retire.BucketUnretire, "hold", hold)
    (back,) = api.restore(url, run=run, backup_dir=vault)
    assert back.status == Outcome.RESTORED and key in back.reason, back.reason
    assert bucket.fs.cat_file(bucket.key(f"logs/{key}")) == b"written since the retirement\n"
    now = _user(bucket)
    assert {k: v for k, v in now.items() if k != key} == {k: v for k, v in before.items() if k != key}
    report = api.purge(url, yes=True, backup_dir=vault)
    assert [k["run"] for k in report.kept] == [run] and not report.ops
    assert before[key] in _blobs(vault)


def test_restore_without_the_folder_is_refused_and_changes_nothing(s3_bucket, sweep_logdir, tmp_path):
    """A retirement into a folder restored without ``--backup-dir`` while the folder its manifest
    records is not one of ours (others may write in it): refused with a code, naming the folder and
    the option, nothing put back. Once it is ours again, the recorded folder is used without the
    option, as a reduction's restore uses it (R21 PD20; review R24 F4's note), every byte back."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket)
    assert _retire(url, "sweep/lr1", vault).status == Outcome.VERIFIED
    after = _user(s3_bucket)
    os.chmod(vault, 0o777)
    try:
        (r,) = api.restore(url, run="sweep/lr1")
    finally:
        os.chmod(vault, 0o700)
    assert (r.status, str(r.code)) == (Outcome.FAILED, "state_not_ours"), r.to_dict()
    assert vault in r.reason and "--backup-dir" in r.reason and "nothing was changed" in r.reason, r.reason
    assert _user(s3_bucket) == after and not api.status(url)["unfinished_operations"]
    (r,) = api.restore(url, run="sweep/lr1")
    assert r.status == Outcome.RESTORED, r.reason
    assert _user(s3_bucket) == before


@pytest.mark.parametrize("when", ["retire.move", "retire.delete"])
def test_run_written_during_the_retire_is_put_back_beside_the_writer(s3_bucket, sweep_logdir, tmp_path, when):
    """An object written into the run while it is retired into the folder (after the blobs are
    added, or after the originals were deleted): every original streamed back byte for byte beside
    the new object, ``Skip.ACTIVE``, no retirement recorded, nothing left unfinished."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket)
    run = "sweep/lr1"
    fresh = s3_bucket.key(f"logs/{run}/events.out.tfevents.999.host")
    faults.arm(when, lambda: s3_bucket.fs.pipe_file(fresh, b"written by the trainer"))
    try:
        o = _retire(url, run, vault)
    finally:
        faults.disarm_all()
    assert o.status == Outcome.SKIPPED and o.code == Skip.ACTIVE, (o.status, o.code, o.reason)
    now = _user(s3_bucket)
    assert now.pop(f"{run}/events.out.tfevents.999.host")
    assert now == before
    assert api.retired(url, backup_dir=vault) == [] and not _manifests(url)
    assert not api.status(url, backup_dir=vault)["unfinished_operations"]
    # the run went through the folder (no copy in the bucket), and the retirement put back as it was released
    # the claims it made there at its end (R9 F8's follow-up): no blob of it is left as an orphan
    assert not _bucket_copies(s3_bucket) and not set(_of(before, run).values()) & _blobs(vault)
    kept = _blobs(vault)
    api.purge(url, yes=True, backup_dir=vault)
    assert _blobs(vault) == kept and _user(s3_bucket) == {**before, f"{run}/events.out.tfevents.999.host":
                                                           hashlib.sha256(b"written by the trainer").hexdigest()}


def test_a_blob_forgotten_before_the_commit_record_rolls_the_run_back(s3_bucket, sweep_logdir, tmp_path):
    """The folder's index is read again right before the commit record: a blob forgotten after
    its add (by hand, an older purge) keeps every original in the bucket (``backup_damaged``)."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket)

    def forget_all():  # as this logdir's owner (a forget drops one owner's claim)
        bs = BlobVault(vault, ObjectStore(url)).store
        bs.forget([r.sha for r in bs.refs()])

    faults.arm("retire.manifest", forget_all)
    try:
        o = _retire(url, "sweep/lr0", vault)
    finally:
        faults.disarm_all()
    assert o.status == Outcome.ROLLED_BACK and o.code == Failure.BACKUP_DAMAGED, (o.status, o.code, o.reason)
    assert _user(s3_bucket) == before and not _manifests(url)


@pytest.mark.parametrize("step", RETIRE_STEPS)
def test_cli_retire_into_a_folder_killed_at_each_step_then_settled(s3_bucket, sweep_logdir, tmp_path, step):
    """`tb-footprint retire URL RUN --backup-dir FOLDER` SIGKILLed at each step: at that instant
    every object of the run is in the bucket as it was or its bytes are a blob of the folder; the
    next start (another process) puts the run back before the commit record and finishes it from
    there on; a finished one's restore gives back every byte, and the run retires again."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket)
    run = "sweep/lr0"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TB_FOOTPRINT_FAILPOINTS": f"{step}=kill"}
    proc = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "retire", url, run,
                           "--backup-dir", vault, "--quiet-period", "0", "--yes"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    now, held = _user(s3_bucket), _blobs(vault)
    for k, h in _of(before, run).items():
        assert now.get(k) == h or h in held, (step, k)
    assert {k: v for k, v in now.items() if not k.startswith(run + "/")} == \
        {k: v for k, v in before.items() if not k.startswith(run + "/")}
    assert not _bucket_copies(s3_bucket)
    assert api.status(url, backup_dir=vault)["unfinished_operations"]

    committed = RETIRE_STEPS.index(step) >= RETIRE_STEPS.index("retire.delete_record")
    if committed:
        # the commit record names every object's blob by sha256 before any original is deleted
        ostore = ObjectStore(url)
        rfs = ostore.rfs
        (jkey,) = rfs.list_tree(STATE + "journal")
        doc = json.loads(rfs.read_bytes(jkey))
        assert doc["step"] == "swapping"
        assert {f["path"]: f["sha256"] for f in doc["runs"][0]["files"]} == _of(before, run)
        # a purge in this window (the engine's, no recovery first) forgets none of them
        d = bk.purge(ostore, bk.BucketVault.for_logdir(ostore, vault), yes=True)
        assert d["ops"] == [] and [h["code"] for h in d["kept"]] == [Skip.LOCKED.value], d
        assert set(_of(before, run).values()) <= _blobs(vault)
    (rec,) = api.recover_logdir(url, backup_dir=vault)
    assert rec.action == (Recovery.COMPLETED if committed else Recovery.ROLLED_BACK), (step, rec.detail)
    assert not any(k.startswith((STATE + "locks/", STATE + "journal/")) for k in s3_bucket.hashes("logs"))
    if committed:
        assert not _of(_user(s3_bucket), run)
        assert [r["run"] for r in api.retired(url, backup_dir=vault)] == [run]
        (o,) = api.restore(url, run=run, backup_dir=vault)
        assert o.status == Outcome.RESTORED, o.reason
    else:
        assert api.retired(url, backup_dir=vault) == [] and not _manifests(url)
    assert _user(s3_bucket) == before
    o = _retire(url, run, vault)
    assert o.status == Outcome.VERIFIED, o.reason
    assert set(_of(before, run).values()) <= _blobs(vault)


def test_blobs_are_the_original_bytes(s3_bucket, sweep_logdir, tmp_path):
    """Each blob the folder holds for a retired object reads back to that object's bytes."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    rfs = RemoteFS(url)
    originals = {k: rfs.read_bytes(k) for k in rfs.list_tree("baseline")}
    assert _retire(url, "baseline", vault).status == Outcome.VERIFIED
    bs = BlobStore(PosixStore(vault))
    for k, data in originals.items():
        with bs.open(hashlib.sha256(data).hexdigest()) as b:
            assert b.read() == data, k


@pytest.mark.parametrize("step", ["unretire.mid_move", "unretire.move"])
def test_a_restore_stopped_midway_is_finished_by_the_next_start(s3_bucket, sweep_logdir, tmp_path, step):
    """A restore of a retirement into the folder that stops after its first put-back (or after
    every one, before its record): the next start streams back what is missing, marks the
    retirement restored; the run is byte for byte as before."""
    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket)
    run = "sweep/lr0"
    assert _retire(url, run, vault).status == Outcome.VERIFIED
    assert not _bucket_copies(s3_bucket) and set(_of(before, run).values()) <= _blobs(vault)
    faults.arm(step, "crash")
    try:
        with pytest.raises(faults.InjectedCrash):
            api.restore(url, run=run, backup_dir=vault)
    finally:
        faults.disarm_all()
    assert _of(_user(s3_bucket), run) and api.status(url, backup_dir=vault)["unfinished_operations"]
    (rec,) = api.recover_logdir(url, backup_dir=vault)
    assert rec.action == Recovery.COMPLETED, rec.detail
    assert _user(s3_bucket) == before and api.retired(url, backup_dir=vault) == []
    assert not api.status(url, backup_dir=vault)["unfinished_operations"]


def test_an_object_larger_than_memory_goes_through_scratch_files(s3_bucket, sweep_logdir, tmp_path):
    """An object above ``bucket_blobs.IN_MEMORY`` is streamed through a scratch file both ways
    (down into the folder, back up under a temporary key then copied create-only): byte for byte,
    and no temporary key is left in the bucket; ``verify`` reads the blobs back."""
    from tb_footprint_plugin.engine.bucket_blobs import IN_MEMORY

    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    big = os.urandom(1 << 16) * ((IN_MEMORY >> 16) + 2)
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/baseline/checkpoint.bin"), big)
    s3_bucket.fs.invalidate_cache()
    before = _user(s3_bucket)
    o = _retire(url, "baseline", vault)
    assert o.status == Outcome.VERIFIED, o.reason
    assert hashlib.sha256(big).hexdigest() in _blobs(vault) and not _of(_user(s3_bucket), "baseline")
    checks = api.verify(url, backup_dir=vault)
    assert checks and all(c["ok"] for c in checks), checks
    (r,) = api.restore(url, run="baseline", backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.reason
    assert _user(s3_bucket) == before
    assert not [k for k in s3_bucket.hashes("logs") if k.startswith(STATE + "tmp/")]


def test_a_local_disk_failure_while_adding_the_blobs_leaves_the_run_as_it_was(s3_bucket, sweep_logdir, tmp_path,
                                                                            monkeypatch):
    """The local side failing (a full disk under the scratch folder) while the run's objects are
    added: the run is rolled back with ``no_space``, every object in the bucket as it was, no
    journal, lock or manifest left (it raised out of the retire with the journal standing)."""
    import errno

    from tb_footprint_plugin.engine import bucket_blobs

    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/scratch")

    monkeypatch.setattr(bucket_blobs.scratch, "scratch", full)
    o = _retire(url, "sweep/lr0", vault)
    monkeypatch.undo()
    assert o.status == Outcome.ROLLED_BACK and o.code == Failure.NO_SPACE, (o.status, o.code, o.reason)
    assert _user(s3_bucket) == before and not _manifests(url)
    assert not any(k.startswith((STATE + "locks/", STATE + "journal/")) for k in s3_bucket.hashes("logs"))
    assert _retire(url, "sweep/lr0", vault).status == Outcome.VERIFIED


def test_a_restores_release_waits_for_a_retire_whose_blobs_no_manifest_names_yet(s3_bucket, sweep_logdir, tmp_path):
    """The forget lock: a restore that releases its retirement's blobs while another run holding
    the same bytes is retired (its blobs, the same digests, added but named by no manifest yet)
    waits for that retire's manifest and forgets none of them; the second retirement's restore is
    byte for byte."""
    import threading
    import time

    url = s3_bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    run = "sweep/lr0"
    for k in _of(_user(s3_bucket), run):  # a run of the same bytes: the same blobs
        s3_bucket.fs.pipe_file(s3_bucket.key(f"logs/twin/{k[len(run) + 1:]}"),
                               s3_bucket.fs.cat_file(s3_bucket.key(f"logs/{k}")))
    s3_bucket.fs.invalidate_cache()
    before = _user(s3_bucket)
    first = _retire(url, run, vault)
    assert first.status == Outcome.VERIFIED, first.reason
    restored = []
    t = threading.Thread(target=lambda: restored.append(api.restore(url, run=run, backup_dir=vault)))

    def at_blobs_added():  # twin's objects are blobs (the first's), no manifest of this one yet
        t.start()
        time.sleep(3)
        assert not restored, "the restore forgot while a retire's add held the lock"

    faults.arm("retire.mid_move", at_blobs_added)
    try:
        second = _retire(url, "twin", vault)
    finally:
        faults.disarm_all()
    t.join(60)
    assert second.status == Outcome.VERIFIED, second.reason
    [[back]] = restored
    assert back.status == Outcome.RESTORED and "not all released" not in back.reason, back.reason
    assert set(_of(before, "twin").values()) <= _blobs(vault)
    (back,) = api.restore(url, run="twin", backup_dir=vault)
    assert back.status == Outcome.RESTORED, back.reason
    assert _user(s3_bucket) == before
    assert _blobs(vault) == set()


def test_an_object_written_during_the_restore_is_never_overwritten(bucket, sweep_logdir, tmp_path):
    """On each store: a key of the run written by someone after the restore listed it absent (right
    after the first put-back): the blob's put is create-only, so the new object stays as it is, the
    restore says so, and the original's blob is kept by purge."""
    url = bucket.upload(sweep_logdir, "logs")
    vault = str(tmp_path / "vault")
    before = _user(bucket)
    run = "sweep/lr0"
    assert _retire(url, run, vault).status == Outcome.VERIFIED
    key = f"{run}/notes/config.yaml"  # put back after the event file (keys in order)
    faults.arm("unretire.mid_move", lambda: bucket.fs.pipe_file(bucket.key(f"logs/{key}"), b"a late writer\n"))
    try:
        (back,) = api.restore(url, run=run, backup_dir=vault)
    finally:
        faults.disarm_all()
    assert back.status == Outcome.RESTORED and key in back.reason, back.reason
    bucket.fs.invalidate_cache()
    assert bucket.fs.cat_file(bucket.key(f"logs/{key}")) == b"a late writer\n"
    now = _user(bucket)
    assert {k: v for k, v in now.items() if k != key} == {k: v for k, v in before.items() if k != key}
    report = api.purge(url, yes=True, backup_dir=vault)
    assert [k["run"] for k in report.kept] == [run] and before[key] in _blobs(vault)
