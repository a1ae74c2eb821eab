"""A bucket batch's runs one by one: what each run brings into the batch, and a run taken out.

The batch (``bucket_batch.ObjectBatchReduce``) orders the steps of all its runs; what is said of
one run alone lives here: its journal entry and lock, taken before the transaction (a run gone
since the plan, or whose lock another worker holds, is left out and never journaled), and its
rollback when a step fails for it before the commit record (its originals untouched, its backups
and manifest gone), after which the batch goes on without it.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine.bucket_blobs import missing_blobs
from tb_footprint_plugin.engine.bucket_state import (BucketState, BucketTxnError, BucketVault, failure_code,
                                                     lock_failure_code, lock_refused, lock_run, STORE_FAILURES,
                                                     written_recently)
from tb_footprint_plugin.engine.bucket_steps import file_entry, rollback_entry, rollback_incomplete, rolled_back
from tb_footprint_plugin.engine.context import RunOutcome, new_op_id
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.engine.recovery_rules import MAX_REASON, kept_words
from tb_footprint_plugin.storage.remote import ObjectInfo
from tb_footprint_plugin.storage.store_object import ObjectStore

__all__ = ["batch_entries", "drop_run", "not_to_delete", "rollback_unfinished"]


def batch_entries(st: BucketState, vault: BucketVault, rps: List, listing: Dict[str, ObjectInfo], batch_id: str,
                  outs: Dict[str, RunOutcome], held: Dict[str, RunLease]) -> List[dict]:
    """The journal entries of the runs of ``rps`` that go into batch ``batch_id``: each run's
    outcome set in ``outs`` (skipped until it goes on), its files as ``listing`` has them, its lock
    taken into ``held``. A run with a file gone since the plan, or whose lock is refused, is left
    out, its outcome saying why; filled in place, so a caller that stops midway releases the locks
    taken so far."""
    entries: List[dict] = []
    for rp in rps:
        out = RunOutcome(run=rp.run, status=Outcome.SKIPPED, bytes_before=rp.bytes_before,
                         bytes_after=rp.bytes_before)
        outs[rp.run] = out
        files = []
        missing = None
        op_id = new_op_id()
        for a in rp.actions:
            if a.kind != "delete":
                continue
            o = listing.get(a.path)
            if o is None:
                missing = a.path
                break
            files.append(file_entry(vault, op_id, a, o))
        if missing:
            out.reason, out.code = f"{missing}: gone since the plan", Skip.NOT_IN_PLAN
            continue
        try:
            held[rp.run] = lock_run(st, rp.run, batch_id)
        except BucketTxnError as e:
            lock_refused(out, e)
            continue
        except STORE_FAILURES as e:
            out.status, out.reason, out.code = Outcome.FAILED, str(e), lock_failure_code(e)
            continue
        out.op_id = op_id
        # its size before, for recovery to report of a run it rolls back before its manifest exists
        entries.append({"run": rp.run, "op": op_id, "lock": held[rp.run].path, "files": files,
                        "bytes_before": rp.bytes_before})
    return entries


def not_to_delete(vault: BucketVault, en: dict, now_objs: Dict[str, ObjectInfo], quiet_period: float,
                  closed_files: Optional[Mapping[str, float]], reread: bool) -> Optional[BucketTxnError]:
    """Why run entry ``en`` must not lose its files now, by the listing ``now_objs`` taken right
    before the commit record, or None: an object rewritten since its backup was made (its new
    bytes have no backup), a file written within the quiet period, a blob of its backups gone
    (``missing_blobs``; ``reread``: read the blob folder's index again first)."""
    changed = next((f["path"] for f in en["files"] if f["path"] not in now_objs
                    or now_objs[f["path"]].version_token != f["version"]), None)
    if changed:
        return BucketTxnError(Failure.CHANGED_SINCE_BACKUP, f"{changed}: changed since its backup; run left as it was")
    active = written_recently(now_objs, en["run"], quiet_period, closed_files)
    if active:
        return BucketTxnError(Skip.ACTIVE, active)
    try:  # its blobs still there: the delete removes what only they hold
        missing_blobs(vault, en["files"], reread=reread)
    except BucketTxnError as e:
        return e
    return None


def drop_run(ostore: ObjectStore, vault: BucketVault, en: dict, out: RunOutcome, e: BaseException) -> List[str]:
    """Take one run out of a batch before its destructive step: its originals untouched, its backups
    and manifest gone (kept where one is not in place: their keys returned, ``rollback_entry``)."""
    code, kept = failure_code(e), []
    out.reason = str(e)
    try:
        kept = rollback_entry(ostore, vault, en, deleted=False, code=code, out=out)
        rolled_back(out, code)
        out.reason += f"; {kept_words(kept)}" if kept else ""
    except (BucketTxnError, *STORE_FAILURES, OSError) as e2:
        rollback_incomplete(out, e2)
    en["dropped"] = True
    # what its change-log line says, for a recovery that finds it taken out and its line not written
    en["rolled_back"] = {"code": str(code), "reason": str(e)[:MAX_REASON], "before": out.bytes_before}
    return kept


def rollback_unfinished(entries: List[dict], outs: Dict[str, RunOutcome]) -> bool:
    """Whether a run of the batch was left with its rollback unfinished (its manifest or backups
    may still be there): then the journal naming it, and the batch's locks, must stay."""
    return any(outs[en["run"]].code == Failure.ROLLBACK_INCOMPLETE for en in entries)
