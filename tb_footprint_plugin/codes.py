"""Codes for outcomes and reasons: what programs branch on. The prose next to them is for people.

Every member is a ``str`` whose value is what JSON outputs, ledgers and manifests carry, so a
code compares equal to its plain string (``Outcome.VERIFIED == "verified"``) and old records
with plain strings read the same.
"""
from __future__ import annotations

from enum import Enum


class Code(str, Enum):
    """A ``str`` enum that formats as its value on every Python version."""

    __str__ = str.__str__
    __format__ = str.__format__


class Outcome(Code):
    """What happened to one run (``RunOutcome.status``)."""

    VERIFIED = "verified"
    ROLLED_BACK = "rolled_back"
    SKIPPED = "skipped"
    FAILED = "failed"
    DRY_RUN = "dry_run"
    RESTORED = "restored"


class Skip(Code):
    """Why a run is left alone (``RunPlan.code``, ``RunOutcome.code`` of a skipped run)."""

    ACTIVE = "active"  # recent writes: the run is still being written
    NOTHING = "nothing_to_reduce"  # the policy changes nothing in this run
    LOCKED = "locked"  # another process is changing the run
    LEDGER_DONE = "already_in_ledger"  # a resumed batch already settled this run
    CANCELLED = "cancelled"  # the batch was cancelled before this run started
    NOT_IN_PLAN = "not_in_plan"  # the run changed since the plan the user confirmed
    NOT_A_RUN = "not_a_run"  # files TensorBoard attributes to no run
    OPEN_FOR_WRITING = "open_for_writing"  # a process on this machine holds a file of the run for writing
    CHANGED_BY_OTHER = "changed_by_other"  # another process changed the run since it was planned
    UNFINISHED = "unfinished_operation"  # an interrupted operation on the run: `tb-footprint recover` first
    NOT_REGULAR = "not_regular_file"  # a FIFO, socket or device where a file was planned: never opened
    NOT_ON_STORE = "not_supported_on_store"  # the plan needs a step this object store run cannot take yet
    ALREADY_RESTORED = "already_restored"  # the operation was restored before: its originals are back
    PLAN_CHANGED = "plan_changed"  # the run's plan is not the one the user confirmed (it changed meanwhile): plan again
    OTHERS_RUN = "others_run"  # another user owns the run's folder or a file it would change: its owner acts on it (opt in: --include-others-runs)


#: Skips that pass with time, or with the user's say: a resumed batch tries these runs again
#: (another user's run: a rerun with --include-others-runs must not find it "already skipped").
PASSING_SKIPS = frozenset({Skip.ACTIVE, Skip.LOCKED, Skip.OPEN_FOR_WRITING, Skip.CHANGED_BY_OTHER,
                           Skip.UNFINISHED, Skip.PLAN_CHANGED, Skip.OTHERS_RUN})


class Failure(Code):
    """Why a run failed or was rolled back (``RunOutcome.code``)."""

    REFUSED = "refused"  # a preflight check refused the run (symlink, changed file, permissions, space)
    LOCK_ERROR = "lock_error"  # the run's lock file could not be taken
    UNSETTLED = "unsettled_operation"  # an earlier operation on the run is still unfinished
    ERROR = "error"  # a step failed; the run was rolled back
    ROLLBACK_INCOMPLETE = "rollback_incomplete"  # retried by recovery on the next start
    RESTORE_BLOCKED = "restore_blocked"  # a newer operation, a purged or damaged backup
    NOT_FOUND = "not_found"  # no operation of that run or id is recorded (and no damage could hide one)
    INTERRUPTED = "interrupted"  # stopped by Ctrl-C/SIGTERM or its batch's cancel: a reduce run rolled back, a restore finished on the next start
    NO_SPACE = "no_space"  # not enough free space to do it safely; nothing was changed
    BACKUP_DAMAGED = "backup_damaged"  # a backup is missing or does not match its sha256
    BACKUP_INDEX_DAMAGED = "backup_index_damaged"  # a packed backup no readable pack index lists while one does not read: `recover` looks for it in the packs
    STATE_NOT_OURS = "state_not_ours"  # the vault or state folder is a symlink, another user's, or writable by others
    CHANGED_SINCE_BACKUP = "changed_since_backup"  # a file was written after its backup: its new bytes have no backup, left as they are
    STORE_ERROR = "store_error"  # the object store failed or refused a request (the reason names it); nothing is left half-done
    STATE_MOVED = "state_moved"  # the state folder was moved away or replaced mid-operation (the reason names it, and where it is now)
    JOURNAL_GONE = "journal_gone"  # the operation's own journal vanished or was replaced mid-operation (the reason names it)


class Recovery(Code):
    """What recovery did with an unfinished operation (``RecoveryOutcome.action``)."""

    ROLLED_BACK = "rolled_back"
    COMPLETED = "completed"
    SKIPPED_LIVE = "skipped_live"
    FAILED = "failed"
    SALVAGED = "salvaged"  # late writes found in a backup were put back into the run
    KEPT = "kept"  # late writes found in a backup were kept in the vault (nothing to put back yet)
    REBUILT = "rebuilt"  # a missing or corrupt manifest was rebuilt from the vault's operation log
    SWEPT = "swept"  # scratch space of ended processes removed
    REFUSED = "refused"  # the journal is not acted on: malformed or not this logdir's (``engine.trust``)
    RELEASED = "released"  # a restored operation's backup, kept at its restore on a doubt since gone, freed
    REPAIRED = "repaired"  # a backup that shared its inode with a name outside the vault made a copy of its own
    BACKUPS_KEPT = "backups_kept"  # a rollback found an original not as its journal recorded it: its backups (and the manifest) kept, never deleted


class JobCode(Code):
    """What an end-of-training reduction did (``integrations.JobOutcome.code``)."""

    REDUCED = "reduced"  # every run of the job the policy acts on was reduced and verified
    PLANNED = "planned"  # dry run: the plan was logged, nothing changed
    NOTHING_TO_DO = "nothing_to_do"  # the policy changes nothing in the job's runs
    SKIPPED = "skipped"  # a run was left alone (active, locked, ...): see the run outcomes
    FAILED = "failed"  # a run's reduction failed and was rolled back: see the run outcomes
    NO_RUNS = "no_runs"  # the job wrote no file under its log directories
    WRITERS_OPEN = "writers_open"  # the job's own files were still open after close_timeout
    TRAINING_FAILED = "training_failed"  # training raised or was interrupted: nothing reduced
    ERROR = "error"  # the reduction could not start (bad logdir, unexpected exception)



class Refusal(Code):
    """Why the tab refuses a request or keeps its write actions off (``reason_code`` of a refused
    answer, ``actions.codes`` of the tab's state); the tab's script branches on these."""

    READ_ONLY = "read_only"  # TensorBoard was started with --footprint_read_only
    REMOTE_BIND = "remote_bind"  # TensorBoard listens beyond loopback without --footprint_allow_remote_actions
    LOGDIR_NOT_LOCAL = "logdir_not_local"  # the logdir is not on a local disk
    LOGDIR_NOT_WRITABLE = "logdir_not_writable"  # this process cannot write to the logdir
    PEER_NOT_OWNER = "peer_not_owner"  # the connecting process belongs to another local user
    PEER_UNIDENTIFIED = "peer_unidentified"  # the connecting process's user could not be found
    FOREIGN_HOST = "foreign_host"  # a Host header this server does not answer to (DNS rebinding)
    FOREIGN_ORIGIN = "foreign_origin"  # a request made by a page of another origin
    BAD_TOKEN = "bad_token"  # a write without this process's token


class Finding(Code):
    """What a check of the logdir's state found (``status``/``verify``/the tab's problems, purge's
    kept backups, ``RecoveryOutcome.code``). Damage is reported, never silently dropped."""

    UNFINISHED = "unfinished_operation"  # settled by `tb-footprint recover`
    WRITERS_NOT_RULED_OUT = "writers_not_ruled_out"  # processes of other users could not be inspected
    LATE_WRITES_SALVAGED = "late_writes_salvaged"  # records appended to a backup put back into the run
    LATE_WRITES_KEPT = "late_writes_kept"  # bytes appended to a backup kept in the vault
    LATE_WRITES_PENDING = "late_writes_pending"  # a backup grew; the next start salvages it
    LATE_WRITER_RECENT = "late_writer_recent"  # late writes salvaged recently: the writer may go on
    BACKUP_CHANGED = "backup_changed"  # a backup's own bytes changed (not an append): kept as is
    BACKUP_DAMAGED = "backup_damaged"  # a backup is missing, shorter, or does not match its sha256
    BACKUP_OPEN_FOR_WRITING = "backup_open_for_writing"  # a process still writes into a backup's inode
    BACKUP_SHARED = "backup_shared"  # a backup is still a hard link of a name outside the vault (a snapshot's)
    BACKUP_UNSHARED = "backup_unshared"  # `recover` made such a backup a verified copy of its own
    MANIFEST_DAMAGED = "manifest_damaged"  # missing or corrupt; `recover` rebuilds it from the log
    MANIFEST_REBUILT = "manifest_rebuilt"
    MANIFEST_LOST = "manifest_unrecoverable"  # corrupt, and no log to rebuild it from
    ORPHAN_BLOBS = "orphan_blobs"  # backups no manifest refers to: kept, never purged
    MANIFEST_MISSING = "manifest_missing"  # the change log names a verified reduce/retire whose manifest no vault holds: every backup kept
    PACKS_KEPT = "packs_kept"  # packs still listed in part that no forget deletes or repacks (held, or bytes nothing accounts for): kept as space, nothing frees them
    PURGE_FINISHED = "purge_finished"  # a killed purge was finished from its recorded intent
    COMPACTION_FINISHED = "compaction_finished"  # a killed compaction of backups into .zst was finished
    OFFLOAD_FINISHED = "offload_finished"  # a killed or failed offload of backups to the remote vault was finished
    SCRATCH_SWEPT = "scratch_swept"
    RUN_LOCKED = "locked"  # the run is being changed by another process right now
    RECOVERED = "recovered"  # an unfinished operation was settled
    RECOVERY_FAILED = "recovery_failed"  # retried at the next start
    DAMAGED_LINE = "damaged_line"  # a line of an append-only log (oplog, history) is not UTF-8 JSON: skipped
    DAMAGED_FILE = "damaged_state_file"  # a state file (journal, vaults.json, ...) does not parse: never acted on
    IDENTITY_DAMAGED = "identity_damaged"  # identity.json unreadable: the manifests bind themselves; `recover` rebuilds it
    IDENTITY_REBUILT = "identity_rebuilt"  # identity.json rebuilt from the ids the own manifests carry
    PACK_INDEX_REBUILT = "pack_index_rebuilt"  # packed backups a damaged pack index object hid, found again in the packs (hashed) and listed anew
    UNTRUSTED_SET_ASIDE = "untrusted_set_aside"  # a symlink or stranger's entry in a state folder, renamed aside
    LATE_RECORDS_RESTORED = "late_records_restored"  # records written to a reduced file kept in the run by restore
    DISPLACED_KEPT = "displaced_kept"  # bytes a restore or rollback found in a file's place: kept in the vault
    NOT_RESTORED = "not_restored"  # an original a restore did not put back (its name was written again): vault only, never purged
    MTIME_NOT_KEPT = "mtime_not_kept"  # an object store keeps no file times or modes: restored objects are dated now
    OTHER_USERS_STATE = "other_users_state"  # another user's state folder in the logdir: its backups are not yours to use
    LOGDIR_NOT_STICKY = "logdir_not_sticky"  # others may write the logdir, no sticky bit: they can move the state folder away
    STATE_MOVED = "state_moved"  # this logdir's state folder (ours, its identity) stands under another name in the logdir
    WHOSE_UNKNOWN = "whose_unknown"  # a listing failed: whether an operation is this logdir's (moved here, or a logdir standing at its URL) cannot be told; never acted on (retry once it lists)
    MOVED_UNCLAIMED = "moved_unclaimed"  # a recorded operation made at another URL: this logdir moved from there, or a copy made before a move; its copies never freed from here (move it back there to purge)
    PREFIX_MOVED = "prefix_moved"  # a bucket logdir's manifest names backups under the prefix it was made at (the logdir was moved or copied since): its restore must run there, or the prefix be moved back
    HARD_LINKED = "hard_linked_elsewhere"  # a planned original has other hard links (a snapshot's): its swap frees nothing while they stand
    PINS_UNSETTLED = "pins_unsettled"  # backups pinned by an operation with neither a journal nor a manifest: kept, named, never purged
    LEDGER_WRITE_FAILED = "ledger_write_failed"  # a batch ledger's mark was not written (the detail names the run); the run's outcome stands
    ORIGINAL_NOT_IN_PLACE = "original_not_in_place"  # a rollback found a key not holding the original its journal recorded (the reduced bytes or anything else): its backup kept, restorable
    OTHERS_RUN_TAKEN = "others_run_taken"  # another user's run reduced or retired on request (--include-others-runs): its originals are in your vault (the path)
    OWNER_NOT_GIVEN_BACK = "owner_not_given_back"  # a restore by a user who is not root put back files now that user's, not their recorded owner's (only root gives an owner back): each named
    FOLDER_NOT_SETTLED = "folder_not_settled"  # a recorded folder reached only through a link kept its mode and time (its files are back): named, never followed
    # why a record read from the state was refused as untrusted input (``engine.trust.Untrusted``)
    BAD_RECORD = "bad_record"  # a journal or manifest record of the wrong shape or types
    BAD_OP_ID = "bad_op_id"  # an operation id that is no id (it could name a path)
    BAD_DIGEST = "bad_digest"  # a sha256 that is not 64 hex digits
    PATH_OUTSIDE = "path_outside"  # a path outside its run, the logdir or the vault (absolute, '..', a link)
    FOREIGN_STATE = "foreign_state"  # a state folder bound to another logdir (copied or planted)
    FOREIGN_JOURNAL = "foreign_journal"  # a journal of another logdir
    FOREIGN_VAULT = "foreign_vault"  # a vault this logdir does not use
    FOREIGN_MANIFEST = "foreign_manifest"  # a manifest of another logdir
    BAD_MANIFEST = "bad_manifest"  # a manifest that does not parse or check
    BAD_LEDGER = "bad_ledger"  # a ledger file that is no ledger of this version
    BAD_LEDGER_ENTRY = "bad_ledger_entry"  # a ledger entry of the wrong shape
    FOREIGN_LEDGER = "foreign_ledger"  # a ledger of another logdir or batch



class RetireSkip(Code):
    """Why a run the selection matched is not retired (``RetireItem.code``, ``RunOutcome.code``)."""

    MARKED_KEEP = "marked_keep"  # a ``.keep`` file in the run, or the run is on the keep list
    KEPT_BY_RULE = "kept_by_rule"  # one of the best N of its group (keep-best)
    NO_METRIC = "no_metric"  # keep-best cannot rank a run without the metric: left alone
    HOLDS_RUNS = "holds_nested_runs"  # a parent run; retiring it would take runs along the plan did not name
    INSIDE_RETIRED = "taken_along"  # folded into its parent's retirement
    LOGDIR_ROOT = "logdir_root"  # the logdir's own run ('.') cannot leave the logdir
    HOLDS_STATE = "holds_nested_state"  # holds a nested logdir's state or a vault (their backups): never moved
    HOLDS_LINK = "holds_symlink"  # a symbolic link inside the run: a retirement never follows or moves links
    NOT_FOUND = "not_found"  # no such run in the logdir


class SetAside(Code):
    """Why the scan left a folder out of every run (``LogdirFootprint.set_aside[].code``): the
    tool's own folders of another logdir, whose backups no verb of this logdir may move or purge."""

    NESTED_STATE = "nested_state"  # a nested logdir's state folder (its journals, vault, identity)
    NESTED_VAULT = "nested_vault"  # a vault another logdir was given as its --backup-dir


class TagKeep(Code):
    """How a rewritten tag kept what it kept (``RewriteOutcome.tags[tag]["how"]``); its ``why`` is
    the prose shown next to it, never branched on."""

    PINNED = "pinned"  # kept in full whatever the policy says (a restart, shared records, no reader): ``why`` says why
    AT_MOST = "at_most"  # at most N records per tag
    DASHBOARD_EXACT = "dashboard_exact"  # what the Rust data server's default view shows
    DEFAULT_VIEW = "default_view"  # exactly the default view, its first step not forced


class StoreError(Code):
    """Why a ``storage.store.Store`` call failed (``StoreFailure.code``, ``DeleteResult.code``).
    The values of the object-store client's codes (``storage.remote.RemoteError.code``) are kept."""

    NOT_FOUND = "not_found"  # no such file or object
    ALREADY_EXISTS = "already_exists"  # a create-only write (if absent) found the key taken
    PRECONDITION_FAILED = "precondition_failed"  # the key or the source changed since its version was read
    UNSAFE_KEY = "unsafe_key"  # '..', an absolute path, an empty or NUL-bearing key: refused, nothing touched
    SYMLINK = "symlink_refused"  # a symlink where a file or folder of the store belongs: never followed
    NOT_REGULAR = "not_regular_file"  # a FIFO, device, socket or folder where a file belongs: never opened
    TOO_LARGE = "too_large"  # a whole-object read of something bigger than its limit
    NOT_SUPPORTED = "not_supported"  # the store has no such operation (see its ``Capabilities``)
    PERMISSION = "permission_denied"  # the store or the system refused access
    ARCHIVED = "archived"  # the object is in an archive class (S3 GLACIER/DEEP_ARCHIVE, Azure Archive): the store reads it once it is restored (rehydrated)
    NO_CREDENTIALS = "no_credentials"  # the bucket's client found no credentials (the message says what to set)
    NO_SPACE = "no_space"  # the disk or quota is full: the write left nothing half-done
    CONFLICT = "conflict"  # a conditional rewrite (bucket append) kept losing to other writers
    LIST_FAILED = "list_failed"
    COPY_FAILED = "copy_failed"
    MISSING_EXTRA = "missing_extra"  # the scheme's client package is not installed
    UNKNOWN_SCHEME = "unknown_scheme"
    STORE_ERROR = "store_error"  # any other failure of the store (the message says what)


#: Codes of a run or folder left alone because the scan could not enter a folder (a skipped
#: ``RunPlan``/``RunOutcome``): not all done (a reduce's report is not ``ok``), and tried again by a
#: resumed batch, since its owner may fix the permissions meanwhile (review R16 F10).
UNREAD_SKIPS = frozenset({StoreError.PERMISSION, StoreError.STORE_ERROR})
PASSING_SKIPS = PASSING_SKIPS | UNREAD_SKIPS


class BlobError(Code):
    """Why a ``storage.blobstore.BlobStore`` refused or flagged a blob (``BlobFailure.code``)."""

    MISMATCH = "blob_mismatch"  # a source's bytes differ from the sha256/size claimed: nothing stored
    CORRUPT = "blob_corrupt"  # stored bytes do not decode to the blob's sha256/size: refused
    MISSING = "blob_missing"  # no index entry, or its data object is gone
    DAMAGED_INDEX = "index_damaged"  # an index object that does not parse or points outside data/: skipped
    STORE = "blob_store_error"  # the store failed (the message names the object)


__all__ = ["Code", "Outcome", "Skip", "PASSING_SKIPS", "UNREAD_SKIPS", "Failure", "Recovery", "JobCode", "Finding", "RetireSkip", "TagKeep", "StoreError", "BlobError"]
