"""Issue #26 (V6's ask): a retired run's restore finished at the next start that leaves an original
in the vault (a file written at its path since) says it in ``RecoveryOutcome.findings`` as
``not_restored`` naming the path, on every store, as the restore's own outcome does."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

STANDING = b"another file, written at the path before the restore reached it\n"
ORIGINAL = b"lr: 0.1\n" * 40


@pytest.mark.parametrize("store", KINDS)
def test_a_restore_finished_at_the_next_start_finds_an_original_left_in_the_vault(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", ORIGINAL)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok

    def crash():  # its journal written, nothing put back yet: the process stops; a file is written there
        st.put("b/notes.txt", STANDING)
        raise faults.InjectedCrash("the test's crash")

    faults.arm("unretire.journal", crash)
    with pytest.raises(faults.InjectedCrash):
        api.restore(url, run="b")
    faults.disarm_all()
    [r] = [r for r in api.recover_logdir(url) if r.run == "b"]
    assert r.action == Recovery.COMPLETED, vars(r)
    assert r.findings == [{"code": "not_restored", "path": "b/notes.txt"}], vars(r)
    assert st.read_all("b/notes.txt") == STANDING
