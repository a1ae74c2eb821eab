"""A blob folder two bucket logdirs share (``--backup-dir FOLDER`` given to both: claims per
owner), garbage over the index object B's reduce wrote (review R23 T5, HIGH). Before: the
rebuild and status asked whether a blob was listed under *any* owner, while a restore needs the
claim under the entry's own owner; A's claims on the same digests made B's look listed, so no
rebuild ran for B, both statuses said "none is hidden by it … you may remove this file", and once
the user did, A's purge destroyed B's originals (t5). With distinct bytes (t6) A's status alone
said it: removed, B's blobs were listed by nothing. Now a claim is counted per (sha256, owner):
B's start lists its claims again (on A's rows, hashed; its own blobs from the packs), and no
logdir's status calls a shared folder's damaged index object removable on its own manifests."""
import glob
import os
import shutil

import pytest

from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine.bucket_identity import BLOB_OWNER
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from test_pack_index_rebuilt_bucket import DROP, GARBAGE, STATE, _index_objects, _user, demo_logdir  # noqa: F401

pytestmark = pytest.mark.usefixtures("disarm_faults")
REMOVE = "you may remove this file"
_n = iter(range(10_000))


def _two(s3_bucket, tmp_path, a_dir, b_dir):
    """A and B uploaded and drop-reduced into one folder, A first: (a, b, folder, B's objects before,
    B's prefix, the index objects B's reduce wrote)."""
    n = next(_n)
    a = s3_bucket.upload(a_dir, f"shA{n}")
    b = s3_bucket.upload(b_dir, f"shB{n}")
    folder = str(tmp_path / "shared-blobs")
    b_before = _user(s3_bucket, f"shB{n}")
    for url in (a, b):
        rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
        assert len([o for o in rep.outcomes if o.status == codes.Outcome.VERIFIED]) >= 5, rep.to_dict()
        if url == a:
            a_index = set(_index_objects(folder))
    b_index = sorted(set(_index_objects(folder)) - a_index)
    assert b_index
    return a, b, folder, b_before, f"shB{n}", b_index


def _damage(paths):
    for p in paths:
        with open(p, "wb") as f:
            f.write(GARBAGE)


def _said(url, folder):
    return [p for p in api.status(url, backup_dir=folder)["problems"] if p.get("path", "").startswith(folder)]


def _b_claims_listed(b, folder):
    bs = BlobStore(PosixStore(folder))
    need = {(f["sha256"], f[BLOB_OWNER]) for m in api.operations(b, backup_dir=folder) for f in m.get("files", [])
            if f.get("kept_in") == "blobstore"}
    assert need
    return all(who in bs.owners(sha) for sha, who in need)


def _follow_advice_then_purge_a_and_restore_b(s3_bucket, a, b, folder, b_before, b_prefix, damaged):
    """The damaged object removed (what status now says only once B listed its claims again), A
    purged: B's restore gives every object back."""
    for p in damaged:
        os.unlink(p)
    api.purge(a, yes=True, backup_dir=folder)
    res = api.restore(b, backup_dir=folder)
    assert res and {o.status.value for o in res} == {"restored"}, [o.to_dict() for o in res]
    assert _user(s3_bucket, b_prefix) == b_before


def test_same_bytes_b_claims_listed_again_and_never_called_removable(s3_bucket, demo_logdir, tmp_path):
    """t5: A and B hold the same files (every blob claimed by both)."""
    a, b, folder, b_before, b_prefix, damaged = _two(s3_bucket, tmp_path, demo_logdir, demo_logdir)
    _damage(damaged)
    assert not _b_claims_listed(b, folder)
    for url in (a, b):
        said = _said(url, folder)
        assert [p["path"] for p in said] == damaged, said
        assert not [p for p in said if REMOVE in p["detail"]], said
    # B's own status names what it hides (its claims were only in the damaged object)
    assert all("read as missing" in p["detail"] and "recover" in p["detail"] for p in _said(b, folder))
    # A's recover has nothing of A's to list again, and A's status says keep it (shared with B)
    api.recover_logdir(a, backup_dir=folder)
    said = _said(a, folder)
    assert said and all("keep it" in p["detail"] and "shared" in p["detail"] for p in said), said
    outs = api.recover_logdir(b, backup_dir=folder)
    assert [o for o in outs if o.code == Finding.PACK_INDEX_REBUILT], [vars(o) for o in outs]
    assert not [o for o in outs if o.action == codes.Recovery.FAILED], [vars(o) for o in outs]
    assert _b_claims_listed(b, folder)
    assert all(open(p, "rb").read() == GARBAGE for p in damaged)
    said = _said(b, folder)
    assert said and not [p for p in said if REMOVE in p["detail"] or "read as missing" in p["detail"]], said
    _follow_advice_then_purge_a_and_restore_b(s3_bucket, a, b, folder, b_before, b_prefix, damaged)


def test_distinct_bytes_a_never_calls_it_removable_and_b_finds_its_blobs(s3_bucket, demo_logdir, tmp_path):
    """t6: B's profile files differ by one byte (B's blobs are B's alone)."""
    b_dir = tmp_path / "demoB"
    shutil.copytree(demo_logdir, b_dir)
    for p in b_dir.rglob("*"):
        if p.is_file() and ("/plugins/profile/" in str(p) or p.name.endswith(".pt.trace.json")):
            p.write_bytes(p.read_bytes() + b"B")
    a, b, folder, b_before, b_prefix, damaged = _two(s3_bucket, tmp_path, demo_logdir, b_dir)
    _damage(damaged)
    api.recover_logdir(a, backup_dir=folder)
    said = _said(a, folder)
    assert [p["path"] for p in said] == damaged, said
    assert all(REMOVE not in p["detail"] and "keep it" in p["detail"] for p in said), said
    assert not _b_claims_listed(b, folder)
    outs = api.recover_logdir(b, backup_dir=folder)
    assert [o for o in outs if o.code == Finding.PACK_INDEX_REBUILT], [vars(o) for o in outs]
    assert _b_claims_listed(b, folder)
    _follow_advice_then_purge_a_and_restore_b(s3_bucket, a, b, folder, b_before, b_prefix, damaged)


def test_a_folder_one_logdir_uses_alone_is_still_said_removable(s3_bucket, demo_logdir, tmp_path):
    """The shared words only where another logdir's place is recorded: one logdir alone, once its
    claims are listed again, is told it may remove the object (as before)."""
    url = s3_bucket.upload(demo_logdir, f"shC{next(_n)}")
    folder = str(tmp_path / "alone")
    api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
    damaged = _index_objects(folder)
    _damage(damaged)
    api.recover_logdir(url, backup_dir=folder)
    said = _said(url, folder)
    assert said and all(REMOVE in p["detail"] for p in said), said
    assert glob.glob(os.path.join(folder, "places", "*.json"))


def test_b_blobs_left_listed_by_nothing_are_found_after_bs_restore_said_so(s3_bucket, demo_logdir, tmp_path):
    """t6's tail: B's damaged index object removed before B started (as 3bf6099's status advised),
    A purged: B's pack and lone blobs are listed by nothing (no object is damaged any more). A
    start does not list the folder's data objects (a ``stat`` of B's mark only): B's restore
    refuses each run naming the data objects no index lists and ``recover``, and leaves the mark
    (its own look, ``find_hidden``, off here: it finds them itself since R23 T13,
    test_unlisted_packs_kept); B's ``recover`` then finds them (hashed) and lists them; B's
    restore gives every object back."""
    from tb_footprint_plugin.engine import bucket_blob_index, bucket_restore

    b_dir = tmp_path / "demoB"
    shutil.copytree(demo_logdir, b_dir)
    for p in b_dir.rglob("*"):
        if p.is_file() and ("/plugins/profile/" in str(p) or p.name.endswith(".pt.trace.json")):
            p.write_bytes(p.read_bytes() + b"B")
    a, b, folder, b_before, b_prefix, damaged = _two(s3_bucket, tmp_path, demo_logdir, b_dir)
    for p in damaged:
        os.unlink(p)
    old = __import__("time").time() - bucket_blob_index.UNLISTED_AFTER - 100  # within a purge's grace
    for p in glob.glob(os.path.join(folder, "data", "**", "*"), recursive=True):
        if os.path.isfile(p):
            os.utime(p, (old, old))
    api.purge(a, yes=True, backup_dir=folder)
    assert not _b_claims_listed(b, folder)
    outs = api.recover_logdir(b, backup_dir=folder)  # no mark: no look
    assert not [o for o in outs if o.code == Finding.PACK_INDEX_REBUILT], [vars(o) for o in outs]
    look = bucket_restore.find_hidden
    bucket_restore.find_hidden = lambda *a, **k: None
    try:
        res = api.restore(b, backup_dir=folder)
    finally:
        bucket_restore.find_hidden = look
    assert res and all(o.status == codes.Outcome.FAILED for o in res), [o.to_dict() for o in res]
    assert all(o.code == codes.Failure.BACKUP_INDEX_DAMAGED and "no index object lists" in o.reason
               and "recover" in o.reason for o in res), [o.to_dict() for o in res]
    assert os.listdir(os.path.join(folder, bucket_blob_index.LOST_MARKS))
    outs = api.recover_logdir(b, backup_dir=folder)
    rebuilt = [o for o in outs if o.code == Finding.PACK_INDEX_REBUILT]
    assert rebuilt and "no index object lists" in rebuilt[0].detail, [vars(o) for o in outs]
    assert _b_claims_listed(b, folder)
    assert not os.listdir(os.path.join(folder, bucket_blob_index.LOST_MARKS))
    res = api.restore(b, backup_dir=folder)
    assert res and {o.status.value for o in res} == {"restored"}, [o.to_dict() for o in res]
    assert _user(s3_bucket, b_prefix) == b_before
