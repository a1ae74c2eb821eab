"""Event files of a big local logdir parsed on the machine's other cores (issue #28 item 1).

A cold scan of many small runs is mostly ``eventfile.event_file_stats`` (~0.8 ms CPU for a 43 kB
event file), one file after another on one core, where TensorBoard's data server loads the same
logdir on all of them. ``ParsePool`` hands the event files a scan must read to worker processes,
in order, a bounded number at a time, and gives back their stats in the order the scan asked.

* Only when it pays: a scan parses its first ``START_AFTER`` files itself (a logdir of a thousand
  runs never starts a process), and then starts one worker for each core the machine left idle
  while it parsed the second half of them (``/proc/stat``, read only by a scan that gets that
  far; elsewhere the load average): none on one CPU, none on a busy machine.
* The workers are fresh interpreters started isolated (``python -I``: never the current folder,
  PYTHON* variables or user site-packages on their path; review R11 G8), never a fork of the
  scanning process (TensorBoard's, with its threads and locks) and never a re-import
  of the caller's ``__main__``. They read the files the walk found, by the paths it found,
  exactly as the scan would (``event_file_stats``: no link followed that the scan would not
  follow), and write nothing: each answers one JSON line of ``EventFileStats.to_dict()``.
* Memory stays flat: at most ``IN_FLIGHT`` files a worker are asked ahead, at most ``RUNS_AHEAD``
  runs held; answers are taken in the order asked (each worker answers its requests in order).
* The scanning process is never idle and never waits: it parses the files no worker has room
  for as it walks, and a file not answered yet when its run's turn comes (the workers started
  late or the machine is busy) it parses itself, the worker's answer dropped when it comes.
* Nothing is lost if a worker fails: a worker that dies or answers anything else than a stats
  document is let go, and that file and every later one are parsed in the scanning process, so
  the scan's result is the same.

``TB_FOOTPRINT_SCAN_WORKERS`` sets the number of workers (0: none), whatever the load.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections import deque
from typing import Callable, Deque, Dict, Iterator, List, Optional, Tuple

from tb_footprint_plugin.scan import passes
from tb_footprint_plugin.scan.discovery import FoundFile, FoundRun, display
from tb_footprint_plugin.storage.spawn import python_child, python_env

__all__ = ["ParsePool", "START_AFTER", "parse_ahead", "workers_wanted", "main"]

#: event files a scan parses itself before it starts the pool (~0.8 s of parsing; a worker's
#: start is ~0.25 s CPU of imports, paid back only by a few thousand files more)
START_AFTER = 1000
#: files asked of one worker and not yet taken; beyond, the scanning process parses them
IN_FLIGHT = 8
#: bytes of requests a worker may have unanswered (its input pipe holds 64 kB)
PIPE_ROOM = 32 << 10
#: at most this many workers, whatever the machine
MAX_WORKERS = 8
#: runs a scan holds ahead of the one it makes (``parse_ahead``), whatever they hold
RUNS_AHEAD = 1024
ENV = "TB_FOOTPRINT_SCAN_WORKERS"
#: a file not answered when its run's turn comes is parsed by the scan, not waited for
STEAL = True
#: the module whose ``main`` a worker runs
WORKER_MODULE = "tb_footprint_plugin.scan.parse_pool"


def workers_wanted(idle: Optional[float] = None) -> int:
    """Workers a big scan starts: ``TB_FOOTPRINT_SCAN_WORKERS`` if set, else one for each core
    left idle: ``idle`` cores measured while the scan went on (``cpu_ticks``), else the usable
    CPUs the 1-minute load average leaves idle. None on one CPU (the scan would share its core)."""
    if not sys.executable or getattr(sys, "frozen", False):
        return 0  # no interpreter to start
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            return max(0, min(int(raw), MAX_WORKERS))
        except ValueError:
            return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if idle is None:
        try:
            idle = cpus - os.getloadavg()[0]
        except OSError:
            idle = float(cpus)
    # workers on cores others keep busy only share them (measured at load 11 on 2 cores: the scan
    # of 1,000 runs took longer and 30% more CPU with 2 workers than alone)
    n = min(int(idle + 0.5), cpus - 1 if cpus > 2 else cpus, MAX_WORKERS)
    return n if cpus > 1 and n >= 1 else 0


def cpu_ticks() -> Optional[Tuple[int, int]]:
    """(idle, total) CPU ticks of the machine so far (``/proc/stat``), or None off Linux."""
    try:
        with open("/proc/stat", "rb") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        return ticks[3] + ticks[4], sum(ticks)  # idle + iowait, of user..steal
    except (OSError, ValueError, IndexError):
        return None


def idle_cores(since: Optional[Tuple[int, int]]) -> Optional[float]:
    """The cores the machine left idle on average since ``since`` (``cpu_ticks``): the scan's own
    core is busy then, so on a quiet machine this is every other one; None when unknown or the
    window was too short to tell (under ~0.2 s)."""
    now = cpu_ticks()
    if since is None or now is None:
        return None
    spent = now[1] - since[1]
    cores = os.cpu_count() or 1
    if spent < 20 * cores:
        return None
    return cores * (now[0] - since[0]) / spent


class _Worker:
    """One worker process; its answers read without blocking (``poll``) into ``answers``."""

    def __init__(self) -> None:
        # the worker imports this very package from where this process did (a checkout, a wheel),
        # never from the current folder (a shared logdir one may stand in, review R9 F1, R11 G8:
        # ``python -m`` and ``-c`` put it first on sys.path, so a planted tb_footprint_plugin/ or
        # json.py ran as the user): ``storage.spawn.python_child``, started in /, on this process's
        # own path, so numpy and google_crc32c are found where this process found them (a
        # PYTHONPATH of an HPC ``module load``, user site-packages: review R11's note on 5a25d36)
        self.proc = subprocess.Popen(
            python_child(WORKER_MODULE, "main"), cwd="/",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=python_env({ENV: "0"}), close_fds=True, bufsize=0)  # a worker never starts workers
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.pending = 0  # asked, not yet answered
        self.queued = 0  # bytes of those requests
        self.sizes: Deque[int] = deque()
        self.skip = 0  # answers to drop as they come: files the scan parsed itself meanwhile
        self.answers: Deque[bytes] = deque()
        self._part = b""
        self.gone = False

    def has_room(self, line: bytes) -> bool:
        # the requests not yet answered fit the pipe (64 kB) with room to spare, so writing one
        # never waits on a worker that waits on us to read its answers
        return self.pending < IN_FLIGHT and self.queued + len(line) <= PIPE_ROOM

    def ask(self, line: bytes) -> None:
        self.proc.stdin.write(line)
        self.pending += 1
        self.queued += len(line)
        self.sizes.append(len(line))

    def poll(self, wait: bool = False) -> None:
        """Read what the worker answered so far (``wait``: until there is an answer or it ended)."""
        while not self.gone:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                if not wait or self.answers:
                    return
                select.select([self.fd], [], [])
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.gone = True
                return
            lines = (self._part + chunk).split(b"\n")
            self._part = lines.pop()
            for line in lines:
                if self.skip:
                    self.skip -= 1
                    self._done()
                else:
                    self.answers.append(line)

    def _done(self) -> None:
        self.pending -= 1
        self.queued -= self.sizes.popleft()

    def ready(self) -> bool:
        """True when the oldest file asked and not taken is answered (or the worker is gone)."""
        if not self.answers:
            self.poll()
        return bool(self.answers) or self.gone

    def drop_next(self) -> None:
        """Forget the answer to the oldest file asked and not taken (the scan parsed it)."""
        self.skip += 1

    def answer(self) -> Optional[dict]:
        """The next answer (waiting for it), or None when the worker is gone or talks nonsense."""
        if not self.answers:
            self.poll(wait=True)
        if not self.answers:
            return None
        self._done()
        try:
            doc = json.loads(self.answers.popleft())
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ParsePool:
    """Event files asked in order (``ask``), stats given back in the same order (``take``).

    ``ask`` returns False when the file is not for the pool (before ``START_AFTER`` files, with
    no workers, when every worker has ``IN_FLIGHT`` files asked, or after a worker failed): the
    caller parses it itself. So the scanning process is never idle while the workers start or
    while the machine is busy: it does what they have no room for. Use as a context manager:
    the workers end with it."""

    def __init__(self, workers: Optional[int] = None, start_after: Optional[int] = None) -> None:
        self._want = workers  # None: decided when the pool starts (``workers_wanted``)
        self._start_after = START_AFTER if start_after is None else start_after
        # what the machine left idle while the scan parsed alone: measured from halfway to the
        # start (read there, not here: most scans never get that far, and each read of
        # /proc/stat is a system call a scan of a few runs paid for nothing)
        self._ticks: Optional[Tuple[int, int]] = None
        self._mark = self._start_after // 2 + 1
        self._seen = 0
        self._workers: List[_Worker] = []
        self._next = 0
        self._order: Deque[Tuple[_Worker, str, str, Optional[int]]] = deque()
        self._broken = False
        self.parsed = 0  # files the workers parsed
        self.stolen = 0  # files asked that the scan parsed itself, not to wait for them

    def __enter__(self) -> "ParsePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ask(self, path: str, name: str, size: Optional[int]) -> bool:
        """Hand ``path`` to a worker; False when the caller is to parse it itself."""
        self._seen += 1
        if self._seen == self._mark and self._want is None:
            self._ticks = cpu_ticks()
        if self._broken or self._seen <= self._start_after:
            return False
        if self._want is None:
            self._want = workers_wanted(idle_cores(self._ticks))
        if self._want < 1:
            return False
        if not self._workers:
            try:
                for _ in range(self._want):
                    self._workers.append(_Worker())
            except Exception:  # noqa: BLE001 - no workers (any start failure): the scan parses alone
                self._broken = True
                self.close()
                return False
        line = json.dumps([path, name, size]).encode("utf-8") + b"\n"
        for _ in range(len(self._workers)):
            w = self._workers[self._next % len(self._workers)]
            self._next += 1
            if w.has_room(line):
                break
        else:
            return False
        try:
            w.ask(line)
        except OSError:  # a worker gone: every later file is the scan's own
            self._broken = True
            return False
        self._order.append((w, path, name, size))
        return True

    def answered(self, count: int) -> bool:
        """True when the oldest ``count`` files asked are answered (``take`` will not parse)."""
        if self._broken or not count:
            return True
        need: Dict[int, int] = {}
        for i in range(count):
            w = self._order[i][0]
            need[id(w)] = need.get(id(w), 0) + 1
        for w in self._workers:
            n = need.get(id(w), 0)
            if n and len(w.answers) < n:
                w.poll()
                if len(w.answers) < n and not w.gone:
                    return False
        return True

    def take(self, steal: Optional[bool] = None):
        """The ``EventFileStats`` of the oldest file asked: its worker's answer, else (``steal``,
        default ``STEAL``: when it is not there yet; or when the worker failed) parsed here, the
        answer dropped."""
        from tb_footprint_plugin.scan.eventfile import EventFileStats, event_file_stats

        steal = STEAL if steal is None else steal
        w, path, name, size = self._order.popleft()
        if not self._broken and (not steal or w.ready()):
            doc = w.answer()
            if doc is not None:
                try:
                    stats = EventFileStats.from_dict(doc)
                    self.parsed += 1
                    return stats
                except (KeyError, TypeError, ValueError, AttributeError):
                    pass
            self._broken = True  # a worker gone or talking nonsense: the rest is the scan's own
        elif not self._broken:
            w.drop_next()
            self.stolen += 1
        return event_file_stats(path, display_name=name, size=size)

    def close(self) -> None:
        """End the workers (each exits once its input closes)."""
        workers, self._workers = self._workers, []
        for w in workers:
            w.close()


def parse_ahead(found: Iterator[FoundRun], pool: ParsePool, cached: Callable[[FoundFile], object],
                is_event: Callable[[FoundFile], bool]) -> Iterator[Tuple[FoundRun, Dict[str, tuple]]]:
    """``(run, ready)`` for each run of ``found``, in order. ``ready``: event file rel -> (stats,
    served by the cache): what ``cached`` serves, what ``pool``'s workers parsed (asked while they
    have room) and what this process parsed meanwhile (the files they had no room for, and any
    they had not answered when its run's turn came). At most ``RUNS_AHEAD`` runs are held. A file
    a reduce keeps its pass of (``passes.wanted``) is left to the caller."""
    window: Deque[Tuple[FoundRun, Dict[str, tuple], List[str]]] = deque()

    def finished(run: FoundRun, ready: Dict[str, tuple], asked: List[str]):
        for rel in asked:
            ready[rel] = (pool.take(), False)
        return run, ready

    for run in found:
        ready: Dict[str, tuple] = {}
        asked: List[str] = []
        for f in run.files:
            if not is_event(f):
                continue
            stats = cached(f)
            if stats is not None:
                ready[f.rel] = (stats, True)
            elif passes.wanted(f.abspath, f.size):
                continue
            elif pool.ask(f.abspath, display(f.rel), f.size):
                asked.append(f.rel)
            else:
                # imported only to parse here: the parser brings numpy, a cached run needs none
                from tb_footprint_plugin.scan.eventfile import event_file_stats

                ready[f.rel] = (event_file_stats(f.abspath, display_name=display(f.rel), size=f.size), False)
        window.append((run, ready, asked))
        # the oldest runs whose files are answered (their workers then have room again)
        while window and (len(window) > RUNS_AHEAD or pool.answered(len(window[0][2]))):
            yield finished(*window.popleft())
    while window:
        yield finished(*window.popleft())


def main(argv: Optional[List[str]] = None) -> int:
    """A worker: a JSON line ``[path, display name, size]`` in, a line of its stats out. ``argv``:
    none taken (``python_child`` passes the rest of its command line)."""
    from tb_footprint_plugin.scan.eventfile import event_file_stats

    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            path, name, size = json.loads(line)
            doc = event_file_stats(path, display_name=name, size=size).to_dict()
            answer = json.dumps(doc, separators=(",", ":"))
        except Exception as e:  # noqa: BLE001 - the scan parses this file itself and meets it there
            answer = json.dumps({"failed": type(e).__name__})
        out.write(answer.encode("utf-8") + b"\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
