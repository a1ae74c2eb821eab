"""Disk in use by a logdir and its vault(s): the one number every front end shows.

Counted as ``du`` counts (allocated blocks, ``st_blocks * 512``; each inode once across every
path walked), because that is what a full disk is made of: a backup hard-linked into the vault
costs nothing until its original leaves both places, a copy on another filesystem costs its
blocks there, a compressed blob (``<sha>.zst``) costs what it holds compressed, and the vault's
packs (``<vault>/packs``) what they hold (``freed_by_op`` counts a packed backup's share). Nothing is followed (symlinks count as themselves), nothing is written, and the
state folders of other users at the top of the logdir (``.tb-footprint`` when it is not ours,
``.tb-footprint-u<uid>`` of another uid) are skipped: their bytes are theirs to account for.

A plan counts the logdir's part from its scan's own walk (``disk_usage_after_scan``: the same
rule, ``scan.model.DiskTally``), walking only what the scan set aside and the vaults elsewhere.

Memory stays bounded on logdirs of millions of files: only inodes with several links (the
vault's hard links, mostly) are remembered, as ``(st_dev, st_ino)`` pairs.

A vault whose backups are offloaded to a bucket (``engine.offload``) holds only small records
for them on the local disk; what the bucket stores is counted apart (``remote_usage``), never
added to the disk in use: it is not on this disk.
"""
from __future__ import annotations

import heapq
import os
import stat
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from tb_footprint_plugin.engine import offload, remote_vault
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.vault import MIN_SAVING, ZST_SUFFIX, Vault
from tb_footprint_plugin.scan.model import BLOCK, DiskTally
from tb_footprint_plugin.storage import remote, zst
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.regular import open_regular
from tb_footprint_plugin.storage.paths import is_sha256, is_state_name, is_within


@dataclass
class DiskUsage:
    """Bytes allocated on disk by a logdir and its vault(s), each inode counted once.

    ``by_device`` splits the total per filesystem (``st_dev``); ``logdir_device`` is the
    logdir's own, so ``on_logdir_disk`` is what the full disk the user cares about holds.
    ``skipped`` lists what was not counted and why (another user's state folder, a vault
    that is not ours, an unreadable folder)."""

    total_bytes: int = 0
    by_device: Dict[int, int] = field(default_factory=dict)
    logdir_device: Optional[int] = None
    roots: List[str] = field(default_factory=list)
    skipped: List[Dict[str, str]] = field(default_factory=list)
    #: per ``st_dev``: blocks of the files counted here that have names outside everything walked
    #: (``DiskTally.outside_by_device``: a ``cp -al`` snapshot's); removing what was walked frees none
    outside_by_device: Dict[int, int] = field(default_factory=dict)

    @property
    def on_logdir_disk(self) -> int:
        """Bytes on the logdir's filesystem (logdir, plus any vault that shares its disk)."""
        return self.by_device.get(self.logdir_device, 0) if self.logdir_device is not None else self.total_bytes

    @property
    def linked_outside_bytes(self) -> int:
        """Bytes on the logdir's disk counted here whose files have other names outside the logdir
        and its vaults (hard links: a snapshot's): they stay on disk whatever the logdir loses."""
        return self.outside_by_device.get(self.logdir_device, 0) if self.logdir_device is not None else \
            sum(self.outside_by_device.values())

    @property
    def freeable_on_logdir_disk(self) -> int:
        """``on_logdir_disk`` without ``linked_outside_bytes``: what the logdir and its vaults hold
        on that disk alone, so that its change is what the disk gained (a reduce's "freed now")."""
        return self.on_logdir_disk - self.linked_outside_bytes

    @property
    def elsewhere_bytes(self) -> int:
        """Bytes on other filesystems (a ``--backup-dir`` vault on another disk, a mount inside)."""
        return self.total_bytes - self.on_logdir_disk

    def to_dict(self) -> dict:
        return {"disk_in_use_bytes": self.total_bytes, "on_logdir_disk_bytes": self.on_logdir_disk,
                "elsewhere_bytes": self.elsewhere_bytes, "linked_outside_bytes": self.linked_outside_bytes,
                "roots": list(self.roots), "skipped": list(self.skipped)}


def _ours(st: os.stat_result) -> bool:
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _walk_roots(logdir: str, vaults: Iterable[str]) -> Tuple[List[str], List[Dict[str, str]]]:
    """The folders to walk: the logdir, then each vault not already inside a walked folder;
    a vault that is a symlink or someone else's is skipped (never followed, never counted)."""
    roots = [logdir]
    skipped: List[Dict[str, str]] = []
    for v in vaults:
        v = os.path.abspath(v)
        if any(is_within(v, r) for r in roots):
            continue
        try:
            st = os.lstat(v)
        except FileNotFoundError:
            continue
        except OSError as e:
            skipped.append({"path": v, "why": f"unreadable ({e.strerror})"})
            continue
        if not _ours(st):
            skipped.append({"path": v, "why": "not a folder of ours (a symlink or another user's)"})
            continue
        roots = [r for r in roots if r == logdir or not is_within(r, v)] + [v]
    return roots, skipped


def disk_usage(logdir: str, vaults: Sequence[str] = ()) -> DiskUsage:
    """Disk in use by ``logdir`` plus ``vaults`` (a vault inside the logdir is walked once):
    allocated blocks as ``du -sc LOGDIR VAULT...`` counts them, hard links counted once across
    all of them, symlinks not followed, other users' state folders at the top of the logdir
    skipped. A file that vanishes while walked is simply not counted (a writer's rename)."""
    logdir = os.path.abspath(logdir)
    roots, skipped = _walk_roots(logdir, vaults)
    out = DiskUsage(roots=roots, skipped=skipped)
    try:
        out.logdir_device = os.lstat(logdir).st_dev
    except OSError:
        pass
    tally = DiskTally()  # one rule for "allocated", the scan's (blocks, each inode once)
    for root in roots:
        _walk(out, tally, root, logdir, roots)
    out.total_bytes, out.by_device, out.outside_by_device = tally.bytes, tally.by_device, tally.outside_by_device
    return out


def disk_usage_after_scan(logdir: str, vaults: Sequence[str], walked) -> DiskUsage:
    """``disk_usage`` of ``logdir`` plus ``vaults`` without walking the logdir again: its part is
    what the scan's own walk counted (``walked``: the footprint's ``scan.model.DiskTally``, same
    rule: blocks, each inode once, symlinks as themselves), and only what that walk set aside (the
    state folders at its top, a vault inside it; another user's state folder skipped as
    ``disk_usage`` skips it) and the vaults outside the logdir are walked now, hard links to a file
    the scan met still counted once. ``logdir`` must be the folder that scan walked."""
    logdir = os.path.abspath(logdir)
    roots, skipped = _walk_roots(logdir, vaults)
    out = DiskUsage(logdir_device=walked.device, roots=roots, skipped=skipped + [dict(s) for s in walked.skipped])
    tally = walked.copy()  # the scan's tally stays as its walk left it
    for aside in walked.set_aside:
        if os.path.dirname(aside) == logdir and is_state_name(os.path.basename(aside)):
            try:
                st = os.lstat(aside)
            except OSError:
                continue
            if not _ours(st):  # another user's state and backups: theirs (as ``disk_usage`` says)
                out.skipped.append({"path": aside, "why": "not a state folder of ours"})
                continue
        _walk(out, tally, aside, logdir, roots)
    for root in roots[1:]:  # roots[0] is the logdir, which the scan walked
        _walk(out, tally, root, logdir, roots)
    out.total_bytes, out.by_device, out.outside_by_device = tally.bytes, tally.by_device, tally.outside_by_device
    return out


def _walk(out: DiskUsage, tally: DiskTally, root: str, logdir: str, roots: Sequence[str]) -> None:
    """Count ``root`` and everything under it into ``tally`` (``DiskTally.count``: the scan's rule,
    the inodes with several links counted once across every walk of it) and what it could not
    read into ``out``; a folder that is another of ``roots`` is left to its own walk."""
    count = tally.count

    try:
        st = os.lstat(root)
    except OSError:
        return
    count(st)
    if not stat.S_ISDIR(st.st_mode):
        return
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            it = os.scandir(folder)
        except OSError as e:
            out.skipped.append({"path": folder, "why": f"unreadable ({e.strerror})"})
            continue
        with it:
            for entry in it:
                try:
                    est = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if folder == logdir and is_state_name(entry.name) and not _ours(est):
                    # another user's state and backups (or a symlink planted as one): theirs
                    out.skipped.append({"path": entry.path, "why": "not a state folder of ours"})
                    continue
                if stat.S_ISDIR(est.st_mode) and any(entry.path == r for r in roots if r != root):
                    continue  # a vault walked as its own root: once
                count(est)
                if stat.S_ISDIR(est.st_mode):
                    stack.append(entry.path)


def on_another_disk(logdir: str, vault: str) -> bool:
    """Whether the local vault ``vault`` is on another filesystem than ``logdir`` (or will be, once
    made: ``device_of``): the one rule the plan's words and status's ``vault_elsewhere`` follow.
    A remote vault (``remote.is_remote``) is on no disk: False; a ``file://`` URL is its path."""
    scheme, path = remote.split_scheme(vault)
    return scheme in (None, "file") and device_of(path) != device_of(logdir)


def device_of(path: str) -> Optional[int]:
    """The filesystem (``st_dev``) a path is on, or would be on once made: its nearest existing
    folder's (a ``--backup-dir`` not made yet lands on its parent's disk)."""
    path = os.path.abspath(path)
    while True:
        try:
            return os.lstat(path).st_dev
        except OSError:
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent


def freed_by_op(m: dict, vault_roots: Sequence[str], logdir_device: Optional[int],
                removed_bytes: int, counted: Optional[Set[Tuple[str, str]]] = None) -> Tuple[int, int]:
    """``(freed_now, freed_after_purge)`` of one reduction as things stand: its backups still in
    the vault hold their bytes (on the logdir's disk, a hard-linked backup freed nothing yet), so
    what the logdir lost counts as freed now only for backups elsewhere or gone; purge frees the
    kept backups (their sizes, as purge counts them). A manifest is untrusted: its vault must be
    one of ``vault_roots`` and its digests well formed, else its backups are not counted.

    Originals whose other hard links kept their bytes on disk (its plan's ``linked_bytes``: a
    snapshot's) freed nothing when they left the logdir, and their backups are copies: so "freed
    now" is that much less (below zero while such a copy is kept: the reduce cost disk). A sparse
    original's holes (its plan's ``hole_bytes``) left the logdir's size but no disk: left out too,
    and so are the second names of an inode the reduce removed under each (its plan's
    ``twin_bytes``): the disk freed that inode once.

    ``counted``: (digest, vault) of the blobs an earlier operation of the same sum counted (a sum
    over several operations, as ``status`` makes it; updated here): a blob several operations
    share holds its blocks once, so it is subtracted once, by the first (review R17 F10)."""
    linked = _linked_bytes(m)
    if m.get("backup_released_by_restore") or m.get("restored_by"):
        return removed_bytes, 0
    holes = _plan_bytes(m, "hole_bytes")
    # a sparse original's removal may free less than its replacement takes (a .gz of its holes is
    # data): then the figure goes below zero, as ``du`` does
    removed_bytes -= holes + _plan_bytes(m, "twin_bytes")
    if m.get("backup_purged"):
        return removed_bytes - linked, 0
    root = m.get("vault")
    if not isinstance(root, str) or root not in vault_roots:
        return removed_bytes - linked, 0
    held_here = kept = 0
    packs_device: Optional[int] = None
    seen: Set[str] = set()
    for f in m.get("files") or []:
        sha = f.get("sha256") if isinstance(f, dict) else None
        if not is_sha256(sha) or sha in seen:
            continue
        seen.add(sha)
        once = counted is not None and (sha, root) in counted  # its blocks subtracted by an earlier one
        if counted is not None:
            counted.add((sha, root))
        found = False
        for name in (sha, sha + ZST_SUFFIX):  # plain (a hard link, or a copy) or compressed, as stored
            try:
                st = os.lstat(os.path.join(root, "blobs", sha[:2], name))
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            found = True
            kept += st.st_size
            if st.st_dev == logdir_device and not once:
                held_here += st.st_blocks * BLOCK
        ref = None if found else remote_vault.packed_ref(root, sha)
        if ref is not None:  # its share of a pack of the vault, as stored
            kept += ref.length
            if packs_device is None:
                packs_device = device_of(remote_vault.packs_root(root))
            if packs_device == logdir_device and not once:
                held_here += ref.length
    return (removed_bytes - held_here if holes else max(0, removed_bytes - held_here)) - linked, kept


def _linked_bytes(m: dict) -> int:
    """The manifest plan's ``linked_bytes`` (``RunPlan.linked_bytes``: untrusted, an int within
    the run's ``bytes_before``), 0 when it has none (an older manifest, a bucket's)."""
    return _plan_bytes(m, "linked_bytes")


def _plan_bytes(m: dict, key: str) -> int:
    """The manifest plan's count ``key`` (``linked_bytes``, ``hole_bytes``: untrusted, an int
    within the run's ``bytes_before``), 0 when it has none (an older manifest, a bucket's)."""
    plan = m.get("plan")
    if not isinstance(plan, dict):
        return 0
    n, before = plan.get(key), plan.get("bytes_before")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0 or not isinstance(before, int):
        return 0
    return min(n, max(0, before))


def bucket_freed_by_op(m: dict, removed_bytes: int) -> Tuple[int, int]:
    """``(freed_now, freed_after_purge)`` of one reduction of a bucket logdir as things stand, in
    what the store and its vault hold (``bucket_stored``): its backups (whole server-side copies,
    or blobs in a local folder) stay until ``purge`` (a restore keeps them too), counted at the
    originals' sizes as the bucket's purge counts what it frees; so what the logdir lost is freed
    now only beyond them, and purge frees them. ``m``: the manifest as
    ``bucket_catalogue.manifests`` reads it (one schema, sizes checked)."""
    if m.get("backup_purged"):
        return removed_bytes, 0
    held = sum(int(f.get("size") or 0) for f in m.get("files") or [] if isinstance(f, dict))
    return max(0, removed_bytes - held), held


#: what ``estimate_compressed`` reads at most: the largest files, ``zst.PROBE_BYTES`` of each in
#: windows spread over it (a file that cannot seek: its first ``SAMPLE_BYTES``)
SAMPLE_FILES = 32
SAMPLE_BYTES = 4 * CHUNK


class _Discard:
    """A sink that only counts (the estimate keeps no compressed bytes)."""

    def write(self, b) -> int:
        return len(b)


def estimate_compressed(originals: Iterable[Tuple[str, int]]) -> int:
    """Bytes the compressed vault would keep for ``originals`` (path, size) once compacted: the
    ``SAMPLE_FILES`` largest are sampled (windows over each compressed, as compaction decides
    from them: ``zst.sample``; a file saving less than ``MIN_SAVING`` counted whole, as
    compaction keeps it plain),
    the rest at the sampled files' overall ratio. Bounded reads whatever the logdir; a file that
    cannot be read counts whole (the estimate errs toward keeping). ``originals`` is read once and
    not kept: a plan of 100,000 runs passes one (path, size) per action it backs up."""
    total = [0]

    def counted():
        for p, n in originals:
            if n > 0:
                total[0] += int(n)
                yield p, int(n)

    # the largest, ties in the order given (as a stable sort would): not a sorted copy of them all
    items = heapq.nlargest(SAMPLE_FILES, counted(), key=lambda x: x[1])
    stored_sampled = read_in = read_out = 0
    for path, size in items:
        try:
            with open_regular(path) as f:
                # the windows a compaction decides from (``zst.sample``: spread over the whole
                # file), so a file random at its start and compressible after is estimated as it
                # will be stored; a file that cannot seek, by its head
                got = zst.sample(f, size)
                if got is None:
                    got = zst.compress_stream(_Head(f, SAMPLE_BYTES), _Discard(), None, give_up_ratio=None)
        except OSError:
            got = None
        if not got or not got[0]:
            stored_sampled += size
            continue
        ratio = got[1] / got[0]
        stored_sampled += size if ratio > 1 - MIN_SAVING else int(size * ratio)
        read_in += got[0]
        read_out += got[1] if ratio <= 1 - MIN_SAVING else got[0]
    rest = total[0] - sum(n for _p, n in items)
    return stored_sampled + (int(rest * read_out / read_in) if read_in else rest)


class _Head:
    """The first ``limit`` bytes of a file, as a stream."""

    def __init__(self, f, limit: int):
        self.f, self.left = f, limit

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        b = self.f.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(b)
        return b


def remote_usage(vault_roots: Sequence[str]) -> Optional[dict]:
    """What the remote vault(s) of these local vaults store, as the bucket bills it:
    ``{"remote_vault_bytes", "remote_blobs", "original_bytes", "urls", "errors",
    "offloads_pending", "unlisted"}`` from each
    store's ``BlobStore.stats()`` (one listing of its index); ``unlisted``: ``{url, sha256}`` of
    each store where backups this vault recorded there are listed by no index object (one lost:
    ``offload.remote_stats``); None when no vault offloads.
    A store that cannot be reached is named in ``errors`` (its bytes unknown, not zero)."""
    out = None
    seen = set()
    for root in vault_roots:
        st = offload.remote_stats(Vault(root))
        if st is None or st["url"] in seen:
            continue
        seen.add(st["url"])
        out = out or {"remote_vault_bytes": 0, "remote_blobs": 0, "original_bytes": 0, "urls": [], "errors": [],
                      "offloads_pending": 0, "unlisted": []}
        # operations whose backups are still (partly) local: a writer, a busy run or a failed store
        out["offloads_pending"] += len(offload.pending_offloads(Vault(root)))
        out["urls"].append(st["url"])
        if "error" in st:
            out["errors"].append({"url": st["url"], "error": st["error"]})
            continue
        if st.get("unlisted"):
            out["unlisted"].append({"url": st["url"], "sha256": st["unlisted"]})
        out["remote_vault_bytes"] += int(st.get("stored_bytes", 0))
        out["remote_blobs"] += int(st.get("blobs", 0))
        out["original_bytes"] += int(st.get("original_bytes", 0))
    return out


def bucket_stored(vault, listed_bytes: Optional[int] = None,
                  listed_vault: Optional[Tuple[str, int]] = None) -> int:
    """What a bucket logdir and its vault store now, as ``BucketEngine.stored`` counts it (the
    logdir's prefix, its vault in another prefix, a local folder of blobs as stored), from the
    listings a scan made already: ``listed_bytes`` (the logdir's prefix summed, its state folder
    and a vault inside it included; listed here when None) and ``listed_vault`` ((store path,
    bytes) of a vault in another prefix; listed here when it is not that vault's). ``vault``: the
    engine's ``BucketVault`` (over the logdir's ``ObjectStore``). A folder of blobs not made yet holds
    nothing and is not made (a plan writes nothing). Raises ``OSError`` when a listing fails (the
    ``Store``'s ``StoreFailure``: the listings go through ``BucketState``, one each, as before)."""
    logdir = vault.logdir  # the logdir's store: its root names the roots compared below
    st = BucketState.of(logdir)
    total = stored_bytes(o.size for o in st.tree().values()) if listed_bytes is None else int(listed_bytes)
    if not (vault.root == logdir.root or vault.root.startswith(logdir.root + "/")):
        if listed_vault is not None and listed_vault[0] == vault.root:
            total += int(listed_vault[1])
        else:
            # a vault in a bucket not made yet holds no backup yet
            total += stored_bytes(o.size for o in st.listing(vault.root, missing_ok=True).values())
    if vault.blobs is not None and os.path.isdir(vault.blobs.folder):
        from tb_footprint_plugin.storage.blobstore import BlobFailure

        try:
            total += int(vault.blobs.store.stats()["stored_bytes"])
        except BlobFailure as e:
            raise OSError(f"{vault.blobs.folder}: {e}") from e
    return total


def stored_bytes(sizes: Iterable[int]) -> int:
    """Disk in use of a bucket logdir and its vault: the sizes as stored (its listing), since an
    object store bills what it keeps, not blocks."""
    return sum(int(s) for s in sizes)
