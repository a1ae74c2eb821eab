"""Review R22 F4 (its repro, kept as a test): a writer renames new bytes over a file the plan deletes after its backup was made
and before the swap; the disk's rollback must not delete the backup, the original's last copy
(the bucket keeps it: ``bucket_steps.rollback_entry``; the disk's recovery refuses such a journal:
``health.not_in_place``)."""
from __future__ import annotations

import hashlib
import os

import pytest

from helpers_runs import aged_small_runs
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def test_a_rollback_keeps_the_backup_of_an_original_a_writer_replaced(tmp_path):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    run = os.path.join(logdir, "exp/run000")
    synth.write_profile_session(run, synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=300, seed=1)
    sess = os.path.join(run, "plugins", "profile", synth.session_name_for(synth.DEFAULT_TIMESTAMP))
    for dp, dn, fn in os.walk(logdir):
        for n in fn + dn:
            os.utime(os.path.join(dp, n), (1_600_000_000, 1_600_000_000))
    [xplane] = [os.path.join(sess, n) for n in os.listdir(sess) if n.endswith(".xplane.pb")]
    original = _sha(xplane)

    def writer():  # a new file renamed over the name, as an atomic save does
        with open(xplane + ".new", "wb") as f:
            f.write(b"a writer's new bytes, nowhere else" * 50)
        os.rename(xplane + ".new", xplane)

    faults.arm("reduce.backup", writer)
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()
    [o] = [o for o in rep.outcomes if o.run == "exp/run000"]
    assert o.status == "rolled_back", o
    assert open(xplane, "rb").read().startswith(b"a writer's new bytes")  # the writer's bytes stay
    # the original's bytes exist nowhere but in the vault: they must still be there
    blobs = os.path.join(logdir, ".tb-footprint", "blobs")
    have = {n.split(".")[0] for _d, _s, fs in os.walk(blobs) for n in fs}
    st = api.status(logdir)
    assert original in have, (st["operations"], sorted(have))
    assert o.code == "changed_since_backup" and {"code": "original_not_in_place", "path": os.path.relpath(
        xplane, logdir)} in o.findings, (o.code, o.findings)
    # status lists it where the vault keeps it, as the original not put back, with its bring-back
    # command; purge never takes it
    [row] = [k for k in st["kept_blobs"] if k["sha256"] == original]
    assert row["code"] == "not_restored" and row["present"] and "original, not put back by its rollback" in row["holds"]
    assert row["path"] == os.path.relpath(xplane, logdir)
    api.purge(logdir, yes=True)
    assert os.path.exists(row["blob"])
    dest = xplane + ".kept"
    import shlex, subprocess
    subprocess.run(shlex.split(row["bring_back"]), check=True)
    assert _sha(dest) == original
