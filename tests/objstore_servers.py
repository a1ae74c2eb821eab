"""Real object-store servers on loopback for the test suite: moto (S3), gcp-storage-emulator
(GCS) and Azurite (Azure Blob).

Each server runs as a child process on a free 127.0.0.1 port, is polled until it answers
HTTP, and is stopped (by its own pid) when the session ends. ``Server.env`` holds the
variables the clients read — the same ones users set: ``S3_ENDPOINT``/``AWS_ENDPOINT_URL``
for boto3, s3fs and TensorBoard's S3 reader; ``STORAGE_EMULATOR_HOST`` for gcsfs and the
google clients; ``AZURE_STORAGE_CONNECTION_STRING`` for adlfs.

A server that cannot start is an error, never a skip: the suite installs all three
(``scripts/test.sh``).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
AZURITE = REPO / ".ci" / "node" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's well-known development account (public, documented; it exists only in emulators).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")
STARTUP_TIMEOUT = 60.0


class ServerError(RuntimeError):
    """A test server could not be started; the message says which and why."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """One running server: its scheme, endpoint, client environment and process."""

    scheme: str  # 's3' | 'gs' | 'az'
    endpoint: str
    env: Dict[str, str]
    proc: subprocess.Popen
    log_path: str
    workdir: Optional[str] = None
    buckets: List[str] = field(default_factory=list)

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server process (its own process group, started by us) and clean up."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _wait_http(url: str, proc: subprocess.Popen, name: str, log_path: str,
               timeout: float = STARTUP_TIMEOUT) -> None:
    """Poll ``url`` until any HTTP answer comes back (an error status counts: it is up)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                raise ServerError(f"{name} exited with {proc.returncode} during startup:\n{f.read()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError as e:
            last = e
            time.sleep(0.2)
    raise ServerError(f"{name} did not answer on {url} within {timeout:.0f} s ({last})")


def _spawn(cmd: List[str], name: str, workdir: str, env: Optional[dict] = None) -> tuple:
    log_path = os.path.join(workdir, f"{name}.log")
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=workdir, env={**os.environ, **(env or {})}, start_new_session=True)
    finally:
        log.close()
    return proc, log_path


#: moto's server entry point without two per-request costs that are not S3's: its dispatcher
#: listed moto's package folder (~150 ``isdir`` calls) for every request to learn the names of its
#: services, which cannot change while it runs, and werkzeug logged a line for every request
#: (warnings and errors are still logged). Together ~15% of the server's CPU; every request is
#: still served by the same moto S3 backend, as before.
MOTO_MAIN = ("import logging, sys; import moto.backends as b; names = tuple(b.list_of_moto_modules()); "
             "b.list_of_moto_modules = lambda: names; logging.getLogger('werkzeug').setLevel(logging.WARNING); "
             "from moto.server import main; sys.argv[0] = 'moto_server'; main()")


def start_moto() -> Server:
    """moto's standalone S3 server (``moto[server]``, see ``MOTO_MAIN``), one in-memory account."""
    workdir = tempfile.mkdtemp(prefix="tbfp-moto-")
    port = free_port()
    proc, log_path = _spawn([sys.executable, "-c", MOTO_MAIN, "-H", "127.0.0.1", "-p", str(port)],
                            "moto", workdir)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_http(endpoint + "/moto-api/", proc, "moto S3 server", log_path)
    except BaseException:
        Server("s3", endpoint, {}, proc, log_path, workdir).stop()
        raise
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        # boto3 >= 1.28 and s3fs read AWS_ENDPOINT_URL; TensorBoard's S3 reader reads S3_ENDPOINT.
        "AWS_ENDPOINT_URL": endpoint,
        "S3_ENDPOINT": endpoint,
        # no ~/.aws of the machine's user leaks into the tests
        "AWS_CONFIG_FILE": os.path.join(workdir, "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(workdir, "aws-credentials"),
    }
    return Server("s3", endpoint, env, proc, log_path, workdir)


#: The emulator's entry point with a deeper listen backlog. It serves one request at a time from an
#: ``http.server.HTTPServer``, whose backlog is 5: a client sending 10+ requests at once (gcsfs's
#: ``pipe``/``cat`` of many keys, the engine's concurrent manifest reads) overflowed it, the kernel
#: dropped the SYNs and each retried after 1 s or more, so [gs] tests spent most of their time in
#: TCP retransmits (a ``pipe`` of 150 objects: 0.36 s an object; 0.009 s with this backlog). The
#: requests are still served one by one, in order, as before.
#: In memory (``--in-memory``), the emulator still serialized the metadata of every object it
#: holds (``json.dumps(..., indent=2)``) into an in-memory ``.meta`` after every write, which only
#: its start reads back: each write cost time proportional to all the objects the session's tests
#: had made (2,000 objects held: 14 ms of CPU a request instead of 1.3). That dump is skipped in
#: memory only; the objects, their metadata and every answer are the emulator's as before. Its
#: logger is set to warnings (its main sets the root to DEBUG: an INFO line every request).
GCS_MAIN = ("import sys, http.server; http.server.HTTPServer.request_queue_size = 1024; "
            "import logging; logging.getLogger('gcp_storage_emulator').setLevel(logging.WARNING); "
            "from gcp_storage_emulator import storage as s; dump = s.Storage._write_config_to_file; "
            "s.Storage._write_config_to_file = lambda self: None if self._use_memory_fs else dump(self); "
            "from gcp_storage_emulator.__main__ import main; sys.argv[0] = 'gcp-storage-emulator'; "
            "sys.exit(main())")


def start_gcs() -> Server:
    """gcp-storage-emulator, in memory, from this interpreter's environment (see ``GCS_MAIN``)."""
    workdir = tempfile.mkdtemp(prefix="tbfp-gcs-")
    port = free_port()
    proc, log_path = _spawn([sys.executable, "-c", GCS_MAIN, "start", "--host", "127.0.0.1", "--port", str(port),
                             "--in-memory"], "gcs", workdir)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_http(endpoint + "/storage/v1/b?project=test", proc, "gcp-storage-emulator", log_path)
    except BaseException:
        Server("gs", endpoint, {}, proc, log_path, workdir).stop()
        raise
    env = {
        "STORAGE_EMULATOR_HOST": endpoint,
        "GOOGLE_CLOUD_PROJECT": "test",
        # google-auth must never probe the cloud metadata server from a test (no off-host traffic)
        "NO_GCE_CHECK": "True",
        "GCE_METADATA_HOST": "127.0.0.1:9",
        "GCE_METADATA_IP": "127.0.0.1:9",
        # gcsfs 2026.x otherwise probes the bucket type over gRPC and stalls ~60 s per bucket.
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    return Server("gs", endpoint, env, proc, log_path, workdir)


def start_azurite() -> Server:
    """Azurite's blob service from the repo-local npm install, in memory, telemetry off."""
    if not AZURITE.exists():
        raise ServerError(f"Azurite is not installed at {AZURITE}; run scripts/test.sh "
                          "(npm install --prefix .ci/node azurite)")
    workdir = tempfile.mkdtemp(prefix="tbfp-azurite-")
    port = free_port()
    proc, log_path = _spawn([str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                             "--inMemoryPersistence", "--skipApiVersionCheck", "--loose",
                             "--disableTelemetry", "--silent"], "azurite", workdir)
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    try:
        _wait_http(endpoint + "?comp=list", proc, "Azurite", log_path)
    except BaseException:
        Server("az", endpoint, {}, proc, log_path, workdir).stop()
        raise
    conn = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint};")
    env = {"AZURE_STORAGE_CONNECTION_STRING": conn, "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT}
    return Server("az", endpoint, env, proc, log_path, workdir)


STARTERS = {"s3": start_moto, "gs": start_gcs, "az": start_azurite}


# --- pytest fixtures (imported by conftest.py) ----------------------------------------------
import itertools  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402

SCHEMES = ("s3", "gs", "az")
_FSSPEC = {"s3": "s3", "gs": "gcs", "az": "az"}


class ServerPool:
    """Servers started on first use and kept for the session; their env is set process-wide
    (and restored at the end) so the code under test and its subprocesses find them the way a
    user's shell would tell them."""

    def __init__(self) -> None:
        self.servers: Dict[str, Server] = {}
        self._saved_env: Dict[str, Optional[str]] = {}

    def get(self, scheme: str) -> Server:
        if scheme not in self.servers:
            srv = STARTERS[scheme]()
            self.servers[scheme] = srv
            for k, v in srv.env.items():
                self._saved_env.setdefault(k, os.environ.get(k))
                os.environ[k] = v
        return self.servers[scheme]

    def close(self) -> None:
        for srv in self.servers.values():
            srv.stop()
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: the botocore data loader of the first S3 session the helper made in this process
_S3_LOADER: list = []


def _s3_session():
    """A new botocore session for one ``Bucket``'s S3 client (credentials and config found again,
    as s3fs's own session would), on the data loader of the first one: each fresh client otherwise
    read and parsed the S3 service model and endpoint rules again (0.19 s of CPU a bucket, 0.06 s
    with the loader shared; hundreds of tests make an S3 bucket)."""
    from aiobotocore.session import AioSession

    session = AioSession()
    if _S3_LOADER:
        session.register_component("data_loader", _S3_LOADER[0])
    else:
        _S3_LOADER.append(session.get_component("data_loader"))
    return session


class Bucket:
    """A fresh bucket (container) on one server, with upload/download helpers for tests."""

    _n = itertools.count()

    def __init__(self, server: Server):
        import fsspec

        self.server = server
        self.scheme = server.scheme
        kw = {"az": {"connection_string": server.env.get("AZURE_STORAGE_CONNECTION_STRING")},
              "gs": {"token": "anon"},
              "s3": {"session": _s3_session()}}.get(self.scheme, {})
        self.fs = fsspec.filesystem(_FSSPEC[self.scheme], skip_instance_cache=True, **kw)
        self.name = f"tbfp-{next(self._n)}-{uuid.uuid4().hex[:8]}"
        self.fs.mkdir(self.name)
        server.buckets.append(self.name)

    def url(self, prefix: str = "") -> str:
        return f"{self.scheme}://{self.name}" + (f"/{prefix.strip('/')}" if prefix else "")

    def key(self, prefix: str = "") -> str:
        return self.name + (f"/{prefix.strip('/')}" if prefix else "")

    def upload(self, local_dir, prefix: str) -> str:
        """Put every file under ``local_dir`` at ``prefix``; returns the logdir URL."""
        for root, _dirs, files in os.walk(local_dir):
            for n in files:
                p = os.path.join(root, n)
                rel = os.path.relpath(p, local_dir).replace(os.sep, "/")
                with open(p, "rb") as f:
                    self.fs.pipe_file(f"{self.key(prefix)}/{rel}", f.read())
        self.fs.invalidate_cache()
        return self.url(prefix)

    def drop(self) -> None:
        """After its test, an Azure container goes with its blobs (one request): Azurite's
        in-memory store costs more CPU a request the more blobs it holds, in any container, so
        blobs left by earlier tests made each later request slower (a put/get/head 2.1 ms of CPU
        with nothing held, 5.6 ms with 2,000 blobs in another container, 2.5 ms once that
        container is dropped). An S3 or GCS bucket stays: emptying one is a request an object."""
        if self.scheme == "az":
            self.fs.rmdir(self.name)

    def hashes(self, prefix: str, skip: tuple = ()) -> Dict[str, str]:
        """rel key -> sha256 of every object under ``prefix`` (read back from the store), but those
        whose rel key starts with one of ``skip`` (not read at all: a caller that drops the tool's
        state says so, and its backups are not downloaded for nothing)."""
        import asyncio
        import hashlib

        from fsspec.asyn import sync

        self.fs.invalidate_cache()
        base = self.key(prefix)
        names = [n for n in self.fs.find(base) if not n[len(base) + 1:].startswith(tuple(skip))]

        async def read_all():
            # a few GETs at a time instead of one round trip after another (each fsspec client
            # here is async; the servers answer them in any order, the keys keep theirs)
            out = []
            for i in range(0, len(names), 16):
                out += await asyncio.gather(*(self.fs._cat_file(n) for n in names[i:i + 16]))
            return out

        datas = sync(self.fs.loop, read_all) if names else []
        return {n[len(base) + 1:]: hashlib.sha256(d).hexdigest() for n, d in zip(names, datas)}


@pytest.fixture(scope="session")
def objstore_pool():
    pool = ServerPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(params=SCHEMES)
def bucket(request, objstore_pool) -> Bucket:
    """A fresh bucket on each of the three servers (the test runs once per store)."""
    b = Bucket(objstore_pool.get(request.param))
    yield b
    b.drop()


@pytest.fixture
def s3_bucket(objstore_pool) -> Bucket:
    return Bucket(objstore_pool.get("s3"))
