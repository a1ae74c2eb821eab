"""A bucket logdir acts only on its own operations (review R11 G6 and G10).

G6: two bucket logdirs given one vault prefix (``--backup-dir s3://b/vault`` for both), or a copy
of one sharing its vault, acted on each other's manifests: one's purge freed the other's only
copies, one's restore put the other's runs into it. Now a manifest is this logdir's only when its
``logdir`` is this logdir's URL (or its own state's, moved here: ``bucket_moved.whose``); others'
are never listed, counted, restored or purged, and status counts them.

G10: a planted id (``.tb-footprint/identity.json``) and a planted manifest never let a restore
copy another logdir's blobs from a shared local folder into this bucket."""
import json

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Outcome

from test_bucket_prefix_moved_blob_folder import DROP, _move, prof_logdir  # noqa: F401
from test_bucket_prefix_moved_copies import _copy, _user


def _reduce_and_retire(url, vault):
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0, runs=["r0"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    rep = api.retire(url, api.retire_rule(runs=["r1"]), dry_run=False, quiet_period=0, backup_dir=vault)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]


def unrecord(bucket, vault, logdir):
    """The manifests at ``vault`` as an earlier version wrote them: no ``recorded`` mark, and no
    record in the state of ``logdir`` (``bucket_op_records``)."""
    fs = bucket.fs
    fs.invalidate_cache()
    for k in fs.find(f"{bucket.key(vault)}/manifests"):
        m = json.loads(fs.cat_file(k))
        if m.pop("recorded", None):
            fs.pipe_file(k, json.dumps(m).encode())
    ops = f"{bucket.key(logdir)}/.tb-footprint/ops"
    if fs.exists(ops):
        fs.rm(ops, recursive=True)
    fs.invalidate_cache()


def _other_logdir(s3_bucket, tmp_path, prefix):
    other = tmp_path / prefix
    (other / "x").mkdir(parents=True)
    (other / "x" / "notes.txt").write_text("another logdir")
    return s3_bucket.upload(other, prefix)


def test_two_logdirs_sharing_a_vault_prefix_never_purge_each_others_backups(s3_bucket, prof_logdir):
    a = s3_bucket.upload(prof_logdir, "runsA")
    b = s3_bucket.upload(prof_logdir, "runsB")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    assert api.retired(b, backup_dir=vault) == []
    st = api.status(b, backup_dir=vault)
    assert st["operations"] == [] and st["vault_bytes"] == 0
    (row,) = [p for p in st["problems"] if p["code"] == Finding.FOREIGN_MANIFEST]
    assert row["operations"] == 2 and row["logdirs"] == [a] and "2 operation(s) of other logdirs" in row["detail"]
    assert api.history(b, backup_dir=vault) == []
    assert api.verify(b, backup_dir=vault) == []  # the re-check of kept backups looks at none of A's
    pr = api.purge(b, yes=True, backup_dir=vault)
    assert not pr.ops, pr.to_dict()
    outs = api.restore(b, backup_dir=vault)
    assert [o for o in outs if o.status == "restored"] == [], [o.to_dict() for o in outs]
    # A's own view is whole: both operations listed, no foreign row, and both restore byte for byte
    st = api.status(a, backup_dir=vault)
    assert len(st["operations"]) == 2
    assert not [p for p in st["problems"] if p["code"] == Finding.FOREIGN_MANIFEST]
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before


def test_a_restore_never_puts_another_logdirs_runs_into_this_one(s3_bucket, prof_logdir, tmp_path):
    a = s3_bucket.upload(prof_logdir, "runsA")
    b = _other_logdir(s3_bucket, tmp_path, "runsB")
    vault = s3_bucket.url("vault")
    before_a, before_b = _user(s3_bucket, "runsA"), _user(s3_bucket, "runsB")
    _reduce_and_retire(a, vault)
    outs = api.restore(b, backup_dir=vault)
    assert [o for o in outs if o.status == "restored"] == [], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsB") == before_b, "A's runs were put into B"
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before_a


def test_a_copys_purge_never_deletes_the_originals_backups_in_a_shared_vault(s3_bucket, prof_logdir):
    url = s3_bucket.upload(prof_logdir, "runs")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runs")
    _reduce_and_retire(url, vault)
    _copy(s3_bucket, "runs", "runs-copy")
    copy = s3_bucket.url("runs-copy")
    assert api.retired(copy, backup_dir=vault) == []
    pr = api.purge(copy, yes=True, backup_dir=vault)
    assert not pr.ops, pr.to_dict()
    outs = api.restore(url, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs") == before


def test_a_logdir_moved_away_from_a_shared_vault_restores_at_its_old_url(s3_bucket, prof_logdir, tmp_path):
    """Operations written before records (``test_bucket_ops_recorded`` has those of today): they
    name the old URL and nothing in its own state says they are its (an external vault): the moved
    logdir sees them as another's, named by status with where they were made, and a restore at the
    old URL (then a move) gives every object back; the other logdir sharing the vault never sees
    them."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    b = _other_logdir(s3_bucket, tmp_path, "runsB")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    unrecord(s3_bucket, "vault", "runsA")
    _move(s3_bucket, "runsA", "runsA2")
    a2 = s3_bucket.url("runsA2")
    assert api.retired(b, backup_dir=vault) == []
    assert not api.purge(b, yes=True, backup_dir=vault).ops
    (row,) = [p for p in api.status(a2, backup_dir=vault)["problems"] if p["code"] == Finding.FOREIGN_MANIFEST]
    assert row["logdirs"] == [a] and row["operations"] == 2
    assert [o for o in api.restore(a2, backup_dir=vault) if o.status == "restored"] == []
    _move(s3_bucket, "runsA2", "runsA")
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before


def test_a_planted_id_never_lets_a_restore_copy_another_logdirs_blobs(s3_bucket, prof_logdir, tmp_path):
    """G10: B's identity.json made A's id and A's manifest planted as B's (its blob owner and
    digests as they are): B's restore copies none of A's removed originals into B, whether the
    planted manifest says it was made at B or at A (A still holds it: a copy, never a move)."""
    folder = str(tmp_path / "V")
    a = s3_bucket.upload(prof_logdir, "A")
    rep = api.reduce_logdir(a, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0, runs=["r0"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    b = _other_logdir(s3_bucket, tmp_path, "B")
    fs, ka, kb = s3_bucket.fs, s3_bucket.key("A"), s3_bucket.key("B")
    fs.invalidate_cache()
    ident = fs.cat_file(f"{ka}/.tb-footprint/identity.json")
    (man_key,) = [k for k in fs.find(f"{ka}/.tb-footprint/manifests") if k.endswith(".json")]
    fs.pipe_file(f"{kb}/.tb-footprint/identity.json", ident)
    for made_at in (b, a):
        m = json.loads(fs.cat_file(man_key))
        m["logdir"] = made_at
        m["_moved_from"] = a  # a reader's private mark, planted: never taken from the object
        fs.pipe_file(f"{kb}/.tb-footprint/manifests/{man_key.rsplit('/', 1)[-1]}", json.dumps(m).encode())
        fs.invalidate_cache()
        outs = api.restore(b, backup_dir=folder)
        assert [o.code for o in outs] == [Failure.REFUSED], [o.to_dict() for o in outs]
        assert ("this logdir did not add" if made_at == b else "this logdir is a copy") in outs[0].reason
        fs.invalidate_cache()
        got = sorted(k[len(kb) + 1:] for k in fs.find(kb) if "/.tb-footprint/" not in k)
        assert got == ["x/notes.txt"], "A's backed-up originals were copied into B"
    # A itself restores from the folder byte for byte
    outs = api.restore(a, backup_dir=folder)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]


def test_a_purge_where_no_logdir_stands_never_frees_a_moved_logdirs_copies(s3_bucket, prof_logdir):
    """R11 G11: the logdir moved away from a shared vault; a purge at its old URL, where nothing
    stands any more, refuses its operations (prefix_moved) instead of freeing its only copies.
    Operations written before records (today's are another logdir's there: no record stands)."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    unrecord(s3_bucket, "vault", "runsA")
    _move(s3_bucket, "runsA", "runsA2")
    pr = api.purge(a, yes=True, backup_dir=vault)
    assert not pr.ops, pr.to_dict()
    assert sorted(r["code"] for r in pr.to_dict()["refused"]) == [Finding.PREFIX_MOVED] * 2
    _move(s3_bucket, "runsA2", "runsA")
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before
