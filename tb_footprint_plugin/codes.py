"""Codes for outcomes and reasons: what programs branch on. The prose next to them is for people.

Every member is a ``str`` whose value is what JSON outputs, ledgers and manifests carry, so a
code compares equal to its plain string (``Outcome.VERIFIED == "verified"``) and old records
with plain strings read the same.
"""
from __future__ import annotations

from enum import Enum


class Code(str, Enum):
    """A ``str`` enum that formats as its value on every Python version."""

    __str__ = str.__str__
    __format__ = str.__format__


class Outcome(Code):
    """What happened to one run (``RunOutcome.status``)."""

    VERIFIED = "verified"
    ROLLED_BACK = "rolled_back"
    SKIPPED = "skipped"
    FAILED = "failed"
    DRY_RUN = "dry_run"
    RESTORED = "restored"


class Skip(Code):
    """Why a run is left alone (``RunPlan.code``, ``RunOutcome.code`` of a skipped run)."""

    ACTIVE = "active"  # recent writes: the run is still being written
    NOTHING = "nothing_to_reduce"  # the policy changes nothing in this run
    LOCKED = "locked"  # another process is changing the run
    LEDGER_DONE = "already_in_ledger"  # a resumed batch already settled this run
    CANCELLED = "cancelled"  # the batch was cancelled before this run started
    NOT_IN_PLAN = "not_in_plan"  # the run changed since the plan the user confirmed
    NOT_A_RUN = "not_a_run"  # files TensorBoard attributes to no run
    ALREADY_RESTORED = "already_restored"  # the operation was restored before: its originals are back


#: Skips that pass with time: a resumed batch tries these runs again.
PASSING_SKIPS = frozenset({Skip.ACTIVE, Skip.LOCKED})


class Failure(Code):
    """Why a run failed or was rolled back (``RunOutcome.code``)."""

    REFUSED = "refused"  # a preflight check refused the run (symlink, changed file, permissions, space)
    LOCK_ERROR = "lock_error"  # the run's lock file could not be taken
    UNSETTLED = "unsettled_operation"  # an earlier operation on the run is still unfinished
    ERROR = "error"  # a step failed; the run was rolled back
    ROLLBACK_INCOMPLETE = "rollback_incomplete"  # retried by recovery on the next start
    RESTORE_BLOCKED = "restore_blocked"  # a newer operation, a purged or damaged backup
    INTERRUPTED = "interrupted"  # a restore stopped midway; finished on the next start


class Recovery(Code):
    """What recovery did with an unfinished operation (``RecoveryOutcome.action``)."""

    ROLLED_BACK = "rolled_back"
    COMPLETED = "completed"
    SKIPPED_LIVE = "skipped_live"
    FAILED = "failed"


__all__ = ["Code", "Outcome", "Skip", "PASSING_SKIPS", "Failure", "Recovery"]
