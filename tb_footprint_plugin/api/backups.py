"""What is done with the backups of committed operations: ``verify`` (re-check), ``restore``
(with the checks a restore must pass first), ``restorable``, ``purge`` and the check page's
before/after ``sample``.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence

from tb_footprint_plugin.codes import BlobError, Failure, Finding, Outcome, Skip
from tb_footprint_plugin.engine.catalogue import (find_manifest, hiding_damage, is_kept, operation_summary,
                                                  own_manifests, restorable_ops, summarize_operations)
from tb_footprint_plugin.engine.checks import recheck
from tb_footprint_plugin.engine import offload
from tb_footprint_plugin.engine.context import RunOutcome, TransactionError
from tb_footprint_plugin.engine.purge import purge_backups, PurgeReport
from tb_footprint_plugin.engine.remote_vault import last_failure
from tb_footprint_plugin.engine.upkeep import forget_released
from tb_footprint_plugin.engine.restore import restore_op
from tb_footprint_plugin.engine.retire import is_restorable_retirement, retirements, unretire
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.paths import is_within, real_within
from tb_footprint_plugin.storage.remote import is_bucket_url, is_remote
from tb_footprint_plugin.api.common import bucket_of, context_of, DEFAULT_BACKENDS
from tb_footprint_plugin.api.settle import recover_logdir, unfinished
from tb_footprint_plugin.api.records import operations
from tb_footprint_plugin.api.survey import select_among


class NotRestorable(ValueError):
    """A restore that cannot start; ``code``: ``not_found``, ``blocked`` or ``already_restored``."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def restore_target(logdir: str, *, op: Optional[str] = None, run: Optional[str] = None,
                   backup_dir: Optional[str] = None) -> dict:
    """Check that a restore of ``op`` (or of ``run``'s newest kept reduction) can start, by the
    rule ``restore`` applies (local and bucket logdirs alike); returns ``{"run", "op", "run_only"}``
    or raises ``NotRestorable``."""
    ops = operations(logdir, backup_dir=backup_dir)
    if op is not None:
        m = next((x for x in ops if x.get("op_id") == op), None)
        if m is None:
            raise NotRestorable(f"no operation {op!r} in the vault", "not_found")
        if m.get("kind") != "reduce":
            raise NotRestorable(f"operation {op} is a {m.get('kind')}, not a reduction", "blocked")
        if m.get("outcome") != Outcome.VERIFIED:
            raise NotRestorable(f"operation {op} did not change the run ({m.get('outcome')}); nothing to restore",
                                "blocked")
        if m.get("restored_by"):
            raise NotRestorable(f"operation {op} was already restored by {m['restored_by']}", "already_restored")
        if m.get("backup_purged"):
            raise NotRestorable(f"the backup of {op} was purged; nothing to restore from", "blocked")
        newer = [x for x in ops if x.get("run") == m.get("run") and is_kept(x)
                 and (x.get("started_at") or 0) > (m.get("started_at") or 0)]
        if newer:
            raise NotRestorable(f"operation {newer[0]['op_id']} on this run is newer: restore it first", "blocked")
        return {"run": m["run"], "op": op, "run_only": False}
    if run is None:
        raise NotRestorable("give the operation to restore (op) or a run (run)", "not_found")
    if not any(x.get("run") == run and is_kept(x) for x in ops):
        raise NotRestorable(f"nothing to restore for run {run!r}", "not_found")
    return {"run": run, "op": None, "run_only": True}


def verify(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
           backup_dir: Optional[str] = None,
           verify_backends: Sequence[str] = DEFAULT_BACKENDS,
           progress: Optional[Callable[[dict, int, int], None]] = None) -> List[dict]:
    """Re-check committed reductions: every backup re-hashed, and the run as it is now read by
    TensorBoard's readers against the original (from the vault). ``progress(summary, i, n)``
    is called as each check starts (``summary``: the operation's summary, with its bytes).

    On a bucket logdir every backup object is checked against the checksums the store computed for
    its original, removed keys must still be absent and replaced keys must still hold the reduced
    bytes (the store's checksum), with nothing downloaded."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = bucket_of(logdir, backup_dir)
        bk.recover(rfs, vault)
        return bk.recheck(rfs, vault, run=run, op=op)
    ctx = context_of(logdir, backup_dir, verify_backends=verify_backends)
    recover_logdir(logdir, backup_dir)
    hook = None if progress is None else (lambda m, i, n: progress(operation_summary(m), i, n))
    results = recheck(ctx, run, op, progress=hook)
    if not op:  # damage no operation's check shows: lost manifests, blobs of no operation
        for p in unfinished(logdir, backup_dir)["problems"]:
            if p["code"] in (Finding.MANIFEST_LOST, Finding.MANIFEST_DAMAGED, Finding.ORPHAN_BLOBS,
                             Finding.IDENTITY_DAMAGED):
                results.append({"op_id": p["op_id"] or "-", "run": p["run"] or "(vault)", "ok": False,
                                "backups_ok": False, "damaged_backups": [], "code": p["code"],
                                "verification": {"ok": False, "checks": [
                                    {"name": str(p["code"]), "ok": False, "detail": p["detail"]}]}})
    return results


def vault_lifecycle(logdir: Optional[str] = None, backup_dir: Optional[str] = None,
                    days: int = offload.LIFECYCLE_DAYS) -> dict:
    """The bucket lifecycle rule for a remote vault's ``data/`` objects (``engine.offload.
    lifecycle_rule``: S3, GCS or Azure JSON, the command that applies it, and what to merge
    first): the vault a local ``logdir`` offloads to, else every vault under the ``backup_dir``
    URL. Reads only. ``ValueError`` naming what is missing when there is no remote vault."""
    urls: List[str] = []
    if logdir is not None:
        if is_remote(logdir):
            raise ValueError(f"{logdir}: a bucket logdir keeps its backups as copies in its store; the lifecycle "
                             "rule is for the remote vault of a local logdir")
        url = offload.remote_url(context_of(logdir, None).vault)
        if url:
            urls = [url]
    if not urls:
        if not backup_dir or not is_bucket_url(backup_dir):
            raise ValueError((f"{logdir}: its backups are not offloaded to a bucket; " if logdir else "")
                             + "give --backup-dir s3://…, gs://… or az://… (the URL given to reduce)")
        urls = offload.vaults_under(backup_dir)
        if not urls:
            raise ValueError(f"{backup_dir}: no remote vault under it yet (a reduce with --backup-dir "
                             f"{backup_dir} makes one)")
    return offload.lifecycle_rules(urls, days)


def _name_remote_failures(m: dict, o: RunOutcome) -> RunOutcome:
    """A restore refused because backups in the remote vault could not be read: its reason names
    each object and the store's code (an archived object not yet rehydrated: ``permission_denied``),
    and its code is ``store_error`` when no backup is known damaged, only unserved."""
    if o.code != Failure.BACKUP_DAMAGED or not isinstance(m.get("vault"), str):
        return o
    seen, codes = [], set()
    for f in m.get("files", []):
        e = last_failure(m["vault"], f.get("sha256"))
        if e is not None:
            codes.add(e.code)
            if str(e) not in seen and len(seen) < 3:
                seen.append(str(e))
                o.reason = f"{o.reason}; {e} [{e.code}]"
    if codes and not codes & {BlobError.CORRUPT, BlobError.MISSING, BlobError.MISMATCH}:
        # the store would not serve the bytes (an archived object, a refused or lost connection):
        # nothing is known damaged; restore again once the store serves them
        o.code = Failure.STORE_ERROR
    return o


def restore(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
            backup_dir: Optional[str] = None) -> List[RunOutcome]:
    """Put back the exact original bytes: one operation (``op``), every operation of ``run``
    newest first, or (neither given) every restorable operation of the logdir."""

    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = bucket_of(logdir, backup_dir)
        bk.recover(rfs, vault)
        damaged: List[dict] = []  # a damaged manifest may hide a backup: named, as on disk
        todo = [m for m in bk.manifests(rfs, vault, damaged) if m.get("status") == "verified" and not m.get("purged")
                and (op is None or m.get("op") == op)
                and (run is None or m.get("run") == run or run in (m.get("takes_along") or []))]
        todo.sort(key=lambda m: m.get("kind") != "retire")  # a retired run comes back first, as on disk
        damage = [d["detail"] for d in damaged]
        if (op or run) and not todo:
            # damage that may hide its backup is a refusal programs can tell (a code), as on a disk
            raise TransactionError(f"nothing to restore for {op or run!r} in {logdir}" + "".join(f"; {w}" for w in damage),
                                   Failure.RESTORE_BLOCKED if damage else None)
        return [bk.restore_op(rfs, vault, m) for m in todo] + [
            RunOutcome(run=run or "", status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED, reason=w) for w in damage]
    ctx = context_of(logdir, backup_dir)
    recover_logdir(logdir, backup_dir)
    if op:
        m = find_manifest(ctx, op)
        if m.get("restored_by"):
            return [_already_restored(m)]
        return [unretire(ctx, m) if m.get("kind") == "retire" else _name_remote_failures(m, restore_op(ctx, m))]
    # a retired run comes back first: its reductions can only be restored once it is back
    outcomes = [unretire(ctx, m) for m in retirements(ctx) if is_restorable_retirement(m)
                and (run is None or m["run"] == run or run in m.get("takes_along", []))]
    ops = restorable_ops(ctx, run)
    if run is not None and not ops and not outcomes:
        done = [m for m in own_manifests(ctx) if m.get("run") == run and m.get("restored_by")]
        if done:
            return [_already_restored(max(done, key=lambda m: m.get("started_at", 0)))]
        hidden = hiding_damage(ctx)
        raise TransactionError(f"nothing to restore for run {run!r} (no kept backup of a verified reduction, "
                               "no retirement)" + "".join(f"; {why}" for why in hidden),
                               Failure.RESTORE_BLOCKED if hidden else None)
    for m in ops:
        outcomes.append(_name_remote_failures(m, restore_op(ctx, m)))
    if ops and any(o.status == Outcome.RESTORED for o in outcomes):
        forget_released(ctx, ctx.vault, own_manifests(ctx))  # what the restores let go, from the bucket too
    # state damage that may hide backups: named as a failed outcome, never a quiet "nothing to restore"
    for why in hiding_damage(ctx):
        outcomes.append(RunOutcome(run=run or "", status=Outcome.FAILED, code=Failure.RESTORE_BLOCKED, reason=why))
    return outcomes


def _already_restored(m: dict) -> RunOutcome:
    """A restore asked for again: its originals are back already, nothing is done (said so)."""
    return RunOutcome(run=m["run"], status=Outcome.SKIPPED, code=Skip.ALREADY_RESTORED, op_id=m["op_id"],
                      reason=f"already restored: operation {m['op_id']} was restored by {m['restored_by']}",
                      bytes_before=m.get("bytes_before", 0), bytes_after=m.get("bytes_before", 0))


def restorable(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """What ``restore`` would put back (newest first), as operation summaries; changes nothing."""
    if is_remote(logdir):
        return summarize_operations([m for m in operations(logdir, run=run, backup_dir=backup_dir) if is_kept(m)])
    return summarize_operations(restorable_ops(context_of(logdir, backup_dir), run))


def purge(logdir: str, older_than: Optional[float] = None, run: Optional[str] = None,
          yes: bool = False, backup_dir: Optional[str] = None, op: Optional[str] = None,
          runs: Optional[Sequence[str]] = None, run_glob: Optional[str] = None,
          op_ids: Optional[Sequence[str]] = None) -> PurgeReport:
    """Delete backups of verified (or restored) operations; without ``yes`` only list them.

    ``run`` / ``runs`` (exact names) and ``run_glob`` (the glob rule of every verb) select the
    runs whose backups are purged, all in one pass (blobs they share, and the originals lost for
    good, are counted once); a name or glob that matches no run the vault has operations of
    raises ``SelectionError`` naming it.

    Never deletes a byte that exists nowhere else: a backup that is damaged, grown by a late
    writer, still held open for writing, or needed by another kept or unfinished operation is
    kept and listed in ``kept`` with a code (the preview says so too); a run being changed
    right now is passed over. ``op_ids``: purge only these operations (those a preview showed
    and the user confirmed; one committed since is never purged unseen).
    """
    names = list(dict.fromkeys([*([run] if run is not None else []), *(runs or [])])) if (run is not None or runs) \
        else None
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = bucket_of(logdir, backup_dir)
        recovered = bk.recover(rfs, vault)
        chosen = _purge_selection(logdir, lambda: [m.get("run") for m in bk.manifests(rfs, vault)], names,
                                  run_glob)
        d = bk.purge(rfs, vault, older_than=older_than, op=op, yes=yes, runs=chosen,
                     op_ids=set(op_ids) if op_ids is not None else None)
        return PurgeReport(dry_run=d["dry_run"], ops=d["ops"], freed_bytes=d["freed_bytes"],
                           kept=[{"op_id": h["op_id"], "run": h["run"], "bytes": 0,
                                  "code": Skip(h["code"]) if h.get("code") else Finding.NOT_RESTORED,
                                  "detail": h["reason"]} for h in d.get("held", [])],
                           # as on a disk: journals recovery refused, manifests the purge did not act on
                           refused=[{"op_id": r.op_id, "code": r.code, "detail": r.detail}
                                    for r in recovered if r.action == "refused"] + d.get("refused", []))
    ctx = context_of(logdir, backup_dir)
    recovered = recover_logdir(logdir, backup_dir)
    chosen = _purge_selection(logdir, lambda: [m.get("run") for m in own_manifests(ctx)], names, run_glob)
    report = purge_backups(ctx, older_than=older_than, yes=yes, op=op, runs=chosen,
                           op_ids=set(op_ids) if op_ids is not None else None)
    # journals recovery refused (planted, copied, malformed) are reported with the vault's
    report.refused[:0] = [{"op_id": r.op_id, "code": r.code, "detail": r.detail}
                          for r in recovered if r.action == "refused"]
    return report


def _purge_selection(logdir: str, known: Callable[[], Sequence], names: Optional[List[str]],
                     run_glob: Optional[str]) -> Optional[List[str]]:
    """The runs a purge's selectors name, among the runs the vault has operations of (a run
    reduced to nothing, or retired, is no longer in a scan); None without a selection (a blank
    name or glob selects nothing: read as "no selector" it would purge every run's backups)."""
    if names is None and run_glob is None:
        return None
    every = sorted({r for r in known() if isinstance(r, str)})
    return select_among(logdir, every, names, run_glob, "runs with backups")


class SampleUnavailable(LookupError):
    """A sample the check page asked for cannot be shown; ``code`` says why (for programs)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def sample(logdir: str, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0,
           backup_dir: Optional[str] = None) -> tuple:
    """``(bytes, content type)`` of one image/audio sample of operation ``op_id``'s run as the
    dashboard showed it ``before`` the reduction (backed-up event files from the vault, the
    others from the run) or shows it ``after``. Only event files directly in the run directory
    (as TensorBoard reads them), inside the logdir, and vault blobs named by their sha256 are
    ever read; ``SampleUnavailable`` (code ``not_found`` / ``restored`` / ``purged`` / ``bad_request``)."""
    from tb_footprint_plugin.verify import samples

    if side not in ("before", "after") or plugin not in (samples.IMAGES, samples.AUDIO):
        raise SampleUnavailable("bad_request", "side must be before or after, plugin images or audio")
    ctx = context_of(logdir, backup_dir)
    m = find_manifest(ctx, op_id)
    run = m.get("run")
    run_dir = os.path.normpath(os.path.join(ctx.logdir, run if isinstance(run, str) else "\0"))
    if not isinstance(run, str) or not is_within(run_dir, ctx.logdir) or not os.path.isdir(run_dir):
        raise SampleUnavailable("not_found", f"the run of {op_id} is not in the logdir")
    restored = bool(m.get("restored_by"))
    if side == "after" and restored:
        raise SampleUnavailable("restored", f"{op_id} was restored: the reduced run exists no more")

    def direct_events(names) -> dict:
        out = {}
        for n in names:
            p = os.path.join(run_dir, n)
            if "tfevents" in n and os.path.isfile(p) and not os.path.islink(p) and real_within(p, ctx.logdir):
                out[os.path.relpath(p, ctx.logdir)] = p
        return out

    current = direct_events(sorted(os.listdir(run_dir)))
    backups: Dict[str, str] = {}  # backed-up event files: rel → sha256
    if side == "after" or restored:
        files = current  # after a restore the run holds the originals again
    else:
        created = {c.get("path") for c in m.get("created", [])}
        files = {rel: p for rel, p in current.items() if rel not in created}
        for f in m.get("files", []):
            rel, sha = f.get("path"), f.get("sha256")
            if not (isinstance(rel, str) and isinstance(sha, str) and len(sha) == 64
                    and all(ch in "0123456789abcdef" for ch in sha)):
                continue
            if os.path.dirname(os.path.normpath(rel)) != os.path.relpath(run_dir, ctx.logdir) or "tfevents" not in rel:
                continue
            if m.get("backup_purged"):
                raise SampleUnavailable("purged", f"the backup of {op_id} was purged: the original is gone")
            if ctx.vault.has_blob(sha):
                files[rel] = None
                backups[rel] = sha
    # the sample reader takes paths: a compressed backup is decompressed into a scratch folder
    # of the vault (swept with this process), a plain one is read where it is
    with scratch.scratch("sample", ctx.vault.tmp) as tmp:
        paths = [ctx.vault.materialise(backups[k], tmp) if k in backups else files[k] for k in sorted(files)]
        data = samples.read_sample(paths, plugin, tag, int(step), int(index))
    if data is None:
        raise SampleUnavailable("not_found", f"no {plugin} sample {index} of {tag!r} at step {step} {side}")
    return data, samples.sniff(data)

