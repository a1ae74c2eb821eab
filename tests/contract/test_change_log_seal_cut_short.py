"""A seal of a full change log cut short, then appended to, reads each line once (review R20 G1,
G2). A seal is a link then an unlink on a disk and a copy then a delete on a bucket: stopped
between them, both names hold the log. The reader skipped the live log only while its version
was the one the sealed name carries, so the next small append (which fits) made every line of the
full log read twice, for good; on a disk the line landed in the sealed name too (one inode). On a
bucket a line appended by another process between the seal's copy and its delete left that copy
beside the next seal's, so the full log was kept, and read, twice. The limits are made small here;
the same bytes on a disk and on moto's S3."""
import json

import pytest

from change_log_small import LIMIT, buckets, line, where  # noqa: F401 - the fixtures ``where`` and ``buckets``
from tb_footprint_plugin.engine import history


def _cut_short(kind, s, key, log):
    """A seal of ``key`` stopped between its two steps: both names hold the log."""
    dst = log.sealed_key(key, s.stat(key))
    s.copy(key, dst) if kind == "s3" else s.link(key, dst)
    return dst


def _holding(s, log, line):
    return [k for k in log.keys() if line in s.read_range(k, 0, LIMIT + 1)]


def test_a_small_append_after_a_seal_cut_short_shows_each_line_once(where):
    """The next append fits: each line is read once, and after the next roll-over the full log's
    lines are kept in one file only."""
    kind, s, key_of, log_of = where
    runs = [f"q{i:02d}" for i in range(20)]
    s.put(key_of("history.jsonl"), b"".join(line(r, float(i)) for i, r in enumerate(runs)))
    _cut_short(kind, s, key_of("history.jsonl"), log_of())
    log_of().append_lines([{"run": "small", "op_id": "small-op", "kind": "reduce", "time": 1e6}])
    assert [e["run"] for e in log_of().read()] == runs + ["small"]
    if kind == "posix":  # the disk's append finished the seal first: its line is in the fresh log alone
        assert s.read_all(key_of("history.jsonl")).count(b"\n") == 1
    big = {"run": "big", "op_id": "big-op", "kind": "reduce", "time": 2e6, "reason": "z" * (LIMIT - 1000)}
    log_of().append_lines([big])  # rolls over
    log = log_of()
    assert [e["run"] for e in log.read()] == runs + ["small", "big"]
    assert len(_holding(s, log, line("q00", 0.0))) == 1, log.keys()


@pytest.mark.parametrize("where", ["s3"], indirect=True)  # a disk's seal runs under the file's flock, as appends do
def test_a_line_appended_between_a_bucket_seals_copy_and_its_delete(where, monkeypatch):
    """Another process appends a small line between the seal's copy and its delete: the sealing
    append lands, each line is read once, and one sealed log holds the full log's lines."""
    kind, s, key_of, log_of = where
    runs = [f"q{i:02d}" for i in range(20)]
    body = b"".join(line(r, float(i)) for i, r in enumerate(runs))
    s.put(key_of("history.jsonl"), body)
    other = log_of()
    real_copy = type(s).copy

    def copy_then_a_rival_line(self, src, dst, **kw):
        out = real_copy(self, src, dst, **kw)
        if ".sealed-" in dst and not copied:
            copied.append(dst)
            other.append_lines([{"run": "other", "op_id": "other-op", "kind": "reduce", "time": 5e5}])
        return out

    copied = []
    monkeypatch.setattr(type(s), "copy", copy_then_a_rival_line)
    big = {"run": "big", "op_id": "big-op", "kind": "reduce", "time": 1e6, "reason": "z" * (LIMIT - len(body))}
    log_of().append_lines([big])
    monkeypatch.setattr(type(s), "copy", real_copy)
    log = log_of()
    assert copied and [e["run"] for e in log.read()] == runs + ["other", "big"]
    assert len(_holding(s, log, line("q00", 0.0))) == 1, log.keys()


@pytest.mark.parametrize("where", ["s3"], indirect=True)  # a disk's next append finishes the seal first
def test_a_damaged_line_after_the_lines_a_sealed_copy_holds_is_named_at_its_line(where):
    """A bucket's live log grown past a seal cut short (written by something else than this
    version's append): its lines the sealed copy holds are read once, and a damaged line after
    them is still named at its own line."""
    kind, s, key_of, log_of = where
    runs = [f"q{i:02d}" for i in range(20)]
    body = b"".join(line(r, float(i)) for i, r in enumerate(runs))
    s.put(key_of("history.jsonl"), body)
    _cut_short(kind, s, key_of("history.jsonl"), log_of())
    s.put(key_of("history.jsonl"), body + b"not json\n" + line("after", 1e6))
    log = log_of()
    assert [e["run"] for e in log.read()] == runs + ["after"]
    (d,) = log.damage()
    assert d.line == 21 and d.file.endswith("/.tb-footprint/history.jsonl")


def test_two_sealed_names_of_one_log_are_read_once(where):
    """Two sealed logs alike (a disk's two names of one file, a bucket's two copies): the lines
    are read once, from one of them, never from neither."""
    kind, s, key_of, log_of = where
    runs = [f"q{i:02d}" for i in range(20)]
    s.put(key_of("history.jsonl"), b"".join(line(r, float(i)) for i, r in enumerate(runs)))
    first = _cut_short(kind, s, key_of("history.jsonl"), log_of())
    second = first.replace(".sealed-", ".sealed-9")  # another mtime: another name of the same bytes
    s.copy(first, second) if kind == "s3" else s.link(first, second)
    s.delete([key_of("history.jsonl")])
    log = log_of()
    assert len(log.keys()) == (3 if kind == "s3" else 2)  # a bucket's single log is always listed
    assert [e["run"] for e in log.read()] == runs
