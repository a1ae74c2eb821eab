"""Compaction's notes and steps (``VaultCompaction``): the pending note a compaction writes
before its first step (``compact/<op_id>.json``, read back by the next start), and one blob's
compaction into a verified ``.zst`` under its lock.

A part of ``engine.vault.Vault`` (the format is described there); ``Vault._compact_locked`` and
``Vault.compact_ops`` stay in ``engine.vault`` (they read names set on that module).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from typing import BinaryIO, Dict, Iterable, List, Optional, Tuple

from tb_footprint_plugin.engine.vault_base import KEPT_BUSY, VaultError, ZST_TMP_SUFFIX
from tb_footprint_plugin.storage import throttle as fsops, zst
from tb_footprint_plugin.storage.files import atomic_write_json, hash_and_count
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.private import ensure_private_dir
from tb_footprint_plugin.storage.regular import open_regular


def compact_operation(vault: "Vault", op_id: str, in_use: Iterable[str] = (), noted: bool = False) -> Dict[str, str]:
    """After ``op_id`` committed: compact its backups (``Vault.compact_all``); digest → what was
    done. ``in_use``: digests an operation under way backs up too (another run's transaction,
    ``--jobs``): it reads that blob as its original, so it stays plain for now. ``noted``: its
    note is there already (written before the swap). Never raises: a compaction that fails leaves
    the backups as the hard links they are (safe; purge frees them), and a note it left is
    finished by the next start."""
    busy = set(in_use)
    try:
        m = vault.read_manifest(op_id)
        return vault.compact_all(op_id, [f["sha256"] for f in m.get("files", [])
                                         if isinstance(f, dict) and f.get("sha256") not in busy], manifest=m,
                                 noted=noted)
    except Exception:  # the reduction stands whatever happens here
        return {}


def note_compaction(vault: "Vault", op_id: str) -> None:
    """Leave ``op_id``'s compaction to the next start (its run was busy): a note naming its
    backups, as ``compact_all`` writes first. Never raises (the backups stay hard links)."""
    try:
        m = vault.read_manifest(op_id)
        vault.note_compaction(op_id, [f["sha256"] for f in m.get("files", []) if isinstance(f, dict)])
    except Exception:  # the reduction stands; its backups stay plain until a purge
        pass


def _note_paths(folder: str) -> List[Tuple[str, str]]:
    """(op id, path) of every note ``<op id>.json`` in ``folder``, sorted; none through a link."""
    try:
        names = sorted(os.listdir(folder)) if not os.path.islink(folder) else []
    except OSError:
        return []
    return [(n[:-5], os.path.join(folder, n)) for n in names if n.endswith(".json") and is_op_id(n[:-5])]


def read_notes(folder: str) -> Dict[str, List[str]]:
    """op id → blob digests of the notes ``<op id>.json`` in ``folder`` (a compaction's, an
    offload's): untrusted input, so only op ids and digests of the right form are taken, never
    through a link; an unreadable note names nothing."""
    out: Dict[str, List[str]] = {}
    for op_id, p in _note_paths(folder):
        try:
            with open_regular(p) as f:
                d = json.load(f)
            blobs = d.get("blobs") if isinstance(d, dict) else None
            out[op_id] = [s for s in blobs if is_sha256(s)] if isinstance(blobs, list) else []
        except (OSError, ValueError, RecursionError):
            out[op_id] = []
    return out


def damaged_notes(folder: str) -> List[Tuple[str, str]]:
    """The notes ``<op id>.json`` in ``folder`` that ``read_notes`` takes as naming nothing:
    (path, why) for each that is no regular file, does not read or parse, or is no note (no list
    of blobs). Such a note is never finished nor dropped; ``status`` names it (review R13 F5)."""
    out: List[Tuple[str, str]] = []
    for _op_id, p in _note_paths(folder):
        try:
            with open_regular(p) as f:
                d = json.load(f)
        except FileNotFoundError:
            continue  # finished meanwhile
        except OSError as e:
            kind = getattr(e, "kind", None)  # ``NotRegularFile``: a link, FIFO, folder, ...
            out.append((p, f"is {kind}, not a regular file" if kind else f"unreadable ({e.strerror or e})"))
            continue
        except (ValueError, RecursionError):
            out.append((p, "does not parse as JSON"))
            continue
        if not isinstance(d, dict) or not isinstance(d.get("blobs"), list):
            out.append((p, "is JSON but no note (no list of blobs)"))
    return out


class VaultCompaction:
    """Compaction notes and one blob's compaction (a part of ``engine.vault.Vault``)."""

    # --- compaction (the compressed vault) --------------------------------------------
    def _pending_path(self, op_id: str) -> str:
        if not is_op_id(op_id):
            raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a file name")
        return os.path.join(self.root, "compact", f"{op_id}.json")

    def note_compaction(self, op_id: str, shas: List[str], waits_for: Optional[dict] = None) -> None:
        """Record, before the first step, which blobs an operation's compaction works on: a kill
        midway is finished by the next start (``pending_compactions``). ``waits_for``: the
        process (``{host, pid, pid_start}``) whose batch compacts it in a later round; another
        process's start leaves the note to it while it runs (``compaction_waits_for``)."""
        ensure_private_dir(os.path.join(self.root, "compact"), self.root, tighten_root=self.own_folder)
        doc = {"op_id": op_id, "blobs": [s for s in shas if is_sha256(s)]}
        if waits_for:
            doc["waits_for"] = waits_for
        atomic_write_json(self._pending_path(op_id), doc)

    def compaction_waits_for(self, op_id: str) -> Optional[dict]:
        """The process a compaction note says will compact it (``note_compaction``'s
        ``waits_for``: ``host`` a str, ``pid`` an int, ``pid_start`` an int or None), or None
        (no such field, or not of that form: the note is anyone's to finish)."""
        try:
            with open_regular(self._pending_path(op_id)) as f:
                d = json.load(f)
        except (OSError, ValueError, RecursionError):
            return None
        w = d.get("waits_for") if isinstance(d, dict) else None
        if not (isinstance(w, dict) and isinstance(w.get("host"), str) and isinstance(w.get("pid"), int)
                and not isinstance(w.get("pid"), bool)
                and (w.get("pid_start") is None or isinstance(w.get("pid_start"), int))):
            return None
        return {"host": w["host"], "pid": w["pid"], "pid_start": w.get("pid_start")}

    def compaction_noted_ns(self, op_id: str) -> Optional[int]:
        """When ``op_id``'s compaction note was last written (its mtime, ns), or None (no note, or
        not a regular file): a process that started after that cannot have written it."""
        try:
            st = os.lstat(self._pending_path(op_id))
        except OSError:
            return None
        return st.st_mtime_ns if stat.S_ISREG(st.st_mode) else None

    def pending_compactions(self) -> Dict[str, List[str]]:
        """op id → blob digests of compactions noted and not finished (``read_notes``; an
        unreadable note names nothing to compact, and is dropped)."""
        return read_notes(os.path.join(self.root, "compact"))

    def done_compaction(self, op_id: str) -> None:
        """Drop an operation's compaction note once every blob it names is settled."""
        with contextlib.suppress(FileNotFoundError):
            fsops.unlink(self._pending_path(op_id))

    def compact_all(self, op_id: str, shas: Iterable[str], manifest: Optional[dict] = None,
                    noted: bool = False) -> Dict[str, str]:
        """Compact the blobs of committed operation ``op_id`` (``compact_ops`` of it alone, noted
        first so a kill is finished at the next start, unless ``noted``: its note names them
        already); digest → what was done. ``manifest``: ``op_id``'s, when the caller read it already."""
        return self.compact_ops({op_id: list(shas)}, {op_id: manifest} if manifest is not None else None,
                                noted=noted)[op_id]

    def _tmp_names(self, sha: str) -> List[str]:
        """Temp files of compactions of ``sha`` (``<sha>.zst.tmp``, ``<sha>.zst.tmp-<pid>-…``)."""
        folder, pre = os.path.dirname(self.blob_path(sha)), sha + ZST_TMP_SUFFIX
        try:
            return [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(pre)]
        except OSError:
            return []

    def compact(self, sha: str, held: Optional[bool] = None) -> str:
        """Replace a plain blob no live file shares by a verified ``.zst`` (see the module's
        docstring for the order); idempotent, so a killed compaction is finished by calling it
        again. Returns one of ``COMPRESSED``, ``KEPT_*``, ``MISSING``."""
        self.blob_path(sha)  # the digest is checked before any name is made from it
        with self._blob_lock(sha) as mine:
            if not mine:
                return KEPT_BUSY  # another process compacts it: two never share a temp or a step
            return self._compact_locked(sha, held)

    @staticmethod
    def _zst_ok_file(f: BinaryIO, sha: str, size: Optional[int]) -> bool:
        """Whether the open compressed file decompresses to ``size`` bytes (any, for None)
        hashing to ``sha``."""
        try:
            with zst.open_decompressed(f) as d:
                got, n = hash_and_count(d)
        except OSError:
            return False
        return (size is None or n == size) and got == sha

    @classmethod
    def _zst_ok(cls, path: str, sha: str, size: Optional[int]) -> bool:
        """Whether the compressed file decompresses to ``size`` bytes hashing to ``sha``."""
        try:
            f = open_regular(path)
        except OSError:
            return False
        return cls._zst_ok_file(f, sha, size)
