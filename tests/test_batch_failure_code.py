"""A run whose transaction raises a coded failure keeps its code in the batch's outcome (issue #26
item 6: failures are values with codes): ``engine.local_batch.run_batch`` turned any exception
into ``Failure.ERROR``, so a ``TransactionError(..., Failure.REFUSED)`` or one of the ledger's
hook read as an unknown error; an exception without a code is still ``Failure.ERROR``."""
from types import SimpleNamespace

from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.local_batch import run_batch


def _run(reduce_one, on_outcome=None):
    rp = SimpleNamespace(run="r", bytes_before=10)
    return run_batch(reduce_one, [rp], jobs=1, timeout=None, cancel=None, progress=None, begin=None,
                     on_outcome=on_outcome)[0]


def test_a_coded_failure_keeps_its_code():
    def reduce_one(rp, cancel, progress):
        raise TransactionError("r/a: refused by preflight", Failure.REFUSED)
    o = _run(reduce_one)
    assert o.status == Outcome.FAILED and o.code == Failure.REFUSED
    assert "r/a: refused by preflight" in o.reason


def test_a_coded_failure_of_the_hook_keeps_its_code():
    def reduce_one(rp, cancel, progress):
        return SimpleNamespace(run="r", status=Outcome.VERIFIED)

    def hook(o):
        raise TransactionError("ledger: its state folder moved", Failure.STATE_MOVED)
    o = _run(reduce_one, hook)
    assert o.status == Outcome.FAILED and o.code == Failure.STATE_MOVED


def test_an_uncoded_exception_is_an_error():
    def reduce_one(rp, cancel, progress):
        raise KeyError("x")
    o = _run(reduce_one)
    assert o.status == Outcome.FAILED and o.code == Failure.ERROR and "KeyError" in o.reason
