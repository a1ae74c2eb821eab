"""What one event file holds, by category and tag: the scan's result for a file
(``EventFileStats``, with ``TagStat`` and ``FixedStat``), as the scan cache stores it.

Kept apart from ``eventfile``, which computes them with numpy: a scan served from its cache, and
every module that only reads or stores these results, imports no numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from tb_footprint_plugin.scan import categories as C

__all__ = ["TagStat", "FixedStat", "EventFileStats"]


@dataclass
class TagStat:
    """Bytes, value count and step range of one tag (or one fixed category)."""

    bytes: int = 0
    records: int = 0
    min_step: Optional[int] = None
    max_step: Optional[int] = None

    def add(self, nbytes: int, records: int, min_step: Optional[int], max_step: Optional[int]) -> None:
        """Fold in more bytes/records and widen the step range."""
        self.bytes += nbytes
        self.records += records
        if min_step is not None and (self.min_step is None or min_step < self.min_step):
            self.min_step = min_step
        if max_step is not None and (self.max_step is None or max_step > self.max_step):
            self.max_step = max_step

    def to_dict(self) -> dict:
        """JSON-safe form."""
        return {"bytes": self.bytes, "records": self.records, "min_step": self.min_step, "max_step": self.max_step}

    @classmethod
    def from_dict(cls, d: dict):
        """Inverse of ``to_dict``."""
        return cls(d["bytes"], d["records"], d.get("min_step"), d.get("max_step"))


@dataclass
class FixedStat(TagStat):
    """Stats of a non-summary category (same fields as ``TagStat``)."""


@dataclass
class EventFileStats:
    """Where the bytes of one event file go; see the module docstring for the rules."""

    size: int = 0
    records: int = 0  # good framed records
    status: str = "ok"  # ok | truncated | corrupt | unreadable
    error_offset: Optional[int] = None
    warning: Optional[str] = None
    fixed: Dict[str, FixedStat] = field(default_factory=dict)
    tags: Dict[str, Dict[str, TagStat]] = field(default_factory=dict)  # plugin -> tag -> stat
    bindings: Dict[str, str] = field(default_factory=dict)  # tag -> plugin, first in this file

    def category_bytes(self, resolved_bindings: Optional[Dict[str, str]] = None) -> Dict[str, int]:
        """Category -> bytes, summing exactly to ``size``.

        Tags recorded under plugin ``""`` are looked up in ``resolved_bindings`` (the run's
        bindings), then in this file's own bindings (metadata may come later in the file);
        still unbound they count as ``events_other``. An unreadable file is all ``other``.
        """
        if self.status == "unreadable":
            return {C.OTHER: self.size} if self.size else {}
        resolved = resolved_bindings or {}
        out: Dict[str, int] = {}
        for cat, st in self.fixed.items():
            out[cat] = out.get(cat, 0) + st.bytes
        for plugin, tags in self.tags.items():
            for tag, st in tags.items():
                cat = plugin or resolved.get(tag) or self.bindings.get(tag) or C.EVENTS_OTHER
                out[cat] = out.get(cat, 0) + st.bytes
        return out

    def to_dict(self) -> dict:
        """JSON-safe dict (the scan cache stores it)."""
        return {
            "size": self.size,
            "records": self.records,
            "status": self.status,
            "error_offset": self.error_offset,
            "warning": self.warning,
            "fixed": {k: v.to_dict() for k, v in self.fixed.items()},
            "tags": {p: {t: s.to_dict() for t, s in tags.items()} for p, tags in self.tags.items()},
            "bindings": dict(self.bindings),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "EventFileStats":
        """Inverse of ``to_dict``."""
        return cls(
            size=d["size"],
            records=d["records"],
            status=d["status"],
            error_offset=d.get("error_offset"),
            warning=d.get("warning"),
            fixed={k: FixedStat.from_dict(v) for k, v in d.get("fixed", {}).items()},
            tags={
                p: {t: TagStat.from_dict(s) for t, s in tags.items()}
                for p, tags in d.get("tags", {}).items()
            },
            bindings=dict(d.get("bindings", {})),
        )
