"""A bucket reduction whose backups are blobs in a local folder, killed past its commit record:
``recover`` without ``--backup-dir``, the folder its manifest records moved away, refuses it
(nothing finished, nothing deleted) and says to give the folder, coded ``restore_blocked``; with
the folder the same journal is finished. Review R8 F8 (on 3d474fc): it said the backup was "no
longer in the blob vault (forgotten since it was added)", coded ``backup_damaged``, when the folder
was only not given. (With the recorded folder where it was, ``recover`` takes it by itself:
``test_bucket_recorded_folder_one_rule``.)"""
import os

import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults

from test_bucket_status_judges_journals import RUN, _logdir


def test_recover_without_the_folder_does_not_call_the_blobs_lost(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path), "logs")
    folder = str(tmp_path / "blobvault")
    faults.arm("reduce.swap_record", kill)
    try:
        with pytest.raises(Killed):
            api.reduce_logdir(url, folder, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    finally:
        faults.disarm_all()
    os.rename(folder, folder + ".moved")  # not where its manifest says: nothing to take by itself
    outs = api.recover_logdir(url)  # no --backup-dir
    said = [(o.action, o.code, o.detail) for o in outs]
    assert not any("forgotten" in (o.detail or "") or o.code == "backup_damaged" for o in outs), said
    assert [(o.action, o.code) for o in outs] == [("refused", "restore_blocked")], said
    assert "give that folder with --backup-dir" in outs[0].detail, said
    # given the folder, the same journal is finished: the run reduced and verified
    again = api.recover_logdir(url, folder + ".moved")
    assert [o.action for o in again] == ["completed"], [(o.action, o.code, o.detail) for o in again]
