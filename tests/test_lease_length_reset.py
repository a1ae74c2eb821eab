"""After ``api.reduce_logdir(lease_seconds=...)`` the process's lease length is what it was before
(r19 report A2): a restore or recover the same process (a notebook, the TensorBoard plugin) runs
later takes its run leases for its own length, not for the batch's."""
import os
import time

import pytest

from helpers_runs import age_tree, write_small_run
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import lease


def _logdir(root):
    """One small run (scalars and a profile session), aged past the quiet period."""
    for i in range(1):
        write_small_run(os.path.join(root, f"run{i}"), i, steps=20, tags=("loss",), n_events=50)
    age_tree(root, time.time() - 86400)
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
