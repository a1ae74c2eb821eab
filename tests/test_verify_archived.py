"""Helper S's note on R24 F8 (issue #26): ``verify`` listed an offloaded backup whose remote object
is archived (S3 GLACIER, as a ``vault lifecycle`` rule leaves it) among the DAMAGED backups. Now it
lists it apart (``archived_backups``, coded ``archived``), naming the object and what to ask the
store for; ``damaged_backups`` stays empty, and once the store restored it the backups are intact."""
import pytest

from test_pack_index_rebuilt_bucket import offloaded  # noqa: F401 - the fixture
from test_remote_archived import _archive, _unarchive
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import StoreError

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_verify_lists_archived_backups_apart_and_never_as_damaged(offloaded, s3_bucket):  # noqa: F811
    root, _before, url = offloaded
    keys = _archive(s3_bucket, url)
    res = api.verify(str(root))
    assert res and all(not r["ok"] for r in res), res
    for r in res:
        assert r["damaged_backups"] == [] and r["archived_backups"], r
        assert r["code"] == StoreError.ARCHIVED, r
        for entry in r["archived_backups"]:
            assert "ask the store to restore it" in entry and "not damaged" in entry, entry
            assert any(f"{url.rstrip('/')}/{k}" in entry for k in keys), entry
    _unarchive(s3_bucket, url, keys)
    res = api.verify(str(root))
    assert res and all(r["backups_ok"] and not r.get("archived_backups") for r in res), res
