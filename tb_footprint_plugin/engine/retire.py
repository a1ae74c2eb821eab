"""Retire a whole run: its directory leaves the logdir for the vault, unchanged; restore brings it back.

Where a retired run lives: ``<vault>/retired/<op_id>/files/<n>``, one numbered file per file
of the run (the tree — names, directories, modes, sizes, sha256 — is in the journal and the
manifest; ``engine.retire_tree`` keeps that layout and the file-level steps the verbs share).
Numbered names matter: the default vault is inside the logdir, and TensorBoard's walkers
(Python and Rust) would take any file named ``*tfevents*`` there for a run.

A retirement is the one retirement of every store (``engine.retire_run``: ``Retire`` on the one
driver ``engine.txn.run``, in the order of ``engine.txn.STEPS``) over a disk's layout,
``DiskRetire`` (a bucket's is ``engine.bucket_retire.BucketRetire``): journal (every file's
sha256, then the begin record) → backup (the moves into the vault) → verify (every stored file the
one hashed) → swap (the originals a copy leaves, and the emptied folders, removed) → commit (the
manifest, the commit record). A cancel is honoured where the driver honours it, up to the swap.

On the same filesystem every file is *renamed* (no copy, no extra space); across filesystems
it is copied, fsynced and re-hashed first, and the originals are deleted only after every
copy checked out. Either way a file is always whole in one place or the other, so:

* Before ``commit`` the operation can always be rolled back: every file goes back to its path
  (renamed, or copied back and checked), emptied directories are re-created with their modes.
  In-process failures and crash recovery run the same ``rollback``.
* A restore is journaled too and only ever puts files back where nothing stands: a path another
  file holds is left as it is, its original kept in the vault (``not_restored``, which purge
  keeps), as on every store; an interrupted restore is finished on the next start
  (``finish_unretire``).

Every file's sha256 is taken before anything moves (a cancellable step), so a restore proves
the run came back byte for byte (``tree_sha256``). A run being written (a file changed within
the quiet period, or while it is being retired) is never retired.

Why one module: one journaled operation — a run's tree moved into the
vault, verified, committed — with its exact inverse (``unretire``), its rollback and its
recovery, whose steps and journal records must match one for one (its purge is
``engine.retire_purge``).
"""
from __future__ import annotations

import collections
import contextlib
import errno
import math
import os
import shutil
import time
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Code, Failure, Finding, Outcome, Skip
from tb_footprint_plugin.engine import faults, trust, txn
from tb_footprint_plugin.engine import retire_run as one_retirement
from tb_footprint_plugin.engine import unretire_run as one_unretire
from tb_footprint_plugin.engine import manifest as one_schema
from tb_footprint_plugin.engine.catalogue import unsettled_op
from tb_footprint_plugin.engine.context import (
    CancelToken,
    Context,
    Progress,
    RunOutcome,
    TransactionError,
    failure_code,
    new_op_id,
    no_symlink,
    reason_of,
)
from tb_footprint_plugin.engine.history import append_history, disk_log
from tb_footprint_plugin.engine.journal import Journal, OpJournal, Rec, RunLocked
from tb_footprint_plugin.engine.placement import copies_begun, folder_at, starts_with
from tb_footprint_plugin.engine.putback import holds_original
from tb_footprint_plugin.engine.retire_rules import (CHANGED_PATHS, KIND, RECOVERED_REASON, left_changed,
                                                    refused_names, retire_line,
                                                    taken_along, unnamed_runs,
                                                    unretire_line)
from tb_footprint_plugin.engine.standing import levels_for, standing_at, writers_at
from tb_footprint_plugin.engine.retire_tree import (
    OP_ID_RE,
    StandsThere,
    check_record,
    check_retired_dir,
    chmod_dirs,
    drop_retired,
    folders_not_ours,
    grown,
    inventory,
    is_restorable_retirement,
    own_inode,
    put_back,
    recorded_in,
    rel_ok,
    retired_dir,
    retired_now,
    retirement_recorded,
    retirements,
    sized,
    stored_file,
    CHANGED,
    GROWN,
    RECORDED,
    stored_as,
    tree_sha256,
    still_recorded,
    unchanged,
    write_retire_manifest,
)
from tb_footprint_plugin.engine.run_lock import lock_failure, run_lock
from tb_footprint_plugin.engine.swap import folder_times, make_dirs, settle_folder_times, unsettled_note
from tb_footprint_plugin.engine.vault import Vault, who
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.plan.planner import active_reason, newest_write
from tb_footprint_plugin.plan import owners
from tb_footprint_plugin.storage.access import access_refusal
from tb_footprint_plugin.storage.files import CopyMismatch, copy_new, fsync_dir, sha256_file
from tb_footprint_plugin.storage.openfiles import describe_holders
from tb_footprint_plugin.storage.paths import is_within, real_within
from tb_footprint_plugin.storage.private import NotPrivate, ensure_private_dir
from tb_footprint_plugin.version import __version__

FREE_SPACE_MARGIN = 16 << 20
#: failpoints of a retirement, in order (tests kill the process at each)
RETIRE_STEPS = ("retire.journal", "retire.move_record", "retire.mid_move", "retire.move",
                "retire.mid_delete", "retire.delete", "retire.manifest")
UNRETIRE_STEPS = ("unretire.journal", "unretire.mid_move", "unretire.move", "unretire.manifest")


# ---------------------------------------------------------------------------------------
# what keeps a run in the logdir (before anything is recorded)
# ---------------------------------------------------------------------------------------
def _preflight(ctx: Context, run: str) -> None:
    why = refused_names(run, ())  # the names every store refuses (its runs taken along: ``retire_run``)
    if why:
        raise TransactionError(why, Failure.REFUSED)
    top = ctx.abs(run)
    no_symlink(ctx, run)
    if os.path.islink(top) or not os.path.isdir(top) or not real_within(top, ctx.logdir):
        raise TransactionError(f"run {run!r} is not a directory in the logdir (a symlink, or gone); left alone",
                               Failure.REFUSED)
    for p in (ctx.state, ctx.vault.root):
        if is_within(p, top):
            raise TransactionError(f"run {run!r} holds the tool's state or vault ({p}); left alone", Failure.REFUSED)
    if not os.access(os.path.dirname(top), os.W_OK | os.X_OK):
        raise TransactionError(f"{os.path.dirname(run) or 'the logdir'}: directory not writable (permission denied)",
                               Failure.REFUSED)


def _check_quiet(ctx: Context, run: str, files: List[dict]) -> None:
    # the one rule of every verb and store (``plan.planner``), over the files the retirement moves
    active = active_reason(newest_write((f["path"], f["mtime_ns"] / 1e9) for f in files), ctx.quiet_period,
                           time.time())
    if active:
        raise TransactionError(f"run {run!r} is {active}", Skip.ACTIVE)


def _check_writers(ctx: Context, run: str) -> None:
    """A run a process on this machine holds a file of open for writing is left alone: its next
    records would follow the file into the vault, out of TensorBoard's sight."""
    try:  # every depth, no link followed: each file asked about through its folder's descriptor
        found = writers_at(ctx, run, [ctx.state, ctx.vault.root])
    except txn.Refused as e:  # a link on the way to the run
        raise TransactionError(e.reason, e.code or Failure.REFUSED) from None
    if found.holders:
        raise TransactionError(f"run {run!r} is being written: " + describe_holders(found.holders)
                               + "; left alone", Skip.OPEN_FOR_WRITING)


# ---------------------------------------------------------------------------------------
# retire: the one retirement (``engine.retire_run``) over a disk's layout
# ---------------------------------------------------------------------------------------
def retire_run(ctx: Context, run: str, *, takes_along: Iterable[str] = (), rule: Optional[dict] = None,
               cancel: Optional[CancelToken] = None, progress: Optional[Progress] = None) -> RunOutcome:
    """Retire ``run`` (and the nested runs ``takes_along`` names, which must be all it holds):
    the one retirement (``retire_run.retire``) over ``DiskRetire``, under the lock of every run
    it moves.

    Returns an outcome (``verified`` when the run left the logdir for the vault), never raises
    for a failed run: any failure before the commit puts every file back where it was.
    """
    return one_retirement.retire(DiskRetire(ctx, run, sorted(set(takes_along)), rule), cancel, progress)


class DiskRetire(one_retirement.RetireLayout):
    """What a disk does at each instant of the one retirement (``retire_run.Retire``; the module doc):

    - **hold**: the lock of every run it moves, then no unfinished operation on any of them;
    - **begin**: the preflight, the inventory and every file's sha256 (cancellable; a refusal is
      ``Refused``), the logdir's identity bound, the begin record;
    - **move**: the vault's ``retired/<op_id>/files`` made ours, a last look for writers, the
      ``move`` record (``retire.move_record``), every file renamed or copied (and re-hashed) into
      the vault (``retire.mid_move`` after the first), the ``moved`` record;
    - **check**: every stored file is the one hashed: a rename the same inode (checked as it
      moved), a copy its sha256 (checked before its rename into place), and each one's size again;
    - the **last look** (a copy's originals still as hashed), then the commit record: ``delete``,
      only when the originals are copies (a rename leaves none);
    - **remove**: the originals unlinked (``retire.mid_delete``), the emptied folders removed;
    - **settle**: the sizes in the vault once more, the manifest (``retire.manifest``), the
      ``commit`` record, the journal closed.

    Every failure before the verified manifest is rolled back (an injected one too, on every
    store: ``engine.txn``); once the
    manifest says verified (or the commit record is written) the run is retired (``retired``), as
    a crash there leaves it, never rolled back past its record (review R11 F2)."""

    errors = (Exception,)
    rollback_errors = (Exception,)

    def __init__(self, ctx: Context, run: str, along: List[str], rule: Optional[dict]) -> None:
        super().__init__(run, along)
        self.ctx, self.rule = ctx, rule
        self.locks: list = []
        self.jnl: Optional[Journal] = None
        self.begin_rec: dict = {}
        self.dest_dir = ""

    def refused(self) -> Optional[str]:
        return refused_names(self.run, self.along)

    def hold(self) -> bool:
        ctx, out = self.ctx, self.out
        try:
            for r in [self.run] + self.along:
                self.locks.append(run_lock(ctx, r).acquire())
        except RunLocked as e:
            self.release()
            out.status, out.reason, out.code, out.holder = Outcome.SKIPPED, str(e), Skip.LOCKED, e.holder
            return False
        except OSError as e:
            self.release()
            out.code, out.reason = lock_failure(e, r, ctx.lock_dir)
            return False
        unsettled = next((u for u in (unsettled_op(ctx, r) for r in [self.run] + self.along) if u), None)
        if unsettled:
            out.reason, out.code = (f"unfinished operation {unsettled} on this run could not be settled yet; "
                                    "see `tb-footprint status`"), Failure.UNSETTLED
            return False
        return True

    def begin(self, cancel: CancelToken, report: txn.Report) -> None:
        """What the run holds and every file's sha256 before anything moves, then the begin record."""
        ctx, run, out = self.ctx, self.run, self.out
        try:
            _preflight(ctx, run)
            files, dirs = inventory(ctx, run)
            out.bytes_before = out.bytes_after = sum(f["size"] for f in files)
            self._check_owner(files, dirs)
            _check_quiet(ctx, run, files)
            _check_writers(ctx, run)
            ctx.vault.ensure()
            same_fs = ctx.vault.same_filesystem(ctx.abs(run))
            if same_fs:
                # a file with other hard links (a ``cp -al`` / ``rsync --link-dest`` snapshot) is
                # retired as a copy of its own: renamed, the vault's only copy would be the
                # snapshot's inode, which a write there changes (review R9 F2; R13 F1 for backups)
                # links between the run's own files are no snapshot: every name moves, renamed, and
                # the vault keeps them one inode, as the unretire's renames give them back (R17 F6)
                inside = _names_inside(files)
                for f in files:
                    if f["nlink"] > inside[_inode(f)]:
                        f["copy"] = True
            copied = sum(f["size"] for f in files if _copied(same_fs, f))
            if copied:
                _check_space(ctx.vault.root, copied)
            # the plan named what it takes along; the directory must hold no other run
            extra = unnamed_runs((f["path"] for f in files), run, self.along)
            if extra:
                raise TransactionError(f"run {run!r} holds nested run(s) the plan did not name: {', '.join(extra)}; "
                                       "plan again", Failure.REFUSED)
            # every file's sha256 before anything moves (cancellable: nothing changed yet)
            total = out.bytes_before or 1
            done = 0
            for f in files:
                cancel.check()
                p = ctx.abs(f["path"])
                f["sha256"] = sha256_file(p)
                if not still_recorded(ctx, f):
                    raise TransactionError(f"{f['path']}: changed while it was being read (is the run still "
                                           "being written?); left alone", Skip.ACTIVE)
                done += f["size"]
                report("hash", 0.5 * done / total)
        except (TransactionError, OSError) as e:
            raise txn.Refused(reason_of(e), e.code if isinstance(e, TransactionError) and e.code
                              else Failure.REFUSED) from e
        cancel.check()
        try:
            # a state folder copied or planted from another logdir is refused, as a reduce refuses it
            identity = trust.bind(ctx.logdir, ctx.state)
        except trust.Untrusted as e:
            raise txn.Refused(str(e), Failure.REFUSED) from e
        op_id = new_op_id()
        out.op_id = op_id
        self.jnl = Journal.create(ctx.journal_dir, op_id, {
            "type": Rec.BEGIN, "kind": KIND, "op_id": op_id, "run": run, "takes_along": self.along,
            "logdir_id": identity["id"],
            "logdir": ctx.logdir, "vault": ctx.vault.root, "same_fs": same_fs, "rule": self.rule,
            "files": files, "dirs": dirs, "bytes": out.bytes_before,
            # the folder the run leaves (its own folder and those below come back from ``dirs``)
            "dir_times": folder_times(ctx, [os.path.dirname(run)]),
        })

    def _check_owner(self, files: List[dict], dirs: List[dict]) -> None:
        """The owner rule (``plan.owners``) asked again of the inventory just read under the locks
        (every file, each run's folder), as the plan asked the scan: a run handed to another user
        since (the tab retires from its kept scan) is left alone unless the rule opts in."""
        folders = {self.run, *self.along}
        uids = [d["uid"] for d in dirs if d["path"] in folders] + [f["uid"] for f in files]
        others = owners.held_by_other(uids, bool((self.rule or {}).get("include_others_runs")), "retires")
        if others:
            raise TransactionError(others[1], Skip.OTHERS_RUN)

    def move(self, cancel: CancelToken, report: txn.Report) -> None:
        """Every file into the vault after the ``move`` record: a rename, or a checked copy (the
        originals stay until every copy checked out); then the ``moved`` record."""
        ctx, journal, out = self.ctx, self.jnl, self.out
        begin = self.begin_rec = journal.records()[0]
        op_id, files, same_fs = begin["op_id"], begin["files"], begin["same_fs"]
        vault = ctx.vault
        dest_dir = self.dest_dir = os.path.join(retired_dir(vault, op_id), "files")
        try:  # folders of ours all the way from the vault: a planted link is set aside, never followed
            ensure_private_dir(dest_dir, vault.root)
        except NotPrivate as e:
            raise TransactionError(str(e), Failure.REFUSED) from None
        fsync_dir(os.path.dirname(dest_dir))
        fsync_dir(os.path.dirname(os.path.dirname(dest_dir)))
        cancel.check()  # the last point where a cancel is honoured with nothing moved yet
        _check_writers(ctx, begin["run"])  # again, right before anything moves
        journal.append({"type": Rec.MOVE})
        faults.hit("retire.move_record")
        total = out.bytes_before or 1
        done = 0
        inside = _names_inside(files)
        for i, f in enumerate(files):
            dst = os.path.join(dest_dir, str(i))
            no_symlink(ctx, f["path"])
            if not still_recorded(ctx, f):
                raise TransactionError(f"{f['path']}: changed during the retirement (is the run still being written?)",
                                       Skip.ACTIVE)
            # renamed or read in its folder as the logdir store's walk reaches it, never by a path a
            # folder on the way swapped for a link since the look would lead outside the logdir
            # (invariant 4): such a link is refused, coded, naming the path (the rollback puts back
            # what moved; a link still there keeps the journal for the next start)
            with _run_folder(ctx, f) as (dfd, name):
                if not _copied(same_fs, f):
                    # its names in the run move with it (a rename keeps the count); one more is new
                    if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_nlink > inside[_inode(f)]:
                        # linked since the inventory: renamed, the vault's copy would be shared
                        raise TransactionError(f"{f['path']}: a hard link to it was made during the retirement",
                                               Skip.ACTIVE)
                    os.rename(name, dst, src_dir_fd=dfd)
                    if os.lstat(dst).st_ino != f["ino"]:
                        raise TransactionError(f"{f['path']}: not the file that was hashed")
                else:
                    tmp = dst + ".partial"
                    try:  # the mode and time set through the copy's fd, as it is made
                        copy_new(name, tmp, f["sha256"], mode=f["mode"], mtime_ns=f["mtime_ns"], src_dir_fd=dfd)
                    except CopyMismatch:
                        raise TransactionError(f"copy of {f['path']} in {vault.root} does not match its sha256") \
                            from None
                    if sha256_file(tmp) != f["sha256"]:  # re-read where it landed
                        raise TransactionError(f"copy of {f['path']} in {vault.root} does not match its sha256")
                    os.replace(tmp, dst)
            if i == 0:
                faults.hit("retire.mid_move")
            done += f["size"]
            report("move", 0.5 + 0.4 * done / total)
        fsync_dir(dest_dir)
        journal.append({"type": Rec.MOVED})

    def check(self, report: txn.Report) -> None:
        """Every stored file is the one hashed: the renames and copies were checked as they were
        made (inode; sha256), and each one still has its size. One gone or resized (by hand) is
        ``backup_damaged``, every vault's code for it: before the commit record the run is put
        back (a bucket's ``copies_there`` in its last look). A renamed file longer than recorded
        is the run's own inode, appended to by a writer this machine cannot see (another NFS
        client): the run is active (``Skip.ACTIVE``), put back with those records in it."""
        for i, f in enumerate(self.begin_rec["files"]):
            stored = os.path.join(self.dest_dir, str(i))
            try:
                size: Optional[int] = os.lstat(stored).st_size
            except FileNotFoundError:
                size = None
            if size is not None and size > f["size"] and not _copied(self.begin_rec["same_fs"], f):
                raise TransactionError(f"{f['path']}: written to during the retirement (a writer on another machine?); "
                                       "left in the run with what was written", Skip.ACTIVE)
            if size != f["size"]:
                raise TransactionError(f"{f['path']}: its copy in the vault ({stored}) is gone or changed since it was "
                                       "made", Failure.BACKUP_DAMAGED)

    def last_look(self) -> None:
        """The originals a copy leaves behind are still the files hashed (an appending writer
        keeps the run in the logdir, before any of them is unlinked)."""
        for f in self.begin_rec["files"]:
            if not _copied(self.begin_rec["same_fs"], f):
                continue
            no_symlink(self.ctx, f["path"])
            if not still_recorded(self.ctx, f):
                raise TransactionError(f"{f['path']}: changed during the retirement (is the run still being written?)",
                                       Skip.ACTIVE)

    def commit_record(self) -> None:
        """``delete`` before a copy's originals are unlinked (a rename leaves none to delete, and
        records nothing)."""
        if any(_copied(self.begin_rec["same_fs"], f) for f in self.begin_rec["files"]):
            self.jnl.append({"type": Rec.DELETE})

    def remove(self, report: txn.Report) -> None:
        """A copy's originals unlinked, then the emptied folders, deepest first (anything new in
        them keeps them, and fails)."""
        ctx, begin = self.ctx, self.begin_rec
        copies = [f for f in begin["files"] if _copied(begin["same_fs"], f)]
        for i, f in enumerate(copies):
            no_symlink(ctx, f["path"])
            changed = TransactionError(f"{f['path']}: changed during the retirement (is the run still being "
                                       "written?)", Skip.ACTIVE)
            if not still_recorded(ctx, f):
                raise changed
            # looked at again and unlinked in its folder as the walk reaches it (invariant 4: a
            # folder swapped for a link since the look leads no unlink outside the logdir)
            with _run_folder(ctx, f) as (dfd, name):
                if not recorded_in(dfd, name, f):
                    raise changed
                os.unlink(name, dir_fd=dfd)
            if i == 0:
                faults.hit("retire.mid_delete")
        for d in sorted(begin["dirs"], key=lambda d: d["path"].count("/"), reverse=True):
            no_symlink(ctx, d["path"])
            try:
                with folder_at(ctx, d["path"]) as at:  # removed in its parent as the walk reaches it
                    if at is not None:
                        os.rmdir(at[1], dir_fd=at[0])
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise TransactionError(f"{d['path']}: new files appeared in the run while it was being retired",
                                           Skip.ACTIVE)
                raise
        with contextlib.suppress(OSError):
            fsync_dir(os.path.dirname(ctx.abs(begin["run"])))

    def settle(self, report: txn.Report) -> None:
        """The vault holds exactly the run (every size once more); the verified manifest
        (``retire.manifest``), the ``commit`` record, the journal closed."""
        journal = self.jnl
        self.check(report)
        report("record", 0.95)
        write_retire_manifest(self.ctx, journal.records(), Outcome.VERIFIED, None)
        faults.hit("retire.manifest")
        linked = [f for f in self.begin_rec["files"] if self.begin_rec["same_fs"] and _copied(True, f)]
        if linked:  # what the retirement frees nothing of while the other names stand
            self.out.found(Finding.HARD_LINKED, [f["path"] for f in linked])
            self.out.reason = (f"{len(linked)} file(s) ({human_bytes(sum(f['size'] for f in linked))}) have other "
                               f"hard links (a snapshot?): retired as copies of their own, their bytes stay on disk "
                               f"while those links stand [{Finding.HARD_LINKED}]")
        journal.append({"type": Rec.COMMIT})
        journal.close()
        report("done", 1.0)

    def files(self) -> List[dict]:
        return self.begin_rec["files"]

    def journaled(self) -> bool:
        return self.jnl is not None

    def committed(self) -> bool:
        return self.jnl is not None and any(r["type"] in (Rec.DELETE, Rec.COMMIT) for r in self.jnl.written)

    def retired(self) -> bool:
        """The commit record written, or the verified manifest (every file in the vault and checked)."""
        return any(r["type"] == Rec.COMMIT for r in self.jnl.written) or \
            retirement_recorded(self.ctx.vault, self.jnl.op_id)

    def code_of(self, error: BaseException) -> Code:
        return failure_code(error)

    def rollback_record(self, reason: str) -> None:
        self.jnl.append({"type": Rec.ROLLBACK, "reason": reason})

    def put_back(self, reason: str, committed: bool) -> str:
        """Every file back at its path (``rollback_retire``), whether the delete record was
        written or not: the vault holds each file that left the logdir."""
        unsettled: List[str] = []
        noted = rollback_retire(self.ctx, self.jnl.records(), reason, self.jnl, unsettled=unsettled)
        self.out.found(Finding.FOLDER_NOT_SETTLED, unsettled)  # its code is the cause: a second code (#26)
        return noted

    def close(self) -> None:
        journal, self.jnl = self.jnl, None
        journal.close()

    def release(self) -> None:
        """Every run lock released (once)."""
        locks, self.locks = self.locks, []
        for lk in locks:
            lk.release()


def _inode(f: dict) -> tuple:
    """What names one inode among a run's inventoried files: hard links share all of these."""
    return f["ino"], f["size"], f["mtime_ns"], f["uid"]


def _names_inside(files: List[dict]) -> "collections.Counter":
    """How many of the run's own names each inode has (``_inode``): links within the run."""
    return collections.Counter(_inode(f) for f in files)


def _copied(same_fs: bool, f: dict) -> bool:
    """Whether the run's file ``f`` is retired as a copy (its original unlinked after the ``delete``
    record): always across filesystems; on one, a file that had other hard links (``copy``)."""
    return not same_fs or bool(f.get("copy"))


@contextlib.contextmanager
def _run_folder(ctx: Context, f: dict) -> Iterator[Tuple[int, str]]:
    """(the descriptor of the folder of the run's file ``f``, as the logdir store's walk reaches
    it, and its name there) (``placement.folder_at``: a link on the way is ``TransactionError``
    coded ``StoreError.SYMLINK``); a folder gone is a change to the run (``Skip.ACTIVE``)."""
    with folder_at(ctx, f["path"]) as at:
        if at is None:
            raise TransactionError(f"{f['path']}: changed during the retirement (is the run still being written?)",
                                   Skip.ACTIVE)
        yield at


def _check_space(path: str, need: int) -> None:
    free = shutil.disk_usage(path).free
    if free < need + FREE_SPACE_MARGIN:
        raise TransactionError(f"not enough free space on {path}: needs {human_bytes(need + FREE_SPACE_MARGIN)}, "
                               f"has {human_bytes(free)}; nothing was changed", Failure.REFUSED)


def _refuse_folders_not_ours(ctx: Context, dirs: List[dict]) -> None:
    """Once the recorded folders stand (``make_dirs``), before any file moves: none of another user
    (``retire_tree.folders_not_ours``, review R16 H1); the files stay in the vault, the journal kept."""
    foreign = folders_not_ours(ctx, dirs)
    if foreign:
        raise TransactionError(foreign, Failure.RESTORE_BLOCKED)


def rollback_retire(ctx: Context, records: List[dict], reason: str, journal: Optional[OpJournal] = None,
                    unsettled: Optional[List[str]] = None) -> str:
    """Put every file of an uncommitted retirement back at its path; idempotent. Returns what
    it noticed on the way (late records kept, files set aside), '' when nothing.

    A file is in the logdir, in the vault, or (copies) both; it is only ever put back where
    nothing stands. A file that grew in place but still starts with its recorded bytes is the
    original plus a writer's late records: intact. A file a writer made anew at the path while
    the original was in the vault is set aside next to it (``<file>.salvaged-NNN``), so both are
    in the run. Anything else in its way raises (journal kept).

    Each put-back (and setting aside) follows the folder's swap strategy (``retire_tree.put_back``):
    where it does not rename, each copy is journaled first (``copying``, to ``journal``: the
    operation's own, or its file opened by path when recovery calls without one), and a copy an
    earlier, killed attempt so recorded is recognised as its own. ``unsettled``: the recorded
    folders left without their mode and time (``chmod_dirs``: a link) appended to it, for the
    caller's finding; the notes name them too."""
    begin = records[0]
    check_record(ctx, begin)
    vault = Vault(begin["vault"])
    op_id = begin["op_id"]
    if retirement_recorded(vault, op_id):
        raise TransactionError(f"retirement {op_id} is recorded as verified in {vault.root}: the run is retired; "
                               "its files are not taken out of the vault on a journal's word", Failure.REFUSED)
    check_retired_dir(vault, op_id)
    make_dirs(ctx, begin["dirs"], refuse_theirs=True)  # a restore's one folder rule: the no-follow walk, 0700
    _refuse_folders_not_ours(ctx, begin["dirs"])
    if journal is None:
        journal = Journal(os.path.join(ctx.journal_dir, f"{op_id}.jsonl"), may_create=False)
    begun = copies_begun(records)
    notes = []
    for i, f in enumerate(begin["files"]):
        note = put_back(ctx, vault, op_id, i, f, begin["same_fs"], set_aside=True, journal=journal, begun=begun,
                        dirs=begin["dirs"])
        if note:
            notes.append(note)
    left_unsettled = chmod_dirs(ctx, begin["dirs"])
    if unsettled is not None:  # the caller's finding (``Finding.FOLDER_NOT_SETTLED``), the notes say them
        unsettled.extend(left_unsettled)
    notes.append(unsettled_note(left_unsettled))
    settle_folder_times(ctx, begin.get("dir_times"))
    missing = []
    for i, f in enumerate(begin["files"]):
        p = ctx.abs(f["path"])
        if sized(p, f["size"]):
            continue
        if grown(p, f):
            notes.append(f"{f['path']}: records written to it during the retirement are kept in it")
            continue
        if os.path.lexists(stored_file(vault, op_id, i)) or not os.path.isdir(vault.root):
            missing.append(f["path"])  # its retired bytes may still be in the vault: never given up
        else:
            # nothing of it is in the vault: what stands at the path is all there is; the
            # journal has nothing left to put back, so it settles and says so
            notes.append(f"{f['path']}: changed in place by another process after it was put back; left as it is")
    if missing:
        raise TransactionError(f"could not put back: {', '.join(missing)}")
    left = drop_retired(vault, op_id, len(begin["files"]))
    if left:
        notes.append(left)
    detail = "; ".join(dict.fromkeys(n for n in notes if n))
    write_retire_manifest(ctx, records, Outcome.ROLLED_BACK, f"{reason}; {detail}" if detail else reason)
    return detail


# ---------------------------------------------------------------------------------------
# restore a retirement
# ---------------------------------------------------------------------------------------
def unretire(ctx: Context, manifest: dict) -> RunOutcome:
    """Bring a retired run back byte for byte (tree sha256 checked); returns an outcome: the one
    restore of a retirement (``engine.unretire_run``) over a disk's layout, ``DiskUnretire``."""
    return one_unretire.unretire(DiskUnretire(ctx, manifest))


class DiskUnretire(one_unretire.UnretireLayout):
    """A disk's layout of the one restore of a retirement (``unretire_run.Unretire``):

    - refused before anything is held: a record (run, vault) that does not check out, a symlink
      on the way, a retirement the vault does not hold; then, by the one rule of every store
      (``retire_rules.new_run_refusal`` over ``standing`` and ``retired_at``), anything standing
      at or below the run's path that is not a retired file as it was (a link, a file, another
      run's: never followed, ``standing_at``; folders holding nothing are no name, as on a bucket);
    - held: the lock of every run it puts back (``run_lock``);
    - **journal**: under the locks, an unsettled operation on a run, a stored file missing (or
      every one changed) or a folder this user may not write refuses it (nothing changed); a
      stored file grown after the retirement goes back whole, one that no longer begins with its
      recorded bytes is left in the vault (the begin record's ``changed``, ``retire_tree.stored_as``);
      then the logdir's identity bound and the begin record (``unretire.journal``);
    - **swap**: every file put back where nothing stands, the folders' modes and times after
      (``unretire_put_back``: ``unretire.mid_move`` after the first; ``unretire.move``); another
      file standing at a path is left as it is (``retire_tree.StandsThere``), its original in the
      vault, as a bucket leaves another object at a key;
    - **commit**: the run re-hashed against its tree sha256 (with a path left: each file put back
      against its entry), the vault's copy released (an original left stays: its ``files/<n>``,
      the only copy), the retirement's manifest marked restored (``not_restored`` naming the paths
      left: purge keeps it whole), ``unretire.manifest``, the restore's manifest and change-log
      line, the journal closed (``unretire_commit``); restored, coded ``not_restored`` when a path
      was left, as on every store.

    A failure is said as on every store (``Unretire.rollback``); an injected fault is said as any
    failure. A journal kept is finished by the next start through these same steps
    (``finish_unretire``: ``journal`` the restore's kept journal): its run's lock is recovery's
    (the runs it takes along are held here), something at the run's path is what the restore put
    back, the copies checked are those still in the vault (a file renamed back is at its path),
    neither what is unsettled (recovery settles each journal in turn) nor the folders' modes (the
    run's may be its recorded ones already) are asked, nothing is written before the put-back, and
    the journal is never dropped (``started`` from the first instant)."""

    failpoints = {"journal": "unretire.journal"}
    errors = (Exception,)

    def __init__(self, ctx: Context, manifest: dict, journal: Optional[Journal] = None) -> None:
        super().__init__(manifest)
        self.ctx = ctx
        self.vault: Optional[Vault] = None  # once its record checks out (``refused``)
        self.locks: list = []
        self.jnl: Optional[Journal] = journal
        self.resumed = journal is not None
        self.op_id = journal.op_id if journal is not None else None
        self.put: Optional[tuple] = None
        self.put_started = self.resumed  # a folder made or a file put back, maybe
        self.grown: Dict[int, dict] = {}  # the stored files that grew, each the entry it goes back by
        self.changed: List[str] = []  # the paths whose stored files do not begin with their bytes
        self.by_path: Optional[Dict[str, dict]] = None  # the retired files by name, once asked

    def refused(self) -> None:
        ctx, m, run = self.ctx, self.m, self.out.run
        try:
            check_record(ctx, m)
            rel_ok(ctx, run)
            no_symlink(ctx, run)
        except TransactionError as e:
            raise txn.Refused(str(e)) from e
        self.vault = Vault(m["vault"])
        try:
            check_retired_dir(self.vault, m["op_id"])
        except TransactionError as e:
            raise txn.Refused(f"{e}; nothing was changed") from e
        foreign = folders_not_ours(ctx, m["dirs"])
        if foreign:
            raise txn.Refused(f"{foreign}; nothing was changed", Failure.RESTORE_BLOCKED)

    def standing(self) -> Optional[Dict[str, os.stat_result]]:
        """What stands at or below the run's path (``standing_at``: the walk that follows no link),
        the state and the vaults left out: the one rule against a new run of the same name
        (``retire_rules.new_run_refusal``) decides, as on every store; a resumed restore's is what
        it put back (None)."""
        if self.resumed:
            return None
        ctx, run = self.ctx, self.out.run
        levels = levels_for(run, (f.get("path") for f in self.m["tree"] if isinstance(f, dict)))
        return standing_at(ctx, run, [ctx.state, ctx.vault.root, self.m["vault"]], levels)

    def retired_at(self, name: str, seen: os.stat_result) -> Optional[bool]:
        """True where ``name`` holds the retired file as it was (a regular file of its recorded
        size, mtime, mode and sha256: what the put-back finds in place and the commit's re-hash
        passes), False at another of its names, None at a name the retirement never had."""
        if self.by_path is None:
            self.by_path = {f["path"]: f for f in self.m["tree"]}
        f = self.by_path.get(name)
        if f is None:
            return None
        try:
            as_was = unchanged(name, f, seen) and (seen.st_mode & 0o7777) == (f["mode"] & 0o7777)
        except (KeyError, TypeError):  # a record without them (untrusted input): not known to be it
            return False
        return as_was and holds_original(self.ctx.store, self.ctx.key(name), f, seen.st_size)

    def hold(self) -> bool:
        r = self.out.run
        try:  # a recovery holds the run's own lock already
            for r in ([] if self.resumed else [self.out.run]) + taken_along(self.m):
                self.locks.append(run_lock(self.ctx, r).acquire())
        except (RunLocked, OSError) as e:
            self.out.code, self.out.reason = lock_failure(e, r, self.ctx.lock_dir)
            return False
        return True

    def begin(self, op_id: str, report: txn.Report) -> None:
        """Under the locks: nothing unsettled, every stored file checked, the folder writable;
        then the begin record (refused, nothing changed: an untrusted state folder, no journal)."""
        ctx, m, vault, run = self.ctx, self.m, self.vault, self.out.run
        assert vault is not None
        unsettled = None if self.resumed else \
            next((u for u in (unsettled_op(ctx, r) for r in [run] + taken_along(m)) if u), None)
        if unsettled:
            raise txn.Refused(f"unfinished operation {unsettled} on this run could not be settled yet",
                              Failure.UNSETTLED)
        # every stored file read before anything moves (a resumed restore's files renamed back
        # already are at their paths, and checked there): one grown after the retirement goes back
        # whole (``stored_as``: its recorded bytes, then a writer's late records); one that does
        # not begin with its recorded bytes stays in the vault and is named (``not_restored``),
        # the others go back, as the restore's begin record says (a resumed restore leaves those
        # its begin record named and refuses one damaged since: nothing more is put back); one
        # missing, or every one changed, refuses the restore: nothing changed
        self.grown, self.changed = {}, []
        left = set(left_changed(self.jnl.records()[0], (f["path"] for f in m["tree"]))
                   if self.resumed and self.jnl else ())
        damaged = []
        for i, f in enumerate(m["tree"]):
            if (self.resumed and not os.path.lexists(stored_file(vault, m["op_id"], i))) or f["path"] in left:
                continue
            state, entry = stored_as(vault, m["op_id"], i, f)
            if state == GROWN:
                self.grown[i] = entry
            elif state == CHANGED and not self.resumed:
                self.changed.append(f["path"])
            elif state != RECORDED:
                damaged.append(f["path"])
        if not damaged and self.changed and len(self.changed) == len(m["tree"]):
            damaged = self.changed  # nothing would come back: refused, as before
        if damaged:
            raise txn.Refused(f"retired files missing or damaged in {retired_dir(vault, m['op_id'])}: "
                              f"{', '.join(damaged[:5])}; nothing was changed"
                              + ("; the journal is kept" if self.resumed else ""))
        if self.resumed:
            # its journal stands (recovery checked it, and the logdir's identity); the run's
            # folders may carry their recorded modes already (a read-only run is as it was): a
            # file it cannot put back fails there, the journal kept, and says so
            return
        # the run's folder (or where it is made again) writable, refused before anything moves
        # as reduce and restore refuse (review R16 F8); its folders below are made by this user
        refusal = access_refusal(ctx.logdir, (), [run])
        if refusal:
            raise txn.Refused(f"{refusal}; nothing was changed", Failure.REFUSED)
        try:
            identity = trust.bind(ctx.logdir, ctx.state)
            self.jnl = Journal.create(ctx.journal_dir, op_id, {
                "type": Rec.BEGIN, "kind": "unretire", "op_id": op_id, "run": run, "of_op": m["op_id"],
                "vault": m["vault"], "logdir": ctx.logdir, "logdir_id": identity["id"],
                # the stored files left in the vault, not beginning with their recorded bytes
                CHANGED_PATHS: self.changed,
            })
        except trust.Untrusted as e:
            raise txn.Refused(str(e), Failure.REFUSED) from e
        except OSError as e:
            raise txn.Refused(f"cannot start the restore (journal in {ctx.journal_dir}): {reason_of(e)}",
                              failure_code(e)) from e

    def put_back(self, report: txn.Report) -> None:
        """Every file back at its path (``unretire_put_back``); first, with nothing made yet, the
        look at the run's folders again: a link or another user's folder made at the run's name
        since the look before the journal refuses it as that look does, the journal dropped
        (review R22 F7: the walk's link came up uncoded, "the next start finishes" though every
        start met it; the run's folders were made inside another user's folder)."""
        assert self.jnl is not None
        # nothing at the run's path (the common case): nothing below it either, one lstat
        foreign = folders_not_ours(self.ctx, self.m["dirs"]) \
            if os.path.lexists(self.ctx.abs(self.out.run)) else None
        if foreign:
            raise TransactionError(f"{foreign}; nothing was changed", Failure.RESTORE_BLOCKED)
        self.put_started = True
        self.put = unretire_put_back(self.ctx, self.jnl.records(), self.grown)

    def settle(self, op_id: str, report: txn.Report) -> Tuple[str, Optional[Code]]:
        """The run checked and recorded as restored (``unretire_commit``), the journal closed."""
        assert self.jnl is not None
        detail = unretire_commit(self.ctx, *self.put) if self.put else "already restored"
        self.jnl.close()
        out, m = self.out, self.m
        left = set(self.put[3]) if self.put else set()
        back = [f for f in m["tree"] if f["path"] not in left]
        out.bytes_after = m.get("bytes_before", 0) if not left else sum(f["size"] for f in back)
        out.created_files = [f["path"] for f in back]
        # an original not back is said first; a recorded folder left without its mode and time (a
        # link, ``chmod_dirs``) has its own code, the detail naming it (review R7 F6)
        unsettled = self.put[4] if self.put else ()
        late = _late_paths(self.put[2]) if self.put else []  # the manifest the commit marked
        out.found(Finding.NOT_RESTORED, sorted(left))
        out.found(Finding.BACKUP_CHANGED,
                  sorted(set(left_changed(self.put[0], (f["path"] for f in m["tree"]))) & left) if self.put else ())
        out.found(Finding.LATE_RECORDS_RESTORED, late)
        out.found(Finding.FOLDER_NOT_SETTLED, unsettled)
        return detail, (Finding.NOT_RESTORED if left else Finding.LATE_RECORDS_RESTORED if late
                        else Finding.FOLDER_NOT_SETTLED if unsettled else None)

    def journaled(self) -> bool:
        return self.jnl is not None

    def started(self) -> bool:
        return self.put_started

    def drop_journal(self) -> None:
        """Nothing was put back (no folder made either): the journal removed, the run retired as it was."""
        if self.jnl is not None:
            try:
                self.jnl.close()
                self.jnl = None
            except OSError:
                pass  # it stays: the next start finishes the restore

    def code_of(self, error: BaseException) -> Code:
        return failure_code(error)

    def release(self) -> None:
        for lk in self.locks:
            lk.release()
        self.locks = []


def finish_unretire(ctx: Context, records: List[dict], findings: Optional[List[dict]] = None) -> str:
    """Finish the restore of a retirement its kept journal names (recovery, under the run's lock):
    the one restore's sequence (``unretire_run.unretire``) over ``DiskUnretire`` with that journal,
    as a bucket's recovery runs it with its own; idempotent. Killed after the retirement's mark,
    only the restore's record is left to write. Returns what was done; raises when the restore
    is not finished (its journal then stays for the next start)."""
    begin, vault, m = _journaled_retirement(ctx, records)
    if m.get("restored_by") == begin["op_id"]:
        # marked restored before a kill: the restore's manifest and line, written after the mark,
        # may be missing; each written now, once
        if record_unretire(ctx, begin, vault, m, once=True):
            return "already restored; its record written"
        return "already restored"
    if m.get("run") != begin["run"]:  # the run recovery holds is the journal's
        raise TransactionError(f"retirement {m.get('op_id')} names run {m.get('run')!r}, its restore's journal "
                               f"{begin['run']!r}; left alone", Failure.REFUSED)
    journal = Journal(os.path.join(ctx.journal_dir, f"{begin['op_id']}.jsonl"), may_create=False)
    out = one_unretire.unretire(DiskUnretire(ctx, m, journal))
    if out.status != Outcome.RESTORED:
        raise TransactionError(out.reason, out.code)
    if findings is not None:  # the restore's findings (not_restored, folder_not_settled), for recovery's outcome
        findings.extend(out.findings)
    return out.reason


def _journaled_retirement(ctx: Context, records: List[dict]) -> Tuple[dict, Vault, dict]:
    """The begin record of a restore's journal, its vault and the manifest of the retirement it
    restores, each checked (``check_record``; the journal is untrusted)."""
    begin = records[0]
    check_record(ctx, begin)
    if not OP_ID_RE.match(str(begin.get("of_op", ""))):
        raise TransactionError(f"malformed operation id {begin.get('of_op')!r}; left alone", Failure.REFUSED)
    vault = Vault(begin["vault"])
    m = vault.read_manifest(begin["of_op"])
    check_record(ctx, m)
    return begin, vault, m


def _late_paths(m: dict) -> List[str]:
    """The paths a restore of retirement ``m`` put back grown (``unretire_commit``)."""
    late = m.get("late_records_restored")
    return [p for p in late if isinstance(p, str)] if isinstance(late, list) else []


def unretire_put_back(ctx: Context, records: List[dict], grown: Optional[Dict[int, dict]] = None
                      ) -> Optional[Tuple[dict, Vault, dict, List[str], List[str]]]:
    """Every file of the retirement a restore's journal names back at its path, the folders'
    modes and times after; idempotent. A path where another file stands is left as it is, its
    original in the vault (``StandsThere``), as is a file whose stored copy does not begin with
    its recorded bytes (the begin record's ``changed``). ``grown``: by index, the entries of the
    stored files that grew after the retirement (``retire_tree.stored_as``): each goes back whole,
    a copy checked against that entry. Returns (the begin record, the vault, the
    retirement's manifest, the paths left, the recorded folders left without their mode and time:
    links, or reached only through one, ``chmod_dirs``), or None when that manifest says this
    restore is done already."""
    begin, vault, m = _journaled_retirement(ctx, records)
    if m.get("restored_by") == begin["op_id"]:
        return None
    op_id = m["op_id"]
    check_retired_dir(vault, op_id)
    make_dirs(ctx, m["dirs"], refuse_theirs=True)
    _refuse_folders_not_ours(ctx, m["dirs"])
    same_fs = m.get("same_fs") and vault.same_filesystem(ctx.logdir)
    # where the folder does not rename, each copy is journaled first (``copying``), and a partial
    # copy an earlier, killed attempt so recorded is its own (``retire_tree.put_back``)
    jnl = Journal(os.path.join(ctx.journal_dir, f"{begin['op_id']}.jsonl"), may_create=False)
    begun = copies_begun(records)
    # their stored files stay in the vault, not read as the run's
    left = left_changed(begin, (f["path"] for f in m["tree"]))
    for i, f in enumerate(m["tree"]):
        if f["path"] in left:
            continue
        try:
            put_back(ctx, vault, op_id, i, dict((grown or {}).get(i) or f), bool(same_fs), journal=jnl, begun=begun,
                     dirs=m["dirs"])
        except StandsThere:
            left.append(f["path"])  # another file's path now: left as it is, the original kept
        if i == 0:
            faults.hit("unretire.mid_move")
    # a name left in the vault whose inode another name took back into the run: its copy its own
    for i, f in enumerate(m["tree"]):
        if f["path"] in left and os.path.lexists(stored_file(vault, op_id, i)):
            own_inode(vault, op_id, i)
    unsettled = chmod_dirs(ctx, m["dirs"])
    settle_folder_times(ctx, m.get("dir_times"))
    return begin, vault, m, left, unsettled


def unretire_commit(ctx: Context, begin: dict, vault: Vault, m: dict, left: Iterable[str] = (),
                    unsettled: Iterable[str] = ()) -> str:
    """The run back byte for byte (every file put back re-hashed where it stands), the vault's
    copy released, the retirement marked restored, the restore's manifest and change-log line.
    ``left``: the paths another file holds (``unretire_put_back``): never read, their originals
    kept in the vault (the only copy: ``files/<n>`` stays, the folder with it), named
    ``not_restored`` in the manifest, which purge keeps whole."""
    op_id = m["op_id"]
    left = sorted(set(left))
    back = [(i, f) for i, f in enumerate(m["tree"]) if f["path"] not in left]
    # byte for byte: every file put back re-hashed where it stands now; one longer than recorded
    # that begins with its recorded bytes (its mode the recorded one) is the file with a writer's
    # late records after them, grown in the vault or since it went back (``rollback_retire``'s rule)
    now, late = [], []
    for _i, f in back:
        p = ctx.abs(f["path"])
        st = os.lstat(p)
        if st.st_size > f["size"] and st.st_mode & 0o7777 == f["mode"] & 0o7777 \
                and starts_with(p, f["size"], f["sha256"]):
            late.append(f)
            continue
        now.append({"path": f["path"], "size": st.st_size, "mode": st.st_mode & 0o7777, "sha256": sha256_file(p)})
    # with a path left or grown, each file against its entry of a tree that is the manifest's own
    want = [f for _i, f in back if f not in late] if left or late else m["tree"]
    if tree_sha256(now) != tree_sha256(want) or tree_sha256(m["tree"]) != m["tree_sha256"]:
        bad = [a["path"] for a, b in zip(sorted(now, key=lambda e: e["path"]), sorted(want, key=lambda e: e["path"]))
               if (a["size"], a["sha256"]) != (b["size"], b["sha256"])]
        raise TransactionError(f"restored run does not match its tree sha256: {', '.join(bad[:5]) or 'modes differ'}")
    m["restored_by"] = begin["op_id"]
    m["restored_at"] = time.time()
    if late:
        m["late_records_restored"] = [f["path"] for f in late]
    if left:
        # each original left is in the vault only: its copy stays (the folder with it), the rest go
        for i, _f in back:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stored_file(vault, op_id, i))
        m["not_restored"] = left
    else:
        shutil.rmtree(retired_dir(vault, op_id), ignore_errors=True)
        # the retired tree just went (the run stands verified in the logdir): nothing is kept, so
        # purge has nothing to offer of it; a restore's release marked this only as a side effect
        m["backup_purged"] = True
        m["backup_released_by_restore"] = begin["op_id"]
        m["purged_at"] = m["restored_at"]
    vault.write_manifest(m)
    faults.hit("unretire.manifest")
    record_unretire(ctx, begin, vault, m)
    detail = f"{len(back)} file(s) back byte for byte ("
    detail += f"tree sha256 {m['tree_sha256'][:12]}… checked)" if not (left or late) else \
        "each checked against its sha256)"
    if late:
        detail += (f"; {len(late)} file(s) grew after the retirement (a writer held them open), e.g. "
                   f"{late[0]['path']}: each back whole, its recorded bytes then the records written after them")
    changed = [p for p in left_changed(begin, (f["path"] for f in m["tree"])) if p in left]
    if changed:
        detail += (f"; {len(changed)} retired file(s) no longer begin with their recorded bytes, e.g. {changed[0]}: "
                   "left in the vault (not put back), and purge keeps them")
    if len(left) > len(changed):
        detail += (f"; {len(left) - len(changed)} path(s) hold another file now and were left as they are, e.g. "
                   f"{next(p for p in left if p not in changed)}: their originals stay in the vault, and purge keeps them")
    note = unsettled_note(list(unsettled))
    return f"{detail}; {note}" if note else detail


def record_unretire(ctx: Context, begin: dict, vault: Vault, m: dict, once: bool = False) -> bool:
    """The restore's own manifest and change-log line, once retirement ``m`` is marked restored by
    it. ``once`` (a recovery finishing a restore killed after that mark): the manifest written
    only when missing, the line only when the log has none of it (``ChangeLog.append_once``).
    Returns whether a line was written."""
    held = m.get("not_restored")  # read back by a recovery: untrusted
    left = {p for p in held if isinstance(p, str)} if isinstance(held, list) else set()
    if not (once and vault.has_manifest(begin["op_id"])):
        vault.write_manifest(one_schema.new(
            op_id=begin["op_id"], kind="restore", run=m["run"], logdir=ctx.logdir, started_at=begin["t"],
            finished_at=time.time(), outcome=Outcome.RESTORED, files=[], backup_purged=True, of_op=m["op_id"],
            vault=vault.root, tool_version=__version__, **who(),
            **({"logdir_id": begin["logdir_id"]} if begin.get("logdir_id") else {}),
            restored_files=[f["path"] for f in m["tree"] if f["path"] not in left], tree_sha256=m["tree_sha256"]))
    # the retired tree went with the mark, unless an original was left in the vault
    line = unretire_line(m, begin["op_id"], kept=bool(left), **who(), tool_version=__version__)
    if once:
        return bool(disk_log(ctx.state, create=True).append_once([dict(line, time=time.time())]))
    append_history(ctx.state, line)
    return True


# ---------------------------------------------------------------------------------------
# recovery
# ---------------------------------------------------------------------------------------
def log_recorded(ctx: Context, begin: dict) -> bool:
    """The change-log line of retirement ``begin`` (its journal's begin record) whose verified
    manifest is written, unless the log has it (``ChangeLog.append_once``): its time the
    manifest's ``finished_at``, when the line would have been written; its numbers and names the
    manifest's where they are of their type (it is untrusted), else the journal's. A manifest that
    does not read writes none (status names it). Returns whether it wrote it."""
    try:
        m = Vault(begin["vault"]).read_manifest(begin["op_id"])
    except (OSError, ValueError):
        return False

    def number(v, default):
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default

    def text(v):
        return v if isinstance(v, str) else None

    at = m.get("finished_at")
    at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at) \
        and 0 < at <= time.time() else time.time()
    mine = {"op_id": begin["op_id"], "run": begin["run"], "takes_along": begin.get("takes_along") or [],
            "bytes_before": number(m.get("bytes_before"), begin["bytes"]), "bytes_after": number(m.get("bytes_after"), 0),
            "user": text(m.get("user")), "host": text(m.get("host"))}
    line = dict(retire_line(mine, Outcome.VERIFIED, tool_version=text(m.get("tool_version"))), time=at)
    return bool(disk_log(ctx.state, create=True).append_once([line]))


def recover_retire(ctx: Context, records: List[dict], findings: Optional[List[dict]] = None) -> Tuple[str, str]:
    """Settle an unfinished retirement or restore of one; returns (codes.Recovery value, detail).
    ``findings``: what it found besides (``[{code, path}]``, as ``RunOutcome.findings``), appended."""
    from tb_footprint_plugin.codes import Recovery

    begin = records[0]
    if begin["kind"] == "unretire":
        return Recovery.COMPLETED, finish_unretire(ctx, records, findings)
    if any(r["type"] == Rec.COMMIT for r in records):
        return Recovery.COMPLETED, "was committed"
    check_record(ctx, begin)
    if retirement_recorded(Vault(begin["vault"]), begin["op_id"]):
        # its verified manifest was written: every file was in the vault and checked; the run is
        # retired, whatever the journal says next (a journal is untrusted: a planted or damaged one
        # never undoes a recorded retirement, review R11 F2). A kill between the manifest and its
        # change-log line left the line unwritten: written now, once
        detail = "retirement was recorded before the crash"
        return Recovery.COMPLETED, detail + ("; its change-log line written" if log_recorded(ctx, begin) else "")
    unsettled: List[str] = []
    noted = rollback_retire(ctx, records, RECOVERED_REASON, unsettled=unsettled)
    if findings is not None:
        findings.extend({"code": str(Finding.FOLDER_NOT_SETTLED), "path": p} for p in unsettled)
    return Recovery.ROLLED_BACK, "every file of the run put back" + (f"; {noted}" if noted else "")


__all__ = ["retire_run", "DiskRetire", "DiskUnretire", "unretire_put_back", "unretire_commit", "record_unretire",
           "unretire", "finish_unretire", "rollback_retire", "log_recorded", "recover_retire",
           "retirements", "retired_now", "is_restorable_retirement", "retired_dir", "tree_sha256", "inventory",
           "RETIRE_STEPS", "UNRETIRE_STEPS"]
