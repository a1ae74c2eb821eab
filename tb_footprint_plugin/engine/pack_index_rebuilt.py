"""What a rebuild of a damaged pack index says at a start or ``recover`` (review R22 F3): one
set of words for a disk's vault (``engine.upkeep``), a bucket's blob folder
(``engine.bucket_blob_index``) and a disk vault's remote vaults (``rebuild_remote_indexes``).
Apart from ``engine.vault_packs``, which ``engine.context`` imports through the vault: a
recovery outcome there would be an import cycle.
"""
from __future__ import annotations

import os
from typing import List, Optional

from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.engine.recovery_rules import RecoveryOutcome
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.blob_salvage import Salvage
from tb_footprint_plugin.storage.blobstore import BlobFailure
from tb_footprint_plugin.storage.store import StoreFailure


def rebuilt_outcomes(got: Optional[Salvage], index_root: str, where: str, *,
                     unlisted: bool = False) -> List[RecoveryOutcome]:
    """What a rebuild of a damaged pack index (``Salvage``, None: nothing was damaged) says at a
    start or ``recover``: the backups found again and the index objects written (under
    ``index_root``), ``backup_damaged`` for those found in no pack of ``where``. Never advises
    removing the damaged object while a backup is still found nowhere: it may be what lists it,
    and once it is gone a forget may delete what only it listed (review R22, F6's sequel).
    ``unlisted``: no index object was damaged; the backups were in data objects no index object
    listed any more (one removed: ``bucket_blob_index.unlisted_objects``); also when the rebuild
    says so itself (``Salvage.unlisted``: a disk's packs, ``Vault.rebuild_pack_index``)."""
    out: List[RecoveryOutcome] = []
    unlisted = unlisted or (got is not None and got.unlisted)
    if got is not None and got.found and unlisted:
        names = ", ".join(os.path.join(index_root, k) for k in got.index)
        out.append(RecoveryOutcome("", "", Recovery.REBUILT, f"{len(got.found)} backup(s) the operations need were "
                                   f"in data objects of {where} no index object lists any more (one removed?): found "
                                   f"again (each hashed) and listed in {names}", Finding.PACK_INDEX_REBUILT))
    elif got is not None and got.found:
        names = ", ".join(os.path.join(index_root, k) for k in got.index)
        keep = ("keep it: some backups are still found in no pack (below), and nothing it may list is deleted while "
                "it stands" if got.missing else "`tb-footprint status` says when it may be removed, and what "
                "removing it does")
        out.append(RecoveryOutcome("", "", Recovery.REBUILT, f"{len(got.found)} packed backup(s) a damaged index "
                                   f"object hid were found again in the packs (each hashed) and listed in {names}; "
                                   f"the damaged object is kept: {keep}", Finding.PACK_INDEX_REBUILT))
    if got is not None and got.missing:
        out.append(RecoveryOutcome("", "", Recovery.FAILED, f"{len(got.missing)} backup(s) no valid pack index lists "
                                   f"were found in no pack of {where} (sha256 "
                                   f"{', '.join(s[:12] + '…' for s in got.missing[:3])})", Finding.BACKUP_DAMAGED))
    return out


def rebuild_remote_indexes(vault: Vault) -> List[RecoveryOutcome]:
    """Each remote vault ``vault`` offloaded to (``known_urls``) whose index has a damaged object:
    the blobs its records say are there found again in its packs and listed anew
    (``remote_vault.rebuild_remote_index``: hashed, the damaged object kept), said as
    ``rebuilt_outcomes``. A fresh listing of each remote index (a GET per index object this
    process has not read): for ``recover``, not every start (a restore or verify that finds a
    blob missing rebuilds by itself, ``remote_vault.open_remote``). Never raises."""
    if not vault.is_private():
        return []  # another user's vault: its records are no word of ours, nothing written for them
    out: List[RecoveryOutcome] = []
    for url in remote_vault.known_urls(vault.root):
        try:
            got = remote_vault.rebuild_remote_index(vault.root, url)
        except (BlobFailure, StoreFailure, OSError) as e:
            out.append(RecoveryOutcome("", "", Recovery.FAILED, f"cannot look in the packs of the remote vault {url} "
                                       f"for the backups a damaged pack index hides: {e}", Finding.RECOVERY_FAILED))
            continue
        out += rebuilt_outcomes(got, url, url)
    return out


__all__ = ["rebuild_remote_indexes", "rebuilt_outcomes"]
