"""What a bucket restore keeps in the vault in a file's place before its original goes back: the
bucket's side of the one rule of every store (``engine.putback``: whatever stood at an original's
path is kept in the vault, then the original put back; a disk keeps it as a blob, a bucket as an
object under the vault's ``kept/<op>/``, outside ``blobs/``: no purge of the operation removes it).

- **a grown reduced object** (``keep_grown``): the reduced object this operation made with records
  a resumed writer added after it, kept whole, its complete records put back into the run as the
  next free ``<file>.salvaged-NNN`` (``late_from_kept``, ``salvage_object``);
- **an object standing at a removed original's key** (``keep_standing``: a job wrote that name
  again since the reduce): kept whole at the version the restore read (a server-side copy
  conditional on that version, create-only, at a key named by the operation, the path and that
  version, so no other content ever takes it), checked against the checksums (or, sharing none,
  the bytes) it was read with; the caller records it in its journal before the copy and copies
  the original over the key conditional on that same version (a name written once more in
  between is left as it is, its original kept in the vault: ``not_restored``).

Both are ``displaced`` records of the manifest, listed by ``status`` (``bucket_catalogue.
kept_objects``: ``displaced_kept``, ``late_records_restored``) with the command that copies them
back, as a disk's restore lists its blobs.
"""
from __future__ import annotations

import base64
import hashlib
import io
from typing import Dict, List, Optional

from tb_footprint_plugin.codes import Failure, StoreError
from tb_footprint_plugin.engine import putback
from tb_footprint_plugin.engine.bucket_putback import beside_at_free_name
from tb_footprint_plugin.engine.bucket_state import BucketState, BucketTxnError, BucketVault
from tb_footprint_plugin.engine.bucket_steps import copy_matches
from tb_footprint_plugin.storage.remote import ObjectInfo, content_checksums, same_content
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


def _path_tag(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def grown_key(op_id: str, f: dict) -> str:
    """Where a restore keeps the grown object at ``f``'s key (relative to the vault root): named
    by operation and path, so a restore finished after a crash finds what it kept."""
    return f"kept/{op_id}/{_path_tag(f['path'])}"


def standing_key(op_id: str, f: dict, version: str) -> str:
    """Where a restore keeps the object standing at ``f``'s removed key at ``version`` (relative
    to the vault root): named by operation, path and version, so a restore finished after a crash
    finds it again, and another content written at the key later never takes it."""
    return f"kept/{op_id}/{_path_tag(f['path'])}-{hashlib.sha256(version.encode('utf-8')).hexdigest()[:16]}"


def standing_record(vault: BucketVault, op_id: str, f: dict, cur: ObjectInfo) -> dict:
    """The ``displaced`` record of the object ``cur`` standing at ``f``'s key, as the restore's
    journal holds it before the object is copied to the vault and the original over it."""
    return {"path": f["path"], "kept": f"{vault.root}/{standing_key(op_id, f, cur.version_token)}",
            "size": cur.size, "checksums": content_checksums(cur), "late_records": None}


def keep_standing(ostore: ObjectStore, vault: BucketVault, entry: dict, cur: ObjectInfo) -> bool:
    """Copy the object ``cur`` standing at ``entry['path']`` to ``entry['kept']`` (its
    ``standing_record``) server-side, conditional on the version read and create-only, and check
    the copy by the checksums ``cur`` was read with (reading both where they share none). A kept
    copy already there (a restore stopped after it) is taken when it is of that size and its
    checksums do not differ. Returns False when the key no longer holds that version (changed or
    deleted since it was read: nothing kept); ``BucketTxnError`` (``backup_damaged``) when the
    copy does not match."""
    state, src = BucketState.of(ostore), ostore.path(entry["path"])
    want = {"size": cur.size, "checksums": content_checksums(cur)}
    try:
        res = state.copy(src, entry["kept"], if_source_version=cur.version_token, if_absent=True, size=cur.size)
    except StoreFailure as e:
        if e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
            return False
        if e.code != StoreError.ALREADY_EXISTS:
            raise
        there = state.head(entry["kept"])
        if there is None or there.size != cur.size or same_content(content_checksums(there), want["checksums"]) is False:
            raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{entry['path']}: the copy kept in the vault at "
                                                         f"{entry['kept']} does not match it") from None
        return True
    if not copy_matches(ostore, res, want, src, entry["kept"]):
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{entry['path']}: the copy kept in the vault does not match it")
    return True


def journaled_standing(doc: dict, vault: BucketVault, op_id: str, paths: List[str]) -> List[dict]:
    """The ``displaced`` records a restore's journal ``doc`` holds (untrusted: a record is taken
    only when it names one of ``paths``, a key under this vault's ``kept/<op_id>/``, a size and
    checksums; anything else is left out, never followed)."""
    out: List[dict] = []
    recs = doc.get("displaced") if isinstance(doc.get("displaced"), list) else []
    for d in recs:
        if not isinstance(d, dict) or d.get("path") not in paths:
            continue
        kept, size, sums = d.get("kept"), d.get("size"), d.get("checksums")
        if not isinstance(kept, str) or not kept.startswith(f"{vault.root}/kept/{op_id}/") or "/" in \
                kept[len(f"{vault.root}/kept/{op_id}/"):] or ".." in kept or isinstance(size, bool) or \
                not isinstance(size, int) or not isinstance(sums, dict) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in sums.items()):
            continue
        out.append({"path": d["path"], "kept": kept, "size": size, "checksums": dict(sums), "late_records": None})
    return out


def keep_grown(ostore: ObjectStore, vault: BucketVault, op_id: str, f: dict, cur: Optional[ObjectInfo],
               present: Dict[str, ObjectInfo]) -> Optional[dict]:
    """When the object at a rewritten file's key is the reduced object this operation made with
    bytes written after it (``cur``), keep it whole in the vault (a server-side copy conditional
    on its version) and put its complete records after the reduced bytes back into the run as the
    next free ``<file>.salvaged-NNN`` (framing and CRCs checked by ``scan.tfrecord``; a trailing
    partial record stays only in the kept copy). Returns the ``displaced`` record for the
    manifest, or None when ``cur`` is anything else (then it is left as it is)."""
    new_size, new_sha = f.get("new_size"), f.get("new_sha256")
    if cur is None or not isinstance(new_size, int) or not isinstance(new_sha, str) or cur.size <= new_size:
        return None
    key = grown_key(op_id, f)
    kept = f"{vault.root}/{key}"
    try:
        res = BucketState.of(ostore).copy(ostore.path(f["path"]), kept, if_source_version=cur.version_token, size=cur.size)
    except StoreFailure as e:
        if e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
            return None  # changed again since it was looked at: left as it is
        raise
    if same_content(res.checksums, content_checksums(cur)) is False:
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: the copy kept in the vault does not match it")
    # read from the kept copy, which no writer changes: it must begin with the reduced bytes
    # (the rule a disk's grown file is judged by: ranged reads of a MiB, no head first)
    if not putback.begins_with(*BucketState.of(ostore).where(kept), new_size, new_sha):
        BucketState.of(ostore).delete([kept])  # a copy of an object left in the run as it is: not needed
        return None  # not an append to the reduced object
    return late_from_kept(ostore, vault, f, key, cur, present)


def late_from_kept(ostore: ObjectStore, vault: BucketVault, f: dict, key: str, info: ObjectInfo,
                   present: Dict[str, ObjectInfo]) -> dict:
    """The ``displaced`` record of a grown object kept in the vault at ``key`` (``info``: its
    metadata), its complete records after the reduced bytes salvaged into the run (idempotent)."""
    src = BucketState.of(ostore).open_read(f"{vault.root}/{key}", info.size)
    buf = io.BytesIO()
    got = putback.copy_late_records(src, int(f["new_size"]), info.size, buf, f"late records of {f['path']}")
    entry = {"path": f["path"], "kept": f"{vault.root}/{key}", "size": info.size,
             "checksums": content_checksums(info), "late_records": None}
    if got["records"]:
        data = buf.getvalue()
        name = salvage_object(ostore, f["path"], data, present)
        entry["late_records"] = {"file": name, "records": got["records"], "bytes": len(data),
                                 "partial_bytes": got["partial_bytes"], "corrupt": got["corrupt"]}
    return entry


def salvage_object(ostore: ObjectStore, path: str, data: bytes, present: Dict[str, ObjectInfo]) -> str:
    """Write ``data`` (whole records) as the next free ``<path>.salvaged-NNN`` (create-only); one
    an earlier, interrupted restore wrote with exactly these bytes is reused."""
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode("ascii")
    state = BucketState.of(ostore)

    def write(name: str) -> None:
        state.put(ostore.path(name), data, if_absent=True)

    def holds(name: str, info: ObjectInfo) -> bool:
        return info.size == len(data) and same_content(content_checksums(info), {"md5": md5}) and \
            state.read_bytes(ostore.path(name), limit=len(data)) == data

    # the walk every store shares, over the run's listing (``bucket_putback.beside_at_free_name``)
    return beside_at_free_name(ostore, path, present, write, holds)[0]


__all__ = ["grown_key", "standing_key", "standing_record", "keep_standing", "journaled_standing", "keep_grown",
           "late_from_kept", "salvage_object"]
