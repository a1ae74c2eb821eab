"""A bucket's ``verify --json`` results carry ``unreadable_backups`` as a disk's do
(docs/json-schema.md: "Each result has `damaged_backups` ... and `unreadable_backups`"), and a backup
copy the store refuses to show this user (403) is said as one this user may not read, coded
``permission_denied``, not a damaged one, nor an error that stops the whole check (review R21 PD11)."""
import pytest

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import bucket_objects
from tb_footprint_plugin.storage.store import StoreFailure

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_buckets_verify_names_unreadable_backups_apart(tmp_path, s3_bucket, monkeypatch):
    logdir = tmp_path / "ld"
    for run in ("a", "b"):
        copy_real("tf/keras_profiled/train", logdir / run)
    url = s3_bucket.upload(logdir, "unreadable")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0)
    assert sorted(str(o.status) for o in rep.outcomes) == ["verified", "verified"]
    fine = api.verify(url)
    assert [(r["ok"], r["damaged_backups"], r["unreadable_backups"]) for r in fine] == [(True, [], [])] * 2, fine
    denied_run = rep.outcomes[0].run
    real_head = bucket_objects.BucketState.head

    def head(self, path):
        if "/blobs/" in path and rep.outcomes[0].op_id in path:
            raise StoreFailure(StoreError.PERMISSION, path, "403 Forbidden")
        return real_head(self, path)

    monkeypatch.setattr(bucket_objects.BucketState, "head", head)
    res = {r["run"]: r for r in api.verify(url)}
    assert set(res) == {"a", "b"}, res
    bad = res[denied_run]
    assert not bad["ok"] and not bad["backups_ok"] and bad["damaged_backups"] == []
    assert bad["unreadable_backups"] and all("403" in u for u in bad["unreadable_backups"]), bad
    assert bad["code"] == StoreError.PERMISSION
    other = res[({"a", "b"} - {denied_run}).pop()]
    assert other["ok"] and other["unreadable_backups"] == [], other
