"""A bucket reduce into a local vault of blobs against a purge's forget (review W, finding F3):
the forget must never drop a blob a rewrite's manifest or journal names, and a rewrite whose blobs
are gone before its swap is refused and rolled back instead of replacing the only copy."""
import fcntl
import sys
import threading

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.bucket_state import BlobVault
from tb_footprint_plugin.storage import lock as lock_mod
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore

import pytest
from test_bucket_blobvault import _user, mixed_logdir  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("disarm_faults")  # conftest's, after every test

RUN = "torch/resnet"  # a lossless rewrite: its PyTorch traces are replaced by .gz copies


def test_a_purge_forgetting_while_a_rewrite_commits_keeps_the_rewrites_blobs(
        s3_bucket, mixed_logdir, tmp_path, monkeypatch):
    """The purge starts once the rewrite's blobs are added and its journal names them; it is held
    after its first listing in the forget until the rewrite has written its manifest, swapped and
    dropped its journal. Whatever the order the forget takes (the journal listed first, or the
    forget waiting for the rewrite to leave the lock), the rewrite's blobs stay and it restores."""
    url = s3_bucket.upload(mixed_logdir, "race")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, "race")
    listed, blocked, reduced, purged = threading.Event(), threading.Event(), threading.Event(), []
    real_list, real_flock = RemoteFS.list_under, fcntl.flock

    def list_under(self, prefix, *a, **k):
        out = real_list(self, prefix, *a, **k)
        if sys._getframe(1).f_code.co_name == "collect" and not listed.is_set():  # the forget's first listing
            listed.set()
            assert reduced.wait(120)  # the rewrite commits meanwhile (nothing holds it)
        return out

    def flock(fd, op):  # tells when the purge's exclusive lock waits for the rewrite's shared one
        if op == fcntl.LOCK_EX:
            try:
                return real_flock(fd, op | fcntl.LOCK_NB)
            except BlockingIOError:
                blocked.set()
        return real_flock(fd, op)

    monkeypatch.setattr(RemoteFS, "list_under", list_under)
    monkeypatch.setattr(lock_mod.fcntl, "flock", flock)  # the one lock helper (storage.lock.held)
    t = threading.Thread(target=lambda: purged.append(api.purge(url, yes=True, backup_dir=vault)))

    def after_backup():  # the blobs are in the vault and the journal names their digests
        t.start()
        while not (listed.wait(0.05) or blocked.is_set()):
            pass

    faults.arm("reduce.backup", after_backup)
    try:
        (o,) = api.reduce_logdir(url, backup_dir=vault, policy="lossless", dry_run=False, quiet_period=0,
                                 runs=[RUN], verify_backends=("python",)).outcomes
    finally:
        faults.disarm_all()
        reduced.set()
        t.join(120)
    assert o.status == Outcome.VERIFIED, o.to_dict()
    assert purged and not t.is_alive()
    (r,) = api.restore(url, backup_dir=vault)
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert _user(s3_bucket, "race") == before


def test_a_rewrite_whose_blobs_are_gone_before_its_swap_is_rolled_back(s3_bucket, mixed_logdir, tmp_path):
    """The last look before the swap: blobs forgotten after they were added (a purge run by hand
    from an older version, a folder cleaned) leave the originals as they are, with a code."""
    url = s3_bucket.upload(mixed_logdir, "gone")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, "gone")

    def forget_everything():  # the manifest is written, the swap is next
        bv = BlobVault(vault, ObjectStore(url))
        bs = bv.store
        assert bs.forget([r.sha for r in bs.refs()], grace_seconds=0)

    faults.arm("reduce.verify", forget_everything)
    (o,) = api.reduce_logdir(url, backup_dir=vault, policy="lossless", dry_run=False, quiet_period=0,
                             runs=[RUN], verify_backends=("python",)).outcomes
    faults.disarm_all()
    assert o.status == Outcome.ROLLED_BACK and o.code == Failure.BACKUP_DAMAGED, o.to_dict()
    assert vault in o.reason
    assert _user(s3_bucket, "gone") == before
    assert not api.status(url)["unfinished_operations"]


def test_a_batch_run_whose_blobs_are_gone_before_its_delete_is_left_as_it_was(s3_bucket, mixed_logdir, tmp_path):
    """The same last look in a batch of drop-only runs: the delete removes what only the blobs hold."""
    from test_bucket_blobvault import DROP

    url = s3_bucket.upload(mixed_logdir, "gone-batch")
    vault = str(tmp_path / "vault")
    before = _user(s3_bucket, "gone-batch")

    def forget_everything():  # the manifests are written, the deletes are next
        bs = BlobVault(vault, ObjectStore(url)).store
        assert bs.forget([r.sha for r in bs.refs()], grace_seconds=0)

    faults.arm("reduce.verify", forget_everything)
    outs = api.reduce_logdir(url, backup_dir=vault, policy=DROP, dry_run=False, quiet_period=0,
                             runs=["prof/r0", "prof/r1"], verify_backends=("python",)).outcomes
    faults.disarm_all()
    assert [(o.status, o.code) for o in outs] == [(Outcome.ROLLED_BACK, Failure.BACKUP_DAMAGED)] * 2, \
        [o.to_dict() for o in outs]
    assert _user(s3_bucket, "gone-batch") == before
    assert not api.status(url)["unfinished_operations"]
