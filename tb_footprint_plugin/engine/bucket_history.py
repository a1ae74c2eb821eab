"""The newest entries of a bucket logdir's history, read from only the manifests that can hold
them (the tab's Activity page, issue #28): ``bucket_catalogue.history`` reads every manifest of
the vault, a request each; a page reads the listing and about as many manifests as it shows."""
from __future__ import annotations

import heapq
import math
from typing import Callable, List, Set, Tuple

from tb_footprint_plugin.engine.bucket_catalogue import (entries_of, entry_when, line_entry, manifest_listing, op_of,
                                                         read_listed)
from tb_footprint_plugin.engine.bucket_state import BucketState, BucketVault
from tb_footprint_plugin.engine.history import HistoryPage, bucket_log
from tb_footprint_plugin.storage.remote import READ_WORKERS
from tb_footprint_plugin.storage.store import CLOCK_SKEW
from tb_footprint_plugin.storage.store_object import ObjectStore

#: how far the times a manifest says may run ahead of its object's date in a listing
SKEW = CLOCK_SKEW


def _newest_possible(info) -> float:
    """The newest time an entry of the manifest listed with ``info`` can say: its object was
    written once its operation's last change (reduce, restore, purge) was, so no later than its
    date plus ``SKEW``; a date the listing does not give bounds nothing (infinity)."""
    t = getattr(info, "mtime", None)
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0:
        return t + SKEW
    return math.inf


def history_page(ostore: ObjectStore, vault: BucketVault, newest: int,
                 held: Callable[[], Set[str]]) -> HistoryPage:
    """The newest ``newest`` entries of ``bucket_catalogue.history`` less those of the operations ``held()`` names
    (asked after the listing of the manifests and before they are read: a manifest is written
    after its journal), in its order, and how many such entries there are in all, or at least
    (``exact`` False) when some manifest was not read (issue #28).
    Reads only what the page shows (r26): the manifests in the order of their objects' dates in
    the listing, newest first, a few at once, until every one not read can hold no entry newer
    than the ``newest`` kept (``_newest_possible``: its date plus ``SKEW``), so the requests are
    the listing's and about ``newest`` reads, whatever the vault holds. Each manifest not read
    counts one entry in the total (its restore and purge lines uncounted, a damaged one counted):
    exact when every one is read (a vault of a few, ``newest`` 0, or every date within ``SKEW``
    of the page's oldest). A manifest saying a time beyond its date plus ``SKEW`` (planted, or a
    writer's clock off by more than a store accepts) may be left out of the page as not newer.
    Memory: the listing's keys and ``newest`` entries in a bounded heap, keyed by ``history``'s
    order (time; the change log's lines first, in its order; then the manifests newest started
    first, of one start in key order; then each one's entries in order); the change log's newest
    lines are read a block at a time (``ChangeLog.newest``), or whole while an operation is held
    (its lines are left out: the newest of the rest cannot be told from the log's newest)."""
    found = manifest_listing(vault)
    skip = held()
    kept: List[tuple] = []
    total = 0

    def offer(key: tuple, e: dict) -> None:
        nonlocal total
        if op_of(e) in skip:
            return
        total += 1
        if newest <= 0:
            return
        if len(kept) < newest:
            heapq.heappush(kept, (key, e))
        elif key > kept[0][0]:  # keys are unique: entries are never compared
            heapq.heapreplace(kept, (key, e))

    def settled(bound: float) -> bool:
        """Whether no entry of a manifest whose entries are no newer than ``bound`` joins the page."""
        return 0 < newest <= len(kept) and kept[0][0][0] > bound

    log = bucket_log(BucketState.of(ostore).logdir_store())
    if skip:
        lines = log.read()
    else:
        lines, count = log.newest(max(newest, 0))
        total += count - len(lines)  # the older lines are counted, not offered
    for i, e in enumerate(lines):
        offer((entry_when(e), 0, i), line_entry(e))
    order = sorted(((_newest_possible(info), key, info) for key, info in found), reverse=True)
    del found
    pos = 0
    while pos < len(order) and not settled(order[pos][0]):
        if newest <= 0:  # nothing shown: every manifest read for the total, a few at once
            n = 2 * READ_WORKERS
        elif len(kept) < newest:  # each manifest gives one entry at least
            n = newest - len(kept)
        else:  # the page is full: those that may still hold a newer entry, and no more
            n = sum(1 for b, _k, _i in order[pos:pos + 2 * READ_WORKERS] if b >= kept[0][0][0])
        wave = [(key, info) for _b, key, info in order[pos:pos + max(1, min(n, 2 * READ_WORKERS))]]
        pos += len(wave)
        for m in read_listed(ostore, vault, wave):
            for j, e in enumerate(entries_of(m)):
                offer((entry_when(e), 1, -(m.get("started_at") or 0), m["_path"], j), e)
    # not read: one entry each, but an operation held (its key names it, as its journal does);
    # its restore and purge lines are not known, so the total is then a lower bound
    unread = sum(1 for _b, key, _i in order[pos:] if _listed_op(key) not in skip)
    kept.sort(key=lambda item: item[0])
    return HistoryPage([e for _k, e in kept], total + unread, exact=unread == 0)


def _listed_op(key: str) -> str:
    """The op id a listed manifest's key names (``manifests/<op_id>.json``)."""
    return key.rsplit("/", 1)[-1][:-len(".json")] if key.endswith(".json") else key


__all__ = ["SKEW", "history_page"]
