"""Azure with nothing configured but an account name says ``no_credentials`` at once, and gcsfs's
refusals and server errors are coded (r20 task E item 4).

- Azure with ``AZURE_STORAGE_ACCOUNT_NAME`` alone (no key, connection string, SAS token or service
  principal): adlfs hands the client ``DefaultAzureCredential``, which finds nothing, and the
  storage client retried every request with its back-off (15 s, then 3 times longer...) before
  its ``ClientAuthenticationError`` reached us: 80-175 s to say ``no_credentials``. Now the
  credential chain is asked once, before the filesystem is made: what it cannot find is
  ``no_credentials`` at once (the same decision, ``credentials_missing``, without the retries).
  Something configured (a SAS token, a key, a connection string: Azurite's tests) is not asked.
- gcsfs says 403 with a plain ``OSError("Forbidden: ...")`` (``gcsfs.retry.validate_response``)
  and a 5xx with an ``HttpError``, no ``OSError``: the first was ``store_error``, the second
  escaped every catch uncoded. Now a refusal is ``permission_denied`` and a server error
  ``store_error``, decided by the exception's type and where gcsfs raised it, never its words.
  The errors are raised by gcsfs's own ``validate_response`` from a fake filesystem call.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import remote
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

REPO = Path(__file__).resolve().parents[1]
URL = "az://logs-container/runs"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _azure_env(tmp_path, **more) -> dict:
    """An environment where nothing but an account name is configured: no other Azure variable,
    no developer tool on PATH, a HOME of its own (no token cache), the managed identity endpoint
    a closed local port (no network needed, as off Azure)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AZURE_", "MSI_", "IDENTITY_", "IMDS_"))}
    env.update(AZURE_STORAGE_ACCOUNT_NAME="tbfpnosuchaccount", HOME=str(tmp_path), PATH=os.path.dirname(sys.executable),
               AZURE_POD_IDENTITY_AUTHORITY_HOST=f"http://127.0.0.1:{_closed_port()}",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **more)
    return env



def _use_azure_env(monkeypatch, tmp_path, **more) -> None:
    """``_azure_env`` in this process: every Azure variable set before (another test's: Azurite's
    connection string) removed first, so nothing but what it names is configured."""
    for k in list(os.environ):
        if k.startswith(("AZURE_", "MSI_", "IDENTITY_", "IMDS_")):
            monkeypatch.delenv(k)
    for k, v in _azure_env(tmp_path, **more).items():
        monkeypatch.setenv(k, v)

_LIST = """
import json, sys, time
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore
t = time.monotonic()
try:
    list(ObjectStore(sys.argv[1]).list(""))
    out = {"code": None}
except StoreFailure as e:
    out = {"code": str(e.code), "message": str(e)}
out["seconds"] = time.monotonic() - t
print(json.dumps(out))
"""


def test_azure_with_only_an_account_name_is_no_credentials_at_once(tmp_path):
    try:
        p = subprocess.run([sys.executable, "-c", _LIST, URL], env=_azure_env(tmp_path), capture_output=True,
                           text=True, timeout=45)
    except subprocess.TimeoutExpired:
        pytest.fail("no answer in 45 s: the storage client's retries of a credential that finds nothing")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["code"] == StoreError.NO_CREDENTIALS, out
    assert URL in out["message"] and "AZURE_STORAGE_ACCOUNT_KEY" in out["message"], out
    assert out["seconds"] < 30, out


def test_azure_with_a_sas_token_is_not_asked_for_a_credential(tmp_path, monkeypatch):
    """A SAS token signs the requests itself: no credential chain is asked (nor one an emulator's
    connection string would make: Azurite's tests)."""
    _use_azure_env(monkeypatch, tmp_path, AZURE_STORAGE_SAS_TOKEN="sv=2024-01-01&sig=x")
    asked = []
    monkeypatch.setattr(remote, "azure_credential_missing", lambda: asked.append(1))
    rfs = RemoteFS(URL)
    assert asked == [] and rfs.protocol == "az"
    monkeypatch.delenv("AZURE_STORAGE_SAS_TOKEN")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    RemoteFS(URL)
    assert asked == []


def test_azure_whose_credential_finds_a_token_goes_on(tmp_path, monkeypatch):
    _use_azure_env(monkeypatch, tmp_path)
    import azure.identity
    from azure.core.credentials import AccessToken

    class Found:
        def get_token(self, *scopes, **kw):
            return AccessToken("t", int(time.time()) + 3600)

        def close(self):
            pass

    monkeypatch.setattr(remote, "_AZ_CREDENTIAL", [])  # this process's found credential: the fake's, undone after
    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", Found)
    rfs = RemoteFS(URL)
    assert rfs.protocol == "az"


def test_azure_credential_chain_is_walked_once_per_process(tmp_path, monkeypatch):
    """The probe's credential signs the client's requests (review R2-1): adlfs made its own
    ``DefaultAzureCredential`` (async), which walked the chain again for its first request (with
    ``az login``, a second ``az`` subprocess). Counted: ``get_token`` calls of every
    ``DefaultAzureCredential`` made, the probe's and the client's first request's (asked as
    azure-core's bearer policy asks the async client's credential, no network)."""
    _use_azure_env(monkeypatch, tmp_path)
    import azure.identity
    import azure.identity.aio
    from azure.core.credentials import AccessToken
    from adlfs import AzureBlobFileSystem
    from fsspec.asyn import sync

    walks: list = []

    class Chain:
        def get_token(self, *scopes, **kw):
            walks.append(scopes)
            return AccessToken("t", int(time.time()) + 3600)

        def close(self):
            pass

    class AsyncChain:
        async def get_token(self, *scopes, **kw):
            walks.append(scopes)
            return AccessToken("t", int(time.time()) + 3600)

        async def close(self):
            pass

    monkeypatch.setattr(remote, "_AZ_CREDENTIAL", [])
    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", Chain)
    monkeypatch.setattr(azure.identity.aio, "DefaultAzureCredential", AsyncChain)
    AzureBlobFileSystem.clear_instance_cache()  # a client an earlier test made: not this one's
    rfs = RemoteFS(URL)
    client_cred = rfs.fs.credential  # what adlfs signs its client's requests with
    token = sync(rfs.fs.loop, client_cred.get_token, remote.AZ_STORAGE_SCOPE)
    assert token.token == "t"
    assert RemoteFS(URL).fs is rfs.fs  # a second one in the process: not asked again, the same client
    assert walks == [(remote.AZ_STORAGE_SCOPE,)]  # before: 2, the probe's and adlfs's own chain's


# --- gcsfs ---------------------------------------------------------------------------------------
def _gcs(monkeypatch) -> RemoteFS:
    """A gcsfs client (anonymous, as an emulator's: it makes no request when made)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{_closed_port()}")
    return RemoteFS("gs://tbfp-bucket/runs")


def _answers(status: int, body: bytes = b""):
    """A filesystem call that gets ``status``: what gcsfs raises for it (its own validate_response)."""
    from gcsfs.retry import validate_response

    def call(*a, **kw):
        validate_response(status, body, "tbfp-bucket/runs/x")
        raise AssertionError(f"gcsfs raised nothing for {status}")
    return call


def _code_of(call) -> StoreError:
    with pytest.raises(Exception) as e:
        call()
    assert isinstance(e.value, StoreFailure), (type(e.value), e.value)
    return e.value.code


FORBIDDEN = json.dumps({"error": {"code": 403, "message": "caller does not have storage.objects.get access"}}).encode()
UNAVAILABLE = json.dumps({"error": {"code": 503, "message": "Service Unavailable"}}).encode()


@pytest.mark.parametrize("status,body,code", [(403, FORBIDDEN, StoreError.PERMISSION),
                                              (403, b"", StoreError.PERMISSION),
                                              (503, UNAVAILABLE, StoreError.STORE_ERROR),
                                              (500, b"backend error", StoreError.STORE_ERROR)])
def test_gcs_refusals_and_server_errors_are_coded(monkeypatch, status, body, code):
    rfs = _gcs(monkeypatch)
    store = ObjectStore(rfs.url, rfs=rfs)
    for name in ("cat_file", "exists", "pipe_file", "call"):
        monkeypatch.setattr(rfs.fs, name, _answers(status, body))
    monkeypatch.setattr(rfs, "find_objects", _answers(status, body))  # the client's listing (gcsfs's objects.list)
    assert _code_of(lambda: list(store.list(""))) == code  # a listing (fsspec's find)
    assert _code_of(lambda: store.read_range("a/b", 0, 4)) == code  # a ranged read (fsspec)
    assert _code_of(lambda: store.stat("a/b")) == code  # a head (the JSON API through gcsfs's session)
    assert _code_of(lambda: store.put("a/b", b"x", if_absent=True)) == code  # a conditional put


def test_a_gcs_refusal_is_told_by_where_gcsfs_raised_it_not_by_its_words():
    """A plain OSError raised elsewhere, whatever it says, is no refusal."""
    assert not remote.gcs_forbidden(OSError("Forbidden: tbfp-bucket/runs/x"))
    try:
        _answers(403)()
    except OSError as e:
        assert remote.gcs_forbidden(e)
