"""``ObjectStore``: the ``Store`` interface over an S3, GCS or Azure prefix.

Built on ``storage.remote``: ``RemoteFS`` (listing, ranged reads, request counters) and its
per-store conditional client (``_S3Ops``/``_GCSOps``/``_AzureOps`` through ``RemoteFS.ops``:
puts with preconditions, server-side copies, batched deletes). Nothing here talks to a store
directly.

Buckets have no rename, no hard link and no append, and keep no file time or mode; the
capabilities say so. ``replace`` is a conditional copy and a delete of the source conditional on
the version copied (``ReplaceResult.atomic`` is False: a crash in between leaves both keys).
``append`` is a conditional rewrite of a small object: read it with its version, put the old
bytes and the new ones on the condition that the version has not moved, and retry on a
conflict; each append costs a head, a read and a put of the whole object, fine for journals
and logs of a few MB (``READ_ALL_LIMIT`` at most), and appends of concurrent writers land
whole, in some order. (One object per record would scale further but makes every reader list;
the engine's logs are small.)

Why one module: one class, ``ObjectStore``, the ``Store`` of every object store, with what its
callers name objects by (``path``, ``url_of``, ``at``: the bucket engine holds the store, never
its client); split, the verbs' shared preconditions and failure codes (``_coded``) would be
imported across modules as private names.
"""
from __future__ import annotations

import contextlib
import os
import random
import secrets
import threading
import time
from typing import Dict, Iterable, Iterator, List, Optional, Union

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.regular import open_regular
from tb_footprint_plugin.storage.remote import (ObjectInfo, RemoteError, RemoteFS, content_checksums, is_bucket_url,
                                                protocol_of)
from tb_footprint_plugin.storage.store import (READ_ALL_LIMIT, STREAM_PART, TMP_PREFIX, Capabilities, Copied,
                                               DeleteResult, Entry, RangeReader, ReplaceResult, Source, Store,
                                               StoreFailure, check_key, checked_headers, on_a_new_line, unwrapped)

#: names of uploads in progress (a streaming put conditional on a version stages here, then copies); never listed
STAGE_PREFIX = TMP_PREFIX
#: attempts of one bucket append against concurrent writers before ``StoreError.CONFLICT``
APPEND_TRIES = 32

#: one lock per object appended to by this process (other processes: the store's preconditions)
_APPENDING: Dict[str, "threading.Lock"] = {}
_APPENDING_MU = threading.Lock()

BUCKET_CAPABILITIES = Capabilities(
    rename_atomic=False, hard_link=False, fsync=False, versions=True, mtime_kept=False, mode_kept=False,
    open_writer_detection=False, server_side_copy=True, conditional_put=True, folders=False,
    append="conditional_rewrite", retention_query=True, append_limit=READ_ALL_LIMIT, headers_kept=True)

#: what the objects under a URL of another fsspec scheme offer (``hdfs://``, a scheme fsspec
#: registers): a listing and ranged reads through the same ``Store`` calls, nothing written (there
#: is no conditional client for it: a write is ``StoreError.NOT_SUPPORTED``), no version enforced
LISTED_ONLY_CAPABILITIES = Capabilities(
    rename_atomic=False, hard_link=False, fsync=False, versions=False, mtime_kept=False, mode_kept=False,
    open_writer_detection=False, server_side_copy=False, conditional_put=False, folders=False,
    append="none", retention_query=False)

_CODES = {c.value: c for c in StoreError}


def _code(e: RemoteError) -> StoreError:
    return _CODES.get(getattr(e, "code", ""), StoreError.STORE_ERROR)


@contextlib.contextmanager
def _coded(key: str) -> Iterator[None]:
    """Every failure of the store's clients inside becomes a coded ``StoreFailure`` for ``key``."""
    try:
        yield
    except StoreFailure:
        raise
    except RemoteError as e:
        if _code(e) == StoreError.NO_CREDENTIALS:  # its message names the bucket's URL: no key before it
            raise StoreFailure(StoreError.NO_CREDENTIALS, "", str(e)) from e
        raise StoreFailure(_code(e), key, str(e)) from e
    except FileNotFoundError as e:
        raise StoreFailure(StoreError.NOT_FOUND, key, "no such object") from e
    except PermissionError as e:
        raise StoreFailure(StoreError.PERMISSION, key, str(e) or "access denied") from e
    except (OSError, ValueError) as e:
        raise StoreFailure(StoreError.STORE_ERROR, key, str(e) or type(e).__name__) from e


@contextlib.contextmanager
def _absent_is_stale(if_version: Optional[str], key: str) -> Iterator[None]:
    """A write conditional on a version of a key that is gone failed its precondition (S3 says
    'no such key' where the others say 'precondition failed')."""
    try:
        yield
    except StoreFailure as e:
        if if_version and e.code == StoreError.NOT_FOUND:
            raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "gone since it was read") from e
        raise


def _read_upto(f, limit: int) -> "tuple[List[bytes], bool]":
    """The first bytes of ``f``, as read, up to just past ``limit`` (a raw stream may return short
    reads), and whether it ended within ``limit`` (a source verified at its end, such as a blob
    store's, is verified then)."""
    parts: List[bytes] = []
    n = 0
    while n <= limit:
        b = f.read(min(STREAM_PART, limit + 1 - n))
        if not b:
            return parts, True
        parts.append(b)
        n += len(b)
    return parts, False


class _Prefixed:
    """``parts`` (already read), then the rest of ``f``; served in slices, never copied whole
    (the upload's own buffer holds a part as well)."""

    def __init__(self, parts: List[bytes], f):
        self._parts, self._at, self._f = list(parts), 0, f

    def read(self, n: int = -1) -> bytes:
        if not self._parts:
            return self._f.read(n)
        cur = self._parts[0]
        end = len(cur) if n is None or n < 0 else min(len(cur), self._at + n)
        out = cur[self._at:end] if (self._at, end) != (0, len(cur)) else cur
        self._at = end
        if end >= len(cur):  # let go of a part as its last slice leaves, before the writer buffers it
            self._parts.pop(0)
            self._at = 0
        return out if out else self._f.read(n)


class ObjectStore(Store):
    """The objects under one bucket prefix (``s3://bucket/logdir``, ``gs://…``, ``az://…``); under
    a URL of another fsspec scheme, listed and read only (``LISTED_ONLY_CAPABILITIES``): the scan
    lists every remote logdir through this one interface."""

    def __init__(self, url: str, rfs: Optional[RemoteFS] = None, *, ops=None, ops_of: Optional[RemoteFS] = None):
        """The objects under ``url``, through ``rfs`` (a ``RemoteFS`` at ``url``: made when not
        given) and ``ops``, the scheme's conditional client (else ``ops_of.ops`` or ``rfs.ops``
        at first use; it takes whole store paths, so one client serves every bucket of its store)."""
        with _coded(url):
            self.rfs = rfs or RemoteFS(url)
        # made at its first use (``ops``): a listing or a read needs no conditional client, and
        # building one (a boto3 client: tens of milliseconds) would slow a scan that only lists
        self._ops = ops
        self._ops_of = ops_of if ops_of is not None else self.rfs
        self.location = self.rfs.url
        self.stats = self.rfs.stats
        self.capabilities = BUCKET_CAPABILITIES if is_bucket_url(self.location) else LISTED_ONLY_CAPABILITIES
        #: keys a listing found that no Store call can address ('a/../b', 'a//b'): reported, not listed
        self.unaddressable: List[str] = []

    @classmethod
    def on_client(cls, rfs: RemoteFS, url: str) -> "ObjectStore":
        """An ``ObjectStore`` at ``url`` (``rfs``'s own root, or another prefix or bucket of its
        store) on ``rfs``'s client: the same fsspec filesystem, conditional client and request
        counters (``stats``), so what both do is counted together and no second client is made
        (a boto3 client costs tens of milliseconds to build). ``NOT_SUPPORTED`` for a URL of
        another store."""
        url = url.rstrip("/")
        if url == rfs.url:
            return cls(url, rfs=rfs)
        # told from the URL alone: another store's client is never made (nor its credentials asked for)
        if protocol_of(url) != rfs.protocol:
            raise StoreFailure(StoreError.NOT_SUPPORTED, url, f"not on the store of {rfs.url}")
        with _coded(url):
            view = RemoteFS(url, stats=rfs.stats)
        return cls(url, rfs=view, ops_of=rfs)

    @classmethod
    def of(cls, store: "ObjectStore") -> "ObjectStore":
        """``store`` itself, checked: code that takes the logdir's store takes it, never its client.
        A ``RemoteFS`` (or anything else) is a ``TypeError`` saying what to pass instead, before
        any request."""
        if isinstance(store, ObjectStore):
            return store
        if isinstance(store, RemoteFS):
            raise TypeError(f"an ObjectStore, not its client RemoteFS ({store.url}): pass ObjectStore(url), "
                            "or ObjectStore.on_client(rfs, rfs.url) for the store on a client in hand")
        raise TypeError(f"an ObjectStore, not {type(store).__name__}")

    def at(self, url: str) -> "ObjectStore":
        """The ``ObjectStore`` at ``url`` (this store's root, or another prefix or bucket of its
        store) on this store's client and counters (``on_client``: no request, no client made);
        ``NOT_SUPPORTED`` for a URL of another store (``sibling`` makes a client for one)."""
        return ObjectStore.on_client(self.rfs, url)

    def holds_anything(self) -> bool:
        """Whether any object is stored under this store's prefix (or it is a bucket's root): one
        request, a listing of at most one key (a whole listing pages through every run)."""
        return self.rfs.exists()

    # --- names (no request): how the engine names objects in its journals and manifests -----------
    @property
    def url(self) -> str:
        """The store's URL, with the scheme the user gave (``gs://``, not gcsfs' ``gcs``)."""
        return self.location

    @property
    def scheme(self) -> str:
        """The URL's scheme as given (``s3``, ``gs``, ``az``, an alias such as ``s3a``)."""
        return self.rfs.scheme

    @property
    def protocol(self) -> str:
        """The client's protocol (``s3``, ``gcs``, ``az``): one per store, whatever alias named it."""
        return self.rfs.protocol

    def path(self, key: str = "") -> str:
        """The store path (``bucket/prefix/key``, no scheme) of ``key`` under the root, as the
        engine names objects (a vault may be in another prefix or bucket of the store: a store
        path says which); ``""`` or ``"."`` is the root itself, surrounding slashes are dropped;
        ``ValueError`` for a key with an empty, ``.`` or ``..`` part. No request."""
        return self.rfs.path(key)

    def url_of(self, key: str = "") -> str:
        """The URL of ``key`` under the root (``path`` with the store's scheme). No request."""
        return self.rfs.url_of(key)

    @property
    def root(self) -> str:
        """The store path its keys are under (``bucket/prefix``, no scheme), as the engine names
        objects and a listing's keys are relative to (a ``PosixStore``'s ``root`` is its folder)."""
        return self.rfs.root

    def sibling(self, url: str) -> "ObjectStore":
        """An ``ObjectStore`` at ``url`` whose requests this store's ``stats`` count: on this
        store's client (``on_client``: no client built, no request) when ``url`` is on the same
        store, else on a client of its own (a vault of another scheme, still counted here). For a
        caller that holds the ``Store`` alone (a scan listing a vault in another prefix or bucket)."""
        try:
            return ObjectStore.on_client(self.rfs, url)
        except StoreFailure as e:
            if e.code != StoreError.NOT_SUPPORTED:
                raise
        with _coded(url):
            return ObjectStore(url, rfs=RemoteFS(url, stats=self.stats))

    @property
    def ops(self):
        """The scheme's conditional client (``rfs.ops``, or the one given), made at first use;
        ``StoreFailure`` ``NOT_SUPPORTED`` for a scheme without one."""
        if self._ops is None:
            with _coded(self.location):
                self._ops = self._ops_of.ops
        return self._ops

    def prepare_writes(self) -> None:
        """The conditional client made now (``ops``): a store that only lists (a scan) makes it
        never, one that writes (a vault) at once."""
        self.ops  # noqa: B018  (the property makes it)

    def _path(self, key: str) -> str:
        return self.rfs.path(check_key(key))

    def _entry(self, key: str, info: ObjectInfo) -> Entry:
        return Entry(key=key, size=info.size, mtime=info.mtime, version=info.version_token,
                     checksums=content_checksums(info), headers=info.headers)

    def _headers(self, key: str, headers: Optional[dict]) -> Optional[dict]:
        """``headers`` to set on ``key`` as ``checked_headers`` takes them for this store: what is sent is never more, nor anything else (its code, ``TOO_LARGE`` or
        ``NOT_SUPPORTED``, and nothing written); None: none given (the store's defaults)."""
        if headers is None:
            return None
        got, why, code = checked_headers(headers, self.rfs.protocol)
        if got is None:
            raise StoreFailure(code or StoreError.NOT_SUPPORTED, key, f"its headers are not sent: {why}; nothing written")
        return got

    def _head(self, key: str) -> Optional[ObjectInfo]:
        path = self._path(key)
        with _coded(key):
            return self.ops.head(path)

    # --- reading ------------------------------------------------------------------------------
    def list(self, prefix: str = "", *, every_key: bool = False, shallow: bool = False) -> Iterator[Entry]:
        prefix = check_key(prefix, allow_root=True)
        with _coded(prefix or self.location):
            try:
                found = self.rfs.list_under(self.rfs.path(prefix), self.rfs.root)
            except FileNotFoundError:
                raise StoreFailure(StoreError.NOT_FOUND, self.location, "no such bucket") from None
        for key in sorted(found):
            if prefix and not key.startswith(prefix + "/"):
                continue
            if shallow and "/" in key[len(prefix) + 1 if prefix else 0:]:
                continue  # in a "subfolder" of the prefix
            if not every_key:
                try:
                    check_key(key)
                except StoreFailure:
                    self.unaddressable.append(key)
                    continue
                if key.rsplit("/", 1)[-1].startswith(STAGE_PREFIX):
                    continue
            yield self._entry(key, found[key])

    def stat(self, key: str) -> Optional[Entry]:
        info = self._head(key)
        return None if info is None else self._entry(key, info)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"bad range [{start}, {end})")
        path = self._path(key)
        if end == start:
            return b""
        with _coded(key):
            try:
                return self.rfs.read_range(key, start, end)
            except FileNotFoundError:
                # the clients' own type for a missing object (a 404; a 416 is none): said as the
                # GET said it, no HEAD to ask again (the change log every status reads is normally absent)
                raise StoreFailure(StoreError.NOT_FOUND, key, "no such object") from None
            except RemoteError as e:
                if _code(e) in (StoreError.PERMISSION, StoreError.NO_CREDENTIALS, StoreError.ARCHIVED):
                    raise  # refused, unsigned or archived: a HEAD would say less
                failed: BaseException = e
            except Exception as e:  # noqa: BLE001 - each client raises its own kind; the head decides
                failed = e
            # a range at or past the end is an error on S3 and Azure (416) where a file reads
            # short or empty: the object's size decides, never the error's wording
            answered = False
            try:
                info = self.ops.head(path)
                answered = True
            except Exception:  # noqa: BLE001 - a HEAD that does not answer: the GET's error is the one to say
                pass
            if not answered:
                raise failed
            if info is None:
                raise StoreFailure(StoreError.NOT_FOUND, key, "no such object")
            if start >= info.size:
                return b""
            if end <= info.size:
                raise failed
            return self.rfs.read_range(key, start, info.size)

    def open_read(self, key: str, size: Optional[int] = None, *, headers: bool = False) -> RangeReader:
        """``Store.open_read``; ``headers``: the reader's ``headers`` are the object's as its first
        read answered them, on a store whose listing says none (S3: that read is a GET through the
        conditional client, which returns them; one request as before). Elsewhere the listing
        (``Entry.headers``) said them, and the reader's stay None."""
        if size is None:
            info = self._head(key)
            if info is None:
                raise StoreFailure(StoreError.NOT_FOUND, key, "no such object")
            size = info.size
        else:
            self._path(key)
        # its first read says the headers (the client is made for it only when asked)
        first = {"due": bool(headers and size and hasattr(self.ops, "get_range"))}

        def fetch(s: int, e: int) -> bytes:
            if not first["due"]:
                return self.read_range(key, s, e)
            first["due"] = False
            try:
                with _coded(key):
                    data, reader.headers = self.ops.get_range(self._path(key), s, min(e, size))
            except StoreFailure as err:
                if err.code == StoreError.NOT_FOUND:
                    raise
                # anything else (a range past an object shortened since its listing): read as any
                # read is, whose rules say what a short or failed read is; its headers not said
                return self.read_range(key, s, e)
            return data

        reader = RangeReader(fetch, size, self.rfs.url_of(key))
        return reader

    # --- writing ------------------------------------------------------------------------------
    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_version: Optional[str] = None,
            mode: Optional[int] = None, headers: Optional[dict] = None) -> str:
        """``Store.put``; ``headers`` (``capabilities.headers_kept``): the object's Content-Type and
        user metadata (``checked_headers``' shape), set by the same request."""
        path = self._path(key)
        headers = self._headers(key, headers)
        with _absent_is_stale(if_version, key), _coded(key):
            return self.ops.put(path, bytes(data), if_absent=if_absent, if_version=if_version,
                                **({"headers": headers} if headers is not None else {}))

    def put_file(self, key: str, src: Source, *, if_absent: bool = False, if_version: Optional[str] = None,
                 mtime_ns: Optional[int] = None, mode: Optional[int] = None,
                 whole_checksum: bool = False, headers: Optional[dict] = None) -> Entry:
        """``Store.put_file``; ``headers`` as ``put``'s, taken by the whole-checksum upload of a
        local file (the one a staged or restored object is written by), ``NOT_SUPPORTED`` by the
        others (their streaming writers set none)."""
        path = self._path(key)
        headers = self._headers(key, headers)
        if headers is not None and not whole_checksum:
            raise StoreFailure(StoreError.NOT_SUPPORTED, key, "headers are set by a whole-checksum upload only")
        if whole_checksum:
            if if_absent or if_version or not isinstance(src, (str, os.PathLike)):
                raise StoreFailure(StoreError.NOT_SUPPORTED, key, "a whole-object checksum is asked of an "
                                   "unconditional upload of a local file only")
            with _coded(key):  # the client's file uploader: one request up to its part size, then a head
                return self._entry(key, self.ops.upload_file(path, os.fspath(src),
                                                             **({"headers": headers} if headers is not None else {})))
        with contextlib.ExitStack() as stack:
            f = src
            if isinstance(src, (str, os.PathLike)):
                f = stack.enter_context(open_regular(os.fspath(src)))
            # up to a part read first: an object that small goes up by the store's own put, in one
            # request carrying the condition (S3 If-None-Match: * or If-Match, GCS
            # ifGenerationMatch, Azure If-None-Match: * or If-Match; moto 5.2 and Azurite enforce
            # them, the GCS emulator does not and ``ops.put`` checks them with a metadata read
            # there), never by a writer: no staged copy, and no client's small-object form (gcsfs's
            # ``pipe_file`` and ``put_file`` below 5 MiB are multipart requests with the fixed
            # boundary "==0==", which bytes holding "--==0==" end at the server, cut short)
            with _coded(key):  # a source that breaks is the put's failure, coded, nothing sent
                parts, ended = _read_upto(f, STREAM_PART)
            if ended:
                with _absent_is_stale(if_version, key), _coded(key):
                    self.ops.put(path, parts[0] if len(parts) == 1 else b"".join(parts), if_absent=if_absent,
                                 if_version=if_version)
                return self._stat_written(key)
            f = _Prefixed(parts, f)
            del parts
            if if_absent and not if_version:
                # a larger one in one streamed upload whose completing request carries the
                # condition (S3 If-None-Match: * on CompleteMultipartUpload, Azure on Put Block
                # List, GCS ifGenerationMatch=0 on the resumable upload; moto 5.2 and Azurite
                # refuse a second create there): no staged copy, no server-side copy, no delete.
                # ``check_absent`` reads the key's metadata first: a server ignoring the condition
                # (the GCS emulator, some S3-compatible ones) never overwrites a blob already
                # stored (review J7 F2); one racing it is refused at the end of the upload, which
                # leaves nothing (the writer's parts are aborted)
                with _coded(key):
                    self.ops.check_absent(path)
                    self.rfs.upload_stream(key, f, part=STREAM_PART, exclusive=True)
                return self._stat_written(key)
            if not (if_absent or if_version):
                with _coded(key):  # the writers' parts: S3 multipart, GCS resumable, Azure blocks
                    self.rfs.upload_stream(key, f, part=STREAM_PART)
            else:
                # conditional on a version: s3fs's, gcsfs's and adlfs's writers send no If-Match
                # (S3 and Azure would take one on the completing request, GCS ifGenerationMatch=<n>
                # on the upload, but no writer passes it on): stage the bytes beside the key, then
                # copy them over it on the condition (server side); for objects above a part only,
                # where the upload's own requests dominate
                parent = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
                stage = f"{parent}{STAGE_PREFIX}{secrets.token_hex(8)}"
                try:
                    with _absent_is_stale(if_version, key), _coded(key):
                        n = self.rfs.upload_stream(stage, f, part=STREAM_PART)
                        self.ops.copy(self.rfs.path(stage), path, if_absent=if_absent, if_version=if_version,
                                      size=n)
                finally:
                    with contextlib.suppress(RemoteError, OSError):
                        self.ops.delete([self.rfs.path(stage)])
        return self._stat_written(key)

    def _stat_written(self, key: str) -> Entry:
        info = self._head(key)
        if info is None:
            raise StoreFailure(StoreError.STORE_ERROR, key, "missing right after its upload")
        return self._entry(key, info)

    def copy(self, src: str, dst: str, *, if_source_version: Optional[str] = None, if_absent: bool = False,
             if_version: Optional[str] = None, source: Optional[Store] = None, size: Optional[int] = None,
             precheck: bool = True, listed_absent: bool = False, detail: bool = False) -> Union[str, Copied]:
        origin = self if source is None else unwrapped(source)
        # one server-side copy needs one client: the same endpoint and credentials on both sides
        # (review R12 F7: a protocol check alone let another endpoint's store through)
        if not isinstance(origin, ObjectStore) or origin.ops is not self.ops:
            raise StoreFailure(StoreError.NOT_SUPPORTED, src,
                               f"no server-side copy from {origin.location} into {self.location}")
        psrc, pdst = origin._path(src), self._path(dst)
        if if_source_version and precheck:
            # checked first as well: a server that ignores CopySourceIfMatch (moto) would copy,
            # and the client's check after the copy removes the destination, which may have
            # held bytes of its own; S3, GCS and Azure enforce the condition sent with the copy
            info = origin._head(src)
            if info is None:
                raise StoreFailure(StoreError.NOT_FOUND, src, "no such object")
            if info.version_token != if_source_version:
                raise StoreFailure(StoreError.PRECONDITION_FAILED, src, "changed since it was read; nothing copied")
        with _coded(src if if_source_version else dst):
            res = self.ops.copy(psrc, pdst, if_source_version=if_source_version, if_absent=if_absent,
                                if_version=if_version, listed_absent=listed_absent and if_absent, size=size)
        return Copied(res.version, dict(res.checksums)) if detail else res.version

    def retention(self) -> Optional[dict]:
        """The bucket's versioning, noncurrent-version expiry and soft delete (Azure: the
        account's delete retention): the client's metadata reads of the bucket, one or two."""
        with _coded(self.location):
            return self.ops.retention(self.rfs.root.partition("/")[0])

    def replace(self, src: str, dst: str, *, if_source_version: Optional[str] = None,
                if_absent: bool = False, if_version: Optional[str] = None) -> ReplaceResult:
        version = if_source_version
        if version is None:
            info = self._head(src)
            if info is None:
                raise StoreFailure(StoreError.NOT_FOUND, src, "no such object")
            version = info.version_token
        new = self.copy(src, dst, if_source_version=version, if_absent=if_absent, if_version=if_version)
        res = self.delete([src], versions={src: version})[0]
        if not res.ok:
            raise StoreFailure(res.code or StoreError.STORE_ERROR, src,
                               f"copied to {dst}, but the source stays ({res.message}): both keys exist")
        return ReplaceResult(version=new, atomic=False)

    def delete(self, keys: Iterable[str], versions: Optional[Dict[str, str]] = None, *,
               precheck: bool = True) -> List[DeleteResult]:
        versions = versions or {}
        keys = [keys] if isinstance(keys, str) else list(keys)
        results: Dict[int, DeleteResult] = {}
        send: Dict[str, List[int]] = {}  # store path -> positions asking for it
        conds: Dict[str, str] = {}
        for i, key in enumerate(keys):
            try:
                path = self._path(key)
            except StoreFailure as e:
                results[i] = DeleteResult(key=str(key), ok=False, code=e.code, message=str(e))
                continue
            if versions.get(key) and not precheck:
                conds[path] = versions[key]  # the server's check alone: no read first
            elif versions.get(key):
                # checked before the request too: the emulators ignore a delete's precondition
                # (S3, GCS and Azure themselves enforce the one sent with it)
                try:
                    cur = self._head(key)
                except StoreFailure as e:
                    results[i] = DeleteResult(key=key, ok=False, code=e.code, message=str(e))
                    continue
                if cur is None:
                    results[i] = DeleteResult(key=key, ok=True, existed=False)
                    continue
                if cur.version_token != versions[key]:
                    results[i] = DeleteResult(key=key, ok=False, code=StoreError.PRECONDITION_FAILED,
                                              message=f"{key}: changed since it was read; kept")
                    continue
                conds[path] = versions[key]
            send.setdefault(path, []).append(i)
        failed: Dict[str, RemoteError] = {}
        if send:
            try:
                failed = self.ops.delete_coded(list(send), conds)
            except RemoteError as e:
                failed = {p: e for p in send}
        for path, positions in send.items():
            err = failed.get(path)
            for i in positions:
                results[i] = (DeleteResult(key=keys[i], ok=True) if err is None else
                              DeleteResult(key=keys[i], ok=False, code=_code(err), message=f"{keys[i]}: {err}"))
        return [results[i] for i in range(len(keys))]

    def append(self, key: str, data: bytes, *, limit: Optional[int] = None, if_version: Optional[str] = None) -> str:
        path = self._path(key)
        # the object is read and rewritten whole: never past what one read takes
        cap = READ_ALL_LIMIT if limit is None else min(limit, READ_ALL_LIMIT)
        with _APPENDING_MU:
            mu = _APPENDING.setdefault(path, threading.Lock())
        with mu:  # appenders of this process take turns instead of losing preconditions to each other
            return self._append(key, path, data, cap, if_version)

    def _append(self, key: str, path: str, data: bytes, cap: int, if_version: Optional[str] = None) -> str:
        pause = 0.02
        for _ in range(APPEND_TRIES):
            with _coded(key):
                try:
                    info = self.ops.head(path)
                    if if_version is not None and (info is None or info.version_token != if_version):
                        # the writer's version is gone: no retry can bring it back
                        raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "not at the version its writer left; "
                                           "not appended" if info is not None else "no such object; not made")
                    if info is None:
                        return self.ops.put(path, bytes(data), if_absent=True)
                    # the size of the version the conditional put below is on: decided atomically
                    if info.size and info.size + len(data) + 1 > cap:
                        raise StoreFailure(StoreError.TOO_LARGE, key, f"an append past {cap} bytes; not written "
                                           "(a bucket append rewrites the object, so logs stay small)")
                    cur = self.rfs.read_range(key, 0, info.size) if info.size else b""
                    if len(cur) != info.size:
                        continue  # changed between the head and the read: the put would fail anyway
                    return self.ops.put(path, cur + on_a_new_line(cur[-1:], data), if_version=info.version_token)
                except RemoteError as e:
                    if e.code not in (StoreError.PRECONDITION_FAILED, StoreError.ALREADY_EXISTS):
                        raise
                    if if_version is not None:  # another writer won: the writer's version is gone
                        raise StoreFailure(StoreError.PRECONDITION_FAILED, key, "written by another meanwhile; "
                                           "not appended") from None
            time.sleep(pause * (1 + random.random()))  # another writer won: back off, read again
            pause = min(1.0, pause * 2)
        raise StoreFailure(StoreError.CONFLICT, key, f"lost to other writers {APPEND_TRIES} times; not appended")

    def mkdir(self, key: str) -> None:
        self._path(key)  # buckets have no folders: a key's parents exist once it does


def info_of(e: Entry) -> ObjectInfo:
    """A store's ``Entry`` as the listing's ``ObjectInfo`` the engine and the scan compare it with
    (its version the token preconditions take, its checksums those the store computed)."""
    return ObjectInfo(key=e.key, size=e.size, mtime=e.mtime, etag=e.version, checksums=dict(e.checksums),
                      headers=e.headers)


def listing_of(store: "ObjectStore", prefix: str = "") -> Dict[str, ObjectInfo]:
    """Every key under ``prefix`` of ``store`` (one paginated listing, ``list(every_key=True)``:
    a key no call can address and a staged write are seen, for the trust checks to keep them),
    keyed relative to the store's root, as ``ObjectInfo``."""
    return {e.key: info_of(e) for e in store.list(prefix, every_key=True)}


__all__ = ["ObjectStore", "BUCKET_CAPABILITIES", "LISTED_ONLY_CAPABILITIES", "STAGE_PREFIX", "APPEND_TRIES",
           "info_of", "listing_of"]
