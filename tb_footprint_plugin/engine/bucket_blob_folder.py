"""The blob folder a bucket reduction recorded (``blob_folder`` in its manifest,
``bucket_steps.manifest_doc``), used by its restore when the command was given no ``--backup-dir``
(review R21 PD20, its restore half): a disk restores from the vault it recorded, a bucket asked for
the folder every time though its manifest names it.

A manifest is untrusted input: the folder it names is used only on the host it names (a folder of
that path on another machine is not where the blobs went), only when it exists and is a folder of
ours by the disk vault's rule (``storage.private.check_private_dir``: ours, no link, not writable
by group or others); one that is not ours is refused naming it, nothing read from or written to
it. Each blob is still taken only where this logdir claimed it (``bucket_identity.entry_claimed``)
and read back hashed, as with ``--backup-dir``.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from typing import Optional

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry
from tb_footprint_plugin.engine.bucket_state import BlobVault, BucketTxnError, BucketVault
from tb_footprint_plugin.storage.private import NotPrivate, check_private_dir


def recorded_folder(manifest: dict) -> Optional[str]:
    """The blob folder ``manifest`` records for this host, when it keeps a backup there (a blob
    entry) and the folder is an absolute path; None otherwise (another host's, or none)."""
    folder, host = manifest.get("blob_folder"), manifest.get("host")
    # a reduction's entries, or a retirement's under each run it took (review R24 F4's note)
    runs = manifest.get("runs") if isinstance(manifest.get("runs"), list) else [manifest]
    files = [f for r in runs if isinstance(r, dict) and isinstance(r.get("files"), list) for f in r["files"]]
    if not (isinstance(folder, str) and os.path.isabs(folder) and "\0" not in folder and host == socket.gethostname()
            and any(is_blob_entry(f) for f in files)):
        return None
    return os.path.normpath(folder)


def with_recorded_folder(vault: BucketVault, manifest: dict) -> BucketVault:
    """``vault`` itself when it has a blob folder (``--backup-dir`` given) or the manifest records
    none for this host; else a vault whose blob folder is the recorded one, once it exists and is
    ours. ``BucketTxnError`` (``Failure.STATE_NOT_OURS``) naming the folder and why when it is not:
    nothing is read from it or written to it."""
    if vault.blobs is not None:
        return vault
    folder = recorded_folder(manifest)
    if folder is None or not os.path.lexists(folder):
        return vault  # restore refuses as before: "give that folder with --backup-dir"
    try:
        check_private_dir(folder)
    except NotPrivate as e:
        raise BucketTxnError(Failure.STATE_NOT_OURS, f"{folder}: the blob folder the manifest of "
                             f"{manifest.get('op_id')} records {e.why}; not used, nothing read from it or "
                             "written to it (give the folder holding the backups with --backup-dir)") from None
    return dataclasses.replace(vault, blobs=BlobVault(folder, vault.logdir))


__all__ = ["recorded_folder", "with_recorded_folder"]
