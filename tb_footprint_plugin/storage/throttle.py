"""Metadata operations, throttled: a token bucket in front of stat/open/rename/unlink/link.

On Lustre and NFS a batch exhausts the metadata server long before the bandwidth: thousands of
workers each doing a stat per file. ``configure(rate)`` caps this process at ``rate`` metadata
operations per second (a burst of one second's worth is allowed); every metadata call of the
scan and the transaction goes through the wrappers below, so one bucket applies to all of
them. Unset (the default), a wrapper costs one ``is None`` test.
"""
from __future__ import annotations

import math
import os
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


def replace(src, dst):
    op()
    return os.replace(src, dst)


def unlink(path):
    op()
    return os.unlink(path)


def rmdir(path):
    op()
    return os.rmdir(path)


def link(src, dst, follow_symlinks: bool = True):
    op()
    return os.link(src, dst, follow_symlinks=follow_symlinks)


def os_open(path, flags, mode=0o777):
    op()
    return os.open(path, flags, mode)


__all__ = ["TokenBucket", "configure", "limit", "op", "lstat", "stat", "scandir", "listdir", "replace", "unlink",
           "rmdir", "link", "os_open"]
