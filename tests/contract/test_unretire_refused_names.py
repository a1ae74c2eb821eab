"""An unretire refused before it starts names the retirement it refused in its outcome's ``op_id``
on every store (``retire_rules.unretire_outcome``), as an already-restored skip does; once its
journal is written the outcome is named by the restore's own op id. A disk's refusal carried None
where a bucket's carried the retirement's op id. Here the retired copy is gone from the vault: the
restore is refused (``restore_blocked``), nothing changed, on a folder and the three bucket servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.storage.stores import open_store


@pytest.fixture
def retired(scalar_runs_on):
    """(url, op id) of a logdir on ``store`` whose run ``b`` is retired."""
    def make(store):
        url = scalar_runs_on(store, runs=("a", "b"), steps=1)
        rep = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)
        (o,) = [o for o in rep.outcomes if o.run == "b"]
        assert o.status == Outcome.VERIFIED, o.to_dict()
        return url, o.op_id
    return make


@pytest.mark.parametrize("store", KINDS)
def test_an_unretire_refused_before_it_starts_names_the_retirement(store, retired):
    url, op = retired(store)
    st = open_store(url)
    kept = [e.key for e in st.list(every_key=True) if f"/{op}/files/" in f"/{e.key}"]
    assert kept, list(e.key for e in st.list(every_key=True))
    st.delete(kept)  # the vault's copy of the retired run is gone
    before = sorted(e.key for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint"))

    (o,) = [o for o in api.restore(url, run="b") if o.run == "b"]
    assert (o.status, o.code, o.op_id) == (Outcome.FAILED, Failure.RESTORE_BLOCKED, op), o.to_dict()
    assert "nothing was changed" in o.reason, o.reason
    assert sorted(e.key for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint")) == before
