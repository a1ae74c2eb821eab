"""A lone bucket run lock (a restore's, a retirement's, a rewrite's: not renewed through a batch's
journal) whose renewal put landed with its answer lost keeps the lock: the lock is read back and,
when it holds the very document put, its version adopted. Before, the client's retry failed its
precondition against our own new version (or every try timed out and the next renewal did), the
lock was marked lost and the operation stopped, spurious under a flaky store (review R20's LOW on
b8fe4a5, the per-lock half of 2769eda). Another's document in place is never adopted."""
import json
import time

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import bucket_lease, lease
from tb_footprint_plugin.engine.bucket_state import BucketState, lock_run, unlock_all
from tb_footprint_plugin.engine.context import new_op_id
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


class AnswerLost:
    """The state objects, the next update failing with ``code`` after its put landed ("landed") or
    before it ("not landed")."""

    def __init__(self, st):
        self.st, self.mode, self.code, self.calls = st, None, StoreError.STORE_ERROR, 0

    def __getattr__(self, name):
        return getattr(self.st, name)

    def update(self, path, doc, version):
        self.calls += 1
        mode, self.mode = self.mode, None
        if mode == "landed":
            self.st.update(path, doc, version)
        if mode:
            raise StoreFailure(self.code, path, "answer lost")
        return self.st.update(path, doc, version)


@pytest.mark.parametrize("code", [StoreError.STORE_ERROR, StoreError.PRECONDITION_FAILED])
def test_a_lone_lock_renewal_that_landed_with_its_answer_lost_is_adopted(s3_bucket, code):
    st = BucketState(ObjectStore(s3_bucket.url(f"lone-{code}")))
    flaky = AnswerLost(st)
    flaky.code = code
    lock = lock_run(flaky, "exp/run", new_op_id())
    t = time.time() + lease.lease_seconds()
    flaky.mode = "landed"
    bucket_lease.renew_all(now=t)
    assert lock.still_held(), "a renewal of ours that landed is not another's write"
    assert json.loads(st.read_bytes(lock.path))["renewed"] == t
    # the next renewal goes on under the adopted version: no precondition failure of our own
    bucket_lease.renew_all(now=t + lease.lease_seconds())
    assert lock.still_held() and json.loads(st.read_bytes(lock.path))["renewed"] == t + lease.lease_seconds()
    flaky.mode, flaky.calls = "not landed", 0
    bucket_lease.renew_all(now=t + 2 * lease.lease_seconds())
    assert flaky.calls == 1
    if code == StoreError.PRECONDITION_FAILED:
        # refused as changed and not holding the document put: another's write, the lock lost
        assert not lock.still_held()
        assert unlock_all([lock])[0] == []
        return
    assert lock.still_held()  # not landed, another error: kept, tried again next wake-up
    bucket_lease.renew_all(now=t + 3 * lease.lease_seconds())
    assert json.loads(st.read_bytes(lock.path))["renewed"] == t + 3 * lease.lease_seconds()
    # another's document in place and our renewal's answer lost: never adopted, the lock lost
    theirs = {"run": "exp/run", "op": new_op_id()}
    st.put(lock.path, json.dumps(theirs).encode())
    flaky.mode = "not landed"
    bucket_lease.renew_all(now=t + 4 * lease.lease_seconds())
    bucket_lease.renew_all(now=t + 5 * lease.lease_seconds())
    assert not lock.still_held() and unlock_all([lock])[0] == []
    assert json.loads(st.read_bytes(lock.path)) == theirs


def test_a_lone_lock_released_after_an_adopted_renewal_is_deleted_as_ours(s3_bucket):
    st = BucketState(ObjectStore(s3_bucket.url("lone-release")))
    flaky = AnswerLost(st)
    lock = lock_run(flaky, "exp/run", new_op_id())
    flaky.mode = "landed"
    bucket_lease.renew_all(now=time.time() + lease.lease_seconds())
    ours, versions = unlock_all([lock])
    assert ours == [lock.path] and versions[lock.path] == st.read(lock.path)[1]
