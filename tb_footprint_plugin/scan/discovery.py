"""Walk a logdir and attribute every file to a run, by TensorBoard's rules and the ones it misses.

* a run is a directory that directly holds a file whose name contains ``tfevents``
  (TensorBoard's ``io_wrapper.IsTensorFlowEventsFile``);
* a directory with ``plugins/profile/`` below it is a run (xprof finds profiles that way even
  when the directory has no event file: Keras 2 and JAX write it so);
* a directory holding ``*.pt.trace.json[.gz]`` is a run (the PyTorch profiler);
* every other file belongs to the nearest run above it, or to ``(unattributed)``.

Sizes come from ``lstat``; symlinks are reported as such and never followed, so neither a
link out of the logdir nor a link loop can lead the walk astray. Unreadable directories
become warnings, not errors, and each is also kept as a value (``unreadable``: its path, the run
it is in, a code) so the plan lists it as left alone instead of dropping it (review R16 F10).
"""
from __future__ import annotations

from array import array
import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import SetAside, StoreError
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.scan.model import COMPACT, DiskTally, UNATTRIBUTED
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.scan.set_aside import (VAULT_SHAPES, display, holds_vault, is_state_folder, is_vault_root,
                                                nested_state_words, set_aside_entry, vault_words)
from tb_footprint_plugin.storage.paths import DEMO_MARKER, STATE_DIR_NAME, is_state_name, is_within, state_dirs_in
from tb_footprint_plugin.storage.regular import kind_of

#: a walk of 100,000 runs holds a few files per run until each run's footprint is made

#: the records folders of a vault's root (``VAULT_SHAPES``): a folder holding none of them is no
#: vault's root, asked without a call for each of the walk's folders
_VAULT_RECORDS = frozenset(records for records, _beside in VAULT_SHAPES)


@dataclass(**COMPACT)
class FoundFile:
    """One non-directory entry found by the walk."""

    rel: str  # relative to the logdir, '/'-separated
    abspath: str
    size: int
    mtime: float
    mtime_ns: int
    ino: int
    is_symlink: bool
    link_target: Optional[str] = None
    run_rel_parts: Tuple[str, ...] = ()  # directories between the run dir and the file
    #: object stores: what changes whenever the bytes change (GCS generation, else ETag)
    version: str = ""
    #: lstat st_nlink (1 in a bucket): more than 1, other names share the file's inode
    nlink: int = 1
    #: a sparse file's allocated bytes (lstat ``st_blocks * 512``, what ``du`` counts) when below
    #: ``size``; None for any other (most files: nothing more held)
    allocated: Optional[int] = None
    #: lstat st_uid when the file is another user's than the scanner's (``os.geteuid()``), else
    #: None (``FileEntry.uid``; always None in a bucket)
    uid: Optional[int] = None

    @property
    def cache_key(self) -> tuple:
        """What the scan cache keys on: (size, version) in a bucket, (size, mtime_ns, inode) on disk."""
        return (self.size, self.version) if self.version else (self.size, self.mtime_ns, self.ino)


@dataclass(**COMPACT)
class FoundRun:
    """A run directory and the files attributed to it."""

    name: str  # '.' for the logdir itself
    abspath: Optional[str]
    files: List[FoundFile] = field(default_factory=list)
    has_event_files: bool = False
    #: ``plugins/profile/<session>`` folders with nothing in them (xprof still lists them)
    empty_sessions: List[Tuple[str, float]] = field(default_factory=list)
    #: the run folder's lstat st_uid when another user's than the scanner's, else None
    uid: Optional[int] = None


@dataclass
class Discovery:
    """Result of a walk: runs (including the unattributed bucket) and warnings; the vault is skipped."""

    runs: Dict[str, FoundRun]
    warnings: List[str]
    #: folders left out as another logdir's (``scan.set_aside.set_aside_entry``)
    set_aside: List[Dict[str, Optional[str]]] = field(default_factory=list)


def unreadable_entry(rel: str, run: Optional[str], err: OSError) -> Dict[str, Optional[str]]:
    """A folder the walk could not enter, as a value: ``path`` (logdir-relative), ``run`` (the run it
    lies in, or None: outside every run, so it may itself be or hold runs), ``code``
    (``StoreError.PERMISSION`` for a permission refusal, else ``StoreError.STORE_ERROR``) and
    ``why`` (the system's words)."""
    code = StoreError.PERMISSION if err.errno in (errno.EACCES, errno.EPERM) else StoreError.STORE_ERROR
    return {"path": rel, "run": run, "code": code.value, "why": err.strerror or str(err)}


def _kernel_lost_found(dirpath: str, parts: Tuple[str, ...]) -> bool:
    """``lost+found`` at the top of a filesystem: fsck's folder (root's, 0700), never a run's;
    still a warning, but no reason for every reduce of a logdir on a mount point to say "not all done"."""
    return bool(parts) and parts[-1] == "lost+found" and os.path.ismount(os.path.dirname(dirpath))


def _is_dir_nofollow(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_run_dir(names: Iterable[str], dirpath: str, subdirs: Iterable[str],
               has_profile_dir: Optional[bool] = None) -> Tuple[bool, bool]:
    """(is a run, has event files) for a directory with these file names and subdirectories.

    ``has_profile_dir`` says whether ``plugins/profile`` is below it when the caller already
    knows (a bucket listing); otherwise the local disk is asked.
    """
    has_events = any(cat.is_event_file_name(n) for n in names)
    if has_events:
        return True, True
    if any(cat.is_torch_trace_name(n) for n in names):
        return True, False
    if has_profile_dir is None:
        has_profile_dir = "plugins" in subdirs and _is_dir_nofollow(os.path.join(dirpath, "plugins", "profile"))
    if has_profile_dir:
        return True, False
    return False, False


def dir_size(path: str) -> int:
    """Apparent size of every file under ``path`` (no symlink following)."""
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for n in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                pass
    return total


def discover(logdir: str, exclude: Iterable[str] = ()) -> Discovery:
    """Walk ``logdir`` and return its runs with every file attributed.

    ``exclude`` holds absolute directory paths (the vault) that are skipped and counted
    separately.
    """
    warnings: List[str] = []
    runs = {r.name: r for r in walk_runs(logdir, warnings, exclude)}
    return Discovery(runs=runs, warnings=warnings)


def _gone(e: OSError) -> bool:
    """A folder removed (or replaced by a file) since its parent was listed, as another worker's
    swap removes a profile folder: nothing is there to hide, so it is no unreadable folder."""
    return e.errno in (errno.ENOENT, errno.ENOTDIR)


def walk_runs(logdir: str, warnings: List[str], exclude: Iterable[str] = (),
              tally: Optional[DiskTally] = None,
              unreadable: Optional[List[Dict[str, Optional[str]]]] = None,
              set_aside: Optional[List[Dict[str, Optional[str]]]] = None) -> Iterator[FoundRun]:
    """The runs of :func:`discover`, each yielded as soon as the walk has left its folder (its
    files sorted), ``(unattributed)`` last; warnings are appended to ``warnings`` as they are met.
    ``tally``: counts what the walk lstats as ``du`` would (every folder and file it meets, the
    folders it sets aside named), so the disk in use needs no second walk of the logdir.
    ``unreadable``: each folder the walk could not stat or list is appended (``unreadable_entry``).

    The walk is depth first, so a run's folder is walked whole before any folder beside it: a
    scan makes each run's footprint while the walk goes on and never holds the walk of the whole
    logdir (at 100,000 runs, the walk held whole beside the footprints was the scan's peak)."""
    logdir = os.path.abspath(logdir)
    excluded = {os.path.abspath(p) for p in exclude}
    excluded.add(os.path.join(logdir, STATE_DIR_NAME))
    excluded.update(state_dirs_in(logdir))  # every user's state folder (``.tb-footprint-u<uid>``)
    runs: Dict[str, FoundRun] = {}
    #: the runs whose folder the walk is in, outermost first (a run may hold another run)
    open_runs: List[Tuple[Tuple[str, ...], str]] = []
    # (dev, ino) as one int: bind mounts can loop even without symlinks; a tuple of two ints per
    # folder was ~60 MB at 100,000 runs (four folders each)
    seen_dirs = _InodeSet()
    # read once a walk, not at import: a process may change its user between walks (tests do)
    euid = os.geteuid()

    def done(name: str) -> FoundRun:
        r = runs.pop(name)
        r.files.sort(key=lambda f: f.rel)
        return r

    # Stack of (abs dir, rel parts from logdir, owning run name or None, index of run in parts)
    stack: List[Tuple[str, Tuple[str, ...], Optional[str], int]] = [(logdir, (), None, 0)]
    while stack:
        dirpath, parts, owner, owner_depth = stack.pop()
        while open_runs and parts[:len(open_runs[-1][0])] != open_runs[-1][0]:
            yield done(open_runs.pop()[1])  # the walk left its folder: nothing more can be its
        try:
            st = fsops.lstat(dirpath)
        except OSError as e:
            warnings.append(f"{display(_rel(parts))}: cannot stat directory ({e.strerror})")
            if unreadable is not None and not _gone(e) and not _kernel_lost_found(dirpath, parts):
                unreadable.append(unreadable_entry(_rel(parts), owner, e))
            continue
        if not seen_dirs.add(st.st_dev, st.st_ino):
            warnings.append(f"{display(_rel(parts))}: directory seen twice (loop), skipped")
            continue
        if tally is not None and not parts:
            tally.device = st.st_dev
        try:
            with fsops.scandir(dirpath) as it:
                entries = list(it)
        except OSError as e:
            warnings.append(f"{display(_rel(parts))}: unreadable directory ({e.strerror}), skipped")
            if unreadable is not None and not _gone(e) and not _kernel_lost_found(dirpath, parts):
                unreadable.append(unreadable_entry(_rel(parts), owner, e))
            if tally is not None:
                tally.count(st)
                tally.skipped.append({"path": dirpath, "why": f"unreadable ({e.strerror})"})
            continue

        files, subdirs = [], []
        for e in entries:
            if not parts and e.name == DEMO_MARKER and e.is_file(follow_symlinks=False):
                if tally is not None:  # not a run's file, but on the disk all the same
                    with contextlib.suppress(OSError):
                        tally.count(e.stat(follow_symlinks=False))
                continue  # the demo's bookkeeping, not a file of "(unattributed)"
            if not parts and is_state_name(e.name) and not e.is_dir(follow_symlinks=False):
                continue  # a state name that is a link or file (planted): the tool's name, never a run's file
            try:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(e.name)
                else:
                    files.append(e)
            except OSError:
                files.append(e)
        if parts and not _VAULT_RECORDS.isdisjoint(subdirs) and holds_vault(dirpath, subdirs):
            # a vault made here for another logdir: its retired runs are no runs of this logdir to
            # reduce, retire or purge (their manifests would no longer match); counted apart, whole
            warnings.append(vault_words(_rel(parts)))
            if set_aside is not None:
                set_aside.append(set_aside_entry(_rel(parts), owner, SetAside.NESTED_VAULT))
            if tally is not None:
                tally.set_aside.append(dirpath)
            continue
        if tally is not None:
            tally.count(st)
        names = [e.name for e in files]
        run_here, has_events = is_run_dir(names, dirpath, subdirs)
        if run_here:
            owner = _rel(parts)
            owner_depth = len(parts)
            if owner not in runs:
                # the root run's folder is the logdir the user named, not a run folder of anyone's: a
                # team folder of the lead's holding the user's own files is the user's (review R13 F3)
                runs[owner] = FoundRun(name=owner, abspath=dirpath,
                                       uid=st.st_uid if parts and st.st_uid != euid else None)
                open_runs.append((parts, owner))
            runs[owner].has_event_files = runs[owner].has_event_files or has_events
        run_name = owner if owner is not None else UNATTRIBUTED
        rel_in_run = parts[owner_depth:] if owner is not None else ()
        if not entries and len(rel_in_run) == 3 and rel_in_run[:2] == ("plugins", "profile"):
            runs[owner].empty_sessions.append((_rel(parts), st.st_mtime))
        # one tuple for the files of this folder (the same parts for each)
        file_parts = rel_in_run if owner is not None else parts
        for e in files:
            ff = _found_file(e, parts, logdir, file_parts, warnings, tally, euid=euid)
            if ff is None:
                continue
            bucket = runs.get(run_name)
            if bucket is None:
                bucket = runs[run_name] = FoundRun(name=run_name, abspath=None if owner is None else dirpath)
            bucket.files.append(ff)
        base = dirpath if dirpath.endswith("/") else dirpath + "/"  # os.path.join's, for a bare name
        for d in sorted(subdirs, reverse=True):
            sub = base + d
            nested = bool(parts) and is_state_name(d) and is_state_folder(sub)
            if sub in excluded or nested:
                if nested:
                    # a nested logdir's state (review R11 G7): its vault's backups are no run's files
                    # of this logdir, to reduce, retire or purge
                    warnings.append(nested_state_words(_rel(parts + (d,))))
                    if set_aside is not None:
                        set_aside.append(set_aside_entry(_rel(parts + (d,)), owner, SetAside.NESTED_STATE))
                if tally is not None:
                    tally.set_aside.append(sub)
                continue  # the vault: its size is reported separately as backups
            stack.append((sub, parts + (d,), owner, owner_depth))
    while open_runs:
        yield done(open_runs.pop()[1])
    if UNATTRIBUTED in runs:
        yield done(UNATTRIBUTED)


class _InodeSet:
    """The folders a walk has entered, as (device, inode): the inodes of the first device seen
    (the logdir's) in an open-addressing table of 8-byte slots, any other in a plain set. A set
    of ints was ~300 bytes a run at the scan's peak (four folders a run, an int object and a
    slot of a table that grows fourfold each); this is ~16-32 bytes a folder."""

    __slots__ = ("_dev", "_table", "_mask", "_used", "_other")

    def __init__(self) -> None:
        self._dev: Optional[int] = None
        self._table = array("q", bytes(8 * 1024))  # 0: empty; an inode i is kept as i + 1
        self._mask = 1023
        self._used = 0
        self._other: set = set()

    def add(self, dev: int, ino: int) -> bool:
        """Add the folder; False when it was there already."""
        if self._dev is None:
            self._dev = dev
        if dev != self._dev or not 0 <= ino < (1 << 63) - 1:
            key = (dev, ino)
            if key in self._other:
                return False
            self._other.add(key)
            return True
        v = ino + 1
        table, mask = self._table, self._mask
        i = (v * 0x9E3779B97F4A7C15 >> 20) & mask
        while table[i]:
            if table[i] == v:
                return False
            i = (i + 1) & mask
        table[i] = v
        self._used += 1
        if self._used * 2 > mask:
            self._grow()
        return True

    def _grow(self) -> None:
        old = self._table
        self._mask = mask = 2 * len(old) - 1
        self._table = table = array("q", bytes(8 * (mask + 1)))
        for v in old:
            if v:
                i = (v * 0x9E3779B97F4A7C15 >> 20) & mask
                while table[i]:
                    i = (i + 1) & mask
                table[i] = v


def _rel(parts: Tuple[str, ...]) -> str:
    return "/".join(parts) if parts else "."


def _found_file(entry, parts, logdir, run_rel_parts: Tuple[str, ...], warnings, tally: Optional[DiskTally] = None,
                euid: Optional[int] = None) -> Optional[FoundFile]:
    rel = "/".join(parts + (entry.name,))
    try:
        fsops.op()  # the entry's lstat
        st = entry.stat(follow_symlinks=False)
    except OSError as e:
        warnings.append(f"{display(rel)}: cannot stat ({e.strerror}), not counted")
        return None
    if tally is not None:  # a FIFO or a symlink holds blocks too (du counts them), whether or not a run's
        tally.count(st)
    is_link = stat.S_ISLNK(st.st_mode)
    if not is_link and not stat.S_ISREG(st.st_mode):
        # a FIFO, socket or device: opening it could block forever; it holds no logged bytes
        warnings.append(f"{display(rel)}: is {kind_of(st.st_mode)}, not a regular file; never opened, not counted")
        return None
    target = None
    if is_link:
        try:
            target = os.readlink(entry.path)
        except OSError:
            target = "?"
        resolved = os.path.realpath(entry.path)
        where = "inside" if is_within(resolved, os.path.realpath(logdir)) else "outside"
        warnings.append(f"{display(rel)}: symlink to {display(target)} ({where} the logdir), not followed")
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        warnings.append(f"{display(rel)}: file name is not valid UTF-8")
    return FoundFile(
        rel=rel,
        abspath=entry.path,
        size=st.st_size,
        mtime=st.st_mtime,
        mtime_ns=st.st_mtime_ns,
        ino=st.st_ino,
        is_symlink=is_link,
        link_target=target,
        run_rel_parts=run_rel_parts,
        nlink=st.st_nlink,
        allocated=sparse_allocated(st),
        uid=st.st_uid if euid is not None and st.st_uid != euid else None,
    )


def sparse_allocated(st) -> Optional[int]:
    """A regular file's allocated bytes (``st_blocks * 512``, as ``du`` counts) when fewer than
    its ``st_size`` (a sparse file: holes take no disk), else None: "freed now" counts what the
    disk holds, "removable" the file's logical bytes."""
    if not stat.S_ISREG(st.st_mode):
        return None
    held = st.st_blocks * 512
    return held if held < st.st_size else None


def discover_listing(logdir_url: str, objects: Dict[str, "ObjectInfo"],
                     exclude: Iterable[str] = ()) -> Discovery:
    """Attribute the objects of one bucket listing (relative key -> ObjectInfo) to runs, by the
    same rules as :func:`discover`, without another request: "directories" are the key prefixes.

    ``exclude`` holds relative prefixes (the state directory, a vault inside the logdir) whose
    objects are left out. Object stores have no symlinks and no empty directories.
    """
    excluded = {p.strip("/") for p in exclude} | {STATE_DIR_NAME}
    # prefix parts -> (file names, subdirectory names)
    tree: Dict[Tuple[str, ...], Tuple[List[str], set]] = {(): ([], set())}
    nested: set = set()  # nested logdirs' state folders left out (review R11 G7)
    for key in objects:
        parts = tuple(key.split("/"))
        if any("/".join(parts[:i]) in excluded for i in range(1, len(parts))):
            continue
        # every user's state folder at any depth: a nested logdir's vault (server-side copies keyed
        # like runs) is no run of this logdir (review R11 G7)
        state_at = next((i for i in range(len(parts) - 1) if is_state_name(parts[i])), None)
        if state_at is not None:
            if state_at:
                nested.add("/".join(parts[:state_at + 1]))
            continue
        if parts == (DEMO_MARKER,):
            continue  # the demo's bookkeeping, not a file of "(unattributed)" (as on disk)
        for i in range(len(parts) - 1):
            tree.setdefault(parts[:i], ([], set()))[1].add(parts[i])
            tree.setdefault(parts[: i + 1], ([], set()))
        tree[parts[:-1]][0].append(parts[-1])
    runs: Dict[str, FoundRun] = {}
    warnings: List[str] = [nested_state_words(rel) for rel in sorted(nested)]
    aside: List[Dict[str, Optional[str]]] = []
    stack: List[Tuple[Tuple[str, ...], Optional[str], int]] = [((), None, 0)]
    base = logdir_url.rstrip("/")
    while stack:
        parts, owner, owner_depth = stack.pop()
        names, subdirs = tree[parts]
        if parts and is_vault_root(subdirs, lambda r: tree[parts + (r,)][0]):
            warnings.append(vault_words(_rel(parts)))  # another logdir's vault of copies: no runs here
            aside.append(set_aside_entry(_rel(parts), owner, SetAside.NESTED_VAULT))
            continue
        has_profile = "plugins" in subdirs and "profile" in tree.get(parts + ("plugins",), ((), set()))[1]
        run_here, has_events = is_run_dir(names, "", subdirs, has_profile_dir=has_profile)
        if run_here:
            owner = _rel(parts)
            owner_depth = len(parts)
            runs.setdefault(owner, FoundRun(name=owner, abspath=f"{base}/{owner}" if parts else base))
            runs[owner].has_event_files = runs[owner].has_event_files or has_events
        run_name = owner if owner is not None else UNATTRIBUTED
        for n in names:
            rel = "/".join(parts + (n,))
            o = objects[rel]
            bucket = runs.setdefault(run_name, FoundRun(name=run_name, abspath=None))
            bucket.files.append(FoundFile(
                rel=rel, abspath=f"{base}/{rel}", size=o.size, mtime=o.mtime,
                mtime_ns=int(o.mtime * 1e9), ino=0, is_symlink=False,
                run_rel_parts=tuple(parts[owner_depth:]),
                version=o.version_token or f"mtime:{o.mtime}",
            ))
        for d in sorted(subdirs, reverse=True):
            stack.append((parts + (d,), owner, owner_depth))
    for r in runs.values():
        r.files.sort(key=lambda f: f.rel)
    # a nested state folder's run: the innermost run whose prefix holds it (found at the listing)
    named = [n for n in runs if n != UNATTRIBUTED]
    aside += [set_aside_entry(rel, max((n for n in named if n == "." or rel.startswith(n + "/")), key=len,
                                       default=None), SetAside.NESTED_STATE) for rel in sorted(nested)]
    return Discovery(runs=runs, warnings=warnings, set_aside=aside)
