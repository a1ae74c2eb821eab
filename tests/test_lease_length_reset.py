"""After ``api.reduce_logdir(lease_seconds=...)`` the process's lease length is what it was before
(r19 report A2): a restore or recover the same process (a notebook, the TensorBoard plugin) runs
later takes its run leases for its own length, not for the batch's."""
import os
import time

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import lease


def _logdir(root):
    """One small run (scalars and a profile session), aged past the quiet period."""
    old = time.time() - 86400
    run = os.path.join(root, "run0")
    os.makedirs(run)
    with synth.EventWriter(run, timestamp=1_700_000_000) as w:
        for step in range(20):
            w.scalar("loss", step, 1.0 / (step + 1))
    synth.write_profile_session(run, synth.session_name_for(1_700_000_000), "host", n_events=50, seed=0)
    for d, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(d, f), (old, old))
    return str(root)


@pytest.fixture(autouse=True)
def _length_kept():
    before = lease.lease_seconds()
    yield
    lease.configure(before)


def test_a_reduce_with_its_own_lease_length_gives_the_length_back(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path / "logs")
    lease.configure(77.0)
    seen = []
    real = lease.lease_doc
    monkeypatch.setattr(lease, "lease_doc", lambda *a, **kw: seen.append(lease.lease_seconds()) or real(*a, **kw))
    rep = api.reduce_logdir(logdir, dry_run=False, lease_seconds=900.0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"]
    assert seen and set(seen) == {900.0}  # the batch's own leases were its length
    assert lease.lease_seconds() == 77.0
    seen.clear()
    outs = api.restore(logdir)
    assert [o.status for o in outs] == ["restored"]
    assert seen and set(seen) == {77.0}  # a restore after it: this process's length again


def test_a_reduce_that_fails_gives_the_lease_length_it_found_back(tmp_path):
    logdir = _logdir(tmp_path / "logs")
    lease.configure(55.0)
    with pytest.raises(ValueError, match="shard_with"):
        api.reduce_logdir(logdir, dry_run=False, lease_seconds=600.0, shard=(0, 2),
                          shard_with=[str(tmp_path / "elsewhere")])
    assert lease.lease_seconds() == 55.0
