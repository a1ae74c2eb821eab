"""A run a reduction empties on a bucket keeps its place in the shard partition (issue #28).

A run of profile data only (Keras 2 and JAX write ``plugins/profile/`` without an event file) is
emptied by ``archive``: on a bucket no folder is left, the listing finds no run there any more.
Every shard worker computes the partition from its own listing (``plan.shard``): one that listed
before another worker emptied such a run counted it, one that listed after did not, and with
different inputs a run fell in no shard (left unreduced) or in two. The change log (the vault's
manifests) says the size the emptied run had and whether a restore gave it back since."""
import os
import time

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.scan.model import UNATTRIBUTED

OLD = time.time() - 86400
SHARDS = 4


def _logdir(root) -> str:
    """Twelve runs: six of profile data only (``jax*``), six with scalars as well (``tb*``)."""
    for i in range(12):
        run = os.path.join(str(root), f"jax{i}" if i < 6 else f"tb{i}")
        os.makedirs(run)
        synth.write_profile_session(run, synth.session_name_for(1_700_000_000 + i), "host",
                                    n_events=20 + 40 * i, seed=i)
        if i >= 6:
            with synth.EventWriter(run, timestamp=1_700_000_000 + i) as w:
                for step in range(5 + i):
                    w.scalar("loss", step, 1.0 / (step + 1))
    for d, _dirs, files in os.walk(str(root)):
        for f in files:
            os.utime(os.path.join(d, f), (OLD, OLD))
    return str(root)


def _runs(url):
    return sorted(r.name for r in api.scan(url).runs if r.name != UNATTRIBUTED)


def _plans(url, sizes=None):
    return [api.shard_plan([url], (i, SHARDS), sizes=sizes)[url] for i in range(SHARDS)]


def test_workers_listing_before_and_after_a_run_is_emptied_on_a_bucket_agree(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    before = s3_bucket.hashes("logs")
    sizes = api.shard_sizes([url])
    plans = _plans(url, sizes)
    assert sorted(r for p in plans for r in p) == _runs(url)  # each run in one shard
    report = api.reduce_logdir(url, dry_run=False, runs=["jax1", "jax4", "tb7"], verify_backends=("python",),
                               quiet_period=0)
    assert [o.status for o in report.outcomes] == ["verified"] * 3, [o.reason for o in report.outcomes]
    # emptied: the listing finds no run there (tb7 keeps its event file)
    assert "jax1" not in _runs(url) and "jax4" not in _runs(url) and "tb7" in _runs(url)
    # a worker listing now computes the partition one that listed before did: each run there is
    # stays in its shard, none falls in no shard or in two; the emptied ones are in none
    assert api.shard_sizes([url]) == sizes
    left = [[r for r in p if r not in ("jax1", "jax4")] for p in plans]
    assert _plans(url) == left
    # every worker of the four now reduces what is left and plans no emptied run
    for i in range(SHARDS):
        again = api.reduce_logdir(url, dry_run=False, shard=(i, SHARDS), verify_backends=("python",), quiet_period=0)
        assert again.ok and {o.run for o in again.outcomes} <= set(left[i]), [(o.run, o.reason) for o in again.outcomes]
    assert _runs(url) == sorted(f"tb{i}" for i in range(6, 12))
    assert api.shard_sizes([url]) == sizes

    # a restore gives jax1 back: it is listed again with its size, its place unchanged
    assert [o.status for o in api.restore(url, run="jax1")] == ["restored"]
    assert "jax1" in _runs(url) and api.shard_sizes([url]) == sizes
    # restored, then removed by its owner: a worker listing now cannot tell that restore from one
    # made after its listing passed jax1 (as one listing it back would count it): it still weighs
    s3_bucket.fs.rm(s3_bucket.key("logs/jax1"), recursive=True)
    assert api.shard_sizes([url]) == sizes
    # a restore older than the clocks' skew: gone for every worker alike, none plans it
    monkeypatch.setattr(sharding, "CLOCK_SKEW", 0)
    assert api.shard_sizes([url]) == {k: v for k, v in sizes.items() if not k.endswith("\0jax1")}
    # nothing lost: the other runs restore byte for byte
    assert all(o.status == "restored" for o in api.restore(url))
    now = s3_bucket.hashes("logs")
    assert {k: v for k, v in now.items() if not k.startswith((".tb-footprint/", "jax1/"))} == \
        {k: v for k, v in before.items() if not k.startswith("jax1/")}


def test_only_a_restore_of_that_reduction_takes_an_emptied_run_out_of_the_partition():
    from tb_footprint_plugin.plan.shard import original_sizes

    def red(run, op, before):
        return {"kind": "reduce", "outcome": "verified", "run": run, "op_id": op, "before": before}

    def back(run, op, time=1000.0):
        return {"kind": "restore", "outcome": "restored", "run": run, "op_id": op, "of_op": op, "time": time}

    log = [red("a", "op1", 10), red("b", "op2", 20), red("c", "op3", 30), red("c", "op4", 25), back("c", "op4"),
           red("d", "op5", 40), back("d", "op5"), back("a", "op2"), {"kind": "restore", "run": "b", "of_op": "op2"}]
    there = lambda run: True  # noqa: E731 (a bucket's)
    # a: restore line naming another run's reduction; b: no outcome; c: only its newer reduction restored
    assert original_sizes({}, log, there) == {"a": 10, "b": 20, "c": 30}
    assert original_sizes({}, log) == {}  # no rule given: only the scan's runs
    assert original_sizes({"d": 7}, log, there) == {"d": 40, "a": 10, "b": 20, "c": 30}
    # an in-flight journal's entry (no op id) stands: nothing restores a reduction under way
    assert original_sizes({}, [red("e", "op6", 5), back("e", "op6"),
                               {"kind": "reduce", "outcome": "verified", "run": "e", "before": 6}], there) == {"e": 5}
    # a restore dated within the clocks' skew of the listing may have put the run back after the
    # listing passed it: the run weighs as a worker listing it back counts it; an older one does not
    skew = sharding.CLOCK_SKEW
    assert original_sizes({}, [red("f", "op7", 9), back("f", "op7", time=2000.0)], there,
                          listed_at=2000.0 + skew - 1) == {"f": 9}
    assert original_sizes({}, [red("f", "op7", 9), back("f", "op7", time=2000.0)], there,
                          listed_at=2000.0 + skew) == {}
    assert original_sizes({}, [red("f", "op7", 9), dict(back("f", "op7"), time="x")], there, listed_at=1e12) == {"f": 9}
