"""A restore never links a later name of an inode to another user's file at its first name (review
R19 F1 on bd33e54): root restores a run of user NOBODY whose first name another user (MALLORY) made
again meanwhile with the same bytes, mode and mtime. Linked, the later name's bytes would be in a
file MALLORY may rewrite, the vault's copy released; it comes back as NOBODY's own file instead."""
import os
import shutil

import pytest

from conftest import copy_real
from tb_footprint_plugin import api

pytestmark = [pytest.mark.usefixtures("disarm_faults"),
              pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a file to another user")]
NOBODY, MALLORY = 65534, 4242
TRACE = "vm_25684.1795998065836083456.pt.trace.json"


def test_a_later_name_is_never_linked_to_another_users_inode(tmp_path):
    logdir = tmp_path / "ld"
    run = copy_real("torch/profiled", logdir / "torch")
    shutil.rmtree(run / "1795998068.7669468")
    os.link(run / TRACE, run / "twin.pt.trace.json")
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.chown(os.path.join(d, n), NOBODY, NOBODY, follow_symlinks=False)
    os.chown(logdir, NOBODY, NOBODY)
    os.utime(run, (os.path.getmtime(run / TRACE),) * 2)
    original = (run / TRACE).read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            include_others_runs=True, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    later = next(f for f in m["files"] if f.get("link_of"))
    first, second = logdir / later["link_of"], logdir / later["path"]
    assert not first.exists() and not second.exists()
    # another user re-makes the first name: the original's bytes, mode and mtime, their inode
    first.write_bytes(original)
    os.chmod(first, later["mode"])
    os.utime(first, ns=(later["mtime_ns"], later["mtime_ns"]))
    os.chown(first, MALLORY, MALLORY)
    outs = api.restore(str(logdir), run="torch")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    st = os.lstat(second)
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY), "the later name is now another user's inode"
    assert st.st_ino != os.lstat(first).st_ino
