"""Bucket vault of blobs: what a reduce says and what a purge does with odd state (review W's S3,
helper U's items for the bucket engine)."""
import json

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.storage.remote import RemoteFS

import pytest
from test_bucket_blobvault import STATE, _user, mixed_logdir  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("disarm_faults")  # conftest's, after every test

SESSION = "plugins/profile/2024_01_01_00_00_00"
#: lossless gzips the PyTorch traces (a rewrite transaction); the xplane files are deleted with it
TRACES_AND_XPLANE = {"name": "lossless-and-xplane", "base": "lossless", "rules": {"profile_xplane": "delete"}}


def test_a_rewrite_into_a_vault_of_blobs_says_where_the_removed_files_went(s3_bucket, mixed_logdir, tmp_path):
    """The check line of the files a rewrite removes names the blob vault (it said 'backed up by
    server-side copy' whatever the backups were)."""
    url = s3_bucket.upload(mixed_logdir, "says")
    RemoteFS(url).write_bytes(f"torch/resnet/{SESSION}/host.xplane.pb", b"x" * 5000)
    vault = str(tmp_path / "vault")
    (o,) = api.reduce_logdir(url, backup_dir=vault, policy=TRACES_AND_XPLANE, dry_run=False, quiet_period=0,
                             runs=["torch/resnet"], verify_backends=("python",)).outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    assert any(p.endswith("host.xplane.pb") for p in o.removed_files)
    (line,) = [c["detail"] for c in o.verification["checks"] if c["name"] == "removed files"]
    assert vault in line and "server-side" not in line, line


SLIM = {"name": "slim", "content": {"trace": {"whitespace": True, "drop_python_function": True}}}


def _reduce_slim(url, vault):
    """The slim policy over torch/resnet, its backups in the folder ``vault``: the report."""
    return api.reduce_logdir(url, backup_dir=vault, policy=SLIM, dry_run=False, quiet_period=0,
                             runs=["torch/resnet"], verify_backends=("python",))


def _slimmed(url, vault):
    """torch/resnet slimmed and verified: its outcome."""
    (o,) = _reduce_slim(url, vault).outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    return o


def _slims(url):
    """original -> the .gz name the plan gives each slimmed trace of torch/resnet."""
    plan = api.plan(url, SLIM, quiet_period=0)
    out = {a.path: a.new_path for rp in plan.runs if rp.run == "torch/resnet" for a in rp.actions
           if a.kind == "rewrite"}
    assert out and all(new.endswith(".gz") and new != old for old, new in out.items()), out
    return out


def test_a_slimmed_trace_lands_under_the_name_the_plan_gives_and_restores_to_its_own(
        s3_bucket, mixed_logdir, tmp_path):
    """Plan = outcome (issue #29): a slimmed trace is written as <name>.pt.trace.json.gz, the plain
    name deleted only after; the reduce's verification checks the new key; a restore puts the
    original name back and deletes the new one."""
    url = s3_bucket.upload(mixed_logdir, "slim")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, "slim")
    slims = _slims(url)
    o = _slimmed(url, vault)
    after = _user(s3_bucket, "slim")
    rfs = RemoteFS(url)
    for old, new in slims.items():
        assert old not in after and new in after, (old, new, sorted(after))
        assert rfs.read_bytes(new)[:2] == b"\x1f\x8b"
    assert sorted(o.created_files) == sorted(slims.values()) and set(slims) <= set(o.removed_files)
    assert sorted(o.verification["created"]) == sorted(slims.values())
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert _user(s3_bucket, "slim") == before


def _slim_stopped_at(url, vault, point):
    """Slim torch/resnet with a fault raised at ``point``, then the next start's recovery: its outcomes."""
    from tb_footprint_plugin.engine import faults

    faults.arm(point, "crash")
    try:
        _reduce_slim(url, vault)
    except faults.InjectedCrash:
        pass
    faults.disarm_all()
    return api.recover_logdir(url, backup_dir=vault)


def test_a_slim_killed_mid_swap_is_finished_by_the_next_start_under_the_planned_names(
        s3_bucket, mixed_logdir, tmp_path):
    """The swap of a renamed rewrite is idempotent: the next start creates what is missing under the
    new names and deletes the plain ones; an interrupt before the commit leaves no .gz behind."""
    url = s3_bucket.upload(mixed_logdir, "slimkill")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, "slimkill")
    slims = _slims(url)
    outs = _slim_stopped_at(url, vault, "reduce.mid_swap")
    assert [o.action for o in outs] == ["completed"], outs
    after = _user(s3_bucket, "slimkill")
    assert all(old not in after and new in after for old, new in slims.items()), sorted(after)
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert _user(s3_bucket, "slimkill") == before

    outs = _slim_stopped_at(url, vault, "reduce.upload")  # before the commit record: rolled back, nothing new left
    assert [o.action for o in outs] == ["rolled_back"], outs
    assert _user(s3_bucket, "slimkill") == before


def test_a_slim_an_earlier_version_swapped_in_place_still_restores(s3_bucket, mixed_logdir, tmp_path):
    """Before the fix a bucket slim put its gzip'd bytes under the plain name (its manifest already
    named the .gz): such an operation is restored over the plain name, byte for byte."""
    url = s3_bucket.upload(mixed_logdir, "slimold")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, "slimold")
    slims = _slims(url)
    o = _slimmed(url, vault)
    rfs = RemoteFS(url)
    for old, new in slims.items():  # what the earlier version left
        rfs.write_bytes(old, rfs.read_bytes(new))
        rfs.ops.delete([rfs.path(new)])
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert _user(s3_bucket, "slimold") == before


def test_a_purge_lists_a_planted_or_damaged_manifest_and_purges_the_rest(s3_bucket, mixed_logdir, tmp_path):
    """As on a disk: one manifest naming a backup outside the vault, one that is not JSON — each is
    listed with a code and left in place, the real operation's backups are purged (the bucket
    purge stopped at the first planted one with an error)."""
    from tb_footprint_plugin.codes import Failure, Finding
    from test_bucket_blobvault import DROP

    url = s3_bucket.upload(mixed_logdir, "purgebad")
    s3_bucket.fs.pipe_file(s3_bucket.key("purgebad-n/canary"), b"canary")
    (o,) = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["prof/r0"],
                             verify_backends=("python",)).outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    rfs = RemoteFS(url)
    backups = [f["backup"] for f in api.operation(url, o.op_id)["files"]]
    assert backups and all(rfs.ops.head(b) is not None for b in backups)
    planted = {"op": "20260101T000001-aaaaaa", "run": "prof/r0", "status": "verified", "created": 1.0,
               "logdir": url, "files": [{"action": "delete", "path": "prof/r0/x", "size": 6,
                                         "backup": s3_bucket.key("purgebad-n/canary")}]}
    bad = f"{STATE}/manifests/20260101T000001-aaaaaa.json"
    damaged = f"{STATE}/manifests/20260101T000002-bbbbbb.json"
    rfs.write_bytes(bad, json.dumps(planted).encode())
    rfs.write_bytes(damaged, b"\xff{not json")
    preview = api.purge(url)
    assert [x["op_id"] for x in preview.ops] == [o.op_id]
    rep = api.purge(url, yes=True)
    assert [x["op_id"] for x in rep.ops] == [o.op_id]
    said = {str(r["code"]): r["detail"] for r in rep.refused}
    assert bad in said.get(Failure.REFUSED.value, ""), rep.refused
    assert damaged in said.get(Finding.MANIFEST_DAMAGED.value, ""), rep.refused
    assert all(rfs.ops.head(b) is None for b in backups)
    assert rfs.read_bytes(bad) == json.dumps(planted).encode() and rfs.read_bytes(damaged) == b"\xff{not json"
    assert s3_bucket.hashes("purgebad-n")
