"""A bucket rollback never deletes a backup whose original is not at its key as the journal
recorded it before the reduction (review R7 F2, defence in depth after e25b629).

The journal a recovery acts on may be older than the run: R7 reproduced one read before its owner
went on past its swap (e25b629 reads it again once the owner is gone); a journal object put back
from a copy of the state, or any other stale doc, is the same. Here the reduction's own journal as
it stood at ``reduce.backup`` (every backup made, step before the commit) is put back once the
reduction has finished: the recovery rolls the run back from it. Before, ``rollback_entry`` found
nothing to put back (no verified backup recorded) and deleted the manifest and the backup copies:
the event file's original existed nowhere, the run held the reduced bytes, and a restore said
"nothing to restore". Now the key holding something else than the recorded original keeps its
backup and the manifest naming it; the outcome says so (``Recovery.BACKUPS_KEPT``,
``Finding.ORIGINAL_NOT_IN_PLACE``), and a restore gives the original back byte for byte."""
import hashlib

from contract_stores import buckets, logdir_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

from test_objstore import _write_rewrite_logdir

pytestmark = pytest.mark.usefixtures("disarm_faults")

STATE = ".tb-footprint/"
RUN = "exp/hist"


def _user_hashes(st) -> dict:
    return {k: hashlib.sha256(st.read_all(k)).hexdigest() for k in (e.key for e in st.list("")) if not k.startswith(STATE)}


def _journals(st) -> list:
    return sorted(e.key for e in st.list(STATE + "journal") if e.key.endswith(".json"))


@pytest.mark.parametrize("store", ["s3", "gs", "az"])
def test_a_stale_journal_rolled_back_keeps_the_only_copy_of_the_original(store, tmp_path, logdir_on):
    url = logdir_on(store, _write_rewrite_logdir(tmp_path / "src"))
    st = open_store(url)
    before = _user_hashes(st)
    stale = {}

    def capture():  # the journal as its owner left it before its commit step
        [key] = _journals(st)
        stale[key] = st.read_all(key)

    faults.arm("reduce.backup", capture)
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    faults.disarm_all()
    [o] = [o for o in rep.outcomes if o.run == RUN]
    assert o.status == Outcome.VERIFIED, o.to_dict()
    reduced = _user_hashes(st)
    changed = sorted(k for k in before if reduced.get(k) != before[k])
    assert changed, "the reduction changed nothing: the case was not exercised"
    assert stale and _journals(st) == []

    [(key, doc)] = stale.items()
    st.put(key, doc)  # a journal older than the run: read before its owner went on, or copied back
    settled = api.recover_logdir(url)

    [r] = [r for r in settled if r.op_id == o.op_id]
    assert (r.action, r.code) == (Recovery.BACKUPS_KEPT, Finding.ORIGINAL_NOT_IN_PLACE), settled
    assert changed[0] in r.detail
    assert _journals(st) == []  # settled: the next start has nothing left of it
    assert _user_hashes(st) == reduced  # the run as it stood: nothing put over what the owner left
    [back] = api.restore(url, run=RUN)
    assert back.status == Outcome.RESTORED, back.to_dict()
    assert _user_hashes(st) == before  # every original back, byte for byte
