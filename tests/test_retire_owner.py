"""Root retiring and unretiring a user's run gives every file and folder back to its user (task
N6 item 2, the rule e558d46 set for restore). Before, the folders unretire (and a retirement's
rollback) makes again were root:root, and across filesystems every file copied back too: the
user could no longer write into their own run. The owner is recorded beside mode and mtime
(journal ``files``/``dirs``, the manifest's ``tree``/``dirs``) and given back with ``fchown``
through each file's or folder's own fd, only when root."""
import os
import shutil
import uuid
from pathlib import Path

import pytest

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults

pytestmark = [pytest.mark.usefixtures("disarm_faults"),
              pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a file to another user")]
NOBODY = 65534


def _owners(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.split(os.sep)[0].startswith(".tb-footprint"):
                continue
            st = os.lstat(p)
            out[rel] = (st.st_uid, st.st_gid)
    return out


@pytest.fixture(params=["same_fs", "cross_fs"])
def vault(request):
    if request.param == "same_fs":
        yield None
        return
    d = Path("/dev/shm") / f"tbfp-owner-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)


def _users_logdir(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.chown(os.path.join(d, n), NOBODY, NOBODY, follow_symlinks=False)
    before = _owners(logdir)
    assert before and set(before.values()) == {(NOBODY, NOBODY)}
    return logdir, before


def test_unretire_gives_back_the_owner_of_every_file_and_folder(tmp_path, vault):
    logdir, before = _users_logdir(tmp_path)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_others_runs=True), dry_run=False, backup_dir=vault)
    assert rep.ok and [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert not (logdir / "train").exists()
    (m,) = [m for m in api.operations(str(logdir), backup_dir=vault) if m.get("kind") == "retire"]
    outs = api.restore(str(logdir), op=m["op_id"], backup_dir=vault)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    after = _owners(logdir)
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if v != before[k]} == {}
    assert {(e.get("uid"), e.get("gid")) for e in m["tree"] + m["dirs"]} == {(NOBODY, NOBODY)}


def test_a_rolled_back_retirement_gives_back_the_owner(tmp_path, vault):
    logdir, before = _users_logdir(tmp_path)
    faults.arm("retire.delete")  # every file in the vault, every folder removed: then it fails
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_others_runs=True), dry_run=False, backup_dir=vault)
    assert [o.status for o in rep.outcomes] == ["rolled_back"], rep.to_dict()
    after = _owners(logdir)
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if v != before[k]} == {}
