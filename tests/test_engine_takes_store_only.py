"""The bucket engine takes the logdir's ``ObjectStore``, never its client: a ``RemoteFS`` handed
to it (``BucketState``, ``BucketState.of``, a delete, a batch ledger) is a ``TypeError`` naming
what to pass, raised before any request (issue #26; ``ObjectStore.of`` let a client in, as the
store at its root, while tests still passed one)."""
import pytest

from tb_footprint_plugin.engine.bucket_ledger import BucketLedger
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_state import must_delete
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore


@pytest.mark.parametrize("hand", ["BucketState", "BucketState.of", "must_delete", "BucketLedger"])
def test_a_client_handed_to_the_engine_is_refused_before_any_request(s3_bucket, hand):
    url = s3_bucket.url("logs")
    rfs = RemoteFS(url)
    call = {
        "BucketState": lambda x: BucketState(x),
        "BucketState.of": lambda x: BucketState.of(x),
        "must_delete": lambda x: must_delete(x, [f"{x.root}/.tb-footprint/journal/op.json"]),
        "BucketLedger": lambda x: BucketLedger(x, "drop-profiles", None),
    }[hand]
    before = rfs.stats.to_dict()
    with pytest.raises(TypeError, match="ObjectStore") as e:
        call(rfs)
    assert "RemoteFS" in str(e.value)  # it says what it was given, and what to pass instead
    assert rfs.stats.to_dict() == before
    store = ObjectStore(url)  # the store itself is taken
    call(store)



def test_a_blob_vault_takes_the_logdirs_store_not_its_client(s3_bucket, tmp_path):
    """``BlobVault`` (a bucket logdir's backups as blobs in a local folder) names its owner from the
    logdir's store: its client is refused as everywhere else in the engine (C2's report: it read only
    the client's protocol and root, so a ``RemoteFS`` went through unchecked); the owner is the same."""
    from tb_footprint_plugin.engine.bucket_state import BlobVault

    url = s3_bucket.url("logs")
    with pytest.raises(TypeError, match="ObjectStore"):
        BlobVault(str(tmp_path / "blobs"), RemoteFS(url))
    store = ObjectStore(url)
    assert BlobVault(str(tmp_path / "blobs"), store).owner.startswith("bucket:")
