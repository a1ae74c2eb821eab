"""A bucket logdir's operations in an external vault prefix are recorded in its own state (review
R11 G11's rest).

A bucket logdir reduced/retired with ``--backup-dir s3://b/vault`` had its manifests there only,
each naming its URL: moved away (``aws s3 mv runsA runsA2``), then a new, unrelated logdir made
at ``runsA`` with the same vault, the new one listed, restored (the moved one's runs put into it)
and purged (the moved one's only copies freed) the moved one's operations; the moved one saw them
as another's. Now each such operation leaves a record in its logdir's own state
(``.tb-footprint/ops/<op_id>.json``) and its manifest says so (``recorded``): a recorded
manifest is this logdir's only when its record stands in this logdir's state (at the URL it
names, or moved here from there)."""
import json

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome

from test_bucket_prefix_moved_blob_folder import DROP, _move, prof_logdir  # noqa: F401
from test_bucket_prefix_moved_copies import _copy, _user
from test_bucket_vault_of_other_logdirs import _other_logdir, _reduce_and_retire, unrecord


def _keys(bucket, prefix):
    bucket.fs.invalidate_cache()
    base = bucket.key(prefix)
    return sorted(k[len(base) + 1:] for k in bucket.fs.find(base))


def test_a_new_logdir_at_a_moved_ones_url_never_restores_or_purges_its_operations(s3_bucket, prof_logdir, tmp_path):
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    _move(s3_bucket, "runsA", "runsA2")
    new = _other_logdir(s3_bucket, tmp_path, "runsA")  # another logdir made at the old URL, given the vault
    assert new == a
    new_before = _user(s3_bucket, "runsA")
    assert api.retired(new, backup_dir=vault) == []
    st = api.status(new, backup_dir=vault)
    assert st["operations"] == [] and st["vault_bytes"] == 0, st["operations"]
    (row,) = [p for p in st["problems"] if p["code"] == Finding.FOREIGN_MANIFEST]
    assert row["operations"] == 2
    outs = api.restore(new, backup_dir=vault)
    assert [o for o in outs if o.status == "restored"] == [], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == new_before, "the moved logdir's runs were put into the new one"
    pr = api.purge(new, yes=True, backup_dir=vault)
    assert not pr.ops, pr.to_dict()
    # the moved logdir's copies are whole: it restores both operations byte for byte where it stands now
    a2 = s3_bucket.url("runsA2")
    outs = api.restore(a2, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA2") == before


def test_a_logdir_moved_away_from_a_shared_vault_restores_from_its_new_url_and_purges_once_back(s3_bucket, prof_logdir):
    """From its new URL it restores; it never frees the vault's copies there (a copy made before the
    move would hold the same records: review R14 G5, test_bucket_copy_then_move), moved back it does."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    _move(s3_bucket, "runsA", "runsA2")
    a2 = s3_bucket.url("runsA2")
    st = api.status(a2, backup_dir=vault)
    assert len(st["operations"]) == 2
    assert not [p for p in st["problems"] if p["code"] == Finding.FOREIGN_MANIFEST], st["problems"]
    assert [r["run"] for r in api.retired(a2, backup_dir=vault)] == ["r1"]
    # nothing at the old URL claims them
    assert not api.purge(a, yes=True, backup_dir=vault).ops
    outs = api.restore(a2, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA2") == before
    pr = api.purge(a2, yes=True, backup_dir=vault)
    assert not pr.ops and sorted(k["code"] for k in pr.kept) == [Finding.MOVED_UNCLAIMED] * 2, pr.to_dict()
    _move(s3_bucket, "runsA2", "runsA")
    pr = api.purge(a, yes=True, backup_dir=vault)
    assert sorted(o["run"] for o in pr.ops) == ["r0", "r1"] and pr.freed_bytes > 0, pr.to_dict()
    assert _user(s3_bucket, "runsA") == before


def test_a_copy_in_a_shared_vault_is_never_taken_for_a_move(s3_bucket, prof_logdir):
    """The copy holds the records too, and so does the URL its manifests name: a copy, never acted on."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    _copy(s3_bucket, "runsA", "runsA-copy")
    copy = s3_bucket.url("runsA-copy")
    assert api.retired(copy, backup_dir=vault) == []
    assert not api.purge(copy, yes=True, backup_dir=vault).ops
    assert [o for o in api.restore(copy, backup_dir=vault) if o.status == "restored"] == []
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before


def test_records_in_a_logdir_s_state_name_its_external_vault_operations_only(s3_bucket, prof_logdir):
    """One record an operation, made before its manifest, when the vault is another prefix; none in
    the default vault under the logdir's own state (no request more there)."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    _reduce_and_retire(a, vault)
    fs = s3_bucket.fs
    mans = [k for k in _keys(s3_bucket, "vault") if k.startswith("manifests/")]
    ops = sorted(k.rsplit("/", 1)[-1] for k in mans)
    assert [k.rsplit("/", 1)[-1] for k in _keys(s3_bucket, "runsA") if k.startswith(".tb-footprint/ops/")] == ops
    for k in mans:
        assert json.loads(fs.cat_file(f"{s3_bucket.key('vault')}/{k}"))["recorded"] is True
    rec = json.loads(fs.cat_file(f"{s3_bucket.key('runsA')}/.tb-footprint/ops/{ops[0]}"))
    assert rec["op_id"] == ops[0][:-len(".json")] and rec["vault"] == vault
    b = s3_bucket.upload(prof_logdir, "runsB")
    _reduce_and_retire(b, None)
    assert not [k for k in _keys(s3_bucket, "runsB") if "/ops/" in k]
    for k in _keys(s3_bucket, "runsB"):
        if k.startswith(".tb-footprint/manifests/"):
            assert "recorded" not in json.loads(fs.cat_file(f"{s3_bucket.key('runsB')}/{k}"))


def test_planted_records_never_make_another_standing_logdirs_operations_ours(s3_bucket, prof_logdir, tmp_path):
    """G10: a writer of B's prefix plants records naming A's op ids (listed in the shared vault):
    A still records them where its manifests say it stands, so B sees a copy, never a move."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    b = _other_logdir(s3_bucket, tmp_path, "runsB")
    b_before = _user(s3_bucket, "runsB")
    fs = s3_bucket.fs
    for k in _keys(s3_bucket, "runsA"):
        if k.startswith(".tb-footprint/ops/"):
            fs.pipe_file(f"{s3_bucket.key('runsB')}/{k}", fs.cat_file(f"{s3_bucket.key('runsA')}/{k}"))
    fs.invalidate_cache()
    assert api.retired(b, backup_dir=vault) == []
    assert not api.purge(b, yes=True, backup_dir=vault).ops
    assert [o for o in api.restore(b, backup_dir=vault) if o.status == "restored"] == []
    assert _user(s3_bucket, "runsB") == b_before
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before


def test_a_manifest_written_before_records_is_judged_by_its_url_as_before(s3_bucket, prof_logdir):
    """A manifest without the mark (written by an earlier version) names no record: the URL it
    names is its logdir's, as it always was."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    unrecord(s3_bucket, "vault", "runsA")
    assert not [k for k in _keys(s3_bucket, "runsA") if "/ops/" in k]
    assert len(api.status(a, backup_dir=vault)["operations"]) == 2
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before


def _killed(s3_bucket, tmp_path, prof_logdir, kind, point):
    """A reduction with an external vault killed at ``point`` (before its swap record): a batch of
    drop-only runs (``drop``) or a rewrite (``archive``); the logdir's URL, the vault's, a key the
    reduction deletes, its run and the logdir's objects before."""
    from helpers_crash import Killed, kill
    from tb_footprint_plugin.engine import faults
    from test_bucket_status_judges_journals import RUN, _logdir

    local, policy, run = (prof_logdir, DROP, "r0") if kind == "drop" else (_logdir(tmp_path), "archive", RUN)
    url, vault = s3_bucket.upload(local, "logs"), s3_bucket.url("vault")
    plan = api.plan(url, policy, quiet_period=0)
    victim = next(a.path for rp in plan.runs if rp.run == run for a in rp.actions if a.kind == "delete")
    before = _user(s3_bucket, "logs")
    faults.arm(point, kill)
    try:
        with pytest.raises(Killed):
            api.reduce_logdir(url, backup_dir=vault, policy=policy, dry_run=False, runs=[run], quiet_period=0,
                              verify_backends=("python",))
    finally:
        faults.disarm_all()
    return url, vault, victim, run, before


def _records(s3_bucket):
    return [k for k in _keys(s3_bucket, "logs") if k.startswith(".tb-footprint/ops/")]


@pytest.mark.usefixtures("disarm_faults")
@pytest.mark.parametrize("kind", ["drop", "archive"])
def test_a_rollback_deletes_the_record_after_the_manifest(s3_bucket, tmp_path, prof_logdir, kind):
    url, vault, _victim, _run, before = _killed(s3_bucket, tmp_path, prof_logdir, kind, "reduce.verify")
    assert len(_records(s3_bucket)) == 1  # written before its manifest
    assert [k for k in _keys(s3_bucket, "vault") if k.startswith("manifests/")]
    api.recover_logdir(url, backup_dir=vault)
    assert not [k for k in _keys(s3_bucket, "vault") if k.startswith("manifests/")]
    assert _records(s3_bucket) == []
    assert _user(s3_bucket, "logs") == before


@pytest.mark.usefixtures("disarm_faults")
@pytest.mark.parametrize("kind", ["drop", "archive"])
def test_a_rollback_keeping_backups_writes_a_recorded_manifest_this_logdir_sees(s3_bucket, tmp_path, prof_logdir, kind):
    """Killed once its backups were made (no manifest yet), an original then rewritten by a writer:
    the recovery names the kept backup in a manifest, recorded, and this logdir lists it."""
    url, vault, victim, run, _before = _killed(s3_bucket, tmp_path, prof_logdir, kind, "reduce.backup")
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/" + victim), b"a writer's new bytes")
    s3_bucket.fs.invalidate_cache()
    api.recover_logdir(url, backup_dir=vault)
    [op] = [m for m in api.operations(url, backup_dir=vault) if m.get("run") == run]
    assert op["outcome"] == Outcome.ROLLED_BACK and op.get("recorded") is True, op
    assert _records(s3_bucket) == [f".tb-footprint/ops/{op['op_id']}.json"]
