"""Compress a PyTorch trace to ``.pt.trace.json.gz`` in a stream, and prove the round trip.

torch-tb-profiler reads ``*.pt.trace.json.gz`` exactly like the plain file (its
``WORKER_PATTERN`` accepts ``.gz`` and it calls ``gzip.decompress``). The transaction writes
the output under a temporary name that matches no reader's pattern, so the plugin never sees
the same trace twice.

The output depends on the content only (no file name, mtime 0, one level), so the plan can run
the very same writer into a ``CountingSink`` (``gzip_size``) and know the reduce's bytes exactly
without writing a file.
"""
from __future__ import annotations

import gzip
import hashlib
from typing import BinaryIO, Tuple

from tb_footprint_plugin.storage.files import CHUNK, fsync_file, open_staged, sha256_stream
from tb_footprint_plugin.storage.regular import open_regular

LEVEL = 6  # gzip's default: most of -9's ratio on kineto JSON at several times the speed


class CountingSink:
    """A write-only binary file that keeps nothing: it counts the bytes written to it and hashes
    them (the plan's stand-in for an output file: memory stays one write, whatever the size)."""

    def __init__(self) -> None:
        self.size = 0
        self.sha = hashlib.sha256()

    def write(self, b) -> int:
        n = len(b)
        self.size += n
        self.sha.update(b)
        return n

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        pass


def gzip_stream(fi: BinaryIO, raw, level: int = LEVEL) -> str:
    """gzip ``fi`` into the binary file ``raw`` (left open); return the sha256 of what was read.
    The one writer of the compress action, for the file the reduce writes and the plan's count."""
    h = hashlib.sha256()
    # mtime=0 and no file name: the output depends on the content only
    with gzip.GzipFile(filename="", mode="wb", compresslevel=level, fileobj=raw, mtime=0) as fo:
        while True:
            b = fi.read(CHUNK)
            if not b:
                break
            h.update(b)
            fo.write(b)
    return h.hexdigest()


def gzip_file(src: str, dst: str, level: int = LEVEL) -> str:
    """Write ``src`` gzip-compressed to ``dst`` (fsynced); return the sha256 of ``src``."""
    with open(src, "rb") as fi, open_staged(dst) as raw:  # never through a link planted at dst
        sha = gzip_stream(fi, raw, level)
        fsync_file(raw)
    return sha


def gzip_size(src: str, level: int = LEVEL, opener=None) -> Tuple[int, str]:
    """``(bytes gzip_file would write, sha256 of src)``: the same writer into a ``CountingSink``,
    nothing written, memory bounded. ``src`` is read only if it is a regular file (no symlink
    followed, never a FIFO); ``opener()``, when given, opens its bytes instead (a bucket
    object's ranged reader)."""
    sink = CountingSink()
    with (opener() if opener is not None else open_regular(src)) as fi:
        sha = gzip_stream(fi, sink, level)
    return sink.size, sha


def gunzip_sha256(path: str) -> str:
    """sha256 of the decompressed content of ``path`` (streaming); raises on a damaged file."""
    with gzip.open(path, "rb") as f:
        return sha256_stream(f)


__all__ = ["CountingSink", "LEVEL", "gzip_file", "gzip_size", "gzip_stream", "gunzip_sha256"]
