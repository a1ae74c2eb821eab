"""A restore that cannot start because its journal's disk is full says ``Failure.NO_SPACE``, as
a reduce does (issue #26 item 6: failures are values with codes): ``engine.restore``'s start
coded every ``OSError`` of the journal's creation ``Failure.ERROR``, a full disk included. The
run is left as it was (reduced), nothing was changed."""
import errno

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import restore
from test_restore_txn import _reduced, snapshot

pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.mark.parametrize("err, code", [(errno.ENOSPC, Failure.NO_SPACE), (errno.EIO, Failure.ERROR)])
def test_a_restore_whose_journal_finds_the_disk_full(tmp_path, monkeypatch, err, code):
    logdir, _, _ = _reduced(tmp_path)
    before = snapshot(logdir)

    def create(*a, **k):
        raise OSError(err, "refused", "journal")
    monkeypatch.setattr(restore.Journal, "create", create)
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.FAILED and o.code == code, o.to_dict()
    assert "cannot start the restore" in o.reason
    assert snapshot(logdir) == before
