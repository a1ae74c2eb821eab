"""A bucket restore finds the blob folder its reduction recorded (review R21 PD20, restore half): a
disk restores from the vault it recorded, a bucket answered "give that folder with --backup-dir"
though each manifest records ``blob_folder`` and ``host``. Now the recorded folder is used on
that host once it is a folder of ours (the disk vault's rule); a manifest edited to name another
user's folder is refused naming it, and nothing there is read or changed. On moto."""
import json
import os
import pwd
import shutil

import pytest

from tb_footprint_plugin import api, codes, demo
from tb_footprint_plugin.storage.remote import RemoteFS

pytestmark = pytest.mark.usefixtures("disarm_faults")

STATE = ".tb-footprint"
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
_n = iter(range(10_000))


@pytest.fixture(scope="module")
def demo_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded") / "demo"
    demo.generate_demo(str(root), scale=0.05)
    for p in root.glob(".footprint-demo*"):
        p.unlink()
    return root


@pytest.fixture
def reduced(s3_bucket, demo_logdir, tmp_path):
    prefix = f"rec{next(_n)}"
    url = s3_bucket.upload(demo_logdir, prefix)
    folder = str(tmp_path / "blobs")
    before = s3_bucket.hashes(prefix, skip=(STATE + "/",))
    rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
    assert len([o for o in rep.outcomes if o.status == codes.Outcome.VERIFIED]) >= 5, rep.to_dict()
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) != before
    return url, folder, before, prefix


def _tree(folder):
    out = {}
    for d, _ds, names in os.walk(folder):
        for n in names:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[os.path.relpath(p, folder)] = (st.st_size, st.st_mtime_ns, st.st_uid)
    return out


def test_restore_without_backup_dir_uses_the_folder_the_manifests_record(reduced, s3_bucket):
    url, folder, before, prefix = reduced
    res = api.restore(url)
    assert res and {o.status.value for o in res} == {"restored"}, [o.to_dict() for o in res]
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) == before


def test_a_manifest_naming_another_users_folder_is_refused_and_nothing_there_is_touched(reduced, s3_bucket, tmp_path):
    """The blob folder copied whole to a folder owned by another Unix user (``nobody``), and each
    manifest edited to name it: the restore refuses every run naming that folder
    (``state_not_ours``), the bucket keeps the reduced runs, and the folder is as it was."""
    url, folder, _before, prefix = reduced
    theirs = str(tmp_path / "theirs")
    shutil.copytree(folder, theirs)
    other = pwd.getpwnam("nobody")
    for d, _ds, names in os.walk(theirs):
        for p in [d] + [os.path.join(d, n) for n in names]:
            os.chown(p, other.pw_uid, other.pw_gid)
    rfs = RemoteFS(url)
    keys = [k for k in rfs.list_tree(f"{STATE}/manifests") if k.endswith(".json")]
    assert keys
    for k in keys:
        doc = json.loads(rfs.read_bytes(k))
        assert doc["blob_folder"] == folder
        doc["blob_folder"] = theirs
        rfs.write_bytes(k, json.dumps(doc).encode())
    seen = _tree(theirs)
    after_reduce = s3_bucket.hashes(prefix, skip=(STATE + "/",))
    res = api.restore(url)
    assert res and all(o.status == codes.Outcome.FAILED and o.code == codes.Failure.STATE_NOT_OURS
                       and theirs in o.reason for o in res), [o.to_dict() for o in res]
    assert _tree(theirs) == seen
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) == after_reduce
    # given with --backup-dir, the folder of ours still restores every run byte for byte
    res = api.restore(url, backup_dir=folder)
    assert res and {o.status.value for o in res} == {"restored"}, [o.to_dict() for o in res]


def test_purge_without_backup_dir_frees_what_it_says_in_the_folder_the_manifests_record(reduced):
    """Review R24 F4: a purge given no ``--backup-dir`` said "freed N" and left every blob in the
    recorded folder (a later purge given the folder freed them); now it takes the folder a restore
    takes, and frees there what it says."""
    from tb_footprint_plugin.storage.blobstore import BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore

    url, folder, _before, _prefix = reduced
    held = sum(r.length for r in BlobStore(PosixStore(folder)).refs())
    assert held > 0
    rep = api.purge(url, yes=True)
    assert rep.ops and rep.freed_bytes > 0, rep.to_dict()
    left = sum(r.length for r in BlobStore(PosixStore(folder)).refs())
    assert left < held, (held, left)
    assert (rep.folder_freed_bytes or 0) > 0, rep.to_dict()  # said as the folder's, as with --backup-dir


def test_a_retired_runs_restore_without_backup_dir_uses_the_folder_its_retirement_records(s3_bucket, demo_logdir,
                                                                                          tmp_path):
    """A retirement's entries are under ``runs``: the recorded folder was looked for in its top-level
    ``files`` only, so its restore asked for ``--backup-dir`` where a reduction's did not (R24 F4's note)."""
    prefix = f"rec{next(_n)}"
    url = s3_bucket.upload(demo_logdir, prefix)
    folder = str(tmp_path / "blobs")
    before = s3_bucket.hashes(prefix, skip=(STATE + "/",))
    (o,) = api.retire(url, api.retire_rule(runs=["jax_profile"]), dry_run=False, backup_dir=folder,
                      quiet_period=0).outcomes
    assert o.status == codes.Outcome.VERIFIED, o.reason
    (back,) = api.restore(url, run="jax_profile")
    assert back.status == codes.Outcome.RESTORED, back.to_dict()
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) == before
