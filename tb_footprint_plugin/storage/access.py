"""Whether this user may make the changes a put-back makes, asked before the first one.

A restore or the return of a retired run used to find a read-only folder or an unreadable file
half-way, and stopped there saying "interrupted ... finished on the next start" while every start
failed the same way (review R16 F8). Reduce asks first ("directory not writable (permission
denied)"); these are that question, in its words, for the verbs that put files back.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Iterable, Optional


def nearest_folder(path: str, root: str) -> str:
    """``path`` if it is a folder, else the nearest folder above it that stands, never above
    ``root``: where a missing folder would be made."""
    while not os.path.isdir(path) and len(path) > len(root) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path if os.path.isdir(path) else root


def access_refusal(root: str, read: Iterable[str], change: Iterable[str]) -> Optional[str]:
    """Why this user could not put files back under ``root`` (paths relative to it), or None.

    ``read``: files read where they stand (those absent, or symlinks, are for other checks);
    ``change``: folders names are added to or removed from, the nearest one standing if missing
    (a missing folder is made in it). Said in the words of reduce's preflight, naming the path,
    so a put-back refuses before its first file moves instead of stopping half-way (review R16
    F8). ``os.access``: the real user's answer, as for reduce (root may do everything)."""
    for rel in read:
        p = os.path.join(root, rel)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and not os.access(p, os.R_OK):
            return f"{rel}: not readable (permission denied)"
    seen = set()
    for rel in change:
        d = nearest_folder(os.path.join(root, rel), root)
        if d in seen:
            continue
        seen.add(d)
        if not os.access(d, os.W_OK | os.X_OK):
            rel = os.path.relpath(d, root)
            return f"{'the logdir' if rel == '.' else rel}: directory not writable (permission denied)"
    return None


def is_permission_error(e: BaseException) -> bool:
    """Whether ``e`` is the system refusing this user (EACCES, EPERM): no interruption, every
    later attempt fails the same way until a mode or owner changes."""
    return isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM)


__all__ = ["nearest_folder", "access_refusal", "is_permission_error"]
