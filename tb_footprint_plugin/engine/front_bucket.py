"""The engine of a logdir in object storage (S3, GCS, Azure): ``Engine`` over ``engine.bucket``'s
front, the logdir's ``ObjectStore`` and its ``BucketVault`` (server-side copies in the store, or blobs in a
local folder). ``engine.bucket`` is imported at first use: it loads the object-store clients.

Why one module: as ``front_local``, one class, ``BucketEngine``, one short method per ``Engine``
verb handing to the bucket engine's modules; split, one interface's implementation would be read
across files.
"""
from __future__ import annotations

import time
from typing import Callable, Collection, List, Mapping, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery, Skip, StoreError
from tb_footprint_plugin.engine import health, usage
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.catalogue_rules import backup_kept, is_kept, summarize_operations
from tb_footprint_plugin.engine.context import CancelToken, RunOutcome, TransactionError
from tb_footprint_plugin.engine.front_base import (already_restored, DEFAULT_BACKENDS, Engine, nothing_to_restore,
                                                   Progress, refused_rows)
from tb_footprint_plugin.engine.history import HistoryPage
from tb_footprint_plugin.engine.ledger import with_restores
from tb_footprint_plugin.engine.plan_notes import bucket_cost, bucket_traces
from tb_footprint_plugin.engine.purge import PurgeReport
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.retire_rules import retired_row, takes_out
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.storage.store import StoreFailure


def bucket_of(logdir: str, backup_dir: Optional[str]):
    """``(ObjectStore, BucketVault)`` of a bucket logdir: its store, through which the bucket
    engine names and reaches every object, and its vault, backups as server-side copies in that
    store (``backup_dir`` unset or a prefix of the same store) or blobs in a local folder of ours
    (``backup_dir`` a path; ``NotPrivate`` when it is not ours). The one place of the engine that
    makes the store's client (``RemoteFS``): everything else holds the ``ObjectStore``."""
    from tb_footprint_plugin.engine.bucket import BucketVault
    from tb_footprint_plugin.storage.remote import RemoteFS
    from tb_footprint_plugin.storage.store_object import ObjectStore

    client = RemoteFS(logdir)  # its own refusals (a missing client extra: ``missing_extra``) as they were
    store = ObjectStore.on_client(client, client.url)  # no request
    # the vault is built over the logdir's store, on its client (no request)
    return store, BucketVault.for_logdir(store, backup_dir)


def op_view(m: dict) -> dict:
    """A bucket manifest as the API shows it: the one schema ``bucket_manifests.manifests`` reads
    every shape into (``engine.manifest``), without the reader's private ``_version``/``_path``."""
    return {k: v for k, v in m.items() if not k.startswith("_")}


class BucketEngine(Engine):
    """A logdir in object storage (S3, GCS, Azure): ``engine.bucket``'s front over the logdir's
    ``ObjectStore`` and its ``BucketVault`` (server-side copies in the store, or blobs in a local folder)."""

    kind = "bucket"

    def __init__(self, logdir: str, backup_dir: Optional[str] = None, *, quiet_period: float = DEFAULT_QUIET_PERIOD,
                 verify_backends: Sequence[str] = DEFAULT_BACKENDS,
                 closed_files: Optional[Mapping[str, float]] = None):
        self.logdir, self.backup_dir = logdir, backup_dir
        self.scan_backup_dir = backup_dir
        self.quiet_period, self.verify_backends = quiet_period, tuple(verify_backends)
        self.closed_files = dict(closed_files or {})
        self.ostore, self.vault = bucket_of(logdir, backup_dir)
        self._listing: Optional[dict] = None  # the reduce's one listing, which its transactions share
        self._listing_measured = False  # whether ``reduce_usage`` took its "before" from that listing

    @property
    def state(self) -> BucketState:
        """The logdir's ``BucketState``: its listings and reads through the ``Store`` interface."""
        return BucketState.of(self.ostore)

    @property
    def bk(self):
        """``engine.bucket``, imported at first use (it loads the object-store clients)."""
        from tb_footprint_plugin.engine import bucket

        return bucket

    # -- settling ----------------------------------------------------------------------------
    def recover(self, thorough: bool = False) -> List[RecoveryOutcome]:
        """Unfinished bucket operations settled from their journal objects, from any machine;
        then a damaged index object of the blob folder mended (``bucket_blob_index.recover_index``:
        only while one is); then the ledger objects a gone worker of this host left in flight are settled: ``done``
        when the commit is proven, ``pending`` when this recovery rolled the run back
        (``bucket_ledger.settle_stale``, as a disk's start settles its ledgers: one listing when
        nothing is stale). ``thorough`` asks nothing more: a start pays all of it already."""
        from tb_footprint_plugin.engine import bucket_ledger
        from tb_footprint_plugin.engine.bucket_blob_index import recover_index

        out = self.bk.recover(self.ostore, self.vault)
        # a damaged index object of the blob folder: the backups it hid listed anew (R22 F3)
        out += recover_index(self.vault, lambda: self.bk.manifests(self.ostore, self.vault))
        try:
            bucket_ledger.settle_stale(self.ostore, lambda: self.bk.manifests(self.ostore, self.vault), recovered=out)
        except (OSError, ValueError):
            pass  # the ledger is a record: the next start settles it
        return out

    def unfinished(self) -> dict:
        """From the journal and lock objects (``engine.bucket_unfinished``): one row per run a
        journal holds (``bytes_before`` None), unreadable journals and damaged locks as problems.
        Differs: the manifests' damage is not read here (one read each: ``status`` names it)."""
        from tb_footprint_plugin.engine.bucket_unfinished import unfinished

        return unfinished(self.ostore, self.vault, self.logdir, self.backup_dir)

    def pending_operations(self) -> List[str]:
        """Empty today, as before the interface: a bucket's journal objects are listed by ``status``
        (``unfinished_operations``) and settled by ``recover``."""
        return []

    def interrupted_state(self) -> List[dict]:
        """Empty today: a bucket's journals are settled by ``recover`` from any machine, not said
        file by file before."""
        return []

    def settle_interrupted(self, *, policy_name: str, ledger: Optional[str], shard: Optional[Tuple[int, int]],
                           rolled_back: Sequence[str]) -> List[dict]:
        """The bucket's recovery, each outcome said with ``untouched`` None and ``files`` 0 (a
        bucket's originals are not re-hashed here); then this process's own in-flight ledger
        entries (its batch's, run by this thread) are settled (``bucket_ledger.settle_stale`` with
        ``mine``, as a disk's interrupt settles its own): ``done`` when the commit is proven,
        ``pending`` (code ``rolled_back``) when recovery or the batch's own thread (``rolled_back``)
        rolled it back."""
        from tb_footprint_plugin.engine import bucket_ledger

        recovered = self.recover()
        out = [dict(vars(o), untouched=None, files=0) for o in recovered]
        try:
            bucket_ledger.settle_stale(self.ostore, lambda: self.bk.manifests(self.ostore, self.vault), mine=True,
                                       recovered=recovered)
            if ledger or shard is not None:  # the folder the reduce recorded the batch in (``open_ledger``)
                bucket_ledger.record_rolled_back(self.ostore, None if shard is None else f"{shard[0]}/{shard[1]}",
                                                 rolled_back)
        except (OSError, ValueError):
            pass  # the ledger is a record: the next start settles it
        return out

    # -- the catalogue -------------------------------------------------------------------------
    def operations(self, run: Optional[str] = None) -> List[dict]:
        """The vault's manifests, less those of runs a journal has not committed (``_unreduced``)."""
        found = self.bk.manifests(self.ostore, self.vault)
        held = self._unreduced()
        return [op_view(m) for m in found if (run is None or m.get("run") == run) and m.get("op_id") not in held]

    def _unreduced(self) -> set:
        """The operations whose manifest exists but whose journal has not recorded the commit (or
        took the run out before it): a reduction under way, or one being rolled back that the next
        start settles, never shown as a verified reduction. Read after the manifests: a manifest is
        written after its journal, and a rollback drops the manifest before the journal."""
        from tb_footprint_plugin.engine.bucket_steps import uncommitted_ops

        return uncommitted_ops(self.ostore)

    def _looked_in(self, found: List[dict]) -> Tuple[object, List[dict]]:
        """The vault ``status`` and ``verify`` look in: with the command's ``--backup-dir``, else
        with the blob folder the manifests ``found`` (the verb's one reading) record for this host
        once it is ours and lists this logdir (``bucket_blob_index.recorded_vault``, the rule of a
        restore and a purge; review R21 PD20's status and verify halves), and the rows naming a
        recorded folder refused."""
        if self.vault.blobs is not None:
            return self.vault, []
        from tb_footprint_plugin.engine.bucket_blob_index import recorded_vault
        from tb_footprint_plugin.engine.bucket_manifests import own_manifests

        return recorded_vault(self.vault, own_manifests(self.ostore, self.vault, found, []))

    def status(self) -> dict:
        """The bucket's own status (``engine.bucket_catalogue.status``) with the keys a local one
        has: ``unfinished``, ``problems``, ``late_writes``, ``kept_blobs``, ``locked_runs`` empty
        where the bucket does not say (its damage is reported per verb; its lock objects are not
        listed yet); ``batch`` from the ledger objects. Given no ``--backup-dir``, the blob folder
        the manifests record is looked in (``_looked_in``), as a restore and a purge take it; the
        manifests are read once, here, for both."""
        from tb_footprint_plugin.engine import bucket_ledger

        problems: List[dict] = []
        others: List[dict] = []
        found = self.bk.manifests(self.ostore, self.vault, problems, others)
        vault, refused = self._looked_in(found)
        st = self.bk.status(self.ostore, vault, read=(found, problems, others))
        held = self._unreduced() if st.get("unfinished_operations") else set()
        st["operations"] = [o for o in st["operations"] if o.get("op_id") not in held]
        st["batch"] = with_restores(bucket_ledger.merged(self.ostore), st["operations"])
        settles = bool(st["unfinished_operations"])
        if settles:
            from tb_footprint_plugin.engine.bucket_unfinished import journal_rows

            # each journal's row with what recover will do, by recover's own rule (as a disk's
            # ``unfinished``): a refusal is said here, before recover is offered (r27 W5)
            st["unfinished"] = journal_rows(self.ostore, self.vault)[0]
            settles = not st["unfinished"] or any(
                (o.get("recover_will") or {}).get("action") != Recovery.REFUSED for o in st["unfinished"])
        for k in ("unfinished", "problems", "late_writes", "kept_blobs", "locked_runs"):
            st.setdefault(k, [])
        from tb_footprint_plugin.engine.bucket_blob_index import index_problems

        st["problems"] += refused + index_problems(vault, lambda: self.bk.manifests(self.ostore, vault))
        st.setdefault("settle_command", health.settle_command(self.logdir, self.backup_dir) if settles else None)
        st["disk_in_use_bytes"] = self.in_use()
        try:
            st["freed_after_purge_bytes"] = self.bk.retention_report(self.ostore, vault,
                                                                     st["vault_bytes"])["freed_after_purge"]
        except (OSError, ValueError):
            st["freed_after_purge_bytes"] = st["vault_bytes"]
        return st

    def kept_blobs(self, manifests: Optional[List[dict]] = None) -> List[dict]:
        """``bucket_catalogue.kept_objects`` of the manifests given (``operations()``'s, which leave
        out those of runs a journal has not committed: a reduce before its commit, for which no
        restore has kept an object), else of the vault's manifests as ``status`` reads them; a HEAD
        per kept object (whether it is still there), nothing else."""
        return self.bk.kept_objects(self.ostore, self.vault, manifests)

    def bring_back(self, op_id: str, path: str) -> dict:
        """``bucket_catalogue.bring_back``: create-only beside the key, checked; from a local blob
        folder (``--backup-dir``) streamed and hashed, else a server-side copy."""
        from tb_footprint_plugin.engine import bucket_catalogue  # as ``bk``: the clients load at first use

        return bucket_catalogue.bring_back(self.ostore, self.vault, op_id, path)

    def in_use(self, objects=None) -> Optional[int]:
        """What the logdir and its vault hold, as stored (the listing's sizes; a vault in another
        prefix listed too: ``BucketState`` listings, one each); None when a listing fails."""
        ostore, vault = self.ostore, self.vault
        try:
            objects = self.state.tree() if objects is None else objects
            total = usage.stored_bytes(o.size for o in objects.values())
            if not (vault.root == ostore.root or vault.root.startswith(ostore.root + "/")):
                # a vault in a bucket not made yet holds no backup yet
                total += usage.stored_bytes(o.size for o in self.state.listing(vault.root, missing_ok=True).values())
            return total
        except (OSError, ValueError):
            return None

    def disk_numbers(self) -> dict:
        """What the logdir and its vault store now, what the reductions freed now (summed as the
        history counts each: what left the logdir beyond its backups' copies) and after purge;
        no ``remote_vault_bytes``."""
        st = self.status()
        return {"disk_in_use_bytes": st.get("disk_in_use_bytes"), "freed_now_bytes": st.get("freed_now_bytes"),
                "freed_after_purge_bytes": st.get("freed_after_purge_bytes")}

    def history(self) -> List[dict]:
        """From the manifests (a bucket has no append: each operation's manifest is its record),
        less those of runs a journal has not committed (``_unreduced``)."""
        found = self.bk.history(self.ostore, self.vault)
        held = self._unreduced()
        # a change log's lines are untrusted: an op id that is no string names no operation held
        return [e for e in found if not (isinstance(e.get("op_id"), str) and e["op_id"] in held)]

    def partition_history(self, write: bool = True) -> List[dict]:
        """``history``'s entries with only the fields a shard partition reads
        (``plan.shard.original_sizes``), from the vault's summary of its manifests and only the
        manifests it does not hold at their version (``bucket_history.partition_entries``): the
        listing and a read or two, not a read per manifest, once a summary is there; ``write``
        False: the summary is not written (a dry run writes nothing)."""
        from tb_footprint_plugin.engine.bucket_history import partition_entries

        return partition_entries(self.ostore, self.vault, self._unreduced, write=write)

    def history_page(self, newest: Optional[int] = None) -> HistoryPage:
        """Differs: read from the change-log object's lines and only the manifests that can hold
        the newest entries, newest written first, into a bounded heap (``bucket_history.
        history_page``: the listing and about ``newest`` reads, whatever the vault holds); the
        total counts each manifest not read as one entry (a lower bound, ``exact`` False, unless
        all are read); ``newest`` None: ``history`` whole."""
        from tb_footprint_plugin.engine.bucket_history import history_page

        if newest is None:
            entries = self.history()
            return HistoryPage(entries, len(entries))
        return history_page(self.ostore, self.vault, newest, self._unreduced)

    # -- backups -----------------------------------------------------------------------------
    def recheck(self, run: Optional[str], op: Optional[str],
                progress: Optional[Callable[[dict, int, int], None]] = None,
                cancel: Optional[CancelToken] = None) -> List[dict]:
        """Every backup object checked against the checksums the store computed for its original,
        removed keys still absent, replaced keys still the reduced bytes, nothing downloaded.
        Differs: no ``progress`` calls; of the damage no operation's check shows, its results
        name what a bucket has (a manifest object that does not read, one whose owner a failed
        listing could not tell: ``bucket_catalogue.recheck``); a cancel is looked at between runs
        and among a run's backups (no readers' verification). Given no ``--backup-dir``, the
        blobs are looked for in the folder the manifests record (``_looked_in``; the manifests read
        once, here); one refused is a failed result naming it (the blobs then read as missing)."""
        self.recover()
        damaged: List[dict] = []
        found = self.bk.manifests(self.ostore, self.vault, damaged)
        vault, refused = self._looked_in(found)
        out = self.bk.recheck(self.ostore, vault, run=run, op=op, cancel=cancel, read=(found, damaged))
        for p in refused if op is None else []:
            out.append({"op_id": "-", "run": "(vault)", "ok": False, "backups_ok": False, "damaged_backups": [],
                        "unreadable_backups": [], "code": p["code"], "verification": {"ok": False, "checks": [
                            {"name": str(p["code"]), "ok": False, "detail": p["detail"]}]}})
        return out

    def restore_refusal(self, run: str) -> TransactionError:
        """``nothing_to_restore`` with the damaged manifests that may hide backups, as ``restore``
        names them (an operation whose owner a failed listing could not tell: only when it is
        ``run``'s)."""
        damaged: List[dict] = []
        self.bk.manifests(self.ostore, self.vault, damaged)
        damage = [d["detail"] for d in damaged if d.get("code") != Finding.WHOSE_UNKNOWN
                  or run == d.get("run") or run in d.get("takes_along", ())]
        return nothing_to_restore(self.logdir, run, damage)

    def restore(self, run: Optional[str], op: Optional[str],
                on_outcome: Optional[Callable[[RunOutcome], None]] = None,
                cancel: Optional[CancelToken] = None,
                progress: Optional[Callable[[str, str, float], None]] = None) -> List[RunOutcome]:
        """A retired run comes back first; a damaged manifest that may hide a backup is a failed
        outcome (``Failure.RESTORE_BLOCKED``), and so is an operation whose owner a failed listing could
        not tell (``Finding.WHOSE_UNKNOWN``, named by op and run). A run restored already is said so
        (``already_restored``), as on a disk, and so is an operation asked for by its op id and restored
        already (nothing found is a ``TransactionError`` for ``op`` as for ``run``). ``cancel``: a reduction's restore stops before its first put-back
        (``bucket_restore.restore_op``); a retired run's is not stopped once started
        (``bucket_retire.unretire``), only not started, as on a disk."""
        bk, ostore, vault = self.bk, self.ostore, self.vault
        self.recover()
        damaged: List[dict] = []  # a damaged manifest may hide a backup: named, as on disk
        todo = []
        # read once: each reduction's refusals (``putback.restore_refusal``: a newer reduction, a
        # retired run) are asked of it, kept current by ``restore_op`` as each comes back
        found = bk.manifests(ostore, vault, damaged)
        for m in found:
            v = op_view(m)  # the one shape's fields, whichever shape the bucket wrote
            # a purged reduction asked for by its op id is taken, to be refused as a disk refuses
            # it (``putback.restore_refusal``: "was purged"), not said to be nowhere; a restored one is
            # said to be restored already (below), not put back a second time
            if (v.get("outcome") == Outcome.VERIFIED
                    and (backup_kept(v) or op is not None and v.get("kind") != "retire" and not v.get("restored_by"))
                    and (op is None or v.get("op_id") == op)
                    and (run is None or takes_out(m, run))):
                todo.append((v.get("kind") != "retire", m))
        todo = [m for _later, m in sorted(todo, key=lambda t: t[0])]  # a retired run comes back first, as on disk
        # an operation whose owner a failed listing could not tell (R13 F2): a refused outcome each
        unsure = [RunOutcome(run=str(d.get("run")), status=Outcome.FAILED, code=d["code"], reason=d["detail"],
                             op_id=d.get("op_id")) for d in damaged if d.get("code") == Finding.WHOSE_UNKNOWN
                  and (op is None or d.get("op_id") == op)
                  and (run is None or run == d.get("run") or run in d.get("takes_along", ()))]
        damage = [d["detail"] for d in damaged if d.get("code") != Finding.WHOSE_UNKNOWN]
        if (run is not None or op is not None) and not todo and not unsure:
            # an operation, or a run, restored already (or taken along by a retirement restored already)
            # is said so, as on a disk (``LocalEngine.restore``), not "nothing to restore"
            done = [v for v in map(op_view, found) if v.get("outcome") == Outcome.VERIFIED and v.get("restored_by")
                    and isinstance(v.get("op_id"), str) and isinstance(v.get("run"), str)
                    and (op is None or v["op_id"] == op) and (run is None or takes_out(v, run))]
            if done:
                said = already_restored(max(done, key=lambda v: v.get("started_at") or 0), run)
                if on_outcome is not None:
                    on_outcome(said)
                return [said]
        if (op or run) and not todo and not unsure:
            # damage that may hide its backup is a refusal programs can tell (a code), as on a disk
            # the words a disk says (``LocalEngine.restore``, ``find_manifest``), and why
            if op is not None and not any(op_view(m).get("op_id") == op for m in found):
                raise TransactionError(f"no operation {op!r} in the vault of {self.logdir}"
                                       + "".join(f"; {w}" for w in damage),
                                       Failure.RESTORE_BLOCKED if damage else Failure.NOT_FOUND)
            raise nothing_to_restore(self.logdir, run, damage, op)
        from tb_footprint_plugin.engine.bucket_putback import forgets_at_end, release_note

        outcomes = []
        # a vault of blobs forgets what the restored retirements let go once, at the end: its
        # forget reads every manifest and journal in the bucket, so K runs paid it K times
        from tb_footprint_plugin.engine.bucket_moved import one_reading

        # each operation's re-judging lists a state once per command, not once per operation
        with forgets_at_end(ostore, vault) as late, one_reading():
            for m in todo:
                if cancel is not None and cancel.cancelled:
                    outcomes.append(RunOutcome(run=m["run"], status=Outcome.SKIPPED, code=Skip.CANCELLED,
                                               reason="cancelled", op_id=m.get("op_id"),
                                               bytes_before=m.get("bytes_after", 0), bytes_after=m.get("bytes_after", 0)))
                else:
                    outcomes.append(bk.restore_op(ostore, vault, m, cancel=cancel, progress=progress, catalogue=found))
                if on_outcome is not None:
                    on_outcome(outcomes[-1])
        if late.failure is not None:  # said on each run's outcome, as a release stopped at its restore is
            for o in outcomes:
                if o.run in late.runs():
                    o.reason += release_note(late.failure)
        return outcomes + unsure + [
            RunOutcome(run="", status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED, reason=w) for w in damage]

    def restorable(self, run: Optional[str] = None) -> List[dict]:
        return summarize_operations([m for m in self.operations(run) if is_kept(m)])

    def backup_runs(self) -> List:
        return [m.get("run") for m in self.bk.manifests(self.ostore, self.vault)]

    def purge(self, *, older_than: Optional[float], yes: bool, op: Optional[str], runs: Optional[Collection[str]],
              op_ids: Optional[Collection[str]], recovered: Sequence[RecoveryOutcome] = (),
              cancel: Optional[CancelToken] = None, progress: Progress = None) -> PurgeReport:
        """The kept rows a disk's purge gives (``purge_rules.kept_row``): a bucket's own codes are
        ``Finding.NOT_RESTORED`` (a restore left an original in the vault only) and ``Skip.LOCKED``
        (the operation's journal is still there)."""
        d = self.bk.purge(self.ostore, self.vault, older_than=older_than, op=op, yes=yes, runs=runs,
                          op_ids=set(op_ids) if op_ids is not None else None, cancel=cancel, progress=progress)
        return PurgeReport(dry_run=d["dry_run"], ops=d["ops"], freed_bytes=d["freed_bytes"], kept=d["kept"],
                           # as on a disk: journals recovery refused, manifests the purge did not act on
                           refused=refused_rows(recovered) + d.get("refused", []),
                           # findings that refuse nothing: a manifest the witness names gone (every blob kept)
                           warnings=d.get("warnings", []), folder_freed_bytes=d.get("folder_freed_bytes"))

    def sample(self, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0) -> tuple:
        """The run's event objects and the operation's backups of them (server-side copies, or
        blobs of a local vault) read through ``BucketState`` (``engine.bucket_sample``)."""
        from tb_footprint_plugin.engine.bucket_sample import sample

        return sample(self.ostore, self.vault, op_id, side, plugin, tag, step, index)

    # -- retire --------------------------------------------------------------------------------
    def check_retire(self) -> None:
        """Nothing more than opening the engine (the vault's refusals)."""

    def retire_run(self, run: str, *, takes_along: Sequence[str], rule: dict, quiet_period: float,
                   cancel: Optional[CancelToken] = None, progress: Progress = None) -> RunOutcome:
        """Differs: no ``progress`` calls. A cancel is honoured at the driver's points up to the
        commit record, as on a disk. With a local vault of blobs the run's objects go there (made
        0700, or refused naming it, before the first run moves: a dry run writes nothing)."""
        from tb_footprint_plugin.engine.bucket_blob_claims import noting
        from tb_footprint_plugin.engine.bucket_blob_release import release_rolled_back

        self.prepare_vault()
        with noting(self.vault) as claims:  # as ``reduce_runs``: a retirement rolled back leaves no blob
            out = self.bk.retire_run(self.ostore, self.vault, run, takes_along=takes_along, rule=rule,
                                     quiet_period=quiet_period, cancel=cancel)
            release_rolled_back(self.ostore, self.vault, claims, [out])
        return out

    def retired(self) -> List[dict]:
        """Differs: ``tree_sha256`` is None (a bucket retirement lists objects, no tree digest)."""
        return [retired_row(op_view(m)) for m in self.bk.retirements(self.bk.manifests(self.ostore, self.vault))]

    def offload_url(self) -> Optional[str]:
        """Refused (``ValueError``): a bucket logdir keeps its backups in its store or a local folder,
        never offloaded."""
        raise ValueError(f"{self.logdir}: a bucket logdir keeps its backups as copies in its store; the lifecycle "
                         "rule is for the remote vault of a local logdir")

    lets_go_while_planning = False  # its request cost reads the footprint after the plan

    def plan_measures(self):
        """The PyTorch traces' gzip and slim measured by ranged reads, cached per object."""
        return bucket_traces(self.ostore.url)

    def note_plan(self, p, fp, *, measures=None, vault_format: str = "compressed",
                  held: Optional[dict] = None) -> None:
        """Differs: no unfinished operation or open writer is named beforehand (the reduce settles
        journals first and its lock objects keep a run another machine changes)."""
        bucket_cost(p, fp, self.retention(p.removable_bytes), measures.stats if measures is not None else None,
                    blob_vault=self.vault.blobs is not None)
        p.notes.append(self.backup_note())

    def backup_note(self) -> str:
        """The plan's line on the form its backups take (``vault_format``)."""
        if self.vault.blobs is not None:
            # (a --vault-format it cannot take is refused before the plan: ``vault_format``)
            return (f"backups: compressed blobs in {self.vault.blobs.folder} (verified, zstd where it pays, small ones "
                    "packed)")
        return (f"backups: whole server-side copies under {self.ostore.scheme}://{self.vault.root} (the store's checksum "
                "verified), kept until `tb-footprint purge`; --backup-dir FOLDER keeps compressed blobs instead")

    def in_flight(self) -> List[dict]:
        """Empty: a bucket's manifests, read as its history, are written before anything is deleted."""
        return []

    def leave_alone_unfinished(self, p) -> None:
        """Nothing today: a bucket's reduce settles its journals first (``recover``) and its lock
        objects keep a run another machine changes (the plan does not say so beforehand)."""

    def resumable_ledger(self, ledger: str, shard: Optional[Tuple[int, int]] = None
                         ) -> Optional[Tuple[str, dict, str]]:
        """The shard's ledger folder (``ledger_folder``: another place is refused), read as the
        reduce's ``BucketLedger.start`` reads it: one listing, one GET per entry; ``policy`` is
        the entries' one policy (None when they name several: then nothing is skipped by them)."""
        from tb_footprint_plugin.engine import bucket_ledger

        folder = self.ledger_folder(ledger, shard)
        try:
            entries, _problems = bucket_ledger.read_folder(self.ostore, folder)
        except (OSError, ValueError):
            return None
        if not entries:
            return None
        policies = {pol for _e, pol in entries.values()}
        return (self.ostore.url_of(f"{bucket_ledger.LEDGERS}/{folder}"),
                {"policy": policies.pop() if len(policies) == 1 else None,
                 "runs": {run: e for run, (e, _pol) in entries.items()}}, self.logdir)

    def retention(self, removable: int) -> Optional[dict]:
        return self.bk.retention_report(self.ostore, self.vault, removable)

    def ledger_folder(self, ledger: str, shard: Optional[Tuple[int, int]] = None) -> str:
        """The ledger folder of the shard in the bucket, what ``ledger`` means here as
        ``<logdir>/.tb-footprint/ledger.json`` (or the shard's) does on a disk: ``"default"`` or
        that folder's own URL. Any other path is refused (``StoreFailure``
        ``StoreError.NOT_SUPPORTED``, naming it): a bucket's ledger is objects in its state folder,
        where every worker and ``status`` find it, never a file elsewhere."""
        from tb_footprint_plugin.engine import bucket_ledger

        folder = bucket_ledger.folder_of(sharding.label(shard))
        own = self.ostore.url_of(f"{bucket_ledger.LEDGERS}/{folder}")
        if ledger != "default" and ledger.rstrip("/") != own:
            raise StoreFailure(StoreError.NOT_SUPPORTED, "", f"ledger {ledger}: a bucket logdir keeps its batch "
                               f"ledger as objects in {own}; give --ledger default (or that URL), not another path")
        return folder

    def vault_format(self, requested: Optional[str]) -> str:
        """``"compressed"`` with a local vault of blobs (``engine.bucket_blobs``: verified,
        content-addressed, zstd where it pays, small ones packed); ``"copies"`` with the bucket's
        own vault (whole server-side copies, kept until purge). A requested format the vault
        cannot take is refused (``StoreFailure`` ``StoreError.NOT_SUPPORTED``, naming the vault):
        ``hardlink`` on either (no hard link from a bucket), ``compressed`` on server-side copies."""
        own = "compressed" if self.vault.blobs is not None else "copies"
        if requested is None or requested == own:
            return own
        where = (f"the folder {self.vault.blobs.folder} keeps them as compressed blobs" if self.vault.blobs is not None
                 else f"the bucket keeps them as whole server-side copies under {self.ostore.scheme}://{self.vault.root}; "
                 "--backup-dir FOLDER keeps them as compressed blobs in a local folder")
        raise StoreFailure(StoreError.NOT_SUPPORTED, "", f"vault format {requested!r} cannot be honoured for the "
                           f"bucket logdir {self.logdir}: {where}")

    # -- reduce (what ``api.reduce`` drives) -----------------------------------------------------
    def prepare_vault(self) -> None:
        """A local vault of blobs made 0700 (or refused, naming it) before anything starts."""
        if self.vault.blobs is not None:
            self.vault.blobs.store  # noqa: B018 - opening it makes or refuses the folder

    def prepare_reduce(self) -> None:
        """``prepare_vault``: the bucket's own vault needs nothing made before."""
        self.prepare_vault()

    def survey_for_reduce(self, *, write_cache: bool, eager: bool) -> Optional[LogdirFootprint]:
        """One listing of the logdir (``NotADirectoryError`` when there is no bucket), kept for the
        transactions (they check versions against what was planned) and the first
        ``reduce_usage``, and the scan from it (``scan.scanner.scan_bucket``)."""
        from tb_footprint_plugin.scan.scanner import scan_bucket

        started = time.time()
        try:
            objects = self.state.tree()
        except StoreFailure as e:
            if e.code != StoreError.NOT_FOUND:
                raise
            raise NotADirectoryError(f"logdir {self.ostore.url}: no such bucket") from None
        self._listing, self._listing_measured = objects, False
        return scan_bucket(self.vault.logdir, objects, backup_dir=self.backup_dir, write_cache=write_cache, listed_at=started)

    def dry_run_freed(self, p, vault_format: str) -> Optional[Tuple[int, int]]:
        """None: the plan's cost and retention say what a bucket frees (``note_plan``)."""
        return None

    def reduce_usage(self) -> Optional[Tuple[int, int]]:
        """``stored`` twice over (a bucket is its own disk): the first call counts the reduce's
        listing (no request more), later ones list again; None when a listing fails."""
        objects = None
        if self._listing is not None and not self._listing_measured:
            objects, self._listing_measured = self._listing, True
        n = self.stored(objects)
        return None if n is None else (n, n)

    def in_use_after_scan(self, fp: LogdirFootprint, *, fresh: bool) -> int:
        """``usage.bucket_stored``: from the scan's listings when ``fresh`` (no request more)."""
        return usage.bucket_stored(self.vault, *((fp.listed_bytes, fp.listed_vault) if fresh else (None, None)))

    def stored(self, objects=None) -> Optional[int]:
        """``in_use`` plus what a local vault of blobs holds, as stored (compressed, packed); None
        when either cannot be listed."""
        from tb_footprint_plugin.storage.blobstore import BlobFailure

        total = self.in_use(objects)
        if total is None or self.vault.blobs is None:
            return total
        try:
            return total + int(self.vault.blobs.store.stats()["stored_bytes"])
        except (OSError, ValueError, BlobFailure):
            return None

    def open_ledger(self, ledger: Optional[str], policy_name: str, shard: Optional[Tuple[int, int]] = None):
        """The shard's ledger objects in the bucket (``engine.bucket_ledger.BucketLedger``; None
        without ``ledger``): ``ledger`` is ``"default"`` or their folder's URL, another path is
        refused (``ledger_folder``)."""
        from tb_footprint_plugin.engine.bucket_ledger import BucketLedger

        if not ledger:
            return None
        self.ledger_folder(ledger, shard)  # another place is refused before any run is touched
        # its entries found in the reduce's listing (``survey_for_reduce``): no listing more
        return BucketLedger(self.ostore, policy_name, sharding.label(shard), listing=self._listing)

    def settle_ledger(self, path: str) -> List[str]:
        """Nothing: ``recover`` settled every ledger folder of the bucket (``settle_stale``)."""
        return []

    def reduce_runs(self, todo: list, *, policy, vault_format: str, jobs: int, timeout: Optional[float],
                    cancel: Optional[CancelToken], progress: Optional[Callable[[str, str, float], None]],
                    begin: Optional[Callable], on_outcome: Optional[Callable[[RunOutcome], None]]
                    ) -> List[RunOutcome]:
        """Over the listing ``survey_for_reduce`` kept: drop-only runs in batches under one
        journal object, a run that rewrites or compresses files as its own transaction
        (``engine.bucket_reduce.reduce_runs``). As on a disk, ``timeout`` (per run) and the
        cancel are checked between steps up to the commit record, a run past them rolled back;
        a batch's runs count their timeout from the batch's start. ``jobs``: the rewrite
        transactions on that many threads, the drop-only batches one after the other before them
        (a batch shares its journal and listings already). ``progress``: the disk's steps
        (``backup``, ``stage``, ``verify`` where the ledger marks the run ``verifying``,
        ``done``), after a ``start`` (0.0) a disk does not say. ``vault_format`` is the one
        ``vault_format`` gave (the vault's own: a requested other was refused before the plan).
        A run's ``finished_at`` is its commit record's time, as on a disk."""
        from tb_footprint_plugin.engine.bucket_blob_claims import noting
        from tb_footprint_plugin.engine.bucket_blob_release import release_rolled_back
        from tb_footprint_plugin.engine.bucket_reduce import reduce_runs

        listing = self._listing if self._listing is not None else self.state.tree()
        # the blobs a run put back as it was claimed anew are released at the end (its journal gone)
        with noting(self.vault) as claims:
            outs = reduce_runs(self.ostore, self.vault, todo, listing, self.quiet_period, policy=policy.name,
                               on_outcome=on_outcome, verify_backends=self.verify_backends, begin=begin,
                               closed_files=self.closed_files, cancel=cancel, progress=progress, timeout=timeout,
                               jobs=jobs)
            release_rolled_back(self.ostore, self.vault, claims, outs)
        return outs

    def request_counts(self) -> Optional[dict]:
        return self.ostore.stats.to_dict()

    def freed_after_purge(self, op_ids: List[str], removed_bytes: int = 0, backed_up_bytes: int = 0) -> Optional[int]:
        """What purge frees of these operations' backups, as ``status`` and ``purge -n`` count them
        (review R17 F8): in the bucket, whole copies of every original backed up (a rewritten
        file's too, not only the bytes removed), when the bucket's retention lets them go at purge;
        in a local folder of blobs, what it then lets go is told by ``purge -n`` (its figure here
        the bytes removed, as before). None when nothing was removed or it cannot be told."""
        if not removed_bytes:
            return None
        try:
            held = backed_up_bytes if self.vault.blobs is None and backed_up_bytes else removed_bytes
            return self.retention(held)["freed_after_purge"]
        except (OSError, ValueError):
            return None

    def end_batch(self) -> Optional[dict]:
        """Nothing to seal (each manifest is an object of its own); no remote vault."""
        return None


__all__ = ["BucketEngine", "bucket_of", "op_view"]
