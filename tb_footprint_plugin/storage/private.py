"""State folders and files are used only when they are ours: the one rule, in one place.

A logdir may be shared (a world-writable, sticky ``/scratch/team/runs``), and anyone who can
write into it can plant ``.tb-footprint`` — a symlink to their own folder, or a real folder of
theirs with the blob shards pre-made. A backup hard-linked into a folder another user can write
to is a backup they can unlink; a lock file created through their symlink is a file created
wherever they point. So every folder the tool writes state into (the state folder, the vault,
their subfolders, the scan cache's folder) is **ours**: a real directory (never a symlink),
owned by the effective user, not writable by group or others — and every state file is opened
with ``O_NOFOLLOW`` relative to an fd of such a folder and checked with ``fstat`` (a regular file
of ours) before a byte is written to it.

Inside a folder of ours, a stray entry where a state file or subfolder belongs (a symlink, a
FIFO, another user's file or folder) is *set aside*: renamed to ``<name>.refused-<time>-<n>``
beside itself (the link itself, never its target; kept for inspection, never deleted) and
recorded, so ``status`` can say so (``codes.Finding.UNTRUSTED_SET_ASIDE``). A folder that is not
ours at the top (the state folder or vault itself) is never touched: ``NotPrivate`` names it,
its owner and mode and what to do (``codes.Failure.STATE_NOT_OURS``).
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import threading
import time
from typing import List, Optional

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.storage.paths import is_state_name

#: what a set-aside entry is renamed to: ``<name>.refused-<unix time>-<n>`` (as a refused ledger)
UNTRUSTED_MARK = ".refused-"
_UNTRUSTED_RE = re.compile(r"^(?P<name>.+)\.refused-(?P<t>\d+)(-\d+)?$")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_mu = threading.Lock()
_count = 0


class NotPrivate(OSError):
    """A state folder or file that is not ours; nothing was written there. ``code`` is
    ``Failure.STATE_NOT_OURS``; ``path``, ``owner`` (uid or None) and ``mode`` say what was found."""

    code = Failure.STATE_NOT_OURS

    def __init__(self, path: str, why: str, advice: str = ""):
        super().__init__(errno.EPERM, f"{path}: {why}; not used for backups or state"
                         + (f". {advice}" if advice else ""))
        self.filename = path
        self.path = path
        self.why = why
        self.owner: Optional[int] = None
        self.mode: Optional[int] = None

    def __str__(self) -> str:  # the message alone (OSError's default adds "[Errno 1]")
        return self.strerror or ""


def user_name(uid: int) -> str:
    """``alice (uid 1001)``, or ``uid 1001`` when it has no passwd entry."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def describe(st: os.stat_result) -> str:
    """Owner and mode of a stat result, as errors name them: ``owned by alice (uid 1001), mode 1777``."""
    return f"owned by {user_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}"


def why_not_ours(st: os.stat_result, want_dir: bool = True) -> Optional[str]:
    """None when ``st`` (an ``lstat``) is a folder (or regular file) of ours not writable by group
    or others; else what it is, in words."""
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (made by {user_name(st.st_uid)}), never followed"
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return f"is not a directory ({describe(st)})"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return f"is not a regular file ({describe(st)})"
    if st.st_uid != os.geteuid():
        return f"belongs to another user ({describe(st)}; you are {user_name(os.geteuid())})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others ({describe(st)})"
    return None


def is_ours(st: os.stat_result, want_dir: bool = True) -> bool:
    """True for a real folder (or regular file) owned by the effective user, not writable by others."""
    return why_not_ours(st, want_dir) is None


def _refuse(path: str, st: Optional[os.stat_result], why: str, advice: str) -> NotPrivate:
    e = NotPrivate(path, why, advice)
    if st is not None:
        e.owner, e.mode = st.st_uid, stat.S_IMODE(st.st_mode)
    return e


ADVICE = ("Give a private folder of yours with --backup-dir (created 0700 if missing), "
          "or remove this one if you own it")


def check_private_dir(path: str, *, tighten: bool = False, advice: str = ADVICE) -> os.stat_result:
    """The ``lstat`` of ``path`` when it is a folder of ours; ``NotPrivate`` naming its owner and
    mode otherwise. ``tighten``: a real folder of ours that group or others may write to (made
    under a umask of 002 by an older version) loses those write bits instead of being refused —
    only for folders the tool itself names, never a folder the user pointed at."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotPrivate(path, "does not exist", advice) from None
    why = why_not_ours(st)
    if why and tighten and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        try:
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
                os.fchmod(fd, stat.S_IMODE(fst.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
            st = os.fstat(fd)
        finally:
            os.close(fd)
        why = why_not_ours(st)
    if why and stat.S_ISLNK(st.st_mode):
        try:
            why += f"; it points to {os.readlink(path)} ({describe(os.stat(path))})"
        except OSError:
            pass
    if why:
        raise _refuse(path, st, why, advice)
    return st


def _mkdir_private(path: str) -> bool:
    """``mkdir(path, 0700)``; False when something is already there."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    return True


def ensure_private_dir(path: str, root: Optional[str] = None, *, tighten_root: bool = False,
                       advice: str = ADVICE) -> str:
    """Make sure ``path`` and every folder from ``root`` down to it are folders of ours, and
    return ``path`` (absolute).

    ``root`` (default ``path`` itself) is the trusted anchor: created 0700 if missing (its
    missing parents too), then checked (``NotPrivate`` if it is not ours — it is never moved).
    Below it, a missing folder is created 0700; a symlink, file or another user's folder in its
    place is set aside (``set_aside``) and a fresh one made; one of ours that others may write
    to loses those bits. Every state folder above ``root`` (``.tb-footprint…`` in its path) must
    be ours too (``_chain``). Race-free: see ``open_private_dir``.
    """
    os.close(open_private_dir(path, root, tighten_root=tighten_root, advice=advice))
    return os.path.abspath(path)


def open_private_dir(path: str, root: Optional[str] = None, *, tighten_root: bool = False,
                     advice: str = ADVICE) -> int:
    """``ensure_private_dir``, returning a read fd of ``path`` itself (the caller closes it): a
    folder made relative to it (``dir_fd=``) is made in the very folder checked.

    Why by fds (review R15 F4): root may write any folder, so checking a folder by path and then
    making its subfolder by path let a stranger who can write the logdir swap the state folder
    for theirs in between, and root's ``tmp/`` was made inside it. Now each folder from the
    first one that must be ours down to ``path`` is made with ``mkdir(dir_fd=)`` of its checked
    parent and opened ``O_NOFOLLOW | O_DIRECTORY`` relative to it, then judged by ``fstat`` of
    that fd: a name swapped meanwhile for a link is never followed, and one swapped for a
    stranger's folder is refused (or, below ``root``, set aside in our own parent)."""
    path = os.path.abspath(path)
    root = os.path.abspath(root) if root else path
    if not (path == root or path.startswith(root.rstrip(os.sep) + os.sep)):
        raise ValueError(f"{path} is not below {root}")
    anchor, chain = _chain(root)
    below = [p for p in os.path.relpath(path, root).split(os.sep) if p not in ("", ".")]
    if not os.path.lexists(anchor):  # the user's own folders above: made as named, 0700
        missing = []
        cur = anchor
        while not os.path.lexists(cur) and os.path.dirname(cur) != cur:
            missing.append(cur)
            cur = os.path.dirname(cur)
        for d in reversed(missing):
            _mkdir_private(d)
    # the anchor is the user's own folder (a logdir, a --backup-dir's parent), as they name it;
    # O_PATH where there is one: a folder we may search but not list (0711) is used as before
    fd = os.open(anchor, getattr(os, "O_PATH", os.O_RDONLY) | _DIRECTORY | _CLOEXEC)
    cur = anchor
    try:
        for i, name in enumerate(chain + below):
            cur = os.path.join(cur, name)
            at_root = i == len(chain) - 1
            try:
                if i < len(chain):  # a state folder above root, or root: never moved, refused
                    child = _ours_at(fd, name, cur, tighten=tighten_root if at_root else True, advice=advice)
                else:
                    child = _ours_below(fd, name, cur)
            except NotPrivate:
                raise
            except OSError as e:
                # a call relative to ``fd`` names its entry relatively ('.tb-footprint'): the error
                # names it whole (a read-only disk, permissions: review R16 F17)
                if isinstance(e.filename, str) and not os.path.isabs(e.filename):
                    e.filename = os.path.join(os.path.dirname(cur), e.filename)
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _chain(root: str):
    """(anchor, names): the folder the checks start from, as the user names it, and the names
    from there down to ``root``. With a state folder in ``root``'s path (``<state>/tmp``, the
    scratch root) the anchor is the folder holding the outermost one, each state folder down to
    ``root`` must be ours (task N2 item 4: only this keeps root out of a folder another uid
    owns); else the anchor is ``root``'s parent (the user's own folders: a logdir, a
    --backup-dir, anchored where the caller says)."""
    parts = root.split(os.sep)
    first = next((i for i, part in enumerate(parts[:-1]) if part and is_state_name(part)), None)
    if first is None:
        return os.path.dirname(root) or os.sep, [parts[-1]] if parts[-1] else []
    return os.sep.join(parts[:first]) or os.sep, parts[first:]


def _made_at(fd: int, name: str) -> bool:
    """``mkdir(name, 0700, dir_fd=fd)``; False when something is already there."""
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
    except FileExistsError:
        return False
    return True


def make_private_at(fd: int, name: str) -> bool:
    """The one way a private folder is made: ``mkdir(name, 0700, dir_fd=fd)`` in the folder ``fd``
    (a descriptor its caller reached without following a link); False when something is there
    already, left as it is (a folder of ours made earlier with the umask's mode is accepted: the
    caller's own checks judge what it finds). For stores of tool state (``PosixStore.private_folders``)."""
    return _made_at(fd, name)


def _open_at(fd: int, name: str) -> Optional[int]:
    """A read fd of the folder ``name`` in ``fd``, never through a link; None when ``name`` is
    not a folder (a link, a file) or is gone."""
    try:
        return os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
        raise


def _why_at(fd: int, name: str, child: Optional[int], tighten: bool) -> Optional[str]:
    """Why the folder open as ``child`` (``name`` in ``fd``) is not ours, or None; ``tighten``: a
    folder of ours others may write to loses those bits through its fd first."""
    if child is None:
        try:
            return why_not_ours(os.stat(name, dir_fd=fd, follow_symlinks=False)) or "changed while it was checked"
        except FileNotFoundError:
            return "does not exist"
    st = os.fstat(child)
    why = why_not_ours(st)
    if why and tighten and st.st_uid == os.geteuid():
        os.fchmod(child, stat.S_IMODE(st.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        why = why_not_ours(os.fstat(child))
    return why


def _refused_at(fd: int, name: str, path: str, why: str, advice: str) -> NotPrivate:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            why += f"; it points to {os.readlink(name, dir_fd=fd)}"
        except OSError:
            pass
    return _refuse(path, st, why, advice)


def _ours_at(fd: int, name: str, path: str, *, tighten: bool, advice: str) -> int:
    """The folder ``name`` in ``fd`` (made 0700 when missing), opened and ours; ``NotPrivate``
    otherwise (it is never moved: a state folder or the anchor's own ``root``)."""
    _made_at(fd, name)
    child = _open_at(fd, name)
    why = _why_at(fd, name, child, tighten)
    if why:
        if child is not None:
            os.close(child)
        raise _refused_at(fd, name, path, why, advice)
    return child


def _ours_below(fd: int, name: str, path: str) -> int:
    """The folder ``name`` in our folder ``fd``, ours: made 0700 when missing; a stray entry in its
    place (a link, a file, another user's folder) set aside in ``fd`` and a fresh one made."""
    _made_at(fd, name)
    child = _open_at(fd, name)
    if _why_at(fd, name, child, tighten=True) is None:
        return child
    if child is not None:
        os.close(child)
    set_aside_at(fd, name)
    _made_at(fd, name)
    child = _open_at(fd, name)
    why = _why_at(fd, name, child, tighten=False)
    if why:  # someone raced us to it: refuse, never follow
        if child is not None:
            os.close(child)
        raise _refused_at(fd, name, path, why, ADVICE)
    return child


def set_aside(path: str) -> str:
    """Rename the entry ``path`` (a symlink itself, never its target) to
    ``<path>.refused-<time>-<n>`` in the same folder, and return the new name. Nothing is
    deleted: it stays there for inspection, and ``untrusted_in`` lists it."""
    global _count
    with _mu:
        _count += 1
        n = _count
    dest = f"{path}{UNTRUSTED_MARK}{int(time.time())}-{os.getpid()}{n}"
    os.rename(path, dest)
    return dest


def set_aside_at(dir_fd: int, name: str) -> str:
    """``set_aside`` of the entry ``name`` in the folder open as ``dir_fd`` (a folder checked ours
    once, whose path may have been swapped since: the rename stays in that very folder)."""
    global _count
    with _mu:
        _count += 1
        n = _count
    dest = f"{name}{UNTRUSTED_MARK}{int(time.time())}-{os.getpid()}{n}"
    os.rename(name, dest, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return dest


def set_aside_stranger(path: str) -> Optional[str]:
    """Set ``path`` aside unless it is absent or a regular file of ours with one link (what a
    rename is about to replace: the link or stranger's file is kept, and reported, instead of
    silently dropped). Returns the new name, or None when nothing was moved."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if why_not_ours(st, want_dir=False) is None or (
            stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1):
        return None
    return set_aside(path)


def untrusted_in(folder: str) -> List[dict]:
    """Entries of ``folder`` (and its direct subfolders) that were set aside as untrusted:
    ``{"file", "name", "time"}`` each (what ``status`` reports)."""
    out = []
    dirs = [folder]
    try:
        for n in os.listdir(folder):
            p = os.path.join(folder, n)
            if os.path.isdir(p) and not os.path.islink(p) and UNTRUSTED_MARK not in n:
                dirs.append(p)
    except OSError:
        return out
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            m = _UNTRUSTED_RE.match(n)
            if m:
                out.append({"file": os.path.join(d, n), "name": m.group("name"), "time": int(m.group("t"))})
    return out


def tool_named(path: str) -> bool:
    """True when ``path`` is in or under a state folder the tool names (``.tb-footprint``,
    ``.tb-footprint-u<uid>``): folders of ours there that others may write to are tightened
    (made under a umask of 002 by an older version), never a folder the user pointed at."""
    return any(is_state_name(part) for part in os.path.abspath(path).split(os.sep))


def check_parent(path: str) -> None:
    """Make sure the folder holding ``path`` is a folder of ours. One that is not (a symlink, a
    stranger's folder) is set aside and made afresh when it is a subfolder inside a state folder
    (``<state>/oplog``, ``<state>/journal``) and the folder above it is ours; otherwise
    ``NotPrivate``: a folder the user named (a logdir holding ``--ledger``, a ``--backup-dir``)
    is never moved."""
    d = os.path.dirname(os.path.abspath(path))
    try:
        check_private_dir(d, tighten=tool_named(d))
    except NotPrivate:
        if not tool_named(d) or is_state_name(os.path.basename(d)):
            raise  # only a subfolder inside a state folder is ever moved: never a logdir, never the state folder
        up = os.path.dirname(d)
        try:
            check_private_dir(up, tighten=tool_named(up))
        except (NotPrivate, OSError):
            raise NotPrivate(d, "is not a folder of yours, nor is the folder holding it") from None
        ensure_private_dir(d, up)


def _open_dir_of(path: str) -> int:
    """An fd of the folder holding ``path``, checked with ``fstat`` to be a folder of ours (no
    symlink, ours, not writable by group or others): the file is then opened relative to this
    fd, so the folder cannot be swapped for a stranger's between the check and the open."""
    d = os.path.dirname(os.path.abspath(path))
    dfd = os.open(d, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    try:
        why = why_not_ours(os.fstat(dfd))
    except BaseException:
        os.close(dfd)
        raise
    if why:
        os.close(dfd)
        raise NotPrivate(d, why)
    return dfd


def open_private(path: str, flags: int, mode: int = 0o600, *, parent: bool = True) -> int:
    """An fd of the state file ``path``, opened ``O_NOFOLLOW | O_CLOEXEC`` (``O_NONBLOCK`` while
    opening: a FIFO never hangs it), and checked with ``fstat`` to be a regular file of ours.
    With ``parent`` its folder must be a folder of ours first (``NotPrivate``).

    Anything else in its place — a symlink, FIFO, device, folder, another user's file — is set
    aside, never followed or written, and the open is tried once more (with ``O_CREAT`` a fresh
    file is made). Hard links: with ``parent`` the file is opened through an fd of its folder,
    checked to be ours and closed to strangers, so nobody else can have put an entry there, and
    a file of ours with several links (a user's ``cp -al`` or rsnapshot backup of the logdir
    linked it) is used as it is — moving it aside would split a live journal or lock in two.
    Without ``parent`` a second link may be a stranger's entry for a file elsewhere: set aside."""
    if parent:
        check_parent(path)
    for attempt in (0, 1):
        dfd = _open_dir_of(path) if parent else None
        try:
            try:
                if dfd is None:
                    fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, mode)
                else:
                    fd = os.open(os.path.basename(path), flags | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, mode,
                                 dir_fd=dfd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR) or attempt:
                    raise
                set_aside(path)  # a symlink, a FIFO nobody reads, a folder
                continue
        finally:
            if dfd is not None:
                os.close(dfd)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() \
                    and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))  # ours: fixed
                st = os.fstat(fd)
            bad = why_not_ours(st, want_dir=False)
            if bad is None and st.st_nlink > 1 and not parent:
                bad = "has other hard links (a file elsewhere)"
            if bad is None:
                fl = fcntl.fcntl(fd, fcntl.F_GETFL)
                fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if attempt or not os.path.lexists(path):
            raise NotPrivate(path, bad)
        set_aside(path)
    raise NotPrivate(path, "kept being replaced while opening")  # pragma: no cover


__all__ = ["NotPrivate", "ADVICE", "UNTRUSTED_MARK", "user_name", "describe", "why_not_ours", "is_ours",
           "check_private_dir", "ensure_private_dir", "set_aside", "untrusted_in", "check_parent", "open_private", "tool_named",
           "set_aside_stranger"]
