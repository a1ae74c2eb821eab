"""The one interface between the API and the engines (issue #26): ``Engine``, one method per thing
the API's verbs need of a logdir's state and backups, whichever store holds them. Implemented once
for a local logdir (``engine.front_local.LocalEngine``) and once for a bucket logdir
(``engine.front_bucket.BucketEngine``); ``engine.front.open_engine`` chooses between them, once.

Both answer the same types (``RecoveryOutcome``, ``RunOutcome``, ``PurgeReport``, manifests in the
one shape, dicts of one shape); where the two differ today, the implementation's docstring says so.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Callable, Collection, List, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Failure, Outcome, Recovery, Skip
from tb_footprint_plugin.engine.context import CancelToken, RunOutcome, TransactionError
from tb_footprint_plugin.engine.history import HistoryPage
from tb_footprint_plugin.engine.purge import PurgeReport
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.storage.paths import is_op_id

DEFAULT_BACKENDS = ("python", "rust")

Progress = Optional[Callable[[str, float], None]]  # (step, fraction) of one run


class Engine(ABC):
    """What the API needs of a logdir's state and backups, whichever store holds them."""

    #: ``"local"`` or ``"bucket"``, for what is reported (never for choosing code paths)
    kind: str = ""
    logdir: str
    backup_dir: Optional[str]

    # -- settling ----------------------------------------------------------------------------
    @abstractmethod
    def recover(self, thorough: bool = False) -> List[RecoveryOutcome]:
        """Settle what was left unfinished (every changing verb's first step): each outcome has an
        action and a code. ``thorough`` (the ``recover`` verb): also what costs a look at every
        remote store this logdir's vaults used (a damaged index of a remote vault rebuilt),
        never paid at every start."""

    @abstractmethod
    def unfinished(self) -> dict:
        """Unfinished operations and damage, read-only: ``{unfinished_operations, problems,
        settle_command}``."""

    @abstractmethod
    def pending_operations(self) -> List[str]:
        """Ids of unfinished operations (journals left behind), oldest first; nothing is settled."""

    @abstractmethod
    def interrupted_state(self) -> List[dict]:
        """Each unfinished operation said plainly, read-only: ``{op_id, run, kind, untouched, files,
        changed}``."""

    @abstractmethod
    def settle_interrupted(self, *, policy_name: str, ledger: Optional[str], shard: Optional[Tuple[int, int]],
                           rolled_back: Sequence[str]) -> List[dict]:
        """After this process's reduce was interrupted: settle what it left, as the next start
        would, and record it in the batch ledger; one dict per settled operation ``{op_id, run,
        action, code, detail, untouched, files}``."""

    # -- the catalogue -------------------------------------------------------------------------
    @abstractmethod
    def operations(self, run: Optional[str] = None) -> List[dict]:
        """Every operation's manifest in the local shape (``op_id``, ``kind``, ``outcome``,
        ``restored_by``, ``backup_purged``, ``started_at``), newest first; optionally of one run."""

    def operation(self, op_id: str) -> dict:
        """One operation's full manifest; ``TransactionError`` when there is none."""
        for m in self.operations():
            if m.get("op_id") == op_id:
                return m
        raise TransactionError(f"no operation {op_id!r} in the vault of {self.logdir}", Failure.NOT_FOUND)

    @abstractmethod
    def status(self) -> dict:
        """Unfinished operations, damage, the batch ledgers merged, the vault and its operations,
        the disk in use and what purge frees (the keys ``api.status`` documents)."""

    @abstractmethod
    def kept_blobs(self, manifests: Optional[List[dict]] = None) -> List[dict]:
        """What ``status`` lists as ``kept_blobs`` (bytes a restore or a rollback found in a file's
        place and kept in the vault: what each holds, whether it is still there, how to bring it
        back), from the manifests alone: no journal, change log, ledger or usage is read for it (the
        tab's Operations page asks it on every load: review R20-R R16). ``manifests``: the
        operations' manifests the caller just read (``operations()``; untrusted as any manifest),
        else read here."""

    def bring_back(self, op_id: str, path: str) -> dict:
        """Copy the original operation ``op_id``'s restore left in the vault at ``path`` out beside
        it, where its ``kept_blobs`` row says (``api.bring_back``). A folder logdir's original is a
        file of its vault, which its row's ``cp`` copies: nothing to stream (``ValueError``)."""
        raise ValueError("a folder logdir's original left in the vault is a file of its vault: "
                         "`tb-footprint status` prints the cp command that copies it out")

    @abstractmethod
    def disk_numbers(self) -> dict:
        """The tab's header numbers: ``disk_in_use_bytes``, ``freed_now_bytes``,
        ``freed_after_purge_bytes`` (and ``remote_vault_bytes`` where a remote vault is known)."""

    @abstractmethod
    def history(self) -> List[dict]:
        """The change log, oldest first (the entries ``api.history`` documents)."""

    def adopt_moved_state(self) -> Optional[dict]:
        """Bind the logdir's state to it again after a move to another filesystem, its id kept
        (``trust.adopt_moved_state``); None when there was nothing to adopt. A store whose state is
        not bound to an inode (a bucket's, by its URL) has nothing to adopt: ``ValueError``."""
        raise ValueError(f"{self.logdir}: this store's state is not bound to an inode; nothing to adopt")

    def partition_history(self, write: bool = True) -> List[dict]:
        """``history``'s entries a shard partition weighs runs by (``plan.shard.original_sizes``);
        ``write`` False: nothing written (a dry run, a plan). Default: ``history`` itself (a disk's
        change log is one read); a bucket reads a summary of its manifests instead of each one."""
        return self.history()

    @abstractmethod
    def history_page(self, newest: Optional[int] = None) -> HistoryPage:
        """``history``'s entries (all, or the newest ``newest``, oldest first), how many there
        are in all and whether that count is exact (what ``api.history_page`` returns; a bucket's
        page counts a manifest it did not read as one entry, a lower bound)."""

    # -- backups -----------------------------------------------------------------------------
    @abstractmethod
    def recheck(self, run: Optional[str], op: Optional[str],
                progress: Optional[Callable[[dict, int, int], None]] = None,
                cancel: Optional[CancelToken] = None) -> List[dict]:
        """Re-check committed reductions (``api.verify``), after settling what is unfinished.
        ``cancel``: looked at between runs, among a run's backups and inside its verification;
        the run under way and those after it are results ``checks.unchecked`` (``ok`` False,
        ``checked`` False, code ``interrupted``)."""

    @abstractmethod
    def restore(self, run: Optional[str], op: Optional[str],
                on_outcome: Optional[Callable[[RunOutcome], None]] = None,
                cancel: Optional[CancelToken] = None,
                progress: Optional[Callable[[str, str, float], None]] = None) -> List[RunOutcome]:
        """Put back the exact original bytes (``api.restore``), after settling what is unfinished;
        ``on_outcome`` is given each run's outcome as it lands (an interrupt then loses none).
        ``cancel``: honoured up to a run's first put-back, never after (a restore is finished, not
        undone): the run under way is left as it was (code ``interrupted``), the runs after it are
        not started (``Skip.CANCELLED``). ``progress(run, step, fraction)``: a reduction's restore
        says ``restore`` when its first original goes back (the point past which a cancel is not
        honoured), ``check`` while backups it checks under its journal are read."""

    @abstractmethod
    def restorable(self, run: Optional[str] = None) -> List[dict]:
        """What ``restore`` would put back, as operation summaries, newest first."""

    @abstractmethod
    def restore_refusal(self, run: str) -> TransactionError:
        """What a restore of ``run``, of which nothing restorable is recorded, is refused with,
        changing nothing (``nothing_to_restore``): ``not_found`` when no damage may hide its
        backups, else ``restore_blocked`` naming that damage (a manifest refused or unreadable)."""

    @abstractmethod
    def backup_runs(self) -> List:
        """The run every operation's manifest names (untrusted: maybe not a string), for purge's
        selection among the runs with backups."""

    @abstractmethod
    def purge(self, *, older_than: Optional[float], yes: bool, op: Optional[str],
              runs: Optional[Collection[str]], op_ids: Optional[Collection[str]],
              recovered: Sequence[RecoveryOutcome] = (), cancel: Optional[CancelToken] = None,
              progress: Progress = None) -> PurgeReport:
        """Delete (``yes``) or list the backups of verified or restored operations; the journals
        ``recovered`` refused are reported first in ``refused``. ``cancel``: honoured before the
        purge records its intent (what it would have purged listed in ``kept``, code
        ``interrupted``, nothing deleted), never after (a purge past its intent finishes).
        ``progress``: told ``("purge", 0.5)`` right before the first intent."""

    @abstractmethod
    def sample(self, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0) -> tuple:
        """``(bytes, content type)`` of one image/audio sample of ``op_id``'s run ``before`` the
        reduction or ``after`` (the check page); ``SampleUnavailable`` with a code."""

    # -- retire --------------------------------------------------------------------------------
    @abstractmethod
    def check_retire(self) -> None:
        """The refusals a retirement makes before it plans (``ValueError`` naming why)."""

    @abstractmethod
    def retire_run(self, run: str, *, takes_along: Sequence[str], rule: dict, quiet_period: float,
                   cancel: Optional[CancelToken] = None, progress: Progress = None) -> RunOutcome:
        """Retire one run (and what it takes along) as its own journaled operation."""

    @abstractmethod
    def retired(self) -> List[dict]:
        """Retired runs still kept in the vault, newest first: ``{op_id, run, takes_along, bytes,
        files, retired_at, user, tree_sha256, rule}``."""

    def remember_vault(self) -> None:
        """Record the vault before a changing verb writes its first backup (so later verbs find it)."""

    @abstractmethod
    def offload_url(self) -> Optional[str]:
        """The remote vault (a bucket URL) the logdir's committed backups are offloaded to, or None."""

    # -- reduce: the steps ``api.reduce`` drives, the same sequence on every store -------------
    #: the backup dir a scan of the logdir leaves out (a local logdir's local vault; a bucket's)
    scan_backup_dir: Optional[str] = None

    @abstractmethod
    def prepare_reduce(self) -> None:
        """Before a reduce writes its first backup: the vault made or refused unless ours (never a
        backup where another user can unlink it), a remote vault remembered."""

    def warm_up(self) -> None:
        """Start, on a thread, the imports this store's verification will wait for, beside the
        recovery and the scan. Nothing here: a bucket's reduces are mostly drop-only batches that
        never ask TensorBoard, whose imports would be paid for nothing (review R20 F2)."""

    @abstractmethod
    def survey_for_reduce(self, *, write_cache: bool, eager: bool) -> Optional[LogdirFootprint]:
        """The footprint a reduce plans from. A bucket's comes from its one listing, which is kept
        for its transactions (and its first ``reduce_usage``); a disk's only when ``eager`` (a
        shard's partition scans first), else None and the plan scans. ``write_cache``: False in a
        dry run (it writes nothing)."""

    def vault_format(self, requested: Optional[str]) -> str:
        """The form a reduce's backups take here: ``requested`` (``engine.vault.VAULT_FORMATS``)
        when given, else the store's own (a disk's: ``"compressed"``). A store that cannot honour
        a requested one refuses it (a bucket: ``StoreFailure`` ``StoreError.NOT_SUPPORTED``)."""
        return requested or "compressed"

    @abstractmethod
    def dry_run_freed(self, p, vault_format: str) -> Optional[Tuple[int, int]]:
        """``(freed now, freed after purge)`` a dry run of plan ``p`` reports, or None where the
        store does not estimate them (a bucket: its plan's cost and retention say it)."""

    @abstractmethod
    def reduce_usage(self) -> Optional[Tuple[int, int]]:
        """``(in use by the logdir and its vaults, of which on the logdir's disk)`` now, for the
        report's before and after (what the logdir's disk gained); None when it cannot be known."""

    @abstractmethod
    def in_use_after_scan(self, fp: LogdirFootprint, *, fresh: bool) -> int:
        """What the logdir and its vaults take now (a plan's ``disk_in_use_bytes``: a disk's as
        ``du`` counts it, a bucket's as stored), from the walk or listings scan ``fp`` made when
        it is ``fresh`` (the caller's judgement: no walk or listing more), else walked or listed
        anew. ``OSError`` or ``ValueError`` when it cannot be counted."""

    @abstractmethod
    def open_ledger(self, ledger: Optional[str], policy_name: str, shard: Optional[Tuple[int, int]] = None):
        """The batch ledger of a reduce (None without ``ledger``): a book with ``path``,
        ``problems``, ``start``, ``read``, ``should_run``, ``mark``, ``compact``
        (``engine.ledger.Ledger`` on a disk, ``engine.bucket_ledger.BucketLedger`` on a bucket)."""

    @abstractmethod
    def settle_ledger(self, path: str) -> List[str]:
        """Settle a batch ledger a start did not know of (a custom ``--ledger PATH``); the runs
        recorded done."""

    @abstractmethod
    def reduce_runs(self, todo: list, *, policy, vault_format: str, jobs: int, timeout: Optional[float],
                    cancel: Optional[CancelToken], progress: Optional[Callable[[str, str, float], None]],
                    begin: Optional[Callable], on_outcome: Optional[Callable[[RunOutcome], None]]
                    ) -> List[RunOutcome]:
        """Each planned run (``RunPlan``; the plan's skips included, said as such) as its own
        verified transaction, one outcome each in ``todo``'s order; never raises for a failed run.
        ``begin(rp)`` right before a run starts (a ledger's ``reducing`` mark: an ``OSError`` from
        it fails that run alone, untouched); ``on_outcome(o)`` as each run settles (a run a cancel
        kept from starting is returned ``Skip.CANCELLED``, not passed to it);
        ``progress(run, step, fraction)``; ``cancel`` stops the runs not started (a disk's also
        at a running one's next step); ``timeout`` per run and ``jobs`` threads where the store
        runs them (each implementation says)."""

    def request_counts(self) -> Optional[dict]:
        """The requests this engine issued, per verb (a bucket's), or None (a disk)."""
        return None

    @abstractmethod
    def freed_after_purge(self, op_ids: List[str], removed_bytes: int = 0, backed_up_bytes: int = 0) -> Optional[int]:
        """What purging these verified operations' backups would free (``removed_bytes``: what
        they removed from the logdir; ``backed_up_bytes``: the originals their plan backed up,
        whole), or None where it cannot be told."""

    @abstractmethod
    def end_batch(self) -> Optional[dict]:
        """A reduce batch's end (the manifests sealed where a log keeps them); returns what a
        remote vault holds (None without one)."""

    # -- planning ------------------------------------------------------------------------------
    #: whether a plan may let go of each run's scan as it is planned (a bucket plan's cost reads
    #: the footprint after)
    lets_go_while_planning: bool = True

    @abstractmethod
    def plan_measures(self):
        """What a plan measures a rewrite's outcome with, cached for the reduce that follows
        (``transforms.plan_cache``: ``PlanRewrites`` on a disk, ``BucketTraces`` on a bucket)."""

    @abstractmethod
    def note_plan(self, p, fp, *, measures=None, vault_format: str = "compressed",
                  held: Optional[dict] = None) -> None:
        """Say in plan ``p`` (of footprint ``fp``) where its bytes go and what is left alone: a disk's
        vault note (freed now / after purge), the runs an unfinished operation or an open writer
        holds (``held``: each planned run's file paths, when the plan let the scan go); a bucket's
        request cost and retention (with the requests ``measures``, the plan's ``plan_measures``,
        issued)."""

    @abstractmethod
    def in_flight(self) -> List[dict]:
        """Reductions under way, as change-log entries of their planned sizes (``{kind, outcome,
        run, before}``), for the shard partition's original sizes."""

    @abstractmethod
    def leave_alone_unfinished(self, p) -> None:
        """Mark in plan ``p`` the runs an unfinished operation holds (``Skip.LOCKED`` when its
        holder still runs, else ``Skip.UNFINISHED`` with the command that settles it)."""

    @abstractmethod
    def resumable_ledger(self, ledger: str, shard: Optional[Tuple[int, int]] = None
                         ) -> Optional[Tuple[str, dict, str]]:
        """``(path, entries, logdir)`` of the batch ledger a resumed reduce will skip by, or None."""

    # -- what a reduction frees ------------------------------------------------------------------
    @abstractmethod
    def retention(self, removable: int) -> Optional[dict]:
        """When the bytes a reduction removes are really freed on this store (``lines`` to show,
        ``freed_after_purge``); None where that is not a store's question (a local disk)."""


def refused_rows(recovered: Sequence[RecoveryOutcome]) -> List[dict]:
    """What a purge reports of the journals ``recovered`` refused (planted, copied, malformed)."""
    return [{"op_id": r.op_id, "code": r.code, "detail": r.detail} for r in recovered if r.action == Recovery.REFUSED]


def already_restored(m: dict, run: Optional[str] = None) -> RunOutcome:
    """A restore asked for again: its originals are back already, nothing is done (said so).
    ``run``: the run asked for, when ``m`` is its parent's retirement that took it along."""
    along = f" (it retired {run} along with {m['run']})" if run not in (None, m["run"]) else ""
    by = f"by {m['restored_by']}"
    if not is_op_id(m.get("restored_by")):
        # a bucket's restore has no op id of its own: said by when and by whom it ran, as recorded
        # (untrusted: only a number and strings are said)
        at, with_ = m.get("restored_at"), m.get("restored_with")
        said = []
        if isinstance(at, (int, float)) and not isinstance(at, bool) and 0 < at < 1e11:
            said.append(f"on {time.strftime('%Y-%m-%d %H:%M', time.localtime(at))}")
        if isinstance(with_, dict) and isinstance(with_.get("user"), str) and isinstance(with_.get("host"), str):
            said.append(f"by {with_['user'][:64]}@{with_['host'][:255]}")
        by = " ".join(said) or "by a restore"
    return RunOutcome(run=run or m["run"], status=Outcome.SKIPPED, code=Skip.ALREADY_RESTORED, op_id=m["op_id"],
                      reason=f"already restored: operation {m['op_id']}{along} was restored {by}",
                      bytes_before=m.get("bytes_before", 0), bytes_after=m.get("bytes_before", 0))


def nothing_to_restore(logdir: str, run: Optional[str], damage: Sequence[str], op: Optional[str] = None
                       ) -> TransactionError:
    """A restore of ``run`` (or of the operation ``op``, found but holding nothing) that found
    nothing to put back: the one set of words for every store, each piece of ``damage`` (state
    that may hide a backup) said after them and making it a refusal programs can tell
    (``restore_blocked``) rather than ``not_found`` (review R21 PD5)."""
    what = f"operation {op!r}" if op is not None else f"run {run!r}"
    # with damage, what is known is only what the readable records say (review R24's wording note:
    # "no kept backup" beside "its backups are kept" read as a contradiction)
    none = ("no readable record of a kept backup or a retirement of it" if damage
            else "no kept backup of a verified reduction, no retirement")
    return TransactionError(f"nothing to restore for {what} in {logdir} ({none})" + "".join(f"; {why}" for why in damage),
                            Failure.RESTORE_BLOCKED if damage else Failure.NOT_FOUND)


__all__ = ["DEFAULT_BACKENDS", "Engine", "Progress", "already_restored", "nothing_to_restore", "refused_rows"]
