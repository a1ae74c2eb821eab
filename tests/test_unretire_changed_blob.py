"""Issue #26: a bucket retirement into a local blob folder (``--backup-dir``) whose blob of one
file no longer reads as its sha256 (its stored bytes changed in place) is restored as a disk's
retirement with a changed stored file (``retire.DiskUnretire.begin``): the run's other objects go
back, the changed one stays in the folder, named ``not_restored`` and ``backup_changed``, and the
folder keeps its blob. Before, the whole run was refused. On moto."""
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome

STATE = ".tb-footprint/"
SECRET = os.urandom(8192)  # incompressible: stored as it is, so found in the folder's files

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _user(bucket):
    return {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(STATE)}


def _stored_at(vault: str, data: bytes):
    """(file, offset) of ``data`` in the blob folder's files."""
    for d, _dirs, files in os.walk(vault):
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                i = f.read().find(data)
            if i >= 0:
                return p, i
    raise AssertionError("the blob's bytes are not in the folder")


def test_a_changed_blob_stays_in_the_folder_and_the_others_go_back(s3_bucket, tmp_path):
    root = tmp_path / "logs"
    with synth.EventWriter(str(root / "train")) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    (root / "train" / "weights.bin").write_bytes(SECRET)
    url = s3_bucket.upload(root, "logs")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket)
    [o] = api.retire(url, api.retire_rule(runs=["train"]), dry_run=False, backup_dir=vault,
                     quiet_period=0).outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    p, at = _stored_at(vault, SECRET)
    with open(p, "r+b") as f:  # the same size, its first bytes another's
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in SECRET[:16]))

    [o] = api.restore(url, run="train", backup_dir=vault)
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    assert sorted((f["code"], f["path"]) for f in o.findings) == [
        (Finding.BACKUP_CHANGED, "train/weights.bin"), (Finding.NOT_RESTORED, "train/weights.bin")], o.findings
    assert _user(s3_bucket) == {k: v for k, v in before.items() if k != "train/weights.bin"}
    with open(p, "rb") as f:  # kept as it is, in the folder
        assert f.read()[at + 16:at + len(SECRET)] == SECRET[16:]
    assert not api.status(url, backup_dir=vault)["unfinished_operations"]
