"""A ledger's folder layout (a store whose ``capabilities.append`` is ``o_append``: a disk): one
file per batch or shard, its first line a snapshot, each mark after it an appended line.

The file's first line is a snapshot (``{"version": 1, "logdir", "policy", "created_at", "runs"}``,
the ledger's whole JSON form of earlier versions, which are still read as they are); each
transition after it is one line ``{"run": NAME, "entry": {...}}`` holding the run's whole entry
as it now stands, so replaying the lines in order over the snapshot gives the ledger and a line
read twice changes nothing. A mark appends one line (a rewrite of the whole file at every
transition was quadratic in the runs of a batch); ``start`` and ``compact`` (the end of a batch,
or once the lines outnumber twice the runs) rewrite the file as its snapshot alone. Lines are
untrusted input read as ``trust.read_json_lines`` reads: a damaged line is skipped and named
(``damaged_line``), an unterminated last line (a writer killed mid-append) is ignored, and the
next write then rewrites the file whole instead of gluing a line onto it.

The file is read and written through the folder's ``state_store.StateFolder``, the store of the
tool's state files (``read_all``: a symlink or FIFO in its place is refused, never followed;
``put``: a private file renamed over, a stranger at the name set aside; ``append``: a torn line
cut back, only settled states fsynced; ``set_aside``; ``version``: one ``lstat``). Several
processes may share one ledger: every update re-reads the file under the store's exclusive
``flock`` of ``<file>.lock`` (``StateFolder.locked``: the "no mark lost" rule between processes:
a conditional put alone would lose a mark to a retry that read before it).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.ledger_entries import LEDGER_VERSION, check_entry, check_ledger, same_mark
from tb_footprint_plugin.engine.state_store import StateFolder, state_folder_of
from tb_footprint_plugin.engine.trust import BAD_LEDGER, DAMAGED_LINE, FOREIGN_LEDGER, Untrusted
from tb_footprint_plugin.storage.store import Store, StoreFailure

#: a ledger file larger than this is refused unread (10,000 runs take about 3 MB)
MAX_LEDGER_BYTES = 64 << 20
LEDGER_NAME = "ledger.json"
_SHARD_LEDGER = re.compile(r"^ledger-shard-(\d+)-of-(\d+)\.json$")

#: what ``load`` says of the file besides its data: (transition lines after the snapshot, whether
#: the next write must rewrite it whole: a torn last line, or a snapshot over several lines)
_Tail = Tuple[int, bool]


def ledger_name(shard: Optional[Tuple[int, int]] = None) -> str:
    """The file name of a batch's default ledger, or of one shard's."""
    return LEDGER_NAME if shard is None else f"ledger-shard-{shard[0]}-of-{shard[1]}.json"


def ledger_path(state: str, shard: Optional[Tuple[int, int]] = None) -> str:
    """The default ledger of a batch, or of one shard of it."""
    return os.path.join(state, ledger_name(shard))


def ledger_paths(state: str) -> List[str]:
    """Every default ledger in the state folder: the batch's and each shard's (sorted)."""
    try:
        names = os.listdir(state)
    except OSError:
        return []
    return sorted(os.path.join(state, n) for n in names if n == LEDGER_NAME or _SHARD_LEDGER.match(n))


def _folder_store(path: str) -> Optional[StateFolder]:
    """The store of the folder holding ``path``; None when there is no such folder (no ledger)."""
    try:
        return StateFolder(os.path.dirname(path))
    except StoreFailure:
        return None


def load_ledger(path: str, logdir: Optional[str] = None) -> Tuple[Optional[dict], List[Untrusted]]:
    """Read and check the ledger at ``path``: (None, []) when there is none; (None, [refusal]) when
    it cannot be used at all; else the checked ledger and the refusals of its bad entries and
    damaged lines."""
    data, problems, _tail = load(_folder_store(path), path, logdir)
    return data, problems


def load(store: Optional[Store], path: str, logdir: Optional[str]
         ) -> Tuple[Optional[dict], List[Untrusted], _Tail]:
    """``load_ledger`` through the folder's ``store``, how many transition lines follow the
    snapshot, and whether the next write must rewrite the file whole (a torn last line; an
    earlier version's indented ledger)."""
    if store is None:
        return None, [], (0, False)
    try:
        raw = store.read_all(os.path.basename(path), MAX_LEDGER_BYTES)
    except StoreFailure as e:
        if e.code == StoreError.NOT_FOUND:
            return None, [], (0, False)
        if e.code == StoreError.TOO_LARGE:
            return None, [Untrusted(BAD_LEDGER, path, f"larger than {MAX_LEDGER_BYTES >> 20} MB; not read")], (0, False)
        return None, [Untrusted(BAD_LEDGER, path, f"unreadable ledger ({e})")], (0, False)
    except OSError as e:
        return None, [Untrusted(BAD_LEDGER, path, f"unreadable ledger ({e.strerror or e})")], (0, False)
    first, newline, rest = raw.partition(b"\n")
    head = None
    if newline and rest.strip():
        try:
            head = json.loads(first.decode("utf-8"))
        except (ValueError, RecursionError):
            head = None
    if not isinstance(head, dict):
        # one JSON document (this version's compacted form, or an earlier version's, indented
        # or not): the whole file is the ledger
        try:
            head = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            return None, [Untrusted(BAD_LEDGER, path, f"not JSON ({str(e)[:200]})")], (0, False)
        rest = b""
    try:
        data, problems = check_ledger(head, path, logdir)
    except Untrusted as u:
        return None, [u], (0, False)
    if not rest:
        return data, problems, (0, b"\n" in raw.strip())
    lines, torn = replay(rest, data["runs"], problems, path)
    return data, problems, (lines, torn)


def replay(raw: bytes, runs: Dict[str, dict], problems: List[Untrusted], path: str) -> _Tail:
    """Apply the transition lines ``raw`` (the file after its snapshot line) to ``runs``, as
    ``trust.read_json_lines`` reads lines: a damaged one is skipped and named, an unterminated
    last one ignored. Returns (lines read, torn)."""
    chunks = raw.split(b"\n")
    last = len(chunks) - 1
    count = 0
    for n, chunk in enumerate(chunks, 2):
        if n - 2 == last:
            return count, bool(chunk.strip())
        if not chunk.strip():
            continue
        count += 1
        try:
            rec = json.loads(chunk.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            why = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"not JSON ({str(e)[:80]})"
            problems.append(Untrusted(DAMAGED_LINE, path, f"line {n}: {why}; skipped"))
            continue
        if not isinstance(rec, dict) or set(rec) != {"run", "entry"}:
            problems.append(Untrusted(DAMAGED_LINE, path, f"line {n}: not a transition of this ledger; skipped"))
            continue
        try:
            runs[rec["run"]] = check_entry(rec["run"], rec["entry"], path)
        except Untrusted as u:
            problems.append(u)
    return count, False


class FileLayout:
    """One ledger file of a folder (the module doc), for ``engine.ledger.Ledger``."""

    #: an in-flight mark over a ``done`` entry another worker settled after this batch began is
    #: dropped (``keeps_done``'s ``since``): several processes share one file
    guards_in_flight = True

    def __init__(self, path: str, policy: str, logdir: Optional[str], store: Optional[Store] = None):
        self.path = os.path.abspath(path)
        self.key = os.path.basename(self.path)
        self.policy = policy
        self.logdir = logdir
        #: the folder's store of state files (``state_store.state_folder_of``): the one given, so a
        #: wrapper around it counts every read and write, else the folder's own once it exists
        self._store: Optional[Store] = None if store is None else state_folder_of(store)
        self._lock = threading.Lock()
        self.problems: List[dict] = []
        self._mine: Optional[Tuple[str, dict]] = None  # (version, data) of this process's last write
        self._tail: _Tail = (0, False)  # the file's transition lines after its snapshot, torn end

    def store(self) -> Optional[Store]:
        """The folder's store, once the folder exists (always, under ``locked``)."""
        if self._store is None:
            self._store = _folder_store(self.path)
        return self._store

    @contextlib.contextmanager
    def locked(self):
        if self._store is None:
            # made as a state folder is (0700; ``.tb-footprint`` checked ours) when missing
            self._store = StateFolder(os.path.dirname(self.path), create=True)
        with self._lock, self._store.locked(self.key):  # a folder of ours, never through a link
            yield

    def _version(self) -> Optional[str]:
        """The file's version as its store gives it (inode, size, mtime), from one ``lstat`` of the
        path (the store's ``stat`` opens the folder first: twice a mark)."""
        store = self.store()
        return store.version(self.key) if store is not None else None

    def read(self) -> dict:
        """The ledger as checked; bad entries are left out and, like a file that is no ledger at
        all, reported in ``problems``. The file this process wrote last, unchanged since (same
        version: inode, size and mtime), is not parsed and checked again (re-reading a 2,000-run
        ledger at every transition was most of a batch's ledger cost)."""
        mine = self._mine
        if mine is not None:
            if self._version() == mine[0]:
                self.problems = []
                return mine[1]
            self._mine = None
        data, problems, self._tail = load(self.store(), self.path, self.logdir)
        self.problems = [u.to_dict() for u in problems]
        if data is not None:
            return data
        return {"version": LEDGER_VERSION, "logdir": self.logdir, "policy": self.policy,
                "created_at": time.time(), "runs": {}}

    def current(self) -> dict:
        """The ledger as it stands now (under ``locked``), a file refused whole set aside first."""
        data = self.read()
        self._set_aside_if_refused()
        return data

    def _set_aside_if_refused(self) -> None:
        """A ledger file refused as a whole is renamed aside (kept for inspection), never rewritten
        in place: the next write starts a fresh one beside it."""
        if any(p["code"] in (BAD_LEDGER, FOREIGN_LEDGER) for p in self.problems) and os.path.lexists(self.path):
            aside = self.store().set_aside(self.key, f"refused-{int(time.time())}")
            for p in self.problems:
                p["kept_as"] = aside

    def begin(self) -> dict:
        """``start``'s read (under ``locked``): a ledger written for another policy is archived and
        a fresh one started (its states say nothing about this policy)."""
        data = self.current()
        if data.get("policy") != self.policy and data["runs"]:
            self.store().set_aside(self.key, f"{int(time.time())}.old")
            data = self.read()
        return data

    def begun(self, data: dict, runs, sizes: Dict[str, int]) -> None:
        """``start``'s write: every run registered as pending (keeping what an earlier batch
        recorded; a pending run's size when given: what it will weigh in the batch's counts),
        the file rewritten as its snapshot."""
        for r in runs:
            e = data["runs"].setdefault(r, {"state": "pending", "updated_at": time.time()})
            if e["state"] == "pending" and isinstance(sizes.get(r), int):
                e.setdefault("original_size_bytes", sizes[r])
        self.write_whole(data)

    def known(self, run: str, data: dict, state: str) -> Optional[dict]:
        """The entry a mark of ``run`` is judged against: the file's, read under the lock."""
        return data["runs"].get(run)

    def write_mark(self, run: str, entry: dict, data: dict, state: str, policy: Optional[str] = None) -> None:
        """One mark: a line appended, or the whole file rewritten (a torn or damaged line is
        never glued onto, nor an indented ledger of an earlier version appended to; a log grown
        past twice the runs is compacted: the file stays linear in the runs)."""
        lines, rewrite = self._tail
        if rewrite or self.problems or not os.path.exists(self.path) or lines >= max(64, 2 * len(data["runs"])):
            self.write_whole(data)
            return
        # (the snapshot is written without a newline after it: ``append_line`` starts this
        # line with one, as after any unterminated last line)
        line = json.dumps({"run": run, "entry": entry}, sort_keys=True, separators=(",", ":")) + "\n"
        # an in-flight state lost to a power cut reads as the one before it, which a rerun
        # treats alike (``RETRY_STATES``): only settled states are fsynced
        version = self.store().append(self.key, line.encode("utf-8"), create=False,
                                      sync=state not in ("reducing", "verifying"))
        self._tail = (lines + 1, False)
        self._remember(version, data)

    def write_settled(self, run: str, judged: dict, mark: Callable[[dict], dict], state: str,
                      policy: Optional[str] = None) -> bool:
        """A settling's mark of another worker's run (``Ledger.settle_mark``, under ``locked``):
        the file read again and ``mark`` applied to the run's entry only while it is still
        ``judged`` (``same_mark``: a live worker that marked it since keeps its mark). Returns
        whether it was written."""
        data = self.current()
        now = data["runs"].get(run)
        if not same_mark(now, judged):
            return False
        self.write_mark(run, mark(now), data, state, policy)
        return True

    def compact(self) -> None:
        """Rewrite the ledger as its snapshot alone (under ``locked``): one JSON document, as
        earlier versions wrote it."""
        data = self.current()
        if self._tail != (0, False) or self.problems:
            self.write_whole(data)

    def flush(self) -> None:
        """Nothing waits: each mark was appended as it was made."""

    def write_whole(self, data: dict) -> None:
        """The file rewritten as its snapshot alone: one compact JSON document, as earlier
        versions wrote it."""
        version = self.store().put(self.key, json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8"))
        self._tail = (0, False)
        self._remember(version, data)

    def _remember(self, version: str, data: dict) -> None:
        """This process's last write (the version it left), so ``read`` need not parse it again
        (under the lock: every writer holds it, so the file is exactly what this process wrote)."""
        self._mine = (version, data)

    def snapshot(self) -> dict:
        """The ledger as a reader sees it (no lock)."""
        return self.read()


__all__ = ["FileLayout", "LEDGER_NAME", "MAX_LEDGER_BYTES", "ledger_name", "ledger_path", "ledger_paths",
           "load", "load_ledger", "replay"]
