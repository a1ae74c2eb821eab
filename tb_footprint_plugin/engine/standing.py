"""What stands at a run's path on a disk, looked at without following a link (invariant 4): the
one look of both restores that must not merge a run into a new one of its name (a retirement's,
``engine.retire.DiskUnretire``; a reduction's, ``engine.restore.LocalRestore``), which
``retire_rules.new_run_refusal`` then decides on, as on every store; and the one walk of the
writer checks of a disk's reduce, retirement and restore (``writers_at``): which processes hold a
file at any depth of the run open for writing, every file met and asked about through its
folder's descriptor, so a folder of the run swapped for a link (to ``/etc``, another user's
home, a FIFO) is a name, never followed, opened or stat'ed through.

The walk (``walk_at``; ``entries_at`` from a run's path, which the reduce's quiet-period look in
``preflight`` reads too) goes by descriptors, each folder opened in its parent with ``O_NOFOLLOW``,
a folder at a time from a stack (no recursion: a chain of folders thousands deep is no
RecursionError, review R10 F4), holding a folder's descriptor while names of it are left to look
at (a chain holds one).
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import AbstractSet, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.context import Context, failure_code, reason_of
from tb_footprint_plugin.storage.openfiles import FilesFound, WriterScan, writers_among
from tb_footprint_plugin.storage.store import StoreFailure

#: a folder of the run opened in its parent: never through a link
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
    at the path, a stranger's in a shared logdir, is one name that refuses: review R10 F4)."""
    out: Dict[str, os.stat_result] = {}
    _look(ctx, run, exclude, levels, out, None)
    return out


def standing_and_writers(ctx: Context, run: str, exclude: Iterable[str],
                         levels: Optional[int]) -> Tuple[Dict[str, os.stat_result], WriterScan]:
    """``standing_at`` and ``writers_at`` of one walk (a reduction's restore asks both): the walk
    goes to every depth for the writers, what stands is kept to ``levels`` as ``standing_at``'s."""
    out: Dict[str, os.stat_result] = {}
    with FilesFound() as found:
        _look(ctx, run, exclude, levels, out, found)
        return out, writers_among(found)


def writers_at(ctx: Context, run: str, exclude: Iterable[str]) -> WriterScan:
    """Which processes on this machine hold a regular file at or below ``run``'s path, at any
    depth, open for writing (``openfiles.writers_among``), each ``Holder`` by its logdir-relative
    name; the ``exclude`` folders left out. Walked as ``standing_at`` (no link followed, at any
    depth; a link at the run's path is a name, holding nothing); a link on the way to the run
    refuses (``txn.Refused``)."""
    with FilesFound() as found:
        _look(ctx, run, exclude, None, None, found)
        return writers_among(found)


def entries_at(ctx: Context, run: str, exclude: Iterable[str] = (),
               levels: Optional[int] = None) -> Iterator[Entry]:
    """Every name at or below ``run``'s path, walked as ``standing_at`` walks it (``walk_at``: no
    link followed; the ``exclude`` folders left out by device and inode; ``levels`` as there, None
    every level), each ``Entry`` named logdir-relative: a non-folder at the run's path itself is
    one entry of depth 0. A link on the way to the run refuses (``txn.Refused``)."""
    skip = set()
    for p in exclude:
        with contextlib.suppress(OSError):
            st = os.stat(p)
            skip.add((st.st_dev, st.st_ino))
    if run in (".", ""):  # the logdir's own run: its root, opened as the logdir store opens it
        try:
            fd = os.open(ctx.logdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise txn.Refused(f"{ctx.logdir}: cannot look at what stands there ({reason_of(e)}); nothing was changed",
                              failure_code(e)) from None
        base = ""
    else:
        try:
            with ctx.store.folder(ctx.key(run)) as (pfd, name):
                try:
                    st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
                except FileNotFoundError:
                    return
                if not stat.S_ISDIR(st.st_mode):  # a file, a link (a name: never followed), a FIFO
                    yield Entry(run, name, st, 0, False, pfd, pfd)
                    return
                fd = os.open(name, DIR_FLAGS, dir_fd=pfd)
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return
            raise txn.Refused(f"{run}: not reached without a link ({e}); nothing was changed", e.code) from None
        except OSError as e:
            raise txn.Refused(f"{run}: cannot look at what stands there ({reason_of(e)}); nothing was changed",
                              failure_code(e)) from None
        base = run
    try:
        yield from walk_at(fd, base, skip, levels)
    except OSError as e:  # the run's folder could not be listed
        raise txn.Refused(f"{run}: cannot look at what stands there ({reason_of(e)}); nothing was changed",
                          failure_code(e)) from None


def _look(ctx: Context, run: str, exclude: Iterable[str], levels: Optional[int],
          out: Optional[Dict[str, os.stat_result]], found: Optional[FilesFound]) -> None:
    """The walk of ``run``'s path into ``out`` (``standing_at``'s names, to ``levels``) and
    ``found`` (every regular file, at any depth: the writers need them all)."""
    for e in entries_at(ctx, run, exclude, levels if found is None else None):
        if found is not None:
            found.add(e.path, e.name, e.st, e.dir_fd, e.folder)
        if out is not None and _stands(e, levels):
            out[e.path] = e.st


def _stands(e: "Entry", levels: Optional[int]) -> bool:
    """Whether ``standing_at`` names ``e``: anything but a folder down to ``levels`` folder levels
    below the run; a folder only where it was not looked into (one deeper: a name, not a way; or
    it could not be opened, e.g. swapped for a link since the listing)."""
    if levels is not None and e.depth > levels + 1:
        return False
    if stat.S_ISDIR(e.st.st_mode):
        return not e.opened or (levels is not None and e.depth == levels + 1)
    return True


def levels_for(run: str, paths: Iterable[object]) -> int:
    """How many folder levels below ``run`` a look at what stands there opens (``standing_at``'s
    ``levels``): one past the deepest of ``paths`` (logdir-relative; others ignored), since below
    that nothing of the record can stand. A folder deeper is one name, never walked (a chain
    thousands deep is no RecursionError: review R10 F4)."""
    deepest = max((p.count("/") for p in paths if isinstance(p, str)), default=0)
    return max(deepest - run.count("/"), 0) + 1


class Entry(NamedTuple):
    """One name ``walk_at`` met."""

    path: str  # the walk's base joined with the names down to it
    name: str  # its name in its folder
    st: os.stat_result  # its lstat, from the listing
    depth: int  # 1 for a name in the folder the walk began at
    opened: bool  # a folder that was opened and walked below
    dir_fd: int  # its folder's descriptor, open while the entry is looked at (-1 for a folder)
    folder: object  # a token of its folder, the same object for every name in it (a descriptor's
    # number is reused once it is closed)


#: a folder's open that failed for want of descriptors or memory: the look cannot go on (never a name)
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def walk_at(fd: int, base: str, skip: AbstractSet[Tuple[int, int]] = frozenset(),
            levels: Optional[int] = None) -> Iterator[Entry]:
    """Every name below the folder open at ``fd`` (taken over: closed here, also when the walk
    is left early), each folder's names sorted and a folder's own names right after it; a folder
    opened in its parent with ``O_NOFOLLOW`` (a link is a name, never a way) and walked below,
    unless its ``(st_dev, st_ino)`` is in ``skip`` (then not named at all) or it is deeper than
    ``levels`` folder levels (None: every level) or cannot be opened (``opened`` False). A
    folder's names are read, and lstat'ed, when it is opened. ``base`` "" names the names bare.
    A folder's descriptor is held while names of it are left, so the descriptors
    held are the folders on the way with names after it (a chain holds one); one that cannot be
    had (the process's limit) fails the walk (``OSError``: a folder left unopened would hide what
    is below it from a writer check, review R12 H1), as does a first folder that cannot be listed."""
    frames: List[List] = []  # [fd, base, depth, entries, next index]
    try:
        frames.append(_frame(fd, base, 1))
        while frames:
            f = frames[-1]
            if f[4] >= len(f[3]):
                frames.pop()
                os.close(f[0])
                continue
            name, st = f[3][f[4]]
            f[4] += 1
            path = f"{f[1]}/{name}" if f[1] else name
            if not stat.S_ISDIR(st.st_mode):
                yield Entry(path, name, st, f[2], False, f[0], f)
                continue
            if (st.st_dev, st.st_ino) in skip:
                continue
            sub = None
            if levels is None or f[2] <= levels:
                try:
                    sub = _frame(os.open(name, DIR_FLAGS, dir_fd=f[0]), path, f[2] + 1, skip)
                except FileNotFoundError:  # gone since the listing
                    continue
                except OSError as e:
                    if e.errno in _OUT_OF_DESCRIPTORS:
                        # not a name: what is below would go unlooked at, a writer there unseen
                        # (review R12 H1: a "comb" holds a descriptor a level); the look fails
                        raise
                    sub = None  # swapped for a link (or made unreadable) since: a name, never a way
            if sub is not None:
                if f[4] >= len(f[3]):  # the parent's last name: nothing left needs its descriptor
                    frames.pop()
                    os.close(f[0])
                frames.append(sub)
                yield Entry(path, name, st, f[2], True, -1, f)
            else:
                yield Entry(path, name, st, f[2], False, -1, f)
    finally:
        for f in frames:
            os.close(f[0])


def _frame(fd: int, base: str, depth: int, skip: AbstractSet[Tuple[int, int]] = frozenset()) -> List:
    """The walk's frame of the folder open at ``fd`` (closed here if it cannot be listed, or is
    one of ``skip`` after all: a folder put in a listed one's place)."""
    try:
        if skip:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) in skip:
                raise FileNotFoundError(errno.ENOENT, "left out")
        with os.scandir(fd) as it:
            found = []
            for e in it:
                with contextlib.suppress(FileNotFoundError):  # gone since the listing
                    found.append((e.name, e.stat(follow_symlinks=False)))
    except BaseException:
        os.close(fd)
        raise
    found.sort(key=lambda n: n[0])
    return [fd, base, depth, found, 0]


__all__ = ["Entry", "entries_at", "levels_for", "standing_and_writers", "standing_at", "walk_at", "writers_at"]
