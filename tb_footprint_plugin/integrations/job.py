"""Reduce the runs a training job wrote, once its writers are closed: the core the Keras, Lightning
and Hugging Face callbacks and ``reduce_when_done`` share.

A job's own files are the files under its writers' log directories that were created or changed
after the integration started watching; the reduction waits until this process holds none of
them open for writing, and a file another process holds open is never counted as the job's. The
quiet period is waived for exactly those files (each with the mtime it had when found closed);
every other file of the run still has to be quiet, as for the CLI. The reduction itself is
``api.reduce_logdir`` on those runs only: same transaction, verification, vault and history.

Nothing here raises into the training job: every outcome, failures included, is a ``JobOutcome``
with a code, logged on the ``tb_footprint_plugin.integrations`` logger.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import JobCode, Outcome

log = logging.getLogger("tb_footprint_plugin.integrations")

#: mtimes come from the kernel's coarse clock, which may lag ``time.time_ns()`` by a tick
_CLOCK_SLACK_NS = 100_000_000
_POLL_S = 0.2
_STATE_DIR_NAME = ".tb-footprint"


@dataclass
class JobOutcome:
    """What the end-of-training reduction did; ``report`` is the ``ReduceReport`` when one ran."""

    code: JobCode
    logdir: Optional[str] = None
    runs: List[str] = field(default_factory=list)
    closed_files: Dict[str, float] = field(default_factory=dict)
    reason: Optional[str] = None
    report: Optional[api.ReduceReport] = None

    @property
    def ok(self) -> bool:
        """True when nothing went wrong (a dry run, nothing to do and a verified reduction are ok)."""
        return self.code in (JobCode.REDUCED, JobCode.PLANNED, JobCode.NOTHING_TO_DO, JobCode.NO_RUNS)

    @property
    def saved_bytes(self) -> int:
        return self.report.saved_bytes if self.report and not self.report.dry_run else 0

    def to_dict(self) -> dict:
        return {"code": self.code, "ok": self.ok, "logdir": self.logdir, "runs": self.runs,
                "closed_files": sorted(self.closed_files), "reason": self.reason,
                "saved_bytes": self.saved_bytes,
                "report": self.report.to_dict() if self.report else None}


def open_for_writing(root: str) -> Optional[Dict[str, set]]:
    """Real paths of files under ``root`` that visible processes hold open for writing, each
    with those processes' pids (Linux ``/proc``); None where that cannot be known."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    root = os.path.realpath(root)
    prefix = root.rstrip(os.sep) + os.sep
    found: Dict[str, set] = {}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or another user's process
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if not target.startswith(prefix):
                continue
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}", "r") as f:
                    flags = next((int(line.split()[1], 8) for line in f if line.startswith("flags:")), 0)
            except (OSError, ValueError):
                flags = os.O_WRONLY  # cannot tell: assume the worst
            if flags & (os.O_WRONLY | os.O_RDWR):
                found.setdefault(target, set()).add(int(pid))
    return found


class JobReducer:
    """Watches a job's log directories from construction on and reduces the runs it wrote.

    ``logdir`` is the TensorBoard logdir whose run names, vault and history are used; every job
    directory must be inside it. ``finish`` is called once training ended; it waits (in a
    background thread when the framework still has to close its writers) until the job's files
    are closed, then reduces. ``wait()`` returns the outcome.
    """

    def __init__(self, logdir: Optional[str] = None, *, job_dirs: Sequence[str] = (),
                 policy="lossless", dry_run: bool = True, backup_dir: Optional[str] = None,
                 quiet_period: float = api.DEFAULT_QUIET_PERIOD, close_timeout: float = 120.0,
                 verify_backends: Sequence[str] = api.DEFAULT_BACKENDS, timeout: Optional[float] = None):
        self.logdir = os.path.abspath(logdir) if logdir else None
        self.job_dirs = [os.path.abspath(d) for d in job_dirs]
        self.policy = policy
        self.dry_run = dry_run
        self.backup_dir = backup_dir
        self.quiet_period = quiet_period
        self.close_timeout = close_timeout
        self.verify_backends = tuple(verify_backends)
        self.timeout = timeout
        self.started_ns = time.time_ns()
        self.outcome: Optional[JobOutcome] = None
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._finishing = False

    # -- the job's files --------------------------------------------------------------
    def _walk(self) -> Iterator[str]:
        seen = set()
        for d in self.job_dirs:
            for root, dirs, files in os.walk(d, followlinks=False):
                dirs[:] = sorted(x for x in dirs if x != _STATE_DIR_NAME and not x.startswith(_STATE_DIR_NAME + "-u"))
                for n in files:
                    p = os.path.join(root, n)
                    if p not in seen:
                        seen.add(p)
                        yield p

    def own_files(self) -> Dict[str, os.stat_result]:
        """Regular files under the job's directories written since watching began and not held
        open for writing by another process (such a file is another writer's: it keeps the
        quiet period)."""
        held = self._held() or {}
        me = os.getpid()
        out = {}
        since = self.started_ns - _CLOCK_SLACK_NS
        for p in self._walk():
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not (os.path.isfile(p) and not os.path.islink(p) and st.st_mtime_ns >= since):
                continue
            if held.get(os.path.realpath(p), {me}) - {me}:
                continue
            out[p] = st
        return out

    def _held(self) -> Optional[Dict[str, set]]:
        return open_for_writing(self.logdir) if self.logdir else {}

    def _still_open(self) -> Optional[List[str]]:
        """The job's files this process still writes; None where that cannot be known."""
        held = self._held()
        if held is None:
            return None
        me = os.getpid()
        dirs = [os.path.realpath(d).rstrip(os.sep) + os.sep for d in self.job_dirs]
        return sorted(p for p, pids in held.items() if me in pids and any(p.startswith(d) for d in dirs))

    # -- ending -----------------------------------------------------------------------
    def finish(self, *, ready: Callable[[], bool] = lambda: True, defer: Optional[bool] = None,
               training_failed: Optional[str] = None) -> Optional[JobOutcome]:
        """Training ended: reduce now if the writers are closed, else in a background thread once
        ``ready()`` holds and they are. Returns the outcome when it ran inline, else None."""
        if self._finishing:
            return self.outcome
        self._finishing = True
        if training_failed:
            return self._settle(JobOutcome(JobCode.TRAINING_FAILED, self.logdir,
                                           reason=f"training did not finish ({training_failed}); run left as it was"))
        try:
            inline = not defer and ready() and not self._still_open()
        except Exception as e:  # never into the training job
            return self._settle(JobOutcome(JobCode.ERROR, self.logdir, reason=f"{type(e).__name__}: {e}"))
        if inline:
            return self._run()
        log.info("footprint: waiting for the job's writers to close before reducing %s", self.logdir)
        self._thread = threading.Thread(target=self._wait_then_run, args=(ready,),
                                        name="tb-footprint-reduce", daemon=False)
        self._thread.start()
        return None

    def error(self, reason: str) -> JobOutcome:
        """End without reducing: the integration could not work out what to reduce."""
        self._finishing = True
        return self._settle(JobOutcome(JobCode.ERROR, self.logdir, reason=reason))

    def wait(self, timeout: Optional[float] = None) -> Optional[JobOutcome]:
        """The outcome, once the reduction (inline or in the background) has ended."""
        self._done.wait(timeout)
        return self.outcome

    def _wait_then_run(self, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.close_timeout
        try:
            while True:
                still = None
                if ready():
                    still = self._still_open()
                    if not still:
                        break
                if time.monotonic() > deadline:
                    what = ", ".join(os.path.relpath(p, self.logdir) for p in (still or [])[:5]) or \
                        "the framework had not finished"
                    self._settle(JobOutcome(JobCode.WRITERS_OPEN, self.logdir, reason=(
                        f"still open for writing after {self.close_timeout:g} s ({what}); "
                        "run left as it was")))
                    return
                time.sleep(_POLL_S)
        except Exception as e:
            self._settle(JobOutcome(JobCode.ERROR, self.logdir, reason=f"{type(e).__name__}: {e}"))
            return
        self._run()

    def _run(self) -> JobOutcome:
        try:
            out = self._reduce()
        except Exception as e:  # a failure never raises into the training job
            out = JobOutcome(JobCode.ERROR, self.logdir, reason=f"{type(e).__name__}: {e}")
        return self._settle(out)

    def _reduce(self) -> JobOutcome:
        if not self.logdir:
            raise ValueError("no logdir: pass logdir= (the folder TensorBoard is started on)")
        if not os.path.isdir(self.logdir):
            raise NotADirectoryError(f"logdir {self.logdir} is not a directory")
        if not self.job_dirs:
            raise ValueError("no log directory of the job's writers was found; pass job_dirs=")
        for d in self.job_dirs:
            if not _within(d, self.logdir):
                raise ValueError(f"the job writes to {d}, which is not inside the logdir {self.logdir}")
        own = self.own_files()
        if not own:
            return JobOutcome(JobCode.NO_RUNS, self.logdir, reason="the job wrote no file under "
                              + ", ".join(self.job_dirs))
        closed = {os.path.relpath(p, self.logdir).replace(os.sep, "/"): st.st_mtime for p, st in own.items()}
        fp = api.scan(self.logdir, backup_dir=self.backup_dir, write_cache=False)
        runs = sorted({r.name for r in fp.runs if r.name != api.UNATTRIBUTED
                       and any(f.path in closed for f in r.files)})
        if not runs:
            return JobOutcome(JobCode.NO_RUNS, self.logdir, closed_files=closed,
                              reason="the job's files belong to no run of the logdir")
        report = api.reduce_logdir(
            self.logdir, backup_dir=self.backup_dir, policy=self.policy, dry_run=self.dry_run,
            runs=runs, quiet_period=self.quiet_period, closed_files=closed,
            verify_backends=self.verify_backends, timeout=self.timeout)
        return JobOutcome(_code(report), self.logdir, runs=runs, closed_files=closed, report=report)

    def _settle(self, out: JobOutcome) -> JobOutcome:
        self.outcome = out
        _log_outcome(out)
        self._done.set()
        return out


class JobCallback:
    """What the framework callbacks share: the ``JobReducer`` they hold, its ``outcome`` and
    ``wait()``. Mixed in before the framework's own callback class."""

    job: JobReducer

    def _start_job(self, logdir: Optional[str], *, verify_backends: Optional[Sequence[str]] = None,
                   **kwargs) -> None:
        """Hold a ``JobReducer`` watching from now on (``verify_backends=None``: its default)."""
        extra = {"verify_backends": verify_backends} if verify_backends else {}
        self.job = JobReducer(logdir, **extra, **kwargs)

    @property
    def outcome(self) -> Optional[JobOutcome]:
        return self.job.outcome

    def wait(self, timeout: Optional[float] = None) -> Optional[JobOutcome]:
        """The outcome once the reduction ended (it may still be waiting for the writers)."""
        return self.job.wait(timeout)


def _within(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _code(report: "api.ReduceReport") -> JobCode:
    if report.dry_run:
        return JobCode.PLANNED
    # runs the policy has nothing for are "skipped" by the engine too; they do not count here
    acted = {rp.run for rp in report.plan.runs if rp.actions}
    statuses = [o.status for o in report.outcomes if o.run in acted]
    if not statuses:
        return JobCode.NOTHING_TO_DO
    if any(s in (Outcome.FAILED, Outcome.ROLLED_BACK) for s in statuses):
        return JobCode.FAILED
    if all(s == Outcome.VERIFIED for s in statuses):
        return JobCode.REDUCED
    return JobCode.SKIPPED


def _log_outcome(out: JobOutcome) -> None:
    level = logging.INFO if out.ok else logging.WARNING
    head = f"footprint: {out.code}"
    if out.runs:
        head += f" for {', '.join(out.runs)} in {out.logdir}"
    if out.reason:
        head += f": {out.reason}"
    lines = [head]
    rep = out.report
    if rep is not None:
        by_run = {o.run: o for o in rep.outcomes}
        for rp in rep.plan.runs:
            o = by_run.get(rp.run)
            status = o.status if o else "skipped"
            code = (o.code if o else None) or rp.code
            line = f"  {rp.run}: {status}" + (f" [{code}]" if code else "")
            if rep.dry_run and not rp.skipped:
                line += f", would free {rp.removable_bytes} of {rp.bytes_before} bytes"
            elif o is not None and o.status == Outcome.VERIFIED:
                line += f", {o.bytes_before} -> {o.bytes_after} bytes (op {o.op_id})"
            reason = (o.reason if o else None) or rp.skipped
            if reason:
                line += f" ({reason})"
            lines.append(line)
            if rep.dry_run and not rp.skipped:
                lines += [f"    {a.kind} {a.path}: {a.reason}" for a in rp.actions]
                lines += [f"    = {x}" for x in rp.fidelity]
        if rep.dry_run:
            lines.append("  dry run: nothing was changed; pass dry_run=False to reduce")
    log.log(level, "\n".join(lines))


@contextlib.contextmanager
def reduce_when_done(logdir: str, policy="lossless", *, dry_run: bool = True,
                     job_dirs: Optional[Iterable[str]] = None, backup_dir: Optional[str] = None,
                     quiet_period: float = api.DEFAULT_QUIET_PERIOD, close_timeout: float = 120.0,
                     verify_backends: Sequence[str] = api.DEFAULT_BACKENDS) -> Iterator[JobReducer]:
    """For hand-written training loops: when the block ends, reduce the runs the block wrote.

    ``logdir`` is the folder TensorBoard is started on; ``job_dirs`` (default: the logdir) are
    the writers' log directories. Close your writers and profilers inside the block; if one is
    still open when the block ends, the reduction waits for it in a background thread (up to
    ``close_timeout`` s). If the block raises, nothing is reduced and the exception propagates;
    a failing reduction never raises. ``job.wait()`` returns the ``JobOutcome``.
    """
    job = JobReducer(logdir, job_dirs=list(job_dirs) if job_dirs else [logdir], policy=policy,
                     dry_run=dry_run, backup_dir=backup_dir, quiet_period=quiet_period,
                     close_timeout=close_timeout, verify_backends=verify_backends)
    try:
        yield job
    except BaseException as e:
        job.finish(training_failed=f"{type(e).__name__}: {e}")
        raise
    job.finish()
