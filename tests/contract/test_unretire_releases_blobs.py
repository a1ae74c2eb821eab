"""A bucket logdir whose backups are blobs in a local folder (``--backup-dir /folder``) lets a
restored retirement's blobs go at its restore, the rule of every store (#26): it kept them until a
purge, while a disk's restore and a bucket's with server-side copies release theirs. The restore
forgets, under the folder's exclusive lock (an add in flight is waited for), every blob nothing
else names once its journal is gone (``bucket_putback.forget_unnamed``): all of a run back whole;
with an original left (``not_restored``) the others' only, that one kept and purge keeping it. One
stopped right after its mark (``unretire.manifest``) is finished by the next start. On the three
bucket servers."""
import hashlib
import os

from contract_stores import buckets, fail_io, logdir_on, scalar_runs_on, user_objects  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NOTES = b"lr: 0.1\n" * 40
OTHER = b"a job wrote here meanwhile\n"
BUCKETS = ("s3", "gs", "az")


def _blobs(folder) -> set:
    """The sha256 of every blob the folder holds now."""
    return {r.sha for r in BlobStore(PosixStore(folder)).refs()} if os.path.isdir(folder) else set()


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _retired(store, scalar_runs_on, tmp_path):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    folder = str(tmp_path / "blobs")
    st = open_store(url)
    st.put("b/notes.txt", NOTES)
    before = {k: v for k, v in user_objects(st).items() if k.startswith("b/")}
    [r] = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0, backup_dir=folder).outcomes
    assert r.status == Outcome.VERIFIED, r.to_dict()
    assert {_sha(v) for v in before.values()} <= _blobs(folder)
    return url, folder, st, before, r.op_id


def _row(url, folder, op):
    [m] = [m for m in api.summarize_operations(api.operations(url, backup_dir=folder)) if m["op_id"] == op]
    return m


@pytest.mark.parametrize("store", BUCKETS)
def test_a_whole_restore_forgets_the_blobs(store, scalar_runs_on, tmp_path):
    url, folder, st, before, op = _retired(store, scalar_runs_on, tmp_path)
    [o] = api.restore(url, run="b", backup_dir=folder)
    assert o.status == Outcome.RESTORED and o.code != Finding.NOT_RESTORED, o.to_dict()
    assert {k: v for k, v in user_objects(st).items() if k.startswith("b/")} == before
    assert not {_sha(v) for v in before.values()} & _blobs(folder), "a restored run's blob kept"
    m = _row(url, folder, op)
    assert m["backup_purged"] and m["kept_bytes"] == 0, m
    rep = api.purge(url, backup_dir=folder)
    assert op not in [x["op_id"] for x in rep.ops + rep.kept], rep
    assert api.recover_logdir(url, folder) == []


@pytest.mark.parametrize("store", BUCKETS)
def test_a_restore_with_a_path_left_forgets_only_the_others(store, scalar_runs_on, tmp_path):
    url, folder, st, before, op = _retired(store, scalar_runs_on, tmp_path)
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", OTHER))
    [o] = api.restore(url, run="b", backup_dir=folder)
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    events = {_sha(v) for k, v in before.items() if k != "b/notes.txt"}
    assert not events & _blobs(folder), "a blob of a file back was kept"
    assert _sha(NOTES) in _blobs(folder), "the original left is gone"
    assert _row(url, folder, op)["kept_bytes"] == len(NOTES)
    rep = api.purge(url, yes=True, backup_dir=folder)
    [row] = [k for k in rep.kept if k["op_id"] == op]
    assert (row["code"], row["bytes"]) == (Finding.NOT_RESTORED, len(NOTES)), row
    assert _sha(NOTES) in _blobs(folder), "purge forgot the only copy of an original"
    assert api.recover_logdir(url, folder) == []


@pytest.mark.parametrize("store", BUCKETS)
def test_a_release_stopped_after_the_mark_is_finished_by_the_next_start(store, scalar_runs_on, tmp_path):
    url, folder, st, before, op = _retired(store, scalar_runs_on, tmp_path)
    faults.arm("unretire.manifest", fail_io)
    [o] = api.restore(url, run="b", backup_dir=folder)
    faults.disarm_all()
    assert o.status == Outcome.FAILED, o.to_dict()
    assert {_sha(v) for v in before.values()} <= _blobs(folder)
    outs = api.recover_logdir(url, folder)
    assert outs and all(r.action == "completed" for r in outs), outs
    assert {k: v for k, v in user_objects(st).items() if k.startswith("b/")} == before
    assert not {_sha(v) for v in before.values()} & _blobs(folder), "the release was not finished"
    assert api.recover_logdir(url, folder) == [] and not api.status(url, backup_dir=folder)["unfinished_operations"]
