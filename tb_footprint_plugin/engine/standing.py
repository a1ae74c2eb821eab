"""What stands at a run's path on a disk, looked at without following a link (invariant 4): the
one look of both restores that must not merge a run into a new one of its name (a retirement's,
``engine.retire.DiskUnretire``; a reduction's, ``engine.restore.LocalRestore``), which
``retire_rules.new_run_refusal`` then decides on, as on every store.
"""
from __future__ import annotations

import contextlib
import os
import stat
from typing import Dict, Iterable, Optional

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.context import Context, failure_code, reason_of
from tb_footprint_plugin.storage.store import StoreFailure

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def standing_at(ctx: Context, run: str, exclude: Iterable[str] = (),
                levels: Optional[int] = None) -> Dict[str, os.stat_result]:
    """Everything but a folder at or below ``run``'s path (a file, a link, a special file), each by
    its logdir-relative name with its lstat; the folders ``exclude`` names (the state, a vault)
    left out, known by their device and inode. Read through descriptors, each folder opened in
    its parent without following a link (the logdir store's walk to the run's parent, then
    ``O_NOFOLLOW``): a link is a name here, never a way (invariant 4), and a folder swapped for
    one after the listing is that name. A link on the way to the run refuses (``txn.Refused``,
    nothing changed); nothing there: empty. ``levels``: how many folder levels below the run are
    opened; a folder deeper is a name itself, not looked into (a chain of folders thousands deep
    at the path, a stranger's in a shared logdir, is one name that refuses, where a walk of it
    raised RecursionError out of a restore: review R10 F4)."""
    skip = set()
    for p in exclude:
        with contextlib.suppress(OSError):
            st = os.stat(p)
            skip.add((st.st_dev, st.st_ino))
    out: Dict[str, os.stat_result] = {}
    if run in (".", ""):  # the logdir's own run: its root, opened as the logdir store opens it
        try:
            fd = os.open(ctx.logdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise txn.Refused(f"{ctx.logdir}: cannot look at what stands there ({reason_of(e)}); nothing was changed",
                              failure_code(e)) from None
        _standing_in(fd, "", skip, out, levels)
        return out
    try:
        with ctx.store.folder(ctx.key(run)) as (pfd, name):
            try:
                st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            except FileNotFoundError:
                return out
            if not stat.S_ISDIR(st.st_mode):
                out[run] = st
                return out
            fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
    except StoreFailure as e:
        if e.code == StoreError.NOT_FOUND:
            return out
        raise txn.Refused(f"{run}: not reached without a link ({e}); nothing was changed", e.code) from None
    except OSError as e:
        raise txn.Refused(f"{run}: cannot look at what stands there ({reason_of(e)}); nothing was changed",
                          failure_code(e)) from None
    _standing_in(fd, run, skip, out, levels)
    return out


def levels_for(run: str, paths: Iterable[object]) -> int:
    """How many folder levels below ``run`` a look at what stands there opens (``standing_at``'s
    ``levels``): one past the deepest of ``paths`` (logdir-relative; others ignored), since below
    that nothing of the record can stand. A folder deeper is one name, never walked (a chain
    thousands deep is no RecursionError: review R10 F4)."""
    deepest = max((p.count("/") for p in paths if isinstance(p, str)), default=0)
    return max(deepest - run.count("/"), 0) + 1


def _standing_in(fd: int, base: str, skip: set, out: Dict[str, os.stat_result], levels: Optional[int]) -> None:
    """``standing_at`` below the folder open at ``fd`` (closed here), named ``base``, opening at
    most ``levels`` folder levels below it (None: every level); ``base`` "" for the logdir's root."""
    try:
        with os.scandir(fd) as it:
            found = []
            for e in it:
                with contextlib.suppress(FileNotFoundError):  # gone since the listing
                    found.append((e.name, e.stat(follow_symlinks=False)))
        for name, st in sorted(found):
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in skip:
                    continue
                if levels is not None and levels <= 0:
                    out[_named(base, name)] = st  # deeper than anything recorded: a name, not a way
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError:  # swapped for a link (or made unreadable) since: a name, never a way
                    out[_named(base, name)] = st
                    continue
                _standing_in(sub, _named(base, name), skip, out, None if levels is None else levels - 1)
            else:
                out[_named(base, name)] = st
    finally:
        os.close(fd)


def _named(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name  # the logdir's own run ("" below it): its names bare


__all__ = ["standing_at"]
