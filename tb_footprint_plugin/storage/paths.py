"""Where the tool keeps its state, and the path checks every writer goes through."""
from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import List, Optional, Tuple

from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage.regular import open_regular, read_capped

STATE_DIR_NAME = ".tb-footprint"
#: the demo's own record of the files it wrote (at the top of a demo logdir): bookkeeping, no run's
DEMO_MARKER = ".footprint-demo"
VAULTS_NAME = "vaults.json"  # vaults outside the state directory that a logdir's operations used
#: a vault's folders that hold a user's bytes (backups as stored, packs, retired runs; not their
#: index or bookkeeping): what "the vault holds" counts, for status and the tab alike
VAULT_HOLDINGS = ("blobs", "retired", os.path.join("packs", "data"))


#: another user's or a per-user state folder: ``.tb-footprint-u<uid>``
USER_STATE_RE = re.compile(r"^" + re.escape(STATE_DIR_NAME) + r"-u\d+$")


def is_state_name(name: str) -> bool:
    """True for ``.tb-footprint`` and every per-user ``.tb-footprint-u<uid>`` (the scan skips them all)."""
    # (every state name starts with the state folder's: the pattern asked only of those; a walk of
    # 100,000 runs asks this of each folder)
    return name.startswith(STATE_DIR_NAME) and (name == STATE_DIR_NAME or USER_STATE_RE.match(name) is not None)


def user_state_name(uid: Optional[int] = None) -> str:
    """``.tb-footprint-u<uid>``: the state folder of user ``uid`` (default: the effective user)
    where ``.tb-footprint`` is not theirs."""
    return f"{STATE_DIR_NAME}-u{os.geteuid() if uid is None else uid}"


def _ours_or_absent(path: str) -> Optional[bool]:
    """True: a real folder of ours; None: nothing there; False: anything else (a symlink,
    a file, another user's folder). Group-writable folders of ours count as ours: the tool
    tightens its own folders before writing (``private.ensure_private_dir``)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def state_dir(logdir: str) -> str:
    """This user's state folder of ``logdir``: journal, scan cache, ledger, history and locks.

    ``<logdir>/.tb-footprint`` when it is ours (or absent: it is made 0700 when first needed).
    Where it exists but is not ours — another user's folder, a symlink (a shared, world-writable
    logdir lets anyone plant one) — ours is ``<logdir>/.tb-footprint-u<uid>``, chosen without
    asking; once that one exists it is kept even if ``.tb-footprint`` goes away. Either is
    checked again before anything is written (``storage.private``): never followed, never
    another user's. Nothing in it has ``tfevents`` in its name or a ``plugins/profile`` path,
    so neither TensorBoard nor xprof ever takes it for a run.
    """
    base = os.path.abspath(logdir)
    mine = os.path.join(base, user_state_name())
    if _ours_or_absent(mine):
        return mine
    default = os.path.join(base, STATE_DIR_NAME)
    return default if _ours_or_absent(default) is not False else mine


def state_dirs_in(logdir: str) -> List[str]:
    """Every state folder at the top of ``logdir`` (anyone's): skipped by the scan, never
    written unless it is ``state_dir``'s choice."""
    base = os.path.abspath(logdir)
    try:
        return sorted(os.path.join(base, n) for n in os.listdir(base) if is_state_name(n))
    except OSError:
        return [os.path.join(base, STATE_DIR_NAME)]


def other_users_state_dirs(logdir: str) -> List[Tuple[str, int]]:
    """``(path, owner uid)`` of every real state folder at the top of ``logdir`` owned by another
    user: a team logdir where ``.tb-footprint`` is someone else's and each other user has a
    ``.tb-footprint-u<uid>``. Never read or written by us; named so their backups (perhaps the
    ones this user made before per-user folders existed) are not silently invisible."""
    out = []
    for p in state_dirs_in(logdir):
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid != os.geteuid():
            out.append((p, st.st_uid))
    return out


def writable_by_others_unsticky(logdir: str) -> Optional[str]:
    """Why others can move this user's state folder out of ``logdir`` (its mode lets the group or
    anyone write it and it has no sticky bit, so any of them may rename entries they do not own:
    review R13 F2), or None. A changing verb stops when that happens (``state_moved``); this says
    so before."""
    try:
        st = os.stat(logdir)
    except OSError:
        return None
    who = [w for bit, w in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "anyone")) if st.st_mode & bit]
    if not who or st.st_mode & stat.S_ISVTX:
        return None
    return (f"{' and '.join(who)} may write {logdir} (mode {stat.S_IMODE(st.st_mode):04o}, no sticky bit): another "
            f"user can move {STATE_DIR_NAME} away; `chmod +t {logdir}` keeps each user's entries theirs")


def cache_dir(logdir: str) -> str:
    """Where the scan cache of ``logdir`` lives: its state directory once the user changed
    something there (a reduce made it), otherwise the user's cache directory
    (``$XDG_CACHE_HOME`` or ``~/.cache``, ``tb-footprint/<hash of the logdir's path>``), so that
    opening a logdir in TensorBoard writes nothing into it."""
    state = state_dir(logdir)
    if os.path.isdir(state):
        return state
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(os.path.realpath(logdir).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return os.path.join(os.path.abspath(base), "tb-footprint", key)


def vault_dir(logdir: str, backup_dir: Optional[str] = None) -> str:
    """The backup vault: ``backup_dir`` if given, else the state directory."""
    return os.path.abspath(backup_dir) if backup_dir else state_dir(logdir)


#: the largest vault index read back (a list of folder paths: kilobytes)
MAX_VAULT_INDEX = 16 << 20


def recorded_vaults(state: str) -> List[str]:
    """The vault roots listed in ``<state>/vaults.json`` (empty when missing or unreadable). Read
    as the untrusted file it is: a regular file only, never through a link, at most
    ``MAX_VAULT_INDEX`` bytes (review R12: a FIFO planted there hung every verb that reads it)."""
    try:
        with open_regular(os.path.join(state, VAULTS_NAME)) as f:
            raw = read_capped(f, MAX_VAULT_INDEX)
        if len(raw) > MAX_VAULT_INDEX:
            return []
        roots = jsondoc.loads(raw)
    except (OSError, ValueError):
        return []
    if not isinstance(roots, list):
        return []
    # read back from disk: only absolute paths of real vaults (an ops/ folder), never the
    # filesystem root or a folder holding the logdir, are used
    logdir = os.path.realpath(os.path.dirname(os.path.abspath(state)))
    out = []
    for r in roots:
        if not isinstance(r, str) or "\x00" in r or not os.path.isabs(r):
            continue
        real = os.path.realpath(r)
        if real == os.path.sep or logdir == real or logdir.startswith(real.rstrip(os.sep) + os.sep):
            continue
        if os.path.isdir(os.path.join(r, "ops")) and _ours_or_absent(r):
            out.append(r)  # a vault that became someone else's folder (or a symlink) is never used
    return out


def is_within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or below it (both made absolute, no symlink resolution)."""
    path, root = os.path.abspath(path), os.path.abspath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def real_within(path: str, root: str) -> bool:
    """True when ``path`` resolves (following every symlink) to somewhere under ``root``."""
    return is_within(os.path.realpath(path), os.path.realpath(root))


class LinkOnTheWay(ValueError):
    """A folder on the way to a path is a symlink (``check_no_symlink``; its message names it):
    a caller codes it ``StoreError.SYMLINK``, never an interruption a next start would finish."""


def check_no_symlink(root: str, rel: str) -> None:
    """Refuse when a directory on the way from ``root`` to ``rel`` is a symlink
    (``LinkOnTheWay`` naming it) or ``rel`` leads out (``ValueError``): every writer calls this
    right before it acts, so a folder swapped for a link after the scan cannot lead a write or a
    delete out of the logdir."""
    cur = os.path.abspath(root)
    parts = [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]
    for part in parts[:-1]:
        if part == "..":
            raise ValueError(f"{rel}: leads out of {root}")
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            raise LinkOnTheWay(f"{rel}: {os.path.relpath(cur, root)} is a symlink; refusing to follow it")


# ---------------------------------------------------------------------------------------
# names and paths read back from disk (journals, manifests, caches) are untrusted input
# ---------------------------------------------------------------------------------------
#: an operation id: one plain path component (``20260101T120000-ab12cd`` today)
OP_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
#: an operation id as this tool makes them (``20261206T102617-fd2f8b``), on every store: what a
#: retirement's records must name, and how the scan tells a vault's manifest from a user's file
MADE_OP_ID_RE = re.compile(r"^\d{8}T\d{6}-[0-9a-f]{6}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class UnsafePath(ValueError):
    """A path or name from disk that would lead out of its root, or is not of its format."""


def is_op_id(value) -> bool:
    return isinstance(value, str) and OP_ID_RE.match(value) is not None


def is_sha256(value) -> bool:
    return isinstance(value, str) and SHA256_RE.match(value) is not None


def plausible_mtime_ns(value) -> Optional[int]:
    """``value`` when it can be a file's ``st_mtime_ns`` (an int in (-2**63, 2**63), not a bool:
    times before 1970 are negative and given back exactly), else None: a time read from a record
    (untrusted input) before ``os.utime`` is given it."""
    return value if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) < value < 1 << 63 \
        else None


def safe_rel(rel) -> str:
    """``rel`` if it is a relative path that stays below its root (no ``..``, not absolute,
    no NUL, not empty); ``UnsafePath`` otherwise. ``.`` (the root itself) is allowed."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise UnsafePath(f"{rel!r}: not a path")
    # a leading '~' is an ordinary name (a run called '~old'): no code here expands it, and
    # joining it under a root keeps it there
    if os.path.isabs(rel) or rel.startswith("/"):
        raise UnsafePath(f"{rel!r}: an absolute path where a path inside the logdir or vault belongs")
    if ".." in rel.replace(os.sep, "/").split("/"):
        raise UnsafePath(f"{rel!r}: leads out of its root ('..')")
    return rel


def contained(root: str, rel) -> str:
    """The absolute path of ``rel`` under ``root``, checked to stay there (``UnsafePath``).

    The one containment check for paths that come from a file: every engine path built from
    a journal record, a manifest or a cache goes through here.
    """
    safe_rel(rel)
    root = os.path.abspath(root)
    p = root if rel == "." else os.path.normpath(os.path.join(root, rel))
    if not is_within(p, root):
        raise UnsafePath(f"{rel!r}: leads out of {root}")
    return p
