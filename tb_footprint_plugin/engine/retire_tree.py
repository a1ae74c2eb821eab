"""A retired run as the vault keeps it, and the file-level steps every retirement verb shares.

Where a retired run lives: ``<vault>/retired/<op_id>/files/<n>``, one numbered file per file of
the run (``retired_dir``, ``stored_file``; numbered, so that no TensorBoard walker takes a
``*tfevents*`` name there for a run), reached only through folders of ours
(``check_retired_dir``). What a run's folder holds (``inventory``: regular files and folders,
nothing followed) and its one digest (``tree_sha256``). Journals and manifests read back are
untrusted (``check_record``, ``rel_ok``, ``OP_ID_RE``). One file back at its path, never over
another, as the folder's swap strategy says (``put_back``, ``placement.put_in_place``), the
folders' modes and times after (``chmod_dirs``), what a rolled-back retirement leaves in the
vault removed by name (``drop_retired``). The manifest and change-log
line of a retirement (``write_retire_manifest``) and the catalogue of them (``retirements``,
``retired_now``, ``retirement_recorded``).

``engine.retire`` runs the verbs over these: the retirement (``LocalRetire`` on the one driver),
its rollback, its restore (``unretire``), its recovery and its purge.

Why one module: the vault's layout of a retired run, the checks of the untrusted records that
name it and the file-level steps over it (put back, set aside, dropped) are one contract; a step
apart from the layout and the checks it relies on would drift from them.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import stat
import time
from typing import Collection, Iterable, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Code, Failure, Finding, Outcome, RetireSkip, Skip, StoreError
from tb_footprint_plugin.engine import manifest as one_schema
from tb_footprint_plugin.engine import retire_rules as rules
from tb_footprint_plugin.engine.catalogue import own_manifests
from tb_footprint_plugin.engine.context import Context, TransactionError, no_symlink
from tb_footprint_plugin.engine.history import append_history, disk_log
from tb_footprint_plugin.engine.journal import OpJournal
from tb_footprint_plugin.engine.placement import (IN_PLACE, partial_copy, place_at_free_name, put_in_place, resume_at,
                                                  settle_folder, starts_with, version_in)
from tb_footprint_plugin.engine.putback import begins_with, holds_original
from tb_footprint_plugin.engine.retire_rules import KIND, is_restorable_retirement
from tb_footprint_plugin.engine.run_lock import folder_capabilities
from tb_footprint_plugin.engine.salvage import clear_own_temp, salvage_name
from tb_footprint_plugin.engine.swap_strategy import SwapStrategy, swap_strategy
from tb_footprint_plugin.engine.vault import Vault, restore_folder, who
from tb_footprint_plugin.storage.files import (CopyMismatch, copy_new, give_owner, plausible_id, recorded_owner,
                                               sha256_file, fsync_dir, sha256_stream, unlink_if_same)
from tb_footprint_plugin.storage.openfiles import describe_holders, find_writers
from tb_footprint_plugin.scan.set_aside import holding_words, holds_vault, is_state_folder
from tb_footprint_plugin.storage.paths import MADE_OP_ID_RE, is_state_name, is_within, plausible_mtime_ns
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.private import NotPrivate, check_private_dir, user_name
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import version_token
from tb_footprint_plugin.version import __version__

RETIRED = "retired"


def retired_dir(vault: Vault, op_id: str) -> str:
    """Where the files of retirement ``op_id`` are kept."""
    return os.path.join(vault.root, RETIRED, op_id)


def stored_file(vault: Vault, op_id: str, index: int) -> str:
    """Where file ``index`` of retirement ``op_id`` is kept."""
    return os.path.join(retired_dir(vault, op_id), "files", str(index))


def check_retired_dir(vault: Vault, op_id: str) -> None:
    """Refuse (``Failure.REFUSED``, naming the folder, and a link's target) unless every folder
    from the vault down to the retirement's ``files`` that exists is a real folder of ours
    (``Vault.check_private``, then ``check_private_dir`` for each below it): a planted ``retired``
    link would send a retirement's moves, an unretire's reads and a purge's deletes outside the
    vault (review R11 F4). A folder not there yet passes (nothing is followed through it)."""
    try:
        vault.check_private()  # the vault itself (our own state folder an old umask left 0775 passes)
        cur = vault.root
        for part in (RETIRED, op_id, "files"):
            cur = os.path.join(cur, part)
            check_private_dir(cur)
    except NotPrivate as e:
        if not os.path.lexists(e.path):
            return  # not there (yet): nothing is followed through it
        raise TransactionError(f"{e.path} {e.why}; the retirement's files are not looked for through it",
                               Failure.REFUSED) from None


def drop_retired(vault: Vault, op_id: str, n: int) -> Optional[str]:
    """Remove what a rolled-back retirement left in the vault: the ``n`` entries its journal names
    (each file put back or found in place first), then the folders if that emptied them. Never a
    whole tree: a journal is untrusted, and one naming fewer files than the folder holds must not
    take the others with it (review R11 F2). Returns a note when something else stays."""
    d = retired_dir(vault, op_id)
    files = os.path.join(d, "files")
    check_retired_dir(vault, op_id)
    for i in range(n):
        for name in (str(i), f"{i}.partial"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(files, name))
    left = []
    for folder in (files, d):
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue
        except OSError:
            with contextlib.suppress(OSError):
                left = sorted(os.listdir(folder))
            break
    if left:
        return (f"{len(left)} entr{'y' if len(left) == 1 else 'ies'} its journal does not name stay in {d}: "
                f"{', '.join(left[:5])}")
    return None


#: an operation id as this tool makes them (``storage.paths``' one rule)
OP_ID_RE = MADE_OP_ID_RE


def rel_ok(ctx: Context, rel) -> str:
    """A path read back from a journal or manifest (untrusted): relative, no '..', inside the logdir."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or ".." in rel.replace(os.sep, "/").split("/") \
            or "\0" in rel or not is_within(ctx.abs(rel), ctx.logdir) or ctx.abs(rel) == ctx.logdir:
        raise TransactionError(f"refusing a recorded path that leads out of the logdir: {rel!r}", Failure.REFUSED)
    return rel


def check_record(ctx: Context, begin: dict) -> None:
    """Journals and manifests are untrusted input: the op id, the vault and every path are checked
    before recovery or a restore acts on them."""
    from tb_footprint_plugin.engine.catalogue import known_vaults

    if not OP_ID_RE.match(str(begin.get("op_id", ""))):
        raise TransactionError(f"malformed operation id {begin.get('op_id')!r}; left alone", Failure.REFUSED)
    if os.path.abspath(str(begin.get("vault", ""))) not in [os.path.abspath(v) for v in known_vaults(ctx)]:
        raise TransactionError(f"operation {begin['op_id']} names a vault this logdir does not use; left alone",
                               Failure.REFUSED)
    for key in ("files", "dirs", "tree"):
        for e in begin.get(key) or []:
            rel_ok(ctx, e.get("path") if isinstance(e, dict) else None)


def tree_sha256(entries: Iterable[dict]) -> str:
    """One hash of a tree: relative path, size, mode and sha256 of every file, sorted by path."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e["path"]):
        h.update(f"{e['path']}\0{e['size']}\0{e['mode'] & 0o7777:o}\0{e['sha256']}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _holds_state(ctx: Context, path: str) -> TransactionError:
    """A retirement's refusal of a run holding another logdir's state or vault at ``path``."""
    return TransactionError(holding_words(os.path.relpath(path, ctx.logdir)), RetireSkip.HOLDS_STATE)


def inventory(ctx: Context, run: str) -> Tuple[List[dict], List[dict]]:
    """Files (path, size, mode, mtime_ns, ino, uid, gid, nlink) and directories (path, mode,
    mtime_ns, uid, gid) of ``run``'s tree, paths relative to the logdir. Refuses symlinks and special files, naming
    them. The owner is kept so that root's unretire gives every file and folder back to its user."""
    top = ctx.abs(run)
    files, dirs = [], []

    def onerror(e: OSError) -> None:
        raise TransactionError(f"cannot read {e.filename}: {e.strerror or e}", Failure.REFUSED)

    for root, dnames, fnames in os.walk(top, onerror=onerror, followlinks=False):
        rel_root = os.path.relpath(root, ctx.logdir)
        st = os.lstat(root)
        dirs.append({"path": rel_root, "mode": st.st_mode & 0o7777, "mtime_ns": st.st_mtime_ns,
                     "uid": st.st_uid, "gid": st.st_gid})
        for d in list(dnames):
            p = os.path.join(root, d)
            if os.path.islink(p):
                raise TransactionError(f"{os.path.relpath(p, ctx.logdir)}: a symlink inside the run; "
                                       "a retirement never follows or moves links; left alone", Failure.REFUSED)
            # the scan's rule (``scan.set_aside``), asked again of the tree that would move: another
            # logdir's state holds backups that this vault must never take (review R13 F5)
            if is_state_name(d) and is_state_folder(p):
                raise _holds_state(ctx, p)
        if holds_vault(root, dnames):  # the run's own folder too: a --backup-dir given as it (R14 G2)
            raise _holds_state(ctx, root)
        for n in fnames:
            p = os.path.join(root, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, ctx.logdir)
            if not stat.S_ISREG(st.st_mode):
                what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise TransactionError(f"{rel}: {what}; a retirement moves regular files only; left alone",
                                       Failure.REFUSED)
            files.append({"path": rel, "size": st.st_size, "mode": st.st_mode & 0o7777,
                          "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "uid": st.st_uid, "gid": st.st_gid,
                          "nlink": st.st_nlink})
    files.sort(key=lambda f: f["path"])
    return files, dirs


def still_recorded(ctx: Context, f: dict) -> bool:
    """The run's file ``f`` is still the version its retirement recorded, by the one rule
    (``Store.version``: inode, size and mtime, asked through the logdir's store, so a link at the
    path or on the way is never followed: a changed file). A record without its inode (a journal
    an earlier release wrote) is compared by size and mtime, as then."""
    if not isinstance(f.get("ino"), int):
        return unchanged(ctx.abs(f["path"]), f)
    try:
        return ctx.store.version(ctx.key(f["path"])) == version_token(f["ino"], f["size"], f["mtime_ns"])
    except StoreFailure:
        return False


def recorded_in(dir_fd: int, name: str, f: dict) -> bool:
    """``still_recorded`` asked of the entry ``name`` of the folder open at ``dir_fd`` (reached by
    the walk that follows no link): the same rule (``placement.version_in``: ``Store.version``'s
    token; size and mtime for a record without its inode), for a step made in that folder."""
    if not isinstance(f.get("ino"), int):
        try:
            return unchanged(name, f, os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
        except OSError:
            return False
    return version_in(dir_fd, name) == version_token(f["ino"], f["size"], f["mtime_ns"])


def unchanged(path: str, f: dict, st: Optional[os.stat_result] = None) -> bool:
    """``path`` is still the regular file ``f`` records: its size and mtime (a copy put back, a new
    inode, is compared so; the run's own file by ``still_recorded``). ``st``: its lstat, taken."""
    try:
        st = st or os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == f["size"] and st.st_mtime_ns == f["mtime_ns"]


def grown(path: str, f: dict) -> bool:
    """``path`` is the retired file with bytes appended (its recorded prefix's sha256 matches)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > f["size"] and starts_with(path, f["size"], f["sha256"])


def _set_aside(ctx: Context, path: str, strategy: SwapStrategy, journal: Optional[OpJournal],
               begun: Collection[str]) -> str:
    """A writer's file standing at ``path`` moved beside it, to the next free
    ``<path>.salvaged-NNN`` (its records stay in the run; mode, mtime and owner its own); returns
    that name (``placement.place_at_free_name``). Renamed where the folder renames atomically;
    else copied there under a ``copying`` record and then deleted, never while a process writes
    it (its next records would go to a file about to be unlinked). A name an earlier, killed
    attempt's ``copying`` record names (``begun``) is that attempt's copy, resumed
    (``placement.resume_copy``): holding the file whole, it gets the file's mode, mtime and owner
    and the file goes; holding its beginning, it is removed and the file copied again there."""
    dst = ctx.abs(path)
    s, meta = None, {}  # a rename needs no hash, and leaves no partial copy to resume
    # looked at and moved in its folder as the logdir store's walk reaches it (no link followed)
    with ctx.store.folder(ctx.key(path)) as (dfd, here):
        if not strategy.renames:
            writers = find_writers([dst]).holders
            if writers:
                raise TransactionError(describe_holders(writers, lambda x: path) + "; it is not set aside while it "
                                       "is written", Skip.OPEN_FOR_WRITING)
            st = os.stat(here, dir_fd=dfd, follow_symlinks=False)
            with ctx.store.open_read(ctx.key(path)) as r:
                s = {"sha256": sha256_stream(r), "size": st.st_size}
            meta = {"mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns, "owner": (st.st_uid, st.st_gid)}
        name, _ = place_at_free_name(ctx, lambda k: salvage_name(path, k), dst, s, strategy, journal, begun, meta,
                                     dir_fd=dfd)
    return name


def sized(path: str, size: int) -> bool:
    """``path`` exists with ``size`` bytes."""
    try:
        return os.lstat(path).st_size == size
    except OSError:
        return False


def chmod_dirs(ctx: Context, dirs: List[dict]) -> List[str]:
    """Each directory gets its recorded mode and, where recorded, its mtime back (after every
    file is in: putting a file in changes its folder's mtime; setting a folder's own mtime
    changes nothing above it). Returns the folders left as they are because they are links or
    reached only through one (review R7 F6: the caller names them)."""
    unreached: List[str] = []
    for d in dirs:  # through its own descriptor (``placement.settle_folder``: never through a link)
        # before 1970: negative, given back exactly
        settle_folder(ctx, d["path"], d["mode"], plausible_mtime_ns(d.get("mtime_ns")), recorded_owner(d),
                      unreached=unreached)
    return unreached


def folders_not_ours(ctx: Context, dirs: List[dict]) -> Optional[str]:
    """Why the retired files may not go back into the folders standing at their recorded paths, or
    None: a folder there of another user than this one and than the folder's recorded owner (review
    R16 H1), or a link at the run's own path. A retirement frees its run's name: in a shared logdir
    anyone may make a folder (or a link) there, and a file put back into it is theirs to delete
    while the vault has let it go. Asked before a restore's journal (its words), again after it
    before any folder is made (review R22 F7: anything there since is refused as before the
    journal, nothing made in it), and once the recorded folders are made (``make_dirs``), before
    any file moves: a folder of ours then stays ours, since only its owner renames it in a sticky
    logdir. A rollback's and recovery's put-back ask it too. The words say who may move what stands
    there: in a sticky logdir, its owner or root."""
    me = os.geteuid()
    ordered = sorted((d for d in dirs if isinstance(d, dict) and isinstance(d.get("path"), str)),
                     key=lambda d: len(d["path"]))
    for i, d in enumerate(ordered):
        why = _folder_not_ours(ctx, d, top=i == 0, me=me)
        if why:
            return why
    return None


def _folder_not_ours(ctx: Context, d: dict, top: bool, me: int) -> Optional[str]:
    """``folders_not_ours``' look at the one recorded folder ``d`` (``top``: the run's own path,
    the shallowest recorded), ``me`` the effective user; None when it is absent, ours, its
    recorded owner's, or (below the top) anything but a folder."""
    path = d["path"]
    st = _look(ctx, ctx.key(path))
    if top and st is not None and stat.S_ISLNK(st.st_mode):
        # a link at the run's own path (of whoever): never followed, so the run cannot go back
        # there; refused for the run alone, as a stranger's folder is (review R22 F5: the walk's
        # own refusal came up as an error of the whole command, later runs not restored). A link
        # at a deeper recorded folder is the put-back's to meet (a folder left unsettled)
        fix = "remove that link, then restore again" if _may_move(ctx, path, st, me) else \
            f"its owner (or root) must remove it ({_why_not_you(ctx, path)}), then restore again"
        return (f"{path} is a symbolic link of {user_name(st.st_uid)}, made there since the retirement: "
                f"never followed, nothing is put back through it; the run stays in the vault; {fix}")
    if st is None or not stat.S_ISDIR(st.st_mode):
        return None
    if st.st_uid == me or st.st_uid == plausible_id(d.get("uid")):
        return None
    # root's folder is refused too: accepted, its recorded mode could not be given back (only root
    # may chmod it) and the put-back would stop half-way; the user cannot move it in a sticky
    # logdir either, so the words say who can (review R18 F5); another user's folder says who can
    # move it too: in a sticky logdir not this user (review R22 F7)
    if st.st_uid == 0 and me != 0:
        why, fix = ("(only root could give it the run's recorded mode and time back)",
                    "root (an administrator) must move it away or give it to you (chown), then restore again")
    else:
        why = "(they could delete the files)"
        fix = "move that folder away, then restore again" if _may_move(ctx, path, st, me) else \
            f"its owner (or root) must move it away ({_why_not_you(ctx, path)}), then restore again"
    return (f"{path} is a folder of {user_name(st.st_uid)}, made there since the retirement: "
            f"nothing is put back into another user's folder {why}; the run stays in the vault; {fix}")


def _may_move(ctx: Context, path: str, st: os.stat_result, me: int) -> bool:
    """Whether this user may rename or remove the entry at ``path`` (``st``, its lstat): root, or
    its folder writable by this user and not sticky, or sticky but this user's or the entry's.
    Only for the words: nothing is moved."""
    if me == 0:
        return True
    parent = os.path.dirname(ctx.abs(path))
    try:
        pst = os.stat(parent)
    except OSError:
        return False
    if not os.access(parent, os.W_OK | os.X_OK):
        return False
    return not (pst.st_mode & stat.S_ISVTX) or me in (pst.st_uid, st.st_uid)


def _why_not_you(ctx: Context, path: str) -> str:
    """Why this user may not move the entry at ``path``: its folder's sticky bit, or its mode."""
    parent = os.path.dirname(ctx.abs(path))
    try:
        sticky = bool(os.stat(parent).st_mode & stat.S_ISVTX)
    except OSError:
        sticky = False
    return ("the sticky bit of its folder keeps you from it" if sticky
            else "you may not write in its folder")


def _give_back_owner(path: str, rec: dict, kind: int = 0, dir_fd: Optional[int] = None,
                     moved: Optional[Tuple[int, int]] = None) -> None:
    """A file or folder put back gets its recorded owner (``rec``'s, as a restore gives it, e558d46):
    root gives both, anyone else the group when a member of it (``give_owner``; review R26 F7).
    Through an fd opened without following a link (``dir_fd``: its folder); nothing when the
    record has no plausible owner (written before owners were kept). ``moved``: the (device, inode)
    of the file just renamed to ``path``; a file found there that is not it (a link to a file outside
    the logdir, renamed over it by someone who may write the folder: O_NOFOLLOW stops no hard link,
    review R27 F1) is never given an owner."""
    owner = recorded_owner(rec)
    if owner is None:
        return
    fd = os.open(fsops.name_in(path, dir_fd), os.O_RDONLY | kind | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    try:
        if moved is not None:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != moved:
                return
        give_owner(fd, owner)
    finally:
        os.close(fd)


class StandsThere(TransactionError):
    """Another file (or a folder) stands at a retired file's path: left as it is, the retired file
    stays in the vault. A retirement's rollback fails on it as on any error (its writer's file was
    set aside first, ``set_aside``); a restore of a retirement leaves that path (``not_restored``)."""


def put_back(ctx: Context, vault: Vault, op_id: str, i: int, f: dict, same_fs: bool,
             set_aside: bool = False, strategy: Optional[SwapStrategy] = None,
             journal: Optional[OpJournal] = None, begun: Collection[str] = (),
             dirs: Collection[dict] = ()) -> Optional[str]:
    """One file back from the vault to its path, if it is not there yet.

    As the folder's swap strategy says (``strategy``; the folder's when none is given): where it renames
    atomically, the vault's file is renamed to the path (the same filesystem) or a checked copy
    of it renamed there; where it does not, the checked copy is copied to the path under a
    ``copying`` record written to ``journal`` and deleted (``placement.put_in_place``), the
    vault's file left until the run is checked. ``begun``: the paths an earlier, killed attempt's
    ``copying`` records name, settled first (``placement.resume_copy``): the file whole there gets
    its recorded mode, mtime and owner and is in place; its beginning goes and the file is put
    back. Without ``journal`` a folder that does not rename is refused before anything is done
    (``placement.put_in_place``: nothing could tell a partial copy from a writer's file at the
    next start); every caller passes one: an unretire's, a retirement's rollback's.

    With ``set_aside`` (a rollback) a regular file found at the path that is neither the file
    nor the file grown by appends, while the file itself is in the vault, is a writer's new file:
    it is renamed to ``<file>.salvaged-NNN`` beside it (its records stay in the run) and the
    file goes back; returns a note saying so (``_set_aside``: by the strategy too). Without it,
    another file at the path (or made there between the look and the move, or something not a
    regular file) is left as it is and ``StandsThere`` raised, nothing of this file moved."""
    strategy = strategy or swap_strategy(folder_capabilities())
    # refused here, before anything, where the folder copies and there is no journal (``put_in_place``)
    place = put_in_place(strategy, journal, f, new_name=True, begun=begun)
    no_symlink(ctx, f["path"])
    dst = ctx.abs(f["path"])
    key = ctx.key(f["path"])
    stored = stored_file(vault, op_id, i)
    tmp_name = f".footprint-unretire-{op_id}-{i}.tmp"
    tmp = os.path.join(os.path.dirname(dst), tmp_name)
    tmp_key = ctx.key(os.path.join(os.path.dirname(f["path"]), tmp_name))
    # the looks and a killed copy's temporary's removal by the store's walk that follows no link
    # (invariant 4): a link on the way since ``no_symlink`` is ``StandsThere``, the file in the vault
    with _no_link_on_the_way(f, stored):
        if f["path"] in begun:
            # a copy a killed attempt began: finished (the vault's bytes whole: what it had yet to set is
            # the recorded mode, time and owner), or emptied (their beginning, every byte in the vault)
            meta = {"mode": f["mode"], "mtime_ns": plausible_mtime_ns(f.get("mtime_ns")), "owner": recorded_owner(f)}
            try:  # in its folder as the walk reaches it (``placement.resume_at``)
                got = resume_at(ctx, f["path"], f, lambda q, d: partial_copy(q, stored, f, dir_fd=d), meta)
            except TransactionError as e:  # a link on the way: the file stays in the vault
                raise StandsThere(f"{e}; the retired file stays in {stored}", e.code) from None
            if got == IN_PLACE:
                _drop_copy_left(ctx, tmp_key, f)  # a copy killed before it deleted its source
                return None
        st = _look(ctx, key)
        there = os.path.exists(stored)
        note = None
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise StandsThere(f"{f['path']}: something else stands there now; left as is")
            if not there or unchanged(dst, f, st) or (st.st_size > f["size"] and begins_with(
                    ctx.store, key, f["size"], f["sha256"])) or holds_original(ctx.store, key, f):
                _drop_copy_left(ctx, tmp_key, f)  # a copy killed before it deleted its source
                return None  # the file is in place (a copy's original never left): the vault's copy may go
            if not set_aside:
                # not the file that was retired: both are kept, the operation stays unsettled
                raise StandsThere(f"{f['path']}: a different file stands there now; the retired one stays in {stored}")
            aside = _set_aside(ctx, f["path"], strategy, journal, begun)
            note = (f"{f['path']}: a file written at its path during the retirement was kept beside it as "
                    f"{os.path.basename(aside)}")
    if not there:
        raise TransactionError(f"{f['path']}: neither in the logdir nor in {retired_dir(vault, op_id)}")
    # the move, or the copy and its temporary, made in the folder the logdir store's walk reaches
    # (its missing folders made by it), never by a path a folder on the way swapped for a link
    # would lead outside the logdir (invariant 4): such a link is refused, naming it, and the
    # file stays in the vault (``StandsThere``: a restore leaves that path, ``not_restored``)
    with contextlib.ExitStack() as held:
        with _no_link_on_the_way(f, stored):
            dfd = held.enter_context(restore_folder(dst, (ctx.store, key)))
        # asked of the folder this very descriptor is (review R18 F4): a run folder under a folder
        # others may rename in (not sticky) can be swapped for theirs after the look by path
        _folder_ours(dfd, f, stored, dirs)
        if strategy.renames and (same_fs or vault.same_filesystem(os.path.dirname(dst))):
            # create-only: a file a writer made at the path since the look above is never replaced
            was = os.lstat(stored)
            _move_new(stored, dst, f, stored, dfd)
            _give_back_owner(dst, f, dir_fd=dfd, moved=(was.st_dev, was.st_ino))  # a copy made across filesystems at the retirement was root's
        else:
            clear_own_temp(tmp, dfd)
            try:  # made anew and set up through its fd: a link planted at that name is never followed
                # holes stay holes, as every restore's put-back leaves them
                made = copy_new(stored, tmp, f["sha256"], f["mode"], mtime_ns=f["mtime_ns"], exclusive=True,
                                sparse=True, owner=recorded_owner(f), dir_fd=dfd)
            except CopyMismatch:
                raise TransactionError(f"copy of {f['path']} from the vault does not match its sha256") from None
            if strategy.renames:
                try:
                    _move_new(tmp, dst, f, stored, dfd)
                except TransactionError:
                    unlink_if_same(tmp, made, dfd)  # a copy: the vault still holds the file
                    raise
            else:
                place(tmp, dst, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
    return note


def _folder_ours(dfd: int, f: dict, stored: str, dirs: Collection[dict] = ()) -> None:
    """The folder ``f`` goes back into (``dfd``) is this user's, the file's recorded owner's or the
    folder's own recorded owner's (``dirs``: the retirement's folder records; as
    ``folders_not_ours`` rules, R19 F6); else ``StandsThere`` (``restore_blocked``): the retired
    file stays in the vault, never in a folder whose owner could delete it (review R16 H1 through
    a swap after the look, R18 F4)."""
    uid = os.fstat(dfd).st_uid
    folder = os.path.dirname(f["path"])
    owners = {plausible_id(f.get("uid"))} | {plausible_id(d.get("uid")) for d in dirs
                                              if isinstance(d, dict) and d.get("path") == folder}
    if uid != os.geteuid() and uid not in owners:
        raise StandsThere(f"{f['path']}: its folder is now one of {user_name(uid)}, not this user's: nothing is put "
                          f"into it; the retired file stays in {stored}", Failure.RESTORE_BLOCKED)


@contextlib.contextmanager
def _no_link_on_the_way(f: dict, stored: str) -> Iterator[None]:
    """The walk's refusal (a link on the way to ``f``'s folder, …) said as ``StandsThere``, coded,
    naming the path: the retired file stays in the vault."""
    try:
        yield
    except StoreFailure as e:
        raise StandsThere(f"{f['path']}: not reached without a link ({e}); left as is, the retired file "
                          f"stays in {stored}", e.code) from None


def _look(ctx: Context, key: str) -> Optional[os.stat_result]:
    """The lstat at ``key`` in its folder (the walk that follows no link); None: nothing there."""
    try:
        with ctx.store.folder(key) as (dfd, name):
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except StoreFailure as e:
        if e.code == StoreError.NOT_FOUND:  # its folder is missing
            return None
        raise


def _drop_copy_left(ctx: Context, tmp_key: str, f: dict) -> None:
    """A killed copy's temporary holding ``f`` whole removed in its folder (the no-follow walk)."""
    if holds_original(ctx.store, tmp_key, f):
        with ctx.store.folder(tmp_key) as (dfd, name):
            fsops.unlink(name, dir_fd=dfd)


def _move_new(src: str, dst: str, f: dict, stored: str, dir_fd: Optional[int] = None) -> None:
    """``src`` moved to the free path ``dst`` (``throttle.rename_new``; ``dir_fd``: ``dst``'s
    folder, and ``src``'s unless ``src`` is absolute: the vault's copy); a file made there since
    it was found free (a writer) is kept and the move refused: the retired file stays in the vault."""
    try:
        fsops.rename_new(src, dst, src_dir_fd=None if src == stored else dir_fd, dst_dir_fd=dir_fd)
    except FileExistsError:
        raise StandsThere(f"{f['path']}: a different file stands there now; the retired one stays in "
                          f"{stored}") from None


def own_inode(vault: Vault, op_id: str, i: int) -> bool:
    """Retired file ``i`` left in the vault while another name of its inode went back to the run
    (a run's own hard links move as one inode: fb35cad) gets an inode of its own: a copy of its
    bytes as they are, checked, renamed over it; else a write through the restored name would
    change the only copy of the file left (review R18 F6). True when it was copied."""
    p = stored_file(vault, op_id, i)
    st = os.lstat(p)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
        return False
    os.makedirs(vault.tmp, exist_ok=True)
    tmp = os.path.join(vault.tmp, f"own-{op_id}-{i}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a killed attempt's copy: remade whole
    copy_new(p, tmp, sha256_file(p), mode=stat.S_IMODE(st.st_mode), mtime_ns=st.st_mtime_ns)
    os.replace(tmp, p)
    fsync_dir(os.path.dirname(p))
    return True


def stored_ok(vault: Vault, op_id: str, i: int, f: dict) -> bool:
    """File ``i`` of retirement ``op_id`` is in the vault with ``f``'s size and sha256."""
    p = stored_file(vault, op_id, i)
    try:
        return os.lstat(p).st_size == f["size"] and sha256_file(p) == f["sha256"]
    except OSError:
        return False


#: what ``stored_as`` finds of a retired file in the vault
RECORDED, GROWN, CHANGED, MISSING = "recorded", "grown", "changed", "missing"


def stored_as(vault: Vault, op_id: str, i: int, f: dict) -> Tuple[str, Optional[dict]]:
    """What the vault holds of file ``i`` of retirement ``op_id`` (``f``: its entry), read once:
    ``RECORDED`` (its size and sha256), ``GROWN`` (its recorded bytes with more after them: a
    writer that held the file open through a same-filesystem retirement appended to the vault's
    inode; the rule of ``rollback_retire`` and salvage, ``placement.starts_with``), ``CHANGED``
    (it does not begin with its recorded bytes, or cannot be read: damaged) or ``MISSING``. With
    ``GROWN``, the entry the file goes back by: ``f`` with the size, sha256 and mtime it has now
    (the late records are part of it; a copy put back is checked against them)."""
    p = stored_file(vault, op_id, i)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return MISSING, None
    except OSError:
        return CHANGED, None  # a link planted there, or unreadable: never read as the run's bytes
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return CHANGED, None
        prefix, whole, n = hashlib.sha256(), hashlib.sha256(), 0
        while True:  # one pass: the recorded bytes' digest and the whole file's
            b = os.read(fd, 1 << 20)
            if not b:
                break
            if n < f["size"]:
                prefix.update(b[: f["size"] - n])
            whole.update(b)
            n += len(b)
        st = os.fstat(fd)
    except OSError:
        return CHANGED, None
    finally:
        os.close(fd)
    if n < f["size"] or prefix.hexdigest() != f["sha256"]:
        return CHANGED, None
    if n == f["size"]:
        return RECORDED, None
    return GROWN, dict(f, size=n, sha256=whole.hexdigest(), mtime_ns=st.st_mtime_ns)


def stored_problems(m: dict) -> List[Tuple[Code, str, str]]:
    """What ``status`` says of a disk retirement's files in the vault, one lstat a file, nothing
    read: (code, path, words) for each stored file gone or shorter (``backup_damaged``), grown
    (``late_writes_kept``: a writer appended to it after the retirement; a restore puts it back
    whole), changed in place (``backup_changed``: same size, another mtime; a restore leaves it
    in the vault, ``not_restored``) or one inode with a name outside the vault
    (``backup_shared``: a write through that name changes the retired copy). A bucket's
    retirement, a restored or purged one: nothing."""
    # a manifest is untrusted: one not of a disk retirement's shape is read around (status names it elsewhere)
    if not is_restorable_retirement(m) or "same_fs" not in m or not isinstance(m.get("tree"), list) \
            or not isinstance(m.get("vault"), str) or not OP_ID_RE.match(str(m.get("op_id", ""))):
        return []
    vault = Vault(m["vault"])
    out: List[Tuple[Code, str, str]] = []
    seen: List[Tuple[int, dict, str, Optional[os.stat_result]]] = []
    for i, f in enumerate(m["tree"]):
        if not isinstance(f, dict) or not isinstance(f.get("size"), int):
            continue
        p = stored_file(vault, m["op_id"], i)
        try:
            seen.append((i, f, p, os.lstat(p)))
        except OSError:
            seen.append((i, f, p, None))
    # names of one inode among the retirement's own stored files: a run's own hard links, moved
    # as one inode (fb35cad), are no name outside the vault (review R18 F3)
    own = collections.Counter((st.st_dev, st.st_ino) for _i, _f, _p, st in seen if st is not None)
    for i, f, p, st in seen:
        path = str(f.get("path"))
        if st is None:
            out.append((Finding.BACKUP_DAMAGED, path, f"retired file {path} is missing from {retired_dir(vault, m['op_id'])}"))
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size < f["size"]:
            out.append((Finding.BACKUP_DAMAGED, path, f"retired file {path} in {p} is shorter than it was"))
        elif st.st_size > f["size"]:
            out.append((Finding.LATE_WRITES_KEPT, path,
                        f"{st.st_size - f['size']} byte(s) were written to retired file {path} ({p}) after the "
                        "retirement (a writer held it open); a restore puts it back whole, what was written included"))
        elif st.st_mtime_ns != f.get("mtime_ns"):
            out.append((Finding.BACKUP_CHANGED, path,
                        f"retired file {path} ({p}) was written after the retirement; a restore checks it and "
                        "leaves it in the vault if its bytes changed (not_restored)"))
        if stat.S_ISREG(st.st_mode) and st.st_nlink > own[(st.st_dev, st.st_ino)]:
            out.append((Finding.BACKUP_SHARED, path,
                        f"retired file {path} ({p}) is one inode with {st.st_nlink - own[(st.st_dev, st.st_ino)]} "
                        "other name(s) outside the "
                        "vault (a hard-linked snapshot?): a write through such a name changes the retired copy"))
    return out


def write_retire_manifest(ctx: Context, records: List[dict], outcome: str, reason: Optional[str],
                          recovered: bool = False) -> dict:
    """The retirement's manifest and change-log line."""
    begin = records[0]
    vault = Vault(begin["vault"])
    # the owner where recorded (a retirement from before owners were kept has none)
    tree = [{k: f[k] for k in ("path", "size", "mode", "mtime_ns", "sha256", "uid", "gid") if k in f}
            for f in begin["files"]]
    kept = outcome == Outcome.VERIFIED
    m = one_schema.new(
        op_id=begin["op_id"], kind=KIND, run=begin["run"], logdir=begin["logdir"], started_at=begin["t"],
        finished_at=time.time(), outcome=str(outcome), reason=reason,
        bytes_before=begin["bytes"], bytes_after=0 if kept else begin["bytes"],
        files=[],  # no content-addressed blobs: the retired tree is kept as a whole
        backup_purged=not kept,
        takes_along=begin.get("takes_along", []), vault=vault.root, same_fs=begin["same_fs"], rule=begin.get("rule"),
        tool_version=__version__, **who(), recovered=recovered,
        **({"logdir_id": begin["logdir_id"]} if begin.get("logdir_id") else {}),
        tree=tree, dirs=begin["dirs"], dir_times=begin.get("dir_times") or [], tree_sha256=tree_sha256(tree),
        stored_in=os.path.relpath(retired_dir(vault, begin["op_id"]), vault.root))
    os.makedirs(vault.ops, exist_ok=True)
    # a rollback's manifest already there: an earlier attempt of this rollback wrote it (and perhaps
    # its line) before a kill, and recovery redoes it: one line per operation, the first attempt's
    again = not kept and vault.has_manifest(m["op_id"])
    vault.write_manifest(m)
    line = rules.retire_line(m, outcome, reason, tool_version=__version__)
    if again:
        disk_log(ctx.state, create=True).append_once([dict(line, time=time.time())])
    else:
        append_history(ctx.state, line)
    return m


def retirements(ctx: Context) -> List[dict]:
    """Manifests of retirements that took a run out of the logdir, newest first
    (``retire_rules.retirements`` over this logdir's manifests)."""
    return rules.retirements(own_manifests(ctx))


def retired_now(ctx: Context, run: str) -> Optional[dict]:
    """The retirement that currently keeps ``run`` (or a parent taking it along) out of the logdir."""
    return rules.retired_now(own_manifests(ctx), run)


def retirement_recorded(vault: Vault, op_id: str) -> bool:
    """Whether the vault holds a verified manifest of retirement ``op_id`` (it took the run out of
    the logdir for good): a damaged one that cannot be read counts too, as recorded: doubt keeps."""
    if not vault.has_manifest(op_id):
        return False
    try:
        m = vault.read_manifest(op_id)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return m.get("kind") == KIND and m.get("outcome") == Outcome.VERIFIED


def tree_size(d: str) -> int:
    """Bytes of the files under ``d`` (what a purge of it frees): each inode once, as ``du``
    counts it (a run's own hard links are one inode in the vault: review R18 F2)."""
    total = 0
    seen = set()
    for root, _dirs, files in os.walk(d):
        for n in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, n))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


__all__ = ["folders_not_ours", "RETIRED", "OP_ID_RE", "StandsThere", "retired_dir", "stored_file", "check_retired_dir", "drop_retired", "rel_ok",
           "check_record", "tree_sha256", "inventory", "unchanged", "still_recorded", "recorded_in", "grown", "sized", "chmod_dirs", "put_back",
           "stored_ok", "RECORDED", "GROWN", "CHANGED", "MISSING", "stored_as", "stored_problems",
           "write_retire_manifest", "retirements", "is_restorable_retirement", "retired_now",
           "retirement_recorded", "tree_size", "own_inode"]
