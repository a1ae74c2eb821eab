"""The swap and its inverse: put staged files in place, or put every original back.

Each helper is idempotent, because recovery after a crash runs it again on the same journal
records: the swap is finished (roll forward) only when verification passed and the swap was
recorded, otherwise the run is rolled back to its exact original bytes.

Why one module: the swap and its inverse are the two directions over the same journal records
and share their idempotence rules (what counts as done, what may be replaced); apart, the half
recovery runs forward and the half it runs back would drift.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from typing import Callable, Collection, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Failure, Skip, StoreError
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.catalogue import journal_blobs, vault_of, write_manifest
from tb_footprint_plugin.engine.context import Context, TransactionError, no_symlink
from tb_footprint_plugin.engine.journal import Journal
from tb_footprint_plugin.engine.putback import begins_with, holds_original
from tb_footprint_plugin.engine.run_lock import folder_capabilities
from tb_footprint_plugin.engine.placement import (IN_PLACE, copies_begun, folder_at, partial_copy, partial_copy_at,
                                                  partial_put_back, put_in_place, resume_at, resume_copy, settle_folder, stands_at,
                                                  starts_with, undo_new_name, version_at, version_in)
from tb_footprint_plugin.engine.relink import Relinks, link_groups
from tb_footprint_plugin.engine.staged_ident import has_ident, left_at_staged_note, left_at_temp_note, staged_replaced
from tb_footprint_plugin.engine.salvage import keep_late_records
from tb_footprint_plugin.engine.swap_strategy import SwapStrategy, swap_strategy
from tb_footprint_plugin.engine.vault import RESTORE_TMP_PREFIX, RESTORE_TOKEN, Vault, late_tmp_path, restore_tmp_path
from tb_footprint_plugin.plan.model import Action, RunPlan
from tb_footprint_plugin.scan.categories import is_summary_event_file_name
from tb_footprint_plugin.storage.files import (forget_staged, only_ours_could_put, plausible_id, recorded_owner,
                                               sha256_stream, unlink_if_same)
from tb_footprint_plugin.storage.openfiles import describe_holders, find_writers
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256, plausible_mtime_ns
from tb_footprint_plugin.storage.private import user_name
from tb_footprint_plugin.storage.store import StoreFailure


def removed_dirs_before(ctx: Context, rp: RunPlan) -> List[dict]:
    """The mode, mtime and owner of each folder the plan removes, taken before the swap changes any of
    them (the ``swap`` record keeps them): a swap killed after some unlinks and finished by
    recovery would otherwise find the folders' mtimes already changed by the unlinks."""
    out = []
    for a in rp.actions:
        if a.kind == "remove_dir":
            with contextlib.suppress(OSError, TransactionError):
                no_symlink(ctx, a.path)
                st = os.lstat(ctx.abs(a.path))
                if stat.S_ISDIR(st.st_mode):
                    out.append({"path": a.path, "mode": st.st_mode & 0o7777, "mtime_ns": st.st_mtime_ns,
                                "uid": st.st_uid, "gid": st.st_gid})
    return out


def _recorded_dirs(rp: RunPlan, recorded) -> Dict[str, dict]:
    """The swap record's folders (untrusted input) that the plan removes, with an integer mode and
    a plausible mtime; others are ignored (then taken from the folder, as before)."""
    removed = {a.path for a in rp.actions if a.kind == "remove_dir"}
    out: Dict[str, dict] = {}
    for d in recorded if isinstance(recorded, list) else ():
        if (isinstance(d, dict) and d.get("path") in removed and isinstance(d.get("mode"), int)
                and not isinstance(d.get("mode"), bool) and recorded_mtime_ns(d) is not None):
            out[d["path"]] = d
    return out


def apply_swap(ctx: Context, rp: RunPlan, journal: Journal, staged: List[dict], backups: Dict[str, dict],
               recorded_dirs: Optional[List[dict]] = None, strategy: Optional[SwapStrategy] = None,
               resuming: bool = False, begun_at: Iterable[str] = ()) -> None:
    """Idempotent: put staged files into place, unlink originals, remove emptied dirs.
    ``recorded_dirs``: the removed folders' mode and mtime from before the first change (the
    ``swap`` record's ``dirs``, ``removed_dirs_before``); without them (an older journal) each is
    taken from the folder at this call's start. ``strategy``: how a staged file takes its place
    (``swap_strategy``: renamed, or copied and then deleted; its folders fsynced where durability
    needs it), the folder's by default (recovery finishing a swap). ``resuming``: a swap an earlier
    attempt may have started (recovery's ``roll_forward``); only then can a partial copy at a name
    be the swap's own: on a first attempt whatever stands there is someone else's (review R17 F2);
    ``begun_at``: the new names its ``copying`` records name (``copies_begun``). Each staged file
    takes its path through ``placement.put_in_place`` (a new name's copy journaled once, an
    original's named by the ``swap`` record), a copy a killed attempt began there settled first
    (``placement.resume_copy``). Every placement, unlink, rmdir and folder fsync is made in the
    folder the logdir store's walk reaches after the look (``placement.folder_at``), never by path:
    a folder on the way swapped for a link since the look is refused, ``TransactionError`` coded
    ``StoreError.SYMLINK`` naming the path, nothing outside the logdir changed (invariant 4); the
    driver's rollback (or recovery, for ``roll_forward``) takes it from there."""
    strategy = strategy or swap_strategy(folder_capabilities())
    copying = resuming and not strategy.renames
    # the new names a copy was begun at (their ``copying`` records): only there can a partial copy
    # be the swap's own; anything else at a new name is someone else's (review R17 F2)
    begun = copies_begun(journal.written) | set(begun_at or ())
    recorded = _recorded_dirs(rp, recorded_dirs)
    finals = {s["final"] for s in staged}
    # the file each original's name held when its bytes were found the backup's: a dropped one's
    # name is unlinked, a rewritten one's replaced, only while it still holds that file (a teammate
    # who may write the run's folder can rename the user's other file over it meanwhile: review
    # R27, F3's class; R28 F3)
    held: Dict[str, os.stat_result] = {}
    for path, rec in backups.items():
        # only the bytes that were backed up may be replaced or removed
        no_symlink(ctx, path)
        key = ctx.key(path)
        done = any(s["final"] == path and (holds_original(ctx.store, key, s)
                                           or copying and partial_copy_at(ctx, path, s["tmp"], s)) for s in staged)
        looked = _lstat_path(ctx, path)
        if stands_at(ctx, path) and not done and not holds_original(ctx.store, key, rec):
            raise TransactionError(f"{path}: changed after it was backed up; not replaced",
                                   Failure.CHANGED_SINCE_BACKUP)
        if looked is not None and _same_file(looked, _lstat_path(ctx, path)):
            held[path] = looked
    # a folder's mtime changes as its files go: taken first, so a restore can give it back
    dir_mtimes = {}
    for a in rp.actions:
        if a.kind == "remove_dir":
            with contextlib.suppress(OSError):
                st = os.lstat(ctx.abs(a.path))
                if stat.S_ISDIR(st.st_mode):
                    dir_mtimes[a.path] = st.st_mtime_ns
    # an original's name is named by the ``swap`` record (after it the path holds the original, the
    # staged bytes or their beginning): its copy journals no ``copying`` record of its own
    named = begun | set(backups)
    dirs = set()  # logdir-relative: each fsynced as the walk reaches it
    for s in staged:  # each staged file the stage's own before the first goes in: a refusal changes nothing
        with _staged_folders(ctx, s) as (dfd, tfd):
            st = _lstat_in(tfd, os.path.basename(s["tmp"])) if tfd is not None else None
            if resuming and st is not None and tfd == dfd and \
                    _exchanged_before(ctx, s, backups.get(s["final"]), st, tfd):
                st = None
        if st is not None:
            _same_staged(s, st)
    for s in staged:
        no_symlink(ctx, s["final"])
        tmp, final = ctx.abs(s["tmp"]), ctx.abs(s["final"])
        # every change below is made in the folders the logdir store's walk reaches after the look,
        # never by a path: a folder on the way swapped for a link to an outside folder since the
        # look is refused (coded, naming it), nothing placed or unlinked out there (invariant 4)
        with _staged_folders(ctx, s) as (dfd, tfd):
            st = _lstat_in(tfd, os.path.basename(tmp)) if tfd is not None else None
            if st is not None:
                _same_staged(s, st)
                new_name = s["final"] not in backups
                # a copy a killed attempt began here (a new name its ``copying`` record names, an
                # original's when resuming on a copying folder): finished, or emptied and made again
                resumed = resume_copy(final, s, lambda q: partial_copy(q, tmp, s, dir_fd=dfd, src_dir_fd=tfd), _made_as(tmp, tfd),
                                      dir_fd=dfd) if (s["final"] in begun if new_name else copying) else None
                if new_name and resumed is None and stands_at(ctx, s["final"]) \
                        and not holds_original(ctx.store, ctx.key(s["final"]), s):
                    raise TransactionError(f"{s['final']}: appeared meanwhile; it would be overwritten")
                if new_name or not strategy.renames or tfd != dfd or not _exchange_in(s, held.get(s["final"]), dfd):
                    put_in_place(strategy, journal, {"path": s["final"], "sha256": s["sha256"], "size": s["size"]},
                                 begun=named, sparse=False)(tmp, final, src_dir_fd=tfd, dst_dir_fd=dfd)
        forget_staged(tmp)
        dirs.add(os.path.dirname(s["final"]))
        faults.hit("reduce.mid_swap")
    removed: set = set()  # the folders this call removed: nothing of them to fsync (their parents are)
    for path in backups:
        if path in finals:
            continue  # replaced in place by its rewrite
        with folder_at(ctx, path) as at:  # in its folder as the walk reaches it (a link: refused, coded)
            if at is not None and path in held:  # the whole path names it; its name is looked up in at[0]
                unlink_if_same(ctx.abs(path), held[path], dir_fd=at[0])
        dirs.add(os.path.dirname(path))
    going = _journal_rmdirs(ctx, rp, journal, recorded, dir_mtimes)
    for path in going:  # in the plan's order (a folder before its parent)
        with folder_at(ctx, path) as at:
            if at is None:
                continue
            try:
                fsops.op()
                # a link or a file standing there now is refused by rmdir itself (ENOTDIR)
                os.rmdir(at[1], dir_fd=at[0])
                dirs.add(os.path.dirname(path))
                removed.add(path)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR, errno.EBUSY):
                    raise
    for d in sorted(dirs - removed) if strategy.fsync else ():
        with folder_at(ctx, os.path.join(d, "x")) as at:  # the folder ``d`` itself, as the walk reaches it
            if at is not None:
                os.fsync(at[0])


def _journal_rmdirs(ctx: Context, rp: RunPlan, journal: Journal, recorded: Dict[str, dict],
                    dir_mtimes: Dict[str, int]) -> List[str]:
    """Journal an ``rmdir`` record (mode, mtime, owner: what a rollback or restore makes it again
    with) for each folder the plan removes that stands as a folder now, and return their paths.
    One fsync for them all, before any is removed: each record but the last is appended unsynced,
    the last synced (an fsync makes every earlier append of the file durable too), so a run whose
    reduction empties a thousand folders pays one fsync, not a thousand (#28), and every removal
    still follows its durable record. The records are the ones each folder had its own fsync for
    before: rollback, recovery and the manifest read old and new journals alike."""
    going: List[Tuple[str, dict]] = []
    for a in rp.actions:
        if a.kind != "remove_dir":
            continue
        with folder_at(ctx, a.path) as at:
            st = _lstat_in(at[0], at[1]) if at is not None else None
        if st is None or not stat.S_ISDIR(st.st_mode):
            continue  # gone, or a symlink or a file now: not ours to remove
        r = recorded.get(a.path)
        owner = recorded_owner(r) or (st.st_uid, st.st_gid)
        going.append((a.path, {"type": "rmdir", "path": a.path,
                               "mode": r["mode"] & 0o7777 if r else st.st_mode & 0o7777,
                               "mtime_ns": r["mtime_ns"] if r else dir_mtimes.get(a.path, st.st_mtime_ns),
                               "uid": owner[0], "gid": owner[1]}))
    for i, (_path, rec) in enumerate(going):
        journal.append(rec, sync=i == len(going) - 1)
    return [path for path, _rec in going]


@contextlib.contextmanager
def _staged_folders(ctx: Context, s: dict) -> Iterator[Tuple[Optional[int], Optional[int]]]:
    """Descriptors of the folders of a staged file's ``final`` and its ``tmp`` (one, when they
    share it: the stage puts it beside its original), each as ``placement.folder_at`` reaches it
    (a link on the way: its ``TransactionError`` coded ``StoreError.SYMLINK``, naming the path);
    None for a folder missing. A ``tmp`` standing where no folder of ``final`` does cannot take
    its place: refused, naming it."""
    with contextlib.ExitStack() as held:
        at = held.enter_context(folder_at(ctx, s["final"]))
        dfd = at[0] if at is not None else None
        if os.path.dirname(ctx.key(s["tmp"])) == os.path.dirname(ctx.key(s["final"])):
            tfd = dfd
        else:
            tat = held.enter_context(folder_at(ctx, s["tmp"]))
            tfd = tat[0] if tat is not None else None
        if dfd is None and tfd is not None and _lstat_in(tfd, os.path.basename(s["tmp"])) is not None:
            raise TransactionError(f"{s['final']}: its folder is gone; the staged file is not put in place")
        yield dfd, tfd


def _same_staged(s: dict, st: os.stat_result) -> None:
    """The file at a staged name is the one the stage made and took over (its ``ident``, inode and
    change time, recorded with it; untrusted, so only ever a reason to refuse): a file someone who may
    write the run's folder put there during the verification is never renamed into the run
    (review R27 F1's swap half). ``TransactionError`` coded ``refused``: the run rolls back."""
    if staged_replaced(s, st):
        raise TransactionError(f"{s['tmp']}: not the file this reduce staged there (another was put at its name "
                               "since: a folder others may write); not put in place", Failure.REFUSED)


def _exchange_in(s: dict, looked: Optional[os.stat_result], dfd: int) -> bool:
    """The staged file ``s`` swapped with its original's name in one atomic step (``throttle.exchange``;
    both in the folder ``dfd``), then the original, now at the staged name, removed while it is the
    file the swap's look found the backup's (``looked``; None: none was found there). A file someone
    renamed over the original's name since the look comes out there instead: swapped back at once,
    left where it was put, and the run refused (a rename onto the name replaced it, its only copy:
    review R28 F3). Nothing at the name (a resumed swap): the staged file renamed there create-only.
    False where the kernel or file system has no exchange: the caller renames as before."""
    tmp, final = os.path.basename(s["tmp"]), os.path.basename(s["final"])
    if _lstat_in(dfd, final) is None:
        fsops.rename_new(tmp, final, src_dir_fd=dfd, dst_dir_fd=dfd)
        return True
    try:
        fsops.exchange(tmp, final, dir_fd=dfd)
    except OSError as e:
        if e.errno in fsops.NO_EXCHANGE:
            return False
        raise
    if looked is not None and unlink_if_same(tmp, looked, dir_fd=dfd):
        return True
    fsops.exchange(tmp, final, dir_fd=dfd)
    raise TransactionError(f"{s['final']}: another file was put at its name during the swap (a folder others may "
                           "write); left where it was put, not replaced", Failure.REFUSED)


def _exchange_left(ctx: Context, s: dict, rec: Optional[dict]) -> bool:
    """Whether the staged file of ``s`` is in its original's place (its inode, the ``staged``
    record's, and its bytes) and its staged name holds the original's bytes (``rec``, its
    backup's): what an exchange (``_exchange_in``) a kill stopped before its unlink leaves; the
    swap is finished, not refused. By the inode too, not the bytes alone: copies of both files a
    teammate put at the two names would pass a look at bytes (review R28's note)."""
    if rec is None or not has_ident(s):
        return False
    with folder_at(ctx, s["final"]) as at:
        st = _lstat_in(at[0], at[1]) if at is not None else None
    return st is not None and st.st_ino == s["ident"][0] and holds_original(ctx.store, ctx.key(s["final"]), s) \
        and holds_original(ctx.store, ctx.key(s["tmp"]), rec)


def _exchanged_before(ctx: Context, s: dict, rec: Optional[dict], st: os.stat_result, tfd: int) -> bool:
    """Whether the file at the staged name of ``s`` (in the folder ``tfd``) is the original an
    exchange (``_exchange_in``) of a killed attempt left there, its staged file already in its
    place: removed then (its bytes are the backup's, in the vault) and True. A resumed swap's only."""
    if not staged_replaced(s, st) or not stat.S_ISREG(st.st_mode) or not _exchange_left(ctx, s, rec):
        return False
    return unlink_if_same(os.path.basename(s["tmp"]), st, dir_fd=tfd)


def _lstat_path(ctx: Context, path: str) -> Optional[os.stat_result]:
    """What stands at the logdir path ``path`` in its folder as the walk reaches it (never followed),
    None when nothing does or its folder is missing."""
    with folder_at(ctx, path) as at:
        return _lstat_in(at[0], at[1]) if at is not None else None


def _same_file(a: os.stat_result, b: Optional[os.stat_result]) -> bool:
    """Whether ``b`` is the regular file ``a`` (device and inode), unchanged in size and mtime."""
    return b is not None and stat.S_ISREG(a.st_mode) and (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) == \
        (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns)


def _lstat_in(dir_fd: int, name: str) -> Optional[os.stat_result]:
    """What stands at ``name`` in the folder ``dir_fd`` (never followed), None when nothing does."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _made_as(tmp: str, dir_fd: Optional[int] = None) -> dict:
    """The mode, mtime and owner a copy of the staged file ``tmp`` gets (``copy_over`` takes
    them from it, as a rename would leave them): what a resumed copy finishes with. ``dir_fd``:
    its folder (``throttle.name_in``), never followed."""
    st = os.stat(fsops.name_in(tmp, dir_fd), dir_fd=dir_fd, follow_symlinks=False)
    return {"mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns, "owner": (st.st_uid, st.st_gid)}


def rollback(ctx: Context, records: List[dict], reason: str, journal: Optional[Journal] = None,
             code: Optional[str] = None, unsettled: Optional[List[str]] = None) -> List[str]:
    """Put every original back byte for byte and remove what the operation created (``code``:
    why, as the outcome says it, for the manifest and the history line). With
    ``journal`` (the operation's), newer bytes found in an original's place are journaled as
    ``displaced`` before the original takes the path, so a rollback killed after it still names
    them in its manifest (they are in the vault; without the record only as a nameless blob).
    ``unsettled``: the recorded folders left without their mode and time (a link, or reached only
    through one: ``settle_dirs``) appended to it, for the caller's finding
    (``Finding.FOLDER_NOT_SETTLED``, issue #26), as ``finish_restore`` and ``rollback_retire`` do;
    the manifest's reason names them too (review R7 F6). Returns the paths whose original a writer
    replaced before the swap, kept in the vault (``not_put_back``; ``Finding.ORIGINAL_NOT_IN_PLACE``)."""
    vault = vault_of(records, ctx)
    backups = [r for r in records if r["type"] == "backup"]
    stages = {r["tmp"]: r for r in records if r["type"] in ("stage", "staged")}
    staged = {r["tmp"]: r for r in records if r["type"] == "staged"}
    rmdirs = [r for r in records if r["type"] == "rmdir"]
    remade = make_dirs(ctx, rmdirs)
    originals = {r["path"] for r in backups}
    swapped = any(r["type"] == "swap" for r in records)
    produced = {r["final"]: r for r in staged.values()}
    # the temp names of the put-backs carry the journaled token: a rollback killed while putting
    # a file back left exactly those, removed now (a journal without one: random names, left)
    token = put_back_token(records[0])
    left_temps: List[str] = []  # at its put-backs' names, files it cannot tell for its own (review R28 F2)
    if swapped:
        remove_put_back_temps(ctx, backups, token, left=left_temps)
        if not put_back_names_free(ctx, backups, token):
            token = None  # something else stands at a journaled name: fresh random names instead
    # what an earlier, killed attempt of this rollback found in an original's place (journaled
    # before that original went back: the path no longer shows it)
    displaced = _displaced_records(records)

    def remember(d: dict) -> None:
        # called at each look that stores content found in the path: a put-back that looks again
        # (the file changed before its place) stores each, and the manifest names every one
        if _listed(displaced, d):
            return
        if journal is not None:
            _journal_displaced(journal, d)
        displaced.append(d)

    strategy = swap_strategy(folder_capabilities())
    # only a swap that was recorded (begun) can have left a partial copy: before it, whatever
    # stands at a new name is someone else's (review R17 F2); an original's path so recorded is
    # a copying put-back's of an earlier, killed attempt of this rollback
    copying = swapped and not strategy.renames
    begun = copies_begun(records)
    # Before the swap no original was touched (backups are links or copies): the files in
    # place are the truth, even if a writer appended to one meanwhile. But an original a writer
    # replaced at its path (a new file renamed over it) is now nowhere but in its backup: kept in
    # the vault and named (``not_put_back``), never dropped with the others — the bucket's rule
    # (``bucket_steps.rollback_entry``, R8 F3), on every store (review R22 F4)
    for r in () if swapped else backups:
        if not original_stands(ctx, vault, r):
            remember({"path": r["path"], "sha256": r["sha256"], "size": r["size"], "not_put_back": True})
    # names of one inode at the backup go back as links of the first one put back (R17 F4)
    relinks = Relinks(ctx, {"files": link_groups([dict(r) for r in backups])})
    for r in backups if swapped else ():
        if relinks.linked(relinks.by_path.get(r["path"], r)):
            continue
        d = put_back(ctx, vault, r, produced.get(r["path"]), on_displaced=remember, tmp_token=token,
                     strategy=strategy, journal=journal, begun=begun)
        if d and not _listed(displaced, d):
            displaced.append(d)
    left_staged = []
    for tmp_rel, r in stages.items():
        final = r.get("final")
        new = final if final and final not in originals else None
        # the staged file removed, and what it made at a new name: a copy + delete swap killed
        # within its copy there (only where recorded) settled by the one rule (``resume_copy``)
        # while the staged file still tells it, a whole copy or rename undone; each in its folder
        # as the walk reaches it: a folder swapped for a link leads no unlink outside. A file that
        # is not the operation's own at a staged name stays, named in the manifest (review R27)
        left = undo_new_name(ctx, tmp_rel, new, staged.get(tmp_rel), copying and new in begun)
        if left:
            left_staged.append(left)
    left_unsettled = settle_dirs(ctx, rmdirs, remade)
    if unsettled is not None:
        unsettled.extend(left_unsettled)
    # named in the rollback's manifest (review R7 F6)
    note = "; ".join(n for n in (unsettled_note(left_unsettled), left_at_staged_note(left_staged),
                                  left_at_temp_note(left_temps)) if n)
    settle_folder_times(ctx, records[0].get("dir_times"))
    kept = {d["path"] for d in displaced if d.get("kept_in_place")}
    for r in backups if swapped else ():
        if r["path"] not in kept and not holds_original(ctx.store, ctx.key(r["path"]), r):
            raise TransactionError(f"{r['path']}: could not be put back")
    begin = records[0]
    remove_scratch(vault, begin["op_id"])
    write_manifest(ctx, records, "rolled_back", f"{reason}; {note}" if note else reason, displaced=displaced, code=code)
    with contextlib.suppress(OSError):
        vault.done_compaction(begin["op_id"])  # noted before a swap that did not stand
    # Blobs only this operation needed are dropped: the originals are back in place. A blob
    # another operation needs stays, as a copy of its own (it may be a link of a live file).
    # Blobs this rollback just kept for displaced content are needed too, even when their
    # content equals another original of this operation (same digest, same blob).
    keep = {d["sha256"] for d in displaced if d.get("sha256")}

    shas = {r["sha256"] for r in backups}
    kept: set = set()

    def needed() -> set:
        # read under the blobs' locks: a reduce of identical bytes elsewhere may commit while
        # this rollback runs (it pins, writes its manifest, unpins), a read before would miss it
        claimed = vault.referenced_blobs(exclude_ops=[begin["op_id"]]) | journal_blobs(ctx, begin["op_id"]) | keep
        kept.update(sha for sha in shas if sha in claimed)
        return claimed

    vault.delete_blobs(sorted(shas), needed)
    # a blob kept for a claim gets a copy of its own (it may be a link of a live file); one
    # deleted freed 0 bytes when it was such a link, so "freed" does not tell which were kept
    for sha in kept:
        if vault.has_blob(sha):
            vault.unshare(sha)
    return [d["path"] for d in displaced if d.get("not_put_back") is True]


def original_stands(ctx: Context, vault: Vault, r: dict) -> bool:
    """Whether the original backup record ``r`` names still stands at its path, perhaps grown (a
    writer appended records): the backup's own inode there (a hard-link backup), else its first
    ``size`` bytes the recorded ones, read without following a link. Not known (unreadable, a
    link, gone): False, the direction that keeps its backup."""
    try:
        here = os.lstat(ctx.abs(r["path"]))
        if not stat.S_ISREG(here.st_mode) or here.st_size < r["size"]:
            return False
        blob = os.stat(vault.blob_path(r["sha256"]))
        if (blob.st_dev, blob.st_ino) == (here.st_dev, here.st_ino):
            return True
    except (OSError, ValueError):
        pass
    try:
        return begins_with(ctx.store, ctx.key(r["path"]), r["size"], r["sha256"])
    except (OSError, ValueError):
        return False


def remove_scratch(vault: Vault, op_id: str) -> None:
    """Remove an operation's verification scratch space: only the symlinks the verification
    made and the then empty folders, never a whole tree (the op id came from a file)."""
    if not is_op_id(op_id):
        return
    folder = os.path.join(vault.tmp, op_id)
    if os.path.islink(folder) or not os.path.isdir(folder):
        return
    # the views' own folder (``tmp/<op>/views``), then where older versions made them (``tmp/<op>``)
    for views in (os.path.join(folder, "views"), folder):
        if os.path.islink(views) or not os.path.isdir(views):
            continue
        for sub in ("original", "reduced"):
            d = os.path.join(views, sub)
            if os.path.islink(d) or not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                p = os.path.join(d, name)
                if os.path.islink(p):
                    with contextlib.suppress(OSError):
                        os.unlink(p)
            with contextlib.suppress(OSError):
                os.rmdir(d)
        with contextlib.suppress(OSError):
            os.rmdir(views)  # the op folder stays while its pins are in it


def recorded_mtime_ns(rec: dict) -> Optional[int]:
    """A record's ``mtime_ns`` when it is a plausible integer (records are untrusted input;
    records written before it was kept have only the float ``mtime``)."""
    return plausible_mtime_ns(rec.get("mtime_ns"))


def make_dirs(ctx: Context, dirs: List[dict], refuse_theirs: bool = False) -> List[str]:
    """Re-create the recorded folders that are missing, shallowest first, owner-writable while
    files go back in (``settle_dirs`` gives each its recorded mode and mtime afterwards).
    Returns the paths it made. Each is made in its parent as the logdir store's walk reaches it,
    following no link (``PosixStore.folder(create=True)``, which makes a missing parent the same
    way), and given 0700 through its own descriptor: a folder on the way that is, or is swapped
    for, a link to a folder outside the logdir never receives one (invariant 4): the walk refuses
    it, ``TransactionError`` coded ``StoreError.SYMLINK`` naming the path. ``refuse_theirs`` (a
    restore's: a retired run's folders, or those a reduction removed, whose names anyone who may
    write in the folder above may have taken since): nothing is made inside one that is another
    user's (``_refuse_making_in_theirs``)."""
    made = []
    # whose each recorded folder may be: this user's, or the owner its record names
    owners = {d["path"]: plausible_id(d.get("uid")) for d in dirs} if refuse_theirs else {}
    for d in sorted(dirs, key=lambda d: len(d["path"])):
        no_symlink(ctx, d["path"])
        try:
            with ctx.store.folder(ctx.key(d["path"]), create=True) as (pfd, name):
                _refuse_making_in_theirs(pfd, os.path.dirname(d["path"]), owners)
                if _make_dir_in(pfd, name):
                    made.append(d["path"])
        except StoreFailure as e:
            if e.code not in (StoreError.SYMLINK, StoreError.NOT_REGULAR):
                raise
            raise TransactionError(f"{d['path']}: not reached without a link ({e}); the folder is not made, "
                                   "nothing is put back into it",
                                   StoreError.SYMLINK if e.code == StoreError.SYMLINK else None) from None
    return made


def folder_owners(dirs: List[dict], files: Iterable[dict] = (), run: str = "",
                  run_uid: Optional[int] = None) -> Dict[str, Set[Optional[int]]]:
    """The folders on the way to a reduction's originals from the run's own (the folders it
    removed, ``dirs``, those that hold its ``files``, and the run's folder), each with the owners
    its records allow besides this user: a removed folder's, and those of the files put back under
    it. The run's folder is asked too (review R25 F1: in a group-shared logdir without the sticky
    bit another user may rename our run away and put a folder of theirs at its name), allowing
    besides its files' recorded owners the one the reduction recorded for it (``run_uid``:
    another user's run taken on request, ``plan.owners``, still restores). A logdir that is itself
    the run is not asked: it is where the vault is."""
    owners: Dict[str, Set[Optional[int]]] = {}
    for d in dirs:
        if isinstance(d, dict) and isinstance(d.get("path"), str):
            owners.setdefault(d["path"], set()).add(plausible_id(d.get("uid")))
    top = run.rstrip("/") if run not in ("", ".") else ""
    for f in files:
        path = f.get("path") if isinstance(f, dict) else None
        if not isinstance(path, str):
            continue
        folder = os.path.dirname(path)
        while folder and (not top or folder == top or folder.startswith(top + "/")):
            owners.setdefault(folder, set()).add(plausible_id(f.get("uid")))
            if folder == top:
                break
            folder = os.path.dirname(folder)
    if top and run_uid is not None:
        owners.setdefault(top, set()).add(plausible_id(run_uid))
    return owners


def folder_uid(ctx: Context, path: str) -> Optional[int]:
    """The owner of the logdir folder ``path`` through its own descriptor, as the logdir store's
    walk reaches it (``placement.folder_at``), never by path; None when it is not reached (a link
    on the way, gone): recorded in a reduce's begin record (``run_uid``) for ``folder_owners``."""
    try:
        with folder_at(ctx, path) as at:
            if at is None:
                return None
            fd = os.open(at[1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at[0])
        try:
            return os.fstat(fd).st_uid
        finally:
            os.close(fd)
    except (OSError, ValueError, TransactionError):
        return None


def run_owner(ctx: Context, run: str) -> Dict[str, int]:
    """A reduce's begin record's ``run_uid`` (``folder_uid`` of the run's folder): empty for a
    logdir that is itself the run, or a folder not reached."""
    uid = folder_uid(ctx, run) if run not in ("", ".") else None
    return {} if uid is None else {"run_uid": uid}


def folders_theirs(ctx: Context, dirs: List[dict], files: Iterable[dict] = (), run: str = "",
                   run_uid: Optional[int] = None) -> Optional[str]:
    """Why a reduction's originals may not go back where they were, or None: a folder on the way to
    one of them (``folder_owners``) stands and is another user's than this one and than the owners
    its records name: made, or put in place of ours, since by someone who may write in the folder
    above (a shared group, a 0777 run). Put back there, the only copy of an original would sit where
    that user decides who reaches it, and the vault's copy is let go (review R24 F7, F7b). Asked
    before a restore's journal, nothing changed; ``make_dirs(refuse_theirs=True)`` asks again,
    through the folder's descriptor, as it makes each removed one, and ``put_back(owners=...)``
    through the descriptor of the folder each original takes its name in. Coded
    ``restore_blocked`` by the caller."""
    owners = folder_owners(dirs, files, run, run_uid)
    for path in sorted(owners, key=len):
        try:
            st = os.lstat(ctx.abs(path))
        except OSError:
            continue  # absent (made by the restore), or not reached: the walk refuses a link on the way
        if stat.S_ISDIR(st.st_mode) and not _allowed(st.st_uid, owners[path]):
            return (f"{path} is a folder of {user_name(st.st_uid)}, not this user's nor the recorded owner's of "
                    "what goes back into it (made or put there since the reduction): nothing is put back into "
                    "another user's folder (they could hide or delete the originals); nothing was changed, the "
                    "backups stay in the vault; its owner (or root) must move it away, then restore again")
    return None


def _allowed(uid: int, owners: Collection[Optional[int]]) -> bool:
    return uid == os.geteuid() or uid in owners


def _refuse_put_in_theirs(ctx: Context, dfd: int, path: str,
                          owners: Optional[Dict[str, Set[Optional[int]]]]) -> None:
    """The put-back's own look at whose the folders on the way to ``path`` are, below the run's
    own: one put in place of ours after the restore's first look (``folders_theirs``), while
    nothing needed making in it, receives nothing, and neither does a folder of ours inside it,
    which its owner could move out of our reach (review R24 F7's residual). The folder the original
    takes its name in is asked through its descriptor ``dfd`` (what the walk reached), those above
    it by name, following no link. ``TransactionError`` coded ``restore_blocked``; the temporary
    goes with it."""
    if not owners:
        return
    folder = os.path.dirname(path)
    while folder in owners:
        if folder == os.path.dirname(path):
            uid: Optional[int] = os.fstat(dfd).st_uid
        else:
            try:
                st = os.lstat(ctx.abs(folder))
            except OSError:
                st = None  # gone since the walk: the place's own checks meet that
            uid = st.st_uid if st is not None and stat.S_ISDIR(st.st_mode) else None
        if uid is not None and not _allowed(uid, owners[folder]):
            raise TransactionError(f"{folder} is a folder of {user_name(uid)}, put there since the restore's first "
                                   "look (not this user's, nor the recorded owner's of what goes back into it): "
                                   "nothing is put back into it; its originals stay in the vault; its owner (or "
                                   "root) must move it away", Failure.RESTORE_BLOCKED)
        folder = os.path.dirname(folder)


def _refuse_making_in_theirs(pfd: int, parent: str, owners: Dict[str, Optional[int]]) -> None:
    """Nothing is made inside a recorded folder (``parent``, open at ``pfd``: the folder the walk
    reached, so what is checked is what a folder would be made in) that is another user's than
    this one and than its recorded owner: one planted at a retired run's freed name (or a folder a
    reduction removed) in the instant after the restore's last look (review R22 F7's remainder,
    R24 F7) would otherwise receive our folders before the files' look refuses it. ``TransactionError`` coded
    ``restore_blocked``, nothing made; a parent that is not a recorded folder (the logdir, a
    folder above the run) is not asked."""
    if parent not in owners:
        return
    uid = os.fstat(pfd).st_uid
    if uid != os.geteuid() and uid != owners[parent]:
        raise TransactionError(f"{parent} is a folder of {user_name(uid)}, made there since (not "
                               "this user's, nor its recorded owner's): nothing is made or put back into it; the "
                               "run stays in the vault; its owner (or root) must move it away, then restore again",
                               Failure.RESTORE_BLOCKED)


def _make_dir_in(pfd: int, name: str) -> bool:
    """The folder ``name`` made in the folder ``pfd`` (0700, through its own descriptor, never a
    link), named durably there before its copy in the vault may go (a folder's own fsync does not
    order its parent's entry on every filesystem, review R11 F6); False when something stands there."""
    try:
        os.mkdir(name, 0o700, dir_fd=pfd)
    except FileExistsError:
        return False
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
    try:
        os.fchmod(fd, 0o700)  # whatever the umask left: owner-writable while files go back in
    finally:
        os.close(fd)
    os.fsync(pfd)
    return True


def settle_dirs(ctx: Context, dirs: List[dict], made) -> List[str]:
    """The recorded mode and (where recorded) mtime of each folder in ``made``, or of a recorded
    folder still 0700 as a killed earlier attempt made it (``made`` is lost when the operation
    is finished after a crash). Setting a folder's mtime does not touch its parent's; every
    file is back by now, so nothing changes them afterwards. Each through its own descriptor
    (``placement.settle_folder``: a folder reached through a link is left as it is). Returns the
    folders so left (a link, or reached only through one), for the caller to name (review R7 F6)."""
    made = set(made)
    unreached: List[str] = []
    for d in sorted(dirs, key=lambda d: len(d["path"]), reverse=True):
        # a folder this operation did not make (or already settled) is left as it is. A 0700 one is
        # taken for a killed attempt's own only where no one else could have put it there (its
        # parent a folder of the user's no one else may write): in a team folder a teammate may
        # rename the user's own private folder to that path, and settling it gave it the recorded
        # group and bits (review R28 F5: disclosed); it stays private then, and is named
        mine = d["path"] in made
        if not mine and not _parent_only_ours(ctx, d["path"]) and not _roots_own_in_theirs(ctx, d):
            with folder_at(ctx, os.path.join(d["path"], "x")) as at:
                st = os.fstat(at[0]) if at is not None else None
            if st is not None and (st.st_mode & 0o7777) == 0o700:
                unreached.append(d["path"])
            continue
        settle_folder(ctx, d["path"], d["mode"], recorded_mtime_ns(d), recorded_owner(d),
                      when=lambda st, mine=mine: mine or (st.st_mode & 0o7777) == 0o700 and st.st_uid == os.geteuid(),
                      unreached=unreached)
    return unreached


def _roots_own_in_theirs(ctx: Context, d: dict) -> bool:
    """Whether root restores a run recorded as another user's and the folder at ``d``'s path is
    root's own 0700 one: its killed attempt's (``make_dirs`` makes them root's until settled). That
    user could not have made a folder of root's, and one of root's private folders standing beside
    the user's run folder is none this rule has to fear."""
    if os.geteuid() != 0 or recorded_owner(d) in (None, (0, 0)) or (recorded_owner(d) or (0, 0))[0] == 0:
        return False
    st = _lstat_path(ctx, d["path"])
    return st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and (st.st_mode & 0o7777) == 0o700


def _parent_only_ours(ctx: Context, path: str) -> bool:
    """Whether the folder holding the logdir path ``path`` is the user's and no one else may write it."""
    parent = os.path.dirname(path)
    if parent:
        st = _lstat_path(ctx, parent)
    else:
        try:
            st = os.stat(ctx.logdir)
        except OSError:
            return False
    return st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def unsettled_note(folders: List[str]) -> str:
    """What a rollback or restore says of the recorded folders ``settle_dirs`` or
    ``retire_tree.chmod_dirs`` left (a link, or reached only through one); '' when none."""
    if not folders:
        return ""
    return (f"{len(folders)} recorded folder(s) reached only through a link, or a private one this operation "
            f"cannot tell for its own in a folder others may write, kept their mode and time, e.g. "
            f"{folders[0]}: its files are back, the folder's recorded mode and time are not")


def kept_folders(rp: RunPlan) -> List[str]:
    """The folders a reduce changes and keeps: the parents of its paths, less those it removes."""
    removed = {a.path for a in rp.actions if a.kind == "remove_dir"}
    return sorted({os.path.dirname(p) for a in rp.actions for p in (a.path, a.new_path) if p} - removed)


def folder_times(ctx: Context, folders: List[str]) -> List[dict]:
    """The mtime and entry count of each of ``folders`` (logdir-relative, '' the logdir), taken
    before an operation changes them: a restore or a rollback gives each its mtime back, so
    ``ls -l`` shows the run as it was. One record per folder, not per file. Each is read through
    its own descriptor, opened in its parent as the logdir store's walk reaches it
    (``placement.folder_at``), never by path: a folder that is, or is reached through, a link
    (swapped in after any look) is not recorded, and no outside folder's time is (invariant 4)."""
    out = []
    for d in folders:
        try:
            with folder_at(ctx, d) if d else contextlib.nullcontext((None, ctx.logdir)) as at:
                if at is None:
                    continue
                fd = os.open(at[1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at[0])
            try:
                st = os.fstat(fd)
                with os.scandir(fd) as it:
                    n = sum(1 for _ in it)
            finally:
                os.close(fd)
        except (OSError, ValueError, TransactionError):
            continue
        out.append({"path": d, "mtime_ns": st.st_mtime_ns, "entries": n})
    return out


def settle_folder_times(ctx: Context, recs) -> None:
    """Each folder ``folder_times`` recorded gets back its mtime, deepest first, once every file is
    back, when it holds as many entries as it did before the reduce: a folder something else
    added to or took from since keeps its newer time. Records are untrusted input; a folder's
    time never fails the operation whose bytes are back."""
    good = [r for r in recs if isinstance(r, dict) and isinstance(r.get("path"), str)
            and isinstance(r.get("entries"), int)] if isinstance(recs, list) else []
    for r in sorted(good, key=lambda r: len(r["path"]), reverse=True):
        ns = recorded_mtime_ns(r)
        if ns is None:
            continue
        try:
            if r["path"]:
                no_symlink(ctx, r["path"])
                # through its own descriptor, reached by the walk (``placement.settle_folder``): a
                # folder on the way swapped for a link since the look never has its time changed
                settle_folder(ctx, r["path"], None, ns, None, when=lambda st, ns=ns: st.st_mtime_ns != ns,
                              entries=r["entries"])
                continue
            p = ctx.logdir  # the logdir itself: the one path taken as given (the user named it)
            st = os.lstat(p)
            if not stat.S_ISDIR(st.st_mode):
                continue
            with os.scandir(p) as it:
                n = sum(1 for _ in it)
            if n == r["entries"] and st.st_mtime_ns != ns:
                os.utime(p, ns=(st.st_atime_ns, ns), follow_symlinks=False)
        except (OSError, ValueError, TransactionError):
            continue


#: the fields of a ``displaced`` journal record that go into the manifest
_DISPLACED_KEYS = ("path", "sha256", "size", "blob", "late_records", "kept_in_place", "not_put_back")


def _displaced_records(records: List[dict]) -> List[dict]:
    """The ``displaced`` records of a journal (checked by ``trust.check_journal``), as the
    manifest lists them, each once."""
    out: List[dict] = []
    for r in records:
        if r.get("type") == "displaced":
            d = {k: r[k] for k in _DISPLACED_KEYS if k in r}
            if not _listed(out, d):
                out.append(d)
    return out


def _listed(displaced: List[dict], d: dict) -> bool:
    return any(x.get("path") == d.get("path") and x.get("sha256") == d.get("sha256") for x in displaced)


def _journal_displaced(journal: Journal, d: dict) -> None:
    """Journal newer bytes a rollback found in an original's place (stored in the vault already),
    durably, before the original takes the path."""
    journal.append({"type": "displaced", **{k: d[k] for k in _DISPLACED_KEYS if k in d}})


def put_back_names_free(ctx: Context, recs: Iterable[dict], token: Optional[str]) -> bool:
    """Whether no entry stands at a put-back temp name ``token`` gives these records (after
    ``remove_put_back_temps`` removed what it may): one that is not a regular file (a folder, a
    link) would make every put-back under that name fail, at every start."""
    if token is None:
        return True
    for f in recs:
        if not is_sha256(f.get("sha256")) or not isinstance(f.get("path"), str):
            continue
        d = os.path.dirname(f["path"])
        try:
            with folder_at(ctx, os.path.join(d, "x")) as at:  # looked at in the folder the walk reaches
                if at is not None and any(_lstat_in(at[0], n) is not None for n in _temp_names(f["sha256"], token)):
                    return False
        except (TransactionError, ValueError):
            continue
    return True


def _temp_names(sha: str, token: str) -> set:
    """The names of the put-back temps of blob ``sha`` under ``token`` (the copy, its late records)."""
    return {os.path.basename(restore_tmp_path("", sha, token)), os.path.basename(late_tmp_path("", sha, token))}


def new_put_back_token() -> str:
    """A token for the temp names of an operation's put-backs, journaled in its begin record
    (``tmp_token``) before any temp is made."""
    return secrets.token_hex(16)


def put_back_token(begin: dict) -> Optional[str]:
    """The journaled token of an operation's put-back temp names, or None (absent, or not the
    shape this code writes: a journal is untrusted input and the token goes into file names)."""
    token = begin.get("tmp_token")
    return token if isinstance(token, str) and RESTORE_TOKEN.fullmatch(token) else None


def remove_put_back_temps(ctx: Context, recs: Iterable[dict], token: Optional[str],
                          keep: Collection[str] = (), left: Optional[List[str]] = None) -> List[str]:
    """Temp copies a killed put-back of these records (``path`` and ``sha256`` each: a rollback's
    backups, a restore's files) left next to their files: exactly the names the journaled
    ``token`` gives (``vault.restore_tmp_path``, ``vault.late_tmp_path``), never another file that
    merely looks like one (a user's own). A file's folder and the folders above it in the logdir
    are looked in (a restore's check streams a backup whose folder the reduce removed into the
    nearest one standing). The caller holds the run's lock, so none of them is being written
    now; without a token (an earlier version's journal) nothing is removed. ``keep``: this
    process's own verified temporaries, left for the put-back. Returns the removed paths,
    logdir-relative; ``left`` gets those of the files it may not remove (review R28 F2), for the
    caller to name."""
    removed: List[str] = []
    if token is None:
        return removed
    # the names each folder may hold: a file's own folder and every one above it in the logdir
    names: Dict[str, set] = {}
    for f in recs:
        if not is_sha256(f.get("sha256")) or not isinstance(f.get("path"), str):
            continue  # untrusted: only a digest's first characters go into the name
        mine = _temp_names(f["sha256"], token)
        d = os.path.dirname(f["path"])
        while True:
            names.setdefault(d, set()).update(mine)
            if not d:
                break
            d = os.path.dirname(d)
    # one listing a folder, not a look-up per file and folder (a profile session: 100s of files)
    for d, wanted in names.items():
        try:
            # listed and removed in the folder the logdir store's walk reaches: a folder on the way
            # that is (or is swapped for) a link to an outside folder is passed over, nothing there removed
            with folder_at(ctx, os.path.join(d, "x")) as at:
                if at is None:
                    continue
                folder = ctx.abs(d) if d else ctx.logdir
                with os.scandir(at[0]) as entries:
                    hits = [e for e in entries if e.name in wanted]
                for e in hits:
                    p = os.path.join(folder, e.name)
                    # a link at a name only our journaled token gives (removed, never followed), or
                    # a regular file there where no one else could have put it: the token is in the
                    # first temp's name, so in a folder others may write a teammate could move the
                    # user's own file to such a name (review R28 F2); it is left (the put-back then
                    # takes fresh names: ``put_back_names_free``). A folder there is left alone
                    if p in keep:
                        continue
                    if e.is_symlink() or e.is_file(follow_symlinks=False) and \
                            only_ours_could_put(os.fstat(at[0]), e.stat(follow_symlinks=False)):
                        fsops.unlink(e.name, dir_fd=at[0])
                        removed.append(os.path.relpath(p, ctx.logdir))
                    elif left is not None and e.is_file(follow_symlinks=False):
                        left.append(os.path.relpath(p, ctx.logdir))
        except (OSError, TransactionError, ValueError):
            continue
    return removed


#: how many times a put-back looks at an original's path again when something was made or changed
#: there between its look and its place (a writer each time): bounded, then refused
PUT_BACK_LOOKS = 5


class _Moved(OSError):
    """The original's path is no longer what the put-back looked at (``put_back``: looked at again).
    An ``OSError``, so that whoever made the temporary removes it as after a failed rename
    (``restore_staged.Prepared.put`` keeps one only on ``EXDEV``)."""


def _still(ctx: Context, path: str, look: Optional[str], stored: Optional[dict]) -> bool:
    """Whether the original's ``path`` is still what the put-back looked at: the same version
    (``placement.version_at``, the store's one rule: a writer's append changes it, a new file
    too), and, where the vault keeps what stood there (``stored``: its ``sha256`` and ``size``,
    always a copy), the same bytes (a write within one mtime tick keeps size and time)."""
    try:
        if version_at(ctx, path) != look:
            return False
    except TransactionError:
        return False  # a link or a folder now, or a folder on the way swapped for a link: looked at again
    return stored is None or holds_original(ctx.store, ctx.key(path), stored)


def exchange_name(rec: dict, token: Optional[str]) -> Optional[str]:
    """The logdir path beside ``rec``'s where its put-back's exchange leaves what stood at the path
    (``_exchange``): a name only the operation's journaled ``token`` gives (its begin record's
    ``tmp_token``, written before any temporary), and never one ``remove_put_back_temps`` removes:
    what it holds may exist nowhere else, so only ``put_back`` settles it, with the vault at hand.
    None without a token (the put-back then places as before, with no exchange)."""
    if token is None or not RESTORE_TOKEN.fullmatch(token) or not isinstance(rec.get("path"), str):
        return None
    # keyed on the path, not the content: two files of one folder holding the same original bytes
    # get names of their own, so a killed attempt's leftover is settled as the file it stood for
    # (review R6 F4)
    of_path = hashlib.sha256(rec["path"].encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return os.path.join(os.path.dirname(rec["path"]), f"{RESTORE_TMP_PREFIX}exchanged-{token}-{of_path}")


def _exchange(tmp: str, beside: str, dest: str, dir_fd: Optional[int] = None,
              tmp_dir_fd: Optional[int] = None) -> bool:
    """The verified temporary ``tmp`` moved to ``beside`` (create-only), then swapped with the file
    at ``dest`` in one atomic step (``throttle.exchange``): ``dest`` holds the original and
    ``beside`` the inode that stood there, with every byte written to it up to that instant (a
    rename over it would have dropped what a writer appended after the last look). True when
    done. False, ``tmp`` where it was, where it cannot be done (``beside`` taken, another file
    system, no exchange in the kernel or the file system): the caller places as before.
    ``_Moved`` (``tmp`` back) when ``dest`` is gone meanwhile. ``dir_fd``, ``tmp_dir_fd``: the
    folders of ``dest`` (and ``beside``) and of ``tmp`` (``throttle.name_in``, ``_folders``)."""
    try:
        fsops.rename_new(tmp, beside, src_dir_fd=tmp_dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        return False  # a name taken there (settled by the next start's put-back) or another file system
    try:
        fsops.exchange(beside, dest, dir_fd=dir_fd)
    except OSError as e:
        # back where ``restore_blob`` made it (it removes it on failure)
        fsops.rename_new(beside, tmp, src_dir_fd=dir_fd, dst_dir_fd=tmp_dir_fd)
        if e.errno in fsops.NO_EXCHANGE:
            return False
        if e.errno == errno.ENOENT:
            raise _Moved() from None  # removed since the look: looked at again
        raise
    if not _regular_in(beside, dir_fd):
        # the exchange swaps whatever stands at ``dest``: a folder (or a link) put there since the
        # look would now sit under the exchange name, named by nothing (review R6 F4). Swapped
        # back at once, the temporary returned, and the path looked at again: the look refuses it
        fsops.exchange(beside, dest, dir_fd=dir_fd)
        fsops.rename_new(beside, tmp, src_dir_fd=dir_fd, dst_dir_fd=tmp_dir_fd)
        raise _Moved()
    return True


def _regular_in(path: str, dir_fd: Optional[int]) -> bool:
    """Whether ``path`` (its last name in the folder ``dir_fd``, where given) is a regular file,
    no link followed."""
    try:
        st = os.stat(fsops.name_in(path, dir_fd), dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode)


@contextlib.contextmanager
def _folders(ctx: Context, path: str, tmp: str) -> Iterator[Tuple[int, int]]:
    """Descriptors of the folder of the original's ``path`` and of its temporary ``tmp`` (one,
    when they share it), each reached by the logdir store's walk that follows no link
    (``PosixStore.folder``): the put-back's last look and its place are made in them, so a folder
    on the way swapped for a link after the walk leads nothing outside the logdir (review R6 F1).
    ``_Moved`` when the walk refuses (a link or no folder on the way now): the put-back looks
    again, and its look refuses the link, naming it."""
    with contextlib.ExitStack() as held:
        try:
            dfd = held.enter_context(ctx.store.folder(ctx.key(path)))[0]
            tfd = dfd if os.path.dirname(tmp) == os.path.dirname(ctx.abs(path)) else \
                held.enter_context(ctx.store.folder(ctx.key(os.path.relpath(tmp, ctx.logdir))))[0]
        except StoreFailure:
            raise _Moved() from None
        yield dfd, tfd


def _made_in(tmp: str, dir_fd: int) -> bool:
    """Whether the folder at ``dir_fd`` holds the temporary ``tmp`` (a regular file; its name only
    this put-back gives): else that folder is not the one the temporary was made in."""
    try:
        return stat.S_ISREG(os.stat(fsops.name_in(tmp, dir_fd), dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _where_looked(place: Callable[..., None], ctx: Context, path: str, look: Optional[str],
                  stored: Optional[dict] = None, beside: Optional[str] = None,
                  exchanged: Optional[list] = None,
                  owners: Optional[Dict[str, Set[Optional[int]]]] = None) -> Callable[[str, str], None]:
    """``place`` (the verified temporary onto ``path``), done only where ``path`` is still what the
    put-back looked at (``look``, a version; None: nothing, and then ``place`` is create-only),
    right before it (``_still``): else, or where the create-only place finds a file made since,
    ``_Moved`` (the temporary removed by ``restore_blob``) and the put-back looks again.
    ``beside`` (``exchange_name``, where the folder renames): a file that stood there is not
    replaced but exchanged with the temporary (``_exchange``; ``beside`` appended to
    ``exchanged``), so what a writer added after the check is in the inode now at ``beside``,
    which the put-back compares with its look. The place, and the exchange, are made in the
    folders ``_folders`` reaches after the look (its walk refuses a link on the way), once they
    are seen to hold the temporary and, at ``path``, the version looked at: never by a path a
    folder swapped for a link since the look would lead elsewhere (review R6 F1), nor in one
    another user put in place of ours since (``owners``: ``_refuse_put_in_theirs``)."""
    def guarded(tmp: str, dest: str) -> None:
        if look is not None and not _still(ctx, path, look, stored):
            raise _Moved()
        with _folders(ctx, path, tmp) as (dfd, tfd):
            _refuse_put_in_theirs(ctx, dfd, path, owners)
            if not _made_in(tmp, tfd) or look is not None and version_in(dfd, dest) != look:
                raise _Moved()  # not the folders looked in (swapped in between), or changed since the look
            if look is not None and beside is not None and exchanged is not None \
                    and _exchange(tmp, ctx.abs(beside), dest, dfd, tfd):
                exchanged.append(beside)
                return
            try:
                place(tmp, dest, src_dir_fd=tfd, dst_dir_fd=dfd)
            except FileExistsError:
                raise _Moved() from None  # a file made at the path since the look: never replaced unseen
    return guarded


def put_back(ctx: Context, vault: Vault, rec: dict, produced: Optional[dict] = None,
             on_displaced: Optional[Callable[[dict], None]] = None,
             tmp_token: Optional[str] = None, strategy: Optional[SwapStrategy] = None,
             journal: Optional[Journal] = None, begun: Collection[str] = (),
             owners: Optional[Dict[str, Set[Optional[int]]]] = None) -> Optional[dict]:
    """Put the original bytes of ``rec`` back at its path.

    Content found there that is neither the original nor what the operation itself produced
    (``produced``) is newer than the backup: it is stored in the vault first and returned as
    a 'displaced' record, so no byte is ever lost. For an event file, the records a writer
    added after the reduction (appended to the reduced file, or written anew where the reduce
    had deleted the file) also go back into the run beside the original
    (``<file>.salvaged-NNN``, ``displaced["late_records"]``): TensorBoard keeps showing them.
    ``on_displaced`` is called with that record before the original takes the path, so a caller
    can make it durable first (a restore finished after a crash finds the path already restored).
    The original takes a path found free create-only (``put_in_place(new_name=True)``), and one
    where something stood only while it is still what was looked at (and, kept as a copy,
    stored: ``_where_looked``); a file made or changed there meanwhile (a writer) is looked at
    again, displaced in its turn (each one passed to ``on_displaced``; the last returned), at
    most ``PUT_BACK_LOOKS`` times, then refused (``Skip.OPEN_FOR_WRITING``).
    Where the folder renames and there is a ``tmp_token``, a file that stood there is exchanged
    with the original (``_exchange``), not replaced: compared after with what was looked at, it is
    stored and listed in its turn when a writer appended to it meanwhile, then removed, and the
    path looked at again; what a killed attempt's exchange left beside the path
    (``exchange_name``) is settled first (kept in the vault unless it is the original or the
    reduced file, then removed).
    ``tmp_token``: a restore's journaled token of its temp names (``vault.restore_tmp_path``).
    ``strategy``: how the original takes its path (``put_in_place``; the folder's by default),
    its ``copying`` record written to ``journal``, and so does the salvage file of late records;
    ``begun``: the paths an earlier, killed attempt's ``copying`` records name (``copies_begun``),
    where a partial copy of the original (``partial_put_back``) or of its late records
    (``keep_late_records``) is that attempt's own and goes before the copy is made again.
    ``owners`` (a restore's: ``folder_owners``): the original takes its name only in a folder
    that is this user's or an owner its records allow (``_refuse_put_in_theirs``).
    """
    strategy = strategy or swap_strategy(folder_capabilities())
    put_in_place(strategy, journal, rec, begun=begun)  # refused here, before anything, without a journal
    no_symlink(ctx, rec["path"])
    p = ctx.abs(rec["path"])
    key = ctx.key(rec["path"])
    resumed = False
    if rec["path"] in begun:
        # a copy a killed attempt began: finished (its bytes whole), or emptied (their beginning),
        # in its folder as the walk reaches it (a link on the way: refused, coded, naming it)
        meta = {"mode": rec["mode"], "mtime": rec["mtime"], "owner": recorded_owner(rec), **_time_of(vault, rec)}
        def beginning(q: str, d: int) -> bool:
            _refuse_put_in_theirs(ctx, d, rec["path"], owners)  # before the copy goes on there
            return partial_put_back(vault, q, rec, dir_fd=d)

        if resume_at(ctx, rec["path"], rec, beginning, meta) == IN_PLACE:
            return None
        resumed = True  # the original is not there whole: asked already

    def keep(src: str, prev: Optional[dict]) -> dict:
        # what stands at the logdir path ``src`` (the original's path, or where the exchange left
        # what stood there) stored as displaced: a copy, never a link (a writer's append before
        # the place would change a linked blob along with the file, the blob then no longer its
        # name's bytes); the vault checks it holds ``sha`` (bytes changed since the hash fail it)
        with ctx.store.open_read(ctx.key(src)) as r:
            sha = sha256_stream(r)
        blob = vault.store(ctx.abs(src), sha, link=False)
        d = {"path": rec["path"], "sha256": sha, "size": os.lstat(blob).st_size,
             "blob": os.path.relpath(blob, vault.root)}
        # records an earlier look of this call set beside the original already are not set there twice
        base = prev if prev and prev.get("late_records") and starts_with(blob, prev["size"], prev["sha256"]) \
            else produced
        try:
            late = _late_records(ctx, rec, base, blob, d["size"], tmp_token, strategy=strategy, journal=journal,
                                 begun=begun)
        except TransactionError as e:
            if e.code == StoreError.SYMLINK and on_displaced is not None:
                on_displaced(d)  # its folder became a link: what stood there is in the vault, and named
            raise
        if late:
            d["late_records"] = late
        if on_displaced is not None:
            on_displaced(d)
        return d

    beside = exchange_name(rec, tmp_token) if strategy.renames else None
    displaced: Optional[dict] = None
    if beside is not None:
        displaced = _settle_exchanged(ctx, beside, rec, produced, keep)
    for _ in range(PUT_BACK_LOOKS):
        # the look: what stands at the path now, its version through the logdir's store (a link,
        # a folder, a folder on the way that is a link: refused, never followed)
        look = version_at(ctx, rec["path"])
        if look is not None and not resumed and holds_original(ctx.store, key, rec):
            return displaced  # the original stands there
        resumed = False
        stored = None
        if look is not None and not (produced and holds_original(ctx.store, key, produced)):
            if not vault.check_blob(rec["sha256"]):
                # a writer appended to the original itself (its backup is a hard link of it):
                # the file in place holds every byte, the newest ones included; leave it
                here = ctx.store.stat(key)
                return {"path": rec["path"], "kept_in_place": True, "size": here.size if here else 0}
            writers = find_writers([p]).holders
            if writers:
                # its next records would go into the inode the original is about to replace
                raise TransactionError(describe_holders(writers, lambda x: rec["path"])
                                       + "; its original is not put back while it is written", Skip.OPEN_FOR_WRITING)
            displaced = stored = keep(rec["path"], displaced)
        place = put_in_place(strategy, journal, rec, new_name=look is None, begun=begun)
        exchanged: list = []
        try:
            # the temporary made in the folder the logdir store's walk reaches (invariant 4)
            vault.restore_blob(rec["sha256"], p, rec["mode"], rec["mtime"], tmp_token=tmp_token,
                               owner=recorded_owner(rec),
                               place=_where_looked(place, ctx, rec["path"], look, stored, beside, exchanged,
                                                   owners),
                               within=(ctx.store, key), **_time_of(vault, rec))
        except _Moved:
            continue  # made or changed since the look: looked at again, never replaced unseen
        except StoreFailure as e:
            if e.code not in (StoreError.SYMLINK, StoreError.NOT_REGULAR):
                raise
            continue  # a link (or a file) on the way to its folder since the look: the next look refuses it, naming it
        if exchanged:
            # the original is in place; what stood there is at ``beside``, as a writer left it
            unchanged = _still(ctx, beside, look, stored)
            if not unchanged:
                displaced = keep(beside, displaced)  # appended to after the look: its newer bytes kept too
            _remove_beside(ctx, beside)  # stored (or the reduction's own file, which a restore removes)
            if not unchanged:
                continue  # a writer was at it: the path looked at again
        return displaced
    raise TransactionError(f"{rec['path']}: changed each of the {PUT_BACK_LOOKS} times it was looked at while its "
                           "original was being put back (a writer); left as it is", Skip.OPEN_FOR_WRITING)


def _settle_exchanged(ctx: Context, beside: str, rec: dict, produced: Optional[dict],
                      keep: Callable[[str, Optional[dict]], dict]) -> Optional[dict]:
    """What a killed put-back's exchange left at ``beside`` (``exchange_name``): the verified
    original (killed before the exchange), or what stood at the path (after it), perhaps with a
    writer's newer records. Checked against the vault before it goes: the original's bytes (in the
    vault) or the reduced file's (a restore removes it) are removed; anything else is stored and
    listed first (``keep``: returned). A thing there that is no regular file (a folder a writer put
    at the path right before the exchange, the process killed before it was swapped back) is
    never removed nor hidden: the put-back stops naming it, the journal kept (review R6 F4)."""
    try:
        if version_at(ctx, beside) is None:
            return None
    except TransactionError as e:
        raise TransactionError(f"{beside}: {e}; it is what stood at {rec['path']} when an earlier attempt of this "
                               f"put-back was stopped: move it back to {rec['path']} (or aside), then run "
                               "`tb-footprint recover`", Failure.REFUSED) from None
    key = ctx.key(beside)
    got = None
    if not (holds_original(ctx.store, key, rec) or produced and holds_original(ctx.store, key, produced)):
        got = keep(beside, None)
    _remove_beside(ctx, beside)
    return got


def _remove_beside(ctx: Context, beside: str) -> None:
    """The exchange name ``beside`` (its content checked or stored) removed, and its folder
    fsynced, in the folder the logdir store's walk reaches (no link on the way followed:
    ``StoreFailure``, and it stays for the next start to settle)."""
    with ctx.store.folder(ctx.key(beside)) as (dfd, name):
        fsops.unlink(name, dir_fd=dfd)
        os.fsync(dfd)


def _late_records(ctx: Context, rec: dict, produced: Optional[dict], blob: str, size: int,
                  tmp_token: Optional[str] = None, strategy: Optional[SwapStrategy] = None,
                  journal: Optional[Journal] = None, begun: Collection[str] = ()) -> Optional[dict]:
    """Records a writer added to ``rec``'s event file after the reduction, from the displaced
    copy ``blob``, written back into the run beside it; None for other files or when there are
    none. Appended to the reduced file: what follows its bytes; where the reduce left no file
    (deleted): all of it. A file replaced by other content is kept in the vault only.
    ``strategy``, ``journal``, ``begun``: how the salvage file takes its name (``put_back``'s)."""
    if not is_summary_event_file_name(os.path.basename(rec["path"])):
        return None
    if produced is None:
        start = 0
    elif size > produced["size"] and starts_with(blob, produced["size"], produced["sha256"]):
        start = produced["size"]
    else:
        return None
    # a restore's temp name from its journaled token (recovery of a killed one removes exactly
    # it), else a random one: never a name a user's file may have (``create_new`` clears it)
    tmp = os.path.basename(late_tmp_path("", rec["sha256"], tmp_token or secrets.token_hex(16)))
    return keep_late_records(ctx, rec["path"], blob, start, size, tmp, owner=recorded_owner(rec),
                             mode=rec.get("mode"), strategy=strategy, journal=journal, begun=begun)


def _time_of(vault: Vault, rec: dict) -> dict:
    """The modification time a put-back file gets: the recorded one, to the nanosecond where it
    was kept; for a backup that grew by late writes (salvaged), the blob's own (its last write)."""
    if rec.get("grew_from"):
        ns = vault.blob_mtime_ns(rec["sha256"])  # either form: compaction keeps the time on the .zst
        if ns is not None:
            return {"mtime_ns": ns}
    ns = recorded_mtime_ns(rec)
    return {"mtime_ns": ns} if ns is not None else {}


def roll_forward(ctx: Context, records: List[dict]) -> bool:
    """Finish a swap that was recorded after a passed verification. False if it can't be. On a
    folder whose swap copies (``swap_strategy``), a partial copy a kill left at an original's
    name is the swap's own (``partial_copy``), finished like the rest."""
    copying = not swap_strategy(folder_capabilities()).renames
    vault = vault_of(records, ctx)
    backups = {r["path"]: r for r in records if r["type"] == "backup"}
    staged = [r for r in records if r["type"] == "staged"]
    if not all(vault.check_blob(r["sha256"]) for r in backups.values()):
        return False
    finals = {s["final"]: s for s in staged}
    for path, r in backups.items():
        key, s = ctx.key(path), finals.get(path)
        if stands_at(ctx, path) and not holds_original(ctx.store, key, r) and not (
                s and (holds_original(ctx.store, key, s) or copying and partial_copy_at(ctx, path, s["tmp"], s))):
            return False  # changed after the crash: roll back (keeping the new bytes)
    for s in staged:
        if not (holds_original(ctx.store, ctx.key(s["tmp"]), s) or holds_original(ctx.store, ctx.key(s["final"]), s)):
            return False
        with folder_at(ctx, s["tmp"]) as at:  # another file put at a staged name: rolled back, never put in place
            st = _lstat_in(at[0], at[1]) if at is not None else None
        if st is not None and staged_replaced(s, st) and not _exchange_left(ctx, s, backups.get(s["final"])):
            return False
    plan = records[0]["plan"]
    rp = RunPlan(run=plan["run"], bytes_before=plan["bytes_before"],
                 expected_after_bytes=plan["expected_after_bytes"],
                 actions=[Action(**{k: v for k, v in a.items()}) for a in plan["actions"]])
    j = Journal(os.path.join(ctx.journal_dir, f"{records[0]['op_id']}.jsonl"), may_create=False)
    swap = next((r for r in records if r["type"] == "swap"), {})
    apply_swap(ctx, rp, j, staged, backups, swap.get("dirs"), resuming=True, begun_at=copies_begun(records))
    return True
