"""Streaming zstd: compress a file into another and read one back, in bounded memory.

The standard library's ``compression.zstd`` (Python 3.14+) where Python has it, else the
``zstandard`` package (a dependency before 3.14). Frames carry their content size and a
checksum, so a damaged compressed file fails its own decode as well as the caller's sha256.
Memory is one ``CHUNK`` in and out plus the codec's window (a few MB at the levels used),
whatever the file's size.
"""
from __future__ import annotations

import io
import threading
from typing import BinaryIO, Optional, Tuple

from tb_footprint_plugin.storage.files import CHUNK

try:  # Python 3.14+
    from compression import zstd as _std  # type: ignore[import-not-found]
except ImportError:
    _std = None
if _std is None:
    import zstandard as _zs
else:
    _zs = None

#: the level a backup is compressed at, measured on synth's traces, xplane sessions and event
#: files: level 1 kept as much as level 3 (a 191 MB trace: 11.9 MB vs 12.3 MB) at ~1.5x its
#: speed, and level 9 saved ~15% more at ~6x the time: compaction is on the reduce's clock
LEVEL = 1
#: a file of more bytes is compressed only if samples spread over it (``sample``) say it is worth
#: it; a file that cannot seek is abandoned once, past this many input bytes, its output is still
#: above ``GIVE_UP_RATIO`` of its input (a stream read once cannot be sampled ahead)
PROBE_BYTES = 8 * CHUNK
GIVE_UP_RATIO = 0.97
#: the decision on a file that can seek reads ``SAMPLES`` windows of ``SAMPLE_BYTES``: its start,
#: its end and evenly spaced ones between (restic/borg-style sampling), as many bytes as the old
#: probe of its first ``PROBE_BYTES`` read, so an incompressible file costs what giving up did;
#: a file random at its start and compressible after (a profile of packed headers then zeros, an
#: event file whose first records are PNGs) is no longer judged by its start alone
SAMPLES = 16
SAMPLE_BYTES = PROBE_BYTES // SAMPLES


#: the longest zstd frame header: what ``content_size`` needs to read
HEADER_MAX = 18


def content_size(header: bytes) -> Optional[int]:
    """The content size a zstd frame header declares, or None (not a zstd frame, damaged, or
    no size written): a check that reads 18 bytes, not the file."""
    try:
        if _std is not None:
            return _std.get_frame_info(header).decompressed_size
        n = _zs.frame_content_size(header)
        return None if n < 0 else n
    except Exception:  # the codecs' own error types for a header that is not one
        return None


class DecodeError(OSError):
    """A compressed file that does not decode (damaged, truncated, not zstd)."""


def backend() -> str:
    """Which implementation is in use (for the bench's report)."""
    return "compression.zstd" if _std is not None else f"zstandard {_zs.__version__}"


def _seekable(f: BinaryIO) -> bool:
    try:
        return bool(f.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def _one_shot(data: bytes, level: int) -> int:
    """The size of ``data`` compressed on its own (a sample's; the bytes are dropped)."""
    if _std is not None:
        return len(_std.compress(data, level=level))
    return len(_zs.ZstdCompressor(level=level).compress(data))


def sample(f: BinaryIO, size: int, level: int = LEVEL) -> Optional[Tuple[int, int]]:
    """``(bytes read, their size compressed)`` of windows of ``SAMPLE_BYTES`` spread over the
    seekable file ``f`` of ``size`` bytes: every window of a file of at most ``PROBE_BYTES``,
    else ``SAMPLES`` of them, the first at its start, the last at its end, the others evenly
    between; each compressed alone, one at a time (memory: one window). ``f`` is left where it
    was. None when ``f`` cannot seek."""
    if not _seekable(f):
        return None
    here = f.tell()
    if size <= PROBE_BYTES:
        starts = list(range(0, size, SAMPLE_BYTES))
    else:
        last = size - SAMPLE_BYTES
        starts = sorted({last * i // (SAMPLES - 1) for i in range(SAMPLES)})
    n_in = n_out = 0
    try:
        for at in starts:
            f.seek(at)
            b = f.read(SAMPLE_BYTES)
            if b:
                n_in += len(b)
                n_out += _one_shot(b, level)
    finally:
        f.seek(here)
    return n_in, n_out


def compress_stream(src: BinaryIO, dst: BinaryIO, size: Optional[int] = None, level: int = LEVEL,
                    give_up_ratio: Optional[float] = GIVE_UP_RATIO) -> Optional[Tuple[int, int]]:
    """Compress ``src`` into ``dst`` chunk by chunk; ``(bytes in, bytes out)``, or None when
    it is not worth it by ``give_up_ratio`` (None: always compress; the caller drops what was
    written). A ``src`` that can seek, of a known ``size`` above ``PROBE_BYTES``, is judged
    before anything is written by ``sample`` (windows over the whole file: nothing written when
    they say no, and when they say yes no give-up, however its start looks); any other is
    abandoned once, past ``PROBE_BYTES``, its output is still above the ratio."""
    if _std is not None:
        c = _std.ZstdCompressor(level=level, options={_std.CompressionParameter.checksum_flag: 1})
        if size is not None:
            c.set_pledged_input_size(size)
        step, end = (lambda b: c.compress(b)), (lambda: c.flush())
    else:
        cobj = _zs.ZstdCompressor(level=level, write_checksum=True, write_content_size=True).compressobj(
            size=-1 if size is None else size)
        step, end = cobj.compress, cobj.flush
    n_in = n_out = 0
    probing = give_up_ratio is not None
    if probing and size is not None and size > PROBE_BYTES:
        got = sample(src, size, level)
        if got is not None:
            if got[0] and got[1] > give_up_ratio * got[0]:
                return None
            probing = False  # the samples said yes: the final size decides (the caller's check)
    while True:
        b = src.read(CHUNK)
        if not b:
            break
        n_in += len(b)
        out = step(b)
        if out:
            dst.write(out)
            n_out += len(out)
        if probing and n_in >= PROBE_BYTES:
            probing = False
            if n_out > give_up_ratio * n_in:
                return None
    out = end()
    dst.write(out)
    n_out += len(out)
    return n_in, n_out


class _Checked(io.RawIOBase):
    """A decoder stream whose codec errors come out as ``DecodeError`` (an ``OSError``)."""

    def __init__(self, inner, f: BinaryIO):
        self._inner, self._f = inner, f

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        try:
            if hasattr(self._inner, "readinto"):
                return self._inner.readinto(buf)
            b = self._inner.read(len(buf))
        except OSError:
            raise  # the file's own read failed
        except Exception as e:  # the codecs raise their own error types (and EOFError) for bad data
            raise DecodeError(f"not a valid zstd stream ({e})") from None
        buf[:len(b)] = b
        return len(b)

    def close(self) -> None:
        try:
            self._inner.close()
            self._f.close()  # not every decoder closes the file it reads
        finally:
            super().close()


def open_decompressed(f: BinaryIO) -> BinaryIO:
    """A readable stream of the bytes the zstd file ``f`` holds (``f`` is closed with it).
    Damage shows as ``DecodeError`` from ``read``."""
    if _std is not None:
        inner = _std.ZstdFile(f, mode="rb")  # reads its input a block at a time
    else:
        inner = _zs.ZstdDecompressor().stream_reader(f, read_size=CHUNK, read_across_frames=False,
                                                     closefd=True)
    return io.BufferedReader(_Checked(inner, f), CHUNK)


#: one decoder and one encoder context a thread, reused by ``decompress_bounded`` and
#: ``compress_whole`` (making one costs more than coding a profile file's few KB: a restore of
#: 1,500 packed backups made 5,400 decoders)
_local = threading.local()


def compress_whole(data: bytes) -> bytes:
    """One zstd frame of ``data`` at ``LEVEL`` (content size and checksum in it, as
    ``compress_stream`` writes them), by a compressor context reused within the thread: making
    one per call cost more than compressing a profile file's few KB (a pack of 100 made 100).
    For small inputs held in memory (a pack's blobs)."""
    if _std is not None:
        c = getattr(_local, "std_cctx", None)
        if c is None:
            c = _local.std_cctx = _std.ZstdCompressor(level=LEVEL, options={_std.CompressionParameter.checksum_flag: 1})
        c.set_pledged_input_size(len(data))  # a frame ended by FLUSH_FRAME leaves it at a frame's start
        return c.compress(data, mode=_std.ZstdCompressor.FLUSH_FRAME)
    c = getattr(_local, "cctx", None)
    if c is None:
        c = _local.cctx = _zs.ZstdCompressor(level=LEVEL, write_checksum=True, write_content_size=True)
    return c.compress(data)  # one call, one frame: nothing of an earlier call carries over


def decompress_bounded(data: bytes, limit: int) -> bytes:
    """The bytes of the one zstd frame ``data`` holds, ``limit`` at most (whatever its header
    declares: memory stays bounded by ``limit``; the caller checks the size and hash). For
    small frames held in memory (a pack's blobs). Damage: ``DecodeError``."""
    try:
        if _std is not None:
            return _std.ZstdDecompressor().decompress(data, max_length=limit)
        dctx = getattr(_local, "dctx", None)
        if dctx is None:
            dctx = _local.dctx = _zs.ZstdDecompressor()
        # a new stream resets the context: a frame that failed before leaves nothing behind
        with dctx.stream_reader(data, read_size=max(1, len(data)), read_across_frames=False) as r:
            return r.read(limit)
    except Exception as e:  # the codecs raise their own error types for bad data
        raise DecodeError(f"not a valid zstd stream ({e})") from None


__all__ = ["HEADER_MAX", "content_size", "LEVEL", "PROBE_BYTES", "GIVE_UP_RATIO", "SAMPLES", "SAMPLE_BYTES",
           "DecodeError", "backend", "sample", "compress_stream", "compress_whole", "open_decompressed", "decompress_bounded"]
