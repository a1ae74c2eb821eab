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

A folder of ours is not yet this logdir's: a bucket writer can edit ``blob_folder`` and ``host`` so
this logdir's purge or restore opens another folder of ours on this host (another logdir's; review
R24's note on 0f2b57c). The folder's own ``places/`` records (``bucket_identity.note_place``,
written by this user when a logdir first claims there; the folder is ours and local, the bucket is
not) must list this logdir's place (its protocol and prefix, through any spelling of its endpoint,
as ``entry_owner`` honours them), else the folder is refused naming it and the manifest, nothing
but ``places/`` read there. A moved logdir's folder records the prefix it stood at: its restore is
given the folder with ``--backup-dir``, as before 0f2b57c. One function (``with_recorded_folder``)
for every verb that takes a recorded folder: a reduction's restore, a retirement's, a purge.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from typing import Optional

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry
from tb_footprint_plugin.engine.bucket_identity import PLACES, place_record
from tb_footprint_plugin.engine.bucket_state import BlobVault, BucketTxnError, BucketVault, vault_url
from tb_footprint_plugin.storage.private import NotPrivate, check_private_dir
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import PosixStore

#: the most ``places/`` records looked at in a recorded folder (one per logdir that claimed there)
PLACES_LIMIT = 10_000


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
    bv = BlobVault(folder, vault.logdir)
    if not lists_logdir(bv):
        raise BucketTxnError(Failure.REFUSED, f"{folder}: the blob folder the manifest of {manifest.get('op_id')} "
                             f"records ({_where(vault, manifest)}) "
                             f"has no {PLACES}/ record of this logdir ({vault.logdir.url}): another logdir's folder, "
                             "or a manifest edited to name it; not used, nothing read from it or written to it "
                             "(give the folder holding the backups with --backup-dir)")
    return dataclasses.replace(vault, blobs=bv)


def _where(vault: BucketVault, manifest: dict) -> str:
    """The manifest's URL, for words (its ``_path``: the store path it was read from)."""
    p = manifest.get("_path")
    return vault_url(vault.logdir, p)[:500] if isinstance(p, str) else "its manifest"


def lists_logdir(bv: BlobVault) -> bool:
    """Whether the folder's ``places/`` records (``bucket_identity.note_place``; each checked to hash
    to its own name by ``place_record``) name ``bv``'s logdir: its place, or its protocol and prefix
    through another spelling of the endpoint. Reads ``places/`` only; a listing that fails says no."""
    if place_record(bv, bv.place) is not None:
        return True
    here = bv.logdir
    try:
        for n, e in enumerate(PosixStore(bv.folder).list(f"{PLACES}/", shallow=True)):
            if n >= PLACES_LIMIT:
                return False
            name = e.key.rsplit("/", 1)[-1]
            doc = place_record(bv, name[:-len(".json")]) if name.endswith(".json") else None
            if doc is not None and doc["protocol"] == here.protocol and doc["root"] == here.root:
                return True
    except (StoreFailure, OSError):
        return False
    return False


__all__ = ["PLACES_LIMIT", "lists_logdir", "recorded_folder", "with_recorded_folder"]
