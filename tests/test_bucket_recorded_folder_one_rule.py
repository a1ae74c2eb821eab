"""A bucket logdir's local blob folder the manifests record, taken by one rule for every verb that looks in one
folder for many operations (``bucket_blob_folder.choose_folder``; issue #26, r37 W's notes and review R25 L3, L2):

- ``recover`` given no ``--backup-dir`` settles a reduction into the folder killed past its commit record from the
  folder its manifest records (it refused "give that folder with --backup-dir", as restore, purge, status and verify
  no longer did);
- several recorded folders: status and verify name them and what to pass (they looked in none and said nothing), a
  purge leaves their operations alone saying so (it marked them purged and freed none of their blobs), a restore
  given one folder for an operation recorded in another names that one;
- one planted manifest naming a folder that is not this logdir's refuses only its own operation, named with its
  manifest; the other operations are purged (it refused the whole purge);
- a reduction killed inside its blob add (``add.index_written``, ``add.pending_removed``) and rolled back by the next
  start leaves none of the claims it made anew (they stayed orphans, counted, never freed), while a blob another
  operation claimed before it (an orphan whose manifest went missing) stays.
On the real moto server."""
import json
import os

import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.remote import RemoteFS

from test_bucket_blob_rollback_releases import STATE, _blobs, _reduce, prof_logdir  # noqa: F401

pytestmark = pytest.mark.usefixtures("disarm_faults")

_n = iter(range(10_000))


def _manifests(url):
    """op id -> (key, document) of every manifest of the logdir at ``url``."""
    rfs = RemoteFS(url)
    out = {}
    for k in rfs.list_tree(f"{STATE}/manifests"):
        if k.endswith(".json"):
            doc = json.loads(rfs.read_bytes(k))
            out[doc["op_id"]] = (k, doc)
    return out


def _outside_state(s3_bucket, prefix):
    return {k: v for k, v in s3_bucket.hashes(prefix).items() if not k.startswith(STATE + "/")}


def test_recover_without_backup_dir_finishes_a_killed_reduction_from_the_recorded_folder(s3_bucket, prof_logdir,
                                                                                          tmp_path):
    prefix = f"of{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    before = _outside_state(s3_bucket, prefix)
    folder = str(tmp_path / "blobs")
    faults.arm("reduce.swap_record", kill)
    try:
        with pytest.raises(Killed):
            _reduce(url, folder, ["prof/r0"])
    finally:
        faults.disarm_all()
    outs = api.recover_logdir(url)  # no --backup-dir: the folder its manifest records
    assert [(o.action, o.code) for o in outs] == [("completed", "recovered")], \
        [(o.action, o.code, o.detail) for o in outs]
    res = api.verify(url)
    assert res and all(r["ok"] for r in res), res
    (back,) = api.restore(url, run="prof/r0")
    assert back.status == Outcome.RESTORED, back.reason
    assert _outside_state(s3_bucket, prefix) == before


@pytest.fixture
def two_folders(s3_bucket, prof_logdir, tmp_path):
    """prof/r0 reduced into folder F1, prof/r1 into F2 (both recorded, both this logdir's)."""
    prefix = f"of{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    before = _outside_state(s3_bucket, prefix)
    f1, f2 = str(tmp_path / "f1"), str(tmp_path / "f2")
    for folder, run in ((f1, "prof/r0"), (f2, "prof/r1")):
        (o,) = _reduce(url, folder, [run])
        assert o.status == Outcome.VERIFIED, o.reason
    return url, f1, f2, prefix, before


def test_several_recorded_folders_are_named_by_status_and_verify(two_folders):
    url, f1, f2, _prefix, _before = two_folders
    st = api.status(url)
    said = [p for p in st["problems"] if p["code"] == codes.Failure.RESTORE_BLOCKED]
    assert said and f1 in said[0]["detail"] and f2 in said[0]["detail"] and "--backup-dir" in said[0]["detail"], \
        st["problems"]
    res = api.verify(url)
    named = [r for r in res if r.get("code") == codes.Failure.RESTORE_BLOCKED and not r["ok"]]
    assert named and f1 in named[0]["verification"]["checks"][0]["detail"], res


def test_several_recorded_folders_a_purge_leaves_their_operations_alone_and_restores_take_each_own(
        two_folders, s3_bucket):
    url, f1, f2, prefix, before = two_folders
    blobs = (_blobs(f1), _blobs(f2))
    rep = api.purge(url, yes=True)
    left = [r for r in rep.refused if r.get("code") == codes.Failure.RESTORE_BLOCKED]
    assert sorted(r["run"] for r in left) == ["prof/r0", "prof/r1"], rep.to_dict()
    assert all(f1 in r["detail"] and f2 in r["detail"] for r in left), left
    assert not rep.ops, rep.to_dict()
    assert not any(doc.get("backup_purged") for _k, doc in _manifests(url).values())
    assert (_blobs(f1), _blobs(f2)) == blobs
    # a restore given F1 for the operation recorded in F2 names F2
    (wrong,) = api.restore(url, run="prof/r1", backup_dir=f1)
    assert wrong.status == Outcome.FAILED and f2 in wrong.reason, wrong.to_dict()
    # a restore takes each operation's own folder by itself
    res = api.restore(url)
    assert sorted(o.status.value for o in res) == ["restored", "restored"], [o.to_dict() for o in res]
    assert _outside_state(s3_bucket, prefix) == before


def test_one_planted_manifest_naming_a_foreign_folder_refuses_only_its_operation(s3_bucket, prof_logdir, tmp_path):
    """Review R25 L3: prof/r0 reduced into a folder, prof/r1 with server-side copies; r0's manifest edited (as a
    bucket writer can) to name a private folder of ours that is no blob folder of this logdir. The purge refuses r0's
    operation naming its manifest and that folder, writes nothing there, and purges r1's."""
    prefix = f"of{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    folder = str(tmp_path / "blobs")
    (r0,) = _reduce(url, folder, ["prof/r0"])
    (r1,) = _reduce(url, None, ["prof/r1"])
    assert r0.status == r1.status == Outcome.VERIFIED, (r0.reason, r1.reason)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "precious.txt").write_text("mine")
    seen = sorted(os.listdir(victim))
    rfs = RemoteFS(url)
    key, doc = _manifests(url)[r0.op_id]
    doc["blob_folder"] = str(victim)
    rfs.write_bytes(key, json.dumps(doc).encode())
    rep = api.purge(url, yes=True)
    assert [o["op_id"] for o in rep.ops] == [r1.op_id], rep.to_dict()
    (ref,) = [r for r in rep.refused if r.get("op_id") == r0.op_id]
    assert ref["code"] == codes.Failure.REFUSED and str(victim) in ref["detail"] and key.rsplit("/", 1)[-1] in \
        ref["detail"], ref
    assert sorted(os.listdir(victim)) == seen  # no .forget.lock, nothing read or written
    docs = _manifests(url)
    assert docs[r1.op_id][1].get("backup_purged") and not docs[r0.op_id][1].get("backup_purged")
    # r0's backups are all there: given its own folder, it is restored
    (back,) = api.restore(url, run="prof/r0", backup_dir=folder)
    assert back.status == Outcome.RESTORED, back.reason


def _killed_in_add(monkeypatch, step):
    """The blob store's failpoint: ``Killed`` at ``step`` of an add (once)."""
    hit = []

    def hook(s):
        if s == step and not hit:
            hit.append(s)
            raise Killed()

    monkeypatch.setattr(blobstore, "FAILPOINT", hook)
    return hit


@pytest.mark.parametrize("step", ["add.index_written", "add.pending_removed"])
@pytest.mark.parametrize("given", [True, False])
def test_a_reduction_killed_in_its_add_and_rolled_back_releases_its_new_claims(s3_bucket, prof_logdir, tmp_path,
                                                                              monkeypatch, step, given):
    """Review R25 L2. prof/r1 reduced first (its blobs stay: its manifest names them); prof/r0 killed in its add,
    rolled back by the next start (with the folder given, or by the one its neighbour's manifest records): none of
    r0's blobs is left, r1's are, and status names no orphan."""
    prefix = f"of{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    before = _outside_state(s3_bucket, prefix)
    folder = str(tmp_path / "blobs")
    (r1,) = _reduce(url, folder, ["prof/r1"])
    assert r1.status == Outcome.VERIFIED, r1.reason
    r1_blobs = _blobs(folder)
    hit = _killed_in_add(monkeypatch, step)
    with pytest.raises(Killed):
        _reduce(url, folder, ["prof/r0"])
    monkeypatch.setattr(blobstore, "FAILPOINT", None)
    assert hit and _blobs(folder) > r1_blobs  # the add's claims are listed: what the start must release
    outs = api.recover_logdir(url, folder if given else None)
    assert [o.action for o in outs] == ["rolled_back"], [(o.action, o.code, o.detail) for o in outs]
    assert _blobs(folder) == r1_blobs, "the rolled-back reduction's new claims stayed (orphans nothing frees)"
    st = api.status(url, backup_dir=folder)
    assert not [p for p in st["problems"] if p["code"] == codes.Finding.ORPHAN_BLOBS], st["problems"]
    fresh = os.path.join(folder, "fresh")
    assert not os.path.isdir(fresh) or not os.listdir(fresh)  # the records went with the rollback
    (back,) = api.restore(url, run="prof/r1")
    assert back.status == Outcome.RESTORED, back.reason
    assert _outside_state(s3_bucket, prefix) == before


def test_a_killed_add_never_releases_an_orphan_it_found_claimed(s3_bucket, prof_logdir, tmp_path, monkeypatch):
    """r1's manifest went missing (its blobs the only copy of its profiles: orphans); r2, the same bytes, is killed
    in its add and rolled back by the next start: it claimed none of them anew, so every one stays."""
    prefix = f"of{next(_n)}"
    url = s3_bucket.upload(prof_logdir, prefix)
    folder = str(tmp_path / "blobs")
    (r1,) = _reduce(url, folder, ["prof/r1"])
    assert r1.status == Outcome.VERIFIED, r1.reason
    orphans = _blobs(folder)
    key, _doc = _manifests(url)[r1.op_id]
    s3_bucket.fs.rm(s3_bucket.key(f"{prefix}/{key}"))
    s3_bucket.fs.invalidate_cache()
    assert r1.op_id not in _manifests(url)
    _killed_in_add(monkeypatch, "add.index_written")
    with pytest.raises(Killed):
        _reduce(url, folder, ["prof/r2"])
    monkeypatch.setattr(blobstore, "FAILPOINT", None)
    outs = api.recover_logdir(url, folder)
    assert [o.action for o in outs] == ["rolled_back"], [(o.action, o.code, o.detail) for o in outs]
    assert orphans and _blobs(folder) >= orphans, "a rollback released blobs it did not claim anew"
