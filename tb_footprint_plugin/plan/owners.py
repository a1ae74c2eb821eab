"""Whose run it is: the one rule of every verb that changes or moves a run (reduce, retire, the tab).

A run is another user's when its folder (never the logdir's own, the root run's: the folder the
user named, often a team folder of the lead's, review R13 F3), or a file the plan would change,
move or retire, is owned by another uid than the one running the tool (the scan's ``RunFootprint.uid`` and
``FileEntry.uid``, set only then: no syscall here). Such a run is left alone by default with
``Skip.OTHERS_RUN`` (review R10 F8: in a team logdir whose runs others may write, a teammate's
reduce took a run into the teammate's private vault; its owner was never told and could not
restore it). Root too: "yours" is the effective uid, so root opts in as anyone does. Taken with
``include_others_runs``, the run's outcome says whose vault now holds it. A bucket has no owners.
"""
from __future__ import annotations

import functools
import os
import pwd
from typing import Collection, Iterable, Optional, Sequence, Tuple

from tb_footprint_plugin.scan.model import RunFootprint

#: what the opt-in is called where people type it (the CLI's flag; the API's ``include_others_runs``)
OPT_IN = "--include-others-runs"


@functools.lru_cache(maxsize=1024)
def user_label(uid: int) -> str:
    """``alice (uid 1001)``, or ``uid 1001`` for a uid with no name here."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return f"uid {uid}"
    return f"{name} (uid {uid})"


def others_uid(run: RunFootprint, paths: Optional[Collection[str]] = None) -> Optional[int]:
    """Another user's uid owning the run's folder or, of its files, one in ``paths`` (None: any
    file of the run); None when all of those are the invoker's (or nobody's: a bucket)."""
    if run.uid is not None:
        return run.uid
    for f in run.files:
        if f.uid is not None and (paths is None or f.path in paths):
            return f.uid
    return None


def others_uid_changed(run: RunFootprint, actions: Sequence) -> Optional[int]:
    """``others_uid`` of the run's folder and the files ``actions`` (a run plan's) change or move;
    None at once, with nothing built, for a run all the invoker's (the usual case)."""
    if not actions or others_uid(run) is None:
        return None
    return others_uid(run, {a.path for a in actions})


def others_uid_of(runs: Iterable[RunFootprint]) -> Optional[int]:
    """``others_uid`` over whole runs (a retirement moves each run's whole tree)."""
    return next((u for u in (others_uid(r) for r in runs) if u is not None), None)


@functools.lru_cache(maxsize=1024)
def left_alone(uid: int, verb: str) -> str:
    """Why a run of ``uid`` is left alone (``verb``: "reduces", "retires")."""
    return (f"owned by {user_label(uid)}: its owner {verb} it; nothing changed (your vault would hold "
            f"its originals, out of its owner's reach: {OPT_IN} takes it anyway)")


def held_by_other(uids: Iterable[int], include_others_runs: bool, verb: str) -> Optional[Tuple[int, str]]:
    """The engine's look under the run's lock: ``uids`` are the st_uid it just read of the run's
    folder and of the files it changes or moves. (uid, why) of the first not the invoker's when
    the plan was made without the opt-in: the run is left alone (``Skip.OTHERS_RUN``); else None."""
    if include_others_runs:
        return None
    me = os.geteuid()
    uid = next((u for u in uids if u != me), None)
    if uid is None:
        return None
    return uid, (f"owned by {user_label(uid)} since the plan; nothing changed (its owner {verb} it; "
                 f"{OPT_IN} takes it anyway)")


def taken_ahead(uid: int) -> str:
    """What a plan says, before anyone says yes, of a run of ``uid`` it takes on request."""
    return (f"owned by {user_label(uid)}: taken on request ({OPT_IN}); its originals go into the vault "
            f"of {user_label(os.geteuid())} — tell its owner")


def taken(uid: int, vault: Optional[str]) -> str:
    """What a run of ``uid`` taken with the opt-in says: whose vault holds it now."""
    me = user_label(os.geteuid())
    where = f" {vault}" if vault else ""
    return (f"owned by {user_label(uid)}, taken on request ({OPT_IN}): its originals are in the vault of "
            f"{me}{where}; only {me}'s `restore` brings them back and {me}'s `purge` deletes them — tell its owner")


def not_given_back(files: Sequence[Tuple[str, int]]) -> str:
    """What a restore says of the files it put back (and folders it made again) that are now the
    restorer's while their backup recorded another owner (``files``: path, recorded uid; run by a user who is not root, only the
    group is given back): "" when none."""
    if not files:
        return ""
    shown = ", ".join(p for p, _u in files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    whose = ", ".join(user_label(u) for u in sorted({u for _p, u in files}))
    return (f"; {len(files)} file(s) or folder(s) put back are owned by {user_label(os.geteuid())}, not by {whose} as their "
            f"backup recorded (only root gives an owner back: root's `chown` can): {shown}")


__all__ = ["OPT_IN", "user_label", "others_uid", "others_uid_changed", "others_uid_of", "left_alone", "held_by_other",
           "taken_ahead", "taken", "not_given_back"]
