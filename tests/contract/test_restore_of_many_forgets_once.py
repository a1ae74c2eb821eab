"""A restore of many retired runs of a bucket whose backups are blobs in a local folder
(``--backup-dir /folder``) forgets what they let go once, at its end (V3's note on eed64dd): the
forget lists the journals and the manifests and reads every one of them in the bucket, and each
restored retirement paid it, so ``restore --all`` of K runs paid K times. Each run is still marked
at its restore, under its release journal; a stop in between leaves journals the next start
finishes. On the three bucket servers."""
import hashlib
import os

from contract_stores import buckets, logdir_on, scalar_runs_on, user_objects  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import bucket_putback, faults
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

BUCKETS = ("s3", "gs", "az")
RUNS = ("r0", "r1", "r2")


def _blobs(folder) -> set:
    return {r.sha for r in BlobStore(PosixStore(folder)).refs()} if os.path.isdir(folder) else set()


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _journals(st) -> list:
    return [e.key for e in st.list(every_key=True) if e.key.startswith(".tb-footprint/journal/")]


def _three_retired(store, scalar_runs_on, tmp_path):
    url = scalar_runs_on(store, runs=("keep",) + RUNS, steps=2)
    folder = str(tmp_path / "blobs")
    st = open_store(url)
    for i, run in enumerate(RUNS):
        st.put(f"{run}/notes.txt", f"run {i}\n".encode() * 30)
    before = user_objects(st)
    outs = api.retire(url, api.retire_rule(runs=list(RUNS)), dry_run=False, quiet_period=0, backup_dir=folder).outcomes
    assert [o.status for o in outs] == [Outcome.VERIFIED] * 3, [o.to_dict() for o in outs]
    shas = {run: {_sha(v) for k, v in before.items() if k.startswith(run + "/")} for run in RUNS}
    assert set().union(*shas.values()) <= _blobs(folder)
    return url, folder, st, before, shas


@pytest.fixture
def forgets(monkeypatch):
    """Every forget of a vault of blobs (``collect``) a put-back calls, counted."""
    calls = []
    real = bucket_putback.collect

    def counted(ostore, vault):
        calls.append(vault)
        return real(ostore, vault)

    monkeypatch.setattr(bucket_putback, "collect", counted)
    return calls


@pytest.mark.parametrize("store", BUCKETS)
def test_restore_all_of_three_retired_runs_forgets_once(store, scalar_runs_on, tmp_path, forgets):
    url, folder, st, before, shas = _three_retired(store, scalar_runs_on, tmp_path)
    outs = api.restore(url, backup_dir=folder)
    assert sorted(o.run for o in outs) == sorted(RUNS) and all(o.status == Outcome.RESTORED for o in outs), \
        [o.to_dict() for o in outs]
    assert len(forgets) == 1, "each restored run paid its own forget"
    assert user_objects(st) == before
    assert not set().union(*shas.values()) & _blobs(folder), "a restored run's blobs were not forgotten"
    assert not _journals(st), _journals(st)  # every release journal removed at the end
    assert api.recover_logdir(url, folder) == []
    assert not api.status(url, backup_dir=folder)["unfinished_operations"]


@pytest.mark.parametrize("store", BUCKETS)
def test_a_restore_of_many_stopped_in_between_is_finished_by_the_next_start(store, scalar_runs_on, tmp_path, forgets):
    url, folder, st, before, shas = _three_retired(store, scalar_runs_on, tmp_path)
    hits = []

    def second_stops() -> None:  # the second run's restore killed right after its mark
        hits.append(1)
        if len(hits) == 2:
            raise faults.InjectedCrash("unretire.manifest")

    faults.arm("unretire.manifest", second_stops)
    with pytest.raises(faults.InjectedCrash):
        api.restore(url, backup_dir=folder)
    faults.disarm_all()
    assert not forgets and set().union(*shas.values()) <= _blobs(folder)  # nothing forgotten yet
    back = [run for run in RUNS if all(k in user_objects(st) for k in before if k.startswith(run + "/"))]
    assert len(back) == 2, back
    outs = api.recover_logdir(url, folder)
    assert outs and all(r.action == "completed" for r in outs), outs
    left = [run for run in RUNS if run not in back]
    # (runs of the same scalars may share an event file's bytes: the run still retired keeps them)
    assert not set().union(*(shas[r] for r in back)) - shas[left[0]] & _blobs(folder), "a release was not finished"
    assert shas[left[0]] <= _blobs(folder)  # the run not restored keeps its blobs
    assert api.recover_logdir(url, folder) == [] and not api.status(url, backup_dir=folder)["unfinished_operations"]
    [o] = api.restore(url, run=left[0], backup_dir=folder)
    assert o.status == Outcome.RESTORED, o.to_dict()
    assert user_objects(st) == before and not set().union(*shas.values()) & _blobs(folder)
