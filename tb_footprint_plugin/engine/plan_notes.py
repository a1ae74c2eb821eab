"""What a plan says of where its bytes go, per engine: the local vault's "freed now / after purge"
(``freed_estimate``, ``vault_note``, ``offload_note``), a bucket plan's request cost, and the
measures a plan takes of what a rewrite would leave (``plan_rewrites`` on a disk,
``bucket_traces`` on a bucket). ``LocalEngine.note_plan`` / ``BucketEngine.note_plan`` use them.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

from tb_footprint_plugin.engine import usage
from tb_footprint_plugin.engine.vault import DEFAULT_VAULT_FORMAT
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.plan.planner import LOCAL_VAULT_NOTE
from tb_footprint_plugin.scan.model import LogdirFootprint
from tb_footprint_plugin.storage.paths import state_dir


def freed_estimate(logdir: str, backup_dir: Optional[str], p: Plan,
                   vault_format: str = DEFAULT_VAULT_FORMAT) -> Tuple[int, int, bool]:
    """``(freed now, freed after purge, vault on the logdir's disk)`` of plan ``p`` with the
    chosen vault. Hard-link vault: on the logdir's disk nothing is freed until purge; on another
    disk the copies are there, so the logdir's disk gains it all now and purge frees the copies.
    Compressed vault: the backups keep about their compressed size (``usage.estimate_compressed``,
    sampled), the rest is freed now; purge frees that size."""
    removable = p.removable_bytes
    vault = os.path.abspath(backup_dir) if backup_dir else state_dir(logdir)
    same = usage.device_of(vault) == usage.device_of(logdir)
    if vault_format != "compressed":
        return (0 if same else removable), removable, same
    # one at a time: a list of them all was ~375 bytes a run at the plan's peak (issue 28)
    originals = ((os.path.join(logdir, a.path), a.bytes_before) for rp in p.runs if not rp.skipped
                 for a in rp.actions if a.kind in ("delete", "compress", "rewrite"))
    kept = usage.estimate_compressed(originals)
    return (max(0, removable - kept) if same else removable), kept, same


def offload_note(p: Plan, remote: str) -> str:
    """What a plan says when the backups go to a remote vault (``engine.offload``)."""
    return (f"freed now: ~{human_bytes(p.removable_bytes)} on disk (logdir + local state): each run's backups go to "
            f"the remote vault {remote} once it commits (read back and verified there before the local copy "
            "is unlinked); restore streams them back from it; `tb-footprint purge` deletes them there")


def vault_note(logdir: str, backup_dir: Optional[str], p: Plan, vault_format: str = DEFAULT_VAULT_FORMAT) -> str:
    """What a plan says of its local vault: what is freed now and what only after purge."""
    now, later, same = freed_estimate(logdir, backup_dir, p, vault_format)
    if vault_format == "compressed":
        where = ("on disk (logdir + vault)" if same else "on the logdir's disk (the vault is on another disk)")
        return (f"freed now: ~{human_bytes(now)} {where}: each run's backups are compressed in the vault "
                f"once it commits (a file that does not compress stays as it is); ~{human_bytes(later)} more "
                "after `tb-footprint purge` (--vault-format hardlink keeps them as hard links, freed only by purge)")
    if same:
        return (f"freed now: ~{human_bytes(now)} on disk (logdir + vault): the backups are hard links in the vault "
                f"on the same disk; {human_bytes(later)} more after `tb-footprint purge` "
                "(or put the vault on another disk with --backup-dir)")
    return (f"freed now: {human_bytes(now)} on the logdir's disk: the backups are copies in the vault on another "
            f"disk; {human_bytes(later)} more there after `tb-footprint purge`")


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


def bucket_cost(p: Plan, fp: LogdirFootprint, freed: dict, measured=None) -> None:
    """The request cost of a bucket plan and when its bytes are really freed on this bucket
    (``freed``: the bucket's retention report); ``measured``: the requests the plan's own trace
    measures issued, counted with its scan's."""
    from tb_footprint_plugin.plan.cost import request_cost
    from tb_footprint_plugin.storage.remote import protocol_of

    p.cost = request_cost(p, fp, protocol_of(fp.logdir))
    if measured is not None:  # the plan read the traces it measures: that is this plan's cost too
        scanned = p.cost["scan"]
        for k, v in measured.to_dict().items():
            scanned[k] = scanned.get(k, 0) + v
    p.cost["freed"] = freed
    p.notes = [n for n in p.notes if n != LOCAL_VAULT_NOTE] + p.cost["freed"]["lines"]


__all__ = ["bucket_cost", "bucket_traces", "freed_estimate", "offload_note", "plan_rewrites", "vault_note"]
