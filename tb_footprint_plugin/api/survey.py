"""Looking before changing anything: ``plan`` (the dry run, with what the vault would free or the
requests a bucket would take), the run selection every verb applies, whether a folder is a logdir,
the shard partition of runs over workers, and what a resumed batch's ledger will skip.
"""
from __future__ import annotations

import contextlib
import os
import stat
import time
from typing import Callable, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Skip
from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.engine.vault import DEFAULT_VAULT_FORMAT
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.left_alone import unread_folders
from tb_footprint_plugin.plan.planner import DEFAULT_QUIET_PERIOD, let_go, make_plan, SelectionError
from tb_footprint_plugin.plan import select as selecting, shard as sharding
from tb_footprint_plugin.plan.policies import get_policy
from tb_footprint_plugin.scan.model import LogdirFootprint, UNATTRIBUTED
from tb_footprint_plugin.scan.discovery import walk_runs
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.storage.paths import is_within, safe_rel, state_dirs_in, UnsafePath
from tb_footprint_plugin.storage.remote import is_remote
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.api.common import logdir_keys, partition_name, split_backup_dir
from tb_footprint_plugin.api.records import history


def plan(logdir: str, policy="archive", *, backup_dir: Optional[str] = None,
         runs: Optional[List[str]] = None, run_glob: Optional[str] = None, min_size: int = 0,
         older_than: Optional[float] = None, quiet_period: float = DEFAULT_QUIET_PERIOD,
         footprint: Optional[LogdirFootprint] = None,
         closed_files: Optional[Mapping[str, float]] = None, vault_format: str = DEFAULT_VAULT_FORMAT,
         engine=None, include_others_runs: bool = False) -> Plan:
    """The dry run: what ``policy`` would do. Writes nothing but its cache of selection outcomes
    (``scan.selcache``, beside the scan cache; the scan cache itself is not written).

    ``closed_files`` (logdir-relative path -> mtime when found closed) are files the caller's
    own job wrote and closed: the quiet period skips them while unchanged, and only them.
    A run with an unfinished operation, or with a file some process on this machine holds open
    for writing, is left alone (``code``; ``writers`` names the processes).

    On a bucket logdir the plan also carries ``cost``: the requests its scan issued and the
    requests and bytes a reduction and a restore would take. ``vault_format``: the vault its note
    counts with (what is freed now and after purge; see ``reduce_logdir``). ``disk_in_use_bytes``:
    a local logdir and its vault(s) on disk now, as ``du`` counts them (from the scan's own walk);
    a bucket's, what it and its vault store now (from the scan's listing), as its reduce's report
    counts it. A run another user owns is left alone (``Skip.OTHERS_RUN``) unless
    ``include_others_runs`` (``plan.owners``)."""
    # the plan's notes are the engine's to say (``engine``: the reduce's own, whose requests it counts)
    eng = engine or open_engine(logdir, backup_dir, lazy=True)
    fp = footprint or scan(logdir, backup_dir=split_backup_dir(logdir, backup_dir)[0], write_cache=False)
    runs = select_runs(fp, runs, run_glob)
    traces = eng.plan_measures()
    # what the open-writer check needs of each planned run: its files' relative paths (strings
    # the scan holds anyway); the rest of a scan only this plan reads is let go run by run
    held: Dict[str, Tuple[str, ...]] = {}

    def planned(r, rp) -> None:
        if rp.actions and not rp.skipped:
            held[r.name] = tuple(f.path for f in r.files if f.kind != "symlink")
        let_go(r)

    own = footprint is None and eng.lets_go_while_planning
    p = make_plan(fp, policy, runs=runs, min_size=min_size,
                  older_than=older_than, quiet_period=quiet_period, closed_files=closed_files,
                  rewrite=traces, trace_after=traces.trace_after, on_planned=planned if own else None,
                  include_others_runs=include_others_runs)
    warning = traces.save(r.name for r in fp.runs)
    if warning:
        p.notes.append(warning)
    eng.note_plan(p, fp, measures=traces, vault_format=vault_format, held=held if own else None)
    # the reduce's, status's and the tab's one count (``engine.usage``); a logdir the verbs
    # refuse (said by them) is still planned, without the figure
    with contextlib.suppress(OSError, ValueError):
        p.disk_in_use_bytes = _in_use_now(eng, fp, own=footprint is None)
    return p


#: a caller's footprint whose walk began longer ago than this is not taken for "now": the logdir
#: is walked again (a tab's scan may be minutes old; a reduce's dry run hands its own, just made)
FRESH_WALK_S = 60.0


def _in_use_now(eng, fp: LogdirFootprint, own: bool) -> int:
    """The logdir and its vaults now (``Engine.in_use_after_scan``: a disk's as ``du`` counts
    them, a bucket's as stored, the reduce report's ``stored``), from the walk or listings the
    scan made, with no walk or listing more, when the footprint is this plan's own (``own``) or
    began less than ``FRESH_WALK_S`` ago; a caller's older one is walked or listed again."""
    began = fp.disk.started if fp.disk is not None else fp.scanned_at
    return eng.in_use_after_scan(fp, fresh=own or time.time() - began <= FRESH_WALK_S)


def select_runs(fp: LogdirFootprint, runs: Optional[Sequence[str]] = None,
                run_glob: Optional[str] = None) -> Optional[List[str]]:
    """The runs of ``fp`` a selection names (``runs``: exact names, ``run_glob``: a glob, matched
    by ``plan.select``, the one rule of every verb), or None when there is no selection; a name
    or glob that matches no run raises ``SelectionError`` naming it (a typo must not look like
    "nothing to do"). A folder the scan could not enter is a name too: the plan says why it is
    left alone (``plan.left_alone.leave_unread_alone``)."""
    if runs is None and run_glob is None:  # a blank glob is a selection of nothing, never of all
        return None
    return select_among(fp.logdir, [r.name for r in fp.runs if r.name != UNATTRIBUTED] + unread_folders(fp),
                        runs, run_glob)


def select_among(where: str, names: Sequence[str], runs: Optional[Sequence[str]], run_glob: Optional[str],
                 label: str = "runs") -> List[str]:
    """The ``names`` a selection takes (``plan.select``'s rule: a blank name or glob matches
    nothing); ``SelectionError`` naming each name or glob that matches none, with the ``label``ed
    names there are (``where``: the logdir, for the message)."""
    chosen, missing = selecting.select(names, runs, run_glob)
    if missing:
        shown = ", ".join(names[:8]) + (" …" if len(names) > 8 else "")
        raise SelectionError(f"no run of {where} matches {', '.join(repr(m) for m in missing)}"
                             + "".join(selecting.missing_hint(m, names) for m in missing)
                             + f" ({label}: {shown or 'none'})")
    return chosen


def selection_by_logdir(logdirs: Sequence[str], runs: Optional[List[str]], run_glob: Optional[str],
                        backup_dir: Optional[str] = None) -> Dict[str, dict]:
    """A ``runs`` / ``run_glob`` selection over several logdirs: each name and the glob must match
    a run of one of them (else ``SelectionError`` naming what matched nowhere, before anything
    runs); each logdir gets the part of the selection that names its own runs."""
    names = {ld: [r.name for r in scan(ld, backup_dir=backup_dir, write_cache=False).runs if r.name != UNATTRIBUTED]
             for ld in logdirs}
    every = [n for v in names.values() for n in v]
    missing = [n for n in runs or [] if n not in every]
    if run_glob is not None and (not run_glob.strip() or not any(selecting.matches(n, run_glob) for n in every)):
        missing.append(run_glob)
    if missing:
        raise SelectionError(f"no run of {', '.join(logdirs)} matches {', '.join(repr(m) for m in missing)}"
                             + "".join(selecting.missing_hint(m, every) for m in missing))
    out = {}
    for ld, v in names.items():
        here = None if runs is None else [n for n in runs if n in v]
        if run_glob and not any(selecting.matches(n, run_glob) for n in v):
            out[ld] = {"runs": [], "run_glob": None}  # nothing of this logdir is selected
        else:
            out[ld] = {"runs": here, "run_glob": run_glob}
    return out


class NotALogdir(ValueError):
    """A folder with no TensorBoard data and no state of ours: nothing to scan, plan or reduce."""


def check_logdir(logdir: str, backup_dir: Optional[str] = None,
                 footprint: Optional[LogdirFootprint] = None) -> None:
    """Raise ``NotALogdir`` (naming the folder) unless ``logdir`` holds TensorBoard data (an event
    file, a profile session, a PyTorch trace: a run as the scan counts them) or a state folder
    (a logdir whose every run was retired is still one). Reads only; writes nothing.
    ``footprint``: the caller's scan of it, so the folder is not walked twice."""
    if is_remote(logdir):
        # a prefix nothing is stored under (a mistyped logdir) is refused as a missing folder is, not
        # read as an empty logdir (review R21 PD22): the caller's scan listed it, else one look
        if footprint is not None and footprint.listed_bytes is not None:
            empty = footprint.listed_bytes == 0 and not any(r.name != UNATTRIBUTED for r in footprint.runs)
        else:
            empty = not ObjectStore(logdir).holds_anything()
        if empty:
            raise NotALogdir(f"logdir {logdir}: nothing is stored under this prefix (give the URL you pass to "
                             "`tensorboard --logdir`)")
        return
    if not os.path.isdir(logdir):
        raise NotALogdir(f"logdir {logdir} is not a directory")
    base = os.path.abspath(logdir)
    if state_dirs_in(base):
        return
    if footprint is not None:  # the caller's scan already walked it
        names = [r.name for r in footprint.runs] + unread_folders(footprint)
    else:
        exclude = [os.path.abspath(backup_dir)] if backup_dir and is_within(backup_dir, base) else []
        unreadable: List[dict] = []
        names = [r.name for r in walk_runs(base, [], exclude, unreadable=unreadable)]
        # a folder it cannot enter may hold runs: the plan says so (review R16 F10), not "no logdir"
        names += [u["path"] for u in unreadable if u.get("run") is None]
    if any(name != UNATTRIBUTED for name in names):
        return
    raise NotALogdir(f"{logdir} is not a TensorBoard logdir: no event file, profile session or PyTorch trace "
                     "in it (give the folder you pass to `tensorboard --logdir`)")


def shard_sizes(logdirs: Sequence[str], backup_dir: Optional[str] = None) -> Dict[str, int]:
    """The partition's input over ``logdirs`` sharded together: ``plan.shard.key(logdir, run)`` ->
    the run's original bytes (its size before any reduction the change log records), a run a
    standing reduction left with nothing the scan counts included (on a disk while its folder
    stays; ``plan.shard.Sizes``: its ``absent``, which no shard plans)."""
    return scan_shard_sizes(logdirs, backup_dir, {}, write_cache=False)


def scan_shard_sizes(logdirs: Sequence[str], backup_dir: Optional[str], scans: Dict[str, LogdirFootprint],
                     write_cache: bool) -> Dict[str, int]:
    """``shard_sizes`` from scans the caller may have made already (``scans``: logdir -> its
    footprint, filled in with the scans made here)."""
    out = sharding.Sizes()
    for ld in logdir_keys(logdirs):
        fp = scans[ld] if ld in scans else scan(ld, backup_dir=backup_dir, write_cache=write_cache)
        scans[ld] = fp
        cur = {r.name: r.total_bytes for r in fp.runs if r.name != UNATTRIBUTED}
        # a run another worker is reducing right now may have been scanned half-swapped: its
        # journal says the size it had. Read before the change log, which a finished operation
        # writes before it drops its journal, so one of the two always has it; given after it,
        # as what happens now (its size is a first reduction's only where the log has none)
        flying = _in_flight(ld)
        for run, b in sharding.original_sizes(cur, _partition_history(ld, backup_dir, write_cache) + flying,
                                              still_there=_still_there(ld), listed_at=fp.scanned_at).items():
            k = sharding.key(partition_name(ld), run)
            out[k] = b
            if run not in cur:
                out.absent.add(k)  # weighs in the partition; no shard plans it (nothing left to reduce)
    return out


def _partition_history(logdir: str, backup_dir: Optional[str], write: bool) -> List[dict]:
    """The change log's entries the partition weighs runs by (``plan.shard.original_sizes``): a
    disk's change log (``history``); a bucket's, from its vault's summary of the manifests and only
    the manifests it does not hold (``Engine.partition_history``: not a read per manifest, #28),
    the summary written again only when ``write`` (never by a dry run or a plan: review R9 F1)."""
    if is_remote(logdir):
        return open_engine(logdir, backup_dir, lazy=True).partition_history(write=write)
    return history(logdir, backup_dir)


def _still_there(logdir: str) -> Callable[[str], bool]:
    """Whether a run the scan did not find, which a standing reduction emptied, still weighs in
    the partition. On a disk, while its folder is there (an ``lstat`` a folder on the way, no
    link followed; names from the change log are untrusted: one leading out of the logdir is
    none): a run its owner removed is gone for every worker. A bucket keeps no folder without
    objects, so the change log alone says: a run emptied there weighs until a restore gives it
    back, also once its owner removed what it had left (every worker reads the same log, so the
    partition still agrees; only the shards' balance counts bytes that went)."""
    if is_remote(logdir):
        return lambda run: True

    def there(run: str) -> bool:
        try:
            parts = [p for p in safe_rel(run).split("/") if p not in ("", ".")]
            # each folder on the way looked at: a link is never passed through
            return all(stat.S_ISDIR(os.lstat(os.path.join(logdir, *parts[:i + 1])).st_mode)
                       for i in range(len(parts)))
        except (UnsafePath, OSError, ValueError):
            return False

    return there


def _in_flight(logdir: str) -> List[dict]:
    """Reductions under way, as change-log entries of their planned sizes (``Engine.in_flight``)."""
    return open_engine(logdir, lazy=True).in_flight()


def shard_plan(logdirs: Sequence[str], shard: Tuple[int, int], backup_dir: Optional[str] = None,
               sizes: Optional[Mapping[str, int]] = None) -> Dict[str, List[str]]:
    """Which runs of each logdir shard ``shard`` = (index, count) takes: logdir -> runs. Every
    worker computes the same partition from its own scan (``plan.shard`` says how and its bound)."""
    sizes = shard_sizes(logdirs, backup_dir) if sizes is None else sizes
    out: Dict[str, List[str]] = {ld: [] for ld in logdir_keys(logdirs)}
    names = {partition_name(ld): ld for ld in out}
    absent = getattr(sizes, "absent", ())  # runs a reduction emptied: they weigh, nothing to plan
    for k in sharding.select(sizes, shard):
        name, run = k.split("\0", 1)
        if name in names and k not in absent:
            out[names[name]].append(run)
    return out


def ledger_skips(p: Plan, policy="archive", *, backup_dir: Optional[str] = None, ledger: Optional[str] = "default",
                 shard: Optional[Tuple[int, int]] = None) -> List[str]:
    """Mark in ``p`` each planned run the batch ledger already settled, as a resumed reduce will
    skip it (``Skip.LEDGER_DONE``, by the ledger's own ``should_run``), and return their names.
    Reads only: a question asked before a resumed reduce names and counts exactly the runs it
    will touch. A run with an interrupted attempt of its own stays in (the reduce settles it, and
    records it in the ledger, before it decides); a ledger of another policy holds nothing (the
    reduce sets it aside); on a bucket, the shard's ledger folder (entries of its one policy)."""
    if not ledger:
        return []
    found = open_engine(p.logdir, backup_dir).resumable_ledger(ledger, shard)
    if found is None:
        return []
    path, data, base = found  # untrusted: refused entries are simply not used
    name = get_policy(policy).name
    if data.get("policy") != name and data["runs"]:
        return []
    book = Ledger(path, name, base)
    skipped = []
    for rp in p.runs:
        if not rp.actions or rp.skipped:
            continue  # nothing planned, or left alone already (an unfinished attempt: redone)
        e = data["runs"].get(rp.run)
        if not book.should_run(e, rp.bytes_before):
            rp.skipped, rp.code = f"already {e['state']} in the ledger {path}", Skip.LEDGER_DONE
            skipped.append(rp.run)
    return skipped



def plan_digest(rp) -> str:
    """What a user confirms of one run's plan, as a digest: the run's size and every action
    (kind, path, the file's size, its new name). The same plan made again digests the same; a
    file added, removed, grown or shrunk since changes it (``confirmed_digests``,
    ``hold_to_confirmed``). Not the sizes after: a plan may estimate them where the reduce's
    own plan measures (a tab's plan of a run the rewrite cache has not seen)."""
    import hashlib
    import json

    what = [rp.run, rp.bytes_before,
            sorted((a.kind, a.path, a.bytes_before, a.new_path or "") for a in rp.actions)]
    return hashlib.sha256(json.dumps(what, default=str).encode("utf-8", "surrogateescape")).hexdigest()


def confirmed_digests(plans) -> List[str]:
    """The ``plan_digest`` of every run a plan (or several: a batch's, one per logdir; the digest
    names its run) would change, or that only its ledger leaves (a resumed batch: the reduce
    skips it as the question did): what a front end hands back as ``reduce_logdir(confirmed=)``
    once the user said yes. A run with an interrupted attempt of its own (``Skip.UNFINISHED``:
    the question says it is rolled back first, then reduced again, so planned afresh) is
    confirmed by name, ``redo:<run>``: its plan before the rollback is not the one it will have."""
    plans = [plans] if isinstance(plans, Plan) else plans
    return sorted({("redo:" + rp.run) if rp.code == Skip.UNFINISHED else plan_digest(rp)
                   for p in plans for rp in p.runs
                   if rp.actions and (not rp.skipped or rp.code in (Skip.LEDGER_DONE, Skip.UNFINISHED))})


def hold_to_confirmed(p: Plan, confirmed: Collection[str]) -> List[str]:
    """The one rule of "the reduce does what the user confirmed" (the CLI's question, the tab's
    per-run dialog): each run ``p`` would change whose plan is not one confirmed (its
    ``plan_digest`` is not in ``confirmed``: the run changed since, or was not shown) is left
    alone with ``Skip.PLAN_CHANGED`` and a message to plan again; the others go on. Per run, not
    the whole batch. Returns the names left alone."""
    confirmed = set(confirmed)
    changed = []
    for rp in p.runs:
        if not rp.actions or rp.skipped or plan_digest(rp) in confirmed or "redo:" + rp.run in confirmed:
            continue
        rp.skipped = ("its plan is not the one you confirmed (files appeared, changed or went since, or it "
                      "was not shown); nothing done: plan again (`tb-footprint plan`, the tab) and confirm the "
                      "new one")
        rp.code = Skip.PLAN_CHANGED
        changed.append(rp.run)
    return changed
