"""Retire a whole run of a bucket logdir: every object of it leaves the logdir for the vault,
unchanged; restore copies it back. The bucket form of ``engine.retire``, over the bucket engine's
journal, locks and vault.

Where a retired run lives: ``<vault>/blobs/<op_id>/files/<n>``, one numbered object per object of
the run (the keys, sizes, versions and the store's checksums are in the journal and the manifest).
Numbered names matter as on a disk: the default vault is inside the logdir, and TensorBoard would
take any object named ``*tfevents*`` there for a run. With a local folder as the vault
(``--backup-dir /folder``, ``engine.bucket_blobs``) every object goes there as a blob instead, as a
reduction's originals do: streamed down once (size and the store's MD5 checked), added and read
back, each entry naming its blob by ``sha256`` (``kept_in: blobstore``); the bucket then no longer
holds (nor bills) the run at all. Step 3 is then that add, under the folder's shared forget lock
until the manifest names the digests, and the index is read again before the commit record (a blob
forgotten since rolls the run back); the commit record names every digest, so from it on a purge
keeps them. A restore or rollback streams each blob back create-only (``bucket_blobs.put_back``).

Why one module: the retirement, its rollback, its settling at the next start and its restore
(``unretire``) are one contract over one entry shape (a numbered copy or a blob), one refusal rule
for runs and keys (``_refuse``) and one put-back (``_copy_back``, ``_same``); split, those private
helpers would cross modules and the four halves could drift apart.

The steps, each preceded by its journal record (``engine.bucket_state.new_journal``: the one
journal interface, an object journal on a bucket), are ``BucketRetire``'s, the bucket's layout of
the one retirement of every store (``engine.retire_run``: ``Retire`` on the one driver
``engine.txn.run``, as a disk's ``retire.DiskRetire``), which alone orders the commit record
(``swapping``), the rollback record, the cancel checks, the ``retire.*`` failpoints and the
outcome:

1. the run's lock objects (the run and every nested run it takes along), one listing, the quiet
   period (``plan.planner.active_reason`` with ``closed_files``, the one rule of every store);
2. the journal names every object with its version and its numbered key in the vault;
3. every object copied server-side into the vault, conditional on the listed version, its copy
   proven by the store's checksum (``bucket_steps.backup_object``): no byte passes this machine;
4. the manifest (``kind: retire``), then a fresh listing: an object written or changed in the run
   since step 1 means a writer, and the run is left as it was (``Skip.ACTIVE``);
5. the commit record (``swapping``), then the originals deleted, each at its listed version
   (``bucket_steps.finish_op``: one rewritten meanwhile is never deleted);
6. a last listing: anything in the run's prefix now was written during the retirement, and the
   whole run is put back beside it.

Before the commit record every original is untouched; after it every original has a verified
copy. A rollback (in-process, or by ``settle`` at the next start from any machine) puts back
every original that is gone from its copy (create-only: never over an object written meanwhile),
and drops the copies only when every original stands as it was. A writer's object found at an
original's key is a disk's writer's file (``retire.rollback_retire``): set aside beside it as
``<key>.salvaged-NNN`` and the original put back, so the run is as it was plus the writer's
object, nothing only in the vault. An original that could not go back (the object at its key is
it with records appended, or a writer kept rewriting it) keeps its vault copy (the manifest says
``not_restored``; purge keeps it).
"""
from __future__ import annotations

import contextlib
import time
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from tb_footprint_plugin.codes import BlobError, Code, Failure, Finding, Outcome, Recovery, RetireSkip, Skip, StoreError
from tb_footprint_plugin.engine import faults, lease, manifest, txn
from tb_footprint_plugin.engine import retire_run as one_retirement
from tb_footprint_plugin.engine import unretire_run as one_unretire
from tb_footprint_plugin.engine.bucket_op_records import create_manifest, forget_record
from tb_footprint_plugin.engine.bucket_moved import (MADE_AT, MOVED_FROM, marked_afresh, moved_unclaimed,
                                                     not_ours_refusal, outside_words, restore_doc)
from tb_footprint_plugin.engine.bucket_blobs import (KEPT_IN, adding, backup_entries, blobs_of, end_witness,
                                                      entry_failure, entry_ok, is_blob_entry, put_back)
from tb_footprint_plugin.engine.bucket_blob_folder import with_recorded_folder
from tb_footprint_plugin.engine.bucket_objects import HEADERS
from tb_footprint_plugin.engine.bucket_state import (
    ACTIVE_OPS,
    BucketState,
    BucketTxnError,
    BucketVault,
    failure_code,
    journal_path,
    lock_runs,
    must_close,
    must_delete,
    new_journal,
    now_s,
    run_listing,
    run_prefix,
    STORE_FAILURES,
    unlock_all,
    vault_url,
    written_recently,
)
from tb_footprint_plugin.engine.bucket_putback import (PutBackHold, beside_at_free_name, drop_journal, release_note,
                                                       release_restored)
from tb_footprint_plugin.engine.bucket_restore import holds_original, restore_journal, start_journal
from tb_footprint_plugin.engine.catalogue_rules import RELEASED_BY
from tb_footprint_plugin.engine.bucket_steps import (backup_object, copies_there, copy_matches, finish_op, journal_started,
                                                      stream_digest)
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, RunOutcome, new_op_id
from tb_footprint_plugin.engine.history import append_kept, append_rolled_back, kept_line
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.journal_object import ObjectJournal, journal_entries
from tb_footprint_plugin.engine.putback import begins_with
from tb_footprint_plugin.engine.retire_tree import CHANGED, MISSING, RECORDED
from tb_footprint_plugin.engine.retire_rules import (CHANGED_PATHS, KIND, RECOVERED_REASON, left_changed,
                                                    refused_names, restorable_retirements,
                                                    retire_line, taken_along, unnamed_runs)
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.engine.vault import who
from tb_footprint_plugin.scan.set_aside import holding_words, set_aside_in_listing
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.remote import (
    ObjectInfo,
    content_checksums,
    same_content,
)
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.version import __version__

#: failpoints of a bucket retirement, in order (tests inject a failure at each)
RETIRE_STEPS = ("retire.journal", "retire.mid_move", "retire.move",
                "retire.manifest", "retire.delete_record", "retire.delete")
UNRETIRE_STEPS = ("unretire.journal", "unretire.mid_move", "unretire.move", "unretire.manifest")
#: the field of a restore's journal (``kind: unretire``) naming the restore's own op id, so every
#: attempt at finishing it is recorded by one (a journal written before it had none: given one
#: by the first attempt that finishes it, recorded in it before anything is put back)
RESTORE_OP = "restore_op"
#: ``kind`` of the journal a restore of a retired run writes (``engine.bucket_recover`` finishes it)
UNRETIRE_KIND = "unretire"


def stored_key(vault: BucketVault, op_id: str, index: int) -> str:
    """Where object ``index`` of retirement ``op_id`` is kept (a numbered key, see the module doc)."""
    return vault.blob(op_id, f"files/{index}")


def is_retire_journal(doc: dict) -> bool:
    """Whether a journal object is a retirement's (settled by ``settle``, not as a reduction)."""
    return doc.get("kind") == KIND


def journal_runs(doc: dict) -> List[str]:
    """The runs a retirement's journal locked: its run and the nested runs it takes along (each
    checked to be inside the run, ``retire_rules.taken_along``: journals are untrusted input; one
    that is not is left out)."""
    runs = [str(en.get("run")) for en in journal_entries(doc) if isinstance(en, dict)]
    return runs + (taken_along({"run": runs[0], "takes_along": doc.get("takes_along")}) if runs else [])


def _refuse(run: str, along: List[str], ostore: ObjectStore, vault: BucketVault) -> Optional[str]:
    """Why ``run`` cannot be retired whatever its objects (the names every store refuses,
    ``retire_rules.refused_names``; a name that is no plain key prefix, or a prefix holding the
    vault), or None."""
    why = refused_names(run, along)
    if why:
        return why
    try:
        top = ostore.path(run)
    except ValueError:
        return f"{run!r} is not a plain key prefix of the logdir"
    if vault.root == top or vault.root.startswith(top + "/"):
        return f"run {run!r} holds the tool's vault ({vault.root}); left alone"
    return None


def retire_run(ostore: ObjectStore, vault: BucketVault, run: str, *, takes_along: Iterable[str] = (),
               rule: Optional[dict] = None, quiet_period: float,
               closed_files: Optional[Mapping[str, float]] = None,
               cancel: Optional[CancelToken] = None) -> RunOutcome:
    """Retire ``run`` of a bucket logdir (and the nested runs ``takes_along`` names, which must be
    all it holds): the one retirement (``retire_run.retire``) over ``BucketRetire``. Returns an
    outcome (``verified`` when the run left the logdir for the vault), never raises for a failed
    run: any failure puts every object back where it was. ``cancel``: honoured between the steps
    up to the commit record (the front end passes none: a cancel stops the next run)."""
    return one_retirement.retire(BucketRetire(ostore, vault, run, sorted(set(takes_along)), rule, quiet_period,
                                              closed_files), cancel)


class BucketRetire(one_retirement.RetireLayout):
    """What a bucket does at each instant of the one retirement (``retire_run.Retire``; the
    module doc's 1-6):

    - **hold**: the run's lock objects (the run and every nested run it takes along);
    - **begin**: one listing, the nested runs and the quiet period (a refusal is ``Refused``),
      then the journal object (step ``planned``) naming every object and its numbered key;
    - **move**: every object copied server-side into the vault at its listed version, or added to
      the local vault of blobs, under the vault's shared ``adding`` lock (``retire.mid_move`` after
      the first);
    - **check**: each copy was proven by the store's checksum as it was made (a blob read back);
      the manifest written, the ``adding`` lock left (failpoint ``retire.manifest``);
    - the **last look**: a fresh listing (nothing new, nothing rewritten since its copy, nothing
      written within the quiet period), the locks still ours, the blobs still there; then the
      commit record, step ``swapping`` (``retire.delete_record``);
    - **remove**: the originals deleted at their versions (``finish_op``);
    - **settle**: a last listing of the run's prefix (anything there now was written during the
      retirement: the whole run is put back beside it), the journal closed.

    A failure is rolled back after step ``rolling_back`` (from the verified copies, past the commit
    record too); an injected fault is a crash, left for ``settle``."""

    errors = (BucketTxnError, *STORE_FAILURES, ValueError, OSError, Cancelled)  # OSError: the blob folder
    rollback_errors = (BucketTxnError, *STORE_FAILURES, ValueError, OSError)
    #: the driver's instants where a bucket's own failpoints are (its manifest is written in the check)
    failpoints = {"verify": "retire.manifest", "swap_record": "retire.delete_record"}

    def __init__(self, ostore: ObjectStore, vault: BucketVault, run: str, along: List[str], rule: Optional[dict],
                 quiet_period: float, closed_files: Optional[Mapping[str, float]]) -> None:
        super().__init__(run, along)
        self.ostore, self.vault, self.rule = ostore, vault, rule
        self.quiet_period, self.closed_files = quiet_period, closed_files
        self.st = BucketState(ostore)
        self.op_id = new_op_id()
        self.locks: List[lease.RunLease] = []  # the lock objects held (the journal names their paths)
        self.jnl: Optional[ObjectJournal] = None
        self.listing: Dict[str, ObjectInfo] = {}
        self.now_objs: Dict[str, ObjectInfo] = {}
        self.entry: dict = {}
        # entered by the move, left once the manifest names the blobs (or on the way out)
        self._adding = contextlib.ExitStack()

    def refused(self) -> Optional[str]:
        return _refuse(self.run, self.along, self.ostore, self.vault)

    def hold(self) -> bool:
        ACTIVE_OPS.add(self.op_id)
        return lock_runs(self.st, [self.run] + self.along, self.op_id, self.locks, self.out)

    def begin(self, cancel: CancelToken, report: txn.Report) -> None:
        """One listing and the refusals, then the journal object, step ``planned`` (a store that
        refuses it: nothing to undo)."""
        ostore, vault, run, out = self.ostore, self.vault, self.run, self.out
        try:
            listing = self.listing = run_listing(ostore, vault, run)
            if not listing:
                raise BucketTxnError(Failure.REFUSED, f"run {run!r} holds no object in the logdir (gone?); left alone")
            extra = unnamed_runs(listing, run, self.along)
            if extra:
                raise BucketTxnError(Failure.REFUSED, f"run {run!r} holds nested run(s) the plan did not name: "
                                     f"{', '.join(extra)}; plan again")
            active = written_recently(listing, run, self.quiet_period, self.closed_files)
            if active:
                raise BucketTxnError(Skip.ACTIVE, active)
            # the scan's rule, asked of what would move: another logdir's state or vault there
            # (made since a kept scan) holds backups this vault must never take (review R14 G1)
            held = set_aside_in_listing(listing, run)
            if held is not None:
                raise BucketTxnError(RetireSkip.HOLDS_STATE, holding_words(held))
        except (BucketTxnError, *STORE_FAILURES, ValueError) as e:
            raise txn.Refused(str(e), failure_code(e)) from e
        files = [_file_entry(vault, self.op_id, i, k, o) for i, (k, o) in enumerate(sorted(listing.items()))]
        out.bytes_before = out.bytes_after = sum(f["size"] for f in files)
        out.op_id = self.op_id
        self.entry = {"run": run, "op": self.op_id, "lock": self.locks[0].path, "files": files}
        try:
            self.jnl = new_journal(self.st, self.op_id, {
                "op": self.op_id, "kind": KIND, "logdir": ostore.url, "step": Rec.PLANNED, "created": now_s(),
                "vault": vault.root, "runs": [self.entry], "takes_along": self.along, "rule": self.rule,
                "logdir_objects": len(listing)})
        except STORE_FAILURES as e:
            raise txn.Refused(str(e), failure_code(e)) from e

    def move(self, cancel: CancelToken, report: txn.Report) -> None:
        """Every object into the vault: one add of blobs for the run, or server-side copies, each
        conditional on the listed version and proven by the store's checksum."""
        ostore, vault, entry = self.ostore, self.vault, self.entry
        # a purge's forget waits until the manifest names the blobs added here (no-op without blobs)
        self._adding.enter_context(adding(vault))
        if vault.blobs is not None:  # one add for the run: small objects share packs
            unmade = backup_entries(ostore, vault, [entry])
            if self.run in unmade:
                raise unmade[self.run]
            faults.hit("retire.mid_move")  # every blob is in, none named yet
        for i, f in enumerate(entry["files"]):
            if is_blob_entry(f):
                continue
            backup_object(ostore, f)
            if i == 0:
                faults.hit("retire.mid_move")

    def check(self, report: txn.Report) -> None:
        """Every copy checked as it was made (the store's checksum, a blob read back): the
        manifest, then the ``adding`` lock left (the manifest names the blobs now)."""
        create_manifest(self.ostore, self.vault, self.op_id,
                        manifest_doc(self.ostore, self.vault, self.jnl.doc, self.entry, self.along, self.rule))
        self._adding.close()

    def last_look(self) -> None:
        """A writer's object (new, or an original rewritten since its copy) keeps the run in the
        logdir; so does a lock taken over, or a copy gone or changed in the vault since it was made
        (a blob forgotten since its add, a server-side copy deleted: ``copies_there``, the one rule
        a settle past the commit record follows too), coded ``backup_damaged``."""
        run, files = self.run, self.entry["files"]
        now_objs = self.now_objs = run_listing(self.ostore, self.vault, run)
        new = sorted(set(now_objs) - set(self.listing))
        changed = [f["path"] for f in files if f["path"] not in now_objs
                   or now_objs[f["path"]].version_token != f["version"]]
        if new or changed:
            raise BucketTxnError(Skip.ACTIVE, f"{(new + changed)[0]}: written during the retirement (is the run still "
                                 "being written?); run left as it was")
        active = written_recently(now_objs, run, self.quiet_period, self.closed_files)
        if active:
            raise BucketTxnError(Skip.ACTIVE, active)
        if not all(lock.still_held() for lock in self.locks):
            raise BucketTxnError(Skip.LOCKED, f"run {run}: its lock was taken over; left as it was")
        # every copy as it was verified, on every vault: else the delete would lose the bytes
        copies_there(self.ostore, self.vault, self.entry, what="retirement", before_commit=True)

    def commit_record(self) -> None:
        """``swapping``: every copy verified, from here on recovery finishes the retirement."""
        self.jnl.step(Rec.SWAPPING, runs=[self.entry])

    def remove(self, report: txn.Report) -> None:
        """Each original deleted at its listed version (one rewritten meanwhile never is)."""
        finish_op(self.ostore, self.vault, self.jnl.doc, present=self.now_objs)

    def settle(self, report: txn.Report) -> None:
        """Nothing is left in the run's prefix; the journal closed."""
        left = run_listing(self.ostore, self.vault, self.run)
        if left:
            raise BucketTxnError(Skip.ACTIVE, f"{sorted(left)[0]}: written into the run while it was being retired; "
                                 "run put back beside it")
        if self.vault.blobs is not None:
            # with a blob folder, its witness (``history.append_kept``) before its journal goes (a kill in
            # between: the start that finishes it writes it, once; after the close, a kill left the
            # retirement unnamed, review R27 F4): once the manifest object is gone no forget lets a
            # blob go, a copied run's too (review R26 F1); refused, said in its outcome
            said = append_kept(BucketState.of(self.ostore).logdir_store(), [kept_line(self.op_id, KIND, self.run)])
            if said:
                self.out.reason = f"{self.out.reason}; {said}" if self.out.reason else said
        must_close(self.jnl)

    def files(self) -> List[dict]:
        return self.entry["files"]

    def journaled(self) -> bool:
        return self.jnl is not None

    def committed(self) -> bool:
        return self.jnl is not None and self.jnl.committed()

    def code_of(self, error: BaseException) -> Code:
        return failure_code(error)

    def rollback_record(self, reason: str) -> None:
        self.jnl.step(Rec.ROLLING_BACK, runs=[self.entry])

    def put_back(self, reason: str, committed: bool) -> str:
        """Every original gone from its key copied back (``rollback``), then its change-log line
        (before the journal goes: a kill in between, recovery writes it once)."""
        notes: List[str] = []
        held = rollback(self.ostore, self.vault, self.jnl.doc, deleted=committed, notes=notes)
        # the line says what was set aside, as a disk's rolled-back manifest does
        said = "; ".join(x for x in [self.out.reason, *notes] if x) or self.out.reason
        append_rolled_back(self.st.logdir_store(), [rolled_back_line(self.jnl.doc, said)], [self.out])
        self.out.found(Finding.NOT_RESTORED, held)  # its code is the cause: each kept original a second code (#26)
        if held:
            notes.append(f"{len(held)} object(s) at their key were written again meanwhile and left as they are, e.g. "
                         f"{held[0]}: their originals stay in the vault")
        return "; ".join(notes)

    def close(self) -> None:
        must_close(self.jnl)
        self.jnl = None

    def unwind(self) -> None:
        self._adding.close()

    def release(self) -> None:
        """The locks no longer renewed, and deleted unless a journal kept for recovery needs them."""
        self._adding.close()
        ACTIVE_OPS.discard(self.op_id)
        ours, versions = unlock_all(self.locks)
        if self.jnl is None or self.out.status == Outcome.VERIFIED:  # a kept journal keeps its locks
            try:
                BucketState.of(self.ostore).delete(ours, versions=versions)
            except STORE_FAILURES:
                pass  # a stale lock of no journal is taken over by the next taker


def _file_entry(vault: BucketVault, op_id: str, index: int, key: str, o: ObjectInfo) -> dict:
    """The journal/manifest entry of one object of the run: its numbered copy in the vault, or
    ``kept_in: blobstore`` with a local vault of blobs (its ``sha256`` once verified there); its
    headers (``bucket_objects.HEADERS``) where the listing said them."""
    f = {"path": key, "action": "delete", "size": o.size, "version": o.version_token, "mtime": o.mtime,
         "checksums": content_checksums(o)}
    if o.headers is not None:  # its Content-Type and user metadata where the listing said them (GCS, Azure)
        f[HEADERS] = o.headers  # (S3: the blob backup's read records them); a blob put back is sent them
    if vault.blobs is not None:
        f["kept_in"] = KEPT_IN
    else:
        f["backup"] = stored_key(vault, op_id, index)
    return f


def manifest_doc(ostore: ObjectStore, vault: BucketVault, doc: dict, entry: dict, along: List[str],
                 rule: Optional[dict]) -> dict:
    """The retirement's manifest in the one schema (``engine.manifest``) with a retirement's own
    fields (``takes_along``, ``tree``, ``stored_in``, ``rule``); an object store keeps no mode,
    and its checksums stand for the sha256 a disk's tree records."""
    files = entry["files"]
    total = sum(f["size"] for f in files)
    started = journal_started(doc) or now_s()
    # with a vault of blobs: the folder (a restore must be given it) instead of the copies' prefix
    where = {"blob_folder": vault.blobs.folder, "stored_in": vault.blobs.folder} if vault.blobs is not None \
        else {"stored_in": f"blobs/{entry['op']}/files"}
    return manifest.bucket_form(manifest.new(
        op_id=entry["op"], kind=KIND, run=entry["run"], logdir=ostore.url, started_at=started, finished_at=now_s(),
        outcome=Outcome.VERIFIED, files=files, bytes_before=total, bytes_after=0, takes_along=along,
        vault=vault.root, rule=rule, tree=[{k: f[k] for k in ("path", "size", "mtime", "checksums")} for f in files],
        shard=lease.shard_label(), tool_version=__version__, **where, **who()))


def _same(ostore: ObjectStore, info: ObjectInfo, f: dict) -> bool:
    """Whether the object at ``f``'s key holds ``f``'s original bytes: its listed version, or the
    store's checksums of both; without a common checksum kind, both read and hashed."""
    if info.version_token == f["version"]:
        return True
    if info.size != f["size"]:
        return False
    ok = same_content(content_checksums(info), f.get("checksums") or {})
    if ok is None:
        theirs = f.get("sha256") if is_blob_entry(f) else stream_digest(ostore, f["backup"], f["size"])
        ok = stream_digest(ostore, ostore.path(f["path"]), f["size"]) == theirs
    return bool(ok)


def _copy_back(ostore: ObjectStore, vault: BucketVault, f: dict, listed_absent: bool = False,
               moved_from: Optional[str] = None) -> None:
    """One original back at its key from its verified backup, create-only: a server-side copy
    checked by the store's checksums, or its blob streamed back and checked (``put_back``; its
    manifest's ``MOVED_FROM`` as ``moved_from``). Raises ``StoreFailure`` (``already_exists``)
    when an object stands at the key."""
    if is_blob_entry(f):
        put_back(ostore, vault, f, moved_from=moved_from)
        return
    res = BucketState.of(ostore).copy(f["backup"], ostore.path(f["path"]), if_absent=True, listed_absent=listed_absent,
                       size=f["size"])
    if not copy_matches(ostore, res, f, f["backup"], ostore.path(f["path"])):
        raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: the copy put back does not match")


#: how many times a rollback looks at one key a writer keeps writing (each object there set aside,
#: then the key looked at again) before it leaves the key to it: the original then stays in the
#: vault (``not_restored``), every object it set aside stays beside the key
SET_ASIDE_LOOKS = 7


def _back_beside(ostore: ObjectStore, vault: BucketVault, f: dict, cur: Optional[ObjectInfo],
                 present: Dict[str, ObjectInfo], notes: List[str]) -> bool:
    """The original ``f`` (its copy verified) at its key again; True once it stands there.

    ``cur``: what the listing found at the key. Nothing: the copy put back create-only and checked.
    The original: nothing to do. The original with records appended to it: left as it is (those
    records are in it; False: its copy stays). Anything else is a writer's object made while the
    original was in the vault, the disk's rule (``retire_tree.put_back`` with ``set_aside``): it
    is copied create-only to the first free ``<key>.salvaged-NNN`` (``_set_aside``), deleted at
    the version copied (a writer that wrote again since keeps its newer object, set aside in its
    turn), and the original goes back as to an empty key. A kill anywhere in between leaves the
    writer's bytes at the key or beside it and the original in the vault: the rollback run again
    counts a ``.salvaged-NNN`` holding them as set aside already."""
    state = BucketState.of(ostore)
    key = ostore.path(f["path"])
    for _ in range(SET_ASIDE_LOOKS):
        if cur is None:
            try:
                _copy_back(ostore, vault, f)
                return True
            except StoreFailure as e:
                if e.code != StoreError.ALREADY_EXISTS:
                    raise
            cur = state.head(key)  # made since the listing: looked at as any other
            continue
        if _same(ostore, cur, f):
            return True
        if _grown(ostore, cur, f):
            return False
        aside = _set_aside(ostore, f["path"], cur, present)
        if aside is not None:
            # at the version copied, looked at first as well (the emulators ignore a delete's
            # precondition): one written again since stays, and is set aside in its turn
            store, k = state.where(key)
            (res,) = store.delete([k], {k: cur.version_token})
            if not res.ok and res.code != StoreError.PRECONDITION_FAILED:
                raise BucketTxnError(Failure.STORE_ERROR, f"{f['path']}: its writer's object, set aside as {aside}, "
                                     f"could not be deleted at its key ({res.message}); the original stays in the vault")
            note = (f"{f['path']}: an object written at its key during the retirement was kept beside it as "
                    f"{aside.rsplit('/', 1)[-1]}")
            if note not in notes:
                notes.append(note)
        cur = state.head(key)  # gone (the original goes back), or written again since: set aside too
    return False


def _grown(ostore: ObjectStore, cur: ObjectInfo, f: dict) -> bool:
    """Whether the object ``cur`` at ``f``'s key is the original with bytes appended after it."""
    if cur.size <= f["size"]:
        return False
    sha = f.get("sha256") if is_blob_entry(f) else stream_digest(ostore, f["backup"], f["size"])
    return is_sha256(sha) and begins_with(*BucketState.of(ostore).where(ostore.path(f["path"])), f["size"], sha)


def _set_aside(ostore: ObjectStore, path: str, cur: ObjectInfo, present: Dict[str, ObjectInfo]) -> Optional[str]:
    """The writer's object ``cur`` at ``path`` copied server-side, create-only and conditional on
    its version, to the first free ``<path>.salvaged-NNN`` (``bucket_putback.beside_at_free_name``,
    the walk every store shares; a name holding exactly its bytes, an interrupted rollback's copy,
    is taken as it); that name (logdir-relative), or None when the object changed or went since
    ``cur`` was looked at (nothing set aside: the caller looks again)."""
    state = BucketState.of(ostore)

    def write(name: str) -> None:
        res = state.copy(ostore.path(path), ostore.path(name), if_source_version=cur.version_token,
                         if_absent=True, size=cur.size)
        ok = same_content(res.checksums, content_checksums(cur))
        if ok is None:  # no checksum in common (a copy made in parts): both read
            ok = stream_digest(ostore, ostore.path(name), cur.size) == stream_digest(ostore, ostore.path(path), cur.size)
        if not ok:  # never deleted at its key unless its bytes stand beside it
            raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{path}: its copy set aside as {name} does not match it")

    def holds(name: str, info: ObjectInfo) -> bool:
        if info.size != cur.size:
            return False
        ok = same_content(content_checksums(info), content_checksums(cur))
        if ok is None:
            ok = stream_digest(ostore, ostore.path(name), cur.size) == stream_digest(ostore, ostore.path(path), cur.size)
        return bool(ok)

    try:
        return beside_at_free_name(ostore, path, present, write, holds)[0]
    except StoreFailure as e:
        if e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
            return None  # changed or gone since it was looked at
        raise


def rollback(ostore: ObjectStore, vault: BucketVault, doc: dict, deleted: bool,
             notes: Optional[List[str]] = None) -> List[str]:
    """Put back every original of an uncommitted (or undone) retirement that is gone, from its
    verified copy, create-only; idempotent. Another object standing at an original's key (a
    writer's, made while the original was in the vault) is set aside beside it, as on a disk
    (``_back_beside``: the writer's bytes at ``<key>.salvaged-NNN``, what was set aside said in
    ``notes``), and the original goes back. The copies and the manifest go only when every
    original stands as it was; an original that could not go back (the object at its key still
    begins with it: records appended to it, kept in it as they are) keeps its copy (returned, and
    named ``not_restored`` in the manifest, which purge keeps)."""
    held: List[str] = []
    notes = [] if notes is None else notes
    for en in doc.get("runs", []):
        present = run_listing(ostore, vault, en["run"])
        for f in en.get("files", []):
            cur = present.get(f["path"])
            if not f.get("backup_checksums"):
                if cur is None and deleted:
                    raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: gone and no verified copy of it")
                continue  # never copied, never deleted by us: what stands there (or nothing) is someone else's
            if not _back_beside(ostore, vault, f, cur, present, notes):
                held.append(f["path"])
        mpath = vault.manifest(en["op"])
        if held:
            m, version = BucketState(ostore).read(mpath)
            held_doc = {"restored_by": manifest.A_RESTORE, "not_restored": held, "restored_at": now_s()}
            if m is None:
                create_manifest(ostore, vault, en["op"], manifest.bucket_form(
                    {**manifest_doc(ostore, vault, doc, en, doc.get("takes_along") or [], doc.get("rule")), **held_doc}))
            else:
                try:
                    m = manifest.read(m, vault_url(ostore, mpath))
                except Untrusted:
                    continue  # damaged: no purge takes it (its copies stay), status names it
                BucketState(ostore).update(mpath, manifest.bucket_form({**m, **held_doc}), version)
            continue
        # every original stands as it was: the copies are redundant (the manifest first, so no
        # restorable retirement ever points at a missing copy; blobs stay until a purge forgets
        # what nothing names: another operation may hold the same bytes). Past the commit record
        # its witness line may be written (``settle``, before the journal goes): ended first, or it
        # would name a manifest gone for good and every blob of the folder were kept forever
        if deleted:
            end_witness(ostore, vault, en["op"], KIND, en["run"])
        must_delete(ostore, [mpath])
        forget_record(ostore, vault, en["op"])  # after its manifest: one left names nothing
        must_delete(ostore, [f["backup"] for f in en.get("files", []) if f.get("backup")])
    return held


def settle(ostore: ObjectStore, vault: BucketVault, journal: ObjectJournal,
           held: Optional[List[str]] = None) -> Tuple[str, str]:
    """Settle an unfinished retirement from its journal (``engine.bucket_recover``); returns
    (``codes.Recovery`` value, detail). From the commit record on (every copy verified) the
    originals left are deleted at their version, once every copy is seen there still as verified
    (``bucket_steps.copies_there``, else ``BucketTxnError``: nothing deleted, the journal kept);
    a run that holds anything else by then (a writer's object, an original rewritten since its
    copy) is put back instead, as before it. ``held``: given, the keys a rollback left their
    originals in the vault for (written again meanwhile) are appended to it."""
    doc = journal.doc
    en = doc["runs"][0]
    finish = journal.step_name in (Rec.SWAPPING, Rec.DONE) and all(f.get("backup_checksums") for f in en["files"])
    if finish:
        # a copy lost or changed since the commit record (a lifecycle rule, by hand; a blob
        # forgotten from a local folder): the originals left are its bytes' only home; nothing is
        # deleted, the journal stays, on every vault (the disk's roll_forward checks every blob
        # first). Raises, so the next start looks again
        copies_there(ostore, vault, en, what="retirement")
    if finish:
        try:
            finish_op(ostore, vault, doc)
            if not run_listing(ostore, vault, en["run"]):
                return Recovery.COMPLETED, "every object was copied and verified; the retirement was finished"
        except BucketTxnError as e:
            if e.code != Failure.CHANGED_SINCE_BACKUP:
                raise
    notes: List[str] = []
    kept = rollback(ostore, vault, doc, deleted=journal.committed(), notes=notes)
    if held is not None:
        held += kept
    detail = f"stopped at step {journal.step_name}; every object of the run put back"
    if notes:
        detail += "; " + "; ".join(notes)
    if kept:
        detail += f"; {len(kept)} written again meanwhile keep their originals in the vault, e.g. {kept[0]}"
    # its line, once (the process may have written it before it was killed), as a disk's recovery
    unwritten = append_rolled_back(BucketState.of(ostore).logdir_store(), [rolled_back_line(doc, RECOVERED_REASON)],
                                   once=True)
    return Recovery.ROLLED_BACK, detail + (f"; {unwritten}" if unwritten else "")


def rolled_back_line(doc: dict, reason: Optional[str]) -> dict:
    """The change-log line of a retirement rolled back (``retire_rules.retire_line``, a disk's):
    the run as big as it was, nothing kept. Its journal is untrusted: a size that is no count
    counts nothing."""
    en = journal_entries(doc)[0]
    total = sum(f["size"] for f in en.get("files") or [] if isinstance(f, dict) and isinstance(f.get("size"), int)
                and not isinstance(f.get("size"), bool) and f["size"] >= 0)
    m = {"op_id": en.get("op"), "run": en.get("run"), "takes_along": doc.get("takes_along"), "bytes_before": total,
         "bytes_after": total, **who()}
    return dict(retire_line(m, Outcome.ROLLED_BACK, reason, tool_version=__version__), time=time.time())


def unretire(ostore: ObjectStore, vault: BucketVault, m: dict, resume: bool = False) -> RunOutcome:
    """Copy every object of a retired run back (create-only, never over an object written since),
    each checked against the store's checksums; mark the manifest restored: the one restore of a
    retirement (``engine.unretire_run``) over a bucket's layout, ``BucketUnretire``. Before the
    first put-back a journal (``kind: unretire``) is written and it is removed after the manifest
    says restored: one stopped midway is finished by the next start (``engine.bucket_recover``
    calls this with ``resume``, through the same steps). Idempotent: an object already back with
    its bytes counts as back."""
    try:  # no --backup-dir: the blob folder its manifest records, once it is ours (R21 PD20), as a reduction's
        vault = with_recorded_folder(vault, m)
    except BucketTxnError as e:
        return RunOutcome(run=m["run"], status=Outcome.FAILED, code=e.code, op_id=m["op_id"],
                          reason=f"{e}; nothing was changed")
    return one_unretire.unretire(BucketUnretire(ostore, vault, m, resume))


class BucketUnretire(one_unretire.UnretireLayout):
    """A bucket's layout of the one restore of a retirement (``unretire_run.Unretire``), under the
    locks of its runs, named (as its journal) by the retirement restored: a lock naming it is not
    taken over while its journal stands, and purge leaves its copies alone (``PutBackHold``).

    - read: the manifest in any shape ever written (a recovery passes it as it reads it);
    - refused before anything is held: a run name (``_refuse``), a key outside the run or the
      vault, a blob whose folder is not given; a new run of the same name at the run's prefix
      (``standing``: one listing, any object there that is not a retired original at its key,
      the one rule of every store, ``retire_rules.new_run_refusal``, in a disk's words);
    - **journal**: every copy checked before anything moves, a disk's rule: a copy missing, or
      every one changed, refuses the restore (nothing changed; a resumed restore's journal is
      kept); one not as recorded is left in the vault, named in the journal (``CHANGED_PATHS``),
      the others go back; then the restore's journal (``kind: unretire``; a resumed restore's
      stands already: it leaves the paths that journal names, and refuses a copy changed since);
    - **swap**: every object gone from its key copied back create-only and checked
      (``unretire.mid_move`` after the first; ``unretire.move``), one at its key with its bytes
      counted as back, another object there left as it is (``not_restored``), as is a path whose
      copy was not as recorded (``not_restored`` and ``backup_changed``);
    - **commit**: one more listing (each key still holds its original), the manifest marked
      restored (``unretire.manifest``), the journal removed; the copies of the originals back
      released as a disk's restore releases its files (under a purge's journal: deleted as a
      purge deletes them, one stopped finished by the next start,
      ``bucket_putback.release_restored``): with every object back, all (the manifest marked
      purged ``backup_released_by_restore`` in that same write); with an original left
      (``not_restored``: its copy kept, which purge keeps), the others, each entry marked
      ``catalogue_rules.RELEASED_BY`` in that write. A vault of blobs forgets the blobs nothing
      else names once the restore's journal is gone (``bucket_putback.forget_unnamed``, under its
      exclusive lock, as its purge does).

    A failure is said as on every store (``Unretire.rollback``); an injected fault is a crash, the
    journal left as it stands."""

    errors = (BucketTxnError, *STORE_FAILURES, ValueError, OSError)

    def __init__(self, ostore: ObjectStore, vault: BucketVault, m: dict, resume: bool) -> None:
        super().__init__(m)
        self.ostore, self.vault, self.resume = ostore, vault, resume
        self.st = BucketState(ostore)
        self.along: List[str] = []
        self.held: Optional[PutBackHold] = None  # once the runs are held
        self.conflicts: List[str] = []
        # the paths whose copies are not as recorded: left in the vault, as the begin record says
        self.changed: List[str] = []
        self.begun_changed: List[str] = []  # a resumed restore's: what its begin record named
        self.by_path: Optional[Dict[str, dict]] = None  # the retired files by name, once asked

    def admit(self) -> None:
        m = self.m
        try:  # any shape ever written (a recovery passes the manifest as it reads it)
            self.m = manifest.read(m, m.get("_path") and vault_url(self.ostore, m["_path"]) or "the retirement's manifest")
        except Untrusted as e:
            raise txn.Refused(f"{e}; nothing was changed", e.code) from e
        self.m = marked_afresh(self.ostore, self.vault.manifest(self.m["op_id"]), self.m)  # moved here? (G3, G10)

    def refused(self) -> None:
        ostore, vault, m, run = self.ostore, self.vault, self.m, self.out.run
        prefix = f"{vault.root}/blobs/{m['op_id']}/files/"
        self.along = [a for a in m.get("takes_along") or [] if isinstance(a, str)]
        try:
            why = _refuse(run, self.along, ostore, vault)
            if why:
                raise BucketTxnError(Failure.REFUSED, why)
            if (theirs := not_ours_refusal(vault, m)) is not None:  # a copy's, or another's blobs (R11 G3, G10)
                raise theirs
            for f in m["files"]:
                ostore.path(f["path"])
                ours = entry_ok(f) and is_sha256(f.get("sha256")) if is_blob_entry(f) else \
                    str(f.get("backup", "")).startswith(prefix)
                if not ours and m.get(MADE_AT):  # this logdir's copy of one standing at that prefix (R11 G3)
                    raise BucketTxnError(Failure.REFUSED, f"{m.get('_path')}: {outside_words(m, '')}")
                if not ours or not f["path"].startswith(run_prefix(run)):
                    raise BucketTxnError(Failure.REFUSED, f"{m.get('_path')}: names a key outside the run or the vault")
                if is_blob_entry(f):
                    blobs_of(vault, f)  # the folder not given: said before anything moves
        except (BucketTxnError, ValueError) as e:
            # a refusal that cannot tell whose the retirement is keeps its code (R13 F2's verdict), as
            # a restore's does; the others are the unretire's own refusal (restore_blocked)
            keep = getattr(e, "code", None) == Finding.WHOSE_UNKNOWN
            raise txn.Refused(f"{e}; nothing was changed", *([e.code] if keep else [])) from e

    def standing(self) -> Optional[Dict[str, ObjectInfo]]:
        """One listing of the run's prefix (the state and the vault left out; a folder marker is
        in no listing: ``remote.is_folder_marker``); a resumed restore's is what it put back."""
        if self.resume:
            return None
        return run_listing(self.ostore, self.vault, self.out.run)

    def retired_at(self, name: str, seen: ObjectInfo) -> Optional[bool]:
        if self.by_path is None:
            self.by_path = {f["path"]: f for f in self.m["files"]}
        f = self.by_path.get(name)
        return None if f is None else holds_original(self.ostore, seen, f)

    def hold(self) -> bool:
        self.held = PutBackHold(self.ostore, self.out, self.m["op_id"], self.resume)
        return lock_runs(self.st, [self.out.run] + self.along, self.held.held_as, self.held.locks, self.out)

    def resumed_op_id(self) -> None:
        """A resumed restore's op id, the one its journal records (``RESTORE_OP``): one read, under
        the locks. A journal written without it (an earlier release's) is given this attempt's,
        recorded in it (one conditional put), so a later attempt names the same."""
        held = self.held
        if not self.resume or held is None:
            return
        held.jpath = journal_path(self.ostore, held.held_as)  # it stands, whatever this read says
        j = ObjectJournal.read(self.st, held.jpath)
        if j is None:
            return
        self.begun_changed = left_changed(j.doc, (f["path"] for f in self.m["files"]))
        recorded = j.doc.get(RESTORE_OP)
        if is_op_id(recorded):
            self.op_id = recorded
            return
        self.op_id = new_op_id()
        j.step(j.step_name or "restoring", **{RESTORE_OP: self.op_id})

    def begin(self, op_id: str, report: txn.Report) -> None:
        """Every copy checked, then the journal naming restore ``op_id`` and the paths it leaves
        (``Refused`` with a copy missing, or every one changed)."""
        ostore, vault, m, held = self.ostore, self.vault, self.m, self.held
        assert held is not None
        # a disk's rule (``retire.DiskUnretire.begin``): a copy not as recorded stays in the vault
        # and is named (``not_restored``, ``backup_changed``), the others go back, as the begin
        # record says (a resumed restore leaves those its begin record named, whatever they read
        # now, and refuses one changed since); one missing, or every one changed, refuses it
        left = set(self.begun_changed) if self.resume else set()
        damaged, changed = [], []
        for f in m["files"]:
            if f["path"] in left:
                continue
            state = _copy_state(ostore, vault, f)
            if state == CHANGED and not self.resume:
                changed.append(f["path"])
            elif state != RECORDED:
                damaged.append(f["path"])
        if not damaged and changed and len(changed) == len(m["files"]):
            damaged = changed  # nothing would come back: refused, as before
        if damaged:
            why = f"retired objects missing or damaged in the vault: {', '.join(damaged[:5])}; nothing was changed"
            if self.resume:
                why += "; the journal is kept"
                held.jpath = journal_path(ostore, held.held_as)
            raise txn.Refused(why)
        self.changed = sorted(left) if self.resume else changed
        if not self.resume:  # before the first put-back: the next start finishes a restore stopped midway
            doc = restore_journal(ostore, vault, m, UNRETIRE_KIND, self.out.run, self.along)
            start_journal(self.st, dict(doc, **{RESTORE_OP: op_id, CHANGED_PATHS: changed}))
        held.jpath = journal_path(ostore, held.held_as)

    def put_back(self, report: txn.Report) -> None:
        """Every object gone from its key copied back, create-only and checked."""
        ostore, vault, out, held = self.ostore, self.vault, self.out, self.held
        assert held is not None
        present = run_listing(ostore, vault, out.run)
        self.conflicts.extend(self.changed)  # never read as the run's bytes, never put back
        for i, f in enumerate(self.m["files"]):
            if f["path"] in self.changed:
                continue
            cur = present.get(f["path"])
            if cur is None:
                held.started = True
                try:
                    _copy_back(ostore, vault, f, listed_absent=True, moved_from=self.m.get(MOVED_FROM))
                except StoreFailure as e:
                    if e.code != StoreError.ALREADY_EXISTS:
                        raise
                    cur = BucketState.of(ostore).head(ostore.path(f["path"]))
                else:
                    out.created_files.append(f["path"])
                    out.bytes_after += f["size"]
                    if i == 0:
                        faults.hit("unretire.mid_move")
                    continue
            if cur is not None and holds_original(ostore, cur, f):
                out.bytes_after += f["size"]  # back already (a restore stopped midway)
            else:
                self.conflicts.append(f["path"])

    def settle(self, op_id: str, report: txn.Report) -> Tuple[str, Optional[Code]]:
        """The manifest marked restored (keys another object holds now named ``not_restored``:
        their originals stay in the vault only, which purge keeps; the outcome coded so, as on
        every store), the copies of the originals back released (``unretire.manifest`` right
        after the mark), the journal removed."""
        m, st, held, conflicts = self.m, self.st, self.held, self.conflicts
        assert held is not None
        if len(conflicts) < len(m["files"]):
            # a copy (or blob) goes only while its key still holds its original (review R7 F5): a
            # writer that replaced or removed one since it went back (a job resumed on the restored
            # run) leaves it not_restored, its original kept, as a disk's look before it lets go does
            now = run_listing(self.ostore, self.vault, self.out.run)
            conflicts.extend(f["path"] for f in m["files"] if f["path"] not in conflicts and (
                now.get(f["path"]) is None or not holds_original(self.ostore, now[f["path"]], f)))
        at = now_s()
        marks = {"restored_at": at, "restored_with": who(), "restored_by": op_id}
        doc = dict(m, **marks)
        left = set(conflicts)
        # the copies of the originals back go, the disk's rule (its restore removes the retired
        # tree, or each files/<n> but those of the paths left): all, the manifest marked purged; or
        # each entry marked released in the same write, the others kept (purge keeps them whole);
        # a vault of blobs forgets the digests nothing else names, under its lock
        back = [f for f in m["files"] if f["path"] not in left]
        if moved_unclaimed(m):
            # moved here by its records alone: a copy made before the move may rely on these copies
            # (review R14 G5): the run is back, the vault's copies stay, listed by purge as kept;
            # restored for this logdir only, the other's run still retired (review R16 M1)
            back = []
            if conflicts:
                marks["not_restored"] = sorted(left)
            doc = restore_doc(self.ostore, m, marks)
        elif conflicts:
            doc["not_restored"] = sorted(left)
            doc["files"] = [dict(f, **{RELEASED_BY: op_id}) if f["path"] not in left else f for f in m["files"]]
        else:
            doc.update(backup_purged=True, purged_at=at, backup_released_by_restore=op_id)

        def mark() -> None:
            st.update(self.vault.manifest(held.held_as), manifest.bucket_form(doc),
                      m.get("_version") or st.read(self.vault.manifest(held.held_as))[1])
            faults.hit("unretire.manifest")  # the disk's instant: the retirement marked restored

        def unnamed() -> None:  # a vault of blobs: the restore's journal names the digests it forgets
            must_delete(self.ostore, [held.jpath])
            held.jpath = None

        released, failure = release_restored(self.ostore, self.vault, m, mark, back, unnamed) if back else (None, None)
        if not back:
            mark()
        must_delete(self.ostore, [p for p in (held.jpath, released) if p])
        held.jpath = None
        reason = (f"{len(m['files']) - len(left)} object(s) back byte for byte (checksums checked); the "
                  "object store keeps no modification times: restored objects are dated now")
        if failure is not None:
            reason += release_note(failure)
        if conflicts:
            changed = sorted(left & set(self.changed))
            self.out.found(Finding.NOT_RESTORED, sorted(left))
            self.out.found(Finding.BACKUP_CHANGED, changed)
            if changed:  # a disk's words (``retire.unretire_commit``)
                reason += (f"; {len(changed)} retired object(s) whose copies are not as recorded, e.g. {changed[0]}: "
                           "left in the vault (not put back), and purge keeps them")
            others = sorted(left - set(changed))
            if others:
                reason += (f"; {len(others)} key(s) hold another object now and were left as they are, e.g. "
                           f"{others[0]}: their originals stay in the vault, and purge keeps them")
            return reason, Finding.NOT_RESTORED  # the code every store says a path left with
        return reason, Finding.MTIME_NOT_KEPT

    def journaled(self) -> bool:
        return self.held is not None and self.held.jpath is not None

    def started(self) -> bool:
        return self.held is not None and self.held.started

    def drop_journal(self) -> None:
        held = self.held
        if held is not None and held.jpath is not None:
            held.jpath = drop_journal(self.ostore, held.jpath)

    def code_of(self, error: BaseException) -> Code:
        return failure_code(error)

    def release(self) -> None:
        if self.held is not None:
            self.held.let_go()


def _copy_state(ostore: ObjectStore, vault: BucketVault, f: dict) -> str:
    """What the vault holds of ``f``'s backup, a disk's words (``retire_tree.stored_as``; an
    object is never appended to, so never ``GROWN``): ``RECORDED`` (a blob added by this logdir
    that reads back to its sha256, or a copy of its size and checksums), ``CHANGED`` (a copy of
    another size or checksums, a blob whose bytes do not hash) or ``MISSING`` (no copy; a blob
    not there, forgotten, or one the store failed to read: no reason to leave it for good)."""
    if is_blob_entry(f):
        bad = entry_failure(vault, f)  # one read of the blob (R28's reread: it was hashed twice)
        if bad is None:
            return RECORDED
        # only a blob there, claimed, whose bytes do not hash has changed
        return CHANGED if bad.code == BlobError.CORRUPT else MISSING
    info = BucketState.of(ostore).head(f["backup"])
    if info is None:
        return MISSING
    if info.size != f["size"]:
        return CHANGED
    want = f.get("backup_checksums") or f.get("checksums") or {}
    return CHANGED if same_content(content_checksums(info), want) is False else RECORDED


def retirements(manifests: List[dict]) -> List[dict]:
    """The retirements of a bucket catalogue that keep a run out of the logdir now, newest first
    (``retire_rules.restorable_retirements``: verified, neither restored nor purged)."""
    return restorable_retirements(manifests)


__all__ = ["retire_run", "BucketRetire", "unretire", "BucketUnretire", "settle", "rollback", "retirements", "is_retire_journal", "journal_runs",
           "stored_key", "manifest_doc", "rolled_back_line", "RETIRE_STEPS", "UNRETIRE_STEPS", "UNRETIRE_KIND", "RESTORE_OP"]
