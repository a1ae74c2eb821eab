"""A bucket logdir with a local vault of blobs (issue #26 item 3, #27): ``reduce s3://… --backup-dir
/local/folder`` keeps the originals as verified, packed, content-addressed blobs in that folder;
the journal, locks and manifests stay in the bucket; restore streams them back byte for byte;
purge forgets them (never one another operation still names)."""
import json
import os
import stat

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_posix import PosixStore

from test_objstore import _write_rewrite_logdir

STATE = ".tb-footprint"
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.fixture(scope="module")
def mixed_logdir(tmp_path_factory):
    """The rewrite logdir (an event file archive samples, PyTorch traces lossless gzips) plus
    runs of many small profile files (dropped by ``DROP``)."""
    root = _write_rewrite_logdir(tmp_path_factory.mktemp("blobvault") / "logs")
    import time as _time
    for r in range(3):
        run = root / "prof" / f"r{r}"
        with synth.EventWriter(str(run)) as w:
            w.scalar("loss", 0, 1.0)
        plugins = run / "plugins" / "profile" / "2024_01_01_00_00_00"
        plugins.mkdir(parents=True)
        for i in range(12):
            (plugins / f"host{i}.xplane.pb").write_bytes(os.urandom(64) + bytes(2000 + 37 * i))
    old = _time.time() - 3600
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (old, old))
    return root


_n = iter(range(10_000))


def _user(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(STATE + "/")}


def _twin_profiles(url):
    """prof/r2's xplane files made byte copies of prof/r1's: the two runs share every profile blob."""
    rfs = RemoteFS(url)
    for k in list(rfs.list_tree("prof/r1")):
        if k.endswith(".xplane.pb"):
            rfs.write_bytes(k.replace("prof/r1", "prof/r2"), rfs.read_bytes(k))


def _manifests(url):
    rfs = RemoteFS(url)
    return [json.loads(rfs.read_bytes(k)) for k in rfs.list_tree(f"{STATE}/manifests")]


def _vault_objects(folder):
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, _, ns in os.walk(folder) for n in ns
                  if not n.startswith("."))


def test_reduce_keeps_originals_as_verified_blobs_in_the_local_folder_and_restore_gives_them_back(
        s3_bucket, mixed_logdir, tmp_path):
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, prefix)
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    ok = [o for o in rep.outcomes if o.status == Outcome.VERIFIED]
    assert len(ok) == 4, [(o.run, o.status, o.reason) for o in rep.outcomes]
    after = _user(s3_bucket, prefix)
    assert len(after) < len(before)
    # the backups are blobs in the folder (packed: a few objects for ~38 files), none in the bucket
    assert not [k for k in s3_bucket.hashes(prefix) if k.startswith(f"{STATE}/blobs/")]
    assert stat.S_IMODE(os.stat(vault).st_mode) == 0o700
    objs = _vault_objects(vault)
    assert any(o.startswith("index/") for o in objs) and any(o.endswith(".pack") for o in objs), objs
    ms = _manifests(url)
    files = [f for m in ms for f in m["files"]]
    assert len(files) == len(before) - len(after)
    assert all(f.get("kept_in") == "blobstore" and "backup" not in f and len(f["sha256"]) == 64 for f in files)
    bs = BlobStore(PosixStore(vault))
    for f in files:  # every manifest entry names a blob that reads back to the original
        with bs.open(f["sha256"]) as b:
            assert b.read() is not None
    # status, history and verify see them
    st = api.status(url, backup_dir=vault)
    assert vault in st["vaults"] and not st["unfinished_operations"]
    checks = api.verify(url, backup_dir=vault)
    assert checks and all(c["ok"] for c in checks), checks
    outs = api.restore(url, backup_dir=vault)
    assert {o.status for o in outs} == {Outcome.RESTORED}, [o.to_dict() for o in outs]
    assert _user(s3_bucket, prefix) == before


def test_a_lossless_rewrite_keeps_the_replaced_originals_as_blobs(s3_bucket, mixed_logdir, tmp_path):
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, prefix)
    rep = api.reduce_logdir(url, backup_dir=vault, policy="lossless", dry_run=False, quiet_period=0,
                            runs=["torch/resnet"], verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    assert _user(s3_bucket, prefix) != before
    (m,) = _manifests(url)
    assert m["files"] and all(f["kept_in"] == "blobstore" and "backup" not in f for f in m["files"])
    # each replaced original is downloaded once (for its backup): the transform reads the blob
    replaced = sum(f["size"] for f in m["files"])
    # (1.41x measured, the rest the scan and the read-back; 2.41x when the transform downloaded them again)
    assert rep.requests["bytes_down"] < 1.75 * replaced, (rep.requests, replaced)
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.reason
    assert _user(s3_bucket, prefix) == before


def test_restore_without_the_folder_is_refused_before_anything_is_put_back(s3_bucket, mixed_logdir, tmp_path):
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            runs=["prof/r0"], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    reduced = _user(s3_bucket, prefix)
    # the folder its manifest records is used when it is there (R21 PD20): moved away, nothing to use
    os.rename(vault, vault + ".away")
    (r,) = api.restore(url)
    assert r.status == Outcome.FAILED and r.code == Failure.RESTORE_BLOCKED, r.to_dict()
    assert "--backup-dir" in r.reason
    assert _user(s3_bucket, prefix) == reduced


def test_purge_forgets_the_blobs_but_never_one_another_operation_names(s3_bucket, mixed_logdir, tmp_path):
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    _twin_profiles(url)  # one blob serves both operations
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            runs=["prof/r1", "prof/r2"], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
    r2 = next(o for o in rep.outcomes if o.run == "prof/r2")
    r1 = next(o for o in rep.outcomes if o.run == "prof/r1")
    res = api.purge(url, yes=True, op=r1.op_id, backup_dir=vault)
    assert res.ops and not res.kept, res.to_dict()
    bs = BlobStore(PosixStore(vault))
    (m2,) = [m for m in _manifests(url) if m["op"] == r2.op_id]
    assert all(bs.check(f["sha256"]) is None for f in m2["files"])  # still there for r2
    before = _user(s3_bucket, prefix)
    (r,) = api.restore(url, run="prof/r2", backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.reason
    assert len(_user(s3_bucket, prefix)) == len(before) + len(m2["files"])
    api.purge(url, yes=True, backup_dir=vault)
    assert BlobStore(PosixStore(vault)).stats()["blobs"] == 0


def test_the_report_counts_the_bucket_freed_at_once_and_the_folder_as_stored(s3_bucket, mixed_logdir, tmp_path):
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    removed = rep.removed_from_logdir_bytes
    stored = BlobStore(PosixStore(vault)).stats()["stored_bytes"]
    assert 0 < stored < removed  # compressed, packed
    # what left the bucket, less the blobs as stored (and the manifests the bucket holds now)
    assert rep.disk_in_use_before_bytes - rep.disk_in_use_after_bytes == rep.freed_now_bytes
    assert removed - stored - (64 << 10) < rep.freed_now_bytes < removed - stored
    from tb_footprint_plugin.api.common import bucket_of
    from tb_footprint_plugin.engine import bucket as bk
    ostore, v = bucket_of(url, vault)
    r = bk.retention_report(ostore, v, removed)
    assert r["freed_now"] == removed and any(vault in line for line in r["lines"])


def test_a_purge_waits_for_an_operation_whose_blobs_no_manifest_names_yet(s3_bucket, mixed_logdir, tmp_path):
    """The forget lock: a purge of an operation whose blobs a reduce under way has just added
    again (same bytes, its manifest not written yet) must not forget them."""
    import threading
    import time

    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    _twin_profiles(url)
    (first,) = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                                 runs=["prof/r1"], verify_backends=("python",)).outcomes
    assert first.status == Outcome.VERIFIED
    purged = []

    def purge_now():
        purged.append(api.purge(url, yes=True, op=first.op_id, backup_dir=vault))

    t = threading.Thread(target=purge_now)

    def at_blobs_added():  # r2's originals are blobs now (the same as r1's), no manifest names them
        t.start()
        time.sleep(3)
        assert not purged, "the purge forgot while an add held the lock"

    faults.arm("reduce.blobs_added", at_blobs_added)
    (second,) = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                                  runs=["prof/r2"], verify_backends=("python",)).outcomes
    faults.disarm_all()
    t.join(60)
    assert second.status == Outcome.VERIFIED, second.reason
    assert purged and purged[0].ops
    (m,) = [m for m in _manifests(url) if m["op"] == second.op_id]
    bs = BlobStore(PosixStore(vault))
    assert all(bs.check(f["sha256"]) is None for f in m["files"])
    (r,) = api.restore(url, run="prof/r2", backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.reason


def _reduced(s3_bucket, mixed_logdir, tmp_path, run="prof/r0"):
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / f"vault{prefix}")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            runs=[run], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    return prefix, url, vault


def test_a_damaged_blob_is_refused_before_anything_is_put_back(s3_bucket, mixed_logdir, tmp_path):
    prefix, url, vault = _reduced(s3_bucket, mixed_logdir, tmp_path)
    reduced = _user(s3_bucket, prefix)
    (pack,) = [o for o in _vault_objects(vault) if o.endswith(".pack")]
    p = os.path.join(vault, pack)
    data = bytearray(open(p, "rb").read())
    data[-5] ^= 0xFF  # the last blob of the pack: every earlier one still reads back
    os.chmod(p, 0o600)
    open(p, "wb").write(bytes(data))
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.FAILED and r.code == Failure.BACKUP_DAMAGED, r.to_dict()
    assert vault in r.reason
    assert _user(s3_bucket, prefix) == reduced  # nothing put back
    checks = api.verify(url, backup_dir=vault)
    assert [c["ok"] for c in checks] == [False]


def test_a_manifest_naming_a_blob_another_logdir_added_is_refused(s3_bucket, mixed_logdir, tmp_path):
    """Manifests are untrusted: one edited to name a blob of another logdir sharing the folder
    never copies that blob's bytes into this bucket."""
    prefix, url, vault = _reduced(s3_bucket, mixed_logdir, tmp_path)
    other = s3_bucket.upload(mixed_logdir, prefix + "-other")
    secret = b"another logdir's private bytes" * 100
    from tb_footprint_plugin.storage.blobstore import BlobSource
    import hashlib
    import io
    sha = hashlib.sha256(secret).hexdigest()
    BlobStore(PosixStore(vault), owner="bucket:someone-else").add(
        [BlobSource(sha=sha, size=len(secret), open=lambda: io.BytesIO(secret))])
    rfs = RemoteFS(url)
    (key,) = list(rfs.list_tree(f"{STATE}/manifests"))
    m = json.loads(rfs.read_bytes(key))
    m["files"][0]["sha256"] = sha
    m["files"][0]["size"] = len(secret)
    m["files"][0]["checksums"] = {}
    rfs.write_bytes(key, json.dumps(m).encode())
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.FAILED, r.to_dict()
    assert secret not in b"".join(rfs.read_bytes(k) for k in rfs.list_tree() if not k.startswith(STATE))
    assert other  # the other logdir is untouched by any of this


def test_the_cli_reduces_a_bucket_into_a_local_folder_and_every_verb_finds_the_backups(
        s3_bucket, mixed_logdir, tmp_path, capsys):
    from tb_footprint_plugin import cli

    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "cli-vault")
    before = _user(s3_bucket, prefix)
    assert cli.main(["reduce", url, "--policy", "lossless", "--quiet-period", "0", "--verify", "python",
                     "--backup-dir", vault, "--yes"]) == 0, capsys.readouterr()
    assert _user(s3_bucket, prefix) != before and os.path.isdir(os.path.join(vault, "index"))
    capsys.readouterr()
    assert cli.main(["status", url, "--backup-dir", vault, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert vault in st["vaults"] and st["operations"]
    assert 0 < st["vault_stored_bytes"] < st["vault_bytes"] and st["vault_objects"] >= 2
    assert cli.main(["history", url]) == 0  # the manifests are in the bucket
    assert cli.main(["verify", url, "--backup-dir", vault]) == 0
    assert cli.main(["restore", url, "--all", "--backup-dir", vault, "--yes"]) == 0, capsys.readouterr()
    assert _user(s3_bucket, prefix) == before
    assert cli.main(["purge", url, "--backup-dir", vault, "--yes"]) == 0, capsys.readouterr()
    assert BlobStore(PosixStore(vault)).stats()["blobs"] == 0


def test_server_side_copies_made_before_restore_and_purge_beside_blobs(s3_bucket, mixed_logdir, tmp_path):
    """Manifests with backup keys (server-side copies, no sha256: what every earlier version
    wrote) and manifests of blobs in one bucket: a restore and a purge given the folder settle
    both kinds."""
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, prefix)
    (old,) = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["prof/r0"],
                               verify_backends=("python",)).outcomes
    (new,) = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                               runs=["prof/r1"], verify_backends=("python",)).outcomes
    assert old.status == new.status == Outcome.VERIFIED
    kinds = {m["op"]: {("backup" in f, "sha256" in f) for f in m["files"]} for m in _manifests(url)}
    assert kinds == {old.op_id: {(True, False)}, new.op_id: {(False, True)}}
    outs = api.restore(url, backup_dir=vault)
    assert sorted(o.status for o in outs) == [Outcome.RESTORED] * 2, [o.to_dict() for o in outs]
    assert _user(s3_bucket, prefix) == before
    rep = api.purge(url, yes=True, backup_dir=vault)
    assert sorted(o["op_id"] for o in rep.ops) == sorted([old.op_id, new.op_id])
    assert not [k for k in s3_bucket.hashes(prefix) if k.startswith(f"{STATE}/blobs/")]
    assert BlobStore(PosixStore(vault)).stats()["blobs"] == 0


def test_round_trip_on_every_object_store(bucket, mixed_logdir, tmp_path):
    """The put-backs are the store's conditional writes (S3, GCS, Azure): byte-identical on each."""
    prefix = f"bv{next(_n)}"
    url = bucket.upload(mixed_logdir, prefix)
    vault = str(tmp_path / "vault")
    before = _user(bucket, prefix)
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                            runs=["prof/r0", "torch/resnet"], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2, [o.reason for o in rep.outcomes]
    assert _user(bucket, prefix) != before
    outs = api.restore(url, backup_dir=vault)
    assert [o.status for o in outs] == [Outcome.RESTORED] * 2, [o.to_dict() for o in outs]
    assert _user(bucket, prefix) == before


def test_a_plan_writes_nothing_and_a_folder_others_may_write_to_is_refused(s3_bucket, mixed_logdir, tmp_path):
    from tb_footprint_plugin.storage.private import NotPrivate

    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    vault = tmp_path / "not-yet"
    p = api.plan(url, DROP, backup_dir=str(vault), quiet_period=0)
    assert p.removable_bytes > 0 and not vault.exists()
    assert any(str(vault) in line for line in p.notes)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    before = _user(s3_bucket, prefix)
    with pytest.raises(NotPrivate, match=str(shared)):
        api.reduce_logdir(url, backup_dir=str(shared), policy=DROP, dry_run=False, quiet_period=0)
    assert _user(s3_bucket, prefix) == before and os.listdir(shared) == []


def test_a_restore_given_another_folder_says_where_the_blobs_were_kept(s3_bucket, mixed_logdir, tmp_path):
    """Shard workers on several machines each keep their blobs in their own folder: a restore
    elsewhere is refused before anything is put back, naming the folder and host to restore on."""
    import socket

    prefix, url, vault = _reduced(s3_bucket, mixed_logdir, tmp_path)
    reduced = _user(s3_bucket, prefix)
    (r,) = api.restore(url, backup_dir=str(tmp_path / "elsewhere"))
    assert r.status == Outcome.FAILED and r.code == Failure.BACKUP_DAMAGED, r.to_dict()
    assert repr(vault) in r.reason and socket.gethostname() in r.reason
    assert _user(s3_bucket, prefix) == reduced
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.reason


def test_a_key_with_dotdot_segments_leaves_its_run_refused_and_the_others_reduce(s3_bucket, mixed_logdir, tmp_path):
    """S3 keeps a key like ``run/plugins/../../../<elsewhere>/x`` as it is: with a vault of blobs its
    run is refused with a code (its backup is never read), the other runs reduce, nothing is left
    unfinished, and the object it points at is untouched."""
    prefix = f"bv{next(_n)}"
    url = s3_bucket.upload(mixed_logdir, prefix)
    neighbour = f"{prefix}-n"
    s3_bucket.fs.pipe_file(s3_bucket.key(f"{neighbour}/x.xplane.pb"), b"neighbour")
    evil = f"prof/r0/plugins/profile/2024_01_01_00_00_00/../../../../../{neighbour}/x.xplane.pb"
    s3_bucket.fs.pipe_file(s3_bucket.key(f"{prefix}/{evil}"), b"planted")
    s3_bucket.fs.invalidate_cache()
    outs = {o.run: o for o in api.reduce_logdir(url, backup_dir=str(tmp_path / "vault"), policy=DROP,
                                                dry_run=False, quiet_period=0,
                                                verify_backends=("python",)).outcomes}
    assert outs["prof/r0"].status != Outcome.VERIFIED and outs["prof/r0"].code == Failure.REFUSED, \
        outs["prof/r0"].to_dict()
    assert outs["prof/r1"].status == Outcome.VERIFIED, outs["prof/r1"].to_dict()
    assert s3_bucket.hashes(neighbour) and not api.status(url, backup_dir=str(tmp_path / "vault"))["unfinished_operations"]
