"""What every start does before anything else (CLI verbs that change something, the API, the
TensorBoard plugin at load, and ``tb-footprint recover``):

0. rebuild a damaged identity.json from the ids the logdir's own manifests carry (the damaged
   file is set aside, never deleted);
1. settle unfinished operations from their journals (roll back, or finish a recorded swap);
2. rebuild manifests that are missing or corrupt from the vault's operation log;
3. finish purges that were killed after recording their intent (no blob leaks);
4. remove scratch directories of processes that are gone, and restore temp files;
   finish compactions of backups into compressed blobs that were killed midway;
5. salvage records written into backups after their reduction (late writers).

Each step reports what it did as a ``RecoveryOutcome`` with a code; nothing is dropped
silently, and a step that cannot be done now is retried at the next start.
"""
from __future__ import annotations

import os
from typing import List

from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import oplog, salvage, trust
from tb_footprint_plugin.engine.journal import RunLock, RunLocked, pending_journals
from tb_footprint_plugin.engine.context import Context, new_op_id, reason_of
from tb_footprint_plugin.engine.recovery import RecoveryOutcome, recover
from tb_footprint_plugin.engine.vault import COMPRESSED, KEPT_BUSY, KEPT_OPEN, Vault
from tb_footprint_plugin.storage import scratch


def has_state(ctx: Context, vault_roots: List[str]) -> bool:
    """False for a logdir the tool never wrote to: a start then writes nothing either."""
    return any(os.path.isdir(r) for r in [ctx.state, *vault_roots])


def recover_all(ctx: Context, vault_roots: List[str], manifests_of) -> List[RecoveryOutcome]:
    """Run every start-up step; ``manifests_of(ctx)`` lists this logdir's manifests."""
    if not has_state(ctx, vault_roots):
        return []
    outcomes: List[RecoveryOutcome] = _repair_identity(ctx, vault_roots)
    if any(True for _ in pending_journals(ctx.journal_dir)):
        outcomes += recover(ctx)
    for root in vault_roots:
        if not os.path.isdir(root):
            continue
        vault = Vault(root)
        try:
            for f in oplog.rebuild_manifests(vault):
                rebuilt = f.code == oplog.MANIFEST_REBUILT
                outcomes.append(RecoveryOutcome(f.op_id or "", "", Recovery.REBUILT if rebuilt else Recovery.FAILED,
                                                f.detail, Finding.MANIFEST_REBUILT if rebuilt else Finding.MANIFEST_LOST))
        except OSError as e:
            outcomes.append(RecoveryOutcome("", "", Recovery.FAILED,
                                            f"cannot rebuild manifests in {root}: {reason_of(e)}",
                                            Finding.RECOVERY_FAILED))
        outcomes += _finish_purges(ctx, vault)
        outcomes += _finish_compactions(ctx, vault)
        swept = scratch.sweep(vault.tmp)
        if swept:
            outcomes.append(RecoveryOutcome("", "", Recovery.SWEPT, f"{len(swept)} scratch folder(s) of ended "
                                            f"processes removed from {vault.tmp}", Finding.SCRATCH_SWEPT))
    outcomes += _salvage(ctx, manifests_of(ctx))
    return outcomes


def _repair_identity(ctx: Context, vault_roots: List[str]) -> List[RecoveryOutcome]:
    """A damaged identity.json rebuilt (``trust.repair_identity``), or why not: never a silence."""
    try:
        done = trust.repair_identity(ctx.logdir, ctx.state, vault_roots)
    except trust.Untrusted as e:
        return [RecoveryOutcome("", "", Recovery.FAILED, str(e), Finding.IDENTITY_DAMAGED)]
    except OSError as e:
        return [RecoveryOutcome("", "", Recovery.FAILED, f"cannot rebuild {trust.identity_path(ctx.state)}: "
                                f"{reason_of(e)}", Finding.IDENTITY_DAMAGED)]
    if done is None:
        return []
    whose = ("the id this logdir's own manifests carry" if done["id_from"] == "manifests"
             else "a new id (no manifest carries one)")
    return [RecoveryOutcome("", "", Recovery.REBUILT, f"{trust.identity_path(ctx.state)} was damaged: set aside as "
                            f"{done['aside']} and rebuilt with {whose}", Finding.IDENTITY_REBUILT)]


def _finish_purges(ctx: Context, vault: Vault) -> List[RecoveryOutcome]:
    from tb_footprint_plugin.engine.purge import finish_purges

    intents = {}
    for op_id in oplog.logged_ops(vault.root):
        try:
            intent = oplog.purge_intent(oplog.read_log(vault.root, op_id))
        except OSError:
            continue  # an unreadable log finishes nothing: its blobs stay (named by status)
        if intent:
            intents[op_id] = intent
    if not intents:
        return []
    out, locks = [], []
    try:
        for op_id, intent in list(intents.items()):
            try:
                locks.append(RunLock(ctx.lock_dir, intent.get("run", "")).acquire())
            except RunLocked:
                del intents[op_id]  # its blobs stay until its run is free
                out.append(RecoveryOutcome(op_id, intent.get("run", ""), Recovery.SKIPPED_LIVE,
                                           "held by a running process", Finding.RUN_LOCKED))
        details = finish_purges(ctx, vault, intents)
        out += [RecoveryOutcome(op_id, intents[op_id].get("run", ""), Recovery.COMPLETED, d, Finding.PURGE_FINISHED)
                for op_id, d in zip(intents, details)]
    except Exception as e:  # retried at the next start
        out.append(RecoveryOutcome("", "", Recovery.FAILED, f"interrupted purge not finished: {reason_of(e)}",
                                   Finding.RECOVERY_FAILED))
    finally:
        for lock in locks:
            lock.release()
    return out


def _finish_compactions(ctx: Context, vault: Vault) -> List[RecoveryOutcome]:
    """Compactions killed midway, done again (``Vault.compact_all``) under their run's lock, so a
    restore or purge of that run never races one: until then each backup is still there plain,
    or as its verified ``.zst``, or both."""
    out = []
    for op_id, shas in vault.pending_compactions().items():
        try:
            run = vault.read_manifest(op_id).get("run")
        except Exception:  # no manifest (yet): rebuilt above or reported; the blobs stay as they are
            run = None
        if not isinstance(run, str) or not run:
            # never compacted without its run's lock (a purge of that run could race it and
            # leave a .zst no manifest names): the note waits for a manifest to name the run
            continue
        try:
            with RunLock(ctx.lock_dir, run):
                what = vault.compact_all(op_id, shas)
        except RunLocked:
            out.append(RecoveryOutcome(op_id, run or "", Recovery.SKIPPED_LIVE, "compaction of its backups waits: "
                                       "the run is being changed by another process", Finding.RUN_LOCKED))
            continue
        except Exception as e:  # retried at the next start; every blob is still whole in one form
            out.append(RecoveryOutcome(op_id, run or "", Recovery.FAILED, f"interrupted compaction in {vault.root} "
                                       f"not finished: {reason_of(e)}", Finding.RECOVERY_FAILED))
            continue
        waiting = sum(1 for v in what.values() if v in (KEPT_OPEN, KEPT_BUSY))
        if waiting:
            out.append(RecoveryOutcome(op_id, run, Recovery.SKIPPED_LIVE, f"compaction of {waiting} of {op_id}'s "
                                       "backups waits: a process may still write into them, or another process is "
                                       "compacting them (kept plain; tried again at the next start)",
                                       Finding.BACKUP_OPEN_FOR_WRITING))
            continue
        out.append(RecoveryOutcome(op_id, run or "", Recovery.COMPLETED,
                                   f"an interrupted compaction of {op_id}'s backups was finished "
                                   f"({sum(1 for v in what.values() if v == COMPRESSED)} of {len(what)} compressed)",
                                   Finding.COMPACTION_FINISHED))
    return out


def _salvage(ctx: Context, manifests: List[dict]) -> List[RecoveryOutcome]:
    out = []
    for m, f, _size in salvage.grown_backups(manifests):
        try:
            with RunLock(ctx.lock_dir, m["run"]):
                s = salvage.salvage_one(ctx, m, f, new_op_id)
            action = Recovery.SALVAGED if s.code == salvage.SALVAGED else Recovery.KEPT
            out.append(RecoveryOutcome(m["op_id"], m["run"], action, s.detail, Finding(s.code)))
        except RunLocked:
            out.append(RecoveryOutcome(m["op_id"], m["run"], Recovery.SKIPPED_LIVE,
                                       "late writes found; the run is being changed by another process, "
                                       "salvaged at the next start", Finding.LATE_WRITES_PENDING))
        except Exception as e:  # the grown backup stays as it is; retried at the next start
            out.append(RecoveryOutcome(m["op_id"], m["run"], Recovery.FAILED,
                                       f"late writes to {f['path']} not salvaged yet: {reason_of(e)}",
                                       Finding.RECOVERY_FAILED))
    return out


__all__ = ["recover_all", "has_state"]
