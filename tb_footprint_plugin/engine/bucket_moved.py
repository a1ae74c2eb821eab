"""A bucket logdir moved to another prefix (``aws s3 mv --recursive``, ``rclone move``, ``gsutil
mv``: its ``.tb-footprint`` objects go along), review R11 G3: the manifests in its own state name
their server-side copies by the keys they had at the old prefix. The bucket counterpart of what
``trust.journal_vault`` does for a renamed disk logdir: such a manifest's copies are read where
they stand now, under this logdir's own state, when the old prefix no longer holds that
operation's manifest (a move); when it still does, this is a copy of a logdir that stands there
(or was made again there): nothing is mapped, and every verb names the manifest with where to
restore it instead (``Finding.PREFIX_MOVED``). Mapped keys lie under this logdir's own vault by
construction: nothing outside it is ever named by a manifest's word alone.
"""
from __future__ import annotations

from typing import Dict, Optional, Set

from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.remote import protocol_of
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

#: the manifest's private keys (never written back: ``manifest.bucket_form`` drops ``_`` keys)
MOVED_FROM = "_moved_from"  # the URL of the prefix whose keys were read here (moved)
MADE_AT = "_made_at"  # the URL of the prefix that still holds this operation (a copy): not mapped


def _old_root(ostore: ObjectStore, m: dict) -> Optional[str]:
    """The store path of the prefix the manifest says it was made at, when that is another prefix of
    this logdir's store (untrusted: a string URL of the same protocol), else None."""
    url = m.get("logdir")
    if not isinstance(url, str) or "://" not in url:
        return None
    try:
        if protocol_of(url) != ostore.protocol:
            return None
    except ValueError:
        return None
    root = url.split("://", 1)[1].strip("/")
    return root if root and root != ostore.root else None


def _ops_at(ostore: ObjectStore, root: str, seen: Dict[str, Optional[Set[str]]]) -> Optional[Set[str]]:
    """The operation ids whose manifests the prefix ``root``'s own state holds (one listing per
    prefix and reading, kept in ``seen``); None when it cannot be listed (then nothing is mapped)."""
    if root not in seen:
        try:
            found = BucketState.of(ostore).listing(f"{root}/{STATE_DIR_NAME}/manifests", missing_ok=True)
            seen[root] = {k.rsplit("/", 1)[-1][:-len(".json")] for k in found if k.endswith(".json")}
        except (StoreFailure, ValueError, OSError):
            seen[root] = None
    return seen[root]


def map_moved(ostore: ObjectStore, path: str, m: dict, seen: Optional[Dict[str, Optional[Set[str]]]] = None) -> dict:
    """``m`` (a manifest read from the store path ``path``, in the one schema) with the backup keys
    it names under the state of the prefix it was made at read under this logdir's own state,
    when it is a manifest of this logdir's own state and the old prefix holds no manifest of its
    operation (``MOVED_FROM`` set); ``MADE_AT`` set instead when it does (a copy: left as it is).
    A manifest of another vault, or naming no key under the old prefix's state, is returned as it
    is. ``seen``: the listings of old prefixes already made by this reading."""
    own = f"{ostore.root}/{STATE_DIR_NAME}"
    if not path.startswith(own + "/manifests/"):
        return m
    old = _old_root(ostore, m)
    if old is None:
        return m
    old_blobs, new_blobs = f"{old}/{STATE_DIR_NAME}/blobs/", f"{own}/blobs/"
    files = m.get("files") or []
    if not any(isinstance(f.get("backup"), str) and f["backup"].startswith(old_blobs) for f in files):
        return m
    url = m["logdir"]
    ops = _ops_at(ostore, old, seen if seen is not None else {})
    if ops is None:
        return m  # not told: named as a key outside the vault, as before
    if m.get("op_id") in ops:
        m[MADE_AT] = url
        return m
    m["files"] = [dict(f, backup=new_blobs + f["backup"][len(old_blobs):])
                  if isinstance(f.get("backup"), str) and f["backup"].startswith(old_blobs) else f for f in files]
    m[MOVED_FROM] = url
    return m


def made_at_words(url: str) -> str:
    """What a verb says of a manifest ``MADE_AT`` another prefix that still holds its operation."""
    return (f"made at {url}, which still holds this operation: this logdir is a copy of that one; restore it "
            f"at {url} — never acted on here, left in place")


def outside_words(m: dict, words: str) -> str:
    """What a restore says of manifest ``m`` naming a key outside the vault: ``words``, or, for this
    logdir's copy of one standing at the prefix it was made at (``MADE_AT``), where to restore it."""
    return f"manifest of {m.get('op_id')} {made_at_words(m[MADE_AT])}" if m.get(MADE_AT) else words


__all__ = ["MADE_AT", "MOVED_FROM", "made_at_words", "map_moved", "outside_words"]
