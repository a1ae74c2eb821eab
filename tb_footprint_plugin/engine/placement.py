"""Put these bytes at this path: the one rule every verb follows when a verified temporary
takes a file's place in a run (issue #26 item 2), and the one rule the next start applies to a
copy a killed attempt began.

The reduce's swap (``swap.apply_swap``), the put-back of a rollback or a restore
(``swap.put_back``), the records a put-back sets beside an original (``salvage``:
``<file>.salvaged-NNN``), a writer's file a retirement's rollback sets aside and a retired run's
files put back (``retire_tree``) all place their bytes through ``put_in_place``, as the folder's
swap strategy says (``swap_strategy.swap_strategy``):

- where the folder renames atomically, the temporary is renamed onto the path: one step, a kill
  leaves one or the other;
- where it does not, a ``copying`` record naming the path is journaled, then the temporary is
  copied to the path (``copy_over``: a new file made exclusively, fsynced, hash-checked, with the
  temporary's mode, mtime and owner) and deleted. The record is written once per path and
  journal, right before the copy's first change at the path (never when the bytes stand there
  whole already: nothing is copied), and not where the path is named already: by an earlier
  attempt's record (``begun``, read back with ``copies_begun``), by this journal's own, or (the
  reduce's originals) by its ``swap`` record, after which such a path holds the original, the
  staged bytes or their beginning. A copying strategy without a journal is refused
  (``Failure.REFUSED``, naming the path): a partial copy it left could never be told from
  someone else's file.

At the next start a path a ``copying`` record names is settled by ``resume_copy``, the one rule
for it: holding the bytes whole, the killed copy may have stopped after its last byte and before
its mode, mtime and owner (the new file's 0600, the kill's time, this process's owner): the file
gets the recorded ones (``finish_copied``) and counts as in place; holding only their beginning
(``partial_copy`` against the temporary, ``partial_put_back`` against the vault's copy), it is
no one's bytes but the copy's own: it is unlinked and the copy made again. Anything else there
is left to the caller's own rule (someone else's file). ``place_at_free_name`` is the walk over
the names a file set beside another may take (``salvage.salvage_name``, k = 1, 2, …): the first
free one, or one a killed attempt began a copy at, resumed by that rule.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from typing import BinaryIO, Callable, Collection, Iterable, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Failure, StoreError
from tb_footprint_plugin.engine.context import Context, TransactionError
from tb_footprint_plugin.engine.journal import OpJournal, Rec, copying_path
from tb_footprint_plugin.engine.putback import at_free_name, begins_with, holds_original
from tb_footprint_plugin.engine.swap_strategy import SwapStrategy
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.engine.staged_ident import stands_in, staged_still
from tb_footprint_plugin.storage.files import CHUNK, copy_new, finish_new_file, forget_staged, give_owner, matches, sha256_stream
from tb_footprint_plugin.storage.regular import open_regular, open_regular_at
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import PosixStore, version_of


def version_at(ctx: Context, rel: str) -> Optional[str]:
    """The version of the regular file at the logdir path ``rel`` (``Store.version``, the one
    "same version" rule), asked through the logdir's store: no link on the way followed
    (invariant 4), whatever was swapped in between two looks. None when nothing stands there;
    ``TransactionError`` naming ``rel`` when something that is no regular file does (a link, a
    folder, a FIFO) or a folder on its way is a link (coded ``StoreError.SYMLINK`` for a link:
    every later attempt meets it until it is removed, no interruption)."""
    try:
        return ctx.store.version(ctx.key(rel))
    except StoreFailure as e:
        if e.code in (StoreError.SYMLINK, StoreError.NOT_REGULAR):
            raise TransactionError(f"{rel}: is no longer a regular file reached without a link ({e}); "
                                   "left as is", StoreError.SYMLINK if e.code == StoreError.SYMLINK else None) from None
        raise


def version_in(dir_fd: int, path: str) -> Optional[str]:
    """The version (``store_posix.version_of``: ``Store.version``'s rule) of the regular file
    ``path`` names in the folder open at ``dir_fd`` (``throttle.name_in``), never through a link;
    None when nothing, or no regular file, stands there: for a caller that looks and then acts
    in that one folder (``swap._where_looked``)."""
    fsops.op()
    try:
        st = os.stat(fsops.name_in(path, dir_fd), dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return version_of(st) if stat.S_ISREG(st.st_mode) else None


def stands_at(ctx: Context, rel: str) -> bool:
    """Whether anything stands at the logdir path ``rel`` (``version_at``): a regular file, or a
    thing no put-back may take for free (a link, a folder, one reached through a linked folder)."""
    try:
        return version_at(ctx, rel) is not None
    except TransactionError:
        return True


def prefix_sha256(f: BinaryIO, size: int) -> Optional[str]:
    """sha256 of the next ``size`` bytes read from ``f``; None when it holds fewer."""
    h, left = hashlib.sha256(), size
    while left > 0:
        b = f.read(min(CHUNK, left))
        if not b:
            return None
        h.update(b)
        left -= len(b)
    return h.hexdigest()


def starts_with(path: str, size: int, sha: str) -> bool:
    """Whether the regular file ``path`` holds at least ``size`` bytes and its first ``size``
    bytes have sha256 ``sha``: the recorded file, perhaps with records appended after it
    (``putback.begins_with``, the rule of every store, over the folder that holds ``path``; its
    name never followed, a FIFO never opened). False when it cannot be read."""
    try:
        return begins_with(PosixStore(os.path.dirname(path)), os.path.basename(path), size, sha)
    except OSError:
        return False


@contextlib.contextmanager
def _folder_of(path: str, dir_fd: Optional[int]) -> Iterator[int]:
    """``dir_fd``, or (None) a descriptor of ``path``'s folder opened here, closed after."""
    if dir_fd is not None:
        yield dir_fd
        return
    fd = fsops.os_open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def copy_over(tmp: str, final: str, sha: str, size: int, sparse: bool = False, new_name: bool = False,
              before: Optional[Callable[[], None]] = None, dir_fd: Optional[int] = None,
              tmp_dir_fd: Optional[int] = None) -> None:
    """``tmp`` (bytes of digest ``sha``, ``size`` long) put at ``final`` by a copy, then deleted:
    the one copy + delete of the swap and of every put-back (``put_in_place``). Unless ``final``
    holds those bytes already, whatever stands there is unlinked (the caller journaled and, where
    it is no one's output, kept it first; with ``new_name`` nothing is: the name was found free,
    and a file made there meanwhile fails the copy, ``FileExistsError``) and a new file is made
    exclusively with ``tmp``'s mode, mtime and owner, fsynced and hash-checked: an inode a second
    name shares (a backup's hard link) never sees a byte change. ``sparse``: zero blocks stay
    holes (a put-back allocates what the original did). ``before``: called once a copy is to be
    made, before anything at ``final`` changes (``put_in_place`` journals its ``copying`` record
    there). ``dir_fd``, ``tmp_dir_fd``: the folders of ``final`` and ``tmp`` (``throttle.name_in``;
    ``tmp``'s is ``final``'s unless given), opened by the caller's walk that follows no link (a
    put-back's ``swap._where_looked``); else each is opened here, once. Every step is made in
    those folders, and ``tmp`` is looked at in its own before anything at ``final`` changes: a
    folder on the way swapped for a link to another folder (where no ``tmp`` is) fails the copy
    with nothing there unlinked (review R6 F1)."""
    with _folder_of(final, dir_fd) as dfd, _folder_of(tmp, dfd if tmp_dir_fd is None and (
            dir_fd is not None or os.path.dirname(tmp) == os.path.dirname(final)) else tmp_dir_fd) as tfd:
        if not matches(final, sha, size, dir_fd=dfd):
            st = os.stat(fsops.name_in(tmp, tfd), dir_fd=tfd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise FileNotFoundError(errno.ENOENT, "the verified temporary is not there; nothing replaced", tmp)
            if before is not None:
                before()
            if not new_name:
                with contextlib.suppress(FileNotFoundError):
                    fsops.unlink(final, dir_fd=dfd)
            copy_new(tmp, final, sha, mode=stat.S_IMODE(st.st_mode), mtime_ns=st.st_mtime_ns, exclusive=True,
                     sparse=sparse, owner=(st.st_uid, st.st_gid), dir_fd=dfd, src_dir_fd=tfd)
        fsops.unlink(tmp, dir_fd=tfd)


def finish_copied(path: str, mode: Optional[int] = None, mtime_ns: Optional[int] = None,
                  mtime: Optional[float] = None, owner: Optional[Tuple[int, int]] = None,
                  dir_fd: Optional[int] = None) -> None:
    """Give the file at ``path`` the ``mode``, modification time and (when root) ``owner`` that
    ``copy_over``'s copy sets last (``files.finish_new_file``): a kill after its last byte and
    before them leaves the recorded bytes with a new file's mode, time and owner, which a content
    check alone takes for the put-back done (rule 3: mode and mtime are given back too). Asked
    only where a ``copying`` record names the path and the bytes there are the recorded ones;
    through an fd opened without following a link (``open_regular``; ``dir_fd``: ``path``'s
    folder, ``throttle.name_in``)."""
    with _open_in(path, dir_fd) as f:
        finish_new_file(f, mode, mtime_ns, mtime, owner)


def _open_in(path: str, dir_fd: Optional[int]):
    """``path`` opened for reading as a regular file, never through a link at its name
    (``dir_fd``: its folder, opened by a walk that follows none, ``throttle.name_in``)."""
    return open_regular(path) if dir_fd is None else open_regular_at(dir_fd, fsops.name_in(path, dir_fd))


@contextlib.contextmanager
def folder_at(ctx: Context, rel: str) -> Iterator[Optional[Tuple[int, str]]]:
    """(a descriptor of the folder of the logdir path ``rel``, as the logdir store's walk reaches
    it, and ``rel``'s name in it), or None when a folder on its way is missing (nothing stands
    there): for a step that removes or changes what stands at ``rel`` in that folder, so that a
    folder on the way swapped for a link after a look leads nothing outside the logdir
    (invariant 4). The walk's refusal is ``TransactionError`` naming ``rel``, coded
    ``StoreError.SYMLINK`` for a link (a file on the way: no code, as ``version_at``)."""
    with contextlib.ExitStack() as held:
        try:
            got: Optional[Tuple[int, str]] = held.enter_context(ctx.store.folder(ctx.key(rel)))
        except StoreFailure as e:
            if e.code != StoreError.NOT_FOUND:
                raise TransactionError(f"{rel}: not reached without a link ({e}); left as is",
                                       StoreError.SYMLINK if e.code == StoreError.SYMLINK else None) from None
            got = None
        yield got


def put_in_place(strategy: SwapStrategy, journal: Optional[OpJournal], rec: dict, new_name: bool = False,
                 begun: Collection[str] = (), sparse: bool = True) -> Callable[..., None]:
    """How a verified temporary of ``rec``'s bytes (``path`` logdir-relative, ``sha256``,
    ``size``) takes its path, as the folder's swap strategy says: renamed onto it where the folder
    renames atomically; else copied over it, then deleted (``copy_over``; ``sparse``: holes kept),
    a ``copying`` record naming the path journaled right before the copy's first change there
    unless ``begun`` (the paths already named: an earlier attempt's records, ``copies_begun``)
    or this journal's own records name it (``OpJournal.copying_paths``, kept by the journal as it
    writes: the module doc, once per path). ``new_name``: a name
    found free (a salvage file), never one whose standing file may be unlinked nor replaced: taken
    create-only, ``FileExistsError`` when a file stands there (made since it was found free) and
    nothing changed at it (``fsops.rename_new``, or ``copy_over``'s exclusive copy). Refused
    (``TransactionError``, ``Failure.REFUSED``, naming the path) where the folder does not rename
    and there is no ``journal``: asked before anything is done. The callable takes
    ``(tmp, dest)``, and ``src_dir_fd``/``dst_dir_fd``: their folders, opened by the caller's walk
    that follows no link (``throttle.name_in``; a put-back's ``swap._where_looked``)."""
    if strategy.renames:
        # a new name is taken create-only: a file made there since it was found free is never replaced
        return fsops.rename_new if new_name else fsops.replace
    if journal is None:
        raise TransactionError(f"{rec['path']}: this folder does not rename atomically and no journal records the "
                               "copy that would put it in place (a partial copy could not be told apart); left as "
                               "it is", Failure.REFUSED)

    def record() -> None:
        if rec["path"] not in begun and rec["path"] not in journal.copying_paths:
            journal.append({"type": Rec.COPYING, "final": rec["path"]})

    def copy_in(tmp: str, dest: str, src_dir_fd: Optional[int] = None, dst_dir_fd: Optional[int] = None) -> None:
        # the folders only when given: ``copy_over``'s own call as it always was otherwise
        folders = {} if dst_dir_fd is None and src_dir_fd is None else {"dir_fd": dst_dir_fd, "tmp_dir_fd": src_dir_fd}
        copy_over(tmp, dest, rec["sha256"], rec["size"], sparse=sparse, new_name=new_name, before=record, **folders)

    return copy_in


def settle_folder(ctx: Context, rel: str, mode: Optional[int], mtime_ns: Optional[int],
                  owner: Optional[Tuple[int, int]], when: Callable[[os.stat_result], bool] = lambda st: True,
                  entries: Optional[int] = None, unreached: Optional[List[str]] = None) -> bool:
    """The folder at the logdir path ``rel`` given ``owner`` (``give_owner``: root both, anyone else
    the group when a member; first: a chown clears set-id bits), ``mode`` and ``mtime_ns`` (each None: left; its access time is kept) through its
    own descriptor, opened in its parent as the logdir store's walk reaches it, no link followed
    (invariant 4: a folder on the way swapped for a link to one outside the logdir never has its
    mode or time changed). False, nothing changed, when no folder is reached there (nothing, a
    file, a link, a link on the way), ``when`` (its stat) says no, or (``entries``) it holds
    another number of entries than that (listed through the same descriptor); the folders of a
    restore or an unretire, once files are back. ``unreached``: ``rel`` appended when it is left
    because it is a link, or reached only through one (review R7 F6: the caller names it, as a
    folder whose recorded mode and time were not given back)."""
    try:
        with ctx.store.folder(ctx.key(rel)) as (pfd, name):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    raise
                if unreached is not None and e.errno != errno.ENOENT and _is_link_in(pfd, name):
                    unreached.append(rel)
                return False
            try:
                st = os.fstat(fd)
                if not when(st):
                    return False
                if entries is not None:
                    with os.scandir(fd) as it:
                        if sum(1 for _ in it) != entries:
                            return False
                if owner is not None:  # root: both; anyone else: the group, when a member (review R26 F7)
                    give_owner(fd, owner)
                if mode is not None:
                    os.fchmod(fd, mode & 0o7777)
                if mtime_ns is not None:
                    os.utime(fd, ns=(st.st_atime_ns, mtime_ns))
                return True
            finally:
                os.close(fd)
    except StoreFailure as e:
        if e.code not in (StoreError.NOT_FOUND, StoreError.SYMLINK, StoreError.NOT_REGULAR):
            raise
        if unreached is not None and e.code == StoreError.SYMLINK:
            unreached.append(rel)
        return False


def _is_link_in(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in the folder ``dir_fd`` is a symbolic link (never followed)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def copies_begun(records: Iterable[dict]) -> set:
    """The paths a copy + delete began copying bytes to (the journal's ``copying`` records)."""
    return {p for p in map(copying_path, records) if p is not None}


def _shorter_file(path: str, size: int, dir_fd: Optional[int] = None) -> Optional[Tuple[str, int]]:
    """(sha256, length) of ``path`` (``dir_fd``: its folder) when it is a regular file shorter
    than ``size``, else None; never through a link at its name."""
    try:
        with _open_in(path, dir_fd) as f:
            if os.fstat(f.fileno()).st_size >= size:
                return None
            n = os.fstat(f.fileno()).st_size
            return sha256_stream(f), n
    except OSError:
        return None


def partial_copy(path: str, tmp: str, s: dict, dir_fd: Optional[int] = None,
                 src_dir_fd: Optional[int] = None) -> bool:
    """Whether ``path`` is what a copy + delete killed within its copy of the temporary ``tmp``
    (``s``: its ``sha256`` and ``size``) left: a regular file shorter than those bytes holding
    their beginning, while ``tmp`` still holds them whole (so every byte of it exists there).
    Asked only of a path a ``copying`` record names: a rename leaves no partial file. ``dir_fd``:
    ``path``'s folder, ``src_dir_fd``: ``tmp``'s (``throttle.name_in``), each opened by a walk
    that follows no link (``folder_at``): a folder on the way swapped for a link since then has
    no file outside the logdir read as the copy's source (invariant 4). ``tmp`` is read once,
    through one descriptor that follows no link at its name; None: by its path (a vault's file,
    ours)."""
    got = _shorter_file(path, s["size"], dir_fd)
    if got is None:
        return False
    try:
        with _open_in(tmp, src_dir_fd) as f:
            if os.fstat(f.fileno()).st_size != s["size"] or prefix_sha256(f, got[1]) != got[0]:
                return False
            f.seek(0)
            return sha256_stream(f) == s["sha256"]
    except OSError:
        return False


def partial_copy_at(ctx: Context, rel: str, tmp_rel: str, s: dict) -> bool:
    """``partial_copy`` of the logdir paths ``rel`` and ``tmp_rel``, each read in its folder as
    ``folder_at`` reaches it (a link on the way: its ``TransactionError`` coded
    ``StoreError.SYMLINK``, nothing read through it); False when a folder is missing."""
    with folder_at(ctx, rel) as at, folder_at(ctx, tmp_rel) as src:
        return (at is not None and src is not None
                and partial_copy(at[1], src[1], s, dir_fd=at[0], src_dir_fd=src[0]))


def partial_put_back(vault, path: str, rec: dict, dir_fd: Optional[int] = None) -> bool:
    """Whether ``path`` is what a copying put-back of ``rec``'s original, killed within its copy,
    left: a regular file shorter than the original holding its beginning, as the vault's copy
    says (``vault.open_blob``: whatever form it is in; the put-back's temporary may be gone).
    Every byte of such a file is in the original: asked only of a path a ``copying`` record names.
    ``dir_fd``: ``path``'s folder (``throttle.name_in``)."""
    got = _shorter_file(path, rec["size"], dir_fd)
    if got is None:
        return False
    try:
        with vault.open_blob(rec["sha256"]) as f:
            return prefix_sha256(f, got[1]) == got[0]
    except OSError:
        return False


#: ``resume_copy``: the bytes stand at the path whole, with the recorded mode, mtime and owner
IN_PLACE = "in_place"
#: ``resume_copy``: the beginning of the bytes stood at the path: unlinked, the copy is made again
AGAIN = "again"


def holds_whole(path: str, s: dict, dir_fd: Optional[int] = None) -> bool:
    """Whether ``path`` (``dir_fd``: its folder) is a regular file (never through a link) holding
    exactly ``s``'s bytes (``sha256``, ``size``): what a copy that wrote its last byte leaves."""
    return matches(path, s["sha256"], s["size"], dir_fd=dir_fd)


def resume_copy(path: str, s: dict, beginning: Callable[[str], bool], meta: dict,
                dir_fd: Optional[int] = None) -> Optional[str]:
    """The next start's rule for ``path``, which a ``copying`` record names (the module doc; asked
    only of such a path): holding ``s``'s bytes (``sha256``, ``size``) whole, it gets ``meta``
    (``finish_copied``'s ``mode``, ``mtime_ns``/``mtime``, ``owner``: what the copy sets last)
    and ``IN_PLACE`` is returned; holding their beginning (``beginning(path)``: ``partial_copy``
    or ``partial_put_back``), it is unlinked and ``AGAIN`` returned; else None (nothing, or
    something that is not this copy's, a link among them: the caller's rule). ``dir_fd``: the
    folder of ``path`` (``folder_at``: the walk that follows no link), where every look and
    change is made (``beginning`` must look there too); None: by path, as a caller that opened
    no folder always did."""
    if holds_whole(path, s, dir_fd):
        finish_copied(path, **meta, dir_fd=dir_fd)
        return IN_PLACE
    if beginning(path):
        fsops.unlink(path, dir_fd=dir_fd)  # every byte of it is in the copy's source: no one's but the copy's
        return AGAIN
    return None


def resume_at(ctx: Context, rel: str, s: dict, beginning: Callable[[str, int], bool], meta: dict) -> Optional[str]:
    """``resume_copy`` of the logdir path ``rel``, every look and change made in its folder as
    ``folder_at`` reaches it (a link on the way: its ``TransactionError``, nothing changed);
    ``beginning(path, dir_fd)`` looks in that folder. None when the folder is missing."""
    with folder_at(ctx, rel) as at:
        if at is None:
            return None
        return resume_copy(ctx.abs(rel), s, lambda q: beginning(q, at[0]), meta, dir_fd=at[0])


def undo_new_name(ctx: Context, tmp: Optional[str], final: Optional[str], s: Optional[dict],
                  resume: bool) -> Optional[str]:
    """What placing the verified temporary ``tmp`` (logdir path; ``s``: its ``sha256`` and
    ``size``) at the new name ``final`` left, undone (a rollback's staged file, a salvage
    recovery undoes): with ``resume`` (a ``copying`` record names ``final`` on a folder that
    copies), a beginning of those bytes at ``final`` goes first (``resume_copy``, while ``tmp``
    still tells it); ``tmp`` is removed; ``final`` is removed when it holds the bytes whole (a
    rename, or a whole copy). Each in its folder as ``folder_at`` reaches it: a folder on the way
    that is a link is refused (``TransactionError`` coded ``StoreError.SYMLINK``, naming it) and
    nothing outside the logdir is removed; a folder missing holds nothing to undo. Returns ``tmp``
    when a file stands there that is not the operation's own (``staged_ident.staged_still``): left
    where it is, for the caller to name (``staged_ident.left_at_staged_note``)."""
    if resume and tmp and final and s:
        def beginning(q: str, d: int) -> bool:
            # the temporary read in its folder as the walk reaches it now, never by its path: a folder
            # swapped for a link since ``final``'s look has no outside file vouch for ``final``'s bytes
            with folder_at(ctx, tmp) as src:
                return src is not None and partial_copy(q, src[1], s, dir_fd=d, src_dir_fd=src[0])
        resume_at(ctx, final, s, beginning, {})
    left = None
    if tmp:
        with folder_at(ctx, tmp) as at:
            if at is not None:
                if staged_still(ctx, tmp, s, at):
                    with contextlib.suppress(FileNotFoundError):
                        fsops.unlink(at[1], dir_fd=at[0])
                elif stands_in(at):
                    left = tmp
        forget_staged(ctx.abs(tmp))
    if final and s:
        with folder_at(ctx, final) as at:
            if at is not None and holds_whole(at[1], s, at[0]):
                fsops.unlink(at[1], dir_fd=at[0])
    return left


def place_at_free_name(ctx: Context, name_of: Callable[[int], str], source: str, s: Optional[dict],
                       strategy: SwapStrategy, journal: Optional[OpJournal], begun: Collection[str],
                       meta: dict, reuse: bool = False, dir_fd: Optional[int] = None) -> Tuple[str, bool]:
    """``source``'s bytes (``s``: ``sha256``, ``size``) put at the first name ``name_of(k)``
    (logdir-relative, k = 1, 2, …) they may take, ``put_in_place(new_name=True)``, ``source``
    gone after; returns (that name, whether they were placed now). Each name is taken
    create-only (a rename tries it with no look first; a copy, which journals its ``copying``
    record first, only where an lstat finds it free): a file made at a name found free is never
    replaced (invariant 1). A taken name is the answer only with ``reuse`` and holding the bytes
    whole (an earlier attempt's rename: only its bytes tell it; only ``source`` goes), else the
    walk goes on. A name a ``copying`` record names
    (``begun``) is settled by ``resume_copy`` first (``meta``: the copy's mode, mtime and owner):
    holding the bytes whole it is the answer and only ``source`` goes; holding their beginning it
    is emptied and copied to again. ``s`` None (only where the strategy renames: no hash asked, and
    a rename leaves no partial copy to resume): the first free name. The walk is every store's
    (``putback.at_free_name``); the looks, the placement and the reuse are the folder's.
    ``dir_fd``: the folder of ``source`` and of every name, opened by the caller's walk that
    follows no link (``vault_blobs.restore_folder``): the placement and ``source``'s removal are
    made in it (``throttle.name_in``), never by a path a folder swapped for a link would lead
    outside the logdir; the looks go through the logdir's store, which follows none either."""
    resumed: set = set()  # names a copy a kill began stands at whole, now given its metadata

    def looks_free(name: str) -> bool:
        p = ctx.abs(name)
        if s is not None and name in begun:
            # in ``dir_fd``, where given (the placement's own folder), never by a path a link leads
            got = resume_copy(p, s, lambda q: partial_copy(q, source, s, dir_fd=dir_fd, src_dir_fd=dir_fd), meta,
                              dir_fd=dir_fd)
            if got == IN_PLACE:
                resumed.add(name)
                return False
            return got == AGAIN or not stands_at(ctx, name)
        # a copy journals its ``copying`` record before its exclusive create: only at a name that
        # looks free, so no record names a file that was never the copy's; a rename looks by moving
        return strategy.renames or not stands_at(ctx, name)

    def place(name: str) -> bool:
        try:
            put_in_place(strategy, journal, {"path": name, **(s or {})}, new_name=True, begun=begun)(
                source, ctx.abs(name), **({} if dir_fd is None else {"src_dir_fd": dir_fd, "dst_dir_fd": dir_fd}))
        except FileExistsError:
            return False  # made since it was found free: kept, as a file at any taken name is
        return True

    def holds(name: str) -> bool:
        return name in resumed or (reuse and s is not None and name not in begun
                                   and holds_original(ctx.store, ctx.key(name), s))

    name, placed = at_free_name(name_of, place, holds, looks_free)
    if not placed:
        fsops.unlink(source, dir_fd=dir_fd)
    return name, placed


__all__ = ["version_at", "version_in", "stands_at",
           "prefix_sha256", "starts_with", "copy_over", "finish_copied", "put_in_place", "copies_begun", "partial_copy",
           "partial_copy_at", "partial_put_back", "IN_PLACE", "AGAIN", "holds_whole", "resume_copy", "resume_at", "undo_new_name", "folder_at",
           "place_at_free_name", "settle_folder"]
