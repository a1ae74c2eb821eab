"""Restore: put back the exact original bytes of a reduction (sha256 checked), remove what it
created, check the run reads as the original, and record it.

A restore is journaled too. It only ever adds original bytes back and removes files the
reduction itself created (recognized by their sha256), so every step is idempotent and an
interrupted restore is simply finished on the next start. It is one transaction, ``LocalRestore``,
run by the one driver ``engine.txn.run``: its put-back (``finish_restore``) is the swap, the
commit point; a cancel is honoured up to it, never after.

Why one module: the put-back and the release of the backups it made redundant are one rule of
invariant 1 — a blob goes only once the file it backs stands in place with its digest, and only
when no claim (``_claimed_now``: manifests, journals, pins, files in place) keeps it — whether
the release runs at the end of a run's restore, of a restore of many runs (``Releases``) or at
the next start; apart, the claims check and the order of marks could drift from the put-back's.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import stat
import time
from typing import Callable, Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import Code, Failure, Finding, Outcome, Skip, StoreError
from tb_footprint_plugin.engine import faults, remote_vault, trust, txn
from tb_footprint_plugin.engine import manifest as one_schema
from tb_footprint_plugin.engine.catalogue import (is_own, journal_blobs, known_vaults, manifest_binding, own_manifests,
                                                   unsettled_op)
from tb_footprint_plugin.engine.context import (
    FREE_SPACE_MARGIN,
    Cancelled,
    CancelToken,
    Context,
    RunOutcome,
    TransactionError,
    failure_code,
    new_op_id,
    no_symlink,
    reason_of,
)
from tb_footprint_plugin.engine.catalogue_rules import left_in_vault, left_row
from tb_footprint_plugin.engine.history import append_history
from tb_footprint_plugin.engine.putback import (backups_refusal, begins_with, holds_original, kept_said,
                                                 late_records_said, left_said, restore_code, restore_outcome,
                                                 restore_refusal, restored_said, writer_met)
from tb_footprint_plugin.engine.journal import Journal, RunLocked
from tb_footprint_plugin.engine.run_lock import lock_failure, run_lock
from tb_footprint_plugin.engine.staged_ident import left_at_temp_note
from tb_footprint_plugin.engine.swap import (copies_begun, folder_owners, folder_times, folders_theirs, make_dirs,
                                             put_back, put_back_names_free, put_back_token, settle_dirs,
                                             settle_folder_times, unsettled_note)
from tb_footprint_plugin.engine.placement import folder_at, holds_whole
from tb_footprint_plugin.engine.relink import Relinks, first_name, peer_index
from tb_footprint_plugin.engine.retire_rules import KIND as RETIRE_KIND
from tb_footprint_plugin.engine.retire_rules import new_run_refusal
from tb_footprint_plugin.engine.retire_tree import stored_file
from tb_footprint_plugin.engine.standing import levels_for, standing_and_writers
from tb_footprint_plugin.engine.restore_staged import (Prepared, PreparedVault, checked_in_place, prepare_streamed,
                                                       remove_restore_temps, temp_folder)
from tb_footprint_plugin.engine.vault_reads import (ARCHIVED, DAMAGED, HIDDEN, UNREADABLE, missing_backup, read_roots,
                                                    slim)
from tb_footprint_plugin.engine.vault import EveryBlob, ManifestMemo, Vault, VaultError, who
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.plan.owners import not_given_back
from tb_footprint_plugin.scan.categories import is_summary_event_file_name
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.access import access_refusal, is_permission_error
from tb_footprint_plugin.storage.files import plausible_id
from tb_footprint_plugin.storage.paths import is_sha256, is_within, real_within
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.openfiles import describe_holders
from tb_footprint_plugin.version import __version__


def run_folder(ctx: Context, run: str) -> str:
    """The run's folder, or the nearest folder above it that stands (within the logdir): where
    its originals go back, on its file system."""
    d = ctx.abs(run)
    while not os.path.isdir(d) and is_within(os.path.dirname(d), ctx.logdir) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    return d if os.path.isdir(d) else ctx.logdir


def run_block_size(ctx: Context, run: str) -> int:
    """The block size of the run's file system (``st_blksize``): the size a hole is made of."""
    try:
        return os.stat(run_folder(ctx, run)).st_blksize or 4096
    except OSError:
        return 4096


def free_space(path: str) -> int:
    """Bytes free to this user on ``path``'s file system (tests replace it)."""
    return shutil.disk_usage(path).free


def check_restore_space(ctx: Context, run: str, allocates: int, size: int) -> None:
    """Refuse a restore (``TransactionError``, ``Failure.NO_SPACE``) unless the run's file system
    has room for what its put-backs allocate (``allocates``: the backups' blocks that are not all
    zeros; ``size``: their files' length, holes included) and a margin: said before anything is
    written, naming the run, the bytes needed and the bytes free, never found half-way."""
    if allocates <= 0:
        return
    where = run_folder(ctx, run)
    free = free_space(where)
    need = allocates + FREE_SPACE_MARGIN
    if free < need:
        holes = f" (its files are {human_bytes(size)}; holes go back as holes)" if size > allocates else ""
        raise TransactionError(
            f"not enough free space to restore run {run!r}: its originals need {human_bytes(allocates)}{holes} "
            f"plus a {human_bytes(FREE_SPACE_MARGIN)} margin ({need} bytes) on {where}, which has "
            f"{human_bytes(free)} ({free} bytes) free; nothing was changed", Failure.NO_SPACE)


def restore_access(manifest: dict) -> Tuple[List[str], List[str]]:
    """What a restore of ``manifest`` reads where it stands (the files at the originals' paths,
    the files the reduction made) and the folders it changes (theirs, and those of the folders it
    makes again): ``files.access_refusal``'s arguments."""
    created = [c["path"] for c in manifest.get("created", [])]
    read = [f["path"] for f in manifest.get("files", [])] + created
    change = [os.path.dirname(p) for p in read] + [os.path.dirname(d["path"]) for d in manifest.get("removed_dirs", [])]
    return read, change


def stopped_half_way(ctx: Context, e: BaseException) -> Tuple[str, Code]:
    """The reason and code of a put-back (restore, unretire) that failed after its journal: left
    for the next start to finish. A permission error is no interruption: every start fails the
    same way until the mode is fixed (review R16 F8), so it says so, with the system's code; nor is
    a writer at an original's path (``Skip.OPEN_FOR_WRITING``: held open, or changing it at every
    look): every start meets it while it writes, so it is named as the cause (review R5 F5)."""
    if isinstance(e, TransactionError) and e.code == Skip.OPEN_FOR_WRITING:
        return (f"restore stopped: {reason_of(e)}; the run is partly restored, nothing is lost (what stood there "
                f"is kept, in place or in the vault); once the writer has stopped, "
                f"`tb-footprint recover {shlex.quote(ctx.logdir)}` finishes it", Skip.OPEN_FOR_WRITING)
    if isinstance(e, TransactionError) and e.code == StoreError.SYMLINK:
        # a folder on an original's way swapped for a link: never followed, and every start meets it
        return (f"restore stopped: {reason_of(e)}; the run is partly restored, nothing is lost (its originals stay "
                f"in the vault); once the link is replaced by the run's folder, `tb-footprint recover "
                f"{shlex.quote(ctx.logdir)}` finishes it", StoreError.SYMLINK)
    if isinstance(e, TransactionError) and e.code == Failure.RESTORE_BLOCKED:
        # another user's folder put on an original's way after the first look: every start meets it
        return (f"restore stopped: {reason_of(e)}; the run is partly restored, nothing is lost (its originals stay "
                f"in the vault); once that folder is moved away, `tb-footprint recover {shlex.quote(ctx.logdir)}` "
                "finishes it", Failure.RESTORE_BLOCKED)
    if is_permission_error(e):
        return (f"restore stopped: {reason_of(e)}; the run is partly restored, nothing is lost (its originals stay "
                f"in the vault); once this user may write there, `tb-footprint recover {shlex.quote(ctx.logdir)}` "
                "finishes it", StoreError.PERMISSION)
    return f"restore interrupted: {reason_of(e)}; it will be finished on the next start", Failure.INTERRUPTED


def restore_ops(ctx: Context, ops: List[dict], memo: Optional[ManifestMemo] = None,
                each: Optional[Callable[[dict, RunOutcome], RunOutcome]] = None,
                cancel: Optional[CancelToken] = None,
                progress: Optional[Callable[[str, str, float], None]] = None) -> List[RunOutcome]:
    """Restore reductions one after the other (``restore_op`` each, its outcome then given to
    ``each``), their pack copies let go together once every run is back (``Releases``: one
    forget for the call, not one a run); each outcome's detail then says what its release
    freed. An interrupt before that leaves the restored operations' backups kept: the next
    start releases them (``upkeep``). ``cancel``: the run under way stops before its first
    put-back (``restore_op``); those after it are not started (``Skip.CANCELLED``)."""
    releases = Releases()
    outcomes = []
    for m in ops:
        if cancel is not None and cancel.cancelled:
            o = RunOutcome(run=m["run"], status=Outcome.SKIPPED, code=Skip.CANCELLED, reason="cancelled",
                           op_id=m["op_id"], bytes_before=m.get("bytes_after", 0), bytes_after=m.get("bytes_after", 0))
        else:
            o = restore_op(ctx, m, memo, releases, cancel, progress)
        outcomes.append(o if each is None else each(m, o))
    freed = releases.finish(ctx, memo)
    for m, o in zip(ops, outcomes):
        n = freed.get(m["op_id"], 0) if o.status == Outcome.RESTORED else 0
        if n:
            o.reason = (o.reason or "") + f"; the vault's now redundant copy freed ({human_bytes(n)})"
    return outcomes


def restore_op(ctx: Context, manifest: dict, memo: Optional[ManifestMemo] = None,
               releases: Optional["Releases"] = None, cancel: Optional[CancelToken] = None,
               progress: Optional[Callable[[str, str, float], None]] = None) -> RunOutcome:
    """Restore one reduction; returns an outcome (status 'restored' or 'failed' with the reason).
    The checks that read only the catalogue first (a newer reduction, a purged backup, a
    retirement: nothing held, nothing changed), then ``LocalRestore`` run by ``engine.txn.run``
    (its backups checked under the run's lock, as a bucket's). ``memo``: the command's (a
    restore of many runs): the manifests its checks and its release read afresh are read through
    it, so only those changed since its last read are read again. ``releases``: the command's;
    the pack copies this restore lets go are forgotten with the other runs' by its ``finish``
    (``restore_ops``), else at once.
    ``cancel``: honoured up to the first put-back, never after (the run is then left as it was,
    code ``interrupted``). ``progress(run, step, fraction)``: ``check`` while streamed backups
    are checked, ``restore`` as the first original goes back."""
    t0 = time.monotonic()
    run = manifest["run"]
    out = restore_outcome(manifest)  # a refusal before the journal names the reduction, as a bucket's
    # one read of now (through the memo) for both checks: a newer reduction, a retirement; only this
    # run's operations and the retirements are copied out of it and checked as this logdir's
    mine = own_manifests(ctx, read_roots(known_vaults(ctx), True, memo,
                                         where=lambda r, kind: r == run or kind == "retire"))
    refusal = restore_refusal(manifest, mine)  # newer reduction, purged, retired: the rule of every store
    theirs = None if refusal else folders_theirs(ctx, manifest.get("removed_dirs", []), manifest.get("files", []),
                                                 run, plausible_id(manifest.get("run_uid")))
    if theirs:
        refusal = Failure.RESTORE_BLOCKED, theirs
    if refusal:
        out.code, out.reason = refusal
        return out
    vault = Vault(manifest["vault"])
    # a remote backup a check would download and not keep (issue #27): checked under the run's
    # lock and journal instead, by streaming it into its target's temporary, which the put-back
    # then renames; every other backup is checked under the run's lock, before the journal
    streamed = [f for f in manifest.get("files", []) if checked_in_place(vault, f)]
    try:
        cancel = cancel or CancelToken()
        txn.run(LocalRestore(ctx, manifest, out, vault, streamed, memo, releases, cancel), cancel,
                (lambda step, frac: progress(run, step, frac)) if progress is not None else None)
    finally:
        out.duration_s = round(time.monotonic() - t0, 3)
    return out


def _reduction_at(ctx: Context, manifest: dict) -> Callable[[str], Optional[bool]]:
    """``retire_rules.new_run_refusal``'s look at a name of the run on a disk: True where it holds
    what the reduction made there (its recorded bytes, perhaps with records a writer appended) or
    the original back; False at another name of the reduction's; None at a name it never had.
    Read through the store (no link followed), one name at a time."""
    created = {c["path"]: c for c in manifest.get("created", []) if isinstance(c, dict)}
    originals = {f["path"]: f for f in manifest.get("files", []) if isinstance(f, dict)}

    def ours(name: str) -> Optional[bool]:
        c, f = created.get(name), originals.get(name)
        if c is None and f is None:
            return None
        key = ctx.key(name)
        size, sha = (c.get("size"), c.get("sha256")) if c is not None else (None, None)
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0 and is_sha256(sha):
            try:
                if begins_with(ctx.store, key, size, sha):
                    return True
            except OSError:
                pass  # gone, a link, unreadable: not known to be the reduction's
        return f is not None and holds_original(ctx.store, key, f)

    return ours


class LocalRestore(txn.PutBack):
    """The steps of the restore of a reduction on a disk for ``engine.txn.run``:

    - **journal**: the run's lock; the refusals, each ``NotStarted`` with nothing changed (its
      backups damaged or unreadable, an unsettled operation on the run, a live writer: a skip,
      a new run of its name (``retire_rules.new_run_refusal`` over ``standing.standing_at``: a link
      at or in the run's path a name, never followed), access, space, an untrusted state
      folder, no journal); the begin record (``restore.journal`` after it);
    - **backup**: the big remote backups checked by streaming each into its target's temporary
      (``prepare_streamed``), then the ``verified`` record; nothing when there are none;
    - stage, transform, verify, the last look and the swap record: nothing (the files go back
      unchanged, and a restore journals no swap record: recovery reads its journals as ever);
    - **swap**: ``finish_restore``: the originals back, what the reduction made removed, the run
      checked and recorded (``restore.dirs``, ``restore_copied``, ``restore.file``, ``restore.check``);
    - **commit**: the temporaries no put-back took removed, the journal closed, the outcome.

    The swap is the commit point: a cancel is honoured up to it (the driver's last check), never
    after. A failure or a cancel before it changed nothing of the run: the temporaries go, the
    journal is closed and the outcome says nothing was changed. A failure once the put-back began
    is never undone (``journaled`` False: no rollback record): the outcome says the restore
    stopped half-way (``stopped_half_way``) and the journal stays for the next start
    (``finish_restore``)."""

    verb = "restore"
    errors = (Exception,)
    rollback_errors = (OSError,)
    FAILPOINTS = {"journal": "restore.journal"}

    def __init__(self, ctx: Context, manifest: dict, out: RunOutcome, vault: Vault, streamed: List[dict],
                 memo: Optional[ManifestMemo], releases: Optional["Releases"], cancel: CancelToken) -> None:
        self.ctx, self.manifest, self.out, self.vault = ctx, manifest, out, vault
        self.streamed, self.allocates, self.memo, self.releases = streamed, 0, memo, releases
        self.cancel = cancel
        self.lock = None
        self.jnl: Optional[Journal] = None
        self.token = secrets.token_hex(16)
        self.prepared = Prepared()
        self.checking = False  # in the check of the streamed backups
        self.swapping = False  # the put-back began: from here the restore is finished, never undone
        self.detail = ""
        self.unsettled: List[str] = []  # recorded folders left without their mode and time (``finish_restore``)
        self.not_linked: List[str] = []  # later names of an inode put back as copies (``finish_restore``)
        self.not_owned: List[str] = []  # files put back that are this user's, not their recorded owner's
        #: (first name, blocks): the later names of an inode ``_check_backups`` counted no blocks for
        self.later_names: list = []
        self.error: Optional[BaseException] = None

    def failpoint(self, step: str) -> Optional[str]:
        return self.FAILPOINTS.get(step)

    def journal(self, report: txn.Report) -> None:
        """The run's lock, the refusals, the begin record."""
        ctx, manifest, out, run = self.ctx, self.manifest, self.out, self.out.run
        try:
            self.lock = run_lock(ctx, run).acquire()
        except (RunLocked, OSError) as e:
            out.code, out.reason = lock_failure(e, run, ctx.lock_dir)
            out.holder = e.holder if isinstance(e, RunLocked) else None
            if out.code == Skip.LOCKED:  # another process holds it: a skip, as reduce and retire say
                out.status = Outcome.SKIPPED
            raise txn.NotStarted() from e
        # the backups checked under the lock, as a bucket's: another process's restore or reduce
        # may be changing the vault until it is held, so a check made before could be stale
        refusal = self._check_backups()
        if refusal:
            out.code, out.reason = refusal
            raise txn.NotStarted()
        unsettled = unsettled_op(ctx, run)
        if unsettled:
            out.reason = (f"unfinished operation {unsettled} on this run could not be settled yet; "
                          f"run `tb-footprint recover {ctx.logdir}`")
            out.code = Failure.UNSETTLED
            raise txn.NotStarted()
        try:  # the look that follows no link (invariant 4): a link at the run's path or in it is a name
            # its originals, what it made, the folders it removed: nothing of it stands deeper
            recorded = (e.get("path") for k in ("files", "created", "removed_dirs")
                        for e in manifest.get(k, []) if isinstance(e, dict))
            # and, in the same walk, writers anywhere in the run, however deep, each file asked
            # about through its folder's descriptor: a folder swapped for a link is never followed
            standing, writers = standing_and_writers(ctx, run, [ctx.state, self.vault.root],
                                                     levels_for(run, recorded))
        except txn.Refused as e:  # a link on the way to the run: nothing looked at beyond it
            out.reason, out.code = e.reason, e.code or Failure.RESTORE_BLOCKED
            raise txn.NotStarted() from e
        if writers.holders:
            # the restore puts originals over these paths: a live writer's next records would go
            # into an inode that is then only the vault's copy (the reduce refuses the same way)
            out.status, out.code, out.reason = writer_met(
                Skip.OPEN_FOR_WRITING, f"run {run!r} is being written: "
                + describe_holders(writers.holders) + "; not restored (stop the writer, then restore)")
            raise txn.NotStarted()
        # the run deleted and written again under its name (review R9 F7): its originals put back
        # would merge two runs into one; refused as every store refuses it, the backup kept
        refusal = new_run_refusal(run, standing, _reduction_at(ctx, manifest), took_all=False,
                                  left=bool(manifest.get("created")))
        if refusal:
            out.reason, out.code = refusal, Failure.RESTORE_BLOCKED
            raise txn.NotStarted()
        refusal = access_refusal(ctx.logdir, *restore_access(manifest))
        if refusal:  # said before the first file moves, as reduce says it (never found half-way)
            out.reason, out.code = f"{refusal}; nothing was changed", Failure.REFUSED
            raise txn.NotStarted()
        # a later name whose first name stands already is no link of this restore's put-back: the
        # link may be refused (another user's file, review R19 F1) and a copy written (R19 F5)
        allocates = self.allocates + sum(n for first, n in self.later_names if first in standing)
        try:  # every original is written as a copy of its own before anything is removed
            check_restore_space(ctx, run, allocates, sum(f["size"] for f in manifest.get("files", [])))
        except TransactionError as e:
            out.reason, out.code = str(e), e.code
            raise txn.NotStarted() from e
        op_id = new_op_id()
        try:
            identity = trust.bind(ctx.logdir, ctx.state)
            self.jnl = Journal.create(ctx.journal_dir, op_id, {
                "type": "begin", "kind": "restore", "op_id": op_id, "run": run, "of_op": manifest["op_id"],
                "vault": manifest["vault"], "logdir": ctx.logdir, "logdir_id": identity["id"],
                # the token of its temp names: recovery of a killed restore removes exactly those
                "tmp_token": self.token,
                # backups checked after this record (``streamed``): until its ``verified`` record
                # nothing may be put back, and recovery only removes the temporaries and gives
                # the folders they stood in their times back (review R18 P2)
                **({"checks_first": True,
                    "dir_times": folder_times(ctx, sorted({temp_folder(ctx, f["path"]) for f in self.streamed}))}
                   if self.streamed else {}),
            })
        except trust.Untrusted as e:
            out.reason, out.code = str(e), Failure.REFUSED
            raise txn.NotStarted() from e
        except OSError as e:
            out.reason = f"cannot start the restore (journal in {ctx.journal_dir}): {reason_of(e)}"
            out.code = failure_code(e)
            raise txn.NotStarted() from e
        out.op_id = self.op_id = op_id  # started: named by its own op id (its manifest's, its history line's)

    def _check_backups(self) -> Optional[Tuple[Code, str]]:
        """Every backup not streamed read back to its sha256 (``putback.backups_refusal`` when
        one is damaged or unreadable); the same read counts what the put-back allocates (zero
        blocks go back as holes: a sparse original needs its data extents, not its size), a
        streamed one counted whole (checked later, as it is streamed in)."""
        vault, streamed = self.vault, self.streamed
        block, damaged, unreadable, hidden, archived = run_block_size(self.ctx, self.out.run), [], [], [], []
        by_path = {f.get("path"): f for f in self.manifest.get("files", [])}
        rewritten = {c.get("path") for c in self.manifest.get("created", []) if isinstance(c, dict)}
        blocks: Dict[str, int] = {}
        for f in self.manifest.get("files", []):
            first = first_name(f, by_path) if f.get("path") not in rewritten else None
            if first is not None:
                # a later name of an inode: a link of its first (checked there), no blocks, while
                # the first name is this restore's own put-back; counted in ``journal`` else
                self.later_names.append((first["path"], f["sha256"]))
                continue
            if any(f is g for g in streamed):
                self.allocates += blocks.setdefault(f["sha256"], f["size"])
                continue
            n = vault.check_blob_extents(f["sha256"], block)
            if n is None:
                kind, entry = missing_backup(vault, f["path"], f["sha256"])
                {DAMAGED: damaged, UNREADABLE: unreadable, HIDDEN: hidden, ARCHIVED: archived}[kind].append(entry)
            else:
                self.allocates += blocks.setdefault(f["sha256"], n)
        self.later_names = [(p, blocks.get(sha, 0)) for p, sha in self.later_names]
        return backups_refusal(vault.root, damaged, unreadable, hidden, archived)

    def backup(self, report: txn.Report) -> None:
        """The streamed backups, each read back whole into its target's temporary (the cancel
        looked at before each), then the ``verified`` record (nothing may be put back before it)."""
        if not self.streamed:
            return
        report("check", 0.1)
        self.checking = True
        prepare_streamed(self.ctx, self.vault, self.streamed, self.token, self.prepared, self.cancel)
        self.checking = False
        self.jnl.append({"type": "verified", "ok": True})  # every backup read back whole

    def verify(self, report: txn.Report) -> None:
        """Nothing yet: the run is checked once it is back (``finish_restore``, in the swap)."""

    def swap(self, report: txn.Report) -> None:
        """Every original back (``finish_restore``): past this point the restore is finished."""
        self.swapping = True
        report("restore", 0.5)  # past the commit point: a front end stops offering a cancel
        self.detail = finish_restore(self.ctx, self.jnl.records(), self.memo, self.prepared, self.releases,
                                     journal=self.jnl, unsettled=self.unsettled, not_linked=self.not_linked,
                                     not_owned=self.not_owned)

    def commit(self, report: txn.Report) -> None:
        """The temporaries no put-back took removed (the original stood there already), while
        the journal still names them; the journal closed; the outcome."""
        self.prepared.discard()
        self.jnl.close()
        out, manifest = self.out, self.manifest
        out.status, out.code = Outcome.RESTORED, None
        out.reason = self.detail
        try:  # said with a code too when newer bytes were found in an original's place
            # a recorded folder left without its mode and time (a link) is said with its own code,
            # after what was found in an original's place (bytes first)
            out.code = restore_code(self.vault.read_manifest(out.op_id).get("displaced", []),
                                    Finding.FOLDER_NOT_SETTLED if self.unsettled else None)
        except (OSError, ValueError):
            pass
        out.found(Finding.FOLDER_NOT_SETTLED, self.unsettled)  # each one, whatever the code says first
        out.found(Finding.HARD_LINKED, self.not_linked)  # a link recorded at the backup, not made again
        out.found(Finding.OWNER_NOT_GIVEN_BACK, self.not_owned)  # only root gives an owner back
        out.bytes_after = manifest.get("bytes_before", 0)
        out.created_files = [f["path"] for f in manifest.get("files", [])]
        out.removed_files = [c["path"] for c in manifest.get("created", [])
                             if c["path"] not in {f["path"] for f in manifest.get("files", [])}]

    def journaled(self) -> bool:
        return False  # never a rollback record: a restore's journal is finished or closed, never undone

    def committed(self) -> bool:
        return self.swapping

    def failed(self, error: BaseException) -> None:
        self.error = error

    def rollback(self, committed: bool) -> None:
        """Nothing is undone. Past the commit point the outcome says why the restore stopped and
        its journal stays for the next start; before it, nothing of the run changed: the
        temporaries go (their folders' times back), the journal is closed."""
        out, e = self.out, self.error
        if committed:
            out.reason, out.code = stopped_half_way(self.ctx, e)
            return
        if isinstance(e, Cancelled):
            out.reason, out.code = f"restore {e} (before anything was put back); nothing was changed", e.code
        elif self.checking and isinstance(e, (OSError, TransactionError)):
            # a backup that does not verify, or no temporary
            bad = isinstance(e, (VaultError, remote_vault.RemoteReadError, FileNotFoundError))
            out.reason = ("" if bad else "cannot stage a backup from the remote vault: ") + \
                f"{reason_of(e)}; nothing was changed"
            out.code = Failure.BACKUP_DAMAGED if bad else Failure.ERROR
            if isinstance(e, remote_vault.RemoteReadError) and e.code == StoreError.ARCHIVED:
                out.code = StoreError.ARCHIVED  # its words name the object and what to ask for: not damaged
        else:
            out.reason, out.code = f"restore stopped before anything was put back: {reason_of(e)}; " \
                "nothing was changed", Failure.ERROR
        self.prepared.abandon()
        if self.jnl is not None:
            self.jnl.close()
        # nothing changed and its journal closed: no line records it (review R5 F3), so it names
        # the reduction it was asked to restore, as a refusal before its journal does
        out.op_id = self.manifest["op_id"]

    def incomplete(self, error: BaseException) -> None:
        """The journal of a restore stopped before its put-back could not be closed: the next
        start settles it (removes its temporaries or, its backups all checked, finishes it)."""
        self.out.reason = (f"{self.out.reason}; but its journal could not be closed ({reason_of(error)}): "
                           "the next start settles it")
        self.out.code = Failure.INTERRUPTED
        self.out.op_id = self.op_id  # its journal stands, named by its own op id: what status and recover name

    def unwind(self) -> None:
        """The temporaries no put-back took (the journal names them until it is closed)."""
        self.prepared.discard()

    def end(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def restore_abandoned(records: List[dict]) -> bool:
    """Whether this restore journal is one stopped while checking its backups (``checks_first``
    and no ``verified`` record): nothing was put back, and finishing it only removes its
    temporaries."""
    return bool(records) and bool(records[0].get("checks_first")) and \
        not any(r.get("type") == "verified" for r in records[1:])


def finish_restore(ctx: Context, records: List[dict], memo: Optional[ManifestMemo] = None,
                   prepared: Optional["Prepared"] = None, releases: Optional["Releases"] = None,
                   journal: Optional[Journal] = None,
                   unsettled: Optional[List[str]] = None, not_linked: Optional[List[str]] = None,
                   not_owned: Optional[List[str]] = None) -> str:
    """Do (or finish) the restore described by its journal records; idempotent. ``memo``: see
    ``restore_op``. ``prepared``: the temporaries this process's check streamed its big remote
    backups into (``prepare_streamed``), renamed into place instead of downloading them again.
    A restore journaled to check backups after its begin (``checks_first``) and killed before
    its ``verified`` record had put nothing back: its temporaries are removed (their folders'
    times given back), nothing else. ``releases``: see ``restore_op``. ``journal``: the
    restore's, where a put-back that copies (the folder's swap strategy, ``placement.put_in_place``)
    records each copy before it begins; a partial copy an earlier attempt so recorded left is
    its own (``placement.partial_put_back``). ``unsettled``: the recorded folders left without their
    mode and time (a link, or reached only through one: ``swap.settle_dirs``) appended to it, for
    the caller's code (``Finding.FOLDER_NOT_SETTLED``); the detail names them too (review R7 F6).
    Names of one inode at the reduction's backup go back as hard links of the first one put back
    (``relink.Relinks``); ``not_linked``: those put back as copies instead (a link failed), appended
    for the caller's finding (``Finding.HARD_LINKED``). ``not_owned``: the files put back that are this
    user's while their backup recorded another's (only root gives an owner back), appended for the
    caller's finding (``Finding.OWNER_NOT_GIVEN_BACK``); the detail says whose they are now."""
    begin = records[0]
    vault = PreparedVault(begin["vault"], prepared) if prepared is not None and prepared.temps else Vault(begin["vault"])
    manifest = vault.read_manifest(begin["of_op"])
    originals = {f["path"] for f in manifest["files"]}
    token = put_back_token(begin)
    not_ours: List[str] = []  # at its temporaries' names, files it cannot tell for its own (review R28 F2)
    if restore_abandoned(records):
        removed = remove_restore_temps(ctx, manifest, token, left=not_ours)
        settle_folder_times(ctx, begin.get("dir_times"))  # as they were before its first temporary
        return (f"stopped while its backups were being checked, before anything was put back; "
                f"{len(removed)} temporary cop{'y' if len(removed) == 1 else 'ies'} removed, the run left as it was"
                + (f"; {left_at_temp_note(not_ours)}" if not_ours else ""))
    remove_restore_temps(ctx, manifest, token, spare=prepared, left=not_ours)
    if prepared is None and not put_back_names_free(ctx, manifest["files"], token):
        # a file it may not remove stands at a journaled name (review R28 F2): the put-back takes
        # fresh random names, as a rollback does, instead of failing at that name at every start
        token = None
    # folders owner-writable while files go back in; their recorded modes and mtimes at the end
    remade = make_dirs(ctx, manifest.get("removed_dirs", []), refuse_theirs=True)
    faults.hit("restore.dirs")
    created = {c["path"]: c for c in manifest.get("created", [])}
    # what this restore found in an original's place, recorded in the reduction's manifest
    # before the original goes back: a restore finished after a crash still knows it
    displaced = [d for d in manifest.get("restore_displaced", []) if d.get("by") == begin["op_id"]]
    begun = copies_begun(records)  # the originals (and salvage files) an earlier attempt began to copy

    def remember(d: dict) -> None:
        if any(x.get("path") == d["path"] and x.get("sha256") == d.get("sha256") for x in displaced):
            return
        displaced.append({**d, "by": begin["op_id"]})
        manifest["restore_displaced"] = [x for x in manifest.get("restore_displaced", [])
                                         if x.get("by") != begin["op_id"]] + displaced
        vault.write_manifest(manifest)

    # whose each folder an original goes back into may be, asked again as each one takes its name
    owners = folder_owners(manifest.get("removed_dirs", []), manifest["files"], manifest["run"],
                           plausible_id(manifest.get("run_uid")))
    relinks = Relinks(ctx, manifest)
    if relinks.outside:  # names of its inodes in other runs: only then are the other reductions read
        relinks.join(releases.peers(ctx, memo) if releases is not None else
                     peer_index(own_manifests(ctx, read_roots(known_vaults(ctx), True, memo)), but=manifest["op_id"]))
    for f in manifest["files"]:
        if relinks.linked(f):  # a later name of an inode: a link of its first name, put back above
            faults.hit("restore.file")
            continue
        # bytes written there since the reduction are kept in the vault, never lost, and the
        # records among them go back into the run beside the original
        d = put_back(ctx, vault, f, created.get(f["path"]), on_displaced=remember, tmp_token=token,
                     journal=journal, begun=begun, owners=owners)
        if d and d.get("kept_in_place"):
            displaced.append(d)
        faults.hit("restore.file")
    displaced = [{k: v for k, v in d.items() if k != "by"} for d in displaced]
    kept_changed = []
    for c in manifest.get("created", []):
        if c["path"] in originals:
            continue  # an in-place rewrite: the original now stands at that name again
        no_symlink(ctx, c["path"])
        if not holds_original(ctx.store, ctx.key(c["path"]), c):  # not the reduction's bytes (or gone)
            if os.path.lexists(ctx.abs(c["path"])):
                kept_changed.append(c["path"])
            continue
        # removed in its folder as the walk reaches it, its bytes asked again there: a folder on
        # the way swapped for a link since the look is refused (coded), nothing outside removed
        # (review R8 F7; the journal stays and the next start finishes once the folder is back)
        with folder_at(ctx, c["path"]) as at:
            if at is not None and holds_whole(at[1], c, dir_fd=at[0]):
                fsops.unlink(at[1], dir_fd=at[0])
    left_unsettled = settle_dirs(ctx, manifest.get("removed_dirs", []), remade)
    if unsettled is not None:
        unsettled.extend(left_unsettled)
    settle_folder_times(ctx, manifest.get("dir_times"))
    bad = [f["path"] for f in manifest["files"] if not holds_original(ctx.store, ctx.key(f["path"]), f)]
    if bad:
        raise TransactionError(f"restored files do not match their sha256: {', '.join(bad)}")
    _check_reads(ctx, [f["path"] for f in manifest["files"]])
    # what this restore made: the files put back (not those left where another file stands) and
    # the folders it made again
    left = {d["path"] for d in displaced if d.get("kept_in_place")}
    put = [f for f in manifest["files"] if f["path"] not in left]
    made = set(remade)
    others = _owners_not_given(ctx, put + [d for d in manifest.get("removed_dirs", [])
                                           if isinstance(d, dict) and d.get("path") in made])
    if not_owned is not None:
        not_owned.extend(p for p, _u in others)
    faults.hit("restore.check")
    manifest["restored_by"] = begin["op_id"]
    manifest["restored_at"] = time.time()
    # what its release may let go, recorded in the same line, before any of it goes; the
    # release takes out of it what stays (``release_restored_backup``)
    manifest[one_schema.RELEASED] = sorted(one_schema.released(manifest) | {f["sha256"] for f in manifest["files"]})
    vault.write_manifest(manifest)
    changed: set = set()
    released = release_restored_backup(ctx, vault, manifest, keep={d.get("sha256") for d in displaced},
                                       changed=changed, memo=memo, releases=releases)
    vault.write_manifest(one_schema.new(
        op_id=begin["op_id"], kind="restore", run=manifest["run"], logdir=ctx.logdir, started_at=begin["t"],
        finished_at=time.time(), outcome=Outcome.RESTORED, files=[], backup_purged=True, of_op=manifest["op_id"],
        **({"logdir_id": begin["logdir_id"]} if begin.get("logdir_id") else {}),
        vault=vault.root, tool_version=__version__, **who(),
        restored_files=sorted(originals), kept_changed=kept_changed, displaced=displaced))
    append_history(ctx.state, {
        # ``of_op``: the reduction restored, as a bucket's restore line and an unretire's say it
        "op_id": begin["op_id"], "kind": "restore", "run": manifest["run"], "of_op": manifest["op_id"], "policy": None,
        "before": manifest.get("bytes_after"), "after": manifest.get("bytes_before"), "verified": True,
        "outcome": Outcome.RESTORED, "reason": f"restored {manifest['op_id']}", "backup_kept": True,
        "user": who()["user"], "host": who()["host"], "tool_version": __version__,
        **({"code": restore_code(displaced), "kept": [_kept_view(vault, d) for d in displaced if d.get("sha256")]}
           if displaced else {}),
    })
    detail = restored_said(len(originals), "sha256")
    if released and not (releases is not None and releases.defers(manifest["op_id"])):
        detail += f"; the vault's now redundant copy freed ({human_bytes(released)})"  # else said once finished
    detail += left_said(kept_changed) + relinks.said() + not_given_back(others)
    if not_linked is not None:
        not_linked.extend(relinks.findings())
    if changed:
        names = sorted(f["path"] for f in manifest["files"] if f["sha256"] in changed)
        detail += (f"; the vault's backup of {', '.join(names)} was kept: it changed since the reduction "
                   f"({Finding.BACKUP_CHANGED.value}; bytes written to it may exist nowhere else, "
                   "`tb-footprint status` names it)")
    detail += late_records_said(displaced)
    detail += kept_said(len([d for d in displaced if d.get("sha256")]), "file",
                        f"restore {begin['op_id']}; `tb-footprint status` shows how to bring them back")
    note = "; ".join(n for n in (unsettled_note(left_unsettled), left_at_temp_note(not_ours)) if n)
    return f"{detail}; {note}" if note else detail


def _owners_not_given(ctx: Context, files: List[dict]) -> List[Tuple[str, int]]:
    """(path, recorded uid) of each file put back (or folder made again) that is not its recorded
    owner's: run by a user who is not root, a file made anew is that user's (``storage.files.give_owner`` gives back only the
    group; review R26, a teammate's restore of a team run). Each looked at in its folder reached
    without a link; none when root (root gives owners back) or nothing recorded another uid."""
    me = os.geteuid()
    if me == 0:
        return []
    out = []
    for f in files:
        uid = plausible_id(f.get("uid"))
        if uid is None or uid == me:
            continue
        with folder_at(ctx, f["path"]) as at:
            if at is None:
                continue
            try:
                st = os.lstat(at[1], dir_fd=at[0])
            except OSError:
                continue
        if st.st_uid != uid:
            out.append((f["path"], uid))
    return out


def _kept_view(vault: Vault, d: dict) -> dict:
    late = d.get("late_records") or {}
    return {"path": d["path"], "sha256": d["sha256"], "size": d.get("size"),
            "blob": os.path.join(vault.root, "blobs", d["sha256"][:2], d["sha256"]),
            "late_records": late.get("records", 0), "late_records_file": late.get("file")}


def kept_blobs(ctx: Context, manifests: List[dict]) -> List[dict]:
    """Every blob a restore or a rollback kept in the vault in a file's place (bytes written
    after a reduction, which no backup holds): what it holds and how to bring it back, for
    ``status``, ``history`` and the tab. A blob gone from the vault is listed as missing."""
    out = []
    for m in manifests:
        for d in m.get("displaced", []):
            sha = d.get("sha256")
            if not sha or d.get("kept_in_place"):
                continue
            try:
                vault = Vault(m["vault"])
                blob = vault.blob_path(sha)
            except (KeyError, OSError, ValueError):
                continue  # an untrusted record: never a path
            late = d.get("late_records") if isinstance(d.get("late_records"), dict) else {}
            form = vault.blob_form(sha)  # a blob shared with a compacted backup may be its .zst
            present = form is not None
            if form == "zst":
                blob = vault.zst_path(sha)
            size = d.get("size") if isinstance(d.get("size"), int) else 0
            holds = (f"{d['path']} as it stood before {'the restore' if m.get('kind') == 'restore' else 'the rollback'}"
                     f" ({human_bytes(size)})")
            if d.get("not_put_back") is True:  # the original itself: a writer replaced it before the swap
                holds = f"{d['path']}'s original, not put back by its rollback: another file stood there ({human_bytes(size)})"
            if late.get("file"):
                holds += (f": the reduced file with {late.get('records', 0)} record(s) written after the reduction, "
                          f"which are back in the run as {late['file']}")
            out.append({
                "op_id": m.get("op_id"), "kind": m.get("kind"), "of_op": m.get("of_op"), "run": m.get("run"),
                "path": d["path"], "sha256": sha, "size": d.get("size"), "blob": blob, "present": present,
                "code": Finding.LATE_RECORDS_RESTORED if late.get("file") else Finding.NOT_RESTORED
                if d.get("not_put_back") is True else Finding.DISPLACED_KEPT,
                "late_records": late.get("records", 0), "late_records_file": late.get("file"),
                "holds": holds,
                # an event file's copy under a name TensorBoard does not read: its records would
                # show twice next to the restored original
                "bring_back": ("zstd -d " if form == "zst" else "cp --preserve=timestamps ")
                + shlex.quote(blob) + (" -o " if form == "zst" else " ") + shlex.quote(_kept_name(ctx, d["path"], sha)),
            })
        out += _left_in_vault(ctx, m)
    return out


def _left_in_vault(ctx: Context, m: dict) -> List[dict]:
    """The originals restored retirement ``m`` left in the vault (``not_restored``: another file
    stood at the path, ``retire.unretire_commit``), each its own ``kept_blobs`` row: its
    ``files/<n>`` is the only copy, which nothing else lists once the run is back. The manifest is
    untrusted: a path not a string, with no entry of the tree, or outside the logdir is not listed;
    the copy's place is derived from the vault the manifest was found in and its checked op id."""
    if m.get("kind") != RETIRE_KIND:
        return []
    tree = m.get("tree") if isinstance(m.get("tree"), list) else []
    index = {f["path"]: (i, f) for i, f in enumerate(tree) if isinstance(f, dict) and isinstance(f.get("path"), str)}
    out = []
    for p in left_in_vault(m, index):
        i, f = index[p]
        try:
            vault = Vault(m["vault"])
            blob = stored_file(vault, m["op_id"], i)
            dest = _kept_name(ctx, p, f.get("sha256") if isinstance(f.get("sha256"), str) else m["op_id"])
        except (KeyError, OSError, ValueError, TypeError):
            continue  # an untrusted record: never a path
        if not is_within(blob, vault.root):
            continue
        try:  # a regular file of the vault's own, never a link followed
            present = stat.S_ISREG(os.lstat(blob).st_mode) and real_within(blob, vault.root)
        except OSError:
            present = False
        size = f.get("size") if isinstance(f.get("size"), int) and not isinstance(f.get("size"), bool) else None
        out.append(left_row(m, p, size, f.get("sha256") if isinstance(f.get("sha256"), str) else None, blob, present,
                            "cp --preserve=timestamps " + shlex.quote(blob) + " " + shlex.quote(dest)))
    return out


def _kept_name(ctx: Context, path: str, tag: str) -> str:
    """Where a kept copy of ``path`` is brought back: beside it, under a name TensorBoard does not
    read for event files (an event file's records would show twice next to the one standing)."""
    if is_summary_event_file_name(os.path.basename(path)):
        return os.path.join(os.path.dirname(ctx.abs(path)), f"kept-{tag[:12]}.tfrecord")
    return ctx.abs(path) + ".kept"


def release_restored_backup(ctx: Context, vault: Vault, manifest: dict, keep=frozenset(),
                            changed: Optional[set] = None, memo: Optional[ManifestMemo] = None,
                            releases: Optional["Releases"] = None) -> int:
    """After a verified restore the originals stand in the logdir again; the vault's copies of
    them are then redundant and are dropped, so a restore leaves the disk no fuller than before
    the reduce (the backup of a reduction is a hard link until the purge; the restore writes a
    fresh copy). Returns the bytes freed.

    Invariant 1: a blob goes only when the file in place matches its sha256 and size right now,
    no other operation of any logdir using this vault still claims it (nor an unfinished one, nor
    ``keep``), and every manifest of the vault could be read — on any doubt the blob stays (and
    ``purge`` can free it later). The manifest stops claiming the backup before any blob goes.
    A plain blob goes only while it hashes to its name: one a late writer grew holds bytes that
    may exist nowhere else, so it stays with its other forms, its digest added to ``changed``
    (``status`` names it), and the manifest keeps claiming it. ``memo``: the manifests are
    still read afresh under the locks, only through it (those unchanged since are not parsed again).
    ``releases`` (a restore of many runs): a blob held only in the vault's packs is left to its
    ``finish`` (the same checks, under the same locks, for every run's at once), and this
    operation is marked released there, once they went; the bytes returned are the local forms'.
    """
    if not manifest.get("restored_by"):
        return 0
    files = {f["sha256"]: f for f in manifest.get("files", [])}  # one file per digest is enough
    candidates = [sha for sha in files if vault.has_blob(sha)]
    # a plain blob of another size than its original was written to since (a late writer of a
    # linked original): the whole backup stays, not the rest of it, so the operation is not left
    # claiming blobs that went (status would call them missing); ``delete_blobs`` checks again
    grew = {sha for sha in candidates if _plain_size(vault, sha) not in (None, files[sha]["size"])}
    if grew:
        if changed is not None:
            changed.update(grew)
        _settle_released(vault, manifest, set(), set())
        return 0
    deferred = []
    if releases is not None:  # packed only, no local form: nothing to do here but wait for the others
        deferred = [sha for sha in candidates if vault.local_form(sha) is None
                    and remote_vault.packed_ref(vault.root, sha) is not None]
        left = set(deferred)
        candidates = [sha for sha in candidates if sha not in left]
    # the record before the deletes: what this release may let go, so an operation left with
    # some of its blobs (another operation claims them) or killed half way is known as released,
    # not damaged (``health``, ``purge``); what stays is taken out of it below. A restore wrote
    # it with its mark already (``restore_op``): no line more here
    _record_released(vault, manifest, set(candidates) | set(deferred))
    kept: set = set()
    by_others: set = set()  # kept for another operation's claim (not for this one's own doubt)
    last: List[List[dict]] = []  # the manifests the last ``needed`` read under the locks

    def needed() -> set:
        claimed = _claimed_now(ctx, vault, [manifest["op_id"]], files, keep, memo, read=last, others=by_others)
        kept.update(claimed)
        return claimed

    grown: set = set()
    freed = vault.delete_blobs(candidates, needed, changed=grown) if candidates else {}
    if changed is not None:
        changed.update(grown)
    if deferred:
        releases.add(vault, manifest, {sha: files[sha] for sha in deferred}, keep, sum(freed.values()))
    # a blob let go is one no claim kept under the locks and, if it has local forms, one they
    # went from (not kept for a live pin); one only the remote vault holds goes from there once
    # the manifests say so. Only then, and only for those, the marks: a kill before them is
    # finished by the next start, which marks an operation whose blobs are all absent
    gone = {sha for sha in candidates if sha not in kept and sha not in grown
            and (freed.get(sha) or vault.local_form(sha) is None)}
    # what stayed for this operation's own doubt (its file in place changed, its blob grew, a
    # pin, an unread manifest) is no release: out of the record; one another operation claims
    # stays in it (that one's health names it), as does what ``finish`` may still let go
    _settle_released(vault, manifest, gone | set(deferred), by_others)
    # looked over slim (what says which blobs each claims), the one marked written whole: the
    # read the release's last decision made under the locks, a moment ago (a manifest committed
    # since claims none of the blobs that went; one this misses is marked by the next start).
    # Nothing went (every blob left to ``releases``): no other operation's state changed
    read = last[-1] if last else (vault.manifests(slim(vault.root), memo=memo) if gone else [])
    _mark_released(vault, [manifest], read, gone, manifest["restored_by"])
    return sum(freed.values())


def _record_released(vault: Vault, manifest: dict, shas: set, trim: bool = False) -> None:
    """Set ``manifest``'s ``released`` record (``engine.manifest.RELEASED``) to ``shas`` (of its
    own digests), written (one fsynced log line) when it changes; a record only ever grows
    before deletes (``trim``: after them, it may shrink to what went)."""
    own = {f["sha256"] for f in manifest.get("files", [])}
    now = one_schema.released(manifest)
    want = frozenset(shas) & own
    if not trim:
        want |= now
    if sorted(want) == manifest.get(one_schema.RELEASED) or (not want and one_schema.RELEASED not in manifest):
        return
    manifest[one_schema.RELEASED] = sorted(want)
    vault.write_manifest(manifest)


def _settle_released(vault: Vault, manifest: dict, let_go: set, by_others: set) -> None:
    """After a release's deletes: ``manifest``'s record keeps the digests it let go (``let_go``:
    gone, or left to ``Releases.finish``), those another operation claims (``by_others``) and
    those absent from the vault; not one that stayed for this operation's own sake."""
    rec = one_schema.released(manifest)
    _record_released(vault, manifest, {sha for sha in rec if sha in let_go or sha in by_others
                                       or not vault.has_blob(sha)}, trim=True)


def _mark_released(vault: Vault, mine: List[dict], read: List[dict], gone: set, by: Optional[str]) -> None:
    """Every restored operation left with no blob (``mine``, then the others of ``read``) stops
    claiming one: marked ``backup_purged``, released by restore ``by`` (each of ``read``'s own
    ``restored_by`` when None). ``gone``: the digests just let go; any other must be absent on a
    fresh look of the packs' index."""
    def left_with_none(m: dict) -> bool:
        return bool(m.get("restored_by") and not m.get("backup_purged") and not one_schema.refused(m)
                    and m.get("files")
                    and all(f["sha256"] in gone or not vault.has_blob(f["sha256"]) for f in m.get("files", []))
                    and _absent_on_a_fresh_look(vault, [f["sha256"] for f in m["files"] if f["sha256"] not in gone]))

    ids = {m.get("op_id") for m in mine}
    for m in list(mine) + [m for m in read if m.get("op_id") not in ids]:
        if not any(m is x for x in mine) and left_with_none(m):
            try:
                m = vault.read_manifest(m["op_id"])
            except (OSError, ValueError):
                continue  # unread: it keeps claiming (the next start, or a purge, settles it)
        if left_with_none(m):
            m["backup_purged"] = True
            m["backup_released_by_restore"] = by or m["restored_by"]
            m["purged_at"] = time.time()
            vault.write_manifest(m)


class Releases:
    """The pack copies the restores of one command let go, forgotten together at its end
    (``finish``) instead of one forget a run (issue #27 item 5: each rewrote the pack index and
    repacked the packs it left half dead; at the end every pack of the restored runs is dead
    and simply goes). Holds digests, their files and op ids: memory grows with the blobs
    restored, never with their bytes. Not finished (an interrupt, a kill): the operations stay
    restored and unreleased, and the next start releases them (``upkeep.release_kept_restores``)."""

    def __init__(self) -> None:
        #: vault root -> {"files": digest -> file, "keep": set, "ops": {op_id: (its digests, local bytes)}}
        #: (the digests only, not the manifest: a restore of 100,000 runs holds no manifest whole)
        self._by_vault: Dict[str, dict] = {}
        self._peers: Optional[dict] = None

    def peers(self, ctx: Context, memo: Optional[ManifestMemo] = None) -> dict:
        """The reductions' file entries of the logdir by recorded inode (``relink.peer_index``),
        read once for the command's restores the first time one has links outside its run
        (review R19 F4: each such run walked every entry of every manifest). An entry of the
        run's own reduction is never its peer (``Relinks.join`` skips its own paths); one of a
        reduction made after the read is missed: that name goes back as a copy of its own."""
        if self._peers is None:
            self._peers = peer_index(own_manifests(ctx, read_roots(known_vaults(ctx), True, memo)))
        return self._peers

    def add(self, vault: Vault, manifest: dict, files: Dict[str, dict], keep, freed: int) -> None:
        """Leave ``files`` (digest → its file record) of restored ``manifest`` to ``finish``;
        ``keep``: digests its restore keeps (displaced bytes); ``freed``: what its release freed."""
        b = self._by_vault.setdefault(vault.root, {"files": {}, "keep": set(), "ops": {}})
        for sha, f in files.items():
            b["files"].setdefault(sha, f)
        b["keep"].update(k for k in keep if k)
        b["ops"][manifest["op_id"]] = (frozenset(f["sha256"] for f in manifest.get("files", [])), freed)

    def defers(self, op_id: str) -> bool:
        """Whether ``op_id``'s release is finished by ``finish``."""
        return any(op_id in b["ops"] for b in self._by_vault.values())

    def finish(self, ctx: Context, memo: Optional[ManifestMemo] = None) -> Dict[str, int]:
        """Forget the pack copies no claim keeps now (``Vault.forget_packed_released``: the pack
        lock, the blobs' locks, the claims read afresh under them, ``_claimed_now``: every
        manifest, unfinished operation, pin and file in place), then mark each operation left
        with no blob; op id → bytes its release freed (the local forms' and its packed ones; a
        digest shared by two operations counted once). A failure leaves the rest kept."""
        out: Dict[str, int] = {}
        for root, b in self._by_vault.items():
            vault = Vault(root)
            files, ops = b["files"], b["ops"]
            kept: set = set()
            by_others: set = set()
            last: List[List[dict]] = []

            def needed(part: List[str]) -> set:
                claimed = _claimed_now(ctx, vault, list(ops), {sha: files[sha] for sha in part}, b["keep"], memo,
                                       read=last, others=by_others)
                kept.update(claimed)
                return claimed

            try:
                freed = vault.forget_packed_released(files, needed)
            except (OSError, BlobFailure, StoreFailure):
                freed = {}  # kept: the next start releases them
            gone = {sha for sha, n in freed.items() if n and sha not in kept}
            counted: set = set()
            for op_id, (digests, local) in ops.items():
                mine = digests & gone
                out[op_id] = local + sum(freed[sha] for sha in mine - counted)
                counted |= mine
            for op_id, (digests, _local) in ops.items():  # what stayed is no release (rare: a claim)
                stayed = digests & set(files) - gone - by_others
                if stayed:
                    with contextlib.suppress(OSError, ValueError):
                        m = vault.read_manifest(op_id)
                        _record_released(vault, m, one_schema.released(m) - stayed, trim=True)
            if last:  # each operation as read under the locks, read whole again before it is marked
                with contextlib.suppress(OSError, ValueError):
                    _mark_released(vault, [], last[-1], gone, None)
        self._by_vault.clear()
        return out


def _plain_size(vault: Vault, sha: str) -> Optional[int]:
    """The size of ``sha``'s plain blob, or None when there is none."""
    try:
        return os.lstat(vault.blob_path(sha)).st_size
    except OSError:
        return None


def _absent_on_a_fresh_look(vault: Vault, shas: List[str]) -> bool:
    """Whether the vault holds none of ``shas``, asked again once its packs' index is listed
    anew: a look-up may have raced another process's rewrite of that index (a packed backup
    hidden for a moment is not one gone, and an operation marked purged on that word would let
    a later purge forget its only copy). Any doubt (the index does not list): False."""
    if not shas:
        return True
    try:
        bs = remote_vault.pack_store(vault.root)
        if bs is not None:
            bs.reload()
    except (BlobFailure, StoreFailure, OSError):
        return False
    return not any(vault.has_blob(s) for s in shas)


def _claimed_now(ctx: Context, vault: Vault, releasing: List[str], files: dict, keep,
                 memo: Optional[ManifestMemo] = None, read: Optional[List[List[dict]]] = None,
                 others: Optional[set] = None) -> set:
    """The digests of ``files`` that must stay, read under the blobs' locks (the manifests,
    journals and pins of now, not of when the release began: a reduce of identical bytes may
    have committed meanwhile). On any doubt (a manifest unread, damage hiding one) all stay.
    ``releasing``: the op ids whose backups are let go. ``read``: the manifests read are appended to it.
    ``others``: the digests another operation's manifest claims are added to it (none while a
    damaged record may hide what one claims)."""
    every = set(files)
    ms = vault.manifests(slim(vault.root), memo=memo)  # all a claim is said by, without verifications
    if read is not None:
        read.append(ms)
        del read[:-1]
    if vault.unread:
        return every  # a manifest we could not read may claim these blobs
    # a restored operation's originals stand in its logdir: its backup is no claim any more
    # (a refused manifest is none: its ``restored_by`` may be anything, and its blobs are kept)
    restored = [m["op_id"] for m in ms if m.get("restored_by") and not m.get("backup_purged")
                and not one_schema.refused(m)]
    # the read just made, with its problems (a second full read gave nothing more)
    refs = vault.referenced_blobs(exclude_ops=list(releasing) + restored, manifests=ms)
    if vault.unread:
        return every
    if others is not None and not isinstance(refs, EveryBlob):
        others.update(sha for sha in every if sha in refs)
    claimed = {sha for sha in every if sha in refs} | (set(keep) & every) | (journal_blobs(ctx) & every)
    # the file in place must still be these bytes now, or its only copy is the blob; unless a
    # restore of an older reduction of the run put its original back over them since: they were
    # what that reduction made (its ``created``), which its restore removes by design (a run
    # reduced twice and restored: the newer one's backup of the older one's output)
    moved = {sha for sha, f in files.items() if sha not in claimed and not holds_original(ctx.store, ctx.key(f["path"]), f)}
    undone = _undone_outputs(ctx, ms) if moved else set()
    return claimed | {sha for sha in moved if (files[sha]["path"], sha) not in undone}


def _undone_outputs(ctx: Context, ms: List[dict]) -> set:
    """``(path, sha256)`` of every file a restored reduction of this logdir had made (its
    ``created``): its restore removed them and put the original back at that path. Only this
    logdir's (``catalogue.is_own``: its id, else its path)."""
    identity = manifest_binding(ctx)
    if identity is False:
        return set()  # a foreign state directory: none of it is ours
    here = os.path.realpath(ctx.logdir)
    out = set()
    for m in ms:
        if m.get("kind") != "reduce" or not m.get("restored_by") or not isinstance(m.get("created"), list) \
                or not is_own(m, here, identity):
            continue  # the one rule of whose it is: its id, else its path (``catalogue.is_own``)
        out.update((c.get("path"), c.get("sha256")) for c in m["created"] if isinstance(c, dict))
    return out


def _check_reads(ctx: Context, paths: List[str]) -> None:
    """Restored event files frame cleanly (CRC) — TensorBoard's loaders would hide it otherwise."""
    # here, not at the top: the record check brings numpy and the verifier, which only a
    # restore needs (not every verb that imports the restore chain)
    from tb_footprint_plugin.verify.records import check_file

    bad = [c for c in (check_file(ctx.abs(p)) for p in paths
                       if is_summary_event_file_name(os.path.basename(p))) if not c.ok]
    if bad:
        raise TransactionError("restored run does not read cleanly: " + "; ".join(c.describe() for c in bad))


__all__ = ["restore_ops", "restore_op", "LocalRestore", "Releases", "finish_restore", "restore_abandoned", "kept_blobs", "restore_code",
           "restore_access", "stopped_half_way"]
