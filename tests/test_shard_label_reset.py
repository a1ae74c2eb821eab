"""After ``api.reduce_logdir(shard=...)`` the process's shard label is what it was before (r19
report A): the label goes into every lease, lock and change-log line this process writes, so a
restore or recover the same process (a notebook, the TensorBoard plugin) runs later would name
a batch it is no part of."""
import os
import time

import pytest

from helpers_runs import age_tree, write_small_run
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import lease


def _logdir(root):
    """Two small runs (scalars and a profile session each), aged past the quiet period."""
    for i in range(2):
        write_small_run(os.path.join(root, f"run{i}"), i, steps=20, tags=("loss",), n_events=50)
    age_tree(root, time.time() - 86400)
    return str(root)


@pytest.fixture(autouse=True)
def _label_kept():
    before = lease.shard_label()
    yield
    lease.configure(shard=before)


def test_a_sharded_reduce_leaves_no_shard_label_behind(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path / "logs")
    assert lease.shard_label() is None
    rep = api.reduce_logdir(logdir, dry_run=False, shard=(0, 1), verify_backends=("python",))
    assert [o.status for o in rep.outcomes] and all(o.status == "verified" for o in rep.outcomes)
    assert lease.shard_label() is None
    # a restore right after, in the same process, takes its run locks under no shard's name
    leases = []
    real = lease.lease_doc
    monkeypatch.setattr(lease, "lease_doc", lambda *a, **kw: leases.append(real(*a, **kw)) or leases[-1])
    outs = api.restore(logdir)
    assert [o.status for o in outs] == ["restored"] * len(rep.outcomes)
    assert leases and [d["shard"] for d in leases] == [None] * len(leases)


def test_a_sharded_reduce_that_fails_gives_the_label_it_found_back(tmp_path):
    logdir = _logdir(tmp_path / "logs")
    lease.configure(shard="3/4")
    with pytest.raises(ValueError, match="shard_with"):
        api.reduce_logdir(logdir, dry_run=False, shard=(0, 2), shard_with=[str(tmp_path / "elsewhere")])
    assert lease.shard_label() == "3/4"
    api.reduce_logdir(logdir, dry_run=False, shard=(1, 2), verify_backends=("python",))
    assert lease.shard_label() == "3/4"
