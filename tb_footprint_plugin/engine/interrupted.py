"""What an interrupted reduce left, said plainly: each unfinished operation's journal read (untrusted
input) and the files it backed up checked against their sha256 (``interrupted_rows``), and the
rows of the operations a batch's worker threads rolled back themselves at the interrupt
(``rolled_back_rows``). Used by ``LocalEngine.interrupted_state`` and ``settle_interrupted``.
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

from tb_footprint_plugin.codes import Outcome, Recovery
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.journal import pending_journals
from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.engine.putback import holds_original
from tb_footprint_plugin.storage.paths import contained, is_within, state_dir, UnsafePath
from tb_footprint_plugin.storage.store import Store
from tb_footprint_plugin.storage.store_posix import PosixStore


def journal_records(logdir: str) -> List[Tuple[object, List[dict]]]:
    """``(journal, its records)`` of every unfinished operation of the logdir, oldest first."""
    base = os.path.abspath(logdir)
    return [(j, j.records()) for j in pending_journals(os.path.join(state_dir(base), "journal"))]


def interrupted_rows(logdir: str) -> List[dict]:
    """``{op_id, run, kind, untouched, files, changed}`` per unfinished operation. ``untouched`` is
    True when the run's files were never swapped (no swap record) and every backed-up file still
    has the sha256 it had before; False when some file differs (the settle command puts the
    originals back); None when the journal does not tell (not a reduce). A path leading out of
    the logdir counts as not verified."""
    base = os.path.abspath(logdir)
    out = []
    store: Optional[Store] = None
    for j, recs in journal_records(base):
        begin = recs[0] if recs and recs[0].get("type") == "begin" else {}
        row = {"op_id": j.op_id, "run": begin.get("run"), "kind": begin.get("kind"), "untouched": None,
               "files": 0, "changed": []}
        if begin.get("kind") == "reduce":
            backups = [r for r in recs if r.get("type") == "backup"]
            swapped = any(r.get("type") in ("swap", "swapped", "commit") for r in recs)
            store = store or PosixStore(base)
            changed = [str(r.get("path")) if _outside(base, r.get("path")) else r.get("path")
                       for r in backups if not same_file(base, r, store)]
            row.update(untouched=not swapped and not changed, files=len(backups), changed=changed)
        out.append(row)
    return out


def _outside(base: str, rel) -> bool:
    try:
        contained(base, rel)
    except UnsafePath:
        return True
    return False


def same_file(base: str, r: dict, store: Optional[Store] = None) -> bool:
    """Whether the file a journal or manifest record names (untrusted: a path leading out of the
    logdir is not verified) still has the sha256 and size it records: ``putback.holds_original``
    through the logdir's store (``store``, else one made for ``base``), the file itself never a
    link; a folder on the way that is a link is followed only while it stays in the logdir."""
    try:
        p = contained(base, r.get("path"))
    except UnsafePath:
        return False
    root = os.path.realpath(base)
    real = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
    if not is_within(real, root):
        return False
    return holds_original(store if store is not None else PosixStore(base), os.path.relpath(real, root), r)


def rolled_back_rows(ctx: Context, manifests: List[dict], op_ids: Sequence[str],
                              book: Optional[Ledger]) -> List[dict]:
    """``settle_interrupted``'s rows of the operations a worker thread rolled back itself at the
    interrupt: untouched when every original its manifest names has its sha256 from before (the
    manifest is untrusted input: a path leading out of the logdir counts as not verified); the
    ledger says the run is pending again (code ``rolled_back``), as for a run recovery settled."""
    if not op_ids:
        return []
    wanted = set(op_ids)
    out = []
    for m in manifests:
        if m.get("op_id") not in wanted or m.get("kind") != "reduce" or m.get("outcome") != Outcome.ROLLED_BACK:
            continue
        files = [f for f in m.get("files") or [] if isinstance(f, dict)]
        untouched = sum(1 for f in files if same_file(ctx.logdir, f, ctx.store)) == len(files)
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


__all__ = ["interrupted_rows", "journal_records", "rolled_back_rows", "same_file"]
