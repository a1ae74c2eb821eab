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

Why one module: one client, ``RemoteFS`` over fsspec, with its request
counting (``RequestStats``), its per-store operations (``_S3Ops``, ``_GCSOps``, ``_AzureOps``) and
its failure codes (``RemoteError``); every object-store request goes through it, so the request
economy and the error vocabulary of s3, gs and az are kept in one place.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import io
import json
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.store import RangeReader, checked_headers

#: The bytes one ranged GET asks for when streaming an event file (the record reader's chunk).
READ_CHUNK = 1 << 20
T = TypeVar("T")
R = TypeVar("R")

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


#: ``RemoteError.code`` of a store whose client found no credentials (``codes.StoreError.NO_CREDENTIALS``)
NO_CREDENTIALS = StoreError.NO_CREDENTIALS
#: ``RemoteError.code`` of a request the store refused (``codes.StoreError.PERMISSION``)
REFUSED = StoreError.PERMISSION
#: ``RemoteError.code`` of a read of an object in an archive class (``codes.StoreError.ARCHIVED``)
ARCHIVED = StoreError.ARCHIVED
#: the services' error codes (a field of their answer, never its words) for a read of an object in
#: an archive class not restored: S3's ``InvalidObjectState`` (GLACIER, DEEP_ARCHIVE, an archive
#: tier of Intelligent-Tiering; s3fs raises it as a ``PermissionError``), Azure's ``BlobArchived``
#: (409, the Archive tier before rehydration). A GCS ARCHIVE object reads as any other
_ARCHIVED_ERRORS = frozenset({"InvalidObjectState", "BlobArchived"})
#: The clients' exceptions that say no credentials were found, by class name along the MRO (the
#: clients are optional packages, imported only where their scheme is used): botocore's, google-auth's
#: application default credentials, azure-identity's DefaultAzureCredential.
_NO_CREDENTIALS_ERRORS = frozenset({"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError",
                                    "CredentialUnavailableError"})
#: What to set, per fsspec protocol, where the client looks for credentials.
CREDENTIALS_HINT: Dict[str, str] = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile of "
          "~/.aws/credentials (or of AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE), or run where an "
          "instance or task role is available",
    "gcs": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run "
           "`gcloud auth application-default login`",
    "az": "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY "
          "or AZURE_STORAGE_SAS_TOKEN (or with a login DefaultAzureCredential finds: `az login`, a managed identity)",
}


def credentials_missing(e: Optional[BaseException], unsigned: bool = False) -> bool:
    """Whether ``e`` (or what it was raised from) is a client's "no credentials found"; decided by
    the exception's type and fields, never by its message: one of ``_NO_CREDENTIALS_ERRORS``;
    azure-core's ``ClientAuthenticationError`` raised by a credential that got no token (no HTTP
    response: a refusal by the service carries one); with ``unsigned`` (a GCS client that found no
    credentials and went anonymous, ``RemoteFS.unsigned``), the 401 its anonymous request got."""
    seen = 0
    while e is not None and seen < 8:
        names = {c.__name__ for c in type(e).__mro__}
        if names & _NO_CREDENTIALS_ERRORS:
            return True
        if "ClientAuthenticationError" in names and getattr(e, "response", True) is None:
            return True
        if unsigned and "HttpError" in names and getattr(e, "code", None) == 401:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def archived(e: Optional[BaseException]) -> bool:
    """Whether ``e`` (or what it was raised from) is the store's answer that the object is in an
    archive class and must be restored (rehydrated) before it is read (``_ARCHIVED_ERRORS``):
    botocore's ``ClientError`` by its ``Error.Code``, azure-core's ``HttpResponseError`` by its
    ``error_code``. Told by those fields, never by words; asked before ``refused`` (S3 answers
    it with a 403, which s3fs turns into a ``PermissionError``)."""
    seen = 0
    while e is not None and seen < 8:
        names = {c.__name__ for c in type(e).__mro__}
        if "ClientError" in names:
            err = (getattr(e, "response", None) or {}).get("Error")
            if isinstance(err, dict) and err.get("Code") in _ARCHIVED_ERRORS:
                return True
        if "HttpResponseError" in names and getattr(e, "error_code", None) in _ARCHIVED_ERRORS:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def refused(e: BaseException) -> bool:
    """Whether ``e`` is the store's refusal of a request (401/403), whichever client raised it and
    however: s3fs's ``PermissionError`` (its translation of a 403), botocore's ``ClientError``,
    gcsfs's ``HttpError`` and its 403 as a plain ``OSError`` (``gcs_forbidden``), azure-core's
    ``HttpResponseError`` (``ClientAuthenticationError`` among them) with the service's response.
    Told by type and status, never by words. Callers ask ``credentials_missing`` first (an
    unsigned request's 401 is that); ``shared_error`` is the one place both are asked."""
    if isinstance(e, PermissionError):
        return True
    names = {c.__name__ for c in type(e).__mro__}
    if "ClientError" in names:  # botocore: the status is in the parsed response
        status = (getattr(e, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    elif "HttpResponseError" in names:  # azure-core: a refusal carries the service's response
        status = getattr(e, "status_code", None) if getattr(e, "response", None) is not None else None
    elif "HttpError" in names:  # gcsfs
        status = getattr(e, "code", None)
    else:
        status = None
    return status in (401, 403) or gcs_forbidden(e)


def shared_error(e: BaseException, url: str, protocol: str, what: str, unsigned: bool = False) -> Optional[RemoteError]:
    """The coded error every store and every call says alike, asked before any store's or call's
    own mapping (the conditional clients' ``_Ops._err``, a listing, the ``RemoteFS`` methods): the
    client found no credentials (``no_credentials``, naming the logdir's ``url``), the object is
    archived (``archived``: an archive class not restored, naming ``what``), or the store refused
    the request (``permission_denied``, naming ``what``). None for any other error."""
    if credentials_missing(e, unsigned):
        return no_credentials(url, protocol, e)
    if archived(e):
        return RemoteError(ARCHIVED, f"{what}: archived: the store keeps the object in an archive class and reads "
                                     f"it only once it is restored ({type(e).__name__})")
    if refused(e):
        return RemoteError(REFUSED, f"{what}: the store refused the request ({e})")
    return None


def gcs_forbidden(e: BaseException) -> bool:
    """Whether ``e`` is gcsfs's answer to a 403: a plain ``OSError`` (no subclass, no errno) raised
    by ``gcsfs.retry.validate_response``, which raises none other (a 404 is ``FileNotFoundError``, a
    412 ``FileExistsError``, a 502 requests' ``ProxyError``, the rest ``HttpError``). Told by its
    type and where it was raised, never by its words ("Forbidden: ...")."""
    if type(e) is not OSError or e.errno is not None:
        return False
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "validate_response" and \
        tb.tb_frame.f_globals.get("__name__") == "gcsfs.retry"


def server_failed(e: BaseException) -> bool:
    """Whether ``e`` is a client's error that is no ``OSError`` and carries the store's HTTP status
    (gcsfs's ``HttpError``: a 5xx, or any status no other rule took), to be coded
    ``store_error`` rather than escape every ``OSError`` catch."""
    return not isinstance(e, OSError) and "HttpError" in {c.__name__ for c in type(e).__mro__} and \
        isinstance(getattr(e, "code", None), int)


def no_credentials(url: str, protocol: str, e: Optional[BaseException], why: Optional[str] = None) -> RemoteError:
    """The coded error of a request to ``url`` its client could not sign: names the URL, why (the
    client's error type, or ``why``) and what to set."""
    scheme, _ = split_scheme(url)
    hint = CREDENTIALS_HINT.get(protocol, f"configure the credentials of the {scheme}:// client")
    return RemoteError(NO_CREDENTIALS, f"{url}: no credentials for {scheme}:// were found "
                                       f"({why or type(e).__name__}); {hint}")


def _credentials_named(method):
    """A ``RemoteFS`` method whose client's "no credentials found" is raised as the coded
    ``RemoteError(no_credentials)`` naming the logdir's URL; every other error as it was."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except RemoteError:
            raise
        except Exception as e:  # noqa: BLE001 - only the clients' credential errors are translated
            shared = shared_error(e, self.url, self.protocol, self.url, getattr(self, "unsigned", False))
            if shared is not None:
                raise shared from e
            if server_failed(e):
                raise RemoteError(StoreError.STORE_ERROR, f"{self.url}: the store failed the request "
                                  f"({getattr(e, 'code', '')} {e})") from e
            raise
    return wrapper


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


def is_bucket_url(path: str) -> bool:
    """True for an object-store URL the bucket verbs handle (s3://, gs://, az:// and their aliases)."""
    scheme, rest = split_scheme(os.fspath(path))
    return scheme in SCHEMES and bool(rest.strip("/"))


def is_remote(path: str) -> bool:
    """True for a URL that names something other than the local filesystem."""
    scheme, _ = split_scheme(os.fspath(path))
    return scheme is not None and scheme != "file"


def is_folder_marker(name: str, info: dict) -> bool:
    """Whether a listed object (its key as stored, the client's info) is a folder marker: a 0-byte
    key ending in "/", which the S3 and GCS consoles' "Create folder", rclone, s3fs ``mkdir`` and
    azcopy write. No file of a run: the one rule of every store's listing (review R10 F2), so the
    plan, a retirement's inventory and its settle see none, scan sizes are the same, and nothing
    of ours ever copies, deletes or puts one back (a marker stays where its tool put it)."""
    return name.endswith("/") and not int(info.get("size") or 0)


def az_named(container: str, names: List[str], infos: List[dict], base: str) -> Dict[str, dict]:
    """adlfs's details of a listing's blobs (``_details``, a private call) by each blob's key as
    stored: adlfs strips a trailing "/" from the name, which tells a folder marker from a file
    (``is_folder_marker``), so each blob's own name is put back. The details are one a blob, in
    its order (adlfs 2026.8); each pair is checked to name the same blob (the detail's name is the
    blob's with its trailing "/" stripped), so another order or count in another adlfs never pairs
    a marker's name with another blob: the listing fails, coded ``LIST_FAILED``, naming ``base``."""
    if len(names) != len(infos):
        raise RemoteError(StoreError.LIST_FAILED, f"az://{base}: listing failed (the client detailed "
                          f"{len(infos)} of {len(names)} blobs listed)")
    out: Dict[str, dict] = {}
    for name, info in zip(names, infos):
        key = f"{container}/{name}"
        if str(info.get("name", "")).rstrip("/") != key.rstrip("/"):
            raise RemoteError(StoreError.LIST_FAILED, f"az://{base}: listing failed (the client's details of "
                              f"{key!r} name {info.get('name')!r})")
        if info.get("type") == "file":
            info["name"] = key
            out[key] = info
    return out


@dataclass
class ObjectInfo:
    """One object found by a listing."""

    key: str  # relative to the listed root, '/'-separated
    size: int
    mtime: float
    etag: str = ""
    generation: str = ""  # GCS generation; '' on S3 and Azure (their preconditions take the ETag)
    checksums: Dict[str, str] = field(default_factory=dict)  # e.g. {'md5': ..., 'crc32c': ...}
    #: its Content-Type and user metadata (``store.checked_headers``' shape) where the answer gave
    #: them (a head; a GCS or Azure listing), None where it did not (an S3 listing)
    headers: Optional[dict] = field(default=None, compare=False)  # not what tells two versions apart

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
    md5 = cs.get("content_md5") if isinstance(cs, dict) else getattr(cs, "content_md5", None)
    if md5:
        import base64

        out["md5"] = base64.b64encode(bytes(md5)).decode("ascii")
    return out


def _field(obj, name: str):
    """``obj[name]`` of a mapping, else its attribute (Azure's ``ContentSettings`` is either)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def said_headers(protocol: str, content_type, metadata) -> Optional[dict]:
    """An object's Content-Type and user metadata as a store said them, in ``checked_headers``'
    shape for that store; None when they break its rule (recorded as not known, never sent)."""
    doc = {"content_type": content_type or None, "metadata": {str(k): str(v) for k, v in (metadata or {}).items()}}
    return checked_headers(doc, protocol)[0]


def _listed_headers(protocol: str, info: dict) -> Optional[dict]:
    """What a listing says of an object's headers: GCS lists each object's resource
    (``contentType``, ``metadata``), Azure each blob's properties (listed with its metadata);
    an S3 listing says neither (None: not known)."""
    if protocol == "gcs":
        return said_headers(protocol, info.get("contentType"), info.get("metadata"))
    if protocol == "az" and ("content_settings" in info or "metadata" in info):
        return said_headers(protocol, _field(info.get("content_settings"), "content_type"), info.get("metadata"))
    return None


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
#: the scope of a token for Azure Storage
AZ_STORAGE_SCOPE = "https://storage.azure.com/.default"
#: this process's DefaultAzureCredential, once it found a token (``ProbedAzureCredential``): not
#: asked again, and the one the clients sign with; None once it failed but not for want of a
#: credential (not asked again either: the client's own chain says what happens). "Found none" is
#: not kept: a later ``az login`` counts
_AZ_CREDENTIAL: List[Optional["ProbedAzureCredential"]] = []
#: a token with less than this many seconds left is asked for again
_AZ_TOKEN_MARGIN = 300


class ProbedAzureCredential:
    """The credential chain that found a storage token at the probe, with that token: the clients
    are handed this one, so the chain is walked once per process (review R2-1: adlfs made its own
    ``DefaultAzureCredential``, which walked the chain again for its first request, e.g. a second
    ``az`` subprocess). The token is given back for the storage scope while it has more than
    ``_AZ_TOKEN_MARGIN`` seconds left (a claims challenge or another tenant always asks)."""

    def __init__(self, cred, token) -> None:
        self.cred = cred
        self.token = token
        self.lock = threading.Lock()
        #: one async face, so every filesystem made with it has the same arguments (fsspec's
        #: instance cache gives back the one client, as before)
        self.async_face = AsyncProbedAzureCredential(self)

    def get_token(self, *scopes: str, **kw):
        """A token for ``scopes`` (azure-core's ``TokenCredential``)."""
        plain = scopes == (AZ_STORAGE_SCOPE,) and not kw.get("claims") and not kw.get("tenant_id")
        with self.lock:
            if plain and self.token is not None and self.token.expires_on - time.time() > _AZ_TOKEN_MARGIN:
                return self.token
            token = self.cred.get_token(*scopes, **kw)
            if plain:
                self.token = token
            return token

    def close(self) -> None:
        """Kept open: the process's one credential (a client closing its own leaves it)."""

    def for_async(self) -> "AsyncProbedAzureCredential":
        """The same credential as an ``AsyncTokenCredential`` (what adlfs's async client takes)."""
        return self.async_face


class AsyncProbedAzureCredential:
    """``ProbedAzureCredential`` for an async client: its ``get_token`` in a worker thread."""

    def __init__(self, probed: ProbedAzureCredential) -> None:
        self.probed = probed

    async def get_token(self, *scopes: str, **kw):
        """A token for ``scopes`` (azure-core's ``AsyncTokenCredential``)."""
        import asyncio

        return await asyncio.to_thread(self.probed.get_token, *scopes, **kw)

    async def close(self) -> None:
        """Kept open, as ``ProbedAzureCredential.close``."""

    async def __aenter__(self) -> "AsyncProbedAzureCredential":
        return self

    async def __aexit__(self, *exc) -> None:
        return None


def azure_credential_missing() -> Optional[BaseException]:
    """What ``DefaultAzureCredential`` raised asked for a storage token when it says no credential
    of its chain has one (``credentials_missing``: by type and fields); None when it found one
    (kept, with its token, in ``_AZ_CREDENTIAL`` for the clients), or failed otherwise (the
    client's requests then say what happened, as before), or azure-identity is not installed
    (adlfs's import error names what to install)."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    cred = DefaultAzureCredential()
    try:
        token = cred.get_token(AZ_STORAGE_SCOPE)
    except Exception as e:  # noqa: BLE001 - only "found none" is taken; the rest is the client's
        with contextlib.suppress(Exception):
            cred.close()
        if credentials_missing(e):
            return e
        _AZ_CREDENTIAL[:] = [None]
        return None
    _AZ_CREDENTIAL[:] = [ProbedAzureCredential(cred, token)]
    return None


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
        raise RemoteError(StoreError.MISSING_EXTRA, f"{url}: install tb-footprint-plugin[{SCHEMES.get(scheme, ('', 's3'))[1]}]")
    proto, extra = SCHEMES.get(scheme, (scheme, None))
    kwargs = _KWARGS.get(proto, dict)()
    if proto == "az" and not (kwargs.get("connection_string") or kwargs.get("account_name")):
        # adlfs refuses to start without an account (a ValueError, told apart only by its words):
        # no credentials, said as S3's and GCS's are
        raise no_credentials(url, proto, None, "no storage account named")
    if proto == "az" and kwargs.get("anon") is False and not any(
            os.environ.get(k) for k in ("AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CLIENT_ID")):
        # an account name alone: adlfs hands the client DefaultAzureCredential, and a chain that
        # finds nothing was said only after the storage client's retries of every request (80-175 s
        # of back-off); asked once here, it says so at once (the same decision, without them)
        if not _AZ_CREDENTIAL:
            missing = azure_credential_missing()
            if missing is not None:
                raise no_credentials(url, proto, missing) from missing
        if _AZ_CREDENTIAL and _AZ_CREDENTIAL[0] is not None:  # the chain that answered signs the client's requests: walked once
            kwargs["credential"] = _AZ_CREDENTIAL[0].for_async()
    try:
        fs = fsspec.filesystem(proto, **kwargs)
    except ImportError as e:
        hint = f"pip install 'tb-footprint-plugin[{extra}]'" if extra else f"install the fsspec backend for {scheme}://"
        raise RemoteError(StoreError.MISSING_EXTRA, f"{url}: {scheme}:// needs {e.name or 'a package'}: {hint}") from e
    except ValueError as e:
        raise RemoteError(StoreError.UNKNOWN_SCHEME, f"{url}: no filesystem for {scheme}:// ({e})") from e
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
        #: a GCS client that found no credentials and went anonymous (gcsfs's last resort), unasked
        #: (an emulator's is asked for: ``_gcs_kwargs``): a 401 it gets is "no credentials found"
        self.unsigned = self.protocol == "gcs" and _gcs_kwargs().get("token") != "anon" and \
            getattr(getattr(self.fs, "credentials", None), "method", None) == "anon"

    # --- names ------------------------------------------------------------------------------
    def path(self, rel: str = "") -> str:
        """Store path (no scheme) of ``rel`` under the root; '' or '.' is the root itself. A key
        ending in '/' is refused (``ValueError``), never taken for the key without it: 'x/' and
        'x' are two objects on S3, so an operation on the listed 'x/' must never act on 'x'."""
        rel = rel.lstrip("/")
        if rel in ("", "."):
            return self.root
        if rel.endswith("/"):
            raise ValueError(f"{rel}: not a plain relative key under {self.url} (it ends in '/')")
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
        return self.list_under(self.path(rel), self.root)

    @_credentials_named
    def list_under(self, base: str, root: str) -> Dict[str, ObjectInfo]:
        """Every object under the store path ``base`` (one recursive paginated listing), keyed by
        path relative to the store path ``root`` (the logdir, or a vault in another prefix)."""
        self._forget_listings(base)
        try:
            found = self.find_objects(base)
        except (FileNotFoundError, RemoteError):  # a RemoteError is coded and named already
            raise
        except OSError as e:
            shared = shared_error(e, self.url, self.protocol, f"{self.scheme}://{base}", self.unsigned)
            if shared is not None:  # a refusal is said as one, not as a failed listing
                raise shared from e
            raise RemoteError(StoreError.LIST_FAILED, f"{self.scheme}://{base}: listing failed ({e})") from e
        finally:
            self._forget_listings(base)
        out: Dict[str, ObjectInfo] = {}
        plen = len(root) + 1
        for name, info in found.items():
            if is_folder_marker(name, info):
                continue  # looked at on the key as stored: stripped, it was a 0-byte file of the run
            # any other key ending in '/' (it holds bytes) keeps its own name: without the '/' it
            # named another key ('x', maybe another object on S3), which an operation would then
            # act on; with it, it is a key no call addresses (``check_key``, ``path``): named by the
            # scan and in a refusal, never copied, deleted or put back
            if name.startswith("/") and not root.startswith("/"):
                # a filesystem that names its paths from "/" (memory://, sftp://, hdfs://): the
                # same object as the root's own spelling; compared as is, every key was passed
                # over and the logdir looked empty, with no error
                name = name.lstrip("/")
            if info.get("type") == "directory" or not name.startswith(root + "/"):
                continue
            key = name[plen:]
            if not key:
                continue
            out[key] = ObjectInfo(
                key=key,
                size=int(info.get("size") or 0),
                mtime=_mtime(info),
                etag=str(info.get("ETag") or info.get("etag") or "").strip('"'),
                # the token preconditions take: GCS generation; S3 and Azure match on the ETag
                # (a version id would not do, and only versioned buckets have one)
                generation=str(info.get("generation") or ""),
                checksums=_checksums(info),
                headers=_listed_headers(self.protocol, info),
            )
        pages = max(1, math.ceil(len(found) / LIST_PAGE.get(self.protocol, 1000)))
        self.stats.add("list", pages)
        return out

    def find_objects(self, base: str) -> dict:
        """The client's listing of the objects under the store path ``base`` (store path -> the
        client's info, as fsspec's ``find(detail=True)`` gives it): one listing request a page,
        nothing more, on every store (``list_under`` counts and codes it). fsspec's ``find`` asks
        more where ``base`` holds nothing, paid by every empty state folder (``journal/``,
        ``locks/``, ``ledgers/``, the change log's shards) at every ``status``: s3fs asks whether
        ``base`` is itself an object (a HEAD, then a LIST of one key), so it is asked for the
        parent's objects under ``<leaf>/`` (``prefix=``: the one LIST of ``base/``, nothing
        cached; s3fs from 2024.12, the extra's floor: older ones HEAD and LIST the parent when
        that listing is empty); gcsfs and adlfs, see below."""
        from fsspec.asyn import sync as fsspec_sync

        parent, _, leaf = base.rstrip("/").rpartition("/")
        if self.protocol == "s3" and parent and leaf:
            return self.fs.find(parent, detail=True, withdirs=False, prefix=leaf + "/")
        if self.protocol == "gcs" and hasattr(self.fs, "_do_list_objects"):
            # gcsfs's find lists an empty prefix a second time (as a name, without the slash); its
            # first listing, the one this is, says all: the objects under base/ (delimiter "")
            objects, _ = fsspec_sync(self.fs.loop, self.fs._do_list_objects, base, delimiter="")
            return {o["name"]: o for o in objects}
        if self.protocol == "az" and hasattr(self.fs, "_details"):
            # adlfs's find HEADs base first (is it a blob?) and, finding nothing, HEADs it again:
            # every listing paid a HEAD, an empty one 2 HEADs and 2 LISTs; this is its listing alone
            return fsspec_sync(self.fs.loop, self._az_find, base)
        return self.fs.find(base, detail=True, withdirs=False)

    async def _az_find(self, base: str) -> dict:
        """adlfs's ``find`` of ``base`` without its HEADs: one ``list_blobs`` of ``base/``, the
        blobs' details as adlfs gives them; a missing container lists nothing, as there."""
        from azure.core.exceptions import ResourceNotFoundError

        container, key, _ = self.fs.split_path(base)
        blobs: list = []
        async with self.fs.service_client.get_container_client(container=container) as cc:
            try:
                blobs = [b async for b in cc.list_blobs(include=["metadata"],
                                                        name_starts_with=f"{key.rstrip('/')}/" if key else None)]
                infos = await self.fs._details(blobs)
            except ResourceNotFoundError:
                infos = []
        return az_named(container, [b.name for b in blobs], infos, base)

    def _forget_listings(self, base: str) -> None:
        """Drop fsspec's cached listings of ``base``, its parents and every folder under it. A
        recursive ``find`` fills the cache for each sub-folder, and a later read of an object
        created there since (another worker's ledger, journal or lock) would be answered from
        that cache as "not found"; the engine lists when it needs to know, and never wants a
        listing older than its last call."""
        self.fs.invalidate_cache(base)
        cache = getattr(self.fs, "dircache", None)
        if cache is None:
            return
        base = self.fs._strip_protocol(base).rstrip("/")
        for key in [k for k in list(cache) if k == base or k.startswith(base + "/")]:
            cache.pop(key, None)

    @_credentials_named
    def exists(self) -> bool:
        """True when the root prefix holds at least one object or is a bucket."""
        try:
            return self.fs.exists(self.root)
        finally:
            self.stats.add("head")

    # --- reading ----------------------------------------------------------------------------
    @_credentials_named
    def read_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object: one ranged GET."""
        data = self.fs.cat_file(self.path(rel), start=start, end=end)
        self.stats.add("read", down=len(data))
        return data

    def open_ranged(self, rel: str, size: int, chunk: int = READ_CHUNK) -> "RangedReader":
        """A seekable binary reader of ``rel`` that fetches ranges on demand (no local copy)."""
        return RangedReader(self, rel, size, chunk)

    def read_bytes(self, rel: str) -> bytes:
        """A whole object in one GET (state objects: cache, journal, manifests, ledger entries)."""
        data = self.cat(self.path(rel))
        self.stats.add("read", down=len(data))
        return data

    @_credentials_named
    def cat(self, path: str) -> bytes:
        """The whole object at the store path ``path`` in one GET (not counted: the caller counts).
        s3fs (2024.x on) asks for the size first (a HEAD) to split a large read into parallel
        ranges; every state object read cost two requests. One range is all a small object needs."""
        if self.protocol == "s3" and _takes_max_concurrency(self.fs):
            return self.fs.cat_file(path, max_concurrency=1)
        return self.fs.cat_file(path)

    @property
    def ops(self) -> "_Ops":
        """Conditional puts, server-side copies, batched deletes (created on first use)."""
        if getattr(self, "_ops", None) is None:
            self._ops = ops_for(self)
        return self._ops

    @_credentials_named
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Put a small object in one request: by the store's own put where it has one (gcsfs's
        ``pipe_file`` below 50 MiB is a multipart request with the fixed boundary "==0==": bytes
        holding "--==0==" went up cut short), by the client's ``pipe_file`` on another scheme."""
        path = self.path(rel)
        if self.protocol in _OPS:
            try:
                self.ops.put(path, bytes(data))  # counted there
            finally:
                self._forget_listings(path)
            return
        self.fs.pipe_file(path, data)
        self.stats.add("put", up=len(data))

    @_credentials_named
    def upload_stream(self, rel: str, src, part: int = 8 << 20, chunk: int = READ_CHUNK, *,
                      exclusive: bool = False) -> int:
        """Stream the binary file object ``src`` into the object ``rel`` through the store's
        buffered writer (S3 multipart, GCS resumable, Azure staged blocks, each of ``part`` bytes):
        memory stays about one part whatever the size, where the clients' whole-file uploads read
        up to 50-64 MiB at once. Returns the bytes written; a failed upload leaves no object
        (the writer's parts are discarded, never committed: closing it would commit what was
        written so far). Requests counted: one per part, plus the start and the completion of a
        multipart upload.

        ``exclusive``: the object is created only if absent, the condition sent with the request
        that commits the upload (the writers' ``"xb"`` mode: S3 ``If-None-Match: *`` on
        CompleteMultipartUpload, Azure ``If-None-Match: *`` on Put Block List, GCS
        ``ifGenerationMatch=0`` on the resumable upload), so the key is never written over and
        nothing is staged; a key that exists raises ``RemoteError(already_exists)`` and leaves
        no upload behind."""
        n = 0
        path = self.path(rel)
        out = self.fs.open(path, "xb" if exclusive else "wb", block_size=part)
        try:
            while True:
                data = src.read(chunk)
                if not data:
                    break
                out.write(data)
                n += len(data)
            out.close()
        except BaseException as e:
            if self.protocol == "s3":
                # an incomplete multipart upload stays (and is billed) until aborted; an unfinished
                # GCS resumable session and uncommitted Azure blocks expire by themselves (and
                # gcsfs retries a cancel the emulator refuses for half a minute)
                try:
                    out.discard()
                except Exception:  # noqa: BLE001 - the upload's own error is the one to report
                    pass
            out.closed = True  # so that nothing commits what was written so far
            if exclusive and _refused_as_existing(e):
                raise RemoteError(ALREADY_EXISTS, f"{self.scheme}://{path}: already exists") from e
            raise
        finally:
            self._forget_listings(path)
            parts = max(1, math.ceil(n / part))
            self.stats.add("put", parts + (2 if parts > 1 else 0), up=n)
        return n


def _refused_as_existing(e: BaseException) -> bool:
    """Whether a create-only upload failed because the key exists: s3fs, gcsfs and adlfs say
    ``FileExistsError`` (S3 412 on If-None-Match, GCS 412, Azure 409 BlobAlreadyExists); adlfs
    wraps Azure's 412 ConditionNotMet in a ``RuntimeError`` whose cause says it. Decided by the
    exception types and HTTP status, never by a message's wording."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, FileExistsError):
            return True
        if type(e).__name__ in ("ResourceExistsError", "ResourceModifiedError") or \
                getattr(e, "status_code", None) == 412:
            return True
        e, seen = e.__cause__, seen + 1
    return False


class RangedReader(RangeReader):
    """A read-only, seekable file over one remote object; every ``read`` is one ranged GET of at
    most the requested size, so memory stays bounded by the caller's chunk, whatever the object's
    size. ``size`` comes from the listing, so opening costs no request."""

    def __init__(self, rfs: RemoteFS, rel: str, size: int, chunk: int = READ_CHUNK):
        super().__init__(lambda start, stop: rfs.read_range(rel, start, stop), size, name=rfs.url_of(rel))
        self.chunk = chunk


def _takes_max_concurrency(fs) -> bool:
    """Whether this s3fs's ``cat_file`` takes ``max_concurrency`` (older ones neither take it nor
    send the HEAD it avoids); asked once per client class, not at every read."""
    return _class_takes_max_concurrency(type(fs))


@functools.lru_cache(maxsize=None)
def _class_takes_max_concurrency(cls) -> bool:
    import inspect

    try:
        return "max_concurrency" in inspect.signature(cls._cat_file).parameters
    except (AttributeError, TypeError, ValueError):
        return False


#: small state objects (manifests, ledger entries) read at once: a store answers each GET in
#: tens of milliseconds, so 10,000 of them one after the other take minutes
READ_WORKERS = 16


def map_ordered(fn: Callable[[T], R], items: Iterable[T], workers: int = READ_WORKERS) -> Iterator[R]:
    """``fn`` over ``items`` on ``workers`` threads, the results in the items' order; at most
    ``2 * workers`` calls in flight, so memory does not grow with the number of items. An
    exception of ``fn`` is raised where its result would have been yielded."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tbfp-read") as pool:
        window: deque = deque()
        for item in items:
            window.append(pool.submit(fn, item))
            if len(window) >= 2 * workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def iter_chunks(reader: io.RawIOBase, chunk: int = READ_CHUNK) -> Iterator[bytes]:
    """Stream a reader in chunks of ``chunk`` bytes."""
    while True:
        data = reader.read(chunk)
        if not data:
            return
        yield data


# --- conditional writes, server-side copies, batched deletes ---------------------------------
# fsspec has no preconditions, no copy checksums and no per-key delete results, which a safe
# reducer needs; these go through each store's own client (boto3 for S3, the GCS JSON API through
# gcsfs's authenticated session, azure-storage-blob for Azure), all counted in the same stats.

#: S3's CopyObject copies objects up to 5 GiB; larger ones are copied in parts of this size
S3_COPY_MAX = 5 << 30
S3_COPY_PART = 1 << 30
#: Azure's synchronous Copy Blob takes sources up to 256 MiB; larger ones are copied in the background
AZ_SYNC_COPY_MAX = 256 << 20
AZ_COPY_TIMEOUT_S = 3600.0
PRECONDITION_FAILED = StoreError.PRECONDITION_FAILED
ALREADY_EXISTS = StoreError.ALREADY_EXISTS


@dataclass
class CopyResult:
    """A server-side copy: the new object's version token and the checksums the store computed."""

    version: str
    checksums: Dict[str, str]


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(bytes(raw)).decode("ascii")


def _md5_of_etag(etag: str) -> Optional[str]:
    """S3's ETag of a single-part upload is the MD5 of the bytes (base64 here); multipart: None."""
    etag = etag.strip('"')
    if len(etag) == 32 and "-" not in etag:
        try:
            return _b64(bytes.fromhex(etag))
        except ValueError:
            return None
    return None


def same_content(a: Dict[str, str], b: Dict[str, str]) -> Optional[bool]:
    """Compare two objects by the checksums the store computed for both: True/False when they
    share a checksum kind, None when they share none (then nothing can be concluded)."""
    common = [k for k in ("sha256", "crc32c", "md5") if a.get(k) and b.get(k)]
    if not common:
        return None
    return all(a[k] == b[k] for k in common)


def content_checksums(info: ObjectInfo) -> Dict[str, str]:
    """Checksums of an object's bytes known from a listing (S3: the single-part ETag is an MD5)."""
    out = dict(info.checksums)
    if "md5" not in out:
        md5 = _md5_of_etag(info.etag)
        if md5:
            out["md5"] = md5
    return out


class _Ops:
    """Per-store implementation of the conditional operations (paths are 'bucket/key')."""

    def __init__(self, rfs: "RemoteFS"):
        self.rfs = rfs

    @staticmethod
    def split(path: str) -> Tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def _err(self, e: Exception, what: str) -> RemoteError:
        """``e`` as a coded error: first what every store says alike (``shared_error``: no
        credentials found, a refusal), then the store's own mapping (``_store_err``)."""
        shared = shared_error(e, self.rfs.url, self.rfs.protocol, what, getattr(self.rfs, "unsigned", False))
        return shared if shared is not None else self._store_err(e, what)

    def _store_err(self, e: Exception, what: str) -> RemoteError:  # pragma: no cover - every store overrides
        """``e`` as the store's coded error (preconditions, missing objects, the rest ``store_error``)."""
        return RemoteError(StoreError.STORE_ERROR, f"{what}: {e}")

    def _request(self, verb: str, what: str, call, *, up: int = 0, create_only: bool = False):
        """One request to the store: counted under ``verb`` whatever happens, its failure mapped
        to a coded :class:`RemoteError` (a create-only write that lost: ``already_exists``)."""
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - every store client error becomes a coded error
            err = self._err(e, what)
            if create_only and err.code == PRECONDITION_FAILED:
                err = RemoteError(ALREADY_EXISTS, f"{what}: already exists")
            raise err from e
        finally:
            self.rfs.stats.add(verb, up=up)

    def delete_coded(self, paths, versions: Optional[Dict[str, str]] = None) -> Dict[str, RemoteError]:
        """Like ``delete``, each refused key's error a coded :class:`RemoteError`."""
        raise NotImplementedError  # pragma: no cover - every store overrides

    def check_absent(self, path: str) -> None:
        """Before a create-only streamed upload (``RemoteFS.upload_stream(exclusive=True)``): a
        metadata read, one request beside a multipart upload. The condition the upload's last
        request carries decides a race where the server enforces it (S3, Azure, GCS, moto,
        Azurite); the read keeps an object already there from being overwritten by a server that
        ignores it (gcp-storage-emulator, some S3-compatible servers) and spares a whole upload
        that would be refused."""
        if self.head(path) is not None:
            raise RemoteError(ALREADY_EXISTS, f"{path}: already exists")

    def delete(self, paths, versions: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """Delete ``paths`` (batched where the store allows); returns {path: error} for the keys
        the store refused, a missing key being no error. ``versions`` (path -> version token)
        makes each key's delete conditional on its version."""
        return {p: str(e) for p, e in self.delete_coded(paths, versions).items()}


#: the botocore session every S3 conditional client is made in, one per process as boto3's default
#: session was (credentials found once, not per client); made at the first client
_S3_SESSION: list = []
_S3_SESSION_LOCK = threading.Lock()
#: the S3 conditional clients of this process, one per what a client is built from
#: (``_s3_client_key``), the most recently used last: building one costs ~15 ms of CPU, paid by
#: every ``RemoteFS`` that wrote (every bucket store a command opens, every test's), and botocore's
#: clients are thread-safe; past ``S3_CLIENTS_KEPT`` the least recently used is let go
_S3_CLIENTS: "collections.OrderedDict[str, object]" = collections.OrderedDict()
S3_CLIENTS_KEPT = 16


def _s3_client_key(session, endpoint_url: Optional[str], retries: dict) -> Optional[str]:
    """What a client made by ``session`` with these arguments is built from: the arguments, every
    ``AWS_*`` variable of the environment (botocore's configuration and credential chain read
    them: region, endpoint, profile, config and credentials files, keys) and the credentials the
    session found (refreshable ones refresh in place, in every client holding them); a digest,
    no secret kept. None when the session found no credentials: such a client is never kept (the
    next one looks again, as before)."""
    creds = session.get_credentials()
    if creds is None:
        return None
    h = hashlib.sha256(json.dumps([endpoint_url, retries, id(creds), session.get_config_variable("region"),
                                   sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))],
                                  sort_keys=True, default=str).encode())
    return h.hexdigest()


def _s3_client(fs, *, endpoint_url: Optional[str], retries: dict):
    """A botocore S3 client in this process's session, made on the data loader of the session
    s3fs's client was built in when there is one (its first request made it): the S3 service model
    and endpoint rules that loader has read are not read and parsed again (about 0.07 s of CPU,
    once per process, paid by a scan whose only write is its cache). Credentials, config and
    events stay the session's own, as they were ``boto3.client``'s. One client per what it is
    built from (``_s3_client_key``), shared by every ``RemoteFS`` of the process that asks for
    the same."""
    import botocore.session
    from botocore.config import Config

    with _S3_SESSION_LOCK:  # a session is not to be shared across threads while it makes clients
        if not _S3_SESSION:
            session = botocore.session.Session()
            built = getattr(fs, "session", None)  # s3fs's AioSession (a botocore Session), None until used
            if isinstance(built, botocore.session.Session):
                session.register_component("data_loader", built.get_component("data_loader"))
            _S3_SESSION.append(session)
        session = _S3_SESSION[0]
        key = _s3_client_key(session, endpoint_url, retries)
        client = _S3_CLIENTS.get(key) if key is not None else None
        if client is not None:
            _S3_CLIENTS.move_to_end(key)
            return client
        client = session.create_client("s3", endpoint_url=endpoint_url, config=Config(retries=dict(retries)))
        if key is not None:
            _S3_CLIENTS[key] = client
            while len(_S3_CLIENTS) > S3_CLIENTS_KEPT:
                _S3_CLIENTS.popitem(last=False)
        return client


class _S3Ops(_Ops):
    def __init__(self, rfs):
        super().__init__(rfs)
        # "standard" retries back off on 503 SlowDown / 500 InternalError and retry them.
        retries = {"mode": os.environ.get("AWS_RETRY_MODE", "standard"),
                   "max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS", "6"))}
        # botocore's client, not boto3's (same requests, checksums and credential chain): ``import
        # boto3`` is paid only by ``upload_file``, the one call that needs it
        self.client = _s3_client(rfs.fs, endpoint_url=_s3_kwargs().get("endpoint_url"), retries=retries)

    def _store_err(self, e, what: str):
        from botocore.exceptions import ClientError

        if isinstance(e, ClientError):
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
                return RemoteError(PRECONDITION_FAILED, f"{what}: changed since it was read (precondition failed)")
            if code in ("NoSuchKey", "404", "NotFound"):
                return RemoteError(StoreError.NOT_FOUND, f"{what}: no such object")
            return RemoteError(StoreError.STORE_ERROR, f"{what}: {code or status} {e}")
        return RemoteError(StoreError.STORE_ERROR, f"{what}: {e}")

    def head(self, path):
        b, k = self.split(path)
        try:
            r = self.client.head_object(Bucket=b, Key=k, ChecksumMode="ENABLED")
        except Exception as e:  # noqa: BLE001 - mapped to a coded error
            err = self._err(e, path)
            if err.code == StoreError.NOT_FOUND:
                return None
            raise err from e
        finally:
            self.rfs.stats.add("head")
        cs = {"sha256": r["ChecksumSHA256"]} if r.get("ChecksumSHA256") else {}
        info = ObjectInfo(key=k, size=r["ContentLength"], mtime=_mtime(r), etag=r["ETag"].strip('"'),
                          checksums=cs, headers=said_headers("s3", r.get("ContentType"), r.get("Metadata")))
        return info

    @staticmethod
    def _header_kw(headers: Optional[dict]) -> dict:
        """An object's headers as S3's put and upload arguments (none when not given)."""
        if not headers:
            return {}
        kw = {"Metadata": dict(headers.get("metadata") or {})}
        if headers.get("content_type"):
            kw["ContentType"] = headers["content_type"]
        return kw

    def get_range(self, path: str, start: int, end: int) -> Tuple[bytes, Optional[dict]]:
        """Bytes ``[start, end)`` of an object in one ranged GET, and its headers that answer
        carries (an S3 listing says none: the first read of an object tells them at no cost)."""
        b, k = self.split(path)
        r = self._request("read", path, lambda: self.client.get_object(Bucket=b, Key=k, Range=f"bytes={start}-{end - 1}"))
        data = r["Body"].read()
        self.rfs.stats.add("read", 0, down=len(data))
        return data, said_headers("s3", r.get("ContentType"), r.get("Metadata"))

    def put(self, path, data: bytes, *, if_absent=False, if_version: Optional[str] = None,
            headers: Optional[dict] = None) -> str:
        b, k = self.split(path)
        kw = {"ChecksumAlgorithm": "SHA256", **self._header_kw(headers)}
        if if_absent:
            kw["IfNoneMatch"] = "*"
        if if_version:
            kw["IfMatch"] = f'"{if_version}"'
        r = self._request("put", path, lambda: self.client.put_object(Bucket=b, Key=k, Body=data, **kw),
                          up=len(data), create_only=if_absent)
        return r["ETag"].strip('"')

    def copy(self, src, dst, *, if_source_version: Optional[str] = None, if_absent=False,
             if_version: Optional[str] = None, listed_absent: bool = False,
             size: Optional[int] = None) -> CopyResult:
        sb, sk = self.split(src)
        db, dk = self.split(dst)
        kw = {"ChecksumAlgorithm": "SHA256"}
        if if_source_version:
            kw["CopySourceIfMatch"] = f'"{if_source_version}"'
        if if_version:
            # S3 enforces If-Match on the destination atomically; a server that ignores it (moto)
            # is covered by the metadata read before, as for create-only copies below
            kw["IfMatch"] = f'"{if_version}"'
            cur = self.head(dst)
            if cur is None or cur.etag != if_version:
                raise RemoteError(PRECONDITION_FAILED, f"copy over {dst}: changed since it was read (precondition failed)")
        if if_source_version and not _md5_of_etag(if_source_version):
            cur = self.head(src)  # multipart ETag: check before (CopySourceIfMatch also sent)
            if cur is None or cur.etag != if_source_version:
                raise RemoteError(PRECONDITION_FAILED, f"copy {src}: changed since it was read (precondition failed)")
        if if_absent:
            # S3 enforces If-None-Match on the destination; a server that ignores it (moto) is
            # covered by a metadata read, or by the caller's fresh listing (``listed_absent``)
            kw["IfNoneMatch"] = "*"
            if not listed_absent and self.head(dst) is not None:
                raise RemoteError(ALREADY_EXISTS, f"{dst}: already exists")
        if size is None:
            info = self.head(src)
            size = info.size if info is not None else 0
        if size > S3_COPY_MAX:
            return self._copy_parts(src, dst, size, kw)
        r = self._request("copy", f"copy {src} -> {dst}",
                          lambda: self.client.copy_object(Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk}, **kw))
        res = r.get("CopyObjectResult", {})
        etag = res.get("ETag", "").strip('"')
        if if_source_version and _md5_of_etag(if_source_version) and etag != if_source_version:
            # The copy of a single-part object keeps its ETag (the MD5): a different one means the
            # source changed, whether or not the server honoured CopySourceIfMatch (moto does not).
            self.delete([dst])
            raise RemoteError(PRECONDITION_FAILED, f"copy {src}: changed since it was read (precondition failed)")
        cs = {}
        if res.get("ChecksumSHA256"):
            cs["sha256"] = res["ChecksumSHA256"]
        md5 = _md5_of_etag(etag)
        if md5:
            cs["md5"] = md5
        return CopyResult(version=etag, checksums=cs)

    def upload_file(self, path: str, local: str, headers: Optional[dict] = None) -> ObjectInfo:
        """Stream a local file to ``path`` (multipart above 64 MiB: memory stays at one part)."""
        from boto3.s3.inject import upload_file as transfer
        from boto3.s3.transfer import TransferConfig

        b, k = self.split(path)
        size = os.path.getsize(local)
        part = 64 << 20
        parts = max(1, math.ceil(size / part))
        cfg = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=2)
        extra = self._header_kw(headers) or None
        self._request("put", path, lambda: transfer(self.client, local, b, k, ExtraArgs=extra, Config=cfg), up=size)
        if parts > 1:  # create + parts + complete, counted as what they are: puts
            self.rfs.stats.add("put", parts + 1)
        info = self.head(path)
        if info is None:
            raise RemoteError(StoreError.STORE_ERROR, f"{path}: missing right after its upload")
        return info

    def delete_coded(self, paths, versions: Optional[Dict[str, str]] = None) -> Dict[str, RemoteError]:
        """Delete in batches of 1,000 keys; returns {path: error} for keys the store refused.
        ``versions`` (path -> ETag) makes each key's delete conditional on its ETag."""
        failed: Dict[str, RemoteError] = {}
        by_bucket: Dict[str, list] = {}
        versions = versions or {}
        for p in paths:
            b, k = self.split(p)
            by_bucket.setdefault(b, []).append(k)
        for b, keys in by_bucket.items():
            for i in range(0, len(keys), 1000):
                page = keys[i:i + 1000]
                ids = []
                for k in page:
                    ident = {"Key": k}
                    if versions.get(f"{b}/{k}"):
                        ident["ETag"] = f'"{versions[f"{b}/{k}"]}"'
                    ids.append(ident)
                try:
                    r = self.client.delete_objects(Bucket=b, Delete={"Objects": ids, "Quiet": True})
                except Exception as e:  # noqa: BLE001 - the whole page failed: report every key
                    for k in page:
                        failed[f"{b}/{k}"] = self._err(e, f"{b}: delete")
                    continue
                finally:
                    self.rfs.stats.add("delete")
                for err in r.get("Errors", []):
                    # a key the batch refused (AccessDenied) is a refusal, as a request's 403 is
                    code = {"PreconditionFailed": PRECONDITION_FAILED, "NoSuchKey": StoreError.NOT_FOUND,
                            "AccessDenied": REFUSED}.get(err.get("Code"), StoreError.STORE_ERROR)
                    failed[f"{b}/{err['Key']}"] = RemoteError(code, f"{err.get('Code')}: {err.get('Message')}")
        return failed

    def retention(self, bucket: str) -> dict:
        """Whether deleted bytes stay billed: versioning and its lifecycle expiry."""
        out = {"versioning": False, "noncurrent_expiry_days": None, "soft_delete_seconds": None}
        try:
            v = self.client.get_bucket_versioning(Bucket=bucket)
            out["versioning"] = v.get("Status") in ("Enabled", "Suspended")
            self.rfs.stats.add("head")
            if out["versioning"]:
                try:
                    lc = self.client.get_bucket_lifecycle_configuration(Bucket=bucket)
                    days = [r.get("NoncurrentVersionExpiration", {}).get("NoncurrentDays")
                            for r in lc.get("Rules", []) if r.get("Status") == "Enabled"]
                    days = [d for d in days if d is not None]
                    out["noncurrent_expiry_days"] = min(days) if days else None
                except Exception:  # noqa: BLE001 - no lifecycle configuration
                    pass
                finally:
                    self.rfs.stats.add("head")
        except Exception as e:  # noqa: BLE001
            out["error"] = str(e)
        return out


    def _copy_parts(self, src: str, dst: str, size: int, kw: dict) -> CopyResult:
        """A server-side copy of an object larger than CopyObject takes: a multipart upload whose
        parts are ranges copied from the source (each conditional on the source's version), the
        destination's condition on the completing request. A failed copy leaves no upload behind.
        The result's checksum is one of parts, not of the bytes: none is returned, so the caller
        compares the bytes themselves."""
        sb, sk = self.split(src)
        db, dk = self.split(dst)
        part_kw = {k: v for k, v in kw.items() if k == "CopySourceIfMatch"}
        done_kw = {k: v for k, v in kw.items() if k in ("IfMatch", "IfNoneMatch")}
        what = f"copy {src} -> {dst}"
        want = part_kw.get("CopySourceIfMatch", "").strip('"')

        def source_unchanged() -> Optional[ObjectInfo]:  # also where a server ignores CopySourceIfMatch on parts (moto)
            cur = self.head(src)
            if want and (cur is None or cur.etag != want):
                raise RemoteError(PRECONDITION_FAILED, f"copy {src}: changed since it was read (precondition failed)")
            return cur

        # a multipart upload takes its headers from its start, not from the parts' source: the
        # source's, from the read that checks it (CopyObject keeps them itself)
        first = source_unchanged()
        keep = self._header_kw(first.headers if first is not None else None)
        up = self._request("copy", what, lambda: self.client.create_multipart_upload(
            Bucket=db, Key=dk, ChecksumAlgorithm="SHA256", **keep))
        uid = up["UploadId"]
        try:
            parts = []
            for n, start in enumerate(range(0, size, S3_COPY_PART), 1):
                rng = f"bytes={start}-{min(size, start + S3_COPY_PART) - 1}"
                r = self._request("copy", what, lambda: self.client.upload_part_copy(
                    Bucket=db, Key=dk, UploadId=uid, PartNumber=n, CopySource={"Bucket": sb, "Key": sk},
                    CopySourceRange=rng, **part_kw))
                res = r["CopyPartResult"]
                parts.append({"PartNumber": n, "ETag": res["ETag"],
                              **({"ChecksumSHA256": res["ChecksumSHA256"]} if res.get("ChecksumSHA256") else {})})
            source_unchanged()
            r = self._request("copy", what, lambda: self.client.complete_multipart_upload(
                Bucket=db, Key=dk, UploadId=uid, MultipartUpload={"Parts": parts}, **done_kw),
                create_only="IfNoneMatch" in done_kw)
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=db, Key=dk, UploadId=uid)
            except Exception:  # noqa: BLE001 - the copy's own error is the one to report
                pass
            raise
        return CopyResult(version=r.get("ETag", "").strip('"'), checksums={})


#: below this size gcsfs's ``put_file`` makes a simple (multipart) upload: ``_GCSOps.upload_file``
GCSFS_SIMPLE_BELOW = 5 << 20


class _GCSOps(_Ops):
    """GCS JSON API through gcsfs's session. Preconditions are generation matches."""

    def _call(self, *args, **kw):
        return self.rfs.fs.call(*args, **kw)

    def _store_err(self, e, what):
        status = getattr(e, "code", None) or getattr(e, "status", None)
        if status == 412:
            return RemoteError(PRECONDITION_FAILED, f"{what}: changed since it was read (precondition failed)")
        if isinstance(e, FileNotFoundError) or status == 404:
            return RemoteError(StoreError.NOT_FOUND, f"{what}: no such object")
        return RemoteError(StoreError.STORE_ERROR, f"{what}: {e}")

    @staticmethod
    def _info(key, r) -> ObjectInfo:
        return ObjectInfo(key=key, size=int(r.get("size", 0)), mtime=_mtime(r), etag=r.get("etag", ""),
                          generation=str(r.get("generation", "")), checksums=_checksums(r),
                          headers=said_headers("gcs", r.get("contentType"), r.get("metadata")))

    def head(self, path):
        b, k = self.split(path)
        try:
            r = self._call("GET", "b/{}/o/{}", b, k, json_out=True)
        except Exception as e:  # noqa: BLE001
            err = self._err(e, path)
            if err.code == StoreError.NOT_FOUND:
                return None
            raise err from e
        finally:
            self.rfs.stats.add("head")
        return self._info(k, r)

    def _check(self, path, *, if_absent=False, if_version: Optional[str] = None) -> None:
        """Check a precondition with a metadata read before a conditional call, against an
        emulator only (``STORAGE_EMULATOR_HOST``): GCS itself enforces ifGenerationMatch
        atomically, gcp-storage-emulator ignores it. One extra request there."""
        if not (if_absent or if_version) or not os.environ.get("STORAGE_EMULATOR_HOST"):
            return
        cur = self.head(path)
        if if_absent and cur is not None:
            raise RemoteError(ALREADY_EXISTS, f"{path}: already exists")
        if if_version and (cur is None or cur.generation != if_version):
            raise RemoteError(PRECONDITION_FAILED, f"{path}: changed since it was read (precondition failed)")

    def put(self, path, data: bytes, *, if_absent=False, if_version: Optional[str] = None,
            headers: Optional[dict] = None) -> str:
        b, k = self.split(path)
        self._check(path, if_absent=if_absent, if_version=if_version)
        kw = {}
        if if_absent:
            kw["ifGenerationMatch"] = "0"
        elif if_version:
            kw["ifGenerationMatch"] = if_version
        url = f"{self.rfs.fs._location}/upload/storage/v1/b/{b}/o"
        if headers or not data:
            # the object's resource and its bytes in one request (a multipart upload, gcsfs's
            # ``simple_upload`` form, with the conditions above); also the form of an empty
            # object, whose media upload (no body) gcp-storage-emulator drops unanswered
            headers = headers or {}
            res = {"name": k, "metadata": dict(headers.get("metadata") or {})}
            ct = headers.get("content_type") or "application/octet-stream"
            res["contentType"] = ct
            # a boundary the bytes do not hold (gcsfs's fixed "==0==" could stand in an object's
            # bytes and cut it short at the server)
            mark = "==" + secrets.token_hex(16) + "=="
            while mark.encode() in data:
                mark = "==" + secrets.token_hex(16) + "=="
            sep = b"--" + mark.encode()
            body = (sep + b"\nContent-Type: application/json; charset=UTF-8\n\n" + json.dumps(res).encode()
                    + b"\n" + sep + b"\nContent-Type: " + ct.encode("ascii") + b"\n\n" + bytes(data) + b"\n" + sep + b"--")
            call = lambda: self._call(  # noqa: E731
                "POST", url, uploadType="multipart", headers={"Content-Type": f'multipart/related; boundary="{mark}"'},
                data=body, json_out=True, **kw)
        else:
            call = lambda: self._call("POST", url, uploadType="media", name=k, data=data, json_out=True, **kw)  # noqa: E731
        r = self._request("put", path, call, up=len(data), create_only=if_absent)
        return str(r.get("generation", ""))

    def copy(self, src, dst, *, if_source_version: Optional[str] = None, if_absent=False,
             if_version: Optional[str] = None, listed_absent: bool = False,
             size: Optional[int] = None) -> CopyResult:
        sb, sk = self.split(src)
        db, dk = self.split(dst)
        self._check(src, if_version=if_source_version)
        self._check(dst, if_absent=if_absent and not listed_absent, if_version=if_version)
        kw = {}
        if if_source_version:
            kw["ifSourceGenerationMatch"] = if_source_version
        if if_absent:
            kw["ifGenerationMatch"] = "0"
        elif if_version:
            kw["ifGenerationMatch"] = if_version
        token = None
        try:
            while True:  # rewrite of a large object may take several calls
                if token:
                    kw["rewriteToken"] = token
                r = self._call("POST", "b/{}/o/{}/rewriteTo/b/{}/o/{}", sb, sk, db, dk, json_out=True, **kw)
                self.rfs.stats.add("copy")
                if r.get("done", True):
                    break
                token = r.get("rewriteToken")
        except Exception as e:  # noqa: BLE001
            raise self._err(e, f"copy {src} -> {dst}") from e
        res = r.get("resource", {})
        return CopyResult(version=str(res.get("generation", "")), checksums=_checksums(res))

    def upload_file(self, path: str, local: str, headers: Optional[dict] = None) -> ObjectInfo:
        """Stream a local file to ``path`` (gcsfs uploads in resumable chunks above its block size)."""
        size = os.path.getsize(local)
        chunks = max(1, math.ceil(size / (50 << 20)))
        if size < GCSFS_SIMPLE_BELOW:
            # gcsfs sends a file this small as one multipart request whose boundary is a fixed
            # "==0==": bytes holding "--==0==" ended the part at the server, the object cut short.
            # Sent by ``put`` (a media upload, or a multipart one with a boundary the bytes do not hold)
            with open(local, "rb") as f:
                self.put(path, f.read(), headers=headers)
        else:
            kw = {}
            if headers:
                kw = {"metadata": dict(headers.get("metadata") or {}),
                      "content_type": headers.get("content_type") or "application/octet-stream"}
            self._request("put", path, lambda: self.rfs.fs.put_file(local, path, **kw), up=size)
        if chunks > 1:
            self.rfs.stats.add("put", chunks)
        info = self.head(path)
        if info is None:
            raise RemoteError(StoreError.STORE_ERROR, f"{path}: missing right after its upload")
        return info

    def delete_coded(self, paths, versions: Optional[Dict[str, str]] = None) -> Dict[str, RemoteError]:
        failed: Dict[str, RemoteError] = {}
        versions = versions or {}
        for p in paths:
            b, k = self.split(p)
            kw = {"ifGenerationMatch": versions[p]} if versions.get(p) else {}
            try:
                self._call("DELETE", "b/{}/o/{}", b, k, **kw)
            except Exception as e:  # noqa: BLE001
                err = self._err(e, p)
                if err.code != StoreError.NOT_FOUND:
                    failed[p] = err
            finally:
                self.rfs.stats.add("delete")
        return failed

    def retention(self, bucket: str) -> dict:
        out = {"versioning": False, "noncurrent_expiry_days": None, "soft_delete_seconds": None}
        try:
            r = self._call("GET", "b/{}", bucket, json_out=True)
            self.rfs.stats.add("head")
            out["versioning"] = bool((r.get("versioning") or {}).get("enabled"))
            sd = (r.get("softDeletePolicy") or {}).get("retentionDurationSeconds")
            out["soft_delete_seconds"] = int(sd) if sd else None
        except Exception as e:  # noqa: BLE001
            out["error"] = str(e)
        return out


class _AzureOps(_Ops):
    """Azure Blob through azure-storage-blob (what adlfs uses); preconditions are ETag matches."""

    def __init__(self, rfs):
        super().__init__(rfs)
        from azure.storage.blob import BlobServiceClient

        kw = _az_kwargs()
        if kw.get("connection_string"):
            self.client = BlobServiceClient.from_connection_string(kw["connection_string"])
        else:
            from azure.identity import DefaultAzureCredential

            account = kw.get("account_name")
            cred = kw.get("account_key") or (_AZ_CREDENTIAL[0] if _AZ_CREDENTIAL and _AZ_CREDENTIAL[0] else DefaultAzureCredential())
            self.client = BlobServiceClient(f"https://{account}.blob.core.windows.net", credential=cred)

    def _blob(self, path):
        b, k = self.split(path)
        return self.client.get_blob_client(b, k)

    def _store_err(self, e, what):
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError

        if isinstance(e, ResourceModifiedError):
            return RemoteError(PRECONDITION_FAILED, f"{what}: changed since it was read (precondition failed)")
        if isinstance(e, ResourceExistsError):
            return RemoteError(ALREADY_EXISTS, f"{what}: already exists")
        if isinstance(e, ResourceNotFoundError):
            return RemoteError(StoreError.NOT_FOUND, f"{what}: no such object")
        return RemoteError(StoreError.STORE_ERROR, f"{what}: {e}")

    def head(self, path):
        try:
            p = self._blob(path).get_blob_properties()
        except Exception as e:  # noqa: BLE001
            err = self._err(e, path)
            if err.code == StoreError.NOT_FOUND:
                return None
            raise err from e
        finally:
            self.rfs.stats.add("head")
        cs = {}
        if p.content_settings and p.content_settings.content_md5:
            cs["md5"] = _b64(p.content_settings.content_md5)
        return ObjectInfo(key=self.split(path)[1], size=p.size, mtime=p.last_modified.timestamp(),
                          etag=p.etag.strip('"'), checksums=cs,
                          headers=said_headers("az", _field(p.content_settings, "content_type"), p.metadata))

    @staticmethod
    def _header_kw(headers: Optional[dict]) -> dict:
        """An object's headers as the blob client's upload arguments (none when not given): its
        user metadata and, of its content settings, the Content-Type alone."""
        if not headers:
            return {}
        from azure.storage.blob import ContentSettings

        kw = {"metadata": dict(headers.get("metadata") or {})}
        if headers.get("content_type"):
            kw["content_settings"] = ContentSettings(content_type=headers["content_type"])
        return kw

    def put(self, path, data: bytes, *, if_absent=False, if_version: Optional[str] = None,
            headers: Optional[dict] = None) -> str:
        from azure.core import MatchConditions

        kw = {"overwrite": not if_absent, **self._header_kw(headers)}
        if if_version:
            kw.update(etag=f'"{if_version}"', match_condition=MatchConditions.IfNotModified)
        r = self._request("put", path, lambda: self._blob(path).upload_blob(data, **kw), up=len(data))
        return r["etag"].strip('"')

    def copy(self, src, dst, *, if_source_version: Optional[str] = None, if_absent=False,
             if_version: Optional[str] = None, listed_absent: bool = False,
             size: Optional[int] = None) -> CopyResult:
        from azure.core import MatchConditions

        if size is None:
            info = self.head(src)
            size = info.size if info is not None else 0
        # a synchronous copy takes blobs up to 256 MiB; above, the service copies in the background
        # and the new blob's copy status is polled until it ends
        sync = size <= AZ_SYNC_COPY_MAX
        kw = {"requires_sync": True} if sync else {}
        if if_source_version:
            kw.update(source_etag=f'"{if_source_version}"', source_match_condition=MatchConditions.IfNotModified)
        if if_absent:
            kw.update(match_condition=MatchConditions.IfMissing)
        elif if_version:
            kw.update(etag=f'"{if_version}"', match_condition=MatchConditions.IfNotModified)
        what = f"copy {src} -> {dst}"
        r = self._request("copy", what, lambda: self._blob(dst).start_copy_from_url(self._blob(src).url, **kw))
        if not sync:
            self._await_copy(dst, r.get("copy_id"), what)
        info = self.head(dst)  # the copy's MD5 is a property of the new blob
        if info is None:
            raise RemoteError(StoreError.STORE_ERROR, f"{what}: the copy is missing right after it ended")
        return CopyResult(version=(info.etag if not sync else (r.get("etag") or info.etag)).strip('"'),
                          checksums=info.checksums)

    def _await_copy(self, dst: str, copy_id: Optional[str], what: str) -> None:
        """Wait for a background copy to end; one that failed, was aborted or stalls past
        ``AZ_COPY_TIMEOUT_S`` is an error (a stalled one is aborted, its partial blob deleted)."""
        deadline = time.monotonic() + AZ_COPY_TIMEOUT_S
        pause = 0.2
        while True:
            props = self._request("head", what, lambda: self._blob(dst).get_blob_properties())
            status = getattr(props.copy, "status", None)
            if status == "success" or (status is None and copy_id is None):
                return
            if status != "pending":
                raise RemoteError(StoreError.COPY_FAILED, f"{what}: the store's copy ended {status} "
                                                 f"({getattr(props.copy, 'status_description', '') or 'no reason given'})")
            if time.monotonic() > deadline:
                try:
                    self._blob(dst).abort_copy(copy_id)
                    self._blob(dst).delete_blob()
                except Exception:  # noqa: BLE001 - the timeout is the error to report
                    pass
                raise RemoteError(StoreError.COPY_FAILED, f"{what}: still copying after {AZ_COPY_TIMEOUT_S} s; aborted")
            time.sleep(pause)
            pause = min(2.0, pause * 1.5)

    def upload_file(self, path: str, local: str, headers: Optional[dict] = None) -> ObjectInfo:
        """Stream a local file to ``path`` in blocks (the client stages 4 MiB blocks above 64 MiB)."""
        size = os.path.getsize(local)
        kw = self._header_kw(headers)

        def up():
            with open(local, "rb") as f:
                return self._blob(path).upload_blob(f, overwrite=True, length=size, max_concurrency=2, **kw)

        self._request("put", path, up, up=size)
        blocks = math.ceil(size / (4 << 20)) if size > (64 << 20) else 0
        if blocks:
            self.rfs.stats.add("put", blocks)
        info = self.head(path)
        if info is None:
            raise RemoteError(StoreError.STORE_ERROR, f"{path}: missing right after its upload")
        return info

    def delete_coded(self, paths, versions: Optional[Dict[str, str]] = None) -> Dict[str, RemoteError]:
        from azure.core import MatchConditions

        failed: Dict[str, RemoteError] = {}
        by_container: Dict[str, list] = {}
        versions = versions or {}
        for p in paths:
            b, k = self.split(p)
            by_container.setdefault(b, []).append(k)
        for b, keys in by_container.items():
            cc = self.client.get_container_client(b)
            for i in range(0, len(keys), 256):  # a blob batch takes at most 256 sub-requests
                page = keys[i:i + 256]
                items = [({"name": k, "etag": f'"{versions[f"{b}/{k}"]}"',
                           "match_condition": MatchConditions.IfNotModified}
                          if versions.get(f"{b}/{k}") else k) for k in page]
                try:
                    results = list(cc.delete_blobs(*items, raise_on_any_failure=False))
                except Exception as e:  # noqa: BLE001
                    for k in page:
                        failed[f"{b}/{k}"] = self._err(e, f"{b}: delete")
                    continue
                finally:
                    self.rfs.stats.add("delete")
                for k, res in zip(page, results):
                    if res.status_code not in (200, 202, 404):
                        code = {412: PRECONDITION_FAILED, 401: REFUSED, 403: REFUSED}.get(res.status_code,
                                                                                        StoreError.STORE_ERROR)
                        failed[f"{b}/{k}"] = RemoteError(code, f"HTTP {res.status_code}")
        return failed

    def retention(self, bucket: str) -> dict:
        out = {"versioning": False, "noncurrent_expiry_days": None, "soft_delete_seconds": None}
        try:
            props = self.client.get_service_properties()
            self.rfs.stats.add("head")
            drp = props.get("delete_retention_policy")
            if drp is not None and getattr(drp, "enabled", False):
                out["soft_delete_seconds"] = int(drp.days or 0) * 86400
        except Exception as e:  # noqa: BLE001
            out["error"] = str(e)
        return out


_OPS = {"s3": _S3Ops, "gcs": _GCSOps, "az": _AzureOps}


def ops_for(rfs: "RemoteFS") -> _Ops:
    """The conditional-operation client of ``rfs``'s store; ``RemoteError('not_supported')``
    for an fsspec scheme without one (those can be scanned and planned, not changed)."""
    cls = _OPS.get(rfs.protocol)
    if cls is None:
        raise RemoteError(StoreError.NOT_SUPPORTED, f"{rfs.url}: changing a {rfs.scheme}:// logdir is not supported "
                          "(no conditional writes); scan and plan work")
    return cls(rfs)
