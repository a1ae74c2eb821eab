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

from typing import Dict, List, Optional, Set

from tb_footprint_plugin.codes import Failure, Finding

from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry
from tb_footprint_plugin.engine.bucket_identity import entry_owner, moved_root, same_logdir
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_state import BucketTxnError, vault_url
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

#: the manifest's private keys (never written back: ``manifest.bucket_form`` drops ``_`` keys)
MOVED_FROM = "_moved_from"  # the URL of the prefix whose keys were read here (moved)
MADE_AT = "_made_at"  # the URL of the prefix that still holds this operation (a copy): not mapped


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
    """``m`` (a manifest read from the store path ``path``, in the one schema, without private
    keys) marked ``MOVED_FROM`` when it is a manifest of this logdir's own state made at another
    prefix of the store that holds no manifest of its operation (a move), the backup keys it
    names under that prefix's state then read under this logdir's own state; ``MADE_AT`` set
    instead when that prefix does hold it (a copy: left as it is). A manifest of another vault,
    or of this prefix, is returned as it is. ``seen``: the listings of old prefixes already made
    by this reading."""
    own = f"{ostore.root}/{STATE_DIR_NAME}"
    if not path.startswith(own + "/manifests/"):
        return m
    old = moved_root(ostore, m.get("logdir"))
    if old is None:
        return m
    url = m["logdir"]
    ops = _ops_at(ostore, old, seen if seen is not None else {})
    if ops is None:
        return m  # not told: another logdir's as far as any verb knows (``whose``)
    if m.get("op_id") in ops:
        m[MADE_AT] = url
        return m
    old_blobs, new_blobs = f"{old}/{STATE_DIR_NAME}/blobs/", f"{own}/blobs/"
    m["files"] = [dict(f, backup=new_blobs + f["backup"][len(old_blobs):])
                  if isinstance(f.get("backup"), str) and f["backup"].startswith(old_blobs) else f
                  for f in m.get("files") or []]
    m[MOVED_FROM] = url
    return m


def marked_afresh(ostore: ObjectStore, path: str, m: dict) -> dict:
    """``m`` (in the one schema, read from the store path ``path``: the vault's own key of its
    operation, never the manifest's word) with ``map_moved``'s marks made here, none taken from
    the caller's dict: a recovery passes a manifest as the store holds it, where a planted
    ``_moved_from`` would otherwise pass for one (review R11 G10)."""
    return map_moved(ostore, path, {k: v for k, v in m.items() if k not in (MOVED_FROM, MADE_AT)})


#: what ``whose`` says of a manifest
OURS, COPY, OTHERS = "ours", "copy", "others"


def whose(ostore: ObjectStore, m: dict) -> str:
    """The one rule of whose operation a manifest read by ``map_moved`` is (review R11 G6: one
    vault prefix may be given to several logdirs, or to a copy of one): ``OURS`` when its
    ``logdir`` is this logdir's URL (normalised), or it is this logdir's own state's moved here
    (``MOVED_FROM``), or it lives in this logdir's own state and names no logdir (none recorded);
    ``COPY`` for one of this logdir's own state made at a prefix that still holds its operation
    (``MADE_AT``: named, never acted on); ``OTHERS`` for the rest, another logdir's (a shared
    vault), never listed, counted, restored or purged here."""
    if m.get(MOVED_FROM) or same_logdir(ostore, m.get("logdir")):
        return OURS
    if m.get(MADE_AT):
        return COPY
    own = f"{ostore.root}/{STATE_DIR_NAME}/manifests/"
    if m.get("logdir") is None and str(m.get("_path", "")).startswith(own):
        return OURS
    return OTHERS


def others_row(ostore: ObjectStore, vault, others: List[dict]) -> List[dict]:
    """What ``status`` says of the operations of other logdirs in this vault (review R11 G6: one
    prefix given as ``--backup-dir`` to several logdirs): one row, ``Finding.FOREIGN_MANIFEST``,
    counting them and naming their logdirs (untrusted words, shown as text only)."""
    if not others:
        return []
    where = sorted({str(o["logdir"])[:300] for o in others if isinstance(o.get("logdir"), str)})
    shown = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
    url = vault_url(ostore, vault.root)
    return [{"code": Finding.FOREIGN_MANIFEST, "op_id": None, "run": None, "file": url, "bytes": 0,
             "operations": len(others), "logdirs": where,
             "detail": f"{len(others)} operation(s) of other logdirs in this vault {url}"
                       + (f" (made at {shown})" if shown else "")
                       + ": left alone here (never counted, restored or purged from this logdir). If this "
                       "logdir was moved from there, move it back to restore them (never purge at a URL where "
                       "no logdir stands: their backups may be the only copies of this logdir's runs)"}]


def not_ours_refusal(vault, m: dict) -> Optional[BucketTxnError]:
    """Before a restore's journal: why manifest ``m`` (read by the catalogue's one reader) may not
    copy its blobs into the bucket, or None: made at a prefix that still holds it (a copy: where
    to restore it), or an entry whose blob this logdir did not claim where it stands or where
    ``m`` was found moved from (``entry_owner``'s copying rule: another logdir's, whatever id the
    bucket's state says)."""
    if m.get(MADE_AT):
        return BucketTxnError(Failure.REFUSED, f"manifest of {m.get('op_id')} {made_at_words(m[MADE_AT])}")
    theirs = [f["path"] for f in m.get("files") or [] if is_blob_entry(f) and vault.blobs is not None
              and entry_owner(vault.blobs, f) is not None
              and entry_owner(vault.blobs, f, copying=True, moved_from=m.get(MOVED_FROM)) is None]
    if theirs:
        return BucketTxnError(Failure.REFUSED, f"names blobs of {vault.blobs.folder} this logdir did not add where it "
                              f"stands (another logdir's, or another location's): {', '.join(theirs[:5])}")
    return None


def nothing_stands(ostore: ObjectStore) -> bool:
    """Whether no object at all stands under the logdir's prefix, its state included: perhaps the
    URL a logdir stood at before it was moved (review R11 G11), whose operations in a shared vault
    name this URL and whose backups are the moved logdir's only copies. One listing of the state
    folder, and of the prefix only when that holds nothing; one that fails says False."""
    try:
        if BucketState.of(ostore).listing(f"{ostore.root}/{STATE_DIR_NAME}", missing_ok=True):
            return False
        return next(iter(ostore.list("", every_key=True)), None) is None
    except (StoreFailure, ValueError, OSError):
        return False


def made_at_words(url: str) -> str:
    """What a verb says of a manifest ``MADE_AT`` another prefix that still holds its operation."""
    return (f"made at {url}, which still holds this operation: this logdir is a copy of that one; restore it "
            f"at {url} — never acted on here, left in place")


def outside_words(m: dict, words: str) -> str:
    """What a restore says of manifest ``m`` naming a key outside the vault: ``words``, or, for this
    logdir's copy of one standing at the prefix it was made at (``MADE_AT``), where to restore it."""
    return f"manifest of {m.get('op_id')} {made_at_words(m[MADE_AT])}" if m.get(MADE_AT) else words


__all__ = ["COPY", "MADE_AT", "MOVED_FROM", "OTHERS", "OURS", "made_at_words", "map_moved", "marked_afresh", "not_ours_refusal", "nothing_stands", "others_row", "outside_words",
           "whose"]
