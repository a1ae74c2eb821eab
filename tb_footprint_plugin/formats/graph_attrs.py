"""Graph attribute values the Graphs dashboard lists as too large to show, taken out of stored graphs.

TF1-style graphs embed constants (``tf.constant`` weights, lookup tables) as node attribute
values; ``FileWriter(graph=...)`` / ``write_graph`` then writes event files of hundreds of MB.
TensorBoard's graphs route, asked with ``limit_attr_size=1024&large_attrs_key=_too_large_attrs``,
runs ``tensorboard.backend.process_graph.prepare_graph_for_ui`` on the graph it serves: every
top-level node attribute whose serialized size is over the limit is deleted and its key listed
under ``_too_large_attrs`` (the node's info card then says "Too large to show...").

``strip_graph_def`` stores exactly that processed graph, computed by TensorBoard's own
function, so the route returns the same graph before and after; it refuses (returns None)
unless the result is a fixed point of the same processing (processing it again changes
nothing) and smaller. Without those parameters the route returns the graph as stored: the
attribute values are then gone, which is what the fidelity line says (the vault keeps the
original until purge).

A ``MetaGraphDef`` record (``meta_graph_def``: TF1's ``add_meta_graph``, also written beside the
``GraphDef`` by ``FileWriter(graph=sess.graph)`` with a session) holds its own copy of the graph,
constants included. TensorBoard 2.21 shows neither backend's graph from it (the Rust data server
skips the record; the Python loader keeps it in the accumulator's ``MetaGraph()``, which no
plugin reads: a run with only a meta graph has no run graph on either backend, measured), so
``strip_meta_graph_def`` drops the same values from that copy, leaving every other field as is.
"""
from __future__ import annotations

import hashlib
from typing import Optional, Tuple

from tb_footprint_plugin.plan.rules import LARGE_ATTRS_KEY, LIMIT_ATTR_SIZE


def _prepare(graph) -> None:
    from tensorboard.backend import process_graph

    process_graph.prepare_graph_for_ui(graph, LIMIT_ATTR_SIZE, LARGE_ATTRS_KEY)


def has_large_attrs(graph) -> bool:
    """Does any top-level node of ``graph`` (a ``GraphDef``) carry an attribute over the limit?"""
    return any(v.ByteSize() > LIMIT_ATTR_SIZE for node in graph.node for v in node.attr.values())


def strip_graph_def(raw: bytes) -> Optional[Tuple[bytes, int]]:
    """``(serialized GraphDef without its large attribute values, how many were dropped)``,
    or None when nothing would change or the result is not exactly what the route serves."""
    from tensorboard.compat.proto import graph_pb2

    if len(raw) <= LIMIT_ATTR_SIZE:
        return None
    graph = graph_pb2.GraphDef.FromString(raw)
    if not has_large_attrs(graph):
        return None
    _prepare(graph)
    out = graph.SerializeToString(deterministic=True)  # map order: sorted keys
    again = graph_pb2.GraphDef.FromString(out)
    _prepare(again)
    if again != graph or len(out) >= len(raw):
        return None  # e.g. a node with so many large attrs that the list itself is over the limit
    dropped = sum(len(n.attr[LARGE_ATTRS_KEY].list.s) for n in graph.node if LARGE_ATTRS_KEY in n.attr)
    return out, dropped


def strip_meta_graph_def(raw: bytes) -> Optional[Tuple[bytes, int]]:
    """``strip_graph_def`` of the ``graph_def`` a ``MetaGraphDef`` embeds (TF1's
    ``FileWriter.add_meta_graph`` and ``add_graph`` with a session write both copies of the same
    graph); every other field of it (signatures, collections, saver, meta info) is kept as is.
    None when nothing would change or the result does not read back as exactly that."""
    from tensorboard.compat.proto import meta_graph_pb2

    if len(raw) <= LIMIT_ATTR_SIZE:
        return None
    meta = meta_graph_pb2.MetaGraphDef.FromString(raw)
    if not meta.HasField("graph_def"):
        return None
    stripped = strip_graph_def(meta.graph_def.SerializeToString(deterministic=True))
    if stripped is None:
        return None
    graph, dropped = stripped
    out_meta = meta_graph_pb2.MetaGraphDef()
    out_meta.CopyFrom(meta)
    out_meta.graph_def.ParseFromString(graph)
    out = out_meta.SerializeToString(deterministic=True)
    back = meta_graph_pb2.MetaGraphDef.FromString(out)
    back.ClearField("graph_def")
    meta.ClearField("graph_def")
    if back != meta or len(out) >= len(raw):
        return None
    return out, dropped


def route_graph_digest(raw: bytes) -> str:
    """sha256 of the graphs route's body for a stored run graph with the dashboard's
    ``limit_attr_size``/``large_attrs_key``: the pbtxt of the processed graph."""
    from tensorboard.compat.proto import graph_pb2

    graph = graph_pb2.GraphDef.FromString(raw)
    _prepare(graph)
    return hashlib.sha256(str(graph).encode("utf-8")).hexdigest()


__all__ = ["LARGE_ATTRS_KEY", "LIMIT_ATTR_SIZE", "has_large_attrs", "route_graph_digest", "strip_graph_def",
           "strip_meta_graph_def"]
