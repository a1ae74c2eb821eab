"""The batch ledger: an append-only log of state transitions, so a batch interrupted at any
point resumes where it stopped.

The file's first line is a snapshot (``{"version": 1, "logdir", "policy", "created_at", "runs"}``,
the ledger's whole JSON form of earlier versions, which are still read as they are); each
transition after it is one fsynced line ``{"run": NAME, "entry": {...}}`` holding the run's whole
entry as it now stands, so replaying the lines in order over the snapshot gives the ledger and a
line read twice changes nothing. A mark appends one line (a rewrite of the whole file at every
transition was quadratic in the runs of a batch); ``start`` and ``compact`` (the end of a batch,
or once the lines outnumber twice the runs) rewrite the file as its snapshot alone. Lines are
untrusted input read as ``trust.read_json_lines`` reads: a damaged line is skipped and named
(``damaged_line``), an unterminated last line (a writer killed mid-append) is ignored, and the
next write then rewrites the file whole instead of gluing a line onto it.

Per run: ``pending → reducing → verifying → done | failed | skipped`` with sizes, ratio,
verified flag, the error, the operation id and who did it (host, pid, shard). Several processes
may share one ledger: every update re-reads the file under an exclusive ``flock``. A sharded
batch keeps one ledger per shard beside the others (``ledger-shard-I-of-N.json``), so no lock
is shared between machines; ``merged`` reads them all back as one batch.

Why one module: one file format — the snapshot and its transition lines,
their checks as untrusted input, the flocked update, and the merge of a sharded batch's ledgers
— read and written by the same entry rules (``check_entry``, ``_replay``).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import threading
import time
from typing import Dict, Iterable, List, Optional, Tuple

from tb_footprint_plugin.codes import PASSING_SKIPS, Recovery, Skip
from tb_footprint_plugin.engine.context import NoSpace
from tb_footprint_plugin.engine.lease import holder_alive, me
from tb_footprint_plugin.engine.trust import (BAD_LEDGER, BAD_LEDGER_ENTRY, DAMAGED_LINE, FOREIGN_LEDGER, Untrusted,
                                              undo_partial_append)
from tb_footprint_plugin.storage.files import append_line, atomic_write_json
from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.paths import is_state_name
from tb_footprint_plugin.storage.private import ensure_private_dir
from tb_footprint_plugin.storage.regular import open_regular, read_capped

LEDGER_VERSION = 1
RETRY_STATES = {"pending", "reducing", "verifying", "failed"}
TERMINAL_STATES = {"done", "failed", "skipped"}
STATES = ("pending", "reducing", "verifying", "done", "failed", "skipped")


#: a ledger file larger than this is refused unread (10,000 runs take about 3 MB)
MAX_LEDGER_BYTES = 64 << 20
_ENTRY_INTS = ("original_size_bytes", "after_size_bytes", "pid", "pid_start")
_ENTRY_STRS = ("host", "shard", "op_id", "code", "error")
MAX_ERROR_CHARS = 8192
#: every field a ledger entry may carry; others are dropped on reading (nothing uses them)
_ENTRY_FIELDS = {"state", "updated_at", "reduced_ratio", "verified", *_ENTRY_INTS, *_ENTRY_STRS}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_entry(run, e, file: str) -> dict:
    """One ledger entry read back from disk, checked field by field (untrusted input: a run name in
    it is only ever looked up in the plan, never joined onto a path). Returns the entry with only
    the known fields; raises ``trust.Untrusted`` (code ``bad_ledger_entry``) naming what is wrong."""
    def bad(why: str):
        return Untrusted(BAD_LEDGER_ENTRY, file, f"entry {str(run)[:200]!r}: {why}")

    if not isinstance(run, str) or not run or len(run) > 4096 or "\0" in run:
        raise bad("run name is not a string of 1..4096 characters")
    if not isinstance(e, dict):
        raise bad(f"is a {type(e).__name__}, not an object")
    if e.get("state", "pending") not in STATES:
        raise bad(f"unknown state {str(e.get('state'))[:40]!r}")
    if "updated_at" in e and not _finite(e["updated_at"]):
        raise bad("updated_at is not a finite number")
    for k in _ENTRY_INTS:
        if e.get(k) is not None and not (isinstance(e[k], int) and not isinstance(e[k], bool) and e[k] >= 0):
            raise bad(f"{k} is not a non-negative integer")
    for k in _ENTRY_STRS:
        if e.get(k) is not None and not (isinstance(e[k], str) and len(e[k]) <= 65536):
            raise bad(f"{k} is not a string")
    if e.get("reduced_ratio") is not None and not _finite(e["reduced_ratio"]):
        raise bad("reduced_ratio is not a finite number")
    if e.get("verified") is not None and not isinstance(e["verified"], bool):
        raise bad("verified is not true or false")
    return {k: v for k, v in e.items() if k in _ENTRY_FIELDS}


def check_ledger(data, file: str, logdir: Optional[str] = None) -> Tuple[dict, List[Untrusted]]:
    """A whole ledger read back from disk: the ledger with its valid entries, and one refusal per
    bad entry. Raises ``trust.Untrusted`` when the file as a whole is not a ledger of this version
    (``bad_ledger``) or was written for another logdir (``foreign_ledger``)."""
    if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION or not isinstance(data.get("runs"), dict):
        raise Untrusted(BAD_LEDGER, file, f"not a ledger of version {LEDGER_VERSION}")
    for k in ("logdir", "policy"):
        if data.get(k) is not None and not isinstance(data[k], str):
            raise Untrusted(BAD_LEDGER, file, f"{k} is not a string")
    if data.get("created_at") is not None and not _finite(data["created_at"]):
        raise Untrusted(BAD_LEDGER, file, "created_at is not a finite number")
    if logdir and data.get("logdir") and os.path.realpath(data["logdir"]) != os.path.realpath(logdir):
        raise Untrusted(FOREIGN_LEDGER, file, f"written for another logdir ({data['logdir'][:300]!r})")
    runs, problems = {}, []
    for run, e in data["runs"].items():
        try:
            runs[run] = check_entry(run, e, file)
        except Untrusted as u:
            problems.append(u)
    return dict(data, runs=runs), problems


def load_ledger(path: str, logdir: Optional[str] = None) -> Tuple[Optional[dict], List[Untrusted]]:
    """Read and check the ledger at ``path``: (None, []) when there is none; (None, [refusal]) when
    it cannot be used at all; else the checked ledger and the refusals of its bad entries and
    damaged lines."""
    data, problems, _tail = _load(path, logdir)
    return data, problems


#: what ``_load`` says of the file besides its data: (transition lines after the snapshot, whether
#: the next write must rewrite it whole: a torn last line, or a snapshot over several lines)
_Tail = Tuple[int, bool]


def _load(path: str, logdir: Optional[str]) -> Tuple[Optional[dict], List[Untrusted], _Tail]:
    """``load_ledger``, how many transition lines follow the snapshot, and whether the next write
    must rewrite the file whole (a torn last line; an earlier version's indented ledger)."""
    try:
        with open_regular(path) as f:  # a symlink or FIFO in its place is refused, never followed
            raw = read_capped(f, MAX_LEDGER_BYTES)
    except FileNotFoundError:
        return None, [], (0, False)
    except OSError as e:
        return None, [Untrusted(BAD_LEDGER, path, f"unreadable ledger ({e.strerror or e})")], (0, False)
    if len(raw) > MAX_LEDGER_BYTES:
        return None, [Untrusted(BAD_LEDGER, path, f"larger than {MAX_LEDGER_BYTES >> 20} MB; not read")], (0, False)
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
    lines, torn = _replay(rest, data["runs"], problems, path)
    return data, problems, (lines, torn)


def _replay(raw: bytes, runs: Dict[str, dict], problems: List[Untrusted], path: str) -> _Tail:
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


class Ledger:
    """One batch's ledger file."""

    def __init__(self, path: str, policy: str, logdir: str, shard: Optional[str] = None):
        self.path = os.path.abspath(path)
        self.policy = policy
        self.logdir = logdir
        self._lock = threading.Lock()
        #: written into every transition: which worker did it
        self.who = {"host": socket.gethostname(), **me(), "shard": shard}
        #: refusals of the last read: entries (or the whole file) that were not used
        self.problems: List[dict] = []
        self.started = time.time()  # this batch's start: done entries written since are another worker's
        self._mine: Optional[Tuple[tuple, dict]] = None  # (stat key, data) of this process's last write
        self._tail: _Tail = (0, False)  # the file's transition lines after its snapshot, torn end

    @contextlib.contextmanager
    def _locked(self):
        d = os.path.dirname(self.path)
        if is_state_name(os.path.basename(d)):
            ensure_private_dir(d, tighten_root=True)  # the state folder: made 0700, checked ours
        elif not os.path.lexists(d):
            ensure_private_dir(d)
        with self._lock, exclusive(self.path + ".lock"):  # a folder of ours, never through a link
            yield

    def read(self) -> dict:
        """The ledger as checked by ``check_ledger``; bad entries are left out and, like a file
        that is no ledger at all, reported in ``self.problems`` (codes of ``engine.trust``).

        The file this process wrote last, unchanged since (same inode, size and mtime), is not
        parsed and checked again: what it holds is what this process wrote (re-reading a
        2,000-run ledger at every transition was most of a batch's ledger cost)."""
        mine = self._mine
        if mine is not None:
            try:
                st = os.stat(self.path)
                if (st.st_ino, st.st_size, st.st_mtime_ns) == mine[0]:
                    self.problems = []
                    return mine[1]
            except OSError:
                pass
            self._mine = None
        data, problems, self._tail = _load(self.path, self.logdir)
        self.problems = [u.to_dict() for u in problems]
        if data is not None:
            return data
        return {"version": LEDGER_VERSION, "logdir": self.logdir, "policy": self.policy,
                "created_at": time.time(), "runs": {}}

    def _set_aside_if_refused(self) -> None:
        """A ledger file refused as a whole is renamed aside (kept for inspection), never rewritten
        in place: the next write starts a fresh one beside it."""
        if any(p["code"] in (BAD_LEDGER, FOREIGN_LEDGER) for p in self.problems) and os.path.lexists(self.path):
            aside = f"{self.path}.refused-{int(time.time())}"
            os.replace(self.path, aside)
            for p in self.problems:
                p["kept_as"] = aside

    def start(self, runs: Iterable[str], sizes: Optional[Dict[str, int]] = None,
              since: Optional[float] = None) -> Dict[str, dict]:
        """Register runs as pending (keeping what an earlier batch recorded), with their sizes when
        given (what a pending run will weigh in the batch's counts); returns all entries.
        ``since``: when the scan behind this batch's plan began; a run another worker settled
        after it is not taken back in flight (``keeps_done``): the plan's view of it is older.

        A ledger written for another policy is archived and a fresh one started: its states
        say nothing about this policy.
        """
        sizes = sizes or {}
        if since is not None:
            self.started = min(self.started, since)
        with self._locked():
            data = self.read()
            self._set_aside_if_refused()
            if data.get("policy") != self.policy and data["runs"]:
                os.replace(self.path, f"{self.path}.{int(time.time())}.old")
                data = self.read()
            for r in runs:
                e = data["runs"].setdefault(r, {"state": "pending", "updated_at": time.time()})
                if e["state"] == "pending" and isinstance(sizes.get(r), int):
                    e.setdefault("original_size_bytes", sizes[r])
            self._write(data)
            return dict(data["runs"])

    def mark(self, run: str, state: str, **fields) -> None:
        """Record a transition of ``run`` durably."""
        with self._locked():
            data = self.read()
            self._set_aside_if_refused()
            if keeps_done(data["runs"].get(run), state, fields, since=self.started):
                return
            if isinstance(fields.get("error"), str):
                fields["error"] = fields["error"][:MAX_ERROR_CHARS]  # within what check_entry accepts
            entry = data["runs"].setdefault(run, {})
            entry.update(fields, state=state, updated_at=time.time(), **self.who)
            lines, rewrite = self._tail
            if rewrite or self.problems or not os.path.exists(self.path) or lines >= max(64, 2 * len(data["runs"])):
                # a torn or damaged line (never glued onto), a first write, an indented ledger of
                # an earlier version, or a log grown past twice the runs (compacted: the file
                # stays linear in the runs)
                self._write(data)
                return
            # (the snapshot is written without a newline after it: ``append_line`` starts this
            # line with one, as after any unterminated last line)
            line = json.dumps({"run": run, "entry": entry}, sort_keys=True, separators=(",", ":")) + "\n"
            # the line is known here, so a failed append's undo can tell its own bytes from another's
            with undo_partial_append(self.path, line):
                # an in-flight state lost to a power cut reads as the one before it, which a rerun
                # treats alike (``RETRY_STATES``): only settled states are fsynced
                append_line(self.path, line, create=False, sync=state not in ("reducing", "verifying"))
            self._tail = (lines + 1, False)
            self._remember(data)

    def compact(self) -> None:
        """Rewrite the ledger as its snapshot alone (the end of a batch): one JSON document, as
        earlier versions wrote it."""
        with self._locked():
            data = self.read()
            self._set_aside_if_refused()
            if self._tail != (0, False) or self.problems:
                self._write(data)

    def _write(self, data: dict) -> None:
        atomic_write_json(self.path, data, compact=True)
        self._tail = (0, False)
        self._remember(data)

    def _remember(self, data: dict) -> None:
        """This process's last write, so ``read`` need not parse it again (under the lock: every
        writer holds it, so the file is exactly what this process wrote)."""
        st = os.stat(self.path)
        self._mine = ((st.st_ino, st.st_size, st.st_mtime_ns), data)

    def should_run(self, entry: Optional[dict], current_bytes: Optional[int] = None) -> bool:
        """The resume rule (``should_run``)."""
        return should_run(entry, current_bytes)

    def summary(self) -> dict:
        data = self.read()
        counts: Dict[str, int] = {}
        for e in data["runs"].values():
            counts[e.get("state", "?")] = counts.get(e.get("state", "?"), 0) + 1
        return {"path": self.path, "policy": data.get("policy"), "counts": counts, "runs": data["runs"]}


#: skips that say another worker got there first (or holds the run): never a reason to forget
#: that the run is done
_SKIPS_OF_A_DONE_RUN = frozenset({Skip.CHANGED_BY_OTHER, Skip.LOCKED, Skip.NOT_IN_PLAN})


def keeps_done(existing: Optional[dict], state: str, fields: dict, since: Optional[float] = None) -> bool:
    """Whether a ``done`` entry stands against a new transition of its run, in any ledger (a file
    two workers of one shard share, or a bucket's object per shard and run). A rerun, or an
    overlapping worker of the same shard, must not turn a reduced run into "skipped" or "reducing":
    a skip that says another worker got there first keeps it, and so does "nothing to reduce"
    while the run is as that entry left it (same size); with ``since`` (when this worker's batch
    began), so does an in-flight mark over an entry another worker settled after that."""
    if not existing or existing.get("state") != "done":
        return False
    if state == "skipped":
        code = fields.get("code")
        return code in _SKIPS_OF_A_DONE_RUN or (code == Skip.NOTHING and
                                                not is_stale(existing, fields.get("original_size_bytes")))
    if state in ("reducing", "verifying") and since is not None:
        mine = existing.get("pid") == os.getpid() and existing.get("host") == socket.gethostname()
        return not mine and float(existing.get("updated_at") or 0) >= since
    return False


def should_run(entry: Optional[dict], current_bytes: Optional[int] = None) -> bool:
    """The resume rule of every batch ledger (a file, or a bucket's objects): pending, interrupted
    and failed runs are retried; done and skipped are not, except runs skipped for a passing
    reason (active or locked: ``codes.PASSING_SKIPS``) and stale entries (``is_stale``)."""
    if not entry:
        return True
    if entry.get("state") in RETRY_STATES:
        return True
    if is_stale(entry, current_bytes):
        return True
    return entry.get("state") == "skipped" and _skip_code(entry) in PASSING_SKIPS


def is_stale(entry: dict, current_bytes: Optional[int]) -> bool:
    """A settled entry says what the run was right after the batch handled it; once the run changed
    since (restored, new files written, files removed) its size differs and the entry no longer holds."""
    if current_bytes is None or entry.get("state") not in ("done", "skipped"):
        return False
    after = entry.get("after_size_bytes")
    return isinstance(after, int) and after != current_bytes


def _skip_code(entry: dict) -> Optional[str]:
    """The skip code of a ledger entry. Entries written before codes existed carry only the
    prose of the reason; the two passing reasons of that format are mapped once, here."""
    if "code" in entry:
        return entry["code"]
    err = entry.get("error") or ""
    if "active" in err:
        return Skip.ACTIVE
    if "another process" in err:
        return Skip.LOCKED
    return None



LEDGER_NAME = "ledger.json"
_SHARD_LEDGER = re.compile(r"^ledger-shard-(\d+)-of-(\d+)\.json$")


def ledger_path(state: str, shard: Optional[Tuple[int, int]] = None) -> str:
    """The default ledger of a batch, or of one shard of it."""
    name = LEDGER_NAME if shard is None else f"ledger-shard-{shard[0]}-of-{shard[1]}.json"
    return os.path.join(state, name)


def ledger_paths(state: str) -> List[str]:
    """Every default ledger in the state folder: the batch's and each shard's (sorted)."""
    try:
        names = os.listdir(state)
    except OSError:
        return []
    return sorted(os.path.join(state, n) for n in names if n == LEDGER_NAME or _SHARD_LEDGER.match(n))


def _pid_gone(e: dict) -> bool:
    """An in-flight entry written on this host by a process that no longer exists (a killed worker)."""
    if e.get("host") != socket.gethostname() or not isinstance(e.get("pid"), int) or e["pid"] <= 0:
        return False
    return not holder_alive(e["pid"], e.get("pid_start"))


def _rank(e: dict) -> Tuple[int, float]:
    """Which of several ledgers' entries for one run tells its state: a settled or live transition
    (newest first; a recovery's roll-back of a dead worker's run is one), then an in-flight one of
    a dead worker, then a skip, then pending."""
    st = e["state"]
    if st in ("done", "failed") or (st in ("reducing", "verifying") and not e.get("stalled")) or \
            (st == "pending" and e.get("code") == Recovery.ROLLED_BACK):
        cls = 3
    elif st in ("reducing", "verifying"):
        cls = 2
    elif st == "skipped":
        cls = 1
    else:
        cls = 0
    return cls, float(e.get("updated_at", 0))


def mark_recovered(book, recovered: Iterable) -> List[dict]:
    """Record in ``book`` (a ``Ledger`` or a bucket's ledger) the runs this start's recovery settled
    for a worker that died: a finished reduction is ``done`` (code ``completed``, its operation and
    sizes), a rolled-back one ``pending`` again (code ``rolled_back``; a rerun of any shard covering
    it reduces it). Without this the merged view would go on showing the dead worker's in-flight
    entry, or a later worker's skip, for a run that is reduced. Returns the problems of ledger
    writes that failed (the recovery stands)."""
    problems: List[dict] = []
    for r in recovered:
        if r.action not in (Recovery.COMPLETED, Recovery.ROLLED_BACK):
            continue
        for s in r.runs or ():
            sizes = {k: v for k, v in (("original_size_bytes", s.get("bytes_before")),
                                       ("after_size_bytes", s.get("bytes_after"))) if isinstance(v, int)}
            try:
                if r.action == Recovery.COMPLETED:
                    b, a = sizes.get("original_size_bytes"), sizes.get("after_size_bytes")
                    ratio = round(1 - a / b, 4) if b and a is not None else 0.0
                    book.mark(s["run"], "done", op_id=s["op_id"], verified=True, reduced_ratio=ratio,
                              code=Recovery.COMPLETED, error=None, **sizes)
                else:
                    book.mark(s["run"], "pending", op_id=s["op_id"], verified=False, code=Recovery.ROLLED_BACK,
                              error=f"its worker stopped; recovery rolled it back ({r.detail})", **sizes)
            except (OSError, NoSpace) as e:  # a disk ledger's full disk is named (``LocalEngine.open_ledger``)
                problems.append({"code": getattr(e, "code", None) or "ledger_write_failed",
                                 "detail": f"{s['run']}: ledger not written ({e})"})
    return problems


#: refusals named one by one per ledger in ``merged`` (the rest are counted)
MAX_REPORTED = 20


def merged(paths: Iterable[str], logdir: Optional[str] = None) -> dict:
    """One view of a batch kept in several ledgers (one per shard): per run the entry that tells its
    state, with who did it; counts and bytes per state; ledgers that could not be read are named in
    ``problems`` (a damaged ledger is reported, never silently dropped)."""
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


def report_refusals(where: str, refused: List[Untrusted]) -> List[dict]:
    """The refusals of one ledger as problems of the merged view: the first ``MAX_REPORTED``
    one by one, the rest counted."""
    out = [{"path": where, "code": u.code, "detail": str(u)} for u in refused[:MAX_REPORTED]]
    if len(refused) > MAX_REPORTED:
        out.append({"path": where, "code": refused[0].code,
                    "detail": f"{where}: {len(refused) - MAX_REPORTED} more bad entries refused"})
    return out


def merged_view(ledgers: List[dict], entries: Iterable[Tuple[str, dict, str]], problems: List[dict]) -> dict:
    """The merge itself, over checked entries ``(run, entry, ledger)`` from any kind of ledger
    (files on disk here, objects in a bucket in ``engine.bucket_ledger``)."""
    runs: Dict[str, dict] = {}
    for run, e, where in entries:
        e = dict(e, ledger=where)
        e.setdefault("state", "pending")
        if e["state"] in ("reducing", "verifying") and _pid_gone(e):
            e["stalled"] = True  # its worker died: a rerun of any shard takes the run over
        if run not in runs or _rank(e) > _rank(runs[run]):
            runs[run] = e
    return {"ledgers": ledgers, "runs": dict(sorted(runs.items())), **_tally(runs),
            "stalled": sorted(r for r, e in runs.items() if e.get("stalled")), "problems": problems}


def _tally(runs: Dict[str, dict]) -> dict:
    """Counts and original bytes per state, and the bytes the done runs saved."""
    counts: Dict[str, int] = {}
    nbytes: Dict[str, int] = {}
    for e in runs.values():
        counts[e["state"]] = counts.get(e["state"], 0) + 1
        nbytes[e["state"]] = nbytes.get(e["state"], 0) + (e.get("original_size_bytes") or 0)
    saved = sum((e.get("original_size_bytes") or 0) - (e.get("after_size_bytes") or 0)
                for e in runs.values() if e["state"] == "done" and e.get("after_size_bytes") is not None)
    return {"counts": counts, "bytes": nbytes, "saved_bytes": saved}


def with_restores(view: Optional[dict], operations: Iterable[dict]) -> Optional[dict]:
    """The merged view with the runs whose reduction was restored since shown as ``restored``
    (the ledger recorded the batch; the vault knows what was undone after it), recounted."""
    if not view:
        return view
    undone = {o.get("op_id") for o in operations if o.get("restored_by")}
    for e in view["runs"].values():
        if e["state"] == "done" and e.get("op_id") in undone:
            e["state"] = "restored"
    view.update(_tally(view["runs"]))
    return view
