"""What every verb group of the API shares: the local context of a logdir (the refusals every
local verb makes first), the bucket a bucket logdir routes to with its vault, and the numbers
reports and ``status`` count alike (disk in use, freed after purge, the partition's logdir names).
"""
from __future__ import annotations

import os
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from tb_footprint_plugin.engine.catalogue import known_vaults
from tb_footprint_plugin.engine import usage
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.purge import freeable_bytes
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD
from tb_footprint_plugin.storage.paths import is_within
from tb_footprint_plugin.storage.remote import is_remote, RemoteError


DEFAULT_BACKENDS = ("python", "rust")


RunProgress = Callable[[str, str, float], None]  # (run, step, fraction)


def split_backup_dir(logdir: str, backup_dir: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """``(backup dir of the local engine, remote vault URL)``: a local logdir given a bucket URL
    keeps its local vault (the state folder) and offloads committed backups to that URL
    (``engine.offload``); anything else is as given, with no remote vault."""
    if backup_dir and is_remote(backup_dir) and not is_remote(logdir):
        return None, backup_dir
    return backup_dir, None


def context_of(logdir: str, backup_dir: Optional[str], quiet_period: float = DEFAULT_QUIET_PERIOD,
               verify_backends: Sequence[str] = DEFAULT_BACKENDS,
               closed_files: Optional[Mapping[str, float]] = None) -> Context:
    """The engine's context of a local logdir, after the refusals every local verb makes first:
    not a bucket, an existing folder, a backup dir that does not contain the logdir. A bucket
    URL as backup dir is the remote vault (``split_backup_dir``): the context's vault is the
    local state folder, which remembers that URL once a reduce offloads to it."""
    backup_dir, _remote = split_backup_dir(logdir, backup_dir)
    if is_remote(logdir) or (backup_dir and is_remote(backup_dir)):
        raise RemoteError("not_supported", f"{logdir}: this verb is not available on object storage "
                          "(scan, plan, reduce, retire, verify, restore, purge, status, history and operations are)")
    logdir = os.path.abspath(logdir)
    if not os.path.isdir(logdir):
        raise NotADirectoryError(f"logdir {logdir} is not a directory")
    if backup_dir is not None:
        backup_dir = os.path.abspath(backup_dir)
        if is_within(logdir, backup_dir):
            raise ValueError(f"backup dir {backup_dir} contains the logdir; choose a separate folder")
    return Context(logdir=logdir, backup_dir=backup_dir, quiet_period=quiet_period,
                   verify_backends=tuple(verify_backends), closed_files=dict(closed_files or {}))


def bucket_of(logdir: str, backup_dir: Optional[str]):
    """``(RemoteFS, BucketVault)`` of a bucket logdir: backups as server-side copies in its store
    (``backup_dir`` unset or a prefix of the same store), or blobs in a local folder of ours
    (``backup_dir`` a path; ``NotPrivate`` when it is not ours)."""
    from tb_footprint_plugin.engine.bucket import BucketVault
    from tb_footprint_plugin.storage.remote import RemoteFS

    rfs = RemoteFS(logdir)
    return rfs, BucketVault.for_logdir(rfs, backup_dir)


def bucket_in_use(rfs, vault, objects=None) -> Optional[int]:
    """What a bucket logdir and its vault hold, as stored (the listing's sizes; a vault in
    another prefix listed too); None when a listing fails."""
    try:
        objects = rfs.list_tree() if objects is None else objects
        total = usage.stored_bytes(o.size for o in objects.values())
        if not (vault.root == rfs.root or vault.root.startswith(rfs.root + "/")):
            try:
                total += usage.stored_bytes(o.size for o in rfs.list_under(vault.root, vault.root).values())
            except FileNotFoundError:
                pass  # no backup made yet
        return total
    except (OSError, ValueError):
        return None


def logdir_keys(logdirs: Sequence[str]) -> List[str]:
    """Logdirs as the partition names them: bucket URLs as given, local paths absolute."""
    return [ld.rstrip("/") if is_remote(ld) else os.path.abspath(ld) for ld in logdirs]


def partition_name(logdir: str) -> str:
    """A logdir as the partition names it: the same on every worker however it was reached (a
    local path after symlinks; workers that named one logdir by two paths split it differently
    and left runs in no shard)."""
    return logdir if is_remote(logdir) else os.path.realpath(logdir)


def disk_in_use(ctx: Context) -> "usage.DiskUsage":
    """Disk in use by the logdir and every vault of it, now (``engine.usage.disk_usage``)."""
    return usage.disk_usage(ctx.logdir, known_vaults(ctx))


def freed_after_purge(ctx: Context, op_ids: List[str]) -> int:
    """What purging these operations' backups would free, counted by purge's own rule."""
    if not op_ids:
        return 0
    try:
        return freeable_bytes(ctx, op_ids)
    except OSError:
        return 0

