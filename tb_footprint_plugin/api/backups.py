"""What is done with the backups of committed operations: ``verify`` (re-check), ``restore``
(with the checks a restore must pass first), ``restorable``, ``purge`` (and ``forget_missing``, the
end of a missing manifest's line) and the check page's before/after ``sample``.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine.catalogue import is_kept
from tb_footprint_plugin.engine import offload
from tb_footprint_plugin.engine.context import CancelToken, RunOutcome, TransactionError
from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.local_sample import SampleUnavailable
from tb_footprint_plugin.engine.purge import PurgeReport
from tb_footprint_plugin.storage.remote import is_bucket_url
from tb_footprint_plugin.api.common import DEFAULT_BACKENDS
from tb_footprint_plugin.api.records import operations
from tb_footprint_plugin.api.survey import select_among
from tb_footprint_plugin.plan.select import select


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
           progress: Optional[Callable[[dict, int, int], None]] = None,
           cancel: Optional[CancelToken] = None) -> List[dict]:
    """Re-check committed reductions: every backup re-hashed, and the run as it is now read by
    TensorBoard's readers against the original (from the vault). ``progress(summary, i, n)``
    is called as each check starts (``summary``: the operation's summary, with its bytes).
    ``cancel`` (Ctrl-C, the tab's Cancel): looked at between runs, among a run's backups and
    inside its verification (the readers stop within a moment); the run under way and those after
    it are results with ``ok`` and ``checked`` False and code ``interrupted`` (what was found
    already, damaged backups, kept), never "ok" for a run not checked. Changes nothing.

    On a bucket logdir every backup object is checked against the checksums the store computed for
    its original, removed keys must still be absent and replaced keys must still hold the reduced
    bytes (the store's checksum), with nothing downloaded."""
    results = open_engine(logdir, backup_dir, verify_backends=verify_backends).recheck(run, op, progress, cancel)
    for r in results:  # every row says whether it was checked, not only the unchecked ones
        r.setdefault("checked", True)
    return results


def vault_lifecycle(logdir: Optional[str] = None, backup_dir: Optional[str] = None,
                    days: int = offload.LIFECYCLE_DAYS) -> dict:
    """The bucket lifecycle rule for a remote vault's ``data/`` objects (``engine.offload.
    lifecycle_rule``: S3, GCS or Azure JSON, the command that applies it, and what to merge
    first): the vault a local ``logdir`` offloads to, else every vault under the ``backup_dir``
    URL. Reads only. ``ValueError`` naming what is missing when there is no remote vault."""
    urls: List[str] = []
    if logdir is not None:
        url = open_engine(logdir).offload_url()
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


def restore(logdir: str, run: Optional[str] = None, op: Optional[str] = None,
            backup_dir: Optional[str] = None,
            on_outcome: Optional[Callable[[RunOutcome], None]] = None,
            cancel: Optional[CancelToken] = None,
            progress: Optional[Callable[[str, str, float], None]] = None) -> List[RunOutcome]:
    """Put back the exact original bytes: one operation (``op``), every operation of ``run``
    newest first, or (neither given) every restorable operation of the logdir. Settles what is
    unfinished first (``Engine.restore``). ``on_outcome`` gets each run's outcome as it lands.
    ``cancel`` (Ctrl-C, the tab's Cancel): honoured up to a run's first put-back, never after (a
    restore is finished, not undone): the run under way is left as it was (code
    ``interrupted``), the runs after it are not started (``cancelled``). ``progress(run, step,
    fraction)``: ``check`` while a run's backups are checked (a cancel is still honoured),
    ``restore`` once its first original goes back (from then on it is not)."""
    return open_engine(logdir, backup_dir).restore(run, op, on_outcome, cancel, progress)


def restore_refusal(logdir: str, run: str, backup_dir: Optional[str] = None) -> TransactionError:
    """Why a restore of ``run``, of which nothing restorable is recorded, puts nothing back,
    changing nothing: a ``TransactionError`` coded ``not_found`` (a name nothing recorded), or
    ``restore_blocked`` naming damage that may hide its backups (a manifest refused or unreadable),
    in the words ``restore`` itself uses (``Engine.restore_refusal``)."""
    return open_engine(logdir, backup_dir).restore_refusal(run)


def restorable(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """What ``restore`` would put back (newest first), as operation summaries; changes nothing."""
    return open_engine(logdir, backup_dir).restorable(run)


def purge(logdir: str, older_than: Optional[float] = None, run: Optional[str] = None,
          yes: bool = False, backup_dir: Optional[str] = None, op: Optional[str] = None,
          runs: Optional[Sequence[str]] = None, run_glob: Optional[str] = None,
          op_ids: Optional[Sequence[str]] = None, cancel: Optional[CancelToken] = None,
          progress: Optional[Callable[[str, float], None]] = None) -> PurgeReport:
    """Delete backups of verified (or restored) operations; without ``yes`` only list them.

    ``run`` / ``runs`` (exact names) and ``run_glob`` (the glob rule of every verb) select the
    runs whose backups are purged, all in one pass (blobs they share, and the originals lost for
    good, are counted once); a name or glob that matches no run the vault has operations of
    raises ``SelectionError`` naming it.

    Never deletes a byte that exists nowhere else: a backup that is damaged, grown by a late
    writer, still held open for writing, or needed by another kept or unfinished operation is
    kept and listed in ``kept`` with a code (the preview says so too); a run being changed
    right now is passed over. ``op_ids``: purge only these operations (those a preview showed
    and the user confirmed; one committed since is never purged unseen). ``cancel``: honoured
    before the purge records its intent (the operations it would have purged are listed in
    ``kept`` with code ``interrupted``, nothing deleted), never after: a purge past its intent
    finishes. ``progress(step, fraction)``: told ``("purge", 0.5)`` right before the first
    intent is recorded, once: from there on a cancel is no longer honoured (the tab's purge job
    stops offering one).
    """
    names = list(dict.fromkeys([*([run] if run is not None else []), *(runs or [])])) if (run is not None or runs) \
        else None
    eng = open_engine(logdir, backup_dir)
    recovered = eng.recover()
    if op is not None:
        eng.operation(op)  # a mistyped id raises (Failure.NOT_FOUND) rather than purge nothing, exit 0
    chosen = _purge_selection(logdir, eng.backup_runs, names, run_glob, eng.operations)
    return eng.purge(older_than=older_than, yes=yes, op=op, runs=chosen, op_ids=op_ids, recovered=recovered,
                     cancel=cancel, progress=progress)


def forget_missing(logdir: str, op_id: str, yes: bool = False, backup_dir: Optional[str] = None) -> dict:
    """End the line of operation ``op_id`` whose manifest is missing (``purge --forget-missing``;
    ``engine.forget_missing``): while the change log (a disk) or the blob folder's witness (a bucket
    logdir) names a verified operation no vault holds a manifest of, every purge keeps every blob.
    Without ``yes`` only says what ending it means (``words``), nothing written; with ``yes`` one
    line is appended that ends it (nothing deleted: the next purge frees under its own rules).
    Settles what is unfinished first. Refused (``TransactionError`` with ``code``: ``refused``, or
    ``not_found`` when no line names it) unless the operation is missing right now; returns
    ``{op_id, kind, run, log, dry_run, ended, words}``."""
    from tb_footprint_plugin.engine.forget_missing import forget_missing as end_line

    eng = open_engine(logdir, backup_dir)
    eng.recover()
    return end_line(eng, op_id, yes=yes)


def _purge_selection(logdir: str, known: Callable[[], Sequence], names: Optional[List[str]],
                     run_glob: Optional[str], ops: Callable[[], List[dict]]) -> Optional[List[str]]:
    """The runs a purge's selectors name, among the runs the vault has operations of (a run
    reduced to nothing, or retired, is no longer in a scan); None without a selection (a blank
    name or glob selects nothing: read as "no selector" it would purge every run's backups).
    A selector that matches none raises ``SelectionError`` naming the runs whose backups the
    vault still keeps (``with_kept_backups`` of ``ops()``, the manifests: read only then), not a
    run whose every backup was purged (review R21 PD21)."""
    if names is None and run_glob is None:
        return None
    every = sorted({r for r in known() if isinstance(r, str)})
    chosen, missing = select(every, names, run_glob)
    if missing:
        kept = with_kept_backups(ops())
        # each missing selector matches none of these either (they are among ``every``): this raises
        select_among(logdir, kept, [n for n in names or [] if n in missing],
                     run_glob if run_glob in missing else None, "runs with backups")
        select_among(logdir, every, names, run_glob, "runs with backups")
    return chosen


def with_kept_backups(manifests: List[dict]) -> List[str]:
    """The runs (sorted) of ``manifests`` whose backups the vault still keeps, those a purge can
    take: a verified reduction or retirement, restored or not, whose backup was not purged (nor
    released by a restore, which marks it so); the same rule on a disk and on a bucket."""
    return sorted({m["run"] for m in manifests if isinstance(m.get("run"), str)
                   and m.get("outcome") == Outcome.VERIFIED and not m.get("backup_purged")})


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
    return open_engine(logdir, backup_dir).sample(op_id, side, plugin, tag, step, index)
