"""Settling what was left unfinished: the recovery every changing verb runs first, what is
unfinished and damaged (read-only), and what a reduce stopped by Ctrl-C settles and says
(``Interrupted``). Each asks the logdir's engine (``engine.front``), local or bucket alike.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.recovery import RecoveryOutcome
from tb_footprint_plugin.plan.policies import get_policy


def recover_logdir(logdir: str, backup_dir: Optional[str] = None, *, thorough: bool = True) -> List[RecoveryOutcome]:
    """What every start does (``tb-footprint recover``): settle unfinished operations (rolled
    back, or finished when their swap was recorded), rebuild lost manifests from the vault's
    log, finish killed purges, sweep scratch space of ended processes, salvage records written
    into backups after their reduction, release backups a restore kept on doubt once nothing
    claims them, and record as done the runs a gone worker's ledger left in flight although
    they committed; then, ``thorough`` (the verb's), what a start does not pay for: a remote
    vault's damaged index rebuilt (``Engine.recover``). Each outcome has an action and a code."""
    return open_engine(logdir, backup_dir).recover(thorough=thorough)


def adopt_moved_state(logdir: str) -> Optional[dict]:
    """Bind the state folder of ``logdir`` to it again after the logdir was moved to another
    filesystem (a new inode), its id kept, so its retirements and backups are its own again
    (``tb-footprint recover --adopt-moved-state``; ``Engine.adopt_moved_state``). None when
    there was nothing to adopt; refused with ``ValueError`` and nothing changed (``trust.Untrusted``,
    ``foreign_state``, when the logdir the state was made for still stands: a copy; a bucket's
    state is bound by its URL, not an inode)."""
    return open_engine(logdir, lazy=True).adopt_moved_state()


def unfinished(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations and damage, found without changing anything, and the command that
    settles them: ``{unfinished_operations, problems, settle_command}`` (problems carry a
    ``codes.Finding``; ``settle_command`` is None when all is well)."""
    return open_engine(logdir, backup_dir).unfinished()


def pending_operations(logdir: str) -> List[str]:
    """Ids of unfinished operations (journals left behind), oldest first; nothing is settled."""
    return open_engine(logdir, lazy=True).pending_operations()


def interrupted_state(logdir: str, backup_dir: Optional[str] = None) -> List[dict]:
    """Each unfinished operation said plainly, read-only: ``{op_id, run, kind, untouched, files,
    changed}``. ``untouched`` is True when the run's files were never swapped (no swap record) and
    every backed-up file still has the sha256 it had before; False when some file differs (the
    settle command puts the originals back); None when the journal does not tell (not a reduce).
    Journals are untrusted input: a path leading out of the logdir counts as not verified."""
    return open_engine(logdir, backup_dir, lazy=True).interrupted_state()


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
    files, kind}`` (``kind`` ``"reduce"`` for a reduction, else what was settled is in
    ``detail``); ``untouched`` is checked after the fact (every backed-up file's sha256 equal to
    the one it had before the reduce)."""
    return open_engine(logdir, backup_dir).settle_interrupted(policy_name=get_policy(policy).name, ledger=ledger,
                                                              shard=shard, rolled_back=rolled_back)


