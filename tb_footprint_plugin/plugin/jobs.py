"""Background jobs for the tab: one worker thread per job, progress, cancel, one job per run.

A job wraps one call into the library (``api.reduce_logdir`` for some runs, ``api.restore`` of
one operation). The request that starts it returns at once with the job id; the tab polls
``/job`` for progress and the outcome. Cancelling sets the job's ``CancelToken``, which the
transaction honours up to its commit point (the run is then rolled back to its exact bytes).
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
import traceback
from typing import Callable, Dict, Iterable, List, Optional

from tb_footprint_plugin.codes import Failure

logger = logging.getLogger("tb_footprint_plugin.plugin")

#: steps of a reduction before its commit point: a cancel is still honoured there (a purge's
#: "purge", reported right before its intent, is past it)
CANCELLABLE_STEPS = ("queued", "waiting", "starting", "backup", "stage", "verify",
                     "hash",  # a retirement hashes every file before anything moves
                     "check")  # a restore reads its remote backups back before any original goes back
MAX_FINISHED = 100
#: run names a job's dict carries (the first ones, and the runs in progress besides): a job over
#: 100,000 runs is polled every 700 ms and must not send 100,000 names each time
RUNS_SAMPLE = 50
MOVING_LISTED = 10


class Busy(Exception):
    """A job already runs on one of the requested runs."""

    def __init__(self, runs: List[str], job_id: str):
        super().__init__(f"a job ({job_id}) is already running on {', '.join(runs)}")
        self.runs = runs
        self.job_id = job_id


def mark_stopped_by_cancel(job: "Job") -> None:
    """Mark each outcome the user's Cancel stopped (``cancelled: true``): code ``interrupted`` in a
    job whose cancel was asked for. The run is as it was (rolled back, or nothing begun), which the
    tab shows without the red of a failure; its status and code stay what the engine said."""
    if not job.cancel_requested or not isinstance(job.result, dict):
        return
    for o in job.result.get("outcomes") or []:
        if isinstance(o, dict) and o.get("code") == Failure.INTERRUPTED:
            o["cancelled"] = True


class Job:
    """State of one background job; ``to_dict`` is what ``/job`` serves."""

    def __init__(self, kind: str, runs: List[str], params: dict, cancel_token=None, cancellable: bool = True):
        self.id = secrets.token_hex(6)
        self.kind = kind
        self.runs = list(runs)
        self.params = dict(params)
        self.state = "queued"  # queued | running | done | failed | cancelled
        self.created = time.time()
        self.started: Optional[float] = None
        self.finished: Optional[float] = None
        self.cancel_token = cancel_token
        self.cancellable = cancellable and cancel_token is not None
        self.cancel_requested = False
        self.step = "queued"
        self.fraction = 0.0
        self.per_run: Dict[str, dict] = {r: {"step": "queued", "fraction": 0.0} for r in self.runs}
        # kept as runs move, so a report and a poll cost the same over 10 runs or 100,000
        self._sum = 0.0  # of per_run fractions
        self._unfinished = len(self.per_run)  # runs below fraction 1
        self._past_commit: set = set()  # unfinished runs at a step past the commit point
        self._moving: Dict[str, None] = {}  # unfinished runs past "queued", in order of start
        self.result: Optional[dict] = None
        self.error: Optional[str] = None
        self._lock = threading.Lock()
        self.thread: Optional[threading.Thread] = None

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    def _set_run(self, run: str, step: str, fraction: float) -> None:
        old = self.per_run[run]
        self.per_run[run] = {"step": step, "fraction": fraction}
        self._sum += fraction - old["fraction"]
        self._unfinished += (fraction < 1.0) - (old["fraction"] < 1.0)
        if fraction < 1.0 and step not in CANCELLABLE_STEPS:
            self._past_commit.add(run)
        else:
            self._past_commit.discard(run)
        if fraction < 1.0 and step != "queued":
            self._moving.setdefault(run, None)
        else:
            self._moving.pop(run, None)
        self.fraction = self._sum / (len(self.per_run) or 1)

    def report(self, run: Optional[str], step: str, fraction: float) -> None:
        """Progress callback: ``(run, step, fraction of that run)``."""
        with self._lock:
            if run is not None and run in self.per_run:
                self._set_run(run, step, max(0.0, min(1.0, float(fraction))))
                self.step = step
            elif run is None:
                self.step = step
                if not self.per_run:
                    self.fraction = max(0.0, min(1.0, float(fraction)))

    def finish_run(self, run: str, status: str) -> None:
        with self._lock:
            if run in self.per_run:
                self._set_run(run, status, 1.0)

    def _cancellable(self) -> bool:
        """(Under ``_lock``.) A job of runs: while one is unfinished and none is past its commit
        point; a job of no runs (a purge): while its own step is one before the commit point."""
        if not (self.cancellable and self.active and not self.cancel_requested):
            return False
        if self.per_run:
            return not self._past_commit and self._unfinished > 0
        return self.step in CANCELLABLE_STEPS

    def request_cancel(self) -> bool:
        """Cancel if still cancellable, in one step under the lock the progress reports take: a
        step past the commit point reported before (the library reports it right before its last
        cancel check) refuses the cancel; a cancel accepted before it is seen by that check.
        False if refused."""
        with self._lock:
            if not self._cancellable():
                return False
            self.cancel_requested = True
            self.cancel_token.cancel()
            return True

    def to_dict(self) -> dict:
        """What ``/job`` serves, bounded whatever the number of runs: ``run_count``, the first
        ``RUNS_SAMPLE`` names (``runs_truncated`` says when there are more), ``runs_done``, and
        ``per_run`` for those and for up to ``MOVING_LISTED`` runs in progress."""
        with self._lock:
            cancellable = self._cancellable()
            sample = self.runs[:RUNS_SAMPLE]
            moving = []
            for r in self._moving:  # insertion order: the runs started first
                if len(moving) >= MOVING_LISTED:
                    break
                moving.append(r)
            listed = dict.fromkeys(sample + moving)
            return {
                "id": self.id,
                "kind": self.kind,
                "runs": sample,
                "run_count": len(self.runs),
                "runs_truncated": len(self.runs) > len(sample),
                "runs_done": len(self.per_run) - self._unfinished,
                "params": dict(self.params),
                "state": self.state,
                "step": self.step,
                "fraction": round(self.fraction, 4),
                "per_run": {k: dict(self.per_run[k]) for k in listed if k in self.per_run},
                "created": self.created,
                "started": self.started,
                "finished": self.finished,
                "cancellable": cancellable,
                "cancel_requested": self.cancel_requested,
                "result": self.result,
                "error": self.error,
            }


class JobManager:
    """Starts jobs (each on its own thread), refuses a second job on a busy run, keeps results."""

    def __init__(self, *, before_start: Optional[Callable[[], None]] = None,
                 after_finish: Optional[Callable[[Job], None]] = None):
        self._jobs: Dict[str, Job] = {}
        self._order: List[str] = []
        self._lock = threading.Lock()
        self._before_start = before_start
        self._after_finish = after_finish

    def busy_runs(self) -> Dict[str, str]:
        """run name → id of the active job on it."""
        with self._lock:
            return {r: j.id for j in self._jobs.values() if j.active for r in j.runs}

    def any_active(self) -> bool:
        with self._lock:
            return any(j.active for j in self._jobs.values())

    def submit(self, job: Job, work: Callable[[Job], dict]) -> Job:
        """Start ``work(job)`` on a new thread, unless one of ``job.runs`` is busy (``Busy``)."""
        with self._lock:
            for other in self._jobs.values():
                if other.active:
                    clash = sorted(set(other.runs) & set(job.runs))
                    if clash or (other.kind == "purge" or job.kind == "purge"):
                        raise Busy(clash or list(other.runs), other.id)
            self._jobs[job.id] = job
            self._order.append(job.id)
            self._trim()
        job.thread = threading.Thread(target=self._run, args=(job, work), daemon=True,
                                      name=f"footprint-{job.kind}-{job.id}")
        job.thread.start()
        return job

    def _trim(self) -> None:
        finished = [i for i in self._order if not self._jobs[i].active]
        for i in finished[: max(0, len(finished) - MAX_FINISHED)]:
            self._order.remove(i)
            del self._jobs[i]

    def _run(self, job: Job, work: Callable[[Job], dict]) -> None:
        final = "failed"
        try:
            if self._before_start is not None:
                job.report(None, "waiting", 0.0)
                self._before_start()
            job.started = time.time()
            job.state = "running"
            job.report(None, "starting", 0.0)
            job.result = work(job)
            mark_stopped_by_cancel(job)
            if job.cancel_requested and job.result and not job.result.get("committed_any", True):
                final = "cancelled"
            else:
                final = "done"
        except Exception as e:  # a library bug or an unexpected error: say so, keep serving
            logger.error("Footprint job %s (%s) failed:\n%s", job.id, job.kind, traceback.format_exc())
            job.error = f"{type(e).__name__}: {e}"
            final = "failed"
        finally:
            # the hook (a rescan) runs before the job reads as finished, so whoever sees the
            # outcome also sees the scan marked out of date
            if self._after_finish is not None:
                try:
                    self._after_finish(job)
                except Exception:
                    logger.exception("Footprint: after-job hook failed")
            job.finished = time.time()
            with job._lock:
                job.fraction = 1.0
                job.state = final

    def get(self, job_id: str) -> Optional[Job]:
        with self._lock:
            return self._jobs.get(job_id)

    def list(self) -> List[Job]:
        with self._lock:
            return [self._jobs[i] for i in reversed(self._order)]

    def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        if job.active and job.cancel_token is not None:
            with job._lock:
                job.cancel_requested = True
                job.cancel_token.cancel()
        return job

    def wait_all(self, timeout: float = 60.0, jobs: Optional[Iterable[Job]] = None) -> bool:
        """Join the threads of ``jobs`` (default: all); True if they all finished (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        for j in list(jobs) if jobs is not None else self.list():
            if j.thread is not None:
                j.thread.join(max(0.0, deadline - time.monotonic()))
                if j.thread.is_alive():
                    return False
        return True
