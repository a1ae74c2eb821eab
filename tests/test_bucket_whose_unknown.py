"""A listing that fails never makes a bucket logdir's own operations another's silently (review R13
F2): whose a manifest is, when telling needs a listing (the old prefix of a moved logdir, the
records in its state) and that listing fails, is a third verdict (``bucket_moved.UNSURE``): status
names each such operation (``whose_unknown``: what could not be listed, what to do), restore and
purge refuse it by name, nothing is acted on, and once the listing works it is restored."""
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome, StoreError
from tb_footprint_plugin.engine import bucket_objects
from tb_footprint_plugin.storage.store import StoreFailure

from objstore_servers import Bucket
from test_bucket_prefix_moved_blob_folder import DROP, prof_logdir  # noqa: F401
from test_bucket_prefix_moved_copies import _user
from test_bucket_vault_of_other_logdirs import _reduce_and_retire


def _move_between(src_b, src, dst_b, dst):
    src_b.fs.invalidate_cache()
    base = src_b.key(src)
    for name in src_b.fs.find(base):
        src_b.fs.copy(name, f"{dst_b.key(dst)}/{name[len(base) + 1:]}")
        src_b.fs.rm_file(name)
    src_b.fs.invalidate_cache()
    dst_b.fs.invalidate_cache()


def _listings_fail(monkeypatch, refused):
    """Every state listing of a store path ``refused(path)`` holds fails: AccessDenied."""
    real = bucket_objects.BucketState.listing

    def listing(self, prefix, *args, **kw):
        if refused(prefix):
            raise StoreFailure(StoreError.PERMISSION, prefix, "AccessDenied")
        return real(self, prefix, *args, **kw)
    monkeypatch.setattr(bucket_objects.BucketState, "listing", listing)


def _said_unsure(url, op_ids):
    """status, restore and purge at ``url`` each name ``op_ids`` as whose_unknown, act on none."""
    st = api.status(url)
    st = st.to_dict() if hasattr(st, "to_dict") else st
    rows = [p for p in st["problems"] if p["code"] == Finding.WHOSE_UNKNOWN]
    assert sorted(r["op_id"] for r in rows) == sorted(op_ids), st["problems"]
    assert all("cannot be listed" in r["detail"] and "AccessDenied" in r["detail"] for r in rows), rows
    assert not [p for p in st["problems"] if p["code"] == Finding.FOREIGN_MANIFEST], st["problems"]
    outs = api.restore(url)
    assert sorted((o.status, o.code, o.op_id) for o in outs) == sorted(
        (Outcome.FAILED, Finding.WHOSE_UNKNOWN, op) for op in op_ids), [o.to_dict() for o in outs]
    pr = api.purge(url, yes=True).to_dict()
    assert not pr["ops"] and not pr["freed_bytes"], pr
    assert sorted(r["op_id"] for r in pr["refused"] if r["code"] == Finding.WHOSE_UNKNOWN) == sorted(op_ids), pr


def test_a_logdir_moved_to_another_bucket_whose_old_one_cannot_be_listed(objstore_pool, prof_logdir, monkeypatch):
    """R13's repro: moved from bucket a to b, then a's listings denied (access withdrawn, or the
    name now someone else's): its own operation is no other logdir's and restore is no silent []."""
    a, b = Bucket(objstore_pool.get("s3")), Bucket(objstore_pool.get("s3"))
    url = a.upload(prof_logdir, "runs")
    before = _user(a, "runs")
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["r0"], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    op = rep.outcomes[0].op_id
    _move_between(a, "runs", b, "runs")
    moved = b.url("runs")
    with monkeypatch.context() as mp:
        _listings_fail(mp, lambda p: p.startswith(a.name + "/"))
        _said_unsure(moved, [op])
    outs = api.restore(moved)  # the listing works again: a move, told and restored
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert _user(b, "runs") == before


def test_a_logdir_whose_own_records_cannot_be_listed(s3_bucket, prof_logdir, monkeypatch):
    """A vault elsewhere (recorded operations): this logdir's ``ops/`` cannot be listed, so whose a
    recorded manifest is cannot be told; named, never another's, never acted on."""
    url = s3_bucket.upload(prof_logdir, "runs")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runs")
    _reduce_and_retire(url, vault)
    ops = sorted(m["op_id"] for m in api.operations(url, backup_dir=vault))
    with monkeypatch.context() as mp:
        _listings_fail(mp, lambda p: p.endswith("/.tb-footprint/ops"))
        st = api.status(url, backup_dir=vault)
        rows = [p for p in st["problems"] if p["code"] == Finding.WHOSE_UNKNOWN]
        assert len(ops) == 2 and sorted(r["op_id"] for r in rows) == ops, st["problems"]
        assert st["operations"] == [] and st["vault_bytes"] == 0, st["operations"]
        outs = api.restore(url, backup_dir=vault)
        assert sorted((o.status, o.code) for o in outs) == [(Outcome.FAILED, Finding.WHOSE_UNKNOWN)] * 2, \
            [o.to_dict() for o in outs]
        outs = api.restore(url, backup_dir=vault, run="r0")
        assert [(o.code, o.run) for o in outs] == [(Finding.WHOSE_UNKNOWN, "r0")], [o.to_dict() for o in outs]
        pr = api.purge(url, yes=True, backup_dir=vault).to_dict()
        assert not pr["ops"] and sorted(r["code"] for r in pr["refused"]) == [Finding.WHOSE_UNKNOWN] * 2, pr
    outs = api.restore(url, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs") == before


def test_a_listing_that_fails_between_the_catalogue_and_the_restore_refuses_before_any_journal(
        s3_bucket, prof_logdir, monkeypatch):
    """The catalogue judged the operations this logdir's; the re-judging right before each restore
    (``marked_afresh``) cannot list the records: refused (whose_unknown) before its journal, the run
    left as it was; restored once the listing works."""
    url = s3_bucket.upload(prof_logdir, "runs")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runs")
    _reduce_and_retire(url, vault)
    reduced = _user(s3_bucket, "runs")
    calls = []

    def refused(p):
        if p.endswith("/.tb-footprint/ops"):
            calls.append(p)
            return len(calls) > 1  # the catalogue's reading lists; every later one fails
        return False
    with monkeypatch.context() as mp:
        _listings_fail(mp, refused)
        outs = api.restore(url, backup_dir=vault)
    assert sorted((o.run, o.status) for o in outs) == [("r0", Outcome.FAILED), ("r1", Outcome.FAILED)], \
        [o.to_dict() for o in outs]
    # the unretire's refusal keeps its own code (bucket_retire's ``txn.Refused``), the words say why
    assert [o.code for o in outs if o.run == "r0"] == [Finding.WHOSE_UNKNOWN], [o.to_dict() for o in outs]
    assert [o.code for o in outs if o.run == "r1"] == [Finding.WHOSE_UNKNOWN], [o.to_dict() for o in outs]
    assert all("cannot be listed" in o.reason and "nothing done" in o.reason for o in outs), [o.reason for o in outs]
    assert _user(s3_bucket, "runs") == reduced
    s3_bucket.fs.invalidate_cache()
    assert not [k for k in s3_bucket.fs.find(s3_bucket.key("runs")) if "/.tb-footprint/journal/" in k]
    outs = api.restore(url, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs") == before
