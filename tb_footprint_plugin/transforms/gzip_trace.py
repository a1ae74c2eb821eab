"""Compress a PyTorch trace to ``.pt.trace.json.gz`` in a stream, and prove the round trip.

torch-tb-profiler reads ``*.pt.trace.json.gz`` exactly like the plain file (its
``WORKER_PATTERN`` accepts ``.gz`` and it calls ``gzip.decompress``). The transaction writes
the output under a temporary name that matches no reader's pattern, so the plugin never sees
the same trace twice.
"""
from __future__ import annotations

import gzip
import hashlib

from tb_footprint_plugin.storage.files import CHUNK, fsync_file, sha256_stream

LEVEL = 6  # gzip's default: most of -9's ratio on kineto JSON at several times the speed


def gzip_file(src: str, dst: str, level: int = LEVEL) -> str:
    """Write ``src`` gzip-compressed to ``dst`` (fsynced); return the sha256 of ``src``."""
    h = hashlib.sha256()
    with open(src, "rb") as fi, open(dst, "xb") as raw:  # "x": never through a link planted at dst
        # mtime=0 and no file name: the output depends on the content only
        with gzip.GzipFile(filename="", mode="wb", compresslevel=level, fileobj=raw, mtime=0) as fo:
            while True:
                b = fi.read(CHUNK)
                if not b:
                    break
                h.update(b)
                fo.write(b)
        fsync_file(raw)
    return h.hexdigest()


def gunzip_sha256(path: str) -> str:
    """sha256 of the decompressed content of ``path`` (streaming); raises on a damaged file."""
    with gzip.open(path, "rb") as f:
        return sha256_stream(f)


__all__ = ["gzip_file", "gunzip_sha256"]
