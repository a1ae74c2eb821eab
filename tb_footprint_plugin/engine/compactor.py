"""A local reduce batch's compaction, a round for many committed runs (issue #27 item 5).

Each committed run's backups used to be compacted (compressed, or packed) alone, in the run's
own turn: a pack, its index object and their syncs a run, the run's manifest read again, a
``/proc`` scan and the in-flight journals read a run, and the batch's end repacking those small
packs together. Here a run's compaction is noted (durably, as ``Vault.compact_ops`` notes first)
in its own turn, and the runs are compacted in rounds of many (``max_blobs`` backups, or
``max_ops`` runs, or the batch's end): their small backups in shared packs of ``PACK_BATCH``.

A batch's full rounds run in a worker process (``CompactWorker``, ``engine.compact_worker``),
on the other core beside the next runs' transactions; a batch of a few runs, compacted once at
its end, starts none. (A thread was measured first and dropped: it saved no wall time, the two
threads taking turns at the interpreter.) The worker compacts as any other process sharing the
vault does; a worker that dies leaves its unanswered rounds to the batch's end here.

Nothing about the guarantees changes: a compaction still runs under its run's lock (a restore
or purge of that run never races it; a run taken meanwhile keeps its note for the next start),
every blob under its own lock, and a blob a transaction under way backs up too (another run of
this batch with ``--jobs``, any process's) stays plain, ``KEPT_BUSY`` — tried again at the
batch's end, when no transaction of this batch is under way, and else by the next start (the
note stays). A kill at any instant leaves each backup whole in one form; from the note on
(written right after the run's commit, as the old per-run compaction wrote it first) the next
start compacts it. The note names this process (``waits_for``): a start of another process while
the batch runs leaves it to the batch's rounds. The transaction writes that note before its swap
record (``note_before_swap``), so a kill anywhere from the swap on (before the commit, recovery
rolling it forward; between the commit and the round) leaves the note for the next start; a run's
rollback drops it (``swap.rollback``, in this process or in recovery; a note left beside a
``rolled_back`` manifest is dropped by the next start). A kill of the batch's process leaves its worker to end the
rounds it was given, then end (its stdin closes).
"""
from __future__ import annotations

import contextlib
import errno
import json
import signal
import socket
import subprocess
import threading
from typing import Dict, List, Optional, Tuple

from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.catalogue import journal_blobs
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine import vault as vault_mod
from tb_footprint_plugin.engine.lease import LockRefused
from tb_footprint_plugin.engine.run_lock import run_lock
from tb_footprint_plugin.engine.vault import compact_operation, KEPT_BUSY, note_compaction, PACK_BATCH
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.spawn import python_child

#: one noted compaction: (op id, run, its backups' digests, its manifest or None: read again)
Item = Tuple[str, str, List[str], Optional[dict]]

#: a batch's rounds run in a worker process of their own (``CompactWorker``)
USE_WORKER = True

def this_process() -> dict:
    """This process as a compaction note's ``waits_for`` names it: ``{host, pid, pid_start}``."""
    return {"host": socket.gethostname(), **lease.me()}


def note_before_swap(ctx: Context, op_id: str, shas: List[str]) -> None:
    """A compressing reduce's compaction noted before its swap record, naming this process (which
    compacts it right after the commit, alone or in a batch's round): a kill from the swap on
    leaves the note to the next start, which compacts the run once its manifest says it committed.
    A note that cannot be written (a full disk) is none: the reduction goes on, and the batch or the
    lone compaction writes it after the commit, as before."""
    with contextlib.suppress(OSError):
        ctx.vault.note_compaction(op_id, shas, waits_for=this_process())


def noted_here(ctx: Context, op_id: str) -> bool:
    """Whether ``op_id``'s compaction note is there and names this process (written before the
    swap): the note need not be written again after the commit."""
    return ctx.vault.compaction_waits_for(op_id) == this_process()


class BatchCompactor:
    """Compacts the committed operations ``submit`` is given in rounds: when ``max_blobs``
    backups or ``max_ops`` operations wait, and at ``close``. Safe to share between a batch's
    threads (one round at a time)."""

    def __init__(self, ctx: Context, max_blobs: int = PACK_BATCH, max_ops: int = 64,
                 use_worker: Optional[bool] = None):
        self.ctx = ctx
        self.max_blobs = max_blobs
        self.max_ops = max_ops
        self.use_worker = USE_WORKER if use_worker is None else use_worker
        self._lock = threading.Lock()
        self._waiting: List[Item] = []
        self._blobs = 0
        self._again: Dict[str, Item] = {}  # a blob was kept busy: tried again at the batch's end
        self._worker: Optional[CompactWorker] = None
        self._shards: Dict[str, str] = {}  # shard folder (blobs/ab) → a digest in it: pruned at the end

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
            if not noted_here(self.ctx, op_id):  # the transaction's note names the same blobs
                vault.note_compaction(op_id, shas, waits_for=this_process())
        except Exception:  # noqa: BLE001 - the reduction stands; its backups stay plain
            return False
        with self._lock:
            self._waiting.append((op_id, run, shas, m))
            self._blobs += len(shas)
            self._shards.update((s[:2], s) for s in shas)
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
            worker, self._worker, self.use_worker = self._worker, None, False
            if not finish:
                if worker is not None:
                    worker.stop()  # its round under way ends; the rest are the settling's
                return
            if group:
                if worker is None or not worker.send(group):
                    self._compact(group, retry=True)
            if worker is not None:
                busy, unanswered = worker.finish()
                for op, run, shas, _m in busy:
                    self._again[op] = (op, run, shas, None)
                for g in unanswered:  # the worker died (a kill, a failure to start): rounds here
                    self._compact(g, retry=True)
            again, self._again = list(self._again.values()), {}
            for i in range(0, len(again), self.max_ops):  # rounds of max_ops: run locks and fds bounded
                self._compact(again[i:i + self.max_ops], retry=False)
            shards, self._shards = list(self._shards.values()), {}
            with contextlib.suppress(OSError):
                self.ctx.vault.prune_shards(shards)  # those the rounds' packing left empty

    def _compact(self, group: List[Item], retry: bool) -> None:
        """One round, in the worker process when one runs (``retry``: an operation that found a
        blob busy is tried again at ``close``), else here. Never raises."""
        if retry and self._worker_for_round() is not None and self._worker.send(group):
            return
        done = compact_round(self.ctx, group)
        if retry and done is not None:
            self._retry_busy(group, [op for op, what in done.items() if KEPT_BUSY in what.values()])

    def _retry_busy(self, group: List[Item], ops: List[str]) -> None:
        items = {i[0]: i for i in group}
        for op_id in ops:
            if op_id in items:
                op, run, shas, _m = items[op_id]
                self._again[op_id] = (op, run, shas, None)  # its manifest is read again then

    def _worker_for_round(self) -> Optional["CompactWorker"]:
        """The batch's worker process, started at its first full round (a batch of a few runs,
        compacted once at its end, never pays the start); None when workers are off or it could
        not start (the rounds then run here)."""
        if self._worker is None and self.use_worker:
            try:
                self._worker = CompactWorker(self.ctx)
            except Exception:  # noqa: BLE001 - no worker (review R9 F4: never a committed run's failure)
                self.use_worker = False
        return self._worker


class CompactWorker:
    """The child process (``engine.compact_worker``) a batch's rounds go to, so they run on
    another core beside the next runs' transactions: JSON lines in (the logdir, then one round a
    line), one reply a round out (the operations that found a blob busy), read by a thread so
    neither pipe fills. It compacts as any process sharing the vault does, under the same locks;
    every round it is given was noted first, so a kill of it (or of this process) leaves the notes
    to the batch's end here or to the next start."""

    def __init__(self, ctx: Context):
        # the child imports this very package from where this process did (a checkout, a wheel),
        # isolated: never the current folder (a shared logdir one may stand in, review R9 F1:
        # ``python -m`` put it first on sys.path), nor PYTHON* variables, nor user site-packages
        self.proc = subprocess.Popen(python_child("tb_footprint_plugin.engine.compact_worker", "main"), cwd="/",
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     close_fds=True)
        self.sent = 0  # rounds given
        self.answered = 0  # rounds it said it ended
        self.ready = threading.Event()  # it answered its first line: its signal handlers are set
        self._mu = threading.Lock()
        self._pending: Dict[int, List[Item]] = {}  # rounds given, not answered: only these are held
        self._busy: List[Item] = []  # operations of answered rounds that found a blob busy
        self._reader = threading.Thread(target=self._read, name="compact-worker-replies", daemon=True)
        self._reader.start()
        # what this process packs, the worker packs (a caller may have set another threshold)
        head = {"logdir": ctx.logdir, "backup_dir": ctx.backup_dir, "vault": ctx.vault.root,
                "pack_below": vault_mod.PACK_BELOW, "pack_batch": vault_mod.PACK_BATCH}
        if not self._write(head):
            self.stop()
            raise OSError(errno.EPIPE, "the compaction worker did not start")

    def _write(self, doc: dict) -> bool:
        try:
            self.proc.stdin.write(json.dumps(doc).encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):  # it died (a broken pipe), or its pipe is closed
            return False

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self.proc.stdout:
                with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                    doc = json.loads(line)
                    if doc.get("ready") is True:
                        self.ready.set()
                        continue
                    busy = {op for op in doc["busy"] if isinstance(op, str)}
                    with self._mu:
                        group = self._pending.pop(int(doc["n"]), None)
                        if group is not None:
                            self.answered += 1
                            self._busy.extend(i for i in group if i[0] in busy)

    def send(self, group: List[Item]) -> bool:
        """Give the worker a round (the manifests stay here: it reads its own); False when it is
        gone (the caller compacts the round itself)."""
        with self._mu:
            n, self.sent = self.sent, self.sent + 1
            self._pending[n] = [(op, run, shas, None) for op, run, shas, _m in group]
        if self._write({"n": n, "round": [[op, run, shas] for op, run, shas, _m in group]}):
            return True
        with self._mu:
            self._pending.pop(n, None)
        return False

    def finish(self) -> Tuple[List[Item], List[List[Item]]]:
        """No more rounds: wait for the worker to end them all. (the operations of its rounds that
        found a blob busy, the rounds it never answered: to do here)."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait()
        except BaseException:  # Ctrl-C while it ends its rounds: it stops after the one under way
            self.stop()
            raise
        self._reader.join()
        self.proc.stdout.close()
        with self._mu:
            return list(self._busy), [self._pending[n] for n in sorted(self._pending)]

    def stop(self, grace: float = 60.0) -> None:
        """An interrupt: the round under way ends, no other starts (``SIGTERM``), then the
        worker is gone; killed after ``grace`` seconds (a kill is as safe: the notes stay)."""
        with contextlib.suppress(OSError):
            self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join()
        self.proc.stdout.close()


def compact_round(ctx: Context, group: List[Item]) -> Optional[Dict[str, Dict[str, str]]]:
    """One round: each operation under its run's lock (a run taken meanwhile keeps its note),
    compacted together (``Vault.compact_ops``, the in-flight journals read once); op id → digest →
    what was done, or None when the round failed (the notes stay for the next start). Never raises."""
    try:
        with contextlib.ExitStack() as stack:
            ops: Dict[str, List[str]] = {}
            manifests: Dict[str, dict] = {}
            for op_id, run, shas, m in group:
                try:
                    stack.enter_context(run_lock(ctx, run))
                except (LockRefused, OSError):
                    continue  # a restore or purge has it now: the next start compacts it
                ops[op_id] = shas
                if m is not None:
                    manifests[op_id] = m
            if not ops:
                return {}
            # the shard folders its packing empties stay till the batch's end (``close``): the
            # next runs' backups would make most of them again at once
            return ctx.vault.compact_ops(ops, manifests, busy=journal_blobs(ctx), noted=True, prune=False)
    except Exception:  # noqa: BLE001 - the reductions stand; the notes stay for the next start
        return None


def compact_committed(ctx: Context, op_id: str, run: str) -> None:
    """A lone run's compaction (no batch) right after its commit, under the run's lock, so no
    restore or purge of the run races it; a blob another run's transaction backs up too stays
    plain until that one's turn. Never raises: a run taken meanwhile, or a lock file the disk
    refuses (ENOSPC, EMFILE), leaves the note for the next start and the backups hard links."""
    try:
        with run_lock(ctx, run):
            compact_operation(ctx.vault, op_id, journal_blobs(ctx), noted=noted_here(ctx, op_id))
    except (LockRefused, OSError):
        note_compaction(ctx.vault, op_id)


__all__ = ["BatchCompactor", "compact_committed", "compact_round", "CompactWorker", "note_before_swap", "noted_here",
           "this_process", "USE_WORKER"]
