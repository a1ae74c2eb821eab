"""What a bucket logdir's vault holds: status, history, the objects restores kept, and the
re-check of kept reductions without downloading; its manifests are read by ``bucket_manifests``."""
from __future__ import annotations

import hashlib
import os
import shlex
from typing import List, Optional, Tuple

from tb_footprint_plugin.codes import Failure, Finding, Outcome, StoreError
from tb_footprint_plugin.engine import manifest, usage
from tb_footprint_plugin.engine.health import history_findings
from tb_footprint_plugin.engine.bucket_blob_index import hidden_by_index
from tb_footprint_plugin.engine.bucket_blobs import check_entry, is_blob_entry, names_our_backup, put_back
from tb_footprint_plugin.engine.bucket_identity import entry_claimed
from tb_footprint_plugin.engine.bucket_manifests import manifests, own_manifests
from tb_footprint_plugin.engine.history import HISTORY, bucket_log, purge_line
from tb_footprint_plugin.engine.bucket_moved import MOVED_FROM, others_row, unsure_words
from tb_footprint_plugin.engine.bucket_recover import damaged_journals, damaged_locks
from tb_footprint_plugin.engine.bucket_state import (
    BucketState,
    BucketTxnError,
    BucketVault,
    run_listing,
    vault_url,
)
from tb_footprint_plugin.engine.bucket_steps import copy_matches, in_place, staged_match
from tb_footprint_plugin.engine.catalogue_rules import (backup_kept, copies_bytes, is_rolled_back_keeping, left_in_vault, left_row,
                                                        removed_bytes)
from tb_footprint_plugin.engine.retire_rules import KIND, retire_line, unretire_line
from tb_footprint_plugin.engine.checks import unchecked
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.engine.journal_object import pending_objects
from tb_footprint_plugin.engine.putback import restore_code
from tb_footprint_plugin.scan.categories import is_summary_event_file_name
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME, is_sha256
from tb_footprint_plugin.storage.remote import content_checksums, same_content
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


def recheck(ostore: ObjectStore, vault: BucketVault, *, run: Optional[str] = None,
            op: Optional[str] = None, cancel: Optional[CancelToken] = None,
            read: Optional[Tuple[List[dict], List[dict]]] = None) -> List[dict]:
    """Re-check kept bucket reductions without downloading: every backup object is still there
    with the checksums the store computed for the original, and every removed key is still
    absent from the logdir (or was put back by someone, which is reported). A damaged manifest
    (which may hide a backup) is a failed check naming it, unless one operation is asked for; one
    naming a backup outside the vault is a failed check (``Failure.REFUSED``) of its operation,
    never looked through (``own_manifests``).
    ``cancel``: looked at before each run and between its backups, as on a disk; the run under
    way and those after it are results ``checks.unchecked`` (code ``interrupted``), never ok.
    ``read``: ``(manifests, damaged)`` of the caller's reading of the manifests (``manifests`` with
    its problems), so that they are read once (the front chose the blob folder from them)."""
    out = []
    damaged: List[dict] = [] if read is None else read[1]
    refused: List[dict] = []
    stopped = (lambda: cancel.cancelled) if cancel is not None else (lambda: False)
    found = manifests(ostore, vault, damaged) if read is None else read[0]
    kept = [m for m in found if backup_kept(m)]  # restored or purged: nothing to check
    for m in own_manifests(ostore, vault, kept, refused):
        if (op is not None and m["op_id"] != op) or (run is not None and m["run"] != run):
            continue
        if stopped():
            out.append(unchecked({"op_id": m["op_id"], "run": m["run"]}))
            continue
        bad, unreadable, absent, back = [], [], 0, []
        hidden = False  # a blob missing only while an index object of the blob folder is damaged
        listing = run_listing(ostore, vault, m["run"])
        cut = False  # cancelled before every backup was looked at
        for f in m.get("files", []):
            if stopped():
                cut = True
                break
            try:
                if is_blob_entry(f):
                    if not check_entry(vault, f):  # read back whole from the blob vault and hashed
                        why = hidden_by_index(vault, f)
                        bad.append(f["path"] if why is None else f"{f['path']} ({why})")
                        hidden = hidden or why is not None
                elif not _copy_ok(BucketState.of(ostore).head(f["backup"]), f):
                    bad.append(f["path"])  # missing, resized, changed, or no checksum to vouch for it
            except StoreFailure as e:
                if e.code != StoreError.PERMISSION:
                    raise
                # a backup this user may not read is no damaged one: said apart, as a disk says it
                unreadable.append(f"{f['path']} ({e})")
            if in_place(f):
                if staged_match(listing.get(f["path"]), f):
                    absent += 1  # holds the reduced bytes this operation put there
                else:
                    back.append(f["path"])
            elif f["path"] in listing:
                back.append(f["path"])
            else:
                absent += 1
        checks = [
            {"name": "backups", "ok": not bad, "detail": f"{len(m.get('files', [])) - len(bad)} of "
             f"{len(m.get('files', []))} backups in the vault match the store's checksums of the originals"},
            {"name": "removed", "ok": True, "detail": f"{absent} removed or replaced file(s) still as the "
             "reduction left them"
             + (f"; {len(back)} exist again (written since), e.g. {back[0]}" if back else "")},
        ]
        if unreadable:
            checks[0] = {"name": "backups", "ok": False, "detail": f"{len(unreadable)} backup(s) this user may not "
                         f"read, e.g. {unreadable[0]}; " + checks[0]["detail"]}
        ok = not bad and not unreadable
        res = {"op_id": m["op_id"], "run": m["run"], "backups_ok": ok, "damaged_backups": bad,
               "unreadable_backups": unreadable, "verification": {"ok": ok, "checks": checks}, "ok": ok,
               **({"code": StoreError.PERMISSION} if unreadable else
                  {"code": Failure.BACKUP_INDEX_DAMAGED} if hidden else {})}
        # cancelled among its backups: what it found is kept, the rest was not looked at
        out.append(unchecked(dict(res, backups_ok=False, verification={})) if cut else res)
    # a manifest naming a backup outside the vault: a failed check naming it, the others checked
    # (as purge lists it and purges the rest)
    for p in refused:
        if (op is None or p["op_id"] == op) and (run is None or p["run"] == run):
            out.append({"op_id": p["op_id"], "run": p["run"], "ok": False, "backups_ok": False,
                        "damaged_backups": [], "unreadable_backups": [], "code": p["code"], "verification": {"ok": False, "checks": [
                            {"name": str(p["code"]), "ok": False, "detail": p["detail"]}]}})
    for p in damaged if op is None else []:
        out.append({"op_id": "-", "run": "(vault)", "ok": False, "backups_ok": False, "damaged_backups": [],
                    "unreadable_backups": [], "code": p["code"], "verification": {"ok": False, "checks": [
                        {"name": str(p["code"]), "ok": False, "detail": p["detail"]}]}})
    return out


def _copy_ok(info, f: dict) -> bool:
    """A server-side backup copy is there with the store's checksums of the original."""
    return info is not None and info.size == f.get("size") and \
        bool(same_content(content_checksums(info), f.get("checksums") or {}))


def history(ostore: ObjectStore, vault: BucketVault) -> List[dict]:
    """The change log of a bucket logdir, oldest first: its manifests (each operation's manifest
    is its record, marked when restored or purged) and the change-log object's lines of the
    reductions rolled back (``engine.history.bucket_log``: their manifests are gone), each with
    ``backup: none`` as a disk's ``history_view`` says it. An operation whose owner cannot be told
    (a listing failed) has a line saying so (``unsure_entry``), never none (review R15 L4)."""
    out = [line_entry(e) for e in bucket_log(BucketState.of(ostore).logdir_store()).read()]
    unsure: List[dict] = []
    for m in manifests(ostore, vault, unsure=unsure):
        out += entries_of(m)
    out += [unsure_entry(m) for m in unsure]
    out.sort(key=entry_when)
    return out


def unsure_entry(m: dict) -> dict:
    """The history's line of manifest ``m`` whose owner cannot be told (``bucket_moved.UNSURE``):
    when it finished, its op id, kind and run, coded ``whose_unknown`` with the words status and
    restore say of it (``unsure_words``: what could not be listed, retry once it lists); no sizes
    nor backup state, as it may be another logdir's."""
    return {"time": m["finished_at"], "op_id": m["op_id"], "kind": m["kind"], "run": m["run"],
            "outcome": Finding.WHOSE_UNKNOWN, "code": Finding.WHOSE_UNKNOWN, "reason": unsure_words(m),
            "backup": "unknown"}


def op_of(entry: dict) -> Optional[str]:
    """An entry's op id where it is a string (a change log's lines are untrusted: a list is no key)."""
    op = entry.get("op_id")
    return op if isinstance(op, str) else None


def entry_when(e: dict):
    """An entry's place in time in ``history``'s order (one that has none comes first)."""
    return e.get("time") if isinstance(e.get("time"), (int, float)) else 0


def line_entry(e: dict) -> dict:
    """A change-log line as ``history`` shows it."""
    if e.get("kind") == "reduce":  # no manifest stands behind a line (as ``history_view`` says)
        e["backup"] = "none" if not e.get("backup_kept") else "unknown"
    return e


def entries_of(m: dict) -> List[dict]:
    """The entries of one operation's manifest in ``history``, in order: its own line (a
    reduction's, a retirement's), its restore's, its purge's."""
    out = []
    kept = backup_kept(m)
    shard = m["shard"] if isinstance(m.get("shard"), str) else None
    if m["kind"] == KIND:  # a retirement's line, as a disk's change log has it
        tool = m.get("tool_version") if isinstance(m.get("tool_version"), str) else None
        out.append(dict(retire_line(m, Outcome.VERIFIED, kept=kept, tool_version=tool),
                        time=m["finished_at"], shard=shard))
    else:
        # a rollback that kept backups (``catalogue_rules.rolled_back_keeping``) is said as one:
        # nothing saved, nothing removed, its cause's code (review R8 F6's history line)
        rolled = is_rolled_back_keeping(m)
        out.append({"time": m["finished_at"], "op_id": m["op_id"], "kind": m["kind"], "run": m["run"],
                    "before": m.get("bytes_before"), "after": m.get("bytes_after"), "verified": not rolled,
                    "outcome": Outcome.ROLLED_BACK if rolled else Outcome.VERIFIED, "backup_kept": kept,
                    "policy": m.get("policy"), "user": m.get("user"), "host": m.get("host"), "shard": shard,
                    **({"code": m.get("code") if isinstance(m.get("code"), str) else None} if rolled else {})})
    if m["kind"] == "reduce":  # the columns a local history has (``local_views.history_view``)
        e = out[-1]
        e["removed_from_logdir_bytes"] = 0 if rolled else removed_bytes(m)
        e["freed_now_bytes"], e["freed_after_purge_bytes"] = (0, 0) if rolled else usage.bucket_freed_by_op(
            m, e["removed_from_logdir_bytes"])
        e["backup"] = "purged" if m["backup_purged"] else "kept"  # a restore keeps the copies: purge frees them
    if m["restored_at"] and m["kind"] == KIND:  # the restore's own op id, as a disk's line
        by = m.get("restored_with") if isinstance(m.get("restored_with"), dict) else {}
        out.append(dict(unretire_line(m, m["restored_by"], kept=not m["backup_purged"],
                                      **{k: by[k] if isinstance(by.get(k), str) else None for k in ("user", "host")}),
                        time=m["restored_at"]))
    elif m["restored_at"]:
        # what it found in the originals' places, coded as a disk's restore line (untrusted lists)
        shown = [d for d in m.get("displaced") or [] if isinstance(d, dict)] if isinstance(m.get("displaced"), list) else []
        left = [p for p in m.get("not_restored") or [] if isinstance(p, str)] if isinstance(m.get("not_restored"), list) else []
        out.append({"time": m["restored_at"], "op_id": m["op_id"], "kind": "restore", "run": m["run"],
                    "of_op": m["op_id"], "before": m.get("bytes_after"), "after": m.get("bytes_before"),
                    "verified": True, "outcome": Outcome.RESTORED, "backup_kept": not m["backup_purged"],
                    "policy": m.get("policy"), **(m.get("restored_with") or {}),
                    **({"code": restore_code(shown, left_in_vault=left)} if shown or left else {})})
    # a retirement's restore that moved its objects back marks it purged by that restore: no purge
    # line (a disk's history has none); a purge's line says what it freed, as its row did
    if m["backup_purged"] and not m.get("backup_released_by_restore"):
        # who purged, with which version and why, as the purge marked it: a disk's line (review R21 PD18)
        out.append({"time": m["purged_at"], **purge_line(m["op_id"], m["run"], copies_bytes(m), m.get("purged_with"))})
    return out


def status(ostore: ObjectStore, vault: BucketVault,
           read: Optional[Tuple[List[dict], List[dict], List[dict]]] = None) -> dict:
    """Unfinished operations (journals in the bucket), the vault and the operations it holds.
    ``read``: ``(manifests, problems, others)`` of the caller's reading of the manifests
    (``manifests`` with both lists), so that they are read once (the front chose the blob folder
    from them)."""
    journals = pending_objects(BucketState.of(ostore))  # one listing: the unfinished and the damaged ones
    pending = sorted(k.rsplit("/", 1)[-1].rsplit(".", 1)[0] for k, _ in journals)
    ops, vault_bytes, freed_now = [], 0, 0
    problems: List[dict] = [] if read is None else read[1]
    others: List[dict] = [] if read is None else read[2]
    found = manifests(ostore, vault, problems, others) if read is None else read[0]
    # one naming a backup outside the vault (planted, or this logdir's copy of another: R11 G3) is
    # named, as purge and re-check name it
    own_manifests(ostore, vault, found, problems)
    for m in found:
        size = sum(int(f.get("size") or 0) for f in m.get("files", []))
        if not m["backup_purged"]:
            vault_bytes += size
        if m["kind"] == "reduce" and not m["restored_at"]:
            # per operation as ``history`` counts it (``usage.bucket_freed_by_op``); a restored one's
            # bytes are back in the logdir: nothing of it is freed, as a disk's status counts it
            freed_now += usage.bucket_freed_by_op(m, removed_bytes(m))[0]
        ops.append({**{k: m[k] for k in (manifest.OP_ID, manifest.KIND, manifest.RUN, manifest.OUTCOME,
                                         manifest.REASON, manifest.BYTES_BEFORE, manifest.BYTES_AFTER,
                                         manifest.STARTED_AT, manifest.FINISHED_AT, manifest.BACKUP_PURGED,
                                         manifest.RESTORED_BY)},
                    **({"takes_along": list(m.get("takes_along") or [])} if m["kind"] == "retire" else {})})
    local = {}
    from tb_footprint_plugin.engine.bucket_blob_release import folder_orphans, missing_rows_of

    problems = problems + missing_rows_of(ostore, vault, found, problems + others)[1]
    if vault.blobs is not None and os.path.isdir(vault.blobs.folder):
        # what the folder holds as stored (compressed, packed), beside the originals' sizes above
        fig = vault.blobs.store.stats()
        local = {"vault_stored_bytes": fig["stored_bytes"], "vault_objects": fig["objects"] + fig["index_objects"]}
        if not any(p.get("code") in (Finding.MANIFEST_DAMAGED, Finding.WHOSE_UNKNOWN) for p in problems):  # may name any blob
            # its orphans, as a disk vault's, from the manifests read above (R9 F8's follow-up)
            problems = problems + folder_orphans(ostore, vault, found)
    problems += others_row(ostore, vault, others)
    return {**local, "logdir": ostore.url, "state_dir": ostore.url.rstrip("/") + "/" + STATE_DIR_NAME,
            "vaults": [f"{ostore.url.split('://', 1)[0]}://{vault.root}"] + ([vault.blobs.folder] if vault.blobs else []),
            "vault_bytes": vault_bytes, "freed_now_bytes": freed_now,
            "unfinished_operations": pending, "operations": ops, "ledger": None,
            "problems": problems + damaged_journals(ostore, dict(journals)) + damaged_locks(ostore)
            + history_problems(ostore),
            "kept_blobs": kept_objects(ostore, vault, found)}


def history_problems(ostore: ObjectStore) -> List[dict]:
    """The change log's damaged lines and lines with no time, named by URL and line as a disk's
    are (``ChangeLog.problems``, ``health.history_findings``); a log that cannot be read is named
    with its store's code."""
    log = bucket_log(BucketState.of(ostore).logdir_store())
    try:
        return history_findings(log.problems())
    except StoreFailure as e:
        name = log.name_of(HISTORY)
        return [{"code": e.code, "op_id": None, "run": None, "file": name,
                 "detail": f"{name}: change log not readable ({e}); its entries are not shown", "bytes": 0}]


#: how to copy an object kept in the vault back, per scheme (the store's own command-line tool)
_COPY_COMMAND = {"s3": "aws s3 cp", "gs": "gcloud storage cp", "gcs": "gcloud storage cp", "az": "azcopy copy"}


def kept_objects(ostore: ObjectStore, vault: BucketVault, found: Optional[List[dict]] = None) -> List[dict]:
    """Every object a restore kept in the vault in a file's place (the reduced object with records
    written after the reduction, an object written again at a removed original's key), as
    ``status`` lists them for a local logdir: what it holds,
    where its records went back into the run, whether it is still there and how to bring it back.
    Manifests are untrusted: an entry naming a key outside the vault's ``kept/`` is not listed.
    The originals a restore left in the vault (``not_restored``) are listed too (``_left_in_vault``)."""
    out = []
    for m in found if found is not None else manifests(ostore, vault):
        for d in m.get("displaced") or []:
            if not isinstance(d, dict) or not isinstance(d.get("path"), str) or \
                    not str(d.get("kept", "")).startswith(vault.root + "/kept/"):
                continue
            late = d.get("late_records") if isinstance(d.get("late_records"), dict) else {}
            blob = vault_url(ostore, d["kept"])
            size = d.get("size") if isinstance(d.get("size"), int) else None
            holds = f"{d['path']} as it stood before the restore ({size} bytes)"
            if late.get("file"):
                holds += (f": the reduced file with {late.get('records', 0)} record(s) written after the reduction, "
                          f"which are back in the run as {late['file']}")
            # beside the original, as a disk's: an event file's copy under a name TensorBoard does
            # not read (its records would show twice next to the restored original), else <path>.kept
            try:
                dest = ostore.url_of(_left_dest(ostore, d["path"], m["op_id"]))
            except ValueError:  # a path that is not a plain key of the logdir: never shown as one
                continue
            out.append({"op_id": m["op_id"], "kind": "restore", "of_op": m["op_id"], "run": m["run"],
                        "path": d["path"], "sha256": None, "size": size, "blob": blob,
                        "present": BucketState.of(ostore).head(d["kept"]) is not None,
                        "code": Finding.LATE_RECORDS_RESTORED if late.get("file") else Finding.DISPLACED_KEPT,
                        "late_records": late.get("records", 0), "late_records_file": late.get("file"),
                        "holds": holds,
                        "bring_back": f"{_COPY_COMMAND.get(ostore.scheme, 'copy')} {blob} {dest}"})
        out += _left_in_vault(ostore, vault, m)
    return out


def kept_key(path: str, op_id: str) -> str:
    """The key beside event file ``path`` a kept copy of it is brought back to: a name TensorBoard
    does not read (its records would show twice next to the file standing there), one of its own
    for each path of an operation (two kept event files of one folder never share one; review R6)."""
    folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    tag = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{folder}kept-{op_id}-{tag}.tfrecord"


def _left_dest(ostore: ObjectStore, path: str, op_id: str) -> str:
    """The key an original left in the vault at ``path`` is brought back to, beside the object
    standing there: ``<path>.kept``, an event file under a name TensorBoard does not read
    (``kept_key``). ``ValueError`` for a path that is not a plain key of the logdir."""
    key = kept_key(path, op_id) if is_summary_event_file_name(path.rsplit("/", 1)[-1]) else path + ".kept"
    ostore.url_of(key)  # refused here when it is no plain key
    return key


def _left_entries(vault: BucketVault, m: dict) -> dict:
    """Operation ``m``'s entries whose backup is this vault's (untrusted manifest): a plain key
    under its ``blobs/``, or a blob of its folder named by its digest; by path, once each."""
    backups: dict = {}
    for f in m.get("files") or []:
        if isinstance(f, dict) and isinstance(f.get("path"), str) and names_our_backup(vault, f) \
                and (not is_blob_entry(f) or is_sha256(f.get("sha256"))):
            backups.setdefault(f["path"], f)
    return backups


def _bring_back_command(ostore: ObjectStore, vault: BucketVault, m: dict, path: str, f: dict, dest: str) -> str:
    """The command that copies ``f``'s original out beside ``path``: the store's own copy command
    for a server-side copy; for a blob of a local ``--backup-dir`` folder (content-addressed,
    compressed or packed: no file a plain ``cp`` could take), ``tb-footprint vault bring-back``."""
    if not is_blob_entry(f):
        return f"{_COPY_COMMAND.get(ostore.scheme, 'copy')} {vault_url(ostore, f['backup'])} {ostore.url_of(dest)}"
    assert vault.blobs is not None
    return " ".join(["tb-footprint", "vault", "bring-back", shlex.quote(ostore.url_of("").rstrip("/")),
                     "--backup-dir", shlex.quote(vault.blobs.folder), "--op", shlex.quote(m["op_id"]),
                     "--path", shlex.quote(path)])


def _left_in_vault(ostore: ObjectStore, vault: BucketVault, m: dict) -> List[dict]:
    """The originals restored operation ``m`` (a retirement's, a reduction's) left in the vault
    (``not_restored``: another object stood at the key), each its own ``kept_objects`` row, as a
    disk's ``restore.kept_blobs`` lists a retirement's: its backup is the only copy, which nothing
    else lists once the run is back. The manifest is untrusted: a path not a string, with no
    entry, or whose backup is no plain key under the vault's ``blobs/`` (nor a blob of its folder
    named by digest) is not listed. An original kept in a local blob folder (``--backup-dir``) is
    listed when that folder is given (else nothing here can say where it is; purge keeps it), its
    command ``tb-footprint vault bring-back`` (``bring_back``)."""
    backups = _left_entries(vault, m)
    out = []
    for p in left_in_vault(m, backups):
        f = backups[p]
        if is_blob_entry(f) and vault.blobs is None:
            continue
        try:
            dest = _left_dest(ostore, p, m["op_id"])
        except ValueError:  # a path that is not a plain key of the logdir: never shown as one
            continue
        size = f.get("size") if isinstance(f.get("size"), int) and not isinstance(f.get("size"), bool) else None
        if is_blob_entry(f):
            bv = vault.blobs
            blob, sha = bv.folder, f["sha256"]
            # the folder's index says whether this logdir's blob is there (no read of its bytes)
            present = entry_claimed(bv, f) and bool(bv.store.candidates(sha))
        else:
            blob, sha = vault_url(ostore, f["backup"]), None
            present = BucketState.of(ostore).head(f["backup"]) is not None
        out.append(left_row(m, p, size, sha, blob, present, _bring_back_command(ostore, vault, m, p, f, dest)))
    return out


def bring_back(ostore: ObjectStore, vault: BucketVault, op_id: str, path: str) -> dict:
    """Copy the original that operation ``op_id``'s restore left in the vault at ``path`` (a
    ``not_restored`` row of ``kept_objects``) out beside it, to the key the row names
    (``<path>.kept``, an event file's ``kept-<op>-<tag>.tfrecord``): create-only (an object there
    is never overwritten) and checked (a blob streamed from the folder and hashed while read, a
    server-side copy by the store's checksums). Nothing in the vault changes. Returns ``{"path",
    "to", "bytes"}``; raises ``BucketTxnError`` (``not_found``: no such operation or original left;
    ``backup_damaged``; ``restore_blocked``: its folder not given; ``whose_unknown``: whose the
    operation is cannot be told, a listing failed) or ``StoreFailure``
    (``already_exists``: the key is taken)."""
    unsure: List[dict] = []
    found = [m for m in manifests(ostore, vault, unsure=unsure) if m.get("op_id") == op_id]
    told = [m for m in unsure if m.get("op_id") == op_id]
    if not found and told:  # whose it is cannot be told (a listing failed): said so, never "no such" (R15 L4)
        raise BucketTxnError(Finding.WHOSE_UNKNOWN, unsure_words(told[0]))
    if not found:
        raise BucketTxnError(Failure.NOT_FOUND, f"no operation {op_id!r} in the vault of {ostore.url_of('')}")
    m = found[0]
    backups = _left_entries(vault, m)
    if path not in left_in_vault(m, backups):
        raise BucketTxnError(Failure.NOT_FOUND, f"{path}: no original operation {op_id}'s restore left in the vault "
                                                "(tb-footprint status lists those it left)")
    f = backups[path]
    try:
        dest = _left_dest(ostore, path, m["op_id"])
    except ValueError as e:
        raise BucketTxnError(Failure.REFUSED, f"{path}: not a key of the logdir ({e}); nothing was written") from None
    if is_blob_entry(f):
        put_back(ostore, vault, dict(f, path=dest), moved_from=m.get(MOVED_FROM))  # create-only, hashed, checked
    else:
        res = BucketState.of(ostore).copy(f["backup"], ostore.path(dest), if_absent=True, size=f["size"])
        if not copy_matches(ostore, res, f, f["backup"], ostore.path(dest)):
            raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{path}: the copy made at {dest} does not match its original")
    return {"path": path, "to": ostore.url_of(dest), "bytes": f.get("size")}