"""Late writes salvaged: records a writer appended to a backup after its reduction go back
into the run, where TensorBoard reads them.

A writer that kept its event file open through a reduction (one on another machine, which no
local check can see, or one that started writing between the last check and the swap) goes
on appending to the inode it holds. After the swap that inode is the vault's hard-linked
backup, so its new records live nowhere else. At every start the backups of kept reductions
are looked at (one ``lstat`` each); a blob longer than its manifest says is checked to still
begin with the backed-up bytes, and then:

* the complete records appended to it (CRC-checked; a trailing partial record is left for a
  later start: the writer may be in the middle of it) are written, byte for byte, to a new
  event file ``<file>.salvaged-NNN`` beside the reduced one: its name sorts right after it,
  so TensorBoard reads it next (Python's loader moves forward to it, Rust's reads every file).
  It takes that name as the folder's swap strategy says (``placement.put_in_place``: renamed,
  or copied under a journaled ``copying`` record, whose partial copy the next start removes);
* the grown blob is kept under its new digest (same inode: the writer keeps appending to it,
  and the next start salvages what comes next), and the manifest records both, so restore
  puts back the grown original and removes the salvaged file, and purge keeps it meanwhile.

A salvage is journaled like every other change; one interrupted before its manifest was
written is undone on recovery and simply done again. A backup that changed in any other way
(its first bytes differ) is never touched: it is reported as damaged.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import time
from dataclasses import asdict, dataclass
from typing import Collection, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Finding, Outcome, StoreError
from tb_footprint_plugin.scan.categories import is_summary_event_file_name
from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.history import append_history
from tb_footprint_plugin.engine.journal import Journal, OpJournal, Rec
from tb_footprint_plugin.engine.putback import copy_late_records
from tb_footprint_plugin.engine.staged_ident import left_at_staged_note
from tb_footprint_plugin.engine.placement import (copies_begun, folder_at, place_at_free_name,
                                                  put_in_place, starts_with, undo_new_name)
from tb_footprint_plugin.engine.run_lock import folder_capabilities
from tb_footprint_plugin.engine.swap_strategy import SwapStrategy, swap_strategy
from tb_footprint_plugin.storage.regular import open_regular, open_regular_at
from tb_footprint_plugin.engine.vault import Vault, restore_folder, who
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import (CHUNK, create_exclusive, fsync_dir, give_owner, only_ours_could_put,
                                               permission_bits, recorded_owner, sha256_stream)
from tb_footprint_plugin.storage.private import set_aside_at
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.version import __version__

SALVAGE_SUFFIX = ".salvaged-"
#: the longest file name (bytes) the file systems a logdir lives on take (Linux, macOS, ext4, xfs)
NAME_MAX = 255
_MARK = "~"  # sorts after every ASCII character but itself: what makes a shortened name sort after its file's


def salvage_name(path: str, k: int) -> str:
    """The ``k``-th name for records set aside beside ``path`` (relative or absolute): the
    file's own name plus ``.salvaged-NNN``, so it sorts right after it (TensorBoard's Python
    loader reads a run's event files in name order and moves forward only).

    When that would be longer than ``NAME_MAX`` bytes (a file named near the limit) the rename
    into it would fail with ENAMETOOLONG at every attempt, leaving a restore that can never
    finish (review R16 F14). The name is then a prefix of the file's name, ``~`` where the prefix
    ends (or the character after the file's own there, so the name still sorts after it),
    a short digest of the whole name (two long names with one prefix get two names), and the
    suffix; it keeps ``tfevents`` (what makes TensorBoard read a file) when the file's had it."""
    head, base = os.path.split(path)
    name = f"{base}{SALVAGE_SUFFIX}{k:03d}"
    if len(os.fsencode(name)) <= NAME_MAX:
        return os.path.join(head, name)
    digest = hashlib.sha256(os.fsencode(base)).hexdigest()[:12]
    for n in range(len(base) - 1, -1, -1):  # cut between characters, never inside one
        # the character put where the prefix ends must be above the file's own there
        mark = _MARK if base[n] < _MARK else chr(ord(base[n]) + 1)
        tag = "tfevents" if "tfevents" in base and "tfevents" not in base[:n] else ""
        try:
            name = f"{base[:n]}{mark}{tag}{SALVAGE_SUFFIX}{digest}-{k:03d}"
            if len(os.fsencode(name)) <= NAME_MAX:
                return os.path.join(head, name)
        except (UnicodeEncodeError, ValueError):
            continue  # no next character to write (an undecodable byte, the last code point)
    return os.path.join(head, f"{_MARK}tfevents{SALVAGE_SUFFIX}{digest}-{k:03d}")

SALVAGED = Finding.LATE_WRITES_SALVAGED  # complete records put back into the run
LATE_BYTES_KEPT = Finding.LATE_WRITES_KEPT  # grown, but nothing readable to put back (yet): kept in the vault
BACKUP_CHANGED = Finding.BACKUP_CHANGED  # not an append: the backed-up bytes themselves changed


@dataclass
class SalvageOutcome:
    """What a start found and did about one grown backup."""

    op_id: str
    run: str
    path: str
    code: str
    detail: str
    records: int = 0
    bytes: int = 0
    file: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


def _prefix_and_whole(path: str, prefix: int) -> Tuple[str, str, int]:
    """sha256 of the first ``prefix`` bytes and of the whole file (one pass), and its length."""
    hp, hw, n = hashlib.sha256(), hashlib.sha256(), 0
    with open_regular(path) as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            if n < prefix:
                hp.update(b[: prefix - n])
            hw.update(b)
            n += len(b)
    return hp.hexdigest(), hw.hexdigest(), n


def _owner_here(folder, owner: Optional[Tuple[int, int]]) -> Optional[Tuple[int, int]]:
    """Who a salvage file belongs to: the recorded owner of the file it is salvaged from (the
    restored file's own), else (a record written before owners were kept) the folder's owner
    (``folder``: its path, or a descriptor of it reached by the walk that follows no link)."""
    if owner is not None:
        return owner
    try:
        st = os.fstat(folder) if isinstance(folder, int) else os.lstat(folder)
    except OSError:
        return None
    return st.st_uid, st.st_gid


def clear_own_temp(tmp: str, dir_fd: int) -> None:
    """A killed attempt's file at the temporary name ``tmp`` (in the folder ``dir_fd``) removed
    before it is made again, as ``files.create_new`` clears one by path: a regular file of this
    user (its bytes are in the vault) removed where no one else could have put it
    (``files.only_ours_could_put``: a teammate may move the user's own file to a name it can
    predict, review R28 F2's class), anything else (a planted link, a FIFO, another
    user's file) set aside in that folder (``private.set_aside_at``: renamed, kept, never deleted)."""
    name = fsops.name_in(tmp, dir_fd)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and only_ours_could_put(os.fstat(dir_fd), st):
            fsops.unlink(tmp, dir_fd=dir_fd)
        else:
            set_aside_at(dir_fd, name)


def salvage_mode(recorded, dir_fd: int, path: str) -> int:
    """The mode a salvage file of ``path``'s late records gets once its content is complete
    (invariant 3: the run gives those records back readable as the file they were written to
    was; 0600 hid them from a TensorBoard of another user of the group, review R24's note): the
    original's recorded mode (``recorded``), else the mode of the file standing at ``path``'s name
    in the folder ``dir_fd`` (looked at without following a link: the file the records were
    appended to), else 0600. Permission bits only: never set-user-id, set-group-id or sticky."""
    if permission_bits(recorded) is not None:
        return permission_bits(recorded)
    try:
        st = os.stat(os.path.basename(path), dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return 0o600
    return stat.S_IMODE(st.st_mode) & 0o777 if stat.S_ISREG(st.st_mode) else 0o600


def keep_late_records(ctx, path: str, source: str, start: int, size: int, tmp_name: str,
                      owner: Optional[Tuple[int, int]] = None, strategy: Optional[SwapStrategy] = None,
                      journal: Optional[OpJournal] = None, begun: Collection[str] = (),
                      mode: Optional[int] = None) -> Optional[dict]:
    """Put the complete records ``source`` holds between ``start`` and ``size`` back into the run
    beside ``path`` (relative to the logdir), as the next free ``<path>.salvaged-NNN``.

    Used where an original goes back over a file a writer appended to after its reduction (a
    restore, a rollback): those records exist nowhere else in the run. ``source`` is a stable
    copy of that file (its vault blob). Idempotent: a salvage file beside ``path`` that already
    holds exactly these records is reused, so a restore finished after a crash writes it once.
    Returns ``{file, records, bytes, sha256, size, partial_bytes, corrupt}``, or None when no
    complete record is there. ``tmp_name``: the temporary file's name in that folder (one the
    caller sweeps after a crash). ``owner``: the recorded owner of ``path`` (``recorded_owner``),
    given to the salvage file when root (``_owner_here``), as to the file restored beside it.
    ``strategy``: how the file takes its name (``placement.put_in_place``; the folder's by
    default): renamed, or copied under a ``copying`` record written to ``journal``; ``begun``:
    the paths an earlier, killed attempt's ``copying`` records name, where the beginning of these
    records (``placement.partial_copy``) is that attempt's own partial copy, removed and written
    again under the same name: the records stand in the run once. ``mode``: the recorded mode of
    ``path``'s original, given to the salvage file once its content is complete (``salvage_mode``:
    permission bits only; none given, the mode of the file standing at ``path``).

    The temporary and the salvage file are made in the folder the logdir store's walk reaches
    without following a link (``vault_blobs.restore_folder``, invariant 4): a folder on the way
    that is (or is swapped for) a link is refused, ``TransactionError`` coded
    ``StoreError.SYMLINK`` naming ``path``; nothing is written outside the logdir and the records
    stay in ``source``, in the vault."""
    with _reached(path, restore_folder(ctx.abs(path), (ctx.store, ctx.key(path))), source) as dfd:
        return _keep_in(ctx, dfd, path, source, start, size, tmp_name, owner, strategy, journal, begun, mode)


@contextlib.contextmanager
def _reached(path: str, folder, source: str) -> Iterator[int]:
    """The descriptor of ``path``'s folder that ``folder`` (a walk that follows no link) opens; a
    link (or a file) on the way refused as ``TransactionError`` naming ``path`` (coded
    ``StoreError.SYMLINK`` for a link): the late records stay in ``source``, in the vault."""
    try:
        with folder as got:
            yield got if isinstance(got, int) else got[0]
    except StoreFailure as e:
        if e.code not in (StoreError.SYMLINK, StoreError.NOT_REGULAR):
            raise
        raise TransactionError(f"{path}: its folder is not reached without a link ({e}); the records written to it "
                               f"after the reduction were not put back beside it and stay in the vault ({source})",
                               StoreError.SYMLINK if e.code == StoreError.SYMLINK else None) from None


def _keep_in(ctx, dfd: int, path: str, source: str, start: int, size: int, tmp_name: str,
             owner: Optional[Tuple[int, int]], strategy: Optional[SwapStrategy], journal: Optional[OpJournal],
             begun: Collection[str], mode: Optional[int] = None) -> Optional[dict]:
    """``keep_late_records`` in the folder ``dfd`` its walk reached."""
    tmp = os.path.join(os.path.dirname(ctx.abs(path)), os.path.basename(tmp_name))
    mode = salvage_mode(mode, dfd, path)  # looked at before anything is made beside it
    # a planted thing at this (guessable) name is set aside, never followed (``clear_own_temp``)
    clear_own_temp(tmp, dfd)
    with open_regular(source) as src, os.fdopen(create_exclusive(tmp, 0o600, dfd), "wb") as dst:
        got = copy_late_records(src, start, size, dst, f"late records of {path}")
        records, nbytes = got["records"], got["bytes"]
        dst.flush()
        # root restoring a user's run: the records are the user's, as the file beside them
        give_owner(dst.fileno(), _owner_here(dfd, owner))
        os.fchmod(dst.fileno(), mode)  # once its content is complete (and after a chown)
        os.fsync(dst.fileno())
    if not records:
        fsops.unlink(tmp, dir_fd=dfd)
        return None
    sha = got["sha256"]
    # the next free salvage name, or the one an earlier, interrupted attempt wrote these records to
    # (renamed: its bytes tell it; copied: its ``copying`` record, ``placement.resume_copy``, which
    # gives it the records' owner: the user's, where a kill came before it)
    final, placed = place_at_free_name(ctx, lambda k: salvage_name(path, k), tmp, {"sha256": sha, "size": nbytes},
                                       strategy or swap_strategy(folder_capabilities()), journal, begun,
                                       {"owner": _owner_here(dfd, owner), "mode": mode}, reuse=True, dir_fd=dfd)
    if placed:
        os.fsync(dfd)
    return {"file": final, "records": records, "bytes": nbytes, "sha256": sha, "size": nbytes,
            "partial_bytes": got["partial_bytes"], "corrupt": got["corrupt"]}


def grown_backups(manifests: List[dict]) -> List[Tuple[dict, dict, int]]:
    """(manifest, file entry, blob size) for every kept backup longer than recorded (cheap)."""
    out = []
    for m in manifests:
        if m.get("kind") != "reduce" or m.get("outcome") != Outcome.VERIFIED or m.get("backup_purged"):
            continue
        vault = Vault(m["vault"])
        for f in m.get("files", []):
            try:
                st = os.lstat(vault.blob_path(f["sha256"]))
            except OSError:
                continue  # missing: damage, reported by verify and status
            if stat.S_ISREG(st.st_mode) and st.st_size > f["size"] and not _compacted(vault, f["sha256"]):
                out.append((m, f, st.st_size))
    return out


def _compacted(vault: Vault, sha: str) -> bool:
    """Whether the backup also exists as a ``.zst`` or in a pack of the vault: it was compacted or
    packed, which only ever happens once no descriptor anywhere writes the inode, so a plain blob
    beside it is not this run's writer's (another run's file stored under that digest, or a
    killed compaction's remains): its bytes are never attributed to this run."""
    try:
        if stat.S_ISREG(os.lstat(vault.zst_path(sha)).st_mode):
            return True
    except OSError:
        pass
    return remote_vault.packed_ref(vault.root, sha) is not None


def _salvage_name(ctx, m: dict, path: str) -> str:
    """The first ``salvage_name`` beside ``path`` that no salvage of ``m`` used and nothing stands
    at (a file, a folder, a link: never followed), looked up in ``path``'s folder as the logdir
    store's walk reaches it, never by path (invariant 4): a folder on the way that is a link is
    refused, ``TransactionError`` coded ``StoreError.SYMLINK`` naming ``path``, before anything
    is journaled or written; no outside folder's names are read. A missing folder holds none."""
    used = {s.get("file") for s in m.get("salvaged", [])}
    k = 1 + sum(1 for s in m.get("salvaged", []) if s.get("path") == path)
    with folder_at(ctx, path) as at:
        while True:
            name = salvage_name(path, k)
            if name not in used and (at is None or not _stands_in(at[0], os.path.basename(name))):
                return name
            k += 1


def _stands_in(dir_fd: int, name: str) -> bool:
    """Whether anything (a link never followed) stands at ``name`` in the folder ``dir_fd``."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def salvage_one(ctx, m: dict, f: dict, new_op_id) -> SalvageOutcome:
    """Salvage what was appended to the backup of ``f`` (an entry of manifest ``m``)."""
    vault = Vault(m["vault"])
    old_sha, old_size = f["sha256"], f["size"]  # ``f`` itself is updated to the new digest below
    blob = vault.blob_path(old_sha)
    out = SalvageOutcome(op_id=m["op_id"], run=m["run"], path=f["path"], code=Finding.RECOVERY_FAILED, detail="")
    got_prefix, new_sha, size = _prefix_and_whole(blob, f["size"])
    if got_prefix != f["sha256"] or _compacted(vault, old_sha):
        out.code = BACKUP_CHANGED
        out.detail = (f"backup of {f['path']} changed after the reduction (its first {f['size']} bytes no longer "
                      f"match); kept as is in {vault.root}, not salvaged" if got_prefix != f["sha256"] else
                      f"a plain file grew beside the compressed backup of {f['path']} in {vault.root}: not this "
                      "run's records (the backup was compacted once nothing wrote it); kept as is, not salvaged")
        return out
    start = int(f.get("salvaged_upto") or f["size"])
    event = is_summary_event_file_name(os.path.basename(f["path"]))
    final = _salvage_name(ctx, m, f["path"]) if event else None
    # the temporary and the salvage file made in the folder the logdir store's walk reaches, no link
    # followed (invariant 4): a link on the way is refused before anything is journaled or written
    with contextlib.ExitStack() as held:
        dfd = held.enter_context(_reached(f["path"], ctx.store.folder(ctx.key(final)), blob)) if final else None
        op_id = new_op_id()
        tmp = None
        if final:
            tmp = os.path.join(os.path.dirname(ctx.abs(final)), f".footprint-{op_id}-salvage.tmp")
        journal = Journal.create(ctx.journal_dir, op_id, {
            "type": Rec.BEGIN, "kind": "salvage", "op_id": op_id, "of_op": m["op_id"], "run": m["run"],
            "logdir": ctx.logdir, "vault": vault.root, "path": f["path"], "old_sha256": f["sha256"],
            "old_size": f["size"], "new_sha256": new_sha, "new_size": size, "from": start,
            "tmp": os.path.relpath(tmp, ctx.logdir) if tmp else None, "final": final,
        })
        records = nbytes = 0
        upto = start
        salv = None
        if final:
            mode = salvage_mode(f.get("mode"), dfd, f["path"])  # the original's (R24's note: was 0600)
            clear_own_temp(tmp, dfd)  # a planted thing at this (guessable) name set aside, never followed
            with open_regular(blob) as src, os.fdopen(create_exclusive(tmp, 0o600, dfd), "wb") as dst:
                got = copy_late_records(src, start, size, dst, f"backup of {f['path']}")
                records, nbytes = got["records"], got["bytes"]
                dst.flush()
                give_owner(dst.fileno(), _owner_here(dfd, recorded_owner(f)))
                os.fchmod(dst.fileno(), mode)  # once its content is complete (and after a chown)
                os.fsync(dst.fileno())
            upto = size - got["partial_bytes"]  # the end of the last whole record
            if records:
                with open_regular_at(dfd, os.path.basename(tmp)) as written:
                    salv = {"sha256": sha256_stream(written), "size": nbytes}
                journal.append({"type": Rec.STAGED, "tmp": os.path.relpath(tmp, ctx.logdir), "final": final, **salv})
            else:
                fsops.unlink(tmp, dir_fd=dfd)
            corrupt = got["corrupt"]
        else:
            corrupt = False
        # the grown backup under its new digest: a hard link, so the writer's inode stays the blob
        new_blob = vault.blob_path(new_sha)

        def link_in() -> None:
            if not os.path.lexists(new_blob):
                os.link(blob, new_blob)
            fsync_dir(os.path.dirname(new_blob))

        vault.in_shard(new_sha, link_in)  # its shard folder made (ours) again if a prune took it
        if salv:
            # renamed, or copied under a ``copying`` record where the folder does not rename
            put_in_place(swap_strategy(folder_capabilities()), journal, {"path": final, **salv}, new_name=True)(
                tmp, ctx.abs(final), src_dir_fd=dfd, dst_dir_fd=dfd)
            os.fsync(dfd)
    # commit point: the manifest says what the vault and the run now hold
    now = time.time()
    entry = {"at": now, "op": op_id, "path": f["path"], "from": start, "to": upto, "records": records,
             "bytes": nbytes, "backup_sha256": new_sha, "backup_size": size,
             "file": final if salv else None, "partial_bytes": size - upto, "corrupt": corrupt}
    if salv:
        entry.update(sha256=salv["sha256"], size=salv["size"])
    _apply(m, f, entry, vault)
    vault.write_manifest(m)
    journal.append({"type": Rec.COMMIT})
    # the old name goes once nothing refers to it (the same inode lives on under the new one)
    # only that name: a form of the old digest in any other file is no part of this inode
    if not any(x["sha256"] == old_sha for mm in vault.manifests() if not mm.get("backup_purged")
               for x in mm.get("files", [])):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(blob)
        with contextlib.suppress(FileNotFoundError):  # the emptied shard folder pruned meanwhile
            fsync_dir(os.path.dirname(blob))
    journal.close()
    out.records, out.bytes, out.file = records, nbytes, entry["file"]
    if salv:
        out.code = SALVAGED
        out.detail = (f"{records} record(s) written to {f['path']} after the reduction were salvaged into "
                      f"{final}; the grown backup is kept (sha256 {new_sha[:12]}…)")
    else:
        out.code = LATE_BYTES_KEPT
        out.detail = (f"{size - old_size} byte(s) were written to {f['path']} after the reduction"
                      + ("" if event else " (not an event file: nothing to put back)")
                      + f"; kept in the vault with its backup (sha256 {new_sha[:12]}…)")
    if corrupt:
        out.detail += "; the appended data has a corrupt record, salvaged up to it"
    append_history(ctx.state, {
        "op_id": op_id, "kind": "salvage", "run": m["run"], "policy": None, "before": None, "after": None,
        "verified": False, "outcome": out.code, "reason": out.detail, "backup_kept": True,
        "of_op": m["op_id"], "user": who()["user"], "host": who()["host"], "tool_version": __version__,
    })
    return out


def _apply(m: dict, f: dict, entry: dict, vault: Vault) -> None:
    """Record a salvage in manifest ``m`` (also used to replay it when a manifest is rebuilt)."""
    old = f["sha256"]
    for x in m.get("files", []):
        if x["sha256"] == old and x["path"] == f["path"]:
            x.setdefault("grew_from", []).append({"sha256": x["sha256"], "size": x["size"]})
            x["sha256"], x["size"] = entry["backup_sha256"], entry["backup_size"]
            x["blob"] = os.path.relpath(vault.blob_path(x["sha256"]), vault.root)
            x["salvaged_upto"] = entry["to"]
    m.setdefault("salvaged", []).append(entry)
    if entry.get("file"):
        m.setdefault("created", []).append({"path": entry["file"], "size": entry["size"],
                                            "sha256": entry["sha256"], "salvaged": True})


def finish_salvage(ctx, records: List[dict]) -> str:
    """Recovery of an interrupted salvage: committed → only tidy up; else undo (it is redone)."""
    begin = records[0]
    vault = Vault(begin["vault"])
    if any(r["type"] == Rec.COMMIT for r in records):
        return "salvage had been recorded"
    staged = next((r for r in records if r["type"] == Rec.STAGED), None)
    final = begin.get("final")
    # the temporary and the salvage file undone by the one rule (``placement.undo_new_name``): a
    # copy a kill stopped (a folder that does not rename, its ``copying`` record) emptied of its
    # beginning of the staged records, a whole one (nothing to give it) removed as a renamed one
    # is; each in its folder as the walk reaches it, a link on the way refused (nothing outside
    # removed; the journal kept, the next start tries again)
    left = undo_new_name(ctx, begin.get("tmp"), final, staged, bool(final) and final in copies_begun(records))
    old, new = vault.blob_path(begin["old_sha256"]), vault.blob_path(begin["new_sha256"])
    with contextlib.suppress(OSError):
        if os.path.samefile(old, new) and old != new:
            os.unlink(new)  # the old name still stands for the backup; the new link was ours
    note = left_at_staged_note([left] if left else [])
    return "interrupted salvage undone; it is done again now" + (f" ({note})" if note else "")


__all__ = ["SalvageOutcome", "grown_backups", "starts_with", "keep_late_records", "salvage_mode", "clear_own_temp", "salvage_one", "finish_salvage", "SALVAGE_SUFFIX",
           "NAME_MAX", "salvage_name",
           "SALVAGED", "LATE_BYTES_KEPT", "BACKUP_CHANGED"]
