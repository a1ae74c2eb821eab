"""What the vault and the change log say, read-only: operations and their manifests (a bucket's
in the local shape), ``status``, the tab's ``disk_numbers`` and ``history``.
"""
from __future__ import annotations

import os
from typing import List, Optional

from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine.catalogue import find_manifest, known_vaults, own_manifests, vault_problems
from tb_footprint_plugin.engine import health, trust, usage
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.history import read_history
from tb_footprint_plugin.engine.journal import pending_journals
from tb_footprint_plugin.engine.ledger import Ledger, ledger_path, ledger_paths, merged, with_restores
from tb_footprint_plugin.engine.restore import kept_blobs
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.storage.remote import is_remote
from tb_footprint_plugin.api.common import bucket_in_use, bucket_of, context_of, disk_in_use, freed_after_purge
from tb_footprint_plugin.api.settle import unfinished


def operation(logdir: str, op_id: str, backup_dir: Optional[str] = None) -> dict:
    """The full manifest of one operation (files, plan, verification with scalar series)."""
    if is_remote(logdir):
        found = [m for m in operations(logdir, backup_dir=backup_dir) if m.get("op_id") == op_id]
        if not found:
            raise TransactionError(f"no operation {op_id!r} in the vault of {logdir}")
        return found[0]
    return find_manifest(context_of(logdir, backup_dir), op_id)


def operations(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """Every operation's manifest (newest first), optionally for one run."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        rfs, vault = bucket_of(logdir, backup_dir)
        return [{k: v for k, v in m.items() if not k.startswith("_")} for m in bk.manifests(rfs, vault)
                if run is None or m.get("run") == run]
    ctx = context_of(logdir, backup_dir)
    out = [m for m in own_manifests(ctx) if run is None or m.get("run") == run]
    out.sort(key=lambda m: m.get("started_at", 0), reverse=True)
    return out


def status(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations, damage (``problems``, with codes), late writes salvaged, the batch
    ledger, ``batch`` (every ledger of the logdir — one per shard — merged into one view: per run
    its state, who did it and its bytes; ``engine.ledger.merged``), the vault and the operations it holds; ``settle_command`` says what settles them.
    ``kept_blobs``: every blob a restore or rollback kept in the vault in a file's place (``path``,
    ``blob``, ``holds``, ``late_records`` and ``late_records_file`` when its records are back in
    the run, ``bring_back``: the command that copies it out, ``code``). Changes nothing."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk
        from tb_footprint_plugin.engine import bucket_ledger

        rfs, vault = bucket_of(logdir, backup_dir)
        st = bk.status(rfs, vault)
        st["batch"] = with_restores(bucket_ledger.merged(rfs), st["operations"])
        # the keys the front ends read for a local logdir; a bucket's damage is reported per verb
        for k in ("unfinished", "problems", "late_writes", "kept_blobs"):
            st.setdefault(k, [])
        st.setdefault("settle_command", health.settle_command(logdir, backup_dir) if st["unfinished_operations"] else None)
        st["disk_in_use_bytes"] = bucket_in_use(rfs, vault)
        try:
            st["freed_after_purge_bytes"] = bk.retention_report(rfs, vault, st["vault_bytes"])["freed_after_purge"]
        except (OSError, ValueError):
            st["freed_after_purge_bytes"] = st["vault_bytes"]
        return st
    ctx = context_of(logdir, backup_dir)
    pending = [j.op_id for j in pending_journals(ctx.journal_dir)]
    ops = []
    vaults = known_vaults(ctx)
    vault_bytes = sum(Vault(root).size() for root in vaults)
    for m in own_manifests(ctx):
        ops.append({k: m.get(k) for k in ("op_id", "kind", "run", "outcome", "reason", "bytes_before",
                                          "bytes_after", "finished_at", "backup_purged", "restored_by",
                                          "rebuilt")})
        ops[-1]["salvaged"] = len(m.get("salvaged", []))
    lp = ledger_path(ctx.state)
    led = Ledger(lp, "", ctx.logdir).summary() if os.path.exists(lp) else None
    paths = ledger_paths(ctx.state)
    found = unfinished(logdir, backup_dir)
    problems = [p.to_dict() for p in vault_problems(ctx)]
    try:
        trust.bind(ctx.logdir, ctx.state, adopt=False)
    except trust.Untrusted as e:
        if e.code != trust.IDENTITY_DAMAGED:  # a damaged one is among ``unfinished``'s problems
            problems.insert(0, e.to_dict())
    kept_ops = [o["op_id"] for o in ops if o["kind"] == "reduce" and o["outcome"] == Outcome.VERIFIED
                and not o["backup_purged"] and not o["restored_by"]]
    return {"logdir": ctx.logdir, "state_dir": ctx.state, "vaults": vaults,
            "vault_bytes": vault_bytes,
            # the same numbers a reduce reports: disk in use now (logdir + vaults, as ``du``
            # counts it) and what purging every kept backup would free (purge's own count)
            "disk_in_use_bytes": disk_in_use(ctx).total_bytes,
            "freed_after_purge_bytes": freed_after_purge(ctx, kept_ops),
            # backups offloaded to a bucket: what it stores, apart from the local disk (None: no remote vault)
            "remote_vault": usage.remote_usage(vaults),
            "unfinished_operations": pending, "operations": ops,
            "ledger": led, "batch": with_restores(merged(paths, ctx.logdir), ops) if paths else None,
            "unfinished": found["unfinished_operations"],
            "problems": problems + found["problems"],
            "settle_command": found["settle_command"], "late_writes": health.late_writes(own_manifests(ctx)),
            # bytes a restore or rollback found in a file's place, kept in the vault: what each
            # holds and how to bring it back (``engine.restore.kept_blobs``)
            "kept_blobs": kept_blobs(ctx, own_manifests(ctx))}


def disk_numbers(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """The header numbers of the tab (#27.4), counted as ``status`` and ``history`` count them:
    ``disk_in_use_bytes`` (logdir + vaults now, ``engine.usage``), ``freed_now_bytes`` (what the
    verified reductions not restored freed on disk as things stand, ``usage.freed_by_op``: ~0 while
    hard-linked backups are kept) and ``freed_after_purge_bytes`` (what purging every kept backup
    frees on top). A bucket's ``freed_now_bytes`` is None (its backups are copies in the store,
    not measured per operation). Walks the logdir and its vaults; changes nothing."""
    if is_remote(logdir):
        st = status(logdir, backup_dir)
        return {"disk_in_use_bytes": st.get("disk_in_use_bytes"), "freed_now_bytes": None,
                "freed_after_purge_bytes": st.get("freed_after_purge_bytes")}
    ctx = context_of(logdir, backup_dir)
    vaults, device = known_vaults(ctx), usage.device_of(ctx.logdir)
    freed_now, kept_ops = 0, []
    for m in own_manifests(ctx):  # untrusted: a malformed count counts as nothing
        if m.get("kind") != "reduce" or m.get("outcome") != Outcome.VERIFIED or m.get("restored_by"):
            continue
        try:
            removed = max(0, int(m.get("bytes_before") or 0) - int(m.get("bytes_after") or 0))
        except (TypeError, ValueError):
            removed = 0
        freed_now += usage.freed_by_op(m, vaults, device, removed)[0]
        if not m.get("backup_purged"):
            kept_ops.append(m.get("op_id"))
    remote = usage.remote_usage(vaults)
    return {"disk_in_use_bytes": disk_in_use(ctx).total_bytes, "freed_now_bytes": freed_now,
            "freed_after_purge_bytes": freed_after_purge(ctx, kept_ops),
            "remote_vault_bytes": remote["remote_vault_bytes"] if remote else None}


def history(logdir: str, backup_dir: Optional[str] = None) -> List[dict]:
    """The change log, oldest first. Each reduce entry says where its backup is now
    (``backup``: ``kept``, ``purged`` or ``released`` — dropped by a verified restore — or ``none``)
    and ``removed_from_logdir_bytes``, and how much of that is freed on the logdir's disk now
    (``freed_now_bytes``: ~0 while a hard-linked backup is kept) and after ``purge``
    (``freed_after_purge_bytes``), as things stand when read; purge entries carry ``freed`` (bytes freed on disk); a restore
    (or rolled-back reduce) that kept bytes found in a file's place carries ``kept_blobs`` (as in
    ``status``)."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        return bk.history(*bucket_of(logdir, backup_dir))
    entries = read_history(state_dir(logdir))
    try:
        ctx = context_of(logdir, backup_dir)
        manifests = {m.get("op_id"): m for m in own_manifests(ctx)}
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
        m = manifests.get(e.get("op_id"))
        if e.get("outcome") == Outcome.VERIFIED:
            e["removed_from_logdir_bytes"] = max(0, (e.get("before") or 0) - (e.get("after") or 0))
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
    return entries

