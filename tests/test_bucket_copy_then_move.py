"""A bucket logdir copied (state and all), then moved, never has its operations purged by either
descendant on the strength of the records alone (review R14 G5, a HIGH regression of a6887f0).

a6887f0 made a recorded manifest this logdir's when its own state holds the record and the URL the
manifest names holds it no more (moved here). A backup copy of the logdir made before the original
moved away also holds the records: both descendants took the operations for their own, and one's
purge freed the vault copies the other relies on (its only copies of its reduced and retired runs).
A move seen by records alone cannot be told from a copy made before it, so nothing that destroys
a vault's copies acts on such an operation: purge keeps it (coded, saying why), and a restore of a
retirement puts the run back without releasing the vault's copies. Restores work; moved back to the
URL it names, the logdir purges them."""
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding

from test_bucket_prefix_moved_blob_folder import DROP, _move, prof_logdir  # noqa: F401
from test_bucket_prefix_moved_copies import _copy, _user
from test_bucket_vault_of_other_logdirs import _reduce_and_retire


def test_a_copy_then_a_move_never_lets_either_purge_the_others_copies(s3_bucket, prof_logdir):
    a = s3_bucket.upload(prof_logdir, "runsA")
    vault = s3_bucket.url("vault")
    before = _user(s3_bucket, "runsA")
    _reduce_and_retire(a, vault)
    _copy(s3_bucket, "runsA", "runsB")  # a backup copy of the logdir, state included
    _move(s3_bucket, "runsA", "runsC")  # then the original moves
    b, c = s3_bucket.url("runsB"), s3_bucket.url("runsC")
    for url in (b, c):
        pr = api.purge(url, yes=True, backup_dir=vault)
        assert not pr.ops and pr.freed_bytes == 0, pr.to_dict()
        assert sorted(k["code"] for k in pr.kept) == [Finding.MOVED_UNCLAIMED] * 2, pr.kept
    copies = s3_bucket.hashes("vault")
    outs = api.restore(c, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runsC") == before
    # the retirement's restore released none of the vault's copies: the copy's runs are still there
    assert {k: v for k, v in s3_bucket.hashes("vault").items() if not k.startswith("manifests/")} == \
        {k: v for k, v in copies.items() if not k.startswith("manifests/")}
    for url in (b, c):  # and still no purge frees them, restored or not
        pr = api.purge(url, yes=True, backup_dir=vault)
        assert not pr.ops and {k["code"] for k in pr.kept} == {Finding.MOVED_UNCLAIMED}, pr.to_dict()
