"""The one lock helper: ``flock`` on a lock file, released by the kernel even on SIGKILL."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from typing import Iterator

from tb_footprint_plugin.storage.private import open_private


class Locked(RuntimeError):
    """Another process holds the lock."""


@contextlib.contextmanager
def held(path: str, *, shared: bool = False) -> Iterator[None]:
    """Hold a ``flock`` on ``path`` (created if missing) for the ``with`` block: exclusive, or
    ``shared`` with other shared holders (operations that add to a vault share it, the forget
    that deletes from it takes it alone).

    The lock file is a regular file of ours in a folder of ours (``private.open_private``): a
    symlink planted in its place is set aside, never followed (``O_CREAT`` through it would
    create a file wherever it points)."""
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def exclusive(path: str):
    """Hold an exclusive ``flock`` on ``path`` for the ``with`` block (``held``)."""
    return held(path)


def try_exclusive(path: str) -> int:
    """Take an exclusive ``flock`` on ``path`` without waiting; returns the fd to ``release``.

    Raises ``Locked`` when another process holds it, ``OSError`` for anything else (the lock
    file is opened as in ``exclusive``)."""
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
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


__all__ = ["Locked", "held", "exclusive", "try_exclusive", "release"]
