"""An operation whose owner cannot be told (a listing failed: ``whose_unknown``) is named by the
history and the bring-back too, not only by status, restore and purge (review R15 L4): the
history (whole, and the tab's page of the newest) has a line of it coded ``whose_unknown``,
saying what could not be listed, and a bring-back of it is refused with that code and those
words, never "no such operation"."""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding

from test_bucket_prefix_moved_blob_folder import prof_logdir  # noqa: F401
from test_bucket_vault_of_other_logdirs import _reduce_and_retire
from test_bucket_whose_unknown import _listings_fail


def _unsure_lines(entries):
    return [e for e in entries if e.get("code") == Finding.WHOSE_UNKNOWN]


def test_history_and_bring_back_name_an_operation_whose_owner_cannot_be_told(s3_bucket, prof_logdir, monkeypatch):
    url = s3_bucket.upload(prof_logdir, "runs")
    vault = s3_bucket.url("vault")
    _reduce_and_retire(url, vault)
    ops = sorted(m["op_id"] for m in api.operations(url, backup_dir=vault))
    assert len(ops) == 2
    told = api.history(url, backup_dir=vault)
    assert not _unsure_lines(told) and sorted({e["op_id"] for e in told}) == ops, told
    with monkeypatch.context() as mp:
        _listings_fail(mp, lambda p: p.endswith("/.tb-footprint/ops"))
        lines = _unsure_lines(api.history(url, backup_dir=vault))
        assert sorted(e["op_id"] for e in lines) == ops, api.history(url, backup_dir=vault)
        assert all(e["outcome"] == Finding.WHOSE_UNKNOWN and "cannot be listed" in e["reason"]
                   and "AccessDenied" in e["reason"] and isinstance(e["time"], float) for e in lines), lines
        page = api.history_page(url, backup_dir=vault, newest=500)
        assert sorted(e["op_id"] for e in _unsure_lines(page["entries"])) == ops, page
        with pytest.raises(Exception) as err:
            api.bring_back(url, ops[0], "r0/anything", backup_dir=vault)
        assert getattr(err.value, "code", None) == Finding.WHOSE_UNKNOWN, repr(err.value)
        assert "cannot be listed" in str(err.value) and ops[0] in str(err.value), str(err.value)
    # the listing works again: the operations' own lines, no whose_unknown line
    again = api.history(url, backup_dir=vault)
    assert not _unsure_lines(again) and again == told
