"""A ledger's bucket layout (a store whose ``capabilities.append`` is ``conditional_rewrite``):
one small object per worker and batch, holding every run's last mark (issue #28 item 5).

A bucket has no append and no lock a file could be rewritten under, and rewriting one ledger
object per transition would upload the whole ledger three times a run (quadratic in the batch).
So each worker writes its marks into objects of its own,
``<logdir>/.tb-footprint/ledgers/shard-I-of-N/w-<token>-<n>.json`` = ``{version, kind: "marks",
closed, runs: {run: {policy, entry}}}`` (``token`` the ledger's, ``n`` its batch), with the entries of
``engine.ledger_entries``, at the batch's steps only, not one PUT per mark:

* a ``reducing`` mark (a run's start) waits for the batch's journal step: ``write_waiting``
  writes every mark waiting (the batch's runs all in flight, in one PUT) after the worker's
  in-flight marker, so from the journal on a kill is found by the next start; its ``verifying``
  marks wait for the batch's verify step (one PUT more); a run whose transaction does not call
  it (a rewrite) is written with its first ``verifying`` mark, still before its commit record;
* later marks wait, and the mark that leaves none of the worker's written runs in flight writes
  the object again (every outcome of the batch, one PUT), deletes the marker and closes the
  object: the next batch writes ``n + 1``; ``compact`` (the reduce's end) writes what still waits
  and closes the object when none of its runs is in flight.

A batch of N runs costs its worker five requests (marker, three PUTs, marker delete), not 3N + 2.
Objects written by earlier versions, one per (shard, run) (``<sha256(run)[:32]>.json`` =
``{version, run, policy, entry}``), are still read. Of several objects naming one run in one
folder the newest mark tells (``newest``): its ``updated_at``, or for a settling's mark the time of
the mark it settled (``of_mark``), ahead of that mark itself; a live worker's mark made since stays.

``read_entries`` reads objects back as untrusted input: an object whose key is not a ledger key,
an old object whose run does not hash to its key, or an entry that fails ``check_entry`` is
refused with a code and reported, never used.

A worker killed between a run's commit and its written "done" (the batch's journal and locks
gone, so recovery has nothing to settle) would leave the run ``verifying`` for good. So while a
worker has runs written in flight it keeps one marker object, ``<logdir>/.tb-footprint/
ledger-inflight/<folder>/<sha256(host, pid, start, token)[:32]>.json`` = ``{version, host, pid,
pid_start, folder, since}``: put before its first in-flight write, deleted once none is in flight.
The token is the ledger's own: two batches of one process (the TensorBoard plugin runs several
jobs) keep two markers, and one's end or settling leaves the other's. A start lists the markers
once (``engine.ledger.settle_stale_objects``) and reads a folder's entries only for a marker whose
worker is gone.

A batch reads its shard's entries once, at its start (one GET per object, found in the listing
of the logdir the reduce made anyway, so no listing more); ``start`` writes nothing.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import threading
import time
from typing import Callable, Dict, List, Optional

from tb_footprint_plugin.engine.ledger_entries import IN_FLIGHT_STATES, LEDGER_VERSION, report_refusals
from tb_footprint_plugin.engine.ledger_fold import fold
from tb_footprint_plugin.engine.ledger_reads import (LEDGERS, MAX_ENTRY_BYTES, MAX_MARKS_BYTES, ObjectRead, entry_key,
                                                     marks_key, newest, order, read_entries, read_listed, run_hash,
                                                     tree)
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.store import Store

#: the in-flight markers of live (or killed) workers, one per worker and ledger folder (module doc)
INFLIGHT = f"{STATE_DIR_NAME}/ledger-inflight"
MARKER = re.compile(r"^(shard-\d+-of-\d+|batch)/([0-9a-f]{32})\.json$")
MAX_MARKER_BYTES = 4096
#: the markers this process's ledgers hold now (``<folder>/<name>.json``) -> the thread that opened
#: the ledger: an interrupt settles its own batch's only (``held_by``)
_HELD: Dict[str, int] = {}
_HELD_LOCK = threading.Lock()
#: per thread, the layouts whose runs' start (``reducing``) waits to be written (``write_waiting``)
_WAITING = threading.local()


def folder_of(shard: Optional[str]) -> str:
    """The ledger folder of a shard label (``"i/n"``), or of an unsharded batch (None)."""
    if not shard:
        return "batch"
    i, n = (int(x) for x in shard.split("/"))
    return f"shard-{i}-of-{n}"


def held_by(rel: str) -> Optional[int]:
    """The thread whose batch holds the marker ``rel`` in this process, or None."""
    with _HELD_LOCK:
        return _HELD.get(rel)


def release(rel: str, thread: Optional[int] = None) -> None:
    """Forget this process's hold of the marker ``rel`` (only ``thread``'s, when given)."""
    with _HELD_LOCK:
        if thread is None or _HELD.get(rel) == thread:
            _HELD.pop(rel, None)


def read_folder(store: Store, folder: str, objs: Optional[dict] = None) -> tuple:
    """One ledger folder (``batch`` or ``shard-I-of-N``) read back as untrusted input: ``({run:
    (entry, policy)}, problems)`` — one listing (none when ``objs``, its objects from a listing
    made already, is given), one GET per object."""
    entries, problems, _reads = read_folder_objects(store, folder, objs)
    return entries, problems


def read_folder_objects(store: Store, folder: str, objs: Optional[dict] = None) -> tuple:
    """``read_folder``, and each object as read (``ledger_reads.ObjectRead``: what a fold takes)."""
    prefix = f"{LEDGERS}/{folder}"
    reads, refused = read_listed(store, prefix, objs)
    checked = newest([e for o in reads for e in o.entries])
    return ({run: (entry, pol) for run, entry, _f, pol in checked},
            report_refusals(store.url_of(prefix), refused), reads)


class ObjectLayout:
    """One worker's ledger objects in a bucket (the module doc), for ``engine.ledger.Ledger``."""

    #: a bucket's in-flight marks are not judged against entries settled since the batch began
    #: (its entries are read once, at ``start``)
    guards_in_flight = False

    def __init__(self, store: Store, policy: str, shard: Optional[str], who: dict,
                 listing: Optional[dict] = None, folder: Optional[str] = None, batched: bool = False):
        self.store = store
        #: marks written at the batch's steps (a reduce's worker); else each mark is written as made
        self.batched = batched
        self.policy = policy
        self.folder = folder or folder_of(shard)
        self.who = who
        #: the logdir's listing the batch made already (key -> info), so ``start`` lists nothing more
        self._listing = listing
        self._entries: Dict[str, dict] = {}
        self._inflight: set = set()  # runs this worker marked in flight and not settled yet
        self._written: set = set()  # of those, the runs whose in-flight mark is written
        self._open: Dict[str, str] = {}  # the open object's runs -> their policy
        self._waiting = False  # a mark of the open object not written yet
        self._n = 0  # the open object's batch
        self._flew = False  # whether the open object was written with a run in flight
        self._marker: Optional[str] = None  # its in-flight marker's key while it stands
        self._marker_rel: Optional[str] = None
        self._token = secrets.token_hex(16)  # this batch's, beside others of the same process
        self._thread = threading.get_ident()  # the batch's: the one an interrupt of it settles in
        self._read = False  # whether the shard's entries were read without a listing (then all of them)
        #: the folder's objects as last read, and this worker's closed since: what a fold takes
        self._seen: Dict[str, ObjectRead] = {}
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
        """``start``'s read: the shard's entries, once (one GET per object, found in the batch's
        listing when given, else one listing); entries refused as untrusted input are named in
        ``problems`` and not used, and so are entries of another policy (their states say
        nothing about this one)."""
        objs = None
        if self._listing is not None:
            prefix = f"{LEDGERS}/{self.folder}/"
            objs = {k: v for k, v in self._listing.items() if k.startswith(prefix)}
        self.problems = self._take(objs)
        # a listing of the batch's may miss an entry written since (an overlapping worker of this
        # shard): a skip then still reads the folder before it writes (``known``)
        self._read = self._listing is None
        return self.current()

    def _take(self, objs: Optional[dict]) -> List[dict]:
        entries, problems, reads = read_folder_objects(self.store, self.folder, objs)
        self._seen = {o.key: o for o in reads}
        for run, (entry, pol) in entries.items():
            if pol == self.policy:
                self._entries.setdefault(run, entry)  # a mark of this process before the read stands
        return problems

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
        stored one (the folder read once more, unless it was read without a listing)."""
        known = self._entries.get(run)
        if known is None and state == "skipped" and not self._read:
            self._read = True
            try:
                self._take(None)
            except OSError:
                pass  # judged against nothing, as a run never marked
            known = self._entries.get(run)
        return known

    def write_mark(self, run: str, entry: dict, data: dict, state: str, policy: Optional[str] = None) -> None:
        """The run's mark into the open object, written at the batch's steps (module doc): with a
        run's first in-flight write (after the worker's marker), and once none written is in
        flight (the marker deleted then, the object closed); else it waits. A write the store
        refuses raises; what waits is written by the next one."""
        self._open[run] = self.policy if policy is None else policy
        self._waiting = True
        if state in IN_FLIGHT_STATES:
            self._inflight.add(run)
            if self.batched and (state == "reducing" or run in self._written):
                _waiting().add(self)  # written at the batch's next step (``write_waiting``)
                return
            self._write()
            return
        was = run in self._written
        self._inflight.discard(run)
        self._written.discard(run)
        if not self.batched or (was and not self._written):
            self._write()

    def write_settled(self, run: str, judged: dict, mark: Callable[[dict], dict], state: str,
                      policy: Optional[str] = None) -> bool:
        """A settling's mark of another worker's run (``Ledger.settle_mark``) into this settling's
        own object, written by ``flush``: ordered as the mark it settles (``of_mark``), so a mark
        a live worker made since stays the one that tells (``newest``)."""
        of = order(judged)[0]
        entry = mark(dict(judged))
        entry["of_mark"] = of
        self._entries[run] = entry
        self._open[run] = self.policy if policy is None else policy
        self._waiting = True
        return True

    def write_now(self) -> None:
        """The marks that wait written (``write_waiting``); nothing when none waits."""
        with self._mu:
            if self._waiting:
                self._write()

    def compact(self) -> None:
        """The batch's end: what waits is written, and the object closed when none of its runs is
        in flight (one PUT more for an object written before with nothing in flight)."""
        if self._waiting or (self._open and not self._written):
            self._write(close=True)

    def flush(self) -> None:
        """Every mark that waits written (one PUT; none when nothing waits), the object closed
        when none of its runs is in flight (a settling's: nothing more is written into it)."""
        if self._waiting:
            self._write(close=True)

    def _write(self, close: bool = False) -> None:
        """The open object written whole: the marker first while one of its runs is in flight;
        once none written is in flight (or at ``close`` with none in flight), written ``closed``:
        the marker deleted, the next marks into a new object, and the folder's closed objects
        folded when there are many (``engine.ledger_fold``)."""
        flying = [r for r in self._open if r in self._inflight]
        closing = not flying and not self._written and (self._flew or close)
        if flying and self._marker is None:
            self._put_marker()  # before the entries: a kill from here on is found by the next start
        runs = {r: {"policy": p, "entry": self._entries[r]} for r, p in self._open.items()}
        # ``closed``: this worker never writes the object again, so a fold may take it
        data = json.dumps({"version": LEDGER_VERSION, "kind": "marks", "closed": closing, "runs": runs},
                          sort_keys=True).encode()
        key = marks_key(self.folder, self._token, self._n)
        version = self.store.put(key, data)
        self._waiting = False
        self._written.update(flying)
        self._flew = self._flew or bool(flying)
        if not closing:
            return
        # copies: a later mark of a run updates its entry in place, and this object holds it as written
        self._seen[key] = ObjectRead(key, version or "", len(data), True,
                                     [(r, dict(rec["entry"]), self.folder, rec["policy"]) for r, rec in runs.items()])
        self._n += 1  # the batch ended: the next marks go into a new object, this one stays as it is
        self._open, self._flew = {}, False
        self._fold()
        if self._marker is not None:
            try:  # a marker left costs the next start one read of this folder, nothing more
                if all(r.ok for r in self.store.delete([self._marker])):
                    self._marker = None
                    release(self._marker_rel)
            except OSError:
                pass

    def _fold(self) -> None:
        """The folder's closed objects folded into one when there are many (``ledger_fold.fold``);
        a fold that fails leaves what stands, every mark readable, for a later batch to fold."""
        try:
            done = fold(self.store, self.folder, list(self._seen.values()))
        except OSError:
            return
        if done is not None:
            new, folded = done
            for k in folded:
                self._seen.pop(k, None)  # deleted, or held by the fold (read again at the next start)
            self._seen[new.key] = new

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


def _waiting() -> set:
    if not hasattr(_WAITING, "layouts"):
        _WAITING.layouts = set()
    return _WAITING.layouts


def write_waiting() -> None:
    """Write the in-flight marks this thread made that wait (each worker's one PUT, after its
    marker): a batch calls it right before its journal (its runs' start) and after its verify
    marks, so a kill from there on finds its runs in flight as they are. A write the store
    refuses raises (``StoreFailure``); what is left waits."""
    layouts = _waiting()
    while layouts:
        layout = next(iter(layouts))
        layout.write_now()
        layouts.discard(layout)


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


__all__ = ["ObjectLayout", "LEDGERS", "INFLIGHT", "MAX_ENTRY_BYTES", "MAX_MARKS_BYTES", "entry_key", "folder_of",
           "held_by", "marks_key", "markers", "newest", "order", "read_entries", "read_folder",
           "read_folder_objects", "read_marker",
           "release", "run_hash", "tree", "write_waiting"]
