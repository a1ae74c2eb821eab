"""A purge never frees a vault's copies when a listing cannot tell whether a logdir stands at
its URL (review R13 F7): ``bucket_moved.standing`` has three answers, and "cannot tell" refuses
as "nothing stands" does, coded ``whose_unknown``, naming the URL and the listing's failure."""
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, StoreError
from tb_footprint_plugin.engine import bucket_moved
from tb_footprint_plugin.storage.store import StoreFailure

from test_bucket_prefix_moved_blob_folder import _move, prof_logdir  # noqa: F401
from test_bucket_prefix_moved_copies import _user
from test_bucket_vault_of_other_logdirs import _reduce_and_retire, unrecord


def _listings_fail_under(monkeypatch, prefix):
    """Every listing of a state under ``prefix`` fails (AccessDenied: a policy denying
    s3:ListBucket there, or a 5xx after the client's retries); reads and writes still work."""
    real_of = bucket_moved.BucketState.of

    class Failing:
        def __init__(self, st):
            self.st = st

        def listing(self, where, *a, **k):
            if (where + "/").split("/", 1)[1].startswith(prefix + "/"):
                raise StoreFailure(StoreError.PERMISSION, where, "AccessDenied")
            return self.st.listing(where, *a, **k)

        def __getattr__(self, n):
            return getattr(self.st, n)

    monkeypatch.setattr(bucket_moved.BucketState, "of", classmethod(lambda cls, o: Failing(real_of(o))))


def test_a_listing_that_fails_never_lets_the_purge_free_a_moved_logdirs_copies(s3_bucket, prof_logdir, monkeypatch):
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    unrecord(s3_bucket, "vault", "runsA")  # judged by the URL they name (written before records)
    _move(s3_bucket, "runsA", "runsA2")
    with monkeypatch.context() as mp:
        _listings_fail_under(mp, "runsA")
        pr = api.purge(a, yes=True, backup_dir=vault).to_dict()
    assert not pr["ops"] and not pr["freed_bytes"], "the moved logdir's only copies were freed"
    assert sorted(r["code"] for r in pr["refused"]) == [Finding.WHOSE_UNKNOWN] * 2, pr["refused"]
    assert all(r["detail"].startswith(f"cannot tell whether a logdir stands at {a} (")
               and "AccessDenied): nothing purged" in r["detail"] for r in pr["refused"]), pr["refused"]
    _move(s3_bucket, "runsA2", "runsA")
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before
