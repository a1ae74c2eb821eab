"""A change log that reaches its limit rolls over, as log files are rotated (review R19 P4): the
full log is kept under a sealed name beside the workers' logs and a fresh one started, so no line
is hidden behind it (a disk read only its first ``MAX_STATE_BYTES``) nor refused (a bucket's
append past ``READ_ALL_LIMIT`` failed, for good). The limits are made small here; the same bytes
on a disk and on moto's S3."""

import pytest

from change_log_small import LIMIT, buckets, line, where  # noqa: F401 - the fixtures ``where`` and ``buckets``
from tb_footprint_plugin.codes import Finding, StoreError
from tb_footprint_plugin.engine import history
from tb_footprint_plugin.storage.store import StoreFailure


def _sealed(log):
    return [k for k in log.keys() if ".sealed-" in k]


def test_a_log_past_its_limit_rolls_over_and_every_line_is_read(where):
    """Appends that take the log past its limit several times: every entry is read back, in order,
    with no damage; each file stays within the limit; the full ones are sealed, none refused."""
    kind, s, key_of, log_of = where
    log = log_of()
    n = 60  # ~150 bytes a line: ~9 KB, two roll-overs at 4 KB
    for i in range(n):
        log.append_lines([{"run": f"r{i:03d}", "op_id": f"op{i}", "kind": "reduce", "outcome": "verified",
                           "time": 1000.0 + i, "reason": "x" * 60}])
    log = log_of()
    assert [e["run"] for e in log.read()] == [f"r{i:03d}" for i in range(n)]
    assert log.damage() == [] and log.problems() == []
    sealed = _sealed(log)
    assert len(sealed) >= 2, log.keys()
    for k in log.keys():
        assert s.stat(k).size <= LIMIT, (k, s.stat(k).size)
    if kind == "s3":  # beside the workers' logs, in the folder a read lists anyway
        assert all(k.startswith(f"{history.BUCKET_WORKERS}/history.sealed-") for k in sealed), sealed


def test_a_workers_log_rolls_over_on_its_own(where):
    _kind, _s, _key_of, log_of = where
    log = log_of()
    try:
        history.configure_writer("1/2")
        for i in range(40):
            log.append_lines([{"run": f"w{i:02d}", "op_id": f"w{i}", "kind": "reduce", "time": 10.0 + i,
                               "reason": "y" * 80}])
    finally:
        history.configure_writer(None)
    log = log_of()
    assert [e["run"] for e in log.read()] == [f"w{i:02d}" for i in range(40)]
    assert all(e["shard"] == "1/2" for e in log.read())
    sealed = _sealed(log)
    assert sealed and all(k.rsplit("/", 1)[-1].startswith("history-shard-1-of-2@") for k in sealed), sealed


def test_a_planted_oversize_log_is_sealed_aside_and_later_lines_are_read(where, monkeypatch):
    """A log larger than the limit (planted): the next append sets it aside and starts a fresh
    log, so that line is read (a disk hid it behind the limit, a bucket refused it); the planted
    log is still read to its own limit and named."""
    _kind, s, key_of, log_of = where
    body = b"".join(line(f"p{i:03d}", float(i)) for i in range(120))
    assert len(body) > 2 * LIMIT
    monkeypatch.setattr(history, "_PIECE", 1000, raising=False)  # its prefix read in several pieces into one buffer
    s.put(key_of("history.jsonl"), body)
    log = log_of()
    log.append_lines([{"run": "after", "op_id": "after-op", "kind": "reduce", "time": 1e6}])
    log = log_of()
    runs = [e["run"] for e in log.read()]
    kept = body[:LIMIT][:body[:LIMIT].rfind(b"\n") + 1].count(b"\n")
    assert runs == [f"p{i:03d}" for i in range(kept)] + ["after"], runs
    (d,) = log.damage()
    assert d.code == Finding.DAMAGED_FILE and ".sealed-" in d.file and d.line == 0
    (sealed,) = _sealed(log)
    assert s.read_range(sealed, 0, len(body) + 1) == body  # every byte of it kept


def test_a_bucket_seal_killed_between_its_copy_and_its_delete_shows_each_line_once(where, monkeypatch):
    """A seal is a copy then a delete on a bucket (a link then an unlink on a disk's if-absent
    move): stopped between them, both names hold the log; the reader shows each line once, and the
    next append finishes the seal."""
    kind, s, key_of, log_of = where
    body = b"".join(line(f"q{i:02d}", float(i)) for i in range(20))
    s.put(key_of("history.jsonl"), body)
    entry = s.stat(key_of("history.jsonl"))
    log = log_of()
    s.copy(key_of("history.jsonl"), log.sealed_key(key_of("history.jsonl"), entry)) if kind == "s3" else \
        s.link(key_of("history.jsonl"), log.sealed_key(key_of("history.jsonl"), entry))
    assert len(log.keys()) == 2
    assert [e["run"] for e in log.read()] == [f"q{i:02d}" for i in range(20)]
    big = {"run": "next", "op_id": "next-op", "kind": "reduce", "time": 1e6, "reason": "z" * (LIMIT - len(body))}
    log.append_lines([big])
    log = log_of()
    assert [e["run"] for e in log.read()] == [f"q{i:02d}" for i in range(20)] + ["next"]
    assert len(log.keys()) == 2 and s.read_all(key_of("history.jsonl")).count(b"\n") == 1


def test_a_seal_never_deletes_a_log_whose_bytes_the_sealed_name_does_not_hold(where):
    """Something else under the sealed name: the full log is kept and the append refused with
    the name of what is in the way (nothing that exists nowhere else is destroyed)."""
    _kind, s, key_of, log_of = where
    body = b"".join(line(f"s{i:02d}", float(i)) for i in range(20))
    s.put(key_of("history.jsonl"), body)
    log = log_of()
    s.put(log.sealed_key(key_of("history.jsonl"), s.stat(key_of("history.jsonl"))), b"planted\n")
    with pytest.raises(StoreFailure) as e:
        log.append_lines([{"run": "x", "op_id": "x", "kind": "reduce", "time": 1e6, "reason": "z" * LIMIT}])
    assert e.value.code == StoreError.ALREADY_EXISTS and ".sealed-" in e.value.key
    assert s.read_all(key_of("history.jsonl")) == body


@pytest.mark.parametrize("where", ["s3"], indirect=True)  # a disk's seal is decided by its stat, before the append
def test_a_bucket_append_refused_again_after_another_appender_grew_the_log_seals_it_again(where, monkeypatch):
    """Between a bucket's refused append and its seal another appender grew the full log: the seal
    of the version it found fails its condition, and the append tries again (seals what is there
    now) instead of refusing the line."""
    kind, s, key_of, log_of = where
    n = 40
    while len(b"".join(line(f"g{i:02d}", float(i)) for i in range(n + 1))) <= LIMIT - 60:
        n += 1
    body = b"".join(line(f"g{i:02d}", float(i)) for i in range(n))  # full: one more line takes it past
    s.put(key_of("history.jsonl"), body)
    log = log_of()
    real = history.ChangeLog.seal
    grown = []

    def seal_after_a_rival(self, key, entry):
        if not grown:  # the rival's line lands between the refusal and this seal
            grown.append(s.put(key, s.read_all(key) + line("rival", 99.0), if_version=entry.version))
        return real(self, key, entry)

    monkeypatch.setattr(history.ChangeLog, "seal", seal_after_a_rival)
    log.append_lines([{"run": "mine", "op_id": "mine", "kind": "reduce", "time": 1e6, "reason": "m" * 100}])
    runs = [e["run"] for e in log_of().read()]
    assert grown and runs == [f"g{i:02d}" for i in range(n)] + ["rival", "mine"], runs


def test_a_sealed_logs_torn_last_line_is_named(where):
    """A log sealed with a torn last line (a crash's) is never appended to again, so no newline
    ever ends that line: it is named as damage, file and line, not skipped without a word."""
    _kind, s, key_of, log_of = where
    body = b"".join(line(f"t{i:02d}", float(i)) for i in range(40)) + b'{"time": 99.0, "run": "tor'
    s.put(key_of("history.jsonl"), body)
    log = log_of()
    log.append_lines([{"run": "next", "op_id": "next", "kind": "reduce", "time": 1e6, "reason": "z" * (LIMIT // 2)}])
    log = log_of()
    assert [e["run"] for e in log.read()] == [f"t{i:02d}" for i in range(40)] + ["next"]
    (d,) = log.damage()
    assert d.code == Finding.DAMAGED_LINE and d.line == 41 and ".sealed-" in d.file
