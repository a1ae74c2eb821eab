"""Settling what was left unfinished: the recovery every changing verb runs first, what is
unfinished and damaged (read-only), and what a reduce stopped by Ctrl-C settles and says
(``Interrupted``); the batch ledger both the reduce and the settling record in (``open_ledger``).
"""
from __future__ import annotations

import os
import socket
from typing import List, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Finding, Outcome, Recovery
from tb_footprint_plugin.engine.catalogue import journal_blobs, known_vaults, own_manifests, unsettled_op
from tb_footprint_plugin.engine import health
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.journal import pending_journals, RunLock, RunLocked
from tb_footprint_plugin.engine.lease import holder_alive
from tb_footprint_plugin.engine.ledger import Ledger, ledger_path, ledger_paths, load_ledger, mark_recovered
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.restore import release_restored_backup
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.engine.upkeep import recover_all
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.plan.policies import get_policy
from tb_footprint_plugin.storage.files import is_regular, matches as file_matches
from tb_footprint_plugin.storage.paths import contained, is_within, real_within, state_dir, UnsafePath
from tb_footprint_plugin.storage.remote import is_remote
from tb_footprint_plugin.api.common import bucket_of, context_of


def recover_logdir(logdir: str, backup_dir: Optional[str] = None) -> List[RecoveryOutcome]:
    """What every start does (``tb-footprint recover``): settle unfinished operations (rolled
    back, or finished when their swap was recorded), rebuild lost manifests from the vault's
    log, finish killed purges, sweep scratch space of ended processes, and salvage records
    written into backups after their reduction. Each outcome has an action and a code."""
    if is_remote(logdir):
        from tb_footprint_plugin.engine import bucket as bk

        return bk.recover(*bucket_of(logdir, backup_dir))
    ctx = context_of(logdir, backup_dir)
    out = recover_all(ctx, known_vaults(ctx), own_manifests)
    out += release_kept_restores(ctx)
    settle_stale_ledgers(ctx)
    return out


def release_kept_restores(ctx: Context) -> List[RecoveryOutcome]:
    """Release the backups that a restore kept because something had a claim on them at that
    moment. A restore gives back its vault copies once the originals stand again
    (``release_restored_backup``), but on any doubt it keeps them: a manifest it could not read,
    or a journal or another operation claiming the same bytes. That doubt can be brief, e.g. a
    concurrent transaction backing up identical bytes, or a log piece being sealed while it was
    read. Each start asks again, under the run's lock, with the manifests read afresh. A blob that
    is still claimed stays, and so does one whose file has changed since the restore. Returns one
    ``released`` outcome per operation whose backup went."""
    roots = {os.path.realpath(r) for r in known_vaults(ctx)}
    todo = [m for m in own_manifests(ctx) if m.get("kind") == "reduce" and m.get("restored_by")
            and not m.get("backup_purged") and isinstance(m.get("run"), str) and isinstance(m.get("vault"), str)
            and os.path.realpath(m["vault"]) in roots]  # a vault field is untrusted: only one of ours
    out: List[RecoveryOutcome] = []
    for m in todo:
        try:
            lock = RunLock(ctx.lock_dir, m["run"]).acquire()
        except (RunLocked, OSError):
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


def unfinished(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations and damage, found without changing anything, and the command that
    settles them: ``{unfinished_operations, problems, settle_command}`` (problems carry a
    ``codes.Finding``; ``settle_command`` is None when all is well)."""
    ctx = context_of(logdir, backup_dir)
    ops = health.unfinished_ops(ctx.journal_dir)
    problems = health.state_problems(ctx.logdir, ctx.state, ctx.journal_dir)
    problems += health.catalogue_problems(known_vaults(ctx), own_manifests(ctx), frozenset(journal_blobs(ctx)))
    # a damaged line or file is named for the user to look at: `recover` cannot mend it
    settles = ops or any(p["code"] not in (Finding.DAMAGED_LINE, Finding.DAMAGED_FILE) for p in problems)
    return {"unfinished_operations": ops, "problems": problems,
            "settle_command": health.settle_command(ctx.logdir, backup_dir) if settles else None}


def pending_operations(logdir: str) -> List[str]:
    """Ids of unfinished operations (journals left behind), oldest first; nothing is settled."""
    return [j.op_id for j in pending_journals(Context(logdir).journal_dir)]


def interrupted_state(logdir: str, backup_dir: Optional[str] = None) -> List[dict]:
    """Each unfinished operation said plainly, read-only: ``{op_id, run, kind, untouched, files,
    changed}``. ``untouched`` is True when the run's files were never swapped (no swap record) and
    every backed-up file still has the sha256 it had before; False when some file differs (the
    settle command puts the originals back); None when the journal does not tell (not a reduce).
    Journals are untrusted input: a path leading out of the logdir counts as not verified."""
    if is_remote(logdir):
        return []
    base = os.path.abspath(logdir)
    out = []
    for j in pending_journals(os.path.join(state_dir(base), "journal")):
        recs = j.records()
        begin = recs[0] if recs and recs[0].get("type") == "begin" else {}
        row = {"op_id": j.op_id, "run": begin.get("run"), "kind": begin.get("kind"), "untouched": None,
               "files": 0, "changed": []}
        if begin.get("kind") == "reduce":
            backups = [r for r in recs if r.get("type") == "backup"]
            swapped = any(r.get("type") in ("swap", "swapped", "commit") for r in recs)
            changed = []
            for r in backups:
                try:
                    p = contained(base, r.get("path"))
                except UnsafePath:
                    changed.append(str(r.get("path")))
                    continue
                if not (real_within(p, base) and is_regular(p) and isinstance(r.get("sha256"), str)
                        and isinstance(r.get("size"), int) and file_matches(p, r["sha256"], r["size"])):
                    changed.append(r.get("path"))
            row.update(untouched=not swapped and not changed, files=len(backups), changed=changed)
        out.append(row)
    return out


class Interrupted(KeyboardInterrupt):
    """A reduce stopped by Ctrl-C, after it settled what it left: ``settled`` is what
    ``settle_interrupted`` returned (the run under way rolled back, its files' sha256 checked)."""

    def __init__(self, settled: List[dict]):
        super().__init__("interrupted; the run under way was rolled back")
        self.settled = settled


def settle_interrupted(logdir: str, backup_dir: Optional[str] = None, *, policy="archive",
                       ledger: Optional[str] = "default", shard: Optional[Tuple[int, int]] = None,
                       rolled_back: Sequence[str] = ()) -> List[dict]:
    """After a reduce of this process was interrupted (Ctrl-C): settle what it left as the next
    start would (a run not committed goes back to its exact original bytes and its staging files
    are removed; one past the commit point is finished) and record it in the batch ledger, so
    ``status`` shows the run as pending again, not as held by a worker that is gone.

    ``rolled_back``: operations of the interrupted batch that their own worker thread rolled back
    when it saw the interrupt (``--jobs`` > 1: a run under way stops at its next step); each is
    said as the others are (its files' sha256 checked against its manifest) and recorded in the
    ledger as pending again, not as a failure.

    Returns one dict per settled operation: ``{op_id, run, action, code, detail, untouched,
    files}``; ``untouched`` is checked after the fact (every backed-up file's sha256 equal to
    the one it had before the reduce)."""
    if is_remote(logdir):
        return [dict(vars(o), untouched=None, files=0) for o in recover_logdir(logdir, backup_dir)]
    base = os.path.abspath(logdir)
    before = {}
    for j in pending_journals(os.path.join(state_dir(base), "journal")):
        recs = j.records()
        before[j.op_id] = [r for r in recs if r.get("type") == "backup"]
    recovered = recover_logdir(logdir, backup_dir)
    ctx = context_of(logdir, backup_dir)
    book = open_ledger(ctx, ledger, get_policy(policy).name, shard) if ledger else None
    if book is not None and os.path.exists(book.path):
        mark_recovered(book, recovered)
    settle_stale_ledgers(ctx, mine=True)
    out = _rolled_back_at_interrupt(ctx, rolled_back, book)
    for o in recovered:
        row = dict(op_id=o.op_id, run=o.run, action=o.action, code=o.code, detail=o.detail, untouched=None, files=0)
        backups = before.get(o.op_id)
        if o.action == Recovery.ROLLED_BACK and backups:  # a reduce's backups (a retire moves whole trees)
            same = 0
            for r in backups:
                try:
                    p = contained(base, r.get("path"))
                except UnsafePath:
                    continue
                if real_within(p, base) and is_regular(p) and isinstance(r.get("sha256"), str) and \
                        isinstance(r.get("size"), int) and file_matches(p, r["sha256"], r["size"]):
                    same += 1
            row.update(untouched=same == len(backups), files=len(backups))
        out.append(row)
    return out


def settle_stale_ledgers(ctx: Context, *, mine: bool = False) -> List[str]:
    """Record as ``done`` each run a batch ledger leaves ``reducing``/``verifying`` for a worker
    that is gone (on this host) when the run's reduction committed anyway: an interrupt or a kill
    between the commit and the ledger's "done" record (while its backups were compacted or the
    ledger written) left no journal for recovery to settle, so the entry stayed in flight for good
    and a rerun never revisits a run the reduction left nothing of to plan. The operation is the
    run's verified reduce whose manifest was finished after the in-flight mark (the commit follows
    it); its sizes and id go into the entry, as ``mark_recovered`` writes a completed one.
    ``mine``: this process's own entries count as gone too (its batch was interrupted).
    Returns the runs recorded; a ledger that cannot be read or written is left as it is."""
    def gone(e: dict) -> bool:
        if e.get("host") != socket.gethostname() or not isinstance(e.get("pid"), int) or e["pid"] <= 0:
            return False
        if mine and e["pid"] == os.getpid():
            return True
        return not holder_alive(e["pid"], e.get("pid_start"))

    done: List[str] = []
    manifests = None
    for path in ledger_paths(ctx.state):
        data, _problems = load_ledger(path, ctx.logdir)
        if not data:
            continue
        stale = {run: e for run, e in data["runs"].items()
                 if e.get("state") in ("reducing", "verifying") and gone(e)}
        if not stale:
            continue
        if manifests is None:
            manifests = own_manifests(ctx)
        book = Ledger(path, data.get("policy") or "", ctx.logdir, shard=None)
        for run, e in stale.items():
            since = float(e.get("updated_at") or 0)
            ops = [m for m in manifests if m.get("run") == run and m.get("kind") == "reduce"
                   and m.get("outcome") == Outcome.VERIFIED and m.get("host") in (None, e.get("host"))
                   and isinstance(m.get("finished_at"), (int, float)) and m["finished_at"] >= since
                   and isinstance(m.get("bytes_before"), int) and isinstance(m.get("bytes_after"), int)]
            if not ops:
                continue  # not committed: a rerun reduces it again (``RETRY_STATES``)
            m = min(ops, key=lambda o: o["finished_at"])  # the attempt that entry was for
            b, a = m["bytes_before"], m["bytes_after"]
            book.who["shard"] = e.get("shard")
            try:
                book.mark(run, "done", op_id=m["op_id"], verified=True, code=Recovery.COMPLETED, error=None,
                          original_size_bytes=b, after_size_bytes=a, reduced_ratio=round(1 - a / b, 4) if b else 0.0)
            except OSError:
                break  # the ledger is a record: the reduction on disk stands
            done.append(run)
    return done


def _rolled_back_at_interrupt(ctx: Context, op_ids: Sequence[str], book: Optional[Ledger]) -> List[dict]:
    """``settle_interrupted``'s rows of the operations a worker thread rolled back itself at the
    interrupt: untouched when every original its manifest names has its sha256 from before (the
    manifest is untrusted input: a path leading out of the logdir counts as not verified); the
    ledger says the run is pending again (code ``rolled_back``), as for a run recovery settled."""
    if not op_ids:
        return []
    wanted = set(op_ids)
    out = []
    for m in own_manifests(ctx):
        if m.get("op_id") not in wanted or m.get("kind") != "reduce" or m.get("outcome") != Outcome.ROLLED_BACK:
            continue
        files = [f for f in m.get("files") or [] if isinstance(f, dict)]
        same = 0
        for f in files:
            try:
                p = contained(ctx.logdir, f.get("path"))
            except UnsafePath:
                continue
            if real_within(p, ctx.logdir) and is_regular(p) and isinstance(f.get("sha256"), str) and \
                    isinstance(f.get("size"), int) and file_matches(p, f["sha256"], f["size"]):
                same += 1
        untouched = same == len(files)
        detail = ("stopped at its next step by the interrupt and rolled back before the commit point"
                  + ("" if untouched else "; not every file has its sha256 from before"))
        out.append(dict(op_id=m["op_id"], run=m.get("run"), action=Recovery.ROLLED_BACK, code=Recovery.ROLLED_BACK,
                        detail=detail, untouched=untouched, files=len(files)))
        if book is not None and isinstance(m.get("run"), str):
            try:  # the run is to do again, not a failure (a resumed batch retries either)
                book.mark(m["run"], "pending", op_id=m["op_id"], verified=False, code=Recovery.ROLLED_BACK,
                          error=f"interrupted; {detail}")
            except OSError:
                pass  # the ledger is a record: the run's state on disk stands
    return out


def open_ledger(ctx: Context, ledger: Optional[str], policy_name: str,
                shard: Optional[Tuple[int, int]] = None) -> Optional[Ledger]:
    """The batch ledger (``"default"``: ``<state>/ledger.json``, or the shard's own), only inside
    the logdir or the vault."""
    if not ledger:
        return None
    path = ledger_path(ctx.state, shard) if ledger == "default" else os.path.abspath(ledger)
    if not (is_within(path, ctx.logdir) or is_within(path, ctx.vault.root)):
        raise ValueError(f"ledger {path} must be inside the logdir or the backup vault")
    return Ledger(path, policy_name, ctx.logdir, shard=sharding.label(shard))

