"""The bucket vault is built over the ``Store`` interface (issue #26): ``BucketVault.for_logdir``
takes the logdir's ``ObjectStore`` (the Store; a ``RemoteFS``, its client, is refused), and the
vault has a store of its own (the objects under its root, on the logdir's client and request
counters), through which its manifests are listed: one listing, as before."""
import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.engine import bucket as bk
from tb_footprint_plugin.engine.bucket_state import BucketVault
from tb_footprint_plugin.storage.store_object import ObjectStore


def test_the_vault_is_built_over_the_logdirs_store(s3_bucket, objstore_pool, tmp_path):
    logdir = ObjectStore(s3_bucket.url("logs"))
    rfs = logdir.rfs
    v = BucketVault.for_logdir(logdir)
    assert v.logdir is logdir and v.store.ops is rfs.ops  # the vault's store on the logdir's client
    assert v.root == f"{s3_bucket.key('logs')}/.tb-footprint"
    assert v.store.location == s3_bucket.url("logs/.tb-footprint") and v.store.stats is rfs.stats
    with pytest.raises(TypeError, match="ObjectStore"):  # the client is not the store
        BucketVault.for_logdir(rfs)
    other = Bucket(objstore_pool.get("s3"))
    far = BucketVault.for_logdir(logdir, other.url("vault"))
    assert far.root == other.key("vault") and far.store.location == other.url("vault")
    assert far.store.stats is rfs.stats and far.store.ops is rfs.ops  # the logdir's client, shared
    local = BucketVault.for_logdir(logdir, str(tmp_path / "blobs"))
    assert local.blobs is not None and local.root == v.root
    with pytest.raises(ValueError, match="same store"):
        BucketVault.for_logdir(logdir, "gs://elsewhere/vault")
    with pytest.raises(ValueError, match="contains the logdir"):
        BucketVault.for_logdir(logdir, s3_bucket.url())


def test_manifests_are_listed_through_the_vaults_store(s3_bucket, monkeypatch):
    ostore = ObjectStore(s3_bucket.url("logs"))
    rfs = ostore.rfs
    v = BucketVault.for_logdir(ostore)
    st = bk.BucketState(ostore)
    st.create(v.manifest("20260101T000000-abcdef"), {"op_id": "x"})  # not a manifest: left out
    calls = []
    orig = ObjectStore.list

    def spy(self, prefix="", *, every_key=False):
        calls.append((self.location, prefix))
        return orig(self, prefix, every_key=every_key)

    monkeypatch.setattr(ObjectStore, "list", spy)
    before = rfs.stats.to_dict().get("list", 0)
    problems = []
    assert bk.manifests(ostore, v, problems) == []
    assert calls == [(v.store.location, "manifests")]
    assert rfs.stats.to_dict().get("list", 0) - before == 1
    assert len(problems) == 1 and problems[0]["file"].endswith("20260101T000000-abcdef.json")
    # a vault whose bucket does not exist (yet) holds no manifest
    gone = BucketVault.for_logdir(ostore, "s3://tbfp-no-such-bucket-j6/vault")
    assert bk.manifests(ostore, gone) == []
