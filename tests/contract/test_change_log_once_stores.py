"""One change-log line per operation on either store (review R r20 R11): ``ChangeLog.append_once``
leaves out a line whose operation, kind and outcome the log has already, a recovery's redo after a
kill between the line and the record that says it was written; a log it cannot read has none, so
every line is written (one twice rather than none). The bucket's recovery appends through it
(``history.append_rolled_back(once=True)``)."""
import uuid

import pytest

from change_log_small import buckets, where  # noqa: F401 - the fixtures ``where`` and ``buckets``
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import history
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


def _line(op, outcome="rolled_back", t=1.0):
    return {"op_id": op, "kind": "reduce", "run": f"r-{op}", "outcome": outcome, "time": t}


def test_a_line_of_an_operation_is_appended_once(where):
    kind, s, _key_of, log_of = where
    assert log_of().append_once([_line("a"), _line("b")]) == [_line("a"), _line("b")]
    redo = [_line("a", t=2.0), _line("c", t=2.0), _line("a", "verified", t=2.0)]
    assert log_of().append_once(redo) == [_line("c", t=2.0), _line("a", "verified", t=2.0)]
    assert sorted((e["op_id"], e["outcome"]) for e in log_of().read()) == \
        [("a", "rolled_back"), ("a", "verified"), ("b", "rolled_back"), ("c", "rolled_back")]
    assert log_of().logged(kind="reduce", outcome="rolled_back") == {"a", "b", "c"}


def test_a_log_that_cannot_be_read_has_no_line(where, monkeypatch):
    kind, s, _key_of, log_of = where
    log_of().append_once([_line("a")])

    def refused(self, key, *_a, **_k):
        raise StoreFailure(StoreError.PERMISSION, key, "refused")
    with monkeypatch.context() as mp:
        # the store refuses every read of a log (however the log reads it: whole, a range, open)
        for name in ("read_all", "read_range", "open_read"):
            mp.setattr(type(s), name, refused)
        assert log_of().logged() == frozenset()
        assert log_of().append_once([_line("a", t=2.0)]) == [_line("a", t=2.0)]
    assert [e["op_id"] for e in log_of().read()] == ["a", "a"]


@pytest.mark.parametrize("once", [True, False])
def test_a_buckets_rolled_back_lines_once(buckets, once):  # noqa: F811 - the fixture
    s = ObjectStore(buckets("s3").url(f"logs-{uuid.uuid4().hex[:8]}"))
    try:
        assert history.append_rolled_back(s, [_line("a")]) is None
        assert history.append_rolled_back(s, [_line("a", t=2.0), _line("b", t=2.0)], once=once) is None
        assert [e["op_id"] for e in history.bucket_log(s).read()] == (["a", "b"] if once else ["a", "a", "b"])
    finally:
        s.close()
