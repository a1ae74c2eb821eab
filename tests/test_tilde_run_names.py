"""A run whose name starts with '~' (``~old/run1``: a common way to park runs) is an ordinary run:
reduced, verified and restored byte for byte on a disk and in a bucket, never taken for a home
folder. Before, the containment rule refused every path starting with '~' ("an absolute path
where a path inside the logdir belongs"), so such a run failed every reduce (review R12 F6)."""
import os
import time
from pathlib import Path

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome

from conftest import user_files
from test_objstore import _logdir_hashes

OLD = time.time() - 7 * 86400
RUNS = ("~old/run1", "ok/run2")


def _logdir(root: Path) -> Path:
    for name in RUNS:
        with synth.EventWriter(str(root / name)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
        synth.write_profile_session(str(root / name))
    for dirpath, _dirs, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(dirpath, n), (OLD, OLD))
    return root


def test_a_tilde_run_on_disk_is_reduced_and_restored(tmp_path):
    logdir = _logdir(tmp_path / "logdir")
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False)
    assert {o.run: o.status for o in rep.outcomes} == dict.fromkeys(RUNS, Outcome.VERIFIED), \
        [o.to_dict() for o in rep.outcomes]
    assert not any(k.startswith("~old/run1/plugins") for k in user_files(logdir))
    outs = api.restore(str(logdir), run="~old/run1")
    assert [o.status for o in outs] == [Outcome.RESTORED], [o.to_dict() for o in outs]
    assert {k: v for k, v in user_files(logdir).items() if k.startswith("~old/")} == \
        {k: v for k, v in before.items() if k.startswith("~old/")}


def test_a_tilde_run_in_a_bucket_is_reduced_and_restored(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "tilde")
    before = _logdir_hashes(s3_bucket, "tilde")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0)
    assert {o.run: o.status for o in rep.outcomes} == dict.fromkeys(RUNS, Outcome.VERIFIED), \
        [o.to_dict() for o in rep.outcomes]
    assert not any(k.startswith("~old/run1/plugins") for k in _logdir_hashes(s3_bucket, "tilde"))
    outs = api.restore(url, run="~old/run1")
    assert [o.status for o in outs] == [Outcome.RESTORED], [o.to_dict() for o in outs]
    assert {k: v for k, v in _logdir_hashes(s3_bucket, "tilde").items() if k.startswith("~old/")} == \
        {k: v for k, v in before.items() if k.startswith("~old/")}
