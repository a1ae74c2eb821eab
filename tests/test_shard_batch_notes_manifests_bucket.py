"""A bucket shard worker's batch notes the manifests it wrote in the partition's summary, so the
FIRST rerun of the shard workers reads none of them (issue #28, r28 task K5). Before, only a
worker's own partition wrote the summary: the rerun after a pass still read, per worker, every
manifest the pass wrote (100 runs, 4 workers: 5.56 requests a run where later reruns pay 1.48).
A batch of no shard notes nothing (no partition reads its manifests): no request more.

On moto's S3: four ``--shard i/4`` reduces in turn on a logdir never reduced; each worker's
partition, and the one after the pass, read no manifest; the partition is the one computed
before the pass and its entries are ``history``'s."""
from test_shard_emptied_runs_bucket import SHARDS, _logdir, _plans
from test_shard_partition_summary_bucket import _read_sizes, _slim, _spy
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_history
from tb_footprint_plugin.engine.front import open_engine


def test_a_shard_pass_leaves_no_manifest_for_the_next_partition_to_read(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    sizes = api.shard_sizes([url])
    plans = _plans(url, sizes)
    reads = _spy(monkeypatch)
    for i in range(SHARDS):
        del reads[:]
        report = api.reduce_logdir(url, dry_run=False, shard=(i, SHARDS), verify_backends=("python",),
                                   quiet_period=0)
        assert report.ok and sorted(o.run for o in report.outcomes) == sorted(plans[i]), \
            [(o.run, o.status, o.reason) for o in report.outcomes]
        # the workers before this one noted theirs: its partition read none of them
        assert not reads, (i, reads)
    made = [m for m in api.operations(url) if m["kind"] == "reduce"]
    assert len(made) == sum(len(p) for p in plans)
    # the first rerun's partition: every manifest of the pass held at its version, none read
    assert _read_sizes(url, reads) == (sizes, 0)
    eng = open_engine(url)
    assert eng.partition_history() == _slim(eng.history())


def test_a_batch_of_no_shard_notes_nothing(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    noted = []
    monkeypatch.setattr(bucket_history, "note_manifests", lambda *a, **k: noted.append(a) or True)
    report = api.reduce_logdir(url, dry_run=False, runs=["jax1", "tb7", "tb8"], verify_backends=("python",),
                               quiet_period=0)
    assert [o.status for o in report.outcomes] == ["verified"] * 3
    assert not noted
    assert not s3_bucket.fs.exists(s3_bucket.key(f"logs/.tb-footprint/{bucket_history.SUMMARY}"))
