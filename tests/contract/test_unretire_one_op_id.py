"""A retired run's restore is recorded by one op id however many attempts finish it, on every
store (#26): a restore stopped after its first put-back, a next start that fails (a copy still in
the vault damaged), then one that finishes it — the history's restore line names the op id the
stopped restore drew and said (a disk's journal is named by it; a bucket's journal records it,
``bucket_retire.RESTORE_OP``). A bucket's resumed restore drew a new op id on every attempt. A
bucket journal written before it recorded one (today's main) is still finished, and the attempts
that finish it name one op id too: the first gives it one, recorded in it. On a folder and the
three bucket servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on, copies_in_vault, fail_io, user_objects  # noqa: F401 - fixtures

import json

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NOTES = b"lr: 0.1\n" * 40
JOURNALS = ".tb-footprint/journal/"


def _stopped_restore(store, scalar_runs_on):
    """A logdir whose run ``b`` is retired and its restore stopped after its first put-back, the
    copy of the file not back yet damaged: (url, store, retirement, stopped outcome, copies,
    the file's bytes)."""
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", NOTES)
    before = user_objects(st)
    [r] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
    faults.arm("unretire.mid_move", fail_io)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert o.status == Outcome.FAILED and o.op_id and o.op_id != r.op_id, o.to_dict()
    [missing] = [k for k in before if k not in user_objects(st)]
    copies = copies_in_vault(st, before[missing])
    assert copies
    for k in copies:
        st.put(k, bytes(b ^ 0xFF for b in before[missing][:16]) + before[missing][16:])
    return url, st, r.op_id, o, copies, before, missing


def _two_recoveries(url, st, copies, before, missing) -> None:
    [r1] = api.recover_logdir(url)
    assert r1.action == "failed" and "damaged" in r1.detail, r1
    for k in copies:
        st.put(k, before[missing])
    [r2] = api.recover_logdir(url)
    assert r2.action == "completed", r2
    assert user_objects(st) == before and api.retired(url) == []


def _restore_lines(url, retirement) -> list:
    return [e["op_id"] for e in api.history(url) if e.get("kind") == "restore" and e.get("of_op") == retirement]


@pytest.mark.parametrize("store", KINDS)
def test_every_attempt_at_a_restore_names_the_stopped_restores_op_id(store, scalar_runs_on):
    url, st, retirement, o, copies, before, missing = _stopped_restore(store, scalar_runs_on)
    _two_recoveries(url, st, copies, before, missing)
    assert _restore_lines(url, retirement) == [o.op_id]


@pytest.mark.parametrize("store", KINDS[1:])
def test_a_bucket_journal_without_the_restores_op_id_is_finished_under_one(store, scalar_runs_on):
    url, st, retirement, o, copies, before, missing = _stopped_restore(store, scalar_runs_on)
    jkey = f"{JOURNALS}{retirement}.json"
    doc = json.loads(st.read_all(jkey))
    assert doc.pop("restore_op") == o.op_id  # what today's main writes has no such field
    st.put(jkey, json.dumps(doc).encode())

    [r1] = api.recover_logdir(url)
    assert r1.action == "failed" and "damaged" in r1.detail, r1
    given = json.loads(st.read_all(jkey)).get("restore_op")
    assert given and given != o.op_id  # the first attempt gave it one, recorded before anything moved
    for k in copies:
        st.put(k, before[missing])
    [r2] = api.recover_logdir(url)
    assert r2.action == "completed", r2
    assert user_objects(st) == before and api.retired(url) == []
    assert _restore_lines(url, retirement) == [given]
