"""What a restore does the same on every store, written once over the ``Store`` interface: the
rules of a put-back that neither a disk's (``engine.restore``) nor a bucket's
(``engine.bucket_restore``) layout may say its own way.

- **the original is already in place** (``holds_original``): the thing at an original's key has
  the original's size and its digest — the store's own checksums where it keeps them (a
  bucket's, recorded by its reduce), else the sha256 of its bytes read through the store (a
  folder keeps none); such a key is not written again, and a restore checks by it what it put
  back and what of the reduction's output it removes;
- **a grown file still begins with the recorded bytes** (``begins_with``): the first bytes of
  what stands at a key (or of the copy kept of it) hash to the reduced or backed-up bytes';
- **a file set beside another takes the first free name** (``at_free_name``: a salvage file's
  ``<file>.salvaged-NNN``, a writer's file set aside): walk k = 1, 2, …; a create-only write
  at a name that looks free; a taken name reused only where it holds exactly these bytes;
- **a grown file's complete records** (``copy_late_records``): what a resumed writer added
  after the reduced bytes goes back into the run record by record (framing and CRCs checked
  by ``scan.tfrecord``); a trailing partial record stays only in the copy kept in the vault;
- **what it refuses before it starts** (``restore_refusal``, ``backups_refusal``): a newer kept
  reduction of the run, a purged backup, a retired run (from the operations each store reads:
  a disk's manifests, a bucket's catalogue), backups this user may not read or that are damaged
  or missing (as far as each store tells without downloading: a disk's blob check, a bucket's
  listing of the operation's backup keys and its blob folder's check); the same codes and words
  on every store, nothing changed; the lock first, then the backups (a check made before the lock
  could be stale: another process's restore or reduce may be changing the vault);
- **a writer met** (``writer_met``): before anything is put back a skip (``active``,
  ``open_for_writing``), as a reduce and a retirement say; once something went back, failed;
- **the outcome it starts from** (``restore_outcome``): failed (``restore_blocked``), named in
  ``op_id`` by the reduction asked for until the restore's journal is written, then by the
  restore's own record (a disk's own op id; a bucket's restore has none: its journal and its
  history line are the reduction's), as an unretire's (``retire_rules.unretire_outcome``);
- **the outcome's code** (``restore_code``) from what the restore found in the originals'
  places: records back in the run, else bytes kept in the vault (a disk's blob, a bucket's
  kept object), else the store's own (a bucket's ``mtime_not_kept``, a disk's none);
- **what the outcome says**: the originals back and how they were checked (``restored_said``),
  records back in the run (``late_records_said``), bytes kept in the vault (``kept_said``), what
  the reduction made that was changed since, left in place (``left_said``): a restore removes
  only what still holds the reduction's bytes.

What stays each layout's own: how bytes take a name (a disk's temporary, fsync and rename or
journaled copy; a bucket's server-side copy conditional on a version), where a grown file is
kept (a disk's content-addressed blob, a bucket's ``kept/<op>/`` object), the journal's shape
(each reads what older versions wrote) and the release of backups (a disk's vault only).
"""
from __future__ import annotations

import hashlib
import io
from typing import BinaryIO, Callable, Collection, Iterable, List, Mapping, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Code, Failure, Finding, Outcome, StoreError
from tb_footprint_plugin.engine import retire_rules
from tb_footprint_plugin.engine.catalogue_rules import is_kept
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.remote import same_content
from tb_footprint_plugin.storage.store import Store


class Limited:
    """A read-only view of the first ``n`` bytes after the current position of ``f``."""

    def __init__(self, f, n: int) -> None:
        self._f, self._left = f, n

    def read(self, k: int = -1) -> bytes:
        """Up to ``k`` bytes (all that is left of the view when ``k`` < 0)."""
        if self._left <= 0:
            return b""
        k = self._left if k is None or k < 0 else min(k, self._left)
        b = self._f.read(k)
        self._left -= len(b)
        return b

    def tell(self) -> int:
        return 0


def holds_original(store: Store, key: str, f: dict, size: Optional[int] = None,
                   checksums: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the thing at ``key`` holds the original ``f`` names (its ``size`` and its
    ``sha256`` or ``checksums``): the one rule of "already in place" on every store.

    ``size`` and ``checksums``: what a listing or a head of ``key`` gave (a bucket); the size must
    be ``f``'s and, where the store computed checksums, the content the same by them (none in
    common with those recorded: not known to be it, so False); where it computed none, the
    sha256 of the bytes read through ``store`` must be ``f``'s. ``size`` None (a folder, which
    lists nothing first): the store says it, from the file it opened (one open, no stat before
    it), and a key that is absent, a link, a folder on the way that is a link, not a regular file
    or unreadable is not known to hold it: False."""
    want = f.get("size")
    if isinstance(want, bool) or not isinstance(want, int) or want < 0:
        return False  # a record's size is untrusted input: no count of bytes, nothing it names is known
    if size is not None and size != want:
        return False
    if checksums:
        return bool(same_content(dict(checksums), f.get("checksums") or {}))
    sha = f.get("sha256")
    if not is_sha256(sha):
        return False
    if size is not None:
        return begins_with(store, key, size, sha)
    try:
        with store.open_read(key) as r:
            if r.seek(0, io.SEEK_END) != want:
                return False
            r.seek(0)
            return _prefix_is(r, want, sha)
    except OSError:  # the store's own look (a StoreFailure is one): nothing known to be the original
        return False


def begins_with(store: Store, key: str, size: int, sha: str) -> bool:
    """Whether the thing at ``key`` holds at least ``size`` bytes and its first ``size`` have
    sha256 ``sha``: the recorded bytes, perhaps with records a writer appended after them (a grown
    file or object), on every store. Read through ``store.open_read`` in ``CHUNK`` pieces, one
    read (a pread, a ranged GET) each, no stat or head first; a store's failure is raised."""
    with store.open_read(key, size) as r:
        return _prefix_is(r, size, sha)


def _prefix_is(r, size: int, sha: str) -> bool:
    """Whether the next ``size`` bytes of ``r`` are there and have sha256 ``sha``."""
    h, left = hashlib.sha256(), size
    while left > 0:
        b = r.read(min(CHUNK, left))
        if not b:
            return False  # fewer bytes than that
        h.update(b)
        left -= len(b)
    return h.hexdigest() == sha


def at_free_name(name_of: Callable[[int], str], place: Callable[[str], bool], holds: Callable[[str], bool],
                 looks_free: Callable[[str], bool] = lambda name: True) -> Tuple[str, bool]:
    """The one free-name rule of every store: the first name ``name_of(k)`` (k = 1, 2, …) these
    bytes may take, and whether they were written there now. At a name that looks free
    (``looks_free``: a listing, a head, an lstat; where the create-only write is its own look,
    always) they are written create-only (``place``: False when the name is taken, nothing
    written there: a thing made at the name since the look is never replaced); a taken name is
    the answer only where it holds exactly these bytes (``holds``: an earlier, interrupted
    attempt's), else the walk goes on."""
    k = 1
    while True:
        name = name_of(k)
        if looks_free(name) and place(name):
            return name, True
        if holds(name):
            return name, False
        k += 1


def copy_late_records(src: BinaryIO, start: int, size: int, sink, name: str) -> dict:
    """Copy the complete records ``src`` holds between ``start`` and ``size`` to ``sink``
    (anything with ``write``), byte for byte: ``{records, bytes, sha256, partial_bytes,
    corrupt}``. A trailing partial record (a writer in the middle of one) and anything after a
    damaged one are not copied: ``partial_bytes`` counts them. ``name``: how the reader names
    the bytes in its errors."""
    # here, not at the top: the reader brings numpy, which a status or history never needs
    from tb_footprint_plugin.scan.tfrecord import RecordReader

    src.seek(start)
    reader = RecordReader(Limited(src, size - start), raw=True, display_name=name)
    h = hashlib.sha256()
    records = nbytes = 0
    for rec in reader:
        sink.write(rec)
        h.update(rec)
        records += 1
        nbytes += len(rec)
    return {"records": records, "bytes": nbytes, "sha256": h.hexdigest(),
            "partial_bytes": size - start - reader.valid_bytes, "corrupt": reader.status == "corrupt"}


def restore_outcome(m: dict) -> RunOutcome:
    """The outcome a restore of the reduction ``m`` starts from, on every store: failed
    (``RESTORE_BLOCKED``), its bytes the reduced run's, named in ``op_id`` by the reduction it was
    asked to restore (None where ``m`` names no op id), as a cancelled restore and an
    already-restored skip are: what a refusal before its journal carries. Once its journal is
    written the outcome names the restore by its own record: a disk's restore's op id, a bucket's
    the reduction's (it has none of its own; its journal and history line carry the reduction's)."""
    op, n = m.get("op_id"), m.get("bytes_after", 0)
    return RunOutcome(run=str(m.get("run")), status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED,
                      op_id=op if is_op_id(op) else None, bytes_before=n, bytes_after=n)


def restore_refusal(m: dict, mine: Iterable[dict]) -> Optional[Tuple[Code, str]]:
    """Why a restore of the reduction ``m`` is refused whatever its backups hold, or None, on every
    store: a newer kept reduction of its run among ``mine`` (the store's operations: restore that
    first), its backup purged, its run retired now (``retire_rules.retired_now``: restore the
    retirement first). Coded ``RESTORE_BLOCKED``; said before anything is held or changed."""
    mine = list(mine)
    run, started = m.get("run"), m.get("started_at") or 0
    newer = sorted((o for o in mine if is_kept(o) and o.get("run") == run and (o.get("started_at") or 0) > started),
                   key=lambda o: (o.get("started_at") or 0, str(o.get("op_id"))), reverse=True)  # as restorable_ops
    if newer:
        return Failure.RESTORE_BLOCKED, (f"operation {newer[0].get('op_id')} on this run is newer; restore it first "
                                         f"(or restore the whole run: tb-footprint restore LOGDIR {run})")
    if m.get("backup_purged"):
        return Failure.RESTORE_BLOCKED, f"the backup of {m.get('op_id')} was purged; nothing to restore from"
    retired = retire_rules.retired_now(mine, run)
    if retired:
        return Failure.RESTORE_BLOCKED, f"run {run!r} is retired ({retired.get('op_id')}); restore the retirement first"
    return None


def backups_refusal(where: str, damaged: Sequence[str], unreadable: Sequence[str] = (),
                    hidden: Sequence[str] = (), archived: Sequence[str] = ()) -> Optional[Tuple[Code, str]]:
    """Why a restore is refused by what its backups in ``where`` (a vault's folder or URL) were
    found to be before it starts, or None, on every store: ``unreadable`` (this user may not read
    them: ``StoreError.PERMISSION``, a mode to fix, no damage), else ``hidden`` (listed by no pack
    index that reads while one does not: ``Failure.BACKUP_INDEX_DAMAGED``, each with why:
    ``vault_reads.missing_backup``), else ``damaged`` (missing, of another size, not reading back
    to their digest: ``Failure.BACKUP_DAMAGED``), else ``archived`` (offloaded to objects the store
    keeps in an archive class: ``StoreError.ARCHIVED``, each entry naming its object and what to
    ask the store for; never called damaged, and named apart beside damaged ones). Each names the
    originals' paths; nothing was changed."""
    if unreadable:
        return StoreError.PERMISSION, (f"cannot read the backup in {where} of: {', '.join(unreadable)}; nothing was "
                                       "changed. Give this user read access to those files (they are its own "
                                       "backups) and restore again")
    also = f"; archived (not damaged): {'; '.join(archived)}" if archived else ""
    if hidden:
        also = (f"; damaged or missing as well: {', '.join(damaged)}" if damaged else "") + also
        return Failure.BACKUP_INDEX_DAMAGED, (f"backup not found in {where} for: {'; '.join(hidden)}{also}; nothing "
                                              "was changed")
    if damaged:
        return Failure.BACKUP_DAMAGED, (f"backup damaged or missing in {where} for: {', '.join(damaged)}{also}; "
                                        "nothing was changed")
    if archived:
        return StoreError.ARCHIVED, (f"backup archived by the store (not damaged) in {where} for: "
                                     f"{'; '.join(archived)}; nothing was changed")
    return None


def writer_met(code: Code, words: str, started: bool = False) -> Tuple[str, Code, str]:
    """A restore's outcome (status, code, reason) when it meets a writer of its run (``code``: a
    ``Skip``, ``active`` or ``open_for_writing``), on every store: before anything is put back a
    skip, as a reduce's and a retirement's (nothing changed: restore again once the writer
    stopped); once something went back (``started``: past the commit point) failed, the journal
    kept for the next start to finish."""
    return (Outcome.FAILED if started else Outcome.SKIPPED), code, words


def restore_code(displaced: List[dict], default: Optional[str] = None, left_in_vault: Collection[str] = ()) -> Optional[str]:
    """The code of a restore from what it found in the originals' places: an original left in the
    vault because another file stood at its path (``left_in_vault``, the manifest's
    ``not_restored``: ``not_restored``, first — an original asked for is not back, and the CLI's
    restore exits 1 for it), else from ``displaced``: records put back into the run
    (``late_records_restored``), else bytes kept in the vault (``displaced_kept``: a disk's blob,
    ``sha256``, or a bucket's kept object, ``kept``), else ``default`` (the store's own finding: a
    bucket's ``mtime_not_kept``; a disk's None)."""
    if left_in_vault:
        return Finding.NOT_RESTORED
    if any(d.get("late_records") for d in displaced):
        return Finding.LATE_RECORDS_RESTORED
    if any(d.get("sha256") or d.get("kept") for d in displaced):
        return Finding.DISPLACED_KEPT
    return default


def restored_said(n: int, checked: str) -> str:
    """The outcome's first words: ``n`` originals back, each checked by ``checked`` (a disk's
    ``sha256``, a bucket's ``checksums``)."""
    return f"{n} file(s) restored byte for byte ({checked} checked)"


def late_records_said(displaced: List[dict]) -> str:
    """The outcome's words for the records a restore put back into the run ('' when none)."""
    late = [d["late_records"] for d in displaced if d.get("late_records")]
    if not late:
        return ""
    return "; " + ", ".join(f"{x['records']} record(s) written after the reduction kept in the run as "
                            f"{x['file']}" for x in late)


def left_said(paths: List[str]) -> str:
    """The outcome's words for what the reduction made that was changed since: a restore removes
    only what still holds the reduction's bytes, and leaves the rest as it is ('' when none)."""
    if not paths:
        return ""
    return f"; {len(paths)} file(s) changed since the reduction were left in place"


def kept_said(n: int, what: str, how: str) -> str:
    """The outcome's words for ``n`` ``what`` (files, objects) kept in the vault as they stood
    before the restore ('' when none); ``how``: where to look."""
    if not n:
        return ""
    return f"; {n} {what}(s) as they stood before the restore kept in the vault ({how})"


__all__ = ["Limited", "holds_original", "begins_with", "copy_late_records", "restore_refusal", "backups_refusal",
           "restore_outcome", "restore_code", "writer_met",
           "restored_said", "late_records_said", "left_said", "kept_said"]
