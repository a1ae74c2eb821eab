"""Who owns a bucket logdir's claims in a local folder of blobs (``--backup-dir FOLDER``), review
R11 G2: the one rule of the owner names, and the logdir's id object they are made from.

A folder of blobs (``storage.blobstore``) counts claims by owner: a blob goes when no owner
claims it any more, and a purge drops only its own owner's claims. Until 3f68b74 the owner was a
hash of the logdir's URL alone (``legacy_owner``): a logdir moved to another prefix (``aws s3 mv
--recursive``) could not restore (its claims were another URL's), a new logdir at the old URL
owned the moved one's claims (its purge dropped them: the moved one's only copies went), and the
same URL on two endpoints or storage accounts (MinIO and AWS, dev and prod) was one owner.

Now the owner is ``bucket:<id>:<place>``:

* ``id``: a random id in ``<logdir>/.tb-footprint/identity.json``, created once (create-only)
  at the first blob added; it moves with the logdir's state, so a new logdir at an old URL has
  another one;
* ``place``: a hash of where the logdir stands (protocol, endpoint or storage account, bucket
  and prefix): a moved logdir, or a copy of one (same id), is another owner from then on.

Each blob entry of a journal or manifest records the owner it was claimed under
(``blob_owner``; none in 3f68b74's: the legacy owner of the logdir's URL). A read that copies
nothing into the bucket (status, a check) takes an owner of this logdir's id or place as ours
(``is_ours``); a restore's put-back only one of this place, or of the place its manifest was
found moved from with this id (``entry_owner``, review R11 G10: the id object is a bucket object
anyone who may write the prefix can replace), or of this id at this very prefix reached through
another spelling of the endpoint, as the folder (local, ours) recorded that place in clear when it
claimed there (``note_place``, ``places/<place>.json``; review R13 F6); a purge drops only the claims of the
owners that stand here (``forgettable``: the current owner and, for 3f68b74's entries, the
legacy one), never an earlier location's: a moved logdir's old claims stay (leaked, named by
``status``), and no new logdir at the old URL can drop them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from typing import Dict, List, Optional, Set, Tuple

from tb_footprint_plugin.codes import Failure, StoreError
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME, is_sha256
from tb_footprint_plugin.storage.remote import protocol_of
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore

#: the logdir's id object, relative to the logdir
IDENTITY = f"{STATE_DIR_NAME}/identity.json"
#: a current owner name: ``bucket:<id>:<place>``
_OWNER = re.compile(r"^bucket:([0-9a-f]{32}):([0-9a-f]{24})$")
_ID = re.compile(r"^[0-9a-f]{32}$")


class IdentityRefused(Exception):
    """The logdir's id object is there but is not one of ours (untrusted input): no blob is added
    under a made-up owner; ``code`` a ``codes.py`` code, the message names the object."""

    def __init__(self, code, message: str):
        super().__init__(message)
        self.code = code


def legacy_owner(store: ObjectStore) -> str:
    """The owner 3f68b74 and before claimed a logdir's blobs under: its URL's hash, nothing else."""
    return "bucket:" + hashlib.sha256(f"{store.protocol}://{store.root}".encode("utf-8", "surrogateescape")).hexdigest()[:32]


def endpoint_of(store: ObjectStore) -> str:
    """Which service the store's client talks to, as its settings name it: an S3 endpoint URL
    (none: AWS), an Azure storage account (or a connection string's account and endpoint), a GCS
    endpoint (an emulator's); '' when none is set. Read from the client's settings (no request);
    one a client reads elsewhere (an endpoint in ``~/.aws/config``) is not seen: then two services
    are told apart by their URL alone, as before."""
    fs = getattr(getattr(store, "rfs", None), "fs", None)
    parts = []
    for attr in ("endpoint_url", "_location", "account_name", "account_host"):  # s3fs, gcsfs, adlfs
        try:
            v = getattr(fs, attr, None)
        except Exception:  # noqa: BLE001 - a client's property that cannot answer names no endpoint
            v = None
        if isinstance(v, str) and v:
            parts.append(v.strip().rstrip("/").lower())
    if not parts and isinstance(getattr(fs, "client_kwargs", None), dict):
        v = fs.client_kwargs.get("endpoint_url")
        if isinstance(v, str) and v:
            parts.append(v.strip().rstrip("/").lower())
    conn = getattr(fs, "connection_string", None)
    if isinstance(conn, str):  # Azurite's or a named account's: its account and blob endpoint, never its key
        for item in conn.split(";"):
            k, _, v = item.partition("=")
            if k.strip().lower() in ("accountname", "blobendpoint"):
                parts.append(v.strip().rstrip("/").lower())
    return "|".join(dict.fromkeys(parts))


def place_of(store: ObjectStore) -> str:
    """Where the logdir stands (protocol, endpoint or account, bucket/prefix), hashed."""
    return place_at(store, store.root)


def place_at(store: ObjectStore, root: str) -> str:
    """``place_of`` the prefix ``root`` (a store path) of ``store``'s own service: where a logdir
    of this store stood before it was moved here."""
    return _place_hash(store.protocol, endpoint_of(store), root)


def _place_hash(protocol: str, endpoint: str, root: str) -> str:
    return hashlib.sha256(f"{protocol}\0{endpoint}\0{root}".encode("utf-8", "surrogateescape")).hexdigest()[:24]


#: the folder, in a local folder of blobs, of what each place is in clear (``note_place``)
PLACES = "places"


def note_place(bv) -> None:
    """What this logdir's place is, in clear (protocol, endpoint as its client spells it, root),
    recorded once in its local folder of blobs (``places/<place>.json``, create-only): the folder
    is ours and local, unlike the bucket, so a restore can tell a claim made at this very prefix
    through another spelling of the endpoint (review R13 F6: localhost vs 127.0.0.1, a new DNS
    name, a connection string vs an account) from another logdir's. One that cannot be written is
    left: the copying rule then refuses that place as it did."""
    store = bv.logdir
    doc = {"protocol": store.protocol, "endpoint": endpoint_of(store), "root": store.root}
    try:
        places = PosixStore(bv.folder)
        places.private_folders()  # places/ is the tool's state: 0700, as data/ and index/ (review R24's note)
        places.put(f"{PLACES}/{bv.place}.json", json.dumps(doc).encode(), if_absent=True)
    except (StoreFailure, OSError, ValueError):
        pass  # there already, or not writable: nothing more is honoured than before


def place_record(bv, place: str) -> Optional[dict]:
    """What ``place`` is in clear, as this folder recorded it (``note_place``), when the record
    reads and hashes to ``place`` (the folder is ours, yet a record never stands for another place
    than its own name); None otherwise."""
    if not re.fullmatch(r"[0-9a-f]{24}", place or ""):
        return None
    try:
        doc = json.loads(PosixStore(bv.folder).read_all(f"{PLACES}/{place}.json", 4096))
    except (StoreFailure, OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and all(isinstance(doc.get(k), str) for k in ("protocol", "endpoint", "root"))):
        return None
    return doc if _place_hash(doc["protocol"], doc["endpoint"], doc["root"]) == place else None


def claimed_where(bv, f: dict) -> Optional[str]:
    """Where blob entry ``f``'s owner claimed it, in clear, as the folder recorded its place: words
    for a restore's refusal (``bucket_moved.not_ours_refusal``); None when not recorded."""
    parts = split_owner(f.get(BLOB_OWNER) if isinstance(f, dict) else None)
    doc = place_record(bv, parts[1]) if parts is not None else None
    if doc is None:
        return None
    here = bv.logdir
    return (f"claimed at {doc['protocol']}://{doc['root'][:300]} through endpoint {doc['endpoint'][:300] or '(default)'}; "
            f"this logdir is {here.protocol}://{here.root[:300]} through {endpoint_of(here)[:300] or '(default)'}")


def owner_name(logdir_id: str, place: str) -> str:
    return f"bucket:{logdir_id}:{place}"


def split_owner(owner) -> Optional[tuple]:
    """(id, place) of a current owner name, None for anything else (a legacy one included)."""
    m = _OWNER.match(owner) if isinstance(owner, str) else None
    return (m.group(1), m.group(2)) if m else None


def read_id(store: ObjectStore) -> Optional[str]:
    """The logdir's id (``IDENTITY``); None when there is none; ``IdentityRefused`` when the object
    is there and is not an id of ours. One read."""
    doc, _ = BucketState.of(store).read(store.path(IDENTITY))
    if doc is None:
        return None
    got = doc.get("id") if isinstance(doc, dict) else None
    if not (isinstance(got, str) and _ID.match(got)):
        raise IdentityRefused(Failure.REFUSED, f"{store.url_of(IDENTITY)}: not a logdir id of ours (unreadable or "
                              "of another format); no backup is added to a folder of blobs under it: move it "
                              "aside if it is not this tool's")
    return got


def ensure_id(store: ObjectStore) -> str:
    """The logdir's id, created (create-only: two workers agree on the first one written) when it
    has none. ``IdentityRefused`` for one that is not ours; a failed write is the store's
    ``StoreFailure``."""
    got = read_id(store)
    if got is not None:
        return got
    new = secrets.token_hex(16)
    try:
        BucketState.of(store).create(store.path(IDENTITY), {"id": new, "made_at": store.url})
    except StoreFailure as e:
        if e.code != StoreError.ALREADY_EXISTS:
            raise
        got = read_id(store)
        if got is None:
            raise
        return got
    return new


#: a blob entry's field naming the owner its blob was claimed under (``engine.bucket_identity``);
#: none in 3f68b74's entries (their owner is the legacy one of the logdir's URL)
BLOB_OWNER = "blob_owner"


def entry_owner(bv, f: dict, *, copying: bool = False, moved_from: Optional[str] = None) -> Optional[str]:
    """The one rule of which owner a journal's or manifest's blob entry (untrusted) belongs to:
    the owner it records when that is this logdir's, the legacy owner of the logdir's URL when it
    records none (3f68b74's entries, as they were read), None for an owner of someone else (never
    read for this logdir).

    "This logdir's" depends on what the read does (review R11 G10). The id object is a bucket
    object anyone who may write the prefix can replace, and a place is a hash anyone can compute:
    for a read that never copies a byte into the bucket (status, a check, purge bookkeeping) an
    owner of this id anywhere or of this place is ours (``BlobVault.is_ours``). A read that
    COPIES into the bucket (``copying``: a restore's put-back, a bring-back) honours an owner of
    this place, and one of another place only when the owner has this logdir's id and that place
    is the prefix the manifest naming the entry was found moved here from (``moved_from``: the URL
    ``bucket_moved.map_moved`` found it moved from, never a manifest's word), or the folder's own
    record of that place (``note_place``) says it is this prefix (or that one) on this protocol,
    reached through another spelling of the endpoint (review R13 F6): a planted id and manifest
    never make another logdir's blobs flow in, another root is never honoured."""
    got = f.get(BLOB_OWNER) if isinstance(f, dict) else None
    if got is None:
        return bv.legacy_owner
    if not (isinstance(got, str) and bv.is_ours(got)):
        return None
    if not copying or got == bv.legacy_owner:
        return got
    parts = split_owner(got)
    if parts is None:
        return None
    if parts[1] == bv.place:
        return got
    old = moved_root(bv.logdir, moved_from)
    if bv.logdir_id is None or parts[0] != bv.logdir_id:
        return None
    if old is not None and parts[1] == place_at(bv.logdir, old):
        return got
    # this id at this prefix (or the one it was found moved from) through another spelling of the
    # endpoint, as the folder recorded that place (R13 F6); another root is never honoured (G10)
    was = place_record(bv, parts[1])
    roots = {bv.logdir.root} | ({old} if old is not None else set())
    return got if was is not None and was["protocol"] == bv.logdir.protocol and was["root"] in roots else None


def root_of(store: ObjectStore, url) -> Optional[str]:
    """The store path ``url`` (a manifest's ``logdir``, untrusted) names on ``store``'s protocol,
    normalised as a store's root is (scheme aliases, slashes); None for another protocol or no URL.
    The one rule of ``same_logdir`` and ``moved_root``."""
    if not isinstance(url, str) or "://" not in url:
        return None
    try:
        if protocol_of(url) != store.protocol:
            return None
    except ValueError:
        return None
    return url.split("://", 1)[1].strip("/")


def moved_root(store: ObjectStore, url: Optional[str]) -> Optional[str]:
    """The store path of ``url`` when it is another prefix of ``store``'s protocol, else None."""
    root = root_of(store, url)
    return root if root and root != store.root else None


def same_logdir(store: ObjectStore, url) -> bool:
    """Whether ``url`` (a manifest's ``logdir``, untrusted) names ``store``'s own prefix."""
    return root_of(store, url) == store.root


def entry_claimed(bv, f: dict, *, copying: bool = False, moved_from: Optional[str] = None) -> bool:
    """Whether ``f``'s blob is claimed in the folder by the owner its entry belongs to
    (``entry_owner``, with its ``copying`` and ``moved_from``)."""
    owner = entry_owner(bv, f, copying=copying, moved_from=moved_from)
    sha = f.get("sha256")
    return owner is not None and is_sha256(sha) and os.path.isdir(bv.folder) and owner in bv.store.owners(sha)


def let_go_owner(f: dict) -> Optional[str]:
    """The owner a let-go entry's claim is dropped for, as the entry records it (None: 3f68b74's, the
    legacy owner); a purge drops it only when it is one of its ``BlobVault.forgettable``."""
    got = f.get(BLOB_OWNER)
    return got if isinstance(got, str) else None


def dropped_claims(bv, needed: Set[str], let_go: Set[Tuple[Optional[str], str]]) -> Dict[str, List[str]]:
    """owner -> the digests whose claim by that owner a purge drops: let go by an entry naming that
    owner (none named: the legacy one), named by no manifest (not purged) or journal at all, and
    claimed now by that owner, which must be one of ``BlobVault.forgettable`` (an earlier
    location's claims stay). The one rule of the forget (``collect``) and its preview
    (``bucket_purge.folder_frees``); the folder's index as last read."""
    out: Dict[str, List[str]] = {}
    for owner in bv.forgettable():
        shas = sorted({sha for o, sha in let_go if (o if o is not None else bv.legacy_owner) == owner
                       and sha not in needed and owner in bv.store.owners(sha)})
        if shas:
            out[owner] = shas
    return out


def claimed_here(bv) -> Tuple[list, list]:
    """(refs claimed by an owner that stands here (``forgettable``), refs claimed only by an
    owner of this logdir's id or place that does not: an earlier location's, or an id lost),
    from the folder's index as last read."""
    here = set(bv.forgettable())
    mine, earlier = [], []
    for r in bv.store.refs():
        owners = bv.store.owners(r.sha)
        if owners & here:
            mine.append(r)
        elif any(bv.is_ours(o) for o in owners):
            earlier.append(r)
    return mine, earlier


__all__ = ["BLOB_OWNER", "IDENTITY", "PLACES", "claimed_here", "claimed_where", "note_place", "place_record", "dropped_claims", "entry_claimed", "entry_owner", "let_go_owner", "IdentityRefused", "endpoint_of", "ensure_id", "legacy_owner", "moved_root", "owner_name", "place_at",
           "place_of", "same_logdir",
           "read_id", "root_of", "split_owner"]
