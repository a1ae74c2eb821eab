"""tfrecord: framing, CRC verification, damaged files, byte-exact round trips, bounded memory."""
from __future__ import annotations

import io
import itertools
import os
import random
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest

from conftest import real_event_files
from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.scan.tfrecord import Record, RecordReader, RecordWriter, frame, iter_framed, masked_crc32c


@pytest.fixture
def real_copies(tmp_path):
    """Copies of every real event file (the vendored fixtures stay untouched)."""
    out = []
    for i, src in enumerate(real_event_files()):
        dst = tmp_path / f"{i}_{src.name}"
        shutil.copyfile(src, dst)
        out.append(dst)
    return out


# --- a deliberately naive reference reader ------------------------------------------------
def reference_read(buf: bytes):
    """(records as (offset, data), status, error_offset) by the plain sequential algorithm."""
    pos, out = 0, []
    while pos < len(buf):
        if len(buf) - pos < 12:
            return out, "truncated", pos
        (length,) = struct.unpack_from("<Q", buf, pos)
        if masked_crc32c(buf[pos : pos + 8]) != struct.unpack_from("<I", buf, pos + 8)[0]:
            return out, "corrupt", pos
        if pos + 16 + length > len(buf):
            return out, "truncated", pos
        data = buf[pos + 12 : pos + 12 + length]
        if masked_crc32c(data) != struct.unpack_from("<I", buf, pos + 12 + length)[0]:
            return out, "corrupt", pos
        out.append((pos, data))
        pos += 16 + length
    return out, "ok", None


def small_records(rng: random.Random, n: int, max_len: int = 255, min_len: int = 0) -> list:
    """Payloads under 256 bytes: the splitter's territory."""
    return [rng.randbytes(rng.randint(min_len, max_len)) for _ in range(n)]


def write_file(path: Path, payloads) -> bytes:
    with open(path, "wb") as f:
        w = RecordWriter(f)
        for p in payloads:
            w.write(p)
    return path.read_bytes()


def read_all(source, **kw):
    reader = RecordReader(source, **kw)
    with reader:
        recs = list(reader)
    return reader, recs


# --- CRC and framing ------------------------------------------------------------------------
def test_masked_crc_and_frame_match_tensorboard():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_crc
    from tensorboard.summary.writer.record_writer import RecordWriter as TBRecordWriter

    rng = random.Random(0)
    for n in (0, 1, 7, 8, 255, 256, 4096):
        data = rng.randbytes(n)
        assert masked_crc32c(data) == tb_crc(data)
        sink = io.BytesIO()
        TBRecordWriter(sink).write(data)
        assert frame(data) == sink.getvalue()
        assert len(frame(data)) == 16 + n


def test_writer_counts_and_write_framed_checks():
    sink = io.BytesIO()
    w = RecordWriter(sink)
    w.write(b"abc")
    w.write_framed(frame(b"hello"))
    assert w.bytes_written == len(sink.getvalue()) == 19 + 21
    with pytest.raises(ValueError):
        w.write_framed(frame(b"hello")[:-1])
    with pytest.raises(ValueError):
        w.write_framed(b"short")


# --- round trips on real files ------------------------------------------------------------
def test_real_fixtures_round_trip_byte_for_byte(real_copies, tmp_path):
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    for path in real_copies:
        original = path.read_bytes()
        reader, recs = read_all(str(path))
        assert reader.status == "ok", reader.error
        assert reader.error is None and reader.error_offset is None
        assert reader.valid_bytes == reader.size == len(original)
        assert [(r.offset, r.data) for r in recs] == reference_read(original)[0]
        if len(original) < 1 << 20:  # TensorBoard's own pure-Python reader is slow
            assert [r.data for r in recs] == list(RawEventFileLoader(str(path)).Load())
        assert all(isinstance(r, Record) and r.framed_size == 16 + len(r.data) for r in recs)
        assert [r.offset for r in recs] == [0, *itertools.accumulate(r.framed_size for r in recs[:-1])]

        rewritten = tmp_path / ("rewritten_" + path.name)
        with open(rewritten, "wb") as f:
            w = RecordWriter(f)
            for r in recs:
                w.write(r.data)
        assert rewritten.read_bytes() == original

        copied = tmp_path / ("copied_" + path.name)
        framed = iter_framed(str(path))
        with open(copied, "wb") as f:
            w = RecordWriter(f)
            for raw in framed:
                w.write_framed(raw)
        assert framed.status == "ok"
        assert copied.read_bytes() == original


@pytest.mark.parametrize("chunk", [64, 100, 333, 4096, 1 << 20])
def test_round_trip_generated_any_chunk_size(tmp_path, chunk):
    rng = random.Random(chunk)
    payloads = small_records(rng, 400) + [rng.randbytes(rng.randint(256, 20000)) for _ in range(20)]
    rng.shuffle(payloads)
    payloads[10:10] = [b""] * 3 + [bytes(300)] + [bytes(200)] * 30  # zero runs, empty records
    original = write_file(tmp_path / "f", payloads)
    reader, recs = read_all(str(tmp_path / "f"), chunk_size=chunk)
    assert reader.status == "ok"
    assert [r.data for r in recs] == payloads
    assert b"".join(frame(r.data) for r in recs) == original
    raw = RecordReader(io.BytesIO(original), raw=True, chunk_size=chunk)
    assert b"".join(raw) == original and raw.records == len(payloads)


def test_long_runs_of_small_records_go_through_the_splitter(tmp_path, monkeypatch):
    accepted = []
    real = RecordReader._split_window

    def spy(self, *args):
        result = real(self, *args)
        accepted.append(len(result[0]))
        return result

    monkeypatch.setattr(RecordReader, "_split_window", spy)
    payloads = small_records(random.Random(1), 5000, max_len=120, min_len=1)
    write_file(tmp_path / "f", payloads)
    reader, recs = read_all(str(tmp_path / "f"))
    assert [r.data for r in recs] == payloads and reader.status == "ok"
    assert sum(accepted) > 4500  # the fast framer did (almost) all of it


def test_exact_chunk_alignment_at_eof_is_ok():
    data = b"".join(frame(bytes([i]) * i) for i in range(60))
    for chunk in (len(data), len(data) // 2 + 1, 64):
        reader = RecordReader(io.BytesIO(data), chunk_size=chunk)
        assert len(list(reader)) == 60 and reader.status == "ok"


def test_file_object_source_and_display_name():
    data = frame(b"x") + frame(b"yy")
    reader = RecordReader(io.BytesIO(data), display_name="shown.tfevents")
    assert [r.data for r in reader] == [b"x", b"yy"]
    assert reader.name == "shown.tfevents" and reader.size == len(data)


def test_zero_length_file(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    reader, recs = read_all(str(tmp_path / "empty"))
    assert recs == [] and reader.status == "ok" and reader.valid_bytes == 0 and reader.size == 0


# --- damaged files --------------------------------------------------------------------------
def _layout(payloads):
    offsets, pos = [], 0
    for p in payloads:
        offsets.append(pos)
        pos += 16 + len(p)
    return offsets, pos


@pytest.mark.parametrize("where", ["header", "length_crc", "data", "data_crc"])
def test_truncated_tail(tmp_path, where):
    rng = random.Random(2)
    payloads = small_records(rng, 300) + [rng.randbytes(5000)]
    original = write_file(tmp_path / "f", payloads)
    offsets, total = _layout(payloads)
    last = offsets[-1]
    cut = {"header": last + 5, "length_crc": last + 10, "data": last + 12 + 2500, "data_crc": total - 2}[where]
    path = tmp_path / "events.out.tfevents.cut"
    path.write_bytes(original[:cut])
    reader, recs = read_all(str(path), display_name="events.out.tfevents.cut")
    assert reader.status == "truncated"
    assert reader.error_offset == last
    assert [r.data for r in recs] == payloads[:-1]
    assert reader.valid_bytes == last and reader.size == cut
    assert "events.out.tfevents.cut" in reader.error and f"offset {last}" in reader.error


@pytest.mark.parametrize("cut_record", [0, 1, 150, 299])
def test_truncation_at_many_points_matches_reference(tmp_path, cut_record):
    rng = random.Random(cut_record)
    payloads = small_records(rng, 300)
    original = write_file(tmp_path / "f", payloads)
    offsets, _ = _layout(payloads)
    for extra in (1, 11, 12, 13, 16 + len(payloads[cut_record]) - 1):
        cut = offsets[cut_record] + min(extra, 16 + len(payloads[cut_record]) - 1)
        reader, recs = read_all(io.BytesIO(original[:cut]), chunk_size=257)
        assert (reader.status, reader.error_offset) == ("truncated", offsets[cut_record])
        assert [r.data for r in recs] == payloads[:cut_record]


def test_cut_on_record_boundary_is_ok(tmp_path):
    payloads = small_records(random.Random(3), 50)
    original = write_file(tmp_path / "f", payloads)
    offsets, _ = _layout(payloads)
    reader, recs = read_all(io.BytesIO(original[: offsets[20]]))
    assert reader.status == "ok" and len(recs) == 20


@pytest.mark.parametrize("record", [0, 17, 40, 233])
def test_flipped_bit_in_data_is_corrupt_at_that_record(tmp_path, record):
    payloads = small_records(random.Random(4), 300, max_len=200)
    payloads = [p or b"x" for p in payloads]
    original = bytearray(write_file(tmp_path / "f", payloads))
    offsets, _ = _layout(payloads)
    original[offsets[record] + 12 + len(payloads[record]) // 2] ^= 0x10
    path = tmp_path / "events.out.tfevents.bad"
    path.write_bytes(bytes(original))
    reader, recs = read_all(str(path), display_name="events.out.tfevents.bad")
    assert reader.status == "corrupt" and reader.error_offset == offsets[record]
    assert reader.error == f"events.out.tfevents.bad: bad data CRC at offset {offsets[record]}"
    assert [r.data for r in recs] == payloads[:record]
    assert reader.valid_bytes == offsets[record] and reader.size == len(original)


@pytest.mark.parametrize("byte", [8, 11])
def test_flipped_bit_in_length_crc_is_corrupt(tmp_path, byte):
    payloads = small_records(random.Random(5), 100)
    original = bytearray(write_file(tmp_path / "f", payloads))
    offsets, _ = _layout(payloads)
    original[offsets[60] + byte] ^= 0x01
    reader, recs = read_all(io.BytesIO(bytes(original)), display_name="f")
    assert (reader.status, reader.error_offset, len(recs)) == ("corrupt", offsets[60], 60)
    assert reader.error == f"f: bad length CRC at offset {offsets[60]}"


def test_flipped_bit_in_length_is_corrupt_not_truncated():
    data = bytearray(frame(b"a" * 40) * 30)
    data[56 * 7 + 5] ^= 0x80  # a high byte of record 7's length: absurd length, CRC mismatch
    reader, recs = read_all(io.BytesIO(bytes(data)))
    assert (reader.status, reader.error_offset, len(recs)) == ("corrupt", 56 * 7, 7)


def test_absurd_length_with_valid_crc_is_truncated():
    header = struct.pack("<Q", 1 << 40)
    data = frame(b"ok") + header + struct.pack("<I", masked_crc32c(header)) + b"some bytes"
    reader, recs = read_all(io.BytesIO(data))
    assert (reader.status, reader.error_offset, len(recs)) == ("truncated", 18, 1)


def test_not_a_tfrecord_file(tmp_path):
    path = tmp_path / "events.out.tfevents.notes"
    path.write_text("these are my notes about the experiment, not an event file\n" * 20)
    reader, recs = read_all(str(path))
    assert recs == [] and reader.status == "corrupt" and reader.error_offset == 0
    assert str(path) in reader.error


def test_verify_false_skips_crc_checks():
    data = bytearray(frame(b"hello world") + frame(b"second"))
    data[14] ^= 0xFF
    reader, recs = read_all(io.BytesIO(bytes(data)), verify=False)
    assert reader.status == "ok" and len(recs) == 2
    reader, recs = read_all(io.BytesIO(bytes(data)))
    assert reader.status == "corrupt" and recs == []


def test_unreadable_file_raises_oserror(tmp_path):
    path = tmp_path / "locked"
    path.write_bytes(frame(b"x"))
    path.chmod(0)
    try:
        try:
            open(path, "rb").close()
            pytest.skip("running with privileges that can read a chmod-000 file")
        except PermissionError:
            pass
        with pytest.raises(OSError):
            read_all(str(path))
    finally:
        path.chmod(0o644)


def test_randomized_against_reference():
    rng = random.Random(6)
    for it in range(300):
        payloads = []
        for _ in range(rng.randint(0, 300)):
            r = rng.random()
            n = rng.randint(0, 255) if r < 0.97 else rng.randint(256, 3000)
            payloads.append(bytes(n) if rng.random() < 0.02 else rng.randbytes(n))
        data = bytearray(b"".join(frame(p) for p in payloads))
        action = rng.random()
        if data and action < 0.4:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif data and action < 0.6:
            del data[rng.randrange(len(data)) :]
        data = bytes(data)
        expected, status, offset = reference_read(data)
        reader, recs = read_all(io.BytesIO(data), chunk_size=rng.choice([64, 500, 4096, 1 << 20]))
        assert [(r.offset, r.data) for r in recs] == expected, it
        assert (reader.status, reader.error_offset) == (status, offset), it
        assert reader.valid_bytes == (len(data) if offset is None else offset)
        assert reader.size == len(data)


# --- memory -----------------------------------------------------------------------------------
def test_memory_is_bounded_by_the_chunk_not_the_file(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "big"
    with open(path, "wb") as f:
        w = RecordWriter(f)
        block = [frame(rng.randbytes(rng.randint(20, 200))) for _ in range(1000)]
        while w.bytes_written < 24 << 20:
            for raw in block:
                w.write_framed(raw)
    tracemalloc.start()
    try:
        reader = RecordReader(str(path))
        for batch in reader.batches():
            pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reader.status == "ok" and reader.valid_bytes == os.path.getsize(path)
    assert peak < 12 << 20, f"peak {peak / 2**20:.1f} MiB for a 24 MiB file"


def test_one_huge_record_is_read_whole(tmp_path):
    big = random.Random(8).randbytes(5 << 20)
    write_file(tmp_path / "f", [b"a", big, b"b"])
    reader, recs = read_all(str(tmp_path / "f"))
    assert reader.status == "ok" and [r.data for r in recs] == [b"a", big, b"b"]


def test_default_read_size_grows_for_big_records_only(tmp_path):
    """Batches of few big records cost the decoders per batch: the default read size doubles
    (to 2 MB) while batches hold fewer than 1,024 records; small records keep 1 MB reads.
    The records read are the same either way, and a batch's buffer stays valid while the next
    batch is read."""
    rng = random.Random(3)
    big = tmp_path / "big.tfrecord"
    small = tmp_path / "small.tfrecord"
    big_payloads = [rng.randbytes(rng.randrange(6000, 10000)) for _ in range(3000)]  # ~24 MB
    small_payloads = [rng.randbytes(rng.randrange(20, 60)) for _ in range(60000)]  # ~3.6 MB
    big.write_bytes(b"".join(frame(p) for p in big_payloads))
    small.write_bytes(b"".join(frame(p) for p in small_payloads))
    for path, payloads in ((big, big_payloads), (small, small_payloads)):
        fixed = RecordReader(str(path), chunk_size=1 << 20)
        n_fixed = sum(1 for _ in fixed.batches())
        grown = RecordReader(str(path))
        seen, prev, n_grown = [], None, 0
        for batch in grown.batches():
            if prev is not None:  # the previous batch is intact while this one is read
                assert [r.data for r in prev.records()] == prev_data
            seen += [r.data for r in batch.records()]
            prev, prev_data = batch, [r.data for r in batch.records()]
            n_grown += 1
        assert seen == payloads and grown.status == "ok"
        if path is big:
            assert n_grown < n_fixed * 0.6, (n_grown, n_fixed)
        else:
            assert n_grown == n_fixed


def test_a_pass_over_big_records_maps_at_most_two_2_mb_buffers(tmp_path, monkeypatch):
    """Issue 28 item 3: a reduce of a histogram event file (~8 KB records) runs passes over it
    at once; each maps its two read buffers, which grew to 8 MB each (16 MB of the process's
    peak a pass). Now a buffer holds at most 2 MB of reads (plus an incomplete record's tail
    and the padding), whatever the file's size."""
    import mmap

    rng = random.Random(4)
    path = tmp_path / "hist.tfrecord"
    payloads = [rng.randbytes(8200) for _ in range(16)]
    with open(path, "wb") as f:
        w = RecordWriter(f)
        for i in range(3000):  # ~25 MB
            w.write_framed(frame(payloads[i % 16]))
    sizes = set()
    real_mmap = mmap.mmap

    class Counted(real_mmap):
        def __new__(cls, fileno, length, *a, **kw):
            sizes.add(length)
            return real_mmap.__new__(cls, fileno, length, *a, **kw)

    monkeypatch.setattr(tfrecord.mmap, "mmap", Counted)
    reader = RecordReader(str(path))
    n = sum(len(b) for b in reader.batches())
    monkeypatch.undo()
    assert reader.status == "ok" and n == 3000
    assert sizes and max(sizes) <= (2 << 20) + 8300, sorted(sizes)


def test_threaded_hashing_reader_bounds_what_waits(tmp_path):
    """The hashing thread's backlog is bounded in bytes, reads of any size (a record bigger
    than the bound too) hash to the file's sha256."""
    import hashlib

    from tb_footprint_plugin.storage.hashing import ThreadedHashingReader

    data = random.Random(5).randbytes(5 << 20)
    path = tmp_path / "f"
    path.write_bytes(data)
    for size in (4096, 1 << 20, 3 << 20, 8 << 20):
        with open(path, "rb", buffering=0) as raw:
            h = ThreadedHashingReader(raw, depth=2)
            while True:
                b = h.read(size)
                if not b:
                    break
                assert h._waiting <= max(2 << 20, len(b))
            assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_hashing_reader_hashes_the_reused_buffers_in_place(tmp_path):
    """The reader's buffers are hashed in place by the hashing thread: however slow it is,
    the reader waits before writing into a buffer again, and the digest is the file's."""
    import hashlib
    import time

    from tb_footprint_plugin.storage.hashing import ThreadedHashingReader

    rng = random.Random(9)
    path = tmp_path / "f.tfrecord"
    path.write_bytes(b"".join(frame(rng.randbytes(rng.randrange(100, 30000))) for _ in range(800)))

    class Slow:
        def __init__(self):
            self.h = hashlib.sha256()

        def update(self, b):
            time.sleep(0.002)
            self.h.update(b)

        def hexdigest(self):
            return self.h.hexdigest()

    with open(path, "rb", buffering=0) as raw:
        hin = ThreadedHashingReader(raw)
        hin.sha = Slow()
        reader = RecordReader(hin, chunk_size=64 << 10)
        n = sum(len(b) for b in reader.batches())
        assert hin.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert n == 800 and reader.status == "ok"


def test_a_failed_hashing_thread_fails_the_pass_instead_of_hanging(tmp_path):
    import threading

    from tb_footprint_plugin.storage.hashing import ThreadedHashingReader

    path = tmp_path / "f.tfrecord"
    path.write_bytes(b"".join(frame(bytes(20000)) for _ in range(400)))  # ~8 MB

    class Broken:
        def update(self, b):
            raise MemoryError("planted")

        def hexdigest(self):
            return ""

    outcome = []

    def run():
        with open(path, "rb", buffering=0) as raw:
            hin = ThreadedHashingReader(raw, depth=1)
            hin.sha = Broken()
            try:
                for _ in RecordReader(hin, chunk_size=64 << 10).batches():
                    pass
                hin.hexdigest()
                outcome.append("no error")
            except OSError as e:
                outcome.append(str(e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the pass hangs"
    assert outcome and "hashing failed" in outcome[0], outcome
