"""A bucket logdir moved to another prefix (``aws s3 mv --recursive``, ``rclone move``, ``gsutil
mv``: its ``.tb-footprint`` objects go along), review R11 G3: the manifests in its own state name
their server-side copies by the keys they had at the old prefix. The bucket counterpart of what
``trust.journal_vault`` does for a renamed disk logdir: such a manifest's copies are read where
they stand now, under this logdir's own state, when the old prefix no longer holds that
operation's manifest (a move); when it still does, this is a copy of a logdir that stands there
(or was made again there): nothing is mapped, and every verb names the manifest with where to
restore it instead (``Finding.PREFIX_MOVED``). Mapped keys lie under this logdir's own vault by
construction: nothing outside it is ever named by a manifest's word alone.

A logdir whose vault is another prefix records its operations in its own state
(``bucket_op_records``) and its manifests say so (``recorded``): whose such a manifest is follows
its record, never the URL alone (review R11 G11's rest): ours where this logdir's state records it
and the URL it names is this one, or holds no record of it (moved here from there, its copies
read where they stand: in the vault); another's otherwise — a new logdir made at a moved one's
URL never lists, restores or purges the moved one's operations. A manifest without the mark
(written before records) is judged by its URL as it always was.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Dict, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Failure, Finding

from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry
from tb_footprint_plugin.engine.bucket_identity import claimed_where, entry_owner, moved_root, same_logdir
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_op_records import OPS, is_recorded, listing_failure, records_at, state_op_ids
from tb_footprint_plugin.engine.bucket_state import BucketTxnError, vault_url
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

#: the manifest's private keys (never written back: ``manifest.bucket_form`` drops ``_`` keys)
MOVED_FROM = "_moved_from"  # the URL of the prefix whose keys were read here (moved)
MADE_AT = "_made_at"  # the URL of the prefix that still holds this operation (a copy): not mapped
BY_RECORD = "_by_record"  # a recorded manifest's ``whose``, judged by the records (``by_record``)
#: what could not be listed to tell whose the manifest is (words): ``whose`` says ``UNSURE``
UNSURE_WHY = "_unsure_why"
#: what ``whose`` says of a manifest
OURS, COPY, OTHERS = "ours", "copy", "others"
#: what ``standing`` says of a logdir's URL; ``UNSURE``, of a URL or a manifest: a listing failed,
#: nothing can be told — never counted as another's silently, never acted on (review R13 F2, F7)
STANDS, NOTHING, UNSURE = "stands", "nothing", "unsure"


def map_moved(ostore: ObjectStore, path: str, m: dict, seen: Optional[Dict[str, Optional[Set[str]]]] = None) -> dict:
    """``m`` (a manifest read from the store path ``path``, in the one schema, without private
    keys) marked ``MOVED_FROM`` when it is a manifest of this logdir's own state made at another
    prefix of the store that holds no manifest of its operation (a move), the backup keys it
    names under that prefix's state then read under this logdir's own state; ``MADE_AT`` set
    instead when that prefix does hold it (a copy: left as it is). A manifest of another vault,
    or of this prefix, is returned as it is. ``seen``: the listings of old prefixes already made
    by this reading. A recorded manifest (``bucket_op_records``) is judged by its records instead
    (``by_record``), wherever it lies."""
    seen = seen if seen is not None else {}
    if is_recorded(m):
        return by_record(ostore, m, seen)
    own = f"{ostore.root}/{STATE_DIR_NAME}"
    if not path.startswith(own + "/manifests/"):
        return m
    old = moved_root(ostore, m.get("logdir"))
    if old is None:
        return m
    url = m["logdir"]
    ops = state_op_ids(ostore, old, "manifests", seen)
    if ops is None:  # a move cannot be told from a copy: nothing mapped, nothing done (R13 F2)
        m[UNSURE_WHY] = (f"made at {url[:300]}, whose state cannot be listed ({listing_failure(seen, 'manifests', old)}): cannot tell "
                         "whether this logdir was moved from there or is a copy of a logdir standing there")
        return m
    if m.get("op_id") in ops:
        m[MADE_AT] = url
        return m
    old_blobs, new_blobs = f"{old}/{STATE_DIR_NAME}/blobs/", f"{own}/blobs/"
    m["files"] = [dict(f, backup=new_blobs + f["backup"][len(old_blobs):])
                  if isinstance(f.get("backup"), str) and f["backup"].startswith(old_blobs) else f
                  for f in m.get("files") or []]
    m[MOVED_FROM] = url
    return m


def by_record(ostore: ObjectStore, m: dict, seen: Dict[str, Optional[Set[str]]]) -> dict:
    """``m``, a recorded manifest, marked ``BY_RECORD``: ``OURS`` when this logdir's own state
    records its operation and the URL it names is this logdir's, or another prefix of the store
    whose state records it no more (moved here from there: ``MOVED_FROM`` that URL; its copies
    lie in the vault, read where they stand); ``OTHERS`` otherwise — a logdir made at a moved
    one's URL records none of its operations, a copy's old URL still records them (a copy, never
    a move); ``UNSURE`` (``UNSURE_WHY`` saying what) when this logdir's records, or those of the
    URL it names, cannot be listed (review R13 F2: such a failure once made it silently another's).
    One listing of each state's records per reading (``seen``)."""
    op = m.get("op_id")
    mine = records_at(ostore, ostore.root, seen)
    m[BY_RECORD] = OTHERS
    if mine is None:  # this logdir's own records: whose it is cannot be told (R13 F2)
        m[BY_RECORD], m[UNSURE_WHY] = UNSURE, (
            f"is recorded in its logdir's state, and this logdir's records ({ostore.url_of(f'{STATE_DIR_NAME}/{OPS}')}) "
            f"cannot be listed ({listing_failure(seen, OPS, ostore.root)}): cannot tell whether it is this logdir's")
        return m
    if op not in mine:
        return m
    url = m.get("logdir")
    if same_logdir(ostore, url):
        m[BY_RECORD] = OURS
        return m
    old = moved_root(ostore, url)
    theirs = records_at(ostore, old, seen) if old is not None else None
    if theirs is not None and op not in theirs:
        m[BY_RECORD], m[MOVED_FROM] = OURS, url
        restored_here(ostore, m)
    elif old is not None and theirs is None:
        m[BY_RECORD], m[UNSURE_WHY] = UNSURE, (
            f"made at {str(url)[:300]}, whose records cannot be listed ({listing_failure(seen, OPS, old)}): cannot tell "
            "whether this logdir was moved from there or is a copy of a logdir standing there")
    return m


def moved_unclaimed(m: dict) -> bool:
    """Whether ``m`` (read by ``map_moved``) is this logdir's only by its records, made at another
    URL (``MOVED_FROM``): a copy of the logdir made before it moved holds the same records, and
    both are judged moved here (review R14 G5). Nothing that frees a vault's copies acts on it
    (purge keeps it, an unretire puts the run back without releasing them): the other may rely
    on them. Restores work; at the URL it names (moved back) it is this logdir's outright."""
    return bool(m.get(MOVED_FROM)) and is_recorded(m)


#: a ``moved_unclaimed`` manifest's restores, one entry per logdir that restored it (``{"logdir": URL,
#: "restored_by", "restored_at", "restored_with", "not_restored", "displaced"}``): each descendant of
#: a copy-then-move judges "restored" for itself (review R16 M1)
RESTORED_AT_URLS = "restored_at_urls"
#: what such a restore records per logdir instead of in the manifest's shared keys
PER_LOGDIR = ("restored_by", "restored_at", "restored_with", "not_restored", "displaced")
#: the manifest's shared keys of ``PER_LOGDIR`` as the vault holds them, while the reader's dict says
#: this logdir's (``restored_here``); written back as they were (``restore_doc``)
SHARED = "_shared_restore"


def restored_here(ostore: ObjectStore, m: dict) -> dict:
    """``m`` (``moved_unclaimed``) saying whether it was restored *at this logdir* (review R16 M1): a
    copy made before the move and the moved original share its one manifest, and one's restore
    must neither hide the other's runs (a silent ``[]``, its runs left reduced or retired) nor pass
    for restored when the other is moved back to the URL the manifest names (its purge would free
    copies it never got back). Its ``PER_LOGDIR`` keys become this logdir's entry of
    ``RESTORED_AT_URLS`` (none: not restored here), the shared ones kept aside (``SHARED``). A
    restore made before the logdir split is in the shared keys only: it counts for neither (a
    restore again finds each original back and says so; nothing is ever freed from here)."""
    shared = m[SHARED] = {k: m[k] for k in PER_LOGDIR if k in m}
    # a rolled-back reduction's ``not_restored`` (its originals kept) is no restore's: it stays
    for k in PER_LOGDIR if shared.get("restored_by") or shared.get("restored_at") else PER_LOGDIR[:3]:
        m.pop(k, None)
    m["restored_by"] = m["restored_at"] = None
    mine = next((e for e in _entries(m) if same_logdir(ostore, e.get("logdir"))), None)
    if mine is not None:
        if isinstance(mine.get("restored_by"), str) and isinstance(mine.get("restored_at"), (int, float)) \
                and not isinstance(mine.get("restored_at"), bool):
            m["restored_by"], m["restored_at"] = mine["restored_by"], mine["restored_at"]
        if isinstance(mine.get("restored_with"), dict):
            m["restored_with"] = mine["restored_with"]
        for k in ("not_restored", "displaced"):  # untrusted: lists of paths, of records
            if isinstance(mine.get(k), list) and all(isinstance(v, str if k == "not_restored" else dict) for v in mine[k]):
                m[k] = mine[k]
    return m


def shared_form(m: dict) -> dict:
    """``m`` with the manifest's shared keys as the vault holds them (``restored_here`` undone)."""
    if SHARED not in m:
        return m
    out = {k: v for k, v in m.items() if k not in PER_LOGDIR and k != SHARED}
    if isinstance(m[SHARED], dict):
        out.update({k: v for k, v in m[SHARED].items() if k in PER_LOGDIR})
    out.setdefault("restored_by", None)
    out.setdefault("restored_at", None)
    return out


def restore_doc(ostore: ObjectStore, m: dict, marks: dict) -> dict:
    """The manifest to write once this logdir restored ``m`` (read by ``map_moved``), ``marks``
    being the restore's ``PER_LOGDIR`` keys: set on the manifest itself, as always; for a
    ``moved_unclaimed`` one, in this logdir's entry of ``RESTORED_AT_URLS`` only, the shared keys
    left as they were (review R16 M1: the other descendant still restores, and one moved back to
    the URL the manifest names never takes it for restored)."""
    if SHARED not in m:
        return {**m, **marks}
    doc = shared_form(m)
    entry = {"logdir": ostore.url, **{k: v for k, v in marks.items() if k in PER_LOGDIR}}
    doc[RESTORED_AT_URLS] = [e for e in _entries(doc) if not same_logdir(ostore, e.get("logdir"))] + [entry]
    return doc


def _entries(m: dict) -> List[dict]:
    """The entries of ``m``'s ``RESTORED_AT_URLS`` (untrusted: anything but a list of objects left out)."""
    got = m.get(RESTORED_AT_URLS)
    return [e for e in got if isinstance(e, dict)] if isinstance(got, list) else []


#: the listings one command's re-judging shares (``one_reading``): None outside one
_READING: "contextvars.ContextVar[Optional[dict]]" = contextvars.ContextVar("bucket_moved_reading", default=None)


@contextlib.contextmanager
def one_reading() -> Iterator[None]:
    """For the ``with`` block (one restore command's operations), ``marked_afresh`` lists each
    state it needs once, not once per operation (a recorded manifest's records: a LIST each).
    Nothing a restore does changes them: no record or manifest of another prefix is written."""
    token = _READING.set({}) if _READING.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _READING.reset(token)


def marked_afresh(ostore: ObjectStore, path: str, m: dict) -> dict:
    """``m`` (in the one schema, read from the store path ``path``: the vault's own key of its
    operation, never the manifest's word) with ``map_moved``'s marks made here, none taken from
    the caller's dict: a recovery passes a manifest as the store holds it, where a planted
    ``_moved_from`` would otherwise pass for one (review R11 G10). Inside ``one_reading``, its
    listings are shared."""
    return map_moved(ostore, path, {k: v for k, v in shared_form(m).items()
                                    if k not in (MOVED_FROM, MADE_AT, BY_RECORD, UNSURE_WHY, SHARED)}, _READING.get())


def whose(ostore: ObjectStore, m: dict) -> str:
    """The one rule of whose operation a manifest read by ``map_moved`` is (review R11 G6: one
    vault prefix may be given to several logdirs, or to a copy of one): ``OURS`` when its
    ``logdir`` is this logdir's URL (normalised), or it is this logdir's own state's moved here
    (``MOVED_FROM``), or it lives in this logdir's own state and names no logdir (none recorded);
    ``COPY`` for one of this logdir's own state made at a prefix that still holds its operation
    (``MADE_AT``: named, never acted on); ``OTHERS`` for the rest, another logdir's (a shared
    vault), never listed, counted, restored or purged here. A recorded manifest is what its records
    say (``by_record``; one not read by ``map_moved`` is another's). ``UNSURE`` for one whose
    judging needed a listing that failed (``UNSURE_WHY``): never acted on, never counted as
    another's, named by every verb (``unsure_row``)."""
    if m.get(UNSURE_WHY):
        return UNSURE
    if is_recorded(m):
        return OURS if m.get(BY_RECORD) == OURS else OTHERS
    if m.get(MOVED_FROM) or same_logdir(ostore, m.get("logdir")):
        return OURS
    if m.get(MADE_AT):
        return COPY
    own = f"{ostore.root}/{STATE_DIR_NAME}/manifests/"
    if m.get("logdir") is None and str(m.get("_path", "")).startswith(own):
        return OURS
    return OTHERS


def others_row(ostore: ObjectStore, vault, others: List[dict]) -> List[dict]:
    """What ``status`` says of the operations of other logdirs in this vault (review R11 G6: one
    prefix given as ``--backup-dir`` to several logdirs): one row, ``Finding.FOREIGN_MANIFEST``,
    counting them and naming their logdirs (untrusted words, shown as text only)."""
    if not others:
        return []
    where = sorted({str(o["logdir"])[:300] for o in others if isinstance(o.get("logdir"), str)})
    shown = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
    url = vault_url(ostore, vault.root)
    return [{"code": Finding.FOREIGN_MANIFEST, "op_id": None, "run": None, "file": url, "bytes": 0,
             "operations": len(others), "logdirs": where,
             "detail": f"{len(others)} operation(s) of other logdirs in this vault {url}"
                       + (f" (made at {shown})" if shown else "")
                       + ": left alone here (never counted, restored or purged from this logdir). If this "
                       "logdir was moved from there, move it back to restore them (never purge at a URL where "
                       "no logdir stands: their backups may be the only copies of this logdir's runs)"}]


def not_ours_refusal(vault, m: dict) -> Optional[BucketTxnError]:
    """Before a restore's journal: why manifest ``m`` (read by the catalogue's one reader) may not
    copy its blobs into the bucket, or None: whose it is cannot be told (``Finding.WHOSE_UNKNOWN``), made at a prefix that still holds it (a copy: where
    to restore it), or an entry whose blob this logdir did not claim where it stands or where
    ``m`` was found moved from (``entry_owner``'s copying rule: another logdir's, whatever id the
    bucket's state says)."""
    if m.get(UNSURE_WHY):
        return BucketTxnError(Finding.WHOSE_UNKNOWN, unsure_words(m))
    if m.get(MADE_AT):
        return BucketTxnError(Failure.REFUSED, f"manifest of {m.get('op_id')} {made_at_words(m[MADE_AT])}")
    if is_recorded(m) and m.get(BY_RECORD) != OURS:
        return BucketTxnError(Failure.REFUSED, f"manifest of {m.get('op_id')} names a record of its operation this "
                              f"logdir's state does not hold (another logdir's, made at {str(m.get('logdir'))[:300]}): "
                              "never acted on here, left in place")
    theirs = [f["path"] for f in m.get("files") or [] if is_blob_entry(f) and vault.blobs is not None
              and entry_owner(vault.blobs, f) is not None
              and entry_owner(vault.blobs, f, copying=True, moved_from=m.get(MOVED_FROM)) is None]
    if theirs:
        where = next((w for f in m.get("files") or [] if f.get("path") == theirs[0]
                      for w in [claimed_where(vault.blobs, f)] if w), None)
        return BucketTxnError(Failure.REFUSED, f"names blobs of {vault.blobs.folder} this logdir did not add where it "
                              f"stands (another logdir's, or another location's): {', '.join(theirs[:5])}"
                              + (f" ({where})" if where else ""))
    return None


def standing(ostore: ObjectStore) -> Tuple[str, Optional[str]]:
    """What stands under the logdir's prefix, its state included: ``(STANDS, None)``, ``(NOTHING,
    None)`` — perhaps the URL a logdir stood at before it was moved (review R11 G11), whose
    operations in a shared vault name this URL and whose backups are the moved logdir's only
    copies — or ``(UNSURE, why)`` when a listing failed (review R13 F7: taken for "something
    stands", it let a purge free a moved logdir's only copies). One listing of the state folder,
    and of the prefix only when that holds nothing."""
    try:
        if BucketState.of(ostore).listing(f"{ostore.root}/{STATE_DIR_NAME}", missing_ok=True):
            return STANDS, None
        return (NOTHING if next(iter(ostore.list("", every_key=True)), None) is None else STANDS), None
    except (StoreFailure, ValueError, OSError) as e:
        return UNSURE, _why(e)


def _why(e: BaseException) -> str:
    """A listing's failure as a verb says it (its message names the object), bounded."""
    return str(e)[:300]


def unsure_words(m: dict) -> str:
    """What every verb says of manifest ``m`` whose owner cannot be told (``UNSURE_WHY``)."""
    return (f"manifest of {m.get('op_id')} (run {str(m.get('run'))[:300]}) {m[UNSURE_WHY]}: never listed as this "
            "logdir's, restored or purged until it can be told; nothing done, left in place — retry once that "
            "listing works")


def unsure_row(ostore: ObjectStore, m: dict) -> dict:
    """A problem row (status, a purge's refused, a restore's outcome) naming manifest ``m`` whose
    owner cannot be told (``Finding.WHOSE_UNKNOWN``): its URL, op, run (and the runs a retirement
    took along), what could not be listed and what to do."""
    row = {"code": Finding.WHOSE_UNKNOWN, "file": vault_url(ostore, str(m.get("_path"))), "op_id": m.get("op_id"),
           "run": m.get("run"), "bytes": 0, "detail": unsure_words(m)}
    along = m.get("takes_along")
    if isinstance(along, list) and along:
        row["takes_along"] = [str(r) for r in along]
    return row


def made_at_words(url: str) -> str:
    """What a verb says of a manifest ``MADE_AT`` another prefix that still holds its operation."""
    return (f"made at {url}, which still holds this operation: this logdir is a copy of that one; restore it "
            f"at {url} — never acted on here, left in place")


def outside_words(m: dict, words: str) -> str:
    """What a restore says of manifest ``m`` naming a key outside the vault: ``words``, or, for this
    logdir's copy of one standing at the prefix it was made at (``MADE_AT``), where to restore it."""
    return f"manifest of {m.get('op_id')} {made_at_words(m[MADE_AT])}" if m.get(MADE_AT) else words


__all__ = ["BY_RECORD", "COPY", "MADE_AT", "by_record", "MOVED_FROM", "OTHERS", "OURS", "made_at_words", "map_moved", "marked_afresh", "moved_unclaimed", "NOTHING", "one_reading", "not_ours_refusal", "others_row", "outside_words",
           "PER_LOGDIR", "RESTORED_AT_URLS", "restore_doc", "restored_here", "SHARED", "shared_form", "STANDS", "standing", "UNSURE", "UNSURE_WHY", "unsure_row", "unsure_words", "whose"]
