"""A bucket reduction says what it verified, as a disk's does (review R21 PD15): the operations
list (``api.restorable``, what the tab's Operations page shows) gave a disk's drop-only reduction
``verified: true``, its checks and its fidelity lines, and the same reduction of a bucket
``verified: null, checks: [], fidelity: []``, though it checked every backup's checksum and its plan
said what stays. A manifest written before (without them) reads as it did; one whose descriptive
fields are of another shape reads as one without them; a listing after the swap that finds the run
not as planned rewrites the manifest as not verified."""
import json
import shutil

from test_shards import make_logdir
from test_shards_s3 import DROP_PROFILES
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_batch
from tb_footprint_plugin.storage.remote import RemoteFS

STATE = ".tb-footprint"


def _reduced(logdir, pol):
    (o,) = api.reduce_logdir(logdir, policy=pol, dry_run=False, quiet_period=0).outcomes
    assert o.status == "verified", o.reason
    (row,) = api.restorable(logdir)
    return o, row


def _setup(s3_bucket, tmp_path):
    pol = tmp_path / "drop.json"
    pol.write_text(json.dumps(DROP_PROFILES))
    src = make_logdir(tmp_path / "logs", 1)
    disk = str(tmp_path / "disk")
    shutil.copytree(src, disk)
    return disk, s3_bucket.upload(src, "logs"), str(pol)


def test_a_bucket_reduction_lists_its_checks_and_fidelity_as_a_disk_s(s3_bucket, tmp_path):
    disk, url, pol = _setup(s3_bucket, tmp_path)
    _, d = _reduced(disk, pol)
    _, b = _reduced(url, pol)
    assert d["verified"] is True and b["verified"] is True, (d, b)
    assert d["fidelity"] and b["fidelity"] == d["fidelity"], (d["fidelity"], b["fidelity"])
    by_name = {c["name"]: c for c in b["checks"]}
    # the checks the bucket made, in the disk's names; the route line the same words (a statement
    # of the plan on both: no route is crawled for a drop-only run)
    assert set(by_name) == {"routes", "removed files", "plan"}, b["checks"]
    assert set(by_name) <= {c["name"] for c in d["checks"]}, d["checks"]
    assert [c for c in b["checks"] if c["name"] == "routes"] == [c for c in d["checks"] if c["name"] == "routes"]
    assert [c["detail"] for c in b["checks"] if c["name"] == "plan"] == b["fidelity"]
    assert by_name["removed files"]["detail"] == (
        f"{b['files']} file(s) backed up by server-side copy (the store's checksum verified) and removed")
    assert all(c["ok"] for c in b["checks"]) and b["failed"] == []
    (m,) = api.operations(url)
    assert m["verification"]["ok"] is True and m["verification"]["mode"] == "listing"
    assert m["plan"]["fidelity"] == b["fidelity"]


def test_a_bucket_manifest_without_them_or_with_them_malformed_reads_as_before(s3_bucket, tmp_path):
    _disk, url, pol = _setup(s3_bucket, tmp_path)
    o, _ = _reduced(url, pol)
    rfs = RemoteFS(url)
    key = f"{STATE}/manifests/{o.op_id}.json"
    doc = json.loads(rfs.read_bytes(key))
    assert "verification" in doc and "plan" in doc
    old = {k: v for k, v in doc.items() if k not in ("verification", "plan")}
    for stored in (old, dict(old, verification={"ok": "yes", "checks": 3}, plan={"fidelity": [1]})):
        rfs.write_bytes(key, json.dumps(stored).encode())
        (row,) = api.restorable(url)
        assert (row["op_id"], row["restorable"]) == (o.op_id, True), row
        assert (row["verified"], row["checks"], row["fidelity"]) == (None, [], []), row


def test_a_listing_after_the_swap_that_fails_rewrites_the_manifest_as_not_verified(s3_bucket, tmp_path, monkeypatch):
    _disk, url, pol = _setup(s3_bucket, tmp_path)
    real = bucket_batch.verify_batch

    def finds_a_change(ostore, vault, live, listing):
        out = real(ostore, vault, live, listing)
        return {run: dict(v, ok=False, error="exp0/run000/x: changed during the reduction") for run, v in out.items()}

    monkeypatch.setattr(bucket_batch, "verify_batch", finds_a_change)
    (o,) = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0).outcomes
    assert o.status == "failed", o
    (m,) = api.operations(url)
    assert m["verification"]["ok"] is False, m["verification"]
    assert m["verification"]["checks"][-1] == {
        "name": "store listing", "ok": False, "detail": "exp0/run000/x: changed during the reduction"}
    (row,) = api.restorable(url)
    assert row["verified"] is False and row["failed"] == ["exp0/run000/x: changed during the reduction"], row


def test_a_bucket_rewrite_read_by_tensorboard_s_readers_lists_their_checks_as_a_disk_s(s3_bucket, tmp_path):
    """A bucket rewrite of an event file (archive keeps a sample of its histograms and images) is
    verified by TensorBoard's readers over the staged run before its manifest is written: the
    manifest now says so (it said nothing: the tab showed ``verified: null``), with the disk's
    check names for the readers' comparison, the removed files and the plan's lines."""
    from test_objstore import _write_rewrite_logdir

    src = _write_rewrite_logdir(tmp_path / "logs")
    shutil.rmtree(src / "torch")
    disk = str(tmp_path / "disk")
    shutil.copytree(src, disk)
    url = s3_bucket.upload(src, "logs")
    _, d = _reduced(disk, "archive")
    _, b = _reduced(url, "archive")
    assert d["verified"] is True and b["verified"] is True, (d, b)
    assert b["fidelity"] == d["fidelity"] and b["fidelity"], (d["fidelity"], b["fidelity"])
    assert all(c["ok"] for c in b["checks"]) and b["failed"] == []
    # the readers' comparison (records, tag index, routes, ...): the very checks a disk's
    # verification names for the same run
    names_b, names_d = {c["name"] for c in b["checks"]}, {c["name"] for c in d["checks"]}
    assert names_b == names_d and {"records", "tag index", "routes", "run present"} <= names_b, (names_d, names_b)
    assert [c["detail"] for c in b["checks"] if c["name"] == "plan"] == b["fidelity"]
    (m,) = api.operations(url)
    assert m["verification"]["ok"] is True and "mode" not in m["verification"], m["verification"]
    assert m["verification"]["backends"] and "TensorBoard readers" in m["verification"]["backends"][0]
