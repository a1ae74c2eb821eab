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

Verbs that look in one folder for many operations (status, verify, purge, recover) take it by one
rule, ``choose_folder``: of the folders the manifests record for this host, those refused by
``with_recorded_folder`` are set aside (each named with the manifests recording it: only those
operations are left alone, review R25 L3), and the one left is taken; when several are left, none
is (which one holds a blob only ``--backup-dir`` says) and that is said, naming them and what to
pass (r37 W's note: status and verify looked in none and said nothing). A restore takes each
operation's own recorded folder (``with_recorded_folder``): several folders do not stop it.
"""
from __future__ import annotations

import dataclasses
import os
import socket
from typing import Dict, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry
from tb_footprint_plugin.engine.bucket_identity import PLACES, place_record
from tb_footprint_plugin.engine.bucket_manifests import manifests, own_manifests, usable_manifest
from tb_footprint_plugin.engine.bucket_state import (STORE_FAILURES, BlobVault, BucketState, BucketTxnError,
                                                     BucketVault, vault_url)
from tb_footprint_plugin.storage.paths import is_op_id
from tb_footprint_plugin.storage.private import NotPrivate, check_private_dir
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore
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


@dataclasses.dataclass
class FolderChoice:
    """``choose_folder``'s answer: the vault to look in (``vault``: with the one folder taken, or
    as given), the recorded folders refused (folder -> (code, why, the manifests recording it)) and,
    when more than one was usable, those (folder -> the manifests recording it; none taken)."""

    vault: BucketVault
    refused: Dict[str, tuple] = dataclasses.field(default_factory=dict)
    several: Dict[str, List[dict]] = dataclasses.field(default_factory=dict)
    #: every usable folder's vault (one: ``vault`` is it), for a verb that may look in each
    usable: Dict[str, BucketVault] = dataclasses.field(default_factory=dict)

    def left_alone(self) -> Set[str]:
        """The op ids whose recorded folder is not looked in: refused, or one of several."""
        ms = [m for _c, _w, ms in self.refused.values() for m in ms] + [m for ms in self.several.values() for m in ms]
        return {m.get("op_id") for m in ms if isinstance(m.get("op_id"), str)}

    def why_left(self, op_id: str) -> Optional[tuple]:
        """``(code, words)`` of why operation ``op_id``'s recorded folder is not looked in, or None."""
        for code, why, ms in self.refused.values():
            if any(m.get("op_id") == op_id for m in ms):
                return code, why
        if any(m.get("op_id") == op_id for ms in self.several.values() for m in ms):
            return Failure.RESTORE_BLOCKED, several_words(self.several)
        return None

    def rows(self) -> List[dict]:
        """``status``'s rows (``{code, op_id, run, bytes, path, detail}``): one per refused folder,
        and one naming the several folders when there are."""
        out = [{"code": code, "op_id": None, "run": None, "bytes": 0, "path": folder, "detail": why}
               for folder, (code, why, _ms) in sorted(self.refused.items())]
        if self.several:
            out.append({"code": Failure.RESTORE_BLOCKED, "op_id": None, "run": None, "bytes": 0,
                        "path": sorted(self.several)[0], "detail": several_words(self.several)})
        return out


def several_words(several: Dict[str, List[dict]]) -> str:
    """What is said when the manifests record several usable folders: each named with how many
    operations record it, and what to pass."""
    names = sorted(several)
    listed = "; ".join(f"{f} ({len(several[f])} operation(s), e.g. {several[f][0].get('op_id')})" for f in names[:5])
    more = f"; and {len(names) - 5} more" if len(names) > 5 else ""
    return (f"this logdir's manifests record {len(names)} blob folders on this host: {listed}{more}. Status, "
            "verify, purge and recover look in one folder at a time and none was chosen (which holds a backup, "
            f"only --backup-dir says): give each with --backup-dir, e.g. --backup-dir {names[0]}, once per folder; "
            "a restore takes each operation's own folder by itself")


def choose_folder(vault: BucketVault, manifests: List[dict]) -> FolderChoice:
    """The one rule of the verbs that look in one blob folder for many operations (status, verify,
    purge, recover) when given no ``--backup-dir``: of the folders ``manifests`` (this logdir's own,
    untrusted) record for this host (``recorded_folder``; a purged one's aside), each is checked by
    ``with_recorded_folder`` (on its host, ours, its ``places/`` listing this logdir; nothing but
    ``places/`` read there); a refused one, or one not there (moved: ``RESTORE_BLOCKED``, "give
    that folder with --backup-dir"), is set aside with its words and the manifests naming it; the
    one folder left is taken, and with several left none is. ``vault`` unchanged when it has a
    folder (``--backup-dir``) or none is recorded."""
    if vault.blobs is not None:
        return FolderChoice(vault)
    by_folder: Dict[str, List[dict]] = {}
    for m in manifests:
        # a purged operation needs no folder (an older folder whose operations are all purged does
        # not make "several")
        folder = recorded_folder(m) if not m.get("backup_purged") else None
        if folder is not None:
            by_folder.setdefault(folder, []).append(m)
    out = FolderChoice(vault)
    usable: Dict[str, BucketVault] = {}
    for folder, ms in sorted(by_folder.items()):
        if not os.path.lexists(folder):  # moved or removed: its operations' blobs are not here to look at
            out.refused[folder] = (Failure.RESTORE_BLOCKED, f"{folder}: the blob folder the manifest of "
                                   f"{ms[0].get('op_id')} records is not there (moved or removed?); give that "
                                   "folder with --backup-dir", ms)
            continue
        try:
            usable[folder] = with_recorded_folder(vault, ms[0])
        except BucketTxnError as e:
            out.refused[folder] = (e.code, str(e), ms)
        except OSError as e:  # cannot even be looked at (a folder above it not ours to search)
            out.refused[folder] = (Failure.STATE_NOT_OURS, f"{folder}: the blob folder the manifest of "
                                   f"{ms[0].get('op_id')} records cannot be looked at ({e.strerror or e}); not "
                                   "used (give the folder holding the backups with --backup-dir)", ms)
    out.usable = usable
    if len(usable) == 1:
        out.vault = next(iter(usable.values()))
    elif usable:
        out.several = {f: by_folder[f] for f in usable}
    return out


def journal_vault(ostore: ObjectStore, vault: BucketVault, journal) -> Tuple[BucketVault, Optional[tuple]]:
    """The vault a reduce's or retirement's journal (an ``ObjectJournal``) is settled with (r37 W: a bucket ``recover``
    looked only in ``--backup-dir``'s folder, so a reduction into a local blob folder killed past
    its commit record was refused "give that folder" though its manifest names it, as a restore,
    purge, status and verify take it): ``vault`` when it has a folder or no entry of the journal
    keeps its original in one; else the blob folder the manifests of the journal's operations record
    for this host, by the one rule (``bucket_blob_folder.choose_folder``: ours, its ``places/``
    listing this logdir). One read per operation of the journal (their manifests; none when it
    keeps no blob); when none records a folder (killed before its manifests were written), the
    logdir's manifests are read for it (a listing and a read each, only then). ``(vault,
    refusal)``: ``refusal`` ``(code, words)`` when a recorded folder was not taken (refused, or
    several), else None."""
    if vault.blobs is not None or not any(is_blob_entry(f) for en in journal.entries() if isinstance(en, dict)
                                          for f in en.get("files") or [] if isinstance(f, dict)):
        return vault, None
    st = BucketState.of(ostore)
    found: List[dict] = []
    for op in sorted({en.get("op") for en in journal.entries() if isinstance(en, dict)
                      and is_op_id(en.get("op"))}):
        try:
            doc, version = st.read(vault.manifest(op))
        except (BucketTxnError, *STORE_FAILURES, ValueError):
            continue  # the steps that need the folder say so (``blobs_of``)
        m = usable_manifest(ostore, vault.manifest(op), doc, version) if isinstance(doc, dict) else None
        if m is not None and m["op_id"] == op:
            found.append(m)
    if not any(m.get("blob_folder") for m in found):
        # killed before its manifests (a reduce at its add: review R25 L2): the folder the logdir's
        # other manifests record, by the same rule (a listing and a read each; only in this case)
        try:
            found = own_manifests(ostore, vault, manifests(ostore, vault), [])
        except (BucketTxnError, *STORE_FAILURES, ValueError):
            return vault, None
    got = choose_folder(vault, found)
    rows = got.rows()
    return got.vault, ((rows[0]["code"], rows[0]["detail"]) if rows and got.vault.blobs is None else None)


def recorded_vault(vault: BucketVault, manifests: List[dict]):
    """``choose_folder`` as ``(vault, status rows)``: the vault ``status`` and ``verify`` look in
    (review R21 PD20, their halves) and the rows naming what was not looked in."""
    got = choose_folder(vault, manifests)
    return got.vault, got.rows()


__all__ = ["PLACES_LIMIT", "FolderChoice", "choose_folder", "journal_vault", "lists_logdir", "recorded_folder",
           "recorded_vault", "several_words", "with_recorded_folder"]
