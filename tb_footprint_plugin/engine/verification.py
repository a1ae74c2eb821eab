"""What a run's reduce checks, and the new file it stages: shared by the reduce on a disk
(``transaction.LocalReduce``) and, for ``stage_file`` and ``stage_line``, by a bucket's
(``bucket_rewrite.ObjectReduce``).

- ``stage_file``: the new file of a compress or a rewrite, produced and checked; ``stage_line``
  the verification line it gets;
- ``verify_run``: TensorBoard's readers over the run's original and reduced views (``checks.compare_views``),
  handed what the rewrite learnt of a big run's original (``original_of``, ``handed_over``);
  a cancel (Ctrl-C, the tab's Cancel, the run's timeout) is looked at inside it (``stop_of``);
  ``verify_unchanged``: a run whose event files the reduce leaves alone, proven by their sha256;
  both end with the same file lines (``file_checks``, ``profile_route_lines``);
- ``verification_summary``: what an outcome keeps of the verification record; ``scratch_space``
  and ``changed_since_backup``: the verification's disk space, and a file written since its backup.
"""
from __future__ import annotations

import errno
import os
import shutil
import time
from typing import Callable, Dict, List, Optional

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine.checks import compare_views
from tb_footprint_plugin.engine.context import Cancelled, CancelToken, Context, NoSpace, TransactionError
from tb_footprint_plugin.engine.putback import holds_original
from tb_footprint_plugin.plan.model import RunPlan
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.files import sha256_file


#: what an outcome keeps of a committed run's verification (the manifest keeps all of it)
SUMMARY_KEYS = ("ok", "checks", "failed", "backends", "mode", "unchanged", "expectations", "record_substitutes",
                "duration_s")


def verification_summary(verification: dict) -> dict:
    """The part of a verification record an outcome shows: verdict, check lines, contract."""
    return {k: verification[k] for k in SUMMARY_KEYS if k in verification}


#: what the verification's scratch views and readers write at least (symlinks, the Python
#: reader's answer): below it a full disk would read as a failed verification
VERIFY_SCRATCH_BYTES = 1 << 20


def scratch_space(ctx: Context, op_id: str) -> None:
    """``NoSpace`` naming the verification's scratch folder when the vault's filesystem has less
    than ``VERIFY_SCRATCH_BYTES`` free: said as a full disk, not as a difference the readers saw."""
    try:
        free = shutil.disk_usage(ctx.vault.tmp).free
    except OSError:
        return  # the verification names what it cannot do
    if free < VERIFY_SCRATCH_BYTES:
        raise NoSpace(os.path.join(ctx.vault.tmp, op_id), VERIFY_SCRATCH_BYTES - free,
                      OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))


def changed_since_backup(ctx: Context, path: str, rec: dict) -> bool:
    """Whether the file at ``path`` is no longer the size and mtime its backup record says
    (gone counts as changed): a writer appended to it or a user edited it."""
    try:
        st = os.lstat(ctx.abs(path))
    except FileNotFoundError:
        return True
    return st.st_size != rec["size"] or st.st_mtime != rec["mtime"]


def stage_file(action, src: str, tmp: str, sha: str, original=None) -> dict:
    """Produce the new file of a compress or rewrite ``action`` at ``tmp`` from ``src`` (whose
    sha256 as backed up is ``sha``) and check it; the engines on disk and on buckets share it.

    Returns at least ``size`` and ``sha256`` of ``tmp`` (a rewrite adds its removal counts and
    expectations). Raises when the file cannot be produced safely (a compress whose source no
    longer hashes to ``sha`` with ``Failure.CHANGED_SINCE_BACKUP``). ``original``: what a big run's
    rewrite hands to its verification (``verify.original.OriginalRun``)."""
    if action.kind == "compress":
        from tb_footprint_plugin.transforms.gzip_trace import gunzip_sha256, gzip_file

        got = gzip_file(src, tmp)
        if got != sha:
            raise TransactionError(f"{action.path}: changed while compressing", Failure.CHANGED_SINCE_BACKUP)
        if gunzip_sha256(tmp) != sha:
            raise TransactionError(f"{action.path}: compressed copy does not decompress to the original")
        return {"size": os.lstat(tmp).st_size, "sha256": sha256_file(tmp), "content_sha256": sha}
    if action.kind == "rewrite":
        from tb_footprint_plugin.transforms import stage_rewrite

        return stage_rewrite(action, src, tmp, sha, original)
    raise TransactionError(f"unknown action {action.kind}")


def original_of(ctx: Context, rp: RunPlan):
    """For a big run whose event files are rewritten: the one Rust load of its original for
    this reduce, started before the backup (in its own process: it loads while the backup and
    the rewrite's selection pass run), and what that pass learns of the original, both handed
    to the verification (``verify.original``)."""
    from tb_footprint_plugin.transforms import transform_of
    from tb_footprint_plugin.verify import dashboard
    from tb_footprint_plugin.verify.original import OriginalRun

    if "rust" not in ctx.verify_backends:
        return None
    if not any(a.kind == "rewrite" and transform_of(a) == "event_rewrite" for a in rp.actions):
        return None
    run_dir = ctx.abs(rp.run)
    if dashboard.event_bytes(run_dir) <= dashboard.FULL_READ_BYTES:
        return None  # small runs are read in full by both backends: nothing to share
    scratch.use_root(ctx.vault.tmp)
    return OriginalRun(run_dir).start_reader()


# ---------------------------------------------------------------------------------------
# verification
# ---------------------------------------------------------------------------------------
def stop_of(cancel: CancelToken) -> Callable[[], bool]:
    """The verification's ``should_stop`` (``verify.stop``): whether ``cancel.check()`` would
    raise now (the batch cancelled, or the run's timeout passed). Asked often, from the
    verification's threads: it reads an event and the clock."""

    def should_stop() -> bool:
        try:
            cancel.check()
        except Cancelled:
            return True
        return False

    return should_stop


def verify_run(ctx: Context, rp: RunPlan, op_id: str, backups: Dict[str, dict], staged: List[dict],
               handover=None, should_stop: Optional[Callable[[], bool]] = None) -> dict:
    """Reader-level check of the run's event files, original vs reduced, plus file checks.
    ``handover``: what the rewrite learnt of the original (``verify.original.OriginalRun``),
    used only for the files whose sha256 it read is the backup's (or, kept whole, unchanged).
    ``should_stop`` (``stop_of``): once it says yes the readers end within a moment and
    ``verify.Stopped`` is raised instead of a verdict."""
    run_dir = ctx.abs(rp.run)
    replaced = {s["final"]: s for s in staged}
    pairs = {}
    for name in os.listdir(run_dir):
        p = os.path.join(run_dir, name)
        rel = os.path.relpath(p, ctx.logdir)
        if not cat.is_event_file_name(name) or not os.path.isfile(p) or os.path.islink(p):
            continue
        original = ctx.vault.blob_path(backups[rel]["sha256"]) if rel in backups else p
        if rel in replaced:
            pairs[name] = (original, ctx.abs(replaced[rel]["tmp"]))
        else:
            pairs[name] = (original, None if rel in backups else p)
    modes: Dict[str, str] = {}
    for s in staged:
        modes.update(s.get("expectations") or {})
    scratch.use_root(ctx.vault.tmp)  # the readers' scratch space: swept at the next start
    # records a rewrite re-encoded on purpose, each standing for one original record
    substitutes = {r["sha256"]: [r["original_sha256"], r["original_size"]]
                   for s in staged for r in (s.get("substituted") or ())}
    # a folder of its own inside the operation's: ``compare_views`` removes it whole, and the
    # operation's folder holds its pins until the commit
    d = compare_views(os.path.join(ctx.vault.tmp, op_id, "views"), pairs, modes, ctx.verify_backends, substitutes,
                      label=rp.run, handover=handed_over(ctx, run_dir, handover, backups, pairs),
                      should_stop=should_stop)
    # kept so `verify` can re-check the run later under the same contract
    d["expectations"] = modes
    if substitutes:
        d["record_substitutes"] = substitutes
    checks = list(d.get("checks", []))
    failed = list(d.get("failed", []))
    file_checks(checks, rp, backups, staged)
    d["checks"], d["failed"] = checks, failed
    d["ok"] = bool(d.get("ok")) and not failed
    return d


def event_file_paths(ctx: Context, run: str) -> List[str]:
    """The event files TensorBoard reads for ``run`` (directly in its folder, regular files, not
    links), logdir-relative, by name."""
    run_dir = ctx.abs(run)
    out = []
    for name in sorted(os.listdir(run_dir)):
        p = os.path.join(run_dir, name)
        if cat.is_event_file_name(name) and os.path.isfile(p) and not os.path.islink(p):
            out.append(os.path.relpath(p, ctx.logdir))
    return out


def unchanged_event_files(ctx: Context, rp: RunPlan) -> Optional[List[dict]]:
    """``[{path, sha256, size}]`` of the run's event files when the plan touches none of them and
    changes only profile data (removed, compressed or slimmed; emptied folders removed): then
    TensorBoard's readers would read the very same bytes before and after, and identity is the
    proof. None when any event file is replaced or removed, or anything else changes: those runs
    are verified by both readers and the dashboards' routes."""
    for a in rp.actions:
        if a.kind != "remove_dir" and a.category not in cat.PROFILE_CATEGORIES:
            return None
    events = event_file_paths(ctx, rp.run)
    touched = {a.path for a in rp.actions} | {a.new_path for a in rp.actions if a.new_path}
    run_prefix = "" if rp.run in (".", "") else rp.run.rstrip("/") + "/"
    for path in touched:
        rel = path[len(run_prefix):] if path.startswith(run_prefix) else None
        if path in events or (rel is not None and "/" not in rel and cat.is_event_file_name(rel)):
            return None
    out = []
    for rel in events:
        p = ctx.abs(rel)
        out.append({"path": rel, "sha256": sha256_file(p), "size": os.lstat(p).st_size})
    return out


def changed_files(ctx: Context, files: List[dict]) -> List[str]:
    """The ones of ``files`` (``{path, sha256, size}``) whose bytes are no longer those."""
    return [f["path"] for f in files if not holds_original(ctx.store, ctx.key(f["path"]), f)]


def verify_unchanged(ctx: Context, rp: RunPlan, backups: Dict[str, dict], staged: List[dict],
                      unchanged: List[dict]) -> dict:
    """The verification of a run whose event files the reduce leaves alone: each is proven
    unchanged by its sha256 (hashed under the run's lock before the backup, again now; once more
    after the swap), the run stays a run for TensorBoard (its event files all remain), and the
    profile dashboards' routes are the one difference the contract allows. No reader is started:
    reading a file against itself proves nothing more (docs/FAILSAFE.md, verification)."""
    t0 = time.monotonic()
    changed = changed_files(ctx, unchanged)
    checks: List[dict] = []
    if changed:
        checks.append({"name": "event files", "ok": False,
                       "detail": f"{changed[0]}: changed since it was hashed before the backup"
                                 + (f" (+{len(changed) - 1} more)" if len(changed) > 1 else "")})
    elif unchanged:
        names = ", ".join(os.path.basename(f["path"]) for f in unchanged[:3]) + (
            f" (+{len(unchanged) - 3} more)" if len(unchanged) > 3 else "")
        checks.append({"name": "event files", "ok": True,
                       "detail": f"{len(unchanged)} event file(s) unchanged (sha256), neither rewritten nor "
                                 f"removed: TensorBoard's readers read the same bytes ({names})"})
        checks.append({"name": "run present", "ok": True,
                       "detail": "run present: yes, its event files all stay"})
    else:
        checks.append({"name": "run present", "ok": True,
                       "detail": "run present: profile data only, no event file before or after (the plan "
                                 "says what stays of it)"})
    file_checks(checks, rp, backups, staged)
    failed = [c["detail"] for c in checks if not c["ok"]]
    return {"ok": not failed, "checks": checks, "failed": failed, "backends": [], "mode": "unchanged",
            "unchanged": [{"path": f["path"], "sha256": f["sha256"]} for f in unchanged],
            "duration_s": round(time.monotonic() - t0, 3)}


def file_checks(checks: List[dict], rp: RunPlan, backups: Dict[str, dict], staged: List[dict]) -> None:
    """The verification lines of the files a transform produced, the files removed, the profile
    routes left uncompared and the plan's fidelity lines (every verified run has them)."""
    comp = [s for s in staged if "content_sha256" in s]
    if comp:
        checks.append({"name": "torch traces", "ok": True,
                       "detail": f"{len(comp)} compressed, decompressed content identical (sha256)"})
    notes = []
    for s in staged:
        checks.append({"name": s.get("transform", "rewrite"), "ok": True, "detail": stage_line(s)})
        notes += [n for n in s.get("notes") or () if n not in notes]  # run-level: once per run
    checks += [{"name": "rewrite", "ok": True, "detail": n} for n in notes]
    checks.extend(profile_route_lines(rp))
    dels = [p for p, r in backups.items() if r["action"] == "delete"]
    if dels:
        checks.append({"name": "removed files", "ok": True,
                       "detail": f"{len(dels)} file(s) backed up (sha256 verified) and removed"})
    for line in rp.fidelity:
        checks.append({"name": "plan", "ok": True, "detail": line})


def handed_over(ctx: Context, run_dir: str, original, backups: Dict[str, dict], pairs: dict):
    """``original`` if every original event file it describes is provably the one verified:
    a backed-up file by the backup's sha256, a file kept whole by being unchanged."""
    from tb_footprint_plugin.verify.original import stat_sig

    if original is None or not original.files or set(original.files) != set(pairs):
        return None
    for name, facts in original.files.items():
        rel = os.path.relpath(os.path.join(run_dir, name), ctx.logdir)
        if rel in backups:
            if backups[rel]["sha256"] != facts.sha256:
                return None
        elif stat_sig(os.path.join(run_dir, name)) != facts.stat:
            return None
    return original


def profile_route_lines(rp: RunPlan) -> List[dict]:
    """The Profile and PyTorch-profiler dashboards read files the policy removes, not event
    data: their routes are the one difference the route comparison allows. Say so."""
    from tb_footprint_plugin.verify.dashboard import profile_removed_check

    removed: Dict[str, int] = {}
    for a in rp.actions:
        if a.kind == "delete" and a.category in cat.PROFILE_CATEGORIES:
            what = "PyTorch traces" if a.category == cat.TORCH_TRACE else "profile files"
            removed[what] = removed.get(what, 0) + 1
    return [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in profile_removed_check(removed)]


def stage_line(s: dict) -> str:
    """One verification line for a file a transform produced (``s``: what ``stage_file``
    returned, with the file's ``final`` path)."""
    name = os.path.basename(s["final"])
    if "trace_check" in s:
        return f"{name}: {s['trace_check']}"
    if "records_before" in s:
        removed = ", ".join(f"{k} {v['records']}" for k, v in (s.get("removed") or {}).items()) or "nothing"
        subs = s.get("substituted") or []
        if not subs:
            return (f"{name}: rewritten, {s['records_before']} → {s['records_after']} records, each kept "
                    f"record byte-identical; removed {removed}")
        kinds = sorted({r["kind"] for r in subs})
        return (f"{name}: rewritten, {s['records_before']} → {s['records_after']} records, each kept "
                f"record byte-identical except {len(subs)} re-encoded ({', '.join(kinds)}: same step, wall "
                f"time and values); removed {removed}")
    return f"{name}: compressed, decompressed content identical (sha256)"


__all__ = ["SUMMARY_KEYS", "VERIFY_SCRATCH_BYTES", "changed_files", "changed_since_backup", "event_file_paths",
           "file_checks", "handed_over", "original_of", "profile_route_lines", "scratch_space", "stage_file",
           "stage_line", "stop_of", "unchanged_event_files", "verification_summary", "verify_run", "verify_unchanged"]
