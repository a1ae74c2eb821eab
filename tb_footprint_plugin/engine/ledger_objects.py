"""A ledger's bucket layout (a store whose ``capabilities.append`` is ``conditional_rewrite``):
one small object per (shard, run).

A bucket has no append and no lock a file could be rewritten under, and rewriting one ledger
object per transition would upload the whole ledger three times a run (quadratic in the batch).
So each shard writes each of its runs' state to its own object,
``<logdir>/.tb-footprint/ledgers/shard-I-of-N/<sha256(run)[:32]>.json`` =
``{version, run, policy, entry}``, with the entries of ``engine.ledger_entries``: two small
PUTs per run (``reducing``, then ``done`` / ``failed`` / ``skipped``). No two workers of one
batch share an object unless they run the same shard at once, and then the newer write wins.

``read_entries`` reads objects back as untrusted input: an object whose key is not a ledger key,
whose run does not hash to its key, or whose entry fails ``check_entry`` is refused with a code
and reported, never used.

A worker killed between a run's commit and its "done" PUT (the batch's journal and locks gone,
so recovery has nothing to settle) would leave the run ``reducing`` for good. So while a worker
has runs in flight it keeps one marker object, ``<logdir>/.tb-footprint/ledger-inflight/<folder>/
<sha256(host, pid, start, token)[:32]>.json`` = ``{version, host, pid, pid_start, folder, since}``:
put at its first in-flight mark, deleted once none is in flight (two requests a batch, not a
run). The token is the ledger's own: two batches of one process (the TensorBoard plugin runs
several jobs) keep two markers, and one's end or settling leaves the other's. A start lists the
markers once (``engine.ledger.settle_stale_objects``) and reads a folder's entries only for a
marker whose worker is gone.

A batch reads its shard's entries once, at its start (one GET per entry — none in a fresh batch —
found in the listing of the logdir the reduce made anyway, so no listing more); ``start`` writes
nothing (a ``pending`` PUT per run would double the ledger's requests).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.ledger_entries import (IN_FLIGHT_STATES, LEDGER_VERSION, check_entry,
                                                       report_refusals)
from tb_footprint_plugin.engine.trust import BAD_LEDGER, BAD_LEDGER_ENTRY, Untrusted
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.remote import map_ordered
from tb_footprint_plugin.storage.store import Store, StoreFailure
from tb_footprint_plugin.storage.store_object import listing_of

LEDGERS = f"{STATE_DIR_NAME}/ledgers"
#: the in-flight markers of live (or killed) workers, one per worker and ledger folder (module doc)
INFLIGHT = f"{STATE_DIR_NAME}/ledger-inflight"
MAX_ENTRY_BYTES = 256 * 1024
_KEY = re.compile(r"^ledgers/(shard-\d+-of-\d+|batch)/([0-9a-f]{32})\.json$")
MARKER = re.compile(r"^(shard-\d+-of-\d+|batch)/([0-9a-f]{32})\.json$")
MAX_MARKER_BYTES = 4096
#: the markers this process's ledgers hold now (``<folder>/<name>.json``) -> the thread that opened
#: the ledger: an interrupt settles its own batch's only (``held_by``)
_HELD: Dict[str, int] = {}
_HELD_LOCK = threading.Lock()


def run_hash(run: str) -> str:
    """The name of a run's entry object (a run name is never a key: untrusted)."""
    return hashlib.sha256(run.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def folder_of(shard: Optional[str]) -> str:
    """The ledger folder of a shard label (``"i/n"``), or of an unsharded batch (None)."""
    if not shard:
        return "batch"
    i, n = (int(x) for x in shard.split("/"))
    return f"shard-{i}-of-{n}"


def entry_key(folder: str, run: str) -> str:
    return f"{LEDGERS}/{folder}/{run_hash(run)}.json"


def tree(store: Store, prefix: str) -> dict:
    """Every object under ``prefix`` (one listing), nothing for a bucket that does not exist."""
    try:
        return listing_of(store, prefix)
    except StoreFailure as e:
        if e.code == StoreError.NOT_FOUND:
            return {}
        raise


def held_by(rel: str) -> Optional[int]:
    """The thread whose batch holds the marker ``rel`` in this process, or None."""
    with _HELD_LOCK:
        return _HELD.get(rel)


def release(rel: str, thread: Optional[int] = None) -> None:
    """Forget this process's hold of the marker ``rel`` (only ``thread``'s, when given)."""
    with _HELD_LOCK:
        if thread is None or _HELD.get(rel) == thread:
            _HELD.pop(rel, None)


def read_entries(store: Store, objs: dict) -> Tuple[List[tuple], List[Untrusted]]:
    """The ledger objects ``objs`` (a listing under ``LEDGERS``: key -> info) read back as
    untrusted input: ``([(run, entry, folder name, policy)], [Untrusted refusals])``."""
    entries, refused = [], []

    def rel_of(key: str) -> str:
        return key[len(STATE_DIR_NAME) + 1:] if key.startswith(STATE_DIR_NAME + "/") else key

    def fetch(key: str):
        """The object's bytes, or None: not a ledger key, too large (refused below), or gone."""
        if _KEY.match(rel_of(key)) is None or objs[key].size > MAX_ENTRY_BYTES:
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
        m = _KEY.match(rel_of(key))
        try:
            if m is None:
                raise Untrusted(BAD_LEDGER, where, "not a ledger object's key")
            if objs[key].size > MAX_ENTRY_BYTES:
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"larger than {MAX_ENTRY_BYTES} bytes; not read")
            if data is None:
                continue  # removed since the listing
            try:
                doc = json.loads(data.decode("utf-8"))
            except (ValueError, RecursionError) as e:
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"not JSON ({str(e)[:200]})") from None
            if not isinstance(doc, dict) or doc.get("version") != LEDGER_VERSION or not isinstance(doc.get("run"), str):
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"not a ledger entry of version {LEDGER_VERSION}")
            if run_hash(doc["run"]) != m.group(2):
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"names run {doc['run'][:200]!r}, which is not its key's")
            entry = check_entry(doc["run"], doc.get("entry"), where)
        except Untrusted as u:
            refused.append(u)
            continue
        pol = doc.get("policy") if isinstance(doc.get("policy"), str) else None
        entries.append((doc["run"], entry, m.group(1), pol))
    return entries, refused


def read_folder(store: Store, folder: str, objs: Optional[dict] = None) -> tuple:
    """One ledger folder (``batch`` or ``shard-I-of-N``) read back as untrusted input: ``({run:
    (entry, policy)}, problems)`` — one listing (none when ``objs``, its objects from a listing
    made already, is given), one GET per entry."""
    if objs is None:
        objs = tree(store, f"{LEDGERS}/{folder}")
    checked, refused = read_entries(store, objs)
    return ({run: (entry, pol) for run, entry, _f, pol in checked},
            report_refusals(store.url_of(f"{LEDGERS}/{folder}"), refused))


class ObjectLayout:
    """One shard's ledger objects in a bucket (the module doc), for ``engine.ledger.Ledger``."""

    #: a bucket's in-flight marks are not judged against entries settled since the batch began
    #: (its entries are read once, at ``start``)
    guards_in_flight = False

    def __init__(self, store: Store, policy: str, shard: Optional[str], who: dict,
                 listing: Optional[dict] = None, folder: Optional[str] = None):
        self.store = store
        self.policy = policy
        self.folder = folder or folder_of(shard)
        self.who = who
        #: the logdir's listing the batch made already (key -> info), so ``start`` lists nothing more;
        #: a settling's: the listing its judged entries were read from (``write_settled``'s versions)
        self._listing = listing
        self._entries: Dict[str, dict] = {}
        self._inflight: set = set()  # runs this worker marked in flight and not settled yet
        self._marker: Optional[str] = None  # its in-flight marker's key while it stands
        self._marker_rel: Optional[str] = None
        self._token = secrets.token_hex(16)  # this batch's, beside others of the same process
        self._thread = threading.get_ident()  # the batch's: the one an interrupt of it settles in
        self._read = False  # whether ``start`` read the shard's entries (then ``_entries`` is all of them)
        #: one mark at a time: a batch's threads mark their runs, and a run set in flight must never
        #: find its worker's marker deleted by another run's settling mark (``_inflight``)
        self._mu = threading.Lock()
        self.problems: List[dict] = []

    @property
    def path(self) -> str:
        """Where the ledger is: its folder's URL."""
        return self.store.url_of(f"{LEDGERS}/{self.folder}")

    @contextlib.contextmanager
    def locked(self):
        with self._mu:
            yield

    def begin(self) -> dict:
        """``start``'s read: the shard's entries, once (one GET per entry, found in the batch's
        listing when given, else one listing); entries refused as untrusted input are named in
        ``problems`` and not used, and so are entries of another policy (their states say
        nothing about this one)."""
        objs = None
        if self._listing is not None:
            prefix = f"{LEDGERS}/{self.folder}/"
            objs = {k: v for k, v in self._listing.items() if k.startswith(prefix)}
        entries, self.problems = read_folder(self.store, self.folder, objs)
        for run, (entry, pol) in entries.items():
            if pol == self.policy:
                self._entries.setdefault(run, entry)  # a mark of this process before the read stands
        # a listing of the batch's may miss an entry written since (an overlapping worker of this
        # shard): a skip then still reads its run's entry before it writes (``known``)
        self._read = self._listing is None
        return self.current()

    def begun(self, data: dict, runs, sizes: Dict[str, int]) -> None:
        """Nothing is written at a start (module doc): ``runs`` and ``sizes`` are not registered."""

    def current(self) -> dict:
        """The entries ``begin`` read, with this worker's marks since (no request)."""
        return {"version": LEDGER_VERSION, "policy": self.policy, "runs": self._entries}

    def snapshot(self) -> dict:
        return dict(self.current(), runs=dict(self._entries))

    def read(self) -> dict:
        return self.snapshot()

    def known(self, run: str, data: dict, state: str) -> Optional[dict]:
        """The entry a mark of ``run`` is judged against: this process's, or for a skip the
        stored one (one GET, unless ``begin`` read them all)."""
        known = self._entries.get(run)
        if known is None and state == "skipped" and not self._read:
            known = self._stored(run)
        return known

    def write_mark(self, run: str, entry: dict, data: dict, state: str, policy: Optional[str] = None) -> None:
        """One PUT of the run's whole entry; the worker's marker put before its first in-flight
        entry and deleted once none is in flight."""
        flying = state in IN_FLIGHT_STATES
        if flying and self._marker is None:
            self._put_marker()  # before the entry: a kill from here on is found by the next start
        doc = {"version": LEDGER_VERSION, "run": run, "policy": self.policy if policy is None else policy,
               "entry": entry}
        self.store.put(entry_key(self.folder, run), json.dumps(doc, sort_keys=True).encode())
        if flying:
            self._inflight.add(run)
        else:
            self._inflight.discard(run)
            if not self._inflight and self._marker is not None:
                try:  # a marker left costs the next start one read of this folder, nothing more
                    if all(r.ok for r in self.store.delete([self._marker])):
                        self._marker = None
                        release(self._marker_rel)
                except OSError:
                    pass

    def write_settled(self, run: str, judged: dict, mark: Callable[[dict], dict], state: str,
                      policy: Optional[str] = None) -> bool:
        """A settling's mark of another worker's run (``Ledger.settle_mark``): one PUT of
        ``mark(judged)`` conditional on the version the listing this layout was opened with gave the run's object,
        the one its judged entry was read from. False, nothing written, when the object is no
        longer at that version (a live worker marked the run since; or the entry was read after a
        later write than the one listed: the next start judges it again) or was not listed."""
        key = entry_key(self.folder, run)
        info = (self._listing or {}).get(key)
        if info is None:
            return False
        entry = mark(dict(judged))
        doc = {"version": LEDGER_VERSION, "run": run, "policy": self.policy if policy is None else policy,
               "entry": entry}
        try:
            self.store.put(key, json.dumps(doc, sort_keys=True).encode(), if_version=info.version_token)
        except StoreFailure as e:
            if e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
                return False
            raise
        self._entries[run] = entry
        return True

    def compact(self) -> None:
        """Nothing to compact: each run's entry is one object, written whole."""

    def _put_marker(self) -> None:
        """This worker's in-flight marker (module doc), one PUT."""
        token = hashlib.sha256(f"{self.who['host']}\0{self.who['pid']}\0{self.who.get('pid_start')}\0{self._token}"
                               .encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self._marker_rel = f"{self.folder}/{token}.json"
        key = f"{INFLIGHT}/{self._marker_rel}"
        doc = {"version": LEDGER_VERSION, "host": self.who["host"], "pid": self.who["pid"],
               "pid_start": self.who.get("pid_start"), "folder": self.folder, "since": time.time()}
        with _HELD_LOCK:  # before the PUT: a settle of another batch of this process never takes it
            _HELD[self._marker_rel] = self._thread
        self.store.put(key, json.dumps(doc, sort_keys=True).encode())
        self._marker = key

    def _stored(self, run: str) -> Optional[dict]:
        """The shard's entry for ``run`` as stored (untrusted: checked; None when absent or refused)."""
        key = entry_key(self.folder, run)
        try:
            doc = json.loads(self.store.read_all(key).decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("run") != run or doc.get("version") != LEDGER_VERSION:
                return None
            return check_entry(run, doc.get("entry"), self.store.url_of(key))
        except (OSError, ValueError, RecursionError, Untrusted):
            return None


def markers(store: Store) -> dict:
    """The in-flight markers (one listing)."""
    return tree(store, INFLIGHT)


def read_marker(store: Store, key: str, info) -> Optional[dict]:
    """The marker at ``key`` (untrusted: None when it is no marker of this version)."""
    rel = key[len(INFLIGHT) + 1:] if key.startswith(INFLIGHT + "/") else None
    if rel is None or MARKER.match(rel) is None or info.size > MAX_MARKER_BYTES:
        return None
    try:
        doc = json.loads(store.read_all(key).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != LEDGER_VERSION or \
            doc.get("folder") != rel.split("/", 1)[0] or isinstance(doc.get("pid"), bool) or \
            not isinstance(doc.get("pid"), int) or doc["pid"] <= 0:
        return None
    return dict(doc, rel=rel)


__all__ = ["ObjectLayout", "LEDGERS", "INFLIGHT", "MAX_ENTRY_BYTES", "entry_key", "folder_of", "held_by",
           "markers", "read_entries", "read_folder", "read_marker", "release", "run_hash", "tree"]
