"""One S3 conditional client per what it is built from, per process (``remote._s3_client``): a
botocore client costs ~15 ms of CPU to build and every ``RemoteFS`` that wrote built its own (r39
helper T: 8.3 % of the s3 crash matrix's CPU). Stores on one endpoint with one configuration
share it, each still writing its own keys; another endpoint, another retry setting or another
session's credentials get another client; a process that found no credentials keeps no client
and finds them once they appear; the clients kept are bounded."""
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tb_footprint_plugin.storage import remote
from tb_footprint_plugin.storage.store_object import ObjectStore

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def kept(monkeypatch):
    """This test's clients (the process's others are not looked at, nor changed)."""
    clients = collections.OrderedDict()
    monkeypatch.setattr(remote, "_S3_CLIENTS", clients)
    return clients


def test_stores_on_one_endpoint_share_one_client_and_each_writes_its_own_keys(s3_bucket, kept):
    a, b = ObjectStore(s3_bucket.url("one")), ObjectStore(s3_bucket.url("two"))
    assert a.ops.client is b.ops.client and len(kept) == 1
    a.put("k", b"1")
    b.put("k", b"2")
    assert a.read_all("k") == b"1" and b.read_all("k") == b"2"
    assert a.rfs.stats.to_dict()["put"] == 1 and b.rfs.stats.to_dict()["put"] == 1  # each store counts its own


def test_another_endpoint_retry_setting_or_session_gets_another_client(s3_bucket, kept, monkeypatch):
    url = s3_bucket.url("one")
    first = ObjectStore(url).ops.client
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint.replace("127.0.0.1", "localhost"))  # the same server
    other = ObjectStore(url)
    assert other.ops.client is not first and other.ops.client.meta.endpoint_url.startswith("http://localhost")
    other.put("k", b"by localhost")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    retried = ObjectStore(url).ops.client
    assert retried not in (first, other.ops.client) and retried.meta.config.retries["total_max_attempts"] == 3  # 2 retries
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    again = ObjectStore(url)
    assert again.ops.client is first and again.read_all("k") == b"by localhost"
    monkeypatch.setattr(remote, "_S3_SESSION", [])  # another session: its own credentials
    fresh = ObjectStore(url).ops.client
    assert fresh is not first and ObjectStore(url).ops.client is fresh


def test_the_clients_kept_are_bounded_the_least_recently_used_let_go(s3_bucket, kept, monkeypatch):
    url = s3_bucket.url("one")
    first = ObjectStore(url).ops.client
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    for i in range(remote.S3_CLIENTS_KEPT + 4):  # clients are built without a request
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{40000 + i}")
        ObjectStore(url).ops.client
    assert len(kept) == remote.S3_CLIENTS_KEPT
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    assert ObjectStore(url).ops.client is not first  # let go: built again


CHILD = r"""
import json, os, sys
from tb_footprint_plugin.storage.store_object import ObjectStore

url = sys.argv[1]
before = ObjectStore(url).ops.client
os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
store = ObjectStore(url)
store.put("k", b"signed")
print(json.dumps({"kept_without": store.ops.client is before, "kept_with": ObjectStore(url).ops.client is store.ops.client,
                  "read": store.read_all("k").decode()}))
"""


def test_a_process_without_credentials_keeps_no_client_and_finds_them_when_they_appear(s3_bucket, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               AWS_ENDPOINT_URL=s3_bucket.server.endpoint, AWS_DEFAULT_REGION="us-east-1",
               AWS_SHARED_CREDENTIALS_FILE=str(empty), AWS_CONFIG_FILE=str(empty), AWS_EC2_METADATA_DISABLED="true")
    p = subprocess.run([sys.executable, "-c", CHILD, s3_bucket.url("creds")], env=env, capture_output=True,
                       text=True, timeout=120, cwd=str(REPO))
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"kept_without": False, "kept_with": True, "read": "signed"}, got
