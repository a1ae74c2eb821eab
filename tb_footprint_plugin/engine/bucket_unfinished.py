"""A bucket logdir's unfinished operations and the damage its state shows, read-only
(``BucketEngine.unfinished``), in the shape a disk's ``LocalEngine.unfinished`` answers:
``{unfinished_operations, problems, settle_command}``.

Each journal object left in ``.tb-footprint/journal`` is an unfinished operation, one row per run
it still holds (a batch journal holds several): ``{op_id, run, kind, bytes_before,
recover_will}`` as ``engine.health.unfinished_ops`` gives them on a disk (``bytes_before``: the
run's size its journal entry records from the plan, None where it holds no such number), judged by recovery's own rules
(``bucket_recover.trust_refusal``: a journal recover leaves alone is a problem naming it, with its code;
``bucket_recover.reduce_will``: what it will do with a reduce it acts on). A journal that does not read as one, or a key no store call can
address, is a problem named by its URL with its code, as ``status`` names it, never an operation;
so is a damaged run lock (``bucket_recover.damaged_locks``). The cost: one listing of the
journals and one of the locks, and one read of each object found there (usually none); for each
reduce journal, recovery's looks (``reduce_will``: a listing of its copies past its commit record,
else a head per file). The
manifests are not read here (one read each): their damage is named by ``status``, ``verify`` and
``restore``.
"""
from __future__ import annotations

from typing import List, Optional

from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import health, trust
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_recover import DAMAGED_OBJECT, damaged_locks, reduce_will, trust_refusal
from tb_footprint_plugin.engine.bucket_state import BucketVault
from tb_footprint_plugin.engine.journal_object import ObjectJournal, pending_objects
from tb_footprint_plugin.engine.recovery_rules import damaged_journal
from tb_footprint_plugin.storage.paths import is_op_id
from tb_footprint_plugin.storage.store_object import ObjectStore


def journal_rows(ostore: ObjectStore, vault: BucketVault) -> tuple:
    """``(operations, problems)`` from the journal objects: one row per run a journal still holds
    (untrusted: an id that is not one is the journal's name, a run that is not a string None), a
    problem per journal that cannot be read or addressed."""
    st = BucketState.of(ostore)
    ops: List[dict] = []
    problems: List[dict] = []
    for key, info in pending_objects(st):
        named = f"{ostore.scheme}://{ostore.root}/{key}"
        try:
            j = ObjectJournal.read(st, ostore.path(key), info)
        except ValueError:  # S3 keeps 'journal/x/../y' as written: named, never read
            problems.append({"code": trust.PATH_OUTSIDE, "file": named, "op_id": None, "run": None,
                             "detail": f"{named}: not a plain key of the logdir; never acted on, left in place"})
            continue
        if j is None:  # settled by its owner since the listing
            continue
        if j.unreadable():  # ``recover`` never acts on it: named in the words it and ``status`` use
            url = ostore.url_of(key)
            problems.append({"code": Finding.DAMAGED_FILE, "file": url, "op_id": None, "run": None,
                             "detail": damaged_journal(url, DAMAGED_OBJECT)})
            continue
        if not key.endswith(".json"):
            continue  # not a journal recovery reads
        name = key.rsplit("/", 1)[-1][:-len(".json")]
        op = j.doc.get("op") if is_op_id(j.doc.get("op")) else name
        kind = j.kind or "reduce"
        refused = trust_refusal(ostore, vault, j, ostore.url_of(key))
        if refused is not None:  # recover leaves it alone: no operation it settles, a finding naming it
            problems.append({"code": refused["code"], "file": refused["file"], "path": refused["file"],
                             "op_id": op, "run": None, "detail": refused["detail"]})
            continue
        # what recover will do, by its own rule (None for the kinds it does not forecast, as on a disk)
        will = reduce_will(j, ostore, vault) if j.kind is None else None
        for en in j.live_entries() or [{}]:
            ops.append({"op_id": en.get("op") if is_op_id(en.get("op")) else op,
                        "run": en.get("run") if isinstance(en.get("run"), str) else None,
                        "kind": kind, "bytes_before": _size(en.get("bytes_before")), "recover_will": will})
    return ops, problems


def _size(v) -> Optional[int]:
    """A journal's number of bytes (untrusted) when it is a non-negative integer, else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def unfinished(ostore: ObjectStore, vault: BucketVault, logdir: str, backup_dir: Optional[str]) -> dict:
    """``{unfinished_operations, problems, settle_command}``: the settle command when an operation
    is unfinished (the problems named here are left in place by ``recover``: it cannot mend them)."""
    ops, problems = journal_rows(ostore, vault)
    problems += damaged_locks(ostore)
    return {"unfinished_operations": ops, "problems": problems,
            "settle_command": health.settle_command(logdir, backup_dir) if ops else None}


__all__ = ["journal_rows", "unfinished"]
