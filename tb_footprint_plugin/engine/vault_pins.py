"""Pins (``VaultPins``): one empty file per blob a transaction under way relies on
(``tmp/<op_id>/pins/``); every deletion and compaction leaves a digest a live pin names.

A part of ``engine.vault.Vault`` (the format is described there).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
from typing import List, Optional

from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault_base import VaultError
from tb_footprint_plugin.storage.files import create_new, fsync_dir
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.private import ensure_private_dir
from tb_footprint_plugin.storage.regular import open_regular


class VaultPins:
    """Pins of transactions under way (a part of ``engine.vault.Vault``)."""

    # --- pins: blobs a transaction under way relies on -----------------------------------
    def _pins_dir(self, op_id: str) -> str:
        if not is_op_id(op_id):
            raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a folder name")
        return os.path.join(self.tmp, op_id, "pins")

    def pin_blob(self, op_id: str, sha: str, sync: bool = True) -> None:
        """Record, durably (``sync``; else at the transaction's ``sync_pinned``), that transaction
        ``op_id`` relies on blob ``sha``: an empty file ``tmp/<op_id>/pins/<sha>`` (not a hard link
        of the blob: a second link is how compaction, offload and store tell a blob a live file
        still shares). Call under the blob's lock."""
        self.blob_path(sha)  # refuses a name that is not a digest
        folder = self._pins_dir(op_id)
        # makes or checks every folder from the vault down to it
        ensure_private_dir(folder, self.root, tighten_root=self.own_folder)
        p = os.path.join(folder, sha)
        if not os.path.lexists(p):
            os.close(create_new(p))
            if sync:
                fsync_dir(folder)

    def unpin(self, op_id: str) -> int:
        """Drop every pin of ``op_id`` (its transaction committed, its manifest durable, or rolled
        back); pins removed. Only digest-named regular files in a real folder are removed. Another
        process may drop them at the same moment (a start's ``upkeep`` drops the pins of an
        operation whose journal is closed and whose manifest is there): a folder it removed
        meanwhile is done, not an error."""
        with self._unsynced_lock:
            self._unsynced.pop(op_id, None)  # nothing of it needs syncing any more
        try:
            folder = self._pins_dir(op_id)
        except VaultError:
            return 0
        if os.path.islink(folder) or not os.path.isdir(folder) or os.path.islink(os.path.dirname(folder)):
            return 0
        n = 0
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return 0  # the other unpin removed it since the look above
        for name in names:
            p = os.path.join(folder, name)
            if is_sha256(name) and not os.path.islink(p) and os.path.isfile(p):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
                    n += 1
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(folder))  # an empty op folder (its scratch already gone)
        return n

    def pinned_ops(self) -> List[str]:
        """Op ids with a pins folder in ``tmp/`` (untrusted names: op ids only, no symlink)."""
        try:
            names = os.listdir(self.tmp) if not os.path.islink(self.tmp) else []
        except OSError:
            return []
        out = []
        for n in sorted(names):
            d = os.path.join(self.tmp, n)
            if is_op_id(n) and not os.path.islink(d) and os.path.isdir(os.path.join(d, "pins")) \
                    and not os.path.islink(os.path.join(d, "pins")):
                out.append(n)
        return out

    def pins_of(self, op_id: str) -> List[str]:
        """The digests ``op_id`` pins (digest-named regular files in its real pins folder; read
        only, untrusted names skipped), sorted; [] when it pins nothing."""
        try:
            folder = self._pins_dir(op_id)
        except VaultError:
            return []
        if os.path.islink(folder) or os.path.islink(os.path.dirname(folder)) or not os.path.isdir(folder):
            return []
        try:
            names = os.listdir(folder)
        except OSError:
            return []
        return sorted(n for n in names if is_sha256(n) and not os.path.islink(os.path.join(folder, n)))

    def _rolled_back(self, op_id: str) -> bool:
        """Whether ``op_id``'s manifest says it rolled back: its originals are back, so its pins
        protect nothing (its own rollback deletes the blobs only it needed). Unreadable: False."""
        try:
            if oplog.has_state(self.root, op_id):
                m, damage = oplog.segment_state(self.root, op_id)
                m = None if damage is not None else m
            else:
                with open_regular(self.manifest_path(op_id)) as f:
                    m = json.load(f)
        except (OSError, ValueError, RecursionError):  # VaultError is an OSError
            return False
        return isinstance(m, dict) and m.get("op_id") == op_id and m.get("outcome") == Outcome.ROLLED_BACK

    def pinned_by(self, sha: str, ops: Optional[List[str]] = None) -> List[str]:
        """Op ids of transactions whose live pin names ``sha`` (any logdir sharing this vault);
        ``ops``: ``pinned_ops()`` when the caller listed them already (for many digests at once)."""
        if not is_sha256(sha):
            return []
        return [op for op in (self.pinned_ops() if ops is None else ops)
                if os.path.lexists(os.path.join(self.tmp, op, "pins", sha)) and not self._rolled_back(op)]

    def _pinned_among(self, shas: List[str]) -> set:
        """Those of ``shas`` a live pin names (``pinned_by`` of each, the pins folder listed once)."""
        ops = self.pinned_ops()
        return {sha for sha in shas if self.pinned_by(sha, ops)} if ops else set()
