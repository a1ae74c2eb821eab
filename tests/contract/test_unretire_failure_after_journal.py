"""A retired run's restore that fails after its journal is said one way on every store
(``unretire_run.Unretire.rollback``, #26): never undone; its reason the failure's; the journal
goes when nothing was put back yet (the run stays retired, as it was, and no journal is left for
every start to meet), else it stays and the reason says the next start finishes the restore,
which it does, byte for byte. A disk said "restore interrupted: …; it will be finished on the
next start" and kept its journal either way; a bucket had no failpoint between its journal and
its first put-back (``unretire.journal``, now every store's). On a folder and the three bucket
servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import errno

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.unretire_run import JOURNAL_KEPT
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

WHY = "the test's failure"


def _fail() -> None:
    raise OSError(errno.EIO, WHY)


def _user(st) -> dict:
    return {e.key: st.read_all(e.key) for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint")}


@pytest.mark.parametrize("store", KINDS)
@pytest.mark.parametrize("where", ["unretire.journal", "unretire.mid_move"])
def test_a_restore_failing_after_its_journal_is_said_one_way(store, where, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", b"lr: 0.1\n")  # a second file: one failing after the first is half back
    before = _user(st)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    retired = _user(st)
    faults.arm(where, _fail)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert o.status == Outcome.FAILED and o.reason.startswith(f"[Errno {errno.EIO}] {WHY}"), o.to_dict()
    if where == "unretire.journal":  # nothing put back: the journal went, the run is retired as it was
        assert o.reason == f"[Errno {errno.EIO}] {WHY}", o.to_dict()
        assert api.recover_logdir(url) == []
        assert _user(st) == retired and [r["run"] for r in api.retired(url)] == ["b"]
        [o] = api.restore(url, run="b")
        assert o.status == Outcome.RESTORED, o.to_dict()
    else:  # half back: the journal stays, the next start finishes the restore
        assert o.reason.endswith(JOURNAL_KEPT), o.to_dict()
        assert [r.action for r in api.recover_logdir(url)] == ["completed"]
    assert _user(st) == before and api.retired(url) == []
