"""A bucket shard worker's partition reads the vault's summary of its manifests, not every
manifest (issue #28, r27 task K4). The partition weighs each run by its size before its first
reduction (``plan.shard.original_sizes``), from the change log; on a bucket that is the vault's
manifests, and each worker read every one of them (a second pass of 4 workers over 10,000 reduced
runs: 40,000 reads for the partition alone). Now a worker reads the manifests a summary beside them
does not hold at their listed version, and writes the summary again; the next reads none.

Here, on moto's S3: the partition is the one every worker computed before (each run in exactly one
shard) before and after reductions, shard reduces and a restore; the entries are ``history``'s (its
fields the partition reads, in its order); a manifest rewritten (a restore) is read again alone; a
summary damaged, planted with another version or too large is read around, never trusted."""
import json

from test_shard_emptied_runs_bucket import SHARDS, _logdir, _plans, _runs
from tb_footprint_plugin import api
from tb_footprint_plugin.api import survey
from tb_footprint_plugin.engine import bucket_history, bucket_objects
from tb_footprint_plugin.engine.front import open_engine


def _spy(monkeypatch) -> list:
    """Every manifest object read (its store path), by any reader."""
    reads: list = []
    real = bucket_objects.BucketState.read

    def read(self, path, info=None):
        if "/manifests/" in path:
            reads.append(path)
        return real(self, path, info)

    monkeypatch.setattr(bucket_objects.BucketState, "read", read)
    return reads


def _slim(entries) -> list:
    return [{k: e[k] for k in bucket_history.SUMMARY_FIELDS if e.get(k) is not None} for e in entries]


def _read_sizes(url, reads) -> tuple:
    """A real sharded reduce's partition (``scan_shard_sizes`` with ``write_cache``, as
    ``reduce_logdir`` calls it when not a dry run: the one caller that writes the summary) and the
    manifests it read."""
    del reads[:]
    sizes = survey.scan_shard_sizes([url], None, {}, write_cache=True)
    return sizes, len(reads)


def test_a_shard_worker_reads_only_the_manifests_its_summary_does_not_hold(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    sizes = api.shard_sizes([url])
    plans = _plans(url, sizes)
    assert sorted(r for p in plans for r in p) == _runs(url)
    reduced = ["jax1", "jax2", "jax4", "tb7", "tb8", "tb9"]
    report = api.reduce_logdir(url, dry_run=False, runs=reduced, verify_backends=("python",), quiet_period=0)
    assert [o.status for o in report.outcomes] == ["verified"] * 6, [o.reason for o in report.outcomes]
    eng = open_engine(url)
    reads = _spy(monkeypatch)

    # the first worker after them reads the six manifests (no summary yet) and writes the summary
    assert _read_sizes(url, reads) == (sizes, 6)
    # the next worker reads none: the summary holds each at its listed version
    assert _read_sizes(url, reads) == (sizes, 0)
    # a plan's partition (``shard_sizes``: writes nothing, review R9 F1) reads the summary too
    del reads[:]
    assert api.shard_sizes([url]) == sizes and not reads
    assert s3_bucket.fs.exists(s3_bucket.key(f"logs/.tb-footprint/{bucket_history.SUMMARY}"))
    # the entries are history's, the fields the partition reads, in its order
    assert eng.partition_history() == _slim(eng.history())
    emptied = ("jax1", "jax2", "jax4")
    left = [[r for r in p if r not in emptied] for p in plans]
    del reads[:]
    assert _plans(url) == left  # every run there in exactly one shard, as before the reductions
    assert not reads

    # four shard workers reduce what is left: each partition read before and after another's
    # reduction agrees, each run in one shard; only the manifests written since are read
    for i in range(SHARDS):
        del reads[:]
        assert api.shard_plan([url], (i, SHARDS))[url] == left[i]
        again = api.reduce_logdir(url, dry_run=False, shard=(i, SHARDS), verify_backends=("python",),
                                  quiet_period=0)
        assert again.ok and {o.run for o in again.outcomes} <= set(left[i]), [(o.run, o.reason) for o in again.outcomes]
    made = len([m for m in api.operations(url) if m["kind"] == "reduce"]) - 6
    assert made > 0
    sizes_now, n = _read_sizes(url, reads)
    assert sizes_now == sizes and n <= made  # the last worker's manifests at most
    assert _read_sizes(url, reads) == (sizes, 0)
    assert _runs(url) == sorted(f"tb{i}" for i in range(6, 12))  # every jax run emptied
    assert _plans(url) == [[r for r in p if r.startswith("tb")] for p in plans]
    assert eng.partition_history() == _slim(eng.history())

    # a restore rewrites one manifest: that one is read again, alone
    assert [o.status for o in api.restore(url, run="jax1")] == ["restored"]
    assert _read_sizes(url, reads) == (sizes, 1)
    assert eng.partition_history() == _slim(eng.history())
    assert _read_sizes(url, reads) == (sizes, 0)


def test_a_summary_not_of_the_listed_versions_is_read_around(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    sizes = api.shard_sizes([url])
    report = api.reduce_logdir(url, dry_run=False, runs=["jax1", "tb7", "tb8"], verify_backends=("python",),
                               quiet_period=0)
    assert [o.status for o in report.outcomes] == ["verified"] * 3
    eng = open_engine(url)
    key = s3_bucket.key(f"logs/.tb-footprint/{bucket_history.SUMMARY}")
    reads = _spy(monkeypatch)
    assert _read_sizes(url, reads) == (sizes, 3)
    good = json.loads(s3_bucket.fs.cat(key))
    # damaged: every manifest read, the partition the same, the summary written again
    s3_bucket.fs.pipe(key, b"{not json")
    assert _read_sizes(url, reads) == (sizes, 3)
    assert _read_sizes(url, reads) == (sizes, 0)
    # planted with sizes under other versions: not taken, read again from the manifests
    planted = json.loads(json.dumps(good))
    for rec in planted["manifests"].values():
        rec["v"] = "other"
        for e in rec["e"]:
            if "before" in e:
                e["before"] = 1
    s3_bucket.fs.pipe(key, json.dumps(planted).encode())
    assert _read_sizes(url, reads) == (sizes, 3)
    # records not of the summary's shape (a field it does not keep, a run not a name): read again
    odd = json.loads(json.dumps(good))
    (k0, r0), (k1, r1) = sorted(odd["manifests"].items())[:2]
    r0["e"][0]["files"] = ["x"]
    r1["e"][0]["run"] = ["tb7"]
    s3_bucket.fs.pipe(key, json.dumps(odd).encode())
    assert _read_sizes(url, reads) == (sizes, 2)
    assert eng.partition_history() == _slim(eng.history())
    # too large for a reader's limit: read around, never written that large
    monkeypatch.setattr(bucket_history, "STATE_LIMIT", 10)
    assert _read_sizes(url, reads) == (sizes, 3)


def test_manifests_noted_as_written_are_not_read_by_the_next_partition(s3_bucket, tmp_path, monkeypatch):
    """What a batch's end can call (``bucket_history.note_manifests``: each manifest as put, with
    the version its put returned): the next worker's partition reads none of them; one noted at a
    version it no longer has is read again."""
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    sizes = api.shard_sizes([url])
    report = api.reduce_logdir(url, dry_run=False, runs=["jax1", "tb7", "tb8"], verify_backends=("python",),
                               quiet_period=0)
    assert [o.status for o in report.outcomes] == ["verified"] * 3
    eng = open_engine(url)
    store = eng.vault.store
    written = []
    for m in api.operations(url):
        key = f"manifests/{m['op_id']}.json"
        written.append((m["op_id"], store.stat(key).version, json.loads(store.read_all(key))))
    assert not store.stat(bucket_history.SUMMARY)
    # the version a put returns is the one a listing names (what a batch has of what it wrote)
    assert store.put("probe.json", b"{}", if_absent=True) == store.stat("probe.json").version
    store.delete(["probe.json"])
    assert bucket_history.note_manifests(eng.ostore, eng.vault, written[:2])
    assert bucket_history.note_manifests(eng.ostore, eng.vault, written[2:])  # merged with the first
    reads = _spy(monkeypatch)
    assert _read_sizes(url, reads) == (sizes, 0)
    assert eng.partition_history() == _slim(eng.history())
    # noted at a version it no longer has (a restore rewrote it since): read again
    assert [o.status for o in api.restore(url, run="tb7")] == ["restored"]
    assert bucket_history.note_manifests(eng.ostore, eng.vault, written)
    assert _read_sizes(url, reads) == (sizes, 1)
    assert eng.partition_history() == _slim(eng.history())
