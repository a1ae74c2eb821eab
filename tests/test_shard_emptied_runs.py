"""A run a reduction leaves with nothing the scan counts keeps its place in the shard partition.

A run of profile data only (Keras 2 and JAX write ``plugins/profile/`` without an event file) is
emptied by ``archive``: its folder stays, the scan finds no run there any more. Every worker
computes the partition from its own scan (``plan.shard``): one that scanned before another
worker emptied such a run counted it, one that scanned after did not, and with different
inputs a run could fall in no shard (left unreduced) or in two. The change log says the size
the emptied run had, as it does for a run reduced to less."""
import os
import time

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.scan.model import UNATTRIBUTED

OLD = time.time() - 86400


def _logdir(root) -> str:
    """Eight runs: four of profile data only (``jax*``), four with scalars as well (``tb*``)."""
    for i in range(8):
        run = os.path.join(str(root), f"jax{i}" if i < 4 else f"tb{i}")
        os.makedirs(run)
        synth.write_profile_session(run, synth.session_name_for(1_700_000_000 + i), "host",
                                    n_events=20 + 40 * i, seed=i)
        if i >= 4:
            with synth.EventWriter(run, timestamp=1_700_000_000 + i) as w:
                for step in range(5 + i):
                    w.scalar("loss", step, 1.0 / (step + 1))
    for d, _dirs, files in os.walk(str(root)):
        for f in files:
            os.utime(os.path.join(d, f), (OLD, OLD))
    return str(root)


def _runs(logdir):
    return sorted(r.name for r in api.scan(logdir).runs if r.name != UNATTRIBUTED)


def test_a_run_a_reduction_emptied_keeps_its_place_in_every_shard_plan(tmp_path):
    logdir = _logdir(tmp_path / "logs")
    sizes = api.shard_sizes([logdir])
    plans = [api.shard_plan([logdir], (i, 3), sizes=sizes) for i in range(3)]
    assert sorted(r for p in plans for r in p[logdir]) == _runs(logdir)  # each run in one shard
    report = api.reduce_logdir(logdir, dry_run=False, runs=["jax1", "jax3", "tb5"], verify_backends=("python",))
    assert [o.status for o in report.outcomes] == ["verified"] * 3
    # emptied: the folders stay, the scan finds no run in them (tb5 keeps its event file)
    assert os.path.isdir(os.path.join(logdir, "jax1")) and "jax1" not in _runs(logdir) and "tb5" in _runs(logdir)
    assert api.shard_sizes([logdir]) == sizes  # a worker scanning now computes what one before did
    # every run there is stays in its shard; the emptied ones are in none (nothing left to reduce)
    left = [{logdir: [r for r in p[logdir] if r not in ("jax1", "jax3")]} for p in plans]
    assert [api.shard_plan([logdir], (i, 3)) for i in range(3)] == left
    # a worker of each shard now reduces what is left and plans no emptied run (a run named that
    # no scan finds would be refused as a selection naming no run)
    for i in range(3):
        again = api.reduce_logdir(logdir, dry_run=False, shard=(i, 3), verify_backends=("python",))
        assert again.ok and {o.run for o in again.outcomes} <= set(left[i][logdir])
    assert _runs(logdir) == ["tb4", "tb5", "tb6", "tb7"]  # every run reduced once; jax* emptied

    # only a run whose folder is still there counts from the change log: one removed since (by
    # its owner) is gone for every worker alike, and never keeps a shard's share of the bytes
    os.rmdir(os.path.join(logdir, "jax3"))
    assert api.shard_sizes([logdir]) == {k: v for k, v in sizes.items() if not k.endswith("\0jax3")}
