"""Review R9: a dry run writes nothing, also on a bucket with --shard ("plan: dry run: what a policy
would do (writes nothing)"; api.reduce passes write_cache=not dry_run to scan_shard_sizes for this).
A shard's partition reads the vault's history; it must not write into the bucket on a dry run or a
plan (nor from `shard_sizes`, which the tab and the CLI's plan call)."""
import math
import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome


def _write(root, runs):
    for i, name in enumerate(runs):
        d = os.path.join(str(root), name)
        with synth.EventWriter(d) as w:
            for s in range(30):
                w.scalar("loss", s, math.exp(-s / 15.0) + 0.01 * i)
        synth.write_profile_session(d, synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=200,
                                    with_caches=True, seed=i)


def _objects(bucket):
    bucket.fs.invalidate_cache()
    return {k: bucket.fs.info(k).get("ETag") for k in bucket.fs.find(bucket.key("logs"))}


def test_a_sharded_dry_run_on_a_bucket_writes_nothing(s3_bucket, tmp_path):
    runs = [f"sweep/r{i}" for i in range(4)]
    _write(tmp_path / "src", runs)
    url = s3_bucket.upload(tmp_path / "src", "logs")
    # one real reduction: the vault then has a manifest (what the partition reads)
    rep = api.reduce_logdir(url, None, policy="archive", dry_run=False, quiet_period=0, runs=["sweep/r0"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [(o.run, o.reason) for o in rep.outcomes]
    before = _objects(s3_bucket)
    api.shard_sizes([url])
    api.shard_plan([url], (0, 2))
    for i in range(2):
        dry = api.reduce_logdir(url, None, policy="archive", dry_run=True, quiet_period=0, shard=(i, 2))
        assert all(o.status in (Outcome.DRY_RUN, Outcome.SKIPPED) for o in dry.outcomes)
    after = _objects(s3_bucket)
    assert after == before, {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                             if before.get(k) != after.get(k)}
