"""Purge: delete the backups of verified (or restored) reductions — never a byte that exists
nowhere else.

A backup is kept, and reported with a code, when its blob no longer matches its digest
(damaged, or grown by a late writer whose records are not salvaged yet), when a process on
this machine still holds it open for writing, or when late writes were salvaged from it
within the quiet period (its writer may go on). A blob another kept operation or an
unfinished one needs is never deleted.

A purge first records its intent (which blobs) in the operation's log, then deletes the
blobs, then marks the manifest purged; a purge killed at any point is finished by the next
start from that intent, so no blob is ever left belonging to nothing. That order is the one
purge of every store (``engine.purge_run``, issue #26), this store's steps ``DiskBackups``: the
intents are its commit record, so a cancel is honoured up to them (nothing deleted, nothing recorded,
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

import contextlib
import json
import os
import time
from typing import Collection, Dict, Iterable, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Code, Finding
from tb_footprint_plugin.engine import faults, manifest, offload, oplog, purge_run, txn
from tb_footprint_plugin.engine.catalogue import journal_blobs, own_manifests, read_vaults, vault_problems
from tb_footprint_plugin.engine.context import CancelToken, Context, writing
from tb_footprint_plugin.engine.placement import starts_with
from tb_footprint_plugin.engine.purge_choice import PurgeChoice, held_runs
from tb_footprint_plugin.engine.purge_rules import PurgeFilter, kept_row, lost_files, others_of
from tb_footprint_plugin.engine.purge_run import PurgeReport
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome
from tb_footprint_plugin.engine.history import purge_reason
from tb_footprint_plugin.engine.retire_purge import DiskRetired, log_purge
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.engine.vault_reads import VaultRead
from tb_footprint_plugin.storage.files import sha256_file
from tb_footprint_plugin.storage.openfiles import find_writers


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
    ``op_ids``: only these operations, the ones a preview showed and the user confirmed), then
    its retired runs' vault copies by the same filters: the one purge (``purge_run.purge``) over
    ``DiskBackups`` and ``retire_purge.DiskRetired``. ``cancel``: honoured before a vault's
    intents are recorded (those operations are listed in ``kept`` with code ``interrupted``,
    nothing of them deleted), never after. ``progress``: told ``("purge", 0.5)`` right before
    the first intent (``txn.intent_hook``)."""
    now = time.time()
    which = PurgeFilter(now=now, older_than=older_than, run=run, runs=runs, op=op, op_ids=op_ids)
    return purge_run.purge([DiskBackups(ctx, now), DiskRetired(ctx, now)], which, yes=yes, cancel=cancel,
                           progress=progress)


class DiskBackups(purge_run.PurgeLayout):
    """A disk's reductions' backups in the one purge (``purge_run``): chosen under their runs'
    locks (``PurgeChoice``), a backup damaged, grown, open for writing or salvaged within the
    quiet period kept (``_problem``); one transaction per vault, whose blobs operations may share:

    - intent: every operation's ``purge`` record in its log, naming its blobs (operations sharing
      a blob are purged together, so none is left claiming it), then ``purge.intent``;
    - delete: the blobs (``purge.blob`` after each), what a transaction under way pinned or named
      since the plan kept (``Group.done``);
    - settle: the manifests marked purged (``purge.marked`` after each), the remote vault's
      forget, the ``purged`` records and the change log's lines.

    Past its intents a purge is finished, now or by the next start (``finish_purges`` reads the
    intents)."""

    finish_errors = (Exception,)  # a killed purge not finished is retried whole at the next start

    def __init__(self, ctx: Context, now: float, vault: Optional[Vault] = None) -> None:
        """``vault``: the one whose killed purges a start finishes (``finish_purges``)."""
        self.ctx, self.now, self.vault = ctx, now, vault

    @contextlib.contextmanager
    def choose(self, which: PurgeFilter, yes: bool) -> Iterator[purge_run.Chosen]:
        ctx, now = self.ctx, self.now
        candidates = [m for m in own_manifests(ctx) if m.get("kind") == "reduce" and which.admits(m)]
        blob_paths = [Vault(m["vault"]).blob_path(f["sha256"]) for m in candidates for f in m["files"]]
        held = {h.path for h in find_writers(blob_paths).holders}
        with PurgeChoice(ctx, yes) as choice:
            chosen = choice.choose(candidates, lambda m: _backup_size(m, Vault(m["vault"])),
                                   check=lambda m: _problem(m, Vault(m["vault"]), held, now, ctx.quiet_period))
            pending = journal_blobs(ctx)
            groups = []
            for root, ms in _by_vault(chosen).items():
                vault = Vault(root)
                plan = _blob_plan(vault, ms, pending)
                groups.append(purge_run.Group([m for m, *_ in plan], [_row(m, size, o) for m, _s, size, o in plan],
                                              (vault, plan)))
            yield purge_run.Chosen(groups, choice.kept)

    def intent(self, group: purge_run.Group) -> int:
        """Every intent, before any blob goes; a full disk stops the purge here, naming the log it
        could not write."""
        vault, plan = group.plan
        n = 0
        for m, shas, _size, _o in plan:
            with writing(oplog.log_path(vault.root, m["op_id"]), 80 + 67 * len(shas)):
                oplog.append(vault.root, m["op_id"], {"type": "purge", "run": m["run"], "blobs": shas})
            n += 1
        return n

    def delete(self, group: purge_run.Group, report: txn.Report) -> None:
        """The blobs deleted: per operation the bytes freed and the digests kept because a
        transaction under way relies on them (such an operation is marked purged all the same:
        the bytes stay, named by that transaction's manifest once it commits, or deleted by its
        rollback)."""
        vault, plan = group.plan
        freed = _deleted(self.ctx, vault, [m["op_id"] for m, *_ in plan], [sha for _m, shas, *_ in plan for sha in shas])
        group.done = {m["op_id"]: (sum(freed.get(sha, 0) for sha in shas),
                                   [sha for sha in shas if not freed.get(sha)
                                    and (vault.local_form(sha) or vault.blob_form(sha) == "packed")])
                      for m, shas, *_ in plan}

    def settle(self, group: purge_run.Group, report: txn.Report) -> None:
        """The marks, the remote vault's forget, the ``purged`` records and the change log."""
        ctx, (vault, plan) = self.ctx, group.plan
        for m, *_ in plan:
            m["backup_purged"] = True
            m["purged_at"] = self.now
            with writing(oplog.log_path(vault.root, m["op_id"]), len(json.dumps(m)), at=vault.root):
                vault.write_manifest(m)  # on a full disk the next start finishes it from the intent
            faults.hit("purge.marked")
        # the remote vault forgets only what the manifests now say is purged; a kill before the
        # 'purged' records below leaves the intents, which the next start finishes (forget again)
        offload.forget_remote(vault, [sha for _m, shas, *_ in plan for sha in shas],
                              lambda: vault.referenced_blobs() | journal_blobs(ctx))
        for m, *_ in plan:
            size = group.done[m["op_id"]][0]
            oplog.append(vault.root, m["op_id"], {"type": "purged", "freed": size})
            _log_purge(ctx, m, size)

    def outcome(self, group: purge_run.Group) -> Tuple[List[dict], List[dict]]:
        """A blob kept under the locks (a transaction under way pinned or claimed it) keeps its
        originals too: only the files whose blob actually went are lost; each such blob a kept row."""
        vault, plan = group.plan
        freed = group.done
        stayed = {sha for _f, kept in freed.values() for sha in kept}
        rows = [_row(m, freed[m["op_id"]][0], [f for f in lost if f["sha256"] not in stayed])
                for m, _shas, _size, lost in plan]
        kept = [kept_row(m, vault.blob_size_on_disk(sha), Finding.UNFINISHED,
                         f"backup {sha[:12]}… was kept: a transaction under way relies on the "
                         "same bytes (it backed them up since this purge was planned)", sha256=sha)
                for m, *_ in plan for sha in freed[m["op_id"]][1]]
        return rows, kept

    def refused(self) -> List[dict]:
        return [p.to_dict() for p in vault_problems(self.ctx)]

    def killed(self) -> List[purge_run.Killed]:
        """The intents in the vault's operation logs with no end after them."""
        vault = self.vault
        out = []
        with oplog.snapshot(vault.root):  # one look at the log's files for every operation
            for op_id in oplog.logged_ops(vault.root):
                try:
                    intent = oplog.purge_intent(oplog.read_log(vault.root, op_id))
                except OSError:
                    continue  # an unreadable log finishes nothing: its blobs stay (named by status)
                if intent:
                    out.append(purge_run.Killed(op_id, intent.get("run", ""), intent))
        return out

    def holding(self) -> contextlib.AbstractContextManager:
        return held_runs(self.ctx)

    def finish(self, killed: List[purge_run.Killed]) -> List[purge_run.Finished]:
        """The blobs the intents named go (unless an operation not being purged needs them: all
        of ``killed`` are excluded together, as their purge planned them), then the marks, the
        remote vault's forget, the ``purged`` records and the change log's lines."""
        ctx, vault = self.ctx, self.vault
        ids = [k.op_id for k in killed]
        keep = vault.referenced_blobs(exclude_ops=ids) | journal_blobs(ctx)
        done = []
        for k in killed:
            blobs = [sha for sha in k.intent.get("blobs", []) if sha not in keep]
            got = _deleted(ctx, vault, ids, blobs)  # pins and manifests checked again, locked
            try:
                m = vault.read_manifest(k.op_id)
            except (OSError, ValueError):
                m = None
            if m is not None and not m.get("backup_purged"):
                m["backup_purged"] = True
                m["purged_at"] = k.intent.get("t", time.time())
                vault.write_manifest(m)
            done.append((k, m, sum(got.values()), blobs))
        offload.forget_remote(vault, [sha for *_, blobs in done for sha in blobs],  # after the marks
                              lambda: vault.referenced_blobs() | journal_blobs(ctx))
        out = []
        for k, m, freed, _blobs in done:
            oplog.append(vault.root, k.op_id, {"type": "purged", "freed": freed, "finished_on_recovery": True})
            if m is not None:
                _log_purge(ctx, m, freed)
            out.append(purge_run.Finished(k.op_id, k.run, freed, f"an interrupted purge of {k.op_id} was finished "
                                                                 f"({freed} more byte(s) freed)", m=m))
        return out


def _by_vault(ms: List[dict]) -> Dict[str, List[dict]]:
    by: Dict[str, List[dict]] = {}
    for m in ms:
        by.setdefault(m["vault"], []).append(m)
    return by


def _row(m: dict, size: int, lost: List[dict]) -> dict:
    """A reduction's purge row (``docs/json-schema.md``); ``lost``: its file entries whose
    originals go for good."""
    return {"op_id": m["op_id"], "run": m["run"], "bytes": size, "originals": len(lost),
            "finished_at": m.get("finished_at"), "restored": bool(m.get("restored_by")), "others": others_of(lost)}


def _blob_plan(vault: Vault, ms: List[dict], pending: set, known: Optional[List[dict]] = None) -> list:
    """Per operation of ``ms`` (all in ``vault``): the blobs purging them deletes, their bytes and
    the file entries whose originals go for good, as ``(manifest, shas, size, lost)``. ``known``: what
    ``vault.manifests()`` returned a moment ago (``Vault.referenced_blobs``), else read now."""
    keep = vault.referenced_blobs(exclude_ops=[m["op_id"] for m in ms], manifests=known) | pending
    seen: set = set()
    plan = []
    # every blob this purge lets go from this vault (a blob two operations share is counted, for
    # its bytes, with the first; it is lost for both): none named by a kept operation's manifest as
    # read. While every blob is kept (``EveryBlob``: a manifest missing) none is deleted, yet these
    # operations' restores go: their files are counted as lost all the same (``purge_run.KEPT_BY``;
    # review R26 LOW: such a purge said 0 lost though its runs could no longer be restored)
    named = set(keep)  # the digests the manifests read name (an ``EveryBlob`` holds them too)
    doomed = {f["sha256"] for m in ms for f in m["files"] if f["sha256"] not in named}
    for m in ms:
        # each blob once: two entries of one manifest (hard-linked twins, byte-identical files)
        # name one blob, which purge deletes once (review R17 F1, F5)
        shas = list(dict.fromkeys(f["sha256"] for f in m["files"]
                                  if f["sha256"] not in keep and f["sha256"] not in seen))
        seen.update(shas)
        size = sum(vault.blob_size_on_disk(s) for s in shas)  # as stored: a .zst frees its compressed size
        # a run not restored has its originals only in this backup: each of its files
        # whose blob goes (no other kept operation holds it) is lost for good
        plan.append((m, shas, size, lost_files(m, lambda f: f["sha256"] in doomed)))
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


def finish_purges(ctx: Context, vault: Vault) -> List[RecoveryOutcome]:
    """A start's finish of the purges of ``vault`` killed after their intents were recorded
    (``purge_run.finish_killed`` over ``DiskBackups``): the blobs they named go (unless an
    operation not being purged needs them), then the marks, the records and the change log."""
    return purge_run.outcomes(purge_run.finish_killed(DiskBackups(ctx, time.time(), vault)))


def _log_purge(ctx: Context, m: dict, freed: int) -> None:
    """A purge is a change too: the change log says which operation's backup went and what it freed."""
    log_purge(ctx, m["op_id"], m["run"], freed, purge_reason(m, m["vault"]))


__all__ = ["DiskBackups", "PurgeReport", "purge_backups", "finish_purges"]
