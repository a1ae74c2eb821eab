"""Small media for image and audio summaries: PNG and WAV bytes."""
from __future__ import annotations

import io
import math
import random
import struct
import wave
import zlib

# Small media: PNG and WAV
# =============================================================================================
def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def make_png(width: int, height: int, *, seed: int = 0, channels: int = 3, noise: int = 64) -> bytes:
    """A valid 8-bit PNG: a gradient plus deterministic noise (``noise`` = amplitude, 0..255).

    Noise keeps the image from compressing to nothing, like real activations or samples.
    """
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    rng = random.Random(seed)
    rows = []
    for y in range(height):
        base = (y * 255) // max(1, height - 1)
        noise_row = rng.randbytes(width * channels) if noise else bytes(width * channels)
        row = bytearray(width * channels)
        for i in range(width * channels):
            row[i] = (base + (i // channels) * 7 + noise_row[i] % (noise + 1)) & 0xFF
        rows.append(b"\x00" + bytes(row))  # filter type 0 (None) per scanline
    ihdr = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"".join(rows), 6))
        + _png_chunk(b"IEND", b"")
    )


def make_wav(n_frames: int, *, sample_rate: int = 16000, seed: int = 0, freq: float = 440.0) -> bytes:
    """A 16-bit mono PCM WAV (sine plus a little deterministic noise) via the ``wave`` module."""
    rng = random.Random(seed)
    samples = bytearray()
    for i in range(n_frames):
        v = 0.5 * math.sin(2 * math.pi * freq * i / sample_rate) + rng.uniform(-0.05, 0.05)
        samples += struct.pack("<h", int(max(-1.0, min(1.0, v)) * 32767))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(bytes(samples))
    return buf.getvalue()


