"""r37 W's note: a bucket ``recover`` given no ``--backup-dir`` looked for the backups a damaged index object of
the blob folder hides only in ``--backup-dir``'s folder, so it found nothing, while status (which takes the folder
the manifests record) and a restore's words sent the user to ``recover``. Now the ``recover`` verb takes the
recorded folder by the one rule of status, verify and purge (``bucket_blob_folder.choose_folder``); a start does
not (it would read every manifest). On moto."""
import glob
import os

import pytest

from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import Finding

from test_bucket_blob_rollback_releases import _reduce, prof_logdir  # noqa: F401

pytestmark = pytest.mark.usefixtures("disarm_faults")

GARBAGE = b"\x00garbage{not json\xff" * 3


def test_recover_without_backup_dir_rebuilds_the_recorded_folders_damaged_index(s3_bucket, prof_logdir, tmp_path):
    url = s3_bucket.upload(prof_logdir, "ri0")
    folder = str(tmp_path / "blobs")
    (o,) = _reduce(url, folder, ["prof/r0"])
    assert o.status == codes.Outcome.VERIFIED, o.reason
    damaged = sorted(glob.glob(os.path.join(folder, "index", "*.json")))
    assert damaged
    for p in damaged:
        with open(p, "wb") as f:
            f.write(GARBAGE)
    # a start (thorough=False) does not read the manifests for it
    assert not [x for x in api.recover_logdir(url, thorough=False) if x.code == Finding.PACK_INDEX_REBUILT]
    outs = api.recover_logdir(url)  # the verb, no --backup-dir
    assert [x for x in outs if x.code == Finding.PACK_INDEX_REBUILT and folder in x.detail], [vars(x) for x in outs]
    (back,) = api.restore(url, run="prof/r0")
    assert back.status == codes.Outcome.RESTORED, back.reason
