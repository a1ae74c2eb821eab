"""Purge: free the vault of backups that are no longer wanted, never one that is still needed.

A blob another kept operation, or an unfinished one, still needs is never deleted; a run
being changed right now is passed over; the manifest stops claiming a backup before any of
its blobs goes.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from tb_footprint_plugin.engine.catalogue import journal_blobs, own_manifests, unsettled_op
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.journal import RunLock, RunLocked
from tb_footprint_plugin.engine.history import append_history
from tb_footprint_plugin.engine.vault import Vault, who
from tb_footprint_plugin.version import __version__


@dataclass
class PurgeReport:
    """What a purge freed (or, without ``yes``, would free)."""

    dry_run: bool
    ops: List[dict]
    freed_bytes: int

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "ops": self.ops, "freed_bytes": self.freed_bytes}


def purge_backups(ctx: Context, *, older_than: Optional[float] = None, run: Optional[str] = None,
                  yes: bool = False, op: Optional[str] = None) -> PurgeReport:
    """Delete backups of verified (or restored) operations; without ``yes`` only list them."""
    now = time.time()
    candidates = []
    for m in own_manifests(ctx):
        if m.get("kind") != "reduce" or m.get("backup_purged"):
            continue
        if (op and m["op_id"] != op) or (run is not None and m["run"] != run):
            continue
        if older_than is not None and m.get("finished_at", now) > now - older_than:
            continue
        candidates.append(m)
    locks, chosen = {}, []
    try:
        for m in candidates:
            if yes and m["run"] not in locks:
                try:
                    locks[m["run"]] = RunLock(ctx.lock_dir, m["run"]).acquire()
                except (RunLocked, OSError):
                    continue  # being changed right now: purge it another time
                if unsettled_op(ctx, m["run"]):
                    continue
            chosen.append(m)
        freed, listed = 0, []
        by_vault: Dict[str, List[dict]] = {}
        for m in chosen:
            by_vault.setdefault(m["vault"], []).append(m)
        pending = journal_blobs(ctx)
        for root, ms in by_vault.items():
            vault = Vault(root)
            keep = vault.referenced_blobs(exclude_ops=[m["op_id"] for m in ms]) | pending
            seen = set()
            for m in ms:
                shas = [f["sha256"] for f in m["files"] if f["sha256"] not in keep and f["sha256"] not in seen]
                seen.update(shas)
                if yes:
                    # the manifest stops claiming a backup before any blob goes
                    m["backup_purged"] = True
                    m["purged_at"] = now
                    vault.write_manifest(m)
                    size = sum(vault.delete_blob(sha) for sha in shas)
                    _log_purge(ctx, m, size, now)
                else:
                    size = sum(os.lstat(vault.blob_path(sha)).st_size for sha in shas
                               if os.path.exists(vault.blob_path(sha)))
                freed += size
                listed.append({"op_id": m["op_id"], "run": m["run"], "bytes": size,
                               "finished_at": m.get("finished_at"), "restored": bool(m.get("restored_by"))})
    finally:
        for lock in locks.values():
            lock.release()
    return PurgeReport(dry_run=not yes, ops=listed, freed_bytes=freed)


def _log_purge(ctx: Context, m: dict, freed: int, now: float) -> None:
    """A purge is a change too: the change log says which operation's backup went and what it freed."""
    user = who()
    append_history(ctx.state, {
        "op_id": m["op_id"], "kind": "purge", "run": m["run"], "policy": None, "before": freed, "after": 0,
        "freed": freed, "verified": None, "outcome": "purged", "backup_kept": False,
        "reason": f"backup of {m['op_id']} deleted from {m['vault']}" + (" (run restored before)" if m.get("restored_by") else ""),
        "user": user["user"], "host": user["host"], "tool_version": __version__,
    })


__all__ = ["PurgeReport", "purge_backups"]
