"""One run, all or nothing: journal → back up → stage → verify → swap → commit, or roll back.

Every destructive step is preceded by its fsynced journal record. Until the swap starts the
user's files are untouched (backups are hard links or verified copies; new files carry
temporary names no reader matches), so a failure or a crash before it leaves the run exactly
as it was. The swap starts only after verification passed and is recorded; a crash inside it
is finished on recovery (every step is idempotent), or rolled back if anything no longer
checks out. The same ``_rollback``/``_roll_forward`` code serves failures in process and
recovery after a crash.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import os
import secrets
import shutil
import stat
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional

from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.engine.history import append_history
from tb_footprint_plugin.engine.journal import Journal, RunLock, RunLocked, pending_journals
from tb_footprint_plugin.storage.paths import check_no_symlink, is_within, real_within, state_dir
from tb_footprint_plugin.plan.planner import RunPlan
from tb_footprint_plugin.engine.vault import Vault, fsync_dir, sha256_file, who
from tb_footprint_plugin.version import __version__

FREE_SPACE_MARGIN = 16 << 20


class Cancelled(RuntimeError):
    """The caller cancelled the operation before its commit point."""


class TransactionError(RuntimeError):
    """A step failed; the run was (or will be) rolled back. The message says which and why."""


class CancelToken:
    """Cooperative cancellation and per-run timeout, checked between steps."""

    def __init__(self, timeout: Optional[float] = None):
        self._event = threading.Event()
        self.deadline = time.monotonic() + timeout if timeout else None

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled("cancelled before the commit point")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Cancelled("timed out before the commit point")


@dataclass
class RunOutcome:
    """What happened to one run: a value with a reason, never a stray exception."""

    run: str
    status: str  # 'verified' | 'rolled_back' | 'skipped' | 'failed' | 'dry_run' | 'restored'
    op_id: Optional[str] = None
    reason: Optional[str] = None
    bytes_before: int = 0
    bytes_after: int = 0
    removed_files: List[str] = field(default_factory=list)
    created_files: List[str] = field(default_factory=list)
    verification: Optional[dict] = None
    duration_s: float = 0.0

    @property
    def saved_bytes(self) -> int:
        return max(0, self.bytes_before - self.bytes_after) if self.status == "verified" else 0

    @property
    def verified(self) -> bool:
        return self.status in ("verified", "restored")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["saved_bytes"] = self.saved_bytes
        d["verified"] = self.verified
        return d


@dataclass
class Context:
    """Where one logdir keeps its state and backups, and how verification runs."""

    logdir: str
    backup_dir: Optional[str] = None
    verify_backends: tuple = ("python", "rust")
    quiet_period: float = 600.0

    def __post_init__(self):
        self.logdir = os.path.abspath(self.logdir)
        self.state = state_dir(self.logdir)
        self.vault = Vault(self.backup_dir or self.state)
        self.journal_dir = os.path.join(self.state, "journal")
        self.lock_dir = os.path.join(self.state, "locks")

    def abs(self, rel: str) -> str:
        return os.path.join(self.logdir, rel) if rel != "." else self.logdir


def new_op_id() -> str:
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{ts}-{secrets.token_hex(3)}"


Progress = Callable[[str, float], None]


# ---------------------------------------------------------------------------------------
# preflight: refuse before anything is written
# ---------------------------------------------------------------------------------------
def _preflight(ctx: Context, rp: RunPlan) -> None:
    run_dir = ctx.abs(rp.run)
    if not real_within(run_dir, ctx.logdir) or os.path.islink(run_dir):
        raise TransactionError(f"run {rp.run!r} is a symlink or leads out of the logdir; left alone")
    newest = 0.0
    for root, dirs, files in os.walk(run_dir, followlinks=False):
        dirs[:] = [d for d in dirs if os.path.join(root, d) != ctx.state]
        for n in files:
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(root, n)).st_mtime)
    age = time.time() - newest
    if newest and age < ctx.quiet_period:
        raise TransactionError(
            f"run {rp.run!r} is active: a file changed {int(age)} s ago "
            f"(quiet period {int(ctx.quiet_period)} s); left alone"
        )
    need_logdir = 0
    need_vault = 0
    for a in rp.actions:
        p = ctx.abs(a.path)
        if not is_within(p, ctx.logdir) or not real_within(os.path.dirname(p), ctx.logdir):
            raise TransactionError(f"{a.path}: leads out of the logdir; refusing")
        _no_symlink(ctx, a.path)
        if a.new_path and a.new_path != a.path and os.path.lexists(ctx.abs(a.new_path)):
            raise TransactionError(f"{a.new_path}: already exists; it would be overwritten")
        if a.kind == "remove_dir":
            continue
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            raise TransactionError(f"{a.path}: no longer exists (scan is stale); rescan and plan again") from None
        if os.path.islink(p) or not os.path.isfile(p):
            raise TransactionError(f"{a.path}: not a regular file; refusing")
        if st.st_size != a.bytes_before:
            raise TransactionError(f"{a.path}: changed since the scan ({a.bytes_before} → {st.st_size} bytes)")
        if not os.access(p, os.R_OK):
            raise TransactionError(f"{a.path}: not readable (permission denied)")
        d = os.path.dirname(p)
        if not os.access(d, os.W_OK | os.X_OK):
            raise TransactionError(f"{os.path.relpath(d, ctx.logdir)}: directory not writable (permission denied)")
        if a.kind in ("compress", "rewrite"):
            need_logdir += a.bytes_before if a.kind == "rewrite" else max(a.bytes_after * 2, 1 << 16)
        if not ctx.vault.same_filesystem(p):
            need_vault += a.bytes_before
    _check_space(ctx.logdir, need_logdir)
    os.makedirs(ctx.vault.root, exist_ok=True)
    _check_space(ctx.vault.root, need_vault)


def _no_symlink(ctx: Context, rel: str) -> None:
    try:
        check_no_symlink(ctx.logdir, rel)
    except ValueError as e:
        raise TransactionError(str(e)) from None


def _check_space(path: str, need: int) -> None:
    if need <= 0:
        return
    free = shutil.disk_usage(path).free
    if free < need + FREE_SPACE_MARGIN:
        raise TransactionError(
            f"not enough free space on {path}: needs {human_bytes(need + FREE_SPACE_MARGIN)}, "
            f"has {human_bytes(free)}; nothing was changed"
        )


# ---------------------------------------------------------------------------------------
# the transaction
# ---------------------------------------------------------------------------------------
def reduce_run(ctx: Context, rp: RunPlan, *, policy: Optional[dict] = None,
               cancel: Optional[CancelToken] = None, progress: Optional[Progress] = None) -> RunOutcome:
    """Reduce one run as ``rp`` says; returns an outcome, never raises for a failed run."""
    t0 = time.monotonic()
    out = RunOutcome(run=rp.run, status="failed", bytes_before=rp.bytes_before, bytes_after=rp.bytes_before)
    if rp.skipped:
        out.status, out.reason = "skipped", rp.skipped
        return out
    cancel = cancel or CancelToken()
    report = progress or (lambda step, frac: None)
    try:
        lock = RunLock(ctx.lock_dir, rp.run).acquire()
    except RunLocked as e:
        out.status, out.reason = "skipped", str(e)
        return out
    except OSError as e:
        out.reason = f"cannot lock run {rp.run!r} in {ctx.lock_dir}: {e.strerror or e}"
        return out
    unsettled = unsettled_op(ctx, rp.run)
    if unsettled:
        lock.release()
        out.reason = (f"unfinished operation {unsettled} on this run could not be settled yet; "
                      "see `tb-footprint status`")
        return out
    journal = None
    try:
        try:
            _preflight(ctx, rp)
        except (TransactionError, OSError) as e:
            out.status, out.reason = "skipped" if "active" in str(e) else "failed", str(e)
            return out
        ctx.vault.ensure()
        op_id = new_op_id()
        out.op_id = op_id
        journal = Journal.create(ctx.journal_dir, op_id, {
            "type": "begin", "kind": "reduce", "op_id": op_id, "run": rp.run,
            "logdir": ctx.logdir, "vault": ctx.vault.root, "plan": rp.to_dict(), "policy": policy,
            "verify_backends": list(ctx.verify_backends),
        })
        faults.hit("after_begin")
        _run_steps(ctx, rp, journal, out, cancel, report)
        out.status = "verified"
    except Exception as e:  # any failure: back to the exact original bytes
        reason = _reason(e)
        if journal is None:
            out.status, out.reason = "failed", reason
        elif any(r["type"] == "commit" for r in journal.records()):
            out.status = "verified"  # past the commit point: the reduction stands
            journal.close()
            journal = None
        else:
            try:
                journal.append({"type": "rollback", "reason": reason})  # never rolled forward after this
                _rollback(ctx, journal.records(), reason)
                out.status, out.reason = "rolled_back", reason
            except Exception as e2:  # the journal stays: recovery will try again
                out.status = "failed"
                out.reason = f"{reason}; rollback incomplete ({_reason(e2)}), will be retried on next start"
                journal = None
        if journal is not None:
            journal.close()
            journal = None
    finally:
        lock.release()
        out.duration_s = round(time.monotonic() - t0, 3)
    return out


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return f"disk full: {e}"
    if isinstance(e, PermissionError):
        return f"permission denied: {e}"
    return str(e) or type(e).__name__


def _run_steps(ctx: Context, rp: RunPlan, journal: Journal, out: RunOutcome,
               cancel: CancelToken, report: Progress) -> None:
    vault = ctx.vault
    originals = [a for a in rp.actions if a.kind in ("delete", "compress", "rewrite")]
    total = sum(a.bytes_before for a in originals) or 1
    done = 0
    # 1. back up every original that will be removed or replaced
    backups: Dict[str, dict] = {}
    for a in originals:
        cancel.check()
        p = ctx.abs(a.path)
        _no_symlink(ctx, a.path)
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode):
            raise TransactionError(f"{a.path}: no longer a regular file (replaced by a symlink?)")
        sha = sha256_file(p)
        rec = {"type": "backup", "path": a.path, "sha256": sha, "size": st.st_size,
               "mode": st.st_mode & 0o7777, "mtime": st.st_mtime, "action": a.kind}
        journal.append(rec)
        faults.hit("before_store")
        vault.store(p, sha)
        backups[a.path] = rec
        done += a.bytes_before
        report("backup", 0.4 * done / total)
    journal.append({"type": "backed_up", "count": len(backups)})
    faults.hit("after_backup")

    # 2. stage new files under names no reader matches
    staged = []
    for i, a in enumerate(x for x in originals if x.kind in ("compress", "rewrite")):
        cancel.check()
        src = ctx.abs(a.path)
        final_rel = a.new_path or a.path
        tmp = os.path.join(os.path.dirname(src), f".footprint-{journal.op_id}-{i}.tmp")
        journal.append({"type": "stage", "tmp": os.path.relpath(tmp, ctx.logdir), "final": final_rel,
                        "src": a.path})
        faults.hit("before_stage")
        info = _stage(a, src, tmp, backups[a.path]["sha256"])
        staged.append({"tmp": os.path.relpath(tmp, ctx.logdir), "final": final_rel, "src": a.path, **info})
        journal.append({"type": "staged", **staged[-1]})
        report("stage", 0.4 + 0.2 * (i + 1) / max(1, len(originals)))
    faults.hit("after_stage")

    # 3. verify with TensorBoard's readers, original view vs reduced view
    cancel.check()
    report("verify", 0.65)
    verification = _verify(ctx, rp, journal.op_id, backups, staged)
    journal.append({"type": "verified", "ok": verification["ok"], "verification": verification})
    faults.hit("after_verify")
    out.verification = verification
    if not verification["ok"]:
        raise TransactionError("verification failed: " + "; ".join(verification.get("failed", [])))

    # 4. nothing may have changed since the backup (an appending writer, a user edit)
    for path, rec in backups.items():
        st = os.lstat(ctx.abs(path))
        if st.st_size != rec["size"] or st.st_mtime != rec["mtime"] or not vault.check_blob(rec["sha256"]):
            raise TransactionError(f"{path}: changed during the reduction (is the run still being written?)")
    cancel.check()  # the last point where a cancel is honoured

    # 5. swap: the commit point
    journal.append({"type": "swap"})
    faults.hit("after_swap_record")
    _apply_swap(ctx, rp, journal, staged, backups)
    journal.append({"type": "swapped"})
    faults.hit("after_swap")

    out.removed_files = sorted(backups)
    out.created_files = [s["final"] for s in staged]
    out.bytes_after = (rp.bytes_before - sum(b["size"] for b in backups.values())
                       + sum(s["size"] for s in staged))
    _write_manifest(ctx, journal.records(), "verified", None)
    journal.append({"type": "commit"})
    faults.hit("after_commit")
    journal.close()
    report("done", 1.0)


def _stage(action, src: str, tmp: str, sha: str) -> dict:
    """Produce the new file for a compress/rewrite action at ``tmp`` and check it."""
    if action.kind == "compress":
        from tb_footprint_plugin.transforms.gzip_trace import gunzip_sha256, gzip_file

        got = gzip_file(src, tmp)
        if got != sha:
            raise TransactionError(f"{action.path}: changed while compressing")
        if gunzip_sha256(tmp) != sha:
            raise TransactionError(f"{action.path}: compressed copy does not decompress to the original")
        return {"size": os.lstat(tmp).st_size, "sha256": sha256_file(tmp), "content_sha256": sha}
    if action.kind == "rewrite":
        from tb_footprint_plugin.transforms import stage_rewrite

        return stage_rewrite(action, src, tmp, sha)
    raise TransactionError(f"unknown action {action.kind}")


def _apply_swap(ctx: Context, rp: RunPlan, journal: Journal, staged: List[dict], backups: Dict[str, dict]) -> None:
    """Idempotent: rename staged files into place, unlink originals, remove emptied dirs."""
    dirs = set()
    for path, rec in backups.items():
        # only the bytes that were backed up may be replaced or removed
        _no_symlink(ctx, path)
        p = ctx.abs(path)
        done = any(s["final"] == path and _matches(p, s["sha256"], s["size"]) for s in staged)
        if os.path.lexists(p) and not done and not _matches(p, rec["sha256"], rec["size"]):
            raise TransactionError(f"{path}: changed after it was backed up; not replaced")
    for s in staged:
        _no_symlink(ctx, s["final"])
        tmp, final = ctx.abs(s["tmp"]), ctx.abs(s["final"])
        if os.path.exists(tmp):
            if s["final"] not in backups and os.path.lexists(final) and not _matches(final, s["sha256"], s["size"]):
                raise TransactionError(f"{s['final']}: appeared meanwhile; it would be overwritten")
            os.replace(tmp, final)
        dirs.add(os.path.dirname(final))
        faults.hit("mid_swap")
    finals = {s["final"] for s in staged}
    for path in backups:
        if path in finals:
            continue  # replaced in place by its rewrite
        p = ctx.abs(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
        dirs.add(os.path.dirname(p))
    for a in rp.actions:
        if a.kind != "remove_dir":
            continue
        p = ctx.abs(a.path)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue  # a symlink or a file now: not ours to remove
        journal.append({"type": "rmdir", "path": a.path, "mode": st.st_mode & 0o7777})
        try:
            os.rmdir(p)
            dirs.add(os.path.dirname(p))
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR, errno.EBUSY):
                raise
    for d in dirs:
        if os.path.isdir(d):
            fsync_dir(d)


# ---------------------------------------------------------------------------------------
# verification
# ---------------------------------------------------------------------------------------
def _verify(ctx: Context, rp: RunPlan, op_id: str, backups: Dict[str, dict], staged: List[dict]) -> dict:
    """Reader-level check of the run's event files, original vs reduced, plus file checks."""
    from tb_footprint_plugin.verify import verify_reduction

    run_dir = ctx.abs(rp.run)
    views = os.path.join(ctx.vault.tmp, op_id)
    orig_view, red_view = os.path.join(views, "original"), os.path.join(views, "reduced")
    os.makedirs(orig_view)
    os.makedirs(red_view)
    try:
        replaced = {s["final"]: s for s in staged}
        for name in sorted(os.listdir(run_dir)):
            p = os.path.join(run_dir, name)
            rel = os.path.relpath(p, ctx.logdir)
            if not cat.is_event_file_name(name) or not os.path.isfile(p) or os.path.islink(p):
                continue
            src_orig = ctx.vault.blob_path(backups[rel]["sha256"]) if rel in backups else p
            os.symlink(src_orig, os.path.join(orig_view, name))
            if rel in replaced:
                os.symlink(ctx.abs(replaced[rel]["tmp"]), os.path.join(red_view, name))
            elif rel not in backups:
                os.symlink(p, os.path.join(red_view, name))
        expectations = None
        if staged and any(s.get("expectations") for s in staged):
            from tb_footprint_plugin.verify import Expectations

            modes = {}
            for s in staged:
                modes.update(s.get("expectations") or {})
            expectations = Expectations(plugin_modes=modes)
        result = verify_reduction(orig_view, red_view, expectations, backends=tuple(ctx.verify_backends))
        d = result.to_dict()
        # kept so `verify` can re-check the run later under the same contract
        d["expectations"] = dict(expectations.plugin_modes) if expectations else {}
    finally:
        shutil.rmtree(views, ignore_errors=True)
    checks = list(d.get("checks", []))
    failed = list(d.get("failed", []))
    comp = [s for s in staged if "content_sha256" in s]
    if comp:
        checks.append({"name": "torch traces", "ok": True,
                       "detail": f"{len(comp)} compressed, decompressed content identical (sha256)"})
    for s in staged:
        checks.append({"name": s.get("transform", "rewrite"), "ok": True, "detail": _stage_line(s)})
    dels = [p for p, r in backups.items() if r["action"] == "delete"]
    if dels:
        checks.append({"name": "removed files", "ok": True,
                       "detail": f"{len(dels)} file(s) backed up (sha256 verified) and removed"})
    for line in rp.fidelity:
        checks.append({"name": "plan", "ok": True, "detail": line})
    d["checks"], d["failed"] = checks, failed
    d["ok"] = bool(d.get("ok")) and not failed
    return d


def _stage_line(s: dict) -> str:
    """One verification line for a file a transform produced."""
    name = os.path.basename(s["final"])
    if "trace_check" in s:
        return f"{name}: {s['trace_check']}"
    if "records_before" in s:
        removed = ", ".join(f"{k} {v['records']}" for k, v in (s.get("removed") or {}).items()) or "nothing"
        return (f"{name}: rewritten, {s['records_before']} → {s['records_after']} records, each kept "
                f"record byte-identical; removed {removed}")
    return f"{name}: compressed, decompressed content identical (sha256)"


# ---------------------------------------------------------------------------------------
# rollback, roll forward, recovery
# ---------------------------------------------------------------------------------------
def _vault_of(records: List[dict], ctx: Context) -> Vault:
    begin = records[0] if records else {}
    return Vault(begin.get("vault") or ctx.vault.root)


def _rollback(ctx: Context, records: List[dict], reason: str) -> None:
    """Put every original back byte for byte and remove what the operation created."""
    vault = _vault_of(records, ctx)
    backups = [r for r in records if r["type"] == "backup"]
    stages = {r["tmp"]: r for r in records if r["type"] in ("stage", "staged")}
    staged = {r["tmp"]: r for r in records if r["type"] == "staged"}
    rmdirs = [r for r in records if r["type"] == "rmdir"]
    for r in sorted(rmdirs, key=lambda r: len(r["path"])):
        _no_symlink(ctx, r["path"])
        p = ctx.abs(r["path"])
        if not os.path.lexists(p):
            os.makedirs(p, exist_ok=True)
            os.chmod(p, r["mode"])
    originals = {r["path"] for r in backups}
    swapped = any(r["type"] == "swap" for r in records)
    produced = {r["final"]: r for r in staged.values()}
    # Before the swap no original was touched (backups are links or copies): the files in
    # place are the truth, even if a writer appended to one meanwhile.
    displaced = []
    for r in backups if swapped else ():
        d = put_back(ctx, vault, r, produced.get(r["path"]))
        if d:
            displaced.append(d)
    for tmp_rel, r in stages.items():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ctx.abs(tmp_rel))
        final = r.get("final")
        if final and final not in originals:
            fp = ctx.abs(final)
            s = staged.get(tmp_rel)
            if os.path.exists(fp) and s and _matches(fp, s["sha256"], s["size"]):
                os.unlink(fp)
    kept = {d["path"] for d in displaced if d.get("kept_in_place")}
    for r in backups if swapped else ():
        if r["path"] not in kept and not _matches(ctx.abs(r["path"]), r["sha256"], r["size"]):
            raise TransactionError(f"{r['path']}: could not be put back")
    begin = records[0]
    shutil.rmtree(os.path.join(vault.tmp, begin["op_id"]), ignore_errors=True)
    _write_manifest(ctx, records, "rolled_back", reason, displaced=displaced)
    # Blobs only this operation needed are dropped: the originals are back in place. A blob
    # another operation needs stays, as a copy of its own (it may be a link of a live file).
    needed = vault.referenced_blobs(exclude_ops=[begin["op_id"]]) | journal_blobs(ctx, begin["op_id"])
    for r in backups:
        if r["sha256"] not in needed:
            vault.delete_blob(r["sha256"])
        else:
            vault.unshare(r["sha256"])


def put_back(ctx: Context, vault: Vault, rec: dict, produced: Optional[dict] = None) -> Optional[dict]:
    """Put the original bytes of ``rec`` back at its path.

    Content found there that is neither the original nor what the operation itself produced
    (``produced``) is newer than the backup: it is stored in the vault first and returned as
    a 'displaced' record, so no byte is ever lost.
    """
    _no_symlink(ctx, rec["path"])
    p = ctx.abs(rec["path"])
    if _matches(p, rec["sha256"], rec["size"]):
        return None
    displaced = None
    if os.path.lexists(p) and not (produced and _matches(p, produced["sha256"], produced["size"])):
        if os.path.islink(p) or not os.path.isfile(p):
            raise TransactionError(f"{rec['path']}: is no longer a regular file; left as is")
        if not vault.check_blob(rec["sha256"]):
            # a writer appended to the original itself (its backup is a hard link of it):
            # the file in place holds every byte, the newest ones included; leave it
            return {"path": rec["path"], "kept_in_place": True, "size": os.lstat(p).st_size}
        sha = sha256_file(p)
        vault.store(p, sha)
        displaced = {"path": rec["path"], "sha256": sha, "size": os.lstat(p).st_size,
                     "blob": os.path.relpath(vault.blob_path(sha), vault.root)}
    vault.restore_blob(rec["sha256"], p, rec["mode"], rec["mtime"])
    return displaced


def journal_blobs(ctx: Context, exclude_op: Optional[str] = None) -> set:
    """Blobs that unfinished operations (other than ``exclude_op``) rely on."""
    out = set()
    for j in pending_journals(ctx.journal_dir):
        if j.op_id == exclude_op:
            continue
        out.update(r["sha256"] for r in j.records() if r.get("type") == "backup")
    return out


def unsettled_op(ctx: Context, run: str) -> Optional[str]:
    """The id of an unfinished operation on ``run``, if one is left (call under the run lock)."""
    for j in pending_journals(ctx.journal_dir):
        recs = j.records()
        if recs and recs[0].get("run") == run:
            return j.op_id
    return None


def _matches(path: str, sha: str, size: int) -> bool:
    try:
        return os.lstat(path).st_size == size and sha256_file(path) == sha
    except OSError:
        return False


def _roll_forward(ctx: Context, records: List[dict]) -> bool:
    """Finish a swap that was recorded after a passed verification. False if it can't be."""
    from tb_footprint_plugin.plan.planner import Action

    vault = _vault_of(records, ctx)
    backups = {r["path"]: r for r in records if r["type"] == "backup"}
    staged = [r for r in records if r["type"] == "staged"]
    if not all(vault.check_blob(r["sha256"]) for r in backups.values()):
        return False
    finals = {s["final"]: s for s in staged}
    for path, r in backups.items():
        p, s = ctx.abs(path), finals.get(path)
        if os.path.lexists(p) and not _matches(p, r["sha256"], r["size"]) and not (
                s and _matches(p, s["sha256"], s["size"])):
            return False  # changed after the crash: roll back (keeping the new bytes)
    for s in staged:
        tmp, final = ctx.abs(s["tmp"]), ctx.abs(s["final"])
        if not (_matches(tmp, s["sha256"], s["size"]) or _matches(final, s["sha256"], s["size"])):
            return False
    plan = records[0]["plan"]
    rp = RunPlan(run=plan["run"], bytes_before=plan["bytes_before"],
                 expected_after_bytes=plan["expected_after_bytes"],
                 actions=[Action(**{k: v for k, v in a.items()}) for a in plan["actions"]])
    j = Journal(os.path.join(ctx.journal_dir, f"{records[0]['op_id']}.jsonl"))
    _apply_swap(ctx, rp, j, staged, backups)
    return True


@dataclass
class RecoveryOutcome:
    op_id: str
    run: str
    action: str  # 'rolled_back' | 'completed' | 'skipped_live' | 'failed'
    detail: str = ""


def recover(ctx: Context) -> List[RecoveryOutcome]:
    """Settle every unfinished operation of this logdir (call at every start)."""
    outcomes = []
    for j in pending_journals(ctx.journal_dir):
        records = j.records()
        if not records or records[0].get("type") != "begin":
            # created but crashed before its first record was durable: nothing happened
            j.close()
            continue
        begin = records[0]
        run = begin["run"]
        try:
            lock = RunLock(ctx.lock_dir, run).acquire()
        except RunLocked:
            outcomes.append(RecoveryOutcome(begin["op_id"], run, "skipped_live", "held by a running process"))
            continue
        try:
            if begin["kind"] == "restore":
                from tb_footprint_plugin.engine.restore import finish_restore

                detail = finish_restore(ctx, records)
                outcomes.append(RecoveryOutcome(begin["op_id"], run, "completed", detail))
                j.close()
                continue
            types = {r["type"] for r in records}
            verified_ok = any(r["type"] == "verified" and r.get("ok") for r in records)
            if "commit" in types:
                action, detail = "completed", "was committed"
                if not _manifest_exists(ctx, records):
                    _write_manifest(ctx, records, "verified", None, recovered=True)
            elif "swap" in types and verified_ok and "rollback" not in types and _roll_forward(ctx, records):
                _write_manifest(ctx, records, "verified", None, recovered=True)
                action, detail = "completed", "swap finished after a crash (verification had passed)"
            else:
                _rollback(ctx, records, "interrupted (crash or kill); rolled back on recovery")
                action, detail = "rolled_back", "originals put back byte for byte"
            j.close()
            outcomes.append(RecoveryOutcome(begin["op_id"], run, action, detail))
        except Exception as e:  # leave the journal for the next start, say why
            outcomes.append(RecoveryOutcome(begin["op_id"], run, "failed", _reason(e)))
        finally:
            lock.release()
    return outcomes


def _manifest_exists(ctx: Context, records: List[dict]) -> bool:
    return os.path.exists(_vault_of(records, ctx).manifest_path(records[0]["op_id"]))


def _write_manifest(ctx: Context, records: List[dict], outcome: str, reason: Optional[str],
                    recovered: bool = False, displaced: Optional[List[dict]] = None) -> dict:
    """The operation's manifest (and change-log line): what was backed up, and how it ended."""
    vault = _vault_of(records, ctx)
    begin = records[0]
    plan = begin["plan"]
    backups = [r for r in records if r["type"] == "backup"]
    staged = [r for r in records if r["type"] == "staged"]
    ver = next((r.get("verification") for r in records if r["type"] == "verified"), None)
    created_size = sum(s["size"] for s in staged)
    removed_size = sum(b["size"] for b in backups)
    after = plan["bytes_before"] - removed_size + created_size if outcome == "verified" else plan["bytes_before"]
    m = {
        "op_id": begin["op_id"],
        "kind": "reduce",
        "run": begin["run"],
        "logdir": begin["logdir"],
        "vault": vault.root,
        "policy": begin.get("policy"),
        "plan": plan,
        "tool_version": __version__,
        **who(),
        "started_at": begin["t"],
        "finished_at": time.time(),
        "outcome": outcome,
        "reason": reason,
        "recovered": recovered,
        "bytes_before": plan["bytes_before"],
        "bytes_after": after,
        "files": [{"path": b["path"], "size": b["size"], "mode": b["mode"], "mtime": b["mtime"],
                   "sha256": b["sha256"], "blob": os.path.relpath(vault.blob_path(b["sha256"]), vault.root),
                   "action": b["action"]} for b in backups],
        "created": [{"path": s["final"], "size": s["size"], "sha256": s["sha256"]} for s in staged],
        "removed_dirs": [r for r in records if r["type"] == "rmdir"],
        "verification": ver,
        "backup_purged": outcome != "verified",
        # content newer than the backup, found where an original went back: kept in the vault
        "displaced": displaced or [],
    }
    os.makedirs(vault.ops, exist_ok=True)
    vault.write_manifest(m)
    append_history(ctx.state, {
        "op_id": m["op_id"], "kind": "reduce", "run": m["run"], "policy": (begin.get("policy") or {}).get("name"),
        "before": m["bytes_before"], "after": after, "verified": outcome == "verified",
        "outcome": outcome, "reason": reason, "backup_kept": outcome == "verified",
        "user": m["user"], "host": m["host"], "tool_version": __version__,
    })
    return m
