"""The engine of a logdir on a local file system (``Engine`` over ``engine.context.Context`` and
the local engine's modules), and what moved down from the API with it: the settling of an
interrupted reduce, the views of status, disk numbers, history and retired runs, the batch
ledger's place.

Why one module: it is one class, ``LocalEngine``, one short method per ``Engine`` verb, each
handing to the local engine's modules (``local_views``, ``local_batch``, ``plan_notes``,
``recovery``, ``purge``); split, one interface's implementation would be read across files.
"""
from __future__ import annotations

import os
from typing import Callable, Collection, List, Mapping, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import BlobError, Failure, Finding, Outcome, Recovery, Skip, StoreError
from tb_footprint_plugin.engine import health, offload, trust, usage
from tb_footprint_plugin.engine.catalogue import (find_manifest, hiding_damage, journal_blobs, known_vaults,
                                                  operation_summary, own_manifests, read_vaults, remember_vault,
                                                  restorable_ops, summarize_operations)
from tb_footprint_plugin.engine.checks import recheck, state_row, unread_state
from tb_footprint_plugin.engine.compactor import BatchCompactor, compact_committed
from tb_footprint_plugin.engine.context import CancelToken, Context, RunOutcome, TransactionError
from tb_footprint_plugin.engine.front_base import (already_restored, DEFAULT_BACKENDS, Engine, nothing_to_restore,
                                                   Progress, refused_rows)
from tb_footprint_plugin.engine.history import HistoryPage
from tb_footprint_plugin.engine.interrupted import interrupted_rows, journal_records, rolled_back_rows, same_file
from tb_footprint_plugin.engine.journal import pending_journals, RunLocked
from tb_footprint_plugin.engine.run_lock import folder_lock, run_lock
from tb_footprint_plugin.engine.ledger import Ledger, ledger_path, ledger_paths, load_ledger, mark_recovered
from tb_footprint_plugin.engine.local_batch import DiskLedger, run_batch
from tb_footprint_plugin.engine.local_sample import sample as local_sample
from tb_footprint_plugin.engine.pack_index_rebuilt import rebuild_remote_indexes
from tb_footprint_plugin.engine.local_views import (disk_in_use, disk_in_use_after_scan, disk_numbers_view,
                                                    freed_after_purge, history_view, status_view)
from tb_footprint_plugin.engine.plan_notes import freed_estimate, local_notes, offload_freed, plan_rewrites
from tb_footprint_plugin.engine.purge import purge_backups, PurgeReport
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.remote_vault import last_failure
from tb_footprint_plugin.engine.restore import kept_blobs, restore_op, restore_ops
from tb_footprint_plugin.engine.retire import is_restorable_retirement, retire_run, retirements, unretire
from tb_footprint_plugin.engine.retire_rules import retired_row, takes_out
from tb_footprint_plugin.engine.transaction import reduce_run
from tb_footprint_plugin.engine.upkeep import forget_released, settle_stale_ledgers, start
from tb_footprint_plugin.engine.vault import DEFAULT_VAULT_FORMAT, ManifestMemo, refuse_unless_ours, Vault
from tb_footprint_plugin.engine.vault_reads import refuse_unreadable, StateUnreadable, VaultRead
from tb_footprint_plugin.plan.left_alone import apply_open_writers, leave_alone
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD, LOCAL_VAULT_NOTE
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.storage.openfiles import find_writers, JoinedPaths
from tb_footprint_plugin.storage.paths import is_within, recorded_vaults, state_dir
from tb_footprint_plugin.storage.remote import is_remote
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.verify.original import warm_up


def split_backup_dir(logdir: str, backup_dir: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """``(backup dir of the local engine, remote vault URL)``: a local logdir given a bucket URL
    keeps its local vault (the state folder) and offloads committed backups to that URL
    (``engine.offload``); anything else is as given, with no remote vault."""
    if backup_dir and is_remote(backup_dir) and not is_remote(logdir):
        return None, backup_dir
    return backup_dir, None


def local_context(logdir: str, backup_dir: Optional[str], quiet_period: float = DEFAULT_QUIET_PERIOD,
                  verify_backends: Sequence[str] = DEFAULT_BACKENDS,
                  closed_files: Optional[Mapping[str, float]] = None) -> Context:
    """The engine's context of a local logdir, after the refusals every local verb makes first:
    not a bucket, an existing folder, a backup dir that does not contain the logdir, a state
    folder and vault of this user's that this user can read (``StateUnreadable``). A bucket
    URL as backup dir is the remote vault (``split_backup_dir``): the context's vault is the
    local state folder, which remembers that URL once a reduce offloads to it."""
    backup_dir, _remote = split_backup_dir(logdir, backup_dir)
    if is_remote(logdir) or (backup_dir and is_remote(backup_dir)):
        raise StoreFailure(StoreError.NOT_SUPPORTED, "", f"{logdir}: this verb is not available on object storage "
                          "(scan, plan, reduce, retire, verify, restore, purge, status, history and operations are)")
    logdir = os.path.abspath(logdir)
    if not os.path.isdir(logdir):
        raise NotADirectoryError(f"logdir {logdir} is not a directory")
    if backup_dir is not None:
        backup_dir = os.path.abspath(backup_dir)
        if is_within(logdir, backup_dir):
            raise ValueError(f"backup dir {backup_dir} contains the logdir; choose a separate folder")
    ctx = Context(logdir=logdir, backup_dir=backup_dir, quiet_period=quiet_period,
                  verify_backends=tuple(verify_backends), closed_files=dict(closed_files or {}))
    # this user's own state folder or vault that this user cannot read hides every backup: said as
    # such (permission_denied, the folder named), never "nothing to restore" (review R16 F16)
    refuse_unreadable(ctx.state)
    if backup_dir is not None:
        refuse_unreadable(backup_dir, "vault")
    return ctx


class LocalEngine(Engine):
    """A logdir on a local file system: ``engine.context.Context`` and the local engine's modules."""

    kind = "local"

    def __init__(self, logdir: str, backup_dir: Optional[str] = None, *, quiet_period: float = DEFAULT_QUIET_PERIOD,
                 verify_backends: Sequence[str] = DEFAULT_BACKENDS,
                 closed_files: Optional[Mapping[str, float]] = None):
        self.logdir, self.backup_dir = logdir, backup_dir
        self.local_backup_dir, self.remote_vault = split_backup_dir(logdir, backup_dir)
        self._args = (quiet_period, tuple(verify_backends), closed_files)
        self._ctx: Optional[Context] = None

    @property
    def ctx(self) -> Context:
        """The logdir's context (``local_context``'s refusals at the first use)."""
        if self._ctx is None:
            self._ctx = local_context(self.logdir, self.backup_dir, *self._args)
        return self._ctx

    def recover(self, thorough: bool = False) -> List[RecoveryOutcome]:
        """Every start-up step (``engine.upkeep.start``): journals settled, lost manifests rebuilt,
        purges, compactions and offloads finished, scratch swept, late records salvaged, kept
        restores released, stale batch ledgers settled; one read of the manifests for the last three.
        ``thorough``: then each remote vault a vault of this logdir offloaded to, whose index has
        a damaged object, has the blobs its records name found again in its packs and listed
        (``pack_index_rebuilt.rebuild_remote_indexes``: a listing of each remote index, which a
        start does not pay; a restore or verify that misses a blob does it by itself), as a
        restore's words promise of ``recover``."""
        ctx = self.ctx
        outs = start(ctx, own_manifests)
        if thorough:
            for root in known_vaults(ctx):
                outs += rebuild_remote_indexes(ctx.vault if root == ctx.vault.root else Vault(root))
        return outs

    def adopt_moved_state(self) -> Optional[dict]:
        """``trust.adopt_moved_state`` of the logdir and its state folder, before any context is made
        (a context's first use would read the state as it stands, foreign)."""
        return trust.adopt_moved_state(os.path.abspath(self.logdir), state_dir(self.logdir))

    def unfinished(self, reads: Optional[List[VaultRead]] = None) -> dict:
        """``reads``: the command's one read of the manifests (``catalogue.read_vaults``), else read here."""
        ctx = self.ctx
        # judged by recovery's own rule: a journal recover will not replay is no operation it
        # settles but a finding naming the journal and the code it is refused with (review R16 F6)
        judged = health.unfinished_ops(ctx.journal_dir, logdir=ctx.logdir, state=ctx.state,
                                       vaults=[ctx.state, ctx.vault.root] + known_vaults(ctx))
        ops, problems = [], []
        for o in judged:
            why = o.pop("refused")
            del o["journal"]  # a local path: the answer has a bucket's shape (bucket_unfinished)
            if why is None:
                ops.append(o)
            else:
                problems.append(why)
        problems += health.state_problems(ctx.logdir, ctx.state, ctx.journal_dir)
        reads = read_vaults(ctx) if reads is None else reads
        problems += health.catalogue_problems(known_vaults(ctx), own_manifests(ctx, reads),
                                              frozenset(journal_blobs(ctx)), reads)
        # recover is offered only for what it settles (health.RECOVER_SETTLES): a damaged line,
        # file or backup is named for the user to look at, and unsettled pins may hold the only
        # copy of a run's originals: their findings name what the user can do
        settles = ops or any(p["code"] in health.RECOVER_SETTLES for p in problems)
        return {"unfinished_operations": ops, "problems": problems,
                "settle_command": health.settle_command(ctx.logdir, self.backup_dir) if settles else None}

    def pending_operations(self) -> List[str]:
        """From the journal folder (no refusal of the logdir first)."""
        return [j.op_id for j in pending_journals(Context(self.logdir).journal_dir)]

    def interrupted_state(self) -> List[dict]:
        """``engine.interrupted.interrupted_rows``: read from the journals, no refusal of the logdir first."""
        return interrupted_rows(self.logdir)

    def open_ledger(self, ledger: Optional[str], policy_name: str,
                    shard: Optional[Tuple[int, int]] = None) -> Optional[Ledger]:
        """The batch ledger of a reduce (``open_ledger``), whose marks name a full disk
        (``NoSpace`` naming the ledger file)."""
        return open_ledger(self.ctx, ledger, policy_name, shard, book=DiskLedger)

    def settle_ledger(self, path: str) -> List[str]:
        """Settle one batch ledger as a start settles the default ones (``settle_stale_ledgers``):
        a custom ``--ledger PATH`` is not known to a start, so the reduce that names it settles it;
        the manifests are read only when an entry is stale. Returns the runs recorded done."""
        if path in ledger_paths(self.ctx.state):
            return []  # the start settled it already
        return settle_stale_ledgers(self.ctx, own_manifests, paths=[path])

    def settle_interrupted(self, *, policy_name: str, ledger: Optional[str], shard: Optional[Tuple[int, int]],
                           rolled_back: Sequence[str]) -> List[dict]:
        """A run not committed goes back to its exact original bytes (its staging files removed);
        one past the commit point is finished; the ledger (also a custom ``ledger`` path, and this
        process's own in-flight entries) says so. ``rolled_back``: operations the batch's worker
        threads rolled back themselves at the interrupt, said as the others (``untouched``: every
        original its manifest names has its sha256 from before)."""
        before = {j.op_id: [r for r in recs if r.get("type") == "backup"] for j, recs in journal_records(self.logdir)}
        recovered = self.recover()
        ctx = self.ctx
        book = self.open_ledger(ledger, policy_name, shard) if ledger else None
        if book is not None and os.path.exists(book.path):
            mark_recovered(book, recovered)
        manifests = own_manifests(ctx)  # after the settling: the rolled-back operations' manifests
        paths = ledger_paths(ctx.state)
        if book is not None and os.path.exists(book.path) and book.path not in paths:
            paths.append(book.path)  # a custom --ledger PATH: this process's entries in it too
        settle_stale_ledgers(ctx, manifests, mine=True, paths=paths)
        out = rolled_back_rows(ctx, manifests, rolled_back, book)
        for o in recovered:
            row = dict(op_id=o.op_id, run=o.run, action=o.action, code=o.code, detail=o.detail, untouched=None,
                       files=0, kind=o.kind)
            backups = before.get(o.op_id)
            if o.action == Recovery.ROLLED_BACK and backups:  # a reduce's backups (a retire moves whole trees)
                same = sum(1 for r in backups if same_file(ctx.logdir, r, ctx.store))
                row.update(untouched=same == len(backups), files=len(backups))
            out.append(row)
        return out

    # -- the catalogue -------------------------------------------------------------------------
    def reduce_run(self, rp, *, policy: dict, cancel: Optional[CancelToken] = None,
                   progress: Optional[Callable[[str, float], None]] = None,
                   vault_format: str = DEFAULT_VAULT_FORMAT, compactor: Optional[BatchCompactor] = None
                   ) -> RunOutcome:
        """One planned run (``RunPlan``) as its own verified transaction (``transaction.reduce_run``);
        once committed, its backups compacted (``vault_format`` ``compressed``) and offloaded to a
        remote vault, each under the run's lock. Differs from a bucket's ``reduce_runs``: one run a
        call (a batch's runs may go on threads); the ledger is the caller's. ``compactor``: a
        batch's, which compacts the run in a round with others (noted here, before this returns)."""
        ctx = self.ctx
        was, ctx.vault.compacts = ctx.vault.compacts, vault_format == "compressed"
        try:
            o = reduce_run(ctx, rp, policy=policy, cancel=cancel, progress=progress)
        finally:
            ctx.vault.compacts = was  # a batch's threads share the vault: ``reduce_runs`` sets it for all
        if o.status == Outcome.VERIFIED and o.op_id and vault_format == "compressed":
            # after the commit, never inside the transaction: its verification read the backup as
            # the original's own inode; a failure there leaves hard links (safe, freed by purge)
            if compactor is not None:
                compactor.submit(o.op_id, rp.run)
            else:
                compact_committed(ctx, o.op_id, rp.run)
        if o.status == Outcome.VERIFIED and o.op_id and offload.remote_url(ctx.vault):
            # after the compaction, under the run's lock as it: the backups go to the remote vault
            # (each verified there before its local copy is unlinked); a run taken meanwhile, or a
            # store that fails, leaves them local and the next start offloads them
            try:
                with run_lock(ctx, rp.run):
                    offload.offload_operation(ctx.vault, o.op_id, journal_blobs(ctx))
            except (RunLocked, OSError):
                pass
        return o

    def operations(self, run: Optional[str] = None) -> List[dict]:
        out = [m for m in own_manifests(self.ctx) if run is None or m.get("run") == run]
        out.sort(key=lambda m: m.get("started_at", 0), reverse=True)
        return out

    def operation(self, op_id: str) -> dict:
        return find_manifest(self.ctx, op_id)

    def status(self) -> dict:
        """The manifests read once, for every check and count of it (issue #28)."""
        reads = read_vaults(self.ctx)
        return status_view(self.ctx, self.unfinished(reads), reads)

    def kept_blobs(self, manifests: Optional[List[dict]] = None) -> List[dict]:
        """``engine.restore.kept_blobs`` of the manifests given, else of this logdir's own (as
        ``status`` reads them): no journal, change log, ledger or disk walk is read for it."""
        return kept_blobs(self.ctx, own_manifests(self.ctx) if manifests is None else manifests)

    def disk_in_use(self) -> "usage.DiskUsage":
        """Disk in use by the logdir and every vault of it, now (``engine.usage.disk_usage``)."""
        return disk_in_use(self.ctx)

    def freed_after_purge(self, op_ids: List[str], removed_bytes: int = 0, backed_up_bytes: int = 0) -> int:
        """What purging these operations' backups would free, counted by purge's own rule."""
        return freed_after_purge(self.ctx, op_ids)

    def disk_numbers(self) -> dict:
        """``freed_now_bytes``: what the verified reductions not restored freed on disk as things
        stand (``usage.freed_by_op``: ~0 while hard-linked backups are kept)."""
        return disk_numbers_view(self.ctx)

    def history(self) -> List[dict]:
        """Read from the change log of the state folder; when the logdir is refused (not a folder,
        a backup dir inside it) the entries come without the backups' state (``backup``:
        ``unknown``)."""
        return history_view(self.logdir, lambda: self.ctx)[0]

    def history_page(self, newest: Optional[int] = None) -> HistoryPage:
        """The newest entries read a block at a time (``ChangeLog.newest``): a block of the log
        and ``newest`` entries held, and only those given their backup state; the total exact
        (the log's lines are counted, every one)."""
        return HistoryPage(*history_view(self.logdir, lambda: self.ctx, newest))

    # -- reduce (what ``api.reduce`` drives) -----------------------------------------------------
    @property
    def scan_backup_dir(self) -> Optional[str]:
        """The local vault a scan leaves out (a bucket URL as backup dir is the remote vault)."""
        return self.local_backup_dir

    def survey_for_reduce(self, *, write_cache: bool, eager: bool) -> Optional[LogdirFootprint]:
        """Only when ``eager`` (a shard's partition given: the one scan of this worker); else None
        and the plan scans, letting each run's scan go as it is planned."""
        if not eager:
            return None
        return scan(self.ctx.logdir, backup_dir=self.local_backup_dir, write_cache=write_cache)

    def dry_run_freed(self, p, vault_format: str) -> Optional[Tuple[int, int]]:
        """A remote vault: all of it now, nothing at purge; else ``plan_notes.freed_estimate``."""
        if self.offloads():  # the backups leave the local disk at once (but what other hard links keep)
            return offload_freed(self.ctx.logdir, p)
        now, after, _same = freed_estimate(self.ctx.logdir, self.local_backup_dir, p, vault_format)
        return now, after

    def reduce_usage(self) -> Optional[Tuple[int, int]]:
        """``engine.usage.disk_usage``: the logdir and every vault of it, and what of it is on the
        logdir's disk (a vault on another disk grows by what it takes in)."""
        u = disk_in_use(self.ctx)
        return u.total_bytes, u.freeable_on_logdir_disk  # less what a snapshot's names keep: what the disk gains

    def in_use_after_scan(self, fp: LogdirFootprint, *, fresh: bool) -> int:
        """The logdir's part from the scan's walk (``fp.disk``), so a plan of 100,000 runs does not
        lstat every file twice: only the state folders and the vaults are walked here
        (``local_views.disk_in_use_after_scan``). A footprint without that walk, of another folder,
        or not ``fresh``: a walk of its own (``disk_in_use``)."""
        walked = fp.disk
        if walked is None or fp.logdir != self.ctx.logdir or not fresh:
            return self.disk_in_use().total_bytes
        return disk_in_use_after_scan(self.ctx, walked).total_bytes

    def reduce_runs(self, todo: list, *, policy, vault_format: str, jobs: int, timeout: Optional[float],
                    cancel: Optional[CancelToken], progress: Optional[Callable[[str, str, float], None]],
                    begin: Optional[Callable], on_outcome: Optional[Callable[[RunOutcome], None]]
                    ) -> List[RunOutcome]:
        """Each run its own transaction (``reduce_run``) on ``jobs`` threads, each with its own
        ``timeout`` and a cancel that stops it at its next step (``engine.local_batch.run_batch``);
        a compressed vault's compaction in rounds of many runs (``engine.compactor``; a remote
        vault's offload stays in each run's turn), done before this returns — after an interrupt
        no further round: the notes are settled as any other."""
        pol = policy.to_dict()
        compactor = BatchCompactor(self.ctx) if vault_format == "compressed" and not self.offloads() else None

        def one(rp, token: CancelToken, step) -> RunOutcome:
            return self.reduce_run(rp, policy=pol, cancel=token, progress=step, vault_format=vault_format,
                                   compactor=compactor)

        finished = False
        was, self.ctx.vault.compacts = self.ctx.vault.compacts, vault_format == "compressed"
        try:
            out = run_batch(one, todo, jobs=jobs, timeout=timeout, cancel=cancel, progress=progress, begin=begin,
                            on_outcome=on_outcome)
            finished = True
            return out
        finally:
            self.ctx.vault.compacts = was
            if compactor is not None:
                compactor.close(finish=finished)

    def prepare_reduce(self) -> None:
        """Before a reduce writes its first backup: the vault refused unless ours (never a backup
        where another user can unlink it), and a remote vault remembered (every later verb finds it)."""
        refuse_unless_ours(self.ctx.state, self.ctx.vault)
        if self.remote_vault:
            offload.configure(self.ctx.vault, self.remote_vault)

    def warm_up(self) -> None:
        """``verify.original.warm_up``: gRPC and TensorBoard's app imported on a thread (a disk's
        reduce verifies each changed run through them; issue #28 item 3)."""
        warm_up()

    def offloads(self) -> bool:
        """Whether committed backups leave the local disk at once (a remote vault)."""
        return bool(self.remote_vault or offload.remote_url(self.ctx.vault))

    def end_batch(self) -> Optional[dict]:
        """A batch's end: its manifests sealed (``engine.oplog.seal``), the remote vault's small
        packs repacked together (``offload.merge_remote_packs``); returns what the remote vault
        holds (``usage.remote_usage``; None without one)."""
        self.ctx.vault.seal_log()
        offload.merge_remote_packs(self.ctx.vault)
        return usage.remote_usage([self.ctx.vault.root])

    def recheck(self, run: Optional[str], op: Optional[str],
                progress: Optional[Callable[[dict, int, int], None]] = None,
                cancel: Optional[CancelToken] = None) -> List[dict]:
        """Every backup re-hashed and the run as it is now read by TensorBoard's readers against
        the original; without ``op`` also the damage no operation's check shows (lost manifests,
        blobs of no operation, a damaged identity, state that may hide manifests:
        ``checks.unread_state``), each as a failed result with its code (``checks.state_row``)."""
        ctx = self.ctx
        self.recover()
        hook = None if progress is None else (lambda m, i, n: progress(operation_summary(m), i, n))
        results = recheck(ctx, run, op, progress=hook, cancel=cancel)
        if not op:
            reads = read_vaults(ctx)  # one read of the manifests for both
            # a damaged piece of the operation log may have held manifests no check above saw: a
            # failed result naming it, never "all intact" or "nothing to verify" (review R22 F2)
            state = [state_row(p["code"], p["detail"], p.get("path"), p.get("line"), p["op_id"], p["run"])
                     for p in self.unfinished(reads)["problems"]
                     if p["code"] in (Finding.MANIFEST_LOST, Finding.MANIFEST_DAMAGED, Finding.ORPHAN_BLOBS,
                                      Finding.IDENTITY_DAMAGED)]
            state += unread_state(ctx, reads)
            # a named run's check names damage that may be its own (no run said, or it or a parent
            # retirement's), not a refused manifest of another run, as a bucket's does
            results += [r for r in state if run is None or not isinstance(r["run"], str) or r["run"] in ("(vault)", ".", run)
                        or run.startswith(r["run"].rstrip("/") + "/")]
        return results

    def restore_refusal(self, run: str) -> TransactionError:
        """``nothing_to_restore`` with the state's damage that may hide backups (``hiding_damage``)."""
        return nothing_to_restore(self.logdir, run, hiding_damage(self.ctx))

    def restore(self, run: Optional[str], op: Optional[str],
                on_outcome: Optional[Callable[[RunOutcome], None]] = None,
                cancel: Optional[CancelToken] = None,
                progress: Optional[Callable[[str, str, float], None]] = None) -> List[RunOutcome]:
        """A retired run comes back first; an operation restored already is said so
        (``Skip.ALREADY_RESTORED``); damage that may hide backups is a failed outcome (or, when
        nothing is found for ``run``, a ``TransactionError`` with ``Failure.RESTORE_BLOCKED``).
        ``cancel``: a reduction's restore stops before its first put-back (``restore_op``); a
        retired run's is not stopped once started (``unretire``), only not started."""
        ctx = self.ctx
        landed = on_outcome or (lambda o: None)

        def said(o: RunOutcome) -> RunOutcome:
            landed(o)
            return o

        def unretire_unless_cancelled(m: dict) -> RunOutcome:
            if cancel is not None and cancel.cancelled:
                return RunOutcome(run=m["run"], status=Outcome.SKIPPED, code=Skip.CANCELLED, reason="cancelled",
                                  op_id=m["op_id"])
            if progress is not None:  # past here it is not stopped: a front end stops offering a cancel
                progress(m["run"], "restore", 0.5)
            return unretire(ctx, m)

        self.recover()
        if op:
            m = find_manifest(ctx, op)
            if m.get("restored_by"):
                return [said(already_restored(m))]
            return [said(unretire_unless_cancelled(m) if m.get("kind") == "retire"
                         else _name_remote_failures(m, restore_op(ctx, m, cancel=cancel, progress=progress)))]
        # a retired run comes back first: its reductions can only be restored once it is back
        outcomes = [said(unretire_unless_cancelled(m)) for m in retirements(ctx) if is_restorable_retirement(m)
                    and (run is None or takes_out(m, run))]
        memo = ManifestMemo()  # the manifests each run's checks and release read: unchanged ones once
        # the one full read is not memoised: every later read is slim, and ``ops`` holds what it needs
        reads = read_vaults(ctx)
        ops = restorable_ops(ctx, run, reads)
        if run is not None and not ops and not outcomes:
            # a run a restored retirement took along came back with its parent: said so, as the parent is
            done = [m for m in own_manifests(ctx) if takes_out(m, run) and m.get("restored_by")]
            if done:
                return [said(already_restored(max(done, key=lambda m: m.get("started_at", 0)), run))]
            raise self.restore_refusal(run)
        # one after the other, their pack copies let go together at the end (``restore_ops``)
        outcomes += restore_ops(ctx, ops, memo, each=lambda m, o: said(_name_remote_failures(m, o)), cancel=cancel,
                                progress=progress)
        if ops and any(o.status == Outcome.RESTORED for o in outcomes):
            forget_released(ctx, ctx.vault, own_manifests(ctx))  # what the restores let go, from the bucket too
        # state damage that may hide backups: named as a failed outcome, never a quiet "nothing to restore"
        # named as the state's, not a run's: a run restored above is not also said to have failed
        for why in hiding_damage(ctx, reads):  # a refused manifest stays so: the read before the restores says it
            outcomes.append(said(RunOutcome(run="", status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED, reason=why)))
        return outcomes

    def restorable(self, run: Optional[str] = None) -> List[dict]:
        return summarize_operations(restorable_ops(self.ctx, run))

    def backup_runs(self) -> List:
        return [m.get("run") for m in own_manifests(self.ctx)]

    def purge(self, *, older_than: Optional[float], yes: bool, op: Optional[str],
              runs: Optional[Collection[str]], op_ids: Optional[Collection[str]],
              recovered: Sequence[RecoveryOutcome] = (), cancel: Optional[CancelToken] = None,
              progress: Progress = None) -> PurgeReport:
        report = purge_backups(self.ctx, older_than=older_than, yes=yes, op=op, runs=runs,
                               op_ids=set(op_ids) if op_ids is not None else None, cancel=cancel,
                               progress=progress)
        # journals recovery refused (planted, copied, malformed) are reported with the vault's
        report.refused[:0] = refused_rows(recovered)
        return report

    def sample(self, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0) -> tuple:
        return local_sample(self.ctx, op_id, side, plugin, tag, step, index)

    # -- retire --------------------------------------------------------------------------------
    def check_retire(self) -> None:
        """A local logdir's runs are retired into its local vault only: a bucket URL as backup dir
        (the offloaded vault of reductions) is refused by name rather than quietly ignored."""
        if self.remote_vault:
            raise ValueError(f"backup dir {self.backup_dir}: retiring a local logdir's runs into a bucket is not "
                             "supported yet (reduce offloads its backups there); retire without --backup-dir, or "
                             "with a local one")
        self.ctx  # noqa: B018 - the logdir's refusals

    def retire_run(self, run: str, *, takes_along: Sequence[str], rule: dict, quiet_period: float,
                   cancel: Optional[CancelToken] = None, progress: Progress = None) -> RunOutcome:
        """``quiet_period`` is the context's (given to ``open_engine``)."""
        return retire_run(self.ctx, run, takes_along=takes_along, rule=rule, cancel=CancelToken(parent=cancel),
                          progress=progress)

    def retired(self) -> List[dict]:
        return [retired_row(m) for m in retirements(self.ctx) if is_restorable_retirement(m)]

    def remember_vault(self) -> None:
        remember_vault(self.ctx)

    def offload_url(self) -> Optional[str]:
        return offload.remote_url(self.ctx.vault)

    def plan_measures(self):
        return plan_rewrites(os.path.abspath(self.logdir))

    def note_plan(self, p, fp, *, measures=None, vault_format: str = "compressed",
                  held: Optional[dict] = None) -> None:
        """Reads the state folder's vault and journals without the logdir's refusals (a plan
        writes nothing). The vault's and the hard links' notes are made last, on the runs left
        once every skip is known (unfinished operations, open writers): made before, they
        counted runs the plan then skips, and text and JSON disagreed (review R14 F3); they keep
        their place before the skips' own notes."""
        logdir = os.path.abspath(self.logdir)
        remote = self.remote_vault or offload.remote_url(Vault(state_dir(logdir)))
        p.notes = [n for n in p.notes if n != LOCAL_VAULT_NOTE]
        try:  # its unfinished operations cannot be seen: said, as the reduce will refuse (review R16 F16)
            refuse_unreadable(state_dir(logdir))
        except StateUnreadable as e:
            p.notes.append(f"[{e.code}] {e}")
        at = len(p.notes)
        self.leave_alone_unfinished(p)
        live = [rp.run for rp in p.runs if rp.actions and not rp.skipped]
        if live:
            # relative paths the scan holds anyway: an absolute one each would be ~170 bytes a file
            rels = ([path for r in live for path in held.get(r, ())] if held is not None else
                    [f.path for r in live for f in (fp.run(r).files if fp.run(r) else []) if f.kind != "symlink"])
            apply_open_writers(p, find_writers(JoinedPaths(logdir, rels)), logdir)
        p.notes[at:at] = local_notes(logdir, self.local_backup_dir, p, vault_format, remote)

    def in_flight(self) -> List[dict]:
        """From the journals (no refusal of the logdir first)."""
        return [{"kind": "reduce", "outcome": Outcome.VERIFIED, "run": o["run"], "before": o["bytes_before"]}
                for o in health.unfinished_ops(os.path.join(state_dir(self.logdir), "journal"))
                if o["kind"] == "reduce" and isinstance(o["run"], str) and o["bytes_before"] is not None]

    def leave_alone_unfinished(self, p) -> None:
        logdir = os.path.abspath(self.logdir)
        state = state_dir(logdir)
        # judged as recover judges them, with its vaults (``known_vaults`` of the context a
        # changing verb makes; a plan makes none): recover is not offered for what it refuses;
        # what recover will do is status's forecast, a stat per original this never reads
        root = os.path.abspath(self.local_backup_dir) if self.local_backup_dir else state
        ops = health.unfinished_ops(os.path.join(state, "journal"), logdir=logdir, state=state,
                                    vaults=[state, root] + recorded_vaults(state), forecast=False)
        if not ops:
            return
        cmd = health.settle_command(logdir, self.backup_dir)
        interrupted = 0
        for o in ops:
            why = o["refused"]
            if why is not None:
                # its run stays left alone (a damaged journal may be a real half-done operation's)
                # and the journal is named with its code, never sent to recover, which refuses it
                if isinstance(o["run"], str):
                    leave_alone(p, o["run"], why["detail"], Skip.UNFINISHED)
                p.notes.append(f"[{why['code']}] {why['detail']}")
                continue
            if o["run"] is None:
                interrupted += 1
                continue
            # an operation whose holder still runs (elsewhere: a live lease) is not interrupted
            holder = folder_lock(os.path.join(state_dir(logdir), "locks"), o["run"]).live_holder()
            if holder:
                leave_alone(p, o["run"], f"run {o['run']} is being changed by another process ({holder}); "
                            "left alone", Skip.LOCKED)
            elif not os.path.lexists(o["journal"]):
                continue  # settled by its holder since the listing (its lock released after): not unfinished
            else:
                interrupted += 1
                leave_alone(p, o["run"], f"unfinished {o['kind']} operation {o['op_id']} (interrupted?); "
                            f"run `{cmd}` to settle it", Skip.UNFINISHED)
        if interrupted:
            p.notes.append(f"{interrupted} unfinished operation(s): run `{cmd}` to settle them")

    def resumable_ledger(self, ledger: str, shard: Optional[Tuple[int, int]] = None
                         ) -> Optional[Tuple[str, dict, str]]:
        ctx = self.ctx
        path = ledger_path(ctx.state, shard) if ledger == "default" else os.path.abspath(ledger)
        data, _problems = load_ledger(path, ctx.logdir)  # untrusted: refused entries are simply not used
        return None if data is None else (path, data, ctx.logdir)

    def retention(self, removable: int) -> Optional[dict]:
        """None: a local disk frees a reduction's bytes at once or at purge (``freed_estimate``)."""
        return None


def open_ledger(ctx: Context, ledger: Optional[str], policy_name: str,
                shard: Optional[Tuple[int, int]] = None, book: type = Ledger) -> Optional[Ledger]:
    """The batch ledger (``"default"``: ``<state>/ledger.json``, or the shard's own), only inside
    the logdir or the vault; ``book``: the ``Ledger`` class it is opened as."""
    if not ledger:
        return None
    path = ledger_path(ctx.state, shard) if ledger == "default" else os.path.abspath(ledger)
    if not (is_within(path, ctx.logdir) or is_within(path, ctx.vault.root)):
        raise ValueError(f"ledger {path} must be inside the logdir or the backup vault")
    return book(path, policy_name, ctx.logdir, shard=sharding.label(shard))


def _name_remote_failures(m: dict, o: RunOutcome) -> RunOutcome:
    """A restore refused because backups in the remote vault could not be read: its reason names
    each object and the store's code (an archived object not yet restored: ``archived``, with what
    to do), and its code is ``archived`` when every unread backup is archived, ``store_error`` when
    no backup is known damaged, only unserved."""
    if o.code != Failure.BACKUP_DAMAGED or not isinstance(m.get("vault"), str):
        return o
    seen, codes = [], set()
    for f in m.get("files", []):
        e = last_failure(m["vault"], f.get("sha256"))
        if e is not None:
            codes.add(e.code)
            if str(e) not in seen and len(seen) < 3:
                seen.append(str(e))
                o.reason = f"{o.reason}; {e} [{e.code}]"
    if codes == {StoreError.ARCHIVED}:
        # every backup it could not read is in an archive class (review R24 F8): not damaged; the
        # words appended name each object and what to ask the store for, then restore again
        o.code = StoreError.ARCHIVED
    elif codes and not codes & {BlobError.CORRUPT, BlobError.MISSING, BlobError.MISMATCH}:
        # the store would not serve the bytes (a refused or lost connection): nothing is known
        # damaged; restore again once the store serves them
        o.code = Failure.STORE_ERROR
    return o


__all__ = ["LocalEngine", "local_context", "open_ledger", "split_backup_dir"]
