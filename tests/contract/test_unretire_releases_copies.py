"""A retired run restored whole lets the vault's copies go, on every store (#26; the disk's rule,
which the tab and README say for a restore: "restored; backup released"): a disk's restore removed
its retired tree, a bucket's kept every copy until `purge`. A bucket releases them as its purge
releases an operation's (the manifest marked restored and purged in one write, under a purge's
journal, then the copies deleted; ``bucket_putback.release_restored``), so a restore stopped
between its mark and the last delete leaves nothing hidden: the next start deletes what stayed
(the purge's own finish) and finds nothing more. An original a restore left in the vault because
another file stood at its path (``not_restored``) is never released: its only copy. On a folder
and the three bucket servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on, copies_in_vault, fail_io, user_objects  # noqa: F401 - fixtures


import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import bucket_putback, faults
from tb_footprint_plugin.engine.bucket_state import BucketTxnError
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NOTES = b"lr: 0.1\n" * 40
OTHER = b"a job wrote here meanwhile\n"


def _retired(store, scalar_runs_on):
    """A logdir whose run ``b`` (an event file and notes) is retired: (url, store, user files
    before, the retirement's op id)."""
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", NOTES)
    before = user_objects(st)
    [r] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
    assert r.status == Outcome.VERIFIED, r.to_dict()
    assert all(copies_in_vault(st, before[k]) for k in before if k.startswith("b/"))
    return url, st, before, r.op_id


def _released(url, st, before, op) -> None:
    """Every file back, no copy of it left in the vault, the retirement recorded as released,
    nothing for a purge or a start to do."""
    assert user_objects(st) == before
    left = {k: copies_in_vault(st, before[k]) for k in before if k.startswith("b/")}
    assert not any(left.values()), left
    [m] = [m for m in api.operations(url) if m["op_id"] == op]
    assert m["restored_by"] and m["backup_purged"] and m.get("backup_released_by_restore") == m["restored_by"], m
    rep = api.purge(url)  # what a purge would do: nothing of this retirement
    assert op not in [o["op_id"] for o in rep.ops] + [k["op_id"] for k in rep.kept], rep
    assert api.recover_logdir(url) == [] and not api.status(url)["unfinished_operations"]


@pytest.mark.parametrize("store", KINDS)
def test_a_whole_restore_releases_the_copies_an_original_left_stays(store, scalar_runs_on):
    url, st, before, op = _retired(store, scalar_runs_on)
    [o] = api.restore(url, run="b")
    assert o.status == Outcome.RESTORED and o.code != Finding.NOT_RESTORED, o.to_dict()
    _released(url, st, before, op)

    # retired again, and a job writes at one of its paths once the restore has begun: that
    # original stays, the only copy
    [r] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", OTHER))
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    assert user_objects(st)["b/notes.txt"] == OTHER
    assert copies_in_vault(st, NOTES), "the original left is kept in the vault"
    [m] = [m for m in api.operations(url) if m["op_id"] == r.op_id]
    assert not m["backup_purged"] and m["not_restored"] == ["b/notes.txt"], m


@pytest.mark.parametrize("store", KINDS)
def test_a_release_stopped_after_the_mark_is_finished_by_the_next_start(store, scalar_runs_on):
    url, st, before, op = _retired(store, scalar_runs_on)
    # stopped once the retirement is marked restored (and released), nothing deleted yet on a
    # bucket: the same failpoint on every store
    faults.arm("unretire.manifest", fail_io)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert o.status == Outcome.FAILED, o.to_dict()
    assert user_objects(st) == before
    outs = api.recover_logdir(url)
    assert outs and all(r.action == "completed" for r in outs), outs
    _released(url, st, before, op)


@pytest.mark.parametrize("store", KINDS[1:])
def test_a_delete_that_fails_mid_release_is_finished_by_the_next_start(store, scalar_runs_on, monkeypatch):
    url, st, before, op = _retired(store, scalar_runs_on)
    deletes = []
    real = bucket_putback.must_delete

    def second_fails(ostore, paths, versions=None):
        if any("/blobs/" in p for p in paths):
            deletes.append(paths)
            if len(deletes) == 2:
                raise BucketTxnError(Failure.STORE_ERROR, f"{paths[0]}: the test's failure")
        return real(ostore, paths, versions)

    monkeypatch.setattr(bucket_putback, "store_delete_batch", lambda ostore: 1)
    monkeypatch.setattr(bucket_putback, "must_delete", second_fails)
    [o] = api.restore(url, run="b")
    monkeypatch.undo()
    assert o.status == Outcome.RESTORED and "the next start releases the rest" in o.reason, o.to_dict()
    assert len(deletes) == 2 and user_objects(st) == before
    assert sum(bool(copies_in_vault(st, before[k])) for k in before if k.startswith("b/")) == 1
    outs = api.recover_logdir(url)
    assert [(r.action, r.code) for r in outs] == [("completed", "purge_finished")], outs
    _released(url, st, before, op)
