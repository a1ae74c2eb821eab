"""The vault's operation log: the vault describes itself, so a lost manifest is rebuilt.

A manifest (``<vault>/ops/<op_id>.json``) is rewritten whenever its operation's state changes
(committed, restored, salvaged, purged). Each state is first appended to the operation's log
``<vault>/oplog/<op_id>.jsonl`` (one fsynced JSON line), then the manifest is replaced
atomically, so the log always knows at least what the manifest says. A manifest that is
deleted or corrupt is rebuilt from the last state in the log (``rebuild_manifests``), and a
purge killed half-way is finished from the intent it recorded there before deleting a blob.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from tb_footprint_plugin.engine.journal import Journal

OPLOG = "oplog"

# codes of what a check of the catalogue found
MANIFEST_REBUILT = "manifest_rebuilt"
MANIFEST_LOST = "manifest_unrecoverable"  # corrupt or missing and no log to rebuild it from


@dataclass
class CatalogueFinding:
    """One piece of damage found in a vault's catalogue, and what was done about it."""

    code: str
    op_id: Optional[str]
    detail: str
    vault: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def oplog_dir(vault_root: str) -> str:
    return os.path.join(vault_root, OPLOG)


def log_path(vault_root: str, op_id: str) -> str:
    return os.path.join(oplog_dir(vault_root), f"{op_id}.jsonl")


def append(vault_root: str, op_id: str, record: dict) -> None:
    """Append one fsynced record to an operation's log (made if the operation predates logs)."""
    os.makedirs(oplog_dir(vault_root), exist_ok=True)
    Journal(log_path(vault_root, op_id)).append(record)


def record_manifest(vault_root: str, manifest: dict) -> None:
    """Log a manifest's new state (call before the manifest itself is replaced)."""
    append(vault_root, manifest["op_id"], {"type": "manifest", "manifest": manifest})


def records(vault_root: str, op_id: str) -> List[dict]:
    return Journal(log_path(vault_root, op_id)).records()


def logged_ops(vault_root: str) -> List[str]:
    d = oplog_dir(vault_root)
    if not os.path.isdir(d):
        return []
    return sorted(n[: -len(".jsonl")] for n in os.listdir(d) if n.endswith(".jsonl") and not n.startswith("."))


def last_state(recs: List[dict]) -> Optional[dict]:
    """The newest manifest state in a log."""
    return next((r["manifest"] for r in reversed(recs)
                 if r.get("type") == "manifest" and isinstance(r.get("manifest"), dict)), None)


def purge_intent(recs: List[dict]) -> Optional[dict]:
    """The intent of a purge that did not finish, if any."""
    intent = None
    for r in recs:
        if r.get("type") == "purge":
            intent = r
        elif r.get("type") in ("purged", "purge_abandoned"):
            intent = None
    return intent


def manifest_readable(path: str, op_id: str) -> bool:
    try:
        with open(path, "r", encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and m.get("op_id") == op_id and isinstance(m.get("files", []), list)


def rebuild_manifests(vault) -> List[CatalogueFinding]:
    """Rebuild every missing or corrupt manifest of ``vault`` from its log; report the ones
    that cannot be (a manifest file that does not parse and has no log)."""
    out: List[CatalogueFinding] = []
    logged = set()
    for op_id in logged_ops(vault.root):
        logged.add(op_id)
        path = vault.manifest_path(op_id)
        if manifest_readable(path, op_id):
            continue
        state = last_state(records(vault.root, op_id))
        if state is None:
            continue  # logged only a purge of a manifest written before logs existed
        what = "corrupt" if os.path.exists(path) else "missing"
        m = dict(state, rebuilt={"at": time.time(), "was": what, "from": os.path.relpath(
            log_path(vault.root, op_id), vault.root)})
        if what == "corrupt":
            os.replace(path, path + f".corrupt-{int(time.time())}")  # kept for a post-mortem
        vault.write_manifest(m)
        out.append(CatalogueFinding(MANIFEST_REBUILT, op_id, f"manifest of {op_id} was {what}; rebuilt from "
                                    f"the vault's operation log", vault.root))
    if os.path.isdir(vault.ops):
        for name in sorted(os.listdir(vault.ops)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            op_id = name[: -len(".json")]
            if op_id not in logged and not manifest_readable(os.path.join(vault.ops, name), op_id):
                out.append(CatalogueFinding(MANIFEST_LOST, op_id, f"manifest {name} is corrupt and the vault has no "
                                            "log to rebuild it from; its backups are kept", vault.root))
    return out


def orphan_blobs(vault, referenced: set) -> Dict[str, int]:
    """Blobs no manifest refers to: sha256 → size. Never deleted by purge (they may be the only
    copy of something whose manifest was lost), only reported."""
    out: Dict[str, int] = {}
    if not os.path.isdir(vault.blobs):
        return out
    for sub in os.listdir(vault.blobs):
        d = os.path.join(vault.blobs, sub)
        if not os.path.isdir(d) or os.path.islink(d):
            continue
        for n in os.listdir(d):
            if len(n) == 64 and n not in referenced:
                try:
                    out[n] = os.lstat(os.path.join(d, n)).st_size
                except OSError:
                    continue
    return out


__all__ = ["OPLOG", "CatalogueFinding", "MANIFEST_REBUILT", "MANIFEST_LOST", "oplog_dir", "log_path",
           "append", "record_manifest", "records", "logged_ops", "last_state", "purge_intent",
           "rebuild_manifests", "orphan_blobs", "manifest_readable"]
