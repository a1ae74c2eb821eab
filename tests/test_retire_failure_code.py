"""A local retirement rolled back by a failure says it with the code the failure carries, as a
reduce's transaction and a bucket's retirement do (issue #26 item 6: failures are values with
codes): a full disk is ``Failure.NO_SPACE``, a step's coded ``TransactionError`` keeps its code;
``engine.retire``'s rollback said ``Failure.ERROR`` for every failure."""
import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import TransactionError

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _retire(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False)
    faults.disarm_all()
    [o] = rep.outcomes
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert user_files(logdir) == before  # put back, as before the fix
    return o


def test_a_full_disk_is_no_space(tmp_path):
    faults.arm("retire.move", "enospc")
    o = _retire(tmp_path)
    assert o.code == Failure.NO_SPACE, o.to_dict()


def test_a_coded_step_failure_keeps_its_code(tmp_path):
    def changed():
        raise TransactionError("train/x: changed since its backup", Failure.CHANGED_SINCE_BACKUP)
    faults.arm("retire.move", changed)
    o = _retire(tmp_path)
    assert o.code == Failure.CHANGED_SINCE_BACKUP, o.to_dict()


def test_an_uncoded_failure_is_an_error(tmp_path):
    faults.arm("retire.move", "raise")
    o = _retire(tmp_path)
    assert o.code == Failure.ERROR, o.to_dict()


def test_an_unretire_whose_journal_finds_the_disk_full_is_no_space(tmp_path, monkeypatch):
    import errno

    from tb_footprint_plugin.engine import retire
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]

    def create(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", "journal")
    monkeypatch.setattr(retire.Journal, "create", create)
    (o,) = api.restore(str(logdir), run="train")
    assert o.status == Outcome.FAILED and o.code == Failure.NO_SPACE, o.to_dict()
    assert "cannot start the restore" in o.reason
