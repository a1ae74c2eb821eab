"""The batch ledger of a bucket logdir: one small object per (shard, run).

A bucket has no append and no lock a file could be rewritten under, and rewriting one ledger
object per transition would upload the whole ledger three times a run (quadratic in the batch).
So each shard writes each of its runs' state to its own object,
``<logdir>/.tb-footprint/ledgers/shard-I-of-N/<sha256(run)[:32]>.json`` =
``{version, run, policy, entry}``, with the fields and states of ``engine.ledger``: two small
PUTs per run (``reducing``, then ``done`` / ``failed`` / ``skipped``). No two workers of one
batch share an object unless they run the same shard at once, and then the newer write wins.

``merged`` lists the ``ledgers/`` prefix once and reads every entry back as untrusted input:
an object whose key is not a ledger key, whose run does not hash to its key, or whose entry
fails ``engine.ledger.check_entry`` is refused with a code and reported, never used. The view
is the one ``engine.ledger.merged_view`` builds for ledgers on disk.

A worker killed between a run's commit and its "done" PUT (the batch's journal and locks gone,
so recovery has nothing to settle) would leave the run ``reducing`` for good. So while a worker
has runs in flight it keeps one marker object, ``<logdir>/.tb-footprint/ledger-inflight/<folder>/
<sha256(host, pid, start)[:32]>.json`` = ``{version, host, pid, pid_start, folder, since}``: put
at its first in-flight mark, deleted once none is in flight (two requests a batch, not a run).
The marker's name hashes a random token of the ledger too: two batches of one process (the
TensorBoard plugin runs several jobs) keep two markers, and one's end or settling leaves the
other's. Every start (``settle_stale``, from ``BucketEngine.recover``) lists that prefix once;
only for a marker whose worker is gone (this host, its pid ended, as
``engine.upkeep.settle_stale_ledgers`` rules for a disk) does it read that folder's entries, the
manifests and the journals left, and settle each of the dead worker's in-flight runs:
``done`` only when its commit is proven (a verified reduce manifest of the run finished after
the in-flight mark AND no journal left in the bucket names its operation or run: the manifest
is written before the commit record, so alone it proves nothing, and a journal recovery could
not settle may still be rolled back); ``pending`` (code ``rolled_back``) when this start's
recovery rolled it back, as ``engine.ledger.mark_recovered`` records it. A run some journal
still names keeps the marker (the next start looks again); one that did not commit and is named
by none stays in flight (a rerun reduces it again: ``RETRY_STATES``) and the marker goes.

A batch reads its shard's entries once, at its start (``start``: one GET per entry — none in a
fresh batch — found in the listing of the logdir the reduce made anyway, so no listing more), and
skips a run the ledger settled and that did not change since (``engine.ledger.should_run``, the
rule of a ledger on disk), said as ``Skip.LEDGER_DONE``; a run it skips so is not marked again,
so its entry costs the GET a skip's mark took before, not one more. ``start`` writes nothing (a
``pending`` PUT per run would double the ledger's requests).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional

from tb_footprint_plugin.codes import Outcome, Recovery, StoreError
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.journal_object import ObjectJournal, pending_objects
from tb_footprint_plugin.engine.lease import holder_alive, me
from tb_footprint_plugin.engine.ledger import (LEDGER_VERSION, MAX_ERROR_CHARS, check_entry, keeps_done, merged_view,
                                              report_refusals, should_run)
from tb_footprint_plugin.engine.trust import BAD_LEDGER, BAD_LEDGER_ENTRY, Untrusted
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.remote import RemoteFS, map_ordered
from tb_footprint_plugin.storage.store import StoreFailure

LEDGERS = f"{STATE_DIR_NAME}/ledgers"
#: the in-flight markers of live (or killed) workers, one per worker and ledger folder (module doc)
INFLIGHT = f"{STATE_DIR_NAME}/ledger-inflight"
IN_FLIGHT_STATES = ("reducing", "verifying")
MAX_ENTRY_BYTES = 256 * 1024
_KEY = re.compile(r"^ledgers/(shard-\d+-of-\d+|batch)/([0-9a-f]{32})\.json$")
_MARKER = re.compile(r"^(shard-\d+-of-\d+|batch)/([0-9a-f]{32})\.json$")
MAX_MARKER_BYTES = 4096
#: the markers this process's ledgers hold now (``<folder>/<name>.json``) -> the thread that opened
#: the ledger: an interrupt settles its own batch's only (``settle_stale`` with ``mine``)
_HELD: Dict[str, int] = {}
_HELD_LOCK = threading.Lock()


def _run_hash(run: str) -> str:
    return hashlib.sha256(run.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _folder(shard: Optional[str]) -> str:
    if not shard:
        return "batch"
    i, n = (int(x) for x in shard.split("/"))
    return f"shard-{i}-of-{n}"


class BucketLedger:
    """The ledger objects one worker (one shard) writes."""

    def __init__(self, rfs: RemoteFS, policy: str, shard: Optional[str] = None, listing: Optional[dict] = None):
        self.rfs = rfs
        #: the logdir's listing the batch made already (key -> info), so ``start`` lists nothing more
        self._listing = listing
        self.policy = policy
        self.folder = _folder(shard)
        self.who = {"host": socket.gethostname(), **me(), "shard": shard}
        self._entries: Dict[str, dict] = {}
        self._inflight: set = set()  # runs this worker marked in flight and not settled yet
        self._marker: Optional[str] = None  # its in-flight marker's key while it stands
        self._token = secrets.token_hex(16)  # this batch's, beside others of the same process
        self._thread = threading.get_ident()  # the batch's: the one an interrupt of it settles in
        self._read = False  # whether ``start`` read the shard's entries (then ``_entries`` is all of them)
        #: one mark at a time: a batch's threads mark their runs, and a run set in flight must never
        #: find its worker's marker deleted by another run's settling mark (``_inflight``)
        self._mu = threading.Lock()
        #: refusals of ``start``'s read (entries not used), as ``engine.ledger.Ledger.problems``
        self.problems: List[dict] = []

    @property
    def url(self) -> str:
        return self.rfs.url_of(f"{LEDGERS}/{self.folder}")

    @property
    def path(self) -> str:
        """Where the ledger is (its folder's URL), as ``Ledger.path`` names a ledger file."""
        return self.url

    def start(self, runs: Iterable[str] = (), sizes: Optional[Dict[str, int]] = None,
              since: Optional[float] = None) -> Dict[str, dict]:
        """Read the shard's entries once (module doc): one listing of its folder and one GET per
        entry; entries refused as untrusted input are named in ``problems`` and not used, and so
        are entries of another policy (their states say nothing about this one). Writes nothing:
        ``runs``, ``sizes`` and ``since`` are taken for the interface of ``Ledger.start``."""
        objs = None
        if self._listing is not None:
            prefix = f"{LEDGERS}/{self.folder}/"
            objs = {k: v for k, v in self._listing.items() if k.startswith(prefix)}
        entries, self.problems = read_folder(self.rfs, self.folder, objs)
        for run, (entry, pol) in entries.items():
            if pol == self.policy:
                self._entries.setdefault(run, entry)  # a mark of this process before the read stands
        # a listing of the batch's may miss an entry written since (an overlapping worker of this
        # shard): a skip then still reads its run's entry before it writes (``mark``)
        self._read = self._listing is None
        return dict(self._entries)

    def read(self) -> dict:
        """The entries ``start`` read, with this worker's marks since (no request)."""
        return {"version": LEDGER_VERSION, "policy": self.policy, "runs": dict(self._entries)}

    def should_run(self, entry: Optional[dict], current_bytes: Optional[int] = None) -> bool:
        """The resume rule of every ledger (``engine.ledger.should_run``)."""
        return should_run(entry, current_bytes)

    def compact(self) -> None:
        """Nothing to compact: each run's entry is one object, written whole."""

    def mark(self, run: str, state: str, **fields) -> None:
        """Record a transition of ``run`` (one PUT; the entry keeps the fields of earlier ones).
        A skip is not written over a done entry it does not contradict (``ledger.keeps_done``):
        the shard's object is read first (one GET, for skips only, unless ``start`` read them all),
        and this process's own marks are known without a read. Safe from several threads."""
        with self._mu:
            self._mark(run, state, **fields)

    def _mark(self, run: str, state: str, **fields) -> None:
        rel = f"{LEDGERS}/{self.folder}/{_run_hash(run)}.json"
        key = self.rfs.path(rel)
        if state == "skipped":
            known = self._entries.get(run)
            if known is None and not self._read:  # after ``start``, an entry not read is none
                known = self._stored(run, rel)
            if keeps_done(known, state, fields):
                return
        if isinstance(fields.get("error"), str):
            fields["error"] = fields["error"][:MAX_ERROR_CHARS]  # within what check_entry accepts
        flying = state in IN_FLIGHT_STATES
        if flying and self._marker is None:
            self._put_marker()  # before the entry: a kill from here on is found by the next start
        entry = self._entries.setdefault(run, {})
        entry.update(fields, state=state, updated_at=time.time(), **self.who)
        doc = {"version": LEDGER_VERSION, "run": run, "policy": self.policy, "entry": entry}
        BucketState.of(self.rfs).put(key, json.dumps(doc, sort_keys=True).encode())
        if flying:
            self._inflight.add(run)
        else:
            self._inflight.discard(run)
            if not self._inflight and self._marker is not None:
                try:  # a marker left costs the next start one read of this folder, nothing more
                    if not BucketState.of(self.rfs).delete([self._marker]):
                        self._marker = None
                        with _HELD_LOCK:
                            _HELD.pop(self._marker_rel, None)
                except OSError:
                    pass

    def _put_marker(self) -> None:
        """This worker's in-flight marker (module doc), one PUT."""
        token = hashlib.sha256(f"{self.who['host']}\0{self.who['pid']}\0{self.who.get('pid_start')}\0{self._token}"
                               .encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self._marker_rel = f"{self.folder}/{token}.json"
        key = self.rfs.path(f"{INFLIGHT}/{self._marker_rel}")
        doc = {"version": LEDGER_VERSION, "host": self.who["host"], "pid": self.who["pid"],
               "pid_start": self.who.get("pid_start"), "folder": self.folder, "since": time.time()}
        with _HELD_LOCK:  # before the PUT: a settle of another batch of this process never takes it
            _HELD[self._marker_rel] = self._thread
        BucketState.of(self.rfs).put(key, json.dumps(doc, sort_keys=True).encode())
        self._marker = key

    def _stored(self, run: str, rel: str) -> Optional[dict]:
        """The shard's entry for ``run`` as stored (untrusted: checked; None when absent or refused)."""
        try:
            doc = json.loads(BucketState.of(self.rfs).read_bytes(self.rfs.path(rel)).decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("run") != run or doc.get("version") != LEDGER_VERSION:
                return None
            return check_entry(run, doc.get("entry"), self.rfs.url_of(rel))
        except (OSError, ValueError, RecursionError, Untrusted):
            return None


def _checked_entries(rfs: RemoteFS, objs: dict) -> tuple:
    """The ledger objects ``objs`` (a listing under ``LEDGERS``: key -> info) read back as
    untrusted input: ``([(run, entry, folder name, policy)], [Untrusted refusals])``."""
    entries, refused = [], []

    def fetch(key: str):
        """The object's bytes, or None: not a ledger key, too large (refused below), or gone."""
        rel = key[len(STATE_DIR_NAME) + 1:] if key.startswith(STATE_DIR_NAME + "/") else key
        if _KEY.match(rel) is None or objs[key].size > MAX_ENTRY_BYTES:
            return key, None
        try:
            return key, BucketState.of(rfs).read_bytes(rfs.path(key))
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return key, None
            raise

    # read a few at once: one GET after the other, 10,000 runs' entries took minutes
    for key, data in map_ordered(fetch, sorted(objs)):
        rel = key[len(STATE_DIR_NAME) + 1:] if key.startswith(STATE_DIR_NAME + "/") else key
        where = rfs.url_of(key)
        m = _KEY.match(rel)
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
            if _run_hash(doc["run"]) != m.group(2):
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"names run {doc['run'][:200]!r}, which is not its key's")
            entry = check_entry(doc["run"], doc.get("entry"), where)
        except Untrusted as u:
            refused.append(u)
            continue
        pol = doc.get("policy") if isinstance(doc.get("policy"), str) else None
        entries.append((doc["run"], entry, m.group(1), pol))
    return entries, refused


def read_folder(rfs: RemoteFS, folder: str, objs: Optional[dict] = None) -> tuple:
    """One ledger folder (``batch`` or ``shard-I-of-N``) read back as untrusted input: ``({run:
    (entry, policy)}, problems)`` — one listing (none when ``objs``, its objects from a listing
    made already, is given), one GET per entry."""
    if objs is None:
        objs = BucketState.of(rfs).tree(f"{LEDGERS}/{folder}", missing_ok=True)
    checked, refused = _checked_entries(rfs, objs)
    return ({run: (entry, pol) for run, entry, _f, pol in checked},
            report_refusals(rfs.url_of(f"{LEDGERS}/{folder}"), refused))


def folder_of(shard: Optional[str]) -> str:
    """The ledger folder of a shard label (``"i/n"``), or of an unsharded batch (None)."""
    return _folder(shard)


def merged(rfs: RemoteFS) -> Optional[dict]:
    """Every ledger object of the bucket logdir as one view of the batch (None when there is none)."""
    objs = BucketState.of(rfs).tree(LEDGERS, missing_ok=True)
    if not objs:
        return None
    folders: Dict[str, dict] = {}
    checked, refused = _checked_entries(rfs, objs)
    entries = []
    for run, entry, name, pol in checked:
        folder = rfs.url_of(f"{LEDGERS}/{name}")
        folders.setdefault(folder, {"path": folder, "policy": pol})
        entries.append((run, entry, folder))
    problems: List[dict] = report_refusals(rfs.url_of(LEDGERS), refused)
    return merged_view(sorted(folders.values(), key=lambda d: d["path"]), entries, problems)


def _gone_marker(rfs: RemoteFS, key: str, info, mine: bool = False) -> Optional[dict]:
    """The marker at ``key`` (untrusted) when its worker is gone: on this host, its pid ended
    (or reused by another process), or with ``mine`` this process's batch run by this thread
    (or one no ledger of this process holds any more); None when it is alive, on another host,
    another batch of this process, or not a marker."""
    rel = key[len(INFLIGHT) + 1:] if key.startswith(INFLIGHT + "/") else None
    if rel is None or _MARKER.match(rel) is None or info.size > MAX_MARKER_BYTES:
        return None
    try:
        doc = json.loads(BucketState.of(rfs).read_bytes(rfs.path(key)).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != LEDGER_VERSION or \
            doc.get("folder") != rel.split("/", 1)[0] or \
            doc.get("host") != socket.gethostname() or isinstance(doc.get("pid"), bool) or \
            not isinstance(doc.get("pid"), int) or doc["pid"] <= 0:
        return None
    if mine and doc["pid"] == os.getpid():
        with _HELD_LOCK:
            holder = _HELD.get(rel)
        return doc if holder in (None, threading.get_ident()) else None
    if holder_alive(doc["pid"], doc.get("pid_start")):
        return None
    return doc


def _committed(manifests: Iterable[dict], run: str, e: dict) -> Optional[dict]:
    """The verified reduction of ``run`` an in-flight entry ``e`` was for: the first finished
    after the mark (manifests in the one schema; sizes numbers), or None (not committed)."""
    since = float(e.get("updated_at") or 0)
    ops = [m for m in manifests if m.get("run") == run and m.get("kind") == "reduce"
           and m.get("outcome") == Outcome.VERIFIED and m.get("host") in (None, e.get("host"))
           and isinstance(m.get("finished_at"), (int, float)) and m["finished_at"] >= since
           and isinstance(m.get("bytes_before"), int) and isinstance(m.get("bytes_after"), int)]
    return min(ops, key=lambda o: o["finished_at"]) if ops else None


def _journals_left(rfs: RemoteFS) -> tuple:
    """``(op ids, runs)`` named by the journal objects left in the bucket (an operation some
    journal still holds may yet be rolled back); raises ``OSError`` when one cannot be read
    (nothing is proven then)."""
    st = BucketState.of(rfs)
    ops, runs = set(), set()
    # the one listing and parser of journal objects (``engine.journal_object``)
    for key, info in pending_objects(st):
        ops.add(key.rsplit("/", 1)[-1][:-5] if key.endswith(".json") else key)
        unproven = OSError(f"{rfs.scheme}://{rfs.root}/{key}: unreadable journal; no commit of its runs is proven")
        try:
            journal = ObjectJournal.read(st, rfs.path(key), info)
        except ValueError:  # a key no call can address: never read, and nothing is proven
            raise unproven from None
        if journal is None:
            continue  # settled since the listing
        if journal.unreadable():
            raise unproven
        # the top level names the batch's (or a restore's) op and run, each entry its run's
        for en in [journal.doc] + journal.entries():
            if isinstance(en, dict):
                ops.update(v for v in (en.get("op"),) if isinstance(v, str))
                runs.update(v for v in (en.get("run"),) if isinstance(v, str))
    return ops, runs


def _rolled_back_by(recovered: Iterable) -> Dict[str, tuple]:
    """run -> (its settled run row, the outcome's detail) for each run ``recovered`` rolled back."""
    out: Dict[str, tuple] = {}
    for r in recovered:
        if getattr(r, "action", None) == Recovery.ROLLED_BACK:
            for s in getattr(r, "runs", None) or ():
                if isinstance(s, dict) and isinstance(s.get("run"), str):
                    out[s["run"]] = (s, r.detail)
    return out


def settle_stale(rfs: RemoteFS, manifests_of: Callable[[], List[dict]], *, mine: bool = False,
                 recovered: Iterable = ()) -> List[str]:
    """At a start: settle each run a gone worker's ledger left in flight (module doc): ``done``
    when its commit is proven (a verified manifest after the mark, no journal left naming it),
    ``pending`` (code ``rolled_back``) when ``recovered`` (this start's recovery outcomes) rolled
    it back. One listing of the markers when none is stale; the folder's entries,
    ``manifests_of()`` and the journals are read only for a gone worker's marker. ``mine``: this
    process's marker of the batch run by this thread counts as gone too (its batch was
    interrupted), never another batch's. Returns the runs recorded done; a write that fails, or a
    run a journal still names, leaves the marker, and the next start tries again (the ledger is a
    record: the reductions stand)."""
    markers = BucketState.of(rfs).tree(INFLIGHT, missing_ok=True)
    undone = _rolled_back_by(recovered)
    done: List[str] = []
    manifests: Optional[List[dict]] = None
    journals: Optional[tuple] = None
    for key, info in sorted(markers.items()):
        mk = _gone_marker(rfs, key, info, mine)
        if mk is None:
            continue
        objs = BucketState.of(rfs).tree(f"{LEDGERS}/{mk['folder']}", missing_ok=True)
        checked, _refused = _checked_entries(rfs, objs)  # refusals are named by ``merged`` (status)
        stale = [(run, e, pol) for run, e, _f, pol in checked if e.get("state") in IN_FLIGHT_STATES
                 and e.get("host") == mk["host"] and e.get("pid") == mk["pid"]]
        keep = False  # the marker stays while a run of it is not settled for sure
        try:
            # the journals listed before the manifests are read: a rollback deletes the manifest
            # first and its journal last, so a manifest read after a listing that found no journal
            # is not one a concurrent start is rolling back (review R3 F2)
            if stale and journals is None:  # read again for the next marker when it failed
                journals = _journals_left(rfs)
            if stale and manifests is None:
                manifests = manifests_of()
            held_ops, held_runs = journals if journals is not None else (set(), set())
            for run, e, pol in stale:
                if run in undone:  # as ``engine.ledger.mark_recovered`` records it
                    s, why = undone[run]
                    sizes = {k: v for k, v in (("original_size_bytes", s.get("bytes_before")),
                                               ("after_size_bytes", s.get("bytes_after"))) if isinstance(v, int)}
                    entry = dict(e, state="pending", op_id=s.get("op_id") or e.get("op_id"), verified=False,
                                 code=str(Recovery.ROLLED_BACK),
                                 error=f"its worker stopped; recovery rolled it back ({why})"[:MAX_ERROR_CHARS],
                                 **sizes)
                else:
                    m = _committed(manifests or [], run, e)
                    if run in held_runs or (m is not None and m["op_id"] in held_ops):
                        keep = True  # a journal still holds it: recovery may yet roll it back
                        continue
                    if m is None:
                        continue  # not committed: a rerun reduces it again
                    b, a = m["bytes_before"], m["bytes_after"]
                    entry = dict(e, state="done", op_id=m["op_id"], verified=True, code=str(Recovery.COMPLETED),
                                 error=None, original_size_bytes=b, after_size_bytes=a,
                                 reduced_ratio=round(1 - a / b, 4) if b else 0.0)
                entry.update(updated_at=time.time(), host=socket.gethostname(), **me())
                doc = {"version": LEDGER_VERSION, "run": run, "policy": pol or "", "entry": entry}
                BucketState.of(rfs).put(rfs.path(f"{LEDGERS}/{mk['folder']}/{_run_hash(run)}.json"),
                            json.dumps(doc, sort_keys=True).encode())
                if entry["state"] == "done":
                    done.append(run)
            if not keep:
                BucketState.of(rfs).delete([rfs.path(key)])
                rel = key[len(INFLIGHT) + 1:]
                with _HELD_LOCK:
                    if _HELD.get(rel) == threading.get_ident():
                        _HELD.pop(rel, None)
        except OSError:
            continue  # the marker stays: the next start tries again
    return done


def record_rolled_back(rfs: RemoteFS, shard: Optional[str], op_ids: Iterable[str]) -> List[str]:
    """After an interrupt: the runs of the shard's ledger folder (``shard`` "i/n", or None for the
    unsharded batch) whose operation is one of ``op_ids`` (rolled back by the batch's own threads)
    are recorded ``pending`` (code ``rolled_back``), as a disk's ledger records them: the run is to
    do again, not a failure. Read only when ``op_ids`` is not empty; returns the runs recorded."""
    wanted = set(op_ids)
    if not wanted:
        return []
    folder = _folder(shard)
    objs = BucketState.of(rfs).tree(f"{LEDGERS}/{folder}", missing_ok=True)
    out = []
    checked, _refused = _checked_entries(rfs, objs)
    for run, e, _f, pol in checked:
        if e.get("op_id") not in wanted or e.get("state") == "pending":
            continue
        entry = dict(e, state="pending", verified=False, code=str(Recovery.ROLLED_BACK),
                     error="interrupted; its worker thread rolled it back before the commit point",
                     updated_at=time.time(), host=socket.gethostname(), **me())
        doc = {"version": LEDGER_VERSION, "run": run, "policy": pol or "", "entry": entry}
        BucketState.of(rfs).put(rfs.path(f"{LEDGERS}/{folder}/{_run_hash(run)}.json"), json.dumps(doc, sort_keys=True).encode())
        out.append(run)
    return out


__all__ = ["BucketLedger", "folder_of", "merged", "read_folder", "settle_stale", "record_rolled_back", "LEDGERS", "INFLIGHT"]
