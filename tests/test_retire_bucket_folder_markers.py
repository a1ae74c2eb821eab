"""A bucket run holding folder markers (0-byte keys ending in '/': the S3 and GCS consoles'
"Create folder", rclone, s3fs mkdir, azcopy) is retired and comes back (review R10 F2). Before,
every store's listing named the marker 'm/plugins/' as a 0-byte object 'm/plugins', a key that
does not exist: with a copies vault the retirement skipped the run `not_in_plan`, with a local blob
folder `active` ("written into the run while it was being retired"), for ever, neither true.

The rule (storage.remote.is_folder_marker, in the one listing of every store): a marker is no file
of a run. The plan, the retirement's inventory and its settle see none; the markers stay where
their tool put them, untouched by the retirement, and do not make the run "a new run" at unretire.
A 0-byte object whose key does not end in '/' is a file like any other: retired and put back."""
import hashlib
import math
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome

STATE = ".tb-footprint/"
MARKERS = ("logs/m/", "logs/m/plugins/", "logs/m/plugins/profile/")


def _put_raw(bucket, key: str, data: bytes = b"") -> None:
    """Put ``key`` as is, through the store's own client (fsspec would drop the trailing '/')."""
    env = bucket.server.env
    if bucket.scheme == "s3":
        import boto3
        boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).put_object(
            Bucket=bucket.name, Key=key, Body=data)
    elif bucket.scheme == "gs":
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
        client = storage.Client(project="test", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": env["STORAGE_EMULATOR_HOST"]})
        client.bucket(bucket.name).blob(key).upload_from_string(data)
    else:
        from azure.storage.blob import BlobServiceClient
        BlobServiceClient.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"]).get_blob_client(
            bucket.name, key).upload_blob(data)


def _raw_keys(bucket) -> dict:
    """key as stored -> sha256 of its bytes, of every user object under logs/ (the state and the
    vault left out), through the store's own client (adlfs names 'm/' as 'm')."""
    env = bucket.server.env
    if bucket.scheme == "s3":
        import boto3
        s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket.name, Prefix="logs/")
        keys = [o["Key"] for p in pages for o in p.get("Contents", [])]

        def read(k):
            return s3.get_object(Bucket=bucket.name, Key=k)["Body"].read()
    elif bucket.scheme == "gs":
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
        client = storage.Client(project="test", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": env["STORAGE_EMULATOR_HOST"]})
        keys = [b.name for b in client.list_blobs(bucket.name, prefix="logs/")]

        def read(k):
            return client.bucket(bucket.name).blob(k).download_as_bytes()
    else:
        from azure.storage.blob import BlobServiceClient
        cc = BlobServiceClient.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"]).get_container_client(
            bucket.name)
        keys = [b.name for b in cc.list_blobs(name_starts_with="logs/")]

        def read(k):
            return cc.download_blob(k).readall()
    return {k: hashlib.sha256(read(k)).hexdigest() for k in keys if not k.startswith("logs/" + STATE)}


@pytest.mark.parametrize("folder", [False, True], ids=["copies", "blob-folder"])
def test_a_run_with_folder_markers_is_retired_and_comes_back(bucket, tmp_path, folder):
    _retire_and_back(bucket, tmp_path, folder, ())


@pytest.mark.parametrize("folder", [False, True], ids=["copies", "blob-folder"])
def test_a_zero_byte_object_is_a_file_of_the_run(s3_bucket, tmp_path, folder):
    """Only a key ending in '/' is a marker: 'm/plugins' of 0 bytes beside the marker 'm/plugins/'
    (S3 holds both) is retired and put back. (S3 only: on the GCS emulator a 0-byte object put
    back from a local blob folder fails, "Server disconnected", markers or not: not this rule's.)"""
    _retire_and_back(s3_bucket, tmp_path, folder, ("logs/m/plugins", "logs/m/empty.txt"))


def _retire_and_back(bucket, tmp_path, folder: bool, empty_files) -> None:
    src = tmp_path / "src"
    with synth.EventWriter(str(src / "m")) as w:
        for s in range(60):
            w.scalar("loss", s, math.exp(-s / 15.0))
    synth.write_profile_session(str(src / "m"), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=50)
    url = bucket.upload(src, "logs")
    size = api.scan(url).total_bytes
    for k in MARKERS + tuple(empty_files):
        _put_raw(bucket, k)
    assert api.scan(url).total_bytes == size  # markers (and empty files) are no bytes of the footprint
    before = _raw_keys(bucket)
    assert set(MARKERS) <= set(before)
    vault = str(tmp_path / "vault") if folder else None

    r = api.retire(url, api.retire_rule(runs=["m"]), dry_run=False, backup_dir=vault, quiet_period=0)
    assert [(o.status, o.code) for o in r.outcomes] == [(Outcome.VERIFIED, None)], \
        [(o.status, o.code, o.reason) for o in r.outcomes]
    # every object of the run went; the markers stay as their tool put them
    assert _raw_keys(bucket) == {k: before[k] for k in MARKERS}

    res = api.restore(url, backup_dir=vault)
    assert [o.status for o in res] == [Outcome.RESTORED], [(o.run, o.status, o.code, o.reason) for o in res]
    assert _raw_keys(bucket) == before
