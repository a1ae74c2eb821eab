"""A vault prefix given to two bucket logdirs (``--backup-dir s3://b/vault`` for both) holds
their manifests and one partition summary (``bucket_history.SUMMARY``); a shard worker's partition
counts only its own logdir's operations from it (review R11 G6, the partition's part; #28 item 5's
leftovers). Before, a summary record kept no word of whose manifest it was, so logdir B's workers
weighed their runs by logdir A's reductions as soon as A's workers had summarised them."""
from test_shard_emptied_runs_bucket import _logdir
from test_shard_partition_summary_bucket import _slim
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_history
from tb_footprint_plugin.engine.front import open_engine


def _ops(entries) -> set:
    return {e.get("op_id") for e in entries if e.get("op_id")}


def test_two_logdirs_sharing_a_vault_count_only_their_own_operations(s3_bucket, tmp_path):
    vault = s3_bucket.url("vault")
    a = s3_bucket.upload(_logdir(tmp_path / "a"), "runsA")
    b = s3_bucket.upload(_logdir(tmp_path / "b"), "runsB")
    kw = dict(dry_run=False, backup_dir=vault, verify_backends=("python",), quiet_period=0)
    # A's shard workers reduce their runs (and summarise A's manifests in the shared vault)
    for i in range(2):
        r = api.reduce_logdir(a, shard=(i, 2), runs=["jax1", "tb7"], **kw)
        assert all(o.status == "verified" for o in r.outcomes), [o.reason for o in r.outcomes]
    eng_a, eng_b = open_engine(a, vault), open_engine(b, vault)
    ops_a = _ops(eng_a.history())
    assert len(ops_a) == 2
    # B's partition (a worker of B reads the summary A's workers wrote): none of A's operations
    assert _ops(eng_b.partition_history()) == set()
    assert eng_b.partition_history() == _slim(eng_b.history())
    # B's shard workers reduce theirs; each logdir's partition is its own history, both ways
    for i in range(2):
        r = api.reduce_logdir(b, shard=(i, 2), runs=["jax2"], **kw)
        assert all(o.status == "verified" for o in r.outcomes), [o.reason for o in r.outcomes]
    ops_b = _ops(eng_b.history())
    assert len(ops_b) == 1 and not ops_a & ops_b
    for eng, ops in ((eng_a, ops_a), (eng_b, ops_b)):
        part = eng.partition_history()
        assert _ops(part) == ops and part == _slim(eng.history())
    assert bucket_history.SUMMARY in {k.rsplit("/", 1)[-1] for k in s3_bucket.fs.find(s3_bucket.key("vault"))}


def test_a_listing_that_fails_once_never_keeps_an_operation_out_of_the_partition(s3_bucket, tmp_path, monkeypatch):
    """Review R15 L1: whose a recorded manifest is needs a listing of the logdir's records; one that
    failed was cached in the summary as that version's verdict (nothing counted), so the operation
    stayed out of every later partition. Undecided, nothing is cached: the next reading counts it."""
    from test_bucket_whose_unknown import _listings_fail

    vault = s3_bucket.url("vault")
    a = s3_bucket.upload(_logdir(tmp_path / "a"), "runsA")
    r = api.reduce_logdir(a, dry_run=False, backup_dir=vault, verify_backends=("python",), quiet_period=0,
                          runs=["jax1"])
    assert all(o.status == "verified" for o in r.outcomes), [o.reason for o in r.outcomes]
    eng = open_engine(a, vault)
    ops = _ops(eng.history())
    assert len(ops) == 1
    with monkeypatch.context() as mp:
        _listings_fail(mp, lambda p: p.endswith("/.tb-footprint/ops"))
        assert _ops(open_engine(a, vault).partition_history()) == set()  # undecided: not counted now
    assert _ops(open_engine(a, vault).partition_history()) == ops  # ... and counted once it lists
