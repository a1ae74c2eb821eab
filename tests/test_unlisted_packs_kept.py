"""Packed backups a missing index row hides are never swept, and are named and found again
(issue #26: review R23 T12's remainder, R23 T13, helper F3's remainder). A bucket logdir's local
blob folder (``--backup-dir FOLDER``) lists its blobs in index objects; a purge's forget swept
every data object no index row listed once older than the grace (1 h). So:

- T12: a damaged manifest beside a damaged index object; the user removed the index object (status
  said to wait), then mended the manifest: that run's pack was listed by nothing, and the next
  purge (of another run) deleted it: the run's originals were gone.
- T13: an index object deleted (not garbled) was never rebuilt and named by nothing; a purge swept
  its packs.
- F3: in a folder two logdirs share, B's index object gone: A's purge swept B's pack before B
  had started.

Now a purge first looks for every blob the bucket's manifests need that no index row lists (each
slice hashed), lists it, and keeps every unlisted data object while one is still found nowhere or
the folder is shared; status names such blobs; a restore finds them again itself. On moto."""
import glob
import os
import shutil

import pytest

from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from test_pack_index_rebuilt_bucket import DROP, GARBAGE, STATE, _index_objects, _user, demo_logdir  # noqa: F401
from test_unlisted_packs_kept_disk import _age, _data_objects

pytestmark = pytest.mark.usefixtures("disarm_faults")
_n = iter(range(10_000))
def _ops(url, folder):
    return {m["run"]: m for m in api.operations(url, backup_dir=folder) if m.get("outcome") == "verified"}


def _under(keys, run):
    return {k: v for k, v in keys.items() if k.startswith(run + "/")}


@pytest.fixture
def two_reduces(s3_bucket, demo_logdir, tmp_path):
    """The demo in the bucket, its profiles dropped into a local blob folder in two reduces: run Y
    alone first, then the others (Y's blobs in their own pack and index object). (url, folder,
    the user's objects before, prefix, Y, Y's index objects)."""
    prefix = f"unl{next(_n)}"
    url = s3_bucket.upload(demo_logdir, prefix)
    folder = str(tmp_path / "blobs")
    before = _user(s3_bucket, prefix)
    plan = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=True, quiet_period=0)
    runs = sorted({o.run for o in plan.outcomes if o.status == codes.Outcome.DRY_RUN})
    assert len(runs) >= 3, plan.to_dict()
    y = runs[0]
    rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0, runs=[y])
    assert [o.status for o in rep.outcomes] == [codes.Outcome.VERIFIED], rep.to_dict()
    y_index = _index_objects(folder)
    assert y_index
    rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0, runs=runs[1:])
    assert {o.status for o in rep.outcomes} == {codes.Outcome.VERIFIED}, rep.to_dict()
    assert set(_index_objects(folder)) > set(y_index)
    return url, folder, before, prefix, y, y_index


def _manifest_key(s3_bucket, prefix, op_id):
    found = [k for k in s3_bucket.fs.find(s3_bucket.key(f"{prefix}/{STATE}")) if "/manifests/" in k and op_id in k]
    assert len(found) == 1, found
    return found[0]


def test_t12_index_removed_beside_a_damaged_manifest_then_mended_purge_keeps_the_run(two_reduces, s3_bucket):
    url, folder, before, prefix, y, y_index = two_reduces
    ops = _ops(url, folder)
    key = _manifest_key(s3_bucket, prefix, ops[y]["op_id"])
    good = s3_bucket.fs.cat_file(key)
    s3_bucket.fs.pipe_file(key, b"\xff{not json")
    s3_bucket.fs.invalidate_cache()
    for p in y_index:
        with open(p, "wb") as f:
            f.write(GARBAGE)
    said = [p for p in api.status(url, backup_dir=folder)["problems"] if p.get("path") in y_index]
    assert said and all("damaged manifest" in p["detail"] for p in said), said
    for p in y_index:  # removed anyway
        os.unlink(p)
    s3_bucket.fs.pipe_file(key, good)  # the manifest mended
    s3_bucket.fs.invalidate_cache()
    _age(folder)
    x = sorted(r for r in ops if r != y)[0]
    rep = api.purge(url, yes=True, backup_dir=folder, op=ops[x]["op_id"])
    assert [o["run"] for o in rep.ops] == [x], rep.to_dict()
    # Y's blobs found again by the purge (hashed) and listed: nothing of Y's is hidden any more
    bs = BlobStore(PosixStore(folder))
    y_shas = {f["sha256"] for f in api.operations(url, run=y, backup_dir=folder)[0]["files"]
              if f.get("kept_in") == "blobstore"}
    assert y_shas and all(bs.has(s) for s in y_shas)
    res = api.restore(url, run=y, backup_dir=folder)
    assert [o.status for o in res] == [codes.Outcome.RESTORED], [o.to_dict() for o in res]
    assert _under(_user(s3_bucket, prefix), y) == _under(before, y)


def _single(s3_bucket, demo_logdir, tmp_path):
    prefix = f"unl{next(_n)}"
    url = s3_bucket.upload(demo_logdir, prefix)
    folder = str(tmp_path / "blobs")
    before = _user(s3_bucket, prefix)
    rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
    assert len([o for o in rep.outcomes if o.status == codes.Outcome.VERIFIED]) >= 3, rep.to_dict()
    index = _index_objects(folder)
    assert index
    for p in index:  # deleted, not garbled
        os.unlink(p)
    _age(folder)
    return url, folder, before, prefix


def test_t13_index_object_deleted_status_names_it_and_restore_finds_it_again(s3_bucket, demo_logdir, tmp_path):
    url, folder, before, prefix = _single(s3_bucket, demo_logdir, tmp_path)
    said = [p for p in api.status(url, backup_dir=folder)["problems"] if p.get("path", "").startswith(folder)]
    # beside it, the data objects no row lists that every sweep keeps, counted (issue #26)
    assert [p["code"] for p in said] == [codes.Failure.BACKUP_INDEX_DAMAGED, codes.Finding.ORPHAN_BLOBS], said
    assert said[0]["path"] == os.path.join(folder, "index") and "listed by no index object" in said[0]["detail"]
    assert said[1]["path"] == folder and said[1]["count"] >= 1
    y = sorted(_ops(url, folder))[0]
    res = api.restore(url, run=y, backup_dir=folder)  # no recover first: the restore looks itself
    assert [o.status for o in res] == [codes.Outcome.RESTORED], [o.to_dict() for o in res]
    assert _under(_user(s3_bucket, prefix), y) == _under(before, y)


def _y_index_deleted(two_reduces):
    """Y's index object deleted (not garbled), every data object past the grace: (url, folder,
    before, prefix, Y, X: another run, the verified operations by run)."""
    url, folder, before, prefix, y, y_index = two_reduces
    for p in y_index:
        os.unlink(p)
    _age(folder)
    ops = _ops(url, folder)
    return url, folder, before, prefix, y, sorted(r for r in ops if r != y)[0], ops


def test_t13_index_object_deleted_purge_deletes_nothing_the_others_need(two_reduces, s3_bucket):
    """X purged (its pack listed: its forget sweeps): Y's pack, listed by nothing, is found again
    first and kept; every run but X restores byte for byte."""
    url, folder, before, prefix, y, x, ops = _y_index_deleted(two_reduces)
    rep = api.purge(url, yes=True, backup_dir=folder, op=ops[x]["op_id"])
    assert [o["run"] for o in rep.ops] == [x], rep.to_dict()
    assert not rep.refused, rep.refused  # all found again: nothing to say
    res = api.restore(url, backup_dir=folder)
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    after = _user(s3_bucket, prefix)
    assert {k: v for k, v in after.items() if not k.startswith(x + "/")} == \
        {k: v for k, v in before.items() if not k.startswith(x + "/")}


def test_t13_a_needed_blob_found_nowhere_keeps_every_unlisted_object(two_reduces, monkeypatch):
    """While a needed blob is still found nowhere (the look finds nothing: as a pack that does not
    read), X's purge sweeps no unlisted data object and says so with a code naming the folder."""
    from tb_footprint_plugin.engine import bucket_blob_index
    from tb_footprint_plugin.storage.blob_salvage import Salvage

    url, folder, _before, _prefix, y, x, ops = _y_index_deleted(two_reduces)
    monkeypatch.setattr(bucket_blob_index, "salvage", lambda bs, wanted, *a, **k: Salvage(missing=sorted(wanted)))
    bs = BlobStore(PosixStore(folder))
    listed = {r.key for r in bs.refs()}
    unlisted = [p for p in _data_objects(folder) if os.path.relpath(p, folder) not in listed]
    assert unlisted
    rep = api.purge(url, yes=True, backup_dir=folder, op=ops[x]["op_id"])
    assert [o["run"] for o in rep.ops] == [x], rep.to_dict()
    assert set(unlisted) <= set(_data_objects(folder))
    rows = [r for r in rep.refused if r["code"] == codes.Failure.BACKUP_INDEX_DAMAGED]
    assert rows and rows[0]["path"] == folder and "listed by no index object" in rows[0]["detail"], rep.to_dict()
    assert f"kept: {len(unlisted)} data object(s)" in rows[0]["detail"], rows


def test_shared_folder_bs_index_gone_as_purge_keeps_bs_pack(s3_bucket, demo_logdir, tmp_path):
    """F3's remainder: A and B share the folder; B's index object gone before B started; A's purge
    (past the grace) keeps B's packs and says so; B's restore gives every object back."""
    b_dir = tmp_path / "demoB"
    shutil.copytree(demo_logdir, b_dir)
    for p in b_dir.rglob("*"):
        if p.is_file() and ("/plugins/profile/" in str(p) or p.name.endswith(".pt.trace.json")):
            p.write_bytes(p.read_bytes() + b"B")
    n = next(_n)
    a = s3_bucket.upload(demo_logdir, f"shA{n}")
    b = s3_bucket.upload(b_dir, f"shB{n}")
    folder = str(tmp_path / "shared")
    b_before = _user(s3_bucket, f"shB{n}")
    rep = api.reduce_logdir(a, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
    assert codes.Outcome.VERIFIED in {o.status for o in rep.outcomes}, rep.to_dict()
    a_index, a_data = set(_index_objects(folder)), set(_data_objects(folder))
    rep = api.reduce_logdir(b, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
    assert codes.Outcome.VERIFIED in {o.status for o in rep.outcomes}, rep.to_dict()
    b_data = sorted(set(_data_objects(folder)) - a_data)
    assert b_data
    for p in set(_index_objects(folder)) - a_index:
        os.unlink(p)
    _age(folder)
    rep = api.purge(a, yes=True, backup_dir=folder)
    assert rep.ops
    assert set(b_data) <= set(_data_objects(folder))
    kept = [r for r in rep.refused if r["code"] == Finding.ORPHAN_BLOBS and "shared" in r["detail"]]
    assert kept and f"{len(b_data)} data object(s)" in kept[0]["detail"], rep.to_dict()
    res = api.restore(b, backup_dir=folder)
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, \
        [(o.run, o.status.value, o.code, o.reason) for o in res if o.status != codes.Outcome.RESTORED]
    assert _user(s3_bucket, f"shB{n}") == b_before


# --- the store's rule itself -------------------------------------------------------------------

def _packed(tmp_path, n=3):
    bs = BlobStore(PosixStore(str(tmp_path / "bs"), create=True), owner="me")
    datas = [bytes([65 + i]) * (1000 + i) for i in range(n)]
    import hashlib
    import io

    refs = bs.add([BlobSource(sha=hashlib.sha256(d).hexdigest(), size=len(d), open=lambda d=d: io.BytesIO(d))
                   for d in datas])
    assert len({r.key for r in refs}) == 1
    return bs, refs


def test_keep_uncovered_keeps_a_pack_its_rows_do_not_cover(tmp_path):
    """One pack, three blobs; the index lists only the first (the others' rows lost): forgetting it
    keeps the pack, with ``keep_uncovered`` (``uncovered_kept``: the others may be needed) and now
    without it too: listed anew in part, the pack is held (``held_kept``; review R25 F2: the
    others may be an orphan's, whom no caller's guard knows of)."""
    for keep in (True, False):
        bs, refs = _packed(tmp_path / str(keep))
        root = str(tmp_path / str(keep) / "bs")
        for p in glob.glob(os.path.join(root, "index", "*.json")):
            os.unlink(p)
        bs.reload()
        assert not list(bs.refs())
        bs.index_found([refs[0]])
        fig = bs.forget([refs[0].sha], grace_seconds=0, keep_unlisted=keep, keep_uncovered=keep)
        assert os.path.exists(os.path.join(root, refs[0].key)), (keep, fig)
        assert fig["objects_deleted"] == 0, fig
        assert fig["uncovered_kept"] == 1 if keep else fig["held_kept"] == 1, fig


def test_keep_unlisted_keeps_every_leftover_past_its_grace(tmp_path):
    """A pack no index row lists at all, past the grace: kept and counted with ``keep_unlisted``,
    and (since no pending note proves it a killed write's leftover: its index object was removed,
    review R24 F5) by a plain forget too."""
    for keep in (True, False):
        bs, refs = _packed(tmp_path / str(keep))
        root = str(tmp_path / str(keep) / "bs")
        for p in glob.glob(os.path.join(root, "index", "*.json")):
            os.unlink(p)
        _age(root)
        fig = bs.forget([], grace_seconds=3600, keep_unlisted=keep)
        assert os.path.exists(os.path.join(root, refs[0].key)), (keep, fig)
        assert fig["unlisted_kept"] == 1 and fig["unlisted_kept_bytes"] == os.path.getsize(
            os.path.join(root, refs[0].key)), fig


def test_a_pack_listed_in_part_verify_names_it_and_restore_finds_the_rest(s3_bucket, demo_logdir, tmp_path):
    """T12's other form: one reduce (one pack, one index object); the object removed after a rebuild
    that could not read Y's manifest listed every other run's rows anew: Y's blobs sit in a pack
    other rows list. verify names them as listed by no index object (not a lost backup), and a
    restore finds them in that pack (each hashed): every run back byte for byte."""
    from tb_footprint_plugin.engine.bucket_identity import BLOB_OWNER
    from tb_footprint_plugin.engine.front_bucket import bucket_of

    prefix = f"unl{next(_n)}"
    url = s3_bucket.upload(demo_logdir, prefix)
    folder = str(tmp_path / "blobs")
    before = _user(s3_bucket, prefix)
    rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
    assert len([o for o in rep.outcomes if o.status == codes.Outcome.VERIFIED]) >= 3, rep.to_dict()
    ops = _ops(url, folder)
    y = sorted(ops)[0]
    owner = {f["sha256"]: f[BLOB_OWNER] for m in ops.values() for f in m["files"] if f.get("kept_in") == "blobstore"}
    y_shas = {f["sha256"] for f in ops[y]["files"] if f.get("kept_in") == "blobstore"}
    refs = list(BlobStore(PosixStore(folder)).refs())
    assert any(r.sha in y_shas and r.key.endswith(".pack") for r in refs)
    for p in _index_objects(folder):
        os.unlink(p)
    _age(folder)
    bv = bucket_of(url, folder)[1].blobs
    for who in sorted(set(owner.values())):
        bv.store_as(who).index_found([r for r in refs if r.sha not in y_shas and owner.get(r.sha) == who])
    rows = {r["run"]: r for r in api.verify(url, backup_dir=folder)}
    assert rows[y].get("code") == codes.Failure.BACKUP_INDEX_DAMAGED, rows[y]
    assert all("listed by no index object" in d for d in rows[y]["damaged_backups"]), rows[y]
    assert all(r.get("ok") for run, r in rows.items() if run != y), rows
    res = api.restore(url, backup_dir=folder)
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert _user(s3_bucket, prefix) == before
