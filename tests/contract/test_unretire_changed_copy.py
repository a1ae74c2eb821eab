"""Issue #26: a retired run's restore with one stored copy not as recorded is the same on every
store (the disk's rule, ``retire.DiskUnretire.begin``, T's 2736cb2): the run's other files go
back, the changed one stays in the vault, named ``not_restored`` and ``backup_changed`` in the
outcome's findings and ``not_restored`` in the retirement's manifest (purge keeps it whole); a
copy missing, or every copy changed, refuses the whole restore, nothing changed. The begin
record says which paths are left: a restore killed after it and finished by the next start puts
back the same set, even once the changed copy reads as recorded again. A bucket's unretire refused
the whole run over one changed copy. On a folder and the three bucket servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on, copies_in_vault, user_objects  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NOTES = b"lr: 0.1\n" * 40


def _retired(store, scalar_runs_on):
    """A logdir whose run ``b`` (an event file and ``b/notes.txt``) is retired: its URL, store, the
    user's objects before, and the vault's copies of each of b's files by key."""
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", NOTES)
    before = user_objects(st)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    copies = {k: copies_in_vault(st, v) for k, v in before.items() if k.startswith("b/")}
    assert len(copies) == 2 and all(len(c) == 1 for c in copies.values()), copies
    return url, st, before, {k: c[0] for k, c in copies.items()}


def _changed(data: bytes) -> bytes:
    """The same size, its first bytes not the recorded ones (an in-place write)."""
    return bytes(b ^ 0xFF for b in data[:16]) + data[16:]


def _refused_nothing_changed(url, st, before):
    [o] = api.restore(url, run="b")
    assert (o.status, o.code) == (Outcome.FAILED, Failure.RESTORE_BLOCKED), o.to_dict()
    assert "nothing was changed" in o.reason, o.reason
    assert user_objects(st) == {k: v for k, v in before.items() if not k.startswith("b/")}
    assert len(api.retired(url)) == 1 and not api.status(url)["unfinished_operations"]


@pytest.mark.parametrize("store", KINDS)
def test_a_changed_copy_stays_in_the_vault_and_the_others_go_back(store, scalar_runs_on):
    url, st, before, copy = _retired(store, scalar_runs_on)
    [event] = [k for k in copy if k != "b/notes.txt"]
    st.put(copy["b/notes.txt"], _changed(NOTES))
    st.delete([copy[event]])  # one copy missing: refused, whatever the other holds
    _refused_nothing_changed(url, st, before)
    st.put(copy[event], _changed(before[event]))  # every copy changed: nothing would come back
    _refused_nothing_changed(url, st, before)

    st.put(copy[event], before[event])  # the event file's copy as recorded, the notes' still changed
    [o] = api.restore(url, run="b")
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    assert {"code": Finding.NOT_RESTORED, "path": "b/notes.txt"} in o.findings, o.findings
    assert {"code": Finding.BACKUP_CHANGED, "path": "b/notes.txt"} in o.findings, o.findings
    assert {f["path"] for f in o.findings} == {"b/notes.txt"}, o.findings
    assert user_objects(st) == {k: v for k, v in before.items() if k != "b/notes.txt"}
    assert st.read_all(copy["b/notes.txt"]) == _changed(NOTES)  # kept as it is, in the vault
    assert api.retired(url) == [] and not api.status(url)["unfinished_operations"]
    api.purge(url, older_than=0, yes=True)  # purge keeps it: its only copy
    assert st.read_all(copy["b/notes.txt"]) == _changed(NOTES)


@pytest.mark.parametrize("store", KINDS)
def test_a_restore_killed_after_its_begin_record_puts_back_the_same_set(store, scalar_runs_on):
    url, st, before, copy = _retired(store, scalar_runs_on)
    st.put(copy["b/notes.txt"], _changed(NOTES))

    def crash():  # the begin record written (it names the notes as left), nothing put back yet;
        st.put(copy["b/notes.txt"], NOTES)  # then the copy reads as recorded again
        raise faults.InjectedCrash("the test's crash")

    faults.arm("unretire.journal", crash)
    with pytest.raises(faults.InjectedCrash):
        api.restore(url, run="b")
    faults.disarm_all()
    [r] = [r for r in api.recover_logdir(url) if r.run == "b"]
    assert r.action == Recovery.COMPLETED, vars(r)
    assert sorted((f["code"], f["path"]) for f in r.findings) == [
        (Finding.BACKUP_CHANGED, "b/notes.txt"), (Finding.NOT_RESTORED, "b/notes.txt")], vars(r)
    assert user_objects(st) == {k: v for k, v in before.items() if k != "b/notes.txt"}  # the same set
    assert st.read_all(copy["b/notes.txt"]) == NOTES  # still in the vault, never released
    assert api.recover_logdir(url) == [] and not api.status(url)["unfinished_operations"]
