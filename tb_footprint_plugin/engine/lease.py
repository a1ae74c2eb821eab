"""Leases on run locks: who holds a run, until when — for filesystems where ``flock`` is not enough.

On a local filesystem the run lock's ``flock`` dies with its process, so a killed worker's run
is free at once. On NFS and Lustre ``flock`` may be local to one client or not enforced at all,
so the holder of a run lock also writes a lease beside it (``<state>/locks/run-<hash>.lease``):
``{run, host, pid, shard, started, renewed, expires, token}``, renewed every third of the lease
by a background thread while the lock is held, removed when it is released.

Another worker that gets the ``flock`` still leaves the run alone while the lease is live:

* same host: live while the holder's process exists — its pid, with the same start time (a
  dead holder's lease is stale at once, also when its pid was reused since);
* other host: live until ``expires``, and after that still live while the run's journal shows
  progress within the last lease period (a holder whose renewals stall but whose transaction
  still writes its journal is not robbed).

These rules are written once, ``holder_gone``, for both engines: a folder's run lock
(``journal.RunLock``: this file, progress read from the run's journal files) and a bucket's
(``bucket_lease.ObjectRunLock``: the lock object itself carries the lease, progress read from its
operation's journal object). Both are a ``RunLease`` (acquire, still_held, release); a lock not
taken is a ``LockRefused``, coded ``Skip.LOCKED`` and naming its holder.

A stale lease is taken over: the new holder writes its own lease and reads it back to check
that its token won (two takers racing on NFS: the last rename wins, the loser skips the run).
The lease length is ``DEFAULT_LEASE_S`` seconds (``TB_FOOTPRINT_LEASE_SECONDS`` or
``configure``). Leases are untrusted input: a malformed one is treated as absent.
"""
from __future__ import annotations

import abc
import contextlib
import json
import math
import os
import socket
import threading
import time
import uuid
from typing import Callable, Dict, List, Optional

from tb_footprint_plugin.codes import Code, Finding, Skip
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.private import check_parent, is_ours, open_private
from tb_footprint_plugin.storage.regular import open_regular, open_regular_at

DEFAULT_LEASE_S = 120.0
#: the longest a lease may claim past its last renewal, and a renewal past now: a lease read
#: back with more (a host whose clock was years ahead, a hand-edited file) is read as ending
#: there, so no lease can keep a run locked for longer than a day after its holder stopped
#: renewing it; ``configure`` refuses longer leases
MAX_LEASE_S = 86400.0
_lease_s = min(float(os.environ.get("TB_FOOTPRINT_LEASE_SECONDS") or DEFAULT_LEASE_S), MAX_LEASE_S)
_shard: Optional[str] = None
_held: Dict[str, dict] = {}  # lease path -> the lease this process holds
_mu = threading.Lock()
_renewer: Optional[threading.Thread] = None
HOST = socket.gethostname()


_KEEP = object()


def configure(lease_seconds: Optional[float] = None, shard=_KEEP) -> None:
    """Set the lease length and the shard label ("I/N", or None for an unsharded reduction)
    written into this process's leases, locks and records; either one left out stays as it is."""
    global _lease_s, _shard
    if lease_seconds is not None:
        if not (isinstance(lease_seconds, (int, float)) and math.isfinite(lease_seconds) and lease_seconds > 0):
            raise ValueError(f"lease of {lease_seconds!r} seconds: must be a positive number")
        if lease_seconds > MAX_LEASE_S:  # others read a longer one as ending a day after its renewal
            raise ValueError(f"lease of {lease_seconds!r} seconds: at most {MAX_LEASE_S:.0f} (a day)")
        _lease_s = float(lease_seconds)
    if shard is not _KEEP:
        _shard = shard


def lease_seconds() -> float:
    return _lease_s


def shard_label() -> Optional[str]:
    """The shard ("I/N") this process works on, as its leases, locks and records name it."""
    return _shard


def _write(path: str, lease: dict) -> None:
    """Replace the lease file in one rename. Not fsynced, on purpose: a lease only matters while
    its holder lives, and one a crash left torn or empty reads as absent, i.e. stale — which is
    what the lease of a crashed holder is (this saves two fsyncs per run lock)."""
    tmp = f"{path}.{HOST}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        # a predictable name: a symlink planted there is set aside, never written through; a
        # leftover (perhaps hard-linked by a backup tool since) is dropped, never truncated in place
        check_parent(tmp)  # the folder is ours before anything in it is removed
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(lease, f, sort_keys=True)
        fsops.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def lease_doc(run: str, now: float, **fields) -> dict:
    """The lease document of ``run`` taken at ``now`` by this process, the one shape of both run
    locks: ``{run, host, pid, pid_start, shard, renewed, expires}`` and an implementation's own
    ``fields`` (a folder's ``started`` and ``token``, a bucket lock's ``op`` and ``at``)."""
    return {"run": run, "host": HOST, **me(), "shard": _shard, "renewed": now, "expires": now + _lease_s, **fields}


def renewed(lease: dict, now: float) -> dict:
    """``lease`` pushed forward one lease length from ``now`` (what every renewal writes)."""
    return dict(lease, renewed=now, expires=now + _lease_s)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def well_formed(lease) -> bool:
    """A lease read back (untrusted) has the fields ``holder_gone`` reads, with their types:
    ``host`` a string, ``pid`` an integer, ``expires`` a finite number. One that is not is read
    as held by nobody."""
    return (isinstance(lease, dict) and isinstance(lease.get("host"), str) and isinstance(lease.get("pid"), int)
            and not isinstance(lease.get("pid"), bool) and _number(lease.get("expires")))


def read_lease(path: str, dir_fd: Optional[int] = None) -> Optional[dict]:
    """The lease at ``path`` (with ``dir_fd``: the entry ``path`` of that folder) if well formed,
    else None (absent, torn or hostile)."""
    try:
        # never through a symlink, never a FIFO
        with (open_regular(path) if dir_fd is None else open_regular_at(dir_fd, path)) as f:
            d = jsondoc.loads(f.read(64 * 1024))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict):
        return None
    # a folder's lease also names its token (whose lease won a race) and when it was renewed
    ok = well_formed(d) and isinstance(d.get("token"), str) and _number(d.get("renewed"))
    return d if ok else None


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks since boot: ``/proc/<pid>/stat`` field 22);
    None where that cannot be read. With the pid it names one process for the life of the host:
    a pid is reused once its process is gone (32,768 of them by default), a start time is not."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            data = f.read(4096)
        # the command name (field 2) may hold spaces and parentheses: count after the last ')'
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_me: Dict[int, Optional[int]] = {}


def me() -> dict:
    """This process as locks, leases and ledger entries name it: ``{pid, pid_start}``."""
    pid = os.getpid()  # looked up each time: a forked child is another process
    if pid not in _me:
        _me[pid] = process_start(pid)
    return {"pid": pid, "pid_start": _me[pid]}


def holder_alive(pid: int, pid_start=None) -> bool:
    """Whether the process that wrote ``pid`` (and, where recorded, its start time) on this host
    still runs. A live pid with another start time is a reuse of a dead holder's pid."""
    if not _pid_alive(pid):
        return False
    if isinstance(pid_start, int) and not isinstance(pid_start, bool):
        now = process_start(pid)
        return now is None or now == pid_start
    return True


@contextlib.contextmanager
def _own_folder(path: str):
    """A read fd of the folder ``path`` and its entries' names when it is a real folder of ours,
    else None: never through a symbolic link planted at its name (the journal and lock folders
    are untrusted input; review R17 F3: ``status`` read leases through a planted ``locks`` link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield None
        return
    try:
        yield (fd, os.listdir(fd)) if is_ours(os.fstat(fd)) else None
    finally:
        os.close(fd)


def journal_progress(journal_dir: str, run: str) -> Optional[float]:
    """Newest modification time of an unfinished journal of ``run`` (None when it has none)."""
    newest = None
    with _own_folder(journal_dir) as listed:
        for n in listed[1] if listed else ():
            if not n.endswith(".jsonl") or n.startswith("."):
                continue
            try:
                with open_regular_at(listed[0], n) as f:  # a FIFO planted as a journal never hangs this
                    first = jsondoc.loads(f.readline(1 << 20) or b"null")
                    mt = os.fstat(f.fileno()).st_mtime
            except (OSError, ValueError):
                continue
            if isinstance(first, dict) and first.get("run") == run:
                newest = mt if newest is None else max(newest, mt)
    return newest


def holder_gone(lease: dict, progress: Callable[[], Optional[float]], *, ours_live: bool = False,
                now: Optional[float] = None) -> bool:
    """Whether the holder of a well-formed ``lease`` (``host``, ``pid``, ``expires``; ``pid_start``
    where recorded) is gone, so its lock may be taken over: THE staleness rule of every run lock.
    Same host: its process no longer runs (a pid reused since counts as gone); this very process:
    ``ours_live`` (whether it still runs what the lease was taken for). Other host: the lease
    expired and ``progress()`` (the newest write of the holder's journal, None when there is none;
    asked only then, so a live lease costs no read) is older than one lease."""
    now = time.time() if now is None else now
    if lease["host"] == HOST:
        if lease["pid"] == os.getpid():
            return not ours_live
        return not holder_alive(lease["pid"], lease.get("pid_start"))
    if now < effective_expiry(lease, now):
        return False
    written = progress()
    return written is None or written <= now - _lease_s


def effective_expiry(lease: dict, now: float) -> float:
    """When a well-formed ``lease`` of another host ends: its ``expires``, but never more than
    ``MAX_LEASE_S`` past its renewal: a clock years ahead or a hand-edited date cannot lock a run
    for good. A renewal dated more than ``MAX_LEASE_S`` ahead of now says nothing of when its
    holder last wrote: such a lease is read as ended, and ``holder_gone`` then asks the holder's
    journal whether it still writes (a live holder keeps its run)."""
    renewed_at = lease.get("renewed")
    if not _number(renewed_at):
        return lease["expires"]  # an older shape: its own date, as before
    if renewed_at > now + MAX_LEASE_S:
        return now
    return min(lease["expires"], renewed_at + MAX_LEASE_S)


def until_text(expires: float, now: Optional[float] = None) -> str:
    """When a lease ends, as a person reads it: the time of day if today, else the date too."""
    now = time.time() if now is None else now
    if not math.isfinite(expires) or abs(expires) > 1e11:
        return "an impossible date"
    same_day = time.localtime(expires)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", time.localtime(expires))


def live_holder(lease: Optional[dict], journal_dir: str, run: str, now: Optional[float] = None) -> bool:
    """Whether ``lease`` still belongs to a live holder other than this process (``holder_gone``,
    progress from the run's journal files)."""
    if lease is None:
        return False
    return not holder_gone(lease, lambda: journal_progress(journal_dir, run), now=now)


def live_leases(lock_dir: str, journal_dir: str, now: Optional[float] = None) -> List[dict]:
    """The runs another live process holds now, read from the lease files in ``lock_dir`` (a
    folder's ``<state>/locks``) by ``live_holder``'s rule; each ``{run, host, pid, shard, until,
    code, detail}`` (``code``: ``Finding.RUN_LOCKED``; ``detail``: "being changed by pid … on host …
    until …"), sorted by run. Changes nothing and takes no lock: what ``status`` says of runs under
    way elsewhere. Leases are untrusted: one malformed, naming no run, or through a link is no one's,
    and a lock folder that is a link, or not ours, holds none."""
    now = time.time() if now is None else now
    out = []
    with _own_folder(lock_dir) as listed:
        leases = [read_lease(n, listed[0]) for n in sorted(listed[1] if listed else ())
                  if n.endswith(".lease") and not n.startswith(".")]
    for held in leases:
        if held is None or not isinstance(held.get("run"), str):
            continue
        if held["host"] == HOST and held["pid"] == os.getpid():
            continue  # this process's own
        if not live_holder(held, journal_dir, held["run"], now=now):
            continue
        shard = held.get("shard") if isinstance(held.get("shard"), str) else None
        until = until_text(effective_expiry(held, now), now)
        out.append({"run": held["run"], "host": held["host"], "pid": held["pid"], "shard": shard, "until": until,
                    "code": Finding.RUN_LOCKED,
                    "detail": f"being changed by pid {held['pid']} on host {held['host']}"
                              + (f" (shard {shard})" if shard else "") + f", lease until {until}"})
    return sorted(out, key=lambda d: d["run"])


class LockRefused(RuntimeError):
    """A run lock that was not taken: another process holds the run. ``code`` is
    ``Skip.LOCKED`` (what a caller branches on), ``holder`` names the holder where known
    (``"HOST pid PID ..."``), the message says it in prose."""

    code: Code = Skip.LOCKED

    def __init__(self, message: str, holder: Optional[str] = None):
        super().__init__(message)
        self.holder = holder


class RunLease(abc.ABC):
    """The one run-lock interface of both engines: ``acquire`` takes the run (``LockRefused``
    when a live holder has it; a holder gone by ``holder_gone`` is taken over) and from then on
    renews its lease in the background; ``still_held`` says whether it is still ours (a renewal
    that found it taken over says no); ``release`` stops the renewal and gives the lock up.
    Implementations: ``journal.RunLock`` (a folder: ``flock`` + a lease file beside it) and
    ``bucket_lease.ObjectRunLock`` (a bucket: the lock object carries the lease, renewed by
    conditional writes), chosen by the store's ``Capabilities`` (``bucket_lease.lock_class``)."""

    run: str

    @abc.abstractmethod
    def acquire(self) -> "RunLease":
        """Take the run (``LockRefused`` naming the holder when another live process has it)."""

    @abc.abstractmethod
    def still_held(self) -> bool:
        """Whether this process still holds the lock (False once another took it over)."""

    @abc.abstractmethod
    def release(self) -> object:
        """Stop renewing and give the lock up (what an implementation leaves its caller to
        remove, e.g. a bucket lock's version to delete it at with its journal, else None)."""

    def __enter__(self) -> "RunLease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def take(path: str, run: str) -> bool:
    """Write this process's lease for ``run`` at ``path``; True if it is ours on reading back."""
    now = time.time()
    lease = lease_doc(run, now, started=now, token=uuid.uuid4().hex)
    _write(path, lease)
    back = read_lease(path)
    if not back or back["token"] != lease["token"]:
        return False
    with _mu:
        _held[path] = lease
        _start_renewer()
    return True


def holds(path: str) -> bool:
    """Whether this process holds the lease at ``path`` (taken, not dropped, not found taken over
    by a renewal)."""
    with _mu:
        return path in _held


def drop(path: str) -> None:
    """Release the lease at ``path`` if it is still ours."""
    with _mu:
        mine = _held.pop(path, None)
    if mine is None:
        return
    cur = read_lease(path)
    if cur is not None and cur["token"] == mine["token"]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def renew_all() -> None:
    """Push forward the expiry of every held lease renewed a third of a lease ago or more (a lease someone else took over is given up)."""
    with _mu:
        items = list(_held.items())
    now = time.time()
    for path, lease in items:
        if now - lease["renewed"] < _lease_s / 3:
            continue
        cur = read_lease(path)
        if cur is None or cur["token"] != lease["token"]:
            with _mu:
                _held.pop(path, None)
            continue
        lease = renewed(lease, now)
        with contextlib.suppress(OSError):
            _write(path, lease)
            with _mu:
                if path in _held:
                    _held[path] = lease


def _start_renewer() -> None:
    global _renewer
    if _renewer is not None and _renewer.is_alive():
        return

    def loop() -> None:
        while True:  # wakes at least every second, so a shorter lease configured later is honoured
            time.sleep(min(1.0, max(0.05, _lease_s / 6)))
            renew_all()

    _renewer = threading.Thread(target=loop, name="tb-footprint-lease", daemon=True)
    _renewer.start()


__all__ = ["DEFAULT_LEASE_S", "MAX_LEASE_S", "effective_expiry", "until_text", "HOST", "LockRefused", "RunLease", "configure", "drop", "holder_gone", "holds",
           "journal_progress", "lease_doc", "lease_seconds", "live_holder", "read_lease", "renew_all", "renewed", "take",
           "well_formed"]
