"""A writer found after a retirement's journal is a skip on every store (``retire_run.Retire``:
a failure coded with a ``Skip`` is a skip, rolled back): a file written into the run while its
files were in the vault leaves the run where it was, every original back with its bytes beside
the new file, nothing retired, and the outcome says ``skipped`` with ``active``, as a bucket's
last look always said and a disk's reduce says. A disk's retirement said ``rolled_back`` with
``error`` (its "new files appeared" carried no code), on a folder and the three bucket servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _user(st) -> dict:
    return {e.key: st.read_all(e.key) for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint")}


@pytest.mark.parametrize("store", KINDS)
def test_a_file_written_into_the_run_during_its_retirement_makes_it_a_skip(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    before = _user(st)
    # every file of the run is in the vault (its copies made, none removed yet): a writer adds one
    faults.arm("retire.move", lambda: st.put("b/late.txt", b"written during the retirement\n"))
    (o,) = [o for o in api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
            if o.run == "b"]
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.SKIPPED, Skip.ACTIVE), o.to_dict()
    assert _user(st) == {**before, "b/late.txt": b"written during the retirement\n"}
    assert api.retired(url) == []
    assert [e["outcome"] for e in api.history(url) if e.get("op_id") == o.op_id] == [Outcome.ROLLED_BACK]
