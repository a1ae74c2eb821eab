"""The tab's Operations page lists the bytes a restore kept in the vault in a file's place
(``kept_blobs``) from the manifests it just read (``api.kept_blobs``), not from a whole ``status``
(review R20-R R16): on a bucket that status cost 23 requests a page load (its listings of journals,
locks, ledgers, the change log, the whole logdir for the bytes in use), on a disk it parsed every
change log whole (64 MB of lines: 1.5 s of CPU and ~650 MB inside TensorBoard). ``api.kept_blobs``
answers what ``status()["kept_blobs"]`` answers, on a disk and on a bucket."""
import builtins
import json
import os
import time

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome

from test_objstore_state import _grow_reduced_event_object, rewrite_logdir  # noqa: F401
from test_plugin_routes import App
from test_scale_buckets import _measure, counted  # noqa: F401

PY = ("python",)
pytestmark = pytest.mark.usefixtures("disarm_faults")


def _disk_logdir_with_a_kept_blob(tmp_path):
    """A run whose trace ``lossless`` gzipped, written again under its old name before the restore:
    the restore keeps those bytes in the vault (``displaced_kept``)."""
    from test_late_records import image_run

    logdir = tmp_path / "logdir"
    run = logdir / "run"
    image_run(run)
    trace = run / "worker0.1.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "op"}] * 300}))
    old = time.time() - 7200
    os.utime(trace, (old, old))
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=PY)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    trace.write_bytes(b'{"traceEvents": [], "written": "again"}')
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED and o.code == Finding.DISPLACED_KEPT, o.to_dict()
    return logdir


def test_kept_blobs_is_what_status_lists_on_a_disk(tmp_path):
    logdir = str(_disk_logdir_with_a_kept_blob(tmp_path))
    want = api.status(logdir)["kept_blobs"]
    assert [k["code"] for k in want] == [Finding.DISPLACED_KEPT]
    assert api.kept_blobs(logdir) == want
    assert api.kept_blobs(logdir, manifests=api.operations(logdir)) == want


def test_kept_blobs_is_what_status_lists_on_a_bucket(s3_bucket, rewrite_logdir):  # noqa: F811
    url = _grow_reduced_event_object(s3_bucket, rewrite_logdir)[0]
    (r,) = api.restore(url)
    assert r.code == Finding.LATE_RECORDS_RESTORED, r.reason
    want = api.status(url)["kept_blobs"]
    assert [k["code"] for k in want] == [Finding.LATE_RECORDS_RESTORED] and want[0]["present"]
    assert api.kept_blobs(url) == want
    assert api.kept_blobs(url, manifests=api.operations(url)) == want


def test_the_operations_page_of_a_disk_does_not_read_the_change_log(tmp_path):
    """The change log (and every other log of the state folder a ``status`` reads) is not opened
    by a load of the Operations page, however long it is; the kept blob is still listed."""
    logdir = _disk_logdir_with_a_kept_blob(tmp_path)
    state = logdir / ".tb-footprint"
    log = state / "history.jsonl"
    assert log.is_file()  # the reduce's and the restore's lines
    opened = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, *a, **kw):
        opened.append(os.fsdecode(path))
        return real_os_open(path, *a, **kw)

    def py_open(file, *a, **kw):
        if isinstance(file, (str, bytes, os.PathLike)):
            opened.append(os.fsdecode(file))
        return real_open(file, *a, **kw)

    def logs():
        return [p for p in opened if os.path.basename(p).startswith(("history", "ledger"))]

    app = App(logdir)
    try:
        os.open, builtins.open = os_open, py_open
        try:
            want = api.status(str(logdir))["kept_blobs"]
            assert logs(), opened  # the spies see a status read the change log
            opened.clear()
            r = app.get("/operations")
        finally:
            os.open, builtins.open = real_os_open, real_open
        assert r.status_code == 200, r.get_data(as_text=True)
        d = r.get_json()
        assert [k["sha256"] for k in d["kept_blobs"]] == [k["sha256"] for k in want] and want
        assert [o["kind"] for o in d["operations"]] == ["restore", "reduce"]
        assert not logs(), logs()
    finally:
        app.close()


def _quiet(proxy, timeout=60.0):
    """Until a second passes with no request through ``proxy``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proxy.reset()
        time.sleep(1.0)
        if not sum(proxy.counts.values()):
            return
    raise AssertionError(f"requests went on for {timeout} s: {dict(proxy.counts)}")


def test_the_operations_page_of_a_bucket_costs_the_operations_and_a_head_per_kept_object(
        counted, rewrite_logdir):  # noqa: F811
    """A load of the Operations page: the requests of ``api.operations`` (the manifests) and one HEAD
    per kept object (whether it is still there), where a whole ``status`` added ~23."""
    bucket, proxy, listed = counted
    url = _grow_reduced_event_object(bucket, rewrite_logdir)[0]
    (r,) = api.restore(url)
    assert r.code == Finding.LATE_RECORDS_RESTORED, r.reason
    app = App(url)
    try:
        _quiet(proxy)  # what the tab's load set going in the background (its first reads) is over
        _ops, alone, _l = _measure(proxy, listed, lambda: api.operations(url))
        res, page, _l = _measure(proxy, listed, lambda: app.get("/operations"))
        assert res.status_code == 200, res.get_data(as_text=True)
        d = res.get_json()
        assert [k["code"] for k in d["kept_blobs"]] == [Finding.LATE_RECORDS_RESTORED], d["kept_blobs"]
        assert d["kept_blobs"] == api.status(url)["kept_blobs"]
        extra = {k: page.get(k, 0) - alone.get(k, 0) for k in set(page) | set(alone)}
        assert {k: v for k, v in extra.items() if v} == {"head": len(d["kept_blobs"])}, (page, alone)
    finally:
        app.close()
