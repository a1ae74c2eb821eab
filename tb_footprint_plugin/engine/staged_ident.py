"""Which file at a reduce's staged name is the operation's own (review R27 F1/F3): the name is in
the run's folder, which others may write (a team folder without the sticky bit), so a file found
there is taken over, renamed into the run or removed by a rollback only while it is the one the
stage made: its inode and change time once taken over (the ``staged`` record's ``ident``), or the
(device, inode) this process made there (``storage.files.staged_here``)."""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage.files import only_ours_could_put, staged_here


def has_ident(s: dict) -> bool:
    """Whether a staged record carries the identity of the file the stage took over (``ident``)."""
    ident = s.get("ident")
    return isinstance(ident, list) and len(ident) == 2


def staged_replaced(s: dict, st: os.stat_result) -> bool:
    """Whether ``st`` is not the staged file its record names by inode and change time once taken
    over (``storage.files.take_over``; a record without them names none): a file made at that name
    since has another change time even where the filesystem gave it the freed inode again. Not the
    device: a restart may number a filesystem anew, and the name is in the run's own folder."""
    return has_ident(s) and [st.st_ino, st.st_ctime_ns] != s["ident"]


def staged_still(ctx: Context, tmp: str, s: Optional[dict], at: Tuple[int, str]) -> bool:
    """Whether the file at the staged name ``tmp`` (in the folder ``at``) may be removed as the
    operation's own: while it is the file the stage took over (``s``'s ``ident``: inode and change
    time, ``engine.swap``), or the one this process made there (``files.staged_here``), when either is
    known; else (a start after a kill, before the stage recorded it) only in a folder where no one
    else could have put it (``only_ours_could_put``). Another file put at that name by someone who
    may write the run's folder (a user's own file moved there) is left where it stands (review R27
    F3: the rollback removed it, its only copy)."""
    try:
        st = os.stat(at[1], dir_fd=at[0], follow_symlinks=False)
    except FileNotFoundError:
        return False
    if isinstance(s, dict) and has_ident(s) and not staged_replaced(s, st):
        return True
    # this process's own file still, though its change time moved since its record (a swap's
    # exchange put back after a refusal, ``swap._exchange_in``: review R28's note)
    made = staged_here(ctx.abs(tmp))
    if made is not None:
        return (st.st_dev, st.st_ino) == made
    if isinstance(s, dict) and has_ident(s):
        return False
    return only_ours_could_put(os.fstat(at[0]), st)


def stands_in(at: Tuple[int, str]) -> bool:
    """Whether anything stands at the name ``at[1]`` in the folder ``at[0]`` (a link not followed)."""
    try:
        os.stat(at[1], dir_fd=at[0], follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def left_at_staged_note(left: List[str]) -> str:
    """What a rollback says of the staged names ``placement.undo_new_name`` left holding a file that
    is not the operation's own; '' when none."""
    if not left:
        return ""
    return (f"{len(left)} file(s) this reduce did not make stand at its staged name(s), left where they are "
            f"(put there by someone who may write the run's folder), e.g. {left[0]}")


def left_at_temp_note(left: List[str]) -> str:
    """What a restore or a rollback says of the files ``swap.remove_put_back_temps`` left at its
    temporaries' names (one it cannot tell for its own, in a folder others may write); '' when none."""
    if not left:
        return ""
    return (f"{len(left)} file(s) at this operation's temporary names left where they are (it cannot tell them "
            f"for its own in a folder others may write; remove each that is nobody's), e.g. {left[0]}")


__all__ = ["has_ident", "left_at_staged_note", "left_at_temp_note", "staged_replaced", "staged_still", "stands_in"]
