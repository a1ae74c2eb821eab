"""A retired run's restore that leaves an original in the vault (``not_restored``: another object
stood at its path) lets the copies of the files that went back go, and keeps the one left, on
every store (#26, one release rule): a disk removed each ``files/<n>`` but the left ones; a bucket
kept every copy until purge, and purge kept them all (the vault holding a second copy of files
standing in the run). Now the bucket marks each released entry in the manifest's one write that
marks the retirement restored (``catalogue_rules.RELEASED_BY``, under a purge's journal), then
deletes those copies; purge keeps the left original, counting only it, and a restore stopped
between the mark and the deletes (``unretire.manifest``, now a bucket's step too) is finished by
the next start. A manifest written before the mark (every copy kept) still reads and purge still
keeps it whole. On a folder and the three bucket servers."""
import json

from contract_stores import KINDS, buckets, copies_in_vault, fail_io, logdir_on, scalar_runs_on, user_objects  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NOTES = b"lr: 0.1\n" * 40
OTHER = b"a job wrote here meanwhile\n"


def _restored_with_notes_left(store, scalar_runs_on, stop_after_mark=False):
    """Run ``b`` (an event file and notes.txt) retired, then restored while a job writes at
    notes.txt once the restore's journal is written: (url, store, the run's objects before, the
    retirement's op id, the restore's outcome)."""
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", NOTES)
    before = {k: v for k, v in user_objects(st).items() if k.startswith("b/")}
    assert len(before) == 2, before
    [r] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
    assert r.status == Outcome.VERIFIED, r.to_dict()
    assert all(copies_in_vault(st, v) for v in before.values())
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", OTHER))
    marked = []
    if stop_after_mark:  # the retirement marked restored, nothing released yet: the step fails there
        faults.arm("unretire.manifest", lambda: (marked.append(1), fail_io()))
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert len(marked) == int(stop_after_mark), "unretire.manifest was not reached"
    return url, st, before, r.op_id, o


def _only_the_left_original_kept(url, st, before, op) -> None:
    """The event file back and its copy gone from the vault; notes.txt the job's, its original
    in the vault, counted and kept by purge alone; nothing for a start to do."""
    events = [k for k in before if k != "b/notes.txt"]
    run_now = {k: v for k, v in user_objects(st).items() if k.startswith("b/")}
    assert run_now == dict(before, **{"b/notes.txt": OTHER})
    assert {k: copies_in_vault(st, before[k]) for k in events} == {k: [] for k in events}, "a copy not released"
    assert copies_in_vault(st, NOTES), "the original left is no longer in the vault"
    [m] = [m for m in api.summarize_operations(api.operations(url)) if m["op_id"] == op]
    assert m["restored_by"] and not m["backup_purged"] and m["left_in_vault"] == 1, m
    assert m["kept_bytes"] == len(NOTES), m
    rep = api.purge(url)
    assert op not in [o["op_id"] for o in rep.ops], rep
    [row] = [k for k in rep.kept if k["op_id"] == op]
    assert (row["code"], row["bytes"]) == (Finding.NOT_RESTORED, len(NOTES)), row
    api.purge(url, yes=True)
    assert copies_in_vault(st, NOTES), "purge deleted the only copy of an original"
    assert api.recover_logdir(url) == [] and not api.status(url)["unfinished_operations"]


@pytest.mark.parametrize("store", KINDS)
def test_a_restore_with_a_path_left_releases_the_copies_of_the_files_back(store, scalar_runs_on):
    url, st, before, op, o = _restored_with_notes_left(store, scalar_runs_on)
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    assert "b/notes.txt" in o.reason
    _only_the_left_original_kept(url, st, before, op)


@pytest.mark.parametrize("store", KINDS)
def test_a_partial_release_stopped_after_the_mark_is_finished_by_the_next_start(store, scalar_runs_on):
    url, st, before, op, o = _restored_with_notes_left(store, scalar_runs_on, stop_after_mark=True)
    assert o.status == Outcome.FAILED, o.to_dict()
    assert api.status(url)["unfinished_operations"]
    outs = api.recover_logdir(url)
    assert outs and all(r.action == "completed" for r in outs), outs
    _only_the_left_original_kept(url, st, before, op)


@pytest.mark.parametrize("store", KINDS[1:])
def test_a_manifest_without_the_mark_keeps_every_copy(store, scalar_runs_on):
    """A restore with a path left, recorded by a worker before the mark (every entry unmarked,
    every copy kept): it still reads, counts every copy, and purge keeps it whole."""
    url, st, before, op, o = _restored_with_notes_left(store, scalar_runs_on)
    key = f".tb-footprint/manifests/{op}.json"
    doc = json.loads(st.read_all(key))
    marked = [f for f in doc["files"] if f.pop("released_by", None)]
    assert [f["path"] for f in marked] == [k for k in before if k != "b/notes.txt"], doc["files"]
    st.put(key, json.dumps(doc).encode())
    for f in marked:  # the copies such a worker kept
        st.put(".tb-footprint/" + f["backup"].split("/.tb-footprint/", 1)[1], before[f["path"]])
    assert all(copies_in_vault(st, v) for v in before.values())
    [m] = [m for m in api.summarize_operations(api.operations(url)) if m["op_id"] == op]
    assert m["kept_bytes"] == sum(len(v) for v in before.values()), m
    rep = api.purge(url, yes=True)
    [row] = [k for k in rep.kept if k["op_id"] == op]
    assert (row["code"], row["bytes"]) == (Finding.NOT_RESTORED, sum(len(v) for v in before.values())), row
    assert all(copies_in_vault(st, v) for v in before.values()), "purge deleted a copy it keeps"
    assert api.recover_logdir(url) == [] and not api.status(url)["unfinished_operations"]
