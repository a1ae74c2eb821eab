"""The batch ledger, one for every store: a batch interrupted at any point resumes where it stopped.

A ``Ledger`` keeps one batch's (or one shard's) entries on a ``Store``, in the layout the store's
``capabilities.append`` says it can keep cheaply:

* ``o_append`` (a folder: ``engine.ledger_file``): one file, its first line a snapshot, each mark
  after it an appended line, compacted at a batch's start and end; several processes share it
  under an ``flock`` (no mark lost between them);
* ``conditional_rewrite`` (a bucket: ``engine.ledger_objects``): one object per worker and
  batch holding every run's marks, written at the batch's steps (three PUTs a batch), and an
  in-flight marker per worker; nothing written at a start.

What an entry is and may hold, the resume rule (``should_run``), when a ``done`` entry stands
against a new mark (``keeps_done``), the marks themselves (``Ledger.mark``: who and when, the
error cut to size), what recovery settled (``mark_recovered``), the merged view of several
ledgers and the settling of a dead worker's in-flight runs (``settle_runs``: ``done`` when the
layout proves the commit, ``pending`` when recovery rolled it back; written only while the run's
entry is still the one judged, ``Ledger.settle_mark``) are written once, here and in
``engine.ledger_entries``; each layout brings its reads, writes and its proof of a commit
(a folder: a verified manifest after the mark; a bucket: that, and no journal left naming it).
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine.context import NoSpace
from tb_footprint_plugin.engine.ledger_entries import (IN_FLIGHT_STATES, LEDGER_VERSION, MAX_ERROR_CHARS,
                                                       MAX_REPORTED, RETRY_STATES, STATES, TERMINAL_STATES,
                                                       check_entry, check_ledger, committed, completed_fields,
                                                       is_stale, keeps_done, marked, merged_view, pid_gone,
                                                       recovered_marks, report_refusals, rolled_back_by,
                                                       rolled_back_fields, should_run, with_restores, worker)
from tb_footprint_plugin.engine.ledger_file import (LEDGER_NAME, MAX_LEDGER_BYTES, FileLayout, ledger_name,
                                                    ledger_path, ledger_paths, load_ledger)
from tb_footprint_plugin.engine.ledger_objects import (INFLIGHT, LEDGERS, ObjectLayout, held_by, markers,
                                                       read_entries, read_marker, release, tree)
from tb_footprint_plugin.storage.store import Store


def _shard_pair(shard: Optional[str]) -> Optional[Tuple[int, int]]:
    if not shard:
        return None
    i, n = (int(x) for x in shard.split("/"))
    return i, n


class Ledger:
    """One batch's ledger (one shard's in a sharded batch). ``where``: the ledger file's path (a
    folder's layout), or a ``Store`` whose ``capabilities.append`` chooses the layout (a folder
    store: the file ``key`` in it, by default the shard's ``ledger_name``; a bucket: the shard's
    objects, ``listing`` the batch's listing they are found in, or their ``folder``; ``batched``:
    a bucket's marks written at the batch's steps, ``engine.ledger_objects``, else each as made)."""

    def __init__(self, where, policy: str, logdir: Optional[str] = None, shard: Optional[str] = None, *,
                 key: Optional[str] = None, listing: Optional[dict] = None, folder: Optional[str] = None,
                 batched: bool = False):
        self.policy = policy
        self.logdir = logdir
        #: written into every transition: which worker did it
        self.who = worker(shard)
        self.started = time.time()  # this batch's start: done entries written since are another worker's
        if isinstance(where, Store):
            if where.capabilities.append == "o_append":
                if key is not None and (os.path.basename(key) != key or key in ("", ".", "..")):
                    # the file's layout keeps one file in the store's own folder (review R4 F2: a
                    # nested key was written at the root while ``path`` named the subfolder)
                    raise ValueError(f"ledger key {key!r}: a file name in {where.root}, not a path")
                self.layout = FileLayout(os.path.join(where.root, key or ledger_name(_shard_pair(shard))),
                                         policy, logdir, store=where)
            else:
                self.layout = ObjectLayout(where, policy, shard, self.who, listing, folder, batched)
        else:
            self.layout = FileLayout(os.fspath(where), policy, logdir)

    @property
    def path(self) -> str:
        """Where the ledger is: its file's path, or its folder's URL."""
        return self.layout.path

    @property
    def problems(self) -> List[dict]:
        """Refusals of the last read: entries (or the whole ledger) that were not used."""
        return self.layout.problems

    def read(self) -> dict:
        """The ledger: ``{version, policy, runs, ...}`` with its checked entries."""
        return self.layout.read()

    def start(self, runs: Iterable[str] = (), sizes: Optional[Dict[str, int]] = None,
              since: Optional[float] = None) -> Dict[str, dict]:
        """Read the ledger for a batch and register its runs where the layout keeps pending runs
        (a folder: as pending, with their sizes when given); returns all entries. A ledger of
        another policy is set aside (a folder) or not used (a bucket's entries): its states say
        nothing about this policy. ``since``: when the scan behind this batch's plan began; a run
        another worker settled after it is not taken back in flight (``keeps_done``)."""
        if since is not None:
            self.started = min(self.started, since)
        with self.layout.locked():
            data = self.layout.begin()
            self.layout.begun(data, runs, sizes or {})
            return dict(data["runs"])

    def mark(self, run: str, state: str, **fields) -> None:
        """Record a transition of ``run`` durably (a line, or one PUT; a ``batched`` bucket's at the
        batch's steps). A mark a ``done`` entry stands against (``keeps_done``) is not written.
        Safe from several threads."""
        with self.layout.locked():
            data = self.layout.current()
            known = self.layout.known(run, data, state)
            if keeps_done(known, state, fields, since=self.started if self.layout.guards_in_flight else None):
                return
            entry = marked(data["runs"].setdefault(run, {}), state, fields, self.who)
            self.layout.write_mark(run, entry, data, state)

    def settle_mark(self, run: str, e: dict, state: str, fields: dict, policy: Optional[str] = None) -> bool:
        """A settling's mark of another worker's entry ``e`` (its shard kept, this process as who
        wrote it), ``policy`` its own where entries of several policies share the ledger. Written
        only while the run's entry is still ``e``, the one judged (review R2-5: a live worker that
        marked the run since keeps its mark): a folder's file is read again under its ``flock``
        and its entry compared (``FileLayout.write_settled``); a bucket's goes into this settling's
        own object ordered as the mark it settles, after which a live worker's mark still tells
        (``ObjectLayout.write_settled``; written by ``flush``). Returns whether it was written."""
        who = dict(self.who, shard=e.get("shard"))
        with self.layout.locked():
            return self.layout.write_settled(run, e, lambda entry: marked(entry, state, fields, who), state, policy)

    def compact(self) -> None:
        """The end of a batch: a folder's file rewritten as its snapshot alone; a bucket's marks
        that wait written."""
        with self.layout.locked():
            self.layout.compact()

    def flush(self) -> None:
        """Every mark written (a bucket's wait for the batch's steps; a folder's are written already)."""
        with self.layout.locked():
            self.layout.flush()

    def should_run(self, entry: Optional[dict], current_bytes: Optional[int] = None) -> bool:
        """The resume rule (``ledger_entries.should_run``)."""
        return should_run(entry, current_bytes)

    def summary(self) -> dict:
        data = self.read()
        counts: Dict[str, int] = {}
        for e in data["runs"].values():
            counts[e.get("state", "?")] = counts.get(e.get("state", "?"), 0) + 1
        return {"path": self.path, "policy": data.get("policy"), "counts": counts, "runs": data["runs"]}


def mark_recovered(book: Ledger, recovered: Iterable) -> List[dict]:
    """Record in ``book`` the runs this start's recovery settled for a worker that died: a finished
    reduction is ``done`` (code ``completed``, its operation and sizes), a rolled-back one
    ``pending`` again (code ``rolled_back``; a rerun of any shard covering it reduces it). Without
    this the merged view would go on showing the dead worker's in-flight entry, or a later
    worker's skip, for a run that is reduced. Returns the problems of ledger writes that failed
    (the recovery stands)."""
    problems: List[dict] = []
    for run, state, fields in recovered_marks(recovered):
        try:
            book.mark(run, state, **fields)
        except (OSError, NoSpace) as e:  # a disk ledger's full disk is named (``LocalEngine.open_ledger``)
            problems.append({"code": getattr(e, "code", None) or Finding.LEDGER_WRITE_FAILED,
                             "detail": f"{run}: ledger not written ({e})"})
    return problems


#: what a layout's proof says of an in-flight run whose commit a journal may still undo
HOLD = object()


def settle_runs(book: Ledger, stale: Iterable[Tuple[str, dict, Optional[str]]],
                proof: Callable[[str, dict], object], undone: Optional[Dict[str, tuple]] = None
                ) -> Tuple[List[str], bool]:
    """Settle a gone worker's in-flight entries ``stale`` (``(run, entry, policy)``) in ``book``:
    ``pending`` (code ``rolled_back``) for a run ``undone`` (``rolled_back_by`` of this start's
    recovery) rolled back; ``done`` (code ``completed``) when ``proof(run, entry)`` gives the
    verified manifest of its commit; left in flight when it gives None (not committed: a rerun
    reduces it again) or ``HOLD`` (a journal may still roll it back). Each is written only while
    the run's entry is still the one judged (``Ledger.settle_mark``), else left. Returns the runs
    recorded done and whether one is left for a later start (held, changed since it was judged,
    or a write failed, after which nothing more is written: the ledger is a record, the
    reductions stand)."""
    undone = undone or {}
    done: List[str] = []
    left = False
    for run, e, pol in stale:
        if run in undone:
            s, why = undone[run]
            state, fields = "pending", rolled_back_fields(
                s.get("op_id") or e.get("op_id"), s.get("bytes_before"), s.get("bytes_after"),
                f"its worker stopped; recovery rolled it back ({why})"[:MAX_ERROR_CHARS])
        else:
            m = proof(run, e)
            if m is HOLD:
                left = True
                continue
            if m is None:
                continue
            state, fields = "done", completed_fields(m["op_id"], m["bytes_before"], m["bytes_after"])
        try:
            written = book.settle_mark(run, e, state, fields, pol)
        except OSError:
            return done, True
        if not written:
            left = True  # its entry changed since it was judged: the next start judges it again
        elif state == "done":
            done.append(run)
    try:
        book.flush()  # a bucket's settlings are written together
    except OSError:
        return [], True
    return done, left


# --- a folder's ledgers ----------------------------------------------------------------------------
def settle_stale_files(paths: Iterable[str], logdir: Optional[str], manifests, *, mine: bool = False) -> List[str]:
    """Record as ``done`` each run a ledger file leaves in flight for a worker that is gone (on this
    host; with ``mine`` this process too) when the run's reduction committed anyway (a verified
    manifest finished after the mark: ``committed``). ``manifests``: a list, or a callable called
    only when some entry is stale. Returns the runs recorded; a ledger that cannot be read or
    written is left as it is."""
    done: List[str] = []
    for path in paths:
        data, _problems = load_ledger(path, logdir)
        if not data:
            continue
        stale = [(run, e, None) for run, e in data["runs"].items()
                 if e.get("state") in IN_FLIGHT_STATES and pid_gone(e.get("host"), e.get("pid"), e.get("pid_start"),
                                                                     mine=mine)]
        if not stale:
            continue
        if callable(manifests):
            manifests = manifests()
        book = Ledger(path, data.get("policy") or "", logdir)
        got, _left = settle_runs(book, stale, lambda run, e: committed(manifests, run, e))
        done += got
    return done


def merged(paths: Iterable[str], logdir: Optional[str] = None) -> dict:
    """One view of a batch kept in several ledger files (one per shard): per run the entry that
    tells its state, with who did it; counts and bytes per state; ledgers that could not be read
    are named in ``problems`` (a damaged ledger is reported, never silently dropped)."""
    ledgers, problems, entries = [], [], []
    for p in paths:
        data, refused = load_ledger(p, logdir)
        if data is None and not refused:
            continue
        problems += report_refusals(p, refused)
        if data is None:
            continue
        ledgers.append({"path": p, "policy": data.get("policy")})
        entries += [(run, e, p) for run, e in data["runs"].items()]
    return merged_view(ledgers, entries, problems)


# --- a bucket's ledgers ----------------------------------------------------------------------------
def merged_objects(store: Store) -> Optional[dict]:
    """Every ledger object of a bucket logdir (``store``: its ``ObjectStore``) as one view of the
    batch, one listing and one GET an entry (None when there is none)."""
    objs = tree(store, LEDGERS)
    if not objs:
        return None
    folders: Dict[str, dict] = {}
    checked, refused = read_entries(store, objs)
    entries = []
    for run, entry, name, pol in checked:
        folder = store.url_of(f"{LEDGERS}/{name}")
        folders.setdefault(folder, {"path": folder, "policy": pol})
        entries.append((run, entry, folder))
    problems: List[dict] = report_refusals(store.url_of(LEDGERS), refused)
    return merged_view(sorted(folders.values(), key=lambda d: d["path"]), entries, problems)


def settle_stale_objects(store: Store, manifests_of: Callable[[], List[dict]],
                         journals_of: Callable[[], Tuple[set, set]], *, mine: bool = False,
                         recovered: Iterable = ()) -> List[str]:
    """At a start: settle each run a gone worker's ledger objects left in flight
    (``settle_runs``), ``done`` when its commit is proven (a verified manifest after the mark,
    AND no journal left naming its operation or run: ``journals_of()``, ``(op ids, runs)``; the
    manifest is written before the commit record, so alone it proves nothing), ``pending`` (code
    ``rolled_back``) when ``recovered`` (this start's recovery outcomes) rolled it back. One
    listing of the markers when none is stale; the folder's entries, ``manifests_of()`` and the
    journals are read only for a gone worker's marker (this host, its pid ended; with ``mine``
    this process's marker of the batch run by this thread too, never another batch's). The marker
    goes once its runs are settled; a run a journal still names, or a failed write or read, leaves
    it for the next start. Returns the runs recorded done."""
    undone = rolled_back_by(recovered)
    done: List[str] = []
    manifests: Optional[List[dict]] = None
    journals: Optional[tuple] = None
    for key, info in sorted(markers(store).items()):
        mk = read_marker(store, key, info)
        if mk is None or mk.get("host") != socket.gethostname():
            continue
        if mine and mk["pid"] == os.getpid():
            if held_by(mk["rel"]) not in (None, threading.get_ident()):
                continue  # another batch of this process: alive
        elif not pid_gone(mk["host"], mk["pid"], mk.get("pid_start")):
            continue
        objs = tree(store, f"{LEDGERS}/{mk['folder']}")
        checked, _refused = read_entries(store, objs, f"{LEDGERS}/{mk['folder']}")  # refusals are named by ``merged_objects`` (status)
        stale = [(run, e, pol or "") for run, e, _f, pol in checked if e.get("state") in IN_FLIGHT_STATES
                 and e.get("host") == mk["host"] and e.get("pid") == mk["pid"]]
        try:
            # the journals listed before the manifests are read: a rollback deletes the manifest
            # first and its journal last, so a manifest read after a listing that found no journal
            # is not one a concurrent start is rolling back (review R3 F2)
            if stale and journals is None:  # read again for the next marker when it failed
                journals = journals_of()
            if stale and manifests is None:
                manifests = manifests_of()
        except OSError:
            continue  # the marker stays: the next start tries again
        held_ops, held_runs = journals if journals is not None else (set(), set())

        def proof(run: str, e: dict):
            m = committed(manifests or [], run, e)
            if run in held_runs or (m is not None and m["op_id"] in held_ops):
                return HOLD  # a journal still holds it: recovery may yet roll it back
            return m

        book = Ledger(store, "", folder=mk["folder"], listing=objs)  # each write on the version listed
        got, left = settle_runs(book, stale, proof, undone)
        done += got
        if left:
            continue
        try:
            store.delete([key])
        except OSError:
            continue
        release(mk["rel"], threading.get_ident())
    return done


def record_rolled_back_objects(store: Store, folder: str, op_ids: Iterable[str]) -> List[str]:
    """After an interrupt: the runs of the ledger folder ``folder`` whose operation is one of
    ``op_ids`` (rolled back by the batch's own threads) are recorded ``pending`` (code
    ``rolled_back``), as a folder's ledger records them: the run is to do again, not a failure.
    Read only when ``op_ids`` is not empty; returns the runs recorded."""
    wanted = set(op_ids)
    if not wanted:
        return []
    objs = tree(store, f"{LEDGERS}/{folder}")
    checked, _refused = read_entries(store, objs, f"{LEDGERS}/{folder}")
    book = Ledger(store, "", folder=folder, listing=objs)  # each write on the version listed
    out = []
    for run, e, _f, pol in checked:
        if e.get("op_id") not in wanted or e.get("state") == "pending":
            continue
        if book.settle_mark(run, e, "pending", dict(
                verified=False, code=Recovery.ROLLED_BACK,
                error="interrupted; its worker thread rolled it back before the commit point"), pol or ""):
            out.append(run)
    book.flush()  # one PUT for them all
    return out


# --- either layout, by the store's capabilities ------------------------------------------------------
def folder_layout(store: Store) -> bool:
    """Whether ``store`` keeps ledgers as files of a folder (``o_append``), else as objects."""
    return store.capabilities.append == "o_append"


def merged_of(store: Store, logdir: Optional[str] = None) -> Optional[dict]:
    """Every batch ledger ``store`` holds as one view (``merged`` of a folder's default ledger
    files, ``merged_objects`` of a bucket's); None when there is none."""
    if folder_layout(store):
        paths = ledger_paths(store.root)
        return merged(paths, logdir) if paths else None
    return merged_objects(store)


def settle_stale(store: Store, manifests, *, journals_of: Optional[Callable[[], Tuple[set, set]]] = None,
                 mine: bool = False, recovered: Iterable = (), logdir: Optional[str] = None) -> List[str]:
    """Settle the in-flight runs of gone workers in every ledger ``store`` holds, by its layout's
    proof of a commit: a folder's default ledger files (``settle_stale_files``: a verified manifest
    after the mark; its recovery marks what it rolled back itself, ``mark_recovered``), a bucket's
    objects (``settle_stale_objects``: that, and no journal ``journals_of()`` names; ``recovered``'s
    rolled-back runs ``pending``). ``manifests``: a list or a callable, read only when needed."""
    if folder_layout(store):
        return settle_stale_files(ledger_paths(store.root), logdir, manifests, mine=mine)
    if journals_of is None:  # without the journals left no commit is proven
        raise ValueError("a bucket's ledgers are settled with the journals left in it (journals_of)")
    return settle_stale_objects(store, manifests if callable(manifests) else (lambda: manifests),
                                journals_of, mine=mine, recovered=recovered)


__all__ = ["Ledger", "HOLD", "INFLIGHT", "LEDGERS", "LEDGER_NAME", "LEDGER_VERSION", "MAX_ERROR_CHARS",
           "MAX_LEDGER_BYTES", "MAX_REPORTED", "RETRY_STATES", "STATES", "TERMINAL_STATES", "check_entry",
           "check_ledger", "folder_layout", "is_stale", "keeps_done", "ledger_path", "ledger_paths", "load_ledger",
           "mark_recovered", "merged", "merged_objects", "merged_of", "merged_view", "record_rolled_back_objects",
           "report_refusals", "settle_runs", "settle_stale", "settle_stale_files", "settle_stale_objects",
           "should_run", "with_restores"]
