"""The run lock of a logdir on a folder, built in one place (issue #26, one lock with its lease).

Both engines take a run through the one run-lock interface (``engine.lease.RunLease``) in the
implementation their store declares (``bucket_lease.lock_class(Capabilities)``): a bucket's
through ``bucket_state.run_lock``, a folder's here. The local engine's verbs call ``run_lock``
(or ``folder_lock`` where they hold no ``Context``) and never construct ``journal.RunLock``
themselves, so the choice of implementation is made by the store's capabilities alone; on a
folder it is ``journal.RunLock`` (``flock`` + a lease file), with the same bytes on disk as before.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

from tb_footprint_plugin.codes import Code, Failure, Skip
from tb_footprint_plugin.engine.bucket_lease import lock_class
from tb_footprint_plugin.engine.context import Context, NoSpace, is_no_space
from tb_footprint_plugin.engine.lease import LockRefused, RunLease
# what a folder store declares, worked out once per process (it depends on the platform alone)
from tb_footprint_plugin.storage.store_posix import folder_capabilities


def folder_lock(lock_dir: str, run: str) -> RunLease:
    """The run lock (not taken yet) of ``run`` whose lock files live in ``lock_dir`` (a logdir's
    ``<state>/locks``): the implementation a folder's capabilities choose."""
    return lock_class(folder_capabilities())(lock_dir, run)


def run_lock(ctx: Context, run: str) -> RunLease:
    """The run lock (not taken yet) of ``run`` in the local logdir of ``ctx``."""
    return folder_lock(ctx.lock_dir, run)


def lock_failure(e: BaseException, run: str, lock_dir: str) -> Tuple[Code, str]:
    """The coded outcome of a run lock not taken, one rule for every verb: held by another
    process is ``Skip.LOCKED`` (its text names the holder); a full disk or quota ``Failure.NO_SPACE``
    naming the lock's file, the bytes it needs and the free space; any other error
    ``Failure.LOCK_ERROR`` naming the file. A full disk is never reported as another process:
    the user's remedy (free space) differs from waiting."""
    if isinstance(e, LockRefused):
        return Skip.LOCKED, str(e)
    where = (getattr(e, "filename", None) or os.path.join(lock_dir, "")) if isinstance(e, OSError) else lock_dir
    if isinstance(e, OSError) and is_no_space(e):
        # the lock file and its lease: a few KB
        return Failure.NO_SPACE, f"cannot lock run {run!r}: {NoSpace(str(where), 8192, e, at=os.path.dirname(lock_dir.rstrip(os.sep)))}"
    why = (e.strerror if isinstance(e, OSError) and e.strerror else None) or str(e) or type(e).__name__
    return Failure.LOCK_ERROR, f"cannot lock run {run!r}: {where}: {why}"


def lock_for_purge(ctx: Context, run: str, locks: Dict[str, RunLease]) -> Optional[Tuple[Code, str]]:
    """Hold ``run``'s lock for a purge (kept in ``locks``, taken once per run): None when held,
    else the coded reason the purge keeps that run's backups (``lock_failure``; another process
    holding it is said as a purge says it). The one rule of a disk's two purges (reductions' and
    retired runs')."""
    if run in locks:
        return None
    try:
        locks[run] = run_lock(ctx, run).acquire()
    except (LockRefused, OSError) as e:
        code, detail = lock_failure(e, run, ctx.lock_dir)
        if code == Skip.LOCKED:
            detail = "the run is being changed by another process; purge it later"
        return code, detail
    return None


__all__ = ["folder_capabilities", "folder_lock", "lock_failure", "lock_for_purge", "run_lock"]
