"""A bucket run lock taken over or removed under its holder is lost at its next renewal, on each
object store: never renewed, never released as the holder's (review R12 F5: the renewal's catch
site moved from the client's RemoteError to the Store's StoreFailure, and nothing exercised it)."""
import json
import time

import pytest

from tb_footprint_plugin.engine import bucket_lease, lease
from tb_footprint_plugin.engine.bucket_state import BucketState, lock_run, unlock_all
from tb_footprint_plugin.engine.context import new_op_id
from tb_footprint_plugin.storage.store_object import ObjectStore


@pytest.mark.parametrize("how", ["taken_over", "removed"])
def test_a_lock_changed_under_its_holder_is_lost_at_its_next_renewal(bucket, how):
    ostore = ObjectStore(bucket.url(f"logs-{how}"))
    st = BucketState(ostore)
    lock = lock_run(st, "exp/run", new_op_id())  # the lock object, held
    path = lock.path
    assert lock.still_held() and bucket_lease.still_held(path)
    if how == "taken_over":
        st.put(path, json.dumps({"run": "exp/run", "op": new_op_id()}).encode())
    else:
        st.delete([path])
    bucket_lease.renew_all(now=time.time() + lease.lease_seconds())
    assert not lock.still_held()
    ours, _versions = unlock_all([lock])
    assert ours == []  # not released as the holder's: another's lock (or none) stays as it is
    if how == "taken_over":
        assert json.loads(st.read_bytes(path))["op"] != "", "the other holder's lock is still there"
