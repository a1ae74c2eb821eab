"""Purge: free the vault of backups that are no longer wanted, never one that is still needed.

A blob another kept operation, or an unfinished one, still needs is never deleted; a run
being changed right now is passed over; the manifest stops claiming a backup before any of
its blobs goes.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from tb_footprint_plugin.engine.catalogue import journal_blobs, own_manifests, unsettled_op, vault_problems
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.journal import RunLock, RunLocked
from tb_footprint_plugin.engine.vault import Vault


@dataclass
class PurgeReport:
    """What a purge freed (or, without ``yes``, would free)."""

    dry_run: bool
    ops: List[dict]
    freed_bytes: int
    #: original files that exist nowhere else once these backups are gone (runs not restored)
    originals_lost: int = 0
    #: state on disk that was refused (planted, copied or malformed): reported, never acted on
    refused: List[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "ops": self.ops, "freed_bytes": self.freed_bytes,
                "originals_lost": self.originals_lost, "refused": list(self.refused)}


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
        freed, listed, lost = 0, [], 0
        by_vault: Dict[str, List[dict]] = {}
        for m in chosen:
            by_vault.setdefault(m["vault"], []).append(m)
        pending = journal_blobs(ctx)
        for root, ms in by_vault.items():
            vault = Vault(root)
            keep = vault.referenced_blobs(exclude_ops=[m["op_id"] for m in ms]) | pending
            seen = set()
            # every blob this purge deletes from this vault (a blob two operations share is
            # counted, for its bytes, with the first; it is lost for both)
            doomed = {f["sha256"] for m in ms for f in m["files"] if f["sha256"] not in keep}
            for m in ms:
                shas = [f["sha256"] for f in m["files"] if f["sha256"] not in keep and f["sha256"] not in seen]
                seen.update(shas)
                # a run not restored has its originals only in this backup: each of its files
                # whose blob goes (no other kept operation holds it) is lost for good
                originals = 0 if m.get("restored_by") else sum(1 for f in m["files"] if f["sha256"] in doomed)
                if yes:
                    # the manifest stops claiming a backup before any blob goes
                    m["backup_purged"] = True
                    m["purged_at"] = now
                    vault.write_manifest(m)
                    size = sum(vault.delete_blob(sha) for sha in shas)
                else:
                    size = sum(os.lstat(vault.blob_path(sha)).st_size for sha in shas
                               if os.path.exists(vault.blob_path(sha)))
                freed += size
                lost += originals
                listed.append({"op_id": m["op_id"], "run": m["run"], "bytes": size, "originals": originals,
                               "finished_at": m.get("finished_at"), "restored": bool(m.get("restored_by"))})
    finally:
        for lock in locks.values():
            lock.release()
    refused = [p.to_dict() for p in vault_problems(ctx)]
    return PurgeReport(dry_run=not yes, ops=listed, freed_bytes=freed, originals_lost=lost, refused=refused)


__all__ = ["PurgeReport", "purge_backups"]
