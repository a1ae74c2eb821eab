"""A bucket ledger folder's closed objects folded into one (issue #28 item 5): without it every
batch ever run leaves an object (``engine.ledger_objects``: one per worker and batch), and every
start reads them all, one GET each (100,000 runs in batches of 100: a thousand GETs a start).

When a worker's batch closes its object and the objects it knows closed in its folder (read at
its start, or its own) are more than ``FOLD_AFTER``, ``fold``:

1. takes the closed objects (never one a worker may still write, ``foldable``), smallest first,
   up to ``FOLD_BYTES`` in all;
2. writes every run's newest mark of them (``ledger_reads.newest``, a settling's ``of_mark`` kept,
   so a fold tells what its objects told) as one closed object of marks under a new key, and
   beside it (``earlier``) the run's newest mark that every host within the allowed clock skew
   accepts, when that is another (``ledger_entries.accepted_everywhere``: a folding host whose
   clock runs over an hour ahead keeps its own mark, which a slower host refuses as future-dated;
   the slower host then reads the run's earlier mark, as it did from the objects before the fold;
   review R15 L2),
   create-only (``w-<new token>-0``: any reader of objects of marks reads it, and a later fold
   folds it like any closed object);
3. reads it back, and only when its bytes are the ones written
4. deletes the objects it folded, each at the version it read (one batch delete).

A crash at any step leaves every mark readable: before 2 the objects as they were; between 2 and
4 a mark in the fold and its object both (one run's marks in several objects of a folder resolve
by ``newest``, the same mark twice is the same answer). Two workers folding one folder at once
write two folds under two keys and delete the same objects; each fold holds all it read and each
deletes only what it read, so no mark is lost, only held twice until a later fold. A reader whose
listing named an object a fold deleted since lists again (``ledger_reads.read_listed``).

Closed: an object is written ``closed: true`` by its worker at the write after which it never
writes it again (``ObjectLayout``: its batch's outcomes, or the end of a batch with nothing in
flight); an open one says ``closed: false``. The word is the writer's own, so it needs no look at
the in-flight markers (a listing, a GET each, and a race with a worker putting its marker). An
object of an earlier version (no such word; 1dc6b1e's objects of marks, 3f68b74's one per run) is
folded when none of its entries is in flight: those versions wrote a closed batch with its runs
settled. An object left open by a killed worker is folded once its writer is known gone
(``writer_gone``: every mark in it names one process of this host that ended); its in-flight
marks keep their worker in the fold, so a later start still settles them. Every delete is
conditional on the version read, so a worker of an earlier version writing its object again keeps it
(where the store enforces the condition: S3, GCS, Azure). An object with an entry refused as
untrusted is never folded: its refusal stays to be reported.
"""
from __future__ import annotations

import json
import secrets
import time
from typing import List, Optional, Tuple

from tb_footprint_plugin.engine.ledger_entries import IN_FLIGHT_STATES, LEDGER_VERSION, accepted_everywhere, pid_gone
from tb_footprint_plugin.engine.ledger_reads import MAX_MARKS_BYTES, ObjectRead, marks_key, newest
from tb_footprint_plugin.storage.store import Store

#: closed objects a folder may hold before a closing batch folds them: a start reads at most this
#: many small objects beside its full folds; small, since each costs every later start a GET,
#: and not 1, since each fold rewrites the marks it holds (8: a fold every 8 batches or so)
FOLD_AFTER = 8
#: a fold at least this large is full: never folded again (each fold would rewrite it whole), so
#: a folder holds its marks in objects of about this size (an entry is ~300 bytes: ~3,000 runs),
#: far below what a reader takes (``MAX_MARKS_BYTES``)
FOLD_BYTES = 1024 * 1024


def foldable(o: ObjectRead) -> bool:
    """Whether the object ``o`` read may be folded (module doc): closed by its writer, or of an
    earlier version with no entry in flight, or written by a worker that is gone; no entry of it
    refused; not a full fold."""
    if o.refused or o.size >= FOLD_BYTES:
        return False
    if o.closed or writer_gone(o):
        return True
    return o.closed is None and not any(e.get("state") in IN_FLIGHT_STATES for _run, e, _f, _p in o.entries)


def writer_gone(o: ObjectRead) -> bool:
    """Whether the worker that wrote ``o`` is gone, so never writes it again: a worker writes only
    marks of its own (``Ledger.mark``, a settling's too), each naming its host, pid and the pid's
    start; every entry naming one process of this host that ended (``ledger_entries.pid_gone``;
    this process never) — a killed worker's object, left open, its in-flight runs settled beside it
    or, once folded, from the fold (its marks keep their worker)."""
    who = {(e.get("host"), e.get("pid"), e.get("pid_start")) for _run, e, _f, _p in o.entries}
    if len(who) != 1:
        return False
    host, pid, start = next(iter(who))
    return pid_gone(host, pid, start)


def fold(store: Store, folder: str, seen: List[ObjectRead]) -> Optional[Tuple[ObjectRead, List[str]]]:
    """Fold the closed objects of ``seen`` (the folder ``folder``'s objects as read) when there are
    more than ``FOLD_AFTER`` (module doc). Returns the fold as read and the keys it folded (each
    deleted unless the store refused it at the version read: then it stays beside), or None
    when nothing was folded (too few, or the fold did not read back as written: the objects
    stay). A request the store refuses raises (``OSError``); what stands then is readable."""
    cands = sorted((o for o in seen if foldable(o)), key=lambda o: (o.size, o.key))
    if len(cands) <= FOLD_AFTER:
        return None
    take, total = [], 0
    for o in cands:
        if take and total + o.size > FOLD_BYTES:
            break
        take.append(o)
        total += o.size
    if len(take) < 2:
        return None
    every = [e for o in take for e in o.entries]
    entries = newest(every)
    now = time.time()
    earlier = {t[0]: t for t in newest([t for t in every if accepted_everywhere(t[1], now)])}
    runs, kept = {}, []
    for run, entry, _f, pol in entries:
        runs[run] = {"policy": pol, "entry": entry}
        if run in earlier and earlier[run][1] != entry:
            runs[run]["earlier"] = earlier[run][1]
            kept.append(earlier[run])  # as a reader of the fold reads it (``ledger_reads``)
    entries += kept
    doc = {"version": LEDGER_VERSION, "kind": "marks", "closed": True, "folded": len(take), "runs": runs}
    data = json.dumps(doc, sort_keys=True).encode()
    key = marks_key(folder, secrets.token_hex(16), 0)
    version = store.put(key, data, if_absent=True)
    if store.read_all(key, MAX_MARKS_BYTES) != data:
        return None  # not what was written: what it folded stays, the fold is one more object
    store.delete([o.key for o in take], {o.key: o.version for o in take if o.version}, precheck=False)
    return ObjectRead(key, version or "", len(data), True, entries), [o.key for o in take]


__all__ = ["FOLD_AFTER", "FOLD_BYTES", "fold", "foldable", "writer_gone"]
