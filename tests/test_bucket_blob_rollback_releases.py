"""Review R9 F8's follow-up (space, not safety): a bucket reduction or retirement with ``--backup-dir <folder>``
rolled back (a failure, a writer) put its originals back and dropped its manifest, but left its blobs in the folder,
where nothing ever freed them (a purge forgets only what a manifest lets go: 059177f). Now the command releases, at
its end, the claims its rolled-back operations made anew (``bucket_blobs.release_rolled_back``): the folder holds no
blob of that operation afterwards, while a blob a committed manifest names, or one this logdir claimed before the
command (an orphan: maybe the only copy of a run whose manifest went missing), stays. On the real moto server."""
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_posix import PosixStore

STATE = ".tb-footprint"
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}

pytestmark = pytest.mark.usefixtures("disarm_faults")

_n = iter(range(10_000))


@pytest.fixture(scope="module")
def prof_logdir(tmp_path_factory):
    """Runs of small profile files (dropped by ``DROP``): r1 and r2 hold the same bytes, r0 its own."""
    root = tmp_path_factory.mktemp("rbrel") / "logs"
    import time as _time
    for r in range(3):
        run = root / "prof" / f"r{r}"
        with synth.EventWriter(str(run)) as w:
            w.scalar("loss", 0, 1.0)
        plugins = run / "plugins" / "profile" / "2024_01_01_00_00_00"
        plugins.mkdir(parents=True)
        seed = b"r0" if r == 0 else b"twin"
        for i in range(6):
            (plugins / f"host{i}.xplane.pb").write_bytes(seed * 32 + bytes(3000 + 41 * i))
    old = _time.time() - 3600
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (old, old))
    return root


def _blobs(folder):
    return {r.sha for r in BlobStore(PosixStore(folder)).refs()} if os.path.isdir(folder) else set()


def _reduce(url, vault, runs):
    return api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0, runs=runs,
                             verify_backends=("python",)).outcomes


@pytest.mark.parametrize("step", ["reduce.blobs_added", "reduce.verify", "reduce.swap_record"])
def test_a_rolled_back_reduction_leaves_no_blob_in_the_folder(s3_bucket, prof_logdir, tmp_path, step):
    url = s3_bucket.upload(prof_logdir, f"rb{next(_n)}")
    vault = str(tmp_path / "vault")
    faults.arm(step, "raise")
    (o,) = _reduce(url, vault, ["prof/r0"])
    faults.disarm_all()
    assert o.status == Outcome.ROLLED_BACK, (o.status, o.reason)
    assert not RemoteFS(url).list_tree(f"{STATE}/manifests")
    assert _blobs(vault) == set(), "the rolled-back reduction's blobs stayed in the folder (orphans nothing frees)"
    # the run reduces again afterwards, and the folder holds its blobs then
    (o,) = _reduce(url, vault, ["prof/r0"])
    assert o.status == Outcome.VERIFIED, o.reason
    assert _blobs(vault)


def test_a_blob_a_committed_manifest_names_stays(s3_bucket, prof_logdir, tmp_path):
    url = s3_bucket.upload(prof_logdir, f"rb{next(_n)}")
    vault = str(tmp_path / "vault")
    (first,) = _reduce(url, vault, ["prof/r1"])
    assert first.status == Outcome.VERIFIED, first.reason
    kept = _blobs(vault)
    assert kept
    faults.arm("reduce.verify", "raise")
    (o,) = _reduce(url, vault, ["prof/r2"])  # the same bytes as r1's: the same blobs
    faults.disarm_all()
    assert o.status == Outcome.ROLLED_BACK, o.reason
    assert _blobs(vault) == kept
    (r,) = api.restore(url, run="prof/r1", backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.reason


def test_an_orphan_claimed_before_the_command_stays(s3_bucket, prof_logdir, tmp_path):
    """r1's manifest went missing (its blobs the only copy of its profiles: orphans); r2, the same bytes, is
    reduced and rolled back: its journal named those digests, but it never claimed them anew."""
    prefix = f"rb{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    vault = str(tmp_path / "vault")
    (first,) = _reduce(url, vault, ["prof/r1"])
    assert first.status == Outcome.VERIFIED, first.reason
    orphans = _blobs(vault)
    gone = s3_bucket.fs.find(s3_bucket.key(f"{prefix}/{STATE}/manifests"))
    assert gone
    for k in gone:
        s3_bucket.fs.rm(k)
    s3_bucket.fs.invalidate_cache()
    faults.arm("reduce.verify", "raise")
    (o,) = _reduce(url, vault, ["prof/r2"])
    faults.disarm_all()
    assert o.status == Outcome.ROLLED_BACK, o.reason
    assert orphans and _blobs(vault) == orphans, "a rollback released blobs it did not claim (another run's only copy)"


@pytest.mark.parametrize("step", ["retire.move", "retire.delete_record"])
def test_a_rolled_back_retirement_leaves_no_blob_in_the_folder(s3_bucket, prof_logdir, tmp_path, step):
    prefix = f"rb{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    vault = str(tmp_path / "vault")
    before = s3_bucket.hashes(prefix)
    faults.arm(step, "raise")
    rep = api.retire(url, api.retire_rule(runs=["prof/r0"]), dry_run=False, quiet_period=0, backup_dir=vault)
    faults.disarm_all()
    assert [o.status for o in rep.outcomes] == [Outcome.ROLLED_BACK], [o.reason for o in rep.outcomes]
    assert {k: v for k, v in s3_bucket.hashes(prefix).items() if not k.startswith(STATE + "/")} == \
        {k: v for k, v in before.items() if not k.startswith(STATE + "/")}
    assert _blobs(vault) == set(), "the rolled-back retirement's blobs stayed in the folder"


def test_the_release_never_waits_for_the_forget_lock_and_status_names_what_stayed(s3_bucket, prof_logdir, tmp_path):
    """Another operation adding (the forget lock held shared): the rolled-back reduction ends without waiting, its
    blobs left as orphans, which status names (``orphan_blobs``); nothing is lost."""
    from tb_footprint_plugin.codes import Finding
    from tb_footprint_plugin.storage.lock import held

    url = s3_bucket.upload(prof_logdir, f"rb{next(_n)}")
    vault = str(tmp_path / "vault")
    (first,) = _reduce(url, vault, ["prof/r1"])
    assert first.status == Outcome.VERIFIED, first.reason
    named = _blobs(vault)
    with held(os.path.join(vault, ".forget.lock"), shared=True):
        faults.arm("reduce.verify", "raise")
        (o,) = _reduce(url, vault, ["prof/r0"])
        faults.disarm_all()
    assert o.status == Outcome.ROLLED_BACK, o.reason
    left = _blobs(vault) - named
    assert left, "the release went on under a held lock"
    (f,) = [p for p in api.status(url, backup_dir=vault)["problems"] if p["code"] == Finding.ORPHAN_BLOBS]
    assert f["count"] == len(left)
