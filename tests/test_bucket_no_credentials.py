"""A verb on a bucket whose client finds no credentials ended in botocore's traceback (exit 1,
report_F: ``vault lifecycle --backup-dir s3://…``). Now the storage layer turns the client's
"no credentials" into the coded failure (``StoreError.NO_CREDENTIALS``) naming the bucket's URL
and what to set, and the CLI prints it with its code and exits 1, without a traceback.

"No credentials" is made against the moto server: every AWS credential variable cleared and the
shared credentials and config files pointed at empty files (the instance metadata lookup off).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store import StoreFailure

url = sys.argv[1]
out = {}
for what, call in (("list", lambda s: list(s.list(""))), ("stat", lambda s: s.stat("a/b")),
                   ("put", lambda s: s.put("a/b", b"x"))):
    try:
        call(ObjectStore(url))
        out[what] = None
    except StoreFailure as e:
        out[what] = {"code": str(e.code.value), "message": str(e)}
print(json.dumps(out))
'''


@pytest.fixture
def no_credentials(tmp_path, s3_bucket) -> dict:
    """The environment of a process that reaches the moto server but has no AWS credentials."""
    empty = tmp_path / "empty"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               AWS_ENDPOINT_URL=s3_bucket.server.endpoint, S3_ENDPOINT=s3_bucket.server.endpoint,
               AWS_DEFAULT_REGION="us-east-1", AWS_SHARED_CREDENTIALS_FILE=str(empty),
               AWS_CONFIG_FILE=str(empty), AWS_EC2_METADATA_DISABLED="true")
    return env


def _cli(env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_store_says_no_credentials_as_a_coded_failure_naming_the_url(s3_bucket, no_credentials):
    url = s3_bucket.url("logs")
    p = subprocess.run([sys.executable, "-c", CHILD, url], env=no_credentials, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    for what in ("list", "stat", "put"):  # a listing, a head, a conditional write: each client path
        got = out[what]
        assert got and got["code"] == "no_credentials", (what, out)
        assert url in got["message"] and "AWS_ACCESS_KEY_ID" in got["message"], (what, got)
    assert s3_bucket.hashes("logs") == {}  # nothing was written


@pytest.mark.parametrize("verb", [["vault", "lifecycle", "--backup-dir", "{url}/vaults"], ["scan", "{url}/logs"],
                                  ["status", "{url}/logs"]])
def test_a_verb_without_credentials_prints_the_coded_failure_not_a_traceback(s3_bucket, no_credentials, verb):
    args = [a.format(url=s3_bucket.url()) for a in verb]
    p = _cli(no_credentials, *args)
    assert p.returncode == 1, (p.returncode, p.stderr[-3000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert f"tb-footprint {args[0]}: error [no_credentials]: {s3_bucket.url()}" in last, last
    assert "AWS_ACCESS_KEY_ID" in last and "AWS_PROFILE" in last, last


def test_the_json_of_a_verb_without_credentials_carries_the_code(s3_bucket, no_credentials):
    p = _cli(no_credentials, "status", s3_bucket.url("logs"), "--json")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    err = json.loads(p.stdout)["error"]
    assert err["code"] == "no_credentials" and s3_bucket.url("logs") in err["message"], err
