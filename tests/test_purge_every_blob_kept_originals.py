"""#26 (review R26 LOW): a disk purge of x while w's manifest is missing keeps every blob (x's shared with w's) but marks
x purged: x can no longer be restored. Before, it said "0 original file(s) lost" (its files' blobs counted as kept by
the every-blob rule); now the files of x no manifest read names are counted (``purge._blob_plan``), as a bucket's
purge counts them, and the row says why it freed nothing (``purge_run.KEPT_BY``)."""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.purge_run import KEPT_BY

from test_missing_manifest_keeps_shared_blobs import _reduce, _runs, reduce_losing_manifest


def test_a_disk_purge_that_keeps_every_blob_counts_the_originals_it_can_no_longer_restore(tmp_path):
    logdir = _runs(tmp_path)
    _reduce(logdir, "x")
    healthy = api.purge(str(logdir), run="x", yes=False).to_dict()
    assert healthy["originals_lost"] > 0, healthy  # what x's purge costs with every manifest there
    reduce_losing_manifest(logdir, "w")
    for yes in (False, True):
        rep = api.purge(str(logdir), run="x", yes=yes).to_dict()
        (row,) = rep["ops"]
        assert row["bytes"] == 0 and row[KEPT_BY] == Finding.MANIFEST_MISSING, rep
        assert rep["originals_lost"] == healthy["originals_lost"], rep  # before: 0
    with pytest.raises(TransactionError, match="nothing to restore for run 'x'"):
        api.restore(str(logdir), run="x")  # x's restore went with its mark, as the count said
