"""The event file decode gives exactly what it gave before it was sped up (r30, task P).

``helpers_eventfile_reference`` is a frozen copy of ``scan/eventfile.py`` as of 8c3fd1e. For each
file here both modules fold the same batches (``StatsFold``): the stats (every field of
``EventFileStats.to_dict()``: sizes, records, status, error offset, warning words, fixed
categories, tags, bindings) must be equal, and so must what each fold hands on of every batch
(``StatsFold.decoded()``: which records it took as one-value summaries and, for those, their
tag, step and metadata flag), which the rewrite's selection and a reduce's kept pass use.

Inputs: every real-writer event file in tests/fixtures (whole, and read in 4 kB batches so that
tags learnt in one batch are matched in the next), the bench's template runs (TF2 scalars and
histograms, metadata on the first value or on every value), TF1 legacy values, the random files
of test_eventfile (odd shapes the fast path must hand over), and a small file of 16 records
(fast path from 2 records a batch) truncated at every offset, with every byte flipped (CRC then fails), and with every payload
byte changed and the record framed again (CRC good: the decode itself meets the damage).
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from conftest import REPO, real_event_files
from tensorboard.compat.proto import event_pb2

import helpers_eventfile_reference as old
from test_eventfile import random_events, summary_event, value, write_events
from tb_footprint_plugin import synth
from tb_footprint_plugin.scan import eventfile as new
from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.scan.tfrecord import RecordReader, frame


def _fold(module, path: str):
    """(stats dict, [decoded of each batch]) of ``module``'s fold over ``path``."""
    fold = module.StatsFold(str(path))
    decoded = []
    with RecordReader(str(path), verify=True, display_name=str(path)) as reader:
        for batch in reader.batches():
            fold.add(batch)
            decoded.append((len(batch), fold.decoded()))
        stats = fold.finish(reader)
    return stats.to_dict(), decoded


def _comparable(dec):
    """What a consumer may use of a batch's decode: the records taken together, and for those
    their tag name, step and metadata flag."""
    n, d = dec
    if d is None:
        return n, None
    fast, tag_id, names, step, meta = d
    idx = fast.nonzero()[0].tolist()
    return n, idx, [names[int(tag_id[i])] for i in idx], [int(step[i]) for i in idx], \
        None if meta is None else [bool(meta[i]) for i in idx]


def assert_same(path) -> dict:
    """Both modules agree on ``path``; returns the stats dict."""
    want, want_dec = _fold(old, path)
    got, got_dec = _fold(new, path)
    assert got == want, path
    assert [_comparable(d) for d in got_dec] == [_comparable(d) for d in want_dec], path
    # and the entry point (its own reader, the unreadable handling) agrees as well
    assert new.event_file_stats(str(path)).to_dict() == old.event_file_stats(str(path)).to_dict()
    return got


def _fixture_event_files():
    files = set(real_event_files())
    files |= {p for p in (REPO / "tests" / "fixtures").rglob("*tfevents*") if p.is_file()}
    return sorted(files)


@pytest.mark.parametrize("chunk", [None, 4096])
def test_every_fixture_event_file_decodes_as_before(monkeypatch, chunk):
    if chunk:
        monkeypatch.setattr(tfrecord, "_CHUNK", chunk)
    files = _fixture_event_files()
    assert len(files) >= 20
    fast_records = 0
    for path in files:
        assert_same(path)
        fast_records += sum(int(d[0].sum()) for _, d in _fold(new, path)[1] if d is not None)
    assert fast_records > 1000  # the fast path met these files, not only the per-record one


@pytest.mark.parametrize("metadata", ["first", "every"])
@pytest.mark.parametrize("steps", [100, 400])
def test_the_benchs_runs_decode_as_before(tmp_path, metadata, steps):
    """bench/scale.py's template run (4 scalar tags, 2 histogram tags every 10 steps); 400
    steps put two-byte steps next to one-byte ones."""
    with synth.EventWriter(str(tmp_path), timestamp=1_700_000_000, metadata=metadata) as w:
        for step in range(steps):
            for k, tag in enumerate(("loss", "accuracy", "learning_rate", "grad_norm")):
                w.scalar(tag, step, 1.0 / (step + 1 + k))
            if step % 10 == 0:
                for layer in range(2):
                    w.histogram(f"layer_{layer}/weights", step,
                                [(i - 15.0, i - 14.0, float((i * 7 + step + layer) % 31)) for i in range(30)])
        path = w.path
    stats = assert_same(path)
    assert stats["tags"]["scalars"]["loss"]["records"] == steps


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk", [None, 4096])
def test_random_files_decode_as_before(tmp_path, monkeypatch, seed, chunk):
    if chunk:
        monkeypatch.setattr(tfrecord, "_CHUNK", chunk)
    path = tmp_path / "events.out.tfevents.random"
    write_events(path, random_events(random.Random(seed), 2000))
    assert_same(path)


def test_legacy_values_and_multi_value_events_decode_as_before(tmp_path):
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:1")]
    for s in range(200):
        events.append(summary_event(s, value("sv", kind="simple_value", x=s)))
        events.append(summary_event(s, value("h", kind="histo", size=40)))
        if s % 3 == 0:
            events.append(summary_event(s, value("a", plugin="scalars"), value("b", plugin="text")))
        if s % 7 == 0:
            events.append(summary_event(s, value("im", kind="image", size=300)))
    path = tmp_path / "events.out.tfevents.legacy"
    write_events(path, events)
    stats = assert_same(path)
    assert stats["tags"]["scalars"]["sv"]["records"] == 200


def _small_file_payloads():
    """16 payloads of a file whose records are all small: four tags, metadata on each tag's
    first value, steps past 127 (two-byte varints) at the end. The tests that read it lower the
    fast path's threshold (48 records a batch) in both modules, so that every prefix of it
    meets the fast path."""
    payloads = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString()]
    for i in range(15):
        tag = ("a", "bb", "l/ccc", "dddddddddd")[i % 4]
        step = i if i < 11 else 130 + i
        payloads.append(summary_event(step, value(tag, plugin="scalars" if i < 4 else None, x=i)).SerializeToString())
    return payloads


@pytest.fixture
def fast_from_two(monkeypatch):
    for module in (old, new):
        monkeypatch.setattr(module, "_FAST_MIN_RECORDS", 2)


def test_a_small_file_truncated_at_every_offset_decodes_as_before(tmp_path, fast_from_two):
    raw = b"".join(frame(p) for p in _small_file_payloads())
    path = tmp_path / "events.out.tfevents.cut"
    statuses = set()
    for cut in range(len(raw) + 1):
        path.write_bytes(raw[:cut])
        statuses.add(assert_same(path)["status"])
    assert statuses == {"ok", "truncated"}


def test_a_small_file_with_any_byte_flipped_decodes_as_before(tmp_path, fast_from_two):
    raw = b"".join(frame(p) for p in _small_file_payloads())
    path = tmp_path / "events.out.tfevents.flip"
    statuses = set()
    for at in range(len(raw)):
        path.write_bytes(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:])
        statuses.add(assert_same(path)["status"])
    assert "corrupt" in statuses


@pytest.mark.parametrize("mask", [0x80, 0x01, 0xFF])
def test_payload_bytes_changed_under_good_crcs_decode_as_before(tmp_path, fast_from_two, mask):
    """Every byte of every payload changed in turn and the record framed again: its CRCs are
    good, so the envelope decode (varints, lengths, keys) meets the damage itself."""
    payloads = _small_file_payloads()
    path = tmp_path / "events.out.tfevents.reframed"
    seen_other = 0
    for k in range(1, len(payloads)):
        p = payloads[k]
        for at in range(len(p)):
            changed = p[:at] + bytes([p[at] ^ mask]) + p[at + 1:]
            path.write_bytes(b"".join(frame(q) for q in payloads[:k] + [changed] + payloads[k + 1:]))
            stats = assert_same(path)
            seen_other += "events_other" in stats["fixed"]
    assert seen_other  # some changes made records no parser takes


def test_a_truncated_record_inside_a_varint_and_a_long_tag_decode_as_before(tmp_path):
    """Tags at the fast path's 1024-byte limit, on either side of it, and a step of 2**56 (past
    the eight varint bytes the fast path reads)."""
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    for i in range(120):
        tag = ("t" * 1023, "u" * 1024, "v" * 1025, "w")[i % 4]
        step = (i, 2**56 + i, 2**49, 127)[i % 4]
        events.append(summary_event(step, value(tag, plugin="scalars" if i < 4 else None, x=i)))
    path = tmp_path / "events.out.tfevents.long"
    raw = write_events(path, events)
    assert_same(path)
    path.write_bytes(raw + struct.pack("<Q", 10)[:5])
    assert assert_same(path)["status"] == "truncated"
