"""A run's scalar metric as TensorBoard reads it: last, min and max of one scalar tag.

Read with TensorBoard's own ``EventFileLoader`` (which applies ``data_compat``, so TF1
``simple_value`` and TF2 scalar tensors read alike), over the event files directly in the run
directory (what TensorBoard attributes to the run), streaming: memory does not grow with the
file size.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Optional

from tb_footprint_plugin.scan.categories import is_summary_event_file_name

SCALARS_PLUGIN = "scalars"


@dataclass
class MetricSummary:
    """One tag of one run: the value at the last step, and the extremes."""

    tag: str
    last: float
    min: float
    max: float
    last_step: int
    points: int

    def value(self, which: str) -> float:
        """``which`` is ``'last'``, ``'min'`` or ``'max'``."""
        if which not in ("last", "min", "max"):
            raise ValueError(f"metric value must be last, min or max, not {which!r}")
        return getattr(self, which)

    def to_dict(self) -> dict:
        return asdict(self)


def run_metric(run_dir: str, tag: str) -> Optional[MetricSummary]:
    """The scalar ``tag`` of the run in ``run_dir``; ``None`` when the run has no such scalar.

    "Last" is the value at the highest step (of equal steps, the one read last, as the
    dashboard shows it). NaN values count for nothing in min/max and as a worst last value.
    Unreadable files raise ``OSError`` naming the file.
    """
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    try:
        names = sorted(n for n in os.listdir(run_dir) if is_summary_event_file_name(n)
                       and os.path.isfile(os.path.join(run_dir, n)))
    except OSError as e:
        raise OSError(e.errno, f"cannot list run directory {run_dir}: {e.strerror or e}") from None
    best = None  # (step, order, value)
    lo, hi, n, order = math.inf, -math.inf, 0, 0
    for name in names:
        path = os.path.join(run_dir, name)
        try:
            for ev in EventFileLoader(path).Load():
                if not ev.HasField("summary"):
                    continue
                for v in ev.summary.value:
                    if v.tag != tag or not v.HasField("tensor"):
                        continue
                    if v.metadata.plugin_data.plugin_name not in ("", SCALARS_PLUGIN):
                        continue
                    arr = tensor_util.make_ndarray(v.tensor)
                    if arr.size != 1:
                        continue
                    x = float(arr.reshape(()))
                    order += 1
                    n += 1
                    if not math.isnan(x):
                        lo, hi = min(lo, x), max(hi, x)
                    if best is None or (ev.step, order) >= (best[0], best[1]):
                        best = (ev.step, order, x)
        except OSError as e:
            raise OSError(e.errno, f"cannot read {path}: {e.strerror or e}") from None
    if best is None:
        return None
    if n and lo == math.inf:  # every value NaN
        lo = hi = math.nan
    return MetricSummary(tag=tag, last=best[2], min=lo, max=hi, last_step=int(best[0]), points=n)


__all__ = ["MetricSummary", "run_metric"]
