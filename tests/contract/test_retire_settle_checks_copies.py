"""A bucket retirement killed past its commit record (every copy verified, no original deleted
yet) is finished by the next start only while its copies are in the vault with the bytes they were
verified with (review R8 F1, the retire half): one listing of the operation's copies, each by its
size and recorded checksums, the disk's rule (``swap.roll_forward`` checks every blob first). A copy
gone (a lifecycle rule, by hand) or changed: nothing is deleted, the journal stays, the start's
outcome names the copy, and once the copy is back the next start finishes the retirement. On the
three bucket servers."""
from contract_stores import buckets, logdir_on, scalar_runs_on, user_objects  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

BUCKETS = ("s3", "gs", "az")
COPIES = ".tb-footprint/vault/blobs/"


def _killed_past_commit(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=3)
    st = open_store(url)
    st.put("b/notes.txt", b"lr: 0.1\n" * 40)
    before = user_objects(st)
    faults.arm("retire.delete_record", "crash")  # the commit record is durable, nothing deleted yet
    try:
        with pytest.raises(faults.InjectedCrash):
            api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)
    finally:
        faults.disarm_all()
    assert user_objects(st) == before
    copies = sorted(e.key for e in st.list(every_key=True) if "/blobs/" in e.key and "/files/" in e.key)
    assert len(copies) == 2, copies
    return url, st, before, copies


def _recover(url):
    return [o for o in api.recover_logdir(url) if o.run == "b"]


@pytest.mark.parametrize("store", BUCKETS)
@pytest.mark.parametrize("how", ["gone", "changed"])
def test_settle_keeps_the_originals_of_a_copy_lost_since_the_commit(store, how, scalar_runs_on):
    url, st, before, copies = _killed_past_commit(store, scalar_runs_on)
    lost = copies[-1]
    kept = st.read_all(lost)
    if how == "gone":
        st.delete([lost])
    else:  # same size, other bytes: the store's checksum tells
        st.delete([lost])
        st.put(lost, bytes(b ^ 0xFF for b in kept))
    [o] = _recover(url)
    assert o.action == Recovery.FAILED, o
    assert lost in o.detail and "not finished" in o.detail, o.detail
    assert user_objects(st) == before  # every original stands: the run's only copy of those bytes
    journals = [e.key for e in st.list(every_key=True) if e.key.startswith(".tb-footprint/journal/")]
    assert journals  # kept: the next start looks again
    assert all(any(e.key == c for e in st.list(every_key=True)) for c in copies if c != lost)
    # the copy back as it was verified: the next start finishes the retirement
    st.delete([lost])
    st.put(lost, kept)
    [o] = _recover(url)
    assert o.action == Recovery.COMPLETED, o
    assert {k: v for k, v in user_objects(st).items()} == {k: v for k, v in before.items() if not k.startswith("b/")}
    [r] = api.restore(url, run="b")
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert user_objects(st) == before
