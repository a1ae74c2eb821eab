"""A reduce whose batches all close within minutes still folds its ledger objects (review R18 F1:
063395c folded only marks over an hour old, so a quick reduce of many batches folded none, each
object one GET of every start until a later reduce; reverted). Real clocks: the autouse fixture of
test_ledger_fold, which runs its folds an hour on, is not imported."""
import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from test_ledger_fold import _batch, _objects, _start_reads
from tb_footprint_plugin.engine.ledger_fold import FOLD_AFTER



@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_start_after_a_quick_reduce_of_many_batches_reads_a_bounded_number_of_objects(store):  # noqa: F811
    for n in range(30):
        _batch(store, [f"r{n}", f"r{n + 1}"], n)
    assert len(_objects(store)) <= FOLD_AFTER + 2, len(_objects(store))
    assert _start_reads(store) <= FOLD_AFTER + 2
