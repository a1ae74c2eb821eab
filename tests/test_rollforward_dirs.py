"""A reduce killed after its swap record, rolled forward by the next start, keeps the removed
folders' mode and mtime in its manifest, so a restore remakes them as they were (review R14 F1).
Before, recovery wrote the manifest from the records read before the roll-forward, which
journals the ``rmdir`` of each folder it removes: the manifest named no removed folder, and the
restore remade them by ``os.makedirs`` (umask mode, the restore's time): a 0700 profile session
folder came back 0755."""
import os

import pytest

from conftest import copy_real
from helpers_crash import Killed, kill
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")
T = 1_672_531_200_123_456_789  # 2023-01-01, with nanoseconds


def _tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.startswith(".tb-footprint"):
                continue
            st = os.lstat(p)
            out[rel] = (st.st_mode, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("step", ["reduce.swap_record", "reduce.mid_swap"])
def test_removed_folders_come_back_as_they_were_after_a_rolled_forward_swap(tmp_path, step):
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    run = logdir / "tf" / "summary_mix"
    (session,) = (run / "plugins" / "profile").iterdir()
    os.chmod(session, 0o700)
    os.chmod(run / "plugins", 0o750)
    for d, dirs, files in os.walk(logdir, topdown=False):
        for n in dirs + files:
            os.utime(os.path.join(d, n), ns=(T, T), follow_symlinks=False)
    before = _tree(logdir)
    faults.arm(step, kill)
    with pytest.raises(Killed):
        api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"])
    faults.disarm_all()
    outs = api.recover_logdir(str(logdir))
    assert [o.action for o in outs if o.run == "tf/summary_mix" and "swap finished" in o.detail] == \
        [Recovery.COMPLETED], [vars(o) for o in outs]
    assert not session.exists()
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    assert {os.path.relpath(session, logdir)} <= {d["path"] for d in m.get("removed_dirs") or []}, m.get("removed_dirs")
    outs = api.restore(str(logdir), run="tf/summary_mix")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    after = _tree(logdir)
    assert {k: v for k, v in after.items() if v != before.get(k)} == {}
    assert after.keys() == before.keys()
