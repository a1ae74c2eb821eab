"""Offload: a committed operation's backups moved from the local vault into the remote vault.

A local logdir reduced with ``--backup-dir s3://…`` (``gs://``, ``az://``) runs the same local
transaction as any other (backups hard-linked into ``.tb-footprint``, verify, swap, commit,
compaction); then this step, shaped like compaction, frees the local disk at once:

1. a note ``offload/<op_id>.json`` naming the operation's blobs (the next start finishes a
   killed offload from it) — failpoint ``offload.note``;
2. ``BlobStore.add`` of those blobs: the store reads each one back and hashes it before it
   returns its ref, and the index naming it is durable — ``offload.uploaded``;
3. for each ref a record ``blobs/ab/<sha>.remote`` in the local vault, fsynced —
   ``offload.recorded``;
4. only then the local plain or ``.zst`` blob is unlinked (``Vault.drop_local``) —
   ``offload.unlinked``;
5. the note is dropped.

A kill anywhere leaves every blob whole in the local vault, or in the remote vault with its
record, or both (readers take the local form first). A blob a process may still write into
(a late writer; only the kernel's no-writer answer lets it go, as for compaction), one a
transaction under way reads as its original, or one shared with a live file stays local and
its note stays for the next start. Purge forgets the remote blobs of what it purges after the
manifests say so (``forget_remote``).

Each run's offload is its own ``add``, so its small backups make a pack of their own; a batch's
end (``merge_remote_packs``) and a purge repack the packs under ``blobstore.MIN_PACK`` together
(restic's prune of small packs), so a batch of small runs leaves one small pack, not one a run.

The remote vault of a logdir is a prefix of its own under the URL the user gave
(``<url>/tbfp-<16 hex>``, remembered in the vault's ``remote.json``): a purge forgets blobs by
digest, and another logdir offloading to the same URL must never lose a blob it still needs.

Why one module: the offload's steps, the next start's finishing of a killed one and the remote
vault's deletes (a purge's forget, a batch end's merge, each after ``listed_again``) hold one lock
(``offload/.lock``) and read one record format; apart, a delete could be written that an offload
under way, or a record no index lists, does not stop.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
import stat
import threading
from typing import Callable, Dict, Iterable, List, Optional

from tb_footprint_plugin.codes import BlobError
from tb_footprint_plugin.engine import faults, remote_vault
from tb_footprint_plugin.engine.vault import Vault, VaultError, read_notes
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobSource
from tb_footprint_plugin.storage.files import atomic_write_json
from tb_footprint_plugin.storage.lock import Locked, held, release, try_exclusive
from tb_footprint_plugin.storage.openfiles import find_writers, no_writer_anywhere
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.private import ensure_private_dir
from tb_footprint_plugin.storage.regular import open_regular
from tb_footprint_plugin.storage.stores import open_store
from tb_footprint_plugin.storage.remote import is_bucket_url, split_scheme

#: what ``offload_blobs`` did with a blob
OFFLOADED = "offloaded"          # verified in the remote vault, recorded, local forms unlinked
ALREADY_REMOTE = "already_remote"  # no local form left, a record stands for it
KEPT_OPEN = "kept_open"          # a writer may hold it (or the kernel cannot rule one out): local for now
KEPT_SHARED = "kept_shared"      # a live file shares its inode
KEPT_IN_USE = "kept_in_use"      # a transaction under way reads it as its original
KEPT_DAMAGED = "kept_damaged"    # it does not hash to its name: kept local, for health to name
KEPT_REMOTE_BAD = "kept_remote_bad"  # the store already held it, and that copy does not verify: kept local
FAILED = "failed"                # the store failed: local for now, tried again at the next start
MISSING = "missing"

#: outcomes that keep the note for the next start
RETRY = frozenset({KEPT_OPEN, KEPT_IN_USE, FAILED})

NAMESPACE_PREFIX = "tbfp-"
#: a batch's end and a purge repack the remote vault's packs under ``blobstore.MIN_PACK`` together
#: once there are this many: each object costs requests, and S3 moves none under 128 KiB to a colder class
SMALL_PACKS = 2

_ADDING = threading.Lock()


class OffloadError(ValueError):
    """A remote vault URL that cannot be used; the message names it."""


def configure(vault: Vault, url: str) -> str:
    """Remember ``url`` (``s3://``, ``gs://``, ``az://``) as the remote vault of ``vault`` and
    return the store URL its blobs go to: a prefix of this vault's own under ``url``, kept when
    the same URL is given again."""
    if not is_bucket_url(url):
        raise OffloadError(f"{url!r} is not an s3://, gs:// or az:// URL naming a bucket")
    base = url.rstrip("/")

    def mine() -> List[str]:
        return [u for u in remote_vault.known_urls(vault.root)
                if u.rsplit("/", 1)[0] == base and u.rsplit("/", 1)[1].startswith(NAMESPACE_PREFIX)]

    now = mine()
    if now and now[0] == remote_vault.configured_url(vault.root):
        return now[0]
    vault.ensure()
    # read again under the lock: two reduces starting at once (two shards) agree on one prefix
    with _forget_lock(vault, exclusive=True):
        now = mine()
        if now and now[0] == remote_vault.configured_url(vault.root):
            return now[0]
        # the prefix this vault had under that URL before, if any: its blobs are this vault's too
        store_url = now[0] if now else f"{base}/{NAMESPACE_PREFIX}{secrets.token_hex(8)}"
        remote_vault.set_configured_url(vault.root, store_url)
    return store_url


def remote_url(vault: Vault) -> Optional[str]:
    """The store URL ``vault`` offloads to, None when it has no remote vault."""
    return remote_vault.configured_url(vault.root)


def _note_path(vault: Vault, op_id: str) -> str:
    if not is_op_id(op_id):
        raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a file name")
    return os.path.join(vault.root, "offload", f"{op_id}.json")


def note_offload(vault: Vault, op_id: str, shas: Iterable[str]) -> None:
    """Record, before the first step, which blobs an offload works on (``pending_offloads``)."""
    ensure_private_dir(os.path.join(vault.root, "offload"), vault.root, tighten_root=vault.own_folder)
    atomic_write_json(_note_path(vault, op_id), {"op_id": op_id, "blobs": [s for s in shas if is_sha256(s)]})


def pending_offloads(vault: Vault) -> Dict[str, List[str]]:
    """op id → digests of offloads noted and not finished (``vault.read_notes``)."""
    return read_notes(os.path.join(vault.root, "offload"))


def done_offload(vault: Vault, op_id: str) -> None:
    """Drop an offload's note once every blob it names is settled."""
    with contextlib.suppress(FileNotFoundError):
        fsops.unlink(_note_path(vault, op_id))


def _sizes(vault: Vault, op_id: str) -> Dict[str, int]:
    m = vault.read_manifest(op_id)
    return {f["sha256"]: int(f["size"]) for f in m.get("files", [])
            if isinstance(f, dict) and is_sha256(f.get("sha256")) and isinstance(f.get("size"), int)}


def offload_operation(vault: Vault, op_id: str, in_use: Iterable[str] = ()) -> Dict[str, str]:
    """After ``op_id`` committed (and its compaction): move its backups into the remote vault
    (the module's steps); digest → what was done. Nothing when the vault has no remote vault.
    ``in_use``: digests a transaction under way reads as originals (they stay local for now).
    Never raises: an offload that fails leaves the backups local (safe), its note for the next
    start."""
    url = remote_url(vault)
    if url is None:
        return {}
    try:
        sizes = _sizes(vault, op_id)
        note_offload(vault, op_id, sizes)
        faults.hit("offload.note")
        return offload_blobs(vault, op_id, url, sizes, in_use)
    except Exception:  # the reduction stands whatever happens here; the note is finished later
        return {}


def offload_blobs(vault: Vault, op_id: str, url: str, sizes: Dict[str, int],
                  in_use: Iterable[str] = ()) -> Dict[str, str]:
    """Steps 2–5 for the blobs ``sizes`` names (digest → original size) of noted ``op_id``;
    idempotent, so a killed offload is finished by calling it again. Store failures come back
    as ``FAILED`` (the note stays)."""
    busy = set(in_use)
    out: Dict[str, str] = {}
    todo: List[str] = []
    plain: Dict[str, str] = {}
    packed: List[str] = []  # in the vault's own packs: offloaded too, then forgotten there
    for sha in sizes:
        form = vault.local_form(sha)
        if form is None and remote_vault.packed_ref(vault.root, sha) is not None:
            # packed before the vault had a remote vault: read from its pack (hashed as read). A
            # record beside it (a kill between the record and the pack's forget, or a stale or
            # planted one) is not taken at its word: the pack copy is the only one known to be
            # good, so it goes through ``_add`` (the store's copy read back, or sent again) and is
            # forgotten only for a verified ref
            if sha in busy:
                out[sha] = KEPT_IN_USE
            else:
                todo.append(sha)
                packed.append(sha)
        elif form is None:
            out[sha] = ALREADY_REMOTE if remote_vault.read_record(vault.root, sha) else MISSING
        elif sha in busy:
            out[sha] = KEPT_IN_USE
        else:
            todo.append(sha)
            if form == "plain":
                plain[sha] = vault.blob_path(sha)
    held = {h.path for h in find_writers(list(plain.values())).holders} if plain else set()
    for sha, p in plain.items():
        try:
            shared = os.lstat(p).st_nlink > 1
        except OSError:
            continue  # compacted or gone meanwhile: the .zst (or nothing) is what is read
        if shared:
            out[sha] = KEPT_SHARED
        elif p in held or no_writer_anywhere(p) is not True:
            # a late writer's next records would land in an inode only the vault names
            out[sha] = KEPT_OPEN
    todo = [s for s in todo if s not in out]
    # shared with other offloads, exclusive of a forget (``forget_remote``): a purge cannot drop a
    # digest from the store between this add finding it there and the local copy's unlink
    with _forget_lock(vault, exclusive=False):
        refs = _add(vault, url, todo, sizes, out)
        faults.hit("offload.uploaded")
        for ref in refs:
            remote_vault.write_record(vault.root, ref.sha, url, ref.size, ref.key, vault.blob_mtime_ns(ref.sha))
        faults.hit("offload.recorded")
        for ref in refs:
            try:
                vault.drop_local(ref.sha)
                # a plain blob left: a live file shares it, or it holds more than its name (late records)
                out[ref.sha] = OFFLOADED if vault.local_form(ref.sha) is None else KEPT_DAMAGED
            except OSError:
                out[ref.sha] = FAILED
        faults.hit("offload.unlinked")
    done = {r.sha for r in refs}  # a pack copy goes only for a ref this add verified in the store
    if any(s in done for s in packed):
        # the pack copies go once the records are durable: a forget of the vault's packs, which
        # no add may run beside (the lock alone, after the shared one above is let go)
        try:
            vault.forget_packed_copies([s for s in packed if s in done])
        except OSError:
            for s in packed:
                if out.get(s) == OFFLOADED:
                    out[s] = FAILED  # the pack copy stays (read second to the record): tried again
    if not any(v in RETRY for v in out.values()):
        done_offload(vault, op_id)
    return out


def _add(vault: Vault, url: str, shas: List[str], sizes: Dict[str, int], out: Dict[str, str]) -> list:
    """``BlobStore.add`` of ``shas`` read from the local vault; a blob the store refuses as not
    matching its digest is kept local (``KEPT_DAMAGED``) and the rest added again; a store
    failure marks them all ``FAILED``. Returns the verified refs."""
    with _ADDING:  # one offload's add at a time per process (a --jobs batch shares the store's index)
        return _add_locked(vault, url, shas, sizes, out)


def _source(vault: Vault, sha: str, size: int) -> BlobSource:
    """``sha`` read from the local vault; a compacted one (a ``.zst`` alone) offers its zstd frame
    too, which the store sends as it is (checked by decoding) instead of decompressing it here
    and compressing it again there."""
    frame, frame_size = None, -1
    if vault.local_form(sha) is None and remote_vault.packed_ref(vault.root, sha) is not None:
        # the pack copy, not whatever a record beside it names (the record is what is checked)
        return BlobSource(sha=sha, size=size, open=functools.partial(remote_vault.open_packed, vault.root, sha))
    if vault.local_form(sha) == "zst":
        with contextlib.suppress(OSError):
            st = os.lstat(vault.zst_path(sha))
            if stat.S_ISREG(st.st_mode):
                frame, frame_size = functools.partial(open_regular, vault.zst_path(sha)), st.st_size
    return BlobSource(sha=sha, size=size, open=functools.partial(vault.open_blob, sha), frame=frame,
                      frame_size=frame_size)


def _add_locked(vault: Vault, url: str, shas: List[str], sizes: Dict[str, int], out: Dict[str, str]) -> list:
    left = list(shas)
    while left:
        sources = [_source(vault, s, sizes[s]) for s in left]
        try:
            # the index read again under the lock no forget of this vault's store can hold now: a
            # copy another process has since forgotten (its bytes may linger in a pack) is never
            # taken for a live one, which the store's next prune would delete
            bs = remote_vault.blobstore(url, fresh=True)
            # a digest the store lists already is not uploaded again: that older copy is read back
            # and hashed before the local one goes (it may have been damaged since it was added)
            known = {s for s in left if bs.has(s)}
            refs = bs.add(sources)  # one verified ref per source
            for r in [r for r in refs if r.sha in known]:
                if bs.check(r.sha) is not None:
                    out[r.sha] = KEPT_REMOTE_BAD
            return [r for r in refs if r.sha not in out]
        except BlobFailure as e:
            if getattr(e, "sha", None) in left:
                out[e.sha] = KEPT_DAMAGED
                left.remove(e.sha)
                continue
            for s in left:
                out[s] = FAILED
            return []
        except OSError:
            for s in left:
                out[s] = FAILED
            return []
    return []


@contextlib.contextmanager
def _forget_lock(vault: Vault, exclusive: bool):
    """``flock`` on ``offload/.lock`` in the local vault: offloads share it, a forget takes it
    alone (the remote prefix is this vault's own, so this vault's lock is the only one needed)."""
    folder = os.path.join(vault.root, "offload")
    ensure_private_dir(folder, vault.root, tighten_root=vault.own_folder)
    with held(os.path.join(folder, ".lock"), shared=not exclusive):
        yield


def merge_remote_packs(vault: Vault) -> dict:
    """A batch's end for a vault that offloads: the remote vault's small packs repacked together
    and its index objects merged by a sweeping ``BlobStore.forget([])`` (new pack verified, then
    its index, then the old ones: a kill leaves every blob readable, the next end finishes).
    Under the forget lock taken without waiting (an offload or purge under way: the next batch's
    end does it). Never raises; the forget's figures, ``{}`` when it did not run."""
    url = remote_url(vault)
    if url is None:
        return {}
    try:
        folder = os.path.join(vault.root, "offload")
        ensure_private_dir(folder, vault.root, tighten_root=vault.own_folder)
        fd = try_exclusive(os.path.join(folder, ".lock"))
    except (Locked, OSError):
        return {}
    try:
        bs = remote_vault.blobstore(url, fresh=True)
        lost = listed_again(vault, url, bs)
        if lost:
            # a blob a record needs is in no listed object: the sweep would take its pack for a
            # leftover (review R24 F2), so nothing is merged or swept until it is found
            return {"kept_unlisted": len(lost)}
        return bs.forget([], consolidate_above=1, sweep=True, small_packs=SMALL_PACKS)
    except Exception:  # noqa: BLE001 - the packs stay as they are, every one still listed and read
        return {}
    finally:
        release(fd)


def listed_again(vault: Vault, url: str, bs) -> List[str]:
    """Before the remote vault at ``url`` (``bs``, its ``BlobStore`` as just read) deletes
    anything: the blobs this vault's records say are there and no index object lists (an index
    object lost, removed or damaged: ``remote_vault.unlisted_records``) are looked for in its
    packs, each slice hashed, and listed anew (``remote_vault.rebuild_remote_index``); returns
    those still listed nowhere, whose packs a sweep must then not delete. The rule a disk's
    packs keep (``vault_packs.pack_index_gaps``): a record is the evidence a pack no index lists
    may be a backup's only copy. Costs a listing of the vault's ``blobs/`` folders when every
    record is listed."""
    if not remote_vault.unlisted_records(vault.root, url, bs):
        return []
    remote_vault.rebuild_remote_index(vault.root, url)
    return sorted(remote_vault.unlisted_records(vault.root, url, remote_vault.blobstore(url, fresh=True)))


def forget_remote(vault: Vault, shas: Iterable[str], keep_now: Optional[Callable[[], set]] = None) -> int:
    """Purge's remote step, after the manifests say the backups are purged: the remote vault
    forgets those blobs (``BlobStore.forget``), then their records go. Blobs with no record are
    not the remote vault's, nor those whose record names a store this vault never offloaded to
    (``remote.json``): they are left as they are. ``keep_now`` says, under the lock that keeps
    offloads out, which digests are needed now (every claiming manifest's, unfinished
    operations'); those are not forgotten. Returns how many were forgotten; a store failure
    raises (the purge's intent stays, and the next start finishes it)."""
    shas = [s for s in shas if remote_vault.has_record(vault.root, s)]
    if not shas:
        return 0  # nothing of it in a remote vault (a vault that never offloaded: no lock, no folder)
    with _forget_lock(vault, exclusive=True):
        # what is needed is read again under the lock: an operation that committed (or began)
        # since the caller looked may have backed up the same bytes and offloaded them
        keep = keep_now() if keep_now is not None else set()
        return _forget_locked(vault, [s for s in shas if s not in keep])


def _forget_locked(vault: Vault, shas: List[str]) -> int:
    ours = set(remote_vault.known_urls(vault.root))
    by_url: Dict[str, List[str]] = {}
    for sha in shas:
        rec = remote_vault.read_record(vault.root, sha)
        # a record is untrusted: only a remote vault this vault offloaded to is ever pruned
        if rec is not None and rec["url"] in ours:
            by_url.setdefault(rec["url"], []).append(sha)
    n = 0
    for url, group in by_url.items():
        try:
            bs = remote_vault.blobstore(url, fresh=True)
            # a backup listed nowhere (an index object lost): found again first; while one is
            # still unfound, no unlisted object is swept, nor a pack listed in part repacked (it may
            # be its only copy, review R24 F2; helper F's note)
            lost = listed_again(vault, url, bs)
            fig = remote_vault.blobstore(url).forget(group, small_packs=SMALL_PACKS, sweep=not lost,
                                                     keep_uncovered=bool(lost))
        except BlobFailure as e:  # an OSError for the callers: named, and finished by the next start
            raise remote_vault.RemoteReadError(e.code, url, f"{url}: the remote vault could not delete {len(group)} "
                                               f"purged backup(s) yet ({e}); the next start does it") from None
        blocked = fig.get("blocked_by_damaged_index")
        if blocked:
            # nothing was forgotten: the records stay, and so does the purge's intent (the next
            # start tries again) — a purge that logged 'purged' here would leave the copies billed
            raise remote_vault.RemoteReadError(
                BlobError.DAMAGED_INDEX, url,
                f"{url}: the remote vault kept {len(group)} purged backup(s): its index object(s) "
                f"{', '.join(blocked[:3])} do not read, and nothing is deleted while one is damaged; "
                "repair or remove them, then the next start finishes the purge")
        for sha in group:
            remote_vault.drop_record(vault.root, sha)
            n += 1
    return n


def forget_released(vault: Vault, manifests: Iterable[dict], keep_now: Callable[[], set]) -> int:
    """Backups a verified restore let go (``backup_released_by_restore``: the originals stand in
    the logdir again, matching their digests, and the manifest no longer claims them) go from the
    remote vault too, as they went from the local one; ``keep_now``: digests still needed (every
    claiming manifest's, unfinished operations'), read by ``forget_remote`` under its lock, and
    only when a released blob still has a record (so a start reads no manifest for it otherwise).
    Only blobs with no local form left and a record. Returns how many were forgotten."""
    shas = {f["sha256"] for m in manifests
            if m.get("backup_released_by_restore") and m.get("vault") == vault.root
            for f in m.get("files", []) if isinstance(f, dict) and is_sha256(f.get("sha256"))
            and vault.local_form(f["sha256"]) is None and remote_vault.has_record(vault.root, f["sha256"])}
    return forget_remote(vault, sorted(shas), keep_now) if shas else 0


def remote_stats(vault: Vault) -> Optional[dict]:
    """``BlobStore.stats()`` of the remote vault plus its ``url``, and ``unlisted``: the digests
    this vault's records say are there that no index object lists (``remote_vault.unlisted_records``:
    an index object lost or removed; a listing of the vault's ``blobs/`` folders, no request more);
    None without one; a store that cannot be reached gives ``{"url", "error"}``."""
    url = remote_url(vault)
    if url is None:
        return None
    try:
        bs = remote_vault.blobstore(url, fresh=True)
        return dict(bs.stats(), url=url, unlisted=sorted(remote_vault.unlisted_records(vault.root, url, bs)))
    except (OSError, BlobFailure) as e:
        return {"url": url, "error": str(e)}


#: a bucket lifecycle's default grace before the vault's data objects change class
LIFECYCLE_DAYS = 30
#: S3 refuses a transition to STANDARD_IA sooner than this many days after creation
_S3_IA_MIN_DAYS = 30
#: days an object stays in the infrequent-access class before it goes to the archive class
ARCHIVE_AFTER_IA_DAYS = 90


def lifecycle_rule(store_url: str, days: int = LIFECYCLE_DAYS) -> dict:
    """The lifecycle rule for a remote vault's ``data/`` objects (never its ``index/``, read at
    every start), for the store ``store_url`` is on: ``{"scheme", "bucket", "prefix", "rule",
    "apply", "note"}``. ``rule`` is the JSON document the store's own tool takes: S3's
    ``aws s3api put-bucket-lifecycle-configuration``, GCS's ``gcloud storage buckets update
    --lifecycle-file``, Azure's ``az storage account management-policy create --policy``.
    Infrequent-access class after ``days``, archive class ``ARCHIVE_AFTER_IA_DAYS`` later."""
    if not is_bucket_url(store_url):
        raise OffloadError(f"{store_url!r} is not an s3://, gs:// or az:// URL naming a bucket")
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise OffloadError(f"--days must be a whole number of days >= 0, not {days!r}")
    scheme, rest = split_scheme(store_url)
    bucket, _, path = rest.strip("/").partition("/")
    prefix = f"{path.strip('/')}/data/" if path.strip("/") else "data/"
    rule_id = ("tb-footprint-vault-" + path.strip("/").replace("/", "-"))[:255].rstrip("-")
    later = days + ARCHIVE_AFTER_IA_DAYS
    if scheme in ("s3", "s3a"):
        transitions = ([{"Days": days, "StorageClass": "STANDARD_IA"}, {"Days": later, "StorageClass": "GLACIER"}]
                       if days >= _S3_IA_MIN_DAYS else [{"Days": days, "StorageClass": "GLACIER"}])
        rule = {"Rules": [{"ID": rule_id, "Status": "Enabled", "Filter": {"Prefix": prefix},
                           "Transitions": transitions}]}
        apply = (f"aws s3api put-bucket-lifecycle-configuration --bucket {bucket} "
                 "--lifecycle-configuration file://lifecycle.json")
        note = ("put-bucket-lifecycle-configuration REPLACES the bucket's whole lifecycle configuration: merge "
                "these Rules with `aws s3api get-bucket-lifecycle-configuration` first. S3 does not transition "
                "objects under 128 KiB by default (small backups are packed for that reason). A GLACIER object "
                "must be restored before a restore can read it: a restore, verify or purge names each one "
                "[archived]; ask the store to restore it (`aws s3api restore-object --bucket BUCKET --key KEY "
                "--restore-request Days=7`: minutes to 12 h), then restore again.")
        scheme = "s3"
    elif scheme in ("gs", "gcs"):
        rule = {"rule": [
            {"action": {"type": "SetStorageClass", "storageClass": "NEARLINE"},
             "condition": {"age": days, "matchesPrefix": [prefix], "matchesStorageClass": ["STANDARD"]}},
            {"action": {"type": "SetStorageClass", "storageClass": "ARCHIVE"},
             "condition": {"age": later, "matchesPrefix": [prefix],
                           "matchesStorageClass": ["STANDARD", "NEARLINE"]}}]}
        apply = f"gcloud storage buckets update gs://{bucket} --lifecycle-file=lifecycle.json"
        note = ("--lifecycle-file REPLACES the bucket's lifecycle rules: merge with `gcloud storage buckets "
                "describe` first. Nearline and Archive objects carry minimum storage durations and retrieval fees.")
        scheme = "gs"
    else:
        rule = {"rules": [{"enabled": True, "name": rule_id[:63].rstrip("-") or "tb-footprint-vault",
                           "type": "Lifecycle",
                           "definition": {"filters": {"blobTypes": ["blockBlob"], "prefixMatch": [f"{bucket}/{prefix}"]},
                                          "actions": {"baseBlob": {
                                              "tierToCool": {"daysAfterModificationGreaterThan": days},
                                              "tierToArchive": {"daysAfterModificationGreaterThan": later}}}}}]}
        apply = ("az storage account management-policy create --account-name ACCOUNT --resource-group GROUP "
                 "--policy @lifecycle.json")
        note = ("A management policy is one per storage account and REPLACES the existing one: merge with "
                "`az storage account management-policy show` first. An archived blob must be rehydrated "
                "to the Hot or Cool tier (up to 15 h) before a restore can read it: a restore, verify or purge "
                "names each one [archived]; rehydrate it (`az storage blob set-tier --container-name C --name KEY "
                "--tier Hot --rehydrate-priority Standard`), then restore again.")
        scheme = "az"
    return {"scheme": scheme, "bucket": bucket, "prefix": prefix, "prefixes": [prefix], "days": days, "rule": rule,
            "apply": apply, "note": note}


def vaults_under(url: str) -> List[str]:
    """The remote vaults (``<url>/tbfp-<16 hex>``) under a ``--backup-dir`` URL several logdirs
    may share, found by their ``index/`` objects (one listing of the prefix); ``[url]`` when
    ``url`` is a vault itself."""
    base = url.rstrip("/")
    if base.rsplit("/", 1)[-1].startswith(NAMESPACE_PREFIX):
        return [base]
    found = set()
    with open_store(base) as store:
        for e in store.list(""):
            head, _, rest = e.key.partition("/")
            if re.fullmatch(NAMESPACE_PREFIX + "[0-9a-f]{16}", head) and rest.startswith("index/"):
                found.add(f"{base}/{head}")
    return sorted(found)


def lifecycle_rules(store_urls: List[str], days: int = LIFECYCLE_DAYS) -> dict:
    """``lifecycle_rule`` of several remote vaults on one bucket, merged into one document."""
    if not store_urls:
        raise OffloadError("no remote vault to write a lifecycle rule for")
    rules = [lifecycle_rule(u, days) for u in store_urls]
    out = dict(rules[0])
    if len({r["bucket"] for r in rules}) != 1 or len({r["scheme"] for r in rules}) != 1:
        raise OffloadError("the remote vaults are on different buckets: one rule document per bucket")
    key = next(iter(out["rule"]))
    out["rule"] = {key: [x for r in rules for x in r["rule"][key]]}
    out["prefixes"] = [r["prefix"] for r in rules]
    return out


__all__ = ["OFFLOADED", "ALREADY_REMOTE", "KEPT_OPEN", "KEPT_SHARED", "KEPT_IN_USE", "KEPT_DAMAGED", "KEPT_REMOTE_BAD",
           "FAILED",
           "MISSING", "OffloadError", "LIFECYCLE_DAYS", "lifecycle_rule", "lifecycle_rules", "vaults_under", "configure", "remote_url", "note_offload", "pending_offloads", "done_offload",
           "offload_operation", "offload_blobs", "merge_remote_packs", "listed_again", "forget_remote", "forget_released",
           "remote_stats"]
