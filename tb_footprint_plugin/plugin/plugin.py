"""The ``footprint`` TBPlugin: configuration, the background scan, crash recovery, the routes.

Everything slow happens off the request path: the scan is refreshed by a background thread
(requests serve the last scan and say when it was made), crash recovery runs in a background
thread when the plugin loads, and reductions/restores run as background jobs.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Optional

from tensorboard.plugins import base_plugin

from tb_footprint_plugin.api import is_bucket_url
from tb_footprint_plugin.codes import Finding, Recovery as RecoveryAction  # this module's Recovery is the load-time job
from tb_footprint_plugin.plugin.jobs import JobManager
from tb_footprint_plugin.plugin.options import DEFAULT_POLICY, DEFAULT_QUIET_PERIOD, is_local_logdir, parse_quiet_period
from tb_footprint_plugin.plugin.security import Security

logger = logging.getLogger("tb_footprint_plugin.plugin")

PLUGIN_NAME = "footprint"
#: serve a scan older than this and refresh it in the background
REFRESH_AFTER_S = 30.0
#: actions are locked in the tab when the scan is older than this (or a change is pending)
STALE_AFTER_S = 300.0
#: a request arriving before the very first scan finished waits this long for it
FIRST_SCAN_WAIT_S = 60.0


class ScanService:
    """The last scan of the logdir, refreshed by one background thread at a time."""

    def __init__(self, logdir: str, backup_dir: Optional[str], *, write_cache: bool = True,
                 refresh_after: float = REFRESH_AFTER_S, stale_after: float = STALE_AFTER_S,
                 scan_fn: Optional[Callable] = None):
        self.logdir = logdir
        self.backup_dir = backup_dir
        self.write_cache = write_cache
        self.refresh_after = refresh_after
        self.stale_after = stale_after
        self._scan_fn = scan_fn
        self._cond = threading.Condition()
        self._fp = None
        self._error: Optional[str] = None
        self._thread: Optional[threading.Thread] = None
        self._dirty = False
        self._dirty_at_start = False  # the running scan started on a logdir known to have changed
        self._generation = 0
        self._progress = (0, 0)
        self._started_at: Optional[float] = None
        self._last_duration: Optional[float] = None
        self._gate: Optional[threading.Event] = None  # the first scan waits for recovery
        self._listeners: list = []  # called with each new scan, on the scan's thread
        self._preparers: list = []  # called with each new scan before it is served

    def add_listener(self, fn: Callable) -> None:
        """Call ``fn(footprint)`` after each successful scan is served (the disk numbers are
        measured then, off the request path)."""
        self._listeners.append(fn)

    def add_preparer(self, fn: Callable) -> None:
        """Call ``fn(footprint)`` with each successful scan before requests see it: the overview
        is ready (or found kept, for an unchanged logdir) when the scan is served, so no request
        waits for it; until then requests are served the previous scan."""
        self._preparers.append(fn)

    def set_gate(self, event: threading.Event) -> None:
        self._gate = event

    # --- background refresh ---------------------------------------------------------------
    def start(self) -> None:
        """Start a scan unless one is running (the first scan, right after recovery)."""
        with self._cond:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._dirty_at_start = self._dirty
        self._dirty = False
        self._started_at = time.time()
        self._progress = (0, 0)
        self._thread = threading.Thread(target=self._run, daemon=True, name="footprint-scan")
        self._thread.start()

    def refresh(self) -> None:
        """Mark the scan out of date and start a new one (now, or right after the running one)."""
        with self._cond:
            self._dirty = True
            self._start_locked()

    def _run(self) -> None:
        if self._gate is not None:
            self._gate.wait(120.0)
        t0 = time.monotonic()
        fp, error = None, None
        try:
            fn = self._scan_fn
            if fn is None:
                from tb_footprint_plugin.api import scan as fn

            def progress(done, total):
                self._progress = (done, total)

            fp = fn(self.logdir, backup_dir=self.backup_dir, write_cache=self.write_cache, progress=progress)
            for prepare in list(self._preparers):
                try:
                    prepare(fp)
                except Exception:  # the overview is then built on the first request
                    logger.exception("Footprint: preparing the overview of a new scan failed")
        except (NotADirectoryError, FileNotFoundError):
            error = f"the logdir {self.logdir} does not exist (yet)"
        except Exception as e:  # keep serving the previous scan; say what went wrong
            logger.exception("Footprint: scan of %s failed", self.logdir)
            error = f"scan failed: {type(e).__name__}: {e}"
        with self._cond:
            if fp is not None:
                self._fp = fp
                self._generation += 1
                self._error = None
            else:
                self._error = error
                self._generation += 1 if self._fp is None else 0
            self._last_duration = time.monotonic() - t0
            self._thread = None
            if self._dirty:  # changed while we scanned: go again
                self._start_locked()
            self._cond.notify_all()
        if fp is not None:
            for fn in list(self._listeners):
                try:
                    fn(fp)
                except Exception:  # a listener's failure never stops the scans
                    logger.exception("Footprint: preparing the overview of a new scan failed")

    # --- reading --------------------------------------------------------------------------
    def get(self, wait: Optional[float] = None):
        """``(footprint or None, meta)``; starts a refresh when the scan is old.

        With no scan yet, waits up to ``wait`` seconds (default ``FIRST_SCAN_WAIT_S``) for the
        first one.
        """
        with self._cond:
            now = time.time()
            if self._fp is None and self._error is None:
                self._start_locked()
                deadline = time.monotonic() + (FIRST_SCAN_WAIT_S if wait is None else wait)
                while self._fp is None and self._error is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            elif self._fp is not None and wait and self._pending_change_locked():
                # the caller knows the logdir just changed (a job ended): wait for the new scan
                deadline = time.monotonic() + wait
                while self._pending_change_locked():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            elif self._fp is not None and (now - self._fp.scanned_at > self.refresh_after):
                self._start_locked()
            elif self._fp is None and self._error is not None and self._thread is None:
                # the logdir did not exist last time: look again, at most every few seconds
                if self._started_at is None or now - self._started_at > 5.0:
                    self._start_locked()
            return self._fp, self._meta_locked()

    def _pending_change_locked(self) -> bool:
        return self._dirty or (self._thread is not None and self._dirty_at_start)

    def peek(self):
        """The last scan without starting anything (``is_active`` uses it)."""
        with self._cond:
            return self._fp

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until no scan is running (tests, benches)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _meta_locked(self) -> dict:
        fp = self._fp
        now = time.time()
        refreshing = self._thread is not None
        age = None if fp is None else max(0.0, now - fp.scanned_at)
        done, total = self._progress
        return {
            "scanned_at": None if fp is None else fp.scanned_at,
            "age_s": None if age is None else round(age, 1),
            "refreshing": refreshing,
            "stale": fp is None or self._pending_change_locked() or age > self.stale_after,
            "generation": self._generation,
            "error": self._error,
            "progress": {"files_done": done, "files_total": total} if refreshing else None,
            "duration_s": None if self._last_duration is None else round(self._last_duration, 3),
            "files_read": None if fp is None else fp.files_read,
            "files_cached": None if fp is None else fp.files_cached,
        }


class DiskNumbers:
    """The header's disk numbers (``api.disk_numbers``: disk in use now, freed now, freed after
    purge), measured in the background after each scan: the walk of a big logdir and its vault
    never sits on a request."""

    def __init__(self, logdir: str, backup_dir: Optional[str]):
        self.logdir = logdir
        self.backup_dir = backup_dir
        self._lock = threading.Lock()
        self._value: Optional[dict] = None
        self._running = False
        self._again = False

    def refresh(self, _fp=None) -> None:
        """Measure again (now, or right after the running measure)."""
        with self._lock:
            if self._running:
                self._again = True
                return
            self._running = True
        threading.Thread(target=self._run, daemon=True, name="footprint-disk").start()

    def _run(self) -> None:
        while True:
            try:
                from tb_footprint_plugin import api

                d = dict(api.disk_numbers(self.logdir, self.backup_dir), measured_at=time.time(), error=None)
            except Exception as e:  # say so in the header; the next scan measures again
                logger.exception("Footprint: measuring the disk in use failed")
                d = {"measured_at": time.time(), "error": f"{type(e).__name__}: {e}"}
            with self._lock:
                self._value = d
                if not self._again:
                    self._running = False
                    return
                self._again = False

    def get(self) -> Optional[dict]:
        """The last measure (None before the first one)."""
        with self._lock:
            return None if self._value is None else dict(self._value)


#: the codes of a journal recovery leaves in place because finishing or rolling it back could lose
#: an original's only copy (not because the journal is planted, copied or damaged)
_NOT_FINISHED = (Finding.ORIGINAL_NOT_IN_PLACE, Finding.BACKUP_DAMAGED)


class Recovery:
    """Crash recovery of unfinished operations, run once in the background at load."""

    def __init__(self, logdir: str, backup_dir: Optional[str], *, enabled: bool):
        self.logdir = logdir
        self.backup_dir = backup_dir
        self.enabled = enabled
        self.state = "pending"  # pending | running | done | skipped | failed
        self.outcomes: list = []
        self.detail: Optional[str] = None
        self.done = threading.Event()
        self.finished_at: Optional[float] = None
        self.problems: list = []  # damage found (codes): lost manifests, orphan blobs, ...
        self.settle_command: Optional[str] = None

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="footprint-recovery").start()

    def _run(self) -> None:
        try:
            if not os.path.isdir(self.logdir):
                self.state, self.detail = "skipped", "the logdir does not exist (yet)"
                return
            from tb_footprint_plugin import api

            if not self.enabled:
                found = api.unfinished(self.logdir, self.backup_dir)
                pending, problems = found["unfinished_operations"], found["problems"]
                self.state = "skipped"
                self.settle_command = found["settle_command"]
                self.detail = (f"{len(pending)} unfinished operation(s) and {len(problems)} problem(s) left as they "
                               f"are: write actions are off (run `{self.settle_command}`, or restart TensorBoard "
                               "with actions on)" if pending or problems else "nothing to recover")
                self.outcomes = [{"op_id": p["op_id"], "run": p["run"], "action": "pending", "detail": "",
                                  "code": Finding.UNFINISHED} for p in pending]
                self.problems = problems
                return
            self.state = "running"
            # a start's steps: a remote vault's index is looked through by `recover`, or by a
            # restore or verify that misses a blob, not at every TensorBoard start
            outs = api.recover_logdir(self.logdir, self.backup_dir, thorough=False)
            self.outcomes = [{"op_id": o.op_id, "run": o.run, "action": o.action, "detail": o.detail,
                              "code": o.code} for o in outs]
            found = api.unfinished(self.logdir, self.backup_dir)
            self.problems, self.settle_command = found["problems"], found["settle_command"]
            self.state = "done"
            settled = [o for o in outs if o.action in (RecoveryAction.ROLLED_BACK, RecoveryAction.COMPLETED,
                                                       RecoveryAction.REBUILT, RecoveryAction.SWEPT)]
            salvaged = [o for o in outs if o.action in (RecoveryAction.SALVAGED, RecoveryAction.KEPT)]
            repaired = [o for o in outs if o.action == RecoveryAction.REPAIRED]
            live = [o for o in outs if o.action == RecoveryAction.SKIPPED_LIVE]
            # a reduction whose original was not where its journal said, or whose copies were gone
            # past its commit point: nothing deleted, said apart from planted or copied state
            kept = [o for o in outs if o.action == RecoveryAction.BACKUPS_KEPT]
            astray = [o for o in outs if o.action == RecoveryAction.REFUSED and o.code in _NOT_FINISHED]
            refused = [o for o in outs if o.action == RecoveryAction.REFUSED and o.code not in _NOT_FINISHED]
            failed = [o for o in outs if o.action == RecoveryAction.FAILED]
            parts = []
            if settled:
                parts.append(f"{len(settled)} unfinished operation(s) or damaged record(s) settled")
            if salvaged:
                parts.append(f"late writes found in {len(salvaged)} backup(s) and put back where TensorBoard reads "
                             "them (restart TensorBoard, or wait for its next reload, to see them)")
            if repaired:
                parts.append(f"{len(repaired)} backup(s) that shared their bytes with a file outside the vault "
                             "made copies of their own (a write through that file can no longer change them)")
            if live:
                parts.append(f"{len(live)} left alone (another process is working on it)")
            if kept:
                parts.append(f"{len(kept)} reduction(s) found a file not as their journal recorded it (reduced, or "
                             "written since): their backups are kept and `tb-footprint restore` gives the originals back")
            if astray:
                parts.append(f"{len(astray)} journal(s) left as they are, nothing deleted: an original not in place, "
                             "or a backup gone since the commit point (each named among the outcomes)")
            if refused:
                parts.append(f"{len(refused)} journal(s) refused and left as they are (malformed, or written for "
                             "another logdir: planted or copied state is never replayed)")
            if failed:
                parts.append(f"{len(failed)} could not be settled and will be retried on the next start")
            if self.problems:
                parts.append(f"{len(self.problems)} problem(s) remain (see below)")
            self.detail = "; ".join(parts) if parts else "nothing to recover"
            if outs:
                logger.warning("Footprint: crash recovery settled %d operation(s): %s", len(outs),
                               "; ".join(f"{o.run}: {o.action}" for o in outs))
        except Exception as e:
            logger.exception("Footprint: crash recovery failed")
            self.state, self.detail = "failed", f"{type(e).__name__}: {e}"
        finally:
            self.finished_at = time.time()
            self.done.set()

    def to_dict(self) -> dict:
        return {"state": self.state, "detail": self.detail, "outcomes": list(self.outcomes),
                "finished_at": self.finished_at, "problems": list(self.problems),
                "settle_command": self.settle_command}


class Config:
    """The footprint flags, with the same defaults and validation as ``FootprintLoader``."""

    def __init__(self, flags, logdir: str):
        self.logdir = logdir
        backup = getattr(flags, "footprint_backup_dir", None)
        self.backup_dir = (None if not backup else backup if "://" in backup
                           else os.path.abspath(os.path.expanduser(backup)))
        self.default_policy = getattr(flags, "footprint_policy", None) or DEFAULT_POLICY
        try:
            self.quiet_period = parse_quiet_period(getattr(flags, "footprint_quiet_period", DEFAULT_QUIET_PERIOD))
        except ValueError:
            self.quiet_period = DEFAULT_QUIET_PERIOD
        self.read_only = bool(getattr(flags, "footprint_read_only", False))


class FootprintPlugin(base_plugin.TBPlugin):
    """The Footprint tab: what fills the logdir, and a safe way to cut it."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context, *, start_background: bool = True):
        raw = context.logdir or ""
        self.local = is_local_logdir(raw)
        # s3://, gs://, az:// logdirs go through the same api verbs (bucket transactions);
        # any other scheme stays out of reach of the tab
        self.readable = self.local or is_bucket_url(raw)
        self.logdir = os.path.abspath(os.path.expanduser(raw)) if self.local else raw
        self.flags = context.flags
        self.config = Config(context.flags, self.logdir)
        self.security = Security(context.flags, self.logdir, local_logdir=self.readable)
        self.scans = ScanService(self.logdir, self.config.backup_dir,
                                 write_cache=not self.config.read_only)
        self.recovery = Recovery(self.logdir, self.config.backup_dir,
                                 enabled=self.security.actions_enabled and self.readable)
        self.scans.set_gate(self.recovery.done)
        self.jobs = JobManager(before_start=lambda: self.recovery.done.wait(300.0),
                               after_finish=lambda job: self.scans.refresh())
        from tb_footprint_plugin.plugin.routes import Routes

        self.routes = Routes(self)
        self.disk = DiskNumbers(self.logdir, self.config.backup_dir)
        if self.readable:
            self.scans.add_listener(self.disk.refresh)
            self.scans.add_preparer(self.routes.prepare)
        if start_background and self.readable:
            self.recovery.start()
            self.scans.start()  # first scan, right after recovery
        else:  # tests build the plugin without background work
            self.recovery.state = "skipped"
            self.recovery.detail = "the logdir is not one Footprint reads" if not self.readable else "not started"
            self.recovery.done.set()

    # --- TBPlugin -------------------------------------------------------------------------
    def get_plugin_apps(self):
        # every answer, errors and static files included, forbids framing by another origin
        guard = self.security.frame_guard
        return {route: guard(app) for route, app in self.routes.apps().items()}

    def data_plugin_names(self):
        return ()

    def is_active(self):
        """Cheap: reads only the last scan in memory, never the disk (runs on every listing)."""
        if not self.readable:
            return False
        fp = self.scans.peek()
        if fp is None:
            return True  # not scanned yet: don't hide the tab
        return bool(fp.runs) or bool(fp.vault_bytes)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Footprint")
