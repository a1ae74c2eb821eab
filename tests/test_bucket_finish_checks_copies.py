"""A bucket reduction killed past its commit record is finished by the next start only from copies
that are still in the vault as its copy step verified them (review R8 F1, the reduce half).

Before, ``recover`` finished it from the journal's ``backup_checksums`` alone: the copies removed
(by hand, a lifecycle rule) or replaced since, it deleted the originals, whose bytes were then
nowhere. Now one listing of ``blobs/<op>/``, each copy checked by its size and recorded checksums
(``bucket_steps.copies_there``): one missing or different -> refused, ``backup_damaged``, naming the
copy; nothing deleted, the journal kept; ``status`` says so beforehand in the same words. A local
blob folder's blobs no longer claimed there are refused alike (``bucket_blobs.missing_blobs``)."""
import os

import pytest

from helpers_crash import Killed, kill
from test_bucket_status_judges_journals import RUN, _killed_at, _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults

STATE = ".tb-footprint/"


def _user(hashes: dict) -> dict:
    return {k: v for k, v in hashes.items() if not k.startswith(STATE)}


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_finish_refused_when_a_copy_is_not_there(bucket, tmp_path, how):
    url = bucket.upload(_logdir(tmp_path), f"logs-{how}")
    before = _user(bucket.hashes(f"logs-{how}"))
    _killed_at(url, "reduce.swap_record")  # the commit record durable, nothing replaced yet
    copies = sorted(k for k in bucket.hashes(f"logs-{how}") if k.startswith(STATE + "blobs/"))
    assert copies
    for k in copies:  # lost (or overwritten) by hand before the next start
        path = f"{bucket.key(f'logs-{how}')}/{k}"
        if how == "removed":
            bucket.fs.rm(path)
        else:
            bucket.fs.pipe_file(path, b"other bytes at the backup key")
    bucket.fs.invalidate_cache()
    [op] = api.unfinished(url)["unfinished_operations"]
    will = op["recover_will"]
    assert will["action"] == Recovery.REFUSED and will["code"] == Finding.BACKUP_DAMAGED, will
    assert "/.tb-footprint/blobs/" in will["detail"] and "nothing deleted" in will["detail"], will
    out = [r for r in api.recover_logdir(url) if r.run == op["run"]]
    assert [(r.action, r.code, r.detail) for r in out] == [(Recovery.REFUSED, Finding.BACKUP_DAMAGED, will["detail"])]
    after = bucket.hashes(f"logs-{how}")
    held = set(after.values())
    assert [k for k, h in before.items() if h not in held] == [], "an original with no copy anywhere"
    assert _user(after) == before  # nothing of the run deleted or replaced
    assert any(k.startswith(STATE + "journal/") for k in after)  # the journal kept, for the user to look at
    # the next start says the same: still refused, still nothing deleted
    again = [r for r in api.recover_logdir(url) if r.run == op["run"]]
    assert [r.action for r in again] == [Recovery.REFUSED] and _user(bucket.hashes(f"logs-{how}")) == before


def test_finish_goes_on_when_every_copy_is_there(bucket, tmp_path):
    """The listing's checksums of each store (S3 ETag, GCS md5/crc32c, Azure Content-MD5) agree with
    those the copy step recorded: an intact reduction is finished as before, status said so."""
    url = bucket.upload(_logdir(tmp_path), "logs-intact")
    _killed_at(url, "reduce.swap_record")
    [op] = api.unfinished(url)["unfinished_operations"]
    assert op["recover_will"]["action"] == Recovery.COMPLETED, op
    out = [r for r in api.recover_logdir(url) if r.run == op["run"]]
    assert [(r.action, r.detail) for r in out] == [(Recovery.COMPLETED, op["recover_will"]["detail"])]
    assert api.unfinished(url)["unfinished_operations"] == []


def test_finish_refused_when_a_blob_is_gone_from_the_local_folder(s3_bucket, tmp_path):
    """The same with the backups kept as blobs in a local ``--backup-dir`` folder: the folder's
    blobs lost past the commit record (the folder emptied) -> refused, nothing deleted."""
    import shutil

    folder = str(tmp_path / "vault")
    url = s3_bucket.upload(_logdir(tmp_path / "src"), "logs-blobs")
    before = _user(s3_bucket.hashes("logs-blobs"))
    faults.arm("reduce.swap_record", kill)
    try:
        with pytest.raises(Killed):
            api.reduce_logdir(url, backup_dir=folder, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    finally:
        faults.disarm_all()
    shutil.rmtree(folder)
    os.makedirs(folder)
    [op] = api.unfinished(url, folder)["unfinished_operations"]
    will = op["recover_will"]
    assert will["action"] == Recovery.REFUSED and will["code"] == Finding.BACKUP_DAMAGED, will
    out = [r for r in api.recover_logdir(url, folder) if r.run == op["run"]]
    assert [(r.action, r.code, r.detail) for r in out] == [(Recovery.REFUSED, Finding.BACKUP_DAMAGED, will["detail"])]
    assert _user(s3_bucket.hashes("logs-blobs")) == before  # every original still in the run
