"""What a purge asks for and how it says what it kept, on every store (issue #26 item 2): a
disk's purges (``purge.purge_backups``, ``retire_purge.DiskRetired``, through
``purge_choice``) and a bucket's (``bucket_purge.purge``) choose by these rules and report with
these rows; nothing here reads or writes a store.

- ``PurgeFilter``: which operations the caller asked for (``op``, ``run``, ``runs``, ``op_ids``,
  ``older_than`` against ``now``); a purged one is never asked for again, and one with no finish
  time is never old enough (a manifest is untrusted input: ``finished_at`` may be null).
- ``kept_row``: every ``kept`` row of a purge, one set of fields (``docs/json-schema.md``):
  ``op_id``, ``run``, ``kind`` (``reduce`` or ``retire``, the manifest's), ``bytes`` (what stays
  in the vault), ``code``, ``detail``, and what a row adds (``sha256`` of a blob kept).
- ``not_purged``: the row of an operation a cancel stopped before the purge's intent.
- ``kept_by_restore``: an operation whose restore or rollback left an original in the vault, its
  only copy (``not_restored``), kept whole and why.
- ``originals_lost``: how many of an operation's originals exist nowhere else once its backups
  go (a row's ``originals``; the report's ``originals_lost`` is their sum, what the CLI's and the
  tab's confirmation say is lost for good); ``lost_files`` the entries themselves, and
  ``others_of`` the other users whose files they are (a row's ``others``: a run of another user's
  taken on request, ``--include-others-runs``, whose only copy the purge destroys; the preview and
  the question name them before the yes).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, List, Optional

from tb_footprint_plugin.codes import Code
from tb_footprint_plugin.engine.catalogue_rules import is_rolled_back_keeping
from tb_footprint_plugin.plan.owners import user_label


@dataclass(frozen=True)
class PurgeFilter:
    """The operations a purge was asked for: ``op`` (one operation), ``run`` (one run), ``runs``
    (these runs), ``op_ids`` (the ones a preview showed and the user confirmed), ``older_than``
    (seconds since the operation finished, at ``now``); None asks for all."""

    now: float
    older_than: Optional[float] = None
    run: Optional[str] = None
    runs: Optional[Collection[str]] = None
    op: Optional[str] = None
    op_ids: Optional[Collection[str]] = None

    def admits(self, m: dict) -> bool:
        """Whether manifest ``m`` (the one schema, ``manifest.read``) is asked for and not purged
        already."""
        if m.get("backup_purged"):
            return False
        if (self.op is not None and m["op_id"] != self.op) or (self.run is not None and m["run"] != self.run) or \
                (self.runs is not None and m["run"] not in self.runs) or \
                (self.op_ids is not None and m["op_id"] not in self.op_ids):
            return False
        if self.older_than is None:
            return True
        # no finish time (null in an untrusted manifest): finished "now", never old enough
        finished = m.get("finished_at")
        if isinstance(finished, bool) or not isinstance(finished, (int, float)):
            finished = self.now
        return finished <= self.now - self.older_than


def kept_row(m: dict, size: int, code: Code, detail: str, **extra) -> dict:
    """The ``kept`` row of an operation (manifest or report row ``m``) a purge passes over, wholly
    or in part (``extra``: a blob's ``sha256``): nothing of what it names was deleted."""
    return {"op_id": m["op_id"], "run": m["run"], "kind": m["kind"], "bytes": size, "code": code,
            "detail": detail, **extra}


def not_purged(m: dict, size: int, stopped: BaseException, code: Code) -> dict:
    """The ``kept`` row of an operation a cancel (``stopped``, its ``code``) stopped before the
    purge recorded its intent: nothing of it went."""
    return kept_row(m, size, code, f"not purged: {stopped} (the purge stopped before its intent was recorded; "
                                   "nothing of this backup was deleted)")


def lost_files(m: dict, goes: Callable[[dict], bool], entries: str = "files") -> List[dict]:
    """The entries (``m[entries]``: a reduction's ``files``, a retirement's ``tree``) of operation
    ``m`` whose originals are lost for good when its backups go: none once a restore put them back
    (``restored_by``), else each entry whose backup ``goes`` (no operation that stays names the
    same bytes) — a reduction's removed or rewritten files and a retired run's files alike exist
    only there."""
    if m.get("restored_by"):
        return []
    return [f for f in m.get(entries) or [] if isinstance(f, dict) and goes(f)]


def originals_lost(m: dict, goes: Callable[[dict], bool]) -> int:
    """How many of ``lost_files`` there are (a row's ``originals``)."""
    return len(lost_files(m, goes))


def others_of(files: Iterable[dict]) -> List[dict]:
    """The users other than the one purging (effective uid) who owned ``files`` (entries recorded
    with their ``uid``: a disk's; a bucket has no owners), as ``{"uid", "user"}`` rows in uid
    order: whose files a purge of them destroys for good. A manifest is untrusted: a ``uid`` that
    is not a whole number is no user."""
    me = os.geteuid()
    uids = {f.get("uid") for f in files}
    return [{"uid": u, "user": user_label(u)} for u in sorted(u for u in uids if type(u) is int and u >= 0 and u != me)]


def kept_by_restore(m: dict) -> Optional[str]:
    """Why a purge keeps operation ``m``'s copy whole, or None: its restore (a retirement's, on
    every store; a reduction's, on a bucket) or its rollback (a bucket's reduction that kept
    backups, ``catalogue_rules.rolled_back_keeping``) met another file standing at a path
    (``not_restored``) and left the original in the vault, its only copy (``Finding.NOT_RESTORED``).
    Kept whole: the other copies of a rolled-back run are of originals in place when it looked,
    not since (one would have to read each to free it). A manifest is untrusted input: any
    ``not_restored`` it carries keeps the copy, and the paths named are only the ones of its type."""
    held = m.get("not_restored")
    rollback = is_rolled_back_keeping(m)
    if not ((m.get("restored_by") or rollback) and held):
        return None
    names = [p for p in held if isinstance(p, str)] if isinstance(held, list) else []
    return (f"{len(names) or 'some'} original(s) were not put back by its {'rollback' if rollback else 'restore'} "
            "(another file stood at the path" + (f", e.g. {names[0]}" if names else "") + "): the vault holds the "
            "only copy")


__all__ = ["PurgeFilter", "kept_by_restore", "kept_row", "lost_files", "not_purged", "originals_lost", "others_of"]
