"""A run's reduce on a disk refuses before anything is written (``preflight``): what the plan
assumed no longer holds, or the reduce could not finish safely (space, permissions, a writer).

``check_writers`` is also the reduce's last look before its swap (``transaction.LocalReduce``).
"""
from __future__ import annotations

import os
import stat
import time

from tb_footprint_plugin.codes import Failure, Finding, Outcome, Skip
from tb_footprint_plugin.engine.context import Context, TransactionError, check_space, no_symlink
from tb_footprint_plugin.engine import txn
from tb_footprint_plugin.engine.history import changes_since
from tb_footprint_plugin.engine.standing import entries_at, writers_at
from tb_footprint_plugin.plan import owners
from tb_footprint_plugin.plan.model import RunPlan
from tb_footprint_plugin.plan.planner import active_reason, newest_write
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.openfiles import describe_holders
from tb_footprint_plugin.storage.paths import is_within, real_within
from tb_footprint_plugin.storage.regular import kind_of


def preflight(ctx: Context, rp: RunPlan, link_backups: bool = True) -> None:
    """Refuse the run (``TransactionError`` with its code) before anything is written: another
    operation changed it since the plan, it leads out of the logdir, an event file is unreadable,
    it is still being written, a planned file changed or is not a regular file, the run's folder
    or a planned file is another user's now and the plan was made without the opt-in
    (``plan.owners``, review R12 H2), a folder is not
    writable, the logdir or the vault lacks the space, or a process holds a file open for writing.
    ``link_backups``: the backups may be hard links (the swap strategy's), which need no space in a
    vault on the same filesystem; else each backup is a copy, counted whole."""
    run_dir = ctx.abs(rp.run)
    _changed_by_other(ctx, rp)
    if not real_within(run_dir, ctx.logdir) or os.path.islink(run_dir):
        raise TransactionError(f"run {rp.run!r} is a symlink or leads out of the logdir; left alone")
    mtimes = []
    try:  # walked as the writer check walks it: a folder swapped for a link is a name, never a way
        for e in entries_at(ctx, rp.run, [ctx.state]):
            fsops.op()  # paced as the lstat of each file it does was
            if stat.S_ISREG(e.st.st_mode) or stat.S_ISLNK(e.st.st_mode):  # as the scan counts them
                mtimes.append((e.path, e.st.st_mtime))
    except txn.Refused as e:  # a link on the way to the run
        raise TransactionError(e.reason, e.code or Failure.REFUSED) from None
    # verification reads every event file of the run: one it cannot read is named up front
    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else ():
        p = os.path.join(run_dir, name)
        if cat.is_event_file_name(name) and os.path.isfile(p) and not os.access(p, os.R_OK):
            raise TransactionError(f"{os.path.relpath(p, ctx.logdir)}: not readable (permission denied); the run "
                                   "cannot be verified without it, nothing was changed", Failure.REFUSED)
    active = active_reason(newest_write(mtimes, ctx.closed_files), ctx.quiet_period, time.time())
    if active:
        raise TransactionError(f"run {rp.run!r} is {active}", Skip.ACTIVE)
    need_logdir = 0
    need_vault = 0
    try:  # the owner rule asked again here, of what stands now: a chown since the plan; the root
        # run's folder is the logdir itself, whose owner is no run's (review R13 F3, as the scan says)
        if rp.run != ".":
            _check_owner(rp, os.lstat(run_dir).st_uid)
    except FileNotFoundError:  # gone: each planned file says so below
        pass
    for a in rp.actions:
        p = ctx.abs(a.path)
        if not is_within(p, ctx.logdir) or not real_within(os.path.dirname(p), ctx.logdir):
            raise TransactionError(f"{a.path}: leads out of the logdir; refusing")
        no_symlink(ctx, a.path)
        if a.new_path and a.new_path != a.path and os.path.lexists(ctx.abs(a.new_path)):
            raise TransactionError(f"{a.new_path}: already exists; it would be overwritten")
        if a.kind == "remove_dir":
            continue
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            raise TransactionError(f"{a.path}: no longer exists (scan is stale); rescan and plan again",
                                   Failure.REFUSED) from None
        if not stat.S_ISREG(st.st_mode):
            raise TransactionError(f"{a.path}: is {kind_of(st.st_mode)}, not a regular file; refusing",
                                   Skip.NOT_REGULAR)
        _check_owner(rp, st.st_uid)
        if st.st_size != a.bytes_before:
            raise TransactionError(f"{a.path}: changed since the scan ({a.bytes_before} → {st.st_size} bytes)")
        if not os.access(p, os.R_OK):
            raise TransactionError(f"{a.path}: not readable (permission denied)")
        d = os.path.dirname(p)
        if not os.access(d, os.W_OK | os.X_OK):
            raise TransactionError(f"{os.path.relpath(d, ctx.logdir)}: directory not writable (permission denied)")
        if a.kind in ("compress", "rewrite"):
            need_logdir += a.bytes_before if a.kind == "rewrite" else max(a.bytes_after * 2, 1 << 16)
        if not (link_backups and ctx.vault.same_filesystem(p)):
            need_vault += a.bytes_before
    check_space(ctx.logdir, need_logdir)
    os.makedirs(ctx.vault.root, exist_ok=True)
    check_space(ctx.vault.root, need_vault)
    check_writers(ctx, rp)


def check_writers(ctx: Context, rp: RunPlan) -> None:
    """Leave the run alone while a process on this machine holds one of its files open for
    writing: its next records would go into the inode the swap takes away."""
    try:  # every depth, no link followed: each file asked about through its folder's descriptor
        found = writers_at(ctx, rp.run, [ctx.state, ctx.vault.root])
    except txn.Refused as e:  # a link on the way to the run
        raise TransactionError(e.reason, e.code or Failure.REFUSED) from None
    if found.holders:
        raise TransactionError(f"run {rp.run!r} is being written: " + describe_holders(found.holders)
                               + "; left alone", Skip.OPEN_FOR_WRITING)


def _check_owner(rp: RunPlan, uid: int) -> None:
    # the scan's verdict may be minutes (the tab's kept scan) or hours (a batch's turn) old
    others = owners.held_by_other((uid,), rp.include_others_runs, "reduces")
    if others:
        raise TransactionError(others[1], Skip.OTHERS_RUN)


def _changed_by_other(ctx: Context, rp: RunPlan) -> None:
    """Another operation on the run (another reducer, a restore) since this plan was made: say
    so plainly instead of finding its traces ('no longer exists', 'changed since the scan')."""
    if not rp.planned_at:
        return
    changed = (Outcome.VERIFIED, Outcome.RESTORED, Finding.LATE_WRITES_SALVAGED)  # not a rolled-back one
    later = changes_since(ctx.state, rp.run, rp.planned_at, changed)
    if later:
        e = later[-1]
        raise TransactionError(f"run {rp.run!r} was changed by another process since it was planned "
                               f"({e.get('kind')} {e['op_id']} by {e.get('user')}@{e.get('host')}); plan again",
                               Skip.CHANGED_BY_OTHER)


__all__ = ["check_writers", "preflight"]
