"""Scratch directories in the vault, named after the process that owns them.

Verification views and the data-server probe need a private directory for a moment. Made in
``/tmp`` they outlive a SIGKILL for good; made in the vault's ``tmp/`` and named
``tbfp-<kind>-p<pid>-n<pid namespace>-<random>``, the next start of any process removes the ones
whose owner is gone (``sweep``), and nothing is ever written outside the logdir and the vault.

A pid means something only inside its pid namespace: containers that share ``/tmp`` under one uid
would see each other's pids as dead (or as someone else). So the name carries the inode of the
maker's pid namespace, and a sweep judges only folders made in its own namespace; a folder from
another namespace is left alone (folders named before this tag are judged as before).

The engine points the scratch root at the vault before it verifies (``use_root``); code that
runs outside any operation (a test reading a view directly) falls back to the system's temp
directory with the same naming.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from typing import Iterator, List, Optional

from tb_footprint_plugin.storage.private import ensure_private_dir, open_private_dir, tool_named

_PATTERN = re.compile(r"^tbfp-[a-z]+-p(\d+)-(?:n(\d+)-)?")
_lock = threading.Lock()
_root: Optional[str] = None


def use_root(path: Optional[str]) -> None:
    """Make scratch directories under ``path`` from now on (``None``: the system temp dir)."""
    global _root
    with _lock:
        if path and path != tempfile.gettempdir():  # the system's: as in ``make``
            _private(path)
        _root = path


_depth = 0
_before: Optional[str] = None


@contextlib.contextmanager
def rooted(path: str) -> Iterator[None]:
    """``path`` is the scratch root for the ``with`` block, the root before it back once the last
    block still open ends (threads of one batch nest): an operation's vault is the scratch root
    only while an operation runs, so a process that goes on to another logdir never makes scratch
    in the previous one's vault, nor recreates it when that logdir was removed. Set, not made: a
    run with nothing to do makes no folder (``make`` checks and makes it when first asked)."""
    global _depth, _before, _root
    with _lock:
        if _depth == 0:
            _before = _root
        _depth += 1
        _root = path
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _root = _before


def _private(path: str) -> None:
    """A scratch root in the vault is a folder of ours, made 0700 (``storage.private``): never
    a symlink to somewhere else, never a folder another user can write to."""
    ensure_private_dir(path, tighten_root=tool_named(path))


def current_root() -> str:
    """Where ``make`` puts scratch folders now: the root set by ``use_root``, else the system's."""
    return _root or tempfile.gettempdir()


def system_root() -> str:
    """The system temp dir, for scratch that belongs to no vault (a bucket rewrite's local copy):
    named explicitly so an earlier ``use_root`` of this process (a local vault) cannot move it."""
    return tempfile.gettempdir()


def pid_namespace() -> int:
    """The inode of this process's pid namespace (0 where the kernel does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def make(kind: str, root: Optional[str] = None) -> str:
    """A new scratch directory ``<root>/tbfp-<kind>-p<pid>-n<pid namespace>-<random>``."""
    base = root or current_root()
    prefix = f"tbfp-{kind}-p{os.getpid()}-n{pid_namespace()}-"
    if base == tempfile.gettempdir():  # the system's: mkdtemp's 0700 folder is private there
        return tempfile.mkdtemp(prefix=prefix, dir=base)
    # made relative to the fd of the folder just checked ours, not by its path: a state folder
    # swapped for a stranger's in between never receives it (review R15 F4)
    fd = open_private_dir(base, tighten_root=tool_named(base))
    try:
        for _ in range(100):
            name = prefix + secrets.token_hex(4)
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                continue
            return os.path.join(os.path.abspath(base), name)
    finally:
        os.close(fd)
    raise FileExistsError(errno.EEXIST, "no free scratch folder name", base)


@contextlib.contextmanager
def scratch(kind: str, root: Optional[str] = None) -> Iterator[str]:
    """A scratch directory for the ``with`` block, removed after it."""
    d = make(kind, root)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process with that pid: not ours to judge
    return True


def sweep(root: str) -> List[str]:
    """Remove scratch directories in ``root`` whose owning process is gone; returns their names."""
    removed = []
    shared = root == tempfile.gettempdir()
    try:
        st = os.lstat(root)
        # only a real folder of ours (through a symlink this would remove another's folders), or
        # the system temp dir, shared by design: there only entries of ours are touched (below)
        if not stat.S_ISDIR(st.st_mode) or (st.st_uid != os.geteuid() and not shared):
            return removed
        names = os.listdir(root)
    except OSError:
        return removed
    own_ns = pid_namespace()
    for n in names:
        m = _PATTERN.match(n)
        if not m:
            continue
        # another namespace's pid says nothing about its maker here: not ours to judge
        if m.group(2) is not None and int(m.group(2)) != own_ns:
            continue
        if _alive(int(m.group(1))):
            continue
        p = os.path.join(root, n)
        try:
            est = os.lstat(p)
        except OSError:
            continue
        # a real folder made by us: never a link, never another user's folder of the same pattern
        if not stat.S_ISDIR(est.st_mode) or est.st_uid != os.geteuid():
            continue
        shutil.rmtree(p, ignore_errors=True)
        if not os.path.lexists(p):
            removed.append(n)
    return removed


__all__ = ["use_root", "current_root", "system_root", "pid_namespace", "make", "scratch", "sweep"]
