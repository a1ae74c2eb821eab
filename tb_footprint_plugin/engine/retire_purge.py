"""Purge retired runs from a disk's vault: a retired run's vault copy (``retired/<op_id>/``) goes
for good, after the grace period and the user's confirmation (``purge.purge_backups`` runs it
after the reductions' backups).

It is this store's steps of the one purge (``purge_run``), ``DiskRetired``: one ``txn.Purge`` on
the one driver per vault over the retirements chosen in it, their runs' locks held since the
choice:

- its intent, the commit record (``record("swap")``): each retirement's manifest, read again
  under its run's lock (an unretire or another purge may have finished since the list was read:
  review R19 P2), marked purged (``backup_purged``, ``purged_at``, and ``LINE_FIRST``), then
  ``purge.intent``. The driver's last cancel check comes right before: a cancel is honoured with
  nothing marked or deleted (``stopped``), never after;
- **swap** (``delete``): each retired run's files deleted (``purge.blob`` after each run);
- **commit** (``settle``): per run its change-log line, then its emptied folder removed.

Never rolled back. A purge killed past its intent (by this code or by the one before it, which
marked the manifest then deleted the folder, the same record) leaves a manifest marked purged
whose folder is still there: the next start finishes it (``finish_retired_purges``), files, line
and folder; the folder goes last, so a line already written is never written again. The one
before it wrote the lines after every folder went: a retirement it marked whose folder is gone
and which lacks ``LINE_FIRST`` gets its line then if the change log has none (review R19 P1).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from typing import Callable, FrozenSet, Iterator, List, Optional

from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults, purge_run, txn
from tb_footprint_plugin.engine.catalogue import known_vaults
from tb_footprint_plugin.engine.context import Context, TransactionError, reason_of
from tb_footprint_plugin.engine.health import VaultRoots, purged_retirement, retired_purge_unfinished
from tb_footprint_plugin.engine.history import append_history, logged_operations, purge_line, purge_mark, purge_reason
from tb_footprint_plugin.engine.journal import RunLocked
from tb_footprint_plugin.engine.purge_choice import PurgeChoice, PurgeFilter, held_runs, kept_row
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.engine.purge_rules import kept_by_restore, lost_files, others_of
from tb_footprint_plugin.engine.retire_tree import (check_retired_dir, is_restorable_retirement, retired_dir,
                                                   retirements, stored_problems, tree_size)
from tb_footprint_plugin.engine.run_lock import run_lock
from tb_footprint_plugin.engine.vault import Vault


#: set in a retirement's manifest with its purge mark (``DiskRetired.intent``): that purge
#: writes the run's change-log line before its folder goes, so a folder gone says the line is
#: there. A manifest marked purged without it (an earlier version deleted the folder, then wrote
#: the line) is looked up in the change log once by ``finish_retired_purges``, then marked.
LINE_FIRST = "purge_line_first"


class DiskRetired(purge_run.PurgeLayout):
    """A disk's retired runs in the one purge (``purge_run``; module doc): chosen by the rule a
    reduction's purge chooses by (``purge_choice``: a run being changed right now — locked, or
    its lock not taken — or with an unfinished operation is passed over and listed in ``kept``
    with its code; a restored one whose restore left an original in the vault, ``not_restored``,
    is kept whole, listed with that code: ``purge_rules.kept_by_restore``), each manifest read
    again under its run's lock; one transaction per vault:
    the marks its intent, the files its deletes, the lines and the emptied folders its settling.
    A failure past the intent propagates as it always did (an injected fault as a crash), the
    marks left for the next start (``finish_retired_purges``)."""

    def __init__(self, ctx: Context, now: float, manifests: Optional[List[dict]] = None,
                 roots: Optional[VaultRoots] = None) -> None:
        """``manifests``, ``roots``: a start's one read and the known vaults, where it finishes
        killed purges (``finish_retired_purges``)."""
        self.ctx, self.now, self.manifests, self.roots = ctx, now, manifests or [], roots
        self.logged: Optional[FrozenSet[str]] = None

    def line_written(self, op_id: str) -> bool:
        """Whether the change log has the purge line of ``op_id``: one read of it for every
        retirement of this start; one it cannot read has no line (``ChangeLog.logged``: written
        again rather than none, never a failure retried at every start: review R11)."""
        if self.logged is None:
            self.logged = logged_operations(self.ctx.state, kind="purge")
        return op_id in self.logged

    @contextlib.contextmanager
    def choose(self, which: PurgeFilter, yes: bool) -> Iterator[purge_run.Chosen]:
        ctx = self.ctx
        # never deleted through a link or a stranger's folder: health names it
        found = [m for m in retirements(ctx) if which.admits(m) and _own_folder(Vault(m["vault"]), m)]
        # each retirement in the vault it was listed in: a manifest read again is not asked where it is
        where = {m["op_id"]: Vault(m["vault"]) for m in found}

        def size_of(m: dict) -> int:
            return tree_size(retired_dir(where[m["op_id"]], m["op_id"]))

        def fresh(m: dict) -> Optional[dict]:
            # read again under its run's lock: an unretire or another purge may have finished since
            # the list was read, and the copy marked purged is written whole (review R19 P2)
            vault = where[m["op_id"]]
            again = _still_purgeable(vault, m)
            return again if again is not None and _own_folder(vault, again) else None

        # a restore that met another file at a path left that original in the vault, its only
        # copy (``not_restored``): the whole retirement is kept, and the listing says why, as a
        # bucket's purge says it (a copy read again under the lock as restored is passed over by
        # ``fresh``, never deleted)
        held = [(m, kept_by_restore(m)) for m in found]
        found = [m for m, why in held if why is None]
        with PurgeChoice(ctx, yes) as choice:
            choice.kept += [kept_row(m, size_of(m), Finding.NOT_RESTORED, why) for m, why in held if why is not None]
            ms = choice.choose(found, size_of, fresh, check=lambda m: _stored_changed(m, size_of))
            # the vault holds a retired run's only copy: every file of it is lost for good
            rows = [{"op_id": m["op_id"], "run": m["run"], "bytes": size_of(m), "finished_at": m.get("finished_at"),
                     "restored": bool(m.get("restored_by")), "kind": "retire",
                     "originals": 0 if m.get("restored_by") else len(m.get("tree", [])),
                     # the whole tree goes, its folders too: a run folder of theirs holding files of yours is theirs
                     "others": others_of(lost_files(m, lambda f: True, "tree") + lost_files(m, lambda f: True, "dirs"))}
                    for m in ms]
            if not yes:  # listed in the order chosen
                groups = [purge_run.Group(ms, rows)]
            else:
                groups = list(purge_run.groups_of(ms, rows, lambda m: where[m["op_id"]].root))
                for g in groups:
                    g.plan = where[g.manifests[0]["op_id"]]
            yield purge_run.Chosen(groups, choice.kept)

    def intent(self, group: purge_run.Group) -> int:
        """Each manifest marked purged, before any file goes: from here on no restore points at
        the run's copy, and the next start finishes the purge."""
        n = 0
        for m in group.manifests:
            m["backup_purged"] = True
            m["purged_at"] = self.now
            m[LINE_FIRST] = True
            group.plan.write_manifest(m)
            n += 1
        return n

    def delete(self, group: purge_run.Group, report: txn.Report) -> None:
        """Each retired run's files deleted (its folder stays until its line is written); the
        folders from the vault down looked at again first: one a link or a stranger's now is
        left as it is (health names it), never deleted through."""
        group.done = set()  # retirements whose folder became a link or a stranger's: not deleted
        for m in group.manifests:
            try:
                check_retired_dir(group.plan, m["op_id"])
            except TransactionError:
                group.done.add(m["op_id"])
                continue
            drop_files(group.plan, m["op_id"])
            faults.hit("purge.blob")

    def settle(self, group: purge_run.Group, report: txn.Report) -> None:
        """Per run its change-log line, then its emptied folder removed."""
        for m, row in zip(group.manifests, group.rows):
            if m["op_id"] in group.done:
                continue
            log_retired_purge(self.ctx, m, row["bytes"])
            drop_folder(group.plan, m["op_id"])

    def killed(self) -> List[purge_run.Killed]:
        """Verified retirements marked purged (not by a restore) whose folder is still there."""
        return [purge_run.Killed(m["op_id"], m["run"], m=m) for m in self.manifests
                if retired_purge_unfinished(m, self.roots)]

    def holding(self) -> contextlib.AbstractContextManager:
        return held_runs(self.ctx)

    def finish(self, killed: List[purge_run.Killed]) -> List[purge_run.Finished]:
        """Each manifest read again (its run held): its files deleted, its line written unless the
        log has it, ``LINE_FIRST`` set before its folder goes (its absence then says the line is
        there), the folder removed. A failure is that retirement's, retried at the next start."""
        out = []
        for k in killed:
            vault = Vault(k.m["vault"])
            try:
                fresh = vault.read_manifest(k.op_id)
                if not fresh.get("backup_purged") or fresh.get("restored_by"):
                    continue
                try:
                    check_retired_dir(vault, k.op_id)
                except TransactionError:
                    continue  # never deleted through a link or a stranger's folder: health names it
                size = fresh.get("bytes_before")
                if not isinstance(size, int):
                    size = tree_size(retired_dir(vault, k.op_id))
                drop_files(vault, k.op_id)
                if not self.line_written(k.op_id):
                    log_retired_purge(self.ctx, fresh, size, " (finished on recovery)")
                if not fresh.get(LINE_FIRST):
                    fresh[LINE_FIRST] = True
                    vault.write_manifest(fresh)
                drop_folder(vault, k.op_id)
                out.append(purge_run.Finished(k.op_id, k.run, size, f"an interrupted purge of retired run {k.run} "
                                                                    f"({k.op_id}) was finished", m=fresh))
            except (OSError, ValueError) as e:  # retried at the next start
                out.append(purge_run.Finished(k.op_id, k.run, code=Finding.RECOVERY_FAILED,
                                              detail=f"interrupted purge of retired run {k.run} not finished: "
                                                     f"{reason_of(e)}"))
        return out


#: what a retirement's stored files may show that keeps it from a purge (``stored_problems``): records a
#: writer appended after the retirement, a file changed in place, one gone or cut short — the vault
#: holds the only copy of those bytes, which nobody asked to give up (review R9 F3); a name shared
#: with another inode (``backup_shared``) loses nothing when the vault's goes
_KEEPS = (Finding.LATE_WRITES_KEPT, Finding.BACKUP_CHANGED, Finding.BACKUP_DAMAGED)


def _stored_changed(m: dict, size_of: Callable[[dict], int]) -> Optional[dict]:
    """The ``kept`` row of a retirement whose stored files are not as it recorded them (one lstat a
    file, read under the run's lock: ``PurgeChoice.choose``'s ``check``), else None."""
    found = [(code, words) for code, _path, words in stored_problems(m) if code in _KEEPS]
    if not found:
        return None
    code, words = found[0]
    return kept_row(m, size_of(m), code, f"{words}; kept" + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))


def _own_folder(vault: Vault, m: dict) -> bool:
    """Whether retirement ``m``'s folder is the vault's own (no link, no stranger's)."""
    try:
        check_retired_dir(vault, m["op_id"])
    except TransactionError:
        return False
    return True


def _still_purgeable(vault: Vault, m: dict) -> Optional[dict]:
    """Retirement ``m``'s manifest as it is now (read under its run's lock), or None when it is
    no longer a retirement whose copy a purge may take (restored, purged, unreadable: a
    damaged one is named by ``health``)."""
    try:
        fresh = vault.read_manifest(m["op_id"])
    except (OSError, ValueError):
        return None
    return fresh if is_restorable_retirement(fresh) and fresh.get("run") == m["run"] else None


def drop_files(vault: Vault, op_id: str) -> None:
    """Everything under a purged retirement's folder deleted, the folder itself kept (its mark
    that the change-log line may still be due); what cannot be deleted stays, for the next start."""
    d = retired_dir(vault, op_id)
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(d):
            p = os.path.join(d, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(p)


def drop_folder(vault: Vault, op_id: str) -> None:
    """A purged retirement's emptied folder removed (one not empty stays, for the next start)."""
    with contextlib.suppress(OSError):
        os.rmdir(retired_dir(vault, op_id))


def log_purge(ctx: Context, op_id: str, run: str, freed: int, reason: str) -> None:
    """A purge's change-log line (a purge is a change too): which operation's vault copy went,
    what it freed and why (``reason``), who purged with which version: the one shape of every
    purge's line on every store (``history.purge_line``; a bucket's is read from its manifest)."""
    append_history(ctx.state, purge_line(op_id, run, freed, purge_mark(reason)))


def log_retired_purge(ctx: Context, m: dict, freed: int, reason_tail: str = "") -> None:
    """The change-log line of a retired run's purge: which retirement went and what it freed."""
    log_purge(ctx, m["op_id"], m["run"], freed, purge_reason(m, m.get("vault") or "") + reason_tail)


def finish_retired_purges(ctx: Context, manifests: List[dict]) -> List[RecoveryOutcome]:
    """Finish the purges of retired runs killed past their intent (``purge_run.finish_killed``
    over ``DiskRetired``): a verified retirement marked purged (not by a restore) whose folder is
    still in the vault. Under its run's lock, the manifest read again: its files deleted, its
    change-log line written unless the log has it (the kill came after the line), its folder
    removed. And one whose folder is gone but whose manifest lacks ``LINE_FIRST`` (a purge of an
    earlier version, which deleted the folder before the line: review R19 P1): its line written
    unless the log has it, then the mark set, so the change log is read for it once.
    ``manifests``: the start's one read (``catalogue.own_manifests``); a folder is looked for only
    for a retirement marked purged."""
    if not any(m.get("kind") == "retire" and m.get("backup_purged") for m in manifests):
        return []  # no file read at a start with no purged retirement
    roots = VaultRoots(known_vaults(ctx))  # once per start: every purged retirement is asked of, for good
    layout = DiskRetired(ctx, time.time(), manifests=manifests, roots=roots)
    unsure = [m for m in manifests if _line_unsure(m, roots)]
    out = purge_run.outcomes(purge_run.finish_killed(layout))
    for m in unsure:
        out += _settle_line(ctx, m, layout.line_written)
    return out


def _line_unsure(m: dict, roots: VaultRoots) -> bool:
    """Whether manifest ``m`` is a purged retirement (``health.purged_retirement``) whose folder is
    gone and which does not say its line came before that (``LINE_FIRST``): a purge of an earlier
    version, whose line may be missing."""
    return (not m.get(LINE_FIRST) and purged_retirement(m, roots)
            and not os.path.lexists(retired_dir(Vault(m["vault"]), m["op_id"])))


def _settle_line(ctx: Context, m: dict, line_written: Callable[[str], bool]) -> List[RecoveryOutcome]:
    """The line of an earlier version's retired purge whose folder is gone (``_line_unsure``),
    under its run's lock: written when the log has none (the kill came between the folder and
    the line), then ``LINE_FIRST`` set. Said only when a line was written or could not be: a run
    locked, a log or manifest this user cannot read or write, is left quietly for a later start."""
    vault = Vault(m["vault"])
    try:
        lock = run_lock(ctx, m["run"]).acquire()
    except (RunLocked, OSError):
        return []
    try:
        try:
            fresh = vault.read_manifest(m["op_id"])
            if not _line_unsure(fresh, VaultRoots([vault.root])):
                return []
            due = not line_written(m["op_id"])
        except (OSError, ValueError):
            return []
        try:
            if due:
                size = fresh.get("bytes_before")
                log_retired_purge(ctx, fresh, size if isinstance(size, int) else 0, " (finished on recovery)")
            fresh[LINE_FIRST] = True
            vault.write_manifest(fresh)
        except (OSError, ValueError) as e:
            if not due:
                return []
            return [RecoveryOutcome(m["op_id"], m["run"], Recovery.FAILED,
                                    f"the purge of retired run {m['run']} ({m['op_id']}) has no change-log line; "
                                    f"not written: {reason_of(e)}", Finding.RECOVERY_FAILED)]
        if not due:
            return []
        return [RecoveryOutcome(m["op_id"], m["run"], Recovery.COMPLETED,
                                f"an interrupted purge of retired run {m['run']} ({m['op_id']}) was finished "
                                "(its change-log line written)", Finding.PURGE_FINISHED)]
    finally:
        lock.release()


__all__ = ["DiskRetired", "LINE_FIRST", "finish_retired_purges", "log_purge"]
