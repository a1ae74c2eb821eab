"""Restore one bucket operation: every backup copied back server-side and checked.

An original key that exists again is left alone (its original stays in the vault, which purge
keeps). A reduced event object a resumed writer grew is kept whole in the vault, its complete
records put back into the run as ``<file>.salvaged-NNN``, and the original put over it; each of
these steps is idempotent, so a restore stopped midway is finished by the next one.

Before its first put-back a restore writes a journal object (``journal/<op>.json``, named by the
operation it restores, ``kind: restore``: the run and every file to put back with its backup key,
from the manifest); it is removed once the manifest says restored. A restore that stops after some
originals are back (a crash, a failed request) keeps it, and the next start finishes the restore
(``engine.bucket_recover``). One put and one delete of the journal per restore.

The restore is one transaction (``ObjectRestore``) run by ``engine.txn.run``, the driver every
transaction shares: a cancel is honoured before the first original goes back, never after.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional

from tb_footprint_plugin.codes import Failure, Finding, Outcome, StoreError
from tb_footprint_plugin.engine import faults, putback, txn
from tb_footprint_plugin.engine.bucket_blob_folder import recorded_folder, with_recorded_folder
from tb_footprint_plugin.engine.bucket_blob_index import find_hidden, hidden_by_index
from tb_footprint_plugin.engine.bucket_blobs import blobs_of, check_entry, is_blob_entry, names_our_backup, put_back
from tb_footprint_plugin.engine.bucket_moved import MOVED_FROM, marked_afresh, not_ours_refusal, outside_words, restore_doc
from tb_footprint_plugin.engine.bucket_kept import (grown_key, journaled_standing, keep_grown, keep_standing, late_from_kept,
                                                    standing_record)
from tb_footprint_plugin.engine.bucket_objects import HEADERS
from tb_footprint_plugin.engine.bucket_putback import ObjectPutBack, headers_said
from tb_footprint_plugin.engine.bucket_state import (STORE_FAILURES, BucketState, BucketTxnError, BucketVault, journal_path,
                                                     lock_runs, must_delete, must_delete_versioned, new_journal, now_s,
                                                     run_listing, run_prefix, vault_url)
from tb_footprint_plugin.engine.bucket_steps import copy_matches, in_place, renamed, staged_match
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, RunOutcome
from tb_footprint_plugin.engine.journal import OpJournal, Rec
from tb_footprint_plugin.engine.journal_object import ObjectJournal
from tb_footprint_plugin.engine.manifest import A_RESTORE, bucket_form, op_id_of
from tb_footprint_plugin.engine.putback import kept_said, late_records_said, left_said, restore_code, restored_said
from tb_footprint_plugin.engine.retire_rules import new_run_refusal
from tb_footprint_plugin.engine.manifest import read as read_manifest
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.engine.vault import who
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.storage.remote import ObjectInfo, content_checksums, same_content
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore, listing_of


#: ``kind`` of the journal a bucket restore writes (``engine.bucket_recover`` finishes it)
RESTORE_KIND = "restore"


def restore_journal(ostore: ObjectStore, vault: BucketVault, manifest: dict, kind: str, run: str,
                    takes_along: Optional[List[str]] = None) -> dict:
    """The journal a restore of ``manifest`` writes before its first put-back: the operation, the
    run and every file to put back with its backup key (from the manifest, already checked to be
    keys of the logdir and of the vault's blobs)."""
    keep = ("path", "backup", "action", "size", "final", "checksums", "kept_in", "sha256", HEADERS)
    return {"op": manifest["op_id"], "kind": kind, "run": run, "logdir": ostore.url, "vault": vault.root,
            "step": "restoring", "created": now_s(), "takes_along": list(takes_along or []),
            "files": [{k: f[k] for k in keep if f.get(k) is not None} for f in manifest["files"]]}


def start_journal(st: BucketState, doc: dict) -> OpJournal:
    """Create a restore's journal through the one journal interface (``bucket_state.new_journal``,
    create-only), named by the operation restored (``doc['op']``: purge leaves an operation with a
    journal alone, and a lock naming it is not taken over while it stands); one already there is
    an unfinished operation on the same backups, and the restore is refused with
    ``RESTORE_BLOCKED`` (``recover`` settles it first)."""
    try:
        return new_journal(st, doc["op"], doc)
    except StoreFailure as e:
        if e.code != StoreError.ALREADY_EXISTS:
            raise
        raise BucketTxnError(Failure.RESTORE_BLOCKED, f"{st.logdir.url_of(journal_path(st.logdir, doc['op']))}: operation "
                             f"{doc['op']} is unfinished (its journal is there); run `tb-footprint recover` first") from None


def restore_op(ostore: ObjectStore, vault: BucketVault, manifest: dict, resume: bool = False,
               cancel: Optional[CancelToken] = None,
               progress: Optional[Callable[[str, str, float], None]] = None,
               catalogue: Optional[List[dict]] = None) -> RunOutcome:
    """Copy every backup of one operation back server-side, check it against the recorded
    checksums, and mark the manifest restored: ``ObjectRestore`` run by ``engine.txn.run``. An
    original key that exists again is left alone (one holding the original's bytes counts as
    back). ``resume``: finish the restore whose journal is there (``engine.bucket_recover``)
    through the same steps instead of starting one. ``cancel``: honoured before the first
    original goes back (the run left as it was, its journal removed, the outcome coded
    ``interrupted``), never after (a restore is finished, not undone). ``progress(run, step,
    fraction)``: ``restore`` as the first original goes back. ``catalogue``: the vault's
    manifests (``bucket_manifests.manifests``): a restore is refused before its lock, as a disk's,
    when ``putback.restore_refusal`` says so (a newer reduction, a purged backup, a retired run);
    a resumed restore (started already, its journal there) is finished whatever they say."""
    try:  # any shape ever written (a recovery passes the manifest as it reads it)
        manifest = read_manifest(manifest, vault_url(ostore, manifest["_path"]) if isinstance(manifest.get("_path"), str)
                                 else "the operation's manifest")
    except Untrusted as e:
        return RunOutcome(run=str(manifest.get("run")), status=Outcome.FAILED, code=Failure.REFUSED,
                          op_id=op_id_of(manifest), reason=f"{e}; nothing was changed")
    manifest = marked_afresh(ostore, vault.manifest(manifest["op_id"]), manifest)  # moved here? (G3, G10)
    out = putback.restore_outcome(manifest)  # a refusal before the journal names the reduction, as a disk's
    if not resume:
        refusal = putback.restore_refusal(manifest, catalogue or ())
        if refusal:
            out.code, out.reason = refusal
            return out
    try:  # no --backup-dir: the blob folder its manifest records, once it is ours (R21 PD20)
        vault = with_recorded_folder(vault, manifest)
    except BucketTxnError as e:
        out.code, out.reason = e.code, f"{e}; nothing was changed"
        return out
    # blobs an index object removed or lost left listed by nothing: found again first (R23 T13)
    find_hidden(vault, manifest, catalogue or ())
    txn.run(ObjectRestore(ostore, vault, manifest, resume, out), cancel or CancelToken(),
            (lambda step, frac: progress(out.run, step, frac)) if progress is not None else None)
    other = recorded_folder(manifest)
    if out.status == Outcome.FAILED and out.code in (Failure.BACKUP_DAMAGED, Failure.BACKUP_INDEX_DAMAGED) \
            and vault.blobs is not None and other is not None \
            and other != os.path.normpath(vault.blobs.folder):
        # given --backup-dir of one folder while this operation's manifest records another (a logdir
        # reduced into several: r37 W's note): the folder to give is said, not only "missing"
        out.reason += f"; its manifest records the blob folder {other[:500]}: give that one with --backup-dir"
    return out


class ObjectRestore(ObjectPutBack):
    """The steps of a bucket reduction's restore for ``engine.txn.run``, under the lock of its run,
    named (as its journal) by the operation restored: another restore of it in this process keeps
    it (its lock stays live to every check here), a lock naming it is not taken over while its
    journal stands, and purge leaves an operation with a journal alone.

    - **journal**: the run's lock (``NotStarted``, the outcome set, when another holds it), every
      key the manifest names checked before anything moves (a backup outside the vault, a damaged
      blob, a key outside the run, a new run of its name: ``NotStarted``, nothing changed), the journal
      (``kind: restore``; a resumed restore's stands already);
    - **backup**, **stage**, **transform**, **verify**, the last look and the swap record: nothing
      (the backups go back unchanged, each checked as it is put back; the journal is the commit
      point: a cancel is honoured up to here, when nothing is back yet);
    - **swap**: one listing of the run, then each original put back (``_put_back``: a server-side
      copy create-only, or over the reduced object at its version), a grown reduced object kept
      in the vault with its late records salvaged into the run (``bucket_kept.keep_grown``), a compressed
      copy this operation made removed; ``restore.file`` after each original put back;
    - **commit**: the manifest marked restored (``not_restored``, ``displaced``), the journal
      removed, the outcome.

    A failure is never rolled back (``ObjectPutBack``: no rollback record): the journal goes
    when nothing was put back yet, else it stays and the next start finishes the restore; an
    injected fault is a crash, the journal left as it stands."""

    verb = "restore"
    # ValueError: a key the manifest names is not plain; an OSError that is no store failure
    # propagates, as it always has
    errors = (BucketTxnError, *STORE_FAILURES, ValueError, Cancelled)

    def __init__(self, ostore: ObjectStore, vault: BucketVault, manifest: dict, resume: bool, out: RunOutcome) -> None:
        super().__init__(ostore, out, manifest["op_id"], resume)
        self.vault, self.m, self.resume = vault, manifest, resume
        self.run, self.op_id = manifest["run"], manifest["op_id"]
        self.st = BucketState(ostore)
        self.conflicts: List[str] = []
        self.displaced: List[dict] = []
        self.left: List[str] = []  # what the reduction made, changed since: left in place
        self.standing: List[dict] = []  # objects written at removed keys since, as the journal records them
        self.jnl: Optional[ObjectJournal] = None

    def failpoint(self, step: str) -> Optional[str]:
        return None  # ``restore.file`` is the swap's own, hit after each original put back

    def journal(self, report: txn.Report) -> None:
        """The lock, every key checked, then the journal (``NotStarted`` when refused)."""
        ostore, vault, m, out = self.ostore, self.vault, self.m, self.out
        if not lock_runs(self.st, [self.run], self.op_id, self.locks, out):
            raise txn.NotStarted()
        try:
            self._check_keys()
        except (BucketTxnError, *STORE_FAILURES, ValueError) as e:
            self.failed(e)
            raise txn.NotStarted() from None
        if not self.resume:
            # the run deleted and written again under its name (review R9 F7): its originals put
            # back would merge two runs into one; refused as every store refuses it, the backup kept
            present = run_listing(ostore, vault, self.run)  # folder markers are in no listing (remote.is_folder_marker)
            refusal = new_run_refusal(self.run, present, _reduction_at(ostore, m, present), took_all=False,
                                      left=any(in_place(f) or renamed(f) for f in m["files"]))
            if refusal:
                out.reason = refusal
                raise txn.NotStarted()
            self.jnl = start_journal(self.st, restore_journal(ostore, vault, m, RESTORE_KIND, self.run))
        self.jpath = journal_path(ostore, self.op_id)
        if self.resume:  # what it kept before it stopped, as its journal recorded it
            self.jnl = ObjectJournal.read(self.st, self.jpath)
            if self.jnl is not None:
                self.standing = journaled_standing(self.jnl.doc, vault, self.op_id, [f["path"] for f in m["files"]])

    def _check_keys(self) -> None:
        """Every key checked before the journal and the first put-back: each names a backup of this
        vault (its blobs ours to copy: ``not_ours_refusal``) and an original inside the run (``Failure.
        REFUSED``), then the backups as far as the store tells without downloading (``putback.
        backups_refusal``): a blob read back to its sha256, a backup object listed with its original's
        size and checksums (one listing of ``blobs/<op>/``: a restore that started without one could
        never finish)."""
        ostore, vault, m, run = self.ostore, self.vault, self.m, self.run
        damaged_blobs: List[str] = []
        hidden: List[str] = []  # missing only while an index object of the blob folder is damaged
        if (theirs := not_ours_refusal(vault, m)) is not None:  # a copy's, or another's blobs (R11 G3, G10)
            raise theirs
        plain: List[dict] = []
        for f in m["files"]:
            if not names_our_backup(vault, f):
                raise BucketTxnError(Failure.REFUSED, outside_words(m, "manifest names a backup outside the vault"))
            # the journal written from it must be one the next start acts on: keys inside the run
            if not str(f["path"]).startswith(run_prefix(run)) or \
                    (f.get("final") and not str(f["final"]).startswith(run_prefix(run))):
                raise BucketTxnError(Failure.REFUSED, f"manifest of {self.op_id} names a file outside its run {run!r}")
            ostore.path(f["path"])
            if f.get("final"):
                ostore.path(f["final"])
            if is_blob_entry(f):
                blobs_of(vault, f)  # the folder not given: refused
                if not check_entry(vault, f):
                    why = hidden_by_index(vault, f)
                    if why is not None:
                        hidden.append(f"{f['path']} ({why})")
                    else:
                        damaged_blobs.append(f["path"])
            else:
                plain.append(f)
        refusal = putback.backups_refusal(vault.blobs.folder if vault.blobs is not None else "", damaged_blobs,
                                          hidden=hidden)
        if refusal:
            raise BucketTxnError(refusal[0], refusal[1] + _made_where(m))
        refusal = putback.backups_refusal(vault_url(ostore, vault.root), _missing_backups(vault, plain))
        if refusal:
            raise BucketTxnError(*refusal)

    def verify(self, report: txn.Report) -> None:
        """Nothing: each put-back is checked against the recorded checksums as it is made."""

    def swap(self, report: txn.Report) -> None:
        """Every original put back (class doc); ``restore.file`` after each."""
        report("restore", 0.5)  # past the commit point: a front end stops offering a cancel
        ostore, vault, out, conflicts, displaced = self.ostore, self.vault, self.out, self.conflicts, self.displaced
        op_id = self.op_id
        # one listing of the run says which originals exist again: no metadata read per file
        present = run_listing(ostore, vault, self.run)
        for f in self.m["files"]:
            orig = ostore.path(f["path"])
            self.started = True
            # a slim by an earlier version wrote its new bytes under the original's own name:
            # put back over them as an in-place rewrite
            if in_place(f) or (f.get("action") == "rewrite" and staged_match(present.get(f["path"]), f)):
                # put back over the reduced object only while it is the one this operation made
                cur = BucketState.of(ostore).head(orig)
                if cur is not None and holds_original(ostore, cur, f):
                    # the original bytes are there already; a grown object kept by a restore of
                    # this operation that stopped before its record is recorded now
                    kept_info = BucketState.of(ostore).head(f"{vault.root}/{grown_key(op_id, f)}")
                    if kept_info is not None and isinstance(f.get("new_size"), int):
                        displaced.append(late_from_kept(ostore, vault, f, grown_key(op_id, f), kept_info, present))
                    continue
                kept = None
                if cur is not None and not staged_match(cur, f):
                    # a writer that resumed "appended" by writing the reduced bytes plus new records:
                    # the grown object goes to the vault, its records back into the run, and then
                    # the original over it; anything else written there is kept whole, as a disk's
                    kept = keep_grown(ostore, vault, op_id, f, cur, present)
                    if kept is None and self._keep_standing(f, cur) is None:
                        conflicts.append(f["path"])
                        continue
                try:
                    res = _put_back(ostore, vault, f, orig, if_version=None if cur is None else cur.version_token,
                                        moved_from=self.m.get(MOVED_FROM))
                except StoreFailure as e:
                    if e.code == StoreError.PRECONDITION_FAILED and kept is None and \
                            BucketState.of(ostore).head(orig) is None:
                        # deleted between the HEAD and the put (S3 and Azure answer a conditional
                        # put on a missing key so): back create-only, as below
                        cur = None
                        try:
                            res = _put_back(ostore, vault, f, orig, moved_from=self.m.get(MOVED_FROM))
                        except StoreFailure as e2:
                            if e2.code != StoreError.ALREADY_EXISTS:
                                raise
                            conflicts.append(f["path"])
                            continue
                    elif e.code in (StoreError.PRECONDITION_FAILED, StoreError.ALREADY_EXISTS):
                        conflicts.append(f["path"])
                        continue
                    else:
                        raise
                # a reduced object deleted since the reduce (cur None) was counted in bytes_after
                gone = f.get("new_size") if isinstance(f.get("new_size"), int) else 0
                out.bytes_after += f["size"] - (gone if cur is None else cur.size)
                faults.hit("restore.file")
                if kept is not None:
                    displaced.append(kept)
                    late = kept.get("late_records")
                    if late:
                        out.created_files.append(late["file"])
                        out.bytes_after += late["bytes"]
            else:
                res = None
                cur = present.get(f["path"])
                over = None  # the version of an object written there since, kept, the original goes over
                if cur is not None and not holds_original(ostore, cur, f):
                    over = self._keep_standing(f, cur)
                    if over is None:
                        conflicts.append(f["path"])
                        continue
                if cur is None or over is not None:
                    try:
                        res = _put_back(ostore, vault, f, orig, if_version=over, moved_from=self.m.get(MOVED_FROM))
                    except StoreFailure as e:
                        # taken since the look, or written once more since it was kept: left as it
                        # is, its original kept in the vault (a kept copy stays listed)
                        if e.code == StoreError.ALREADY_EXISTS or \
                                (over is not None and e.code == StoreError.PRECONDITION_FAILED):
                            conflicts.append(f["path"])
                            continue
                        raise
                # else: back already (put back by a restore of this operation that stopped midway)
                out.bytes_after += f["size"]
                if res is not None:
                    faults.hit("restore.file")  # the same step as the rewrite's put-back above
            if res is not None and res is not _STREAMED and not copy_matches(ostore, res, f, f["backup"], orig):
                raise BucketTxnError(Failure.BACKUP_DAMAGED, f"{f['path']}: restored copy does not match the original")
            out.created_files.append(f["path"])
            if renamed(f):
                # the original is back: the compressed copy this operation made goes (a file
                # someone wrote under that name since is left alone)
                final = ostore.path(f["final"])
                cur = BucketState.of(ostore).head(final)
                if staged_match(cur, f):
                    must_delete_versioned(ostore, final, cur.version_token)
                    out.removed_files.append(f["final"])
                    out.bytes_after -= int(f.get("new_size") or 0)
                elif cur is not None:
                    self.left.append(f["final"])  # written again since: left, and said

    def _keep_standing(self, f: dict, cur: ObjectInfo) -> Optional[str]:
        """An object written at an original's key since the reduce (``cur``, as listed or read) kept
        in the vault before the original goes over it, as a disk's restore keeps what stood at the
        path: its ``displaced`` record written to the journal first, then the checked copy
        (``bucket_kept.keep_standing``). Returns the version the original goes over, or None when
        it is left as it is (no journal to record it in, changed since it was listed: its original
        stays in the vault, ``not_restored``)."""
        if self.jnl is None or not cur.version_token:
            return None
        entry = standing_record(self.vault, self.op_id, f, cur)
        if not any(d["kept"] == entry["kept"] for d in self.standing):
            self.standing.append(entry)
            self.jnl.step(self.jnl.step_name or Rec.RESTORING, displaced=self.standing)
        return cur.version_token if keep_standing(self.ostore, self.vault, entry, cur) else None

    def commit(self, report: txn.Report) -> None:
        """The manifest marked restored, the journal removed, the outcome."""
        ostore, vault, out, conflicts, op_id = self.ostore, self.vault, self.out, self.conflicts, self.op_id
        # what was kept in the vault of what its journal recorded (a copy refused is not there)
        displaced = self.displaced + [d for d in self.standing if BucketState.of(ostore).head(d["kept"]) is not None]
        manifest_version = self.m.get("_version")
        marks = {"restored_by": A_RESTORE}  # a bucket restore has no op id of its own
        if conflicts:
            # their originals were not put back: the vault holds the only copy, which purge keeps
            marks["not_restored"] = sorted(set(conflicts) | set(self.m.get("not_restored") or []))
        if displaced:
            marks["displaced"] = displaced
        marks["restored_at"] = now_s()
        marks["restored_with"] = who()
        # one made at another URL this logdir was moved from, or copied from before a move: marked
        # restored for this logdir only (the other descendant's runs are not back: review R16 M1)
        manifest = {k: v for k, v in restore_doc(ostore, self.m, marks).items() if not k.startswith("_")}
        version = manifest_version or (BucketState.of(ostore).head(vault.manifest(op_id)) or ObjectInfo("", 0, 0)).version_token
        self.st.update(vault.manifest(op_id), bucket_form(manifest), version)
        must_delete(ostore, [self.jpath])
        self.jpath = None
        out.status = Outcome.RESTORED
        # what it found in the originals' places first (the one rule of every store), else: an
        # object store keeps no modification time or mode of a file, a restored object is dated
        # by the store at the copy, and the report says so (bytes are checked above)
        out.code = restore_code(displaced, Finding.MTIME_NOT_KEPT, left_in_vault=conflicts)
        out.reason = (restored_said(len(out.created_files), "checksums") + "; the object store keeps no file "
                      "modification times or modes: restored objects are dated now")
        out.reason += headers_said(ostore, self.m, out)
        out.reason += late_records_said(displaced)
        out.reason += kept_said(len(displaced), "object", "`tb-footprint status` shows how to bring them back")
        out.reason += left_said(self.left)
        # a disk's restore lets its now redundant backup go; a bucket's copies stay, billed, until a
        # purge: said, not left for the reader to guess (review R17 F9)
        held = sum(f["size"] for f in self.m["files"] if isinstance(f, dict) and isinstance(f.get("size"), int))
        out.reason += (f"; its backup ({human_bytes(held)}) stays in "
                       + ("the bucket's vault (billed)" if vault.blobs is None else vault.blobs.folder)
                       + " until `tb-footprint purge`")
        if conflicts:
            out.reason += (f"; {len(conflicts)} file(s) exist again or were changed since the reduce and were left as "
                           f"they are, e.g. {conflicts[0]}: "
                           "their originals stay in the vault, and purge keeps them")


def _reduction_at(ostore: ObjectStore, m: dict, present: Dict[str, ObjectInfo]) -> Callable[[str], Optional[bool]]:
    """``retire_rules.new_run_refusal``'s look at a key of the run (``present``: its listing): True
    where it holds what the reduction made there (the staged object, by the store's checksums; a
    rewritten one perhaps with records a writer appended, its first bytes read) or the original
    back; False at another key of the reduction's; None at a key it never had."""
    names: Dict[str, List[dict]] = {}
    for f in m["files"]:
        for k in {f["path"], f.get("final")} - {None}:
            names.setdefault(k, []).append(f)

    def grown(name: str, cur: ObjectInfo, f: dict) -> bool:
        size, sha = f.get("new_size"), f.get("new_sha256")
        try:  # gone since the listing, unreadable: not known to be the reduction's
            return in_place(f) and name == f["path"] and isinstance(size, int) and is_sha256(sha) and \
                cur.size > size and putback.begins_with(*BucketState.of(ostore).where(ostore.path(name)), size, sha)
        except OSError:
            return False

    def ours(name: str) -> Optional[bool]:
        cur = present[name]
        return None if name not in names else any(
            staged_match(cur, f) or (name == f["path"] and holds_original(ostore, cur, f)) or grown(name, cur, f)
            for f in names[name])

    return ours


def _missing_backups(vault: BucketVault, files: List[dict]) -> List[str]:
    """The paths of ``files`` (backup-object entries, each a plain key under the vault's
    ``blobs/``) whose backup object is not listed with the original's size and, where the store
    computed some in common, its checksums: one listing of each backup folder (``blobs/<op>/``:
    one for a manifest a reduce wrote), nothing downloaded."""
    if not files:
        return []
    rel = {id(f): f["backup"][len(vault.root) + 1:] for f in files}
    listed: Dict[str, ObjectInfo] = {}
    for folder in sorted({"/".join(k.split("/", 2)[:2]) for k in rel.values()}):
        try:
            listed.update(listing_of(vault.store, folder))
        except StoreFailure as e:
            if e.code != StoreError.NOT_FOUND:
                raise
    bad = []
    for f in files:
        info = listed.get(rel[id(f)])
        if info is None or info.size != f["size"] or \
                same_content(content_checksums(info), f.get("checksums") or {}) is False:
            bad.append(f["path"])
    return bad


def _made_where(manifest: dict) -> str:
    """Where the reduction kept its blobs (untrusted: only ever said, never followed)."""
    folder, host = manifest.get("blob_folder"), manifest.get("host")
    if not isinstance(folder, str) or not isinstance(host, str):
        return ""
    return f" (the reduction kept its backups in {folder[:500]!r} on {host[:200]!r}: restore there)"


#: what ``_put_back`` returns for an original streamed from the blob vault (checked there)
_STREAMED = object()


def _put_back(ostore: ObjectStore, vault: BucketVault, f: dict, orig: str, if_version: Optional[str] = None,
              moved_from: Optional[str] = None):
    """One original back at its key: a server-side copy of its backup (the copy's result, for
    ``copy_matches``), or streamed from the blob vault (``moved_from``: the manifest's ``MOVED_FROM``)
    and checked there (``_STREAMED``); create-only, or only over ``if_version``."""
    if is_blob_entry(f):
        put_back(ostore, vault, f, if_version=if_version, moved_from=moved_from)
        return _STREAMED
    if if_version is not None:
        return BucketState.of(ostore).copy(f["backup"], orig, if_version=if_version, size=f["size"])
    return BucketState.of(ostore).copy(f["backup"], orig, if_absent=True, listed_absent=True, size=f["size"])


def holds_original(ostore: ObjectStore, cur: ObjectInfo, f: dict) -> bool:
    """Whether the object ``cur`` (as a listing or a head gave it) at an original's key holds the
    original's bytes: ``putback.holds_original``, the one rule of every store (size and the
    store's checksums): put back by this operation's restore, or written again byte for byte."""
    return putback.holds_original(ostore, f["path"], f, cur.size, content_checksums(cur))
