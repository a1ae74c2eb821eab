"""Reduce, restore and recover runs of a logdir in object storage, with the store's own machinery.

A bucket has no rename and no fsync, so the transaction is built from what it does have:

* a **per-run lock** object created with a create-only condition (``If-None-Match: *`` on S3,
  ``ifGenerationMatch=0`` on GCS, ``If-None-Match: *`` on Azure): two machines never reduce one
  run at once. It names its owner (host, pid) and a lease, so a crashed owner's lock is taken
  over by recovery from any machine;
* a **journal** object per operation, written before every destructive step and updated only
  with a version precondition (the one that wrote the last record writes the next);
* **backups by server-side copy** into the vault (``<logdir>/.tb-footprint/`` or another
  bucket/prefix), each copy conditional on the version the plan saw, its integrity proven by
  the checksum the store computed for the copy equalling the source's (MD5/ETag, CRC32C, SHA-256):
  no byte of a removed file passes through this machine; the manifest records both;
* **batched deletes** (1,000 keys a request on S3, every page), failed keys retried, then the run
  rolled back from its backups if they still fail;
* **verification by a fresh listing**: every removed key is gone, every other object of the run
  (event files included) still has the version it had, so TensorBoard reads exactly the bytes it
  read before.

Runs that only lose files are reduced in batches under one journal object (``BATCH_RUNS``), each
with its own lock object, operation id, backups and manifest; the batch pays one journal create,
one commit record, one listing before and after its delete step and the batched deletes. Runs
whose plan rewrites or compresses files are one transaction each (``engine.bucket_rewrite``),
in the same journal format, settled by the same ``recover``; ``engine.bucket_reduce`` takes a
batch's runs to one or the other.

This module is the bucket engine's front: the verbs the API calls, each from the module of its
verb (none of which imports this one back):

* ``engine.bucket_state``: the vault, small state objects, the journal, the run lock, listings,
  batched deletes, failure codes (journal + lock);
* ``engine.bucket_steps``: backup, finish (swap), verification and rollback, shared by reduce and
  recovery;
* ``engine.bucket_batch``: reduce (drop-only runs in batches); ``engine.bucket_rewrite``: reduce
  (one rewriting run); ``engine.bucket_reduce``: which runs go where;
* ``engine.bucket_recover``: recovery; ``engine.bucket_restore``: restore;
  ``engine.bucket_purge``: purge and retention; ``engine.bucket_catalogue``: manifests, status,
  history, kept objects, re-check; ``engine.bucket_retire``: retire whole runs and restore them.

Every failure carries a ``codes.py`` code (``bucket_state.failure_code``: the local engine's for
the same failure); reasons are prose without codes.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine.bucket_batch import reduce_batch
from tb_footprint_plugin.engine.bucket_catalogue import history, kept_objects, recheck, status
from tb_footprint_plugin.engine.bucket_manifests import manifests
from tb_footprint_plugin.engine.bucket_purge import purge, retention_report
from tb_footprint_plugin.engine.bucket_recover import recover
from tb_footprint_plugin.engine.bucket_restore import restore_op as restore_reduction
from tb_footprint_plugin.engine.bucket_retire import retire_run, retirements, unretire
from tb_footprint_plugin.engine.bucket_state import (
    JOURNAL,
    LOCKS,
    BucketJournal,
    BucketState,
    BucketTxnError,
    BucketVault,
    failure_code,
    lock_key,
    lock_run,
    owner_gone,
)
from tb_footprint_plugin.engine.context import CancelToken, RunOutcome
from tb_footprint_plugin.engine.manifest import A_RESTORE
from tb_footprint_plugin.storage.store_object import ObjectStore


def restore_op(ostore: ObjectStore, vault: BucketVault, manifest: dict, cancel: Optional[CancelToken] = None,
               progress: Optional[Callable[[str, str, float], None]] = None,
               catalogue: Optional[List[dict]] = None) -> RunOutcome:
    """Restore one operation of the catalogue: a retired run copied back whole
    (``bucket_retire.unretire``), or a reduction's backups put back (``bucket_restore``, which
    honours ``cancel`` before its first put-back). ``catalogue``: the vault's manifests as the
    caller read them (``manifests``, ``manifest`` among them), for the refusals of a reduction's
    restore (``putback.restore_refusal``: a newer reduction, a retired run); read here when not
    given (a listing and a read per manifest). An operation restored here is marked restored in
    ``manifest`` (``restored_by``), so a catalogue holding it says what the store now says to the
    next restore of the same call (a run's reductions after its retirement, older after newer)."""
    if manifest.get("kind") == "retire":
        if progress is not None:  # not stopped once started: a front end stops offering a cancel
            progress(manifest["run"], "restore", 0.5)
        out = unretire(ostore, vault, manifest)
    else:
        out = restore_reduction(ostore, vault, manifest, cancel=cancel, progress=progress,
                                catalogue=manifests(ostore, vault) if catalogue is None else catalogue)
    if out.status == Outcome.RESTORED and not manifest.get("restored_by"):
        manifest["restored_by"] = out.op_id if manifest.get("kind") == "retire" else A_RESTORE
    return out


__all__ = ["JOURNAL", "LOCKS", "BucketJournal", "BucketState", "BucketTxnError", "BucketVault", "failure_code",
           "history", "kept_objects", "lock_key", "lock_run", "manifests", "owner_gone", "purge", "recheck",
           "recover", "reduce_batch", "restore_op", "retention_report", "retire_run", "retirements", "status",
           "unretire"]
