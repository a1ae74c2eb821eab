"""tfrecord's hopper (#28 item 1): records are framed by their length fields and their CRCs checked
all at once; the record-by-record walker only steps where a file is damaged or incomplete, and it
reports the damage exactly as a plain sequential reading does (status, offset, words)."""
from __future__ import annotations

import io
import random
import struct

from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.scan.tfrecord import RecordReader, frame, masked_crc32c


def reference(buf: bytes):
    """(records as (offset, data), status, error_offset, words) by the plain sequential algorithm."""
    pos, out = 0, []
    while pos < len(buf):
        if len(buf) - pos < 12:
            return out, "truncated", pos, f"incomplete header at offset {pos}"
        (length,) = struct.unpack_from("<Q", buf, pos)
        if masked_crc32c(buf[pos : pos + 8]) != struct.unpack_from("<I", buf, pos + 8)[0]:
            return out, "corrupt", pos, f"bad length CRC at offset {pos}"
        if pos + 16 + length > len(buf):
            return out, "truncated", pos, f"incomplete record at offset {pos}"
        data = buf[pos + 12 : pos + 12 + length]
        if masked_crc32c(data) != struct.unpack_from("<I", buf, pos + 12 + length)[0]:
            return out, "corrupt", pos, f"bad data CRC at offset {pos}"
        out.append((pos, data))
        pos += 16 + length
    return out, "ok", None, None


def event_like(rng: random.Random) -> bytes:
    """Runs of tens of scalar-sized records between histogram-sized ones (a small run's event
    file), and now and then a record of 64 kB or more (a length the header table has not)."""
    payloads = []
    for _ in range(rng.randint(1, 12)):
        payloads += [rng.randbytes(rng.randint(30, 90)) for _ in range(rng.randint(0, 60))]
        payloads.append(rng.randbytes(rng.randint(300, 900)) if rng.random() < 0.95
                        else rng.randbytes(rng.randint(65536, 70000)))
    return b"".join(frame(p) for p in payloads)


def read(data: bytes, **kw):
    reader = RecordReader(io.BytesIO(data), **kw)
    recs = [(r.offset, r.data) for r in reader]
    return reader, recs


def test_walker_steps_only_at_the_damage_and_reports_it_as_a_sequential_reading_does(monkeypatch):
    walked = []
    real = RecordReader._walk

    def spy(self, buf, pos, end, base, spans, run):
        before = len(spans.w_starts)
        try:
            return real(self, buf, pos, end, base, spans, run)
        finally:
            walked.append(len(spans.w_starts) - before)

    monkeypatch.setattr(RecordReader, "_walk", spy)
    rng = random.Random(28)
    for it in range(150):
        data = bytearray(event_like(rng))
        damage = rng.random()
        if damage < 0.35:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif damage < 0.55:
            del data[rng.randrange(len(data)):]
        data = bytes(data)
        expected, status, offset, words = reference(data)
        for chunk in (None, 4096, 1 << 20):
            walked.clear()
            reader, recs = read(data, chunk_size=chunk)
            assert recs == expected, (it, chunk)
            assert (reader.status, reader.error_offset) == (status, offset), (it, chunk)
            if words is None:
                assert reader.error is None
            else:  # a truncation's words go on with how many of the bytes it needs are there
                assert reader.error == f"{reader.name}: {words}" or (
                    status == "truncated" and reader.error.startswith(f"{reader.name}: {words} (")), (it, chunk)
            assert reader.valid_bytes == (len(data) if offset is None else offset)
            # the good records were hopped, not walked: the walker stepped over none of them
            assert sum(walked) == 0, (it, chunk, sum(walked), len(expected))


def test_a_small_files_records_are_read_in_one_pass_of_numpy_checks(tmp_path):
    """A 43 kB event-like file, clean: every record hopped and checked at once."""
    rng = random.Random(5)
    data = event_like(rng)
    path = tmp_path / "events.out.tfevents.1.h"
    path.write_bytes(data)
    reader = RecordReader(str(path))
    got = [(r.offset, r.data) for r in reader]
    assert got == reference(data)[0] and reader.status == "ok" and reader.size == len(data)
    # the header table agrees with the CRC of every length it holds
    table = tfrecord._length_crcs()
    for length in list(range(300)) + rng.sample(range(1 << 16), 3000) + [(1 << 16) - 1]:
        assert int(table[length]) == masked_crc32c(struct.pack("<Q", length))


def test_unverified_reading_hops_the_same_records():
    rng = random.Random(9)
    data = event_like(rng)
    reader, recs = read(data, verify=False)
    assert recs == reference(data)[0] and reader.status == "ok"


def test_a_small_file_is_read_by_one_read_into_one_buffer(tmp_path, monkeypatch):
    """The read that finds the end of a small file ends it: no second buffer nor read (a cold scan
    of many small runs paid a 1 MB buffer and a read more for each file)."""
    data = event_like(random.Random(3))
    path = tmp_path / "events.out.tfevents.1.h"
    path.write_bytes(data)
    buffers = []
    real_mmap = tfrecord.mmap.mmap
    monkeypatch.setattr(tfrecord.mmap, "mmap", lambda *a, **k: buffers.append(a) or real_mmap(*a, **k))

    class Counted(io.FileIO):
        reads = 0

        def readinto(self, b):
            Counted.reads += 1
            return super().readinto(b)

    with Counted(str(path), "rb") as f:
        reader = RecordReader(f)
        recs = [(r.offset, r.data) for r in reader]
    assert recs == reference(data)[0] and reader.status == "ok" and reader.size == len(data)
    assert Counted.reads == 2 and len(buffers) == 1, (Counted.reads, len(buffers))
    # a file of exactly one read's size: the read after it finds the end
    buffers.clear()
    Counted.reads = 0
    with Counted(str(path), "rb") as f:
        reader = RecordReader(f, chunk_size=len(data))
        assert [(r.offset, r.data) for r in reader] == recs and reader.status == "ok"
    assert Counted.reads == 2, Counted.reads
