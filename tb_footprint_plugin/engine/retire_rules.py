"""What a retirement is, written once for every store (issue #26 item 2): a disk's retirement
(``engine.retire``, ``engine.retire_tree``) and a bucket's (``engine.bucket_retire``) ask these
rules instead of spelling them each.

- which names a retirement refuses whatever the run holds (``refused_names``): a run that is no
  relative name below the logdir, or a nested run it would take along that is not inside it
  (taken along, its name in the manifest would make a restore of that run bring back this one);
- which folders of a run are nested runs (``nested_runs``: a folder holding an event file) and
  which of them the plan did not name (``unnamed_runs``: the retirement is refused, plan again);
- which manifests are retirements keeping a run out of the logdir now
  (``is_restorable_retirement``, ``retirements``, newest first), which one keeps a given run out
  (``retired_now``: its own run, or a parent taking it along, ``taken_along``: only names inside
  it, whatever its manifest lists), and the row ``api.retired`` shows
  of one (``retired_row``);
- which retirements a restore (unretire) refuses whatever the vault holds (``unretire_refusal``:
  restored, purged, or never verified);
- when a restore would merge an old run into a new run of the same name (``new_run_refusal``, for
  a retirement's restore and a reduction's, on every store: refused with one set of words each,
  ``new_run_words`` and ``output_gone_words``, nothing changed);
- the history line of a retirement (``retire_line``: its reason says the nested runs it took
  along) and of its restore (``unretire_line``: the restore's own op id, ``of_op`` the retirement
  restored, reason "restored retirement X"): a disk appends them to its change log, a bucket builds
  its entries from the manifests with them (its manifest is its record), one shape on both.

Each store's own rules stay in its layout: a disk's symlinks, permissions and free space, a
bucket's key prefixes and the vault inside them.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, List, Mapping, Optional

from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.storage.paths import is_op_id

#: a retirement's ``kind`` in its journal and manifest, on every store
KIND = "retire"
#: the reason of a retirement recovery rolled back (its history line's), on every store
RECOVERED_REASON = "interrupted (crash or kill); run put back on recovery"


def _parts(name: str) -> List[str]:
    return name.replace("\\", "/").split("/")


def refused_names(run: str, along: Iterable[str]) -> Optional[str]:
    """Why ``run`` (taking ``along``) cannot be retired whatever it holds, or None: the run must be
    a relative name below the logdir (not the logdir itself), and every run taken along a name
    inside it."""
    if run in (".", "") or run.startswith("/") or ".." in _parts(run):
        return f"{run!r} is not a run below the logdir"
    prefix = run.rstrip("/") + "/"
    bad = [a for a in along if not isinstance(a, str) or not a.startswith(prefix) or ".." in _parts(a)]
    if bad:
        return f"{bad[0]!r} is not a run inside {run!r}"
    return None


def nested_runs(paths: Iterable[str]) -> List[str]:
    """The runs among ``paths`` (a run's files, as logdir-relative names): every folder holding
    an event file, sorted."""
    from tb_footprint_plugin.scan.categories import is_event_file_name

    return sorted({p.rsplit("/", 1)[0] for p in paths if "/" in p and is_event_file_name(p.rsplit("/", 1)[-1])})


def unnamed_runs(paths: Iterable[str], run: str, along: Iterable[str]) -> List[str]:
    """The nested runs of ``run`` (its files ``paths``) the plan did not name in ``along``."""
    return sorted(set(nested_runs(paths)) - set(along) - {run})


def is_restorable_retirement(m: dict) -> bool:
    """A verified retirement whose files are still in the vault (not restored, not purged)."""
    return (m.get("kind") == KIND and m.get("outcome") == Outcome.VERIFIED and not m.get("restored_by")
            and not m.get("backup_purged"))


def _newest_first(ms: List[dict]) -> List[dict]:
    return sorted(ms, key=lambda m: (m.get("started_at") or 0, str(m.get("op_id"))), reverse=True)


def retirements(manifests: Iterable[dict]) -> List[dict]:
    """The verified retirements among ``manifests`` (restored and purged ones too), newest first."""
    return _newest_first([m for m in manifests if m.get("kind") == KIND and m.get("outcome") == Outcome.VERIFIED])


def restorable_retirements(manifests: Iterable[dict]) -> List[dict]:
    """The retirements among ``manifests`` that keep a run out of the logdir now, newest first."""
    return _newest_first([m for m in manifests if is_restorable_retirement(m)])


def taken_along(m: dict) -> List[str]:
    """The nested runs retirement ``m`` took along, as far as they can be: the names of its
    ``takes_along`` inside its run. A manifest is untrusted input, and one written before a
    retirement refused a name outside the run (or copied, or planted) may list one; read as
    taken along, a restore of that other run would bring this one back and ``api.retired``
    would show it gone."""
    run, along = m.get("run"), m.get("takes_along")
    if not isinstance(run, str) or not isinstance(along, list):
        return []
    return [a for a in along if isinstance(a, str) and refused_names(run, [a]) is None]


def takes_out(m: dict, run: str) -> bool:
    """Whether retirement ``m`` took ``run`` out of the logdir: its own run, or one taken along."""
    return m.get("run") == run or run in taken_along(m)


def retired_now(manifests: Iterable[dict], run: str) -> Optional[dict]:
    """The newest retirement keeping ``run`` (or a parent taking it along) out of the logdir."""
    return next((m for m in restorable_retirements(manifests) if takes_out(m, run)), None)


def unretire_refusal(m: dict) -> Optional[str]:
    """Why retirement ``m`` puts nothing back whatever the vault holds, or None: restored already,
    its copies purged, or it never verified (a manifest is untrusted input: one that says so never
    took the run out of the logdir, and a restore acts only on what did)."""
    if m.get("restored_by"):
        return f"retirement {m.get('op_id')} was already restored by {m['restored_by']}"
    if m.get("backup_purged") or m.get("outcome") != Outcome.VERIFIED:
        return f"retirement {m.get('op_id')} holds nothing to put back (purged or never committed); nothing to restore"
    return None


def new_run_words(run: str) -> str:
    """What a restore refused by ``new_run_refusal`` says, on every store."""
    return (f"{run}: something stands there now (a new run of the same name?); move it away first — "
            "nothing was changed")


def output_gone_words(run: str, other: str) -> str:
    """What a reduction's restore refused by ``new_run_refusal`` says, on every store: what is seen
    (none of the reduction's own files there, ``other`` a name it never had standing), which
    cannot tell a run whose reduced files were deleted, its untouched files kept, from a new run
    of the same name; and the way to restore anyway."""
    return (f"{run}: none of the files the reduction left there holds its bytes now (deleted or replaced) "
            f"while files it never had stand at the run's path, e.g. {other}: the run's own untouched files, or "
            "a new run of the same name the originals would be merged into; nothing was changed. To restore "
            "anyway, move what stands at the run's path away, restore, then put back what belongs to the run")


def new_run_refusal(run: str, standing: Iterable[str], ours: Callable[[str], Optional[bool]], *,
                    took_all: bool, left: bool = False) -> Optional[str]:
    """Why putting an operation's files back at ``run`` would merge them into a new run of the same
    name (a retirement's: ``new_run_words``; a reduction's: ``output_gone_words``, saying what is
    seen and the first name it never had), or None: the one rule of a retirement's restore and a reduction's,
    on every store (review R9 F4, F7). Two runs merged are drawn by TensorBoard as one series per
    tag, and nothing tells them apart again; refused, the backup is kept and the restore works once
    the new run is moved away.

    ``standing``: the names (logdir-relative) at or below the run's path now, the state and the
    vault left out (a run simply deleted: none, and the old run comes back). ``ours(name)``: True
    where the name holds what the operation took or left there with its recorded bytes (an
    original in place; a reduced file, perhaps with records a writer appended), False at one of
    its names holding something else, None at a name it never had. A retirement took the whole run
    (``took_all``): any name not holding its bytes is someone else's. A reduction left the run's
    other files where they were: the run may be a new one when none of its names holds its bytes
    and a name it never had stands there (or its reduced files were deleted and its untouched ones
    kept: the same to see, so said as seen), refused (a file changed at one of its own names is what the restore
    keeps in the vault, as ever); one that left no file of its own there (``left`` False: it only
    deleted files) cannot tell its run from another, and is not refused. Reads stop at the first
    name that decides."""
    if not took_all and not left:
        return None
    other: Optional[str] = None
    for name in standing:
        mine = ours(name)
        if took_all and not mine:
            return new_run_words(run)
        if mine and not took_all:
            return None
        if other is None and mine is None:
            other = name
    return output_gone_words(run, other) if other is not None and not took_all else None


def unretire_outcome(m: dict) -> RunOutcome:
    """An unretire's outcome until it starts, on every store: failed (``RESTORE_BLOCKED``) and named
    by the retirement it was asked to restore (``op_id``, None where the manifest names no op id),
    as an already-restored skip is (``front_base.already_restored``): what a refusal before its
    journal carries. Once its journal is written the outcome is named by the restore's own op id."""
    op = m.get("op_id")
    return RunOutcome(run=str(m.get("run")), status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED,
                      op_id=op if is_op_id(op) else None, bytes_before=0, bytes_after=0)


def retired_row(m: dict) -> dict:
    """What ``api.retired`` shows of a retirement: ``retired_at`` is when it finished (the run
    left the logdir at its commit), ``files`` the files of its tree; a store that records no tree
    digest says ``tree_sha256`` None."""
    return {"op_id": m["op_id"], "run": m["run"], "takes_along": taken_along(m),
            "bytes": m.get("bytes_before", 0), "files": len(m.get("tree") or []),
            "retired_at": m.get("finished_at"), "user": m.get("user"), "tree_sha256": m.get("tree_sha256"),
            "rule": m.get("rule")}


def retire_line(m: dict, outcome: str, reason: Optional[str] = None, *, kept: Optional[bool] = None,
                tool_version: Optional[str] = None) -> dict:
    """The history line of retirement ``m`` (its time is the caller's): ``outcome`` and ``reason``
    as it ended (a verified one's reason, when none is given, the nested runs it took along);
    ``kept`` whether its copy of the run is kept (by default: it verified; a bucket says whether
    it is kept now, as its entries read the manifest now); ``tool_version`` of the tool that made it."""
    verified = outcome == Outcome.VERIFIED
    along = taken_along(m)
    return {"op_id": m.get("op_id"), "kind": KIND, "run": m.get("run"), "policy": None,
            "before": m.get("bytes_before"), "after": m.get("bytes_after"), "verified": verified,
            "outcome": str(outcome), "reason": reason or (f"retired with {len(along)} nested run(s)" if along else None),
            "backup_kept": verified if kept is None else kept, "user": m.get("user"), "host": m.get("host"),
            "tool_version": tool_version}


def unretire_line(m: dict, restore_op: Optional[str], *, kept: bool, user: Optional[str], host: Optional[str],
                  tool_version: Optional[str] = None) -> dict:
    """The history line of the restore ``restore_op`` of retirement ``m`` (its time is the
    caller's): the run back whole, ``of_op`` the retirement; ``kept`` whether the vault still holds
    its copy (a disk drops it at the restore, a bucket keeps it until a purge). A restore that
    recorded no op id of its own (``restore_op`` no operation id) is named by the retirement's."""
    op = m.get("op_id")
    return {"op_id": restore_op if is_op_id(restore_op) else op, "kind": "restore", "run": m.get("run"),
            "policy": None, "before": 0, "after": m.get("bytes_before"), "verified": True,
            "outcome": Outcome.RESTORED, "reason": f"restored retirement {op}", "backup_kept": kept, "of_op": op,
            "user": user, "host": host, "tool_version": tool_version}


__all__ = ["KIND", "RECOVERED_REASON", "refused_names", "nested_runs", "unnamed_runs", "is_restorable_retirement", "retirements",
           "restorable_retirements", "taken_along", "takes_out", "retired_now", "unretire_refusal",
           "new_run_words", "output_gone_words", "new_run_refusal",
           "unretire_outcome", "retired_row",
           "retire_line", "unretire_line"]


#: the field of a retired run's restore's begin record naming the paths whose stored copies did
#: not hold their recorded bytes at its start: left in the vault by it and by every attempt that
#: finishes it (every store)
CHANGED_PATHS = "changed"


def left_changed(begin: Mapping[str, Any], paths: Iterable[str]) -> List[str]:
    """The paths a restore's begin record names as left in the vault (``CHANGED_PATHS``); the
    record is untrusted: only ``paths`` (the retirement's own) are taken."""
    named, known = begin.get(CHANGED_PATHS), set(paths)
    return sorted({p for p in named if isinstance(p, str) and p in known}) if isinstance(named, list) else []
