"""File I/O primitives of the engine: one chunk size, streaming sha256, durable writes.

Every helper streams (memory never grows with file size) and makes what it wrote durable
(fsync of the file, and of the directory after a rename), because the transaction's safety
argument rests on a record or a backup being on disk before the next step runs.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from typing import BinaryIO, Dict, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.sparse import SparseWriter

from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.private import (NotPrivate, check_private_dir, ensure_private_dir, open_private,
                                                 set_aside, set_aside_stranger, tool_named)
from tb_footprint_plugin.storage.regular import open_regular, open_regular_at
from tb_footprint_plugin.storage.store import StoreFailure, on_a_new_line

CHUNK = 1 << 20  # one read size for every stream of the tool
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def stat_sig(path: str):
    """``(inode, size, mtime_ns)`` of ``path`` (symlinks followed), or None if it cannot be
    stat'ed: what proves a file unchanged between two looks at it (a write changes the mtime;
    the ctime is left out because a backup's hard link changes it)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def sha256_stream(f) -> str:
    """Streaming sha256 of a binary file object (bounded memory)."""
    return hash_and_count(f)[0]


def hash_and_count(f, out=None) -> Tuple[str, int]:
    """Streaming ``(sha256, bytes read)`` of a binary file object, each chunk also written to
    ``out`` when given (bounded memory): one pass hashes what a copy writes."""
    h, n = hashlib.sha256(), 0
    while True:
        b = f.read(CHUNK)
        if not b:
            break
        h.update(b)
        n += len(b)
        if out is not None:
            out.write(b)
    return h.hexdigest(), n


def plausible_id(i) -> Optional[int]:
    """A record's uid or gid (untrusted input) when it is a plausible id, else None (names no one)."""
    return i if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1 << 32 else None


def recorded_owner(rec) -> Optional[Tuple[int, int]]:
    """``(uid, gid)`` of a record (a backup, manifest or rmdir record: untrusted input) when both
    are plausible ids; None otherwise (records written before the owner was kept have none)."""
    if not isinstance(rec, dict):
        return None
    uid, gid = plausible_id(rec.get("uid")), plausible_id(rec.get("gid"))
    return (uid, gid) if uid is not None and gid is not None else None


def give_owner(fd: int, owner: Optional[Tuple[int, int]]) -> None:
    """Give the file or folder open at ``fd`` the recorded ``owner`` (``recorded_owner``), through
    the fd, so a link is never followed. Root gives both (root reducing a user's logdir must leave
    it theirs). Anyone else gives back only the group, when they are a member of it: a run written
    with a team's group (mode 0640) is read by that team, and a file made anew in its place would
    otherwise take the process's group and shut the team out, for good after a restore."""
    if owner is None:
        return
    st = os.fstat(fd)
    if os.geteuid() == 0:
        if (st.st_uid, st.st_gid) != owner:
            os.fchown(fd, owner[0], owner[1])
    elif st.st_gid != owner[1] and st.st_uid == os.geteuid() and owner[1] in _my_groups():
        os.fchown(fd, -1, owner[1])


def _my_groups() -> set:
    return {os.getegid(), *os.getgroups()}


def permission_bits(mode) -> Optional[int]:
    """A record's ``mode`` (untrusted input) as permission bits only (never set-user-id,
    set-group-id or sticky), or None when it is no plausible mode."""
    return mode & 0o777 if isinstance(mode, int) and not isinstance(mode, bool) and mode >= 0 else None


class StagedReplaced(OSError):
    """The name of a reduce's staged file no longer holds the file this process made there (a
    folder others may write: a link to another file, or another's file, renamed over it): that file
    is never given an owner or bits, whatever it is (review R27 F1)."""


def take_over(path: str, rec: dict) -> Tuple[int, int]:
    """Give the file at ``path`` (a reduce's staged file, which takes an original's place) the
    original's recorded owner (``give_owner``: only when root) and permission bits (never
    set-user-id, set-group-id or sticky), through its fd, following no link: reduced, a private
    event file stays private (``open_staged`` made it 0600; the umask's 0644 was readable by
    anyone), and a team's file keeps its group. ``StagedReplaced`` when its name no longer holds
    the file ``open_staged`` made. Returns its (inode, change time in ns) once taken over: the swap
    renames that file and no other put at its name since (``engine.swap.apply_swap``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # O_NOFOLLOW stops no hard link: a teammate who may write the run's folder can rename a link
        # to a file outside the logdir over the staged name after its checks; the file
        # ``open_staged`` made is a regular file of this user's, of one name, owner-only until here
        st = os.fstat(fd)
        made = staged_here(path)
        if made is not None and (st.st_dev, st.st_ino) != made or not stat.S_ISREG(st.st_mode) \
                or st.st_nlink != 1 or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise StagedReplaced(errno.EPERM, "not the file this reduce staged there (a link to another file, or "
                                 "another user's file, was put at its name: a folder others may write); not touched",
                                 path)
        give_owner(fd, recorded_owner(rec))
        mode = permission_bits(rec.get("mode")) if isinstance(rec, dict) else None
        if mode is not None:
            os.fchmod(fd, mode)
        st = os.fstat(fd)  # its change time now: a file made at its name later has another, inode reused or not
        return st.st_ino, st.st_ctime_ns
    finally:
        os.close(fd)


def finish_new_file(fo, mode: Optional[int] = None, mtime_ns: Optional[int] = None,
                    mtime: Optional[float] = None, owner: Optional[Tuple[int, int]] = None) -> os.stat_result:
    """Set a freshly written file's owner (when root, ``give_owner``), mode and modification time
    through its fd, fsync it, and return its ``fstat`` (whose dev/ino ``check_still`` compares
    before the caller's rename)."""
    fo.flush()
    give_owner(fo.fileno(), owner)  # first: a chown clears the set-id bits the mode may hold
    if mode is not None:
        os.fchmod(fo.fileno(), mode & 0o7777)
    if mtime_ns is not None:
        os.utime(fo.fileno(), ns=(mtime_ns, mtime_ns))
    elif mtime is not None:
        os.utime(fo.fileno(), (mtime, mtime))
    os.fsync(fo.fileno())
    return os.fstat(fo.fileno())


def check_still(path: str, ident: os.stat_result, dir_fd: Optional[int] = None) -> None:
    """``FileExistsError`` unless ``path`` (``dir_fd``: its folder, ``throttle.name_in``) is still the file
    ``ident`` was taken of: a name swapped meanwhile (a folder others may write to) is never
    renamed into place."""
    st = os.stat(fsops.name_in(path, dir_fd), dir_fd=dir_fd, follow_symlinks=False)
    if (st.st_dev, st.st_ino) != (ident.st_dev, ident.st_ino):
        raise FileExistsError(errno.EEXIST, "replaced while it was being written; not used", path)


def sha256_file(path: str) -> str:
    """Streaming sha256 of a file."""
    with open_regular(path, follow_symlinks=True) as f:  # never blocks on a FIFO or a device
        return sha256_stream(f)


def matches(path: str, sha: str, size: int, dir_fd: Optional[int] = None) -> bool:
    """True when ``path`` (``dir_fd``: its folder, ``throttle.name_in``) is a regular file holding exactly
    the bytes of (``sha``, ``size``); False if unreadable, and for a link whatever its target holds
    (a name planted as a link is never taken for the file it names: it was read through before,
    when the link's own size matched)."""
    try:
        with (open_regular(path) if dir_fd is None else open_regular_at(dir_fd, fsops.name_in(path, dir_fd))) as f:
            return os.fstat(f.fileno()).st_size == size and sha256_stream(f) == sha
    except OSError:
        return False


def is_regular(path: str) -> bool:
    """True for a regular file that is not a symlink (the non-regular-file guard)."""
    try:
        return stat.S_ISREG(fsops.lstat(path).st_mode)
    except OSError:
        return False


def fsync_file(f) -> None:
    """Flush a Python file object and fsync it."""
    f.flush()
    os.fsync(f.fileno())


def fsync_dir(path: str) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = fsops.os_open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_folder(d: str) -> None:
    """The folder a state file is written into: made 0700 if missing, else it must be a folder of
    ours (``private.NotPrivate``): a temp file and a rename in a folder someone else controls
    (a symlink to theirs, a planted one) would put state wherever they say."""
    if os.path.lexists(d):
        check_private_dir(d, tighten=tool_named(d))
    else:
        ensure_private_dir(d)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file, fsync and rename: readers see old or new, never
    half. Only into a folder of ours (a symlink or stranger's file at ``path``: set aside, kept)."""
    d = os.path.dirname(os.path.abspath(path))
    private_folder(d)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            fsync_file(f)
        set_aside_stranger(path)  # a planted symlink or stranger's file: kept aside, reported
        fsops.replace(tmp, path)
        fsync_dir(d)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, obj, compact: bool = False) -> None:
    """``atomic_write`` of ``obj`` as JSON: indented, or (``compact``) one line by the C encoder
    (about ten times faster, for state rewritten often while it grows, like a batch's ledger)."""
    atomic_write(path, json.dumps(obj, sort_keys=True, **({"separators": (",", ":")} if compact else {"indent": 1}))
                 .encode("utf-8"))


def create_json(path: str, obj) -> bool:
    """Create ``path`` holding ``obj`` only if nothing is there yet: written whole to a temp file,
    fsynced, then hard-linked into place (the link fails if the name exists, atomically, also on
    NFS). True if this call created it; False if another writer got there first (its file stands).
    Only into a folder of ours, like ``atomic_write_json``."""
    d = os.path.dirname(os.path.abspath(path))
    private_folder(d)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            fsync_file(f)
        fsops.op()
        set_aside_stranger(path)  # a planted symlink would otherwise stand for the file
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        fsync_dir(d)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def append_line(path: str, line: str, *, create: bool = True,
                expect: Optional[Tuple[int, int]] = None, sync: bool = True,
                limit: Optional[int] = None) -> Tuple[int, int]:
    """Append one text line (ending in a newline) and fsync it before returning (``sync=False``:
    left to the next fsync of the file, for a record no destructive step waits on); returns the
    file's ``(st_dev, st_ino)``. Only to a regular file of ours in a folder of ours
    (``private.open_private``): a symlink, FIFO, device or another user's file planted in its
    place is set aside, never followed or written, and a fresh file started; a folder that is
    not ours raises ``private.NotPrivate``.

    ``create=False``: the file must exist (``FileNotFoundError`` otherwise), never made anew.
    ``expect``: the ``(st_dev, st_ino)`` the file had when it was made; a file of another
    identity at ``path`` is not written (``private.NotPrivate``): a journal is one file from
    its first record to its last, never started again half way.

    ``limit``: a file that is not empty is not taken past ``limit`` bytes: the line is not
    written and ``StoreFailure(TOO_LARGE)`` naming ``path`` is raised (the caller rolls the file
    over and appends again). The size is the open file's, read under the caller's ``flock``, so
    concurrent appenders never push it past (review R2-6)."""
    fsops.op()  # the open
    if expect is not None:
        create = False
    fd = open_private(path, os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0))
    try:
        st = os.fstat(fd)
        if expect is not None and (st.st_dev, st.st_ino) != tuple(expect):
            raise NotPrivate(path, "is not the file this operation created (replaced meanwhile)",
                             "It was not written; the operation stops and is rolled back")
        # a line torn by a crash (power loss, a partial write on a full disk) stays one damaged
        # line its reader skips and names, instead of swallowing this whole line into it: the
        # rule of every store's append (review R8: one text of it)
        raw = line.encode("utf-8")
        data = on_a_new_line(os.pread(fd, 1, st.st_size - 1) if st.st_size else b"", raw)
        # + 1 (the newline a torn last line gets) as ``Store.append`` counts it on every store
        if limit is not None and st.st_size and st.st_size + len(raw) + 1 > limit:
            raise StoreFailure(StoreError.TOO_LARGE, path, f"an append past {limit} bytes")
        # written through the fd itself: a Python file object around it cost five system calls
        # more an append (review R4)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return st.st_dev, st.st_ino


def only_ours_could_put(folder: os.stat_result, st: os.stat_result) -> bool:
    """Whether the file ``st`` in the folder ``folder`` (its stat) can only have been put there by this
    user: a folder of ours that no one else may write. A start after a kill before the stage
    recorded its file's inode knows it by nothing else, nor a rollback a name its stage never made
    (the stage records name every file's temporary before the first is written); in a team folder,
    or a user's folder reduced by root, a teammate could have moved a file of the user's own to
    that name meanwhile (review R27 F3's start half), so it is left there and named
    (``engine.placement.undo_new_name``), never removed; a leftover found where a temporary is made
    anew (``create_new``) is set aside instead. Not even in a sticky folder (review R28 F1): the
    sticky bit keeps a teammate from replacing the user's files, not from filling a free name."""
    return folder.st_uid == os.geteuid() and not folder.st_mode & 0o022 and stat.S_ISREG(st.st_mode)


def create_new(path: str, mode: int = 0o600) -> int:
    """A write fd of a file made anew at ``path`` (``O_CREAT | O_EXCL | O_NOFOLLOW``): the tool's
    temporary files inside run folders, whose names others may guess. Whatever stands there is
    never followed or written: a leftover regular file of ours (a crashed attempt's) is removed
    first where no one else could have put it (``only_ours_could_put``), anything else (a planted symlink, a FIFO, another user's file) is set aside
    (``private.set_aside``: renamed, kept, never deleted); ``FileExistsError`` if the name keeps
    being taken."""
    for attempt in (0, 1, 2):
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
        except FileExistsError:
            if attempt == 2:
                raise FileExistsError(errno.EEXIST, "something keeps appearing where a temporary file of this "
                                      "tool belongs; not followed, not written", path) from None
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and \
                only_ours_could_put(os.stat(os.path.dirname(path) or "."), st):
            with contextlib.suppress(FileNotFoundError):
                fsops.unlink(path)  # a leftover of ours; with other links, their bytes stay there
        else:
            set_aside(path)
    raise FileExistsError(errno.EEXIST, "not created", path)  # pragma: no cover


#: (device, inode) of each staged file this process made (``open_staged``), by absolute path, until
#: it is swapped in or undone (``forget_staged``): its name is in a folder others may write, so the
#: file found there later is acted on only while it is this one (review R27 F1/F3)
_STAGED: Dict[str, Tuple[int, int]] = {}
#: the most remembered at once (the oldest goes first): memory flat however many files a process
#: stages; a reduce's few files in flight are the newest
STAGED_REMEMBERED = 4096


def staged_here(path: str) -> Optional[Tuple[int, int]]:
    """(device, inode) of the staged file this process made at ``path`` and still owns; None when it
    made none there (another process's, before a restart: the journal's records tell then)."""
    return _STAGED.get(os.path.abspath(path))


def forget_staged(path: str) -> None:
    """The staged file at ``path`` is swapped in or undone: no longer this process's to look for."""
    _STAGED.pop(os.path.abspath(path), None)


def open_staged(path: str) -> BinaryIO:
    """A buffered write file made anew at ``path`` (``create_exclusive``: never through a link or
    over a file standing there), owner-only while it is written: another user who may read (or,
    in a team folder with umask 002, write) the original must not open it meanwhile and keep that
    descriptor past the swap. ``take_over`` gives it the original's owner and bits at the end."""
    fd = create_exclusive(path, 0o600)
    st = os.fstat(fd)
    _STAGED[os.path.abspath(path)] = (st.st_dev, st.st_ino)
    if len(_STAGED) > STAGED_REMEMBERED:  # a transform's output outside a reduce is never forgotten
        _STAGED.pop(next(iter(_STAGED)), None)
    return os.fdopen(fd, "wb")


def create_exclusive(path: str, mode: int = 0o600, dir_fd: Optional[int] = None) -> int:
    """A write fd of a file made anew at ``path`` (``O_CREAT | O_EXCL | O_NOFOLLOW``), never over
    nor instead of anything standing there: ``FileExistsError``, and whatever is there stays
    (unlike ``create_new``, no file of that name is taken for a leftover of ours). For temporary
    names with a random part, beside a user's own files. ``dir_fd``: its folder (``throttle.name_in``)."""
    return os.open(fsops.name_in(path, dir_fd), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode,
                   dir_fd=dir_fd)


def unlink_if_same(path: str, made: os.stat_result, dir_fd: Optional[int] = None) -> bool:
    """Remove ``path`` (``dir_fd``: its folder, ``throttle.name_in``) only while it is still the file
    ``made`` (its fstat when this process created it: same device and inode, a regular file);
    True when removed. A name another process or user put there since is left alone."""
    try:
        st = os.stat(fsops.name_in(path, dir_fd), dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (made.st_dev, made.st_ino):
        return False
    if dir_fd is None:
        fsops.unlink(path)
    else:
        fsops.unlink(path, dir_fd=dir_fd)
    return True


def hash_count_sparse(src: BinaryIO, out: BinaryIO) -> Tuple[str, int]:
    """``hash_and_count(src, out)`` writing ``out`` through a ``SparseWriter``: zero blocks
    become holes, the file's length is what was read."""
    sink = SparseWriter(out)
    got, n = hash_and_count(src, sink)
    sink.finish(n)
    return got, n


class CopyMismatch(OSError):
    """A copy made by ``copy_new`` does not hash to what it should (the source changed or is
    damaged); the copy was removed."""


def copy_new(src: str, dst: str, sha: str, mode: Optional[int] = None, mtime_ns: Optional[int] = None,
             mtime: Optional[float] = None, exclusive: bool = False, sparse: bool = False,
             owner: Optional[Tuple[int, int]] = None, dir_fd: Optional[int] = None,
             src_dir_fd: Optional[int] = None) -> os.stat_result:
    """Copy the regular file ``src`` into a new file ``dst`` (``create_new``) that must hash to
    ``sha`` (``CopyMismatch`` otherwise), with ``mode`` and the modification time set, all
    through its fd: a name swapped for a link meanwhile (a folder others may write to) is never
    followed. The copy is fsynced; ``dst`` is checked to still be that file before returning,
    so the caller's rename moves this copy. ``exclusive``: made by ``create_exclusive`` (nothing
    standing at ``dst`` is removed: ``FileExistsError``). On failure only the file this call made
    is removed. Returns that file's fstat (``unlink_if_same`` removes only it). ``sparse``: the
    zero blocks of ``src`` are left holes in ``dst`` (``SparseWriter``: a put-back allocates what
    the original did); ``owner``: given back when root (``finish_new_file``). ``dir_fd``,
    ``src_dir_fd``: the folders of ``dst`` and ``src`` (``throttle.name_in``; then ``exclusive``
    only, and ``src`` never through a link)."""
    if dir_fd is not None and not exclusive:
        raise ValueError("copy_new into a folder's descriptor is exclusive only")
    fd = create_exclusive(dst, dir_fd=dir_fd) if exclusive else create_new(dst)
    made = os.fstat(fd)
    try:
        with os.fdopen(fd, "wb") as fo, (open_regular(src, follow_symlinks=True) if src_dir_fd is None
                                         else open_regular_at(src_dir_fd, fsops.name_in(src, src_dir_fd))) as fi:
            got, _ = hash_count_sparse(fi, fo) if sparse else hash_and_count(fi, fo)
            fo.flush()
            if got != sha:
                raise CopyMismatch(errno.EIO, f"copy of {src} does not match its sha256", dst)
            ident = finish_new_file(fo, mode, mtime_ns, mtime, owner)
        check_still(dst, ident, dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            unlink_if_same(dst, made, dir_fd)  # a full disk or a failed check leaves no temp file behind
        raise
    return made


def copy_file(src: str, dst: str) -> None:
    """Copy bytes with fsync into a new file ``dst`` (``create_new``: never through a link planted
    at that name); metadata is restored separately; ``src`` must be a regular file."""
    with open_regular(src, follow_symlinks=True) as fi:
        fo = os.fdopen(create_new(dst), "wb")
        try:
            with fo:
                shutil.copyfileobj(fi, fo, CHUNK)
                fsync_file(fo)
        except BaseException:
            with contextlib.suppress(OSError):
                fsops.unlink(dst)  # the file this call made (a full disk leaves no partial copy)
            raise


__all__ = ["CHUNK", "hash_count_sparse", "sha256_stream", "sha256_file", "matches", "is_regular", "fsync_file",
           "fsync_dir", "private_folder", "atomic_write", "atomic_write_json", "create_json", "append_line", "copy_file", "create_new", "create_exclusive", "unlink_if_same", "copy_new",
           "CopyMismatch", "plausible_id", "permission_bits", "take_over", "open_staged",
           "StagedReplaced", "staged_here", "forget_staged", "only_ours_could_put"]
