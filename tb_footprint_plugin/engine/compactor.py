"""A local reduce batch's compaction, a round for many committed runs (issue #27 item 5).

Each committed run's backups used to be compacted (compressed, or packed) alone, in the run's
own turn: a pack, its index object and their syncs a run, the run's manifest read again, a
``/proc`` scan and the in-flight journals read a run, and the batch's end repacking those small
packs together. Here a run's compaction is noted (durably, as ``Vault.compact_ops`` notes first)
in its own turn, and the runs are compacted in rounds of many (``max_blobs`` backups, or
``max_ops`` runs, or the batch's end): their small backups in shared packs of ``PACK_BATCH``.

(Compacting on a thread beside the next runs' transactions was measured and dropped: on the
profile-heavy bench it saved no wall time, the two threads taking turns at the interpreter.)

Nothing about the guarantees changes: a compaction still runs under its run's lock (a restore
or purge of that run never races it; a run taken meanwhile keeps its note for the next start),
every blob under its own lock, and a blob a transaction under way backs up too (another run of
this batch with ``--jobs``, any process's) stays plain, ``KEPT_BUSY`` — tried again at the
batch's end, when no transaction of this batch is under way, and else by the next start (the
note stays). A kill at any instant leaves each backup whole in one form; from the note on
(written right after the run's commit, as the old per-run compaction wrote it first) the next
start compacts it. The note names this process (``waits_for``): a start of another process while
the batch runs leaves it to the batch's rounds. A kill between a run's commit and its note leaves
its backups plain, as it did before this module (safe; freed by a purge).
"""
from __future__ import annotations

import contextlib
import socket
import threading
from typing import Dict, List, Optional, Tuple

from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.catalogue import journal_blobs
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.journal import RunLock, RunLocked
from tb_footprint_plugin.engine.vault import compact_operation, KEPT_BUSY, note_compaction, PACK_BATCH
from tb_footprint_plugin.storage.paths import is_sha256

#: one noted compaction: (op id, run, its backups' digests, its manifest or None: read again)
Item = Tuple[str, str, List[str], Optional[dict]]


class BatchCompactor:
    """Compacts the committed operations ``submit`` is given in rounds: when ``max_blobs``
    backups or ``max_ops`` operations wait, and at ``close``. Safe to share between a batch's
    threads (one round at a time)."""

    def __init__(self, ctx: Context, max_blobs: int = PACK_BATCH, max_ops: int = 64):
        self.ctx = ctx
        self.max_blobs = max_blobs
        self.max_ops = max_ops
        self._lock = threading.Lock()
        self._waiting: List[Item] = []
        self._blobs = 0
        self._again: Dict[str, Item] = {}  # a blob was kept busy: tried again at the batch's end

    def submit(self, op_id: str, run: str) -> bool:
        """After committed ``op_id`` (of ``run``) released its run: its compaction noted (from here
        on a kill leaves it to the next start) and queued; a full round compacted now. Never
        raises; False when nothing could be noted (the backups stay the hard links they are,
        freed by a purge)."""
        vault = self.ctx.vault
        try:
            m = vault.read_manifest(op_id)
            shas = list(dict.fromkeys(f["sha256"] for f in m.get("files", [])
                                      if isinstance(f, dict) and is_sha256(f.get("sha256"))))
            vault.note_compaction(op_id, shas, waits_for={"host": socket.gethostname(), **lease.me()})
        except Exception:  # noqa: BLE001 - the reduction stands; its backups stay plain
            return False
        with self._lock:
            self._waiting.append((op_id, run, shas, m))
            self._blobs += len(shas)
            if self._blobs >= self.max_blobs or len(self._waiting) >= self.max_ops:
                group, self._waiting, self._blobs = self._waiting, [], 0
                self._compact(group, retry=True)
        return True

    def close(self, finish: bool = True) -> None:
        """The batch's end: with ``finish``, the waiting operations compacted, then those that
        found a blob busy tried once more (no transaction of this batch is under way now);
        without (an interrupt), nothing more: the notes stay for the next start."""
        with self._lock:
            group, self._waiting, self._blobs = self._waiting, [], 0
            if not finish:
                return
            if group:
                self._compact(group, retry=True)
            again, self._again = list(self._again.values()), {}
            for i in range(0, len(again), self.max_ops):  # rounds of max_ops: run locks and fds bounded
                self._compact(again[i:i + self.max_ops], retry=False)

    def _compact(self, group: List[Item], retry: bool) -> None:
        """One round: each operation under its run's lock (a run taken meanwhile keeps its note),
        compacted together (``Vault.compact_ops``). Never raises: a failure keeps the notes."""
        ctx = self.ctx
        try:
            with contextlib.ExitStack() as stack:
                ops: Dict[str, List[str]] = {}
                manifests: Dict[str, dict] = {}
                for op_id, run, shas, m in group:
                    try:
                        stack.enter_context(RunLock(ctx.lock_dir, run))
                    except (RunLocked, OSError):
                        continue  # a restore or purge has it now: the next start compacts it
                    ops[op_id] = shas
                    if m is not None:
                        manifests[op_id] = m
                if not ops:
                    return
                done = ctx.vault.compact_ops(ops, manifests, busy=journal_blobs(ctx), noted=True)
            if retry:
                items = {i[0]: i for i in group}
                for op_id, what in done.items():
                    if KEPT_BUSY in what.values():
                        op, run, shas, _m = items[op_id]
                        self._again[op_id] = (op, run, shas, None)  # its manifest is read again then
        except Exception:  # noqa: BLE001 - the reductions stand; the notes stay for the next start
            pass


def compact_committed(ctx: Context, op_id: str, run: str) -> None:
    """A lone run's compaction (no batch) right after its commit, under the run's lock, so no
    restore or purge of the run races it; a blob another run's transaction backs up too stays
    plain until that one's turn. Never raises: a run taken meanwhile, or a lock file the disk
    refuses (ENOSPC, EMFILE), leaves the note for the next start and the backups hard links."""
    try:
        with RunLock(ctx.lock_dir, run):
            compact_operation(ctx.vault, op_id, journal_blobs(ctx))
    except (RunLocked, OSError):
        note_compaction(ctx.vault, op_id)


__all__ = ["BatchCompactor", "compact_committed"]
