"""Bucket vault of blobs: what a reduce says and what a purge does with odd state (review W's S3,
helper U's items for the bucket engine)."""
import json

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.storage.remote import RemoteFS

from test_bucket_blobvault import STATE, _disarm, _user, mixed_logdir  # noqa: F401 - fixtures

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
