"""Purge: delete the backups of verified (or restored) reductions — never a byte that exists
nowhere else.

A backup is kept, and reported with a code, when its blob no longer matches its digest
(damaged, or grown by a late writer whose records are not salvaged yet), when a process on
this machine still holds it open for writing, or when late writes were salvaged from it
within the quiet period (its writer may go on). A blob another kept operation or an
unfinished one needs is never deleted.

A purge first records its intent (which blobs) in the operation's log, then deletes the
blobs, then marks the manifest purged; a purge killed at any point is finished by the next
start from that intent, so no blob is ever left belonging to nothing. That order is one
transaction, ``LocalPurge``, run by the one driver ``engine.txn.run`` (issue #26): the intents
are its commit record, so a cancel is honoured up to them (nothing deleted, nothing recorded,
the operations reported kept with code ``interrupted``) and never after (the purge finishes).

The plan is read before the deletions: under the blobs' locks each is checked again
(``Vault.delete_blobs``) and kept when a transaction under way pinned it or a manifest written
since names it (another reduce backed up the same bytes, in this logdir or another sharing the
vault); it is reported as kept and not counted as freed. Blobs offloaded to a remote vault
(``engine.offload``) are forgotten by its blob store after the manifests are marked and before
the purge is logged as done, so a kill in between forgets them again at the next start
(forgetting is idempotent).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Collection, Dict, Iterable, List, Optional

from tb_footprint_plugin.codes import Code, Finding
from tb_footprint_plugin.engine import faults, manifest, offload, oplog, txn
from tb_footprint_plugin.engine.catalogue import journal_blobs, own_manifests, read_vaults, vault_problems
from tb_footprint_plugin.engine.context import CancelToken, Context, writing
from tb_footprint_plugin.engine.placement import starts_with
from tb_footprint_plugin.engine.purge_choice import PurgeChoice
from tb_footprint_plugin.engine.purge_rules import PurgeFilter, kept_row, not_purged, originals_lost
from tb_footprint_plugin.engine.retire_purge import log_purge, purge_retired
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.engine.vault_reads import VaultRead
from tb_footprint_plugin.storage.files import sha256_file
from tb_footprint_plugin.storage.openfiles import find_writers


@dataclass
class PurgeReport:
    """What a purge freed (or, without ``yes``, would free), and what it kept and why."""

    dry_run: bool
    ops: List[dict]
    freed_bytes: int
    kept: List[dict] = field(default_factory=list)  # {op_id, run, code, detail, bytes}
    #: original files that exist nowhere else once these backups are gone (runs not restored);
    #: None: the sum of the rows' ``originals`` (``purge_rules.originals_lost``, on every store)
    originals_lost: Optional[int] = None
    #: state on disk that was refused (planted, copied or malformed): reported, never acted on
    refused: List[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.originals_lost is None:
            self.originals_lost = sum(int(o.get("originals") or 0) for o in self.ops)

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "ops": self.ops, "freed_bytes": self.freed_bytes, "kept": self.kept,
                "originals_lost": self.originals_lost, "refused": list(self.refused)}


def _backup_size(m: dict, vault: Vault) -> int:
    """What an operation's backups take in ``vault`` (each blob once)."""
    return sum(vault.blob_size_on_disk(s) for s in {f["sha256"] for f in m["files"]})


def _problem(m: dict, vault: Vault, held: set, now: float, quiet_period: float) -> Optional[dict]:
    """Why this operation's backup must be kept, or None."""
    def base(code: Code, detail: str) -> dict:
        return kept_row(m, _backup_size(m, vault), code, detail)

    for f in m["files"]:
        p = vault.blob_path(f["sha256"])
        form = vault.blob_form(f["sha256"])
        if form == "remote":
            continue  # verified by its store before it was recorded; it cannot grow
        if form in ("zst", "packed"):
            # compressed or packed after the commit: no writer holds it and it cannot grow; it goes
            # only when it still reads back as its original (a damaged one may be all there is)
            if not vault.check_blob(f["sha256"]):
                what = "packed" if form == "packed" else "compressed"
                return base(Finding.BACKUP_DAMAGED,
                            f"{what} backup of {f['path']} does not read back as its sha256 "
                            "(damaged); it may be the only copy of those bytes, so it is kept")
            continue
        if p in held:
            return base(Finding.BACKUP_OPEN_FOR_WRITING,
                        f"backup of {f['path']} is still open for writing by a process on this machine "
                        "(its writer's next records go there); kept")
        try:
            st = os.lstat(p)
            ok = st.st_size == f["size"] and sha256_file(p) == f["sha256"]
        except OSError:
            if manifest.released_not_missing(m, f["sha256"], form):
                continue  # let go by its restore (the original stands again), not missing
            return base(Finding.BACKUP_DAMAGED,
                        f"backup of {f['path']} is missing from {vault.root}; the rest is kept")
        if not ok:
            grown = st.st_size > f["size"] and starts_with(p, f["size"], f["sha256"])  # unreadable: damaged, kept
            return base(Finding.LATE_WRITES_PENDING if grown else Finding.BACKUP_DAMAGED,
                        (f"backup of {f['path']} grew after the reduction (late writes not salvaged yet; "
                         "run `tb-footprint recover`); kept") if grown else
                        (f"backup of {f['path']} does not match its sha256 (damaged); it may be the only copy "
                         "of those bytes, so it is kept"))
    last = max((s.get("at") or 0 for s in m.get("salvaged", [])), default=0)
    if last and now - last < quiet_period:
        return base(Finding.LATE_WRITER_RECENT,
                    f"late writes were salvaged from this backup {int(now - last)} s ago; its writer may "
                    "still be appending, so it is kept for now")
    return None


def purge_backups(ctx: Context, *, older_than: Optional[float] = None, run: Optional[str] = None,
                  yes: bool = False, op: Optional[str] = None, runs: Optional[Collection[str]] = None,
                  op_ids: Optional[Collection[str]] = None, cancel: Optional[CancelToken] = None,
                  progress: Optional[txn.Report] = None) -> PurgeReport:
    """Purge (``yes``) or list the backups of this logdir's operations selected by the filters
    (``runs``: these runs' together, so shared blobs and lost originals are counted once;
    ``op_ids``: only these operations, the ones a preview showed and the user confirmed).
    ``cancel``: honoured before a vault's intents are recorded (those operations are listed in
    ``kept`` with code ``interrupted``, nothing of them deleted), never after. ``progress``:
    told ``("purge", 0.5)`` right before the first intent (``txn.intent_hook``)."""
    now = time.time()
    cancel = cancel or CancelToken()
    on_intent = txn.intent_hook(progress)
    which = PurgeFilter(now=now, older_than=older_than, run=run, runs=runs, op=op, op_ids=op_ids)
    candidates = [m for m in own_manifests(ctx) if m.get("kind") == "reduce" and which.admits(m)]
    blob_paths = [Vault(m["vault"]).blob_path(f["sha256"]) for m in candidates for f in m["files"]]
    held = {h.path for h in find_writers(blob_paths).holders}
    report = PurgeReport(dry_run=not yes, ops=[], freed_bytes=0)
    with PurgeChoice(ctx, yes) as choice:
        chosen = choice.choose(candidates, lambda m: _backup_size(m, Vault(m["vault"])),
                               check=lambda m: _problem(m, Vault(m["vault"]), held, now, ctx.quiet_period))
        pending = journal_blobs(ctx)
        lost = 0
        by_vault: Dict[str, List[dict]] = {}
        for m in chosen:
            by_vault.setdefault(m["vault"], []).append(m)
        for root, ms in by_vault.items():
            vault = Vault(root)
            plan = _blob_plan(vault, ms, pending)
            if yes:
                t = LocalPurge(ctx, vault, [(m, shas, size) for m, shas, size, _o in plan], now)
                t.on_intent = on_intent
                txn.run(t, cancel)
                if t.stopped is not None:  # before the intents: nothing of these was deleted or recorded
                    choice.kept += [not_purged(m, size, t.stopped, t.stopped.code) for m, _s, size, _o in plan]
                    continue
                freed = t.result
                # a blob kept under the locks (a transaction under way pinned or claimed it) keeps
                # its originals too: only the files whose blob actually went are lost
                stayed = {sha for _f, kept in freed.values() for sha in kept}
                plan = [(m, shas, freed[m["op_id"]][0],
                         originals - (0 if m.get("restored_by") else sum(1 for f in m["files"] if f["sha256"] in stayed)))
                        for m, shas, _size, originals in plan]
                choice.kept += [kept_row(m, vault.blob_size_on_disk(sha), Finding.UNFINISHED,
                                         f"backup {sha[:12]}… was kept: a transaction under way relies on the "
                                         "same bytes (it backed them up since this purge was planned)", sha256=sha)
                                for m, _s, _z, _o in plan for sha in freed[m["op_id"]][1]]
            for m, _shas, size, originals in plan:
                report.freed_bytes += size
                lost += originals
                report.ops.append({"op_id": m["op_id"], "run": m["run"], "bytes": size, "originals": originals,
                                   "finished_at": m.get("finished_at"), "restored": bool(m.get("restored_by"))})
    report.kept = choice.kept
    # retired runs: the same choice (filters, locks, kept rows), a transaction of their own on the
    # driver (``retire_purge``): a cancel seen before its intent stops them too
    retired = purge_retired(ctx, which, yes=yes, cancel=cancel, on_intent=on_intent)
    report.kept += retired.kept + [not_purged(x, x["bytes"], stopped, stopped.code) for x, stopped in retired.stopped]
    r_listed, r_freed = retired.listed, retired.freed
    report.ops += r_listed
    report.freed_bytes += r_freed
    # a retired run's vault copy is its only copy: every file of it goes for good
    lost += sum(x.get("originals", 0) for x in r_listed if not x.get("restored"))
    report.originals_lost = lost
    report.refused = [p.to_dict() for p in vault_problems(ctx)]
    return report


def _blob_plan(vault: Vault, ms: List[dict], pending: set, known: Optional[List[dict]] = None) -> list:
    """Per operation of ``ms`` (all in ``vault``): the blobs purging them deletes, their bytes and
    how many originals go for good, as ``(manifest, shas, size, originals)``. ``known``: what
    ``vault.manifests()`` returned a moment ago (``Vault.referenced_blobs``), else read now."""
    keep = vault.referenced_blobs(exclude_ops=[m["op_id"] for m in ms], manifests=known) | pending
    seen: set = set()
    plan = []
    # every blob this purge deletes from this vault (a blob two operations share is
    # counted, for its bytes, with the first; it is lost for both)
    doomed = {f["sha256"] for m in ms for f in m["files"] if f["sha256"] not in keep}
    for m in ms:
        shas = [f["sha256"] for f in m["files"] if f["sha256"] not in keep and f["sha256"] not in seen]
        seen.update(shas)
        size = sum(vault.blob_size_on_disk(s) for s in shas)  # as stored: a .zst frees its compressed size
        # a run not restored has its originals only in this backup: each of its files
        # whose blob goes (no other kept operation holds it) is lost for good
        originals = originals_lost(m, lambda f: f["sha256"] in doomed)
        plan.append((m, shas, size, originals))
    return plan


def freeable_bytes(ctx: Context, op_ids: Iterable[str], reads: Optional[List[VaultRead]] = None) -> int:
    """What purging these operations' backups would free on disk, counted as purge counts it,
    without purge's checks (no re-hash, no open-file scan): the figure a reduce reports. The
    manifests are read once (``reads``: the command's own read, ``catalogue.read_vaults``), and
    slim when read here: a batch's end counts a thousand runs without holding their verifications."""
    ids = set(op_ids)
    if not ids:
        return 0
    reads = read_vaults(ctx, slim=True) if reads is None else reads
    by_vault: Dict[str, List[dict]] = {}
    for m in own_manifests(ctx, reads):
        if m.get("kind") == "reduce" and not m.get("backup_purged") and m["op_id"] in ids:
            by_vault.setdefault(m["vault"], []).append(m)
    if not by_vault:
        return 0
    pending = journal_blobs(ctx)
    shared = {r.vault.root: r for r in reads}
    total = 0
    for root, ms in by_vault.items():
        r = shared.get(root)
        vault, known = (r.vault, r.manifests) if r else (Vault(root), None)
        total += sum(size for _m, _s, size, _o in _blob_plan(vault, ms, pending, known))
    return total


def _deleted(ctx: Context, vault: Vault, op_ids: List[str], shas: List[str]) -> Dict[str, int]:
    """``Vault.delete_blobs`` with what is needed read afresh under the blobs' locks: the plan
    was made earlier, and a transaction (this logdir's or another sharing the vault) may have
    backed up the same bytes since: pinned, or committed with a manifest naming them."""
    def needed() -> set:
        return vault.referenced_blobs(exclude_ops=op_ids) | journal_blobs(ctx)

    return vault.delete_blobs(shas, needed, after_each=lambda: faults.hit("purge.blob"))


class LocalPurge(txn.Purge):
    """The purge of one vault's chosen operations (its entries, ``plan``: ``(manifest, the blobs
    that go, their bytes)``) for ``engine.txn.run``, the runs' locks held by the caller since it
    chose them; a ``txn.Purge`` (no begin record, backup, stage, transform, verification or last
    look of its own; never rolled back; a cancel honoured before its intents only):

    - the swap record, ``record("swap")``: every operation's intent (its log's ``purge`` record,
      naming the blobs), then ``purge.intent``;
    - **swap**: the blobs deleted (``purge.blob`` after each), what a transaction under way
      pinned or named since the plan kept (``result``);
    - **commit**: the manifests marked purged (``purge.marked`` after each), the remote vault's
      forget, the ``purged`` records and the change log's lines.

    Past its intents a purge is finished, now or by the next start (``finish_purges`` reads the
    intents)."""

    def __init__(self, ctx: Context, vault: Vault, plan: list, now: float) -> None:
        self.ctx, self.vault, self.plan, self.now = ctx, vault, plan, now
        self.intents = 0  # operations whose intent is written
        #: per operation: (bytes freed, digests kept because a transaction under way relies on them)
        self.result: Dict[str, tuple] = {}

    def record(self, step: str) -> None:
        """Every intent, before any blob goes (operations sharing a blob are purged together, so
        none is left claiming it); a full disk stops the purge here, naming the log it could not
        write. Never a rollback record (``journaled`` is False)."""
        vault = self.vault
        for m, shas, _size in self.plan:
            with writing(oplog.log_path(vault.root, m["op_id"]), 80 + 67 * len(shas)):
                oplog.append(vault.root, m["op_id"], {"type": "purge", "run": m["run"], "blobs": shas})
            self.intents += 1

    def swap(self, report: txn.Report) -> None:
        """The blobs deleted: per operation the bytes freed and the digests kept because a
        transaction under way relies on them (such an operation is marked purged all the same:
        the bytes stay, named by that transaction's manifest once it commits, or deleted by its
        rollback)."""
        vault, plan = self.vault, self.plan
        freed = _deleted(self.ctx, vault, [m["op_id"] for m, _s, _z in plan], [sha for _m, shas, _z in plan for sha in shas])
        self.result = {m["op_id"]: (sum(freed.get(sha, 0) for sha in shas),
                                    [sha for sha in shas if not freed.get(sha)
                                     and (vault.local_form(sha) or vault.blob_form(sha) == "packed")])
                       for m, shas, _size in plan}

    def commit(self, report: txn.Report) -> None:
        """The marks, the remote vault's forget, the ``purged`` records and the change log."""
        ctx, vault, plan = self.ctx, self.vault, self.plan
        for m, _shas, _size in plan:
            m["backup_purged"] = True
            m["purged_at"] = self.now
            with writing(oplog.log_path(vault.root, m["op_id"]), len(json.dumps(m)), at=vault.root):
                vault.write_manifest(m)  # on a full disk the next start finishes it from the intent
            faults.hit("purge.marked")
        # the remote vault forgets only what the manifests now say is purged; a kill before the
        # 'purged' records below leaves the intents, which the next start finishes (forget again)
        offload.forget_remote(vault, [sha for _m, shas, _size in plan for sha in shas],
                              lambda: vault.referenced_blobs() | journal_blobs(ctx))
        for m, _shas, _size in plan:
            size = self.result[m["op_id"]][0]
            oplog.append(vault.root, m["op_id"], {"type": "purged", "freed": size})
            _log_purge(ctx, m, size)

    def committed(self) -> bool:
        return self.intents > 0


def finish_purges(ctx: Context, vault: Vault, intents: Dict[str, dict]) -> List[str]:
    """Finish purges killed after their intents were recorded (call holding their runs' locks):
    the blobs they named go (unless an operation not being purged needs them), then the marks."""
    keep = vault.referenced_blobs(exclude_ops=list(intents)) | journal_blobs(ctx)
    details = []
    done = []
    for op_id, intent in intents.items():
        blobs = [sha for sha in intent.get("blobs", []) if sha not in keep]
        got = _deleted(ctx, vault, list(intents), blobs)  # pins and manifests checked again, locked
        freed = sum(got.values())
        try:
            m = vault.read_manifest(op_id)
        except (OSError, ValueError):
            m = None
        if m is not None and not m.get("backup_purged"):
            m["backup_purged"] = True
            m["purged_at"] = intent.get("t", time.time())
            vault.write_manifest(m)
        done.append((op_id, m, freed, blobs))
    offload.forget_remote(vault, [sha for _o, _m, _f, blobs in done for sha in blobs],  # after the marks
                          lambda: vault.referenced_blobs() | journal_blobs(ctx))
    for op_id, m, freed, _blobs in done:
        oplog.append(vault.root, op_id, {"type": "purged", "freed": freed, "finished_on_recovery": True})
        if m is not None:
            _log_purge(ctx, m, freed)
        details.append(f"an interrupted purge of {op_id} was finished ({freed} more byte(s) freed)")
    return details


def _log_purge(ctx: Context, m: dict, freed: int) -> None:
    """A purge is a change too: the change log says which operation's backup went and what it freed."""
    log_purge(ctx, m["op_id"], m["run"], freed, f"backup of {m['op_id']} deleted from {m['vault']}"
              + (" (run restored before)" if m.get("restored_by") else ""))


__all__ = ["LocalPurge", "PurgeReport", "purge_backups", "finish_purges"]
