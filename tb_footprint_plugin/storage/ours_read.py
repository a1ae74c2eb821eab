"""A cache file is read only when it and its folder are ours: one rule for the scan cache, the
selection cache and the plan's digests.

The three live in one folder (``storage.paths.cache_dir``): the logdir's state folder, or a folder
of the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``). What they hold is believed as it is
(a run's sizes and categories, a run's selection outcome), so a file another user can write
would put made-up figures into the plan, the status and the tab: root started with another
user's ``HOME`` or ``XDG_CACHE_HOME`` (``sudo -E``, a service unit setting ``HOME``) would read
that user's folder, and a teammate of a non-sticky logdir could swap the state folder for one of
theirs (review R16 L1). So a cache is read only as ``storage.private`` says a state file is
ours: its folder opened ``O_NOFOLLOW`` and checked by ``fstat`` to be a real folder of the
effective user that group and others may not write to, the file opened relative to that fd
(``O_NOFOLLOW``, never a FIFO) and checked the same way. Reading never moves or changes anything
(a dry run's scan writes nothing): a file that is not ours is only not read, which costs a
slower scan or plan, never a wrong figure.
"""
from __future__ import annotations

import os
from typing import BinaryIO, Optional

from tb_footprint_plugin.storage.private import is_ours
from tb_footprint_plugin.storage.regular import open_regular_at

_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))


def open_ours(path: str, buffering: int = -1) -> Optional[BinaryIO]:
    """``path`` opened for reading when its folder and itself are ours (no link, the effective
    user's, not writable by group or others); None when it is missing, not ours, or cannot be
    opened — then it was not read at all."""
    try:
        dfd = os.open(os.path.dirname(os.path.abspath(path)), _DIR_FLAGS)
    except OSError:
        return None
    try:
        if not is_ours(os.fstat(dfd)):
            return None
        f = open_regular_at(dfd, os.path.basename(path), buffering)
    except OSError:
        return None
    finally:
        os.close(dfd)
    try:
        ours = is_ours(os.fstat(f.fileno()), want_dir=False)
    except OSError:
        ours = False
    if not ours:
        f.close()
        return None
    return f


__all__ = ["open_ours"]
