"""Metadata operations, throttled: a token bucket in front of stat/open/rename/unlink/link.

On Lustre and NFS a batch exhausts the metadata server long before the bandwidth: thousands of
workers each doing a stat per file. ``configure(rate)`` caps this process at ``rate`` metadata
operations per second (a burst of one second's worth is allowed); every metadata call of the
scan and the transaction goes through the wrappers below, so one bucket applies to all of
them. Unset (the default), a wrapper costs one ``is None`` test.
"""
from __future__ import annotations

import errno
import functools
import math
import os
import sys
import threading
import time
from typing import Optional


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` stored; ``take`` sleeps until one is there."""

    def __init__(self, rate: float, burst: Optional[float] = None, clock=time.monotonic, sleep=time.sleep):
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"max file operations per second must be a positive number, not {rate!r}")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1.0, rate))
        self.tokens = self.burst
        self._clock, self._sleep = clock, sleep
        self.t = clock()
        self.waited = 0.0
        self._mu = threading.Lock()

    def take(self, n: float = 1.0) -> None:
        with self._mu:
            now = self._clock()
            self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
            self.t = now
            self.tokens -= n
            wait = -self.tokens / self.rate if self.tokens < 0 else 0.0
        if wait > 0:
            self.waited += wait
            self._sleep(wait)


_bucket: Optional[TokenBucket] = None
ops_count = 0  # operations counted while a limit was set, ever (what the bench and tests read)


def configure(rate: Optional[float]) -> None:
    """Cap this process's metadata operations at ``rate`` per second; None lifts the cap."""
    global _bucket
    _bucket = None if rate is None else TokenBucket(rate)


def limit() -> Optional[float]:
    return None if _bucket is None else _bucket.rate


def op(n: int = 1) -> None:
    """Count ``n`` metadata operations against the limit (waits when over it)."""
    global ops_count
    if _bucket is None:
        return
    ops_count += n
    _bucket.take(n)


def lstat(path):
    op()
    return os.lstat(path)


def stat(path):
    op()
    return os.stat(path)


def scandir(path):
    op()
    return os.scandir(path)


def listdir(path):
    op()
    return os.listdir(path)


def name_in(path, dir_fd):
    """What ``path`` is looked up as: itself, or (``dir_fd``: its folder, opened already by the
    caller's walk that follows no link) its last component in that folder. The ``*_dir_fd`` of
    the wrappers below and of ``files``: callers pass the whole path, which names it in their
    messages, and the folder's descriptor, so a folder on the way swapped for a link after the
    walk changes nothing the call does."""
    return path if dir_fd is None else os.path.basename(os.fspath(path))


def replace(src, dst, src_dir_fd=None, dst_dir_fd=None):
    op()
    return os.replace(name_in(src, src_dir_fd), name_in(dst, dst_dir_fd), src_dir_fd=src_dir_fd,
                      dst_dir_fd=dst_dir_fd)


def unlink(path, dir_fd=None):
    op()
    return os.unlink(name_in(path, dir_fd), dir_fd=dir_fd)


#: renameat2's flag: fail with EEXIST rather than replace what stands at the new name
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


@functools.lru_cache(maxsize=1)
def _renameat2():
    """libc's ``renameat2`` (Linux, glibc 2.28+), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


def _at(fd) -> int:
    return _AT_FDCWD if fd is None else fd


def rename_new(src, dst, src_dir_fd=None, dst_dir_fd=None) -> None:
    """Move ``src`` to ``dst`` only where nothing stands at ``dst``: ``FileExistsError`` when
    something does, and nothing moved (a name found free may be taken before the move: the move
    itself is the check). One ``renameat2(RENAME_NOREPLACE)`` where the kernel and the file
    system have it (atomic); else a hard link, then ``src`` unlinked (a crash between leaves both
    names on one inode: nothing lost). Neither follows a link at ``src``. ``src_dir_fd``,
    ``dst_dir_fd``: the names' folders (``name_in``)."""
    op()
    fn = _renameat2()
    if fn is not None:
        import ctypes

        if fn(_at(src_dir_fd), os.fsencode(name_in(src, src_dir_fd)), _at(dst_dir_fd),
              os.fsencode(name_in(dst, dst_dir_fd)), _RENAME_NOREPLACE) == 0:
            return
        e = ctypes.get_errno()
        if e not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # not "this file system cannot"
            raise OSError(e, os.strerror(e), os.fspath(src), None, os.fspath(dst))
    os.link(name_in(src, src_dir_fd), name_in(dst, dst_dir_fd), src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,
            follow_symlinks=False)
    op()
    os.unlink(name_in(src, src_dir_fd), dir_fd=src_dir_fd)


#: renameat2's flag: swap the two names atomically (both must exist)
_RENAME_EXCHANGE = 2


def exchange(a, b, dir_fd=None) -> None:
    """Swap the files at ``a`` and ``b`` in one atomic ``renameat2(RENAME_EXCHANGE)``: each
    inode keeps its bytes, and ``a`` then names what stood at ``b`` (whatever was written to it
    up to that instant). ``OSError`` with the call's errno otherwise, nothing moved: ``EINVAL``,
    ``ENOSYS`` or ``EOPNOTSUPP`` where the kernel or the file system has no exchange (no
    renameat2 at all: ``ENOSYS``), the caller keeping its other way. Neither name followed
    as a link (the last component; folders on the way are the caller's to check, or ``dir_fd``:
    the folder both names are in, ``name_in``)."""
    op()
    fn = _renameat2()
    if fn is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), os.fspath(a), None, os.fspath(b))
    import ctypes

    if fn(_at(dir_fd), os.fsencode(name_in(a, dir_fd)), _at(dir_fd), os.fsencode(name_in(b, dir_fd)),
          _RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), os.fspath(a), None, os.fspath(b))


#: errors that say ``exchange`` is not there (the kernel or the file system): the caller's other way
NO_EXCHANGE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)


def rmdir(path):
    op()
    return os.rmdir(path)


def link(src, dst, follow_symlinks: bool = True):
    op()
    return os.link(src, dst, follow_symlinks=follow_symlinks)


def os_open(path, flags, mode=0o777):
    op()
    return os.open(path, flags, mode)


__all__ = ["TokenBucket", "configure", "limit", "op", "name_in", "lstat", "stat", "scandir", "listdir", "replace",
           "exchange",
           "NO_EXCHANGE", "rename_new", "unlink", "rmdir", "link", "os_open"]
