"""The batch ledger of a bucket logdir: one small object per (shard, run).

A bucket has no append and no lock a file could be rewritten under, and rewriting one ledger
object per transition would upload the whole ledger three times a run (quadratic in the batch).
So each shard writes each of its runs' state to its own object,
``<logdir>/.tb-footprint/ledgers/shard-I-of-N/<sha256(run)[:32]>.json`` =
``{version, run, policy, entry}``, with the fields and states of ``engine.ledger``: two small
PUTs per run (``reducing``, then ``done`` / ``failed`` / ``skipped``). No two workers of one
batch share an object unless they run the same shard at once, and then the newer write wins.

``merged`` lists the ``ledgers/`` prefix once and reads every entry back as untrusted input:
an object whose key is not a ledger key, whose run does not hash to its key, or whose entry
fails ``engine.ledger.check_entry`` is refused with a code and reported, never used. The view
is the one ``engine.ledger.merged_view`` builds for ledgers on disk.

The ledger is a record for people and ``status``; a rerun does not read it: what a bucket run
still needs is what its plan finds (a reduced run has nothing left to remove, a locked one is
skipped as such), so resuming costs no extra request per run.
"""
from __future__ import annotations

import hashlib
import json
import re
import socket
import time
from typing import Dict, List, Optional

from tb_footprint_plugin.engine.lease import me
from tb_footprint_plugin.engine.ledger import (LEDGER_VERSION, MAX_ERROR_CHARS, check_entry, keeps_done, merged_view,
                                              report_refusals)
from tb_footprint_plugin.engine.trust import BAD_LEDGER, BAD_LEDGER_ENTRY, Untrusted
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.remote import RemoteFS, map_ordered

LEDGERS = f"{STATE_DIR_NAME}/ledgers"
MAX_ENTRY_BYTES = 256 * 1024
_KEY = re.compile(r"^ledgers/(shard-\d+-of-\d+|batch)/([0-9a-f]{32})\.json$")


def _run_hash(run: str) -> str:
    return hashlib.sha256(run.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _folder(shard: Optional[str]) -> str:
    if not shard:
        return "batch"
    i, n = (int(x) for x in shard.split("/"))
    return f"shard-{i}-of-{n}"


class BucketLedger:
    """The ledger objects one worker (one shard) writes."""

    def __init__(self, rfs: RemoteFS, policy: str, shard: Optional[str] = None):
        self.rfs = rfs
        self.policy = policy
        self.folder = _folder(shard)
        self.who = {"host": socket.gethostname(), **me(), "shard": shard}
        self._entries: Dict[str, dict] = {}

    @property
    def url(self) -> str:
        return self.rfs.url_of(f"{LEDGERS}/{self.folder}")

    def mark(self, run: str, state: str, **fields) -> None:
        """Record a transition of ``run`` (one PUT; the entry keeps the fields of earlier ones).
        A skip is not written over a done entry it does not contradict (``ledger.keeps_done``):
        the shard's object is read first (one GET, for skips only — in a rerun, the runs done
        before), and this process's own marks are known without a read."""
        rel = f"{LEDGERS}/{self.folder}/{_run_hash(run)}.json"
        key = self.rfs.path(rel)
        if state == "skipped":
            if keeps_done(self._entries.get(run) or self._stored(run, rel), state, fields):
                return
        if isinstance(fields.get("error"), str):
            fields["error"] = fields["error"][:MAX_ERROR_CHARS]  # within what check_entry accepts
        entry = self._entries.setdefault(run, {})
        entry.update(fields, state=state, updated_at=time.time(), **self.who)
        doc = {"version": LEDGER_VERSION, "run": run, "policy": self.policy, "entry": entry}
        self.rfs.ops.put(key, json.dumps(doc, sort_keys=True).encode())

    def _stored(self, run: str, rel: str) -> Optional[dict]:
        """The shard's entry for ``run`` as stored (untrusted: checked; None when absent or refused)."""
        try:
            doc = json.loads(self.rfs.read_bytes(rel).decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("run") != run or doc.get("version") != LEDGER_VERSION:
                return None
            return check_entry(run, doc.get("entry"), self.rfs.url_of(rel))
        except (OSError, ValueError, RecursionError, Untrusted):
            return None


def merged(rfs: RemoteFS) -> Optional[dict]:
    """Every ledger object of the bucket logdir as one view of the batch (None when there is none)."""
    try:
        objs = rfs.list_tree(LEDGERS)
    except FileNotFoundError:
        return None
    if not objs:
        return None
    folders: Dict[str, dict] = {}
    entries, refused = [], []

    def fetch(key: str):
        """The object's bytes, or None: not a ledger key, too large (refused below), or gone."""
        rel = key[len(STATE_DIR_NAME) + 1:] if key.startswith(STATE_DIR_NAME + "/") else key
        if _KEY.match(rel) is None or objs[key].size > MAX_ENTRY_BYTES:
            return key, None
        try:
            return key, rfs.read_bytes(key)
        except FileNotFoundError:
            return key, None

    # read a few at once: one GET after the other, 10,000 runs' entries took minutes
    for key, data in map_ordered(fetch, sorted(objs)):
        rel = key[len(STATE_DIR_NAME) + 1:] if key.startswith(STATE_DIR_NAME + "/") else key
        where = rfs.url_of(key)
        m = _KEY.match(rel)
        try:
            if m is None:
                raise Untrusted(BAD_LEDGER, where, "not a ledger object's key")
            if objs[key].size > MAX_ENTRY_BYTES:
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"larger than {MAX_ENTRY_BYTES} bytes; not read")
            if data is None:
                continue  # removed since the listing
            try:
                doc = json.loads(data.decode("utf-8"))
            except (ValueError, RecursionError) as e:
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"not JSON ({str(e)[:200]})") from None
            if not isinstance(doc, dict) or doc.get("version") != LEDGER_VERSION or not isinstance(doc.get("run"), str):
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"not a ledger entry of version {LEDGER_VERSION}")
            if _run_hash(doc["run"]) != m.group(2):
                raise Untrusted(BAD_LEDGER_ENTRY, where, f"names run {doc['run'][:200]!r}, which is not its key's")
            entry = check_entry(doc["run"], doc.get("entry"), where)
        except Untrusted as u:
            refused.append(u)
            continue
        folder = rfs.url_of(f"{LEDGERS}/{m.group(1)}")
        pol = doc.get("policy") if isinstance(doc.get("policy"), str) else None
        folders.setdefault(folder, {"path": folder, "policy": pol})
        entries.append((doc["run"], entry, folder))
    problems: List[dict] = report_refusals(rfs.url_of(LEDGERS), refused)
    return merged_view(sorted(folders.values(), key=lambda d: d["path"]), entries, problems)


__all__ = ["BucketLedger", "merged", "LEDGERS"]
