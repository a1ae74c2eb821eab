"""What every start does before anything else (CLI verbs that change something, the API, the
TensorBoard plugin at load, and ``tb-footprint recover``):

0. rebuild a damaged identity.json from the ids the logdir's own manifests carry (the damaged
   file is set aside, never deleted);
1. settle unfinished operations from their journals (roll back, or finish a recorded swap);
2. rebuild manifests that are missing or corrupt from the vault's operation log;
3. finish purges that were killed after recording their intent (no blob leaks);
4. remove scratch directories of processes that are gone, and restore temp files;
   finish compactions of backups into compressed blobs that were killed midway, then offloads
   of backups into the remote vault (``engine.offload``) that were killed or could not reach it;
5. salvage records written into backups after their reduction (late writers), then make backups
   an older version linked in while their original had other names (a hard-linked snapshot's)
   copies of their own (``repair_shared_backups``);
6. finish the purges of retired runs killed after their intent (``retire_purge.finish_retired_purges``),
   then release the backups a restore kept on doubt once nothing claims them (``release_kept_restores``);
7. record as done the runs a gone worker's batch ledger left in flight although their reduction
   committed (``settle_stale_ledgers``).

``start`` runs them all; steps 5-7 share one read of the manifests (each only picks candidates
from it and reads again what it acts on, under the run's lock).

Each step reports what it did as a ``RecoveryOutcome`` with a code; nothing is dropped
silently, and a step that cannot be done now is retried at the next start.

Why one module: it is the start's one ordered sequence; each step is a short function over the
modules that own its state, and the order between them is the point (manifests rebuilt before
purges and compactions, pins cleared before compactions, shared backups repaired after the
salvage took what grew). Split, that order would live in no one place.
"""
from __future__ import annotations

import contextlib
import os
import socket
import stat
from typing import Callable, List, Optional

from tb_footprint_plugin.codes import Finding, Outcome, Recovery
from tb_footprint_plugin.engine import offload, oplog, salvage, trust
from tb_footprint_plugin.engine.catalogue import journal_blobs, known_vaults, unsettled_op
from tb_footprint_plugin.engine.journal import pending_journals
from tb_footprint_plugin.engine.lease import LockRefused
from tb_footprint_plugin.engine.run_lock import run_lock
from tb_footprint_plugin.engine.context import Context, new_op_id, reason_of
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.lease import holder_alive
from tb_footprint_plugin.engine.ledger import ledger_paths, settle_stale_files
from tb_footprint_plugin.engine.pack_index_rebuilt import rebuilt_outcomes
from tb_footprint_plugin.engine.recovery import RecoveryOutcome, recover
from tb_footprint_plugin.engine.remote_vault import packs_root
from tb_footprint_plugin.engine.restore import release_restored_backup
from tb_footprint_plugin.engine.retire_purge import finish_retired_purges
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.engine.vault import (COMPRESSED, KEPT_BUSY, KEPT_DAMAGED, KEPT_OPEN, PACKED, UNSHARED,
                                              Vault)
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.paths import is_sha256

Manifests = Callable[[Context], List[dict]]


def has_state(ctx: Context, vault_roots: List[str]) -> bool:
    """False for a logdir the tool never wrote to: a start then writes nothing either."""
    return any(os.path.isdir(r) for r in [ctx.state, *vault_roots])


def start(ctx: Context, manifests_of: Manifests) -> List[RecoveryOutcome]:
    """What every start does (steps 0-7 above), with one read of the manifests for steps 5-7:
    ``manifests_of(ctx)`` lists this logdir's manifests (``catalogue.own_manifests``); it is
    called once, after the steps that write manifests (journals settled, manifests rebuilt,
    purges, compactions and offloads finished), and its list is shared by the salvage, the
    release of kept restores and the stale ledgers. Those only choose candidates from it: each
    reads again, under the run's lock, what it acts on."""
    vault_roots = known_vaults(ctx)
    if not has_state(ctx, vault_roots):
        return []
    snapshot: List[List[dict]] = []

    def once(c: Context) -> List[dict]:
        if not snapshot:
            snapshot.append(manifests_of(c))
        return snapshot[0]

    out = recover_all(ctx, vault_roots, manifests_of, settled=once)
    out += finish_retired_purges(ctx, once(ctx))  # a retired run's purge killed past its intent
    out += release_kept_restores(ctx, once(ctx))
    settle_stale_ledgers(ctx, once(ctx))
    return out


def recover_all(ctx: Context, vault_roots: List[str], manifests_of: Manifests,
                settled: Optional[Manifests] = None) -> List[RecoveryOutcome]:
    """Run the start-up steps 0-5; ``manifests_of(ctx)`` lists this logdir's manifests (read
    again after each step that may change them); ``settled``: what lists them for the salvage,
    the last step (``start`` passes its one shared read)."""
    if not has_state(ctx, vault_roots):
        return []
    outcomes: List[RecoveryOutcome] = _repair_identity(ctx, vault_roots)
    if any(True for _ in pending_journals(ctx.journal_dir)):
        outcomes += recover(ctx)
    for root in vault_roots:
        if not os.path.isdir(root):
            continue
        vault = Vault(root)
        try:
            for f in oplog.rebuild_manifests(vault):
                rebuilt = f.code in (oplog.MANIFEST_REBUILT, oplog.COPY_REWRITTEN)
                outcomes.append(RecoveryOutcome(f.op_id or "", "", Recovery.REBUILT if rebuilt else Recovery.FAILED,
                                                f.detail, Finding.MANIFEST_REBUILT if rebuilt else Finding.MANIFEST_LOST))
        except OSError as e:
            outcomes.append(RecoveryOutcome("", "", Recovery.FAILED,
                                            f"cannot rebuild manifests in {root}: {reason_of(e)}",
                                            Finding.RECOVERY_FAILED))
        _clear_settled_pins(ctx, vault)
        outcomes += _finish_purges(ctx, vault)
        outcomes += _finish_compactions(ctx, vault)
        outcomes += _rebuild_pack_index(vault)
        if offload.remote_url(vault) is not None:
            manifests = manifests_of(ctx)
            _note_leftover_offloads(vault, manifests)
            outcomes += _finish_offloads(ctx, vault)
            outcomes += forget_released(ctx, vault, manifests)
        swept = scratch.sweep(vault.tmp)
        if swept:
            outcomes.append(RecoveryOutcome("", "", Recovery.SWEPT, f"{len(swept)} scratch folder(s) of ended "
                                            f"processes removed from {vault.tmp}", Finding.SCRATCH_SWEPT))
    manifests = (settled or manifests_of)(ctx)
    outcomes += _salvage(ctx, manifests)
    # after the salvage: a shared backup that grew is the salvage's (it keeps the grown inode
    # under its new digest, which the next start finds here); one changed in place is named here
    outcomes += repair_shared_backups(ctx, vault_roots, manifests)
    return outcomes


def _rebuild_pack_index(vault: Vault) -> List[RecoveryOutcome]:
    """Only while an index object of the vault's packs is damaged: the backups it hid found again
    in the packs and listed anew (``Vault.rebuild_pack_index``); the damaged object is kept."""
    try:
        got = vault.rebuild_pack_index()
    except Exception as e:  # noqa: BLE001 - nothing was written: the next start looks again
        return [RecoveryOutcome("", "", Recovery.FAILED, f"cannot look in the packs of {vault.root} for the backups a "
                                f"damaged pack index hides: {reason_of(e)}", Finding.RECOVERY_FAILED)]
    return rebuilt_outcomes(got, packs_root(vault.root), vault.root)


def repair_shared_backups(ctx: Context, vault_roots: List[str], manifests: List[dict]) -> List[RecoveryOutcome]:
    """Backups an older version linked in while their original had other names (a ``cp -al`` /
    ``rsync --link-dest`` snapshot, review R13 F1; ``status`` names them ``backup_shared``) made
    copies of their own (``Vault.repair_shared``): a write through the other name then changes
    no backup. The same candidates as ``status``: a committed operation's backup in one of this
    logdir's vaults, with other names, that no operation under way backs up. Costs one ``lstat``
    a backup; only a shared one is read (copied and hashed). One that no longer hashes to its
    name was changed through the other name: named ``backup_damaged`` and left as it is."""
    roots = {os.path.realpath(r) for r in vault_roots}
    vaults = {}  # a manifest's vault field -> its Vault, or None when not one of ours (untrusted)
    todo = {}  # (vault root, sha) -> (manifest, file entry): a blob several manifests name, once
    for m in manifests:
        if m.get("outcome") != Outcome.VERIFIED or m.get("backup_purged") or not isinstance(m.get("vault"), str):
            continue
        if m["vault"] not in vaults:
            vaults[m["vault"]] = Vault(m["vault"]) if os.path.realpath(m["vault"]) in roots else None
        vault = vaults[m["vault"]]
        if vault is None:
            continue
        for f in m.get("files", []):
            sha = f.get("sha256") if isinstance(f, dict) else None
            if not is_sha256(sha) or (vault.root, sha) in todo:
                continue
            try:
                st = os.lstat(vault.blob_path(sha))
            except OSError:
                continue  # compacted, packed, offloaded or missing: nothing shares it here
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                todo[(vault.root, sha)] = (m, f)
    if not todo:
        return []
    try:
        in_use = journal_blobs(ctx)
    except Exception:  # cannot tell which backups operations under way rely on: none repaired now
        return []
    out = []
    for (root, sha), (m, f) in todo.items():
        if sha in in_use:
            continue  # an operation under way backs these bytes up too: tried at the next start
        vault, run = Vault(root), m.get("run") if isinstance(m.get("run"), str) else ""
        blob = vault.blob_path(sha)
        try:
            done = vault.repair_shared(sha)
        except Exception as e:  # the backup stays as it is (shared), named by status; tried again
            out.append(RecoveryOutcome(m["op_id"], run, Recovery.FAILED, f"the backup of {f.get('path')} ({blob}) "
                                       f"still shares its inode with a name outside the vault: {reason_of(e)}",
                                       Finding.RECOVERY_FAILED))
            continue
        if done == UNSHARED:
            out.append(RecoveryOutcome(m["op_id"], run, Recovery.REPAIRED, f"the backup of {f.get('path')} ({blob}) "
                                       "shared its inode with a name outside the vault (a hard-linked snapshot?): "
                                       "now a verified copy of its own, so a write there changes no backup",
                                       Finding.BACKUP_UNSHARED))
        elif done == KEPT_DAMAGED:
            out.append(RecoveryOutcome(m["op_id"], run, Recovery.FAILED, f"the backup of {f.get('path')} ({blob}) "
                                       "shares its inode with a name outside the vault and its bytes no longer hash "
                                       "to the original's digest (written or appended to through that name?): left "
                                       "as it is, never made a copy under the original's name", Finding.BACKUP_DAMAGED))
    return out


def release_kept_restores(ctx: Context, manifests: List[dict]) -> List[RecoveryOutcome]:
    """Release the backups that a restore kept because something had a claim on them at that
    moment. A restore gives back its vault copies once the originals stand again
    (``release_restored_backup``), but on any doubt it keeps them: a manifest it could not read,
    or a journal or another operation claiming the same bytes. That doubt can be brief, e.g. a
    concurrent transaction backing up identical bytes, or a log piece being sealed while it was
    read. Each start asks again, under the run's lock, with the manifest read afresh
    (``manifests`` only names the candidates: the start's one read). A blob that is still
    claimed stays, and so does one whose file has changed since the restore. Returns one
    ``released`` outcome per operation whose backup went."""
    roots = {os.path.realpath(r) for r in known_vaults(ctx)}
    todo = [m for m in manifests if m.get("kind") == "reduce" and m.get("restored_by")
            and not m.get("backup_purged") and isinstance(m.get("run"), str) and isinstance(m.get("vault"), str)
            and os.path.realpath(m["vault"]) in roots]  # a vault field is untrusted: only one of ours
    out: List[RecoveryOutcome] = []
    for m in todo:
        try:
            lock = run_lock(ctx, m["run"]).acquire()
        except (LockRefused, OSError):
            continue  # being changed now: the next start asks again
        try:
            if unsettled_op(ctx, m["run"]):
                continue  # an operation on the run is open: it may rely on these bytes
            vault = Vault(m["vault"])
            fresh = vault.read_manifest(m["op_id"])
            if fresh.get("backup_purged") or not fresh.get("restored_by"):
                continue
            freed = release_restored_backup(ctx, vault, fresh)
            if vault.read_manifest(m["op_id"]).get("backup_purged"):
                out.append(RecoveryOutcome(m["op_id"], m["run"], Recovery.RELEASED,
                                           f"backup of restored operation {m['op_id']} released "
                                           f"({human_bytes(freed)} freed): the claim that kept it at the restore is gone",
                                           Recovery.RELEASED))
        except (OSError, ValueError, Untrusted):
            continue  # unreadable now: it stays kept (purge can free it)
        finally:
            lock.release()
    return out


def settle_stale_ledgers(ctx: Context, manifests, *, mine: bool = False,
                         paths: Optional[List[str]] = None) -> List[str]:
    """Record as ``done`` each run a batch ledger leaves ``reducing``/``verifying`` for a worker
    that is gone (on this host) when the run's reduction committed anyway: an interrupt or a kill
    between the commit and the ledger's "done" record (while its backups were compacted or the
    ledger written) left no journal for recovery to settle, so the entry stayed in flight for good
    and a rerun never revisits a run the reduction left nothing of to plan. The operation is the
    run's verified reduce whose manifest was finished after the in-flight mark (the commit follows
    it); its sizes and id go into the entry, as ``mark_recovered`` writes a completed one.
    ``manifests``: the logdir's manifests (a list, or a callable of ``ctx`` called only when some
    entry is stale). ``mine``: this process's own entries count as gone too (its batch was
    interrupted). ``paths``: the ledgers to look at (default: every default ledger of the state
    folder, ``ledger_paths``; a custom ``--ledger PATH`` is settled by the reduce that names it).
    Returns the runs recorded; a ledger that cannot be read or written is left as it is."""
    return settle_stale_files(ledger_paths(ctx.state) if paths is None else paths, ctx.logdir,
                              (lambda: manifests(ctx)) if callable(manifests) else manifests, mine=mine)


def _repair_identity(ctx: Context, vault_roots: List[str]) -> List[RecoveryOutcome]:
    """A damaged identity.json rebuilt (``trust.repair_identity``), or why not: never a silence."""
    try:
        done = trust.repair_identity(ctx.logdir, ctx.state, vault_roots)
    except trust.Untrusted as e:
        return [RecoveryOutcome("", "", Recovery.FAILED, str(e), Finding.IDENTITY_DAMAGED)]
    except OSError as e:
        return [RecoveryOutcome("", "", Recovery.FAILED, f"cannot rebuild {trust.identity_path(ctx.state)}: "
                                f"{reason_of(e)}", Finding.IDENTITY_DAMAGED)]
    if done is None:
        return []
    whose = ("the id this logdir's own manifests carry" if done["id_from"] == "manifests"
             else "a new id (no manifest carries one)")
    return [RecoveryOutcome("", "", Recovery.REBUILT, f"{trust.identity_path(ctx.state)} was damaged: set aside as "
                            f"{done['aside']} and rebuilt with {whose}", Finding.IDENTITY_REBUILT)]


def _clear_settled_pins(ctx: Context, vault: Vault) -> None:
    """Drop the pins (``Vault.pin_blob``) of transactions that are settled: a manifest in the
    vault says how they ended (it names the backups they kept) and no journal of this logdir
    is still open for them (recovery, above, could not settle it yet: its pins stay). A
    transaction with no manifest may be another logdir's under way, or a killed one its own
    logdir's next start settles: its pins stay until then."""
    try:
        open_ops = {j.op_id for j in pending_journals(ctx.journal_dir)}
    except OSError:
        return  # unknown: every pin stays
    for op_id in vault.pinned_ops():
        if op_id in open_ops:
            continue
        if vault.has_manifest(op_id):
            try:
                vault.unpin(op_id)
            except OSError:
                pass  # retried at the next start; a pin left only keeps bytes


def _finish_purges(ctx: Context, vault: Vault) -> List[RecoveryOutcome]:
    from tb_footprint_plugin.engine.purge import finish_purges

    return finish_purges(ctx, vault)  # the one finish of a killed purge (``purge_run.finish_killed``)


def _finish_compactions(ctx: Context, vault: Vault) -> List[RecoveryOutcome]:
    """Compactions killed midway, done again (``Vault.compact_all``) under their run's lock, so a
    restore or purge of that run never races one: until then each backup is still there plain,
    or as its verified ``.zst``, or both."""
    out = []
    for op_id, shas in vault.pending_compactions().items():
        if _compacted_by_a_live_batch(vault, op_id):
            continue  # noted by a batch still running on this host: its next round compacts it
        try:
            m = vault.read_manifest(op_id)
            run = m.get("run")
        except Exception:  # no manifest (yet): rebuilt above or reported; the blobs stay as they are
            m, run = None, None
        if m is not None and m.get("outcome") == Outcome.ROLLED_BACK:
            # noted before a swap that did not stand (a kill between the note and the swap, its
            # rollback by recovery above): its rollback dropped the blobs only it needed, and those
            # it kept are other operations' to compact; nothing to do or report. A note with no
            # manifest may be a transaction under way of another logdir sharing this vault (its
            # journal is in that logdir's state): it waits for its manifest
            with contextlib.suppress(OSError):
                vault.done_compaction(op_id)
            continue
        if not isinstance(run, str) or not run:
            # never compacted without its run's lock (a purge of that run could race it and
            # leave a .zst no manifest names): the note waits for a manifest to name the run
            continue
        try:
            with run_lock(ctx, run):
                what = vault.compact_all(op_id, shas)
        except LockRefused:
            out.append(RecoveryOutcome(op_id, run or "", Recovery.SKIPPED_LIVE, "compaction of its backups waits: "
                                       "the run is being changed by another process", Finding.RUN_LOCKED))
            continue
        except Exception as e:  # retried at the next start; every blob is still whole in one form
            out.append(RecoveryOutcome(op_id, run or "", Recovery.FAILED, f"interrupted compaction in {vault.root} "
                                       f"not finished: {reason_of(e)}", Finding.RECOVERY_FAILED))
            continue
        waiting = sum(1 for v in what.values() if v in (KEPT_OPEN, KEPT_BUSY))
        if waiting:
            out.append(RecoveryOutcome(op_id, run, Recovery.SKIPPED_LIVE, f"compaction of {waiting} of {op_id}'s "
                                       "backups waits: a process may still write into them, or another process is "
                                       "compacting them (kept plain; tried again at the next start)",
                                       Finding.BACKUP_OPEN_FOR_WRITING))
            continue
        if offload.remote_url(vault) is not None:
            try:
                offload.note_offload(vault, op_id, shas)  # finished by _finish_offloads, next
            except OSError as e:
                out.append(RecoveryOutcome(op_id, run, Recovery.FAILED, f"offload of {op_id}'s backups not noted: "
                                           f"{reason_of(e)}; they stay in the local vault", Finding.RECOVERY_FAILED))
        out.append(RecoveryOutcome(op_id, run or "", Recovery.COMPLETED,
                                   f"an interrupted compaction of {op_id}'s backups was finished "
                                   f"({sum(1 for v in what.values() if v in (COMPRESSED, PACKED))} of {len(what)} "
                                   "compressed or packed)",
                                   Finding.COMPACTION_FINISHED))
    return out


def _compacted_by_a_live_batch(vault: Vault, op_id: str) -> bool:
    """Whether ``op_id``'s compaction note names another process of this host that still runs
    (a batch compacting its committed runs in rounds, ``engine.compactor``): left to it, so a
    start beside a running batch neither says it finished an interrupted compaction nor packs
    that batch's runs one by one. A note of this process (an interrupt's settling) or of a gone
    one is finished here, as any other; so is one whose pid a process that is not the note's
    writer holds now (``noting_process_runs``), else the note would wait for as long as that
    unrelated process runs. Finishing a note of a batch that does run is safe either way (run and
    blob locks): waiting only spares it a duplicate of its own rounds."""
    w = vault.compaction_waits_for(op_id)
    if w is None or w["host"] != socket.gethostname() or w["pid"] == os.getpid():
        return False
    return noting_process_runs(w["pid"], w["pid_start"], vault.compaction_noted_ns(op_id))


#: a process counts as started after a note only this long after its mtime: the boot time
#: ``/proc/stat`` gives is whole seconds, file times are a clock tick coarse
NOTE_START_SLACK_NS = 1_000_000_000


def noting_process_runs(pid: int, pid_start: Optional[int], noted_ns: Optional[int]) -> bool:
    """Whether the process that wrote a compaction note naming ``pid`` (and ``pid_start``, its
    start time in clock ticks since boot, when the note has it) still runs on this host. With a
    start time: only a process at ``pid`` with that start time; one whose start time cannot be
    read while ``/proc`` shows ours is another user's (``hidepid``), so not the writer. An older
    note without one (``noted_ns``: its mtime): a live process at ``pid`` that started before
    the note was written (it may be the writer); one started after it cannot be, so the note
    waits at most as long as a process that was already running when it was written. Where
    ``/proc`` tells nothing (not even this process's start), a live pid counts, as before."""
    if not holder_alive(pid):
        return False
    now = lease.process_start(pid)
    if now is None:
        return lease.process_start(os.getpid()) is None
    if pid_start is not None:
        return now == pid_start
    started = _started_ns(now)
    if noted_ns is None or started is None:
        return noted_ns is not None  # no note any more: nothing waits; no boot time: as before
    return started <= noted_ns + NOTE_START_SLACK_NS


def _started_ns(ticks: int) -> Optional[int]:
    """A process start (clock ticks since boot, ``process_start``) as wall-clock ns, never
    later than the true start (the boot time is whole seconds, rounded down); None if unknown."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1]) * 1_000_000_000 + ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    return None


def _note_leftover_offloads(vault: Vault, manifests: List[dict]) -> None:
    """A note for every verified reduction of ``vault`` whose backups are still local and that
    no compaction or offload note names: a kill between a commit and its offload's note (or
    between two runs of a batch) would otherwise leave them on the local disk for good. Only
    digests of the right form are noted; ``offload_blobs`` checks each again."""
    noted = offload.pending_offloads(vault)
    compacting = vault.pending_compactions()
    for m in manifests:
        if (m.get("vault") != vault.root or m.get("kind") != "reduce" or m.get("outcome") != Outcome.VERIFIED
                or m.get("backup_purged") or m.get("restored_by") or m["op_id"] in noted
                or m["op_id"] in compacting):
            continue
        shas = [f["sha256"] for f in m.get("files", []) if isinstance(f, dict) and vault.local_form(f.get("sha256"))]
        if shas:
            try:
                offload.note_offload(vault, m["op_id"], shas)
            except OSError:
                continue  # the backups stay local; tried again at the next start


def forget_released(ctx: Context, vault: Vault, manifests: List[dict]) -> List[RecoveryOutcome]:
    """Offloaded backups a verified restore let go, forgotten by the remote vault as the local
    ones were deleted (``offload.forget_released``; a kill between the two is settled here).
    Never raises: a store that fails leaves them, tried again at the next start."""
    if not any(m.get("backup_released_by_restore") for m in manifests):
        return []
    try:
        n = offload.forget_released(vault, manifests, lambda: vault.referenced_blobs() | journal_blobs(ctx))
    except Exception as e:  # the records stay: the blobs are forgotten at the next start
        return [RecoveryOutcome("", "", Recovery.FAILED, f"backups released by a restore not yet deleted from the "
                                f"remote vault: {reason_of(e)}", Finding.RECOVERY_FAILED)]
    if not n:
        return []
    return [RecoveryOutcome("", "", Recovery.COMPLETED, f"{n} backup(s) a restore released deleted from the remote "
                            "vault", Finding.PURGE_FINISHED)]


def _finish_offloads(ctx: Context, vault: Vault) -> List[RecoveryOutcome]:
    """Offloads killed midway (or that could not reach the store), done again
    (``offload.offload_blobs``) under their run's lock: each blob is still local, or remote
    with its record, or both; a local form goes only once its record is written."""
    pending = offload.pending_offloads(vault)
    url = offload.remote_url(vault) if pending else None
    out = []
    for op_id, shas in pending.items():
        try:
            m = vault.read_manifest(op_id)
            run = m.get("run")
        except Exception:  # no manifest (yet): the blobs stay local, the note waits
            continue
        if not isinstance(run, str) or not run or url is None:
            continue
        sizes = {f["sha256"]: f["size"] for f in m.get("files", [])
                 if isinstance(f, dict) and f.get("sha256") in set(shas) and isinstance(f.get("size"), int)}
        try:
            with run_lock(ctx, run):
                what = offload.offload_blobs(vault, op_id, url, sizes, journal_blobs(ctx))
        except LockRefused:
            out.append(RecoveryOutcome(op_id, run, Recovery.SKIPPED_LIVE, "offload of its backups to the remote "
                                       "vault waits: the run is being changed by another process", Finding.RUN_LOCKED))
            continue
        except Exception as e:  # retried at the next start; every blob is whole locally or remotely
            out.append(RecoveryOutcome(op_id, run, Recovery.FAILED, f"interrupted offload of {op_id}'s backups to "
                                       f"{url} not finished: {reason_of(e)}", Finding.RECOVERY_FAILED))
            continue
        waiting = sum(1 for v in what.values() if v in offload.RETRY)
        if waiting:
            out.append(RecoveryOutcome(op_id, run, Recovery.SKIPPED_LIVE, f"offload of {waiting} of {op_id}'s "
                                       f"backups to {url} waits (a writer may hold them, or the store failed); "
                                       "they stay in the local vault, tried again at the next start",
                                       Finding.RECOVERY_FAILED))
            continue
        moved = sum(1 for v in what.values() if v == offload.OFFLOADED)
        if not moved:
            continue  # nothing left to move (kept local for a reason the blob's own state says): no news
        out.append(RecoveryOutcome(op_id, run, Recovery.COMPLETED, f"an interrupted offload of {op_id}'s backups "
                                   f"to {url} was finished ({moved} of {len(what)} moved)", Finding.OFFLOAD_FINISHED))
    return out


def _salvage(ctx: Context, manifests: List[dict]) -> List[RecoveryOutcome]:
    out = []
    for m, f, _size in salvage.grown_backups(manifests):
        try:
            with run_lock(ctx, m["run"]):
                s = salvage.salvage_one(ctx, m, f, new_op_id)
            action = Recovery.SALVAGED if s.code == salvage.SALVAGED else Recovery.KEPT
            out.append(RecoveryOutcome(m["op_id"], m["run"], action, s.detail, Finding(s.code)))
        except LockRefused:
            out.append(RecoveryOutcome(m["op_id"], m["run"], Recovery.SKIPPED_LIVE,
                                       "late writes found; the run is being changed by another process, "
                                       "salvaged at the next start", Finding.LATE_WRITES_PENDING))
        except Exception as e:  # the grown backup stays as it is; retried at the next start
            out.append(RecoveryOutcome(m["op_id"], m["run"], Recovery.FAILED,
                                       f"late writes to {f['path']} not salvaged yet: {reason_of(e)}",
                                       Finding.RECOVERY_FAILED))
    return out


__all__ = ["recover_all", "has_state", "repair_shared_backups", "noting_process_runs", "forget_released", "release_kept_restores", "settle_stale_ledgers", "start"]
