"""The change log, one module for every store: one JSON line per operation, appended durably.

A ``ChangeLog`` runs on the ``Store`` interface (``append``, ``read_all``, ``read_range``,
``list``) over the folder that holds the logs: a disk's state folder (``disk_log``: a
``state_store.StateFolder``, the store of the tool's state files, whose ``append`` keeps their
rules) or a bucket logdir's ``.tb-footprint/``
(``bucket_log``: the logdir's ``ObjectStore``). What a line is, how the logs are read, merged and
named when damaged, and the line of a rolled-back reduce are written here once.

Why one module: the change log's rules (a line, the logs a read merges, how one rolls over, what
damage is named) are one format every store reads and writes the same way (issue #26 item 2); the
disk's ``StateFolder`` and follower and the bucket's few functions are that format's two ends.

* One machine appends to ``history.jsonl``. A worker of a sharded batch on a disk appends to a
  file of its own, ``history-shard-I-of-N@HOST.jsonl`` beside it (the process's shard,
  ``lease.shard_label``, the one "which shard am I" of its leases, locks and lines): appends
  from two NFS clients to one file can interleave or lose data, so no two machines ever append
  to one file. A bucket's workers each append to an object of their own too (in
  ``.tb-footprint/history-shards/``: ``bucket_log``), instead of taking turns on one object by
  conditional rewrites. ``ChangeLog.read`` merges every one of them (the old single file
  included) into one log ordered by time.
* Lines are untrusted input (``trust.parse_json_lines``): only JSON objects with a finite number
  as ``time`` are entries (an entry that cannot be placed in time is no entry of this log), a
  damaged line costs only itself and ``ChangeLog.damage`` names it (file and line). A log larger
  than any append makes (``limit``: planted) is read only as far as the whole lines of its first
  ``limit`` bytes, in place (one buffer of at most ``limit`` bytes), and named.
* A log rolls over, as log files are rotated: an append that would take it past ``limit`` (a
  disk's 256 MB, a bucket's 64 MB: what one read takes whole) first sets the log aside under a
  sealed name (``<its name>.sealed-<its mtime, ms>-<a tag of its version>.jsonl``, beside the
  workers' logs, where the reader lists them) and starts a fresh one, so no line is ever hidden
  behind a full log nor refused; a planted oversize log is sealed aside the same way (and read,
  like any sealed log, only to its own limit). A seal is a link then an unlink on a disk and a
  copy then a conditional delete on a bucket: a kill between them leaves both names. The reader
  skips the live copy whose version the sealed name carries, and reads once the first lines of any
  log that a sealed log of its name holds byte for byte (a live log appended to since, or a copy
  a rival append left beside the next seal); a disk's next append finishes the seal first, and a
  seal drops the sealed copies of that log its own sealed log holds whole.
* On a disk a planted symlink, FIFO or folder under a log's name is never followed nor opened
  (``PosixStore``'s reads refuse it; ``StateFolder.append`` sets it aside and starts a fresh
  file); a torn line a full disk left is cut back; every append is fsynced.
"""
from __future__ import annotations

import csv
import errno
import hashlib
import heapq
import io
import json
import math
import os
import re
import socket
import sys
import threading
import time
from typing import Callable, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

from tb_footprint_plugin.codes import Outcome, StoreError
from tb_footprint_plugin.engine.changelog_files import HISTORY_NAME, SEALED, WORKER_FILE, is_entry
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.engine.lease import configure as configure_lease
from tb_footprint_plugin.engine.lease import shard_label
from tb_footprint_plugin.engine.retire_rules import KIND as RETIRE_KIND
from tb_footprint_plugin.engine.state_store import StateFolder
from tb_footprint_plugin.engine.trust import (DAMAGED_FILE, DAMAGED_LINE, MAX_STATE_BYTES, JsonLines, Untrusted,
                                              parse_json_lines)
from tb_footprint_plugin.engine.vault import who
from tb_footprint_plugin.engine.vault_reads import refuse_unreadable, unreadable_file
from tb_footprint_plugin.fmt import csv_cell
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.store import Entry, RangeReader, Store, StoreFailure
from tb_footprint_plugin.version import __version__

#: a bucket logdir's change log: a key of the logdir's store (the name a disk's state folder uses)
HISTORY = f"{STATE_DIR_NAME}/{HISTORY_NAME}"
#: where a bucket logdir's workers of a sharded batch keep their own change logs (``bucket_log``)
BUCKET_WORKERS = f"{STATE_DIR_NAME}/history-shards"
#: the logs' names (a worker's, one sealed aside) and what an entry is: ``changelog_files``, the
#: part of the change log ``trust`` reads too (a deleted identity's id is corroborated by it)
_WORKER_FILE, _SEALED, _timed = WORKER_FILE, SEALED, is_entry
#: what an oversize log is read by: pieces of this many bytes into one buffer
_PIECE = 8 << 20
#: seals an append tries before it gives up (each lost to another appender of the same log)
_SEAL_TRIES = 3
#: the first bytes of a sealed log compared with a log that may repeat it, before the whole
_HEAD = 4096
#: the bytes of a log ``ChangeLog.problems`` reads and parses at once (only what it names is kept;
#: a block's records as dicts are ~10x its bytes)
_BLOCK = 256 << 10
#: (a new column goes at the end: a spreadsheet or script reading the older ones by position keeps working;
#: the last three are a reduce's figures as things stand, ``local_views.history_view``: review R17 F13)
CSV_FIELDS = ("time", "op_id", "kind", "run", "policy", "before", "after", "verified", "outcome", "code",
              "backup_kept", "user", "host", "tool_version", "reason", "backup", "freed", "shard",
              "removed_from_logdir_bytes", "freed_now_bytes", "freed_after_purge_bytes")
#: what a log that cannot be read is, by the store's code: skipped (absent, or not a regular file
#: of ours: a planted link, FIFO or folder is nothing of ours to read); any other code is raised
_NOTHING_OF_OURS = frozenset({StoreError.NOT_FOUND, StoreError.SYMLINK, StoreError.NOT_REGULAR})


def worker_file_name(shard: str, host: Optional[str] = None) -> str:
    """The history file of one worker of a sharded batch: its shard label and its host."""
    i, n = (int(x) for x in shard.split("/"))
    h = re.sub(r"[^A-Za-z0-9._-]", "_", host or socket.gethostname())[:64] or "host"
    return f"history-shard-{i}-of-{n}@{h}.jsonl"


def configure_writer(shard: Optional[str]) -> Optional[str]:
    """Make this process a worker of ``shard`` ("I/N"; None: of no shard), its lines appended to
    its worker's own file (or the single ``history.jsonl`` again). The shard is the process's one
    label (``lease.configure``: its leases, locks and lines name the same one, review R7); this is
    that call under the change log's name. Returns the previous shard (``configure_writer(it)``
    restores it)."""
    before = shard_label()
    configure_lease(shard=shard)
    return before


def _own_file() -> str:
    """The name of the log this process appends to: its shard's own file, else the single one."""
    shard = shard_label()
    return worker_file_name(shard) if shard else HISTORY_NAME


def finite(value):
    """``value`` (a record as JSON parsed it, untrusted) with every number that is not finite
    (``NaN``, ``Infinity``, ``-Infinity``: Python's JSON reads and writes them, a browser's
    ``JSON.parse`` refuses them) replaced by None, in lists and objects too; every other value as
    it is. The one rule for what a history read gives: each log's lines as they are parsed
    (``_parsed``), and the entries the API returns with figures joined from manifests."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


#: a number too large for a float, as it reads once every digit (and ``+``) is 0 and every E an e: at
#: least 100 digits, or an exponent of three (fewer digits with a two-digit exponent are below 1e199)
_LARGE = (b"0" * 100, b"e000")
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789E+", b"000000000e0")  # 'E+123' reads 'e0000' too
_NUMBER_CHARS = frozenset(b"0123456789.+-eE")


def _may_not_be_finite(raw: bytes) -> bool:
    """Whether JSON text ``raw`` may hold a number that parses as no finite float: the tokens
    NaN, Infinity, -Infinity, or a number token (after ``:``, ``,`` or ``[``, not inside a string
    as a hex digest's ``5e123`` is) too large for a float. Literal searches of the bytes (C
    speed: a block of ordinary lines costs a few scans, no regular expression), then a look at
    each place found only."""
    if b"NaN" in raw or b"Infinity" in raw:
        return True
    zeros = raw.translate(_DIGITS_AS_ZERO)
    for large in _LARGE:
        at = zeros.find(large)
        while at >= 0:
            i = at
            while i > 0 and raw[i - 1] in _NUMBER_CHARS:
                i -= 1
            while i > 0 and raw[i - 1] in b" \t\r":
                i -= 1
            if i > 0 and raw[i - 1] in b":,[":
                return True
            at = zeros.find(large, at + 1)
    return False


def _parsed(raw: bytes, name: str, first_line: int = 1) -> JsonLines:
    """``trust.parse_json_lines`` of a log's bytes, each record's numbers finite (``finite``);
    records are walked only where the bytes may hold such a number (a block of 100,000 runs'
    lines costs one search, not a walk of every record)."""
    log = parse_json_lines(raw, name, first_line=first_line)
    if _may_not_be_finite(raw):
        log.records = [finite(r) for r in log.records]
    return log


def line_of(entry: dict) -> bytes:
    """One entry as its line: compact JSON with sorted keys.

    Compact separators: a reduce's entry is ~265 bytes instead of ~297, a tenth of what its run
    leaves in the state folder beside its backups (issue #28 item 2); readers parse JSON, so
    lines of older versions (", " and ": ") read the same."""
    return (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()


class ChangeLog:
    """The change log in ``folder`` of ``store`` (see the module docstring). ``workers``: the
    folder in which each worker of a sharded batch appends to a file of its own (None: none),
    found by a shallow listing of it, and the sealed logs (rolled over) with them; ``limit``: the
    largest log an append makes on this store (a larger one was planted; default
    ``MAX_STATE_BYTES``, never above the store's ``capabilities.append_limit``)."""

    def __init__(self, store: Store, folder: str = "", *, workers: Optional[str] = "",
                 limit: Optional[int] = None):
        self.store = store
        self.folder = folder
        self.workers = workers
        self.limit = MAX_STATE_BYTES if limit is None else limit
        if store.capabilities.append_limit is not None:
            # the store's appends never make a larger key (a bucket's rewrites the object whole):
            # a larger one was planted, and a log at that bound is full, to be sealed
            self.limit = min(self.limit, store.capabilities.append_limit)

    def key(self, name: str) -> str:
        """The key of the single log file ``name``."""
        return f"{self.folder}/{name}" if self.folder else name

    def name_of(self, key: str) -> str:
        """Where ``key`` is, as messages name it (a path, or a URL)."""
        return f"{self.store.location.rstrip('/')}/{key}"

    def own_key(self) -> str:
        """The key this process appends to (its worker's own file in a sharded batch)."""
        name = _own_file()
        if self.workers is not None and name != HISTORY_NAME:
            return f"{self.workers}/{name}" if self.workers else name
        return self.key(HISTORY_NAME)

    def keys(self) -> List[str]:
        """Every log: the single one and each worker's (by name, the single one first unless it
        is listed beside them)."""
        return [k for k, _e in self._listed()]

    def _listed(self) -> List[Tuple[str, Optional[Entry]]]:
        """``keys`` with what the listing said of each (None: the bucket's single log, not listed)."""
        single = self.key(HISTORY_NAME)
        if self.workers is None:
            return [(single, None)]
        try:
            found = list(self.store.list(self.workers, shallow=True))
        except StoreFailure as e:
            if e.code not in _NOTHING_OF_OURS:
                raise
            found = []
        names = {e.key.rsplit("/", 1)[-1]: e for e in found}
        ours = [(names[n].key, names[n]) for n in sorted(names)
                if _WORKER_FILE.match(n) or _SEALED.match(n) or (n == HISTORY_NAME and names[n].key == single)]
        # the single log beside the workers' (a disk's state folder) is listed when it is there;
        # elsewhere (a bucket's) it is read, and absent is nothing
        return ours if self.workers == self.folder else [(single, None)] + ours

    def append(self, entry: dict) -> None:
        """Append one entry (with the current time, and this process's shard) to this process's log."""
        self.append_lines([dict(entry, time=time.time())])

    def append_lines(self, lines: List[dict]) -> None:
        """Append whole entries (each with its ``time``) in one append: a bucket's costs a head, a
        read and a conditional put whatever their number. Raises ``StoreFailure``."""
        shard = shard_label()
        data = b"".join(line_of(dict(x, shard=shard) if shard and "shard" not in x else x) for x in lines)
        if not data:
            return
        key = self.own_key()
        if self.workers is not None and self.store.capabilities.append == "o_append":
            # a file's size is one stat: rolled over before the append would take it past its limit
            try:
                st = self.store.stat(key)
            except StoreFailure:  # not a regular file of ours: the store's append sets it aside
                st = None
            # +1: a newline a torn last line gets. A seal cut short between its link and its unlink
            # (both names on one inode) is finished first, whatever the append's size: appended
            # to, the line would land in the sealed log too (review R20 G1). Its sealed name is
            # looked for only when the log has a second name (the stat says how many; review R4)
            if st is not None and (st.size + len(data) + 1 > self.limit
                                   or (getattr(st, "links", 2) > 1
                                       and self._stat_or_none(self.sealed_key(key, st)) is not None)):
                self.seal(key, st)
        # the store decides the size where its append is atomic (a disk: under its flock; a
        # bucket: in its conditional rewrite): the stat above alone let concurrent appenders each
        # add a line past the limit (review R2-6). With nowhere to seal (no workers' folder) the
        # store's own bound alone
        limit = self.limit if self.workers is not None else None
        for attempt in range(_SEAL_TRIES):
            try:
                self.store.append(key, data, limit=limit)
                return
            except StoreFailure as e:
                # the log is full, or planted oversize: sealed, then appended again
                if e.code != StoreError.TOO_LARGE or self.workers is None or attempt == _SEAL_TRIES - 1:
                    raise
                st = self._stat_or_none(key)
                if st is None or st.size + len(data) + 1 <= self.limit:
                    continue  # another appender sealed it meanwhile: room in the fresh log
                self.seal(key, st)

    # --- one line per operation ---------------------------------------------------------------
    def logged(self, *, kind: Optional[str] = None, outcome: Optional[str] = None) -> FrozenSet[str]:
        """The operations (op_ids) with a line of ``kind`` and ``outcome`` (None: any), from one
        read of every log: what "one change-log line per operation" is checked against when a
        step killed between its line and the record that says it was written is done again
        (review R11). A log that cannot be read has none: a line written twice is seen and
        costs a line, a line missing is a change nobody can find (the one rule for every verb)."""
        return frozenset(op for op, k, o in self._operation_lines(
            lambda _op, k, o: (kind is None or k == kind) and (outcome is None or o == outcome)))

    def backups_said_kept(self, *, strict: bool = False) -> FrozenSet[str]:
        """The operations (op_ids) a line says were a reduce or a retirement ``verified`` (their
        backup kept) that no later line ends: no purge line of that op_id, no restore line whose
        ``of_op`` it is (a restore of a reduction or of a retirement). What a vault must hold a
        manifest of (review R26 F1: one missing hides which blobs its run's files are). One
        read of every log, a block at a time: only op_ids are held. A log that cannot be read
        names none (as ``logged``); ``strict``: raises its ``StoreFailure`` (``OSError``) instead
        (a bucket's blob forget then keeps every blob: ``bucket_blobs.names_in_bucket``)."""
        kept, ended = set(), set()

        def each(log: JsonLines, repeated: int) -> None:
            said_kept_into(log.records, kept, ended)

        if strict:
            self._walk_every(each)
        elif not self._walk_all(each):
            return frozenset()
        return frozenset(kept - ended)

    def runs_of(self, ops: FrozenSet[str], kinds: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """The run each of ``ops`` is named with by its reduce or retire line (its first such line;
        a line's run is untrusted: a string, else none), one read of every log; for words only.
        ``kinds``: filled with each one's kind (``reduce`` or ``retire``) too."""
        out: Dict[str, str] = {}

        def each(log: JsonLines, repeated: int) -> None:
            for e in log.records:
                op = e.get("op_id")
                if op in ops and op not in out and e.get("kind") in ("reduce", "retire") \
                        and isinstance(e.get("run"), str):
                    out[op] = e["run"]
                    if kinds is not None:
                        kinds[op] = e["kind"]

        if not ops:
            return out
        self._walk_all(each)
        return out

    def append_once(self, lines: List[dict]) -> List[dict]:
        """Append (in one append) those of ``lines`` (whole entries, each with its ``time``) whose
        operation has no line of their kind and outcome yet (``logged``'s rule, one read for
        all); returns those appended. Raises what ``append_lines`` raises."""
        if not lines:
            return []
        ops = {x.get("op_id") for x in lines}
        there = self._operation_lines(lambda op, _k, _o: op in ops)
        due = [x for x in lines if (x.get("op_id"), x.get("kind"), x.get("outcome")) not in there]
        self.append_lines(due)
        return due

    def _operation_lines(self, keep: Callable[[str, Optional[str], Optional[str]], bool] = lambda *_a: True
                         ) -> FrozenSet[Tuple[str, object, object]]:
        """(op_id, kind, outcome) of every line with an op_id (an entry: a finite ``time``) that
        ``keep`` keeps; none when a log cannot be read. Each log a block at a time (``_walk``):
        only those kept are held, never the log's records."""
        found = set()

        def said(v):  # lines are untrusted: a field that is no string says no kind, no outcome
            return sys.intern(v) if isinstance(v, str) else None

        def each(log: JsonLines, repeated: int) -> None:
            # a line a sealed log repeats adds what that log's adds: a set, read once or twice
            found.update(t for t in ((e["op_id"], said(e.get("kind")), said(e.get("outcome")))
                                     for e in log.records if isinstance(e.get("op_id"), str) and _timed(e))
                         if keep(*t))

        if not self._walk_all(each):
            return frozenset()
        return frozenset(found)

    def _walk_all(self, each: Callable[[JsonLines, int], None]) -> bool:
        """``each`` of every log's lines, a block at a time (``_walk``; a sealed log's lines a
        live one repeats passed again, as ``repeated``); False when a log could not be read."""
        try:
            self._walk_every(each)
        except (StoreFailure, OSError):
            return False
        return True

    def _walk_every(self, each: Callable[[JsonLines, int], None]) -> None:
        """``_walk_all``, raising what a log that could not be read raised."""
        listed = self._listed()
        sealed, heads = self._sealed_of(listed), {}
        for key in self._sealed_twice([k for k, _e in listed]):
            self._walk(key, sealed, heads, each)

    def sealed_key(self, key: str, entry: Entry) -> str:
        """Where the log ``key`` (now ``entry``) is kept once full: beside the workers' logs, named
        after it, its mtime and its version (the same name for the same bytes: a seal cut short is
        finished, never made twice)."""
        stem = key.rsplit("/", 1)[-1][:-len(".jsonl")]
        name = f"{stem}.sealed-{max(0, int(entry.mtime * 1000)):013d}-{_tag(entry.version)}.jsonl"
        return f"{self.workers}/{name}" if self.workers else name

    def seal(self, key: str, entry: Optional[Entry]) -> None:
        """Set the full log ``key`` (as ``entry`` found it) aside under its sealed name, so the next
        append starts a fresh one. Nothing is lost: a disk's is one rename; a bucket's a copy, then
        the delete of that version alone. Another appender that sealed or grew it first: nothing
        done here (the append goes on to whatever log is there)."""
        if entry is None:
            return
        dst = self.sealed_key(key, entry)
        try:
            made = self.store.replace(key, dst, if_source_version=entry.version, if_absent=True)
            self._drop_copies_held_by(dst, entry.size, made.version)
            return
        except StoreFailure as e:
            if e.code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
                return
            if e.code != StoreError.ALREADY_EXISTS:
                raise
        # the sealed name is taken: a seal killed between its copy and its delete (the same
        # version's copy), or something planted there. The live log goes only when that copy
        # holds its bytes; else both stay and the append goes on to the full log
        held = self.store.stat(dst)
        if held is None or held.size != entry.size or (held.version != entry.version and  # a disk's: one inode
                                                       self.store.read_range(dst, 0, held.size)
                                                       != self.store.read_range(key, 0, entry.size)):
            raise StoreFailure(StoreError.ALREADY_EXISTS, dst, f"{self.name_of(dst)} is in the way of the full change "
                               f"log {self.name_of(key)} being set aside; both kept")
        res = self.store.delete([key], versions={key: entry.version})[0]
        if not res.ok and res.code not in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND):
            raise StoreFailure(res.code or StoreError.STORE_ERROR, key, res.message)
        if res.ok:
            self._drop_copies_held_by(dst, entry.size, held.version)

    def _stat_or_none(self, key: str) -> Optional[Entry]:
        try:
            return self.store.stat(key)
        except StoreFailure:  # not a regular file of ours: no log of ours there
            return None

    def _drop_copies_held_by(self, dst: str, size: int, version: str) -> None:
        """After ``dst`` (``size`` bytes) was sealed: delete each other sealed log of its name whose
        bytes are the first bytes of ``dst`` (review R20 G1, G2: a seal cut short, or one whose
        delete another appender's line made fail, left a copy of the log that went on to grow; its
        every byte is in ``dst``, so nothing is lost, and each line is kept once). Best effort:
        one listing, at a roll-over only; a copy not dropped is still read once (``read_logs``).
        One of the same size only as another name of ``dst``'s file (a disk's link, its
        ``version``): two processes each dropping the other's of two alike would drop both."""
        stem = _SEALED.match(dst.rsplit("/", 1)[-1]).group(1)
        try:
            found = [e for k, e in self._listed() if k != dst and e is not None
                     and (e.size < size or (e.size == size and e.version == version
                                            and self.store.capabilities.append == "o_append"))
                     and (_SEALED.match(k.rsplit("/", 1)[-1]) or [None, None])[1] == stem]
            for e in found:
                if _same_prefix(self.store, e.key, dst, e.size):
                    self.store.delete([e.key], versions={e.key: e.version})
        except StoreFailure:
            return

    def read_logs(self) -> List[JsonLines]:
        """Each log parsed (``trust.JsonLines``: its records and its damaged lines, named)."""
        out = []
        listed = self._listed()
        sealed = self._sealed_of(listed)
        heads: Dict[str, bytes] = {}
        for key in self._sealed_twice([k for k, _e in listed]):
            name = self.name_of(key)
            try:
                data = self.store.read_all(key, self.limit)
                too_large = False
            except StoreFailure as e:
                if e.code in _NOTHING_OF_OURS:
                    continue
                if e.code != StoreError.TOO_LARGE:
                    raise
                data, too_large = self._whole_lines_of_prefix(key), True
            log = _parsed(data, name)
            m = _SEALED.match(key.rsplit("/", 1)[-1])
            stem = m.group(1) if m else key.rsplit("/", 1)[-1][:-len(".jsonl")]
            if m and not too_large:  # its first bytes, for a later log that may repeat it: no read more
                heads.setdefault(key, bytes(data[:_HEAD]))
            if not too_large and sealed.get(stem):
                repeated = data.count(b"\n", 0, self._repeated_prefix(key, data, sealed[stem], heads))
                if repeated:  # those lines are read from the sealed log (review R20 G1, G2)
                    kept = [(r, n) for r, n in zip(log.records, log.lines) if n > repeated]
                    log.records, log.lines = [r for r, _n in kept], [n for _r, n in kept]
                    log.damaged = [d for d in log.damaged if d.line > repeated]
            if log.torn and _SEALED.match(key.rsplit("/", 1)[-1]):
                # a live log's torn last line becomes a damaged line once the next append ends it;
                # a sealed log is never appended to again, so its own is named here
                n = data.count(b"\n") + 1
                d = Untrusted(DAMAGED_LINE, name, f"line {n}: cut short (no newline); skipped")
                d.line = n
                log.damaged.append(d)
            del data  # one log's bytes at a time
            if too_large:
                d = Untrusted(DAMAGED_FILE, name, f"larger than {self.limit} bytes: not a log this tool wrote; "
                                                  f"only the whole lines of its first {self.limit} bytes read")
                d.line = 0
                log.damaged.append(d)
            out.append(log)
        return out

    def _sealed_of(self, listed: List[Tuple[str, Optional[Entry]]]) -> Dict[str, List[Entry]]:
        """The sealed logs listed, by the name of the log each was: what a log may repeat."""
        sealed: Dict[str, List[Entry]] = {}
        for k, e in listed:
            m = _SEALED.match(k.rsplit("/", 1)[-1])
            if m and e is not None and 0 < e.size <= self.limit:
                sealed.setdefault(m.group(1), []).append(e)
        return sealed

    def _sealed_twice(self, keys: List[str]) -> List[str]:
        """``keys`` less a live log whose bytes a sealed one holds already (a bucket's seal killed
        between its copy and its delete): a stat of each live log that has sealed ones, no
        request at all when none was sealed."""
        tags: Dict[str, set] = {}
        for k in keys:
            m = _SEALED.match(k.rsplit("/", 1)[-1])
            if m:
                tags.setdefault(m.group(1), set()).add(m.group(2))
        out = []
        for k in keys:
            name = k.rsplit("/", 1)[-1]
            stem = name[:-len(".jsonl")]
            if not _SEALED.match(name) and stem in tags:
                try:
                    st = self.store.stat(k)
                except StoreFailure:
                    st = None
                if st is not None and _tag(st.version) in tags[stem]:
                    continue
            out.append(k)
        return out

    def _repeated_prefix(self, key: str, data, sealed: List[Entry], heads: Dict[str, bytes]) -> int:
        """How many first bytes (whole lines) of the log ``key`` (its bytes ``data``: in hand, or a
        ``_Ranged`` over its open file) a sealed log of its name holds already, byte for byte: a
        seal cut short (a bucket's copy, or a disk's link, with its delete not made) of a log
        appended to since, or the copy left beside a later seal of the same log. 0 mostly: a
        sealed log larger than ``data``, or whose first bytes differ, costs at most the read of
        its first ``_HEAD`` bytes (once a read). The largest such sealed log counts; of two
        alike, the one listed first keeps the lines."""
        for e in sorted(sealed, key=lambda e: -e.size):
            if e.key == key or e.size > len(data) or (e.size == len(data) and e.key > key and _SEALED.match(
                    key.rsplit("/", 1)[-1])):
                continue
            if e.key not in heads:
                try:
                    heads[e.key] = self.store.read_range(e.key, 0, min(e.size, _HEAD))
                except StoreFailure:
                    heads[e.key] = b""
            head = heads[e.key]
            if not head or data[:len(head)] != head:
                continue
            try:
                if _same_prefix(self.store, e.key, data, e.size):
                    return e.size
            except StoreFailure:
                continue
        return 0

    def _whole_lines_of_prefix(self, key: str) -> bytearray:
        """The whole lines of the first ``limit`` bytes of an oversize log, read in pieces into one
        buffer and cut there in place (review R19 N1: never a second copy of ``limit`` bytes)."""
        buf = _read_into(self.store, key, 0, self.limit)
        del buf[buf.rfind(b"\n") + 1:]
        return buf

    def read(self) -> List[dict]:
        """Every entry of every log, oldest first (entries of one time keep their log's order)."""
        out = [e for log in self.read_logs() for e in log.records if _timed(e)]
        out.sort(key=lambda e: e["time"])  # stable: one file's entries of one time stay in order
        return out

    def newest(self, n: int) -> Tuple[List[dict], int]:
        """The newest ``n`` entries of every log (oldest first) and how many entries there are in
        all: the last ``n`` of ``read``, in its order (by time; entries of one time in the order
        the logs are read and each log's line order), by its rules (damaged lines skipped, sealed
        logs, a seal cut short read once, an oversize log to its limit). Each log is read and
        parsed a block at a time (``_walk``) and only the ``n`` newest entries are kept, in a
        bounded heap: what the tab's Activity page and ``history --last`` show of a log of
        100,000 runs' lines (issue #28) costs a block and ``n`` entries, not every line as dicts."""
        kept: List[Tuple[float, int, int, dict]] = []
        total = 0
        listed = self._listed()
        sealed, heads = self._sealed_of(listed), {}
        for i, key in enumerate(self._sealed_twice([k for k, _e in listed])):
            def each(log: JsonLines, repeated: int, i: int = i) -> None:
                nonlocal total
                for rec, line in zip(log.records, log.lines):
                    if line <= repeated or not _timed(rec):
                        continue  # read from the sealed log that holds it / no entry
                    total += 1
                    if n <= 0:
                        continue
                    # (time, log, line): read's order, unique, so the entries are never compared
                    item = (rec["time"], i, line, rec)
                    if len(kept) < n:
                        heapq.heappush(kept, item)
                    elif item[:3] > kept[0][:3]:
                        heapq.heapreplace(kept, item)

            self._walk(key, sealed, heads, each)
        kept.sort(key=lambda item: item[:3])
        return [item[3] for item in kept], total

    def damage(self) -> List[Untrusted]:
        """The damaged lines of every log (``trust.DAMAGED_LINE``: file and line; a planted
        oversize log ``DAMAGED_FILE``)."""
        return [d for log in self.read_logs() for d in log.damaged]

    def problems(self) -> List[Untrusted]:
        """What ``status`` names of every log, from one read of each: its damaged lines
        (``damage``) and its lines that parse as JSON objects but are no entry (no finite
        ``time``: ``read`` skips them), each named by file and line like a line that does not
        parse; each log's in line order. Each log is read and parsed a block at a time and only
        what is named is kept (the entries are not: status and every start ask this, and a log's
        records as dicts were ~10x its bytes); the reader's rules for sealed logs, a seal cut short
        and an oversize log are ``read_logs``'s."""
        out: List[Untrusted] = []
        listed = self._listed()
        sealed, heads = self._sealed_of(listed), {}
        for key in self._sealed_twice([k for k, _e in listed]):
            found = self._log_problems(key, sealed, heads)
            if found is not None:
                out += sorted(found, key=lambda d: d.line)  # each log's in line order (an oversize log's first)
        return out

    def _opened(self, key: str) -> Optional[Tuple["_Ranged", int, bool, Optional[RangeReader]]]:
        """The log ``key`` to read a block at a time: its bytes (``_Ranged``), how many of them are
        read (its size, or the whole lines of its first ``limit`` when larger), whether it is
        larger, and the reader to close; None when it is nothing of ours. A folder's log is read
        through one open file, in blocks; any other store's (a bucket's, at most 64 MB) is one
        read whole, as ``read_logs`` makes it (one request, not one a block)."""
        try:
            if self.store.capabilities.append != "o_append":
                data = self.store.read_all(key, self.limit)
                return _Ranged(lambda s, e: data[s:e], len(data)), len(data), False, None
            reader = self.store.open_read(key)
        except StoreFailure as e:
            if e.code in _NOTHING_OF_OURS:
                return None
            if e.code != StoreError.TOO_LARGE:
                raise
            data = self._whole_lines_of_prefix(key)
            return _Ranged(lambda s, e: bytes(data[s:e]), len(data)), len(data), True, None
        size = reader.seek(0, io.SEEK_END)

        def fetch(start: int, stop: int) -> bytes:  # one read of the open file
            reader.seek(start)
            return reader.read(stop - start)

        if size <= self.limit:
            return _Ranged(fetch, size), size, False, reader
        # oversize (planted): the whole lines of its first ``limit`` bytes, found by reading back
        # from there a block at a time (never the ``limit`` bytes held at once)
        end = self.limit
        while end > 0:
            block = fetch(max(0, end - _BLOCK), end)
            cut = block.rfind(b"\n")
            if cut >= 0:
                end = end - len(block) + cut + 1
                break
            end -= len(block) if block else end
        return _Ranged(fetch, end), end, True, reader

    def _log_problems(self, key: str, sealed: Dict[str, List[Entry]],
                      heads: Dict[str, bytes]) -> Optional[List[Untrusted]]:
        """``problems`` of one log, in no order; None when it is nothing of ours."""
        found: List[Untrusted] = []

        def each(log: JsonLines, repeated: int) -> None:
            found.extend(d for d in log.damaged if d.line > repeated)
            for rec, n in zip(log.records, log.lines):
                if n > repeated and not _timed(rec):
                    d = Untrusted(DAMAGED_LINE, log.path, f"line {n}: a JSON object but no history entry "
                                                          "(no time); skipped")
                    d.line = n
                    found.append(d)

        walked = self._walk(key, sealed, heads, each)
        if walked is None:
            return None
        name, line, torn, too_large = walked
        if torn and _SEALED.match(key.rsplit("/", 1)[-1]):
            # a live log's torn last line becomes a damaged line once the next append ends it; a
            # sealed log is never appended to again, so its own is named here
            d = Untrusted(DAMAGED_LINE, name, f"line {line}: cut short (no newline); skipped")
            d.line = line
            found.append(d)
        if too_large:
            d = Untrusted(DAMAGED_FILE, name, f"larger than {self.limit} bytes: not a log this tool wrote; "
                                              f"only the whole lines of its first {self.limit} bytes read")
            d.line = 0
            found.append(d)
        return found

    def _walk(self, key: str, sealed: Dict[str, List[Entry]], heads: Dict[str, bytes],
              each: Callable[[JsonLines, int], None]) -> Optional[Tuple[str, int, bool, bool]]:
        """Read the log ``key`` a block of whole lines at a time, handing each block parsed (its
        lines numbered as in the whole log) to ``each`` with the number of the last line a sealed
        log holds already (``read_logs``' rule: those are read from the sealed log); returns its
        name, the number its last line has, whether that line is torn and whether the log is
        oversize, or None when it is nothing of ours."""
        opened = self._opened(key)
        if opened is None:
            return None
        data, size, too_large, reader = opened
        name = self.name_of(key)
        m = _SEALED.match(key.rsplit("/", 1)[-1])
        stem = m.group(1) if m else key.rsplit("/", 1)[-1][:-len(".jsonl")]
        try:
            if m and not too_large:
                heads.setdefault(key, bytes(data[0:min(size, _HEAD)]))
            upto = self._repeated_prefix(key, data, sealed[stem], heads) if not too_large and sealed.get(stem) else 0
            pos, line, carry, torn = 0, 1, b"", False
            while True:
                piece = data[pos:min(size, pos + _BLOCK)] if pos < size else b""
                pos += len(piece)
                buf = carry + piece if carry else piece
                done = pos >= size or not piece
                cut = len(buf) if done else buf.rfind(b"\n") + 1
                block, carry = buf[:cut], buf[cut:]
                del buf, piece
                start = pos - len(carry) - len(block)
                repeated = line - 1 + block.count(b"\n", 0, upto - start) if start < upto else 0
                log = _parsed(block, name, first_line=line)
                each(log, repeated)
                line += block.count(b"\n")
                torn = log.torn
                del log, block
                if done:
                    return name, line, torn, too_large
        finally:
            if reader is not None:
                reader.close()


class _Ranged:
    """Bytes ``[0, size)`` of a log read on demand: ``r[a:b]`` is one ``fetch(a, b)``; what
    ``ChangeLog._repeated_prefix`` and ``_same_prefix`` compare a log in hand or open with."""

    def __init__(self, fetch, size: int):
        self._fetch = fetch
        self._size = size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, sl: slice) -> bytes:
        start = 0 if sl.start is None else sl.start
        stop = self._size if sl.stop is None else min(sl.stop, self._size)
        return self._fetch(start, stop) if stop > start else b""


def _read_into(store: Store, key: str, start: int, end: int, piece_size: int = _PIECE) -> bytearray:
    """Bytes ``[start, end)`` of ``key`` (fewer at its end), read in pieces of ``piece_size`` into
    one buffer: never the pieces and their join at once (review R19 N1, R20 G3)."""
    buf = bytearray()
    while start + len(buf) < end:
        asked = min(end - start - len(buf), piece_size)
        piece = store.read_range(key, start + len(buf), start + len(buf) + asked)
        buf += piece
        if len(piece) < asked:  # its end: no read more to learn it
            break
        del piece
    return buf


def _same_prefix(store: Store, key: str, other, size: int) -> bool:
    """Whether ``key`` holds exactly ``size`` bytes, the first ``size`` of ``other`` (bytes in
    hand, or another key of ``store``), compared a piece at a time."""
    pos = 0
    while pos < size:
        mine = store.read_range(key, pos, min(size, pos + _PIECE))
        theirs = (store.read_range(other, pos, pos + len(mine)) if isinstance(other, str)
                  else other[pos:pos + len(mine)])
        if not mine or mine != theirs:
            return False
        pos += len(mine)
    return not store.read_range(key, size, size + 1)


def _tag(version: str) -> str:
    """A short tag of a log's version, for its sealed name (a version may hold any character)."""
    return hashlib.sha256(str(version).encode()).hexdigest()[:12]


# --- a disk ------------------------------------------------------------------------------------
def disk_log(state: str, *, create: bool = False) -> Optional[ChangeLog]:
    """The change log of the state folder ``state``; None when there is no such folder (nothing
    logged yet) unless ``create``."""
    try:
        return ChangeLog(StateFolder(state, create=create))
    except StoreFailure as e:
        if e.code in _NOTHING_OF_OURS:
            return None
        raise


def history_files(state: str) -> List[str]:
    """Every history file of a state directory: the single one and each worker's (sorted)."""
    try:
        log = disk_log(state)
        return [os.path.join(state, k) for k in log.keys()] if log else []
    except StoreFailure:  # unreadable: ``read_history`` names it
        return []


def history_path(state: str) -> str:
    """The history file this process appends to (its worker's own in a sharded batch)."""
    return os.path.join(state, _own_file())


def append_history(state: str, entry: dict) -> None:
    """Append one entry (with the current time) durably, to this worker's own file."""
    disk_log(state, create=True).append(entry)


def logged_operations(state: str, *, kind: Optional[str] = None, outcome: Optional[str] = None) -> FrozenSet[str]:
    """``ChangeLog.logged`` of a state folder's logs (none when there is no folder, or it cannot
    be read: the one rule)."""
    try:
        log = disk_log(state)
    except StoreFailure:
        return frozenset()
    return log.logged(kind=kind, outcome=outcome) if log else frozenset()


def said_kept_into(records: List[dict], kept: set, ended: set) -> None:
    """``ChangeLog.backups_said_kept``'s rule for some lines (``records``, parsed, untrusted): the
    op_id of a verified reduce's or retirement's line into ``kept``; of a purge's, of a rolled-back
    reduce's or retirement's that kept no backup (its manifest gone with its backups, the originals
    back: ``ended_line``), or the ``of_op`` of a restore's, into ``ended``."""
    for e in records:
        op = e.get("op_id")
        if not isinstance(op, str) or not _timed(e):
            continue
        kind, outcome = e.get("kind"), e.get("outcome")
        if kind in ("reduce", "retire") and outcome == Outcome.VERIFIED:
            kept.add(sys.intern(op))
        elif kind in ("reduce", "retire") and outcome == Outcome.ROLLED_BACK and e.get("backup_kept") is not True:
            ended.add(sys.intern(op))
        elif kind == "purge":
            ended.add(sys.intern(op))
        elif kind == "restore" and isinstance(e.get("of_op"), str):
            ended.add(sys.intern(e["of_op"]))


def said_kept_lines(data: bytes, name: str) -> Tuple[set, set]:
    """``said_kept_into`` of the whole lines ``data`` holds (lines appended to the log ``name``
    since it was read: a damaged or torn one is passed over, as a read of the log does)."""
    kept: set = set()
    ended: set = set()
    said_kept_into(_parsed(data, name).records, kept, ended)
    return kept, ended


def backups_said_kept(state: str) -> FrozenSet[str]:
    """``ChangeLog.backups_said_kept`` of a state folder's logs (none when there is no folder, or
    it cannot be read)."""
    try:
        log = disk_log(state)
    except StoreFailure:
        return frozenset()
    return log.backups_said_kept() if log else frozenset()


#: state folder -> ({change-log file: offset read up to (the end of its last whole line)}, the
#: operations ``backups_said_kept`` found, those it found ended); one entry held
_SAID_KEPT: dict = {}
#: the longest stretch looked back through for a log's last whole line
_LINE_LOOKBACK = 1 << 20


def _whole_lines_end(path: str) -> Optional[int]:
    """The offset just past ``path``'s last newline (0 when it has none in its last
    ``_LINE_LOOKBACK`` bytes and is no longer than that), None when it cannot be told."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = max(0, size - _LINE_LOOKBACK)
            f.seek(start)
            tail = f.read(size - start)
    except OSError:
        return None
    cut = tail.rfind(b"\n")
    if cut < 0:
        return 0 if start == 0 else None
    return start + cut + 1


def backups_said_kept_now(state: str) -> FrozenSet[str]:
    """``backups_said_kept`` of ``state``, read whole once; later calls (each run a
    restore releases, each group a purge settles: each appends its line) read only the whole
    lines appended to each log since (``said_kept_lines``); a log that shrank or was
    replaced (sealed, put back from a copy: another file at its name, whatever its size; review
    R27 F2) has it read whole again."""
    files = history_files(state)
    held = _SAID_KEPT.get(state)
    if held is not None:
        offsets, kept, ended = held
        try:
            now = {f: os.stat(f) for f in files}
        except OSError:
            now = None
        if now is not None and all(f in now and (now[f].st_dev, now[f].st_ino) == (dev, ino) and now[f].st_size >= n
                                   for f, (dev, ino, n) in offsets.items()):
            for f in files:
                # only what was appended since (nothing read when nothing was: a batch asks per run),
                # up to its last whole line; a torn tail is read again next time
                dev, ino, at = offsets.get(f, (now[f].st_dev, now[f].st_ino, 0))
                if now[f].st_size <= at:
                    continue
                try:
                    with open(f, "rb") as fh:
                        fh.seek(at)
                        data = fh.read(now[f].st_size - at)
                except OSError:
                    break
                cut = data.rfind(b"\n") + 1
                if cut:
                    more, gone = said_kept_lines(data[:cut], f)
                    kept |= more
                    ended |= gone
                    offsets[f] = (dev, ino, at + cut)
            else:
                return frozenset(kept - ended)
    offsets = {}
    for f in files:
        try:
            st = os.stat(f)  # its identity before its end: a log replaced in between is read whole next time
        except OSError:
            continue
        end = _whole_lines_end(f)
        if end is not None:
            offsets[f] = (st.st_dev, st.st_ino, end)
    # read after the offsets: a line appended meanwhile is read now and again later (a set)
    kept = set(backups_said_kept(state))
    _SAID_KEPT.clear()
    if len(offsets) == len(files):
        _SAID_KEPT[state] = (offsets, kept, set())
    return frozenset(kept)


def missing_manifests(kept: FrozenSet[str], has_manifest: Callable[[str], bool]) -> List[str]:
    """The one rule of every store (review R26 F1): the operations of ``kept`` (what the change
    log says were reduced or retired and verified, their backup kept: ``backups_said_kept``)
    whose manifest the vaults do not hold at all (``has_manifest``: present, whatever it says,
    purged or refused) — *missing*: which blobs their runs' files are is unknown, so a purge or
    a restore's release keeps every blob (``EveryBlob``) and status names each. Sorted."""
    return sorted(op for op in kept if not has_manifest(op))


def read_history(state: str) -> List[dict]:
    """Every entry of every history file, oldest first; lines that are not JSON objects with a
    time are skipped (a damaged line costs only itself: ``history_damage`` names it). A state
    folder or history file this user may not read raises ``vault_reads.StateUnreadable`` naming
    it: never an empty log (review R16 F16)."""
    return read_history_page(state)[0]


class HistoryPage(NamedTuple):
    """A page of the change log: ``entries`` (oldest first), ``total`` (how many there are in
    all) and ``exact``: False when ``total`` is a lower bound (a bucket's page that did not read
    every manifest counts each one it did not read as one entry)."""

    entries: List[dict]
    total: int
    exact: bool = True


def read_history_page(state: str, newest: Optional[int] = None) -> Tuple[List[dict], int]:
    """``read_history``'s entries (all, or the newest ``newest``: ``ChangeLog.newest``, read a
    block at a time) and how many there are in all; raises as ``read_history`` does."""
    refuse_unreadable(state)
    log = disk_log(state)
    try:
        if log is None:
            return [], 0
        if newest is None:
            entries = log.read()
            return entries, len(entries)
        return log.newest(newest)
    except StoreFailure as e:
        if e.code == StoreError.PERMISSION:
            path = os.path.join(state, e.key) if e.key else state
            raise unreadable_file(path, "change log" if e.key else "state folder",
                                  PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)) from None
        raise


def history_damage(state: str) -> List[Untrusted]:
    """The damaged lines of every history file (``trust.DAMAGED_LINE``: file and line)."""
    log = disk_log(state)
    try:
        return log.damage() if log else []
    except StoreFailure:  # unreadable: ``read_history`` names it
        return []


def history_problems(state: str) -> List[Untrusted]:
    """``ChangeLog.problems`` of a state folder's logs (damaged lines, lines with no time)."""
    log = disk_log(state)
    try:
        return log.problems() if log else []
    except StoreFailure:  # unreadable: ``read_history`` names it
        return []


# --- a bucket ----------------------------------------------------------------------------------
def bucket_log(store: Store) -> ChangeLog:
    """The change log of a bucket logdir (``store``: the logdir's ``ObjectStore``): the object
    ``.tb-footprint/history.jsonl``, and each worker of a sharded batch's own object in
    ``.tb-footprint/history-shards/`` (``worker_file_name``), each appended by a conditional
    rewrite. Not beside the single one as on a disk: the state folder of a bucket holds its vault,
    and a listing of it would list every backup; this folder's is one request (one page) a read.
    Only a rollback writes a line: a clean reduce makes no request more."""
    return ChangeLog(store, STATE_DIR_NAME, workers=BUCKET_WORKERS)  # bounded by the store's append_limit


#: where a bucket logdir keeps the witness of its verified operations whose backups are blobs of
#: a local folder (``bucket_kept_log``)
BUCKET_KEPT = f"{STATE_DIR_NAME}/blob-ops"


def bucket_kept_log(store: Store) -> ChangeLog:
    """The witness of a bucket logdir's verified reductions and retirements whose backups went to
    a local blob folder (``--backup-dir /folder``): a change log of its own (the object
    ``.tb-footprint/blob-ops/history.jsonl``, a shard worker's own in ``blob-ops/shards/``), one
    line per operation (``kept_line``, ``append_kept``): a batch's once past its commit record, a
    rewrite transaction's and a retirement's before their journal goes, and each one a start
    finishes forward (once). What names such an operation once its manifest object is gone (review R26 F1: a bucket's
    change log has no line of a clean reduce, so nothing else did): ``backups_said_kept`` of it,
    less the operations whose manifest object is listed (``missing_manifests``, the one rule), keeps
    every blob of the folder (``bucket_blobs.names_in_bucket``) and status names each. Apart from
    ``bucket_log``: the bucket's history and a shard partition read reductions from their manifests,
    and a line of every reduce there would show and count each twice. A blob folder only: server-side
    copies are each operation's own keys, which no other operation's purge deletes."""
    # sealed at 1 MiB (~8,000 lines): a bucket's append rewrites the object whole, so a witness of
    # 100,000 operations would be rewritten at 13 MB an append (#28); its sealed pieces are read with it
    return ChangeLog(store, BUCKET_KEPT, workers=f"{BUCKET_KEPT}/shards", limit=KEPT_LOG_LIMIT)


#: the largest piece of a bucket's witness an append rewrites (``bucket_kept_log``)
KEPT_LOG_LIMIT = 1 << 20


def kept_line(op_id: str, kind: str, run: str) -> dict:
    """The witness line of a verified bucket operation (``bucket_kept_log``): what
    ``said_kept_into`` reads (op_id, kind, outcome ``verified``, time) and its run, for the words."""
    return {"time": time.time(), "op_id": op_id, "kind": kind, "run": run, "outcome": str(Outcome.VERIFIED)}


def append_kept(store: Store, lines: List[dict], *, once: bool = False) -> Optional[str]:
    """Append ``lines`` (``kept_line``; ``ended_line``) to the bucket logdir's witness in one append (a
    head, a read and a conditional put; none when there is no line); ``once``: only those whose operation has no
    verified line yet (``ChangeLog.append_once``: a start finishing an operation whose process may
    have written it before it was killed). A store that refuses it is said, never raised (the
    operations stand; only their witness is not written): returned, None when written."""
    if not lines:
        return None
    try:
        log = bucket_kept_log(store)
        log.append_once(lines) if once else log.append_lines(lines)
    except StoreFailure as e:
        return f"the witness line(s) of its operation(s) were not written ({e})"
    return None


def ended_line(op_id: str, kind: str, run: str) -> dict:
    """The witness line that ends ``kept_line``'s (``said_kept_into``): operation ``op_id`` rolled
    back once its witness line may have been written (a retirement a start put back, a
    transaction whose journal would not close), its originals back, its manifest about to go with
    its backups. Written before the manifest goes: a kill in between leaves the manifest (which
    names its blobs) and an ended line, never a line whose manifest is gone for good."""
    return {"time": time.time(), "op_id": op_id, "kind": kind, "run": run, "outcome": str(Outcome.ROLLED_BACK),
            "backup_kept": False}


def missing_manifests_said(log: Optional[ChangeLog], ops: List[str]) -> Dict[str, Tuple[Optional[str], str]]:
    """Each of ``ops`` (``missing_manifests``) with its run and ``missing_manifest_words``, its run
    and kind read from ``log`` (None: unknown), one read of it only when there is one to say."""
    kinds: Dict[str, str] = {}
    runs = log.runs_of(frozenset(ops), kinds) if log is not None and ops else {}
    return {op: (runs.get(op), missing_manifest_words(op, runs.get(op), kinds.get(op))) for op in ops}


def missing_manifest_words(op: str, run: Optional[str], kind: Optional[str] = None) -> str:
    """What status (and a purge) says of an operation ``missing_manifests`` names, on every store
    (``kind``: its line's, ``retire`` said as such)."""
    done = "retired" if kind == "retire" else "reduced"
    return (f"operation {op} of run {run or '?'}: the change log says it was {done} and verified, its manifest "
            "is missing: every backup is kept")


def reduce_line(*, op_id: str, run: str, policy: Optional[str], before, after, outcome: str,
                reason: Optional[str], code, user: Optional[str] = None, host: Optional[str] = None) -> dict:
    """The change-log entry of a reduce (its time is added when appended), on every store: kept
    (``verified``, its backup kept) or rolled back (its originals as they were: ``after`` is
    ``before``, no backup kept), with its outcome's code and reason. ``user``/``host``: as its
    manifest recorded them (this process's, ``vault.who``, by default)."""
    kept = outcome == str(Outcome.VERIFIED)
    mine = who() if user is None or host is None else {}
    return {"op_id": op_id, "kind": "reduce", "run": run, "policy": policy, "before": before, "after": after,
            "verified": kept, "outcome": outcome, "reason": reason, "code": str(code) if code else None,
            "backup_kept": kept, "user": mine["user"] if user is None else user,
            "host": mine["host"] if host is None else host, "tool_version": __version__}


def rolled_back_line(out: RunOutcome, op_id: str, policy: Optional[str]) -> dict:
    """The change-log line of a run whose reduce was rolled back (its originals as they were, its
    manifest and backups dropped), in the fields a disk's rollback writes: outcome
    ``rolled_back`` whatever the run's own outcome says (a skip found after the journal is a
    rollback too, as on a disk), the outcome's code and reason, no backup kept."""
    line = dict(reduce_line(op_id=op_id, run=out.run, policy=policy, before=out.bytes_before,
                            after=out.bytes_before, outcome=str(Outcome.ROLLED_BACK), reason=out.reason,
                            code=out.code), time=time.time())
    shard = shard_label()
    return dict(line, shard=shard) if shard else line


def purge_mark(reason: str) -> dict:
    """Who purges (``vault.who``), with which version, and why: what a purge's change-log line says
    of it, on every store (review R21 PD18); a bucket's purge records it in each manifest it marks
    (``purged_with``), its line read back from there (``purge_line``)."""
    return {**who(), "tool_version": __version__, "reason": reason}


def purge_line(op_id: str, run: str, freed, by: object) -> dict:
    """The change-log entry of a purge (its time is added when appended, or read with it), on every
    store: which operation's backup went, what it freed, and who purged with which version and why
    (``by``: ``purge_mark``'s record; a bucket's is read back from its manifest, untrusted: strings
    only, else null, as a manifest written before it was recorded reads)."""
    said = {k: by.get(k) if isinstance(by, dict) and isinstance(by.get(k), str) else None
            for k in ("reason", "user", "host", "tool_version")}
    return {"op_id": op_id, "kind": "purge", "run": run, "policy": None, "before": freed, "after": 0,
            "freed": freed, "verified": None, "outcome": "purged", "backup_kept": False, **said}


def purge_reason(m: dict, vault: str) -> str:
    """Why a purge's line is written, on every store: the backup of operation ``m`` (a reduction's
    or a retirement's manifest) deleted from ``vault`` (its folder or URL), and whether its run was
    restored before (else a retired run's was its only copy)."""
    if m.get("kind") == RETIRE_KIND:
        return (f"retired run {m['run']} ({m['op_id']}) deleted from the vault"
                + (" (restored before)" if m.get("restored_by") else ": its only copy"))
    return f"backup of {m['op_id']} deleted from {vault}" + (" (run restored before)" if m.get("restored_by") else "")


def append_rolled_back(store: Store, lines: List[dict], outs: Optional[List[RunOutcome]] = None, *,
                       once: bool = False) -> Optional[str]:
    """Append ``lines`` to a bucket logdir's change log in one append. The rollbacks they record
    stand either way: a store that refuses the append is said in each of ``outs``' reasons (as a
    disk's rollback on a full disk keeps going and says ``not_recorded``), never raised, and
    returned (what a caller with no outcome to tell, a recovery, says instead); None when written.
    ``once``: those of an operation the log has a line of already left out (``ChangeLog.append_once``:
    a recovery redoing what a killed process may have written)."""
    try:
        if once:
            bucket_log(store).append_once(lines)
        else:
            bucket_log(store).append_lines(lines)
    except StoreFailure as e:
        said = f"its change-log line was not written ({e})"
        for o in outs or ():
            o.reason = f"{o.reason}; {said}" if o.reason else said
        return said
    return None


def history_csv(entries: List[dict]) -> str:
    """The entries as CSV with a header row. Run names and a log's user/host are untrusted: a
    cell a spreadsheet would take for a formula is written as text (``fmt.csv_cell``)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for e in entries:
        w.writerow({k: csv_cell(e[k]) for k in CSV_FIELDS if k in e})
    return buf.getvalue()


# --- following a disk's logs -------------------------------------------------------------------
#: per history file this process follows (by ``ChangeLog.name_of``): the last line read (its bytes, up to ``_TAIL``), the
#: bytes read, and the entries read so far that say a run changed (``changes_since``); only what
#: was appended since is read again
_FOLLOWED: Dict[str, Tuple[bytes, int, List[dict]]] = {}
_FOLLOW_LOCK = threading.Lock()
_TAIL = 256
#: the bytes of whole lines ``_follow`` parses at once (their records are held only until sifted),
#: and the longest unended line it holds while reading on (a longer one is read again once ended)
_FOLLOW_BLOCK = 1 << 20
#: the fields ``changes_since`` keeps of an entry (a few hundred bytes a run at most)
_KEPT = ("time", "run", "op_id", "kind", "outcome", "user", "host")


def changes_since(state: str, run: str, since: float, outcomes) -> List[dict]:
    """The entries of ``run`` newer than ``since`` whose outcome is one of ``outcomes``, oldest
    first. Each history file is read once per process and then only from where it was left
    (a batch asked this for every run: reading every file whole each time was quadratic); a
    file replaced, truncated or set aside since is read again from its start. Lines are
    untrusted: only JSON objects with a finite ``time`` count, as in ``read_history``."""
    out: List[dict] = []
    log = disk_log(state)
    if log is None:
        return out
    seen = set()
    with _FOLLOW_LOCK:
        # the reader's rules for sealed logs (review R10): a live log that a sealed one holds
        # already (a seal cut short) is not followed, and a line a sealed log repeats of a later
        # log of its name (byte for byte: the same fields) counts once
        for key in log._sealed_twice(log.keys()):
            try:
                entries = _follow(log, key)
            except StoreFailure:  # gone, or not a regular file: nothing of ours to read
                _FOLLOWED.pop(log.name_of(key), None)
                continue
            for e in entries:
                if e.get("run") == run and e["time"] > since and e.get("outcome") in outcomes:
                    said = repr([e.get(k) for k in _KEPT])
                    if said not in seen:
                        seen.add(said)
                        out.append(e)
    out.sort(key=lambda e: e["time"])
    return out


def _follow(log: ChangeLog, key: str) -> List[dict]:
    """The kept entries of ``key``, reading only the complete lines appended since last time: from
    just before where it was left, which must give back the last line read (else the file was
    replaced, truncated or set aside: it is read again from its start), at most
    ``MAX_STATE_BYTES`` a call. Read a piece (one disk read) at a time and its whole lines parsed
    as they come: what is held is a piece and the line it ends in, not every byte read (review R20
    G3 held them in one buffer: a planted 256 MB log was 256 MB at once). A line still unended
    past ``_FOLLOW_BLOCK`` (no line this tool writes: a planted one) is not held; once ended, it is
    read once whole and parsed as any other."""
    ident = log.name_of(key)
    tail, offset, entries = _FOLLOWED.get(ident, (b"", 0, []))
    start = offset - len(tail)
    asked = min(CHUNK, MAX_STATE_BYTES)
    piece = log.store.read_range(key, start, start + asked)
    if piece[:len(tail)] != tail or len(piece) < len(tail):
        tail, offset, entries, start = b"", 0, [], 0
        piece = log.store.read_range(key, 0, asked)
    end, pos, lo = start + MAX_STATE_BYTES, start + len(piece), len(tail)  # lo: the new bytes in piece
    held, long_line = bytearray(), False  # the bytes after the last whole line (none when long_line)
    while True:
        nl = piece.rfind(b"\n", lo)
        if nl < 0:
            if not long_line:
                held += memoryview(piece)[lo:]
                if len(held) > _FOLLOW_BLOCK:  # an unended line this long: not held (read once ended)
                    held, long_line = bytearray(), True
        else:
            if long_line:  # the long line ends here: read once whole, from where it began
                first = piece.find(b"\n", lo) + 1
                line = bytearray(log.store.read_range(key, offset, pos - len(piece) + first))
                _sift(line, ident, entries)
                tail, offset, lo, long_line = _tail_after(tail, line), offset + len(line), first, False
                del line
            held += memoryview(piece)[lo:nl + 1]
            _sift(held, ident, entries)
            tail, offset = _tail_after(tail, held), offset + len(held)
            held = bytearray(memoryview(piece)[nl + 1:])
        if len(piece) < asked or pos >= end:  # its end (a short read), or as far as one call reads
            break
        asked = min(CHUNK, end - pos)
        piece = log.store.read_range(key, pos, pos + asked)
        pos, lo = pos + len(piece), 0
    _FOLLOWED[ident] = (tail, offset, entries)
    return entries


def _tail_after(tail: bytes, block: bytearray) -> bytes:
    """The last ``_TAIL`` bytes of ``tail`` followed by ``block``."""
    return bytes(block[-_TAIL:]) if len(block) >= _TAIL else (tail + bytes(block))[-_TAIL:]


def _sift(buf: bytearray, ident: str, entries: List[dict]) -> None:
    """Add to ``entries`` what ``changes_since`` keeps of the whole lines ``buf``, parsed by the
    reader's own parser (review R10: no second parser of the format) a block at a time, so only
    its records are held at once; a damaged line costs only itself."""
    pos, stop = 0, len(buf)
    while pos < stop:
        end = buf.rfind(b"\n", pos, min(stop, pos + _FOLLOW_BLOCK)) + 1 or buf.find(b"\n", pos, stop) + 1 or stop
        for e in _parsed(buf[pos:end], ident).records:
            if _timed(e) and isinstance(e.get("run"), str):
                entries.append({k: e.get(k) for k in _KEPT})
        pos = end


__all__ = ["BUCKET_KEPT", "KEPT_LOG_LIMIT", "append_kept", "ended_line", "bucket_kept_log", "kept_line", "missing_manifest_words", "missing_manifests_said", "backups_said_kept", "backups_said_kept_now", "missing_manifests", "said_kept_into", "said_kept_lines", "BUCKET_WORKERS", "CSV_FIELDS", "ChangeLog", "HISTORY", "HISTORY_NAME", "StateFolder", "append_history", "append_rolled_back",
           "bucket_log", "changes_since", "configure_writer", "disk_log", "finite", "history_csv", "history_damage",
           "HistoryPage", "history_files", "history_problems", "history_path", "line_of", "logged_operations", "purge_line", "purge_mark", "purge_reason", "read_history", "read_history_page", "reduce_line", "rolled_back_line", "worker_file_name"]
