"""A bucket logdir copied (state and all), then moved: each descendant restores its own runs
(review R16 M1, a hidden MEDIUM of 1936d57).

Both descendants read ONE manifest per operation in the shared vault. Once one restored (a
reduction's restore, a retirement's unretire), the manifest said restored: the other's restore
returned ``[]`` without a word, its runs stayed reduced and retired, its status showed nothing —
and moved back to the URL the manifests name, its purge would have freed the copies it never got
back. Such an operation (``moved_unclaimed``) is now marked restored per logdir
(``restored_at_urls``), the manifest's own keys left as they were."""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding

from test_bucket_prefix_moved_blob_folder import DROP, _move, prof_logdir  # noqa: F401
from test_bucket_prefix_moved_copies import _copy, _user
from test_bucket_vault_of_other_logdirs import _reduce_and_retire


def _split(s3_bucket, prof_logdir):
    """runsA reduced (r0) and retired (r1) into a vault prefix, copied to runsB, then moved to runsC."""
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    _copy(s3_bucket, "runsA", "runsB")
    _move(s3_bucket, "runsA", "runsC")
    return vault, before


def _restored(url, vault) -> dict:
    """What ``status`` says of each operation of ``url``: restored or not."""
    return {o["op_id"]: o["restored_by"] is not None for o in api.status(url, vault)["operations"]}


@pytest.mark.parametrize("first", ["runsC", "runsB"])
def test_each_descendant_restores_its_own_runs_after_the_other_did(s3_bucket, prof_logdir, first):
    vault, before = _split(s3_bucket, prof_logdir)
    second = {"runsB": "runsC", "runsC": "runsB"}[first]
    one, other = s3_bucket.url(first), s3_bucket.url(second)
    assert _user(s3_bucket, second) != before  # reduced and retired, as the copy was made
    outs = api.restore(one, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, first) == before
    # the other's runs are not back: its status says its operations are not restored
    assert set(_restored(one, vault).values()) == {True}
    assert set(_restored(other, vault).values()) == {False}, _restored(other, vault)
    outs = api.restore(other, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, second) == before, "the other descendant's runs could not be restored"
    assert set(_restored(other, vault).values()) == {True}
    # restored at both, the vault's copies are still never freed from either new URL
    for url in (one, other):
        pr = api.purge(url, yes=True, backup_dir=vault)
        assert not pr.ops and {k["code"] for k in pr.kept} == {Finding.MOVED_UNCLAIMED}, pr.to_dict()


def test_moved_back_the_descendant_that_did_not_restore_is_told_so_by_purge_and_restores(s3_bucket, prof_logdir):
    """The advice of moved_unclaimed's words: moved back to the URL the manifests name, the copy is
    their owner outright; a restore made at the other URL never counts as its own, so a purge's
    preview says its originals would be lost (never "restored, nothing lost"), and it restores."""
    vault, before = _split(s3_bucket, prof_logdir)
    outs = api.restore(s3_bucket.url("runsC"), backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    _move(s3_bucket, "runsB", "runsA")  # the copy moved back where the manifests say
    a = s3_bucket.url("runsA")
    assert set(_restored(a, vault).values()) == {False}, _restored(a, vault)
    preview = api.purge(a, backup_dir=vault)
    assert sorted((o["restored"], o["originals"] > 0) for o in preview.ops) == [(False, True)] * 2, preview.to_dict()
    outs = api.restore(a, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsA") == before
    # now its own and restored (the unretire released the retirement's copies itself): nothing lost
    pr = api.purge(a, yes=True, backup_dir=vault)
    assert pr.ops and all(o["restored"] and o["originals"] == 0 for o in pr.ops), pr.to_dict()
    assert _user(s3_bucket, "runsA") == before
