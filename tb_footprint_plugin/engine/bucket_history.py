"""A bucket logdir's change log of rolled-back reductions.

A bucket's manifests are its record of what stands (``engine.bucket_catalogue.history`` reads
each as a history entry), and a reduce rolled back drops its manifest with its backups: nothing
would say that it was tried and why it did not stand. A disk's rollback writes a line to
``history.jsonl`` (``catalogue.write_manifest``: outcome ``rolled_back`` with its code); a
bucket's appends the same line to the object of that name in its state folder, through the
``Store`` interface (``Store.append``: a conditional rewrite on a bucket), and ``read_history``
gives the lines back for the engine's ``history``. Only failure paths write here: a clean
reduce makes no request more.
"""
from __future__ import annotations

import json
import math
from typing import List, Optional

from tb_footprint_plugin.codes import Outcome, StoreError
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_state import STORE_FAILURES, now_s
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.engine.lease import shard_label
from tb_footprint_plugin.engine.vault import who
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store import READ_ALL_LIMIT, StoreFailure
from tb_footprint_plugin.version import __version__

#: the change log's object, a key of the logdir's store (the name a disk's state folder uses)
HISTORY = f"{STATE_DIR_NAME}/history.jsonl"


def rolled_back_line(out: RunOutcome, op_id: str, policy: Optional[str]) -> dict:
    """The change-log line of a run whose reduce was rolled back (its originals as they were, its
    manifest and backups dropped), in the fields a disk's rollback writes: outcome
    ``rolled_back`` whatever the run's own outcome says (a skip found after the journal is a
    rollback too, as on a disk), the outcome's code and reason, no backup kept."""
    line = {"time": now_s(), "op_id": op_id, "kind": "reduce", "run": out.run, "policy": policy,
            "before": out.bytes_before, "after": out.bytes_before, "verified": False,
            "outcome": str(Outcome.ROLLED_BACK), "reason": out.reason,
            "code": str(out.code) if out.code else None, "backup_kept": False, **who(),
            "tool_version": __version__}
    shard = shard_label()
    return dict(line, shard=shard) if shard else line


def append_history(rfs: RemoteFS, lines: List[dict], outs: Optional[List[RunOutcome]] = None) -> None:
    """Append ``lines`` to the logdir's change-log object in one append (a head, a read and a
    conditional put). The rollbacks they record stand either way: a store that refuses the
    append is said in each of ``outs``' reasons (as a disk's rollback on a full disk keeps going
    and says ``not_recorded``), never raised."""
    if not lines:
        return
    data = "".join(json.dumps(x, sort_keys=True, separators=(",", ":")) + "\n" for x in lines).encode()
    try:
        BucketState.of(rfs).logdir_store().append(HISTORY, data)
    except STORE_FAILURES as e:
        for o in outs or ():
            o.reason = f"{o.reason}; its change-log line was not written ({e})" if o.reason else \
                f"its change-log line was not written ({e})"


def _timed(e) -> bool:
    t = e.get("time") if isinstance(e, dict) else None
    return isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)


def read_history(rfs: RemoteFS) -> List[dict]:
    """The lines of the logdir's change-log object, oldest first (one read; none when it is not
    there). Untrusted, as a disk's lines are: only JSON objects with a finite ``time`` are kept,
    a damaged line costs only itself, and of an object larger than an append ever makes
    (``READ_ALL_LIMIT``: planted) only the whole lines of its first that many bytes are read."""
    store = BucketState.of(rfs).logdir_store()
    try:
        data = store.read_all(HISTORY, READ_ALL_LIMIT)
    except StoreFailure as e:
        if e.code == StoreError.NOT_FOUND:
            return []
        if e.code != StoreError.TOO_LARGE:
            raise
        data = store.read_range(HISTORY, 0, READ_ALL_LIMIT)
        data = data[:data.rfind(b"\n") + 1]
    out = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            e = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            continue
        if _timed(e):
            out.append(e)
    out.sort(key=lambda e: e["time"])
    return out


__all__ = ["HISTORY", "append_history", "read_history", "rolled_back_line"]
