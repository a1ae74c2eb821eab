"""A run taken along must be inside the run, one rule (``retire_rules.taken_along``) for a
retirement's journal on every store (issue #26, review R3 L4): a journal is untrusted input, and
one whose ``takes_along`` names a run outside the retired one is never settled on its word —
refused with ``path_outside`` and left as it is, as a disk's journal check always refused it (a
bucket's recovery left the name out of its locks and settled the rest). The journal as written
is settled."""
import json
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.fixture
def logdir(scalar_runs_on):
    return scalar_runs_on  # runs a, a/inner, b


def _journal(url: str):
    """The one journal left in the logdir's state folder: (store, key)."""
    st = open_store(url)
    keys = [e.key for e in st.list(".tb-footprint/journal", every_key=True)
            if e.key.endswith((".json", ".jsonl"))]
    assert len(keys) == 1, keys
    return st, keys[0]


def _rewrite(st, key: str, along) -> bytes:
    """The journal with its retirement's ``takes_along`` set to ``along``; returns its bytes before."""
    was = st.read_all(key)
    if key.endswith(".jsonl"):  # a disk's: the begin record first
        lines = was.decode().splitlines()
        lines[0] = json.dumps(dict(json.loads(lines[0]), takes_along=along))
        new = ("\n".join(lines) + "\n").encode()
    else:  # a bucket's journal object
        new = json.dumps(dict(json.loads(was), takes_along=along)).encode()
    st.put(key, new)
    return was


@pytest.mark.parametrize("store", KINDS)
def test_a_retirement_journal_taking_along_a_run_outside_it_is_refused(store, logdir):
    url = logdir(store)
    faults.arm("retire.move", kill)  # every file in the vault, nothing deleted: killed there
    with pytest.raises(Killed):
        api.retire(url, api.retire_rule(runs=["a"], include_nested=True), dry_run=False, quiet_period=0)
    faults.disarm_all()
    st, key = _journal(url)
    was = _rewrite(st, key, ["a/inner", "b"])

    outs = api.recover_logdir(url)
    assert [(o.action, o.code) for o in outs] == [(Recovery.REFUSED, Finding.PATH_OUTSIDE)], \
        [vars(o) for o in outs]
    assert "outside" in outs[0].detail
    assert _journal(url)[1] == key  # left as it is

    st.put(key, was)  # the journal as the retirement wrote it: settled (rolled back)
    outs = api.recover_logdir(url)
    assert [o.action for o in outs] == [Recovery.ROLLED_BACK], [vars(o) for o in outs]
    assert api.retired(url) == [] and api.recover_logdir(url) == []
