"""Which processes on this machine hold a file open for writing.

A training job keeps its event file open and may log rarely, so a quiet mtime does not mean
nobody writes: its next record goes into whatever inode it has open. Before a file is
reduced we therefore ask the kernel. On Linux every process's open descriptors are visible
in ``/proc/<pid>/fd/<n>`` (a link that ``stat`` follows to the very inode, deleted or
renamed ones included) and their open flags in ``/proc/<pid>/fdinfo/<n>``.

Files are matched by ``(st_dev, st_ino)``, never by path: a writer holds an inode, whatever
name (or hard link, or none) it has now. A process we may not inspect (another user's, when
we are not root) or that vanished mid-look is not silently taken as harmless: it is counted
in ``uninspected`` so callers can say "cannot rule out" with a code — unless the kernel itself
rules it out for every file asked about (``no_writer_anywhere``): a read lease is granted only
on a file that no process at all, of any user, holds open for writing. That is what clears a
container's init process (pid 1), whose descriptors even root may list but not ``stat``.

One pass over ``/proc`` answers for any number of files: ``stat`` of each descriptor is one
system call, and flags are read only for the few descriptors that match. That pass costs every
descriptor of every process on the machine (10-40 ms on a shared one, three passes in a run's
reduce: issue #28 item 3), so for a few files the kernel is asked first: a read lease granted on
each of them (``no_writer_anywhere``) says no descriptor anywhere writes any, which is all the
pass could have found; only when one is refused or cannot be asked is ``/proc`` walked, to name
the writers.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import stat
import sys
import time
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Union

PROC = "/proc"
O_ACCMODE = 0o3
#: Processes whose descriptors could not be read, listed by pid at most this many times.
MAX_LISTED_UNINSPECTED = 20

FileKey = int  # st_dev << 64 | st_ino: one int a file, not a tuple of two (a plan asks about 200,000)
#: which of the paths asked about name one file: an index, or a tuple when hard links name it twice
Names = Union[int, Tuple[int, ...]]
#: fcntl(2) commands Python's ``fcntl`` module does not name on every version
F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
F_SETSIG = getattr(fcntl, "F_SETSIG", 10)


@dataclass(frozen=True)
class Holder:
    """One process holding one of the files open for writing."""

    pid: int
    command: str
    fd: int
    path: str  # the file as the caller named it
    access: str  # 'write' (O_WRONLY) or 'read-write' (O_RDWR)

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command})"

    def to_dict(self) -> dict:
        return {"pid": self.pid, "command": self.command, "fd": self.fd, "path": self.path,
                "access": self.access}


@dataclass
class WriterScan:
    """The answer of one pass over the process table."""

    supported: bool  # False where the kernel does not expose open files (not Linux)
    holders: List[Holder] = field(default_factory=list)
    #: processes that may hold a file but could not be looked at (permission, or a race)
    uninspected: int = 0
    uninspected_pids: List[int] = field(default_factory=list)
    #: processes that could not be looked at but that the kernel rules out: it granted a read
    #: lease on every file asked about, which no open-for-writing descriptor anywhere allows
    ruled_out: int = 0
    processes: int = 0
    seconds: float = 0.0
    #: files the kernel cleared by a read lease each (``LEASE_FIRST_MAX``): then no process was
    #: looked at (``processes`` is 0), as none can hold one of them open for writing
    cleared_by_lease: int = 0

    def holders_of(self, path: str) -> List[Holder]:
        return [h for h in self.holders if h.path == path]

    @property
    def paths(self) -> List[str]:
        return sorted({h.path for h in self.holders})

    def to_dict(self) -> dict:
        return {"supported": self.supported, "holders": [h.to_dict() for h in self.holders],
                "uninspected": self.uninspected, "uninspected_pids": list(self.uninspected_pids),
                "ruled_out": self.ruled_out, "processes": self.processes, "seconds": round(self.seconds, 4),
                "cleared_by_lease": self.cleared_by_lease}


class JoinedPaths(Sequence):
    """``root``'s files named relative to it, joined when asked for: a plan checks every file of
    its runs (200,000 at 100,000 runs) and need not hold an absolute path of each meanwhile."""

    def __init__(self, root: str, rels: Sequence[str]) -> None:
        self.root, self.rels = root, rels

    def __len__(self) -> int:
        return len(self.rels)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [os.path.join(self.root, r) for r in self.rels[i]]
        return os.path.join(self.root, self.rels[i])


def _keys(paths: Sequence[str]) -> Dict[FileKey, Names]:
    # held while every process is looked at, beside the plan and its scan: an int key and the
    # path's index, ~120 bytes a file (a (dev, ino) tuple, a list and an absolute path were ~450)
    out: Dict[FileKey, Names] = {}
    for i, p in enumerate(paths):
        try:
            st = os.lstat(p)
        except OSError:
            continue  # gone: nobody can be writing to it under this name
        if stat.S_ISREG(st.st_mode):
            key = st.st_dev << 64 | st.st_ino
            had = out.get(key)
            out[key] = i if had is None else _names(had) + (i,)
    return out


def _names(n: Names) -> Tuple[int, ...]:
    return (n,) if isinstance(n, int) else n


def _command(proc: str, pid: int) -> str:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        raw = b""
    if raw:
        args = [a.decode("utf-8", "backslashreplace") for a in raw.rstrip(b"\0").split(b"\0")]
        text = " ".join(" ".join(args).split())  # one line, whatever the arguments hold
        return text if len(text) <= 200 else text[:197] + "..."
    try:
        with open(f"{proc}/{pid}/comm", "rb") as f:
            return f.read().strip().decode("utf-8", "backslashreplace") or "?"
    except OSError:
        return "?"


def _flags(proc: str, pid: int, fd: int) -> Optional[int]:
    try:
        with open(f"{proc}/{pid}/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"flags:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _is_kernel_thread(proc: str, pid: int) -> bool:
    """Kernel threads (and zombies) have no command line and hold no files."""
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            return not f.read(1)
    except OSError:
        return False


def no_writer_anywhere(path: str) -> Optional[bool]:
    """The kernel's answer for every process on the machine, inspectable or not: True when no
    descriptor anywhere holds ``path`` open for writing (nor a writable mapping), False when one
    does, None when it cannot tell (no lease support, e.g. NFS; not our file without
    ``CAP_LEASE``; not a regular file).

    A read lease (``F_SETLEASE``/``F_RDLCK``) is granted only when the inode is open for writing
    nowhere; it is released at once, by the next C call (``_lease_calls``: the interpreter lock
    is kept across both, so no thread of this process runs between them). A writer opening the
    file in between waits for that release (microseconds); only if this process is stopped
    exactly there (SIGSTOP) does it wait up to the lease-break time. The break's signal is SIGURG,
    ignored by default, not SIGIO, which would end this process. The file is looked at through an
    ``O_PATH`` descriptor first: a folder of ``path`` replaced by a link to ``/dev`` never has a
    device opened (only a regular file is opened for reading)."""
    return _lease_probe(path, None)


def _lease_calls():
    """``fcntl`` of the C library, called without releasing the interpreter lock (``PyDLL``),
    so the lease taken and the release that follows are not separated by another thread of
    this process; None where ctypes cannot give it (then Python's ``fcntl``, which releases it)."""
    try:
        import ctypes

        fn = ctypes.PyDLL(None, use_errno=True).fcntl
        fn.restype = ctypes.c_int
        fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long)
        return fn
    except (OSError, AttributeError, ImportError):
        return None


_LEASE_FCNTL = _lease_calls()


def _take_and_drop_read_lease(fd: int) -> bool:
    """Take a read lease on ``fd`` and drop it at once: True when it was granted, False when a
    writer holds the file (EAGAIN/EBUSY); OSError for any other refusal."""
    if _LEASE_FCNTL is None:
        try:
            fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EBUSY):
                return False
            raise
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
        return True
    import ctypes

    if _LEASE_FCNTL(fd, F_SETLEASE, fcntl.F_RDLCK) == 0:
        _LEASE_FCNTL(fd, F_SETLEASE, fcntl.F_UNLCK)
        return True
    err = ctypes.get_errno()
    if err in (errno.EAGAIN, errno.EBUSY):
        return False
    raise OSError(err, os.strerror(err))


def _lease_probe(path: str, key: Optional[FileKey], dir_fd: Optional[int] = None) -> Optional[bool]:
    """``no_writer_anywhere(path)``; with ``key``, None unless the file opened is that inode
    (the name may have been given to another file since it was looked at); with ``dir_fd``,
    ``path`` is a name in that folder (a walk's, ``FilesFound``): nothing on the way is followed."""
    o_path = getattr(os, "O_PATH", 0)
    try:
        # an O_PATH descriptor opens nothing (no device, no FIFO): what it names is looked at
        # first, and only a regular file is then opened for reading, through it
        pfd = os.open(path, (o_path or os.O_RDONLY | os.O_NONBLOCK) | getattr(os, "O_NOFOLLOW", 0)
                      | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    fd = -1
    try:
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode) or (key is not None and st.st_dev << 64 | st.st_ino != key):
            return None
        if o_path:
            fd = os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
            st2 = os.fstat(fd)
            if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
                return None
        else:
            fd, pfd = pfd, -1
        if nfs_exported_device(st.st_dev):
            return None  # NFS clients write by file handle, holding no descriptor here
        fcntl.fcntl(fd, F_SETSIG, signal.SIGURG)
        try:
            return _take_and_drop_read_lease(fd)
        except OSError:
            return None
    except OSError:
        return None
    finally:
        for d in (fd, pfd):
            if d >= 0:
                os.close(d)


#: the kernel NFS server's export table (present while nfsd runs)
NFSD_EXPORTS = "/proc/fs/nfsd/exports"


def nfs_exported_device(dev: int, exports: Optional[str] = None) -> bool:
    """Whether this machine's NFS server exports a folder on the filesystem ``dev``: a client
    then writes to a file by handle between short opens, so no descriptor check here can rule a
    writer out (the second review's lost late records on a file server)."""
    try:
        with open(exports or NFSD_EXPORTS, "rb") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return False
    for raw in lines:
        if not raw.strip() or raw.startswith(b"#"):
            continue
        # the path is the first field, with spaces and odd bytes octal-escaped (\040)
        p = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), raw.split()[0])
        try:
            if os.stat(p).st_dev == dev:
                return True
        except OSError:
            continue
    return False


#: ``find_writers`` asks the kernel first (a read lease a file, ~20 us each) when it is asked about
#: at most this many files, instead of walking every descriptor of every process (``/proc``)
LEASE_FIRST_MAX = 256


def find_writers(paths: Iterable[str], *, proc: str = PROC) -> WriterScan:
    """Every process on this machine that holds one of ``paths`` open for writing.

    ``paths`` name regular files (others are ignored). Never raises for a process that
    cannot be inspected: it is counted in ``uninspected``. At most ``LEASE_FIRST_MAX`` files
    on this machine's ``/proc``: when the kernel grants a read lease on each, nobody writes
    any and no process is looked at (``cleared_by_lease``); else ``/proc`` is walked.
    """
    t0 = time.monotonic()
    named = paths if isinstance(paths, Sequence) else list(paths)
    return _scan(named, _keys(named), lambda i, key: _lease_probe(named[i], key), proc, t0)


#: how ``_scan`` asks the kernel about one file: (its index in the names, the inode it must
#: still be, or None for whatever the name holds now) -> ``no_writer_anywhere``'s answer
Probe = Callable[[int, Optional[FileKey]], Optional[bool]]


def _scan(paths: Sequence[str], wanted: Dict[FileKey, Names], probe: Probe, proc: str, t0: float) -> WriterScan:
    """``find_writers`` over ``wanted`` (each file's key -> its index in ``paths``)."""
    if not sys.platform.startswith("linux") or not os.path.isdir(os.path.join(proc, "self", "fd")):
        return WriterScan(supported=False, seconds=time.monotonic() - t0)
    res = WriterScan(supported=True)
    if not wanted:
        res.seconds = time.monotonic() - t0
        return res
    if proc == PROC and len(wanted) <= LEASE_FIRST_MAX and _all_leased(wanted, probe):
        res.cleared_by_lease = len(wanted)
        res.seconds = time.monotonic() - t0
        return res
    devs = {k >> 64 for k in wanted}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        pid = int(name)
        res.processes += 1
        fd_dir = f"{proc}/{name}/fd"
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            continue  # exited meanwhile: holds nothing any more
        except PermissionError:
            if not _is_kernel_thread(proc, pid):
                res.uninspected += 1
                if len(res.uninspected_pids) < MAX_LISTED_UNINSPECTED:
                    res.uninspected_pids.append(pid)
            continue
        except OSError:
            res.uninspected += 1
            continue
        for fd_name in fds:
            try:
                st = os.stat(f"{fd_dir}/{fd_name}")
            except OSError as e:
                if e.errno == errno.EACCES:
                    res.uninspected += 1
                    if len(res.uninspected_pids) < MAX_LISTED_UNINSPECTED:
                        res.uninspected_pids.append(pid)
                    break
                continue  # closed meanwhile
            if st.st_dev not in devs:
                continue
            key = st.st_dev << 64 | st.st_ino
            if key not in wanted:
                continue
            fd = int(fd_name)
            flags = _flags(proc, pid, fd)
            if flags is None:
                continue  # closed between stat and fdinfo: no longer a writer
            acc = flags & O_ACCMODE
            if acc not in (os.O_WRONLY, os.O_RDWR):
                continue
            cmd = _command(proc, pid)
            for p in (paths[i] for i in _names(wanted[key])):
                res.holders.append(Holder(pid=pid, command=cmd, fd=fd, path=p,
                                          access="write" if acc == os.O_WRONLY else "read-write"))
    if res.uninspected:
        _rule_out(res, wanted, paths, probe)
    res.seconds = time.monotonic() - t0
    return res


def _all_leased(wanted: Dict[FileKey, Names], probe: Probe) -> bool:
    """Whether the kernel grants a read lease on every file of ``wanted`` (each the inode it was
    when looked at), i.e. no descriptor or writable mapping anywhere writes one of them. The
    first refusal or "cannot tell" stops: the walk over ``/proc`` then names who writes."""
    return all(probe(_names(names)[0], key) is True for key, names in wanted.items())


def _rule_out(res: WriterScan, wanted: Dict[FileKey, Names], named: Sequence[str], probe: Probe) -> None:
    """Clear the uninspected processes when the kernel shows that none of the files not
    already accounted for (a holder found) is open for writing anywhere: then none of them
    writes one. One file it cannot answer for, or finds written by nobody we saw, keeps them."""
    held = {h.path for h in res.holders}
    for names in wanted.values():
        if any(named[i] in held for i in _names(names)):
            continue
        if probe(_names(names)[0], None) is not True:
            return
    res.ruled_out, res.uninspected, res.uninspected_pids = res.uninspected, 0, []


class FilesFound:
    """The regular files a walk that follows no link met (``engine.standing``'s), for
    ``writers_among``: each by the walk's name for it, keyed by the ``(st_dev, st_ino)`` of the
    walk's own lstat (no second stat of a file), and, while there are at most
    ``LEASE_FIRST_MAX``, by its name in its folder with a descriptor of that folder, through
    which the lease is asked (``O_NOFOLLOW``): no path is resolved again, so a folder of the run
    swapped for a link since is never followed, and nothing outside the run is opened or
    stat'ed (invariant 4). More files: the descriptors are let go (the ``/proc`` walk, which
    needs them not, answers) and a file the kernel would be asked about is "cannot tell".
    Holds at most ``LEASE_FIRST_MAX`` descriptors; ``close`` (or ``with``) lets them go."""

    def __init__(self) -> None:
        self.names: List[str] = []
        self.keys: Dict[FileKey, Names] = {}
        self._at: Optional[List[Tuple[int, str]]] = []  # (index in _fds, name in that folder)
        self._fds: List[int] = []
        self._folder: Optional[object] = None  # the walk's token of the folder _fds[-1] is a copy of

    def add(self, path: str, name: str, st: os.stat_result, dir_fd: int, folder: object) -> None:
        """``name`` met in the folder open at ``dir_fd`` (``folder``: the walk's token for that
        folder, as a descriptor's number is reused once closed), called ``path``, with its lstat;
        anything but a regular file is no file a writer holds."""
        if not stat.S_ISREG(st.st_mode):
            return
        i = len(self.names)
        self.names.append(path)
        key = st.st_dev << 64 | st.st_ino
        had = self.keys.get(key)
        self.keys[key] = i if had is None else _names(had) + (i,)
        if self._at is None:
            return
        if len(self.names) > LEASE_FIRST_MAX:
            self.close()  # the /proc walk answers for this many: no descriptor is needed
            return
        if folder is not self._folder or not self._fds:
            try:
                self._fds.append(os.dup(dir_fd))
            except OSError:  # out of descriptors: the /proc walk answers, needing none
                self.close()
                return
            self._folder = folder
        self._at.append((len(self._fds) - 1, name))

    def probe(self, i: int, key: Optional[FileKey]) -> Optional[bool]:
        """``no_writer_anywhere`` of the ``i``-th file, opened in its folder; None (cannot tell)
        once the descriptors are let go."""
        if self._at is None:
            return None
        fdi, name = self._at[i]
        return _lease_probe(name, key, self._fds[fdi])

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds, self._at, self._folder = [], None, None

    def __enter__(self) -> "FilesFound":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def writers_among(found: FilesFound, *, proc: str = PROC) -> WriterScan:
    """``find_writers`` over the files of a walk (``FilesFound``), each ``Holder`` named as the
    walk named its file: no path is stat'ed or opened again but through its folder's descriptor."""
    return _scan(found.names, found.keys, found.probe, proc, time.monotonic())


def describe_holders(holders: List[Holder], rel=lambda p: p) -> str:
    """One line naming who holds what, e.g. ``run/events…: open for writing by pid 12 (python train.py)``."""
    by_path: Dict[str, List[Holder]] = {}
    for h in holders:
        by_path.setdefault(h.path, []).append(h)
    parts = []
    for p, hs in sorted(by_path.items()):
        who = ", ".join(sorted({h.describe() for h in hs}))
        parts.append(f"{rel(p)}: open for writing by {who}")
    return "; ".join(parts)


__all__ = ["Holder", "WriterScan", "JoinedPaths", "FilesFound", "find_writers", "writers_among", "describe_holders",
           "no_writer_anywhere"]
