"""What is unsettled or damaged in a logdir's state and vaults — read only, cheap, with codes.

``status``, ``scan``, ``plan``, ``history``, ``verify`` and the tab report these findings and
name the command that settles them (``tb-footprint recover LOGDIR``); nothing here changes a
byte. Checks are cheap enough for every call: directory listings, one ``lstat`` per backup and
one parse per manifest (full hashing of backups is ``verify``'s job).
"""
from __future__ import annotations

import os
import shlex
import stat
from typing import List, Optional

from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.journal import pending_journals
from tb_footprint_plugin.engine.vault import Vault


def settle_command(logdir: str, backup_dir: Optional[str] = None) -> str:
    """The command that settles unfinished operations and repairs what can be repaired."""
    cmd = f"tb-footprint recover {shlex.quote(logdir)}"
    if backup_dir:
        cmd += f" --backup-dir {shlex.quote(backup_dir)}"
    return cmd


def unfinished_ops(journal_dir: str) -> List[dict]:
    """Operations whose journal is still there: {op_id, run, kind, bytes_before} (the size its
    plan saw; None where the journal does not say)."""
    out = []
    for j in pending_journals(journal_dir):
        recs = j.records()
        begin = recs[0] if recs and recs[0].get("type") == "begin" else {}
        plan = begin.get("plan") if isinstance(begin.get("plan"), dict) else {}
        before = plan.get("bytes_before")
        out.append({"op_id": j.op_id, "run": begin.get("run"), "kind": begin.get("kind"),
                    "bytes_before": before if isinstance(before, int) and not isinstance(before, bool) else None})
    return out


def catalogue_problems(vault_roots: List[str], manifests: List[dict], in_use: frozenset = frozenset()) -> List[dict]:
    """Damage in the vaults: lost manifests, backups grown / missing / shrunk, orphan blobs,
    purges that did not finish. Each finding: {code, op_id, run, detail, bytes}."""
    out: List[dict] = []
    referenced = set(in_use)  # blobs of operations under way
    for m in manifests:  # content displaced by a restore or rollback stays, whatever the outcome
        referenced.update(d["sha256"] for d in m.get("displaced", []) if d.get("sha256"))
    for root in vault_roots:
        vault = Vault(root)
        for op_id in oplog.logged_ops(root):
            recs = oplog.records(root, op_id)
            path = vault.manifest_path(op_id)
            if oplog.last_state(recs) is not None and not oplog.manifest_readable(path, op_id):
                what = "corrupt" if os.path.exists(path) else "missing"
                out.append(_f(Finding.MANIFEST_DAMAGED, op_id, None, f"manifest of {op_id} is {what}; "
                              "`recover` rebuilds it from the vault's operation log"))
            intent = oplog.purge_intent(recs)
            if intent:
                out.append(_f(Finding.UNFINISHED, op_id, None, f"a purge of {op_id} was interrupted; "
                              "`recover` finishes it"))
        for op_id in vault.unreadable_manifests():
            if not os.path.exists(oplog.log_path(root, op_id)):
                out.append(_f(Finding.MANIFEST_LOST, op_id, None, f"manifest {op_id} in {root} is corrupt and has no "
                              "log to rebuild it from; its backups are kept"))
    for m in manifests:
        if m.get("backup_purged"):
            continue
        vault = Vault(m["vault"])
        for f in m.get("files", []):
            referenced.add(f["sha256"])
            try:
                st = os.lstat(vault.blob_path(f["sha256"]))
            except OSError:
                out.append(_f(Finding.BACKUP_DAMAGED, m["op_id"], m.get("run"),
                              f"backup of {f['path']} is missing from {vault.root}"))
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size < f["size"]:
                out.append(_f(Finding.BACKUP_DAMAGED, m["op_id"], m.get("run"),
                              f"backup of {f['path']} in {vault.root} is shorter than it was"))
            elif st.st_size > f["size"] and m.get("kind") == "reduce" and m.get("outcome") == "verified":
                out.append(_f(Finding.LATE_WRITES_PENDING, m["op_id"], m.get("run"),
                              f"{st.st_size - f['size']} byte(s) were written to {f['path']} after the reduction; "
                              "`recover` puts the complete records back into the run", st.st_size - f["size"]))
    for root in vault_roots:
        # a blob another logdir's manifest (shared vault) needs is not an orphan either
        refs = referenced | Vault(root).referenced_blobs()
        orphans = oplog.orphan_blobs(Vault(root), refs)
        if orphans:
            out.append(_f(Finding.ORPHAN_BLOBS, None, None,
                          f"{len(orphans)} backup blob(s) in {root} belong to no operation (a lost manifest?); "
                          "kept, never purged", sum(orphans.values())))
    return out


def late_writes(manifests: List[dict]) -> List[dict]:
    """Every salvage recorded in the manifests: {op_id, run, path, file, records, at, code}."""
    out = []
    for m in manifests:
        for s in m.get("salvaged", []):
            out.append({"op_id": m["op_id"], "run": m.get("run"), "path": s.get("path"), "file": s.get("file"),
                        "records": s.get("records", 0), "bytes": s.get("bytes", 0), "at": s.get("at"),
                        "code": Finding.LATE_WRITES_SALVAGED if s.get("file") else Finding.LATE_WRITES_KEPT})
    return out


def _f(code: Finding, op_id, run, detail: str, nbytes: int = 0) -> dict:
    return {"code": code, "op_id": op_id, "run": run, "detail": detail, "bytes": nbytes}


__all__ = ["settle_command", "unfinished_ops", "catalogue_problems", "late_writes"]
