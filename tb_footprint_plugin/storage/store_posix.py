"""``PosixStore``: the ``Store`` interface over a local (or NFS/Lustre) folder.

Every key is checked (``store.check_key``, ``paths.contained``) and then its folder is reached
from the root's descriptor without following any symlink: in one ``openat2`` with
``RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`` where Linux has it (one call a key, not two a folder),
else, and whenever that call fails but for a folder missing where none is made, by walking its
folders one at a time with ``O_DIRECTORY | O_NOFOLLOW`` (``openat``), which names what it found:
a symlink anywhere on the way, planted before the call or swapped in during it, is refused with
``StoreError.SYMLINK``, never followed. Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and
checked with ``fstat`` (the guard of ``storage.regular``): a FIFO or a device is never read.

Writes go to a temporary file in the destination folder (``.footprint-tmp-*``), are fsynced,
then put in place by ``link`` (if absent: atomic, fails when the name exists) or ``rename``
(atomic), and the folder is fsynced. Version tokens are ``inode-size-mtime_ns``; a conditional
write takes an ``flock`` on the file it replaces and re-checks that the name still holds that
inode, so two writers through ``PosixStore`` never both win (a process writing with plain
``open`` is not held off: a training job never takes locks).

Why one module: one class, ``PosixStore``, implementing the ``Store``
interface; the ``openat`` walk, the temporary-file writes and the flocked conditional writes use
the same descriptor helpers, and splitting a store's methods over files would hide which
guarantees one method gives the others.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import platform
import secrets
import stat
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.openfiles import find_writers
from tb_footprint_plugin.storage.paths import UnsafePath, contained
from tb_footprint_plugin.storage.private import make_private_at
from tb_footprint_plugin.storage.regular import kind_of, open_regular
from tb_footprint_plugin.storage.remote import RequestStats
from tb_footprint_plugin.storage.store import (READ_ALL_LIMIT, TMP_PREFIX, Capabilities, Copied, DeleteResult, Entry,
                                               RangeReader, ReplaceResult, Source, Store, StoreFailure, check_key,
                                               on_a_new_line, unwrapped)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: openat2(2)'s number where Linux has it (5.6 on; the same on these machines) and its ``resolve``:
#: RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "ppc64le": 437, "s390x": 437, "riscv64": 437}
_RESOLVE = 0x02 | 0x04 | 0x08
#: errors that say openat2 is not there (an old kernel, a sandbox's filter): never asked again
_NO_OPENAT2 = (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@functools.lru_cache(maxsize=1)
def _openat2():
    """openat2(dir_fd, path, flags) -> fd, resolving the whole path in one call with no symlink
    followed and never above ``dir_fd`` (``OSError`` with the call's errno); None where the system
    has none. The walk of ``_open_dir`` costs two calls a folder; this one, one a path."""
    nr = _SYS_OPENAT2.get(platform.machine()) if sys.platform.startswith("linux") else None
    if nr is None:
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long

    def call(dir_fd: int, path: bytes, flags: int) -> int:
        how = _OpenHow(flags, 0, _RESOLVE)
        fd = fn(ctypes.c_long(nr), ctypes.c_long(dir_fd), ctypes.c_char_p(path), ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)))
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return fd

    return call


_openat2_off = False  # set once openat2 said it is not there


def version_of(st: os.stat_result) -> str:
    """What changes when a file's bytes change: its inode, size and mtime (not the ctime: a hard
    link to it, as a backup makes, changes that)."""
    return version_token(st.st_ino, st.st_size, st.st_mtime_ns)


def version_token(ino: int, size: int, mtime_ns: int) -> str:
    """The version (``version_of``, ``Store.version``) a file of that inode, size and mtime has:
    what a record that kept them (a retirement's tree) is compared with, by the one rule."""
    return f"{ino}-{size}-{mtime_ns}"


@dataclass(frozen=True)
class FileEntry(Entry):
    """A file's ``Entry``, with its number of names (``st_nlink``): the change log's append learns
    from the stat it makes anyway whether a seal was cut short between its link and its unlink
    (review R4), instead of probing the sealed name every time."""

    links: int = field(default=1, compare=False)


@functools.lru_cache(maxsize=1)
def folder_capabilities() -> Capabilities:
    """What every folder store declares: they depend on the platform, never on the folder, so
    they are worked out once per process (a store is made per change-log append: review R4)."""
    return Capabilities(
        rename_atomic=True, hard_link=True, fsync=True, versions=True, mtime_kept=True, mode_kept=True,
        open_writer_detection=sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd"),
        server_side_copy=False, conditional_put=True, folders=True, append="o_append", retention_query=False)


def _failure(e: OSError, key: str, what: str = "") -> StoreFailure:
    """A coded failure for an ``OSError`` of an operation on ``key``."""
    if isinstance(e, StoreFailure):
        return e
    code = {errno.ENOENT: StoreError.NOT_FOUND, errno.EEXIST: StoreError.ALREADY_EXISTS,
            errno.EACCES: StoreError.PERMISSION, errno.EPERM: StoreError.PERMISSION,
            errno.ENOSPC: StoreError.NO_SPACE, errno.EDQUOT: StoreError.NO_SPACE,
            errno.ELOOP: StoreError.SYMLINK, errno.EISDIR: StoreError.NOT_REGULAR,
            errno.ENOTDIR: StoreError.NOT_REGULAR, errno.ENXIO: StoreError.NOT_REGULAR}.get(e.errno,
                                                                                            StoreError.STORE_ERROR)
    return StoreFailure(code, key, f"{what + ': ' if what else ''}{e.strerror or e}")


def _still_there(entries) -> Iterator[Tuple[str, os.stat_result]]:
    """(name, lstat) of each entry of a folder being listed, without the ones gone between the
    folder's read and their lstat: another process's temporary renamed or removed in that instant
    (a shard worker's scan cache, a lock) was not there, and a listing that raised on it made a
    concurrent worker's reduce refuse its run."""
    for e in entries:
        try:
            yield e.name, e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue


class PosixStore(Store):
    """A folder as a store (see the module docstring). ``root`` must exist (``create=True``
    makes it); it is the one path taken as given, symlink or not: the user named it."""

    def __init__(self, root: str, *, create: bool = False):
        self.root = os.path.abspath(os.fspath(root))
        self.location = self.root
        self.stats = RequestStats()
        try:
            st = os.stat(self.root)
        except FileNotFoundError as e:
            if not create:
                raise _failure(e, self.root, "the store's root") from None
            st = None
        except OSError as e:
            raise _failure(e, self.root, "the store's root") from None
        if st is None:  # made only when missing: one stat when it is there (review R4)
            os.makedirs(self.root, exist_ok=True)
            try:
                st = os.stat(self.root)
            except OSError as e:
                raise _failure(e, self.root, "the store's root") from None
        if not stat.S_ISDIR(st.st_mode):
            raise StoreFailure(StoreError.NOT_REGULAR, self.root, "the store's root is not a folder")
        self.capabilities = folder_capabilities()

    #: folders made with the umask's mode (a logdir's), until ``private_folders`` (tool state: 0700)
    _private = False

    def private_folders(self) -> None:
        self._private = True

    # --- walking ------------------------------------------------------------------------------
    def _parts(self, key: str, allow_root: bool = False) -> List[str]:
        key = check_key(key, allow_root=allow_root)
        if not key:
            return []
        try:
            contained(self.root, key)
        except UnsafePath as e:
            raise StoreFailure(StoreError.UNSAFE_KEY, key, str(e)) from None
        return key.split("/")

    def _open_dir(self, parts: List[str], key: str, create: bool = False) -> int:
        """A descriptor of the folder ``parts`` below the root, reached without following any
        symlink (made, with its parents, when ``create``): in one openat2 where the system has it,
        else (and whenever that one fails but for a folder missing where none is made, so every
        refusal is the walk's, with its code) by the walk, a folder at a time."""
        if parts:
            fd = self._open_beneath(parts, create)
            if fd is not None:
                return fd
        fsops.op()
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                fsops.op()
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        if self._private:  # tool state: 0700, as every state folder (``private_folders``)
                            if not make_private_at(fd, part):
                                raise FileExistsError(part)
                        else:
                            os.mkdir(part, 0o777, dir_fd=fd)
                        os.fsync(fd)
                        self.stats.add("put")
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                        if stat.S_ISLNK(st.st_mode):
                            raise StoreFailure(StoreError.SYMLINK, key,
                                               f"{part} on the way is a symlink; refusing to follow it") from None
                        raise StoreFailure(StoreError.NOT_REGULAR, key,
                                           f"{part} on the way is {kind_of(st.st_mode)}, not a folder") from None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_beneath(self, parts: List[str], create: bool) -> Optional[int]:
        """The folder ``parts`` opened by one openat2 below the root's descriptor, no symlink on
        the way (``RESOLVE_NO_SYMLINKS``: one planted or swapped in fails it, as it fails the
        walk); None for the walk to do (no openat2, a link or a file on the way: the walk names
        it; a missing folder it makes). ``FileNotFoundError`` for one missing, not made."""
        global _openat2_off
        call = None if _openat2_off else _openat2()
        if call is None:
            return None
        fsops.op(2)
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return call(root, os.fsencode("/".join(parts)), _DIR_FLAGS)
        except OSError as e:
            if e.errno in _NO_OPENAT2:
                _openat2_off = True
            elif e.errno == errno.ENOENT and not create:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/".join(parts)) from None
            return None
        finally:
            os.close(root)

    @contextlib.contextmanager
    def _at(self, key: str, create: bool = False) -> Iterator[Tuple[int, str]]:
        """(descriptor of ``key``'s folder, its name there); failures coded for ``key``."""
        parts = self._parts(key)
        try:
            dfd = self._open_dir(parts[:-1], key, create)
        except OSError as e:
            raise _failure(e, key) from None
        try:
            yield dfd, parts[-1]
        except StoreFailure:
            raise
        except OSError as e:
            raise _failure(e, key) from None
        finally:
            os.close(dfd)

    @contextlib.contextmanager
    def folder(self, key: str, create: bool = False) -> Iterator[Tuple[int, str]]:
        """(a descriptor of ``key``'s folder, reached by the walk that follows no link, and
        ``key``'s name in it), for a caller that makes several changes in that one folder (a
        put-back's last look and its place, a restore's temporary, ``*at`` calls with ``dir_fd``):
        a folder on the way swapped for a link after the walk changes nothing they do.
        ``create``: the folders missing on the way made by that walk (``mkdirat`` in the folder
        it reached, each fsynced in its parent: ``os.makedirs`` would follow a link on the way
        and make them wherever it leads). ``StoreFailure`` from the walk (``SYMLINK`` for a link
        on the way, ``NOT_FOUND``, …); the caller's own ``OSError`` passes as it is."""
        parts = self._parts(key)
        try:
            dfd = self._open_dir(parts[:-1], key, create)
        except StoreFailure:
            raise
        except OSError as e:
            raise _failure(e, key) from None
        try:
            yield dfd, parts[-1]
        finally:
            os.close(dfd)

    def _lstat(self, dfd: int, name: str, key: str) -> Optional[os.stat_result]:
        """The regular file's stat, None if absent or a folder; symlinks and others refused."""
        fsops.op()
        self.stats.add("head")
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise StoreFailure(StoreError.SYMLINK, key, "is a symlink; not followed")
        if stat.S_ISDIR(st.st_mode):
            return None
        if not stat.S_ISREG(st.st_mode):
            raise StoreFailure(StoreError.NOT_REGULAR, key, f"is {kind_of(st.st_mode)}, not a regular file")
        return st

    def _open_file(self, dfd: int, name: str, key: str, flags: int = os.O_RDONLY) -> int:
        fsops.op()
        try:
            fd = os.open(name, flags | _NOFOLLOW, 0o666, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise StoreFailure(StoreError.SYMLINK, key, "is a symlink; not followed") from None
            raise _failure(e, key) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise StoreFailure(StoreError.NOT_REGULAR, key, f"is {kind_of(st.st_mode)}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return fd

    def _entry(self, key: str, st: os.stat_result) -> Entry:
        return FileEntry(key=key, size=st.st_size, mtime=st.st_mtime, version=version_of(st),
                         mode=stat.S_IMODE(st.st_mode), links=st.st_nlink)

    # --- reading ------------------------------------------------------------------------------
    def list(self, prefix: str = "", *, every_key: bool = False, shallow: bool = False) -> Iterator[Entry]:
        parts = self._parts(prefix, allow_root=True)
        try:
            fd = self._open_dir(parts, prefix)
        except FileNotFoundError:
            return
        except StoreFailure as e:
            if e.code == StoreError.NOT_REGULAR:
                return  # a file, not a folder: nothing under it
            raise
        except OSError as e:
            raise _failure(e, prefix, "listing") from None
        yield from self._walk(fd, "/".join(parts), every_key, shallow)

    def _walk(self, fd: int, base: str, every_key: bool = False, shallow: bool = False) -> Iterator[Entry]:
        try:
            fsops.op()
            self.stats.add("list")
            with os.scandir(fd) as it:
                found = sorted(_still_there(it))
            for name, st in found:
                key = f"{base}/{name}" if base else name
                if stat.S_ISREG(st.st_mode) and (every_key or not name.startswith(TMP_PREFIX)):
                    yield self._entry(key, st)  # (a folder's names are always plain keys)
                elif stat.S_ISDIR(st.st_mode) and not shallow:
                    fsops.op()
                    try:
                        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        continue  # gone or swapped for a link since the scan: not followed
                    yield from self._walk(sub, key, every_key)
        finally:
            os.close(fd)

    def stat(self, key: str) -> Optional[Entry]:
        try:
            with self._at(key) as (dfd, name):
                st = self._lstat(dfd, name, key)
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return None  # a folder on the way is missing
            raise
        return None if st is None else self._entry(key, st)

    def version(self, key: str) -> Optional[str]:
        # one lstat of the name in its folder reached without a link (``_at``); a folder or any
        # other thing there is not "nothing" (``stat`` says None for a folder)
        try:
            with self._at(key) as (dfd, name):
                fsops.op()
                self.stats.add("head")
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    return None
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return None  # a folder on the way is missing
            raise
        if stat.S_ISLNK(st.st_mode):
            raise StoreFailure(StoreError.SYMLINK, key, "is a symlink; not followed")
        if not stat.S_ISREG(st.st_mode):
            raise StoreFailure(StoreError.NOT_REGULAR, key, f"is {kind_of(st.st_mode)}, not a regular file")
        return version_of(st)

    def _pread(self, fd: int, start: int, end: int) -> bytes:
        out = []
        pos = start
        while pos < end:
            got = os.pread(fd, min(end - pos, CHUNK), pos)
            self.stats.add("read", down=len(got))
            if not got:
                break
            out.append(got)
            pos += len(got)
        return b"".join(out)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"bad range [{start}, {end})")
        with self._at(key) as (dfd, name):
            fd = self._open_file(dfd, name, key)
        try:
            return self._pread(fd, start, end)
        finally:
            os.close(fd)

    def read_all(self, key: str, limit: int = READ_ALL_LIMIT) -> bytes:
        with self._at(key) as (dfd, name):
            fd = self._open_file(dfd, name, key)
        try:
            size = os.fstat(fd).st_size
            if size > limit:  # refused before a byte is read
                raise StoreFailure(StoreError.TOO_LARGE, key, f"{size} bytes, larger than {limit}; not read whole")
            data = self._pread(fd, 0, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:  # grew since the fstat
            raise StoreFailure(StoreError.TOO_LARGE, key, f"larger than {limit} bytes; not read whole")
        return data

    def open_read(self, key: str, size: Optional[int] = None) -> RangeReader:
        with self._at(key) as (dfd, name):
            fd = self._open_file(dfd, name, key)
        end = os.fstat(fd).st_size if size is None else size
        return RangeReader(lambda s, e: self._pread(fd, s, e), end, os.path.join(self.root, key),
                           on_close=lambda: os.close(fd))

    # --- writing ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _current_locked(self, dfd: int, name: str, key: str) -> Iterator[Optional[os.stat_result]]:
        """Hold an ``flock`` on the file now at ``name`` (None if there is none) while it stays
        there: the stat yielded is of the locked inode, so a check against it and the rename
        after it happen with no other ``PosixStore`` writer in between."""
        for _ in range(100):
            st = self._lstat(dfd, name, key)
            if st is None:
                yield None
                return
            fd = self._open_file(dfd, name, key)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                now = self._lstat(dfd, name, key)
                held = os.fstat(fd)
                if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                    yield now
                    return
            finally:
                os.close(fd)  # releases the flock
        raise StoreFailure(StoreError.CONFLICT, key, "replaced by other writers again and again")

    def _commit(self, dfd: int, tmp: str, name: str, key: str, if_absent: bool, if_version: Optional[str]) -> None:
        """Put the written temporary file ``tmp`` in place under ``put``'s conditions."""
        self._place(dfd, tmp, dfd, name, key, if_absent, if_version)

    def _place(self, sdfd: int, sname: str, ddfd: int, dname: str, key: str, if_absent: bool,
               if_version: Optional[str]) -> bool:
        """Move ``sname`` to ``dname`` under the write conditions: if absent by link + unlink
        (never over an existing name; a crash between leaves both names on one inode, nothing
        lost, so not atomic), else by rename once the current file's version is checked under
        its lock. Both folders are fsynced. True when the move was one atomic rename."""
        if if_absent:
            fsops.op()
            try:
                os.link(sname, dname, src_dir_fd=sdfd, dst_dir_fd=ddfd, follow_symlinks=False)
            except FileExistsError:
                raise StoreFailure(StoreError.ALREADY_EXISTS, key, "already exists") from None
            if sdfd != ddfd:  # the new name is durable before the old one goes
                os.fsync(ddfd)
            fsops.op()
            os.unlink(sname, dir_fd=sdfd)
        else:
            with self._current_locked(ddfd, dname, key) as cur:
                if if_version is not None and (cur is None or version_of(cur) != if_version):
                    raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "changed since it was read")
                fsops.op()
                os.replace(sname, dname, src_dir_fd=sdfd, dst_dir_fd=ddfd)
        os.fsync(ddfd)
        if sdfd != ddfd:
            os.fsync(sdfd)
        return not if_absent

    def _write(self, key: str, fill, *, if_absent: bool, if_version: Optional[str], mode: Optional[int],
               times_ns: Optional[Tuple[int, int]]) -> os.stat_result:
        """Write a temporary file next to ``key`` with ``fill(fd)``, fsync it, then commit it."""
        with self._at(key, create=True) as (dfd, name):
            if if_absent and self._lstat(dfd, name, key) is not None:
                raise StoreFailure(StoreError.ALREADY_EXISTS, key, "already exists")
            tmp = TMP_PREFIX + secrets.token_hex(8)
            fsops.op()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dfd)
            try:
                try:
                    fill(fd)
                    if mode is not None:
                        os.fchmod(fd, stat.S_IMODE(mode))
                    if times_ns is not None:
                        os.utime(fd, ns=times_ns)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._commit(dfd, tmp, name, key, if_absent, if_version)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            self.stats.add("put")
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)

    def _write_all(self, fd: int, data) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view[:CHUNK])
            self.stats.add("put", 0, up=n)
            view = view[n:]

    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_version: Optional[str] = None,
            mode: Optional[int] = None) -> str:
        st = self._write(key, lambda fd: self._write_all(fd, data), if_absent=if_absent, if_version=if_version,
                         mode=mode, times_ns=None)
        return version_of(st)

    def put_file(self, key: str, src: Source, *, if_absent: bool = False, if_version: Optional[str] = None,
                 mtime_ns: Optional[int] = None, mode: Optional[int] = None,
                 whole_checksum: bool = False) -> Entry:
        if whole_checksum and (if_absent or if_version or not isinstance(src, (str, os.PathLike))):
            raise StoreFailure(StoreError.NOT_SUPPORTED, key, "a whole-object checksum is asked of an "
                               "unconditional upload of a local file only")
        def fill(fd: int) -> None:
            with contextlib.ExitStack() as stack:
                f = src
                if isinstance(src, (str, os.PathLike)):
                    f = stack.enter_context(open_regular(os.fspath(src)))
                while True:
                    data = f.read(CHUNK)
                    if not data:
                        break
                    self._write_all(fd, data)

        st = self._write(key, fill, if_absent=if_absent, if_version=if_version, mode=mode,
                         times_ns=None if mtime_ns is None else (mtime_ns, mtime_ns))
        return self._entry(key, st)

    def copy(self, src: str, dst: str, *, if_source_version: Optional[str] = None, if_absent: bool = False,
             if_version: Optional[str] = None, source: Optional[Store] = None, size: Optional[int] = None,
             precheck: bool = True, listed_absent: bool = False, detail: bool = False) -> Union[str, Copied]:
        # ``size``, ``precheck`` and ``listed_absent`` spare reads a bucket would make: a folder
        # checks its conditions itself, under its lock, always
        origin = self if source is None else unwrapped(source)
        if not isinstance(origin, PosixStore):
            raise StoreFailure(StoreError.NOT_SUPPORTED, src, f"no copy from {origin.location} into a folder")
        with origin._at(src) as (sdfd, sname):
            sfd = origin._open_file(sdfd, sname, src)
        try:
            before = os.fstat(sfd)
            if if_source_version is not None and version_of(before) != if_source_version:
                raise StoreFailure(StoreError.PRECONDITION_FAILED, src, "changed since it was read; nothing copied")

            def fill(fd: int) -> None:
                pos = 0
                while True:
                    data = self._pread(sfd, pos, pos + CHUNK)
                    if not data:
                        break
                    self._write_all(fd, data)
                    pos += len(data)
                if version_of(os.fstat(sfd)) != version_of(before):
                    raise StoreFailure(StoreError.PRECONDITION_FAILED, src,
                                       "changed while it was copied; nothing copied")

            st = self._write(dst, fill, if_absent=if_absent, if_version=if_version, mode=before.st_mode,
                             times_ns=(before.st_atime_ns, before.st_mtime_ns))
        finally:
            os.close(sfd)
        self.stats.add("copy")
        return Copied(version_of(st)) if detail else version_of(st)

    def replace(self, src: str, dst: str, *, if_source_version: Optional[str] = None,
                if_absent: bool = False, if_version: Optional[str] = None) -> ReplaceResult:
        with self._at(src) as (sdfd, sname), self._at(dst, create=True) as (ddfd, dname):
            with self._current_locked(sdfd, sname, src) as cur:
                if cur is None:
                    raise StoreFailure(StoreError.NOT_FOUND, src, "no such file")
                if if_source_version is not None and version_of(cur) != if_source_version:
                    raise StoreFailure(StoreError.PRECONDITION_FAILED, src, "changed since it was read; not moved")
                atomic = self._place(sdfd, sname, ddfd, dname, dst, if_absent, if_version)
                self.stats.add("put")
                st = os.stat(dname, dir_fd=ddfd, follow_symlinks=False)
        return ReplaceResult(version=version_of(st), atomic=atomic)

    def link(self, src: str, dst: str) -> Entry:
        with self._at(src) as (sdfd, sname), self._at(dst, create=True) as (ddfd, dname):
            if self._lstat(sdfd, sname, src) is None:
                raise StoreFailure(StoreError.NOT_FOUND, src, "no such file")
            fsops.op()
            try:
                os.link(sname, dname, src_dir_fd=sdfd, dst_dir_fd=ddfd, follow_symlinks=False)
            except FileExistsError:
                raise StoreFailure(StoreError.ALREADY_EXISTS, dst, "already exists") from None
            os.fsync(ddfd)
            self.stats.add("put")
            return self._entry(dst, os.stat(dname, dir_fd=ddfd, follow_symlinks=False))

    def delete(self, keys: Iterable[str], versions: Optional[Dict[str, str]] = None, *,
               precheck: bool = True) -> List[DeleteResult]:
        # ``precheck`` changes nothing here: a version is checked under the file's lock, always
        versions = versions or {}
        out = []
        for key in ([keys] if isinstance(keys, str) else keys):
            try:
                out.append(self._delete_one(key, versions.get(key)))
            except StoreFailure as e:
                out.append(DeleteResult(key=str(key), ok=False, code=e.code, message=str(e)))
        return out

    def _delete_one(self, key: str, version: Optional[str]) -> DeleteResult:
        try:
            ctx = self._at(key)
            dfd, name = ctx.__enter__()
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return DeleteResult(key=key, ok=True, existed=False)
            raise
        try:
            with self._current_locked(dfd, name, key) as cur:
                if cur is None:
                    with contextlib.suppress(FileNotFoundError):
                        if stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                            raise StoreFailure(StoreError.NOT_REGULAR, key, "is a folder; a delete takes files")
                    return DeleteResult(key=key, ok=True, existed=False)
                if version is not None and version_of(cur) != version:
                    raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "changed since it was read; kept")
                fsops.op()
                os.unlink(name, dir_fd=dfd)
            os.fsync(dfd)
            self.stats.add("delete")
            return DeleteResult(key=key, ok=True, existed=True)
        except OSError as e:
            raise _failure(e, key) from None
        finally:
            ctx.__exit__(None, None, None)

    def append(self, key: str, data: bytes, *, limit: Optional[int] = None, if_version: Optional[str] = None) -> str:
        if if_version is not None:
            try:
                return self._append(key, data, limit, if_version)
            except StoreFailure as e:
                if e.code != StoreError.NOT_FOUND:
                    raise
                # its folder is gone too: the key is not at that version (as a bucket says it)
                raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "no such file; not made") from None
        return self._append(key, data, limit, None)

    def _append(self, key: str, data: bytes, limit: Optional[int], if_version: Optional[str]) -> str:
        with self._at(key, create=if_version is None) as (dfd, name):
            created = False
            try:
                if if_version is not None:  # never made: the key must be at that version
                    raise StoreFailure(StoreError.ALREADY_EXISTS, key, "")
                fd = self._open_file(dfd, name, key, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL)
                created = True
            except StoreFailure as e:
                if e.code != StoreError.ALREADY_EXISTS:
                    raise
                try:
                    fd = self._open_file(dfd, name, key, os.O_RDWR | os.O_APPEND)  # read: its last byte
                except StoreFailure as e2:
                    if if_version is None or e2.code != StoreError.NOT_FOUND:
                        raise
                    raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "no such file; not made") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # one append lands whole even if a write() is partial
                before = os.fstat(fd)
                if if_version is not None and version_of(before) != if_version:
                    raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "changed since it was written; not appended")
                size = before.st_size
                # sized under the flock every appender takes: appenders that each found room in a
                # stat never take the key past its limit together (review R2-6)
                if limit is not None and size and size + len(data) + 1 > limit:
                    raise StoreFailure(StoreError.TOO_LARGE, key, f"an append past {limit} bytes; not written")
                self._write_all(fd, on_a_new_line(os.pread(fd, 1, size - 1) if size else b"", data))
                os.fsync(fd)
                st = os.fstat(fd)
            finally:
                os.close(fd)
            if created:
                os.fsync(dfd)
            self.stats.add("put")
            return version_of(st)

    def mkdir(self, key: str) -> None:
        parts = self._parts(key)
        try:
            os.close(self._open_dir(parts, key, create=True))
        except OSError as e:
            raise _failure(e, key) from None

    def open_writers(self, keys: Iterable[str]) -> Optional[Dict[str, List[str]]]:
        if not self.capabilities.open_writer_detection:
            return None
        by_path: Dict[str, str] = {}
        for key in keys:
            if self.stat(key) is not None:  # containment and the symlink walk, then by path
                by_path[os.path.join(self.root, key)] = key
        scan = find_writers(list(by_path))
        if not scan.supported:
            return None
        out: Dict[str, List[str]] = {}
        for h in scan.holders:
            out.setdefault(by_path[h.path], []).append(h.describe())
        return out


__all__ = ["FileEntry", "PosixStore", "folder_capabilities", "version_of", "version_token"]
