"""Fixed identities every writer uses (never read from the machine: determinism)."""
from __future__ import annotations

from typing import Union


# --- fixed identities (never read from the machine: determinism) -----------------------------
DEFAULT_HOST = "demo-host"
DEFAULT_PID = 4242
DEFAULT_TIMESTAMP = 1795990000  # 2026-11-29 22:06:40 UTC, the era of the real fixtures
FILE_VERSION = "brain.Event:2"
TF_SOURCE_WRITER = "tensorflow.core.util.events_writer"  # TF's C++ writer
TB_SOURCE_WRITER = "tensorboard.summary.writer.event_file_writer"  # torch / tensorboardX
XPROF_VERSION = "2.24.2"
#: ``cache_version.txt`` of synthetic caches: older (as strings, like xprof compares) than every
#: xprof that writes these caches, so they are always rebuilt rather than read.
STALE_CACHE_VERSION = "2.19.0"

#: Tools the xprof 2.24 plugin lists for a host-only (CPU) XSpace such as ``write_xplane``'s.
HOST_ONLY_TOOLS = (
    "overview_page",
    "trace_viewer@",
    "op_profile",
    "input_pipeline_analyzer",
    "memory_profile",
    "roofline_model",
    "framework_op_stats",
    "hlo_stats",
)




def as_bytes(x: Union[bytes, str]) -> bytes:
    """UTF-8 bytes of a str, or the bytes themselves."""
    return x.encode("utf-8") if isinstance(x, str) else bytes(x)
