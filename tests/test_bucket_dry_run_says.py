"""A bucket's dry run says what it knows, and only that (review R14 F8).

* ``freed_now_bytes`` / ``freed_on_disk_after_purge_bytes`` of a bucket's dry run are null (the
  plan's retention note says when a bucket frees its bytes), not 0 while the reduce then frees
  megabytes;
* the request estimate knows the local vault of blobs (``--backup-dir``): each backup downloaded
  into the folder and uploaded back by a restore, not a server-side copy;
* the plan no longer says "--vault-format hardlink cannot be honoured" when nobody asked for it.
"""
import pytest

from tb_footprint_plugin import api
from test_bucket_blobvault import DROP, mixed_logdir  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_bucket_dry_run_freed_is_null_and_the_cost_knows_the_blob_vault(s3_bucket, mixed_logdir, tmp_path):  # noqa: F811
    url = s3_bucket.upload(mixed_logdir, "drysays")
    plain = api.reduce_logdir(url, policy=DROP, dry_run=True, quiet_period=0)
    d = plain.to_dict()
    assert d["freed_now_bytes"] is None and d["freed_on_disk_after_purge_bytes"] is None, d
    blobs = api.reduce_logdir(url, backup_dir=str(tmp_path / "vault"), policy=DROP, dry_run=True, quiet_period=0)
    files = [a for rp in blobs.plan.runs if not rp.skipped for a in rp.actions if a.kind != "remove_dir"]
    assert files
    c0, c1 = plain.plan.cost["reduce"], blobs.plan.cost["reduce"]
    # copies: the server-side backups are gone, each backup downloaded instead
    assert c0["copy"] - c1["copy"] == len(files), (c0, c1)
    assert c1["bytes_down"] - c0["bytes_down"] == sum(a.bytes_before for a in files), (c0, c1)
    r0, r1 = plain.plan.cost["restore"], blobs.plan.cost["restore"]
    assert r1["copy"] == 0 and r1["put"] - r0["put"] == len(files) and r1["bytes_up"] > 0, (r0, r1)
    assert not any("hardlink cannot be honoured" in n for n in blobs.plan.notes), blobs.plan.notes
    assert any(n.startswith("backups: compressed blobs in") for n in blobs.plan.notes), blobs.plan.notes
