"""Prove, with TensorBoard's own readers, that a reduced run still shows what was promised.

* ``records`` — framing/CRC checks and byte-level record subsequence checks.
* ``read_view`` (from ``formats.views``): what the Python multiplexer or the Rust data server shows.
* ``compare`` — ``verify_reduction``: original vs reduced under an ``Expectations`` contract.
"""
from tb_footprint_plugin.lazy import exports

# The names below are re-exported lazily (PEP 562): ``engine`` modules that only need
# ``Stopped`` import the verification's light parts, and a status or history never pays for the
# readers, the comparison and numpy. ``from tb_footprint_plugin.verify import X`` works as before.
#: public name -> the module below ``verify`` (or ``formats``) that defines it
_WHERE = {
    "RunView": "formats.views", "TagView": "formats.views", "TensorPayload": "formats.views",
    "data_server_binary": "formats.views", "read_view": "formats.views",
    "MODES": "verify.compare", "Check": "verify.compare", "Expectations": "verify.compare",
    "VerificationResult": "verify.compare", "verify_reduction": "verify.compare",
    "RecordCheck": "verify.records", "check_event_files": "verify.records",
    "records_subsequence": "verify.records",
    "ShouldStop": "verify.stop", "Stopped": "verify.stop",
}


__getattr__, __dir__ = exports(__name__, {name: ("tb_footprint_plugin." + module, name)
                                           for name, module in _WHERE.items()}, globals())


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
