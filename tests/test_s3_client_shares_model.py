"""The S3 conditional client (``RemoteFS.ops``: puts, copies, deletes) is built over what the
listing's client already read (r19 report D: a cold bucket scan's one write, its cache, built a
``boto3.client`` of its own just for it, which imported boto3 and read and parsed the S3 service
model a second time: ~0.1 s of CPU more per process than when s3fs wrote the cache).

Checked in a fresh interpreter, where nothing is cached yet: a listing then a put read the S3
service model once, import no boto3, and the put is the same request as before (one put, a
SHA256 checksum on the object); a second client in the process reads neither the model nor the
credentials again.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys
import botocore.loaders as loaders

read = []
real = loaders.JSONFileLoader.load_file

def counting(self, path):
    read.append(path)
    return real(self, path)

loaders.JSONFileLoader.load_file = counting
import botocore.credentials as credentials

looked = []
real_load = credentials.CredentialResolver.load_credentials

def looking(self):  # the synchronous chain (s3fs's client has its own, aiobotocore's)
    looked.append(type(self).__name__)
    return real_load(self)

credentials.CredentialResolver.load_credentials = looking
from tb_footprint_plugin.storage.store_object import ObjectStore

store = ObjectStore(sys.argv[1])
listed = [e.key for e in store.list()]
store.put("cache.json", b"{}")
head = store.ops.head(store.rfs.path("cache.json"))
other = ObjectStore(sys.argv[1] + "-other")  # another store's client: a second client in the process
other.put("x", b"1")
s3_models = [p for p in read if p.replace("\\", "/").split("/")[-3:-2] == ["s3"]
             and p.endswith("service-2")]
print(json.dumps({"listed": listed, "s3_models": s3_models, "boto3": "boto3" in sys.modules, "looked": looked,
                  "checksums": head.checksums, "stats": store.rfs.stats.to_dict()}))
"""


def _run(url: str, env: dict) -> dict:
    env = dict(os.environ, **env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-c", _CHILD, url], capture_output=True, text=True, env=env,
                          timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_put_after_a_listing_reads_the_s3_service_model_and_credentials_once(s3_bucket):
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/run/events.out.tfevents.1"), b"x")
    got = _run(s3_bucket.url("logs"), s3_bucket.server.env)
    assert got["listed"] == ["run/events.out.tfevents.1"]
    # the listing's client read it; the conditional client reused that reading
    assert len(got["s3_models"]) == 1, got["s3_models"]
    assert got["boto3"] is False, "boto3 imported for a put (only a file upload needs it)"
    # the same request as before: one put, carrying its SHA256 checksum (ChecksumAlgorithm)
    assert got["stats"]["put"] == 1 and got["stats"]["list"] == 1, got["stats"]
    # credentials looked up once in the process, as boto3's one default session did: not per client
    assert got["looked"] == ["CredentialResolver"], got["looked"]
    assert got["checksums"].get("sha256"), got["checksums"]
