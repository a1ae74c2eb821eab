"""The newest entries of a bucket logdir's history, read from only the manifests that can hold
them (the tab's Activity page, issue #28): ``bucket_catalogue.history`` reads every manifest of
the vault, a request each; a page reads the listing and about as many manifests as it shows. And
what a shard partition reads of the history (``partition_entries``): the fields its rule needs of
each manifest, from a summary beside them that names each manifest's version, reading only those
the summary does not hold at their listed version (issue #28: a second pass of 4 workers over
10,000 reduced runs read 40,000 manifests for the partition alone)."""
from __future__ import annotations

import heapq
import json
import math
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Finding, StoreError
from tb_footprint_plugin.engine.bucket_catalogue import entries_of, entry_when, line_entry, op_of, unsure_entry
from tb_footprint_plugin.engine.bucket_manifests import manifest_listing, read_listed, usable_manifest
from tb_footprint_plugin.engine.bucket_moved import COPY, OTHERS, OURS, UNSURE, whose
from tb_footprint_plugin.engine.bucket_objects import STATE_LIMIT
from tb_footprint_plugin.engine.bucket_state import BucketState, BucketVault
from tb_footprint_plugin.engine.history import HistoryPage, bucket_log
from tb_footprint_plugin.engine.lease import shard_label
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage.remote import READ_WORKERS
from tb_footprint_plugin.storage.store import CLOCK_SKEW, StoreFailure
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
        unsure: List[dict] = []  # whose each is cannot be told: a line saying so (R15 L4)
        for m in read_listed(ostore, vault, wave, unsure=unsure):
            for j, e in enumerate(entries_of(m)):
                offer((entry_when(e), 1, -(m.get("started_at") or 0), m["_path"], j), e)
        for m in unsure:
            e = unsure_entry(m)
            offer((entry_when(e), 1, -(m.get("started_at") or 0), m["_path"], 0), e)
    # not read: one entry each, but an operation held (its key names it, as its journal does);
    # its restore and purge lines are not known, so the total is then a lower bound
    unread = sum(1 for _b, key, _i in order[pos:] if _listed_op(key) not in skip)
    kept.sort(key=lambda item: item[0])
    return HistoryPage([e for _k, e in kept], total + unread, exact=unread == 0)


def _listed_op(key: str) -> str:
    """The op id a listed manifest's key names (``manifests/<op_id>.json``)."""
    return key.rsplit("/", 1)[-1][:-len(".json")] if key.endswith(".json") else key


#: the summary of the vault's manifests a shard partition reads (``partition_entries``), in the
#: vault beside ``manifests/`` (not in it: an older worker would take it for a damaged manifest)
SUMMARY = "manifests-summary.json"
SUMMARY_FORMAT = 1
#: what a summary keeps of each entry: the fields ``plan.shard.original_sizes`` reads
SUMMARY_FIELDS = ("time", "op_id", "kind", "run", "before", "outcome", "of_op")
#: a record's verdict for a logdir whose reading found no usable manifest there (damaged, gone):
#: nothing of it is counted, and it is not read again at that version
NONE_USABLE = "none"
#: the verdicts under which a logdir's partition counts a manifest's entries: what
#: ``bucket_manifests.read_listed`` yields it (``bucket_moved.whose`` not ``OTHERS``)
COUNTED = (OURS, COPY)


def _slim(e: dict) -> dict:
    return {k: e.get(k) for k in SUMMARY_FIELDS if e.get(k) is not None}


def _scalar(v) -> bool:
    """A value a summary's entry may hold: a name, a whole number, a finite time (``json`` reads
    NaN and Infinity too), or nothing."""
    return v is None or isinstance(v, (str, int)) or isinstance(v, float) and math.isfinite(v)


def judge(ostore: ObjectStore) -> str:
    """The name of the logdir ``ostore`` in a summary record's verdicts (``"w"``): its URL."""
    return f"{ostore.protocol}://{ostore.root}"


def _summary_of(data: Optional[bytes]) -> Dict[str, dict]:
    """The summary's manifests (key -> ``{"v": version, "s": started_at, "e": entries, "w":
    {logdir URL: whose verdict}}``) where well formed; anything else in it is left out (untrusted:
    a record not of this shape is read from its manifest again; verdicts not of theirs dropped)."""
    try:
        doc = jsondoc.loads(data) if data else None
    except ValueError:  # nested too deep included (review R10 F3)
        return {}
    found = doc.get("manifests") if isinstance(doc, dict) and doc.get("format") == SUMMARY_FORMAT else None
    out: Dict[str, dict] = {}
    for key, rec in (found.items() if isinstance(found, dict) else ()):
        if not (isinstance(rec, dict) and isinstance(rec.get("v"), str) and rec["v"]
                and isinstance(rec.get("s"), (int, float)) and not isinstance(rec.get("s"), bool)
                and isinstance(rec.get("e"), list)):
            continue
        entries = rec["e"]
        if all(isinstance(e, dict) and isinstance(e.get("run"), str)
               and all(k in SUMMARY_FIELDS and _scalar(v) for k, v in e.items()) for e in entries):
            w = rec.get("w")
            w = {k: v for k, v in w.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(w, dict) else {}
            out[key] = {"v": rec["v"], "s": rec["s"], "e": entries, "w": w}
    return out


def partition_entries(ostore: ObjectStore, vault: BucketVault, held: Callable[[], Set[str]],
                      write: bool = True) -> List[dict]:
    """``bucket_catalogue.history``'s entries less those of the operations ``held()`` names (the
    engine's ``history``), in its order, each with only the fields a shard partition reads
    (``SUMMARY_FIELDS``): the change-log object's lines, and each manifest's entries from the
    vault's summary (``SUMMARY``) where it holds the manifest at the version the listing gives, else
    read from the manifest. Requests: the listing, the summary (none in a vault with no manifest),
    a read per manifest the summary does not hold at its version, and, when there was one, the
    summary written again (its version looked at and a conditional put; a put another worker
    won is left to it: every reader gets the same entries from either). A summary is untrusted:
    a record not of its shape is read again from its manifest; one that lies about a manifest's
    entries moves only the partition's balance, alike for every worker reading it (the per-run
    locks and the plans keep a run from being reduced twice, whatever the partition says).
    Memory: the summary's few fields a manifest, not the manifests. ``write`` False (a dry run, a
    plan, ``shard_sizes``: "writes nothing") reads the summary and never writes it.

    Whose (review R11 G6 for the partition): a vault prefix given to several logdirs holds their
    manifests and one summary, so each record keeps the verdict of ``bucket_moved.whose`` for each
    logdir that read it (``"w"``: logdir URL -> ``ours``/``copy``/``others``/``none``); a logdir
    counts a record's entries only under its own verdict ``ours`` or ``copy`` (what
    ``bucket_manifests.read_listed`` yields it, which it reads otherwise), and reads a manifest
    whose record holds no verdict of its own (once a version, as any manifest not summarised)."""
    found = manifest_listing(vault)
    me = judge(ostore)
    summary: Dict[str, dict] = {}
    if found:
        try:
            summary = _summary_of(vault.store.read_all(SUMMARY, STATE_LIMIT))
        except StoreFailure as e:
            if e.code not in (StoreError.NOT_FOUND, StoreError.TOO_LARGE):
                raise
    now: Dict[str, dict] = {}  # in the listing's (key) order
    stale = []
    for key, info in found:
        rec = summary.get(key)
        if rec is not None and rec["v"] == info.version_token:
            now[key] = rec
            if me in rec["w"]:
                continue
        else:  # to be read; a damaged one stays without entries, as ``history`` leaves it out
            now[key] = {"v": info.version_token, "s": 0, "e": [], "w": {}}
        stale.append((key, info))
    del summary
    prefix = f"{vault.root}/"
    others: List[dict] = []
    problems: List[dict] = []
    for m in read_listed(ostore, vault, stale, problems=problems, others=others):
        key = m["_path"][len(prefix):]
        had = now[key]["w"] if now[key]["v"] == m["_version"] else {}
        now[key] = _record(m, dict(had, **{me: whose(ostore, m)}))
    for o in others:  # another logdir's: its entries (when a reading of theirs kept them) stay for it
        key = str(o.get("_path", ""))[len(prefix):]
        if key in now:
            now[key] = dict(now[key], w=dict(now[key]["w"], **{me: OTHERS}))
    # whose one is could not be told (a listing failed): no verdict kept, the next reading judges again
    # (a verdict cached at its version kept it out of every partition for good: review R15 L1)
    unsure = {f"manifests/{p['op_id']}.json" for p in problems
              if p.get("code") == Finding.WHOSE_UNKNOWN and isinstance(p.get("op_id"), str)}
    for key, _info in stale:
        if me not in now[key]["w"] and key not in unsure:  # no usable manifest there: nothing counted at it
            now[key] = dict(now[key], w=dict(now[key]["w"], **{me: NONE_USABLE}))
    if stale and write:
        _write_summary(vault, now)
    skip = held()
    out = [_slim(line_entry(e)) for e in bucket_log(BucketState.of(ostore).logdir_store()).read()]
    # ``bucket_manifests.manifests``' order (newest started first, then by key), then ``history``'s
    for key in sorted(now, key=lambda k: -now[k]["s"]):
        if now[key]["w"].get(me) in COUNTED:
            out += [dict(e) for e in now[key]["e"]]
    out.sort(key=entry_when)
    return [e for e in out if op_of(e) not in skip]


def _record(m: dict, w: Dict[str, str]) -> dict:
    """A summary's record of the usable manifest ``m`` (``bucket_manifests.usable_manifest``),
    with the verdicts ``w`` of the logdirs that read it (``partition_entries``)."""
    started = m.get("started_at")
    return {"v": m["_version"], "e": [_slim(e) for e in entries_of(m)], "w": w,
            "s": started if isinstance(started, (int, float)) and not isinstance(started, bool) else 0}


def note_manifests(ostore: ObjectStore, vault: BucketVault, written: Iterable[Tuple[str, str, dict]],
                   tries: int = 3) -> bool:
    """Add the manifests a worker wrote (``(op_id, version, doc)``: each as put, and the version
    its put returned) to the vault's summary, so the next shard partition reads none of them
    (``partition_entries``): a shard worker's batch calls it at its end (``note_shard_batch``;
    #28: else the first rerun of a sharded batch still reads every manifest once per worker). A
    record is only ever a manifest at a version: one rewritten or dropped since is read again or
    left out by its reader, whatever this wrote. Requests: the summary's version and bytes, a conditional put; another worker's
    put in between, read and merged again (``tries`` in all). True when written; never raised
    (a cache: a record it fails to add is read from its manifest once, as before)."""
    recs = {}
    seen: dict = {}  # one listing of each state's records for the whole batch, not one per manifest
    for op_id, version, doc in written:
        m = usable_manifest(ostore, vault.manifest(op_id), dict(doc), version, seen=seen) if version else None
        verdict = whose(ostore, m) if m is not None else None
        if m is not None and verdict != UNSURE:  # undecided: left for a reading to judge
            recs[f"manifests/{op_id}.json"] = _record(m, {judge(ostore): verdict})
    for _ in range(tries if recs else 0):
        try:
            there = vault.store.stat(SUMMARY)
            data = vault.store.read_all(SUMMARY, STATE_LIMIT) if there is not None else None
        except StoreFailure as e:
            if e.code not in (StoreError.NOT_FOUND, StoreError.TOO_LARGE):
                return False
            there, data = None, None
        there_recs = _summary_of(data)
        for key, rec in recs.items():  # other logdirs' verdicts of the same version stay
            old = there_recs.get(key)
            if old is not None and old["v"] == rec["v"]:
                rec["w"] = dict(old["w"], **rec["w"])
        merged = dict(there_recs, **recs)
        if _write_summary(vault, merged, there.version if there is not None else None):
            return True
    return False


def note_shard_batch(ostore: ObjectStore, vault: BucketVault, written: List[Tuple[str, str, dict]]) -> None:
    """At a batch's end, in a worker of a sharded batch (``lease.shard_label``) only: the manifests
    it wrote noted in the summary (``note_manifests``), so the first rerun of the shard workers reads
    none of them, as later ones do. A batch of no shard pays no request: no partition reads them."""
    if written and shard_label():
        note_manifests(ostore, vault, written)


def _write_summary(vault: BucketVault, manifests: Dict[str, dict], over: Optional[str] = "") -> bool:
    """The summary written again with ``manifests``: over the version ``over`` (default: the one
    there now), or only where none is (None); another writer's put in between wins. Which one stands changes no
    reader's entries (each record names its manifest's version), only how many it reads: a cache,
    never retried, never raised; too large for a reader's limit, not written."""
    data = json.dumps({"format": SUMMARY_FORMAT, "manifests": manifests}, sort_keys=True,
                      separators=(",", ":")).encode()
    if len(data) > STATE_LIMIT:
        return False
    try:
        if over == "":  # the version there now
            there = vault.store.stat(SUMMARY)
            over = there.version if there is not None else None
        if over is None:
            vault.store.put(SUMMARY, data, if_absent=True)
        else:
            vault.store.put(SUMMARY, data, if_version=over)
    except (StoreFailure, OSError, ValueError):
        return False
    return True


__all__ = ["COUNTED", "NONE_USABLE", "SKEW", "SUMMARY", "SUMMARY_FIELDS", "judge", "history_page", "note_manifests", "note_shard_batch",
           "partition_entries"]
