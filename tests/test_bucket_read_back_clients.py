"""A bucket rewrite reads each uploaded object back through TensorBoard's own S3 reader (its
gfile ``S3FileSystem``), which builds a boto3 client on the default session for every read: a
chunk, the end of the object (a refused range) and its head, 3 clients a file for the sha256 pass
and 3 more (and one for ``exists``) for an event file's records. One run's read-backs now share
one client and one resource of each kind (``bucket_rewrite._BotoOnce``): the same reader code and
requests, the same bytes read. Checked on moto: the clients TensorBoard's reader makes for a run
of two rewritten traces, a change put into an uploaded object after its upload still caught by
the read-back on the shared client, and another thread asking boto3 during a read-back gets its
own client, as before."""
import shutil
import threading
import traceback

import boto3.session
import pytest

from test_objstore import _write_rewrite_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.bucket_objects import BucketState

GFILE = "tensorboard/compat/tensorflow_stub/io/gfile.py"


@pytest.fixture
def traces_run(s3_bucket, tmp_path):
    """``torch/resnet`` on moto: two PyTorch traces (lossless gzips them) beside an event file."""
    src = _write_rewrite_logdir(tmp_path / "logs")
    shutil.rmtree(src / "exp")
    return s3_bucket.upload(src, "logs")


@pytest.fixture
def made_by_tensorboard(monkeypatch):
    """The boto3 clients built from TensorBoard's gfile (a resource builds one too), in order."""
    made = []
    real = boto3.session.Session.client

    def counting(self, *args, **kwargs):
        client = real(self, *args, **kwargs)
        if any(f.filename.replace("\\", "/").endswith(GFILE) for f in traceback.extract_stack()):
            made.append(client)
        return client

    monkeypatch.setattr(boto3.session.Session, "client", counting)
    return made


def test_a_runs_read_backs_share_one_client_of_tensorboard_s_s3_reader(traces_run, made_by_tensorboard):
    rep = api.reduce_logdir(traces_run, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"])
    (o,) = rep.outcomes
    assert o.status == "verified", (o.status, o.reason)
    assert len(o.removed_files) == 2  # two traces rewritten (gzipped), each read back
    # a resource (its client) for the reads and a client for the head of the end: once for the
    # run, where each read made its own (6 for the two traces)
    assert len(made_by_tensorboard) == 2, len(made_by_tensorboard)


def test_a_change_to_an_uploaded_object_is_still_caught_by_the_shared_client(traces_run, monkeypatch):
    """The second trace's upload is changed after it landed: the read-back of that object, on the
    client the first read-back made, reads the changed bytes and the run is rolled back."""
    real = BucketState.put_file
    calls = []

    def then_changed(self, path, local, headers=None):
        info = real(self, path, local, headers)
        calls.append(path)
        if len(calls) == 2:
            store, key = self.where(path)
            with open(local, "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0xFF  # the same size, one byte changed
            store.put(key, bytes(data))
        return info

    before = api.restorable(traces_run)
    monkeypatch.setattr(BucketState, "put_file", then_changed)
    rep = api.reduce_logdir(traces_run, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"])
    (o,) = rep.outcomes
    assert len(calls) == 2
    assert o.status != "verified", o.status
    assert "read back through TensorBoard differs from the staged file" in (o.reason or ""), o.reason
    assert api.restorable(traces_run) == before  # nothing reduced


def test_another_thread_asking_boto3_during_a_read_back_gets_its_own_client(traces_run, monkeypatch):
    """While a read-back holds gfile's ``boto3`` (TensorBoard's own readers run on other threads
    in its process), another thread's ``boto3.client`` calls are boto3's: a new client each."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    from tb_footprint_plugin.engine import bucket_rewrite

    seen = {}
    real = bucket_rewrite._tensorboard_sha256

    def with_a_neighbour(url, ostore):
        def neighbour():
            seen["other"] = [gfile.boto3.client("s3") for _ in range(2)]

        t = threading.Thread(target=neighbour)
        t.start()
        t.join()
        seen["own"] = [gfile.boto3.client("s3") for _ in range(2)]
        return real(url, ostore)

    monkeypatch.setattr(bucket_rewrite, "_tensorboard_sha256", with_a_neighbour)
    rep = api.reduce_logdir(traces_run, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"])
    assert [o.status for o in rep.outcomes] == ["verified"]
    a, b = seen["other"]
    assert a is not b  # boto3's own: a client per call
    c, d = seen["own"]
    assert c is d  # the read-back's: one
    assert not isinstance(gfile.boto3, bucket_rewrite._BotoOnce)  # given back after the read-back
