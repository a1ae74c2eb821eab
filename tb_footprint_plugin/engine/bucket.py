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
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import Code, Failure, Finding, Outcome, Recovery, Skip, StoreError
from tb_footprint_plugin.engine import bucket_lease, faults, lease, trust
from tb_footprint_plugin.engine.context import RunOutcome, TransactionError, is_no_space, new_op_id
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.salvage import SALVAGE_SUFFIX
from tb_footprint_plugin.engine.vault import who
from tb_footprint_plugin.plan.cost import LIST_PAGE_KEYS
from tb_footprint_plugin.plan.planner import active_reason
from tb_footprint_plugin.scan.tfrecord import RecordReader
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.remote import (
    ALREADY_EXISTS,
    PRECONDITION_FAILED,
    ObjectInfo,
    RemoteError,
    RemoteFS,
    content_checksums,
    same_content,
)

JOURNAL = f"{STATE_DIR_NAME}/journal"
LOCKS = f"{STATE_DIR_NAME}/locks"


class BucketTxnError(RuntimeError):
    """A step of a bucket transaction failed; ``code`` (a ``codes.py`` member) says which kind of
    failure, the message says what happened in prose (never a code)."""

    def __init__(self, code: Code, message: str):
        super().__init__(message)
        self.code = code


def failure_code(e: BaseException) -> Code:
    """The ``codes.py`` code of a failed bucket step, the local engine's for the same failure: a
    ``BucketTxnError``'s own; ``Failure.NO_SPACE`` for a full disk (local staging) or a store out
    of space or quota; ``Failure.STORE_ERROR`` for any other failed store request;
    ``Failure.REFUSED`` for a key that is not a plain key of the store (``ValueError``);
    ``Failure.ERROR`` for a failed step of ours (a verification, the transform)."""
    if isinstance(e, BucketTxnError):
        return e.code
    if isinstance(e, TransactionError):
        return e.code or Failure.ERROR
    if getattr(e, "code", None) == StoreError.NO_SPACE or (isinstance(e, OSError) and is_no_space(e)):
        return Failure.NO_SPACE
    if isinstance(e, RemoteError):
        return Failure.STORE_ERROR
    if isinstance(e, ValueError):
        return Failure.REFUSED
    return Failure.ERROR


def lock_failure_code(e: BaseException) -> Code:
    """The code of a lock that could not be taken for another reason than its holder: as on a
    disk, ``Failure.LOCK_ERROR``, or ``Failure.NO_SPACE`` when the store is out of space or quota."""
    return Failure.NO_SPACE if failure_code(e) == Failure.NO_SPACE else Failure.LOCK_ERROR


def written_recently(objs: Dict[str, ObjectInfo], run: str, quiet_period: float) -> Optional[str]:
    """Why ``run`` is still being written (``plan.planner.active_reason``, the one rule of every
    store), judged by the newest object of the run in a listing; None when it is quiet."""
    pre = run_prefix(run)
    newest = max((o.mtime for k, o in objs.items() if k.startswith(pre)), default=0.0)
    active = active_reason(newest, quiet_period, now_s())
    return f"run {run!r} is {active}" if active else None


@dataclass
class BucketVault:
    """Where backups of a bucket logdir go: ``<logdir>/.tb-footprint`` or another bucket/prefix."""

    rfs: RemoteFS  # the logdir
    root: str  # store path (bucket/prefix) of the vault

    @classmethod
    def for_logdir(cls, rfs: RemoteFS, backup_dir: Optional[str] = None) -> "BucketVault":
        if backup_dir:
            other = RemoteFS(backup_dir, stats=rfs.stats)
            if other.protocol != rfs.protocol:
                raise ValueError(f"backup dir {backup_dir} must be on the same store as {rfs.url} "
                                 "(backups are server-side copies)")
            root = other.root
            if rfs.root == root or rfs.root.startswith(root + "/"):
                raise ValueError(f"backup dir {backup_dir} contains the logdir; choose a separate prefix")
            return cls(rfs=rfs, root=root)
        return cls(rfs=rfs, root=rfs.path(STATE_DIR_NAME))

    def blob(self, op_id: str, rel: str) -> str:
        return f"{self.root}/blobs/{op_id}/{rel}"

    def manifest(self, op_id: str) -> str:
        return f"{self.root}/manifests/{op_id}.json"


def run_prefix(run: str) -> str:
    """The key prefix of a run's objects (``""`` for the logdir's own files)."""
    return "" if run == "." else run.rstrip("/") + "/"


def _lock_key(run: str) -> str:
    return f"{LOCKS}/{hashlib.sha256(run.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.json"


def now_s() -> float:
    """Wall-clock seconds, as journals, manifests and locks record them."""
    return time.time()


class BucketState:
    """Small JSON state objects (journal, lock, manifest) with conditional writes."""

    def __init__(self, rfs: RemoteFS):
        self.rfs = rfs
        self.ops = rfs.ops

    def create(self, path: str, doc: dict) -> str:
        return self.ops.put(path, json.dumps(doc, sort_keys=True).encode(), if_absent=True)

    def update(self, path: str, doc: dict, version: str) -> str:
        return self.ops.put(path, json.dumps(doc, sort_keys=True).encode(), if_version=version)

    def read(self, path: str, info: Optional[ObjectInfo] = None) -> Tuple[Optional[dict], Optional[str]]:
        """The JSON object at ``path`` and its version token; ``info`` from a listing spares the
        metadata read (a write conditional on that version fails if it is stale anyway)."""
        info = info or self.ops.head(path)
        if info is None:
            return None, None
        try:
            data = self.rfs.fs.cat_file(path)
            self.rfs.stats.add("read", down=len(data))
            doc = json.loads(data.decode("utf-8"))
        except FileNotFoundError:
            return None, None
        except ValueError:
            return {"corrupt": True}, info.version_token
        return (doc if isinstance(doc, dict) else {"corrupt": True}), info.version_token


class BucketJournal:
    """One operation's journal object: every record rewrites it under the previous version."""

    def __init__(self, st: BucketState, op_id: str, doc: dict):
        self.st = st
        self.path = st.rfs.path(f"{JOURNAL}/{op_id}.json")
        self.doc = doc
        self.version = st.create(self.path, doc)

    def step(self, name: str, **extra) -> None:
        self.doc["step"] = name
        self.doc.setdefault("steps", []).append([name, now_s()])
        self.doc.update(extra)
        self.version = self.st.update(self.path, self.doc, self.version)

    def remove(self) -> None:
        self.st.ops.delete([self.path])


def lock_run(st: BucketState, run: str, op_id: str) -> Tuple[str, str]:
    """Take the run's lock; raises BucketTxnError('locked') naming the holder."""
    path = st.rfs.path(_lock_key(run))
    doc = bucket_lease.new_lock_doc(run, op_id)
    try:
        return path, _held_lock(st, path, doc, st.create(path, doc))
    except RemoteError as e:
        if e.code != ALREADY_EXISTS:
            raise
    held, version = st.read(path)
    if held is not None and _owner_gone(held, st) and version and \
            st.ops.head(st.rfs.path(f"{JOURNAL}/{held.get('op')}.json")) is None:
        # a lock whose owner is gone and left no journal guards nothing: take it over (the delete
        # is conditional on the lock's version, so of two takers only one wins)
        if not st.ops.delete([path], versions={path: version}):
            try:
                return path, _held_lock(st, path, doc, st.create(path, doc))
            except RemoteError as e:
                if e.code != ALREADY_EXISTS:
                    raise
            held, _ = st.read(path)
    who = f"{held.get('host')} pid {held.get('pid')} (operation {held.get('op')})" if held else "another process"
    raise BucketTxnError(Skip.LOCKED, f"run {run} is being changed by {who}; left alone")


def _held_lock(st: BucketState, path: str, doc: dict, version: str) -> str:
    """Renew the lock just taken while this process holds it (``engine.bucket_lease``)."""
    bucket_lease.hold(path, doc, version, lambda d, v: st.update(path, d, v))
    return version


def unlock_versions(lock_path: str) -> Optional[Dict[str, str]]:
    """Stop renewing the lock; the version to delete it at, None if it is not ours any more."""
    v = bucket_lease.release(lock_path)
    return None if v is None else {lock_path: v}


def _unlock_all(lock_paths: List[str]) -> Tuple[List[str], Dict[str, str]]:
    """Stop renewing these locks; the ones still ours and the versions to delete them at (a lock
    another worker took over is never deleted as ours)."""
    versions: Dict[str, str] = {}
    for p in lock_paths:
        versions.update(unlock_versions(p) or {})
    return list(versions), versions


def commit_recorded(doc: dict) -> bool:
    """Whether an operation's journal recorded its commit step (from then on it may have deleted
    or replaced originals)."""
    steps = doc.get("steps") if isinstance(doc.get("steps"), list) else []
    return doc.get("step") in COMMITTED_STEPS or \
        any(isinstance(s, list) and s and s[0] in COMMITTED_STEPS for s in steps)


#: operations this process is running right now (a lock of this pid naming another op is stale)
ACTIVE_OPS: set = set()


def _owner_gone(lock: dict, st: Optional[BucketState] = None) -> bool:
    """Whether a lock's holder is gone: the lease rules of ``engine.bucket_lease``, the journal
    progress read from the bucket (``st``) when the lease of another host expired."""
    def journal_mtime(op: str) -> Optional[float]:
        info = st.ops.head(st.rfs.path(f"{JOURNAL}/{op}.json")) if st is not None else None
        return info.mtime if info is not None else None

    return bucket_lease.holder_gone(lock, journal_mtime, ACTIVE_OPS)


#: Drop-only runs are reduced together, ``BATCH_RUNS`` to one journal object: a batch pays one
#: journal create, one commit record and one final delete, and one listing of the logdir before and
#: after its delete step, instead of all of them per run. Bounded so a batch ends well inside the
#: lock lease (``engine.lease``; the locks are renewed meanwhile), whatever the store's latency. ``LIST_PAGE_KEYS``: where a batch's
#: rechecks list the whole logdir in pages instead of each run's prefix. (Both live with the cost
#: model, which estimates from them.)

#: The steps from which a journal is rolled forward: every backup verified and (for rewrites)
#: every new object staged and checked; ``deleting`` is the name older journals used.
COMMITTED_STEPS = ("swapping", "deleting", "done")


def file_entry(vault: BucketVault, op_id: str, a, o: ObjectInfo) -> dict:
    """A journal/manifest entry of one planned file: its action, size, version, checksums and backup key."""
    return {"path": a.path, "action": a.kind, "size": o.size, "version": o.version_token,
            "checksums": content_checksums(o), "backup": vault.blob(op_id, a.path)}


def backup_object(rfs: RemoteFS, f: dict) -> None:
    """Back up one original by a server-side copy conditional on the version the plan saw; its
    integrity is the store's checksum of the copy equal to the original's. An original changed
    or gone since the plan (e.g. another worker reduced the run) is ``Skip.NOT_IN_PLAN``."""
    try:
        res = rfs.ops.copy(rfs.path(f["path"]), f["backup"], if_source_version=f["version"], size=f["size"])
    except RemoteError as e:
        if e.code in (PRECONDITION_FAILED, "not_found"):
            raise BucketTxnError(Skip.NOT_IN_PLAN, f"{f['path']}: changed or gone since the plan") from e
        raise
    if not _copy_matches(rfs, res, f, rfs.path(f["path"]), f["backup"]):
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: backup copy does not match the original")
    f["backup_checksums"] = res.checksums
    f["backup_version"] = res.version


def _copy_matches(rfs: RemoteFS, res, f: dict, src: str, dst: str) -> bool:
    """A server-side copy of an original (a backup, or a backup put back) holds the original's
    bytes: by the store's checksum of the copy against the original's when they share a kind;
    otherwise (a copy made in parts, a blob without an MD5) by reading both."""
    ok = same_content(res.checksums, f["checksums"])
    if ok is None:
        ok = _stream_digest(rfs, src, f["size"]) == _stream_digest(rfs, dst, f["size"])
    return ok


def manifest_doc(rfs: RemoteFS, entry: dict, rp, policy: Optional[str], bytes_after: int) -> dict:
    """The manifest of one verified run of an operation (what a restore puts back)."""
    return {"op": entry["op"], "run": entry["run"], "logdir": rfs.url, "created": now_s(), "status": "verified",
            "files": entry["files"], "bytes_before": rp.bytes_before, "bytes_after": bytes_after,
            "policy": policy, "shard": lease.shard_label(), **who()}


def listing_of_runs(rfs: RemoteFS, vault: BucketVault, runs: List[str], logdir_objects: int) -> Dict[str, ObjectInfo]:
    """The current objects of ``runs``: one listing of the whole logdir when that takes fewer
    pages than one listing per run prefix, else one listing per run."""
    if "." in runs or math.ceil(max(1, logdir_objects) / LIST_PAGE_KEYS) <= len(runs):
        return _run_listing(rfs, vault, ".")
    out: Dict[str, ObjectInfo] = {}
    for run in runs:
        out.update(_run_listing(rfs, vault, run))
    return out


def reduce_batch(rfs: RemoteFS, vault: BucketVault, rps: List, listing: Dict[str, ObjectInfo],
                  quiet_period: float, policy: Optional[str], settled_early=None) -> List[RunOutcome]:
    """Drop-only runs under one journal object. Each run has its own lock object (two machines
    never reduce one run at once), its own operation id, backups and manifest (restorable on its
    own); the journal records the batch's steps, so a crash is settled from any machine.
    ``settled_early(outcome)`` hears of each run left out before the journal is written (gone
    since the plan, locked by another worker) as soon as that is known."""
    t0 = time.monotonic()
    st = BucketState(rfs)
    batch_id = new_op_id()
    outs: Dict[str, RunOutcome] = {}
    entries: List[dict] = []
    plans = {rp.run: rp for rp in rps}
    ACTIVE_OPS.add(batch_id)
    journal = None
    try:
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
                lock_path, _ = lock_run(st, rp.run, batch_id)
            except BucketTxnError as e:
                out.reason, out.code = str(e), Skip.LOCKED
                continue
            except RemoteError as e:
                out.status, out.reason, out.code = Outcome.FAILED, str(e), lock_failure_code(e)
                continue
            out.op_id = op_id
            entries.append({"run": rp.run, "op": op_id, "lock": lock_path, "files": files})
        if settled_early:
            taken = {en["run"] for en in entries}
            for run, o in outs.items():
                if run not in taken:
                    settled_early(o)
        if not entries:
            return list(outs.values())
        try:
            journal = BucketJournal(st, batch_id, {"op": batch_id, "logdir": rfs.url, "step": "planned", "created": now_s(),
                                              "vault": vault.root, "runs": entries,
                                              "logdir_objects": len(listing)})
        except RemoteError as e:
            ours, versions = _unlock_all([en["lock"] for en in entries])
            must_delete(rfs, ours, versions=versions)
            for en in entries:
                o = outs[en["run"]]
                o.status, o.reason, o.code = Outcome.FAILED, str(e), failure_code(e)
            return list(outs.values())
        faults.hit("bucket.after_journal")
        # Backups: server-side copies, each conditional on the plan's version. A run whose copy
        # fails is rolled back alone; the others go on.
        live: List[dict] = []
        for en in entries:
            rp = plans[en["run"]]
            try:
                for f in en["files"]:
                    backup_object(rfs, f)
                    faults.hit("bucket.after_backup_copy")
                bytes_after = rp.bytes_before - sum(f["size"] for f in en["files"])
                st.create(vault.manifest(en["op"]), manifest_doc(rfs, en, rp, policy, bytes_after))
                live.append(en)
            except faults.InjectedFault:
                raise
            except (BucketTxnError, RemoteError) as e:
                _drop_run(rfs, vault, en, outs[en["run"]], e)
        faults.hit("bucket.after_backup")
        # Last look before the destructive step: an object rewritten since its backup was made
        # must not be deleted (its new bytes have no backup). Each delete also carries the
        # version as a condition where the store takes one.
        faults.hit("bucket.before_recheck")
        if live:
            try:
                now_objs = listing_of_runs(rfs, vault, [en["run"] for en in live], len(listing))
            except RemoteError as e:
                for en in live:
                    _drop_run(rfs, vault, en, outs[en["run"]], e)
                live, now_objs = [], {}
            keep = []
            for en in live:
                changed = next((f["path"] for f in en["files"] if f["path"] not in now_objs
                                or now_objs[f["path"]].version_token != f["version"]), None)
                active = None if changed else written_recently(now_objs, en["run"], quiet_period)
                if changed:
                    _drop_run(rfs, vault, en, outs[en["run"]], BucketTxnError(
                        Failure.CHANGED_SINCE_BACKUP, f"{changed}: changed since its backup; run left as it was"))
                elif active:
                    _drop_run(rfs, vault, en, outs[en["run"]], BucketTxnError(Skip.ACTIVE, active))
                else:
                    keep.append(en)
            live = keep
        keep = []
        for en in live:  # a run whose lock another worker took over stops before its delete step
            if bucket_lease.still_held(en["lock"]):
                keep.append(en)
            else:
                _drop_run(rfs, vault, en, outs[en["run"]], BucketTxnError(
                    Skip.LOCKED, f"run {en['run']}: its lock was taken over; left as it was"))
        live = keep
        if not live:
            ours, versions = _unlock_all([en["lock"] for en in entries])
            rfs.ops.delete([journal.path] + ours, versions=versions)
            return list(outs.values())
        try:
            # the destructive step is preceded by its record: every backup of these runs verified
            journal.step("swapping")
            faults.hit("bucket.before_delete")
            finish_op(rfs, vault, journal.doc, present=now_objs)
        except (BucketTxnError, RemoteError) as e:
            _rollback_batch(rfs, vault, journal, live, outs, e)
            ours, versions = _unlock_all([en["lock"] for en in entries if en not in live])
            rfs.ops.delete(ours, versions=versions)
            return list(outs.values())
        faults.hit("bucket.after_delete")
        try:
            verification = verify_batch(rfs, vault, live, listing)
        except RemoteError as e:  # past the commit point: the reduction stands, unverified
            verification = {en["run"]: {"ok": False, "error": f"reduced, but the checking listing failed ({e}); "
                                        "run `verify` to check it"} for en in live}
        for en in live:
            o = outs[en["run"]]
            bad = verification.get(en["run"], {}).get("error")
            o.verification = verification.get(en["run"])
            o.removed_files = [f["path"] for f in en["files"]]
            o.status = Outcome.VERIFIED if not bad else Outcome.FAILED
            if bad:
                o.reason, o.code = bad, Failure.ERROR
            o.bytes_after = o.bytes_before - sum(f["size"] for f in en["files"])
        # done: the journal and every lock in one batched delete (journal first: a crash between
        # the two leaves only stale locks, which recovery drops). A run taken out whose cleanup
        # failed keeps the journal: the next start finishes that cleanup.
        if not any(outs[en["run"]].code == Failure.ROLLBACK_INCOMPLETE for en in entries):
            ours, versions = _unlock_all([en["lock"] for en in entries])
            rfs.ops.delete([journal.path] + ours, versions=versions)
        else:
            journal.step("done")
        return list(outs.values())
    except faults.InjectedFault:
        raise
    finally:
        ACTIVE_OPS.discard(batch_id)
        for en in entries:  # no lock of an ended batch is renewed (those kept are stale now)
            bucket_lease.release(en["lock"])
        dt = (time.monotonic() - t0) / max(1, len(rps))
        for o in outs.values():
            o.duration_s = dt


def _drop_run(rfs: RemoteFS, vault: BucketVault, en: dict, out: RunOutcome, e: Exception) -> None:
    """Take one run out of a batch before its destructive step: its originals are untouched,
    its backups and manifest go. The batch journal still names the run: a crash from here on
    makes recovery roll it back too, which finds nothing left to undo."""
    code = failure_code(e)
    out.reason = str(e)
    try:
        rollback_entry(rfs, vault, en, deleted=False)
        rolled_back(out, code)
    except (BucketTxnError, RemoteError, OSError) as e2:
        rollback_incomplete(out, e2)
    en["dropped"] = True


def rolled_back(out: RunOutcome, code: Code) -> None:
    """A run put back as it was, with the code of why: a skip (``Skip``: gone since the plan, being
    written, locked by another worker) as on a disk; a rollback otherwise."""
    out.status = Outcome.SKIPPED if isinstance(code, Skip) else Outcome.ROLLED_BACK
    out.code = code


def rollback_incomplete(out: RunOutcome, e: Exception) -> None:
    """A rollback that did not finish: the journal stays, and the next start settles it."""
    out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
    out.reason += f"; rollback incomplete ({e}); the journal is kept and the next start settles it"


def _rollback_batch(rfs: RemoteFS, vault: BucketVault, journal: "BucketJournal", live: List[dict],
                    outs: Dict[str, RunOutcome], e: Exception) -> None:
    """The destructive step failed: recorded first (a recovery that finds this journal must
    finish the rollback, not roll forward), then every run put back from its backups."""
    code = failure_code(e)
    try:
        journal.step("rolling_back")
    except RemoteError:
        pass
    incomplete = None
    for en in live:
        o = outs[en["run"]]
        o.reason = str(e)
        try:
            rollback_entry(rfs, vault, en)
            o.status, o.code = Outcome.ROLLED_BACK, code
        except (BucketTxnError, RemoteError, OSError) as e2:
            incomplete = e2
            o.status, o.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
            o.reason += f"; rollback incomplete ({e2}); the journal is kept and the next start settles it"
    if incomplete is None:
        try:
            ours, versions = _unlock_all([en["lock"] for en in live])
            must_delete(rfs, [journal.path] + ours, versions=versions)
        except BucketTxnError as e3:
            for en in live:
                o = outs[en["run"]]
                o.status, o.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
                o.reason += f"; cleanup incomplete ({e3}); the next start settles it"


def finish_op(rfs: RemoteFS, vault: BucketVault, doc: dict,
            present: Optional[Dict[str, ObjectInfo]] = None) -> None:
    """The committed part of a journal, idempotent (the reduction and recovery both run it):
    each staged object put over its original only while the original is the planned version
    (or already the staged bytes), compressed copies created under their new names, then every
    removed original deleted under its version and the temporary keys dropped."""
    deletes: Dict[str, str] = {}
    temps: List[str] = []
    for en in _live_entries(doc):
        for f in en["files"]:
            path = rfs.path(f["path"])
            if f.get("action") == "rewrite":
                _put_over(rfs, f["tmp"], path, f)
                temps.append(f["tmp"])
            elif f.get("action") == "compress":
                _put_new(rfs, f["tmp"], rfs.path(f["final"]), f)
                temps.append(f["tmp"])
                deletes[path] = f["version"]
            else:
                deletes[path] = f["version"]
            if f.get("tmp"):
                faults.hit("bucket.after_swap_one")
    if deletes:
        if present is None:
            present = listing_of_runs(rfs, vault, [en["run"] for en in _live_entries(doc)],
                                       int(doc.get("logdir_objects") or 10 ** 9))
        present = {rfs.path(k): o for k, o in present.items()}
        changed = [p for p in deletes if p in present and present[p].version_token != deletes[p]]
        if changed:  # new bytes under a planned key have no backup: never delete them
            raise BucketTxnError(Failure.CHANGED_SINCE_BACKUP, f"{changed[0]}: rewritten since its backup; left as is")
        todo = [p for p in deletes if p in present]
        if todo:
            _delete_all(rfs, todo, versions={p: deletes[p] for p in todo})
    if temps:
        must_delete(rfs, temps)


def _staged_match(info: Optional[ObjectInfo], f: dict) -> bool:
    """True when ``info`` is the object the reduction staged for ``f`` (by the store's checksum)."""
    return info is not None and info.size == f.get("new_size") and \
        bool(same_content(content_checksums(info), f.get("new_checksums") or {}))


def _put_over(rfs: RemoteFS, tmp: str, path: str, f: dict) -> None:
    try:
        res = rfs.ops.copy(tmp, path, if_version=f["version"], size=f.get("new_size"))
    except RemoteError as e:
        if e.code not in (PRECONDITION_FAILED, "not_found"):
            raise
        if _staged_match(rfs.ops.head(path), f):
            return  # put over already (a crash after the copy)
        raise BucketTxnError(Failure.CHANGED_SINCE_BACKUP, f"{f['path']}: changed since its backup; the reduced copy was not "
                             "put over it") from e
    if same_content(res.checksums, f.get("new_checksums") or {}) is False:
        raise BucketTxnError(Failure.STORE_ERROR, f"{f['path']}: the copy put over it does not match the staged file")


def _put_new(rfs: RemoteFS, tmp: str, path: str, f: dict) -> None:
    try:
        res = rfs.ops.copy(tmp, path, if_absent=True, size=f.get("new_size"))
    except RemoteError as e:
        if e.code == ALREADY_EXISTS and _staged_match(rfs.ops.head(path), f):
            return
        if e.code == "not_found" and _staged_match(rfs.ops.head(path), f):
            return  # the temporary key is gone: a crash after the copy and the cleanup
        raise
    if same_content(res.checksums, f.get("new_checksums") or {}) is False:
        raise BucketTxnError(Failure.STORE_ERROR, f"{f['final']}: the compressed copy does not match the staged file")


def _live_entries(doc: dict) -> List[dict]:
    """The runs of a journal (a batch or one run; older journals held one run at top level)."""
    if "runs" in doc:
        return [en for en in doc["runs"] if isinstance(en, dict) and not en.get("dropped")]
    return [{"run": doc.get("run"), "op": doc.get("op"), "lock": doc.get("lock"), "files": doc.get("files", [])}]



def _stream_digest(rfs: RemoteFS, path: str, size: int) -> str:
    """SHA-256 of an object by ranged reads (used only when the store gave no common checksum)."""
    h = hashlib.sha256()
    pos = 0
    while pos < size:
        end = min(size, pos + (1 << 20))
        data = rfs.fs.cat_file(path, start=pos, end=end)
        rfs.stats.add("read", down=len(data))
        h.update(data)
        pos = end
    return h.hexdigest()


def _delete_all(rfs: RemoteFS, paths: List[str], attempts: int = 3,
                versions: Optional[Dict[str, str]] = None) -> None:
    """Delete ``paths`` in batches; keys the store refused are retried; raises if any remain."""
    todo = list(paths)
    failed: Dict[str, str] = {}
    for i in range(attempts):
        failed = rfs.ops.delete(todo, versions=versions)
        if not failed:
            return
        todo = sorted(failed)
        time.sleep(0.2 * (2 ** i))
    raise BucketTxnError(Failure.STORE_ERROR, f"{len(todo)} key(s) could not be deleted, e.g. {todo[0]}: "
                         f"{failed[todo[0]]}")


def _run_listing(rfs: RemoteFS, vault: BucketVault, run: str) -> Dict[str, ObjectInfo]:
    """One listing of the run's prefix (keys relative to the logdir), the state and vault left out."""
    pre = run_prefix(run)
    objs = rfs.list_tree(pre.rstrip("/"))
    vault_rel = vault.root[len(rfs.root) + 1:] + "/" if vault.root.startswith(rfs.root + "/") else None
    return {k: o for k, o in objs.items()
            if not k.startswith(STATE_DIR_NAME + "/") and not (vault_rel and k.startswith(vault_rel))}


def verify_batch(rfs: RemoteFS, vault: BucketVault, live: List[dict],
                  listing: Dict[str, ObjectInfo]) -> Dict[str, dict]:
    """A fresh listing of the runs: every removed key gone, every rewritten key holding the
    staged bytes (the store's checksum), every other object of the run at the version it had."""
    now_objs = listing_of_runs(rfs, vault, [en["run"] for en in live], len(listing))
    removed = {f["path"] for en in live for f in en["files"] if f.get("action") != "rewrite"}
    rewritten = {f["path"]: f for en in live for f in en["files"] if f.get("action") == "rewrite"}
    out: Dict[str, dict] = {}
    for en in live:
        pre = run_prefix(en["run"])
        error = None
        mine = [f["path"] for f in en["files"]]
        still = [p for p in mine if p in removed and p in now_objs]
        if still:
            error = f"{still[0]}: still present after delete"
        for p in mine:
            if p in rewritten and not _staged_match(now_objs.get(p), rewritten[p]):
                error = error or f"{p}: does not hold the reduced file after the swap"
        for f in en["files"]:
            if f.get("action") == "compress" and not _staged_match(now_objs.get(f["final"]), f):
                error = error or f"{f['final']}: the compressed file is not there after the swap"
        kept = changed = 0
        first_changed = None
        for rel, o in listing.items():
            if not rel.startswith(pre) or rel in removed or rel in rewritten:
                continue
            kept += 1
            cur = now_objs.get(rel)
            if cur is None or cur.version_token != o.version_token:
                changed += 1
                first_changed = first_changed or rel
        if first_changed:
            error = error or f"{first_changed}: changed during the reduction"
        events = sum(1 for rel in listing if rel.startswith(pre) and "tfevents" in rel.rsplit("/", 1)[-1])
        out[en["run"]] = {
            "method": "listing", "removed": sum(1 for p in mine if p in removed), "unchanged_objects": kept,
            "event_files_unchanged": events - sum(1 for p in mine if p in rewritten and "tfevents" in p),
            "rewritten": sum(1 for p in mine if p in rewritten),
            "created": [f["final"] for f in en["files"] if f.get("action") == "compress"],
            "checked_backends": ["store listing: versions of every kept object (ETag/generation) unchanged"],
            "not_checked": ["TensorBoard's Rust data server cannot reach this endpoint (it reads gs:// "
                            "from Google's endpoint only)"],
            "ok": error is None, **({"error": error} if error else {})}
    return out


def rollback_entry(rfs: RemoteFS, vault: BucketVault, en: dict, deleted: bool = True) -> None:
    """Undo one run of an operation that did not commit: put back any removed original from its
    verified backup, then drop the manifest, the backup copies and the temporary keys.
    ``deleted``: whether the operation may have deleted originals (its commit record was written);
    before that, an original without a verified backup that is gone was removed by someone else
    (e.g. another worker reduced the run since the plan): nothing of ours to put back. One with a
    verified backup is put back either way (its bytes may exist nowhere else)."""
    for f in en.get("files", []):
        orig = rfs.path(f["path"])
        if f.get("action") == "rewrite":
            # overwritten only after the commit record; put back if it holds the staged bytes now
            cur = rfs.ops.head(orig)
            if cur is not None and cur.version_token != f["version"] and _staged_match(cur, f):
                if not f.get("backup_checksums"):
                    raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: replaced and no verified backup of it")
                res = rfs.ops.copy(f["backup"], orig, if_version=cur.version_token, size=f["size"])
                if not _copy_matches(rfs, res, f, f["backup"], orig):
                    raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: restored copy does not match")
            continue
        if rfs.ops.head(orig) is None:
            if not f.get("backup_checksums") and not deleted:
                continue  # never copied, never deleted by us: someone else removed it (nothing of ours)
            if not f.get("backup_checksums"):
                raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: gone and no verified backup of it")
            res = rfs.ops.copy(f["backup"], orig, if_absent=True, size=f["size"])
            if not _copy_matches(rfs, res, f, f["backup"], orig):
                raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: restored copy does not match")
        if f.get("action") == "compress" and f.get("final"):
            # the original is back: the compressed copy made by this operation goes (only if it
            # still holds the staged bytes: anything else there is someone's new file)
            final = rfs.path(f["final"])
            cur = rfs.ops.head(final)
            if _staged_match(cur, f):
                _must_delete_versioned(rfs, final, cur.version_token)
    # Originals are all in place: the copies in the vault are redundant now (the manifest first,
    # so no restorable operation ever points at a missing backup).
    must_delete(rfs, [vault.manifest(en["op"])])
    must_delete(rfs, [f["backup"] for f in en.get("files", [])] + [f["tmp"] for f in en.get("files", [])
                                                                       if f.get("tmp")])


def _must_delete_versioned(rfs: RemoteFS, path: str, version: str) -> None:
    failed = rfs.ops.delete([path], versions={path: version})
    if failed:
        raise BucketTxnError(Failure.STORE_ERROR, f"{path}: could not be deleted ({failed[path]})")


def must_delete(rfs: RemoteFS, paths: List[str], versions: Optional[Dict[str, str]] = None) -> None:
    """Delete ``paths`` (at ``versions`` where given); ``BucketTxnError`` when one could not be."""
    if not paths:
        return
    failed = rfs.ops.delete(paths, versions=versions)
    if failed:
        key = sorted(failed)[0]
        raise BucketTxnError(Failure.STORE_ERROR, f"{key}: could not be deleted ({failed[key]})")


#: why a journal of the wrong shape is not acted on (``trust.BAD_RECORD``; any other refusal names
#: keys outside the logdir, vault or run: ``trust.PATH_OUTSIDE``)
MALFORMED = "journal is malformed"


def _trusted(rfs: RemoteFS, vault: BucketVault, doc: dict) -> Optional[str]:
    """Why a journal must not be acted on (untrusted input), or None: every key it names is a
    plain key of this logdir or this vault's blobs/tmp, and its runs are runs of this logdir."""
    for en in doc.get("runs", []) if "runs" in doc else [doc]:
        if not isinstance(en, dict) or not isinstance(en.get("run"), str) or not isinstance(en.get("files", []), list):
            return MALFORMED
        try:
            rfs.path(en["run"]) if en["run"] != "." else None
            for f in en.get("files", []):
                if not isinstance(f, dict) or not isinstance(f.get("path"), str):
                    return MALFORMED
                rfs.path(f["path"])  # raises on '..' and friends
                if f.get("final") is not None:
                    rfs.path(f["final"])
                    if en["run"] != "." and not str(f["final"]).startswith(run_prefix(en["run"])):
                        return "journal names keys outside its run"
                if not str(f.get("backup", "")).startswith(vault.root + "/blobs/"):
                    return "journal names keys outside the logdir or vault"
                if f.get("tmp") is not None and not str(f["tmp"]).startswith(vault.root + "/tmp/"):
                    return "journal names keys outside the logdir or vault"
                if not f["path"].startswith(run_prefix(en["run"])) and en["run"] != ".":
                    return "journal names keys outside its run"
        except (ValueError, TypeError):
            return "journal names keys outside the logdir or vault"
    return None


def _journal_unreadable(doc: dict) -> bool:
    """A journal object that is not UTF-8 JSON of a journal's shape: never acted on."""
    return bool(doc.get("corrupt")) or not ("run" in doc or "runs" in doc) or \
        ("runs" in doc and not isinstance(doc["runs"], list))


def recover(rfs: RemoteFS, vault: BucketVault) -> List[RecoveryOutcome]:
    """Settle unfinished bucket operations of this logdir, from any machine: before the commit
    record, roll back; from it on (backups verified, new objects staged and checked), finish."""
    st = BucketState(rfs)
    out: List[RecoveryOutcome] = []
    # local scratch of rewrites whose process was killed (named after its pid): swept here, as a
    # local vault's tmp/ is at every start
    scratch.sweep(scratch.current_root())
    try:
        journals = rfs.list_tree(JOURNAL)
    except FileNotFoundError:
        return out
    for key in sorted(journals):
        rel = key.rsplit("/", 1)[-1]
        if not key.startswith(JOURNAL + "/") or not rel.endswith(".json"):
            continue
        path = rfs.path(key)
        doc, version = st.read(path)
        if doc is None:  # finished (or settled) by its owner since the listing
            continue
        if _journal_unreadable(doc):
            out.append(RecoveryOutcome(op_id=rel, run="?", action=Recovery.FAILED,
                                       detail=f"{rfs.url_of(key)}: unreadable journal left in place",
                                       code=Finding.DAMAGED_FILE))
            continue
        op_id = str(doc.get("op", rel[:-5]))
        every = doc["runs"] if "runs" in doc else [dict(doc)]
        why = _trusted(rfs, vault, doc)
        runs = [str(en.get("run")) for en in every if isinstance(en, dict)]
        label = runs[0] if len(runs) == 1 else f"{runs[0] if runs else '?'} and {max(0, len(runs) - 1)} more run(s)"
        if why:
            out.append(RecoveryOutcome(op_id=op_id, run=label, action=Recovery.FAILED, detail=f"{why}; left alone",
                                       code=trust.BAD_RECORD if why == MALFORMED else trust.PATH_OUTSIDE))
            continue
        locks = [rfs.path(_lock_key(r)) for r in runs]  # computed, never taken from the journal
        lock, _ = st.read(locks[0]) if locks else (None, None)
        if lock and lock.get("op") == op_id and not _owner_gone(lock, st):
            out.append(RecoveryOutcome(op_id=op_id, run=label, action=Recovery.SKIPPED_LIVE,
                                       detail="its owner is still running", code=Finding.RUN_LOCKED))
            continue
        try:
            if "runs" not in doc:  # one run at top level (journals of earlier versions)
                doc = {**doc, "runs": _live_entries(doc)}
            dropped = [en for en in doc["runs"] if en.get("dropped")]
            for en in dropped:  # taken out before the commit step: nothing of it was deleted
                rollback_entry(rfs, vault, en, deleted=False)
            live = _live_entries(doc)
            finish = doc.get("step") in COMMITTED_STEPS and \
                all(f.get("backup_checksums") for en in live for f in en["files"])
            settled = [_settled_run(st, vault, en, finish) for en in live]  # sizes before rollback drops manifests
            if finish:
                finish_op(rfs, vault, doc)
                action, detail = Recovery.COMPLETED, "backups were verified; the reduction was finished"
            else:
                for en in live:
                    rollback_entry(rfs, vault, en, deleted=commit_recorded(doc))
                action, detail = Recovery.ROLLED_BACK, f"stopped at step {doc.get('step')}; run left as it was"
            must_delete(rfs, [path])
            _drop_locks_of(st, locks, op_id)
            out.append(RecoveryOutcome(op_id=op_id, run=label, action=action, detail=detail, code=Finding.RECOVERED,
                                       runs=settled))
        except (BucketTxnError, RemoteError) as e:
            out.append(RecoveryOutcome(op_id=op_id, run=label, action=Recovery.FAILED, detail=str(e),
                                       code=Finding.RECOVERY_FAILED))
    return out


def _settled_run(st: BucketState, vault: BucketVault, en: dict, finished: bool) -> dict:
    """One run a recovery settled, with its sizes from the manifest the reduction wrote before its
    commit (read as untrusted: numbers only); a rolled-back run is as big as it was."""
    sizes: Dict[str, Optional[int]] = {"bytes_before": None, "bytes_after": None}
    try:
        doc, _ = st.read(vault.manifest(en["op"]))
    except OSError:  # sizes are for the record: never a reason to leave a journal unsettled
        doc = None
    if isinstance(doc, dict) and not doc.get("corrupt"):
        for k in sizes:
            v = doc.get(k)
            sizes[k] = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
    if not finished:
        sizes["bytes_after"] = sizes["bytes_before"]
    return {"run": str(en["run"]), "op_id": str(en["op"]), **sizes}


def _drop_locks_of(st: BucketState, locks: List[str], op_id: str) -> None:
    """Delete the locks of a settled operation: only those that still name it, each at the
    version read (a lock another operation holds now is never deleted as this one's)."""
    versions: Dict[str, str] = {}
    for p in locks:
        lock, version = st.read(p)
        if lock is not None and (lock.get("corrupt") or lock.get("op") == op_id) and version:
            versions[p] = version
    must_delete(st.rfs, list(versions), versions=versions)


def _vault_url(rfs: RemoteFS, path: str) -> str:
    """The URL of a store path (``bucket/key``) of this logdir's store, as users name objects."""
    return f"{rfs.url.split('://', 1)[0]}://{path}"  # the scheme the user gave (gs, not gcsfs' gcs)


def _manifest_damage(doc: Optional[dict]) -> Optional[str]:
    """Why a manifest read from the vault cannot be used (untrusted input), or None."""
    if doc is None:
        return None
    if doc.get("corrupt"):
        return "not UTF-8 JSON"
    files = doc.get("files")
    if not isinstance(doc.get("op"), str) or not isinstance(doc.get("run"), str) or not isinstance(files, list) \
            or not isinstance(doc.get("created", 0), (int, float)):
        return "not a manifest (op, run, files or created missing or of the wrong type)"
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("path"), str) or not isinstance(f.get("backup"), str) \
                or not isinstance(f.get("size"), int) or not isinstance(f.get("checksums", {}), dict):
            return "a file entry is not a path, backup, size and checksums"
    return None


def manifests(rfs: RemoteFS, vault: BucketVault, problems: Optional[List[dict]] = None) -> List[dict]:
    """Every usable manifest in the vault, newest first. One that cannot be read or is not a
    manifest is left out (its backups stay) and, with ``problems``, named there by its URL
    (``Finding.MANIFEST_DAMAGED``)."""
    st = BucketState(rfs)
    prefix = vault.root + "/manifests"
    try:
        found = rfs.list_under(prefix, vault.root)
    except FileNotFoundError:
        return []
    out = []
    for key, info in sorted(found.items()):
        if not key.startswith("manifests/"):
            continue
        p = f"{vault.root}/{key}"
        doc, version = st.read(p, info)
        why = _manifest_damage(doc)
        if why:
            if problems is not None:
                url = _vault_url(rfs, p)
                problems.append({"code": Finding.MANIFEST_DAMAGED, "file": url, "op_id": None, "run": None,
                                 "detail": f"{url}: {why}; its backups are kept, and it is not restored until "
                                           "it is mended or moved aside"})
            continue
        if doc:
            doc["_version"] = version
            doc["_path"] = p
            out.append(doc)
    out.sort(key=lambda d: -d.get("created", 0))
    return out


def restore_op(rfs: RemoteFS, vault: BucketVault, manifest: dict) -> RunOutcome:
    """Copy every backup of one operation back server-side, check it against the recorded
    checksums, and mark the manifest restored. An original key that exists again is left alone."""
    run = manifest["run"]
    out = RunOutcome(run=run, status=Outcome.FAILED, op_id=manifest["op"],
                     bytes_before=manifest.get("bytes_after", 0), bytes_after=manifest.get("bytes_after", 0))
    st = BucketState(rfs)
    try:
        lock_path, _ = lock_run(st, run, manifest["op"])
    except BucketTxnError as e:
        out.status, out.reason, out.code = Outcome.SKIPPED, str(e), Skip.LOCKED
        return out
    except RemoteError as e:
        out.reason, out.code = str(e), lock_failure_code(e)
        return out
    manifest_version = manifest.get("_version")
    displaced: List[dict] = []
    try:
        conflicts = []
        # one listing of the run says which originals exist again: no metadata read per file
        present = _run_listing(rfs, vault, run)
        for f in manifest["files"]:
            if not str(f.get("backup", "")).startswith(vault.root + "/blobs/"):
                raise BucketTxnError(Failure.REFUSED, "manifest names a backup outside the vault")
            orig = rfs.path(f["path"])
            action = f.get("action", "delete")
            if action == "rewrite":
                # put back over the reduced object only while it is the one this operation made
                cur = rfs.ops.head(orig)
                if cur is not None and same_content(content_checksums(cur), f["checksums"]):
                    # the original bytes are there already; a grown object kept by a restore of
                    # this operation that stopped before its record is recorded now
                    kept_info = rfs.ops.head(f"{vault.root}/{_kept_key(manifest['op'], f)}")
                    if kept_info is not None and isinstance(f.get("new_size"), int):
                        displaced.append(_late_from_kept(rfs, vault, f, _kept_key(manifest["op"], f),
                                                         kept_info, present))
                    continue
                kept = None
                if not _staged_match(cur, f):
                    # a writer that resumed "appended" by writing the reduced bytes plus new records:
                    # the grown object goes to the vault, its records back into the run, and then
                    # the original over it (anything else written there is left as it is)
                    kept = _keep_grown(rfs, vault, manifest["op"], f, cur, present)
                    if kept is None:
                        conflicts.append(f["path"])
                        continue
                try:
                    res = rfs.ops.copy(f["backup"], orig, if_version=cur.version_token, size=f["size"])
                except RemoteError as e:
                    if e.code == PRECONDITION_FAILED:
                        conflicts.append(f["path"])
                        continue
                    raise
                out.bytes_after += f["size"] - cur.size
                faults.hit("bucket.restore_after_put_back")
                if kept is not None:
                    displaced.append(kept)
                    late = kept.get("late_records")
                    if late:
                        out.created_files.append(late["file"])
                        out.bytes_after += late["bytes"]
            else:
                if f["path"] in present:
                    conflicts.append(f["path"])
                    continue
                try:
                    res = rfs.ops.copy(f["backup"], orig, if_absent=True, listed_absent=True, size=f["size"])
                except RemoteError as e:
                    if e.code == ALREADY_EXISTS:
                        conflicts.append(f["path"])
                        continue
                    raise
                out.bytes_after += f["size"]
            if not _copy_matches(rfs, res, f, f["backup"], orig):
                raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: restored copy does not match the original")
            out.created_files.append(f["path"])
            if action == "compress" and f.get("final"):
                # the original is back: the compressed copy this operation made goes (a file
                # someone wrote under that name since is left alone)
                final = rfs.path(f["final"])
                cur = rfs.ops.head(final)
                if _staged_match(cur, f):
                    _must_delete_versioned(rfs, final, cur.version_token)
                    out.removed_files.append(f["final"])
                    out.bytes_after -= int(f.get("new_size") or 0)
        manifest = {k: v for k, v in manifest.items() if not k.startswith("_")}
        manifest["status"] = "restored"
        if conflicts:
            # their originals were not put back: the vault holds the only copy, which purge keeps
            manifest["not_restored"] = sorted(set(conflicts) | set(manifest.get("not_restored") or []))
        if displaced:
            manifest["displaced"] = displaced
        manifest["restored_at"] = now_s()
        manifest["restored_with"] = who()
        version = manifest_version or (rfs.ops.head(vault.manifest(manifest["op"])) or ObjectInfo("", 0, 0)).version_token
        st.update(vault.manifest(manifest["op"]), manifest, version)
        out.status = Outcome.RESTORED
        # an object store keeps no modification time or mode of a file: a restored object is
        # dated by the store at the copy, and the report says so (bytes are checked above)
        out.code = Finding.MTIME_NOT_KEPT
        out.reason = (f"{len(out.created_files)} file(s) restored byte for byte (checksums checked); "
                      "the object store keeps no file modification times or modes: restored objects are "
                      "dated now")
        late = [d["late_records"] for d in displaced if d.get("late_records")]
        if late:
            out.code = Finding.LATE_RECORDS_RESTORED
            out.reason += "; " + ", ".join(f"{x['records']} record(s) written after the reduction kept in the run "
                                           f"as {x['file']}" for x in late)
        if displaced:
            out.reason += (f"; {len(displaced)} object(s) as they stood before the restore kept in the vault "
                           "(`tb-footprint status` shows where)")
        if conflicts:
            out.reason += (f"; {len(conflicts)} file(s) exist again and were left as they are, e.g. {conflicts[0]}: "
                           "their originals stay in the vault, and purge keeps them")
        return out
    except (BucketTxnError, RemoteError, ValueError) as e:  # ValueError: a key the manifest names is not plain
        out.reason, out.code = str(e), failure_code(e)
        return out
    finally:
        ours = unlock_versions(lock_path)
        if ours:
            rfs.ops.delete([lock_path], versions=ours)


def _keep_grown(rfs: RemoteFS, vault: BucketVault, op_id: str, f: dict, cur: Optional[ObjectInfo],
                present: Dict[str, ObjectInfo]) -> Optional[dict]:
    """When the object at a rewritten file's key is the reduced object this operation made with
    bytes written after it (``cur``), keep it whole in the vault (a server-side copy conditional
    on its version, outside ``blobs/``: no purge of this operation removes it) and put its complete
    records after the reduced bytes back into the run as the next free ``<file>.salvaged-NNN``
    (framing and CRCs checked by ``scan.tfrecord``; a trailing partial record stays only in the
    kept copy). Returns the ``displaced`` record for the manifest, or None when ``cur`` is
    anything else (then it is left as it is)."""
    new_size, new_sha = f.get("new_size"), f.get("new_sha256")
    if cur is None or not isinstance(new_size, int) or not isinstance(new_sha, str) or cur.size <= new_size:
        return None
    kept_key = _kept_key(op_id, f)
    kept = f"{vault.root}/{kept_key}"
    try:
        res = rfs.ops.copy(rfs.path(f["path"]), kept, if_source_version=cur.version_token, size=cur.size)
    except RemoteError as e:
        if e.code in (PRECONDITION_FAILED, "not_found"):
            return None  # changed again since it was looked at: left as it is
        raise
    if same_content(res.checksums, content_checksums(cur)) is False:
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: the copy kept in the vault does not match it")
    # read from the kept copy, which no writer changes: it must begin with the reduced bytes
    if _stream_digest(rfs, kept, new_size) != new_sha:
        rfs.ops.delete([kept])  # a copy of an object left in the run as it is: not needed
        return None  # not an append to the reduced object
    return _late_from_kept(rfs, vault, f, kept_key, cur, present)


def _kept_key(op_id: str, f: dict) -> str:
    """Where a restore keeps the grown object at ``f``'s key (relative to the vault root): named
    by operation and path, so a restore finished after a crash finds what it kept."""
    return f"kept/{op_id}/{hashlib.sha256(f['path'].encode('utf-8', 'surrogateescape')).hexdigest()[:32]}"


def _late_from_kept(rfs: RemoteFS, vault: BucketVault, f: dict, kept_key: str, info: ObjectInfo,
                    present: Dict[str, ObjectInfo]) -> dict:
    """The ``displaced`` record of a grown object kept in the vault at ``kept_key`` (``info``: its
    metadata), its complete records after the reduced bytes salvaged into the run (idempotent)."""
    new_size = int(f["new_size"])
    vfs = RemoteFS(f"{rfs.scheme}://{vault.root}", stats=rfs.stats)
    src = vfs.open_ranged(kept_key, info.size)
    src.seek(new_size)
    reader = RecordReader(src, raw=True, display_name=f"late records of {f['path']}")
    buf = io.BytesIO()
    records = 0
    for rec in reader:
        buf.write(rec)
        records += 1
    entry = {"path": f["path"], "kept": f"{vault.root}/{kept_key}", "size": info.size,
             "checksums": content_checksums(info), "late_records": None}
    if records:
        data = buf.getvalue()
        name = _salvage_object(rfs, f["path"], data, present)
        entry["late_records"] = {"file": name, "records": records, "bytes": len(data),
                                 "partial_bytes": info.size - new_size - reader.valid_bytes,
                                 "corrupt": reader.status == "corrupt"}
    return entry


def _salvage_object(rfs: RemoteFS, path: str, data: bytes, present: Dict[str, ObjectInfo]) -> str:
    """Write ``data`` (whole records) as the next free ``<path>.salvaged-NNN`` (create-only); one
    an earlier, interrupted restore wrote with exactly these bytes is reused."""
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode("ascii")
    k = 1
    while True:
        name = f"{path}{SALVAGE_SUFFIX}{k:03d}"
        info = present.get(name) or rfs.ops.head(rfs.path(name))
        if info is None:
            try:
                rfs.ops.put(rfs.path(name), data, if_absent=True)
                return name
            except RemoteError as e:
                if e.code != ALREADY_EXISTS:
                    raise
                info = rfs.ops.head(rfs.path(name))
        if info is not None and info.size == len(data) and \
                same_content(content_checksums(info), {"md5": md5}) and rfs.read_bytes(name) == data:
            return name
        k += 1


def purge(rfs: RemoteFS, vault: BucketVault, *, older_than: Optional[float] = None,
          run: Optional[str] = None, op: Optional[str] = None, yes: bool = False) -> dict:
    """Delete the backups of verified or restored bucket operations (without ``yes``: list them).
    The manifest is marked purged before its blobs go, so a restore never points at them."""
    now = now_s()
    chosen = [m for m in manifests(rfs, vault)
              if m.get("status") in ("verified", "restored") and not m.get("purged")
              and (op is None or m.get("op") == op) and (run is None or m.get("run") == run)
              and (older_than is None or m.get("created", now) <= now - older_than)]
    # a restore that found a file written again at an original's name left that original in the
    # vault only (``not_restored``): its operation is not purged, and the listing says why
    kept = [m for m in chosen if m.get("status") == "restored" and m.get("not_restored")]
    chosen = [m for m in chosen if m not in kept]
    freed = sum(f["size"] for m in chosen for f in m["files"])
    ops = [{"op_id": m["op"], "run": m["run"], "bytes": sum(f["size"] for f in m["files"]),
            "restored": m["status"] == "restored"} for m in chosen]
    held = [{"op_id": m["op"], "run": m["run"], "only_copies": list(m["not_restored"])[:1000],
             "reason": (f"{len(m['not_restored'])} original(s) were not put back by its restore (a file "
                        f"was written again at the name, e.g. {m['not_restored'][0]}): the vault holds the "
                        "only copy")} for m in kept]
    if yes:
        st = BucketState(rfs)
        for m in chosen:
            if not all(str(f.get("backup", "")).startswith(vault.root + "/blobs/") for f in m["files"]):
                raise BucketTxnError(Failure.REFUSED, f"{m['_path']}: names a backup outside the vault")
            doc = {k: v for k, v in m.items() if not k.startswith("_")}
            doc["purged"] = now
            st.update(m["_path"], doc, m["_version"])
            must_delete(rfs, [f["backup"] for f in m["files"]])
    return {"dry_run": not yes, "ops": ops, "freed_bytes": freed, "held": held}


def retention_report(rfs: RemoteFS, vault: BucketVault, removable: int) -> dict:
    """What a reduction frees and when, on this bucket: removed from the logdir now; backups
    (server-side copies in the vault) billed until purge; deleted bytes kept by the bucket's
    versioning or soft delete until its retention passes."""
    bucket = rfs.root.split("/", 1)[0]
    r = rfs.ops.retention(bucket)
    same_store = True  # backups are server-side copies: always in this store
    kept_days = None
    never = False
    if r.get("versioning"):
        if r.get("noncurrent_expiry_days") is not None:
            kept_days = float(r["noncurrent_expiry_days"])
        else:
            never = True
    if r.get("soft_delete_seconds"):
        kept_days = max(kept_days or 0.0, r["soft_delete_seconds"] / 86400.0)
    lines = [f"removed from the logdir: {removable} bytes, at once"]
    if same_store:
        lines.append("backups are server-side copies in the same store: billed until `purge`")
    if never:
        when = ("never, until a lifecycle rule expires noncurrent versions: the bucket is versioned and "
                "a delete only adds a delete marker")
    elif kept_days:
        when = f"{kept_days:g} day(s) after purge (the bucket keeps deleted objects that long)"
    else:
        when = "at purge"
    lines.append(f"freed from the bill: {when}")
    return {
        "removed_from_logdir": removable,
        "freed_now": 0 if same_store else removable,
        "freed_after_purge": removable if not (never or kept_days) else 0,
        "freed_after_retention": None if never else removable,
        "retention_days": kept_days,
        "versioning": bool(r.get("versioning")),
        "soft_delete_seconds": r.get("soft_delete_seconds"),
        "noncurrent_expiry_days": r.get("noncurrent_expiry_days"),
        "lines": lines,
    }


def recheck(rfs: RemoteFS, vault: BucketVault, *, run: Optional[str] = None,
            op: Optional[str] = None) -> List[dict]:
    """Re-check kept bucket reductions without downloading: every backup object is still there
    with the checksums the store computed for the original, and every removed key is still
    absent from the logdir (or was put back by someone, which is reported). A damaged manifest
    (which may hide a backup) is a failed check naming it, unless one operation is asked for."""
    out = []
    damaged: List[dict] = []
    for m in manifests(rfs, vault, damaged):
        if m.get("status") != "verified" or m.get("purged"):
            continue
        if (op is not None and m.get("op") != op) or (run is not None and m.get("run") != run):
            continue
        bad, absent, back = [], 0, []
        listing = _run_listing(rfs, vault, m["run"])
        for f in m.get("files", []):
            if not str(f.get("backup", "")).startswith(vault.root + "/blobs/"):
                raise BucketTxnError(Failure.REFUSED, f"{m['_path']}: names a backup outside the vault")
            info = rfs.ops.head(f["backup"])
            if info is None or info.size != f.get("size") or \
                    not same_content(content_checksums(info), f.get("checksums") or {}):
                bad.append(f["path"])  # missing, resized, changed, or no checksum to vouch for it
            if f.get("action") == "rewrite":
                if _staged_match(listing.get(f["path"]), f):
                    absent += 1  # holds the reduced bytes this operation put there
                else:
                    back.append(f["path"])
            elif f["path"] in listing:
                back.append(f["path"])
            else:
                absent += 1
        checks = [
            {"name": "backups", "ok": not bad, "detail": f"{len(m.get('files', [])) - len(bad)} of "
             f"{len(m.get('files', []))} backups in the vault match the store's checksums of the originals"},
            {"name": "removed", "ok": True, "detail": f"{absent} removed or replaced file(s) still as the "
             "reduction left them"
             + (f"; {len(back)} exist again (written since), e.g. {back[0]}" if back else "")},
        ]
        out.append({"op_id": m["op"], "run": m["run"], "backups_ok": not bad, "damaged_backups": bad,
                    "verification": {"ok": not bad, "checks": checks}, "ok": not bad})
    for p in damaged if op is None else []:
        out.append({"op_id": "-", "run": "(vault)", "ok": False, "backups_ok": False, "damaged_backups": [],
                    "code": p["code"], "verification": {"ok": False, "checks": [
                        {"name": str(p["code"]), "ok": False, "detail": p["detail"]}]}})
    return out


def history(rfs: RemoteFS, vault: BucketVault) -> List[dict]:
    """The change log of a bucket logdir, oldest first, from its manifests (a bucket has no
    append: each operation's manifest is its record, marked when restored or purged)."""
    out = []
    for m in manifests(rfs, vault):
        kept = not m.get("purged") and m.get("status") == "verified"
        out.append({"time": m.get("created"), "op_id": m.get("op"), "kind": "reduce", "run": m.get("run"),
                    "before": m.get("bytes_before"), "after": m.get("bytes_after"), "verified": True,
                    "outcome": Outcome.VERIFIED, "backup_kept": kept, "policy": m.get("policy"),
                    "user": m.get("user"), "host": m.get("host"),
                    "shard": m["shard"] if isinstance(m.get("shard"), str) else None})
        if m.get("restored_at"):
            out.append({"time": m["restored_at"], "op_id": m.get("op"), "kind": "restore", "run": m.get("run"),
                        "of_op": m.get("op"), "before": m.get("bytes_after"), "after": m.get("bytes_before"),
                        "verified": True, "outcome": Outcome.RESTORED, "backup_kept": not m.get("purged"),
                        "policy": m.get("policy"), **(m.get("restored_with") or {})})
        if m.get("purged"):
            out.append({"time": m["purged"], "op_id": m.get("op"), "kind": "purge", "run": m.get("run"),
                        "outcome": "purged", "backup_kept": False})
    out.sort(key=lambda e: e.get("time") or 0)
    return out


def status(rfs: RemoteFS, vault: BucketVault) -> dict:
    """Unfinished operations (journals in the bucket), the vault and the operations it holds."""
    try:
        pending = sorted(k.rsplit("/", 1)[-1].rsplit(".", 1)[0] for k in rfs.list_tree(JOURNAL))
    except FileNotFoundError:
        pending = []
    ops, vault_bytes, problems = [], 0, []
    found = manifests(rfs, vault, problems)
    for m in found:
        size = sum(int(f.get("size") or 0) for f in m.get("files", []))
        if not m.get("purged"):
            vault_bytes += size
        ops.append({"op_id": m.get("op"), "kind": "reduce", "run": m.get("run"), "outcome": Outcome.VERIFIED,
                    "reason": None, "bytes_before": m.get("bytes_before"), "bytes_after": m.get("bytes_after"),
                    "finished_at": m.get("created"), "backup_purged": bool(m.get("purged")),
                    "restored_by": "a restore" if m.get("status") == "restored" else None})
    return {"logdir": rfs.url, "state_dir": rfs.url.rstrip("/") + "/" + STATE_DIR_NAME,
            "vaults": [f"{rfs.url.split('://', 1)[0]}://{vault.root}"], "vault_bytes": vault_bytes,
            "unfinished_operations": pending, "operations": ops, "ledger": None,
            "problems": problems + _damaged_journals(rfs), "kept_blobs": kept_objects(rfs, vault, found)}


#: how to copy an object kept in the vault back, per scheme (the store's own command-line tool)
_COPY_COMMAND = {"s3": "aws s3 cp", "gs": "gcloud storage cp", "gcs": "gcloud storage cp", "az": "azcopy copy"}


def kept_objects(rfs: RemoteFS, vault: BucketVault, found: Optional[List[dict]] = None) -> List[dict]:
    """Every object a restore kept in the vault in a file's place (the reduced object with records
    written after the reduction), as ``status`` lists them for a local logdir: what it holds,
    where its records went back into the run, whether it is still there and how to bring it back.
    Manifests are untrusted: an entry naming a key outside the vault's ``kept/`` is not listed."""
    out = []
    for m in found if found is not None else manifests(rfs, vault):
        for d in m.get("displaced") or []:
            if not isinstance(d, dict) or not isinstance(d.get("path"), str) or \
                    not str(d.get("kept", "")).startswith(vault.root + "/kept/"):
                continue
            late = d.get("late_records") if isinstance(d.get("late_records"), dict) else {}
            blob = _vault_url(rfs, d["kept"])
            size = d.get("size") if isinstance(d.get("size"), int) else None
            holds = f"{d['path']} as it stood before the restore ({size} bytes)"
            if late.get("file"):
                holds += (f": the reduced file with {late.get('records', 0)} record(s) written after the reduction, "
                          f"which are back in the run as {late['file']}")
            # an event file's copy under a name TensorBoard does not read: its records would show
            # twice next to the restored original
            folder = d["path"].rsplit("/", 1)[0] + "/" if "/" in d["path"] else ""
            try:
                dest = rfs.url_of(f"{folder}kept-{m['op']}.tfrecord")
            except ValueError:  # a path that is not a plain key of the logdir: never shown as one
                continue
            out.append({"op_id": m.get("op"), "kind": "restore", "of_op": m.get("op"), "run": m.get("run"),
                        "path": d["path"], "sha256": None, "size": size, "blob": blob,
                        "present": rfs.ops.head(d["kept"]) is not None,
                        "code": Finding.LATE_RECORDS_RESTORED if late.get("file") else Finding.DISPLACED_KEPT,
                        "late_records": late.get("records", 0), "late_records_file": late.get("file"),
                        "holds": holds,
                        "bring_back": f"{_COPY_COMMAND.get(rfs.scheme, 'copy')} {blob} {dest}"})
    return out


def _damaged_journals(rfs: RemoteFS) -> List[dict]:
    """Journal objects that cannot be read (``recover`` leaves them in place), named by URL."""
    st = BucketState(rfs)
    out = []
    try:
        journals = rfs.list_tree(JOURNAL)
    except FileNotFoundError:
        return out
    for key, info in sorted(journals.items()):
        doc, _ = st.read(rfs.path(key), info)
        if doc is not None and _journal_unreadable(doc):
            url = rfs.url_of(key)
            out.append({"code": Finding.DAMAGED_FILE, "file": url, "op_id": None, "run": None,
                        "detail": f"{url}: journal not readable; never acted on, left in place"})
    return out
