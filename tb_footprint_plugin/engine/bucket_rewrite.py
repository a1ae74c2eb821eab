"""Rewrite and compress files of a run in object storage: an event-file rewrite, a trace slim, a gzip.

A bucket has no rename, so one run is one transaction of these steps, each destructive one
preceded by its journal record (the journal and lock objects of ``engine.bucket_state``, the
steps of ``engine.bucket_steps``):

1. **backup** of every original the plan removes or replaces, by a server-side copy conditional
   on the version the plan saw, its integrity the store's checksum (originals that are replaced
   get a vault name no reader matches: TensorBoard never sees a backup as a run);
2. **stage** in local scratch (``storage.scratch``: named after this process, swept when it is
   gone): the originals the transform needs are streamed down in ranged reads (chunks, never
   whole in memory), checked against the store's checksum, transformed by the same code as on
   disk (``engine.verification.stage_file``) and verified by the same code as on disk: TensorBoard's
   readers and dashboard routes over the original and reduced run (``engine.checks.compare_views``);
3. **upload** of each new file under a temporary key in the vault (streamed: multipart on S3,
   resumable on GCS, blocks on Azure), **read back through TensorBoard's own reader over the
   same URL scheme** (its gfile: boto3 for ``s3://``, fsspec for ``gs://``/``az://``): the bytes
   must hash to the staged file's sha256, and an event file must yield the staged record count
   through TensorBoard's ``RawEventFileLoader``;
4. a fresh listing: nothing of the run changed since the backup, nothing written within the
   quiet period; then the **commit record** (``swapping``);
5. **swap**: each new object copied over its original only while the original is still the
   version that was backed up (If-Match / ifGenerationMatch / Azure ETag condition), a
   compressed copy created only where nothing exists (create-only), removed originals deleted
   under their version, the temporary keys dropped: the copy + delete swap the store's
   capabilities choose (``engine.swap_strategy``); a store whose strategy is another (a rename)
   or that cannot guard the swap by versions is refused before anything is written;
6. a final listing proves the run holds exactly the staged objects and every other object is
   unchanged.

Before the commit record a crash or failure rolls back (originals untouched, backups and
temporary keys dropped); after it, recovery finishes the swap (every step is idempotent); a
precondition failure during the swap rolls the run back from its verified backups.

The steps are ``ObjectReduce``'s methods, run in the order of ``engine.txn.STEPS`` by the one
driver ``engine.txn.run``, which alone writes the commit and rollback records before what they
guard, honours a cancel and hits the failpoints.

Why one module: the transaction's steps and the staging, upload and read-back they run share
one run entry (its files' keys, versions, temporary keys and staged checksums) that each step
fills for the next; apart, the entry's shape would be written in one module and read in another.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine import faults, txn
from tb_footprint_plugin.engine.bucket_objects import HEADERS
from tb_footprint_plugin.engine.bucket_op_records import create_manifest
from tb_footprint_plugin.engine.bucket_blobs import (
    adding,
    backup_entries,
    copy_from_blobs,
    is_blob_entry,
    missing_blobs,
)
from tb_footprint_plugin.engine.history import append_kept, append_rolled_back, kept_line, rolled_back_line
from tb_footprint_plugin.engine.bucket_state import (
    ACTIVE_OPS,
    BucketState,
    BucketTxnError,
    BucketVault,
    failure_code,
    listing_of_runs,
    lock_failure_code,
    lock_refused,
    lock_run,
    must_close,
    must_delete,
    new_journal,
    now_s,
    run_prefix,
    STORE_FAILURES,
    unlock_versions,
    written_recently,
)
from tb_footprint_plugin.engine.bucket_steps import (
    backup_object,
    file_entry,
    finish_op,
    in_place,
    manifest_doc,
    renamed,
    rollback_entry,
    rollback_incomplete,
    rolled_back,
    verify_batch,
)
from tb_footprint_plugin.engine.bucket_verified import listed, removed_files_check, rewrite_verification
from tb_footprint_plugin.engine.checks import compare_views
from tb_footprint_plugin.engine.context import CancelToken, RunOutcome, TransactionError, new_op_id, reason_of
from tb_footprint_plugin.engine.recovery_rules import CANCELLED_REASON, kept_words
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.ledger_objects import write_waiting
from tb_footprint_plugin.engine.swap_strategy import COPY_DELETE, refusal, swap_strategy
from tb_footprint_plugin.engine.verification import stage_file, stage_line, stop_of
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.remote import ObjectInfo, content_checksums
from tb_footprint_plugin.storage.store import Capabilities
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.verify import Stopped

#: Transactions of one process on several threads (``bucket_reduce.reduce_runs``'s ``jobs``) add
#: to a local vault of blobs one at a time (one ``BlobStore`` instance, its packs appended), and
#: read their uploads back through TensorBoard's S3 reader one at a time (it makes a boto3 client on
#: the default session for each read, which is not safe from several threads at once)
_BLOB_ADDS = threading.Lock()
_S3_READS = threading.Lock()


class _BotoOnce:
    """TensorBoard's gfile module's ``boto3`` while a run's read-back holds ``_S3_READS``: its S3
    reader calls ``boto3.resource``/``boto3.client`` for every read (a client built each time on
    boto3's default session, ~15-30 ms of CPU: 7 for one file's two passes, a chunk, the end of
    the object and its head for each). For the thread reading back, a call with the same
    arguments gets the one the run's first call made (``made``, one run's); every other thread
    (TensorBoard's own readers, in its process) gets boto3's own, as before. The reader's code
    runs as it is: the same requests, from clients boto3's default session made with the same
    arguments."""

    def __init__(self, real, made: dict, owner: int):
        self._real, self._made, self._owner = real, made, owner

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def __bool__(self) -> bool:
        return True

    def client(self, *args, **kwargs):
        return self._once("client", args, kwargs)

    def resource(self, *args, **kwargs):
        return self._once("resource", args, kwargs)

    def _once(self, kind: str, args: tuple, kwargs: dict):
        make = getattr(self._real, kind)
        if threading.get_ident() != self._owner:
            return make(*args, **kwargs)
        key = repr((kind, args, sorted(kwargs.items())))
        if key not in self._made:
            self._made[key] = make(*args, **kwargs)
        return self._made[key]


@contextlib.contextmanager
def _tensorboard_s3_reads(made: dict):
    """One read-back through TensorBoard's S3 reader at a time in the process (``_S3_READS``), its
    boto3 clients and resources those of the run's earlier read-backs (``_BotoOnce``, ``made``)."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    with _S3_READS:
        real = getattr(gfile, "boto3", None)
        if not real:  # no boto3: the reader says so, as it did
            yield
            return
        gfile.boto3 = _BotoOnce(real, made, threading.get_ident())
        try:
            yield
        finally:
            gfile.boto3 = real

#: Failures of a step that leave the run as it was (rolled back), never a stray exception.
_STEP_ERRORS = (BucketTxnError, *STORE_FAILURES, TransactionError, OSError, ValueError, RuntimeError)


def replaced_backup(vault: BucketVault, op_id: str, i: int) -> str:
    """Backup key of a replaced original: no 'tfevents' or trace name, so no reader lists it."""
    return f"{vault.root}/blobs/{op_id}/replaced/{i:05d}.orig"


def temp_key(vault: BucketVault, op_id: str, i: int) -> str:
    """Temporary key of a new object before its swap (a name no reader matches)."""
    return f"{vault.root}/tmp/{op_id}/{i:05d}.new"


def logdir_capabilities(st: BucketState) -> Capabilities:
    """What the bucket logdir's own store declares: the store its runs' objects are swapped on
    (no request is made)."""
    return st.logdir_store().capabilities


def reduce_rewrite_run(ostore: ObjectStore, vault: BucketVault, rp, listing: Dict[str, ObjectInfo],
                       quiet_period: float, policy: Optional[str],
                       verify_backends: Tuple[str, ...] = ("python", "rust"),
                       closed_files: Optional[Mapping[str, float]] = None,
                       cancel: Optional[CancelToken] = None,
                       progress: Optional[Callable[[str, float], None]] = None,
                       readers_root: Optional[str] = None) -> RunOutcome:
    """One run whose plan rewrites or compresses files, as one bucket transaction (module doc),
    ``ObjectReduce`` run by ``engine.txn.run``; ``closed_files``: keys the caller's own job closed
    (the quiet period skips them while unchanged).
    ``cancel`` (its timeout and the batch's cancel): checked between steps up to the commit record,
    as on a disk; past it the run is rolled back (``Cancelled``: "timed out before the commit point",
    ``Failure.ERROR``, the disk's code), after it the swap finishes. ``progress(step, fraction)``:
    the disk's steps, ``backup`` (to 0.4), ``stage`` (0.6), ``verify`` (0.65, before the readers,
    the read-back and the listing check). ``readers_root``: the scratch root the caller set for
    the readers of every transaction it runs at once (else each sets its own while it stages)."""
    t = ObjectReduce(ostore, vault, rp, listing, quiet_period, policy, verify_backends, closed_files,
                     cancel or CancelToken(), readers_root)
    if t.planned() and t.take_lock():
        txn.run(t, t.cancel, progress)
    return t.out


class ObjectReduce(txn.Txn):
    """The steps of one bucket run's reduce (the module doc's 1-6) for ``engine.txn.run``:

    - **journal**: the journal object (step ``planned``), its run entry naming every file;
    - **backup**: server-side copies (or blobs of a local vault, step ``backed_up``), holding the
      vault's shared ``adding`` lock until the manifest exists (a purge's forget waits while only
      this journal names the blobs' digests);
    - **stage**: the originals streamed down, transformed and checked by TensorBoard's readers in
      local scratch (step ``staged``: progress, a long rewrite's lock is not taken for a dead one's);
    - **transform**: each new file uploaded under its temporary key and read back (step
      ``uploaded``; failpoint ``reduce.upload``);
    - **verify**: the manifest written (a bucket's swap is several requests: recovery rolls it
      forward from ``swapping``, so the manifest exists before), dated as the commit record;
    - the **last look**: a fresh listing (unchanged since the backup, nothing written within the
      quiet period), the lock still ours, the blobs still there; then the commit record
      (``swapping``, the driver's);
    - **swap**: ``finish_op``; **commit**: the final listing check, the journal closed with the lock.

    The lock is taken before the transaction starts (``take_lock``): a refusal is a skip with
    nothing to roll back, and anything else a lock raises propagates as it always did. Before it,
    ``planned`` asks the swap strategy of the logdir's store (``engine.swap_strategy``): this
    engine's swap is ``swaps``, guarded by versions; a store that says otherwise is refused."""

    errors = _STEP_ERRORS
    #: the swaps this engine makes (``SwapStrategy.replace``): each new object copied over its
    #: original under the backed-up version, then the removed ones deleted under theirs (``finish_op``)
    swaps = (COPY_DELETE,)
    rollback_errors = (BucketTxnError, *STORE_FAILURES, OSError)

    def __init__(self, ostore: ObjectStore, vault: BucketVault, rp, listing: Dict[str, ObjectInfo],
                 quiet_period: float, policy: Optional[str], verify_backends: Tuple[str, ...],
                 closed_files: Optional[Mapping[str, float]], cancel: CancelToken,
                 readers_root: Optional[str]) -> None:
        self.t0 = time.monotonic()
        self.ostore, self.vault, self.rp, self.listing = ostore, vault, rp, listing
        self.quiet_period, self.policy, self.backends = quiet_period, policy, verify_backends
        self.closed_files, self.cancel, self.readers_root = closed_files, cancel, readers_root
        self.out = RunOutcome(run=rp.run, status=Outcome.SKIPPED, bytes_before=rp.bytes_before,
                              bytes_after=rp.bytes_before)
        self.op_id = new_op_id()
        self.files: List[dict] = []
        self.st = BucketState(ostore)
        # how this run's objects are swapped: what the logdir's store declares decides (``planned``)
        self.strategy = swap_strategy(logdir_capabilities(self.st))
        self.lock = None
        self.jnl = None
        self.en: dict = {}
        self.local: dict = {}
        self.code = None
        self.bytes_after = rp.bytes_before
        self.committed_at = 0.0
        self.verified: dict = {}  # the manifest's verification (``verify``), said again by the outcome
        self.now_objs: Dict[str, ObjectInfo] = {}
        # entered by a step, left once the step that needs them is done (or on the way out):
        # the scratch space (stage to transform), then the vault's shared adding lock (backup to verify)
        self._scratch = contextlib.ExitStack()
        self._adding = contextlib.ExitStack()

    def failpoint(self, step: str) -> Optional[str]:
        """The disk's names, but ``reduce.upload`` after the upload and none after the commit
        (the bucket's commit record is ``swapping``; nothing is hit once the journal closes)."""
        if step == "transform":
            return "reduce.upload"
        if step == "commit":
            return None
        return super().failpoint(step)

    def planned(self) -> bool:
        """Each file of the plan as the journal names it; False (the outcome a skip) when one is
        gone since the plan or a compressed copy's name is taken already, or (a failure,
        ``Failure.REFUSED``) when the store's swap strategy is not one this engine makes."""
        vault, out = self.vault, self.out
        why = refusal(self.strategy, self.swaps, needs_version_check=True, where=self.ostore.url)
        if why:
            out.status, out.reason, out.code = Outcome.FAILED, why, Failure.REFUSED
            return False
        for i, a in enumerate(x for x in self.rp.actions if x.kind in ("delete", "compress", "rewrite")):
            o = self.listing.get(a.path)
            if o is None:
                out.reason, out.code = f"{a.path}: gone since the plan", Skip.NOT_IN_PLAN
                return False
            f = file_entry(vault, self.op_id, a, o)
            if a.kind in ("compress", "rewrite"):
                f.update(tmp=temp_key(vault, self.op_id, i), final=a.new_path or a.path, index=i)
                if not is_blob_entry(f):
                    f["backup"] = replaced_backup(vault, self.op_id, i)
                if renamed(f) and f["final"] in self.listing:
                    out.reason, out.code = f"{f['final']}: exists already; run left as it is", Skip.NOT_IN_PLAN
                    return False
            self.files.append(f)
        return True

    def take_lock(self) -> bool:
        """The run's lock; False (the outcome says why) when another holds it or it is not taken."""
        out = self.out
        try:
            self.lock = lock_run(self.st, self.rp.run, self.op_id)
        except BucketTxnError as e:
            lock_refused(out, e)
            return False
        except STORE_FAILURES as e:
            out.status, out.reason, out.code = Outcome.FAILED, str(e), lock_failure_code(e)
            return False
        out.op_id = self.op_id
        # what the journal names; the lock object is what this operation holds
        self.en = {"run": self.rp.run, "op": self.op_id, "lock": self.lock.path, "files": self.files,
                   "bytes_before": self.rp.bytes_before}  # what recovery reports before a manifest exists
        ACTIVE_OPS.add(self.op_id)
        return True

    def journal(self, report: txn.Report) -> None:
        """The ledger's waiting start mark, then the journal object, step ``planned``; either
        refused, the run is not touched."""
        # the run's ``reducing`` mark (a shard worker's) written now, as ``bucket_batch``'s journal
        # does: it waited for the first ``verifying`` write, so a kill before that left no entry
        write_waiting()
        self.jnl = new_journal(self.st, self.op_id, {
            "op": self.op_id, "logdir": self.ostore.url, "step": Rec.PLANNED, "created": now_s(),
            "vault": self.vault.root, "runs": [self.en], "logdir_objects": len(self.listing)})

    def backup(self, report: txn.Report) -> None:
        """Every original into the vault, a cancel looked at before each copy."""
        ostore, vault, en = self.ostore, self.vault, self.en
        # held until the manifest exists (as ``bucket_batch`` does): a purge's forget waits while
        # only this journal names the blobs' digests, and once it goes on the manifest names them
        self._adding.enter_context(adding(vault))
        with _BLOB_ADDS if vault.blobs is not None else contextlib.nullcontext():
            unmade = backup_entries(ostore, vault, [en])
        if unmade:
            raise unmade[self.rp.run]
        if vault.blobs is not None:
            faults.hit("reduce.blobs_added")
        total = sum(f["size"] for f in self.files) or 1
        done = 0
        for f in self.files:
            self.cancel.check()
            if not is_blob_entry(f):
                backup_object(ostore, f)
            faults.hit("reduce.backup_copy")
            done += f["size"]
            report("backup", 0.4 * done / total)
        if vault.blobs is not None:
            self.jnl.step(Rec.BACKED_UP, runs=[en])  # the blobs' digests

    def stage(self, report: txn.Report) -> None:
        """The new files in local scratch, verified by TensorBoard's readers; step ``staged``. A
        cancel or the run's timeout is looked at inside the readers' work (``stop_of``): they end
        within a moment and the step raises the token's ``Cancelled``, as ``LocalReduce.verify``."""
        work = self._scratch.enter_context(scratch.scratch("bucket", scratch.system_root()))
        try:
            self.local = _stage_run(self.ostore, self.rp, self.files, self.listing, work, self.backends, self.vault,
                                    report, readers_root=self.readers_root, should_stop=stop_of(self.cancel))
        except Stopped:
            self.cancel.check()  # Cancelled: "cancelled" or "timed out before the commit point"
            raise  # not reached: only the cancel stops a verification
        self.jnl.step(Rec.STAGED, runs=[self.en])  # progress: a long rewrite's lock is not taken for a dead one's

    def transform(self, report: txn.Report) -> None:
        """Each new file uploaded under its temporary key, with its original's Content-Type and
        user metadata (``_original_headers``), and read back; step ``uploaded``."""
        made: dict = {}  # TensorBoard's S3 reader's boto3 clients, one of each for the run's files
        for f in self.files:
            if f.get("tmp"):
                self.cancel.check()
                _upload_and_read_back(self.ostore, f, self.local["staged"][f["path"]],
                                      _new_headers(f, _original_headers(self.ostore, f)), made)
        self.jnl.step(Rec.UPLOADED, runs=[self.en])  # the new objects, their checksums and read-back recorded

    def verify(self, report: txn.Report) -> None:
        """The scratch space left, then the manifest written (the adding lock left after it)."""
        self._scratch.close()
        rp, files = self.rp, self.files
        self.bytes_after = rp.bytes_before - sum(f["size"] for f in files) + \
            sum(f["new_size"] for f in files if f.get("tmp"))
        # dated with the time the commit record then carries (``finished_at``, as on a disk)
        self.committed_at = now_s()
        self.verified = rewrite_verification(self.local)  # the outcome says these checks too
        create_manifest(self.ostore, self.vault, self.op_id, manifest_doc(
            self.ostore, self.en, rp, self.policy, self.bytes_after, self.vault, self.jnl.doc,
            committed_at=self.committed_at, verification=self.verified))
        self._adding.close()

    def last_look(self) -> None:
        """A fresh listing of the run: nothing changed since its backup, no compressed copy's name
        taken, nothing written within the quiet period, the lock still ours, the blobs there."""
        rp = self.rp
        now_objs = self.now_objs = listing_of_runs(self.ostore, self.vault, [rp.run], len(self.listing))
        for f in self.files:
            cur = now_objs.get(f["path"])
            if cur is None or cur.version_token != f["version"]:
                raise BucketTxnError(Failure.CHANGED_SINCE_BACKUP,
                                     f"{f['path']}: changed since its backup; run left as it was")
            if renamed(f) and f["final"] in now_objs:
                raise BucketTxnError(Skip.NOT_IN_PLAN, f"{f['final']}: written since the plan; run left as it was")
        active = written_recently(now_objs, rp.run, self.quiet_period, self.closed_files)
        if active:
            raise BucketTxnError(Skip.ACTIVE, active)
        if not self.lock.still_held():  # another worker took the run over: stop before the swap
            raise BucketTxnError(Skip.LOCKED, f"run {rp.run}: its lock was taken over; left as it was")
        missing_blobs(self.vault, self.files)  # the last look: the swap replaces what only these blobs hold

    def record(self, step: str) -> None:
        """``swapping`` (the commit record: backups verified, new objects staged and read back),
        dated as the manifest; ``rolling_back``."""
        if step == "swap":
            self.jnl.step(Rec.SWAPPING, at=self.committed_at, runs=[self.en])
        else:
            self.jnl.step(Rec.ROLLING_BACK, runs=[self.en])

    def swap(self, report: txn.Report) -> None:
        """Each new object copied over its original at the backed-up version, the removed ones
        deleted (the copy + delete swap ``planned`` found the store's strategy to be)."""
        finish_op(self.ostore, self.vault, self.jnl.doc, present=self.now_objs)

    def commit(self, report: txn.Report) -> None:
        """The final listing proves the run holds exactly the staged objects; the journal closes
        with the lock object."""
        rp, files, local, out = self.rp, self.files, self.local, self.out
        v = verify_batch(self.ostore, self.vault, [self.en], self.listing)[rp.run]
        if not v["ok"]:
            raise BucketTxnError(Failure.ERROR, v["error"])  # as a failed verification on a disk
        v = listed(v, self.verified["checks"])
        v["checked_backends"] = local["backends"] + v["checked_backends"]
        for k in ("expectations", "record_substitutes"):
            if local.get(k):
                v[k] = local[k]
        out.verification = v
        out.status = Outcome.VERIFIED
        out.bytes_after = self.bytes_after
        out.removed_files = [f["path"] for f in files if not in_place(f)]
        out.created_files = [f["final"] for f in files if f.get("tmp")]
        if self.vault.blobs is not None:
            # its witness before its journal goes (a kill in between: the start that finishes it
            # writes it, once), never after: a command's later kill left the runs it had closed
            # unwitnessed (review R27 F4); once a manifest object is gone, the witness still names
            # its operation and no forget lets a blob go (review R26 F1)
            said = append_kept(BucketState.of(self.ostore).logdir_store(), [kept_line(self.op_id, "reduce", rp.run)])
            if said:
                out.reason = f"{out.reason}; {said}" if out.reason else said
        ours = unlock_versions(self.lock)
        self.jnl.close(also=[self.lock.path] if ours else [], versions=ours)

    def journaled(self) -> bool:
        return self.jnl is not None

    def committed(self) -> bool:
        return self.jnl is not None and self.jnl.committed()

    def failed(self, error: BaseException) -> None:
        self.code = failure_code(error)
        self.out.reason = reason_of(error)
        if self.cancel.cancelled:  # the batch's cancel (not a timeout), said as a disk's transaction says it
            self.out.reason, self.code = CANCELLED_REASON, Failure.INTERRUPTED

    def rollback(self, committed: bool) -> None:
        """From the verified backups (``deleted``: past the commit record), the change log's
        ``rolled_back`` line with the outcome's code, as a disk's rollback writes it
        (``engine.history``), the journal closed, the lock object deleted at its version."""
        journaled = self.jnl is not None
        if journaled:
            kept = rollback_entry(self.ostore, self.vault, self.en, deleted=committed, code=self.code, out=self.out)
            rolled_back(self.out, self.code)
            if kept:  # its manifest names the kept backups (``rollback_entry``): no rolled-back line
                self.out.reason = f"{self.out.reason}; {kept_words(kept)}"
            else:
                # its manifest is gone with its backups: the change log says it was rolled back, before
                # the journal goes (a kill in between: recovery writes it, never twice)
                append_rolled_back(BucketState.of(self.ostore).logdir_store(),
                                   [rolled_back_line(self.out, self.op_id, self.policy)], [self.out])
            must_close(self.jnl)
        ours = unlock_versions(self.lock)
        if ours:
            must_delete(self.ostore, [self.lock.path], versions=ours)
        rolled_back(self.out, self.code)

    def incomplete(self, error: BaseException) -> None:
        rollback_incomplete(self.out, error)

    def unwind(self) -> None:
        self._scratch.close()
        self._adding.close()

    def end(self) -> None:
        ACTIVE_OPS.discard(self.op_id)
        self.lock.release()  # an ended operation's lock is not renewed (one kept is stale now)
        self.out.duration_s = round(time.monotonic() - self.t0, 3)


def _download(ostore: ObjectStore, rel: str, o: ObjectInfo, dest: str, version: Optional[str] = None) -> str:
    """Stream an object to a local file in ranged reads; return its sha256. The bytes must match
    the store's checksum of the version that was backed up (when the store gives one)."""
    h, md5 = hashlib.sha256(), hashlib.md5()
    reader = BucketState.of(ostore).open_read(ostore.path(rel), o.size)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as fo:
        while True:
            b = reader.read(CHUNK)
            if not b:
                break
            h.update(b)
            md5.update(b)
            fo.write(b)
    got = base64.b64encode(md5.digest()).decode("ascii")
    want = content_checksums(o).get("md5")
    if os.path.getsize(dest) != o.size or (want and want != got):
        raise BucketTxnError(Failure.CHANGED_SINCE_BACKUP, f"{rel}: changed while it was read; run left as it was")
    return h.hexdigest()


def _stage_run(ostore: ObjectStore, rp, files: List[dict], listing: Dict[str, ObjectInfo], work: str,
               backends: Tuple[str, ...], vault: Optional[BucketVault] = None,
               report: Callable[[str, float], None] = lambda step, frac: None,
               readers_root: Optional[str] = None, should_stop: Optional[Callable[[], bool]] = None) -> dict:
    """Download what the transforms read, produce each new file in ``work`` and verify the run
    as on disk (``should_stop``: the verification ends with ``verify.Stopped`` when it says yes): returns {'staged': {path: stage info + local file}, 'checks': [...], ...}. An
    original backed up into a local vault of blobs is read from there (verified while read), not
    downloaded a second time; the swap is conditional on the version it was backed up at."""
    kept = {f["path"]: f for f in files if is_blob_entry(f) and f.get("sha256")} if vault and vault.blobs else {}

    def fetch(rel: str, o: ObjectInfo, dest: str) -> str:
        if rel in kept:
            return copy_from_blobs(vault, kept[rel], dest)
        return _download(ostore, rel, o, dest)

    pre = run_prefix(rp.run)
    run_dir = os.path.join(work, "run")
    os.makedirs(run_dir, exist_ok=True)
    replaced = [f for f in files if f.get("tmp")]
    events = {k[len(pre):]: o for k, o in listing.items()
              if k.startswith(pre) and "/" not in k[len(pre):] and cat.is_event_file_name(k[len(pre):])}
    rewrites_events = any(f["path"][len(pre):] in events for f in replaced)
    local: Dict[str, str] = {}
    shas: Dict[str, str] = {}
    if rewrites_events:
        # the selection and the reader verification read the whole run's event files
        for name, o in sorted(events.items()):
            rel = pre + name
            local[rel] = os.path.join(run_dir, name)
            shas[rel] = fetch(rel, o, local[rel])
    for f in replaced:
        if f["path"] not in local:
            local[f["path"]] = os.path.join(work, "files", str(f["index"]), os.path.basename(f["path"]))
            shas[f["path"]] = fetch(f["path"], listing[f["path"]], local[f["path"]])
    actions = {a.path: a for a in rp.actions}
    staged: Dict[str, dict] = {}
    prev_root = scratch.current_root()
    if readers_root is None:
        scratch.use_root(os.path.join(work, "readers"))  # the readers' scratch space: inside ours
    try:
        for f in replaced:
            tmp = os.path.join(work, "new", f"{f['index']:05d}.tmp")
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            info = stage_file(actions[f["path"]], local[f["path"]], tmp, shas[f["path"]])
            info["local"], info["final"] = tmp, f["final"]
            staged[f["path"]] = info
            report("stage", 0.4 + 0.2 * len(staged) / len(replaced))
        report("verify", 0.65)
        write_waiting()  # the run's ``verifying`` mark now, its start mark written (``journal``) before
        checks: List[dict] = []
        res: dict = {"staged": staged, "checks": checks, "backends": []}
        if rewrites_events:
            pairs = {}
            for name in events:
                rel = pre + name
                if rel in staged:
                    pairs[name] = (local[rel], staged[rel]["local"])
                else:
                    removed = any(f["path"] == rel for f in files)
                    pairs[name] = (local[rel], None if removed else local[rel])
            modes: Dict[str, str] = {}
            for s in staged.values():
                modes.update(s.get("expectations") or {})
            substitutes = {r["sha256"]: [r["original_sha256"], r["original_size"]]
                           for s in staged.values() for r in (s.get("substituted") or ())}
            d = compare_views(os.path.join(work, "views"), pairs, modes, backends, substitutes, label=rp.run,
                              should_stop=should_stop)
            if not d.get("ok") or d.get("failed"):
                raise TransactionError("verification failed: " + "; ".join(d.get("failed", []) or ["see checks"]))
            checks += list(d.get("checks", []))
            res["backends"] = [f"TensorBoard readers ({', '.join(backends)}) over the original and reduced run, "
                               "staged locally"]
            res["expectations"] = modes
            if substitutes:
                res["record_substitutes"] = substitutes
        notes: List[str] = []
        for s in staged.values():
            checks.append({"name": s.get("transform", "compress"), "ok": True,
                           "detail": stage_line(s)})
            notes += [n for n in s.get("notes") or () if n not in notes]
        checks += [{"name": "rewrite", "ok": True, "detail": n} for n in notes]
        dels = [f for f in files if f["action"] == "delete"]
        checks += removed_files_check(files, vault.blobs.folder if kept else None)
        for line in rp.fidelity:
            checks.append({"name": "plan", "ok": True, "detail": line})
        return res
    finally:
        if readers_root is None:
            scratch.use_root(prev_root)


def _original_headers(ostore: ObjectStore, f: dict) -> Optional[dict]:
    """The Content-Type and user metadata of ``f``'s original (``bucket_objects.HEADERS``): as the
    listing (GCS, Azure) or the blob backup's read (S3) recorded them, else one head of the
    original (an S3 listing says none; a rewrite's cost, never a drop-only one's), recorded in the
    entry; an original not at its planned version is changed since its backup."""
    if f.get(HEADERS) is not None:
        return f[HEADERS]
    cur = BucketState.of(ostore).head(ostore.path(f["path"]))
    if cur is None or cur.version_token != f["version"]:
        raise BucketTxnError(Failure.CHANGED_SINCE_BACKUP, f"{f['path']}: changed since its backup; run left as it was")
    if cur.headers is not None:
        f[HEADERS] = cur.headers
    return cur.headers


def _new_headers(f: dict, headers: Optional[dict]) -> Optional[dict]:
    """What the new object of ``f`` is written with: its original's headers where it replaces it
    under its name; a compressed copy under a new name keeps its user metadata, its Content-Type
    the store's default (its bytes are gzip now, not of the original's type)."""
    if headers is None or in_place(f):
        return headers
    return {"content_type": None, "metadata": dict(headers.get("metadata") or {})}


def _upload_and_read_back(ostore: ObjectStore, f: dict, staged: dict, headers: Optional[dict] = None,
                          made: Optional[dict] = None) -> None:
    """Upload the staged file under ``f['tmp']`` (streamed), with ``headers`` (the copy over the
    original keeps them: S3, GCS and Azure copy an object's headers with its bytes), and read it
    back through TensorBoard's own reader over the store's URL scheme: same sha256, same record
    count. ``made``: the boto3 clients TensorBoard's S3 reader made for the run's earlier files
    (``_tensorboard_s3_reads``)."""
    info = BucketState.of(ostore).put_file(f["tmp"], staged["local"], headers=headers)
    if info.size != staged["size"]:
        raise BucketTxnError(Failure.STORE_ERROR, f"{f['path']}: uploaded {info.size} bytes of {staged['size']}")
    url = f"{ostore.scheme}://{f['tmp']}"
    with _tensorboard_s3_reads({} if made is None else made) if ostore.scheme == "s3" else contextlib.nullcontext():
        got = _tensorboard_sha256(url, ostore)
        n = _tensorboard_records(url) if "records_after" in staged else None
    if got != staged["sha256"]:
        raise BucketTxnError(Failure.STORE_ERROR, f"{f['path']}: the uploaded copy read back through TensorBoard "
                             "differs from the staged file")
    if "records_after" in staged:
        if n != staged["records_after"]:
            raise BucketTxnError(Failure.STORE_ERROR, f"{f['path']}: TensorBoard reads {n} records from the "
                                 f"uploaded copy, {staged['records_after']} were written")
    md5 = base64.b64encode(_md5_file(staged["local"])).decode("ascii")
    f["new_size"] = info.size
    f["new_sha256"] = staged["sha256"]
    # the store's own checksums where it gives them (S3 single part: the ETag is the MD5); the MD5
    # computed here stands in where it does not (a multipart upload), since the copy over the
    # original is a single object whose MD5 every store reports
    f["new_checksums"] = {**content_checksums(info), "md5": md5}
    f["tmp_version"] = info.version_token
    f["transform"] = staged.get("transform", "compress")


def _md5_file(path: str) -> bytes:
    h = hashlib.md5()
    with open(path, "rb") as fi:
        while True:
            b = fi.read(CHUNK)
            if not b:
                return h.digest()
            h.update(b)


def _tensorboard_sha256(url: str, ostore: ObjectStore) -> str:
    """sha256 of an object as TensorBoard's gfile reads it over the URL (streamed in chunks)."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    h = hashlib.sha256()
    n = 0
    with gfile.GFile(url, "rb") as g:
        while True:
            b = g.read(CHUNK)
            if not b:
                break
            h.update(b)
            n += len(b)
    ostore.stats.add("read", max(1, -(-n // CHUNK)), down=n)
    return h.hexdigest()


def _tensorboard_records(url: str) -> int:
    """Records TensorBoard's own event-file loader reads from the object at ``url``."""
    from tensorboard.backend.event_processing import event_file_loader

    return sum(1 for _ in event_file_loader.RawEventFileLoader(url).Load())


__all__ = ["ObjectReduce", "logdir_capabilities", "reduce_rewrite_run", "replaced_backup", "temp_key"]
