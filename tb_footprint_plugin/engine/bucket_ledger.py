"""A bucket logdir's batch ledger: the one ``engine.ledger.Ledger`` over the logdir's
``ObjectStore`` (its bucket layout, ``engine.ledger_objects``: one object per worker and batch,
written at the batch's steps), opened from the bucket engine's client, and the bucket's proof of a
commit a dead worker's in-flight run needs before it is settled ``done``: no journal left in the
bucket names its operation or run (``_journals_left``; a manifest alone proves nothing, it is
written before the commit record).
"""
from __future__ import annotations

from typing import Callable, Iterable, List, Optional

from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.journal_object import ObjectJournal, pending_objects
from tb_footprint_plugin.engine.ledger import (INFLIGHT, LEDGERS, Ledger, merged_objects, record_rolled_back_objects,
                                               settle_stale_objects)
from tb_footprint_plugin.engine import ledger_objects
from tb_footprint_plugin.engine.ledger_objects import folder_of, run_hash
from tb_footprint_plugin.storage.store_object import ObjectStore

_run_hash = run_hash  # the name tests of the object keys use


def _store(ostore: ObjectStore) -> ObjectStore:
    """The logdir's ``ObjectStore`` (``ObjectStore.of``: its client is a ``TypeError``); no request."""
    return ObjectStore.of(ostore)


class BucketLedger(Ledger):
    """The ledger objects one worker (one shard) writes, at its batches' steps: ``Ledger`` over the
    logdir's store.
    ``listing``: the logdir's listing the batch made already (key -> info), so ``start`` lists
    nothing more."""

    def __init__(self, ostore: ObjectStore, policy: str, shard: Optional[str] = None,
                 listing: Optional[dict] = None):
        super().__init__(_store(ostore), policy, None, shard, listing=listing, batched=True)

    @property
    def url(self) -> str:
        return self.path


def read_folder(ostore: ObjectStore, folder: str, objs: Optional[dict] = None) -> tuple:
    """``ledger_objects.read_folder`` of the logdir's store."""
    return ledger_objects.read_folder(_store(ostore), folder, objs)


def merged(ostore: ObjectStore) -> Optional[dict]:
    """Every ledger object of the bucket logdir as one view of the batch (None when there is none)."""
    return merged_objects(_store(ostore))


def _journals_left(ostore: ObjectStore) -> tuple:
    """``(op ids, runs)`` named by the journal objects left in the bucket (an operation some
    journal still holds may yet be rolled back); raises ``OSError`` when one cannot be read
    (nothing is proven then)."""
    st = BucketState.of(ostore)
    names = _store(ostore)
    ops, runs = set(), set()
    # the one listing and parser of journal objects (``engine.journal_object``)
    for key, info in pending_objects(st):
        ops.add(key.rsplit("/", 1)[-1][:-5] if key.endswith(".json") else key)
        unproven = OSError(f"{names.url_of(key)}: unreadable journal; no commit of its runs is proven")
        try:
            journal = ObjectJournal.read(st, names.path(key), info)
        except ValueError:  # a key no call can address: never read, and nothing is proven
            raise unproven from None
        if journal is None:
            continue  # settled since the listing
        if journal.unreadable():
            raise unproven
        # the top level names the batch's (or a restore's) op and run, each entry its run's
        for en in [journal.doc] + journal.entries():
            if isinstance(en, dict):
                ops.update(v for v in (en.get("op"),) if isinstance(v, str))
                runs.update(v for v in (en.get("run"),) if isinstance(v, str))
    return ops, runs


def settle_stale(ostore: ObjectStore, manifests_of: Callable[[], List[dict]], *, mine: bool = False,
                 recovered: Iterable = ()) -> List[str]:
    """``ledger.settle_stale_objects`` of the bucket logdir, its commit proof the journals left."""
    return settle_stale_objects(_store(ostore), manifests_of, lambda: _journals_left(ostore), mine=mine,
                                recovered=recovered)


def record_rolled_back(ostore: ObjectStore, shard: Optional[str], op_ids: Iterable[str]) -> List[str]:
    """``ledger.record_rolled_back_objects`` of the shard's folder (``shard`` "i/n", or None)."""
    return record_rolled_back_objects(_store(ostore), folder_of(shard), op_ids)


__all__ = ["BucketLedger", "folder_of", "merged", "read_folder", "settle_stale", "record_rolled_back", "LEDGERS",
           "INFLIGHT"]
