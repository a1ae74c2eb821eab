"""The fidelity contract's words: the verification modes, what each promises per backend, a check line.

Below ``compare`` (which runs a verification), ``dashboard`` (the route crawl) and ``pyside``
(the Python backend's child): all three speak this contract, so it sits under them and none of
them imports another one's way back.
"""
from __future__ import annotations

from dataclasses import dataclass

IDENTICAL = "identical"
DEFAULT_VIEW_IDENTICAL = "default_view_identical"
#: The Rust (default) backend's view is identical, as for DEFAULT_VIEW_IDENTICAL; the other
#: backend sees an in-order subset of the original with the LAST point kept (not the first).
DEFAULT_VIEW_EXACT = "default_view_exact"
SUBSET = "subset"
REMOVED = "removed"
#: The run graph: the graphs route's graph with the dashboard's attribute filter is identical
#: (attribute values over 1 KB were dropped from the stored graph and listed as too large).
GRAPH_ROUTE_IDENTICAL = "graph_route_identical"
MODES = (IDENTICAL, DEFAULT_VIEW_IDENTICAL, DEFAULT_VIEW_EXACT, SUBSET, REMOVED, GRAPH_ROUTE_IDENTICAL)
#: Modes whose promise on the Rust backend is its default (sampled) view, unchanged.
DEFAULT_VIEW_MODES = (DEFAULT_VIEW_IDENTICAL, DEFAULT_VIEW_EXACT)
GRAPH_MODES = (IDENTICAL, REMOVED, GRAPH_ROUTE_IDENTICAL)


@dataclass
class Check:
    """One verification line: ``detail`` is the human-readable sentence."""

    name: str
    ok: bool
    detail: str


def exact_on(mode: str, backend: str) -> bool:
    """Must the points be identical (all of them, or the Rust default view's) on ``backend``?

    The one statement of the fidelity contract per backend: the reader-level checks and the
    dashboard routes (``dashboard.route_contract``) both ask it."""
    return mode == IDENTICAL or (mode in DEFAULT_VIEW_MODES and backend == "rust")


__all__ = ["Check", "DEFAULT_VIEW_EXACT", "DEFAULT_VIEW_IDENTICAL", "DEFAULT_VIEW_MODES", "GRAPH_MODES",
           "GRAPH_ROUTE_IDENTICAL", "IDENTICAL", "MODES", "REMOVED", "SUBSET", "exact_on"]
