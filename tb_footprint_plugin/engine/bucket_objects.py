"""A bucket logdir's small state objects (journals, locks, manifests) through the ``Store``
interface (issue #26: the bucket engine's state moves onto ``storage.store.Store``).

``BucketState`` reads and writes them with ``ObjectStore`` (conditional ``put``, ``stat``,
``read_all``, ``delete(versions=)``), one store per bucket on the logdir's own client
(``ObjectStore.at``: the same conditional client and request counters, so a state object
costs the requests it cost over the client directly, no more), named as the logdir's store names
them (``ObjectStore.path``: a store path, ``bucket/prefix/key``). Keys and JSON formats are the
ones the bucket engine always wrote (``json.dumps(doc, sort_keys=True)``). The rest of the bucket
engine reaches the store through it too: listings (``listing``/``tree``: ``Store.list(every_key=True)``,
one paginated listing, every key the store holds seen, a planted ``a/../b`` one and a staged write
included), ranged and whole reads (``read_range``, ``open_read``, ``read_bytes``), heads (``head``: an ``Entry`` as the listing's
``ObjectInfo``), puts, uploads, server-side copies (with the store's checksums of the copy) and
the retention query (``Store.retention``). A store's refusal reaches the engine as the
``StoreFailure`` it is, and the engine branches on its ``codes.StoreError`` code. What a listing
of the whole logdir would find now, as far as this process knows (``objects_now``: its last such
listing and the writes and deletes made through a ``BucketState`` since), prices a batch's
checking listing (``bucket_state.cover_prefixes``).
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage.remote import ObjectInfo
from tb_footprint_plugin.storage.store import READ_ALL_LIMIT, Copied, Entry, StoreFailure, check_key, checked_headers
from tb_footprint_plugin.storage.store_object import ObjectStore, info_of, listing_of

#: the ``BucketState`` of the stores used last (``BucketState.of``), by ``id`` of the store;
#: each holds it, so an id is never reused while cached, and
#: at most ``OF_KEPT`` are kept alive by the cache (a weak-keyed one would keep every one: its
#: value holds it)
_OF: "OrderedDict[int, BucketState]" = OrderedDict()
_OF_MU = threading.Lock()
OF_KEPT = 16

#: the largest state object read (a planted huge "journal" or "lock" is never read whole: corrupt)
STATE_LIMIT = READ_ALL_LIMIT

#: what this process knows of the objects under a store path it listed whole (``listing`` of a
#: root): root -> [objects that listing found, objects written under the root since less those
#: deleted there] (``BucketState.objects_now``); the roots listed last, at most ``GROWN_KEPT``
_GROWN: "OrderedDict[str, List[int]]" = OrderedDict()
GROWN_KEPT = 64


def _grown(path: str, n: int) -> None:
    """``n`` objects more (or fewer) at the store path ``path``, for every root listed whole above it."""
    with _OF_MU:
        for root, counts in _GROWN.items():
            if path.startswith(root + "/"):
                counts[1] += n


class BucketState:
    """Small JSON state objects (journal, lock, manifest) with conditional writes, through the
    ``Store`` interface: the logdir's ``ObjectStore`` (``logdir``), and one per other bucket on
    the same client and request counters (``ObjectStore.at``), each state object addressed by its
    store path (``bucket/key``, ``ObjectStore.path``, as the engine names them: the vault may be
    in another prefix or bucket). A store's refusal is the ``StoreFailure`` it raised."""

    def __init__(self, logdir: ObjectStore):
        """Over the logdir's ``ObjectStore``; its client (a ``RemoteFS``) is a ``TypeError``
        (``ObjectStore.of``), before any request."""
        self.logdir = ObjectStore.of(logdir)
        self._held = logdir  # the store ``of`` was given: its cache entry is that object's
        self._stores: Dict[str, ObjectStore] = {}

    @classmethod
    def of(cls, logdir: ObjectStore) -> "BucketState":
        """The ``BucketState`` of the logdir's store, made once per store (its stores are kept with it)."""
        with _OF_MU:
            st = _OF.get(id(logdir))
            if st is None or st._held is not logdir:
                st = _OF[id(logdir)] = cls(logdir)
            _OF.move_to_end(id(logdir))
            while len(_OF) > OF_KEPT:
                _OF.popitem(last=False)
        return st

    def where(self, path: str, *, whole_bucket: bool = False) -> Tuple[ObjectStore, str]:
        """The store of ``path`` and its key there: the logdir's own (at ``logdir``'s root) for a
        path under the logdir, else the store of its bucket (or that one always: ``whole_bucket``);
        ``ValueError`` for a path that is no plain key there (as ``ObjectStore.path`` refuses one),
        before anything is touched."""
        root = self.logdir.root + "/"
        if path.startswith(root) and not whole_bucket:
            url, key = self.logdir.url, path[len(root):]
        else:
            bucket, _, key = path.partition("/")
            url = f"{self.logdir.scheme}://{bucket}"
        try:
            check_key(key)
        except StoreFailure as e:
            raise ValueError(f"{path}: not a plain key of {url} ({e})") from None
        store = self._stores.get(url)
        if store is None:
            store = self.logdir.at(url)
            self._stores[url] = store
        return store, key

    def logdir_store(self) -> ObjectStore:
        """The logdir's own store (its runs' objects and its state), on this client; no request."""
        return self._store_at(self.logdir.root)

    def _store_at(self, root: str) -> ObjectStore:
        """The store rooted at the store path ``root`` (the logdir's own for its root), on this client."""
        url = self.logdir.url if root == self.logdir.root else f"{self.logdir.scheme}://{root}"
        store = self._stores.get(url)
        if store is None:
            store = self.logdir.at(url)
            self._stores[url] = store
        return store

    def listing(self, base: str, root: Optional[str] = None, *, missing_ok: bool = False) -> Dict[str, ObjectInfo]:
        """Every object under the store path ``base`` (one recursive paginated listing), keyed by
        its path relative to the store path ``root`` (``base`` itself when not given: the logdir, a
        vault in another prefix or bucket), as the listing's ``ObjectInfo``. Every key the
        listing finds (``Store.list(every_key=True)``): one no call can address (a planted
        ``a/../b``) and a staged write are seen, for the trust checks to keep them. ``ValueError``
        for a ``base`` that is no plain key under ``root``; a bucket that does not exist is
        ``StoreFailure`` ``NOT_FOUND``, or nothing with ``missing_ok``."""
        root = base if root is None else root
        if base == root:
            prefix = ""
        elif base.startswith(root + "/"):
            prefix = base[len(root) + 1:]
        else:
            raise ValueError(f"{base}: not under {root}")
        try:
            check_key(prefix, allow_root=True)
        except StoreFailure as e:
            raise ValueError(f"{base}: not a plain key under {root} ({e})") from None
        try:
            found = listing_of(self._store_at(root), prefix)
        except StoreFailure as e:
            if missing_ok and e.code == StoreError.NOT_FOUND:
                found = {}
            else:
                raise
        if not prefix:
            with _OF_MU:
                _GROWN[root] = [len(found), 0]
                _GROWN.move_to_end(root)
                while len(_GROWN) > GROWN_KEPT:
                    _GROWN.popitem(last=False)
        return found

    def objects_now(self) -> Optional[int]:
        """How many objects a listing of the whole logdir would find now, as far as this process
        knows: what its last such listing found (``listing``), plus the objects written under it
        through a ``BucketState`` since (a create, an upload, a copy not over a version: a
        reduce's backup copies, manifests, locks and journals in a vault inside the logdir), less
        those deleted there. Another process's writes are not known: an estimate, which prices a
        listing (``bucket_state.cover_prefixes``), never decides what a run holds. None before
        any whole listing of the logdir."""
        with _OF_MU:
            counts = _GROWN.get(self.logdir.root)
            return None if counts is None else max(0, counts[0] + counts[1])

    def tree(self, rel: str = "", *, missing_ok: bool = False) -> Dict[str, ObjectInfo]:
        """``listing`` of ``rel`` under the logdir, keyed relative to the logdir."""
        return self.listing(self.logdir.path(rel), self.logdir.root, missing_ok=missing_ok)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object at ``path``: one ranged read."""
        store, key = self.where(path)
        return store.read_range(key, start, end)

    def open_read(self, path: str, size: int, *, headers: bool = False):
        """A seekable reader of the object at ``path`` of the listed ``size`` (no request to open;
        one ranged read per ``read``); ``headers``: its ``headers`` said by its first read where
        the listing said none (``ObjectStore.open_read``)."""
        store, key = self.where(path)
        return store.open_read(key, size, headers=True) if headers else store.open_read(key, size)

    def read_bytes(self, path: str, limit: int = READ_ALL_LIMIT) -> bytes:
        """The whole object at ``path`` in one read (``StoreFailure`` ``TOO_LARGE`` past ``limit``)."""
        store, key = self.where(path)
        return store.read_all(key, limit)

    def head(self, path: str) -> Optional[ObjectInfo]:
        """The object's metadata as a listing gives it (size, time, version, the store's
        checksums), None when there is none (nor can be: ``stat``): one metadata read, what the
        client's head cost."""
        e = self.stat(path)
        return None if e is None else info_of(e)

    def put(self, path: str, data: bytes, *, if_absent: bool = False, if_version: Optional[str] = None,
            headers: Optional[dict] = None) -> str:
        """Write ``data`` whole at ``path`` (create-only, or only over ``if_version``): one request;
        ``headers``: the object's Content-Type and user metadata, set by it (``ObjectStore.put``)."""
        store, key = self.where(path)
        version = store.put(key, data, if_absent=if_absent, if_version=if_version,
                            **({"headers": headers} if headers is not None else {}))
        if if_version is None:
            _grown(path, 1)
        return version

    def put_file(self, path: str, local: str, headers: Optional[dict] = None) -> ObjectInfo:
        """Upload the local file ``local`` to ``path`` with the store's checksum of the whole
        object (``whole_checksum``: what a staged object is compared by), then its metadata;
        ``headers``: the object's Content-Type and user metadata, set by the upload."""
        store, key = self.where(path)
        info = info_of(store.put_file(key, local, whole_checksum=True,
                                      **({"headers": headers} if headers is not None else {})))
        _grown(path, 1)
        return info

    def copy(self, src: str, dst: str, *, if_source_version: Optional[str] = None, if_absent: bool = False,
             if_version: Optional[str] = None, listed_absent: bool = False, size: Optional[int] = None) -> Copied:
        """A server-side copy of the store path ``src`` to ``dst`` (another prefix or bucket of the
        same store, on the same client), its conditions sent with the request and no metadata read
        first (``precheck=False``: what the engine's copies always cost; a single-part S3 copy's
        ETag is compared after it). The copy's version and the store's checksums of it."""
        sstore, skey = self.where(src)
        dstore, dkey = self.where(dst)
        res = dstore.copy(skey, dkey, source=None if sstore is dstore else sstore, detail=True, precheck=False,
                          if_source_version=if_source_version, if_absent=if_absent, if_version=if_version,
                          listed_absent=listed_absent, size=size)
        if if_version is None:
            _grown(dst, 1)
        return res

    def retention(self, bucket: str) -> dict:
        """Whether bytes deleted from ``bucket`` stay stored (``Store.retention``)."""
        store, _ = self.where(f"{bucket}/x", whole_bucket=True)
        return store.retention() or {}

    def create(self, path: str, doc: dict) -> str:
        store, key = self.where(path)
        version = store.put(key, json.dumps(doc, sort_keys=True).encode(), if_absent=True)
        _grown(path, 1)
        return version

    def update(self, path: str, doc: dict, version: str) -> str:
        store, key = self.where(path)
        return store.put(key, json.dumps(doc, sort_keys=True).encode(), if_version=version)

    def stat(self, path: str) -> Optional[Entry]:
        """The object's entry (size, time, version), None when there is none (nor can be: a path
        that is no plain key, named by an untrusted document): one metadata read."""
        try:
            store, key = self.where(path)
        except ValueError:
            return None
        return store.stat(key)

    def read(self, path: str, info: Optional[ObjectInfo] = None) -> Tuple[Optional[dict], Optional[str]]:
        """The JSON object at ``path`` and its version token; ``info`` from a listing spares the
        metadata read (a write conditional on that version fails if it is stale anyway). An
        object that does not parse, or is larger than ``STATE_LIMIT`` (state is untrusted), is
        ``{"corrupt": True}``; a path that is no plain key holds nothing (``stat``)."""
        try:
            store, key = self.where(path)
        except ValueError:
            return None, None
        version = info.version_token if info is not None else getattr(store.stat(key), "version", None)
        if version is None:
            return None, None
        try:
            data = store.read_all(key, STATE_LIMIT)
            doc = jsondoc.loads(data)
        except StoreFailure as e:
            if e.code == StoreError.NOT_FOUND:
                return None, None
            if e.code == StoreError.TOO_LARGE:
                return {"corrupt": True}, version
            raise
        except ValueError:
            return {"corrupt": True}, version
        return (doc if isinstance(doc, dict) else {"corrupt": True}), version

    def delete(self, paths: List[str], versions: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """Delete ``paths`` (each at its version in ``versions``, store path -> version, where
        given), batched per bucket; {path: why} for those the store refused (a missing one is
        no refusal). A path that is no plain key holds nothing of ours (no write of the engine
        makes one, ``stat``): nothing is sent for it, and nothing is refused (a rollback that
        drops the backup key of a planted ``a/../x`` object, never copied, is complete; the
        object the literal key names, someone else's, is kept). The condition goes with the
        request alone (``precheck=False``), as the engine's deletes always did: no metadata read
        added."""
        versions = versions or {}
        by_bucket: Dict[str, List[str]] = {}
        for p in paths:
            by_bucket.setdefault(p.partition("/")[0], []).append(p)
        groups: List[Tuple[ObjectStore, List[Tuple[str, str]]]] = []
        failed: Dict[str, str] = {}
        for ps in by_bucket.values():
            # one batch a bucket, as the client sent it: through the bucket's store when the
            # logdir's paths and others (a vault in another prefix) are deleted together
            whole = len({p.startswith(self.logdir.root + "/") for p in ps}) > 1
            items: List[Tuple[str, str]] = []
            store = None
            for p in ps:
                try:
                    store, key = self.where(p, whole_bucket=whole)
                except ValueError:
                    continue
                items.append((p, key))
            if store is not None:
                groups.append((store, items))
        for store, items in groups:
            conds = {key: versions[p] for p, key in items if versions.get(p)}
            for (p, _), res in zip(items, store.delete([key for _, key in items], conds or None, precheck=False)):
                if not res.ok:
                    failed[p] = res.message or str(res.code)
                else:
                    _grown(p, -1)
        return failed


#: a bucket file entry's record of its original's Content-Type and user metadata
#: (``storage.store.checked_headers``' shape), taken at the reduce from an answer it already had
#: (a GCS or Azure listing, a head, an S3 read's GET); absent where none said them (an S3 listing
#: of a drop-only reduce with server-side copies, which keep them) and in manifests of before it
HEADERS = "headers"


def entry_headers(f: dict, protocol: str) -> Tuple[Optional[dict], str]:
    """The headers a file entry (untrusted) records, as they may be sent to the store of
    ``protocol`` (``checked_headers``, that store's rule): ``(headers, "")``; ``(None, "")``
    when it records none; ``(None, why)`` when its record is refused (never sent)."""
    doc = f.get(HEADERS) if isinstance(f, dict) else None
    if doc is None:
        return None, ""
    headers, why, _ = checked_headers(doc, protocol)
    return headers, why


__all__ = ["BucketState", "HEADERS", "STATE_LIMIT", "entry_headers", "info_of"]
