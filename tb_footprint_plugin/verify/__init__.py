"""Prove, with TensorBoard's own readers, that a reduced run still shows what was promised.

* ``records`` — framing/CRC checks and byte-level record subsequence checks.
* ``read_view`` (from ``formats.views``): what the Python multiplexer or the Rust data server shows.
* ``compare`` — ``verify_reduction``: original vs reduced under an ``Expectations`` contract.
"""
from tb_footprint_plugin.formats.views import (
    RunView,
    TagView,
    TensorPayload,
    data_server_binary,
    read_view,
)
from tb_footprint_plugin.verify.compare import (
    MODES,
    Check,
    Expectations,
    VerificationResult,
    verify_reduction,
)
from tb_footprint_plugin.verify.records import (
    RecordCheck,
    check_event_files,
    records_subsequence,
)
from tb_footprint_plugin.verify.stop import ShouldStop, Stopped

__all__ = [
    "MODES",
    "Check",
    "Expectations",
    "VerificationResult",
    "verify_reduction",
    "ShouldStop",
    "Stopped",
    "RecordCheck",
    "check_event_files",
    "records_subsequence",
    "RunView",
    "TagView",
    "TensorPayload",
    "data_server_binary",
    "read_view",
]
