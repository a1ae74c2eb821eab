"""A bucket ledger's objects read back (``engine.ledger_objects`` writes them, ``engine.ledger_fold``
folds them): their keys, the order of several marks of one run (``newest``), and the read of
a folder's objects as untrusted input, one ``ObjectRead`` per object.

An object whose key is not a ledger key, an old object whose run does not hash to its key, or an
entry that fails ``check_entry`` is refused with a code and reported, never used. An object a
fold deleted between a listing and its read is not a mark lost: its marks are in the fold, which
``read_listed`` finds by listing the prefix once more (a fold is written before what it folded
is deleted).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.ledger_entries import LEDGER_VERSION, check_entry
from tb_footprint_plugin.engine.trust import BAD_LEDGER, BAD_LEDGER_ENTRY, Untrusted
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.remote import map_ordered
from tb_footprint_plugin.storage.store import Store, StoreFailure
from tb_footprint_plugin.storage.store_object import listing_of

LEDGERS = f"{STATE_DIR_NAME}/ledgers"
MAX_ENTRY_BYTES = 256 * 1024
#: a worker's object of marks: a batch's runs (``plan.cost.BATCH_RUNS``), a reduce's skips, or a
#: fold (``engine.ledger_fold.FOLD_BYTES``)
MAX_MARKS_BYTES = 16 * 1024 * 1024
#: an object of one run's entry (earlier versions: ``run_hash``) or of a worker's marks (``marks_key``)
_KEY = re.compile(r"^ledgers/(shard-\d+-of-\d+|batch)/(?:([0-9a-f]{32})|w-([0-9a-f]{32})-(\d{1,9}))\.json$")
#: a prefix listed again when an object of its listing was gone at its read (a fold's delete): a
#: fold found by one listing more; a few times at most, each for another fold made meanwhile
RELISTS = 3


def run_hash(run: str) -> str:
    """The name of a run's entry object (a run name is never a key: untrusted)."""
    return hashlib.sha256(run.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def entry_key(folder: str, run: str) -> str:
    """The object of one run's entry, as versions before the objects of marks wrote it."""
    return f"{LEDGERS}/{folder}/{run_hash(run)}.json"


def marks_key(folder: str, token: str, n: int) -> str:
    """The object of a worker's marks: its ledger's ``token``, its batch ``n``."""
    return f"{LEDGERS}/{folder}/w-{token}-{n}.json"


def order(e: dict) -> Tuple[float, int]:
    """Where a run's entry stands among the entries of one folder (``newest``): the time of its
    mark, or a settling's the time of the mark it settled, just after that mark."""
    if "of_mark" in e:
        return float(e["of_mark"]), 1
    return float(e.get("updated_at") or 0), 0


def newest(entries: List[tuple]) -> List[tuple]:
    """Of ``(run, entry, folder, policy)`` the one entry of each run in each folder that tells its
    state (``order``), in the order first found."""
    best: Dict[Tuple[str, str], tuple] = {}
    for t in entries:
        k = (t[2], t[0])
        if k not in best or order(t[1]) >= order(best[k][1]):
            best[k] = t
    return list(best.values())


def tree(store: Store, prefix: str) -> dict:
    """Every object under ``prefix`` (one listing), nothing for a bucket that does not exist."""
    try:
        return listing_of(store, prefix)
    except StoreFailure as e:
        if e.code == StoreError.NOT_FOUND:
            return {}
        raise


@dataclass
class ObjectRead:
    """One ledger object as read: its key and listed version (a fold deletes it at that version
    only), its size, whether its writer closed it (``closed``: True or False as written; None for
    an object of an earlier version, which wrote no such word), its checked entries ``(run,
    entry, folder, policy)`` and how many of its entries were refused."""

    key: str
    version: str
    size: int
    closed: Optional[bool]
    entries: List[tuple] = field(default_factory=list)
    refused: int = 0


def _rel(key: str) -> str:
    return key[len(STATE_DIR_NAME) + 1:] if key.startswith(STATE_DIR_NAME + "/") else key


def _limit(m) -> int:
    return MAX_ENTRY_BYTES if m.group(2) else MAX_MARKS_BYTES


def read_objects(store: Store, objs: dict) -> Tuple[List[ObjectRead], List[Untrusted], bool]:
    """The ledger objects ``objs`` (a listing under ``LEDGERS``: key -> info) read back as
    untrusted input: ``(objects read, refusals, whether one was gone at its read)``."""
    out: List[ObjectRead] = []
    refused: List[Untrusted] = []
    gone = False

    def fetch(key: str):
        """The object's bytes, or None: not a ledger key, too large (refused below), or gone."""
        m = _KEY.match(_rel(key))
        if m is None or objs[key].size > _limit(m):
            return key, None
        try:
            return key, store.read_all(key)
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return key, None
            raise

    # read a few at once: one GET after the other, 10,000 runs' entries took minutes
    for key, data in map_ordered(fetch, sorted(objs)):
        where = store.url_of(key)
        m = _KEY.match(_rel(key))
        info = objs[key]
        try:
            if m is None:
                raise Untrusted(BAD_LEDGER, where, "not a ledger object's key")
            if info.size > _limit(m):
                raise Untrusted(BAD_LEDGER_ENTRY if m.group(2) else BAD_LEDGER, where,
                                f"larger than {_limit(m)} bytes; not read")
            if data is None:
                gone = True  # removed since the listing (a fold's delete: its marks are in the fold)
                continue
            try:
                doc = json.loads(data.decode("utf-8"))
            except (ValueError, RecursionError) as e:
                raise Untrusted(BAD_LEDGER_ENTRY if m.group(2) else BAD_LEDGER, where,
                                f"not JSON ({str(e)[:200]})") from None
            version = getattr(info, "version_token", "") or ""
            if m.group(2) is None:
                got, bad = _marks(doc, where, m.group(1))
                refused += bad
                closed = doc.get("closed") if isinstance(doc.get("closed"), bool) else None
                out.append(ObjectRead(key, version, len(data), closed, got, len(bad)))
                continue
            if not isinstance(doc, dict) or doc.get("version") != LEDGER_VERSION or not isinstance(doc.get("run"), str):
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"not a ledger entry of version {LEDGER_VERSION}")
            if run_hash(doc["run"]) != m.group(2):
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"names run {doc['run'][:200]!r}, which is not its key's")
            entry = check_entry(doc["run"], doc.get("entry"), where)
        except Untrusted as u:
            refused.append(u)
            continue
        pol = doc.get("policy") if isinstance(doc.get("policy"), str) else None
        out.append(ObjectRead(key, version, len(data), None, [(doc["run"], entry, m.group(1), pol)]))
    return out, refused, gone


def _marks(doc, where: str, folder: str) -> Tuple[List[tuple], List[Untrusted]]:
    """A worker's object of marks read back (untrusted): its entries and one refusal per bad
    one; raises ``Untrusted`` (``bad_ledger``) when it as a whole is no such object."""
    if not isinstance(doc, dict) or doc.get("version") != LEDGER_VERSION or doc.get("kind") != "marks" or \
            not isinstance(doc.get("runs"), dict):
        raise Untrusted(BAD_LEDGER, where, f"not a ledger object of marks of version {LEDGER_VERSION}")
    entries, refused = [], []
    for run, rec in doc["runs"].items():
        if not isinstance(rec, dict):
            refused.append(Untrusted(BAD_LEDGER_ENTRY, where, f"entry {str(run)[:200]!r}: not an object"))
            continue
        pol = rec["policy"] if isinstance(rec.get("policy"), str) else None
        # a fold's ``earlier`` mark (``ledger_fold``) is read as one more mark of the run: it tells when
        # the newest is refused here (a folding host's clock ahead), ``newest`` ranks them otherwise
        for k in ("entry", "earlier") if "earlier" in rec else ("entry",):
            try:
                entries.append((run, check_entry(run, rec.get(k), where), folder, pol))
            except Untrusted as u:
                refused.append(u)
    return entries, refused


def read_listed(store: Store, prefix: str, objs: Optional[dict] = None,
                relist: Optional[Callable[[], dict]] = None) -> Tuple[List[ObjectRead], List[Untrusted]]:
    """The ledger objects under ``prefix`` read back (``read_objects``): one listing (none when
    ``objs``, a listing made already, is given), one GET an object; when one was gone at its read
    (a fold deleted it), the prefix listed again and the objects new in it read, so the fold that
    holds its marks is read too."""
    objs = tree(store, prefix) if objs is None else objs
    seen = set(objs)
    reads, refused, gone = read_objects(store, objs)
    for _ in range(RELISTS):
        if not gone:
            break
        now = (relist or (lambda: tree(store, prefix)))()
        new = {k: v for k, v in now.items() if k not in seen}
        seen.update(new)
        more, bad, gone = read_objects(store, new)
        reads += more
        refused += bad
    return reads, refused


def read_entries(store: Store, objs: dict, prefix: str = LEDGERS) -> Tuple[List[tuple], List[Untrusted]]:
    """The ledger objects ``objs`` (a listing of ``prefix``, under ``LEDGERS``: key -> info) read back
    as untrusted input: ``([(run, entry, folder name, policy)], [Untrusted refusals])``, one entry
    per run and folder (``newest``)."""
    reads, refused = read_listed(store, prefix, objs)
    return newest([e for o in reads for e in o.entries]), refused


__all__ = ["LEDGERS", "MAX_ENTRY_BYTES", "MAX_MARKS_BYTES", "ObjectRead", "entry_key", "marks_key", "newest",
           "order", "read_entries", "read_listed", "read_objects", "run_hash", "tree"]
