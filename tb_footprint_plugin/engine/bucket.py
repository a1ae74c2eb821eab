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

Runs whose plan rewrites or compresses files are left alone on a bucket (for now), with a reason.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import Failure, Outcome, Recovery, Skip
from tb_footprint_plugin.engine import bucket_lease, faults
from tb_footprint_plugin.engine.context import RunOutcome, new_op_id
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.vault import who
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
    """A step of a bucket transaction failed; ``code`` says which kind of failure."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


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


def _run_prefix(run: str) -> str:
    return "" if run == "." else run.rstrip("/") + "/"


def _lock_key(run: str) -> str:
    return f"{LOCKS}/{hashlib.sha256(run.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.json"


def _now() -> float:
    return time.time()


class _State:
    """Small JSON state objects (journal, lock, manifest) with conditional writes."""

    def __init__(self, rfs: RemoteFS):
        self.rfs = rfs
        self.ops = rfs.ops

    def create(self, path: str, doc: dict) -> str:
        return self.ops.put(path, json.dumps(doc, sort_keys=True).encode(), if_absent=True)

    def update(self, path: str, doc: dict, version: str) -> str:
        return self.ops.put(path, json.dumps(doc, sort_keys=True).encode(), if_version=version)

    def read(self, path: str) -> Tuple[Optional[dict], Optional[str]]:
        info = self.ops.head(path)
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


class _Journal:
    """One operation's journal object: every record rewrites it under the previous version."""

    def __init__(self, st: _State, op_id: str, doc: dict):
        self.st = st
        self.path = st.rfs.path(f"{JOURNAL}/{op_id}.json")
        self.doc = doc
        self.version = st.create(self.path, doc)

    def step(self, name: str, **extra) -> None:
        self.doc["step"] = name
        self.doc.setdefault("steps", []).append([name, _now()])
        self.doc.update(extra)
        self.version = self.st.update(self.path, self.doc, self.version)

    def remove(self) -> None:
        self.st.ops.delete([self.path])


def _lock(st: _State, run: str, op_id: str) -> Tuple[str, str]:
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


def _held_lock(st: _State, path: str, doc: dict, version: str) -> str:
    """Renew the lock just taken while this process holds it (``engine.bucket_lease``)."""
    bucket_lease.hold(path, doc, version, lambda d, v: st.update(path, d, v))
    return version


def _unlock_versions(lock_path: str) -> Optional[Dict[str, str]]:
    """Stop renewing the lock; the version to delete it at, None if it is not ours any more."""
    v = bucket_lease.release(lock_path)
    return None if v is None else {lock_path: v}


#: operations this process is running right now (a lock of this pid naming another op is stale)
_ACTIVE_OPS: set = set()


def _owner_gone(lock: dict, st: Optional[_State] = None) -> bool:
    """Whether a lock's holder is gone: the lease rules of ``engine.bucket_lease``, the journal
    progress read from the bucket (``st``) when the lease of another host expired."""
    def journal_mtime(op: str) -> Optional[float]:
        info = st.ops.head(st.rfs.path(f"{JOURNAL}/{op}.json")) if st is not None else None
        return info.mtime if info is not None else None

    return bucket_lease.holder_gone(lock, journal_mtime, _ACTIVE_OPS)


def reduce_run(rfs: RemoteFS, vault: BucketVault, rp, listing: Dict[str, ObjectInfo],
               quiet_period: float, policy: Optional[str] = None) -> RunOutcome:
    """Reduce one run of a bucket logdir by its plan ``rp`` (deletes only); never raises for a
    store failure: the run ends verified, rolled back, or skipped, with a reason."""
    t0 = time.monotonic()
    out = RunOutcome(run=rp.run, status=Outcome.SKIPPED, bytes_before=rp.bytes_before,
                     bytes_after=rp.bytes_before)
    unsupported = sorted({a.kind for a in rp.actions if a.kind not in ("delete", "remove_dir")})
    if unsupported:
        out.reason = (f"{', '.join(unsupported)} of files in a bucket is not available yet; "
                      "this run is left as it is")
        out.code = Skip.NOT_ON_STORE
        return out
    deletes = [a for a in rp.actions if a.kind == "delete"]
    if not deletes:
        out.reason, out.code = "nothing to remove", Skip.NOTHING
        return out
    st = _State(rfs)
    op_id = new_op_id()
    out.op_id = op_id
    try:
        lock_path, _ = _lock(st, rp.run, op_id)
    except BucketTxnError as e:
        out.reason, out.code = str(e), Skip.LOCKED
        return out
    journal = None
    _ACTIVE_OPS.add(op_id)
    try:
        files = []
        for a in deletes:
            o = listing.get(a.path)
            if o is None:
                raise BucketTxnError(Skip.NOT_IN_PLAN, f"{a.path}: gone since the plan")
            files.append({"path": a.path, "size": o.size, "version": o.version_token,
                          "checksums": content_checksums(o), "backup": vault.blob(op_id, a.path)})
        journal = _Journal(st, op_id, {"op": op_id, "run": rp.run, "logdir": rfs.url, "step": "planned",
                                       "vault": vault.root, "files": files, "lock": lock_path})
        faults.hit("bucket.after_journal")
        # No listing here: the plan's listing is what each copy is conditional on (a changed object
        # fails its copy), and the run is listed once more right before the delete step.
        # Backups: server-side copies, integrity by the store's checksums.
        for f in files:
            try:
                res = rfs.ops.copy(rfs.path(f["path"]), f["backup"], if_source_version=f["version"])
            except RemoteError as e:
                if e.code in (PRECONDITION_FAILED, "not_found"):  # e.g. reduced by another worker since the plan
                    raise BucketTxnError(Skip.NOT_IN_PLAN, f"{f['path']}: changed or gone since the plan") from e
                raise
            ok = same_content(res.checksums, f["checksums"])
            if ok is None:
                ok = _stream_digest(rfs, rfs.path(f["path"]), f["size"]) == _stream_digest(rfs, f["backup"], f["size"])
            if not ok:
                raise BucketTxnError("backup_mismatch", f"{f['path']}: backup copy does not match the original")
            f["backup_checksums"] = res.checksums
            f["backup_version"] = res.version
            faults.hit("bucket.after_backup_copy")
        manifest = {"op": op_id, "run": rp.run, "logdir": rfs.url, "created": _now(), "status": "verified",
                    "files": files, "bytes_before": rp.bytes_before,
                    "bytes_after": rp.bytes_before - sum(f["size"] for f in files),
                    "policy": policy, **who()}
        st.create(vault.manifest(op_id), manifest)
        faults.hit("bucket.after_backup")
        # Last look before the destructive step: an object rewritten since its backup was made
        # must not be deleted (its new bytes have no backup). Each delete also carries the
        # version as a condition where the store takes one.
        faults.hit("bucket.before_recheck")
        now_objs = _run_listing(rfs, vault, rp.run)
        for f in files:
            cur = now_objs.get(f["path"])
            if cur is None or cur.version_token != f["version"]:
                raise BucketTxnError(Skip.NOT_IN_PLAN, f"{f['path']}: changed since its backup; run left as it was")
        newest = max((o.mtime for o in now_objs.values()), default=0.0)
        if newest > _now() - quiet_period:
            raise BucketTxnError(Skip.ACTIVE, f"run {rp.run}: objects written {int(_now() - newest)} s ago; "
                                 "a run being written is left alone")
        if not bucket_lease.still_held(lock_path):  # another worker took the run over: stop here
            raise BucketTxnError(Skip.LOCKED, f"run {rp.run}: its lock was taken over; left as it was")
        journal.step("deleting")  # the destructive step is preceded by its record (backups verified)
        faults.hit("bucket.before_delete")
        _delete_all(rfs, [rfs.path(f["path"]) for f in files],
                    versions={rfs.path(f["path"]): f["version"] for f in files})
        faults.hit("bucket.after_delete")
        verification = _verify(rfs, vault, rp.run, files, listing)
        out.status = Outcome.VERIFIED
        out.bytes_after = manifest["bytes_after"]
        out.removed_files = [f["path"] for f in files]
        out.verification = verification
        # done: the journal and the lock go in one batch (journal first in it: a crash between the
        # two leaves only a stale lock, which recovery drops)
        ours = _unlock_versions(lock_path)
        rfs.ops.delete([journal.path] + ([lock_path] if ours else []), versions=ours)
        return out
    except faults.InjectedFault:
        raise
    except (BucketTxnError, RemoteError) as e:
        code = getattr(e, "code", "store_error")
        out.reason = f"{code}: {e}"
        try:
            if journal is not None:
                # recorded first: a recovery that finds this journal must finish the rollback,
                # not roll the reduction forward
                journal.step("rolling_back")
                _rollback(rfs, vault, journal.doc)
                _must_delete(rfs, [journal.path])
            ours = _unlock_versions(lock_path)
            if ours:
                _must_delete(rfs, [lock_path], versions=ours)
            if code in (Skip.NOT_IN_PLAN, Skip.ACTIVE, Skip.LOCKED):
                out.status, out.code = Outcome.SKIPPED, code
            else:
                out.status, out.code = Outcome.ROLLED_BACK, Failure.ERROR
        except (BucketTxnError, RemoteError, OSError) as e2:
            out.status, out.code = Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE
            out.reason += f"; rollback incomplete ({e2}); the journal is kept and the next start settles it"
        return out
    finally:
        _ACTIVE_OPS.discard(op_id)
        out.duration_s = time.monotonic() - t0


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
    raise BucketTxnError("delete_failed", f"{len(todo)} key(s) could not be deleted, e.g. {todo[0]}: "
                         f"{failed[todo[0]]}")


def _run_listing(rfs: RemoteFS, vault: BucketVault, run: str) -> Dict[str, ObjectInfo]:
    """One listing of the run's prefix (keys relative to the logdir), the state and vault left out."""
    pre = _run_prefix(run)
    objs = rfs.list_tree(pre.rstrip("/"))
    vault_rel = vault.root[len(rfs.root) + 1:] + "/" if vault.root.startswith(rfs.root + "/") else None
    return {k: o for k, o in objs.items()
            if not k.startswith(STATE_DIR_NAME + "/") and not (vault_rel and k.startswith(vault_rel))}


def _verify(rfs: RemoteFS, vault: BucketVault, run: str, files: List[dict],
            listing: Dict[str, ObjectInfo]) -> dict:
    """A fresh listing: removed keys gone, every other object of the run unchanged."""
    pre = _run_prefix(run)
    now_objs = _run_listing(rfs, vault, run)
    removed = {f["path"] for f in files}
    still = [p for p in removed if p in now_objs]
    if still:
        raise BucketTxnError("verify_failed", f"{still[0]}: still present after delete")
    changed = []
    kept = 0
    for rel, o in listing.items():
        if not rel.startswith(pre) or rel in removed or rel.startswith(STATE_DIR_NAME + "/"):
            continue
        cur = now_objs.get(rel)
        if cur is None or cur.version_token != o.version_token:
            changed.append(rel)
        kept += 1
    if changed:
        raise BucketTxnError("verify_failed", f"{changed[0]}: changed during the reduction")
    events = sum(1 for rel in listing if rel.startswith(pre) and "tfevents" in rel.rsplit("/", 1)[-1])
    return {"method": "listing", "removed": len(removed), "unchanged_objects": kept,
            "event_files_unchanged": events,
            "checked_backends": ["store listing: versions of every kept object (ETag/generation) unchanged"],
            "not_checked": ["TensorBoard's Rust data server cannot reach this endpoint (it reads gs:// "
                            "from Google's endpoint only)"]}


def _rollback(rfs: RemoteFS, vault: BucketVault, doc: dict) -> None:
    """Put every removed original back from its verified backup, then drop the backup copies."""
    put_back = []
    deleted = any(isinstance(s, list) and s and s[0] == "deleting" for s in doc.get("steps", []))
    for f in doc.get("files", []):
        orig = rfs.path(f["path"])
        if rfs.ops.head(orig) is None:
            if not deleted:
                continue  # gone before this operation deleted anything (another worker reduced the run)
            if not f.get("backup_checksums"):
                raise BucketTxnError("backup_missing", f"{f['path']}: gone and no verified backup of it")
            res = rfs.ops.copy(f["backup"], orig, if_absent=True)
            if same_content(res.checksums, f["checksums"]) is False:
                raise BucketTxnError("restore_mismatch", f"{f['path']}: restored copy does not match")
            put_back.append(f["path"])
    # Originals are all in place: the copies in the vault are redundant now (the manifest first,
    # so no restorable operation ever points at a missing backup).
    _must_delete(rfs, [vault.manifest(doc["op"])])
    _must_delete(rfs, [f["backup"] for f in doc.get("files", [])])


def _must_delete(rfs: RemoteFS, paths: List[str], versions: Optional[Dict[str, str]] = None) -> None:
    failed = rfs.ops.delete(paths, versions=versions)
    if failed:
        key = sorted(failed)[0]
        raise BucketTxnError(Failure.ROLLBACK_INCOMPLETE, f"{key}: could not be deleted ({failed[key]})")


def recover(rfs: RemoteFS, vault: BucketVault) -> List[RecoveryOutcome]:
    """Settle unfinished bucket operations of this logdir, from any machine: before the delete
    step, roll back; from the delete step on (backups verified), finish the reduction."""
    st = _State(rfs)
    out: List[RecoveryOutcome] = []
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
        if doc.get("corrupt") or "run" not in doc:
            out.append(RecoveryOutcome(op_id=rel, run="?", action=Recovery.FAILED,
                                       detail=f"{path}: unreadable journal left in place"))
            continue
        run, op_id = doc["run"], doc.get("op", rel[:-5])
        lock_path = rfs.path(_lock_key(run))
        lock, _ = st.read(lock_path)
        if lock and lock.get("op") == op_id and not _owner_gone(lock, st):
            out.append(RecoveryOutcome(op_id=op_id, run=run, action=Recovery.SKIPPED_LIVE,
                                       detail="its owner is still running"))
            continue
        # untrusted input: only keys of this logdir and this vault are acted on
        for f in doc.get("files", []):
            if not isinstance(f.get("path"), str) or not str(f.get("backup", "")).startswith(vault.root + "/blobs/"):
                out.append(RecoveryOutcome(op_id=op_id, run=run, action=Recovery.FAILED,
                                           detail="journal names keys outside the logdir or vault; left alone"))
                break
            rfs.path(f["path"])  # raises on '..' and friends
        else:
            try:
                if doc.get("step") in ("deleting", "done") and all(f.get("backup_checksums") for f in doc["files"]):
                    present = _run_listing(rfs, vault, run)
                    todo = [f for f in doc["files"] if f["path"] in present]
                    changed = [f["path"] for f in todo if present[f["path"]].version_token != f["version"]]
                    if changed:  # new bytes under a planned key have no backup: never delete them
                        raise BucketTxnError(Failure.ERROR, f"{changed[0]}: rewritten since its backup; left as is")
                    _delete_all(rfs, [rfs.path(f["path"]) for f in todo],
                                versions={rfs.path(f["path"]): f["version"] for f in todo})
                    action, detail = Recovery.COMPLETED, "backups were verified; the reduction was finished"
                else:
                    _rollback(rfs, vault, doc)
                    action, detail = Recovery.ROLLED_BACK, f"stopped at step {doc.get('step')}; run left as it was"
                _must_delete(rfs, [path])
                _must_delete(rfs, [lock_path])
                out.append(RecoveryOutcome(op_id=op_id, run=run, action=action, detail=detail))
            except (BucketTxnError, RemoteError) as e:
                out.append(RecoveryOutcome(op_id=op_id, run=run, action=Recovery.FAILED, detail=str(e)))
    return out


def manifests(rfs: RemoteFS, vault: BucketVault) -> List[dict]:
    """Every manifest in the vault, newest first."""
    st = _State(rfs)
    prefix = vault.root + "/manifests"
    rfs.fs.invalidate_cache()  # fsspec's listing cache may predate this process's own writes
    try:
        found = rfs.fs.find(prefix)
        rfs.stats.add("list")
    except FileNotFoundError:
        return []
    out = []
    for p in found:
        doc, version = st.read(p)
        if doc and not doc.get("corrupt"):
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
    st = _State(rfs)
    try:
        lock_path, _ = _lock(st, run, manifest["op"])
    except BucketTxnError as e:
        out.status, out.reason, out.code = Outcome.SKIPPED, str(e), Skip.LOCKED
        return out
    try:
        conflicts = []
        for f in manifest["files"]:
            if not str(f.get("backup", "")).startswith(vault.root + "/blobs/"):
                raise BucketTxnError("untrusted_manifest", "manifest names a backup outside the vault")
            orig = rfs.path(f["path"])
            try:
                res = rfs.ops.copy(f["backup"], orig, if_absent=True)
            except RemoteError as e:
                if e.code == ALREADY_EXISTS:
                    conflicts.append(f["path"])
                    continue
                raise
            if same_content(res.checksums, f["checksums"]) is False:
                raise BucketTxnError("restore_mismatch", f"{f['path']}: restored copy does not match the original")
            out.created_files.append(f["path"])
            out.bytes_after += f["size"]
        manifest = {k: v for k, v in manifest.items() if not k.startswith("_")}
        manifest["status"] = "restored"
        manifest["restored_at"] = _now()
        manifest["restored_with"] = who()
        cur = rfs.ops.head(vault.manifest(manifest["op"]))
        st.update(vault.manifest(manifest["op"]), manifest, cur.version_token if cur else "")
        out.status = Outcome.RESTORED
        if conflicts:
            out.reason = f"{len(conflicts)} file(s) exist again and were left as they are, e.g. {conflicts[0]}"
        return out
    except (BucketTxnError, RemoteError) as e:
        out.reason, out.code = f"{getattr(e, 'code', 'store_error')}: {e}", Failure.RESTORE_BLOCKED
        return out
    finally:
        ours = _unlock_versions(lock_path)
        if ours:
            rfs.ops.delete([lock_path], versions=ours)


def purge(rfs: RemoteFS, vault: BucketVault, *, older_than: Optional[float] = None,
          run: Optional[str] = None, op: Optional[str] = None, yes: bool = False) -> dict:
    """Delete the backups of verified or restored bucket operations (without ``yes``: list them).
    The manifest is marked purged before its blobs go, so a restore never points at them."""
    now = _now()
    chosen = [m for m in manifests(rfs, vault)
              if m.get("status") in ("verified", "restored") and not m.get("purged")
              and (op is None or m.get("op") == op) and (run is None or m.get("run") == run)
              and (older_than is None or m.get("created", now) <= now - older_than)]
    freed = sum(f["size"] for m in chosen for f in m["files"])
    ops = [{"op_id": m["op"], "run": m["run"], "bytes": sum(f["size"] for f in m["files"]),
            "restored": m["status"] == "restored"} for m in chosen]
    if yes:
        st = _State(rfs)
        for m in chosen:
            if not all(str(f.get("backup", "")).startswith(vault.root + "/blobs/") for f in m["files"]):
                raise BucketTxnError("untrusted_manifest", f"{m['_path']}: names a backup outside the vault")
            doc = {k: v for k, v in m.items() if not k.startswith("_")}
            doc["purged"] = now
            st.update(m["_path"], doc, m["_version"])
            _must_delete(rfs, [f["backup"] for f in m["files"]])
    return {"dry_run": not yes, "ops": ops, "freed_bytes": freed}


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
    absent from the logdir (or was put back by someone, which is reported)."""
    out = []
    for m in manifests(rfs, vault):
        if m.get("status") != "verified" or m.get("purged"):
            continue
        if (op is not None and m.get("op") != op) or (run is not None and m.get("run") != run):
            continue
        bad, absent, back = [], 0, []
        listing = _run_listing(rfs, vault, m["run"])
        for f in m.get("files", []):
            if not str(f.get("backup", "")).startswith(vault.root + "/blobs/"):
                raise BucketTxnError("untrusted_manifest", f"{m['_path']}: names a backup outside the vault")
            info = rfs.ops.head(f["backup"])
            if info is None or info.size != f.get("size") or \
                    not same_content(content_checksums(info), f.get("checksums") or {}):
                bad.append(f["path"])  # missing, resized, changed, or no checksum to vouch for it
            if f["path"] in listing:
                back.append(f["path"])
            else:
                absent += 1
        checks = [
            {"name": "backups", "ok": not bad, "detail": f"{len(m.get('files', [])) - len(bad)} of "
             f"{len(m.get('files', []))} backups in the vault match the store's checksums of the originals"},
            {"name": "removed", "ok": True, "detail": f"{absent} removed file(s) still absent from the run"
             + (f"; {len(back)} exist again (written since), e.g. {back[0]}" if back else "")},
        ]
        out.append({"op_id": m["op"], "run": m["run"], "backups_ok": not bad, "damaged_backups": bad,
                    "verification": {"ok": not bad, "checks": checks}, "ok": not bad})
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
                    "user": m.get("user"), "host": m.get("host")})
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
    ops, vault_bytes = [], 0
    for m in manifests(rfs, vault):
        size = sum(int(f.get("size") or 0) for f in m.get("files", []))
        if not m.get("purged"):
            vault_bytes += size
        ops.append({"op_id": m.get("op"), "kind": "reduce", "run": m.get("run"), "outcome": Outcome.VERIFIED,
                    "reason": None, "bytes_before": m.get("bytes_before"), "bytes_after": m.get("bytes_after"),
                    "finished_at": m.get("created"), "backup_purged": bool(m.get("purged")),
                    "restored_by": "a restore" if m.get("status") == "restored" else None})
    return {"logdir": rfs.url, "state_dir": rfs.url.rstrip("/") + "/" + STATE_DIR_NAME,
            "vaults": [f"{rfs.url.split('://', 1)[0]}://{vault.root}"], "vault_bytes": vault_bytes,
            "unfinished_operations": pending, "operations": ops, "ledger": None}
