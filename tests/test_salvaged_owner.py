"""Root restoring a user's run leaves the ``.salvaged-NNN`` files it makes the user's (task N6
item 3). e558d46 gives a restored file its recorded owner when root; the late records put back
beside it (``keep_late_records``: a restore over a reduced file a writer appended to) and those
a start salvages from a grown backup (``salvage_one``) were root:root, so the user could not
remove or rename their own run's files. Now each gets the owner recorded for the file it comes
from (the folder's owner for a record from before owners were kept)."""
import os
import time
from pathlib import Path

import pytest

from test_late_records import PY, append_by_path, image_run
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding

pytestmark = [pytest.mark.usefixtures("disarm_faults"),
              pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a file to another user")]
NOBODY = 65534


def _give_all(root, uid=NOBODY):
    for d, dirs, files in os.walk(root):
        os.chown(d, uid, uid)
        for n in files:
            os.chown(os.path.join(d, n), uid, uid, follow_symlinks=False)


def test_the_late_records_a_restore_puts_back_are_the_users(tmp_path):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    _give_all(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY, include_others_runs=True)
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    append_by_path(path, 1000)  # the user's resumed job appends to the reduced file
    (o,) = api.restore(str(logdir))
    assert o.code == Finding.LATE_RECORDS_RESTORED, o.to_dict()
    salvaged = path.parent / (path.name + ".salvaged-001")
    assert salvaged.exists()
    assert (salvaged.stat().st_uid, salvaged.stat().st_gid) == (NOBODY, NOBODY)
    assert (path.stat().st_uid, path.stat().st_gid) == (NOBODY, NOBODY)


def test_the_records_a_start_salvages_from_a_grown_backup_are_the_users(tmp_path):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    _give_all(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY, include_others_runs=True,
                            vault_format="hardlink")
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    (f,) = [f for f in m["files"] if f["path"] == f"run/{path.name}"]
    blob = Path(m["vault"]) / f["blob"]
    # a writer that kept the original open through the reduction appends to its inode: the backup
    append_by_path(blob, 2000)
    time.sleep(0.01)
    api.recover_logdir(str(logdir))
    (salvaged,) = [p for p in path.parent.iterdir() if ".salvaged-" in p.name]
    assert (salvaged.stat().st_uid, salvaged.stat().st_gid) == (NOBODY, NOBODY)
