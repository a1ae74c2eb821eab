"""What a plan says of where its bytes go, per engine: the local vault's "freed now / after purge"
(``freed_estimate``, ``vault_note``, ``offload_note``), a bucket plan's request cost, and the
measures a plan takes of what a rewrite would leave (``plan_rewrites`` on a disk,
``bucket_traces`` on a bucket). ``LocalEngine.note_plan`` / ``BucketEngine.note_plan`` use them.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import usage
from tb_footprint_plugin.engine.vault import DEFAULT_VAULT_FORMAT
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.planner import LOCAL_VAULT_NOTE
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.storage.paths import state_dir


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
    freeing less). Memory: the linked originals only."""
    cut = LinkedCut()
    groups: Dict[Tuple[int, int], Tuple[int, List[Tuple[str, object]]]] = {}
    kept: List[Tuple[str, object]] = []
    now = time.time()
    for rp in p.runs:
        if rp.skipped:
            continue
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
            names.append((rp.run, a))
    for nlink, names in groups.values():
        if len(names) >= nlink:  # every name goes: the last one frees the inode
            for run, a in names[:-1]:
                cut.twin_files += 1
                cut.twin_bytes += a.disk_before
                cut.twins.add((run, a.path))
        else:
            kept.extend(names)
    for run, a in kept:
        n, b = cut.runs.get(run, (0, 0))
        cut.runs[run] = (n + 1, b + a.disk_before)
        cut.files += 1
        cut.bytes += a.disk_before
    return cut


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
    ``linked_cut(logdir, p)`` when the caller has it already."""
    removable = p.disk_removable_bytes
    vault = os.path.abspath(backup_dir) if backup_dir else state_dir(logdir)
    same = usage.device_of(vault) == usage.device_of(logdir)
    cut = cut or linked_cut(logdir, p)
    if vault_format != "compressed":
        if not same:
            return removable - cut.bytes - cut.twin_bytes, removable - cut.twin_bytes, same
        # every original stays (a hard link in the vault) and what the reduce writes takes its
        # own blocks until purge frees the originals: that is the cost now, purge frees the rest
        written = sum(a.bytes_after for rp in p.runs if not rp.skipped for a in rp.actions
                      if a.kind in ("compress", "rewrite"))
        return -cut.bytes - written, removable - cut.twin_bytes + written, same
    # one at a time: a list of them all was ~375 bytes a run at the plan's peak (issue 28)
    originals = ((os.path.join(logdir, a.path), a.bytes_before) for rp in p.runs if not rp.skipped
                 for a in rp.actions if a.kind in ("delete", "compress", "rewrite")
                 and not (cut.twins and (rp.run, a.path) in cut.twins))
    kept = usage.estimate_compressed(originals)
    if not cut.files and not cut.twin_files:
        # below zero when what the reduce writes takes more disk than the originals held (a
        # sparse trace gzipped: its holes freed nothing, its .gz is data): a cost until purge
        return (removable - kept if same else removable), kept, same
    now = (removable - kept if same else removable) - cut.bytes - cut.twin_bytes
    return now, kept, same


def offload_freed(logdir: str, p: Plan, cut: Optional[LinkedCut] = None) -> Tuple[int, int]:
    """``(freed now, freed after purge)`` with a remote vault: the backups leave the local disk
    at once, so all of it now but what other hard links keep (``linked_cut``), nothing at purge."""
    cut = cut or linked_cut(logdir, p)
    return p.disk_removable_bytes - cut.bytes - cut.twin_bytes, 0


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
    return [offload_note(p, remote, logdir, cut) if remote else vault_note(logdir, backup_dir, p, vault_format, cut)
            ] + links


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


__all__ = ["LinkedCut", "bucket_cost", "bucket_traces", "freed_estimate", "linked_cut", "local_notes", "note_links",
           "offload_freed", "offload_note", "plan_rewrites", "vault_note"]
