"""What a plan says of where its bytes go, per engine: the local vault's "freed now / after purge"
(``freed_estimate``, ``vault_note``, ``offload_note``), a bucket plan's request cost, and the
measures a plan takes of what a rewrite would leave (``plan_rewrites`` on a disk,
``bucket_traces`` on a bucket). ``LocalEngine.note_plan`` / ``BucketEngine.note_plan`` use them.
"""
from __future__ import annotations

import bisect
import hashlib
import os
import stat
import time
from array import array
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import remote_vault, usage
from tb_footprint_plugin.engine.vault import DEFAULT_VAULT_FORMAT, Vault, blob_sizes
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.planner import LOCAL_VAULT_NOTE
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.scan.digests import MIN_FILE_BYTES, DigestCache, file_key
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.paths import cache_dir, state_dir
from tb_footprint_plugin.storage.regular import NotRegularFile, open_regular


@dataclass
class LinkedCut:
    """What other hard links change in a plan's figures (``linked_cut``). ``runs``: run ->
    (files, bytes) of its originals another name keeps on disk (the swap removes one name: their
    bytes stay, and the backup is a copy); ``twin_*``: originals that are one more name of an
    inode the plan removes under another path too: that inode is freed once, by its last name,
    and backed up once (the vault is content-addressed), so these free nothing and cost nothing."""

    runs: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    files: int = 0
    bytes: int = 0
    twin_files: int = 0
    twin_bytes: int = 0
    #: (run, path) of the twins: left out of the compressed vault's estimate (no backup of their own)
    twins: Set[Tuple[str, str]] = field(default_factory=set)


#: a plan whose scan walked longer ago than this (a tab's scan, kept for minutes) may not know of
#: a snapshot made since: its originals are all looked at again, not only those with links
FRESH_SCAN_S = 60.0


def linked_cut(logdir: str, p: Plan) -> LinkedCut:
    """The originals of ``p``'s runs (not skipped) with other hard links at the scan
    (``Action.links``), looked at again now (one ``lstat`` each; only those, or every original
    of a run whose scan is older than ``FRESH_SCAN_S``, whose ``links`` are then set to what the
    disk says now): grouped by inode, an inode whose every name (``st_nlink`` now) the plan
    removes is freed once (its other names are ``twins``); any other keeps its bytes on disk (a
    ``cp -al`` / ``rsync --link-dest`` snapshot beside the logdir, or a run this plan leaves).
    One that cannot be looked at counts as kept when the scan saw links (the figure errs toward
    freeing less). Each run's ``twin_bytes`` is set (its ``disk_removable_bytes`` leaves its twins
    out). Memory: the linked originals only."""
    cut = LinkedCut()
    groups: Dict[Tuple[int, int], Tuple[int, List[Tuple[object, object]]]] = {}
    kept: List[Tuple[str, object]] = []
    now = time.time()
    for rp in p.runs:
        if rp.skipped:
            continue
        rp.twin_bytes = 0
        stale = now - rp.planned_at > FRESH_SCAN_S
        for a in rp.actions:
            if (a.links <= 1 and not stale) or a.kind == "remove_dir":
                continue
            try:
                st = os.lstat(os.path.join(logdir, a.path))
            except OSError:
                if a.links > 1:
                    kept.append((rp.run, a))
                continue
            if stale:
                a.links = st.st_nlink
            if st.st_nlink <= 1:
                continue  # its other names went since the scan: it frees as any
            nlink, names = groups.setdefault((st.st_dev, st.st_ino), (st.st_nlink, []))
            names.append((rp, a))
    for nlink, names in groups.values():
        if len(names) >= nlink:  # every name goes: the last one frees the inode
            for rp, a in names[:-1]:
                cut.twin_files += 1
                cut.twin_bytes += a.disk_before
                rp.twin_bytes += a.disk_before
                cut.twins.add((rp.run, a.path))
        else:
            kept.extend((rp.run, a) for rp, a in names)
    for run, a in kept:
        n, b = cut.runs.get(run, (0, 0))
        cut.runs[run] = (n + 1, b + a.disk_before)
        cut.files += 1
        cut.bytes += a.disk_before
    return cut


#: the kinds of action whose original the reduce backs up into the vault
BACKED_UP = ("delete", "compress", "rewrite")


@dataclass
class ContentDups:
    """Originals a plan backs up whose bytes the vault will hold already when their turn comes
    (the vault keeps one blob per sha256, ``Vault.store`` adopts it): an earlier original of the
    same plan (``in_plan``) or a blob present now (``in_vault``). Such an original costs the vault
    nothing: it is freed now whole, and purging this plan's operations frees nothing of it (the
    blob is the earlier original's, or another operation's). Found by hashing only the originals
    whose size is another planned original's or a present blob's (``hashed_*``); every other
    original counts as before. A duplicate's blob is adopted as it stands (an earlier original of
    the plan, a plain blob of one name: ``adopted_bytes``) or the vault keeps a ``.zst``, a packed
    copy or a plain blob with other names: then a plain copy is made beside it, which a
    compressed vault's compaction drops again and a hard-link vault keeps."""

    #: ``id()`` of each such ``Action`` of the plan, sorted (8 bytes each; ``is_dup``)
    dup_ids: "array" = field(default_factory=lambda: array("Q"))
    #: those whose blob is in the vault now as a plain file of one name: a compressed vault's
    #: compaction of this reduce's backups compresses it too (an earlier hard-link vault's)
    plain_ids: "array" = field(default_factory=lambda: array("Q"))
    files: int = 0
    bytes: int = 0
    in_plan_files: int = 0
    in_vault_files: int = 0
    hashed_files: int = 0
    hashed_bytes: int = 0
    #: of ``hashed_files``, those whose digest an earlier plan stored (``scan.digests``: not read again)
    cached_files: int = 0
    #: originals of a colliding size that could not be read (counted as any other)
    unreadable: int = 0
    #: the originals' ``disk_before`` freed now by a hard-link vault on the logdir's disk: those
    #: whose blob is adopted as it stands (no copy made)
    adopted_bytes: int = 0

    def is_dup(self, a) -> bool:
        """Whether the plan's ``Action`` ``a`` is one of these originals."""
        return _among(self.dup_ids, id(a))

    def is_plain_in_vault(self, a) -> bool:
        """Whether ``a``'s blob is in the vault now, plain (``plain_ids``)."""
        return _among(self.plain_ids, id(a))

    def to_dict(self) -> dict:
        """The plan's ``content_dups``: what rests on hashing, and which figures it changed."""
        return {"files": self.files, "bytes": self.bytes, "in_plan_files": self.in_plan_files,
                "in_vault_files": self.in_vault_files, "hashed_files": self.hashed_files,
                "hashed_bytes": self.hashed_bytes, "cached_files": self.cached_files,
                "unreadable_files": self.unreadable,
                "figures": ["freed_now_bytes", "freed_on_disk_after_purge_bytes"] if self.files else []}


def _among(ids: "array", n: int) -> bool:
    """Whether ``n`` is in the sorted ``ids``."""
    i = bisect.bisect_left(ids, n)
    return i < len(ids) and ids[i] == n


def _held_form(vault: Vault, sha: str) -> Optional[str]:
    """How the vault holds ``sha`` now, as a backup of those bytes would find it: ``"plain"``
    (one name: adopted), ``"copy"`` (a ``.zst``, packed, or a plain blob with other names: a copy
    of its own is made), None (absent). Two ``lstat`` and the pack index's look-up."""
    try:
        st = os.lstat(vault.blob_path(sha))
        if stat.S_ISREG(st.st_mode):
            return "plain" if st.st_nlink <= 1 else "copy"
    except OSError:
        pass
    try:
        if stat.S_ISREG(os.lstat(vault.zst_path(sha)).st_mode):
            return "copy"
    except OSError:
        pass
    return "copy" if remote_vault.packed_ref(vault.root, sha) is not None else None


def _sha256_of(path: str, digests: Optional[DigestCache] = None, run: str = "",
               rel: str = "") -> Tuple[Optional[str], bool]:
    """``(digest, from the cache)``: the streamed sha256 of a regular file (a ``CHUNK`` at a
    time), ``""`` for anything else (a symlink is never followed: it has no blob of a file's
    bytes), None when it cannot be read. With ``digests``, one stored for the opened file as it
    stands (``scan.digests.file_key``) is served without reading it, and one read whole while the
    file stood still is stored (files of ``scan.digests.MIN_FILE_BYTES`` or more)."""
    try:
        with open_regular(path) as f:
            st = os.fstat(f.fileno())
            if st.st_size < MIN_FILE_BYTES:
                digests = None  # read again next time: as cheap as a look-up
            key = file_key(run, rel, st) if digests is not None else b""
            known = digests.get(key) if digests is not None else None
            if known:
                return known, True
            h = hashlib.sha256()
            for b in iter(lambda: f.read(CHUNK), b""):
                h.update(b)
            if digests is not None and file_key(run, rel, os.fstat(f.fileno())) == key:
                digests.put(key, h.hexdigest())
            return h.hexdigest(), False
    except NotRegularFile:
        return "", False
    except OSError:
        return None, False


def _count_in(sizes: "array", n: int) -> int:
    """How many of the sorted ``sizes`` are ``n``."""
    return bisect.bisect_right(sizes, n) - bisect.bisect_left(sizes, n)


def content_dups(logdir: str, vault_root: str, p: Plan, cut: Optional[LinkedCut] = None,
                 digests: Optional[DigestCache] = None) -> ContentDups:
    """``ContentDups`` of plan ``p``'s runs (not skipped) backing up into the vault at
    ``vault_root``. Bounded: the planned originals' sizes as one sorted array (8 bytes each, below
    what the plan holds of them), the vault's blobs streamed once (``vault.blob_sizes``: their
    sizes only tested against it, nothing kept but the planned sizes some blob has), and only an
    original whose size collides is hashed (streamed), 8 bytes of its digest kept while the plan
    is looked at (a set of ints: ~60 bytes a distinct content hashed), and each duplicate as its
    action's ``id`` (8 bytes). The first original of a digest in plan order is the one backed
    up; the reduce may take them in another order (``--jobs``), which changes which one, not the
    figures. Twins
    (``linked_cut``: another name of an inode this plan removes) are left out: backed up once."""
    cut = cut or linked_cut(logdir, p)
    out = ContentDups()

    def originals():
        for rp in p.runs:
            if rp.skipped:
                continue
            for a in rp.actions:
                if a.kind in BACKED_UP and a.bytes_before > 0 and not (cut.twins and (rp.run, a.path) in cut.twins):
                    yield rp.run, a

    sizes = array("q", sorted(a.bytes_before for _r, a in originals()))
    if not sizes:
        return out
    in_vault: Set[int] = set()
    for _sha, n, _form in blob_sizes(vault_root):
        if _count_in(sizes, n):
            in_vault.add(n)
    vault = Vault(vault_root)
    seen: Set[int] = set()
    dups, plain = array("Q"), array("Q")
    for run, a in originals():
        n = a.bytes_before
        if n not in in_vault and _count_in(sizes, n) < 2:
            continue  # no other original and no blob of its size: its bytes are its own
        sha, cached = _sha256_of(os.path.join(logdir, a.path), digests, run, a.path)
        if not sha:
            out.unreadable += sha is None
            continue
        out.hashed_files += 1
        out.hashed_bytes += n
        out.cached_files += cached
        key = int(sha[:16], 16)  # 64 bits of the digest: two contents sharing them, ~2**-64 a pair
        if key in seen:
            held = "plan"
            out.in_plan_files += 1
        else:
            seen.add(key)
            held = _held_form(vault, sha) if n in in_vault else None
            if held is None:
                continue  # the first of its bytes: backed up as any
            out.in_vault_files += 1
            if held == "plain":
                plain.append(id(a))
        dups.append(id(a))
        out.files += 1
        out.bytes += a.disk_before
        if held != "copy":
            out.adopted_bytes += a.disk_before
    out.dup_ids, out.plain_ids = array("Q", sorted(dups)), array("Q", sorted(plain))
    return out


def plan_dups(logdir: str, vault_root: str, p: Plan, cut: Optional[LinkedCut] = None) -> ContentDups:
    """``content_dups`` once per plan and vault: the plan's note and the dry run's figures ask
    for it both, and the files it hashes are not hashed twice. Kept on the plan (not in its JSON)
    while its runs left to do stay the same; sets the plan's ``content_dups``."""
    key = (os.path.abspath(vault_root), tuple(rp.run for rp in p.runs if not rp.skipped))
    memo = p.__dict__.get("_dups_memo")
    if memo is not None and memo[0] == key:
        return memo[1]
    digests = DigestCache(cache_dir(logdir))
    dd = content_dups(logdir, vault_root, p, cut, digests)
    digests.save()  # one not saved (no space, a folder not ours) is only a slower next plan
    p.__dict__["_dups_memo"] = (key, dd)
    p.content_dups = dd.to_dict() if dd.hashed_files or dd.unreadable else None
    return dd


def freed_estimate(logdir: str, backup_dir: Optional[str], p: Plan,
                   vault_format: str = DEFAULT_VAULT_FORMAT, cut: Optional[LinkedCut] = None) -> Tuple[int, int, bool]:
    """``(freed now, freed after purge, vault on the logdir's disk)`` of plan ``p`` with the
    chosen vault. Hard-link vault: on the logdir's disk nothing is freed until purge; on another
    disk the copies are there, so the logdir's disk gains it all now and purge frees the copies.
    Compressed vault: the backups keep about their compressed size (``usage.estimate_compressed``,
    sampled), the rest is freed now; purge frees that size.

    Originals with other hard links (``linked_cut``): one another name keeps frees nothing now,
    and its backup is a copy (on the logdir's disk: whole in the hard-link vault, compressed in
    the other), so "freed now" is its size less (it may be below zero: the reduce then costs
    disk until purge), while purge frees its copy as any backup; a twin frees nothing and has no
    backup of its own. Counted per name at what it holds on disk (``Action.disk_before``: a
    sparse file's allocated blocks, its holes free nothing), as ``du`` counts blocks: the
    reduce's measured "freed now" (``usage.DiskUsage.freeable_on_logdir_disk``) agrees. ``cut``:
    ``linked_cut(logdir, p)`` when the caller has it already.

    Originals whose bytes the vault will hold already (``plan_dups``: an earlier original of the
    plan, or a blob there now) get no backup of their own: the compressed vault's estimate leaves
    them out; a hard-link vault frees them now (unless it must copy beside a ``.zst`` or packed
    blob) and its purge frees nothing of them (reviews R14 F9, R15 F6)."""
    cut = cut or linked_cut(logdir, p)
    removable = p.disk_removable_bytes  # twins left out (``linked_cut`` set them)
    vault = os.path.abspath(backup_dir) if backup_dir else state_dir(logdir)
    same = not usage.on_another_disk(logdir, vault)
    dd = plan_dups(logdir, vault, p, cut)
    if vault_format != "compressed":
        if not same:
            return removable - cut.bytes, removable - dd.bytes, same
        # every original stays (a hard link in the vault) and what the reduce writes takes its
        # own blocks until purge frees the originals: that is the cost now, purge frees the rest;
        # an original the vault holds already goes now (its blob is another's), or is a copy
        written = sum(a.bytes_after for rp in p.runs if not rp.skipped for a in rp.actions
                      if a.kind in ("compress", "rewrite"))
        return (-cut.bytes - written + dd.adopted_bytes, removable + written - dd.bytes, same)
    # one at a time: a list of them all was ~375 bytes a run at the plan's peak (issue 28)
    originals = ((os.path.join(logdir, a.path), a.bytes_before) for rp in p.runs if not rp.skipped
                 for a in rp.actions if a.kind in BACKED_UP
                 and not (cut.twins and (rp.run, a.path) in cut.twins) and not dd.is_dup(a))
    kept = usage.estimate_compressed(originals)
    if dd.plain_ids and same:
        # a plain blob this reduce adopts is compacted with its backups (``Vault.compact_all``):
        # what that saves is freed now too (nothing when it stays plain: it does not compress)
        plain = [0]

        def adopted():
            for rp in p.runs:
                for a in () if rp.skipped else rp.actions:
                    if dd.is_plain_in_vault(a):
                        plain[0] += a.bytes_before
                        yield os.path.join(logdir, a.path), a.bytes_before

        stays = usage.estimate_compressed(adopted())
        removable += plain[0] - stays
    if not cut.files and not cut.twin_files:
        # below zero when what the reduce writes takes more disk than the originals held (a
        # sparse trace gzipped: its holes freed nothing, its .gz is data): a cost until purge
        return (removable - kept if same else removable), kept, same
    now = (removable - kept if same else removable) - cut.bytes
    return now, kept, same


def offload_freed(logdir: str, p: Plan, cut: Optional[LinkedCut] = None) -> Tuple[int, int]:
    """``(freed now, freed after purge)`` with a remote vault: the backups leave the local disk
    at once, so all of it now but what other hard links keep (``linked_cut``), nothing at purge."""
    cut = cut or linked_cut(logdir, p)
    return p.disk_removable_bytes - cut.bytes, 0  # twins left out (``linked_cut`` set them)


def note_links(logdir: str, p: Plan, cut: Optional[LinkedCut] = None) -> List[str]:
    """Sets each run's ``linked_files`` / ``linked_bytes`` and the plan's ``hard_links`` from
    ``linked_cut``, and returns the plan's note of them (code ``hard_linked_elsewhere``), or
    nothing when no original has other hard links."""
    cut = cut or linked_cut(logdir, p)
    for rp in p.runs:
        rp.linked_files, rp.linked_bytes = cut.runs.get(rp.run, (0, 0))
    if not cut.files and not cut.twin_files:
        p.hard_links = None
        return []
    p.hard_links = {"code": Finding.HARD_LINKED.value, "files": cut.files, "bytes": cut.bytes,
                    "twin_files": cut.twin_files, "twin_bytes": cut.twin_bytes}
    out = []
    if cut.files:
        out.append(f"{Finding.HARD_LINKED}: {cut.files} file(s) to be changed ({human_bytes(cut.bytes)}) have other "
                   "hard links (a `cp -al` or `rsync --link-dest` snapshot?): removing them from the logdir frees "
                   "nothing while those names stand, and their backups are copies, not links; \"freed now\" "
                   "leaves them out")
    if cut.twin_files:
        out.append(f"{Finding.HARD_LINKED}: {cut.twin_files} file(s) to be changed ({human_bytes(cut.twin_bytes)}) "
                   "are hard links of other files this plan changes too: each such file is freed and backed up "
                   "once, counted once")
    return out


def offload_note(p: Plan, remote: str, logdir: Optional[str] = None, cut: Optional[LinkedCut] = None) -> str:
    """What a plan says when the backups go to a remote vault (``engine.offload``); ``logdir``:
    where its originals are, to leave out what other hard links keep (``offload_freed``)."""
    now = offload_freed(logdir, p, cut)[0] if logdir else p.disk_removable_bytes
    return (f"freed now: ~{human_bytes(now)} on disk (logdir + local state): each run's backups go to "
            f"the remote vault {remote} once it commits (read back and verified there before the local copy "
            "is unlinked); restore streams them back from it; `tb-footprint purge` deletes them there")


def vault_note(logdir: str, backup_dir: Optional[str], p: Plan, vault_format: str = DEFAULT_VAULT_FORMAT,
               cut: Optional[LinkedCut] = None) -> str:
    """What a plan says of its local vault: what is freed now and what only after purge."""
    now, later, same = freed_estimate(logdir, backup_dir, p, vault_format, cut)
    p.vault_elsewhere = not same  # the reduce's summary says its measured "freed now" with the same words
    linked = (p.hard_links or {}).get("bytes", 0)
    if linked:  # originals other hard links keep: said with the figure (``note_links`` says why)
        where = "on disk (logdir + vault)" if same else "on the logdir's disk (the vault is on another disk)"
        cost = " (a cost until purge)" if now < 0 else ""
        return (f"freed now: ~{human_bytes(now)} {where}{cost}: {human_bytes(linked)} of the originals stay on disk "
                f"through their other hard links ({Finding.HARD_LINKED}) and their backups are copies; "
                f"~{human_bytes(later)} more after `tb-footprint purge`")
    if vault_format == "compressed":
        where = ("on disk (logdir + vault)" if same else "on the logdir's disk (the vault is on another disk)")
        if now < 0:
            where += " (a cost until purge)"
        return (f"freed now: ~{human_bytes(now)} {where}: each run's backups are compressed in the vault "
                f"once it commits (a file that does not compress stays as it is); ~{human_bytes(later)} more "
                "after `tb-footprint purge` (--vault-format hardlink keeps them as hard links, freed only by purge)")
    if same:
        cost = " (a cost until purge: what the reduce writes)" if now < 0 else ""
        return (f"freed now: ~{human_bytes(now)} on disk (logdir + vault){cost}: the backups are hard links in the vault "
                f"on the same disk; {human_bytes(later)} more after `tb-footprint purge` "
                "(or put the vault on another disk with --backup-dir)")
    return (f"freed now: {human_bytes(now)} on the logdir's disk: the backups are copies in the vault on another "
            f"disk; {human_bytes(later)} more there after `tb-footprint purge`")


def local_notes(logdir: str, backup_dir: Optional[str], p: Plan, vault_format: str,
                remote: Optional[str]) -> List[str]:
    """A local plan's notes of where its bytes go: the vault's (``vault_note``, or ``offload_note``
    with a ``remote`` vault) and, when originals have other hard links, ``note_links``' (made
    first: it sets the runs' ``linked_*`` and the plan's ``hard_links`` the vault's note uses)."""
    cut = linked_cut(logdir, p)  # one look at the originals for both notes
    links = note_links(logdir, p, cut)
    if remote:
        return [offload_note(p, remote, logdir, cut)] + links
    out = [vault_note(logdir, backup_dir, p, vault_format, cut)] + links
    dd = plan_dups(logdir, os.path.abspath(backup_dir) if backup_dir else state_dir(logdir), p, cut)  # vault_note's
    if dd.files:
        out.append(f"{dd.files} file(s) to be backed up ({human_bytes(dd.bytes)}) hold bytes the vault will have "
                   f"already ({dd.in_plan_files} the same as an earlier file of this plan, {dd.in_vault_files} "
                   "backed up before): stored once, so they cost the vault nothing and purge frees nothing of "
                   f"them (found by hashing the {dd.hashed_files} file(s) whose size another shares)")
    return out


def plan_rewrites(logdir: str):
    """The event-file rewrite's own selection, made at plan time (``plan.content``) and cached
    for the reduce that follows, its outcome kept across plans of unchanged runs
    (``transforms.plan_cache``); a run it cannot analyse now (changed meanwhile) is estimated.
    Its ``trace_after`` measures the PyTorch traces' gzip and slim the same way."""
    from tb_footprint_plugin.transforms.plan_cache import PlanRewrites

    return PlanRewrites(logdir)


def bucket_traces(url: str):
    """A bucket plan's ``trace_after``: its PyTorch traces' gzip and slim measured by ranged reads,
    cached per object (``transforms.plan_cache.BucketTraces``), as a local plan measures them."""
    from tb_footprint_plugin.transforms.plan_cache import BucketTraces

    return BucketTraces(url)


def bucket_cost(p: Plan, fp: LogdirFootprint, freed: dict, measured=None, blob_vault: bool = False) -> None:
    """The request cost of a bucket plan and when its bytes are really freed on this bucket
    (``freed``: the bucket's retention report); ``measured``: the requests the plan's own trace
    measures issued, counted with its scan's; ``blob_vault``: the backups go to a local folder
    of blobs (``--backup-dir``), downloaded rather than copied server-side."""
    from tb_footprint_plugin.plan.cost import request_cost
    from tb_footprint_plugin.storage.remote import protocol_of

    p.cost = request_cost(p, fp, protocol_of(fp.logdir), blob_vault=blob_vault)
    if measured is not None:  # the plan read the traces it measures: that is this plan's cost too
        scanned = p.cost["scan"]
        for k, v in measured.to_dict().items():
            scanned[k] = scanned.get(k, 0) + v
    p.cost["freed"] = freed
    p.notes = [n for n in p.notes if n != LOCAL_VAULT_NOTE] + p.cost["freed"]["lines"]


__all__ = ["BACKED_UP", "bucket_cost", "bucket_traces", "content_dups", "ContentDups", "freed_estimate",
           "linked_cut", "LinkedCut", "local_notes", "note_links", "offload_freed", "offload_note", "plan_dups",
           "plan_rewrites", "vault_note"]
