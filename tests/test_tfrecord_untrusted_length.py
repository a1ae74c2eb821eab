"""A record's length field is untrusted input, also from a source of unknown size (review R13 F4).

A stream without fstat or seek (``engine.putback``'s late records, wrapped read-only) whose next
header claims 2**40 or 2**63 bytes, with a valid CRC, made the reader map that much at once:
ENOMEM or OverflowError, not the "truncated" a sequential read says. Now such a buffer grows by at
most what it holds, so the stream's end is met first; a real record bigger than that step still
reads whole."""
import io
import os
import resource
import struct

import pytest

from tb_footprint_plugin.scan import tfrecord as T


class Stream(io.RawIOBase):
    """Reads only: no fileno, no seek, no size."""

    def __init__(self, data: bytes):
        self.b = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, v):
        return self.b.readinto(v)


@pytest.mark.parametrize("claimed", [2**40, 2**63])
def test_a_header_claiming_a_terabyte_is_truncated_not_allocated(claimed):
    good = b"".join(T.frame(os.urandom(1000)) for _ in range(3000))
    h = struct.pack("<Q", claimed)
    data = good + h + struct.pack("<I", T.masked_crc32c(h)) + os.urandom(3 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = T.RecordReader(Stream(data), verify=True, raw=True)
    assert sum(1 for _ in r) == 3000
    assert r.status == "truncated" and r.error_offset == len(good), (r.status, r.error_offset)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KB: no terabyte map


def test_a_real_record_bigger_than_the_step_reads_whole(monkeypatch):
    monkeypatch.setattr(T, "_UNKNOWN_STEP", 1 << 20)
    big = os.urandom(5 << 20)
    data = T.frame(b"a" * 10) + T.frame(big) + T.frame(b"z" * 10)
    got = [bytes(x.data) for x in T.RecordReader(Stream(data), verify=True)]
    assert got == [b"a" * 10, big, b"z" * 10]
