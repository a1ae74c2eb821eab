"""A bucket's restore of a retired run lets the vault's copies go only while every key still holds
its original (review R7 F5, on 97a5551): the release deleted the copies without a second look at
the run, so an object put back and then overwritten by a writer (a job resumed on the restored
run) had its original nowhere, in the run or the vault, while the outcome said "restored byte for
byte". Now one listing after the put-back: a key that holds something else (or nothing) is
``not_restored``, its original kept in the vault (purge keeps it), the copies not released.

A disk has no such release to hold back: a retirement moves the run's files, and the restore moves
them back, so once back the run's file is the one copy; a writer's change to it is its own (the
disk's restore then says its tree no longer matches, as before)."""
from contract_stores import buckets, copies_in_vault, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NOTES = b"lr: 0.1\n" * 40
OTHER = b"a job rewrote it once it was back\n"


@pytest.mark.parametrize("store", ["s3", "gs", "az"])
def test_an_object_overwritten_after_its_put_back_keeps_its_vault_copy(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", NOTES)
    [r] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
    assert r.status == Outcome.VERIFIED, r.to_dict()
    rewritten = []

    def writer():  # once the first object is back: a job rewrites notes.txt if it is back
        if st.stat("b/notes.txt") is not None:
            st.put("b/notes.txt", OTHER)
            rewritten.append("b/notes.txt")

    faults.arm("unretire.move", writer)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert rewritten, "the writer never found the object back: the case was not exercised"
    assert st.read_all("b/notes.txt") == OTHER  # the writer's object left as it is
    assert copies_in_vault(st, NOTES), "the original exists nowhere"
    assert o.status == Outcome.RESTORED and o.code == Finding.NOT_RESTORED, o.to_dict()
    assert "b/notes.txt" in o.reason
    [m] = [m for m in api.operations(url) if m["kind"] == "retire"]
    assert not m.get("backup_released_by_restore"), m


@pytest.mark.parametrize("store", ["s3", "gs", "az"])
def test_a_restore_nobody_wrote_into_still_releases_the_copies(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", NOTES)
    [r] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
    assert r.status == Outcome.VERIFIED, r.to_dict()
    [o] = api.restore(url, run="b")
    assert o.status == Outcome.RESTORED and o.code != Finding.NOT_RESTORED, o.to_dict()
    assert st.read_all("b/notes.txt") == NOTES
    assert copies_in_vault(st, NOTES) == []  # the vault's copy released
