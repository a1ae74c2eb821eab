"""One rule for a retirement whose copy in the vault is lost by hand before its commit record (issue
#26): on every vault (a disk's folder on another filesystem, a bucket's server-side copies, a local
blob folder of a bucket) the run stays in the logdir byte for byte, the outcome ``rolled_back``
coded ``backup_damaged``, nothing unfinished. A bucket's copies vault checked only a blob folder
before its commit record (``missing_blobs``): a copy deleted there let the retirement delete the
originals whose only copy was gone. Past the commit record every vault refuses the same way
(tests/contract/test_retire_settle_checks_copies.py, tests/test_bucket_finish_checks_copies.py)."""
from contract_stores import buckets, logdir_on, scalar_runs_on, user_objects  # noqa: F401 - fixtures

import glob
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.bucket_state import BlobVault
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

#: ``s3blobs``: a bucket logdir whose backups are blobs of a local folder (``--backup-dir``)
STORES = ("posix", "s3", "s3blobs")
#: the instant every copy is made and checked, before the last look and the commit record (a
#: disk's manifest comes after its delete: its copies are all made at ``retire.move``)
AT = {"posix": "retire.move", "s3": "retire.manifest", "s3blobs": "retire.manifest"}


@pytest.fixture
def backup():
    made = []

    def make(store):
        if store == "posix":  # another filesystem: the retirement copies, then unlinks
            d = Path("/dev/shm") / f"tbfp-v5-{uuid.uuid4().hex[:8]}"
        else:
            d = Path("/tmp") / f"tbfp-v5-{uuid.uuid4().hex[:8]}"
        made.append(d)
        if store == "posix":
            d.mkdir()
        return str(d) if store != "s3" else None

    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


def _lose_a_copy(store, url, vault):
    if store == "posix":
        files = sorted(glob.glob(os.path.join(vault, "retired", "*", "files", "*")))
        assert files, "no copy in the vault"
        os.unlink(files[0])
    elif store == "s3":
        st = open_store(url)
        copies = sorted(e.key for e in st.list(every_key=True) if "/blobs/" in e.key and "/files/" in e.key)
        assert copies, "no copy in the vault"
        st.delete([copies[0]])
    else:  # forgotten as this logdir's owner (a forget drops one owner's claim)
        bs = BlobVault(vault, ObjectStore(url)).store
        bs.forget([r.sha for r in bs.refs()])


@pytest.mark.parametrize("store", STORES)
def test_a_copy_lost_before_the_commit_record_keeps_the_run(store, scalar_runs_on, backup):
    url = scalar_runs_on("posix" if store == "posix" else "s3", runs=("a", "b"), steps=3)
    vault = backup(store)
    st = open_store(url)
    st.put("b/notes.txt", b"lr: 0.1\n" * 40)
    before = user_objects(st)
    faults.arm(AT[store], lambda: _lose_a_copy(store, url, vault))
    [o] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0, backup_dir=vault).outcomes
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.ROLLED_BACK, Failure.BACKUP_DAMAGED), o.to_dict()
    assert user_objects(st) == before  # every original in the logdir: the only copy of a lost one
    assert not api.status(url, backup_dir=vault)["unfinished_operations"]
    assert api.retired(url, backup_dir=vault) == []
