"""Remote logdirs (``s3://``, ``gs://``, ``az://`` and any other fsspec URL) for the storage layer.

Local paths never come here: they keep the POSIX code path. A remote logdir is opened once as a
:class:`RemoteFS`, which issues every request the tool makes to the store and counts it per verb
(list pages, ranged reads, heads, copies, puts, deletes, bytes down and up), so a dry run can say
what a reduction will cost and a benchmark can show what a scan did cost.

Credentials and endpoints come from where the ecosystem looks for them: the environment and
config files read by boto3/aiobotocore (``AWS_*``, ``~/.aws``), TensorBoard's ``S3_ENDPOINT``,
``STORAGE_EMULATOR_HOST``/application default credentials for GCS, and
``AZURE_STORAGE_CONNECTION_STRING``/``AZURE_STORAGE_ACCOUNT_NAME`` for Azure.

Listing is one recursive paginated listing of the logdir prefix (``list_objects_v2`` without a
delimiter on S3, ``objects.list`` without a delimiter on GCS, a flat ``list_blobs`` on Azure):
never a walk one directory level at a time. Event files are read by ranged GETs of one CHUNK
each through :class:`RangedReader`, never copied to local disk.
"""
from __future__ import annotations

import io
import math
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Dict, Iterator, Optional, Tuple

#: The bytes one ranged GET asks for when streaming an event file (the record reader's chunk).
READ_CHUNK = 1 << 20

#: URL scheme -> (fsspec protocol, the pip extra that installs it)
SCHEMES: Dict[str, Tuple[str, str]] = {
    "s3": ("s3", "s3"),
    "s3a": ("s3", "s3"),
    "gs": ("gcs", "gcs"),
    "gcs": ("gcs", "gcs"),
    "az": ("az", "azure"),
    "abfs": ("az", "azure"),
    "abfss": ("az", "azure"),
}

#: Objects per listing page, as each service returns them (for request estimates).
LIST_PAGE = {"s3": 1000, "gcs": 1000, "az": 5000}
#: Keys one batched delete request takes (S3 DeleteObjects); stores without batch delete: 1.
DELETE_BATCH = {"s3": 1000, "gcs": 1, "az": 256}


class RemoteError(OSError):
    """A remote store could not be reached or refused a request; ``code`` says what kind."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def split_scheme(path: str) -> Tuple[Optional[str], str]:
    """(scheme, rest) for ``scheme://rest``; (None, path) for a local path."""
    if "://" not in path:
        return None, path
    scheme, rest = path.split("://", 1)
    return scheme.lower(), rest


def protocol_of(url: str) -> str:
    """The fsspec protocol ('s3', 'gcs', 'az', ...) of a remote URL."""
    scheme, _ = split_scheme(url)
    return SCHEMES.get(scheme or "", (scheme or "file", None))[0]


def is_remote(path: str) -> bool:
    """True for a URL that names something other than the local filesystem."""
    scheme, _ = split_scheme(os.fspath(path))
    return scheme is not None and scheme != "file"


@dataclass
class ObjectInfo:
    """One object found by a listing."""

    key: str  # relative to the listed root, '/'-separated
    size: int
    mtime: float
    etag: str = ""
    generation: str = ""  # GCS generation, S3 version id where listed; '' otherwise
    checksums: Dict[str, str] = field(default_factory=dict)  # e.g. {'md5': ..., 'crc32c': ...}

    @property
    def version_token(self) -> str:
        """What changes whenever the object's bytes change: generation, else ETag."""
        return self.generation or self.etag


@dataclass
class RequestStats:
    """Requests issued to a store, per verb, and the bytes moved; thread-safe counters."""

    list: int = 0
    read: int = 0
    head: int = 0
    copy: int = 0
    put: int = 0
    delete: int = 0
    bytes_down: int = 0
    bytes_up: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, verb: str, n: int = 1, *, down: int = 0, up: int = 0) -> None:
        with self._lock:
            setattr(self, verb, getattr(self, verb) + n)
            self.bytes_down += down
            self.bytes_up += up

    @property
    def requests(self) -> int:
        return self.list + self.read + self.head + self.copy + self.put + self.delete

    def to_dict(self) -> dict:
        return {"list": self.list, "read": self.read, "head": self.head, "copy": self.copy,
                "put": self.put, "delete": self.delete, "requests": self.requests,
                "bytes_down": self.bytes_down, "bytes_up": self.bytes_up}


def _mtime(info: dict) -> float:
    for k in ("LastModified", "last_modified", "updated", "mtime", "timeCreated", "created"):
        v = info.get(k)
        if v is None:
            continue
        if isinstance(v, datetime):
            return (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).timestamp()
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


def _checksums(info: dict) -> Dict[str, str]:
    out = {}
    for src, name in (("crc32c", "crc32c"), ("md5Hash", "md5"), ("ChecksumSHA256", "sha256"),
                      ("ChecksumCRC32C", "crc32c")):
        v = info.get(src)
        if v:
            out[name] = str(v)
    cs = info.get("content_settings") or {}
    md5 = cs.get("content_md5") if isinstance(cs, dict) else None
    if md5:
        import base64

        out["md5"] = base64.b64encode(bytes(md5)).decode("ascii")
    return out


def _s3_kwargs() -> dict:
    """s3fs options: TensorBoard's S3_ENDPOINT counts when AWS_ENDPOINT_URL is not set
    (botocore reads AWS_ENDPOINT_URL itself)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") \
        or os.environ.get("S3_ENDPOINT")
    kw: dict = {}
    if endpoint:
        if "://" not in endpoint:  # TensorFlow's S3_ENDPOINT was host[:port]
            use_https = os.environ.get("S3_USE_HTTPS", "1") not in ("0", "false")
            endpoint = ("https://" if use_https else "http://") + endpoint
        kw["endpoint_url"] = endpoint
    return kw


def _gcs_kwargs() -> dict:
    # gcsfs 2026.x probes every bucket's type over gRPC unless told not to; with no way to
    # reach that endpoint it stalls ~60 s. Plain buckets need no probe.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        # An emulator takes no credentials; looking for them would probe the cloud metadata server.
        return {"token": "anon"}
    return {}


def _az_kwargs() -> dict:
    kw: dict = {}
    conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if conn:
        kw["connection_string"] = conn
    elif os.environ.get("AZURE_STORAGE_ACCOUNT_NAME"):
        kw["account_name"] = os.environ["AZURE_STORAGE_ACCOUNT_NAME"]
        if os.environ.get("AZURE_STORAGE_ACCOUNT_KEY"):
            kw["account_key"] = os.environ["AZURE_STORAGE_ACCOUNT_KEY"]
        else:
            kw["anon"] = False  # DefaultAzureCredential
    return kw


_KWARGS = {"s3": _s3_kwargs, "gcs": _gcs_kwargs, "az": _az_kwargs}


def filesystem(url: str):
    """(fsspec filesystem, protocol, root path without scheme) for a remote URL.

    Raises :class:`RemoteError` with code ``missing_extra`` naming the pip extra to install
    when the scheme's package is absent.
    """
    scheme, rest = split_scheme(url)
    if scheme is None:
        raise ValueError(f"{url} is a local path, not a URL")
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec comes with every extra
        raise RemoteError("missing_extra", f"{url}: install tb-footprint-plugin[{SCHEMES.get(scheme, ('', 's3'))[1]}]")
    proto, extra = SCHEMES.get(scheme, (scheme, None))
    kwargs = _KWARGS.get(proto, dict)()
    try:
        fs = fsspec.filesystem(proto, **kwargs)
    except ImportError as e:
        hint = f"pip install 'tb-footprint-plugin[{extra}]'" if extra else f"install the fsspec backend for {scheme}://"
        raise RemoteError("missing_extra", f"{url}: {scheme}:// needs {e.name or 'a package'}: {hint}") from e
    except ValueError as e:
        raise RemoteError("unknown_scheme", f"{url}: no filesystem for {scheme}:// ({e})") from e
    root = rest.strip("/")
    if not root:
        raise ValueError(f"{url}: name a bucket")
    return fs, proto, root


class RemoteFS:
    """A remote logdir's filesystem: every request the tool makes goes through here and is counted."""

    def __init__(self, url: str, stats: Optional[RequestStats] = None):
        self.url = url.rstrip("/")
        self.scheme, _ = split_scheme(self.url)
        self.fs, self.protocol, self.root = filesystem(self.url)
        self.stats = stats or RequestStats()

    # --- names ------------------------------------------------------------------------------
    def path(self, rel: str = "") -> str:
        """Store path (no scheme) of ``rel`` under the root; '' or '.' is the root itself."""
        rel = rel.strip("/")
        if rel in ("", "."):
            return self.root
        parts = rel.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"{rel}: not a plain relative key under {self.url}")
        return f"{self.root}/{rel}"

    def url_of(self, rel: str = "") -> str:
        return f"{self.scheme}://{self.path(rel)}"

    # --- listing ----------------------------------------------------------------------------
    def list_tree(self, rel: str = "") -> Dict[str, ObjectInfo]:
        """Every object under ``rel`` (one recursive paginated listing), keyed by path relative
        to the root. Raises ``FileNotFoundError`` when the bucket does not exist."""
        base = self.path(rel)
        self.fs.invalidate_cache(base)
        try:
            found = self.fs.find(base, detail=True, withdirs=False)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise RemoteError("list_failed", f"{self.url_of(rel)}: listing failed ({e})") from e
        finally:
            self.fs.invalidate_cache(base)
        out: Dict[str, ObjectInfo] = {}
        plen = len(self.root) + 1
        for name, info in found.items():
            name = name.rstrip("/")
            if info.get("type") == "directory" or not name.startswith(self.root + "/"):
                continue
            key = name[plen:]
            if not key or key.endswith("/"):
                continue  # zero-byte "folder" markers some tools create are not files
            out[key] = ObjectInfo(
                key=key,
                size=int(info.get("size") or 0),
                mtime=_mtime(info),
                etag=str(info.get("ETag") or info.get("etag") or "").strip('"'),
                generation=str(info.get("generation") or info.get("VersionId") or info.get("version_id") or ""),
                checksums=_checksums(info),
            )
        pages = max(1, math.ceil(len(found) / LIST_PAGE.get(self.protocol, 1000)))
        self.stats.add("list", pages)
        return out

    def exists(self) -> bool:
        """True when the root prefix holds at least one object or is a bucket."""
        try:
            return self.fs.exists(self.root)
        finally:
            self.stats.add("head")

    # --- reading ----------------------------------------------------------------------------
    def read_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object: one ranged GET."""
        data = self.fs.cat_file(self.path(rel), start=start, end=end)
        self.stats.add("read", down=len(data))
        return data

    def open_ranged(self, rel: str, size: int, chunk: int = READ_CHUNK) -> "RangedReader":
        """A seekable binary reader of ``rel`` that fetches ranges on demand (no local copy)."""
        return RangedReader(self, rel, size, chunk)

    def read_bytes(self, rel: str) -> bytes:
        data = self.fs.cat_file(self.path(rel))
        self.stats.add("read", down=len(data))
        return data

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Put a small object (state files: cache, journal, manifests) in one request."""
        self.fs.pipe_file(self.path(rel), data)
        self.stats.add("put", up=len(data))


class RangedReader(io.RawIOBase):
    """A read-only, seekable file over one remote object; every ``read`` is one ranged GET of at
    most the requested size, so memory stays bounded by the caller's chunk, whatever the object's
    size. ``size`` comes from the listing, so opening costs no request."""

    def __init__(self, rfs: RemoteFS, rel: str, size: int, chunk: int = READ_CHUNK):
        super().__init__()
        self._rfs = rfs
        self._rel = rel
        self._size = size
        self._pos = 0
        self.chunk = chunk
        self.name = rfs.url_of(rel)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"bad whence {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def readinto(self, b) -> int:
        n = min(len(b), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._rfs.read_range(self._rel, self._pos, self._pos + n)
        got = len(data)
        b[:got] = data
        self._pos += got
        return got

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        n = min(size, self._size - self._pos)
        if n <= 0:
            return b""
        data = self._rfs.read_range(self._rel, self._pos, self._pos + n)
        self._pos += len(data)
        return data


def iter_chunks(reader: io.RawIOBase, chunk: int = READ_CHUNK) -> Iterator[bytes]:
    """Stream a reader in chunks of ``chunk`` bytes."""
    while True:
        data = reader.read(chunk)
        if not data:
            return
        yield data
