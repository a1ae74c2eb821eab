"""What the catalogue says of an operation, on every store (issue #26 item 2): which manifests
are kept reductions (restorable), whether an operation's backup is still kept, what a reduction
removed from the logdir, and the summary row the operations list shows (``restorable`` and
``restore_note`` by the one rule: of one run, only the newest kept reduction). A disk's catalogue
(``engine.catalogue``, which re-exports these) and a bucket's (``engine.bucket_catalogue``,
``engine.front_bucket``) read their manifests their own way, then ask these; nothing here reads
or writes a store. Manifests are in the one schema (``engine.manifest.read``) or older shapes:
every field is read with ``get``.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import retire_rules
from tb_footprint_plugin.engine.history import finite
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.storage.paths import is_op_id


def rolled_back_keeping(m: dict, kept: List[str], code: Optional[str] = None) -> dict:
    """Reduction ``m``'s manifest as what its rollback did when it kept backups (review R8 F6):
    rolled back (``code``: the cause's), nothing saved (``bytes_after`` = ``bytes_before``), the
    ``kept`` paths' originals left in the vault (``not_restored``, read as a restore's: status
    lists them with their bring-back command, purge keeps their copies, ``vault_keeps`` counts
    them). Not purged: every backup stays named (a blob folder forgets none of them)."""
    out = dict(m, outcome=str(Outcome.ROLLED_BACK), bytes_after=m.get("bytes_before"), not_restored=list(kept))
    return dict(out, code=str(code)) if code else out


def is_rolled_back_keeping(m: dict) -> bool:
    """A reduction whose rollback left originals in the vault (``rolled_back_keeping``)."""
    return m.get("kind") == "reduce" and m.get("outcome") == Outcome.ROLLED_BACK and bool(m.get("not_restored"))


def is_verified_reduction(m: dict) -> bool:
    """A reduction that verified (whatever became of its backup since)."""
    return m.get("kind") == "reduce" and m.get("outcome") == Outcome.VERIFIED


def is_kept(m: dict) -> bool:
    """A verified reduction whose backup is kept and that was not restored yet."""
    return is_verified_reduction(m) and backup_kept(m)


def backup_kept(m: dict) -> bool:
    """An operation whose backup is still kept: neither purged nor given back by a restore."""
    return not m.get("backup_purged") and not m.get("restored_by")


def removed_bytes(m: dict) -> int:
    """What an operation took out of the logdir (``bytes_before`` - ``bytes_after``, never below 0)."""
    return max(0, (m.get("bytes_before") or 0) - (m.get("bytes_after") or 0))


def operation_summary(m: dict) -> dict:
    """One manifest as the operations list shows it (``restorable`` is set by ``summarize_operations``)."""
    ver = m.get("verification") or {}
    plan = m.get("plan") or {}
    return {
        "op_id": m.get("op_id"),
        "kind": m.get("kind"),
        "run": m.get("run"),
        "of_op": m.get("of_op"),
        "policy": (m.get("policy") or {}).get("name") if isinstance(m.get("policy"), dict) else m.get("policy"),
        "outcome": m.get("outcome"),
        "reason": m.get("reason"),
        "bytes_before": m.get("bytes_before"),
        "bytes_after": m.get("bytes_after"),
        "saved_bytes": removed_bytes(m) if is_verified_reduction(m) else 0,
        "started_at": m.get("started_at"),
        "finished_at": m.get("finished_at"),
        "backup_purged": bool(m.get("backup_purged")),
        "restored_by": m.get("restored_by"),
        "restored_at": m.get("restored_at"),
        "recovered": bool(m.get("recovered")),
        "backup_bytes": sum(int(f.get("size") or 0) for f in m.get("files", [])),
        "files": len(m.get("files", [])),
        "verified": bool(ver.get("ok")) if ver else None,
        "checks": [{"name": c.get("name"), "ok": c.get("ok"), "detail": c.get("detail")} for c in ver.get("checks", [])],
        "failed": list(ver.get("failed", [])),
        "has_series": bool(ver.get("scalar_series")),
        "fidelity": plan.get("fidelity", []),
        "restorable": False,
        "restore_note": None,
        # late writes put back into the run after this reduction, and a rebuilt manifest
        "salvaged": [{k: x.get(k) for k in ("path", "file", "records", "bytes", "at")} for x in m.get("salvaged", [])],
        "rebuilt": m.get("rebuilt"),
    }


def summarize_operations(manifests: List[dict]) -> List[dict]:
    """Summaries of ``manifests`` with ``restorable`` and ``restore_note`` set by the rule
    ``restorable_ops``/``restore_op`` apply: of one run, only the newest kept reduction. Every
    number in them is finite or None (``history.finite``), on every store."""
    out = [operation_summary(m) for m in manifests]
    newest: Dict[str, str] = {}
    for o, m in sorted(zip(out, manifests), key=lambda om: om[0].get("started_at") or 0, reverse=True):
        if not is_kept(m):
            if is_verified_reduction(m):
                o["restore_note"] = "restored" if m.get("restored_by") else "backup purged"
            continue
        if o["run"] not in newest:
            newest[o["run"]] = o["op_id"]
            o["restorable"] = True
        else:
            o["restore_note"] = f"restore the newer operation {newest[o['run']]} first"
    for o, m in zip(out, manifests):  # a retirement: the whole run comes back until it is purged
        if m.get("kind") == retire_rules.KIND and m.get("outcome") == Outcome.VERIFIED:
            o["restorable"] = backup_kept(m)
            o["restore_note"] = None if o["restorable"] else ("restored" if m.get("restored_by") else "purged")
            o["backup_bytes"] = int(m.get("bytes_before") or 0)
            o["files"] = len(m.get("tree", []))
            o["takes_along"] = retire_rules.taken_along(m)
        o["kept_bytes"] = vault_keeps(m)
        o["left_in_vault"] = len(left_in_vault(m, _entries(m)))
    # manifests are untrusted and the schema lets a time be infinite (and other fields hold any
    # number): the summaries are what the tab's JSON gives, where NaN or Infinity is no number (the
    # route answered the string "Infinity"). The rule above decided on the manifests as restore does.
    return [finite(o) for o in out]


def _size(f: object) -> int:
    """An entry's ``size`` (untrusted): a whole number of bytes, else 0."""
    n = f.get("size") if isinstance(f, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _entries(m: dict) -> Dict[str, dict]:
    """An operation's own entries by path, its copies' (``files``) first, then its tree's: once each."""
    out: Dict[str, dict] = {}
    for key in ("files", "tree"):
        held = m.get(key)
        for f in held if isinstance(held, list) else []:
            if isinstance(f, dict) and isinstance(f.get("path"), str):
                out.setdefault(f["path"], f)
    return out


#: a bucket retirement's file entry whose vault copy its restore let go (the entry's original went
#: back and was looked at once more): the restore's op id. A restore that left an original in the
#: vault (``not_restored``) marks the others so, in the write that marks the retirement restored,
#: before it deletes their copies; an entry without it keeps its copy (manifests written before it)
RELEASED_BY = "released_by"


def entry_released(m: dict, f: object) -> bool:
    """Whether entry ``f`` of restored operation ``m`` had its copy let go by that restore
    (``RELEASED_BY``). Untrusted: only a mark naming ``m``'s own restore (``restored_by``, an op
    id) counts; anything else keeps the copy."""
    by = m.get("restored_by")
    return is_op_id(by) and isinstance(f, dict) and f.get(RELEASED_BY) == by


def copies_bytes(m: dict) -> int:
    """What an operation's backups take in a bucket's vault as its purge counts them (and says it
    freed, in its row and in ``history``): its files' sizes (whole copies), but those its restore
    released (``entry_released``: gone already)."""
    return sum(f["size"] for f in m["files"] if not entry_released(m, f))


def vault_keeps(m: dict) -> int:
    """The bytes the vault keeps for operation ``m`` as its manifest says, on every store: what a
    purge of it would count and free (``purge_rules.kept_by_restore`` keeps a restored one with an
    original left whole). Nothing once purged or never verified; a reduction's backups until they
    go; a retirement's whole run until it is restored; after its restore, the copies its manifest
    still names (a bucket's ``files`` but those its restore released, ``entry_released``; a vault
    of blobs keeps them all until a purge) and every original its restore left in the vault
    (``not_restored``: a disk's ``files/<n>`` of those paths alone, the others went back), each
    path once."""
    if m.get("backup_purged"):
        return 0
    if is_rolled_back_keeping(m):  # every backup of the run stays with the kept ones
        return sum(_size(f) for f in m.get("files") or [])
    if m.get("outcome") != Outcome.VERIFIED:
        return 0
    if m.get("kind") == retire_rules.KIND:
        if not m.get("restored_by"):
            return int(m.get("bytes_before") or 0)
        entries = _entries(m)
        files = m.get("files") if isinstance(m.get("files"), list) else []
        held = {f["path"] for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)
                and not entry_released(m, f)}
        return sum(_size(entries[p]) for p in held.union(left_in_vault(m, entries)))
    if m.get("kind") == "reduce":
        return sum(_size(f) for f in m.get("files") or [])
    return 0


def left_in_vault(m: dict, entries: Mapping[str, object]) -> List[str]:
    """The paths whose originals restored operation ``m`` left in the vault (``not_restored``:
    another file stood at the path), in order, once each, on every store. The manifest is
    untrusted: only a path that is a string and one of the operation's own ``entries`` (its
    tree's, its files') is named."""
    held = m.get("not_restored")
    if not (m.get("restored_by") or is_rolled_back_keeping(m)) or not isinstance(held, list):
        return []
    return list(dict.fromkeys(h for h in held if isinstance(h, str) and h in entries))


def left_row(m: dict, path: str, size: Optional[int], sha256: Optional[str], blob: str, present: bool,
             bring_back: str) -> dict:
    """The ``kept_blobs`` row of an original ``m``'s restore left in the vault at ``blob`` (a
    disk's ``files/<n>``, a bucket's copy), the same fields on every store as a displaced
    content's row: named as the restore's history line names it, coded ``not_restored``."""
    restore_op = m.get("restored_by")
    return {"op_id": restore_op if is_op_id(restore_op) else m["op_id"], "kind": "restore", "of_op": m["op_id"],
            "run": m.get("run"), "path": path, "sha256": sha256, "size": size, "blob": blob, "present": present,
            "code": Finding.NOT_RESTORED, "late_records": 0, "late_records_file": None,
            "holds": f"{path}'s original, not put back by its "
                     + ("rollback" if is_rolled_back_keeping(m) else "restore") + ": another file stood there"
                     + (f" ({human_bytes(size)})" if size is not None else ""),
            "bring_back": bring_back}


__all__ = ["RELEASED_BY", "backup_kept", "copies_bytes", "entry_released", "is_kept", "is_rolled_back_keeping", "rolled_back_keeping", "is_verified_reduction", "operation_summary", "removed_bytes",
           "summarize_operations", "left_in_vault", "left_row", "vault_keeps"]
