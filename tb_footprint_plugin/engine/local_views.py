"""What a local logdir's state says, read-only, as ``status``, the tab's disk numbers and ``history``
show it (``LocalEngine.status`` / ``disk_numbers`` / ``history``): the operations and their
vaults, the batch ledgers merged, damage, the disk in use and what purge frees.
"""
from __future__ import annotations

import math
import os
from typing import List, Optional, Tuple

from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import health, lease, remote_vault, trust, usage
from tb_footprint_plugin.engine.catalogue import (known_vaults, own_manifests, own_manifests_of, read_vaults,
                                                  vault_problems)
from tb_footprint_plugin.engine.context import Context, TransactionError
from tb_footprint_plugin.engine.history import read_history_page
from tb_footprint_plugin.engine.journal import pending_journals
from tb_footprint_plugin.engine.ledger import Ledger, ledger_path, ledger_paths, merged, with_restores
from tb_footprint_plugin.engine.purge import freeable_bytes
from tb_footprint_plugin.engine.restore import kept_blobs
from tb_footprint_plugin.engine.retire_rules import is_restorable_retirement
from tb_footprint_plugin.engine.retire_tree import OP_ID_RE, check_retired_dir, retired_dir, tree_size
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.engine.vault_packs import store_rows, unlisted_words
from tb_footprint_plugin.engine.vault_reads import VaultRead
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.paths import state_dir


def disk_in_use(ctx: Context) -> "usage.DiskUsage":
    """Disk in use by the logdir and every vault of it, now (``engine.usage.disk_usage``)."""
    return usage.disk_usage(ctx.logdir, known_vaults(ctx))


def disk_in_use_after_scan(ctx: Context, walked) -> "usage.DiskUsage":
    """``disk_in_use`` from a scan's walk of the logdir (``walked``: its footprint's ``DiskTally``)
    and a walk of what that scan set aside and of the vaults outside the logdir only
    (``engine.usage.disk_usage_after_scan``): a plan's scan is not followed by a second walk of
    every file of the logdir."""
    return usage.disk_usage_after_scan(ctx.logdir, known_vaults(ctx), walked)


def freed_after_purge(ctx: Context, op_ids: List[str], reads: Optional[List[VaultRead]] = None) -> int:
    """What purging these operations' backups would free, counted by purge's own rule (from the
    command's one read of the manifests, ``reads``, when given)."""
    if not op_ids:
        return 0
    try:
        return freeable_bytes(ctx, op_ids, reads)
    except OSError:
        return 0


def status_view(ctx: Context, found: dict, reads: Optional[List[VaultRead]] = None) -> dict:
    """``api.status`` of a local logdir; ``found``: what ``LocalEngine.unfinished`` found (from
    ``reads``, the command's one read of the manifests every pass here shares)."""
    pending = [j.op_id for j in pending_journals(ctx.journal_dir)]
    ops = []
    vaults = known_vaults(ctx)
    vault_bytes = sum(Vault(root).size() for root in vaults)
    reads = read_vaults(ctx) if reads is None else reads
    manifests = own_manifests(ctx, reads)
    for m in manifests:
        ops.append({k: m.get(k) for k in ("op_id", "kind", "run", "outcome", "reason", "bytes_before",
                                          "bytes_after", "finished_at", "backup_purged", "restored_by",
                                          "rebuilt")})
        ops[-1]["salvaged"] = len(m.get("salvaged", []))
    lp = ledger_path(ctx.state)
    led = Ledger(lp, "", ctx.logdir).summary() if os.path.exists(lp) else None
    paths = ledger_paths(ctx.state)
    problems = [p.to_dict() for p in vault_problems(ctx, reads)]
    try:
        trust.bind(ctx.logdir, ctx.state, adopt=False)
    except trust.Untrusted as e:
        if e.code != trust.IDENTITY_DAMAGED:  # a damaged one is among ``unfinished``'s problems
            problems.insert(0, e.to_dict())
    freed_now, kept_ops = _freed_now(ctx, manifests, vaults)
    retired = retired_after_purge(manifests, vaults)
    remote = usage.remote_usage(vaults)
    # backups offloaded to a remote vault that no index object there lists any more (one lost or
    # removed): named, as a disk's packs name theirs (``vault_packs.unlisted_words``), with the verb
    # that finds them again; no delete there takes their packs meanwhile (``offload.listed_again``)
    problems += [{"code": Finding.DAMAGED_FILE, "op_id": None, "run": None, "bytes": 0, "path": u["url"],
                  "detail": f"{u['url']}: {unlisted_words(u['sha256'])}; `tb-footprint recover` looks for them in "
                            "its packs (each slice hashed) and lists them anew"}
                 for u in (remote or {}).get("unlisted", [])]
    problems += kept_unlisted_rows(vaults, remote)
    return {"logdir": ctx.logdir, "state_dir": ctx.state, "vaults": vaults,
            "vault_bytes": vault_bytes,
            # the same numbers a reduce reports: disk in use now (logdir + vaults, as ``du``
            # counts it) and what purging every kept backup would free (purge's own count)
            "disk_in_use_bytes": disk_in_use(ctx).total_bytes, "freed_now_bytes": freed_now,
            "vault_elsewhere": vault_elsewhere(ctx, vaults),
            "freed_after_purge_bytes": freed_after_purge(ctx, kept_ops, reads) + retired,
            # backups offloaded to a bucket: what it stores, apart from the local disk (None: no remote vault)
            "remote_vault": remote,
            "unfinished_operations": pending, "operations": ops,
            "ledger": led, "batch": with_restores(merged(paths, ctx.logdir), ops) if paths else None,
            "unfinished": found["unfinished_operations"],
            "problems": problems + found["problems"],
            "settle_command": found["settle_command"], "late_writes": health.late_writes(manifests),
            # bytes a restore or rollback found in a file's place, kept in the vault: what each
            # holds and how to bring it back (``engine.restore.kept_blobs``)
            "kept_blobs": kept_blobs(ctx, manifests),
            # runs another live process is changing now, from their leases (``lease.live_leases``)
            "locked_runs": lease.live_leases(ctx.lock_dir, ctx.journal_dir)}


def kept_unlisted_rows(vaults: List[str], remote: Optional[dict]) -> List[dict]:
    """``status``'s findings of what each blob store keeps that no command frees
    (``vault_packs.store_rows``, issue #26): the data objects no index row lists that every sweep
    keeps, the packs still listed in part that no forget deletes (held, or with bytes nothing
    accounts for) and the pending notes that do not read — in each vault's packs (listings of the
    local ``packs/``) and in each remote vault that answered ``usage.remote_usage`` (a listing of
    its ``data/``, ``held/`` and ``pending/``, a request per 1,000 objects each; its index as that
    look read it). A store that does not list here is named by the problems that read it
    (``pack_problems``, ``errors``)."""
    out: List[dict] = []
    looks = "`tb-footprint recover` (every start looks too)"
    for root in vaults:
        try:
            bs = remote_vault.pack_store(root)
            if bs is None:
                continue
            bs.reload()  # only index objects this process has not read yet are read
            out += store_rows(bs, remote_vault.packs_root(root), looks)
        except (BlobFailure, OSError):
            continue
    failed = {e.get("url") for e in (remote or {}).get("errors", [])}
    for url in (remote or {}).get("urls", []):
        if url in failed:
            continue
        try:
            out += store_rows(remote_vault.blobstore(url), url, "`tb-footprint recover`")  # as ``remote_stats`` listed it
        except (BlobFailure, OSError):
            continue
    return out


def disk_numbers_view(ctx: Context) -> dict:
    """The tab's header numbers of a local logdir; ``freed_now_bytes``: what the verified
    reductions not restored freed on disk as things stand (``usage.freed_by_op``)."""
    vaults = known_vaults(ctx)
    reads = read_vaults(ctx, slim=True)  # one read for both counts, without the verifications
    manifests = own_manifests(ctx, reads)
    freed_now, kept_ops = _freed_now(ctx, manifests, vaults)
    remote = usage.remote_usage(vaults)
    return {"disk_in_use_bytes": disk_in_use(ctx).total_bytes, "freed_now_bytes": freed_now,
            "vault_elsewhere": vault_elsewhere(ctx, vaults),
            "freed_after_purge_bytes": freed_after_purge(ctx, kept_ops, reads)
            + retired_after_purge(manifests, vaults),
            "remote_vault_bytes": remote["remote_vault_bytes"] if remote else None}


def vault_elsewhere(ctx: Context, vaults: List[str]) -> bool:
    """Whether a vault of the logdir is on another disk than the logdir: ``freed_now_bytes`` is
    then the logdir's disk's alone (``usage.freed_by_op`` counts blocks on the logdir's device)."""
    return any(usage.on_another_disk(ctx.logdir, v) for v in vaults)


def _freed_now(ctx: Context, manifests: List[dict], vaults: List[str]) -> Tuple[int, List[str]]:
    """What the verified reductions not restored freed on disk as things stand
    (``usage.freed_by_op``), and the operations whose backups are kept (what a purge would free):
    one rule for status and the tab's numbers. A blob several of them share holds its blocks once:
    subtracted once (``freed_by_op``'s ``counted``)."""
    device = usage.device_of(ctx.logdir)
    freed_now, kept_ops = 0, []
    counted: set = set()
    for m in manifests:  # untrusted: a malformed count counts as nothing
        if m.get("kind") != "reduce" or m.get("outcome") != Outcome.VERIFIED or m.get("restored_by"):
            continue
        try:
            removed = max(0, int(m.get("bytes_before") or 0) - int(m.get("bytes_after") or 0))
        except (TypeError, ValueError):
            removed = 0
        freed_now += usage.freed_by_op(m, vaults, device, removed, counted)[0]
        if not m.get("backup_purged"):
            kept_ops.append(m.get("op_id"))
    return freed_now, kept_ops


def retired_after_purge(manifests: List[dict], vaults: List[str]) -> int:
    """What purging the retired runs still in the vault frees: each retirement neither restored
    nor purged whose folder is the vault's own, its files' bytes as purge sizes them
    (``retire_tree.tree_size``; review R17 F11: ``purge -n`` frees them)."""
    total = 0
    for m in manifests:  # untrusted: an op id of another form names no folder
        root, op_id = m.get("vault"), m.get("op_id")
        if not is_restorable_retirement(m) or root not in vaults or not isinstance(op_id, str) \
                or not OP_ID_RE.fullmatch(op_id):
            continue
        vault = Vault(root)
        try:
            check_retired_dir(vault, op_id)  # never walked through a link or a stranger's folder
        except TransactionError:
            continue
        total += tree_size(retired_dir(vault, op_id))
    return total


def _op_of(entry: dict) -> Optional[str]:
    """An entry's op_id where it is a string (lines are untrusted: a list is no key)."""
    op = entry.get("op_id")
    return op if isinstance(op, str) else None


def _count(v) -> int:
    """A line's byte count where it is a number (lines are untrusted), else 0."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0


def history_view(logdir: str, context, newest: Optional[int] = None) -> Tuple[List[dict], int]:
    """``api.history_page`` of a local logdir, from the change log of its state folder: its
    entries (all, or the newest ``newest``, read a block at a time: ``ChangeLog.newest``) and how
    many there are in all. Only the entries returned are given their backup state and figures.
    ``context()`` gives the logdir's context or raises its refusal (``OSError``, ``ValueError``):
    then the entries come without the backups' state (``backup``: ``unknown``)."""
    entries, total = read_history_page(state_dir(logdir), newest)
    try:
        ctx = context()
        # only the manifests of the entries shown are read (an op id from a line names no file
        # unless it is of the op-id format: ``own_manifests_of``); their kept blobs are looked for
        manifests = {m.get("op_id"): m for m in own_manifests_of(ctx, {_op_of(e) for e in entries})}
        kept = kept_blobs(ctx, list(manifests.values()))
        vaults, device = known_vaults(ctx), usage.device_of(ctx.logdir)
    except (OSError, ValueError):
        manifests, kept, vaults, device = {}, [], [], None
    for e in entries:
        if e.get("kind") in ("restore", "reduce"):  # blobs kept in a file's place, as they are now
            mine = [k for k in kept if k["op_id"] == e.get("op_id")]
            if mine:
                e["kept_blobs"] = mine
        if e.get("kind") != "reduce":
            continue
        m = manifests.get(_op_of(e))
        if e.get("outcome") == Outcome.VERIFIED:
            e["removed_from_logdir_bytes"] = max(0, _count(e.get("before")) - _count(e.get("after")))
            if m is not None:  # as things stand now: a backup hard-linked on the logdir's disk frees nothing yet
                e["freed_now_bytes"], e["freed_after_purge_bytes"] = usage.freed_by_op(
                    m, vaults, device, e["removed_from_logdir_bytes"])
        if not e.get("backup_kept") or m is None:
            e["backup"] = "none" if not e.get("backup_kept") else "unknown"
        elif m.get("backup_released_by_restore"):
            e["backup"] = "released"
        elif m.get("backup_purged"):
            e["backup"] = "purged"
        else:
            e["backup"] = "kept"
    return entries, total


__all__ = ["disk_in_use", "disk_in_use_after_scan", "disk_numbers_view", "freed_after_purge", "history_view",
           "kept_unlisted_rows", "retired_after_purge", "status_view"]
