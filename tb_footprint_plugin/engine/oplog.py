"""The vault's operation log: the vault describes itself, so a lost manifest is rebuilt.

A manifest (``<vault>/ops/<op_id>.json``) is rewritten whenever its operation's state changes
(committed, restored, salvaged, purged). Each state is first appended to the operation's log
``<vault>/oplog/<op_id>.jsonl`` (one fsynced JSON line), then the manifest is replaced
atomically, so the log always knows at least what the manifest says. A manifest that is
deleted or corrupt is rebuilt from the last state in the log (``rebuild_manifests``), and a
purge killed half-way is finished from the intent it recorded there before deleting a blob.

What is logged is what a rebuild needs, once: the first state of an operation in full but for
its descriptive bulk (``NOT_LOGGED``: the plan's action list, which ``files`` and
``removed_dirs`` repeat, and the verification's check texts) and what follows from the rest
(each backup's blob name: put back by the rebuild), each later state only as the
top-level fields it changed (``manifest_change``); the newest state is the first one with the
changes folded in (``last_state``). This keeps the log a few hundred bytes an operation.

A log is untrusted input read line by line (``trust.read_json_lines``): a line that is not a
UTF-8 JSON object is skipped and reported with its file and line number (``read_log``),
every other line still counts. What a damaged line said is unknown, so nothing is decided
past it: a manifest is not rebuilt when a damaged line follows its first state (it may have
been a change), and a purge intent followed by one is not finished (its blobs are kept: the
safe direction).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from tb_footprint_plugin.engine import trust
from tb_footprint_plugin.storage.files import append_line

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
    path = log_path(vault_root, op_id)
    line = json.dumps(dict(record, t=time.time()), sort_keys=True, separators=(",", ":")) + "\n"
    # the line is known here, so a failed append's undo can tell its own bytes from another writer's
    with trust.undo_partial_append(path, line):
        append_line(path, line)


#: descriptive parts of a manifest a rebuild does without (bulky, never acted on): top-level
#: key -> its sub-keys left out of the log
NOT_LOGGED = {"plan": ("actions", "fidelity_details"), "verification": ("checks",)}


def _loggable(manifest: dict) -> dict:
    out = dict(manifest)
    for key, subs in NOT_LOGGED.items():
        if isinstance(out.get(key), dict):
            out[key] = {k: v for k, v in out[key].items() if k not in subs}
    # what the rebuild derives again (``_derived``): a backup's blob is the one its digest names
    # (~85 bytes a backed-up file)
    files = out.get("files")
    if isinstance(files, list) and files and all(isinstance(f, dict) and f.get("blob") is not None
                                                 and f["blob"] == _blob_of(f.get("sha256")) for f in files):
        out["files"] = [{k: v for k, v in f.items() if k != "blob"} for f in files]
        out[_BLOBS_DERIVED] = True
    return out


#: a logged state whose backups' blob names were left out (every one the blob of its digest)
_BLOBS_DERIVED = "blobs_by_digest"


def _blob_of(sha) -> Optional[str]:
    return f"blobs/{sha[:2]}/{sha}" if isinstance(sha, str) and len(sha) == 64 else None


def _derived(state: dict) -> dict:
    """A logged state with what ``_loggable`` left out because it follows from the rest put back."""
    out = dict(state)
    if out.pop(_BLOBS_DERIVED, None) is True and isinstance(out.get("files"), list):
        out["files"] = [dict(f, blob=_blob_of(f.get("sha256"))) if isinstance(f, dict) and _blob_of(f.get("sha256"))
                        else f for f in out["files"]]
    return out


def record_manifest(vault_root: str, manifest: dict) -> None:
    """Log a manifest's new state (call before the manifest itself is replaced): in full (but
    ``NOT_LOGGED``) when the log holds no state it can build on, else only the top-level fields
    that changed since the state the log folds to."""
    state = _loggable(manifest)
    op_id = manifest["op_id"]
    prev = None
    if os.path.exists(log_path(vault_root, op_id)):
        log = read_log(vault_root, op_id)
        if not log.damaged_after(last_state_line(log)):  # a damaged line: what it said is unknown
            prev = last_state(log)
    if prev is None:
        append(vault_root, op_id, {"type": "manifest", "manifest": state})
        return
    changed = {k: v for k, v in state.items() if k not in prev or prev[k] != v}
    gone = sorted(k for k in prev if k not in state)
    if changed or gone:
        append(vault_root, op_id, {"type": "manifest_change", "set": changed, "unset": gone})


def read_log(vault_root: str, op_id: str) -> trust.JsonLines:
    """An operation's log, line by line: its records and its damaged lines."""
    return trust.read_json_lines(log_path(vault_root, op_id))


def records(vault_root: str, op_id: str) -> List[dict]:
    """The records of an operation's log that parse (its damaged lines: ``read_log``)."""
    return read_log(vault_root, op_id).records


def logged_ops(vault_root: str) -> List[str]:
    d = oplog_dir(vault_root)
    if not os.path.isdir(d):
        return []
    return sorted(n[: -len(".jsonl")] for n in os.listdir(d) if n.endswith(".jsonl") and not n.startswith("."))


def _records_and_lines(log) -> list:
    if isinstance(log, trust.JsonLines):
        return list(zip(log.records, log.lines))
    return [(r, 0) for r in log]


def last_state(log) -> Optional[dict]:
    """The newest manifest state in a log (its records, or a ``trust.JsonLines``): its last full
    state with every later change folded in."""
    state = None
    for r, _n in _records_and_lines(log):
        if r.get("type") == "manifest" and isinstance(r.get("manifest"), dict):
            state = dict(r["manifest"])
        elif r.get("type") == "manifest_change" and state is not None:
            if isinstance(r.get("set"), dict):
                state.update(r["set"])
            if isinstance(r.get("unset"), list):
                for k in r["unset"]:
                    if isinstance(k, str):
                        state.pop(k, None)
    return state


def last_state_line(log: trust.JsonLines) -> int:
    """The line of the newest full manifest state, which later changes build on (0: none): a
    damaged line after it may have been one of them."""
    return next((n for r, n in reversed(_records_and_lines(log))
                 if r.get("type") == "manifest" and isinstance(r.get("manifest"), dict)), 0)


def purge_intent(log) -> Optional[dict]:
    """The intent of a purge that did not finish, if any. Given a ``trust.JsonLines``, an intent
    followed by a damaged line is none: that line may be its end, so it is not finished again."""
    intent, at = None, 0
    for r, n in _records_and_lines(log):
        if r.get("type") == "purge":
            intent, at = r, n
        elif r.get("type") in ("purged", "purge_abandoned"):
            intent = None
    if intent is not None and isinstance(log, trust.JsonLines) and log.damaged_after(at):
        return None
    return intent


def manifest_readable(path: str, op_id: str) -> bool:
    """Whether the manifest file parses as a manifest of ``op_id`` (any damage: False)."""
    try:
        m = trust.read_json_file(path)
    except (OSError, trust.Untrusted):
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
        log = read_log(vault.root, op_id)
        state = last_state(log)
        if state is None:
            continue  # logged only a purge of a manifest written before logs existed
        what = "corrupt" if os.path.exists(path) else "missing"
        if log.damaged_after(last_state_line(log)):
            # a newer state may be on the damaged line: an older one could claim a purged or
            # restored backup back; the manifest stays as it is (its blobs are kept) and is named
            bad = next(d for d in log.damaged if d.line > last_state_line(log))
            out.append(CatalogueFinding(MANIFEST_LOST, op_id, f"manifest of {op_id} is {what} and not rebuilt: "
                                        f"{log.path} line {bad.line}, after its last readable state, is damaged; "
                                        "its backups are kept", vault.root))
            continue
        m = dict(_derived(state), rebuilt={"at": time.time(), "was": what, "from": os.path.relpath(
            log_path(vault.root, op_id), vault.root), "not_logged": {k: list(v) for k, v in NOT_LOGGED.items()}})
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
           "append", "record_manifest", "NOT_LOGGED", "records", "read_log", "logged_ops", "last_state",
           "last_state_line", "purge_intent",
           "rebuild_manifests", "orphan_blobs", "manifest_readable"]
