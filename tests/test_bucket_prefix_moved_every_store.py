"""Review R11 G2/G3 on every object store (moto, gcp-storage-emulator, Azurite): a bucket logdir moved to
another prefix restores from where it stands, with its copies in its own state (the default) and with a local
folder of blobs; a new logdir at the old URL, reduced into the same folder and purged, never frees the moved
one's blobs (the owner is the logdir's id and where it stands, the storage account included on Azure)."""
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome

from test_bucket_prefix_moved_blob_folder import DROP, _blobs, _move, prof_logdir  # noqa: F401


def _user(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(".tb-footprint/")}


def test_a_moved_bucket_logdir_restores_on_every_store(bucket, prof_logdir, tmp_path):
    url = bucket.upload(prof_logdir, "runs")
    before = _user(bucket, "runs")
    vault = str(tmp_path / "V")
    # r0 into the logdir's own state (server-side copies), r1 into a local folder of blobs
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, runs=["r0"], verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0, runs=["r1"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    kept = _blobs(vault)
    _move(bucket, "runs", "runs-old")
    # a new logdir at the old URL: the same bytes, the same folder, reduced and purged
    bucket.upload(prof_logdir, "runs")
    rep = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0, runs=["r1"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    api.purge(url, yes=True, backup_dir=vault)
    assert kept <= _blobs(vault), "the new logdir's purge freed the moved logdir's only copies"
    moved = bucket.url("runs-old")
    outs = api.restore(moved, run="r0")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    outs = api.restore(moved, run="r1", backup_dir=vault)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert _user(bucket, "runs-old") == before
