"""What every verb group of the API shares: the local context of a logdir (the refusals every
local verb makes first; the engine itself is opened by ``engine.front.open_engine``) and the
partition's logdir names. ``bucket_of`` and ``split_backup_dir`` are the engine front's,
re-exported.
"""
from __future__ import annotations

import os
from typing import Callable, List, Mapping, Optional, Sequence

from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.front import DEFAULT_BACKENDS, local_context, split_backup_dir  # noqa: F401 - re-exported
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD
from tb_footprint_plugin.storage.remote import is_remote


RunProgress = Callable[[str, str, float], None]  # (run, step, fraction)


def context_of(logdir: str, backup_dir: Optional[str], quiet_period: float = DEFAULT_QUIET_PERIOD,
               verify_backends: Sequence[str] = DEFAULT_BACKENDS,
               closed_files: Optional[Mapping[str, float]] = None) -> Context:
    """The engine's context of a local logdir: ``engine.front.local_context``'s refusals first (a
    bucket logdir is ``StoreFailure`` ``StoreError.NOT_SUPPORTED``)."""
    return local_context(logdir, backup_dir, quiet_period, verify_backends, closed_files)


# ``is_remote`` below reads URL syntax only (how a logdir is named: a URL is kept as written, a
# path made absolute); which engine acts on a logdir is chosen by ``engine.front.open_engine``.
def logdir_keys(logdirs: Sequence[str]) -> List[str]:
    """Logdirs as the partition names them: bucket URLs as given, local paths absolute."""
    return [ld.rstrip("/") if is_remote(ld) else os.path.abspath(ld) for ld in logdirs]


def partition_name(logdir: str) -> str:
    """A logdir as the partition names it: the same on every worker however it was reached (a
    local path after symlinks; workers that named one logdir by two paths split it differently
    and left runs in no shard)."""
    return logdir if is_remote(logdir) else os.path.realpath(logdir)


def engine_vault(eng) -> Optional[str]:
    """The vault a local engine backs up into (its ``--backup-dir``, else its state folder's), for
    what is said of it; None where not known without opening more (a bucket's engine)."""
    if eng.backup_dir:
        return eng.backup_dir
    ctx = getattr(eng, "ctx", None)  # a local engine's (lazy) context; a bucket engine has none
    return ctx.vault.root if ctx is not None else None


def say_taken(o, note: str, vault: Optional[str]) -> None:
    """Another user's run reduced or retired on request (``plan.owners``): its outcome says whose
    vault holds it, for people (``reason``) and programs (finding ``others_run_taken``, the vault)."""
    o.reason = note if not o.reason else f"{o.reason}; {note}"
    o.findings.append({"code": Finding.OTHERS_RUN_TAKEN, "path": vault})


def __getattr__(name: str):
    """``bucket_of``, re-exported from the engine front at first use (it loads the bucket engine)."""
    if name == "bucket_of":
        from tb_footprint_plugin.engine import front

        return front.bucket_of
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
