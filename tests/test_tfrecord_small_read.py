"""A small file the reader opens is read once into bytes of its size (no fresh 1 MB map).

A cold scan of many small runs gave each 43 kB event file a fresh anonymous map of 1 MB and
touched a dozen of its pages: the page faults cost ~50 us a file (the read into bytes ~8 us).
The reader now reads such a file whole with one read of its size and one byte more; a file
that grew meanwhile (or a short read) goes on through the maps exactly as before. Whatever the
path, the records, status, offsets and words are those of a reader over a file object (which
always takes the maps).
"""
from __future__ import annotations

import io

import pytest

from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.scan.tfrecord import RecordReader, frame


def _outcome(reader: RecordReader):
    recs = [(r.offset, r.data, r.framed_size) for r in reader]
    return recs, reader.status, reader.error_offset, reader.error, reader.size, reader.records, reader.valid_bytes


def _file(tmp_path, raw: bytes):
    p = tmp_path / "events.out.tfevents.small"
    p.write_bytes(raw)
    return p


RAW = b"".join(frame(bytes([i % 251]) * (i % 300)) for i in range(200))


@pytest.mark.parametrize("cut", [0, 5, 12, len(RAW) // 2, len(RAW) - 1, len(RAW)])
def test_a_small_file_read_whole_gives_what_the_maps_give(tmp_path, cut):
    p = _file(tmp_path, RAW[:cut])
    with open(p, "rb") as f:
        want = _outcome(RecordReader(f, display_name=str(p)))
    assert _outcome(RecordReader(str(p))) == want


def test_a_small_file_is_one_bytes_buffer(tmp_path):
    p = _file(tmp_path, RAW)
    batches = list(RecordReader(str(p)).batches())
    assert len(batches) == 1 and type(batches[0].buf) is bytes
    assert batches[0].buf.endswith(bytes(16)) and len(batches[0].buf) == len(RAW) + 16


def test_a_file_that_grew_since_its_size_was_taken_is_read_on(tmp_path, monkeypatch):
    """The size says less than the read finds (the file grew): the maps take over, and every
    record is there."""
    p = _file(tmp_path, RAW)
    real = RecordReader._file_size
    calls = []

    def smaller(self):
        calls.append(1)
        got = real(self)
        return got - 100 if len(calls) == 1 else got

    monkeypatch.setattr(RecordReader, "_file_size", smaller)
    with open(p, "rb") as f:
        want = _outcome(RecordReader(f, display_name=str(p)))
    reader = RecordReader(str(p))
    assert _outcome(reader) == want and reader.records == 200 and reader.status == "ok"


def test_a_short_first_read_is_read_on(tmp_path, monkeypatch):
    """A read that returns less than the file holds (as some network file systems do) is not
    taken for the end of the file."""
    p = _file(tmp_path, RAW)
    opened = tfrecord.open_regular

    class Short(io.FileIO):
        first = True

        def read(self, n=-1):
            if Short.first:
                Short.first = False
                return super().read(1000)
            return super().read(n)

    def short_open(path, *a, **k):
        opened(path, *a, **k).close()  # the same checks
        return Short(path, "rb")

    monkeypatch.setattr(tfrecord, "open_regular", short_open)
    with open(p, "rb") as f:
        want = _outcome(RecordReader(f, display_name=str(p)))
    reader = RecordReader(str(p))
    assert _outcome(reader) == want and reader.records == 200 and not Short.first


def test_a_big_file_still_goes_through_the_maps(tmp_path, monkeypatch):
    monkeypatch.setattr(tfrecord, "_CHUNK", 4096)
    p = _file(tmp_path, RAW)
    with open(p, "rb") as f:
        want = _outcome(RecordReader(f, display_name=str(p)))
    reader = RecordReader(str(p))
    bufs = {type(b.buf) for b in reader.batches()}
    assert bufs == {tfrecord.mmap.mmap}
    assert _outcome(RecordReader(str(p))) == want
