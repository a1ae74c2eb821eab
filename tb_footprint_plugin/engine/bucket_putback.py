"""What a bucket's put-back transactions share: the restore of a reduction
(``bucket_restore.ObjectRestore``) and of a retired run (``bucket_retire.BucketUnretire``, the
bucket's layout of ``unretire_run.Unretire``).

Both are a ``txn.PutBack`` under the lock of their runs, with a journal object named by the
operation they put back (``held_as``): a lock naming it is not taken over while the journal stands,
and purge leaves its copies alone. Neither is ever undone (no rollback record): when a step fails,
the journal goes if nothing was put back yet (the run is as it was), else it stays with its locks
and the next start finishes the put-back (``settle_failed_journal``). At the end the locks are no
longer renewed and deleted, unless the journal stands. Written once here (``duplicates --change``
found the two copies). And a restore's words on what of each object's headers went back with
it from a blob folder (``headers_said``).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from tb_footprint_plugin.codes import Failure, Finding, StoreError
from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.bucket_blob_index import collect
from tb_footprint_plugin.engine.bucket_objects import entry_headers
from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry
from tb_footprint_plugin.engine.bucket_purge_journal import purge_journal_first, renew
from tb_footprint_plugin.engine.bucket_state import (
    ACTIVE_OPS,
    BucketState,
    BucketTxnError,
    BucketVault,
    failure_code,
    must_delete,
    new_journal,
    STORE_FAILURES,
    unlock_all,
)
from tb_footprint_plugin.engine.context import Cancelled, RunOutcome, new_op_id
from tb_footprint_plugin.engine.putback import at_free_name
from tb_footprint_plugin.engine.salvage import salvage_name
from tb_footprint_plugin.engine.unretire_run import JOURNAL_KEPT, NOTHING_PUT_BACK
from tb_footprint_plugin.engine.lease import RunLease
from tb_footprint_plugin.storage.remote import DELETE_BATCH as STORE_DELETE_BATCH, ObjectInfo
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore


#: the fewest of an operation's copies deleted between two looks at its journal's lease
MIN_DELETE_BATCH = 256


def copy_keys(m: dict) -> List[str]:
    """The keys of operation ``m``'s own backup copies in the vault (a blob of a vault of blobs is
    the vault's to forget once nothing names it)."""
    return [f["backup"] for f in m["files"] if not is_blob_entry(f)]


def store_delete_batch(ostore: ObjectStore) -> int:
    """How many of an operation's copies go between two looks at its journal's lease on
    ``ostore``: the store's own delete batch (``remote.DELETE_BATCH``: one request of up to 1,000
    on S3, 256 on Azure), at least ``MIN_DELETE_BATCH`` (256 on GCS, one request a key), so no
    batch comes near half a lease (60 s) and an operation's copies take the requests they always
    took (review R6 F2: a fixed 256 made S3 send four requests for 1,000 copies)."""
    return max(MIN_DELETE_BATCH, STORE_DELETE_BATCH.get(ostore.protocol, 1))


def delete_copies(ostore: ObjectStore, m: dict, keep_lease: Callable[[], object],
                  batch: Optional[int] = None, files: Optional[List[dict]] = None) -> Optional[BaseException]:
    """Operation ``m``'s backup copies (those of its entries ``files`` if given) deleted, ``batch``
    keys at a time (``store_delete_batch`` unless given), ``keep_lease`` (its journal's) called
    before every batch but the first; the first failure, once every batch was tried (None: all
    gone)."""
    failure: Optional[BaseException] = None
    keys = copy_keys(m if files is None else dict(m, files=files))
    batch = batch or store_delete_batch(ostore)
    for at in range(0, len(keys), batch):
        if at:
            keep_lease()
        try:
            must_delete(ostore, keys[at:at + batch])
        except (BucketTxnError, *STORE_FAILURES) as e:
            failure = failure or e
    return failure


def release_restored(ostore: ObjectStore, vault: BucketVault, m: dict, mark: Callable[[], None],
                     files: Optional[List[dict]] = None,
                     unnamed: Callable[[], None] = lambda: None) -> Tuple[Optional[str], Optional[BaseException]]:
    """The copies of restored operation ``m`` released as a purge releases an operation's (issue
    #26: a restore lets its backup go on every store): every copy (restored whole), or those of
    its entries ``files`` (the originals that went back, when another stayed in the vault). A
    purge journal naming it (``purge_journal_first``, with its holder's lease) first, then
    ``mark()`` (``m``'s manifest written restored and purged, or each released entry marked
    ``catalogue_rules.RELEASED_BY``: from then on nothing points at those copies, and a start
    finishes a release stopped there, ``KilledBucketPurges``), then the copies deleted
    (``delete_copies``, the lease renewed between batches), or, in a vault of blobs, what nothing
    names forgotten under its exclusive lock (``collect``, once ``unnamed()`` removed what named
    them still: the restore's own journal). Returns the journal's path when the caller is to
    remove it (every copy gone), and the first failure (the journal then stays: the next start
    finishes the release)."""
    entries = m["files"] if files is None else files
    blobs = vault.blobs is not None and any(is_blob_entry(f) for f in entries)
    if not (copy_keys(dict(m, files=entries)) or blobs):
        mark()
        return None, None
    release_id = new_op_id()
    ACTIVE_OPS.add(release_id)  # a start of this process leaves it alone while it runs
    late = _LATE.get()
    try:
        jnl = new_journal(BucketState.of(ostore), release_id, purge_journal_first(ostore, vault, release_id, [m]))
        mark()

        def keep_lease() -> None:
            with contextlib.suppress(BucketTxnError, *STORE_FAILURES):
                renew(jnl)  # one lost (a start finished this release): the copies go on going all the same

        failure = delete_copies(ostore, m, keep_lease, files=entries)
        if blobs and late is not None and failure is None:
            # a restore of many runs: this one's names gone, its purge journal left for the one
            # forget at the restore's end (``forgets_at_end``), or for the next start
            try:
                unnamed()
            except (BucketTxnError, *STORE_FAILURES, OSError) as e:
                return None, e
            late.journals.append((jnl.path, release_id, str(m.get("run"))))
            return None, None
        if blobs:
            failure = failure or forget_unnamed(ostore, vault, unnamed)
        return (None if failure else jnl.path), failure
    finally:  # from here on its journal, if left, is a gone holder's: the next start finishes it
        if late is None or not late.journals or late.journals[-1][1] != release_id:
            ACTIVE_OPS.discard(release_id)


class LateForgets:
    """The forgets of a vault of blobs a restore of many runs puts off to its end: each retired
    run's release journal (path, its id, the run) left standing, and the end's failure."""

    def __init__(self) -> None:
        self.journals: List[Tuple[str, str, str]] = []
        self.failure: Optional[BaseException] = None

    def runs(self) -> List[str]:
        return [run for _p, _i, run in self.journals]


#: the ``LateForgets`` of the restore under way in this context, if it puts its forgets off
_LATE: contextvars.ContextVar[Optional[LateForgets]] = contextvars.ContextVar("bucket_late_forgets", default=None)


@contextlib.contextmanager
def forgets_at_end(ostore: ObjectStore, vault: BucketVault) -> Iterator[LateForgets]:
    """Within it, a restored retirement's blobs are not forgotten at its restore but once at the
    end, for every run it restored (``forget_unnamed``: its 2 listings and a read per manifest and
    journal in the bucket, paid once instead of once a run), then their release journals removed.
    Each run's mark and release journal are written at its restore as before, so a stop in between
    (an exception out of the block: nothing forgotten here) leaves journals the next start
    finishes (``KilledBucketPurges``). ``failure`` says an end's forget that did not happen."""
    late = LateForgets()
    token = _LATE.set(late)
    ended = False
    try:
        yield late
        ended = True
    finally:
        _LATE.reset(token)
        try:
            if ended and late.journals:
                late.failure = forget_unnamed(ostore, vault)
                if late.failure is None:
                    try:
                        must_delete(ostore, [p for p, _i, _r in late.journals])
                    except (BucketTxnError, *STORE_FAILURES) as e:
                        late.failure = e  # the forget is done: the next start only removes them
        finally:
            for _p, release_id, _r in late.journals:
                ACTIVE_OPS.discard(release_id)


def release_note(failure: BaseException) -> str:
    """What a restore's outcome says of a release that did not finish."""
    return f"; the vault's copies were not all released ({failure}): the next start releases the rest"


def forget_unnamed(ostore: ObjectStore, vault: BucketVault,
                   unnamed: Callable[[], None] = lambda: None) -> Optional[BaseException]:
    """A vault of blobs' forget of what no manifest or journal names (``collect``, under its
    exclusive lock: an add in flight is waited for), after ``unnamed()``; the failure, or None."""
    try:
        unnamed()
        fig = collect(ostore, vault)
    except (BucketTxnError, *STORE_FAILURES, OSError) as e:
        return e
    if fig.get("blocked") or fig.get("blocked_by_damaged_index"):
        why = fig.get("blocked") or "an index object of it does not read"
        return BucketTxnError(Failure.STORE_ERROR, f"{vault.blobs.folder if vault.blobs else vault.root}: {why}")
    return None


def drop_journal(ostore: ObjectStore, jpath: str) -> Optional[str]:
    """The journal of a put-back that put nothing back deleted (the run is as it was); its path
    while it stands (it could not be deleted now), else None."""
    try:
        must_delete(ostore, [jpath])
        return None
    except (BucketTxnError, *STORE_FAILURES):
        return jpath


def settle_failed_journal(ostore: ObjectStore, jpath: Optional[str], started: bool, out: RunOutcome) -> Optional[str]:
    """After a restore of a reduction failed: its journal goes when nothing was put back yet (the
    run is as it was), else it stays and ``out.reason`` says the next start finishes the restore,
    as a retired run's restore says it on every store (``unretire_run``). Returns the journal's
    path while it stands (its lock stays with it), else None."""
    if jpath is not None and not started:
        jpath = drop_journal(ostore, jpath)
    if jpath is not None:
        out.reason += JOURNAL_KEPT
    return jpath


def beside_at_free_name(ostore: ObjectStore, path: str, present: Mapping[str, ObjectInfo],
                        write: Callable[[str], None], holds: Callable[[str, ObjectInfo], bool]) -> Tuple[str, bool]:
    """Bytes kept beside ``path`` at its first free ``<path>.salvaged-NNN`` in a bucket (a
    rollback's writer's object, a restore's late records): the walk every store shares
    (``putback.at_free_name``; ``salvage_name`` fits NAME_MAX where the store has one), each name
    looked at in ``present`` (the run's listing) or by a head. ``write(name)`` writes them there
    create-only (``ALREADY_EXISTS``: made since the look, kept and never replaced, the walk goes
    on); ``holds(name, info)`` says whether a taken name, ``info`` as it was looked at, holds
    exactly these bytes (an earlier, interrupted attempt's, taken as it). Returns the name and
    whether they were written there now."""
    state = BucketState.of(ostore)
    seen: Dict[str, Optional[ObjectInfo]] = {}  # what the listing or a head said of each name

    def looks_free(name: str) -> bool:
        seen[name] = present.get(name) or state.head(ostore.path(name))
        return seen[name] is None

    def place(name: str) -> bool:
        try:
            write(name)
        except StoreFailure as e:
            if e.code != StoreError.ALREADY_EXISTS:
                raise
            seen[name] = state.head(ostore.path(name))  # made since the look: kept, never replaced
            return False
        return True

    def taken_by_them(name: str) -> bool:
        info = seen.get(name)
        return info is not None and bool(holds(name, info))

    return at_free_name(lambda k: salvage_name(path, k), place, taken_by_them, looks_free)


class PutBackHold:
    """What a bucket's put-back holds and how it lets it go (module doc), for a transaction
    (``ObjectPutBack``) or a store's layout of one (``bucket_retire.BucketUnretire``): the locks
    taken into ``locks``, ``jpath`` while the journal stands (then the locks stay with it),
    ``started`` once a put-back may have been made. ``note_failure``, ``settle_journal`` and
    ``let_go`` are the failure, its journal's settling and the end, once."""

    def __init__(self, ostore: ObjectStore, out: RunOutcome, held_as: str, resume: bool) -> None:
        self.ostore, self.out, self.held_as = ostore, out, held_as
        self.mine = held_as not in ACTIVE_OPS  # another put-back of it in this process keeps it live
        ACTIVE_OPS.add(held_as)
        self.locks: List[RunLease] = []  # the lock objects held (the journal names their paths)
        self.jpath: Optional[str] = None  # the journal while it stands (then the locks stay with it)
        self.started = resume  # whether an object may have been put back already
        self.ended = False

    def note_failure(self, error: BaseException) -> None:
        """Why the put-back stopped, and its code (the bucket's one rule, ``failure_code``)."""
        self.out.reason, self.out.code = str(error), failure_code(error)
        if isinstance(error, Cancelled):  # honoured only before the first put-back
            self.out.reason += NOTHING_PUT_BACK

    def settle_journal(self) -> None:
        """Nothing is undone: the journal goes if nothing was put back, else it stays."""
        self.jpath = settle_failed_journal(self.ostore, self.jpath, self.started, self.out)

    def let_go(self) -> None:
        """Once: the locks no longer renewed, and deleted unless the journal stands (a lock that
        cannot be deleted now is left to its lease: its holder is gone once this ends)."""
        if self.ended:
            return
        self.ended = True
        if self.mine:
            ACTIVE_OPS.discard(self.held_as)
        ours, versions = unlock_all(self.locks)
        if ours and self.jpath is None:  # a kept journal keeps its locks until it is settled
            try:
                BucketState.of(self.ostore).delete(ours, versions=versions)
            except STORE_FAILURES:
                pass


class ObjectPutBack(PutBackHold, txn.PutBack):
    """A bucket's put-back for ``engine.txn.run`` (module doc): the journal, the failure, the
    rollback that settles the journal and the end that lets the locks go, once (``PutBackHold``).
    A subclass takes the locks into ``locks``, sets ``jpath`` when its journal stands (and
    ``started`` once a put-back may have been made), and does the swap and the commit (which
    removes the journal: ``jpath`` None)."""

    rollback_errors = ()

    def journaled(self) -> bool:
        return False  # never a rollback record: a restore is finished, not undone

    def committed(self) -> bool:
        return self.jpath is not None

    def failed(self, error: BaseException) -> None:
        self.note_failure(error)

    def rollback(self, committed: bool) -> None:
        """Nothing is undone: the journal goes if nothing was put back, else it stays."""
        self.settle_journal()

    def incomplete(self, error: BaseException) -> None:
        raise error  # pragma: no cover - ``rollback`` settles its own failures

    def end(self) -> None:
        self.let_go()


#: what of an object's headers no backup form records (a blob folder keeps bytes, the manifest its
#: Content-Type and user metadata; a server-side copy keeps them all): said where a blob went back
NOT_RECORDED_HEADERS = "Content-Encoding, Content-Disposition, Content-Language, Cache-Control and tags"


def headers_said(ostore: ObjectStore, m: dict, out: RunOutcome) -> str:
    """The restore's words on the headers of the objects it put back from a local blob folder
    (review R26 F5; a server-side copy back keeps every header its backup copy kept, and is said
    nothing of): each uploaded with the Content-Type and user metadata its manifest entry recorded
    (``bucket_objects.entry_headers``, the rule ``bucket_blobs.put_back`` sends them by); an entry
    that records none (a manifest of an older version, an S3 object of no bytes) or whose record is
    refused (larger than the store takes, not a header: ``Finding.BAD_RECORD`` noted on the
    outcome, never sent) is named with what it did not get back. '' when no blob went back."""
    back = set(out.created_files)
    blobs = [f for f in m.get("files") or [] if isinstance(f, dict) and is_blob_entry(f) and f.get("path") in back]
    if not blobs:
        return ""
    unknown: List[str] = []
    refused: List[Tuple[str, str]] = []
    for f in blobs:
        headers, why = entry_headers(f, ostore.protocol)
        if why:
            refused.append((f["path"], why))
        elif headers is None:
            unknown.append(f["path"])
    said = (f"; from the local blob folder each object went back with the Content-Type and user metadata "
            f"recorded at its reduce; its {NOT_RECORDED_HEADERS} are not recorded there: the store's defaults")
    if unknown:
        said += (f"; {len(unknown)} object(s) have no Content-Type or user metadata recorded (a manifest of an "
                 f"older version, or an S3 object of no bytes, which no read answered them for): theirs are not "
                 f"given back (the store's defaults), e.g. {unknown[0]}")
    if refused:
        out.found(Finding.BAD_RECORD, [p for p, _ in refused])
        said += (f"; {len(refused)} object(s) record headers that are not sent ({refused[0][1]}): their Content-Type "
                 f"and user metadata are not given back, e.g. {refused[0][0]}")
    return said


__all__ = ["NOT_RECORDED_HEADERS", "ObjectPutBack", "PutBackHold", "beside_at_free_name", "copy_keys", "delete_copies", "drop_journal",
           "forget_unnamed", "forgets_at_end", "headers_said", "LateForgets", "release_note", "release_restored", "settle_failed_journal", "store_delete_batch"]
