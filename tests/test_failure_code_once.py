"""One store-neutral rule for the code of a failed run (review R r20, R6): ``context.failure_code``,
used by the reduce batch, the reduce's and the retirement's transactions and the restore's start.
A bare ``OSError(ENOSPC)`` was ``error`` in the batch and ``no_space`` everywhere else."""
import errno
from types import SimpleNamespace

import pytest

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine import context, local_batch
from tb_footprint_plugin.engine.context import Cancelled, NoSpace, TransactionError
from tb_footprint_plugin.engine.journal import JournalGone


def _rp(run="r1"):
    return SimpleNamespace(run=run, bytes_before=10)


def test_batch_codes_a_bare_full_disk_no_space():
    """A run (or a ``begin``) raising a bare ENOSPC/EDQUOT fails ``no_space``, as a reduce says it."""
    def reduce_one(rp, token, progress):
        raise OSError(errno.ENOSPC, "No space left on device", "/x/ledger")

    def begin(rp):
        if rp.run == "r2":
            raise OSError(getattr(errno, "EDQUOT", errno.ENOSPC), "Disk quota exceeded")

    outs = local_batch.run_batch(reduce_one, [_rp("r1"), _rp("r2")], jobs=1, timeout=None, cancel=None,
                                 progress=None, begin=begin, on_outcome=None)
    assert [(o.status, o.code) for o in outs] == [(Outcome.FAILED, Failure.NO_SPACE)] * 2


def test_batch_codes_a_full_disk_in_the_outcome_hook_no_space():
    ok = context.RunOutcome(run="r1", status=Outcome.VERIFIED)

    def hook(o):
        raise OSError(errno.ENOSPC, "No space left on device")

    outs = local_batch.run_batch(lambda rp, t, p: ok, [_rp()], jobs=1, timeout=None, cancel=None,
                                 progress=None, begin=None, on_outcome=hook)
    assert outs[0].code == Failure.NO_SPACE and outs[0].status == Outcome.FAILED


@pytest.mark.parametrize("error, code", [
    (OSError(errno.ENOSPC, "full"), Failure.NO_SPACE),
    (OSError(getattr(errno, "EDQUOT", errno.ENOSPC), "quota"), Failure.NO_SPACE),
    (NoSpace("/x/f", 10, OSError(errno.ENOSPC, "full")), Failure.NO_SPACE),
    (TransactionError("changed", Failure.CHANGED_SINCE_BACKUP), Failure.CHANGED_SINCE_BACKUP),
    (TransactionError("verification failed"), Failure.ERROR),
    (TransactionError("busy", Skip.ACTIVE), Failure.ERROR),  # a skip is no failure code
    (Cancelled("stopped"), Failure.INTERRUPTED),
    (Cancelled("timed out", Failure.ERROR), Failure.ERROR),
    (JournalGone("/x/j", "is gone"), Failure.JOURNAL_GONE),
    (OSError(errno.EACCES, "denied"), Failure.ERROR),
    (ValueError("bug"), Failure.ERROR),
    (None, Failure.ERROR),
])
def test_one_rule(error, code):
    assert context.failure_code(error) == code


def test_the_engines_use_it():
    """No engine module keeps a mapper of its own (the retirement's, the batch's went)."""
    from tb_footprint_plugin.engine import retire, transaction
    assert retire.failure_code is context.failure_code
    assert transaction.failure_code is context.failure_code
    assert not hasattr(local_batch, "_code_of")


@pytest.mark.parametrize("error, code", [
    (OSError(errno.ENOSPC, "full"), Failure.NO_SPACE),
    (NoSpace("/x/f", 10, OSError(errno.ENOSPC, "full")), Failure.NO_SPACE),
    (TransactionError("changed", Failure.CHANGED_SINCE_BACKUP), Failure.CHANGED_SINCE_BACKUP),
    (TransactionError("verification failed"), Failure.ERROR),
    (Cancelled("stopped"), Failure.INTERRUPTED),
    (Cancelled("timed out", Failure.ERROR), Failure.ERROR),
    (JournalGone("/x/j", "is gone"), Failure.JOURNAL_GONE),
    (OSError(errno.EACCES, "denied"), Failure.ERROR),
    (RuntimeError("bug"), Failure.ERROR),
])
def test_a_bucket_says_what_a_disk_says_of_a_failure_no_store_gave(error, code):
    """The bucket's mapper is the neutral rule with its store codes on top: a lost journal is
    ``journal_gone`` there too (it said ``error``)."""
    from tb_footprint_plugin.engine import bucket_state
    assert bucket_state.failure_code(error) == context.failure_code(error) == code


def test_a_bucket_keeps_its_own_codes():
    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.engine import bucket_state
    from tb_footprint_plugin.storage.store import StoreFailure
    assert bucket_state.failure_code(TransactionError("busy", Skip.ACTIVE)) == Skip.ACTIVE
    assert bucket_state.failure_code(bucket_state.BucketTxnError(Skip.LOCKED, "held")) == Skip.LOCKED
    assert bucket_state.failure_code(StoreFailure(StoreError.NO_SPACE, "k", "quota")) == Failure.NO_SPACE
    assert bucket_state.failure_code(StoreFailure(StoreError.UNSAFE_KEY, "a/../b", "x")) == Failure.REFUSED
    assert bucket_state.failure_code(StoreFailure(StoreError.STORE_ERROR, "k", "500")) == Failure.STORE_ERROR
    assert bucket_state.failure_code(ValueError("../escape")) == Failure.REFUSED
