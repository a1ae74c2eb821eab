"""A blob folder a bucket manifest records is used (no ``--backup-dir``) only when the folder's own
``places/`` records list this logdir (review R24's note on 0f2b57c): a bucket writer can edit
``blob_folder`` (and ``host``) so logdir A's purge or restore opens another folder of ours on this
host, logdir B's. Now that folder is refused naming it and the manifest (``Failure.REFUSED``: for
each operation whose manifest names it, the others purged), nothing there is changed, A's bucket is as it was; given with ``--backup-dir`` A's own folder still
restores. On moto, two logdirs, two folders of ours."""
import json
import os

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
    root = tmp_path_factory.mktemp("places") / "demo"
    demo.generate_demo(str(root), scale=0.05)
    for p in root.glob(".footprint-demo*"):
        p.unlink()
    return root


def _tree(folder):
    """rel path -> (size, mtime_ns, mode) of every file and folder under ``folder``."""
    out = {}
    for d, ds, names in os.walk(folder):
        for n in ds + names:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[os.path.relpath(p, folder)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _point_manifests_at(url, folder):
    """Every manifest of the logdir at ``url`` edited (as a bucket writer can) to record ``folder``."""
    rfs = RemoteFS(url)
    keys = [k for k in rfs.list_tree(f"{STATE}/manifests") if k.endswith(".json")]
    assert keys
    for k in keys:
        doc = json.loads(rfs.read_bytes(k))
        assert doc["blob_folder"] and doc["blob_folder"] != folder
        doc["blob_folder"] = folder
        rfs.write_bytes(k, json.dumps(doc).encode())
    return keys


@pytest.fixture
def two(s3_bucket, demo_logdir, tmp_path):
    """Logdirs A and B of this user, each reduced into a folder of its own (both ours, 0700)."""
    out = {}
    for name in ("A", "B"):
        prefix = f"pl{next(_n)}{name}"
        url = s3_bucket.upload(demo_logdir, prefix)
        folder = str(tmp_path / f"blobs{name}")
        before = s3_bucket.hashes(prefix, skip=(STATE + "/",))
        rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0)
        assert [o for o in rep.outcomes if o.status == codes.Outcome.VERIFIED], rep.to_dict()
        out[name] = (url, folder, prefix, before)
    return out


def test_a_restore_or_purge_refuses_another_logdirs_folder_a_manifest_names(two, s3_bucket):
    url, folder_a, prefix, before = two["A"]
    _url_b, folder_b, _pb, _ = two["B"]
    assert os.path.isdir(os.path.join(folder_b, "places"))
    keys = _point_manifests_at(url, folder_b)
    seen_b = _tree(folder_b)
    reduced = s3_bucket.hashes(prefix, skip=(STATE + "/",))

    res = api.restore(url)
    assert res and all(o.status == codes.Outcome.FAILED and o.code == codes.Failure.REFUSED
                       and folder_b in o.reason and "places/" in o.reason for o in res), [o.to_dict() for o in res]
    assert any(k.rsplit("/", 1)[-1] in o.reason for o in res for k in keys), [o.reason for o in res]  # the manifest
    assert _tree(folder_b) == seen_b
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) == reduced

    # each operation naming that folder is refused, named with its manifest (review R25 L3: the whole purge was)
    rep = api.purge(url, yes=True)
    refused = [r for r in rep.refused if r.get("code") == codes.Failure.REFUSED and folder_b in r["detail"]]
    assert not rep.ops and refused and len(refused) == len(keys), rep.to_dict()
    assert _tree(folder_b) == seen_b

    # A's own folder, given, still gives every run back byte for byte (nothing was lost)
    res = api.restore(url, backup_dir=folder_a)
    assert res and {o.status.value for o in res} == {"restored"}, [o.to_dict() for o in res]
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) == before


def test_this_logdirs_own_recorded_folder_is_still_used(two, s3_bucket):
    """The rule's other side: A's folder lists A (``places/``), so A's restore takes it by itself."""
    url, _folder_a, prefix, before = two["A"]
    res = api.restore(url)
    assert res and {o.status.value for o in res} == {"restored"}, [o.to_dict() for o in res]
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) == before


def test_a_retired_runs_restore_refuses_another_logdirs_folder(two, s3_bucket, demo_logdir, tmp_path):
    url, folder_a, prefix, _before = two["A"]
    _url_b, folder_b, _pb, _ = two["B"]
    api.restore(url)  # A's reductions given back first: the retirement is what is tested
    (o,) = api.retire(url, api.retire_rule(runs=["jax_profile"]), dry_run=False, backup_dir=folder_a,
                      quiet_period=0).outcomes
    assert o.status == codes.Outcome.VERIFIED, o.reason
    retired = s3_bucket.hashes(prefix, skip=(STATE + "/",))
    rfs = RemoteFS(url)
    for k in [k for k in rfs.list_tree(f"{STATE}/manifests") if k.endswith(".json")]:
        doc = json.loads(rfs.read_bytes(k))
        if doc.get("blob_folder") == folder_a:
            doc["blob_folder"] = folder_b
            rfs.write_bytes(k, json.dumps(doc).encode())
    seen_b = _tree(folder_b)
    (back,) = api.restore(url, run="jax_profile")
    assert back.status == codes.Outcome.FAILED and back.code == codes.Failure.REFUSED and folder_b in back.reason, \
        back.to_dict()
    assert _tree(folder_b) == seen_b
    assert s3_bucket.hashes(prefix, skip=(STATE + "/",)) == retired
    (back,) = api.restore(url, run="jax_profile", backup_dir=folder_a)
    assert back.status == codes.Outcome.RESTORED, back.to_dict()
