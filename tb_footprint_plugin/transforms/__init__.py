"""Transforms: the actions that produce a run's new files (gzip a trace, rewrite an event file)."""
from __future__ import annotations

import os


def transform_of(action) -> str:
    """Which transform a ``rewrite`` action runs: its ``params["transform"]``, else by its file
    name (a PyTorch trace is slimmed, anything else is an event-file rewrite). ``action``: an
    ``Action`` or its dict form (a journal's plan)."""
    params = getattr(action, "params", None)
    if params is None and isinstance(action, dict):
        params = action.get("params")
    t = (params or {}).get("transform")
    if t:
        return t
    path = getattr(action, "path", None) or (action.get("path") if isinstance(action, dict) else "")
    name = os.path.basename(path or "")
    return "trace_slim" if ".pt.trace.json" in name else "event_rewrite"


def stage_rewrite(action, src: str, tmp: str, sha: str, original=None) -> dict:
    """Produce the rewritten file of a ``rewrite`` action at ``tmp`` and check it.

    ``src`` is the original (absolute path), ``sha`` its sha256 as backed up. Returns at
    least ``size`` and ``sha256`` of ``tmp``; event rewrites add ``expectations`` (plugin ->
    verification mode for ``verify.Expectations``) and both add their removal counts.
    Raises when the file cannot be rewritten safely: the transaction then rolls back.
    ``original`` (``verify.original.OriginalRun``, optional): an event rewrite reads the run's
    default view from its data server and fills in what its pass learnt, for the verification.
    """
    transform = transform_of(action)
    if transform == "event_rewrite":
        from tb_footprint_plugin.transforms.event_rewrite import stage_event_rewrite

        if original is None:
            return stage_event_rewrite(action, src, tmp, sha)
        return stage_event_rewrite(action, src, tmp, sha, original=original)
    if transform == "trace_slim":
        from tb_footprint_plugin.transforms.trace_slim import stage_trace_slim

        return stage_trace_slim(action, src, tmp, sha)
    raise ValueError(f"unknown rewrite transform {transform!r}")


__all__ = ["stage_rewrite", "transform_of"]
