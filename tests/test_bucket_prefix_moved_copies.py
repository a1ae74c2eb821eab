"""Review R11 G3: a bucket logdir whose backups are in its own state (the copies vault, the default) moved to
another prefix (`aws s3 mv --recursive`: its state goes along) restores its reductions and retirements from
where it stands now (``engine.bucket_moved``: the manifests' keys of the old prefix read under the new one when
the old prefix holds no manifest of that operation); a COPY (the original still stands) maps nothing: its
purge never touches the original's keys, and its status and restore say where to restore."""
import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome

from test_bucket_prefix_moved_blob_folder import DROP, _move, prof_logdir  # noqa: F401


def _user(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(".tb-footprint/")}


def test_moved_bucket_logdir_restores_from_its_copies(s3_bucket, prof_logdir):
    url = s3_bucket.upload(prof_logdir, "runs")
    before = _user(s3_bucket, "runs")
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["r0"], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    rep = api.retire(url, api.retire_rule(runs=["r1"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    _move(s3_bucket, "runs", "runs-old")
    moved = s3_bucket.url("runs-old")
    st = api.status(moved)
    st = st.to_dict() if hasattr(st, "to_dict") else st
    assert not st["problems"], st["problems"]
    assert len(st["operations"]) == 2
    outs = api.restore(moved)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs-old") == before
    # its purge then frees the copies where they stand now, and nothing else
    api.purge(moved, yes=True)
    assert not [k for k in s3_bucket.hashes("runs-old") if k.startswith(".tb-footprint/blobs/")]
    assert _user(s3_bucket, "runs-old") == before


def _copy(bucket, src, dst):
    bucket.fs.invalidate_cache()
    base = bucket.key(src)
    for name in bucket.fs.find(base):
        bucket.fs.copy(name, f"{bucket.key(dst)}/{name[len(base) + 1:]}")
    bucket.fs.invalidate_cache()


def test_a_copy_of_a_bucket_logdir_never_purges_the_originals_backups(s3_bucket, prof_logdir):
    url = s3_bucket.upload(prof_logdir, "runs")
    before = _user(s3_bucket, "runs")
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["r0"], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    rep = api.retire(url, api.retire_rule(runs=["r1"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    _copy(s3_bucket, "runs", "runs-copy")
    copy = s3_bucket.url("runs-copy")
    st = api.status(copy)
    st = st.to_dict() if hasattr(st, "to_dict") else st
    named = sorted((p["code"], p["run"]) for p in st["problems"])
    assert named == [(Finding.PREFIX_MOVED, "r0"), (Finding.PREFIX_MOVED, "r1")], st["problems"]
    assert all(url in p["detail"] for p in st["problems"])
    outs = api.restore(copy)
    assert [o.status for o in outs] and all(o.status != "restored" and url in (o.reason or "") for o in outs), \
        [o.to_dict() for o in outs]
    pr = api.purge(copy, yes=True)
    assert sorted(p["code"] for p in pr.to_dict()["refused"]) == [Finding.PREFIX_MOVED] * 2, pr.to_dict()
    api.recover_logdir(copy)
    outs = api.restore(url)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs") == before
