"""GCS and Azure tell "no credentials found" apart from a refusal, as S3 does
(``test_bucket_no_credentials``): the coded failure ``StoreError.NO_CREDENTIALS`` naming the URL and
what to set, decided by the clients' error types and fields, never by their words.

- Azure without an account (no ``AZURE_STORAGE_CONNECTION_STRING`` nor ``AZURE_STORAGE_ACCOUNT_NAME``):
  adlfs refuses to start, and that was coded ``unknown_scheme`` ("no filesystem for az://").
- Azure with an account but no key, where ``DefaultAzureCredential`` finds nothing: azure-core's
  ``ClientAuthenticationError`` with no HTTP response (the credential got no token; a refusal by the
  service carries its response) went out uncoded.
- GCS where the client finds no credentials: gcsfs goes anonymous, and the 401 an anonymous request
  gets was a bare ``HttpError``.

The emulators take any request (Azurite's connection string signs it, the GCS emulator wants no
credentials), so the two request-time cases raise the client's own error types from the
filesystem's calls; the account-less Azure case needs no server.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import remote
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

REPO = Path(__file__).resolve().parents[1]
AZURE_VARS = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY")


def _failure(call) -> BaseException:
    with pytest.raises(Exception) as e:
        call()
    return e.value


def _no_credentials(e: BaseException, url: str, *hints: str) -> None:
    assert isinstance(e, StoreFailure) and e.code == StoreError.NO_CREDENTIALS, (type(e), e)
    assert url in str(e) and all(h in str(e) for h in hints), str(e)


def test_azure_without_an_account_is_no_credentials_naming_what_to_set(monkeypatch):
    for k in AZURE_VARS:
        monkeypatch.delenv(k, raising=False)
    e = _failure(lambda: ObjectStore("az://logs-container/runs"))
    _no_credentials(e, "az://logs-container/runs", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME")


def test_the_cli_says_it_for_azure_without_an_account():
    env = {k: v for k, v in os.environ.items() if k not in AZURE_VARS}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "scan", "az://logs-container/runs"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert "error [no_credentials]: az://logs-container/runs" in last and "AZURE_STORAGE_CONNECTION_STRING" in last, last


class _Refused:
    """What azure-core keeps of the service's HTTP response to a request it would not authenticate."""

    status_code, reason, headers, content_type = 403, "Forbidden", {}, "application/xml"

    def text(self, encoding=None) -> str:
        return ""

    def body(self) -> bytes:
        return b""


def test_azure_credential_without_a_token_is_no_credentials_and_a_refusal_is_not(objstore_pool, monkeypatch):
    from azure.core.exceptions import ClientAuthenticationError

    url = Bucket(objstore_pool.get("az")).url("runs")
    rfs = RemoteFS(url)

    def no_token(*a, **kw):  # what DefaultAzureCredential raises when no credential of its chain has one
        raise ClientAuthenticationError(message="DefaultAzureCredential failed to retrieve a token")

    monkeypatch.setattr(rfs, "find_objects", no_token)
    _no_credentials(_failure(lambda: list(ObjectStore(url, rfs=rfs).list(""))), url, "AZURE_STORAGE_ACCOUNT_KEY")

    def refused(*a, **kw):  # the service's answer to a key it does not accept
        raise ClientAuthenticationError(message="Server failed to authenticate the request", response=_Refused())

    monkeypatch.setattr(rfs, "find_objects", refused)
    e = _failure(lambda: list(ObjectStore(url, rfs=rfs).list("")))
    assert isinstance(e, StoreFailure) and e.code == StoreError.PERMISSION, (type(e), e)  # a refusal, coded


def _anonymous_401(*a, **kw):
    from gcsfs.retry import HttpError

    raise HttpError({"code": 401, "message": "Anonymous caller does not have storage.objects.list access"})


def test_gcs_that_found_no_credentials_says_so_on_the_401_it_gets(objstore_pool, monkeypatch):
    url = Bucket(objstore_pool.get("gs")).url("runs")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    # the client left to find credentials (as without an emulator): none here, so it goes anonymous
    monkeypatch.setattr(remote, "_gcs_kwargs", lambda: {})
    monkeypatch.setitem(remote._KWARGS, "gcs", remote._gcs_kwargs)
    rfs = RemoteFS(url)
    assert rfs.fs.credentials.method == "anon"
    monkeypatch.setattr(rfs, "find_objects", _anonymous_401)
    monkeypatch.setattr(rfs.fs, "call", _anonymous_401)
    store = ObjectStore(url, rfs=rfs)
    for call in (lambda: list(store.list("")), lambda: store.stat("a/b")):  # a listing, a head
        _no_credentials(_failure(call), url, "GOOGLE_APPLICATION_CREDENTIALS")


def test_gcs_with_its_credentials_refused_is_a_refusal(objstore_pool, monkeypatch):
    url = Bucket(objstore_pool.get("gs")).url("runs")
    rfs = RemoteFS(url)  # the emulator's anonymous client, asked for: not "found none"
    assert not getattr(rfs, "unsigned", False)
    monkeypatch.setattr(rfs, "find_objects", _anonymous_401)
    e = _failure(lambda: list(ObjectStore(url, rfs=rfs).list("")))
    assert isinstance(e, StoreFailure) and e.code == StoreError.PERMISSION, (type(e), e)  # a refusal, coded
