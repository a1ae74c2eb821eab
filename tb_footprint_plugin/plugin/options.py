"""The tab's options as TensorBoard's flags give them: defaults and the rules that read them.

Shared by ``loader`` (TensorBoard's entry point, which checks the flags at startup) and
``plugin.plugin`` (which reads them when it is built). Dependency-free like the loader: an
``ImportError`` here would stop TensorBoard itself.
"""
from __future__ import annotations

DEFAULT_POLICY = "archive"
DEFAULT_QUIET_PERIOD = 600.0


def parse_quiet_period(value) -> float:
    """Seconds as a number, or a duration such as ``10m`` / ``1h``; ValueError otherwise."""
    from tb_footprint_plugin.fmt import parse_duration  # dependency-free, like this module

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = parse_duration(str(value))
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        raise ValueError(f"quiet period must be a non-negative number of seconds, got {value!r}")
    return seconds


def is_local_logdir(logdir) -> bool:
    """A plain filesystem path (not ``gs://…``, ``s3://…``, ``hdfs://…`` or empty)."""
    return bool(logdir) and "://" not in str(logdir)


__all__ = ["DEFAULT_POLICY", "DEFAULT_QUIET_PERIOD", "is_local_logdir", "parse_quiet_period"]
