"""The one interface between the API and the engines (issue #26): ``open_engine`` chooses, once,
the engine of a logdir — ``BucketEngine`` (``engine.front_bucket``) for a bucket URL,
``LocalEngine`` (``engine.front_local``) for a path — and the API's verbs call the ``Engine``
(``engine.front_base``) it returns, never asking which one it holds.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from tb_footprint_plugin.engine.front_base import already_restored, DEFAULT_BACKENDS, Engine
from tb_footprint_plugin.engine.front_local import local_context, LocalEngine, open_ledger, split_backup_dir
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD
from tb_footprint_plugin.storage.remote import is_remote


def open_engine(logdir: str, backup_dir: Optional[str] = None, *, quiet_period: float = DEFAULT_QUIET_PERIOD,
                verify_backends: Sequence[str] = DEFAULT_BACKENDS,
                closed_files: Optional[Mapping[str, float]] = None, lazy: bool = False) -> "Engine":
    """The engine of ``logdir``, chosen here once: a bucket URL (``s3://``, ``gs://``, ``az://``)
    is a ``BucketEngine``, anything else a ``LocalEngine``. The refusals each engine makes first
    (not a folder, a backup dir inside the logdir, a local vault of blobs not ours) are made
    here; with ``lazy`` a local engine makes them at its first use of the logdir instead (a
    read-only view such as ``history`` answers what it can without them)."""
    if is_remote(logdir):  # URL syntax: which store holds the logdir
        from tb_footprint_plugin.engine.front_bucket import BucketEngine

        return BucketEngine(logdir, backup_dir, quiet_period=quiet_period, verify_backends=verify_backends,
                            closed_files=closed_files)
    eng = LocalEngine(logdir, backup_dir, quiet_period=quiet_period, verify_backends=verify_backends,
                      closed_files=closed_files)
    if not lazy:
        eng.ctx  # noqa: B018 - the refusals, now
    return eng


#: the bucket front's names, imported at first use: a verb on a local logdir (every CLI process of
#: one) does not load the bucket engine's modules (~10% of the package's import: helper P's note, r36)
_BUCKET_NAMES = ("BucketEngine", "bucket_of", "op_view")


def __getattr__(name: str):
    if name in _BUCKET_NAMES:
        from tb_footprint_plugin.engine import front_bucket

        return getattr(front_bucket, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BucketEngine", "DEFAULT_BACKENDS", "Engine", "LocalEngine", "already_restored", "bucket_of",
           "local_context", "op_view", "open_engine", "open_ledger", "split_backup_dir"]
