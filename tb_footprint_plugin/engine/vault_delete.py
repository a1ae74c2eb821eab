"""Deleting and releasing blobs (``VaultDelete``): each under its lock, leaving what a live pin
names; packed blobs forgotten under the pack lock.

A part of ``engine.vault.Vault`` (the format is described there).
"""
from __future__ import annotations

import contextlib
import os
import stat
from typing import Dict, Iterable, List, Optional

from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.paths import is_sha256


class VaultDelete:
    """Deleting and releasing blobs (a part of ``engine.vault.Vault``)."""

    def delete_blob(self, sha: str) -> int:
        """Remove the blob in every local form (plain, compressed, a compaction's temp; a remote
        copy and its record are ``engine.offload.forget_remote``'s, after the manifests); the bytes
        they held as stored. Waits for a compaction of it under way (the blob's lock): its
        rename would otherwise leave a ``.zst`` no manifest names."""
        with self._blob_lock(sha, wait=True):
            return self._delete_locked(sha)

    def _delete_locked(self, sha: str) -> int:
        """``delete_blob`` under the blob's lock: a blob a live pin names is kept (0 freed)."""
        if self.pinned_by(sha):
            # a transaction under way relies on it (``store`` pinned it under this lock); a link
            # of a live file (a rolled-back run's original) is made a copy of its own first
            with contextlib.suppress(OSError):
                self.unshare(sha)
            return 0
        size = 0
        for p in (self.blob_path(sha), self.zst_path(sha), *self._tmp_names(sha)):
            try:
                n = os.lstat(p).st_size
                fsops.unlink(p)
                size += n
            except FileNotFoundError:
                continue
        return size

    def _release_locked(self, sha: str, changed: set) -> int:
        """``_delete_locked`` for a restore's release, under the blob's lock: its plain blob goes
        only by ``_drop_plain`` (still the inode read, one link, hashing to its name). One that
        does not (grown by a late writer of a linked original: bytes that may be nowhere else)
        is kept with every other form of the digest, and named in ``changed`` unless it is only
        shared (another link holds it: kept, not changed). 0 freed when kept."""
        if self.pinned_by(sha):
            return self._delete_locked(sha)
        p = self.blob_path(sha)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return self._delete_locked(sha)
        except OSError:
            changed.add(sha)
            return 0
        if not stat.S_ISREG(st.st_mode):
            changed.add(sha)
            return 0
        if not self._drop_plain(sha, st):
            if st.st_nlink == 1:
                changed.add(sha)
            return 0
        return st.st_size + self._delete_locked(sha)

    def delete_blobs(self, shas: Iterable[str], needed, batch: int = 256,
                     after_each=None, changed: Optional[set] = None) -> Dict[str, int]:
        """Delete blobs a purge planned, digest → bytes freed (0: kept). A plan read earlier may
        be stale: under the locks of each batch (taken in digest order, so two purges never wait
        on each other), a blob is kept when a live pin names it or when ``needed()`` — the
        manifests and journals read afresh, once a batch — names it. ``store`` pins under the
        same lock and a transaction unpins only after its manifest is durable, so a transaction
        that stored the bytes since the plan is seen one way or the other. ``changed`` (a
        restore's release): a plain blob goes only while intact (``_release_locked``); one kept
        as changed is added to it, and its pack copy stays too."""
        todo = sorted(dict.fromkeys(s for s in shas if is_sha256(s)))
        out: Dict[str, int] = {}
        # packed blobs are forgotten by the pack store, which no add may run beside: its lock first
        # (alone), then the blobs' (the order a compaction's packing takes them in). Taken whether
        # or not a digest is packed now: a packing that held a blob's lock when this looked would
        # otherwise leave its pack copy behind once it let go
        with (self.pack_lock(exclusive=True) if todo else contextlib.nullcontext()):
            packs = remote_vault.has_packs(self.root)
            for i in range(0, len(todo), batch):
                part = todo[i:i + batch]
                with contextlib.ExitStack() as stack:
                    for sha in part:
                        stack.enter_context(self._blob_lock(sha, wait=True))
                    keep = needed()
                    forget = []
                    for sha in part:
                        if sha in keep:
                            out[sha] = 0
                        elif changed is not None:
                            out[sha] = self._release_locked(sha, changed)
                            if sha in changed or self.local_form(sha) is not None:
                                continue  # kept (changed, shared or pinned): so is its pack copy
                        else:
                            out[sha] = self._delete_locked(sha)
                        if packs and sha not in keep and not self.pinned_by(sha) \
                                and remote_vault.packed_ref(self.root, sha) is not None:
                            forget.append(sha)
                        if after_each is not None:
                            after_each()  # a failpoint: a kill here is finished from the purge's intent
                    for sha, n in self._forget_packed(forget).items():
                        out[sha] += n
        self.prune_shards(sha for sha, n in out.items() if n)  # the shard folders the deletes emptied
        return out

    def forget_packed_released(self, shas: Iterable[str], needed, batch: int = 256) -> Dict[str, int]:
        """Forget the pack copies of blobs restores let go (``engine.restore.Releases``: one
        forget for a restore of many runs, not one a run), digest → bytes they took in their
        packs (0: kept). The rules of ``delete_blobs``: the pack lock alone, then each batch's
        blob locks (digest order), ``needed(batch)`` read afresh under them once a batch; a
        digest it names, a live pin names, or that has a local form again (stored anew since: its
        pack copy stays with it, as ``delete_blobs`` keeps one) stays.

        One ``forget`` of every batch's digests at the end, under the pack lock held throughout
        (a forget a batch repacked the packs each left half dead: 60x80 profile files, 19
        forgets moved 3,692 blobs through 71 repacks). Between a batch's check and that forget
        only a transaction's ``store`` can touch its digests (packing, purges and offloads take
        the pack lock): a digest with no local form is stored as a fresh plain copy, never as
        the pack copy, so a pin made after the check relies on nothing this forgets."""
        todo = sorted(dict.fromkeys(s for s in shas if is_sha256(s)))
        out: Dict[str, int] = {s: 0 for s in todo}
        if not todo:
            return out
        with self.pack_lock(exclusive=True):
            if not remote_vault.has_packs(self.root):
                return out
            forget: List[str] = []
            for i in range(0, len(todo), batch):
                part = todo[i:i + batch]
                with contextlib.ExitStack() as stack:
                    for sha in part:
                        stack.enter_context(self._blob_lock(sha, wait=True))
                    keep = needed(part)
                    pinned = self._pinned_among(part)
                    forget += [sha for sha in part if sha not in keep and sha not in pinned
                               and self._local_form(sha) is None
                               and remote_vault.packed_ref(self.root, sha) is not None]
            out.update(self._forget_packed(forget))
        return out
