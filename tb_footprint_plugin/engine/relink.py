"""Hard links between the files a reduction takes, recorded at its backup and made again by its
restore (review R17 F4).

Two names of one inode in a run (``ln a b``, a ``cp -al`` of files inside it) are two backup
records with one sha256. Put back as two copies, the run takes one more file's disk after the
restore than before it (a user near a full disk meets ENOSPC half-way) and its names no longer
share writes. So the reduce's backup records ``inode`` (``[st_dev, st_ino]`` as its ``lstat``
saw them) and ``nlink`` of every original with other links, and the manifest's file entry of
each later name of an inode gives ``link_of``: the path of its first name in the manifest
(``link_groups``). The restore puts the first name back as ever, then makes each later one a
hard link of it (``Relinks.linked``): only where its name is free (create-only: ``link`` fails
on an existing name, so whatever stands there is the put-back's to judge), only when the first
name's inode holds the original (its sha256 read through the fd of the inode then linked) with
the mode and modification time the later name recorded (equal for true links), and the new
name checked to be that inode. A link that cannot be made (another file system, ``EMLINK``,
the name taken, a first name that is not the original) is a copy of its own, as before, said in
the restore's words and as a finding (``Finding.HARD_LINKED``). A kill between the first name
and the link leaves the later name free, and the next start's ``finish_restore`` links it.
An original with links outside the reduction's names is linked to one in another run of the
logdir when another reduction recorded that inode too (the plan took both) and that name stands
with its original (``Relinks.join``: the run restored second joins the first); else (a snapshot
beside the logdir, the other run not restored) it is put back as a file of its own, and the
restore says those links are not made again.
The records and entries are untrusted: ``first_name`` takes a ``link_of`` only when it names an
entry of the same manifest that agrees in every recorded field.
"""
from __future__ import annotations

import os
import stat
from typing import Dict, Iterable, List, Optional, Tuple

from tb_footprint_plugin.engine.context import Context, TransactionError, reason_of
from tb_footprint_plugin.engine.placement import folder_at, version_at
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import hash_and_count, recorded_owner
from tb_footprint_plugin.storage.paths import UnsafePath, safe_rel
from tb_footprint_plugin.storage.regular import open_regular_at

#: what a later name's entry must share with its first name's: one inode has one content, size,
#: mode, time and owner (``inode`` as the backup saw it)
SAME = ("sha256", "size", "mode", "mtime_ns", "uid", "gid", "inode")
#: what a backup record of a file with other names carries into its manifest entry (``inode_fields``)
LINK_FIELDS = ("inode", "nlink")


def inode_fields(st: os.stat_result, scanned: int = 1) -> dict:
    """The fields a backup record of a file with ``st`` carries for its link group: ``inode``
    and ``nlink`` when the file has other names now or had at the scan (``scanned``: the plan's
    ``Action.links``; a name in another run that this batch reduced first is gone by now, and
    only its count at the scan tells this one it had one), nothing else (most files have none)."""
    n = max(st.st_nlink, scanned if isinstance(scanned, int) else 1)
    return {"inode": [st.st_dev, st.st_ino], "nlink": n} if n > 1 else {}


def inode_of(f: dict) -> Optional[Tuple[int, int]]:
    """``f``'s recorded ``inode`` as a key, or None (absent, or not two whole numbers: untrusted)."""
    ino = f.get("inode")
    if isinstance(ino, list) and len(ino) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in ino):
        return ino[0], ino[1]
    return None


def link_groups(entries: List[dict]) -> List[dict]:
    """``entries`` (a manifest's files, in backup order), each later name of a recorded inode
    given ``link_of``: the path of the first entry of that inode. Returns ``entries``."""
    first: Dict[Tuple[int, int], str] = {}
    for f in entries:
        key = inode_of(f)
        if key is None:
            continue
        if key in first:
            f["link_of"] = first[key]
        else:
            first[key] = f["path"]
    return entries


def first_name(f: dict, by_path: Dict[str, dict]) -> Optional[dict]:
    """The entry of ``f``'s first name (``link_of``) when ``f`` is a later name of a recorded
    link group that agrees with it in every field ``SAME`` names; None else (a copy of its own)."""
    src = f.get("link_of")
    if not isinstance(src, str) or src == f.get("path") or inode_of(f) is None:
        return None
    first = by_path.get(src)
    if not isinstance(first, dict) or first.get("link_of") is not None:
        return None
    if any(first.get(k) != f.get(k) for k in SAME) or not isinstance(f.get("mtime_ns"), int):
        return None
    return first


def _inside(path) -> bool:
    """Whether ``path`` (another manifest's, untrusted) is a relative path below the logdir."""
    try:
        safe_rel(path)
    except UnsafePath:
        return False
    return path not in (".", "")


def _link_inode(fd: int, src: Tuple[int, str], dst: Tuple[int, str]) -> None:
    """Make ``dst`` (create-only) a name of the inode open at ``fd``: the very file read and
    checked, through ``/proc/self/fd`` (a name swapped in at ``src`` meanwhile is never linked);
    where that is not there, by ``src``'s name, which ``_link`` checks after."""
    proc = f"/proc/self/fd/{fd}"
    if os.path.islink(proc):
        os.link(proc, dst[1], dst_dir_fd=dst[0], follow_symlinks=True)
    else:
        os.link(src[1], dst[1], src_dir_fd=src[0], dst_dir_fd=dst[0], follow_symlinks=False)


def peer_index(manifests: Iterable[dict], but: Optional[str] = None) -> Dict[Tuple[int, int], List[dict]]:
    """The file entries with a recorded inode of the reductions among ``manifests`` (but the one
    whose op id is ``but``), by that inode: what ``Relinks.join`` looks up. Built once for a
    command's restores (``restore.Releases``), not once a run."""
    out: Dict[Tuple[int, int], List[dict]] = {}
    for m in manifests:
        if not isinstance(m, dict) or m.get("kind") != "reduce" or (but is not None and m.get("op_id") == but):
            continue
        for e in m.get("files", []):
            key = inode_of(e) if isinstance(e, dict) else None
            if key is not None:
                out.setdefault(key, []).append(e)
    return out


class Relinks:
    """A restore's link groups (``manifest``'s files): ``linked`` makes a later name a link of
    its first; ``said`` is the restore's words on the links it could not make or never could."""

    def __init__(self, ctx: Context, manifest: dict) -> None:
        self.ctx = ctx
        files = [f for f in manifest.get("files", []) if isinstance(f, dict)]
        self.by_path = {f.get("path"): f for f in files}
        #: (path, why): later names put back as copies of their own
        self.not_linked: List[Tuple[str, str]] = []
        # names with links outside the reduction's names: how many of its names each inode has here
        names: Dict[Tuple[int, int], int] = {}
        for f in files:
            key = inode_of(f)
            if key is not None:
                names[key] = names.get(key, 0) + 1
        self.outside = sorted(str(f.get("path")) for f in files if inode_of(f) is not None and f.get("link_of") is None
                              and isinstance(f.get("nlink"), int) and f["nlink"] > names[inode_of(f)])
        #: path -> another reduction's entry of the same inode (``join``): a name it may be linked to
        self.peers: Dict[str, dict] = {}
        self.joined: List[str] = []

    def join(self, index: Dict[Tuple[int, int], List[dict]]) -> None:
        """Other reductions' file entries of this logdir by their recorded inode (``peer_index``:
        another run's names of an inode this one's ``outside`` entries had, the plan took both):
        each such entry that agrees in every field ``SAME`` names becomes a name ``linked`` may
        link it to, where it stands holding its original (the other run restored first, or never
        changed). Only this run's inodes are looked up (review R19 F4: each run's restore walked
        every entry of every manifest)."""
        for p in self.outside:
            f = self.by_path.get(p)
            for e in index.get(inode_of(f), ()) if f is not None else ():
                if f["path"] in self.peers or e.get("path") in self.by_path \
                        or not _inside(e.get("path")) or any(e.get(k) != f.get(k) for k in SAME):
                    continue
                self.peers[f["path"]] = e

    def linked(self, f: dict) -> bool:
        """Whether ``f``'s name now is a hard link of its first name's inode holding the
        original (made now, create-only); False: put it back as a copy (``put_back``), a link
        that failed noted for ``said``."""
        first = first_name(f, self.by_path) or self.peers.get(f.get("path"))
        if first is None:
            return False
        try:
            if version_at(self.ctx, f["path"]) is not None:
                return False  # something stands there: the put-back's rules judge it
        except TransactionError:
            return False  # a link or a folder there: the put-back refuses it, naming it
        why = self._link(f, first)
        if why is not None and f.get("link_of") is not None:
            self.not_linked.append((f["path"], why))  # another run's name not standing is no failure
        if why is None and first is self.peers.get(f["path"]):
            self.joined.append(f["path"])
        return why is None

    def _link(self, f: dict, first: dict) -> Optional[str]:
        """The link made: None; else why not (``f``'s name free, or left as another file or a
        changed inode made it: the put-back judges what stands there, never this)."""
        ctx = self.ctx
        try:
            with folder_at(ctx, first["path"]) as src, folder_at(ctx, f["path"]) as dst:
                if src is None or dst is None:
                    return "a folder on its way is missing"
                with open_regular_at(src[0], src[1]) as r:
                    st = os.fstat(r.fileno())
                    if (st.st_size, st.st_mode & 0o7777, st.st_mtime_ns) != (f["size"], f["mode"], f["mtime_ns"]) \
                            or hash_and_count(r)[0] != f["sha256"]:
                        return f"{first['path']} is not its original with its time and mode"
                    # whose the inode is too: another user may make the first name with the same bytes,
                    # mode and time; a link to theirs would leave these bytes in a file they can
                    # rewrite, the vault's copy released (review R19 F1)
                    owner = recorded_owner(f)
                    if st.st_uid != (owner[0] if owner is not None else os.geteuid()):
                        return f"{first['path']} is a file of another user (uid {st.st_uid}), not its original"
                    fsops.op()
                    _link_inode(r.fileno(), src, dst)
                    after = os.fstat(r.fileno())
                now = os.stat(dst[1], dir_fd=dst[0], follow_symlinks=False)
                if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != \
                        (st.st_dev, st.st_ino, after.st_size, after.st_mtime_ns) or not stat.S_ISREG(now.st_mode) \
                        or (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
                    # another file took the new name, or the inode was written, since the read: the
                    # name is left as it stands, whatever it is (no unlink without a journal record,
                    # and nothing proves the name still ours, review R19 F3); the put-back judges it,
                    # the original staying in the vault unless it holds the original
                    os.fsync(dst[0])
                    return f"{first['path']} changed while it was linked"
                os.fsync(dst[0])
        except (OSError, TransactionError) as e:
            return reason_of(e)
        return None

    def said(self) -> str:
        """The restore's words on the links not made (``""`` when every one was)."""
        out = ""
        if self.not_linked:
            path, why = self.not_linked[0]
            more = f" and {len(self.not_linked) - 1} more" if len(self.not_linked) > 1 else ""
            out += (f"; {len(self.not_linked)} hard link(s) between the run's files could not be made again "
                    f"({path}{more}: {why}): put back as a copy of its own (bytes, time and mode exact; "
                    "it takes its own disk space)")
        outside = [p for p in self.outside if p not in self.joined]
        if self.joined:
            out += f"; {len(self.joined)} file(s) linked again to their other names in another run"
        if outside:
            out += (f"; {len(outside)} file(s) had hard links outside this run's reduced files (a snapshot? another "
                    f"run not restored yet?), e.g. {outside[0]}: put back as files of their own, those links not "
                    "made again")
        return out

    def findings(self) -> List[str]:
        """The paths put back as copies where a link was recorded (``Finding.HARD_LINKED``)."""
        return [p for p, _why in self.not_linked]


__all__ = ["SAME", "LINK_FIELDS", "inode_fields", "inode_of", "link_groups", "first_name", "peer_index", "Relinks"]
