"""The one lock helper: ``flock`` on a lock file, released by the kernel even on SIGKILL."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from typing import Iterator


class Locked(RuntimeError):
    """Another process holds the lock."""


@contextlib.contextmanager
def exclusive(path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def try_exclusive(path: str) -> int:
    """Take an exclusive ``flock`` on ``path`` without waiting; returns the fd to ``release``.

    Raises ``Locked`` when another process holds it, ``OSError`` for anything else."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise Locked(path) from None
        raise
    return fd


def release(fd: int) -> None:
    """Release a lock taken with ``try_exclusive``."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


__all__ = ["Locked", "exclusive", "try_exclusive", "release"]
