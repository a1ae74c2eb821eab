"""A bucket restore that keeps in the vault what it found in an original's place says so with the
code a disk's restore says it with (``displaced_kept``: ``engine.putback.restore_code``, one rule
for every store), as the bucket's own ``status`` row of that kept object does; it said only
``mtime_not_kept`` when the object held no complete record written after the reduction."""
import io

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.scan.tfrecord import RecordWriter

from test_objstore import _write_rewrite_logdir


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("displaced") / "logs")


def test_a_grown_object_kept_without_late_records_is_coded_displaced_kept(bucket, rewrite_logdir):
    url = bucket.upload(rewrite_logdir, "logs")
    before = {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}
    (o,) = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"]).outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    ev = next(k for k in before if k.startswith("exp/hist/") and "tfevents" in k)
    reduced = bucket.fs.cat_file(bucket.key("logs/" + ev))
    buf = io.BytesIO()
    RecordWriter(buf).write(b"a record the writer is in the middle of")
    grown = reduced + buf.getvalue()[:9]  # no complete record after the reduced bytes
    bucket.fs.pipe_file(bucket.key("logs/" + ev), grown)

    (r,) = api.restore(url)
    assert r.status == Outcome.RESTORED, r.reason
    assert r.code == Finding.DISPLACED_KEPT, (r.code, r.reason)
    assert "modification times" in r.reason and "kept in the vault" in r.reason, r.reason
    now = {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}
    assert now == before  # every original back, no salvaged file
    (kb,) = api.status(url)["kept_blobs"]
    assert kb["code"] == r.code and kb["late_records"] == 0 and kb["late_records_file"] is None
    assert bucket.fs.cat_file(kb["blob"].split("://", 1)[1]) == grown
