"""The next start's finishing of a retired run's restore is the one restore's sequence on every
store (#26, ``unretire_run.Unretire`` with the kept journal): its vault's copies are checked
before anything more is put back. A restore stopped after its first put-back, then a copy still
in the vault damaged: the next start puts nothing more back (the damaged bytes never reach the
run's path), keeps the journal and says which file; once the copy is whole again the next start
finishes the restore, byte for byte. A disk's recovery (``retire.finish_unretire``) put the
damaged copy at its path first and found the mismatch only afterwards, its copy gone from the
vault; the next start then left it there as another file's (``not_restored``). On a folder and
the three bucket servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on, copies_in_vault, fail_io, user_objects  # noqa: F401 - fixtures


import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NOTES = b"lr: 0.1\n" * 40


@pytest.mark.parametrize("store", KINDS)
def test_recovery_checks_the_copies_before_it_puts_more_back(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", NOTES)  # a second file: a restore stopped after its first is half back
    before = user_objects(st)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    faults.arm("unretire.mid_move", fail_io)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert o.status == Outcome.FAILED, o.to_dict()
    half = user_objects(st)
    [missing] = [k for k in before if k not in half]  # the file not back yet
    copies = copies_in_vault(st, before[missing])
    assert copies, "the file not back yet has its copy in the vault"
    damaged = bytes(b ^ 0xFF for b in before[missing][:16]) + before[missing][16:]
    for k in copies:
        st.put(k, damaged)

    [r] = api.recover_logdir(url)
    assert r.action == "failed" and missing in r.detail and "damaged" in r.detail, r
    assert user_objects(st) == half  # nothing more put back: the damaged bytes are not at the run's path
    assert api.status(url)["unfinished_operations"]  # the journal is kept for the next start
    assert all(st.read_all(k) == damaged for k in copies)  # the vault's copy left where it was

    for k in copies:  # the copy whole again: the next start finishes the restore
        st.put(k, before[missing])
    [r] = api.recover_logdir(url)
    assert r.action == "completed", r
    assert user_objects(st) == before and api.retired(url) == [] and api.recover_logdir(url) == []
    assert not api.status(url)["unfinished_operations"]
