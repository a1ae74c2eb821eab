"""One ``Store`` interface for every place a logdir or a vault can live: a POSIX folder, an S3,
GCS or Azure bucket.

The engine has grown two copies of itself, one over ``os`` and one over ``storage.remote``. This
interface is what both need, so that one engine can run over either (issue #26; the model is
restic's ``Backend`` and fsspec's ``AbstractFileSystem``, each run by one conformance suite:
``tests/contract/test_store.py``). Every method takes keys relative to the store's root,
``/``-separated; a key that would lead out of the root (``..``, absolute, empty, NUL) is refused
with ``StoreError.UNSAFE_KEY`` before anything is touched.

What differs between stores is declared, not discovered by failing: ``Store.capabilities``
(``Capabilities``) says whether a rename is atomic, whether hard links, fsync, version tokens,
file times and modes, open-writer detection, server-side copies and conditional writes exist,
and the conformance suite checks each declaration against behaviour.

Failures raise ``StoreFailure`` (an ``OSError``) carrying a ``codes.StoreError`` and the key;
batch deletes return one ``DeleteResult`` per key instead of raising. Callers branch on codes.

Implementations: ``store_posix.PosixStore`` and ``store_object.ObjectStore``; wrappers around
any store: ``CountingStore`` (calls per verb, bytes up and down) and ``ThrottledStore`` (a token
bucket on metadata operations). ``storage.stores.open_store(url_or_path)`` picks the implementation.

Why one module: the interface, its value types and the wrappers that forward each of its
methods change together; a wrapper kept elsewhere would silently miss a method or an argument
the interface gains (``copy``'s ``source``/``detail``, ``retention``).
"""
from __future__ import annotations

import abc
import io
import threading
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import throttle
from tb_footprint_plugin.storage.throttle import TokenBucket

#: the largest object ``read_all`` reads unless told otherwise (state files are far smaller;
#: a planted huge "journal" must not exhaust memory)
READ_ALL_LIMIT = 64 << 20
#: names of writes in progress (a temporary file, a staged upload): never listed; a killed write
#: leaves one behind, which no reader takes for data
TMP_PREFIX = ".footprint-tmp-"
#: the part size of streaming uploads to buckets (memory of a put stays about one part)
STREAM_PART = 5 << 20

#: how far a writer's clock may be from a store's, in seconds: S3, GCS and Azure refuse a request
#: signed more than 15 minutes off their own clock, and listings give dates in whole seconds. A
#: time a writer recorded may run that far ahead of (or behind) the date a store gives its object:
#: the bucket Activity page's stopping rule and the shard partition's recent restores use it
CLOCK_SKEW = 15 * 60 + 1


class StoreFailure(OSError):
    """A store operation failed; ``code`` (``codes.StoreError``) says why, ``key`` names what."""

    def __init__(self, code: StoreError, key: str, message: str):
        super().__init__(f"{key}: {message}" if key else message)
        self.code = StoreError(code)
        self.key = key

    def __str__(self) -> str:  # the message alone (OSError's default adds "[Errno ...]")
        return self.args[0]


@dataclass(frozen=True)
class Capabilities:
    """What a store can do; the engine chooses its path from these, never from the store's type.

    ``rename_atomic``: ``replace`` is one atomic rename (else a copy and a delete, and a crash
    in between leaves both names). ``hard_link``: ``link`` exists. ``fsync``: writes are made
    durable by fsync (else a write is durable once the store acknowledged it). ``versions``:
    ``Entry.version`` tokens are enforced by the conditional operations. ``mtime_kept`` /
    ``mode_kept``: ``put_file(mtime_ns=, mode=)`` are kept (else objects are dated when written).
    ``open_writer_detection``: ``open_writers`` can tell which files a process holds open for
    writing. ``server_side_copy``: ``copy`` moves no bytes through this process.
    ``conditional_put``: if-absent and if-version writes are enforced. ``folders``: ``mkdir``
    makes something (buckets have only keys). ``append``: how ``append`` works
    (``"o_append"`` or ``"conditional_rewrite"``). ``append_limit``: the largest key an ``append``
    makes (a conditional rewrite reads the object whole: ``READ_ALL_LIMIT``), None where the store
    sets none of its own. ``retention_query``: ``retention`` can say
    whether deleted bytes stay stored (a bucket's versioning, lifecycle and soft delete); a
    folder cannot tell (its filesystem's snapshots are out of its sight). ``headers_kept``: an
    object's Content-Type and user metadata are said by ``stat`` (``Entry.headers``) and set by
    ``put``/``put_file(headers=)`` (an object store's; a folder has none: its files' mode and
    time are ``mode_kept``/``mtime_kept``).
    """

    rename_atomic: bool
    hard_link: bool
    fsync: bool
    versions: bool
    mtime_kept: bool
    mode_kept: bool
    open_writer_detection: bool
    server_side_copy: bool
    conditional_put: bool
    folders: bool
    append: str
    retention_query: bool = False
    append_limit: Optional[int] = None
    headers_kept: bool = False

    def to_dict(self) -> dict:
        """The capabilities as JSON (what a status or a dry run can show)."""
        return dict(self.__dict__)


#: the most user metadata (its keys and values, UTF-8) an object of each store takes (S3: 2 KB of
#: x-amz-meta-* headers; GCS and Azure: 8 KiB): what is recorded of an object and sent back is
#: never more (a manifest is untrusted: a larger record is dropped, never sent)
METADATA_LIMITS = {"s3": 2048, "gcs": 8192, "az": 8192}
#: the longest Content-Type recorded or sent
CONTENT_TYPE_LIMIT = 256
#: what ``checked_headers`` takes: the object's Content-Type and its user metadata, nothing else
HEADER_KEYS = ("content_type", "metadata")


def _printable(s: str) -> bool:
    """No control character (a CR or LF in a header value would start another header)."""
    return not any(ord(c) < 0x20 or ord(c) == 0x7f for c in s)


#: the stores whose metadata values travel as HTTP headers (ASCII only; S3 says others RFC 2047
#: encoded, in ASCII); GCS takes UTF-8 values in its JSON object resource
ASCII_METADATA = frozenset({"s3", "az"})


def checked_headers(doc, protocol: Optional[str] = None) -> "Tuple[Optional[dict], str, Optional[StoreError]]":
    """``doc`` (untrusted: a manifest's record, or what a store said of an object) as an object's
    headers for the store of ``protocol`` (``s3``, ``gcs``, ``az``; None: the strictest),
    ``({"content_type": str or None, "metadata": {str: str}}, "", None)``, or ``(None, why, code)``
    when it is not that (``NOT_SUPPORTED``: a control character, a value the store's headers cannot
    carry, an empty or non-token metadata key, another field) or larger than the store takes
    (``TOO_LARGE``: its ``METADATA_LIMITS``, user metadata in UTF-8, keys and values; a
    Content-Type past ``CONTENT_TYPE_LIMIT``): the one rule of what is recorded and what is ever sent."""
    limit = METADATA_LIMITS.get(protocol or "", min(METADATA_LIMITS.values()))
    ascii_only = protocol not in METADATA_LIMITS or protocol in ASCII_METADATA
    if not isinstance(doc, dict) or set(doc) - set(HEADER_KEYS):
        return None, "not a record of an object's Content-Type and metadata", StoreError.NOT_SUPPORTED
    ct, md = doc.get("content_type"), doc.get("metadata")
    if ct is not None and (not isinstance(ct, str) or not ct or not ct.isascii() or not _printable(ct)):
        return None, "its Content-Type is not a header value", StoreError.NOT_SUPPORTED
    if ct is not None and len(ct) > CONTENT_TYPE_LIMIT:
        return None, f"its Content-Type is longer than {CONTENT_TYPE_LIMIT} characters", StoreError.TOO_LARGE
    md = {} if md is None else md
    if not isinstance(md, dict):
        return None, "its metadata is not a mapping", StoreError.NOT_SUPPORTED
    size = 0
    for k, v in md.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or \
                not all(c.isascii() and (c.isalnum() or c in "-_.") for c in k) or not _printable(v) or \
                (ascii_only and not v.isascii()):
            return None, f"its metadata {str(k)[:40]!r} is not a header name and value", StoreError.NOT_SUPPORTED
        size += len(k.encode()) + len(v.encode())
    if size > limit:
        return None, f"its metadata is {size} bytes, more than the {limit} the store takes", StoreError.TOO_LARGE
    return {"content_type": ct, "metadata": dict(md)}, "", None


@dataclass(frozen=True)
class Entry:
    """One file or object: ``version`` changes whenever its bytes change (POSIX: inode, size and
    mtime; S3/Azure: ETag; GCS: generation). ``mtime`` is the file's time on POSIX and the time
    the object was written on a bucket; ``mode`` only where the store keeps one."""

    key: str
    size: int
    mtime: float
    version: str
    checksums: Dict[str, str] = field(default_factory=dict)  # e.g. {'md5': ..., 'crc32c': ...} (base64)
    mode: Optional[int] = None
    #: an object's Content-Type and user metadata (``checked_headers``' shape) where the store's
    #: answer gave them (a head; a GCS or Azure listing), None where it did not (an S3 listing, a file)
    headers: Optional[dict] = field(default=None, compare=False)  # not what tells two versions apart


@dataclass(frozen=True)
class DeleteResult:
    """One key of a batch delete: ``ok`` when the key is gone (deleted now or already absent:
    deletes are idempotent), else ``code`` and ``message`` say why it stays."""

    key: str
    ok: bool
    existed: Optional[bool] = None  # True/False where the store says, None where it cannot tell
    code: Optional[StoreError] = None
    message: str = ""


@dataclass(frozen=True)
class Copied:
    """A copy's destination (``copy(detail=True)``): its version, and the checksums the store
    computed for it ({} where it computes none, and for a copy it made in parts): what a caller
    compares with the source's checksums instead of reading both."""

    version: str
    checksums: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplaceResult:
    """``replace`` of one key by another: the new version at the destination, and whether the
    store did it atomically (a crash during a non-atomic replace leaves both keys, never none)."""

    version: str
    atomic: bool


#: the verbs ``CountingStore`` and ``ThrottledStore`` know; the metadata ones are throttled
VERBS = ("list", "stat", "read", "put", "copy", "replace", "link", "delete", "append", "mkdir", "writers")
METADATA_VERBS = frozenset({"list", "stat", "put", "copy", "replace", "link", "delete", "append", "mkdir"})


def check_key(key, *, allow_root: bool = False) -> str:
    """``key`` if it is a plain relative key ('a/b c/ü.txt'); ``StoreFailure(UNSAFE_KEY)`` for
    anything that could lead out of the root or name it twice (``..``, ``.``, empty parts, an
    absolute path, a NUL, a backslash-free Windows drive is not special). ``allow_root`` lets
    '' name the root itself (a listing prefix)."""
    if allow_root and key in ("", "."):
        return ""
    if not isinstance(key, str) or not key:
        raise StoreFailure(StoreError.UNSAFE_KEY, repr(key), "not a key")
    if "\x00" in key:
        raise StoreFailure(StoreError.UNSAFE_KEY, repr(key), "a key with a NUL byte")
    if key.startswith("/"):  # '~x' is a plain key: stores join every key under their root, never expand it
        raise StoreFailure(StoreError.UNSAFE_KEY, key, "an absolute path where a key under the store's root belongs")
    parts = key.split("/")
    if ".." in parts:
        raise StoreFailure(StoreError.UNSAFE_KEY, key, "leads out of the store's root ('..')")
    if any(p in ("", ".") for p in parts):
        raise StoreFailure(StoreError.UNSAFE_KEY, key, "not a plain key (empty or '.' part)")
    return key


class RangeReader(io.RawIOBase):
    """A read-only, seekable file over ``[0, end)`` of one file or object; each ``read`` is one
    ``fetch(start, stop)`` of at most the requested size (one pread, one ranged GET), so memory
    stays at the caller's chunk whatever the size. Positions are offsets in the whole object."""

    def __init__(self, fetch: Callable[[int, int], bytes], end: int, name: str = "",
                 on_close: Optional[Callable[[], None]] = None):
        super().__init__()
        self._fetch = fetch
        self._end = end
        self._pos = 0
        self._on_close = on_close
        self.name = name
        #: the object's headers (``Entry.headers``) where its store's first read answered them
        #: (``ObjectStore.open_read(headers=True)``), else None
        self.headers: Optional[dict] = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._end}.get(whence)
        if base is None:
            raise ValueError(f"bad whence {whence}")
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        n = self._end - self._pos if size is None or size < 0 else min(size, self._end - self._pos)
        if n <= 0:
            return b""
        data = self._fetch(self._pos, self._pos + n)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed and self._on_close is not None:
            self._on_close()
        super().close()


Source = Union[str, BinaryIO]


class Store(abc.ABC):
    """A flat namespace of keys under one root (see the module docstring)."""

    #: where the store is (a path or a URL), for messages
    location: str
    capabilities: Capabilities

    # --- reading -----------------------------------------------------------------------------
    @abc.abstractmethod
    def list(self, prefix: str = "", *, every_key: bool = False, shallow: bool = False) -> Iterator[Entry]:
        """Every file under ``prefix`` (one recursive listing; paginated by the store), in no
        promised order. Only regular files and objects: folders, symlinks and special files are
        not entries. A missing prefix lists nothing.

        ``shallow``: only the files directly in ``prefix``, none of its subfolders' (a state
        folder's own logs beside its vault). A folder reads only itself; a bucket has no folders,
        so its listing is the same recursive one, filtered.

        ``every_key``: also what a listing finds that is no data of the store's own: keys no other
        call can address (a bucket's planted ``a/../b`` or ``a//b``: ``Entry.key`` is the name as
        listed, to be seen and kept, never passed back to a call) and the names of writes in
        progress (``TMP_PREFIX``), which are otherwise left out. What a caller that must not
        overlook anything (trust checks, a run's current objects) lists; still one listing."""

    @abc.abstractmethod
    def stat(self, key: str) -> Optional[Entry]:
        """The entry of ``key``, or None when there is none (a folder is none; a symlink or a
        special file: ``StoreFailure``)."""

    def version(self, key: str) -> Optional[str]:
        """The version of the file or object at ``key`` (``Entry.version``: POSIX inode, size and
        mtime; S3/Azure ETag; GCS generation), None when nothing is there: the one "same version"
        rule of every store. Two looks at a key that give the same version saw the same bytes
        unchanged (a writer's append, a file made anew, an object written again each change it).
        Where ``stat`` says None for a thing that is not a file (a folder), this says
        ``StoreFailure(NOT_REGULAR)``: only an absent key is nothing; a link (a folder on the way
        included) is ``SYMLINK``, never followed."""
        e = self.stat(key)
        return None if e is None else e.version

    @abc.abstractmethod
    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key`` (shorter at its end, ``b''`` past it): one request."""

    @abc.abstractmethod
    def open_read(self, key: str, size: Optional[int] = None) -> RangeReader:
        """A seekable reader of ``key`` that reads ranges on demand (bounded memory).
        ``size`` (from a listing) spares a request; it must be the current size."""

    def read_all(self, key: str, limit: int = READ_ALL_LIMIT) -> bytes:
        """The whole of a small object (a state file); ``TOO_LARGE`` beyond ``limit`` bytes."""
        data = self.read_range(key, 0, limit + 1)
        if len(data) > limit:
            raise StoreFailure(StoreError.TOO_LARGE, key, f"larger than {limit} bytes; not read whole")
        return data

    # --- writing -----------------------------------------------------------------------------
    @abc.abstractmethod
    def put(self, key: str, data: bytes, *, if_absent: bool = False, if_version: Optional[str] = None,
            mode: Optional[int] = None) -> str:
        """Write ``data`` as ``key`` whole (readers see the old or the new bytes, never a mix) and
        durably; returns the new version. ``if_absent``: ``ALREADY_EXISTS`` when the key exists;
        ``if_version``: ``PRECONDITION_FAILED`` unless the key is at that version."""

    @abc.abstractmethod
    def put_file(self, key: str, src: Source, *, if_absent: bool = False, if_version: Optional[str] = None,
                 mtime_ns: Optional[int] = None, mode: Optional[int] = None,
                 whole_checksum: bool = False) -> Entry:
        """Stream a local file (a path) or a binary file object into ``key`` in bounded memory,
        with ``put``'s conditions; ``mtime_ns`` and ``mode`` are kept where the capabilities say.

        ``whole_checksum`` (a path, no condition): the entry's ``checksums`` are of the whole
        object where the store can compute one: an object store uploads it with its client's file
        uploader, one request up to that uploader's part size (64 MiB on S3 and Azure: S3's ETag
        is then the MD5, Azure computes the Content-MD5; GCS hashes every object), memory up to a
        part or two; a larger object goes in parts and carries no such checksum on S3 and Azure.
        (A streamed upload in small parts has none on S3 above a part, nor on Azure at all: its
        blocks are committed as a list.) A folder computes none (``{}``). ``NOT_SUPPORTED``
        with a condition or a file object."""

    @abc.abstractmethod
    def copy(self, src: str, dst: str, *, if_source_version: Optional[str] = None, if_absent: bool = False,
             if_version: Optional[str] = None, source: Optional["Store"] = None, size: Optional[int] = None,
             precheck: bool = True, listed_absent: bool = False, detail: bool = False) -> Union[str, Copied]:
        """Copy ``src`` to ``dst`` (server side on buckets, with file time and mode on POSIX);
        ``if_source_version``: ``PRECONDITION_FAILED`` (and no ``dst`` written) when ``src``
        changed. Returns the version of ``dst`` (``detail``: a ``Copied``, with the checksums the
        store computed for the copy).

        ``source``: the store holding ``src`` when it is not this one (another prefix or bucket of
        the same object store, on the same client: still one server-side copy; another folder for
        a ``PosixStore``); ``NOT_SUPPORTED`` for a store of another kind. ``size``: ``src``'s
        size as a listing gave it (spares the metadata read a store makes to choose how to copy).
        ``precheck`` (``ObjectStore``, as ``delete``'s): False sends the source's condition with
        the copy alone, no read of ``src`` first (S3, GCS and Azure enforce it; on S3 a single-part
        copy's ETag is compared too, and a copy of a source that moved is removed and refused);
        ``listed_absent``: with ``if_absent``, the caller's fresh listing found no ``dst``, so no
        read of it is made first (the condition still goes with the copy). A store that checks
        conditions itself (``PosixStore``) always checks."""

    @abc.abstractmethod
    def replace(self, src: str, dst: str, *, if_source_version: Optional[str] = None,
                if_absent: bool = False, if_version: Optional[str] = None) -> ReplaceResult:
        """Move ``src`` to ``dst`` (over it unless ``if_absent``). POSIX: one atomic rename, the
        folders fsynced. Buckets: a conditional copy, then a delete of ``src`` conditional on the
        version copied; not atomic, and said so in the result."""

    def link(self, src: str, dst: str) -> Entry:
        """A second name for ``src`` (``ALREADY_EXISTS`` if ``dst`` exists); ``NOT_SUPPORTED``
        where ``capabilities.hard_link`` is False."""
        check_key(src), check_key(dst)  # a refused key is refused as such on every store
        raise StoreFailure(StoreError.NOT_SUPPORTED, dst, f"{self.location} has no hard links")

    @abc.abstractmethod
    def delete(self, keys: Iterable[str], versions: Optional[Dict[str, str]] = None, *,
               precheck: bool = True) -> List[DeleteResult]:
        """Delete ``keys`` in as few requests as the store allows; one result per key, in order
        (a missing key is ok: deletes are idempotent). ``versions``: delete a key only while it is
        at that version (``PRECONDITION_FAILED`` otherwise). Never raises for one key's failure.

        ``precheck`` (stores whose server takes the condition, ``ObjectStore``): each versioned
        key's version is also read before the request, so a server that ignores a delete's
        condition (moto, the GCS emulator) still keeps a key that moved; False sends the
        condition with the delete alone (no read: one request a batch, as the bucket engine's
        lock, journal and swap deletes always did), enforced by S3, GCS and Azure themselves.
        A store that checks versions itself (``PosixStore``, under its lock) always checks."""

    @abc.abstractmethod
    def append(self, key: str, data: bytes, *, limit: Optional[int] = None, if_version: Optional[str] = None) -> str:
        """Append ``data`` to ``key`` (created if missing) durably before returning; concurrent
        appends through stores of the same kind each land whole, in some order. Returns the new
        version. Whole lines (``data`` ending in a newline) after a last line left without its
        newline (a torn or planted one) start on a line of their own (``on_a_new_line``): glued
        onto it, the first of them would be lost with it.

        ``limit``: a key holding bytes is not taken past it: when its size + ``len(data)`` + 1
        (the newline a torn last line gets) would pass ``limit``, nothing is written and
        ``StoreFailure(TOO_LARGE)`` naming the key is raised (an absent or empty key takes any
        first append). The size is the one the append itself sees where it is atomic (a folder:
        under its ``flock``; a bucket: the version its conditional rewrite is on), so appenders
        that each found room never take a key past its limit together. Nor past the store's own
        ``capabilities.append_limit`` (a bucket's append rewrites the whole object), whatever
        ``limit`` says.

        ``if_version``: appended only while the key is at that version, the one its writer's own
        last write returned; else ``PRECONDITION_FAILED``, nothing written, and a missing key is
        never made. Checked where the append is atomic (a folder: under its ``flock``, with the
        file's ``fstat``; a bucket: the version its conditional rewrite is on): a writer that
        holds the version holds the key, so its appends go to what it wrote only (a journal:
        one file from its first record to its last, never one put in its place)."""

    def mkdir(self, key: str) -> None:
        """Make the folder ``key`` and its parents where the store has folders; a no-op on
        buckets (a key's parents exist as soon as the key does)."""

    def open_writers(self, keys: Iterable[str]) -> Optional[Dict[str, List[str]]]:
        """key -> the processes holding it open for writing (one line each), for those held; None
        where the store cannot tell (``capabilities.open_writer_detection`` False)."""
        return None

    def retention(self) -> Optional[dict]:
        """Whether bytes deleted from the store stay stored (and billed) for a while:
        ``{"versioning": bool, "noncurrent_expiry_days": int|None, "soft_delete_seconds":
        int|None}`` of the store's bucket (and ``"error"`` when the store would not say); None
        where the store cannot tell (``capabilities.retention_query`` False)."""
        return None

    def prepare_writes(self) -> None:
        """Make now what this store's conditional writes need (an object store's client), for a
        caller that will write (a vault's blob store): its memory is then the same whatever it
        stores. A no-op where there is nothing to make."""

    def private_folders(self) -> None:
        """From now on the folders this store makes on the way to a key it writes are private
        (0700, ``storage.private.make_private_at``), as every state folder of the tool is: for a
        store holding only the tool's state (a ``BlobStore``'s layout: a bucket's blob folder, a
        vault's packs). One there already is left as it is. A no-op where the store has no folders."""

    # --- accounting --------------------------------------------------------------------------
    def close(self) -> None:
        """Release what the store holds (clients, descriptors)."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# wrappers: the same interface, around any store
# --------------------------------------------------------------------------------------------
class Wrapper(Store):
    """Forwards every call to ``inner``; subclasses hook ``_before``/``_after``."""

    def __init__(self, inner: Store):
        self.inner = inner
        self.location = inner.location
        self.capabilities = inner.capabilities

    def __getattr__(self, name):  # the inner store's own extras (``stats``, ``root``, ...)
        return getattr(self.inner, name)

    def private_folders(self) -> None:  # a setting, not a call to count: forwarded as it is
        self.inner.private_folders()

    def _before(self, verb: str, n: int = 1) -> None:
        """Called before each ``n`` operations of ``verb``."""

    def _after(self, verb: str, *, down: int = 0, up: int = 0) -> None:
        """Called after a call of ``verb`` ended (successfully or not), with the bytes it moved."""

    def _call(self, verb: str, fn, *args, n: int = 1, up: int = 0, **kw):
        self._before(verb, n)
        try:
            return fn(*args, **kw)
        finally:
            self._after(verb, up=up)

    def list(self, prefix: str = "", *, every_key: bool = False, shallow: bool = False) -> Iterator[Entry]:
        self._before("list")
        try:
            yield from self.inner.list(prefix, every_key=every_key, shallow=shallow)
        finally:
            self._after("list")

    def stat(self, key):
        return self._call("stat", self.inner.stat, key)

    def version(self, key):
        return self._call("stat", self.inner.version, key)

    def read_range(self, key, start, end):
        self._before("read")
        data = b""
        try:
            data = self.inner.read_range(key, start, end)
            return data
        finally:
            self._after("read", down=len(data))

    def open_read(self, key, size=None):
        n = 0 if size is not None else 1  # without a listed size, opening costs a stat
        self._before("stat", n)
        try:
            inner = self.inner.open_read(key, size)
        finally:
            if n:
                self._after("stat")

        def fetch(start: int, stop: int) -> bytes:
            self._before("read")
            got = b""
            try:
                inner.seek(start)
                got = inner.read(stop - start)
                return got
            finally:
                self._after("read", down=len(got))

        return RangeReader(fetch, inner.seek(0, io.SEEK_END), inner.name, on_close=inner.close)

    def read_all(self, key, limit=READ_ALL_LIMIT):
        self._before("read")
        data = b""
        try:
            data = self.inner.read_all(key, limit)
            return data
        finally:
            self._after("read", down=len(data))

    def put(self, key, data, **kw):
        return self._call("put", self.inner.put, key, data, up=len(data), **kw)

    def put_file(self, key, src, **kw):
        self._before("put")
        entry = None
        try:
            entry = self.inner.put_file(key, src, **kw)
            return entry
        finally:
            self._after("put", up=entry.size if entry is not None else 0)

    def copy(self, src, dst, **kw):
        return self._call("copy", self.inner.copy, src, dst, **kw)

    def replace(self, src, dst, **kw):
        return self._call("replace", self.inner.replace, src, dst, **kw)

    def link(self, src, dst):
        return self._call("link", self.inner.link, src, dst)

    def delete(self, keys, versions=None, *, precheck=True):
        keys = [keys] if isinstance(keys, str) else list(keys)
        return self._call("delete", self.inner.delete, keys, versions, n=max(1, len(keys)), precheck=precheck)

    def append(self, key, data, *, limit=None, **kw):  # ``kw``: a store's own options (a state folder's)
        return self._call("append", self.inner.append, key, data, up=len(data), limit=limit, **kw)

    def mkdir(self, key):
        return self._call("mkdir", self.inner.mkdir, key)

    def open_writers(self, keys):
        return self._call("writers", self.inner.open_writers, keys)

    def retention(self):
        return self._call("stat", self.inner.retention)

    def close(self) -> None:
        self.inner.close()


def on_a_new_line(last: bytes, data: bytes) -> bytes:
    """What ``Store.append`` writes of ``data`` after a key whose last byte is ``last`` (empty:
    nothing there): whole lines (``data`` ending in a newline) get a newline before them when the
    last line there has none, so a line torn by a crash or planted without its newline stays a
    line of its own (named damaged by its reader) instead of swallowing the first line appended."""
    return b"\n" + data if last and last != b"\n" and data.endswith(b"\n") else data


def unwrapped(store: Store) -> Store:
    """The store below every ``Wrapper`` around ``store`` (what a ``copy``'s ``source`` is compared as)."""
    while isinstance(store, Wrapper):
        store = store.inner
    return store


class StoreStats:
    """Calls per store verb and the bytes moved through the interface; thread-safe."""

    def __init__(self) -> None:
        self.calls: Dict[str, int] = {v: 0 for v in VERBS}
        self.bytes_down = 0
        self.bytes_up = 0
        self._lock = threading.Lock()

    def add(self, verb: str, n: int = 1, *, down: int = 0, up: int = 0) -> None:
        """Count ``n`` calls of ``verb`` and the bytes they moved."""
        with self._lock:
            self.calls[verb] = self.calls.get(verb, 0) + n
            self.bytes_down += down
            self.bytes_up += up

    @property
    def requests(self) -> int:
        """Calls of every verb."""
        return sum(self.calls.values())

    def to_dict(self) -> dict:
        """Calls per verb, their total and the bytes, as JSON."""
        with self._lock:
            return {**self.calls, "requests": sum(self.calls.values()), "bytes_down": self.bytes_down,
                    "bytes_up": self.bytes_up}


class CountingStore(Wrapper):
    """Counts the calls of each verb and the bytes read and written through ``inner``
    (``counts``), the same counters for every store; the requests the inner store issued to its
    backend (list pages, heads, ranged GETs, syscalls of a POSIX folder) stay in ``inner.stats``,
    a ``storage.remote.RequestStats`` on every store."""

    def __init__(self, inner: Store):
        super().__init__(inner)
        self.counts = StoreStats()

    def _after(self, verb: str, *, down: int = 0, up: int = 0) -> None:
        self.counts.add(verb, down=down, up=up)


class ThrottledStore(Wrapper):
    """Every metadata operation through ``inner`` (listing, stat, put, copy, replace, link, delete
    per key, append, mkdir; not the data of ranged reads) takes a token of a
    ``storage.throttle.TokenBucket``: its own (``rate`` per second, or ``bucket``), else the
    process's one of ``--max-file-ops-per-second`` (``throttle.configure``; free when unset).
    A ``PosixStore`` already counts each of its system calls against the process's bucket."""

    def __init__(self, inner: Store, rate: Optional[float] = None, *, bucket: Optional[TokenBucket] = None):
        super().__init__(inner)
        self.bucket = bucket if bucket is not None else (TokenBucket(rate) if rate is not None else None)

    def _before(self, verb: str, n: int = 1) -> None:
        if n and verb in METADATA_VERBS:
            if self.bucket is None:
                throttle.op(n)
            else:
                self.bucket.take(n)


__all__ = ["ASCII_METADATA", "CLOCK_SKEW", "CONTENT_TYPE_LIMIT", "METADATA_LIMITS", "checked_headers", "Capabilities", "Copied", "CountingStore", "DeleteResult", "Entry", "RangeReader", "READ_ALL_LIMIT", "ReplaceResult",
           "STREAM_PART", "Store", "StoreFailure", "StoreStats", "ThrottledStore", "TMP_PREFIX", "VERBS", "Wrapper", "unwrapped",
           "check_key"]
