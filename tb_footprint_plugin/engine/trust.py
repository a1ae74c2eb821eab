"""State read back from disk is untrusted input: it is checked here before the engine uses it.

Anyone who can write into a logdir — or who hands someone a tarball of logs that includes
``.tb-footprint/`` — can write journals, manifests, the vault index, the ledger and the scan
cache. So:

* every path in them goes through ``storage.paths.contained`` (one containment check) and
  must stay inside the logdir or the vault; a backup, stage or directory record must also
  stay inside its own run;
* op ids and sha256 digests must match their formats (they become file names);
* a stage record may only name the temporary file the transaction itself would have made
  (``.footprint-<op_id>-<n>.tmp``): recovery deletes nothing else;
* a journal names its vault, which must be one this logdir uses, never any directory;
* the state directory is bound to its logdir: ``identity.json`` records a random id and the
  logdir's inode when the state is created (or adopted, for state written before this
  check existed). A state directory copied or planted from another logdir carries another
  inode: it is reported, never replayed. New journals and manifests carry the id, so one
  copied in from another state directory is refused too.

Every refusal is an ``Untrusted`` with a code (``codes`` below), the file and the reason; the
caller reports it and skips the item, never acts on it.

Why one module: every check of state read back from disk is here on
purpose — one place to audit what untrusted journals, manifests, ledgers and identities may
name, with one containment, format and identity rule reused by each.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
import re
import secrets
import time
from typing import Iterable, Iterator, List, Optional

from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine.changelog_files import log_names, named_operations
from tb_footprint_plugin.storage.regular import open_regular, open_regular_fd, read_capped
from tb_footprint_plugin.plan.model import Action
from tb_footprint_plugin.storage.paths import (UnsafePath, contained, is_op_id, is_sha256, plausible_mtime_ns,
                                              recorded_vaults, safe_rel)

__all__ = ["Untrusted", "JsonLines", "bind", "check_journal", "check_manifest", "cut_back_to", "is_op_id", "is_sha256",
           "read_json_lines", "parse_json_lines", "read_json_file", "identity_damage", "repair_identity", "own_ids",
           "adoptable_ids", "adopt_moved_state", "foreign_state_words", "journal_vault",
           "fold_states", "logged_manifest_states"]

IDENTITY_NAME = "identity.json"
IDENTITY_FORMAT = 1

#: problem codes
#: (members of ``codes.Finding``: one vocabulary programs branch on; equal to their strings)
BAD_RECORD = Finding.BAD_RECORD
BAD_OP_ID = Finding.BAD_OP_ID
BAD_DIGEST = Finding.BAD_DIGEST
PATH_OUTSIDE = Finding.PATH_OUTSIDE
FOREIGN_STATE = Finding.FOREIGN_STATE
FOREIGN_JOURNAL = Finding.FOREIGN_JOURNAL
FOREIGN_VAULT = Finding.FOREIGN_VAULT
FOREIGN_MANIFEST = Finding.FOREIGN_MANIFEST
BAD_MANIFEST = Finding.BAD_MANIFEST
BAD_LEDGER = Finding.BAD_LEDGER  # a ledger file that is no ledger of this version (the ledger's own checks: engine/ledger.py)
BAD_LEDGER_ENTRY = Finding.BAD_LEDGER_ENTRY
FOREIGN_LEDGER = Finding.FOREIGN_LEDGER
DAMAGED_LINE = Finding.DAMAGED_LINE  # one line of a JSON-lines file that is not a UTF-8 JSON object
DAMAGED_FILE = Finding.DAMAGED_FILE  # a whole state file that is not UTF-8 JSON of its shape
IDENTITY_DAMAGED = Finding.IDENTITY_DAMAGED  # identity.json unreadable or malformed: not a foreign state

#: no state line or file of this tool comes near it; a bigger one is damage, never read whole
MAX_STATE_BYTES = 256 << 20

#: ``copying``: a rollback's copy onto a path, begun (``retire_tree.put_back`` where the folder
#: does not rename): its ``final`` must lie inside the run, as a reduction's must
_RETIRE_RECORD_TYPES = {"move", "moved", "delete", "commit", "rollback", "copying"}
#: the fields a planned action may carry (recovery rebuilds each as ``Action(**fields)``)
_ACTION_FIELDS = frozenset(f.name for f in dataclasses.fields(Action))
#: a journaled put-back token (``swap.new_put_back_token``): it goes into file names
_TOKEN = re.compile(r"[0-9a-f]{32}")
#: user and group ids are 32-bit
_ID_LIMIT = 1 << 32
_RECORD_TYPES = {"begin", "backup", "backed_up", "stage", "staged", "verified", "swap", "swapped", "commit",
                 "rollback", "rmdir", "displaced", "copying"}


class Untrusted(ValueError):
    """State on disk that is not acted on: ``code``, the ``file`` and the reason."""

    def __init__(self, code: str, file: str, detail: str):
        super().__init__(f"{file}: {detail} [{code}]")
        self.code = code
        self.file = file
        self.detail = detail
        #: the 1-based line of a line-based file, when one line is meant
        self.line: Optional[int] = None

    def to_dict(self) -> dict:
        d = {"code": self.code, "file": self.file, "detail": self.detail}
        if self.line is not None:
            d["line"] = self.line
        return d


# ---------------------------------------------------------------------------------------
# reading state files: bytes in, records or a named refusal out, never a bare decode error
# ---------------------------------------------------------------------------------------
class JsonLines:
    """What a JSON-lines file holds: ``records`` (dicts, in order), ``lines`` (the 1-based line
    number of each record), ``damaged`` (one ``Untrusted`` per line that is not a UTF-8 JSON
    object, naming the file and the line, with ``line`` set) and ``torn`` (an unterminated last
    line: an append a crash cut short, not damage)."""

    def __init__(self, path: str):
        self.path = path
        self.records: List[dict] = []
        self.lines: List[int] = []
        self.damaged: List[Untrusted] = []
        self.torn = False

    def damaged_after(self, line: int) -> bool:
        """Whether a damaged line comes after line ``line``: what it said is unknown."""
        return any(d.line > line for d in self.damaged)


def read_json_lines(path: str) -> JsonLines:
    """Every line of ``path`` parsed on its own: one bad byte costs its line, never the file.
    A missing file reads as empty; other ``OSError`` propagate (the caller names the file)."""
    out = JsonLines(path)
    try:
        # a symlink or FIFO planted under a state file's name is never followed nor opened
        with open_regular(path) as f:
            raw = read_capped(f, MAX_STATE_BYTES)
    except FileNotFoundError:
        return out
    if len(raw) > MAX_STATE_BYTES:
        d = Untrusted(DAMAGED_FILE, path, f"larger than {MAX_STATE_BYTES >> 20} MB: not a log this tool wrote; "
                                          "not read")
        d.line = 0
        out.damaged.append(d)
        return out
    return parse_json_lines(raw, path, out)


def parse_json_lines(raw: bytes, name: str, out: Optional[JsonLines] = None, *, first_line: int = 1) -> JsonLines:
    """``read_json_lines`` of bytes already read (from any store): ``name`` is what each damaged
    line names (a path or a URL); the text after the last newline is a torn append.
    ``first_line``: the number of ``raw``'s first line in its file (a block of a log read a
    block at a time names its lines as the whole file's read would)."""
    out = JsonLines(name) if out is None else out
    path = name
    chunks = raw.split(b"\n")
    last = len(chunks) - 1  # the text after the last newline: empty, or a torn append
    for i, chunk in enumerate(chunks):
        n = first_line + i
        if i == last:
            out.torn = bool(chunk.strip())
            break
        if not chunk.strip():
            continue
        try:
            rec = json.loads(chunk.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            why = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"not JSON ({str(e)[:80]})"
            d = Untrusted(DAMAGED_LINE, path, f"line {n}: {why}; skipped")
            d.line = n
            out.damaged.append(d)
            continue
        if not isinstance(rec, dict):
            d = Untrusted(DAMAGED_LINE, path, f"line {n}: not a JSON object; skipped")
            d.line = n
            out.damaged.append(d)
            continue
        out.records.append(rec)
        out.lines.append(n)
    return out


@contextlib.contextmanager
def undo_partial_append(path: str, line: Optional[str] = None) -> Iterator[None]:
    """An append to the JSON-lines file ``path`` that fails (a full disk can take part of a
    line) is cut back to the size before it, so the next append starts a line of its own
    instead of gluing a good record to a torn one.

    Several writers append to one file (``--jobs`` threads and other processes share
    ``history.jsonl``), so a cut could take another writer's completed entry with it. Every
    appender of this tool holds an exclusive ``flock`` on the file across its append and its
    undo (this context), and the cut is made only when what follows the old end can only be
    this append's: the same file (dev, inode) still at ``path``, and the extra bytes a prefix of
    ``line`` (the text being appended, when the caller knows it) or else at most one line.
    Otherwise the torn bytes stay: readers skip a damaged line, a lost entry is never undone."""
    try:
        fd = open_regular_fd(path, os.O_RDWR)
    except OSError:  # missing (a first append), or not a regular file: nothing to cut back
        fd = None
    try:
        if fd is not None:
            # a filesystem without locks (ENOLCK) still appends: the checks in _cut_back remain
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
            before = os.fstat(fd)
        try:
            yield
        except OSError:
            if fd is not None:
                with contextlib.suppress(OSError):
                    _cut_back(fd, path, before, line)
            raise
    finally:
        if fd is not None:
            os.close(fd)  # releases the flock


def _cut_back(fd: int, path: str, before: os.stat_result, line: Optional[str]) -> None:
    """Truncate ``fd`` to ``before``'s size when the bytes past it can only be this append's."""
    now, named = os.fstat(fd), os.lstat(path)
    if (named.st_dev, named.st_ino) != (now.st_dev, now.st_ino) or (now.st_dev, now.st_ino) != (
            before.st_dev, before.st_ino):
        return  # set aside or replaced meanwhile: not the file this append wrote to
    extra = now.st_size - before.st_size
    if extra <= 0:
        return
    tail = os.pread(fd, extra + 1, before.st_size)
    if len(tail) != extra:
        return  # grew while being read: another writer is at it
    # ``files.append_line`` starts the line with a newline when the file ended in a torn one
    mine = ((line.encode("utf-8").startswith(tail) or (b"\n" + line.encode("utf-8")).startswith(tail))
            if line is not None else b"\n" not in tail[:-1].lstrip(b"\n"))
    if mine:
        cut_back_to(fd, before)
        os.fsync(fd)


def cut_back_to(fd: int, before: os.stat_result) -> None:
    """Cut an append's own bytes off ``fd`` (the caller has judged them its own): the file back to
    ``before``'s size and its modification time back to ``before``'s, so it is at the version it
    had (``store_posix.version_of``: inode, size, mtime): a holder of that version (a journal's
    conditional append) still writes to it, and a change poller sees no change that was undone.
    The one cut-back of a torn line, for every appender (review R4 F5: the conditional append set
    the time back, the plain one did not)."""
    os.ftruncate(fd, before.st_size)
    os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))


def read_json_file(path: str, code: str = DAMAGED_FILE, what: str = "state file"):
    """The JSON value in ``path``; ``FileNotFoundError`` when absent; ``Untrusted(code)`` naming
    the file when it cannot be read or is not UTF-8 JSON."""
    try:
        with open_regular(path) as f:
            raw = read_capped(f, MAX_STATE_BYTES)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise Untrusted(code, path, f"unreadable {what} ({e.strerror or e})") from None
    if len(raw) > MAX_STATE_BYTES:
        raise Untrusted(code, path, f"{what} larger than {MAX_STATE_BYTES >> 20} MB; not read")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise Untrusted(code, path, f"{what} is not UTF-8 text (byte {e.start})") from None
    except (ValueError, RecursionError) as e:
        raise Untrusted(code, path, f"{what} is not JSON ({str(e)[:120]})") from None


# ---------------------------------------------------------------------------------------
# the state directory's identity
# ---------------------------------------------------------------------------------------
def identity_path(state: str) -> str:
    return os.path.join(state, IDENTITY_NAME)


def read_identity(state: str) -> Optional[dict]:
    """The identity of a state directory, None when it has none yet; ``Untrusted``
    (``IDENTITY_DAMAGED``, naming the file) when it is unreadable or malformed."""
    path = identity_path(state)
    try:
        data = read_json_file(path, IDENTITY_DAMAGED, "identity")
    except FileNotFoundError:
        return None
    if (not isinstance(data, dict) or not isinstance(data.get("id"), str) or not re.match(r"^[0-9a-f]{32}$", data["id"])
            or isinstance(data.get("ino"), bool) or not isinstance(data.get("ino"), int)):
        raise Untrusted(IDENTITY_DAMAGED, path, "malformed identity (no id and inode of the form this tool writes)")
    return data


def bind(logdir: str, state: str, *, adopt: bool = True) -> Optional[dict]:
    """The identity of ``state``, checked to belong to ``logdir``.

    Missing (a new state directory, or one written before identities existed): adopted — an
    identity for this logdir is written — when ``adopt``, else None. Belonging to another
    directory (another inode: a copy, a tarball, a planted folder): ``Untrusted``. Damaged
    (``IDENTITY_DAMAGED``): ``Untrusted``; ``repair_identity`` rebuilds it. Renaming the logdir
    keeps its inode, so a moved logdir keeps its state.
    """
    from tb_footprint_plugin.storage.files import create_json

    ident = read_identity(state)
    st = os.stat(logdir)
    if ident is None:
        if not adopt:
            return None
        # an identity.json deleted by hand: the id this logdir's own manifests carry is taken
        # back (a new one would disown them), a recorded vault's only where this state's own
        # change log names the operation (``adoptable_ids``); anyone able to plant those could
        # write identity.json itself, so this grants nothing
        ids = adoptable_ids(logdir, state)
        mine = _new_identity(logdir, st, ids.pop() if len(ids) == 1 else None)
        # created only where none exists: workers starting at once on a new logdir (a job
        # array) must all take one identity, or the losers' manifests and journals would name
        # "another logdir" and be refused — their backups out of reach of restore
        if create_json(identity_path(state), mine):
            return mine
        ident = read_identity(state)
        if ident is None:
            raise Untrusted(BAD_RECORD, identity_path(state), "created by another process and gone again; left as it is")
    if ident["ino"] != st.st_ino:
        raise Untrusted(FOREIGN_STATE, identity_path(state), foreign_state_words(ident, st, state, logdir))
    return ident


def adopt_moved_state(logdir: str, state: str) -> Optional[dict]:
    """Bind ``state`` to ``logdir`` again after the logdir was MOVED (to another filesystem, or
    copied and its original deleted: a new inode), keeping its id, so its manifests, retirements
    and journals are this logdir's again (review R10 F7). Asked for by the user only (``recover
    --adopt-moved-state``): a copy cannot be told from a move by anything on disk. Refused
    (``Untrusted``, nothing written) when the state folder or its identity is not ours, or when the
    directory it was made for still stands at its recorded path with its recorded inode — then
    this is a copy and the backups are that logdir's. None when it is bound here already or has
    no identity (nothing to adopt); else the new identity (``moved_from``: the recorded path)."""
    from tb_footprint_plugin.storage.files import atomic_write_json
    from tb_footprint_plugin.storage.private import why_not_ours

    path = identity_path(state)
    for where, want_dir in ((state, True), (path, False)):
        try:
            why = why_not_ours(os.lstat(where), want_dir=want_dir)
        except FileNotFoundError:
            return None
        if why:
            raise Untrusted(BAD_RECORD, where, f"{why}; not adopted, nothing changed")
    ident = read_identity(state)
    st = os.stat(logdir)
    if ident is None or ident["ino"] == st.st_ino:
        return None
    made_for = ident.get("logdir")
    if isinstance(made_for, str):
        try:
            there = os.stat(made_for)
        except OSError:
            there = None
        if there is not None and there.st_ino == ident["ino"] and there.st_dev == ident.get("dev", there.st_dev):
            raise Untrusted(FOREIGN_STATE, path,
                            f"the directory it was made for still stands at {made_for!r} (inode {there.st_ino}): "
                            "this state is a copy of that logdir's, whose retirements and backups are its own; "
                            "not adopted, nothing changed")
    mine = dict(_new_identity(logdir, st, ident["id"]), created_at=ident.get("created_at"),
                adopted_at=time.time(), moved_from=made_for)
    atomic_write_json(path, mine)
    return mine


def foreign_state_words(ident: dict, st: os.stat_result, state: str, logdir: Optional[str] = None) -> str:
    """Why a state folder bound to another directory is not used, and what keeps its backups:
    it may hold the only copies of retired runs and of reduced files' originals (review R10 F7:
    a logdir moved to another filesystem gets a new inode, and "move it aside to start afresh",
    followed by deleting what was set aside, lost them). ``logdir``: where it was found, so a new
    folder at the very path it was made for is told apart (review R11 G5: "restore them there"
    sent the user back to the restore that had just refused)."""
    made_for = ident.get("logdir")
    gone = isinstance(made_for, str) and not os.path.lexists(made_for)
    adopt = ("`tb-footprint recover LOGDIR --adopt-moved-state` binds this state to this logdir again, its id kept "
             "(only for a move: were it a copy whose original was renamed, both would own the same backups)")
    here = isinstance(made_for, str) and logdir is not None and \
        os.path.realpath(made_for) == os.path.realpath(logdir)
    if here:
        where = ("this folder is a new one at the very path the state was made for (the logdir restored from a "
                 "backup or recreated there, or a mount that does not keep inode numbers): if it holds the same "
                 f"logdir, {adopt}")
    elif gone:
        where = (f"{made_for!r} no longer exists: if this logdir was moved from there (a move to another "
                 f"filesystem is a copy, with a new inode), {adopt}")
    else:
        where = (f"if {made_for!r} is that logdir, they are its own: restore them there; if it is a new folder "
                 f"made after this logdir was moved away, {adopt}")
    return (f"this state directory belongs to another directory (made for {made_for!r}, inode {ident['ino']}; "
            f"this logdir is inode {st.st_ino}): it was copied or planted here, or this logdir was moved from "
            "another filesystem. Its journals are not replayed and its backups not used. Keep it: it may hold "
            f"the only copies of retired runs and of reduced files' originals; {where}. Move {state} aside only "
            "to start afresh here, and keep what you set aside")


def _new_identity(logdir: str, st: os.stat_result, ident_id: Optional[str]) -> dict:
    return {"format": IDENTITY_FORMAT, "id": ident_id or secrets.token_hex(16), "logdir": os.path.abspath(logdir),
            "dev": st.st_dev, "ino": st.st_ino, "created_at": time.time()}


def identity_damage(logdir: str, state: str) -> Optional[Untrusted]:
    """The refusal of a damaged identity.json (``IDENTITY_DAMAGED``), None when it is sound,
    missing or foreign (a foreign state is ``bind``'s refusal, never repaired)."""
    try:
        read_identity(state)
    except Untrusted as e:
        return e if e.code == IDENTITY_DAMAGED else None
    return None


def repair_identity(logdir: str, state: str, vault_roots: Iterable[str] = ()) -> Optional[dict]:
    """Rebuild a damaged identity.json: the damaged file is set aside
    (``identity.json.damaged-<time>``, kept for a post-mortem) and a new identity written for
    this logdir with the one id its own records carry (``adoptable_ids``: a manifest in one of
    ``vault_roots`` only when the state's own change log or a journal names its operation), so
    none of them is disowned. Returns ``{"identity", "aside", "id_from"}``; None when nothing is damaged.
    ``Untrusted(IDENTITY_DAMAGED)`` and nothing changed when they carry several ids: which one
    is this logdir's cannot be told, so nothing is guessed."""
    from tb_footprint_plugin.storage.files import create_json

    damage = identity_damage(logdir, state)
    if damage is None:
        return None
    ids = adoptable_ids(logdir, state, vault_roots)
    if len(ids) > 1:
        raise Untrusted(IDENTITY_DAMAGED, damage.file,
                        f"{damage.detail}; not rebuilt: this logdir's manifests and journals carry {len(ids)} "
                        f"different ids ({', '.join(sorted(i[:8] for i in ids))}…), so which is its own cannot "
                        "be told. Their backups are kept; move the manifests that are not this logdir's aside")
    path = identity_path(state)
    aside = f"{path}.damaged-{int(time.time())}"
    n = 0
    while os.path.lexists(aside):  # two repairs in one second: never overwrite the first one's copy
        n += 1
        aside = f"{path}.damaged-{int(time.time())}-{n}"
    os.rename(path, aside)
    taken = ids.pop() if ids else None
    ident = _new_identity(logdir, os.stat(logdir), taken)
    if not create_json(path, ident):  # another process repaired it at the same moment: its file stands
        ident = read_identity(state)
    return {"identity": ident, "aside": aside, "id_from": "manifests" if taken else "new"}


def fold_states(records: Iterable[dict]) -> Optional[dict]:
    """The newest manifest state in a log's records, in order: its last full state
    (``{"type": "manifest", "manifest": {…}}``) with every later change (``{"type":
    "manifest_change", "set": {…}, "unset": […]}``) folded in; None when there is none. A full
    state logged in parts (its head says ``parts``: n, then ``manifest_part`` records 1..n-1,
    each adding items to one list) counts only once every part has followed in order."""
    state = None
    pending = None  # [a state logged in parts, how many records make it, the next part's number]
    for r in records:
        parts = r.get("parts", 1)
        if r.get("type") == "manifest" and isinstance(r.get("manifest"), dict) and isinstance(parts, int) \
                and not isinstance(parts, bool) and parts > 1:
            # lists copied (a top-level one, or one in a top-level object): the parts extend them
            pending = [{k: list(v) if isinstance(v, list) else {k2: list(v2) if isinstance(v2, list) else v2
                                                                  for k2, v2 in v.items()}
                        if isinstance(v, dict) else v for k, v in r["manifest"].items()}, parts, 1]
        elif r.get("type") == "manifest_part":
            key, items = r.get("key"), r.get("items")
            target = None  # the list this part extends: a top-level one, or one in a top-level object
            if pending is not None and isinstance(key, str) and isinstance(pending[0].get(key), list):
                target = pending[0][key]
            elif pending is not None and isinstance(key, list) and len(key) == 2 and all(
                    isinstance(k, str) for k in key) and isinstance(pending[0].get(key[0]), dict) and \
                    isinstance(pending[0][key[0]].get(key[1]), list):
                target = pending[0][key[0]][key[1]]
            if target is not None and r.get("part") == pending[2] and r.get("of") == pending[1] and \
                    isinstance(items, list):
                target.extend(items)
                pending[2] += 1
                if pending[2] == pending[1]:  # whole: it is the state from now on
                    state, pending = pending[0], None
            elif not (pending is not None and r.get("part") == pending[2] - 1 and r.get("of") == pending[1]):
                pending = None  # a part out of order (not the second copy of the last): never taken
        elif r.get("type") == "manifest" and isinstance(r.get("manifest"), dict):
            state, pending = dict(r["manifest"]), None
        elif r.get("type") == "manifest_change" and state is not None:
            pending = None
            if isinstance(r.get("set"), dict):
                state.update(r["set"])
            if isinstance(r.get("unset"), list):
                for k in r["unset"]:
                    if isinstance(k, str):
                        state.pop(k, None)
    return state


def logged_manifest_states(root: str) -> List[dict]:
    """The newest manifest state of each operation in the operation log's segments of vault
    ``root`` (plain or sealed, ``engine.oplog``'s format: each record names its op and sequence
    number), read as untrusted lines: what ``own_ids`` needs of them (a logdir and its id),
    without the log's index, which lives above this module. Damaged lines and pieces are
    skipped here (``engine.oplog`` names them)."""
    from tb_footprint_plugin.storage import zst

    folder = os.path.join(root, "oplog", "segments")
    twins = os.path.join(root, "oplog", "twins")  # each sealed piece's second copy

    def listing(d):
        try:
            return {n for n in os.listdir(d) if not n.startswith(".")} if not os.path.islink(d) else set()
        except OSError:
            return set()
    if os.path.islink(os.path.join(root, "oplog")):
        return []
    names = sorted(listing(folder) | {n for n in listing(twins) if n.endswith(".zst")})
    by_op: dict = {}
    for n in names:
        p = os.path.join(folder, n)
        if n.endswith(".jsonl"):
            try:
                recs = read_json_lines(p).records
            except OSError:
                continue
        elif n.endswith(".zst"):
            raw = None
            for copy in (p, os.path.join(twins, n)):  # the other copy when one does not decode
                try:
                    with zst.open_decompressed(open_regular(copy)) as f:
                        raw = read_capped(f, MAX_STATE_BYTES - 1)
                    break
                except OSError:
                    continue
            if raw is None:
                continue
            recs = []
            for line in raw.split(b"\n"):
                try:
                    r = json.loads(line.decode("utf-8"))
                except (ValueError, RecursionError):
                    continue
                if isinstance(r, dict):
                    recs.append(r)
        else:
            continue
        for r in recs:
            if is_op_id(r.get("op")) and isinstance(r.get("seq"), int):
                by_op.setdefault(r["op"], []).append(r)
    out = []
    for recs in by_op.values():
        state = fold_states(sorted(recs, key=lambda r: r["seq"]))
        if state is not None:
            out.append(state)
    return out


def own_ids(logdir: str, state: str, vault_roots: Iterable[str] = ()) -> set:
    """The logdir ids carried by the manifests (in ``state`` and ``vault_roots``) and the
    journals whose own ``logdir`` field is this logdir. Unreadable files are skipped here
    (reported where they are listed). What binds a missing or damaged identity.json is
    ``adoptable_ids``: a vault's manifests name this path for any logdir that ever stood here."""
    found = _manifests_in([state, *vault_roots]) + [begin for _op, begin in _journal_begins(state)]
    return {i for i in (_carried_id(m, logdir) for m in found) if i is not None}


def adoptable_ids(logdir: str, state: str, vault_roots: Optional[Iterable[str]] = None) -> set:
    """The ids a missing or damaged identity.json is taken back from (the one rule: ``bind``,
    ``repair_identity``, ``catalogue.manifest_binding``): those the state folder's own manifests
    and journals carry (``own_ids``), and those of manifests in ``vault_roots`` (default: the
    vaults the state's ``vaults.json`` records) that name this logdir AND whose operation this
    state folder's own change log (``changelog_files.named_operations``) or one of its journals
    names.

    An external ``--backup-dir`` holds a logdir's manifests there only, so without them a deleted
    identity.json adopted a new id and hid every earlier operation (review R10 F6). A vault's
    manifests alone never do: they name this path for any logdir that stood here, and a new logdir
    made where a renamed one stood, given (and recording) its ``--backup-dir``, would take that
    one's id and own its retirements, its purge deleting them (R10 F1, F9). Its state folder is
    new: its change log names none of that logdir's operations, which were logged in the state
    folder that moved with it."""
    ids = own_ids(logdir, state)
    roots = recorded_vaults(state) if vault_roots is None else list(vault_roots)
    roots = [r for r in roots if not _same_dir(r, state)]
    journals = _journal_begins(state)
    if not roots or not (journals or log_names(state)):
        return ids  # nothing could corroborate one (a new state folder): no vault is read
    candidates: dict = {}  # op id -> the ids its manifests carry
    for m in _manifests_in(roots):
        lid, op = _carried_id(m, logdir), m.get("op_id") if isinstance(m, dict) else None
        if lid is not None and lid not in ids and is_op_id(op):
            candidates.setdefault(op, set()).add(lid)
    if not candidates:
        return ids
    named = {op for op, _begin in journals if op in candidates}
    named |= named_operations(state, set(candidates) - named, MAX_STATE_BYTES)
    for op in named:
        ids |= candidates[op]
    return ids


def _manifests_in(roots: Iterable[str]) -> List[dict]:
    """The manifests of the vaults ``roots`` as read (untrusted): their ``ops/*.json`` files and
    the newest state of each operation their operation log holds. Unreadable ones are skipped."""
    files = []
    roots = list(roots)
    for root in roots:
        ops = os.path.join(root, "ops")
        try:
            files += [os.path.join(ops, n) for n in sorted(os.listdir(ops)) if n.endswith(".json")]
        except OSError:
            continue
    found = []
    for p in files:
        try:
            found.append(read_json_file(p))
        except (OSError, Untrusted):
            continue
    for root in roots:
        found += logged_manifest_states(root)
    return found


def _journal_begins(state: str) -> List[tuple]:
    """(op id named, first record) of each journal of the state folder: the op id its begin
    record names (else its file's name)."""
    journals = os.path.join(state, "journal")
    try:
        names = [n for n in sorted(os.listdir(journals)) if n.endswith(".jsonl")]
    except OSError:
        return []
    out = []
    for n in names:
        try:
            recs = read_json_lines(os.path.join(journals, n)).records
        except OSError:
            continue
        if recs:
            op = recs[0].get("op_id")
            out.append((op if is_op_id(op) else n[:-len(".jsonl")], recs[0]))
    return out


def _carried_id(m, logdir: str) -> Optional[str]:
    """The logdir id a manifest or journal begin record (untrusted) carries, when its own
    ``logdir`` field is this logdir; else None."""
    if (isinstance(m, dict) and isinstance(m.get("logdir_id"), str) and re.match(r"^[0-9a-f]{32}$", m["logdir_id"])
            and isinstance(m.get("logdir"), str) and _same_dir(m["logdir"], logdir)):
        return m["logdir_id"]
    return None


# ---------------------------------------------------------------------------------------
# journals
# ---------------------------------------------------------------------------------------
def _rel(value, file: str, what: str, root: str = "/") -> str:
    try:
        safe_rel(value)
        contained(root, value)
    except UnsafePath as e:
        raise Untrusted(PATH_OUTSIDE, file, f"{what}: {e}") from None
    return value


def _in_run(path: str, run: str, file: str, what: str) -> None:
    norm = os.path.normpath(path)
    r = os.path.normpath(run)
    if r != "." and norm != r and not norm.startswith(r.rstrip("/") + "/"):
        raise Untrusted(PATH_OUTSIDE, file, f"{what} {path!r} is not inside the operation's run {run!r}")


def _sha(value, file: str, what: str) -> str:
    if not is_sha256(value):
        raise Untrusted(BAD_DIGEST, file, f"{what}: {str(value)[:80]!r} is not a sha256 digest")
    return value


def _int(value, file: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Untrusted(BAD_RECORD, file, f"{what}: {str(value)[:40]!r} is not a non-negative integer")
    return value


def _num(value, file: str, what: str) -> float:
    # finite: an infinite time given to os.utime raises OverflowError in the middle of a recovery
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Untrusted(BAD_RECORD, file, f"{what}: {str(value)[:40]!r} is not a number")
    return value


def _mode(value, file: str, what: str) -> int:
    """A recorded permission mode (``st_mode & 0o7777`` is written; a 32-bit mode is tolerated)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _ID_LIMIT:
        raise Untrusted(BAD_RECORD, file, f"{what}: {str(value)[:40]!r} is not a file mode")
    return value


def _mtime_ns(rec: dict, file: str, what: str, required: bool = False) -> None:
    """``rec``'s ``mtime_ns``: absent where an older version did not write it (unless
    ``required``), else a time ``os.utime`` takes (``plausible_mtime_ns``)."""
    if "mtime_ns" not in rec and not required:
        return
    if plausible_mtime_ns(rec.get("mtime_ns")) is None:
        raise Untrusted(BAD_RECORD, file, f"{what} mtime_ns: {str(rec.get('mtime_ns'))[:40]!r} is not a time")


def _owner(rec: dict, file: str, what: str) -> None:
    """``rec``'s owner: neither ``uid`` nor ``gid`` (written before owners were kept), or both,
    each a 32-bit id (root gives a file to them: ``files.give_owner``)."""
    if "uid" not in rec and "gid" not in rec:
        return
    for key in ("uid", "gid"):
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _ID_LIMIT:
            raise Untrusted(BAD_RECORD, file, f"{what} {key}: {str(v)[:40]!r} is not a user or group id")


def _folders(entries, file: str, run: str, what: str) -> None:
    """Folders a record keeps to make again (a swap record's ``dirs``, a retirement's): objects,
    each inside the run, with a mode, and where written an mtime and an owner."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise Untrusted(BAD_RECORD, file, f"{what} is not a list of objects")
    for e in entries:
        path = _rel(e.get("path"), file, what)
        if path != run:
            _in_run(path, run, file, what)
        _mode(e.get("mode"), file, f"{what} mode")
        _mtime_ns(e, file, what)
        _owner(e, file, what)


def _folder_times(entries, file: str) -> None:
    """A begin record's ``dir_times`` (``swap.folder_times``): absent, or folders of the logdir
    ('' the logdir itself) with an entry count and an mtime."""
    if entries is None:
        return
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise Untrusted(BAD_RECORD, file, "dir_times is not a list of objects")
    for e in entries:
        if e.get("path") != "":
            _rel(e.get("path"), file, "folder time")
        _int(e.get("entries"), file, "folder entries")
        _mtime_ns(e, file, "folder time", required=True)


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (TypeError, ValueError):
        return False


def journal_vault(file: str, begin: dict):
    """The vault a journal's operation backs up into, as it stands now (``begin["vault"]``
    unless said below; what recovery acts on, after ``check_journal`` accepted the journal).

    A journal bound by its ``logdir_id`` whose vault was its logdir's own state folder (the
    one at ``<its logdir>/<state name>`` when it began) names the folder that holds the
    journal itself (``<state>/journal/<op>.jsonl``): a journal is written only in its logdir's
    state, and a state copied elsewhere is refused by the identity's inode (``bind``). So a
    logdir renamed, or reached through another mount point, finds its vault where its state is
    now, never at the old path, where another logdir may stand (review R10 F1)."""
    vault = begin.get("vault")
    logdir = begin.get("logdir")
    if not (isinstance(vault, str) and isinstance(logdir, str) and isinstance(begin.get("logdir_id"), str)):
        return vault
    state = os.path.dirname(os.path.dirname(os.path.abspath(file)))
    try:
        if os.path.normpath(vault) == os.path.join(os.path.normpath(logdir), os.path.basename(state)):
            return state
    except (TypeError, ValueError):  # a NUL in an untrusted path
        pass
    return vault


def check_journal(file: str, file_op_id: str, records: List[dict], *, logdir: str, vaults: Iterable[str],
                  identity: Optional[dict]) -> None:
    """Raise ``Untrusted`` unless every record of this journal is well formed, its paths stay
    inside its run, its vault is one of ``vaults`` and it belongs to ``logdir``."""
    if not records or not all(isinstance(r, dict) and isinstance(r.get("type"), str) for r in records):
        raise Untrusted(BAD_RECORD, file, "records are not JSON objects with a type")
    begin = records[0]
    op_id = begin.get("op_id")
    if not is_op_id(file_op_id) or not is_op_id(op_id):
        raise Untrusted(BAD_OP_ID, file, f"operation id {str(op_id)[:80]!r} is not of the op-id format")
    if op_id != file_op_id:
        raise Untrusted(BAD_OP_ID, file, f"operation id {op_id!r} does not match the journal's name")
    if begin.get("kind") not in ("reduce", "restore", "salvage", "retire", "unretire"):
        raise Untrusted(BAD_RECORD, file, f"unknown kind {str(begin.get('kind'))[:40]!r}")
    # bound to this logdir: by the state's identity when the journal carries one, else by path
    if "logdir_id" in begin:
        if identity is None or begin.get("logdir_id") != identity.get("id"):
            raise Untrusted(FOREIGN_JOURNAL, file, "written for another logdir (identity differs); not replayed")
    elif not isinstance(begin.get("logdir"), str) or not _same_dir(begin["logdir"], logdir):
        raise Untrusted(FOREIGN_JOURNAL, file, f"written for the logdir {str(begin.get('logdir'))[:200]!r}, not "
                                               f"{logdir}; not replayed")
    vault = journal_vault(file, begin)
    if not isinstance(vault, str) or not any(_same_dir(vault, v) for v in vaults):
        raise Untrusted(FOREIGN_VAULT, file, f"names the vault {str(vault)[:200]!r}, which this logdir does not use")
    run = _rel(begin.get("run"), file, "run")
    # fields every kind may carry, each read by recovery or a restore
    if "t" in begin:
        _num(begin["t"], file, "start time")
    token = begin.get("tmp_token")
    if token is not None and not (isinstance(token, str) and _TOKEN.fullmatch(token)):
        raise Untrusted(BAD_RECORD, file, f"put-back token {str(token)[:40]!r} is not one this tool writes")
    _folder_times(begin.get("dir_times"), file)
    tmp_name = re.compile(r"^\.footprint-" + re.escape(op_id) + r"-[0-9]{1,9}\.tmp$")
    if begin["kind"] in ("restore", "unretire"):
        if not is_op_id(begin.get("of_op")):
            raise Untrusted(BAD_OP_ID, file, "restores an operation whose id is not of the op-id format")
    elif begin["kind"] == "retire":
        # a retirement moves every recorded file and directory: each must lie inside its run,
        # with what a rollback gives it back (bytes checked by digest, mode, time, owner)
        files = begin.get("files")
        if not isinstance(files, list) or not all(isinstance(e, dict) for e in files):
            raise Untrusted(BAD_RECORD, file, "files is not a list of objects")
        for e in files:
            _in_run(_rel(e.get("path"), file, "retired path"), run, file, "retired path")
            _sha(e.get("sha256"), file, "retired file digest")
            _int(e.get("size"), file, "retired file size")
            _mode(e.get("mode"), file, "retired file mode")
            _mtime_ns(e, file, "retired file", required=True)
            if "ino" in e:
                _int(e["ino"], file, "retired file inode")
            _owner(e, file, "retired file")
        _folders(begin.get("dirs"), file, run, "retired folder")
        if not isinstance(begin.get("same_fs"), bool):
            raise Untrusted(BAD_RECORD, file, "same_fs is not true or false")
        _int(begin.get("bytes"), file, "retired bytes")
        along = begin.get("takes_along", [])
        if not isinstance(along, list):
            raise Untrusted(BAD_RECORD, file, "takes_along is not a list")
        for r in along:
            _in_run(_rel(r, file, "nested run"), run, file, "nested run")
        for r in records[1:]:
            if r["type"] not in _RETIRE_RECORD_TYPES:
                raise Untrusted(BAD_RECORD, file, f"unknown record type {r['type'][:40]!r}")
            if r["type"] == "copying":
                _in_run(_rel(r.get("final"), file, "final path"), run, file, "final path")
        return
    elif begin["kind"] == "salvage":
        # recovery unlinks ``tmp`` and ``final`` of a salvage: both must be this operation's own
        if not is_op_id(begin.get("of_op")):
            raise Untrusted(BAD_OP_ID, file, "salvages an operation whose id is not of the op-id format")
        _in_run(_rel(begin.get("path"), file, "salvaged path"), run, file, "salvaged path")
        for key in ("old_sha256", "new_sha256"):
            _sha(begin.get(key), file, "salvage digest")
        for key in ("old_size", "new_size", "from"):
            _int(begin.get(key), file, "salvage size")
        tmp_name = re.compile(r"^\.footprint-" + re.escape(op_id) + r"-salvage\.tmp$")
        if begin.get("tmp") is not None:
            tmp = _rel(begin.get("tmp"), file, "temporary file")
            _in_run(tmp, run, file, "temporary file")
            if not tmp_name.match(os.path.basename(tmp)):
                raise Untrusted(PATH_OUTSIDE, file, f"temporary file {tmp!r} is not one this operation makes")
        if begin.get("final") is not None:
            _in_run(_rel(begin.get("final"), file, "salvage file"), run, file, "salvage file")
    else:
        plan = begin.get("plan")
        if not isinstance(plan, dict) or plan.get("run") != run or not isinstance(plan.get("actions"), list):
            raise Untrusted(BAD_RECORD, file, "the plan does not match the journal's run")
        _int(plan.get("bytes_before"), file, "planned bytes")
        _int(plan.get("expected_after_bytes"), file, "planned bytes after")
        for a in plan["actions"]:
            if not isinstance(a, dict):
                raise Untrusted(BAD_RECORD, file, "a planned action is not an object")
            if not _ACTION_FIELDS.issuperset(a):
                raise Untrusted(BAD_RECORD, file, f"a planned action has fields no plan writes: "
                                                  f"{sorted(str(k)[:40] for k in set(a) - _ACTION_FIELDS)[:5]}")
            if a.get("kind") not in ("delete", "compress", "rewrite", "remove_dir"):
                raise Untrusted(BAD_RECORD, file, f"a planned action of unknown kind {str(a.get('kind'))[:40]!r}")
            _in_run(_rel(a.get("path"), file, "planned path"), run, file, "planned path")
            if a.get("new_path") is not None:
                _in_run(_rel(a.get("new_path"), file, "planned new path"), run, file, "planned new path")
    for r in records[1:]:
        t = r["type"]
        if t not in _RECORD_TYPES:
            raise Untrusted(BAD_RECORD, file, f"unknown record type {t[:40]!r}")
        if t == "begin":
            raise Untrusted(BAD_RECORD, file, "a second begin record")
        if t == "backup":
            _in_run(_rel(r.get("path"), file, "backup path"), run, file, "backup path")
            _sha(r.get("sha256"), file, "backup digest")
            _int(r.get("size"), file, "backup size")
            _mode(r.get("mode"), file, "backup mode")
            _num(r.get("mtime"), file, "backup mtime")
            _mtime_ns(r, file, "backup")
            _owner(r, file, "backup")
        elif t == "swap":  # the removed folders' mode, mtime and owner, taken before the swap
            if r.get("dirs") is not None:
                _folders(r["dirs"], file, run, "removed folder")
        elif t in ("stage", "staged"):
            tmp = _rel(r.get("tmp"), file, "temporary file")
            _in_run(tmp, run, file, "temporary file")
            if not tmp_name.match(os.path.basename(tmp)):
                raise Untrusted(PATH_OUTSIDE, file, f"temporary file {tmp!r} is not one this operation makes")
            _in_run(_rel(r.get("final"), file, "final path"), run, file, "final path")
            if r.get("src") is not None:
                _in_run(_rel(r.get("src"), file, "source path"), run, file, "source path")
            if t == "staged":
                _sha(r.get("sha256"), file, "staged digest")
                _int(r.get("size"), file, "staged size")
        elif t == "copying":  # a copy + delete swap's copy to a new name, begun (swap.apply_swap)
            _in_run(_rel(r.get("final"), file, "final path"), run, file, "final path")
        elif t == "rmdir":
            _in_run(_rel(r.get("path"), file, "directory"), run, file, "directory")
            _mode(r.get("mode"), file, "directory mode")
            _mtime_ns(r, file, "directory")
            _owner(r, file, "directory")
        elif t == "displaced":  # newer bytes a rollback kept in the vault: go into its manifest
            _in_run(_rel(r.get("path"), file, "displaced path"), run, file, "displaced path")
            if not r.get("kept_in_place"):
                _sha(r.get("sha256"), file, "displaced digest")
                if r.get("blob") is not None and r["blob"] != f"blobs/{r['sha256'][:2]}/{r['sha256']}":
                    raise Untrusted(PATH_OUTSIDE, file, "a displaced record names a blob not of its digest")
            _int(r.get("size"), file, "displaced size")
            if r.get("late_records") is not None and not isinstance(r["late_records"], dict):
                raise Untrusted(BAD_RECORD, file, "a displaced record's late records are not an object")


# ---------------------------------------------------------------------------------------
# manifests (the vault index is checked where it is read: storage.paths.recorded_vaults)
# ---------------------------------------------------------------------------------------
def check_manifest(m, file: str, file_op_id: str) -> dict:
    """``m`` if it is a well-formed manifest whose paths stay inside its run; ``Untrusted`` else."""
    if not isinstance(m, dict):
        raise Untrusted(BAD_MANIFEST, file, "not a JSON object")
    op_id = m.get("op_id")
    if not is_op_id(op_id) or op_id != file_op_id:
        raise Untrusted(BAD_OP_ID, file, f"operation id {str(op_id)[:80]!r} is not of the op-id format or not "
                                         "the file's name")
    if m.get("kind") not in ("reduce", "restore", "retire"):
        raise Untrusted(BAD_MANIFEST, file, f"unknown kind {str(m.get('kind'))[:40]!r}")
    run = _rel(m.get("run"), file, "run")
    if m.get("of_op") is not None and not is_op_id(m.get("of_op")):
        raise Untrusted(BAD_OP_ID, file, "of_op is not of the op-id format")
    for key in ("files", "created", "removed_dirs", "displaced"):
        if not isinstance(m.get(key, []), list) or not all(isinstance(x, dict) for x in m.get(key, [])):
            raise Untrusted(BAD_MANIFEST, file, f"{key} is not a list of objects")
    for f in m.get("files", []):
        _in_run(_rel(f.get("path"), file, "backed-up path"), run, file, "backed-up path")
        sha = _sha(f.get("sha256"), file, "backup digest")
        _int(f.get("size"), file, "backup size")
        if f.get("mode") is not None:
            _int(f.get("mode"), file, "backup mode")
        if f.get("blob") is not None and f["blob"] != f"blobs/{sha[:2]}/{sha}":
            raise Untrusted(PATH_OUTSIDE, file, f"blob {str(f['blob'])[:120]!r} is not the blob of its digest")
    for c in m.get("created", []):
        _in_run(_rel(c.get("path"), file, "created path"), run, file, "created path")
        _sha(c.get("sha256"), file, "created digest")
        _int(c.get("size"), file, "created size")
    for d in m.get("removed_dirs", []):
        _in_run(_rel(d.get("path"), file, "removed directory"), run, file, "removed directory")
        _int(d.get("mode"), file, "directory mode")
    for key in ("tree", "dirs"):  # a retirement's whole tree
        if not isinstance(m.get(key, []), list) or not all(isinstance(x, dict) for x in m.get(key, [])):
            raise Untrusted(BAD_MANIFEST, file, f"{key} is not a list of objects")
        for e in m.get(key, []):
            path = _rel(e.get("path"), file, "retired path")
            if path != run:
                _in_run(path, run, file, "retired path")
    for d in m.get("displaced", []):
        if d.get("sha256") is not None:
            _sha(d.get("sha256"), file, "displaced digest")
    return m
