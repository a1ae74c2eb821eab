"""The batch ledger's entries, the same on every store: what an entry may hold (checked as
untrusted input), the resume rule, when a ``done`` entry stands against a new mark, the merged view
of several ledgers, and the entries a settling writes (a dead worker's run proven committed, or
rolled back by recovery). ``engine.ledger.Ledger`` keeps them in a folder (``engine.ledger_file``)
or in a bucket (``engine.ledger_objects``); both read and write them through these rules only.

Per run: ``pending → reducing → verifying → done | failed | skipped`` with sizes, ratio,
verified flag, the error, the operation id and who did it (host, pid, shard).
"""
from __future__ import annotations

import math
import os
import socket
import time
from typing import Dict, Iterable, List, Optional, Tuple

from tb_footprint_plugin.codes import PASSING_SKIPS, Outcome, Recovery, Skip
from tb_footprint_plugin.engine.lease import holder_alive, me
from tb_footprint_plugin.engine.trust import BAD_LEDGER, BAD_LEDGER_ENTRY, FOREIGN_LEDGER, Untrusted

LEDGER_VERSION = 1
RETRY_STATES = {"pending", "reducing", "verifying", "failed"}
TERMINAL_STATES = {"done", "failed", "skipped"}
STATES = ("pending", "reducing", "verifying", "done", "failed", "skipped")
IN_FLIGHT_STATES = ("reducing", "verifying")

_ENTRY_INTS = ("original_size_bytes", "after_size_bytes", "pid", "pid_start")
_ENTRY_STRS = ("host", "shard", "op_id", "code", "error")
MAX_ERROR_CHARS = 8192
#: every field a ledger entry may carry; others are dropped on reading (nothing uses them)
#: (``of_mark``: a settling's, the time of the mark it settled; a bucket's ``ledger_objects.order``)
_ENTRY_FIELDS = {"state", "updated_at", "of_mark", "reduced_ratio", "verified", *_ENTRY_INTS, *_ENTRY_STRS}
#: refusals named one by one per ledger in a merged view (the rest are counted)
MAX_REPORTED = 20
#: how far past this host's clock a mark's time may be (another host's clock ahead of ours) before
#: its entry is refused: a mark dated later outranks every mark of its run made before that time
#: (``ledger_objects.newest``), so one dated years ahead would tell its run's state for years. Refused,
#: not clamped: a time clamped to "now" still outranks the real marks made before the read, and
#: changes its rank as the clock moves; a refusal is named (``bad_ledger_entry``) and the run's
#: other marks tell. An hour: far above what NTP'd hosts drift, far below a planted date's reach.
FUTURE_SKEW_SECONDS = 3600.0


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def accepted_everywhere(e: dict, now: float) -> bool:
    """Whether every host whose clock is within ``FUTURE_SKEW_SECONDS`` of this one (``now``)
    accepts the mark ``e``: each of its times an allowed skew old or older (``check_entry``'s rule
    seen from the slowest such host)."""
    return all(float(e[k]) <= now - FUTURE_SKEW_SECONDS for k in ("updated_at", "of_mark") if k in e)


def check_entry(run, e, file: str) -> dict:
    """One ledger entry read back from a store, checked field by field (untrusted input: a run name
    in it is only ever looked up in the plan, never joined onto a path). Returns the entry with
    only the known fields; raises ``trust.Untrusted`` (code ``bad_ledger_entry``) naming what is wrong."""
    def bad(why: str):
        return Untrusted(BAD_LEDGER_ENTRY, file, f"entry {str(run)[:200]!r}: {why}")

    if not isinstance(run, str) or not run or len(run) > 4096 or "\0" in run:
        raise bad("run name is not a string of 1..4096 characters")
    if not isinstance(e, dict):
        raise bad(f"is a {type(e).__name__}, not an object")
    if e.get("state", "pending") not in STATES:
        raise bad(f"unknown state {str(e.get('state'))[:40]!r}")
    for k in ("updated_at", "of_mark"):
        if k in e and not _finite(e[k]):
            raise bad(f"{k} is not a finite number")
        if k in e and e[k] > time.time() + FUTURE_SKEW_SECONDS:
            raise bad(f"{k} {e[k]!r} is later than this host's clock allows (now + {FUTURE_SKEW_SECONDS:.0f} s); "
                      "a mark from the future would outrank every later mark of its run")
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
    """A whole ledger snapshot read back: the ledger with its valid entries, and one refusal per
    bad entry. Raises ``trust.Untrusted`` when it as a whole is not a ledger of this version
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


def marked(entry: dict, state: str, fields: dict, who: dict) -> dict:
    """``entry`` (updated in place and returned) after a mark of ``state`` with ``fields`` by the
    worker ``who``: the error cut to what ``check_entry`` accepts, the time of the mark."""
    if isinstance(fields.get("error"), str):
        fields = dict(fields, error=fields["error"][:MAX_ERROR_CHARS])
    entry.pop("of_mark", None)  # a new mark: ordered by its own time, whatever it was read as
    entry.update(fields, state=state, updated_at=time.time(), **who)
    return entry


#: what tells one mark from another: who wrote it (host, process, its start, shard), when, and
#: the state and operation it says
_MARK_FIELDS = ("state", "updated_at", "host", "pid", "pid_start", "shard", "op_id")


def same_mark(a: Optional[dict], b: Optional[dict]) -> bool:
    """Whether the entries ``a`` and ``b`` are one mark (``_MARK_FIELDS`` equal): a settling writes
    over a run's entry only while it is still the one it judged (review R2-5)."""
    return a is not None and b is not None and all(a.get(k) == b.get(k) for k in _MARK_FIELDS)


def worker(shard: Optional[str]) -> dict:
    """Who writes a mark: this host and process (its start time too: a reused pid is told apart)
    and the shard."""
    return {"host": socket.gethostname(), **me(), "shard": shard}


#: skips that say another worker got there first (or holds the run): never a reason to forget
#: that the run is done (an unfinished operation: its journal was still there when this worker
#: planned, an overlapping worker's commit not yet closed, or a later attempt recovery settles)
_SKIPS_OF_A_DONE_RUN = frozenset({Skip.CHANGED_BY_OTHER, Skip.LOCKED, Skip.NOT_IN_PLAN, Skip.UNFINISHED})


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
    if state in IN_FLIGHT_STATES and since is not None:
        mine = existing.get("pid") == os.getpid() and existing.get("host") == socket.gethostname()
        return not mine and float(existing.get("updated_at") or 0) >= since
    return False


def should_run(entry: Optional[dict], current_bytes: Optional[int] = None) -> bool:
    """The resume rule of every batch ledger: pending, interrupted and failed runs are retried;
    done and skipped are not, except runs skipped for a passing reason (active or locked:
    ``codes.PASSING_SKIPS``) and stale entries (``is_stale``)."""
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


# --- a worker that is gone, and what its in-flight runs became -------------------------------------
def pid_gone(host, pid, pid_start, *, mine: bool = False) -> bool:
    """Whether the process ``pid`` of ``host`` that wrote a mark is gone: on this host only (another
    host's cannot be told), its pid ended or reused by another process; with ``mine``, this
    process counts as gone too (its batch was interrupted)."""
    if host != socket.gethostname() or isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if mine and pid == os.getpid():
        return True
    return not holder_alive(pid, pid_start)


def committed(manifests: Iterable[dict], run: str, e: dict) -> Optional[dict]:
    """The verified reduction of ``run`` an in-flight entry ``e`` was for: the first finished
    after the mark (manifests in the one schema; sizes numbers), or None (not committed: a rerun
    reduces it again, ``RETRY_STATES``). The commit follows the mark, so an older one is not it."""
    since = float(e.get("updated_at") or 0)
    ops = [m for m in manifests if m.get("run") == run and m.get("kind") == "reduce"
           and m.get("outcome") == Outcome.VERIFIED and m.get("host") in (None, e.get("host"))
           and isinstance(m.get("finished_at"), (int, float)) and m["finished_at"] >= since
           and isinstance(m.get("bytes_before"), int) and isinstance(m.get("bytes_after"), int)]
    return min(ops, key=lambda o: o["finished_at"]) if ops else None


def completed_fields(op_id: str, before: Optional[int], after: Optional[int]) -> dict:
    """The fields of a ``done`` mark a settling writes for a reduction it proved (or recovery
    finished): code ``completed``, its operation and sizes."""
    sizes = {k: v for k, v in (("original_size_bytes", before), ("after_size_bytes", after)) if isinstance(v, int)}
    ratio = round(1 - after / before, 4) if isinstance(before, int) and before and isinstance(after, int) else 0.0
    return dict(op_id=op_id, verified=True, reduced_ratio=ratio, code=Recovery.COMPLETED, error=None, **sizes)


def rolled_back_fields(op_id: Optional[str], before, after, why: str) -> dict:
    """The fields of a ``pending`` mark for a run recovery rolled back (code ``rolled_back``: a
    rerun of any shard covering it reduces it)."""
    sizes = {k: v for k, v in (("original_size_bytes", before), ("after_size_bytes", after)) if isinstance(v, int)}
    return dict(op_id=op_id, verified=False, code=Recovery.ROLLED_BACK, error=why, **sizes)


def rolled_back_by(recovered: Iterable) -> Dict[str, tuple]:
    """run -> (its settled run row, the outcome's detail) for each run ``recovered`` (recovery
    outcomes) rolled back."""
    out: Dict[str, tuple] = {}
    for r in recovered:
        if getattr(r, "action", None) == Recovery.ROLLED_BACK:
            for s in getattr(r, "runs", None) or ():
                if isinstance(s, dict) and isinstance(s.get("run"), str):
                    out[s["run"]] = (s, r.detail)
    return out


def recovered_marks(recovered: Iterable) -> List[Tuple[str, str, dict]]:
    """``(run, state, fields)`` of each run this start's recovery settled for a worker that died:
    a finished reduction ``done`` (code ``completed``), a rolled-back one ``pending`` again
    (code ``rolled_back``)."""
    out = []
    for r in recovered:
        if r.action not in (Recovery.COMPLETED, Recovery.ROLLED_BACK):
            continue
        for s in r.runs or ():
            b, a = s.get("bytes_before"), s.get("bytes_after")
            if r.action == Recovery.COMPLETED:
                out.append((s["run"], "done", completed_fields(s["op_id"], b, a)))
            else:
                out.append((s["run"], "pending", rolled_back_fields(
                    s["op_id"], b, a, f"its worker stopped; recovery rolled it back ({r.detail})")))
    return out


# --- several ledgers as one view ---------------------------------------------------------------------
def report_refusals(where: str, refused: List[Untrusted]) -> List[dict]:
    """The refusals of one ledger as problems of the merged view: the first ``MAX_REPORTED``
    one by one, the rest counted."""
    out = [{"path": where, "code": u.code, "detail": str(u)} for u in refused[:MAX_REPORTED]]
    if len(refused) > MAX_REPORTED:
        out.append({"path": where, "code": refused[0].code,
                    "detail": f"{where}: {len(refused) - MAX_REPORTED} more bad entries refused"})
    return out


def _rank(e: dict) -> Tuple[int, float]:
    """Which of several ledgers' entries for one run tells its state: a settled or live transition
    (newest first; a recovery's roll-back of a dead worker's run is one), then an in-flight one of
    a dead worker, then a skip, then pending."""
    st = e["state"]
    if st in ("done", "failed") or (st in IN_FLIGHT_STATES and not e.get("stalled")) or \
            (st == "pending" and e.get("code") == Recovery.ROLLED_BACK):
        cls = 3
    elif st in IN_FLIGHT_STATES:
        cls = 2
    elif st == "skipped":
        cls = 1
    else:
        cls = 0
    return cls, float(e.get("updated_at", 0))


def merged_view(ledgers: List[dict], entries: Iterable[Tuple[str, dict, str]], problems: List[dict]) -> dict:
    """One view of a batch kept in several ledgers (one per shard), over checked entries
    ``(run, entry, ledger)`` of any layout: per run the entry that tells its state, with who did
    it; counts and bytes per state; the ledgers' refusals in ``problems``."""
    runs: Dict[str, dict] = {}
    for run, e, where in entries:
        e = dict(e, ledger=where)
        e.setdefault("state", "pending")
        if e["state"] in IN_FLIGHT_STATES and pid_gone(e.get("host"), e.get("pid"), e.get("pid_start")):
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
