"""The vault's operation log: the one durable record of every operation's manifest.

An operation's manifest is the fold of its records (``last_state``): its first state in full,
each later one (committed, restored, salvaged, purged) as the top-level fields it changed
(``manifest_change``), beside a purge's intent and end. Records are fsynced JSON lines in
shared logs, ``<vault>/oplog/segments/<time>-<pid>-<random>.jsonl``, one per process that
writes (no two processes ever append to one file; a batch of a thousand runs writes one file,
not two small files a run, which cost a 4 KiB disk block each — issue #28). Each line starts
with its op id and carries the operation's sequence number, which orders its records across
segments. ``Index`` finds each operation's records by reading each segment once and then only
what was appended since, so a command reading 10,000 manifests reads each line about twice, and
a run late in a batch reads no more of the log than the first (``tests/test_oplog_hot_path.py``).
The last read of each operation whose records are all sealed is kept (``Index.memo``, bounded):
a command's several reads of the manifests decode the log once (``status`` and a batch's end
read them once, ``catalogue.read_vaults``, and share that read among their passes).

Older versions wrote a manifest file per operation (``<vault>/ops/<op_id>.json``) and a log per
operation (``<vault>/oplog/<op_id>.jsonl``); both are still read (``engine.vault``): a manifest
file stands until the segments hold a state of its operation (the next change is logged there
in full), a lost or corrupt one is rebuilt from its log into the segments (``rebuild_manifests``).

What is logged is the whole manifest but what follows from the rest (``_loggable`` /
``derived``: blob names, float times, the plan checks that repeat the fidelity lines). A state
too large for one line is logged in parts, taken only once all of them are read (``SPLIT_AT``).

A writer holds an flock on ``oplog/locks/<stem>.lock`` from before its segment's first line
until its seal. A batch killed before its end leaves its segment plain: every start seals the
segments whose lock is free and whose pid runs no more (``seal_leftovers``); without a lock file
(an older version's) or with a live pid, a segment is left as it is.

A segment is sealed at a batch's end into zstd pieces, each written as two files
(``segments/`` and ``twins/``): a piece is its batch's only record, so one damaged bit must
not lose a manifest — the other copy is read, status names the bad one, and the next start
rewrites it (``check_copies``). Damage that may have been a whole manifest no readable line
names (both copies bad, a line naming no op, a line too long to read) keeps every blob of the
vault (``hiding_damage``, ``Vault.referenced_blobs``): nothing is deleted by its absence.

A segment is untrusted input read line by line: a line that is not a UTF-8 JSON record of an
operation is skipped and named with its file and line number; it counts for the operation it
names (its op id comes first, so a torn or damaged line mostly still says whose it was), or, if
it names none, for every operation with a record in that segment. What a damaged line said is
unknown, so nothing is decided past it: a manifest state read past one is not trusted (a
problem, its blobs kept), and a purge intent followed by one is not finished (its blobs are
kept: the safe direction).

Why one module: the record format (segment lines, the op id first, sequence numbers, full
states and changes), its index and its fold are one contract between every writer and reader
of manifests; splitting the index from the format would let the two disagree on what a line is.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import io
import json
import marshal
import os
import re
import stat
import threading
import time
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, Iterator, List, Optional

from tb_footprint_plugin.engine import trust
from tb_footprint_plugin.storage.files import append_line
from tb_footprint_plugin.storage.paths import is_op_id, is_state_name
from tb_footprint_plugin.storage.private import ensure_private_dir, open_private
from tb_footprint_plugin.storage.regular import open_regular

OPLOG = "oplog"
#: the shared logs, ``<vault>/oplog/segments/<time>-<pid>-<random>.jsonl``: one per process that
#: writes, each line one record of one operation
SEGMENTS = "segments"

# codes of what a check of the catalogue found
MANIFEST_REBUILT = "manifest_rebuilt"
MANIFEST_LOST = "manifest_unrecoverable"  # corrupt or missing and no log to rebuild it from


@dataclass
class CatalogueFinding:
    """One piece of damage found in a vault's catalogue, and what was done about it."""

    code: str
    op_id: Optional[str]
    detail: str
    vault: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def oplog_dir(vault_root: str) -> str:
    return os.path.join(vault_root, OPLOG)


def segments_dir(vault_root: str) -> str:
    """Where the shared logs are: ``<vault>/oplog/segments/`` (a folder, so no segment name is
    ever taken for an older version's per-operation log)."""
    return os.path.join(oplog_dir(vault_root), SEGMENTS)


#: the second copy of every sealed piece, ``<vault>/oplog/twins/<stem>.<k>.zst`` (the same bytes
#: as ``segments/<stem>.<k>.zst``, written and fsynced on their own): a piece is a batch's only
#: record of its manifests, so one damaged bit must not lose one (``Index`` reads the twin of a
#: piece that does not decode whole; ``repair_copies`` rewrites the bad copy from the good one)
TWINS = "twins"


def twins_dir(vault_root: str) -> str:
    """Where each sealed piece's second copy is: ``<vault>/oplog/twins/``."""
    return os.path.join(oplog_dir(vault_root), TWINS)


def legacy_path(vault_root: str, op_id: str) -> str:
    """An older version's log of one operation, ``<vault>/oplog/<op_id>.jsonl`` (read, never written)."""
    return os.path.join(oplog_dir(vault_root), f"{op_id}.jsonl")


#: this process's segment per vault: (vault root, pid) -> path; a forked child starts its own
_MINE: Dict[tuple, str] = {}
#: held across an append and a seal, so no line is appended to a segment being sealed
_MINE_LOCK = threading.RLock()
_AT_EXIT = []
#: (vault root, pid) -> the fd of the flock this process holds on its segment's lock file
#: (``oplog/locks/<stem>.lock``) from before its first line until it is sealed: while it is held
#: no other process seals the segment (``seal_leftovers``), on this host or another sharing it
_HELD: Dict[tuple, int] = {}
_SEGMENT_NAME = re.compile(r"^\d{8}T\d{6}-(\d{1,10})-[0-9a-f]{8}\.jsonl$")


#: the segments' lock files, ``<vault>/oplog/locks/<stem>.lock`` (a file of no blocks each, gone
#: with its segment's seal)
LOCKS = "locks"


def _lock_path(segment: str) -> str:
    """The lock file of a segment, ``oplog/locks/<stem>.lock``."""
    return os.path.join(os.path.dirname(os.path.dirname(segment)), LOCKS, f"{_stem(os.path.basename(segment))}.lock")


def _hold_writer_lock(key: tuple, path: str) -> None:
    """Take (once) the exclusive flock that says ``path`` is being written by a live process.
    Where locks are not to be had (ENOLCK) the append goes on without it: no other process can
    then take the lock either, so none seals the segment (``seal_leftovers``)."""
    if key in _HELD:
        return
    ensure_private_dir(os.path.dirname(_lock_path(path)), key[0])
    fd = open_private(_lock_path(path), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass  # held elsewhere (a name of four random bytes: not expected) or no locks here: kept open anyway
    _HELD[key] = fd


def _drop_writer_lock(key: tuple, path: str, sealed: bool) -> None:
    """Release the segment's lock; its file goes with a sealed segment (nothing left to guard),
    and stays beside one left plain, so a later start can tell it is a leftover to seal."""
    fd = _HELD.pop(key, None)
    if fd is None:
        return
    if sealed:
        with contextlib.suppress(OSError):
            os.unlink(_lock_path(path))
    os.close(fd)


def _my_segment(vault_root: str) -> str:
    key = (os.path.abspath(vault_root), os.getpid())
    with _MINE_LOCK:
        path = _MINE.get(key)
        if path is None:
            name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{os.urandom(4).hex()}.jsonl"
            path = _MINE[key] = os.path.join(segments_dir(key[0]), name)
            if not _AT_EXIT:
                _AT_EXIT.append(atexit.register(seal_all))
        return path


def log_path(vault_root: str, op_id: str) -> str:
    """The file ``op_id``'s next record goes to (this process's segment), for messages and
    full-disk reports; an operation's records may be spread over several (``read_log``)."""
    return _my_segment(vault_root)


def append(vault_root: str, op_id: str, record: dict, *, twice: bool = False) -> None:
    """Append one fsynced record about ``op_id`` to this process's segment. The line starts with
    the op id (``{"op":…``) so even a damaged line still says whose it was, and carries the
    operation's next sequence number (its records are ordered by it across segments).
    ``twice``: the line is written two times in a row, in one write (a manifest state: its only
    record; one damaged copy loses nothing — the other is read, ``Index.covered``; sealed, the
    second copy costs a few bytes)."""
    if not is_op_id(op_id):
        raise ValueError(f"{str(op_id)[:80]!r} is not an operation id; not logged")
    with _MINE_LOCK:
        path = _my_segment(vault_root)
        # every folder from the vault down, ours (a state folder of ours that an old umask left
        # group-writable is tightened, as ``Vault.ensure`` does)
        ensure_private_dir(os.path.dirname(path), vault_root,
                           tighten_root=is_state_name(os.path.basename(os.path.abspath(vault_root))))
        # before the segment's first byte: a live writer's segment is never taken for a leftover
        _hold_writer_lock((os.path.abspath(vault_root), os.getpid()), path)
        seq = index(vault_root).next_seq(op_id)
        body = json.dumps(dict(record, t=time.time(), seq=seq), sort_keys=True, separators=(",", ":"))
        line = '{"op":' + json.dumps(op_id) + "," + body[1:] + "\n"
        # the line is known here, so a failed append's undo can tell its own bytes from another writer's
        with trust.undo_partial_append(path, line * (2 if twice else 1)):
            append_line(path, line * (2 if twice else 1))


#: a sealed segment is cut into zstd files of about this much text each (``seal``): a reader
#: holds one of them decompressed at a time, however long the batch was
SEAL_CHUNK = 1 << 20
SEALED_SUFFIX = ".zst"


def _stem(name: str) -> str:
    return name.split(".", 1)[0]


def seal(vault_root: str) -> bool:
    """Compress this process's segment of ``vault_root`` once it writes no more there (a batch's
    end, the process's exit): its lines, cut at line ends into pieces of ``SEAL_CHUNK``, become
    ``<stem>.<k>.zst`` files, each written under a temp name, fsynced and decompressed back to
    exactly its lines before any is renamed; the folder is fsynced, and only then the plain
    segment unlinked. Readers take the plain segment while it exists (``Index``), so a kill at
    any step leaves every record readable exactly once. The next record starts a new segment.
    Never raises (the plain segment stands); True when sealed."""
    key = (os.path.abspath(vault_root), os.getpid())
    with _MINE_LOCK:
        path = _MINE.pop(key, None)
        if path is None:
            return False
        sealed = False
        try:
            sealed = _seal_file(path)
        except Exception:  # noqa: BLE001 - the plain segment is the record; sealing only saves space
            pass
        _drop_writer_lock(key, path, sealed)
        return sealed


def seal_all() -> None:
    """``seal`` every segment this process wrote (registered to run at its exit)."""
    for root, pid in list(_MINE):
        if pid == os.getpid():
            seal(root)


def _pid_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs on this host (another user's process counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def seal_leftovers(vault_root: str) -> List[str]:
    """Seal the plain segments of writers that are provably gone — a batch killed before its
    end, a process that died before its exit handler ran — which would otherwise stay plain
    (a few KB a run) until that very process's next batch, i.e. for good. Gone means both: its
    lock file (``oplog/locks/<stem>.lock``, taken before the segment's first byte) exists, is ours and is
    free (this flock is taken here and held through the seal, so no writer anywhere sharing the
    vault holds it, and no two starts seal one segment), and no process with the pid its name
    carries runs here. A segment of an older version (no lock file), of this process, or of a
    live or unknown writer is left as it is. The seal is ``seal``'s: pieces written twice,
    fsynced and decoded back before the plain segment goes; a kill midway leaves the plain
    segment, the record, and the next start seals it again. Returns the segments sealed; never
    raises (a segment left plain loses nothing)."""
    root = os.path.abspath(vault_root)
    folder = segments_dir(root)
    out: List[str] = []
    try:
        if os.path.islink(oplog_dir(root)) or os.path.islink(folder) or not os.path.isdir(folder):
            return out
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    with _MINE_LOCK:
        mine = {os.path.basename(p) for p in _MINE.values()}
    for name in names:
        m = _SEGMENT_NAME.match(name)
        if m is None or name in mine or int(m.group(1)) == os.getpid():
            continue
        path = os.path.join(folder, name)
        try:
            fd = open_private(_lock_path(path), os.O_RDWR)  # never created here: no lock file, no seal
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: its writer lives (or this file system has no locks): left plain
            try:
                # the name still this lock (another start sealed it and removed the file meanwhile?)
                same = (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == (
                    os.lstat(_lock_path(path)).st_dev, os.lstat(_lock_path(path)).st_ino)
            except OSError:
                same = False
            if not same or not os.path.lexists(path) or not _pid_gone(int(m.group(1))):
                continue
            _drop_temp_pieces(root, _stem(name))
            try:
                sealed = _seal_file(path)
            except Exception:  # noqa: BLE001 - the plain segment stands: the next start tries again
                sealed = False
            if sealed:
                with contextlib.suppress(OSError):
                    os.unlink(_lock_path(path))
                out.append(name)
        finally:
            os.close(fd)
    _drop_stale_locks(root, names)
    return out


def _drop_stale_locks(root: str, names: List[str]) -> None:
    """Remove the lock files no plain segment stands beside, of writers gone (killed between
    their seal's last step and the lock's removal, or before their first line): free and their
    pid not running; a live writer's (held) stays."""
    folder = os.path.join(oplog_dir(root), LOCKS)
    try:
        held = os.listdir(folder) if not os.path.islink(folder) else []
    except OSError:
        return
    plain = {_stem(n) for n in names if n.endswith(".jsonl")}
    for n in held:
        stem = n[:-len(".lock")]
        m = _SEGMENT_NAME.match(stem + ".jsonl")
        if not n.endswith(".lock") or m is None or stem in plain or int(m.group(1)) == os.getpid() \
                or not _pid_gone(int(m.group(1))):
            continue
        try:
            fd = open_private(os.path.join(folder, n), os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.path.lexists(os.path.join(segments_dir(root), stem + ".jsonl")):
                os.unlink(os.path.join(folder, n))
        except OSError:
            pass
        finally:
            os.close(fd)


def _drop_temp_pieces(root: str, stem: str) -> None:
    """Remove the temp files a seal of ``stem`` killed midway left (``.<stem>.<k>.zst.tmp-…``):
    never read, and the segment they were cut from is still there to be sealed again."""
    for folder in (segments_dir(root), twins_dir(root)):
        try:
            names = os.listdir(folder) if not os.path.islink(folder) else []
        except OSError:
            continue
        for n in names:
            if n.startswith(f".{stem}.") and ".tmp-" in n and not n.endswith(".lock"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, n))


def _write_piece(folder: str, name: str, packed: bytes, text: Optional[bytes]) -> str:
    """``packed`` written under a temp name in ``folder``, fsynced, and read back (decoded to
    ``text`` when given, else to its end with no damage); returns the temp name."""
    tmp = os.path.join(folder, f".{name}.tmp-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(packed)
        out.flush()
        os.fsync(out.fileno())
    try:
        back, err = _decode_piece(tmp)
        if err is not None or (text is not None and back != text):
            raise OSError(errno.EIO, f"{tmp}: does not decompress to the segment's lines")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _seal_file(path: str) -> bool:
    from tb_footprint_plugin.storage import zst
    from tb_footprint_plugin.storage.files import fsync_dir

    folder, stem = os.path.dirname(path), _stem(os.path.basename(path))
    root = os.path.dirname(os.path.dirname(folder))
    made: List[tuple] = []  # (temp, final), each piece in both folders
    try:
        with open_regular(path) as f:
            # only once the segment opened: a vault removed meanwhile (a logdir deleted while
            # TensorBoard runs, a bench's temporary folder) is never made again by the exit's seal
            twins = ensure_private_dir(twins_dir(root), root)
            ident = os.fstat(f.fileno())
            k, rest = 0, b""
            while True:
                chunk = f.read(SEAL_CHUNK)
                data = rest + chunk
                cut = data.rfind(b"\n") + 1 if chunk else len(data)  # the end: a torn tail goes as it is
                piece, rest = data[:cut], data[cut:]
                if piece:
                    name = f"{stem}.{k:05d}{SEALED_SUFFIX}"
                    packed = io.BytesIO()
                    zst.compress_stream(io.BytesIO(piece), packed, len(piece), level=SEAL_LEVEL, give_up_ratio=None)
                    for where in (folder, twins):  # two files, each fsynced and read back on its own
                        made.append((_write_piece(where, name, packed.getvalue(), piece), os.path.join(where, name)))
                    k += 1
                if not chunk:
                    break
        if (os.lstat(path).st_dev, os.lstat(path).st_ino) != (ident.st_dev, ident.st_ino) or \
                os.lstat(path).st_size != ident.st_size:
            raise OSError(errno.EAGAIN, f"{path}: changed while being sealed")
        for tmp, final in made:
            os.replace(tmp, final)
        fsync_dir(twins)
        fsync_dir(folder)
        os.unlink(path)  # the pieces are durable and verified, twice: the plain segment can go
        fsync_dir(folder)
        return True
    except BaseException:
        for tmp, final in made:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if os.path.lexists(path):  # the plain segment stands: pieces beside it are never read
                with contextlib.suppress(OSError):
                    os.unlink(final)
        raise


def _decoder():
    try:
        from compression import zstd as std  # type: ignore[import-not-found]
        return std.ZstdDecompressor()
    except ImportError:
        import zstandard
        return zstandard.ZstdDecompressor().decompressobj()


def _decode_piece(path: str):
    """``(text, damage)`` of a sealed piece: what its one zstd frame decodes to (at most
    ``MAX_LINE + SEAL_CHUNK`` bytes: no piece holds more), and None, or why it is damaged — a
    frame that does not decode (its checksum catches a flipped bit), ends short, or has bytes
    after it (a line appended to the file). Fed a KiB at a time, so a hostile frame cannot
    make it hold much more than the cap. ``FileNotFoundError`` when there is no such file."""
    d = _decoder()
    parts, size, err = [], 0, None
    with open_regular(path) as f:
        try:
            while True:
                b = f.read(1024)
                if not b:
                    if not d.eof:
                        err = "the compressed piece ends before its frame does"
                    break
                if d.eof:
                    err = "bytes after the piece's compressed frame"
                    break
                out = d.decompress(b)
                parts.append(out)
                size += len(out)
                if d.eof and (d.unused_data or f.read(1)):
                    err = "bytes after the piece's compressed frame"
                    break
                if size > MAX_LINE + SEAL_CHUNK:
                    err = "the compressed piece decodes to more than any piece holds"
                    break
        except OSError:
            raise
        except Exception as e:  # the codecs raise their own error types for bad data
            err = f"not a valid zstd frame ({str(e)[:120]})"
    return b"".join(parts), err


#: zstd level of a sealed segment (small, once per batch: the ratio matters more than the speed)
SEAL_LEVEL = 9


#: descriptive parts of a manifest a rebuild of an older version's manifest does without (its
#: file kept them; its log did not): top-level key -> its sub-keys left out
NOT_LOGGED = {"plan": ("actions", "fidelity_details"), "verification": ("checks",)}


def _loggable(manifest: dict) -> dict:
    """A manifest as its log line keeps it: all of it (the log is its only record) but what
    follows from the rest, which ``derived`` puts back — each backup's blob name (the blob of
    its digest, ~85 bytes a file), the float ``mtime`` beside ``mtime_ns``, the vault (where
    the line is), and the verification's ``plan`` checks that repeat the plan's fidelity lines."""
    out = {k: v for k, v in manifest.items() if k != "vault"}
    files = out.get("files")
    if isinstance(files, list) and files and all(isinstance(f, dict) and f.get("blob") is not None
                                                 and f["blob"] == _blob_of(f.get("sha256")) for f in files):
        out["files"] = [{k: v for k, v in f.items() if k != "blob"} for f in files]
        out[_BLOBS_DERIVED] = True
    if isinstance(out.get("files"), list) and all(
            isinstance(f, dict) and isinstance(f.get("mtime_ns"), int) and f.get("mtime") == f["mtime_ns"] / 1e9
            for f in out["files"]):
        out["files"] = [{k: v for k, v in f.items() if k != "mtime"} for f in out["files"]]
        out[_MTIME_DERIVED] = True
    ver, fid = out.get("verification"), (out.get("plan") or {}).get("fidelity") if isinstance(
        out.get("plan"), dict) else None
    if isinstance(ver, dict) and isinstance(ver.get("checks"), list) and isinstance(fid, list) and fid:
        tail = ver["checks"][-len(fid):]
        if tail == [{"detail": d, "name": "plan", "ok": True} for d in fid]:
            out["verification"] = dict(ver, checks=ver["checks"][:-len(fid)])
            out[_PLAN_CHECKS_DERIVED] = True
    return out


#: a logged state whose backups' blob names were left out (every one the blob of its digest)
_BLOBS_DERIVED = "blobs_by_digest"
#: ... whose backups' float mtime was left out (each ``mtime_ns / 1e9``)
_MTIME_DERIVED = "mtime_by_ns"
#: ... whose verification's last checks were the plan's fidelity lines, one ``plan`` check each
_PLAN_CHECKS_DERIVED = "plan_checks_by_fidelity"


def _blob_of(sha) -> Optional[str]:
    return f"blobs/{sha[:2]}/{sha}" if isinstance(sha, str) and len(sha) == 64 else None


def derived(state: dict) -> dict:
    """A logged state with what ``_loggable`` left out because it follows from the rest put back."""
    out = dict(state)
    if out.pop(_BLOBS_DERIVED, None) is True and isinstance(out.get("files"), list):
        out["files"] = [dict(f, blob=_blob_of(f.get("sha256"))) if isinstance(f, dict) and _blob_of(f.get("sha256"))
                        else f for f in out["files"]]
    if out.pop(_MTIME_DERIVED, None) is True and isinstance(out.get("files"), list):
        out["files"] = [dict(f, mtime=f["mtime_ns"] / 1e9) if isinstance(f, dict) and isinstance(
            f.get("mtime_ns"), int) and not isinstance(f.get("mtime_ns"), bool) else f for f in out["files"]]
    if out.pop(_PLAN_CHECKS_DERIVED, None) is True:
        ver, plan = out.get("verification"), out.get("plan")
        fid = plan.get("fidelity") if isinstance(plan, dict) else None
        if isinstance(ver, dict) and isinstance(ver.get("checks"), list) and isinstance(fid, list):
            out["verification"] = dict(ver, checks=ver["checks"] + [{"detail": d, "name": "plan", "ok": True}
                                                                    for d in fid])
    return out


def record_manifest(vault_root: str, manifest: dict) -> None:
    """Log a manifest's new state — the manifest's only durable record: in full when no segment
    holds a state of it to build on (a new operation, or one an older version recorded in its own
    files), else only the top-level fields that changed since the state its records fold to."""
    state = _loggable(manifest)
    op_id = manifest["op_id"]
    prev, damaged = segment_state(vault_root, op_id)
    if prev is None or damaged is not None:  # a damaged line: what it said is unknown
        rec = {"type": "manifest", "manifest": state}
        if _too_long(rec):
            _append_parts(vault_root, op_id, state)
        else:
            append(vault_root, op_id, rec, twice=True)
        return
    # a field the state read back answers as None (manifest.read fills every field) and the log
    # never held is not a change: folded, it reads None either way, and logging it cost bytes a run
    changed = {k: v for k, v in state.items() if (k in prev and prev[k] != v) or (k not in prev and v is not None)}
    gone = sorted(k for k in prev if k not in state)
    if changed or gone:
        rec = {"type": "manifest_change", "set": changed, "unset": gone}
        if _too_long(rec):
            _append_parts(vault_root, op_id, state)
        else:
            append(vault_root, op_id, rec, twice=True)


#: a record whose line would be longer than this is logged in parts (``_append_parts``), well
#: under ``MAX_LINE``, past which a reader takes a line for damage
SPLIT_AT = 8 << 20


def _too_long(record: dict) -> bool:
    return len(json.dumps(record, sort_keys=True, separators=(",", ":"))) > SPLIT_AT


def _append_parts(vault_root: str, op_id: str, state: dict) -> None:
    """Log a state too large for one line (a run of ~100k files) as a head and its parts: the
    head is the state with each long list cut to its first items and says how many records
    make it (``parts``); each part (``manifest_part``) carries the next items of one list.
    A reader takes the state only once every part follows in order (``trust.fold_states``): a
    kill midway leaves the state as it was before this write, as a lost line would."""
    head, parts = dict(state), []
    budget = SPLIT_AT // 2

    def chunked(items: list) -> List[list]:
        chunks, cur, size = [], [], 0
        for item in items:
            n = len(json.dumps(item, sort_keys=True, separators=(",", ":"))) + 1
            if cur and size + n > budget:
                chunks.append(cur)
                cur, size = [], 0
            cur.append(item)
            size += n
        return chunks + [cur]

    def big(items) -> bool:  # a list the head leaves empty, its items all in parts
        return isinstance(items, list) and len(json.dumps(items, separators=(",", ":"))) > SPLIT_AT // 16
    for key in sorted(state):
        if big(state[key]):  # the backed-up files
            head[key] = []
            parts += [(key, c) for c in chunked(state[key])]
        elif isinstance(state[key], dict):  # a list one level down: the plan's actions
            sub = dict(state[key])
            for k2 in sorted(k for k, v in sub.items() if big(v)):
                parts += [([key, k2], c) for c in chunked(sub[k2])]
                sub[k2] = []
            head[key] = sub
    rec = {"type": "manifest", "manifest": head, "parts": 1 + len(parts)}
    if _too_long(rec):
        raise ValueError(f"manifest of {op_id} has a field too large to log ({SPLIT_AT} bytes a line); not logged")
    append(vault_root, op_id, rec, twice=True)
    for i, (key, items) in enumerate(parts, 1):
        append(vault_root, op_id, {"type": "manifest_part", "part": i, "of": 1 + len(parts), "key": key,
                                   "items": items}, twice=True)


class OpLog(trust.JsonLines):
    """The log of one operation gathered from an older version's file and the segments:
    ``records`` in order (that file's first, then by sequence number), ``lines`` their positions
    in that order, ``damaged`` the lines that may have been this operation's (each naming its
    file and real line), which count as coming after every record: what they said is unknown."""

    def __init__(self, path: str):
        super().__init__(path)
        self._damaged_at: List[int] = []

    def damaged_after(self, line: int) -> bool:
        return any(at > line for at in self._damaged_at) or super().damaged_after(line)


_OP_IN_LINE = re.compile(rb'"op":\s*"([A-Za-z0-9][A-Za-z0-9_-]{0,127})"')
_DIGEST = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
#: no record line comes near it; a longer one is damage, indexed as such and never parsed
MAX_LINE = 64 << 20
_STATE_TYPES = ("manifest", "manifest_change", "manifest_part")


def _state_shape(rec: dict) -> Optional[str]:
    """Why a record of a manifest state has the wrong shape (its fields of the wrong types), or
    None: such a line is damage (named), never a state folded in or silently passed over."""
    typ = rec.get("type")
    if typ == "manifest":
        ok = isinstance(rec.get("manifest"), dict) and (
            "parts" not in rec or (isinstance(rec["parts"], int) and not isinstance(rec["parts"], bool)))
    elif typ == "manifest_change":
        ok = isinstance(rec.get("set", {}), dict) and isinstance(rec.get("unset", []), list)
    elif typ == "manifest_part":
        key = rec.get("key")
        ok = (isinstance(key, str) or (isinstance(key, list) and len(key) == 2 and all(
            isinstance(k, str) for k in key))) and isinstance(rec.get("items"), list) and all(
            isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool) for k in ("part", "of"))
    else:
        return None
    return None if ok else f"a {typ} record of the wrong shape"


class _Segment:
    __slots__ = ("ident", "offset", "lines", "sealed", "src")

    def __init__(self, ident, sealed: bool = False):
        self.ident, self.offset, self.lines, self.sealed = ident, 0, 0, sealed
        self.src = None  # a sealed piece: the copy its lines were read from


class _Gone(Exception):
    """A segment listed a moment ago is gone (sealed meanwhile): list again."""


class Index:
    """Where each operation's records are in a vault's segments (file, offset, length: never
    the records, so memory stays a few tuples an operation), brought up to date by reading only
    what was appended since (``refresh``): a command indexes once, however many operations it
    reads. Damaged lines are kept with the operation they name, or none."""

    def __init__(self, root: str):
        self.root = root
        self.lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self._cache = None
        #: bumped at each reset: a mark of an earlier epoch says nothing of what changed since
        self.epoch = getattr(self, "epoch", 0) + 1
        #: the change feed: the op id of each record indexed, in order (``mark``, ``changed_since``);
        #: one reference a record, beside the record's own entry in ``ops``
        self.changes: List[str] = []
        self.segments: Dict[str, _Segment] = {}
        #: op id -> [(seq, t, segment, line, offset, length, type)]
        self.ops: Dict[str, list] = {}
        #: segment -> [(line, offset, length, op id or None, reason)]
        self.damaged: Dict[str, list] = {}
        self.in_segment: Dict[str, set] = {}
        #: (segment, line) -> (op id, seq) of each state record, and how many copies of each
        #: (op id, segment, seq) there are: a state is written twice in a row (``append``)
        self.at: Dict[tuple, tuple] = {}
        self.copies: Dict[tuple, int] = {}
        self.damaged_at: set = set()
        #: sealed piece -> (path, why) of a copy that does not decode whole while the other does
        self.bad_copies: Dict[str, tuple] = {}
        #: bumped at each damaged line indexed: a memo entry read before it may miss one (``memo``)
        self.damage_gen = 0
        #: op id -> (key, its records marshalled): ``_segment_records``' last read of each whose
        #: records are all in sealed pieces, so the passes of one command (status reads every
        #: manifest in several) decode the log once
        self.memo: Dict[str, tuple] = {}
        self.memo_bytes = 0

    def mark(self) -> tuple:
        """Where the change feed stands now (``changed_since``)."""
        with self.lock:
            return id(self), self.epoch, len(self.changes), self.damage_gen

    def changed_since(self, mark) -> Optional[set]:
        """The op ids whose entries changed (a record of theirs indexed) since ``mark``; None when
        that cannot be told (the index was reset: a segment went, shrank, was replaced or sealed
        meanwhile; or a damaged line came in): everything may have changed."""
        with self.lock:
            if not isinstance(mark, tuple) or len(mark) != 4 or mark[:2] != (id(self), self.epoch) \
                    or mark[3] != self.damage_gen or not 0 <= mark[2] <= len(self.changes):
                return None
            return set(self.changes[mark[2]:])

    def memo_key(self, op_id: str) -> tuple:
        """What a memo entry of ``op_id`` is valid for: its records (append-only; a segment that
        went, shrank or was replaced resets the index and the memo) and the damage indexed."""
        return self.damage_gen, len(self.ops.get(op_id, ()))

    def memo_get(self, op_id: str) -> Optional[list]:
        """``op_id``'s records as last read (fresh objects: a caller may change them), or None."""
        with self.lock:
            hit = self.memo.get(op_id)
            if hit is None or hit[0] != self.memo_key(op_id):
                return None
            return marshal.loads(hit[1])

    def memo_put(self, op_id: str, key: tuple, recs: list) -> None:
        """Keep ``recs`` (read under ``key``) while the memo holds less than ``MEMO_BYTES``: a
        pass over more than that keeps its first operations (a scan evicting as it goes would
        keep none for the next pass)."""
        with self.lock:
            if key != self.memo_key(op_id):
                return  # records came in meanwhile: what was read may be short of them
            try:
                raw = marshal.dumps(recs)
            except ValueError:
                return
            old = self.memo.pop(op_id, None)
            if old is not None:
                self.memo_bytes -= len(old[1])
            if self.memo_bytes + len(raw) <= MEMO_BYTES:
                self.memo[op_id] = (key, raw)
                self.memo_bytes += len(raw)

    def refresh(self) -> "Index":
        with self.lock:
            for _attempt in range(20):
                try:
                    return self._refresh()
                except _Gone:
                    self._reset()  # sealed between the listing and the read: its pieces are there now
            raise OSError(errno.EAGAIN, f"{segments_dir(self.root)}: segments kept changing while being read")

    def _refresh(self) -> "Index":
        with self.lock:
            d = segments_dir(self.root)
            try:
                listed = [n for n in os.listdir(d) if not n.startswith(".")] \
                    if not os.path.islink(d) and not os.path.islink(oplog_dir(self.root)) else []
            except OSError:
                listed = []
            tw = twins_dir(self.root)
            try:
                twins = [n for n in os.listdir(tw) if not n.startswith(".") and n.endswith(SEALED_SUFFIX)] \
                    if not os.path.islink(tw) and not os.path.islink(oplog_dir(self.root)) else []
            except OSError:
                twins = []
            plain = {_stem(n) for n in listed if n.endswith(".jsonl")}
            # a sealed segment's pieces count only once its plain file is gone (a seal cut short
            # leaves both: the plain one is the record); a piece is read from either copy
            names = sorted(set(n for n in listed if n.endswith(".jsonl")
                               or (n.endswith(SEALED_SUFFIX) and _stem(n) not in plain))
                           | {n for n in twins if _stem(n) not in plain})
            stats = {}
            for n in names:
                known = self.segments.get(n)
                if known is not None and known.sealed:
                    continue  # a sealed piece never changes (one replaced is caught where it is read)
                if n.endswith(SEALED_SUFFIX):
                    stats[n] = None  # which copy is read is ``_read``'s choice
                    continue
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(d, n))
                    if stat.S_ISREG(st.st_mode):
                        stats[n] = st
            listed_now = set(names)
            if any(n not in listed_now or (not s.sealed and (n not in stats or s.ident != (
                    stats[n].st_dev, stats[n].st_ino) or stats[n].st_size < s.offset))
                   for n, s in self.segments.items()):
                self._reset()  # a segment went, shrank or was replaced: index again from scratch
                return self._refresh()
            if any(n.endswith(".jsonl") and n not in stats for n in names):
                raise _Gone()
            for n, st in stats.items():
                seg = self.segments.get(n)
                if st is None:  # a sealed piece not read yet: read whole, once
                    seg = self.segments[n] = _Segment(None, True)
                    self._read(os.path.join(d, n), seg)
                    seg.offset = 1
                    continue
                if seg is None:
                    seg = self.segments[n] = _Segment((st.st_dev, st.st_ino), False)
                if st.st_size > seg.offset:
                    self._read(os.path.join(d, n), seg)
            return self

    def _sealed_bytes(self, path: str, ident) -> bytes:
        """What the copy ``path`` of a sealed piece decodes to (the last one read is kept), as
        long as it is still the file (``ident``) its lines were indexed from."""
        if self._cache is not None and self._cache[0] == (path, ident):
            return self._cache[1]
        self._cache = None
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise _Gone() from None
        if (st.st_dev, st.st_ino) != ident:
            raise _Gone()
        data, err = _decode_piece(path)
        self._cache = ((path, ident), data, err)
        return data

    def _pick_copy(self, name: str):
        """``(path, ident, text, damage)`` of the copy of sealed piece ``name`` to read: the first
        (``segments/``, then ``twins/``) that decodes whole, else the one that decodes furthest;
        a damaged copy beside a whole one is kept in ``bad_copies`` (named, ``repair_copies``)."""
        got = []
        for folder in (segments_dir(self.root), twins_dir(self.root)):
            p = os.path.join(folder, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                got.append((p, None, b"", "not a regular file"))
                continue
            try:
                data, err = _decode_piece(p)
            except FileNotFoundError:
                continue
            except OSError as e:
                data, err = b"", f"unreadable ({e.strerror or e})"
            got.append((p, (st.st_dev, st.st_ino), data, err))
            if err is None:
                break
        if not got:
            raise _Gone()
        whole = [g for g in got if g[3] is None]
        pick = whole[0] if whole else max(got, key=lambda g: len(g[2]))
        if whole:
            self.bad_copies.pop(name, None)
            for g in got:
                if g[3] is not None:
                    self.bad_copies[name] = (g[0], g[3])
        return pick

    def _read(self, path: str, seg: _Segment) -> None:
        if seg.sealed:
            src, seg.ident, data, err = self._pick_copy(os.path.basename(path))
            seg.src = src
            if seg.ident is not None:
                self._cache = ((src, seg.ident), data, err)
            start = 0
            while True:
                nl = data.find(b"\n", start)
                if nl < 0:
                    break
                self._line(path, seg, data[start:nl], start, nl - start)
                start = nl + 1
            if err is not None:
                # a piece that does not decode to its end: what it held past the damage is unknown,
                # so it counts for every operation read from it (and for none, when none was)
                seg.lines += 1
                name = os.path.basename(path)
                self.damaged.setdefault(name, []).append((seg.lines, start, len(data) - start, None,
                                                          f"the compressed piece does not decode past here ({err})"))
                self.damaged_at.add((name, seg.lines))
                self.damage_gen += 1
            return
        try:
            f = open_regular(path)
        except FileNotFoundError:
            raise _Gone() from None
        except OSError:
            return
        with f:
            if (os.fstat(f.fileno()).st_dev, os.fstat(f.fileno()).st_ino) != seg.ident:
                return  # replaced between the listing and the open: the next refresh starts over
            f.seek(seg.offset)
            pending = b""
            skipping = None  # [its first bytes, its length so far]: a line too long to hold
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                if skipping is not None:
                    nl = chunk.find(b"\n")
                    if nl < 0:
                        skipping[1] += len(chunk)
                        continue
                    self._long_line(path, seg, skipping[0], seg.offset, skipping[1] + nl)
                    seg.offset += skipping[1] + nl + 1
                    skipping, chunk = None, chunk[nl + 1:]
                pending += chunk
                start = 0
                while True:
                    nl = pending.find(b"\n", start)
                    if nl < 0:
                        break
                    self._line(path, seg, pending[start:nl], seg.offset, nl - start)
                    seg.offset += nl - start + 1
                    start = nl + 1
                pending = pending[start:]
                if len(pending) > MAX_LINE:
                    # no record is that long: damage, skipped to its end (never held whole) and
                    # indexed with the op id it starts with; what follows it is read as ever
                    skipping, pending = [pending[:4096], len(pending)], b""
            # what follows the last newline is an append under way or a torn one: read once it ends

    def _long_line(self, path: str, seg: _Segment, head: bytes, offset: int, length: int) -> None:
        """A line longer than ``MAX_LINE``: damage of the operation it starts with (or none)."""
        seg.lines += 1
        name = os.path.basename(path)
        m = _OP_IN_LINE.search(head)
        self.damaged.setdefault(name, []).append((seg.lines, offset, length, m.group(1).decode() if m else None,
                                                  f"a line of {length} bytes, longer than any record; not read"))
        self.damaged_at.add((name, seg.lines))
        self.damage_gen += 1

    def _line(self, path: str, seg: _Segment, raw: bytes, offset: int, length: int) -> None:
        seg.lines += 1
        name = os.path.basename(path)
        if not raw.strip():
            return
        rec, why = None, None
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            why = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"not JSON ({str(e)[:80]})"
        if why is None and not (isinstance(rec, dict) and is_op_id(rec.get("op")) and isinstance(rec.get("seq"), int)
                                and not isinstance(rec.get("seq"), bool)):
            why = "not a record of an operation (op id and sequence number)"
        if why is None:
            why = _state_shape(rec)
        if why is not None:
            m = _OP_IN_LINE.search(raw[:4096])
            op = m.group(1).decode() if m else None
            self.damaged.setdefault(name, []).append((seg.lines, offset, length, op, why))
            self.damaged_at.add((name, seg.lines))
            self.damage_gen += 1
            return
        t = rec.get("t") if isinstance(rec.get("t"), (int, float)) and not isinstance(rec.get("t"), bool) else 0
        self.ops.setdefault(rec["op"], []).append((rec["seq"], t, name, seg.lines, offset, length,
                                                   rec.get("type") if isinstance(rec.get("type"), str) else ""))
        self.changes.append(rec["op"])
        if len(self.changes) > FEED_KEPT:  # a long-lived process: a pass marked before reads every key
            self.changes, self.epoch = [], self.epoch + 1
        self.in_segment.setdefault(name, set()).add(rec["op"])
        if rec.get("type") in _STATE_TYPES:
            self.at[(name, seg.lines)] = (rec["op"], rec["seq"])
            key = (rec["op"], name, rec["seq"])
            self.copies[key] = self.copies.get(key, 0) + 1

    def next_seq(self, op_id: str) -> int:
        with self.lock:
            self.refresh()
            return 1 + max((e[0] for e in self.ops.get(op_id, [])), default=0)

    def entries(self, op_id: str) -> list:
        """``op_id``'s records in order: by sequence number, then time, segment and line."""
        with self.lock:
            return sorted(self.ops.get(op_id, []))

    def covered(self, seg: str, n: int) -> bool:
        """Whether damaged line ``n`` of ``seg`` was one copy of a state whose other copy reads:
        a neighbouring state record that stands alone (its twin is missing), and no second
        damaged line that could be that twin instead. Nothing it said is lost."""
        with self.lock:
            lone = [m for m in (n - 1, n + 1) if (seg, m) in self.at
                    and self.copies.get((self.at[(seg, m)][0], seg, self.at[(seg, m)][1])) == 1]
            if len(lone) != 1:
                return False
            m = lone[0]
            other = m + (m - n)  # the lone record's other neighbour
            return (seg, other) not in self.damaged_at

    def damaged_of(self, op_id: str) -> list:
        """Damaged lines that may have been ``op_id``'s: those naming it, and those naming no
        operation in a segment that holds a record of it: (segment, line, offset, length,
        reason, covered — a lost copy of a state whose twin reads, ``covered``)."""
        with self.lock:
            out = []
            for seg, lines in self.damaged.items():
                mine = op_id in self.in_segment.get(seg, ())
                out += [(seg, n, off, ln, why, self.covered(seg, n)) for n, off, ln, op, why in lines
                        if op == op_id or (op is None and mine)]
            return out

    def damaged_ops(self) -> List[str]:
        """Operations a damaged line may have been about (``damaged_of``)."""
        with self.lock:
            out = set()
            for seg, lines in self.damaged.items():
                for _n, _o, _l, op, _w in lines:
                    out |= {op} if op is not None else set(self.in_segment.get(seg, ()))
            return sorted(out)

    def op_ids(self) -> List[str]:
        with self.lock:
            named = {op for lines in self.damaged.values() for _n, _o, _l, op, _w in lines if op is not None}
            return sorted(set(self.ops) | named)

    def raw(self, seg: str, offset: int, length: int) -> bytes:
        """The bytes of one line (``length`` 0 for the rest of a damaged piece: what decoded)."""
        path = os.path.join(segments_dir(self.root), seg)
        with self.lock:
            s = self.segments.get(seg)
            if s is not None and s.sealed:
                try:
                    return self._sealed_bytes(s.src, s.ident)[offset:offset + length]
                except _Gone:
                    raise FileNotFoundError(errno.ENOENT, "sealed segment replaced", path) from None
        with open_regular(path) as f:
            f.seek(offset)
            return f.read(length)


_INDEXES: Dict[str, Index] = {}
_INDEXES_LOCK = threading.Lock()
#: vaults this thread reads as one snapshot right now (``snapshot``): refreshed once, on entry
_FROZEN = threading.local()


#: the most op ids the change feed keeps (``Index.changes``); past it the feed starts again and a
#: mark taken before says nothing (its pass looks at every key): bounded in a long-lived process
FEED_KEPT = 1 << 20

#: the most ``Index.memo`` holds (marshalled records): a status of a thousand small runs' operations
#: fits, a long-lived process (the tab's TensorBoard) keeps no more than this between commands
MEMO_BYTES = 8 << 20


def index(vault_root: str) -> Index:
    """The vault's segment index, up to date (one per vault and process, kept between calls;
    inside ``snapshot`` as it was on entry)."""
    root = os.path.abspath(vault_root)
    with _INDEXES_LOCK:
        idx = _INDEXES.get(root)
        if idx is None:
            idx = _INDEXES[root] = Index(root)
    if root in getattr(_FROZEN, "roots", ()):
        return idx
    return idx.refresh()


@contextlib.contextmanager
def snapshot(vault_root: str) -> Iterator[Index]:
    """Read many operations of one vault as of one moment (``Vault.manifests``): the index is
    brought up to date once, on entry, instead of at every call (what one listing of a folder
    of manifest files was). A record appended meanwhile is seen by the next read, as a manifest
    file written after that listing was."""
    root = os.path.abspath(vault_root)
    idx = index(root)
    roots = getattr(_FROZEN, "roots", None)
    if roots is None:
        roots = _FROZEN.roots = set()
    if root in roots:
        yield idx
        return
    roots.add(root)
    try:
        yield idx
    finally:
        roots.discard(root)


def _segment_records(vault_root: str, op_id: str, state_only: bool = False):
    """``op_id``'s parsed records from the segments, in order, with where each is. A segment
    sealed while being read is read again from its pieces: a record is never skipped. The last
    read of each operation is kept (``Index.memo``) while no record of it and no damage came in
    since, when all of them are in sealed pieces: a command's later passes over the same
    manifests decode none of them again."""
    idx = index(vault_root)
    for _attempt in range(20):
        with idx.lock:
            key, entries = idx.memo_key(op_id), idx.entries(op_id)
        recs = idx.memo_get(op_id)
        if recs is not None:
            return [(r, seg, line) for r, seg, line in recs if not state_only or r.get("type") in _STATE_TYPES]
        out = []
        prev = (None, None)  # a state is written twice in a row: its second copy is not parsed again
        try:
            for seq, _t, seg, line, off, ln, typ in entries:
                raw = idx.raw(seg, off, ln)
                rec = prev[1] if raw == prev[0] else json.loads(raw.decode("utf-8"))
                prev = (raw, rec)
                if not (isinstance(rec, dict) and rec.get("op") == op_id):
                    raise _Gone()
                out.append((rec, seg, line))
            with idx.lock:
                sealed = all(idx.segments.get(e[2]) is not None and idx.segments[e[2]].sealed for e in entries)
            if sealed:
                # a sealed piece never changes (zstd-checked when decoded); a plain segment's lines
                # are read again each time, so one damaged in place is still noticed when read
                idx.memo_put(op_id, key, out)
            if state_only:  # the indexed type is the record's ``type`` (``Index._line``)
                out = [(r, seg, line) for r, seg, line in out if r.get("type") in _STATE_TYPES]
            return out
        except (_Gone, FileNotFoundError, ValueError):
            with idx.lock:
                idx._reset()  # the index no longer matches the files: read them again
            idx.refresh()
    raise OSError(errno.EAGAIN, f"{segments_dir(vault_root)}: the records of {op_id} kept changing while being read")


def segment_state(vault_root: str, op_id: str):
    """``(state, damage)``: ``op_id``'s newest manifest state as the segments record it (None when
    they hold none), and a description of a damaged line that may have been one of its records
    (None when there is none): a state read past such a line may be an older one."""
    recs = _segment_records(vault_root, op_id, state_only=True)
    state = last_state([r for r, _s, _n in recs])
    bad = [d for d in index(vault_root).damaged_of(op_id) if not d[5]]
    damage = None
    if bad:
        seg, n, _off, _ln, why, _c = bad[0]
        damage = f"{os.path.join(segments_dir(vault_root), seg)} line {n}: {why}"
    return state, damage


def segment_file(vault_root: str, op_id: str) -> Optional[str]:
    """The segment holding ``op_id``'s newest state record (None: none does), for messages."""
    recs = [e for e in index(vault_root).entries(op_id) if e[6] in _STATE_TYPES]
    return os.path.join(segments_dir(vault_root), recs[-1][2]) if recs else None


def has_state(vault_root: str, op_id: str) -> bool:
    """Whether a segment holds a manifest state of ``op_id``, or a damaged line naming it."""
    idx = index(vault_root)
    return any(e[6] in _STATE_TYPES for e in idx.entries(op_id)) or any(
        op == op_id for lines in idx.damaged.values() for _n, _o, _l, op, _w in lines)


def read_log(vault_root: str, op_id: str) -> OpLog:
    """An operation's log: an older version's file of it first (if any), then its records in
    the segments, with every damaged line that may have been its."""
    legacy = trust.read_json_lines(legacy_path(vault_root, op_id))
    out = OpLog(legacy.path if legacy.records or legacy.damaged else log_path(vault_root, op_id))
    out.records, out.lines, out.damaged, out.torn = list(legacy.records), list(legacy.lines), \
        list(legacy.damaged), legacy.torn
    pos = max([0, *legacy.lines, *(d.line or 0 for d in legacy.damaged)])
    for rec, _seg, _n in _segment_records(vault_root, op_id):
        pos += 1
        out.records.append({k: v for k, v in rec.items() if k not in ("op", "seq")})
        out.lines.append(pos)
    for seg, n, _off, _ln, why, covered in index(vault_root).damaged_of(op_id):
        pos += 1
        d = trust.Untrusted(trust.DAMAGED_LINE, os.path.join(segments_dir(vault_root), seg), f"line {n}: {why}; skipped"
                            + ("; it was one copy of a state whose other copy reads" if covered else ""))
        d.line = n
        out.damaged.append(d)
        if not covered:
            out._damaged_at.append(pos)
    return out


def records(vault_root: str, op_id: str) -> List[dict]:
    """The records of an operation's log that parse (its damaged lines: ``read_log``)."""
    return read_log(vault_root, op_id).records


def logged_ops(vault_root: str) -> List[str]:
    """Every operation with a log: an older version's file, or records (or a damaged line
    naming it) in the segments."""
    d = oplog_dir(vault_root)
    legacy = set()
    if os.path.isdir(d):
        legacy = {n[: -len(".jsonl")] for n in os.listdir(d) if n.endswith(".jsonl") and not n.startswith(".")
                  and is_op_id(n[: -len(".jsonl")])}
    return sorted(legacy | set(index(vault_root).op_ids()))


def damaged_lines(vault_root: str) -> List[trust.Untrusted]:
    """Every damaged line (or sealed piece that does not decode) of the vault's segments, named
    with its file and line: what ``read_log`` gives each operation it may concern, and what
    concerns none that can be told (``health`` names them all)."""
    idx = index(vault_root)
    out = []
    with idx.lock:
        for seg, lines in sorted(idx.damaged.items()):
            for n, _off, _ln, _op, why in lines:
                d = trust.Untrusted(trust.DAMAGED_LINE, os.path.join(segments_dir(vault_root), seg),
                                    f"line {n}: {why}; skipped")
                d.line = n
                out.append(d)
    return out


def lost_lines(vault_root: str) -> int:
    """How many damaged lines of the segments may have held something no other line holds (not
    a lost copy of a state whose twin reads): each may have been a manifest no reader sees."""
    idx = index(vault_root)
    with idx.lock:
        return sum(not idx.covered(seg, n) for seg, lines in idx.damaged.items() for n, *_rest in lines)


def hiding_damage(vault_root: str, alone: bool = False) -> List[str]:
    """Damaged lines that may have been a whole record of an operation no readable line names
    (an undecodable sealed piece, a damaged line naming no operation, a line too long to read
    whole), each as ``<file> line <n>: <why>``: a manifest may be on one, so nothing may be
    decided by its absence — every blob is kept (``Vault.referenced_blobs``). A lost copy of a
    state whose twin reads hides nothing. ``alone``: only those in a segment no readable record
    comes from (a piece that decodes to nothing): an operation may be out of sight entirely, so
    a restore names them (``catalogue.hiding_damage``); one beside readable records is counted
    for each of their operations (``damaged_of``)."""
    idx = index(vault_root)
    with idx.lock:
        return [f"{os.path.join(segments_dir(vault_root), seg)} line {n}: {why}"
                for seg, lines in sorted(idx.damaged.items()) for n, _off, ln, op, why in lines
                if (op is None or ln > MAX_LINE) and not idx.covered(seg, n)
                and not (alone and idx.in_segment.get(seg))]


#: codes of what a check of the sealed pieces' two copies found (``check_copies``)
#: what the user does about a damaged line that may have held a manifest (FAILSAFE "damaged"):
#: recover cannot mend it, so it is never the advice
DAMAGED_LINE_ADVICE = ("every backup of the vault is kept meanwhile; recover does not mend it: look at the file "
                       "and, once you know what it held, move it aside (docs/FAILSAFE.md, 'damaged')")
COPY_DAMAGED = "copy_damaged"  # one copy does not decode whole; the other does (``repair`` rewrites it)
COPY_REWRITTEN = "copy_rewritten"  # ... and was rewritten from the other
COPIES_LOST = "copies_lost"  # neither copy decodes whole (or they differ): what it held is unknown


def _piece_file(path: str) -> Optional[bytes]:
    """The compressed bytes of one copy of a piece (None: absent, not a regular file, or larger
    than any piece is)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 2 * (MAX_LINE + SEAL_CHUNK):
            return None
        with open_regular(path) as f:
            return f.read()
    except OSError:
        return None


def check_copies(vault_root: str, repair: bool = False) -> List[CatalogueFinding]:
    """Compare the two copies of every sealed piece (``segments/`` and ``twins/``), byte for
    byte — they are written alike, so a difference is damage: the copy that does not decode
    whole is named (and with ``repair``, rewritten from the other: written under a temp name,
    fsynced, read back, renamed); a piece with a copy missing (sealed by a version that wrote
    one) gets it. Neither copy whole: named, left as it is (``hiding_damage`` keeps every blob)."""
    seg, tw = segments_dir(vault_root), twins_dir(vault_root)
    out: List[CatalogueFinding] = []

    def listing(d):
        try:
            return {n for n in os.listdir(d) if not n.startswith(".")} if not os.path.islink(d) else set()
        except OSError:
            return set()
    if os.path.islink(oplog_dir(vault_root)):
        return out
    here, there = listing(seg), listing(tw)
    plain = {_stem(n) for n in here if n.endswith(".jsonl")}
    for name in sorted(n for n in here | there if n.endswith(SEALED_SUFFIX) and _stem(n) not in plain):
        a_path, b_path = os.path.join(seg, name), os.path.join(tw, name)
        a, b = _piece_file(a_path), _piece_file(b_path)
        if a is not None and a == b:
            continue
        ok = {p: data is not None and _decode_piece(p)[1] is None for p, data in ((a_path, a), (b_path, b))}
        if ok[a_path] and ok[b_path]:
            out.append(CatalogueFinding(COPIES_LOST, None, f"{a_path}: differs from its copy {b_path} though both "
                                        "decode; both kept as they are", vault_root))
            continue
        if not (ok[a_path] or ok[b_path]):
            out.append(CatalogueFinding(COPIES_LOST, None, f"{a_path}: neither it nor its copy {b_path} decodes "
                                        "whole; the manifests it held may be lost: every backup of the vault is "
                                        "kept", vault_root))
            continue
        good, bad = (a_path, b_path) if ok[a_path] else (b_path, a_path)
        what = "is missing" if not os.path.lexists(bad) else "is damaged"
        if not repair:
            out.append(CatalogueFinding(COPY_DAMAGED, None, f"{bad}: this copy of a sealed piece of the operation "
                                        f"log {what}; its other copy {good} reads (the next start rewrites it)",
                                        vault_root))
            continue
        try:
            _rewrite_copy(vault_root, good, bad)
        except OSError as e:
            out.append(CatalogueFinding(COPY_DAMAGED, None, f"{bad}: this copy of a sealed piece {what} and could "
                                        f"not be rewritten ({e.strerror or e}); its other copy {good} reads",
                                        vault_root))
            continue
        out.append(CatalogueFinding(COPY_REWRITTEN, None, f"{bad}: this copy of a sealed piece of the operation log "
                                    f"{what[3:]}; rewritten from its other copy {good}", vault_root))
    return out


def _rewrite_copy(vault_root: str, good: str, bad: str) -> None:
    from tb_footprint_plugin.storage.files import fsync_dir

    folder = os.path.dirname(bad)
    ensure_private_dir(folder, vault_root)
    data = _piece_file(good)
    if data is None:
        raise OSError(errno.EIO, f"{good}: unreadable")
    text, err = _decode_piece(good)
    if err is not None:
        raise OSError(errno.EIO, f"{good}: {err}")
    tmp = _write_piece(folder, os.path.basename(bad), data, text)
    if os.path.lexists(bad) and not os.path.isdir(bad):
        os.replace(bad, os.path.join(folder, f".{os.path.basename(bad)}.damaged-{int(time.time())}"))  # post-mortem
    os.replace(tmp, bad)
    fsync_dir(folder)
    with _INDEXES_LOCK:
        idx = _INDEXES.get(os.path.abspath(vault_root))
    if idx is not None:
        with idx.lock:
            idx._reset()  # read the piece again: both copies whole now


def damaged_digests(vault_root: str, op_ids: Iterable[str] = ()) -> set:
    """Every digest spelled out in a damaged segment line, and in any record of ``op_ids``:
    blobs kept because a line that cannot be read, or a state that cannot be trusted, may name
    them (keeping is the safe direction)."""
    idx = index(vault_root)
    out = set()
    with idx.lock:
        spans = [(seg, off, ln) for seg, lines in idx.damaged.items() for _n, off, ln, _op, _w in lines]
        for op in op_ids:
            spans += [(seg, off, ln) for _s, _t, seg, _n, off, ln, _ty in idx.ops.get(op, [])]
    for seg, off, ln in spans:
        with contextlib.suppress(OSError):
            out.update(m.decode() for m in _DIGEST.findall(idx.raw(seg, off, min(ln, MAX_LINE))))
    return out


def _records_and_lines(log) -> list:
    if isinstance(log, trust.JsonLines):
        return list(zip(log.records, log.lines))
    return [(r, 0) for r in log]


def last_state(log) -> Optional[dict]:
    """The newest manifest state in a log (its records, or a ``trust.JsonLines``): its last full
    state with every later change folded in (``trust.fold_states``)."""
    return trust.fold_states([r for r, _n in _records_and_lines(log)])


def last_state_line(log: trust.JsonLines) -> int:
    """The line of the newest full manifest state, which later changes build on (0: none): a
    damaged line after it may have been one of them."""
    return next((n for r, n in reversed(_records_and_lines(log))
                 if r.get("type") == "manifest" and isinstance(r.get("manifest"), dict)), 0)


def purge_intent(log) -> Optional[dict]:
    """The intent of a purge that did not finish, if any. Given a ``trust.JsonLines``, an intent
    followed by a damaged line is none: that line may be its end, so it is not finished again."""
    intent, at = None, 0
    for r, n in _records_and_lines(log):
        if r.get("type") == "purge":
            intent, at = r, n
        elif r.get("type") in ("purged", "purge_abandoned"):
            intent = None
    if intent is not None and isinstance(log, trust.JsonLines) and log.damaged_after(at):
        return None
    return intent


def manifest_readable(path: str, op_id: str) -> bool:
    """Whether the manifest file parses as a manifest of ``op_id`` (any damage: False)."""
    try:
        m = trust.read_json_file(path)
    except (OSError, trust.Untrusted):
        return False
    return isinstance(m, dict) and m.get("op_id") == op_id and isinstance(m.get("files", []), list)


def rebuild_manifests(vault) -> List[CatalogueFinding]:
    """Rebuild every missing or corrupt manifest of ``vault`` from its log; report the ones
    that cannot be (a manifest file that does not parse and has no log). Every start calls it,
    so it first seals the segments whose writers are gone (``seal_leftovers``: a killed batch's
    log would stay plain for good) — before the snapshot, which then reads their pieces."""
    seal_leftovers(vault.root)
    with snapshot(vault.root):  # one look at the log's files for every operation
        return _rebuild_manifests(vault)


def _rebuild_manifests(vault) -> List[CatalogueFinding]:
    # a sealed piece's damaged copy is rewritten from its whole twin first (one bit must not
    # lose a manifest, nor two bits at different times)
    out: List[CatalogueFinding] = check_copies(vault.root, repair=True)
    logged = set()
    for op_id in logged_ops(vault.root):
        logged.add(op_id)
        if has_state(vault.root, op_id):
            # the segments are its record: nothing to rebuild (a damaged line of it is named by
            # ``health``; with no readable state at all, the manifest is lost: its blobs are kept)
            state, damage = segment_state(vault.root, op_id)
            if state is None and not manifest_readable(vault.manifest_path(op_id), op_id):
                out.append(CatalogueFinding(MANIFEST_LOST, op_id, f"manifest of {op_id} has no readable state: "
                                            f"{damage}; its backups are kept", vault.root))
            continue
        path = vault.manifest_path(op_id)
        if manifest_readable(path, op_id):
            continue
        log = read_log(vault.root, op_id)
        state = last_state(log)
        if state is None:
            continue  # logged only a purge of a manifest written before logs existed
        what = "corrupt" if os.path.exists(path) else "missing"
        if log.damaged_after(last_state_line(log)):
            # a newer state may be on the damaged line: an older one could claim a purged or
            # restored backup back; the manifest stays as it is (its blobs are kept) and is named
            bad = next(d for d in log.damaged if d.line > last_state_line(log))
            out.append(CatalogueFinding(MANIFEST_LOST, op_id, f"manifest of {op_id} is {what} and not rebuilt: "
                                        f"{bad.file} line {bad.line}, after its last readable state, is damaged; "
                                        "its backups are kept", vault.root))
            continue
        m = dict(derived(state), rebuilt={"at": time.time(), "was": what, "from": os.path.relpath(
            legacy_path(vault.root, op_id), vault.root), "not_logged": {k: list(v) for k, v in NOT_LOGGED.items()}})
        if what == "corrupt":
            os.replace(path, path + f".corrupt-{int(time.time())}")  # kept for a post-mortem
        vault.write_manifest(m)  # into the segments, which from now on are its record
        out.append(CatalogueFinding(MANIFEST_REBUILT, op_id, f"manifest of {op_id} was {what}; rebuilt from "
                                    f"the vault's operation log", vault.root))
    if os.path.isdir(vault.ops):
        for name in sorted(os.listdir(vault.ops)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            op_id = name[: -len(".json")]
            if op_id not in logged and not manifest_readable(os.path.join(vault.ops, name), op_id):
                out.append(CatalogueFinding(MANIFEST_LOST, op_id, f"manifest {name} is corrupt and the vault has no "
                                            "log to rebuild it from; its backups are kept", vault.root))
    return out


def orphan_blobs(vault, referenced: set) -> Dict[str, int]:
    """Blobs no manifest refers to: sha256 → size. Never deleted by purge (they may be the only
    copy of something whose manifest was lost), only reported."""
    out: Dict[str, int] = {}
    if not os.path.isdir(vault.blobs):
        return out
    for sub in os.listdir(vault.blobs):
        d = os.path.join(vault.blobs, sub)
        if not os.path.isdir(d) or os.path.islink(d):
            continue
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue  # an empty shard folder pruned meanwhile (``Vault.prune_shards``)
        for n in names:
            if len(n) == 64 and n not in referenced:
                try:
                    out[n] = os.lstat(os.path.join(d, n)).st_size
                except OSError:
                    continue
    return out


__all__ = ["OPLOG", "SEGMENTS", "CatalogueFinding", "MANIFEST_REBUILT", "MANIFEST_LOST", "oplog_dir", "segments_dir",
           "legacy_path", "log_path", "append", "record_manifest", "seal", "seal_all", "seal_leftovers", "NOT_LOGGED", "OpLog", "Index", "index",
           "snapshot", "segment_state", "segment_file", "has_state", "records", "read_log", "logged_ops", "damaged_lines", "lost_lines", "hiding_damage",
           "TWINS", "twins_dir", "check_copies", "DAMAGED_LINE_ADVICE", "COPY_DAMAGED", "COPY_REWRITTEN", "COPIES_LOST",
           "damaged_digests",
           "derived", "last_state", "last_state_line", "purge_intent", "rebuild_manifests", "orphan_blobs", "manifest_readable"]
