"""A bucket purge's journal: what ``bucket_purge.BucketCopies`` writes right before its intent
(the first manifest marked purged) and removes at its end, and how a start finishes the purge it
names once its holder is gone (``KilledBucketPurges``, through ``purge_run.finish_killed``), as a
disk's start finishes a purge from its intents (issue #26: recovery written once).

The journal (``kind`` ``PURGE_KIND``, in the journal folder every start lists already, so a start
with nothing to finish makes no request more) names the operations the purge is about to mark,
one entry each (its run and op, no file), and carries its holder's lease (``engine.lease``): a
start leaves a live purge alone, its operations ``skipped_live``. The readers of the journal
folder see an entry of no file: no key to roll back, no blob named, no reduction uncommitted.
"""
from __future__ import annotations

import contextlib
from typing import Dict, List, Optional

from tb_footprint_plugin.codes import Failure, Skip, StoreError
from tb_footprint_plugin.engine import lease, manifest, purge_run
from tb_footprint_plugin.engine.bucket_blob_index import collect
from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry, names_our_backup
from tb_footprint_plugin.engine.catalogue_rules import entry_released
from tb_footprint_plugin.engine.bucket_state import (
    STORE_FAILURES,
    BucketState,
    BucketTxnError,
    BucketVault,
    must_close,
    must_delete,
    now_s,
    owner_gone,
    vault_url,
)
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.journal_object import PURGE_KIND, PURGING, ObjectJournal
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome, failed
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.storage.paths import is_op_id
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore, listing_of



def purge_journal_first(ostore: ObjectStore, vault: BucketVault, purge_id: str, ms: List[dict]) -> dict:
    """The begin record of a bucket purge's journal (``PURGE_KIND``): the operations it is about
    to mark purged, one entry each (its run and op, no file: what is left of their copies is
    listed when it is finished), and its holder's lease (``engine.lease``: a start leaves a live
    purge alone; ``renew`` keeps it)."""
    now = now_s()
    return {"op": purge_id, "kind": PURGE_KIND, "logdir": ostore.url, "step": Rec.PLANNED, "created": now,
            "vault": vault.root, PURGING: [{"run": m["run"], "op": m["op_id"], "files": []} for m in ms],
            "host": lease.HOST, **lease.me(), **lease.renewed({}, now)}


def renew(journal: ObjectJournal) -> None:
    """A live purge's journal rewritten (one conditional put) once half its lease has passed, its
    lease pushed forward: a start on another host leaves the purge alone while it goes on."""
    now = now_s()
    renewed = journal.doc.get("renewed")
    if isinstance(renewed, (int, float)) and now - renewed < lease.lease_seconds() / 2:
        return
    journal.step(Rec.DELETING, **lease.renewed({}, now))


class KilledBucketPurges(purge_run.KilledPurges):
    """The bucket purges a start found killed past their intent (their journals, ``PURGE_KIND``),
    finished by the one finish (``purge_run.finish_killed``), as a disk's start finishes its own:

    - killed: each operation a journal names whose manifest says purged (its intent: no restore
      uses its copies from then on), or whose restore marked entries released (a restore that
      left an original in the vault lets the others' copies go), with those copies still there
      (one listing of its prefix);
    - holding: a run named by a purge whose holder still runs (the lease rules, ``owner_gone``)
      is left for a later start (``Skip.LOCKED``: ``skipped_live``, ``run_locked``);
    - finish: the copies left deleted (a vault of blobs forgets what nothing names, ``collect``);
    - ``close``: the journals of gone holders whose every operation was finished removed (one
      killed before its intent names none marked: nothing to finish, its journal goes).

    Untrusted input: an entry whose op is no operation id, or whose manifest does not read or
    names another run, is passed over; only keys a purged manifest names as this vault's own
    backups are deleted."""

    finish_errors = (BucketTxnError, *STORE_FAILURES, ValueError)  # one failed outcome: retried by a later start

    def __init__(self, ostore: ObjectStore, vault: BucketVault, journals: List[ObjectJournal]) -> None:
        self.ostore, self.vault, self.journals = ostore, vault, journals
        self.st = BucketState.of(ostore)
        self.live_runs: set = set()
        self.gone: Dict[str, List[str]] = {}  # a gone holder's journal path -> the operations it names
        self.by_path = {j.path: j for j in journals}

    def killed(self) -> List[purge_run.Killed]:
        out = []
        for j in self.journals:
            live = not owner_gone(j.doc, self.st)
            named = [(en.get("op"), en.get("run")) for en in j.live_entries()]
            named = [(op, run) for op, run in named if is_op_id(op) and isinstance(run, str)]
            if not live:
                self.gone[j.path] = [op for op, _run in named]
            for op_id, run in named:
                m = self._manifest(op_id)
                if m is None or m["op_id"] != op_id or m["run"] != run or not (
                        m["backup_purged"] or any(entry_released(m, f) for f in m["files"])):
                    continue  # not marked: this purge never reached it (its copies are a restore's)
                if live:
                    self.live_runs.add(run)
                out.append(purge_run.Killed(op_id, run, self._left(m), m))
        return out

    def _manifest(self, op_id: str) -> Optional[dict]:
        path = self.vault.manifest(op_id)
        doc, _ = self.st.read(path)
        try:
            return manifest.read(doc, vault_url(self.ostore, path)) if doc is not None else None
        except Untrusted:
            return None

    def _left(self, m: dict) -> List[dict]:
        """The copies of ``m`` still in the vault that its mark let go: one listing of its prefix
        (none for blobs). Marked purged, every copy; else those of the entries its restore
        released (``entry_released``: the others are originals that restore left, kept)."""
        if self.vault.blobs is not None:
            return []
        try:
            present = {f"{self.vault.root}/{k}" for k in listing_of(self.vault.store, f"blobs/{m['op_id']}")}
        except StoreFailure as e:
            if e.code != StoreError.NOT_FOUND:
                raise
            present = set()
        return [f for f in m["files"] if not is_blob_entry(f) and names_our_backup(self.vault, f)
                and f["backup"] in present and (m["backup_purged"] or entry_released(m, f))]

    def holding(self):
        return contextlib.nullcontext(
            lambda run: (Skip.LOCKED, "a purge of it is still under way") if run in self.live_runs else None)

    def finish(self, killed: List[purge_run.Killed]) -> List[purge_run.Finished]:
        out = []
        for k in killed:
            must_delete(self.ostore, [f["backup"] for f in k.intent])
            freed = sum(f["size"] for f in k.intent)
            out.append(purge_run.Finished(k.op_id, k.run, freed, f"an interrupted purge of {k.op_id} was finished "
                                                                 f"({freed} more byte(s) freed)", m=k.m))
        if killed and self.vault.blobs is not None:  # what no manifest or journal names is forgotten
            fig = collect(self.ostore, self.vault)
            if fig.get("blocked") or fig.get("blocked_by_damaged_index"):
                raise BucketTxnError(Failure.STORE_ERROR, f"{self.vault.blobs.folder}: the vault of blobs could not "
                                     "forget the purged backups yet; a later start does it")
        return out

    def close(self, finished: List[purge_run.Finished]) -> List[RecoveryOutcome]:
        """The journals of gone holders removed, each once every operation it names is finished
        (none left for later: locked, or a failure, which keeps them all for the next start)."""
        if any(f.code is not None and not f.op_id for f in finished):
            return []
        left = {f.op_id for f in finished if f.code is not None}
        out = []
        for path, ops in self.gone.items():
            if left.intersection(ops):
                continue
            j = self.by_path[path]
            try:
                must_close(j)
            except (BucketTxnError, *STORE_FAILURES) as e:
                out.append(failed(j.op_id, "?", f"the journal of a finished purge could not be removed: {e}"))
        return out


__all__ = ["PURGE_KIND", "KilledBucketPurges", "purge_journal_first", "renew"]
