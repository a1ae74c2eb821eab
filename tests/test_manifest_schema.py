"""One manifest schema for both engines (issue #26 item 2, ``engine/manifest.py``).

* Round trip: a manifest written by a local reduce, a bucket reduce (delete only: the batch), a
  bucket rewrite, a local retirement and a bucket retirement reads back through the one reader
  with the same fields (``manifest.FIELDS``) and the values of what happened.
* Every shape ever written reads (the kept old-state fixtures' bucket manifests, which named the
  id ``op``, a time ``created``, ``status`` and ``purged``).
* Damaged or planted fields are named with a code of ``codes.Finding`` and the file, never followed;
  on a bucket and on a disk the listing leaves such a manifest out and names it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import manifest
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.remote import RemoteFS

STATE = ".tb-footprint"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
T0 = 1_790_000_000


def _logdir(root: Path) -> Path:
    """Three small runs: ``prof/r0`` (profile files a drop policy deletes: the bucket batch),
    ``exp/img`` (20 images archive samples: a rewrite), ``old/run`` (a run to retire)."""
    run = root / "prof" / "r0"
    with synth.EventWriter(str(run)) as w:
        w.scalar("loss", 0, 1.0)
    plugins = run / "plugins" / "profile" / "2024_01_01_00_00_00"
    plugins.mkdir(parents=True)
    for i in range(3):
        (plugins / f"host{i}.xplane.pb").write_bytes(bytes(500 + i))
    with synth.EventWriter(str(root / "exp" / "img")) as w:
        for s in range(20):
            w.image("input", s, synth.make_png(4, 4, seed=s % 3), 4, 4)
            w.scalar("acc", s, s / 20)
    with synth.EventWriter(str(root / "old" / "run")) as w:
        w.scalar("loss", 0, 1.0)
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (T0, T0))
    return root


def _fields(m: dict) -> dict:
    return {k: m[k] for k in manifest.FIELDS}


def _check(m: dict, op_id: str, kind: str, run: str, logdir: str) -> None:
    """What the one reader answers of a manifest just written by a verified operation."""
    assert set(manifest.FIELDS) <= set(m), sorted(set(manifest.FIELDS) - set(m))
    assert (m["op_id"], m["kind"], m["run"], m["logdir"]) == (op_id, kind, run, logdir)
    assert m["outcome"] == Outcome.VERIFIED and m["reason"] is None
    assert isinstance(m["started_at"], float) and m["started_at"] <= m["finished_at"]
    assert (m["restored_by"], m["restored_at"], m["backup_purged"], m["purged_at"]) == (None, None, False, None)
    assert isinstance(m["files"], list) and isinstance(m["bytes_before"], int) and isinstance(m["bytes_after"], int)
    assert m["bytes_after"] < m["bytes_before"]
    assert manifest.read(m, "again") == m  # read is idempotent: the one schema reads as itself


def _bucket_doc(url: str, op_id: str) -> dict:
    rfs = RemoteFS(url)
    return json.loads(rfs.read_bytes(f"{STATE}/manifests/{op_id}.json"))


def test_local_reduce_and_retire_manifests_read_back_in_the_one_schema(tmp_path):
    logdir = str(_logdir(tmp_path / "logs"))
    rep = api.reduce_logdir(logdir, policy=DROP, dry_run=False, quiet_period=0, runs=["prof/r0"])
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, runs=["exp/img"])
    (o2,) = rep.outcomes
    assert o2.status == Outcome.VERIFIED, (o2.status, o2.reason)
    rr = api.retire(logdir, api.retire_rule(runs=["old/run"]), dry_run=False, quiet_period=0)
    (r,) = rr.outcomes
    assert r.status == Outcome.VERIFIED, (r.status, r.reason)
    stored = {m["op_id"]: m for m in Vault(os.path.join(logdir, STATE)).manifests()}
    for op_id, kind, run in ((o.op_id, "reduce", "prof/r0"), (o2.op_id, "reduce", "exp/img"),
                             (r.op_id, "retire", "old/run")):
        m = manifest.read(stored[op_id], "local")
        _check(m, op_id, kind, run, logdir)
        # what the API answers is the one reader's answer
        assert _fields(api.operation(logdir, op_id)) == _fields(m)
    # restored and purged, through the same fields
    (back,) = api.restore(logdir, op=o.op_id)
    assert back.status == Outcome.RESTORED, back.reason
    m = manifest.read(api.operation(logdir, o.op_id), "local")
    assert m["restored_by"] and m["restored_at"] >= m["finished_at"] and m["backup_purged"] is True


@pytest.mark.parametrize("blobs", [False, True], ids=["in-bucket vault", "local folder of blobs"])
def test_bucket_reduce_rewrite_and_retire_manifests_read_back_in_the_one_schema(s3_bucket, tmp_path, blobs):
    prefix = f"ms{'b' if blobs else ''}"
    url = s3_bucket.upload(_logdir(tmp_path / "src"), prefix)
    vault = str(tmp_path / "vault") if blobs else None
    (o,) = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                             runs=["prof/r0"]).outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    (o2,) = api.reduce_logdir(url, backup_dir=vault, policy="archive", dry_run=False, quiet_period=0,
                              runs=["exp/img"]).outcomes
    assert o2.status == Outcome.VERIFIED, (o2.status, o2.reason)
    cases = [(o.op_id, "reduce", "prof/r0"), (o2.op_id, "reduce", "exp/img")]
    if not blobs:  # a bucket retirement keeps server-side copies (a folder --backup-dir is not taken)
        (r,) = api.retire(url, api.retire_rule(runs=["old/run"]), dry_run=False, quiet_period=0).outcomes
        assert r.status == Outcome.VERIFIED, (r.status, r.reason)
        cases.append((r.op_id, "retire", "old/run"))
    ops = {m["op_id"]: m for m in api.operations(url, backup_dir=vault)}
    st = {m["op_id"]: m for m in api.status(url, backup_dir=vault)["operations"]}
    for op_id, kind, run in cases:
        doc = _bucket_doc(url, op_id)
        m = manifest.read(doc, "bucket")
        _check(m, op_id, kind, run, url)
        # the aliases older workers sharing the bucket read agree with the one schema
        assert (doc["op"], doc["status"], "purged" in doc) == (op_id, "verified", False)
        assert doc["created"] == m["finished_at"]
        # the API and status answer the engine's one schema (no translation left in the API)
        assert _fields(ops[op_id]) == _fields(m)
        assert {k: st[op_id][k] for k in ("op_id", "kind", "run", "started_at", "finished_at", "outcome",
                                          "backup_purged", "restored_by")} == \
            {k: m[k] for k in ("op_id", "kind", "run", "started_at", "finished_at", "outcome", "backup_purged",
                               "restored_by")}
    # restored, then purged: the one schema's fields, and the aliases beside them
    (back,) = api.restore(url, op=o2.op_id, backup_dir=vault)
    assert back.status == Outcome.RESTORED, back.reason
    doc = _bucket_doc(url, o2.op_id)
    m = manifest.read(doc, "bucket")
    assert m["restored_by"] == manifest.A_RESTORE and m["restored_at"] and doc["status"] == "restored"
    rep = api.purge(url, op=o2.op_id, backup_dir=vault, yes=True)
    assert [x["op_id"] for x in rep.ops] == [o2.op_id], rep.to_dict()
    doc = _bucket_doc(url, o2.op_id)
    m = manifest.read(doc, "bucket")
    assert m["backup_purged"] is True and m["purged_at"] == doc["purged"]
    hist = [(e["kind"], e["op_id"]) for e in api.history(url, backup_dir=vault)]
    assert [k for k, op in hist if op == o2.op_id] == ["reduce", "restore", "purge"], hist


def _old_bucket_manifests():
    for p in sorted(FIXTURES.glob("old_state*/bucket*/logs/.tb-footprint/manifests/*.json")):
        yield pytest.param(p, id=f"{p.parts[-6]}/{p.parts[-5]}/{p.stem}")


@pytest.mark.parametrize("path", list(_old_bucket_manifests()))
def test_every_kept_bucket_manifest_reads_in_the_one_schema(path):
    """The bucket manifests of every kept fixture (282b743 and before: ``op``, ``created``,
    ``status``, ``purged``) read as the one schema, their meaning kept."""
    doc = json.loads(path.read_text())
    m = manifest.read(doc, str(path))
    assert set(manifest.FIELDS) <= set(m)
    assert m["op_id"] == doc["op"] == path.stem and m["run"] == doc["run"]
    assert m["kind"] == doc.get("kind", "reduce")
    assert m["started_at"] == doc.get("started_at", doc["created"]) and m["outcome"] == Outcome.VERIFIED
    assert bool(m["restored_by"]) == (doc["status"] == "restored")
    assert m["backup_purged"] == bool(doc.get("purged"))
    assert not set(manifest.BUCKET_ALIASES) & set(m)  # the one schema only
    assert manifest.read(manifest.bucket_form(m), "again") == m


def test_a_legacy_purged_bucket_manifest_reads_as_purged():
    doc = {"op": "20260101T000000-abcdef", "run": "a", "created": 5.0, "status": "restored", "purged": 9.0,
           "files": [{"path": "a/x", "size": 1, "backup": "b/.tb-footprint/blobs/20260101T000000-abcdef/a/x"}]}
    m = manifest.read(doc, "m.json")
    assert (m["backup_purged"], m["purged_at"], m["restored_by"], m["started_at"], m["finished_at"]) == \
        (True, 9.0, manifest.A_RESTORE, 5.0, 5.0)


OP = "20260101T000000-abcdef"
GOOD = {"op_id": OP, "kind": "reduce", "run": "exp/a", "logdir": "/l", "started_at": 1.0, "finished_at": 2.0,
        "outcome": "verified", "files": [{"path": "exp/a/x", "size": 3}], "bytes_before": 3, "bytes_after": 0,
        "backup_purged": False}
DAMAGE = [
    ("op id that is a path", {"op_id": "../../etc/x"}, Finding.BAD_OP_ID),
    ("op id not a string", {"op_id": 5}, Finding.BAD_OP_ID),
    ("alias disagrees", {"op": "20260101T000000-ffffff"}, Finding.BAD_OP_ID),
    ("run absolute", {"run": "/etc", "files": []}, Finding.PATH_OUTSIDE),
    ("run leaves the logdir", {"run": "../n", "files": []}, Finding.PATH_OUTSIDE),
    ("run not a string", {"run": ["a"]}, Finding.BAD_MANIFEST),
    ("file outside its run", {"files": [{"path": "exp/b/x", "size": 3}]}, Finding.PATH_OUTSIDE),
    ("file leaves by ..", {"files": [{"path": "exp/a/../../n/x", "size": 3}]}, Finding.PATH_OUTSIDE),
    ("file size not an int", {"files": [{"path": "exp/a/x", "size": "3"}]}, Finding.BAD_MANIFEST),
    ("files not a list", {"files": 5}, Finding.BAD_MANIFEST),
    ("unknown kind", {"kind": "format"}, Finding.BAD_MANIFEST),
    ("time a string", {"started_at": "yesterday"}, Finding.BAD_MANIFEST),
    ("purged a string", {"backup_purged": "no"}, Finding.BAD_MANIFEST),
    ("bytes a string", {"bytes_before": "3"}, Finding.BAD_MANIFEST),
    ("restored_by a number", {"restored_by": 7}, Finding.BAD_MANIFEST),
    ("not an object", None, Finding.BAD_MANIFEST),
    ("a disk's manifest naming no kind", {"kind": None}, Finding.BAD_MANIFEST),
]


@pytest.mark.parametrize("what,change,code", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_field_is_named_with_its_code_and_file(what, change, code):
    doc = ["a list"] if change is None else {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(Untrusted) as e:
        manifest.read(doc, "vault/manifests/x.json")
    assert (e.value.code, e.value.file) == (code, "vault/manifests/x.json"), str(e.value)


def test_a_disks_manifest_naming_no_outcome_is_no_verified_operation():
    """Only a bucket's manifest (which a bucket writes for verified operations alone) may leave
    its outcome unsaid; a disk's without one is not taken for verified (restorable)."""
    doc = {k: v for k, v in GOOD.items() if k != "outcome"}
    assert manifest.read(doc, "m")["outcome"] is None
    assert manifest.read({**doc, "op": OP}, "m")["outcome"] == Outcome.VERIFIED


def test_a_legacy_purged_field_of_the_wrong_type_is_named():
    doc = {"op": OP, "run": "a", "created": 1.0, "status": "verified", "purged": "soon", "files": []}
    with pytest.raises(Untrusted) as e:
        manifest.read(doc, "m.json")
    assert e.value.code == Finding.BAD_MANIFEST


def test_a_bucket_manifest_of_the_wrong_type_is_left_out_and_named(s3_bucket, tmp_path):
    """A planted manifest whose ``backup_purged`` is a string (read as true by a truthiness test:
    its backups would count as gone) is left out of every listing and named with its URL."""
    url = s3_bucket.upload(_logdir(tmp_path / "src"), "msd")
    (o,) = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["prof/r0"]).outcomes
    assert o.status == Outcome.VERIFIED
    doc = _bucket_doc(url, o.op_id)
    doc["backup_purged"] = "no"
    RemoteFS(url).fs.pipe_file(f"{RemoteFS(url).root}/{STATE}/manifests/{o.op_id}.json", json.dumps(doc).encode())
    st = api.status(url)
    (p,) = [p for p in st["problems"] if p["code"] == Finding.MANIFEST_DAMAGED]
    assert p["why"] == Finding.BAD_MANIFEST and p["file"].endswith(f"{o.op_id}.json") and "backup_purged" in p["detail"]
    assert o.op_id not in [m["op_id"] for m in st["operations"]]
    rep = api.purge(url, yes=True)
    assert o.op_id not in [x["op_id"] for x in rep.ops]
    assert RemoteFS(url).list_tree(f"{STATE}/blobs")  # its backups stay


def test_a_local_manifest_of_the_wrong_type_is_left_out_and_named(tmp_path):
    """On a disk the same: a manifest whose ``restored_by`` is a number is not listed, not offered
    for restore or purge, and the purge's report names it (``refused``) with its code."""
    logdir = str(_logdir(tmp_path / "logs"))
    (o,) = api.reduce_logdir(logdir, policy=DROP, dry_run=False, quiet_period=0, runs=["prof/r0"]).outcomes
    assert o.status == Outcome.VERIFIED
    vault = Vault(os.path.join(logdir, STATE))
    blobs = sorted(p.name for p in Path(logdir, STATE, "blobs").rglob("*") if p.is_file())
    vault.write_manifest({**vault.read_manifest(o.op_id), "restored_by": 7})
    assert o.op_id not in [m["op_id"] for m in api.operations(logdir)]
    rep = api.purge(logdir, yes=True)
    assert [(r["code"], o.op_id in r["file"]) for r in rep.refused] == [(Finding.BAD_MANIFEST, True)], rep.refused
    assert o.op_id not in [x["op_id"] for x in rep.ops]
    assert sorted(p.name for p in Path(logdir, STATE, "blobs").rglob("*") if p.is_file()) == blobs


def test_an_older_workers_marks_on_a_manifest_of_this_version_count():
    """A worker of 282b743 sharing the bucket marks a restore (``status``) and a purge (``purged``)
    under its own names only: both are one-way, so either name saying so counts — else this
    version would offer to restore from backups an older worker's purge deleted."""
    doc = manifest.bucket_form(manifest.new(
        op_id=OP, kind="reduce", run="exp/a", logdir="s3://b/l", started_at=1.0, finished_at=2.0,
        outcome="verified", files=[{"path": "exp/a/x", "size": 3, "backup": "b/l/.tb-footprint/blobs/x"}],
        bytes_before=3, bytes_after=0))
    assert manifest.read(doc, "m.json")["restored_by"] is None
    doc.update(status="restored", restored_at=5.0)  # 282b743's restore
    assert manifest.read(doc, "m.json")["restored_by"] == manifest.A_RESTORE
    doc["purged"] = 9.0  # 282b743's purge
    m = manifest.read(doc, "m.json")
    assert (m["backup_purged"], m["purged_at"]) == (True, 9.0)
    assert manifest.bucket_form(m)["purged"] == 9.0
