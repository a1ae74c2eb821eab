"""Issue #27 (remains, task C item 2): no pack under 128 KB when it can be avoided.

Each ``BlobStore.add`` writes its own pack, so a batch of small runs offloaded to a bucket (one
``add`` a run) or compacted into the local vault's packs (one a compaction) left a pack of a few
KB a run: many objects, and none that S3 transitions to a colder class by default (it skips
objects under 128 KiB). A sweeping ``forget`` now repacks the packs smaller than ``MIN_PACK``
together when there are at least two (restic's prune of small packs), in the same crash-safe
order as a half-dead pack's repack, and a batch's end runs one: the local vault's pack-index merge
and, for a remote vault, ``offload.merge_remote_packs``.
"""
import hashlib
import io
import os
from pathlib import Path

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import offload, remote_vault
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import MIN_PACK, BlobSource, BlobStore
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.stores import open_store

RUNS = 20


def blob(i: int, n: int = 3000) -> bytes:
    """``n`` bytes that do not compress (a pack holds them as they are), distinct for each ``i``."""
    return b"".join(hashlib.sha256(b"blob %d %d" % (i, j)).digest() for j in range(n // 32 + 1))[:n]


def src(data: bytes) -> BlobSource:
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda: io.BytesIO(data))


def packs(store) -> list:
    """(key, size) of every pack among the store's data objects."""
    return sorted((e.key, e.size) for e in store.list("data") if e.key.endswith(".pack"))


def small(store) -> list:
    return [p for p in packs(store) if p[1] < MIN_PACK]


def all_read_back(store, datas) -> None:
    bs = BlobStore(store)
    for d in datas:
        sha = hashlib.sha256(d).hexdigest()
        assert bs.check(sha) is None
        with bs.open(sha) as f:
            assert f.read() == d


@pytest.fixture
def posix(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    return PosixStore(str(root))


def test_a_sweep_repacks_small_packs_into_one(posix):
    datas = [blob(i) for i in range(RUNS * 2)]
    for i in range(RUNS):
        BlobStore(posix).add([src(datas[2 * i]), src(datas[2 * i + 1])])  # one add, one small pack
    assert len(small(posix)) == RUNS
    fig = BlobStore(posix).forget([], small_packs=2)
    assert fig["small_packs"] == RUNS and fig["packs_repacked"] == RUNS
    assert len(packs(posix)) == 1 and len(small(posix)) == 1  # all of them fit in one, still small
    all_read_back(posix, datas)
    assert BlobStore(posix).damaged_index() == []
    # one small pack alone is left as it is: nothing to put it with
    before = packs(posix)
    assert "small_packs" not in BlobStore(posix).forget([], small_packs=2) and packs(posix) == before


def test_small_packs_grow_into_packs_past_the_minimum(posix):
    datas = [blob(i, 20_000) for i in range(RUNS)]  # ~20 KB each, ~400 KB together
    for d in datas:
        BlobStore(posix).add([src(d)])
    assert len(small(posix)) == RUNS
    BlobStore(posix, pack_target=150_000).forget([], small_packs=2)  # a new pack closed at ~150 KB
    got = packs(posix)
    assert len(got) == 3 and len(small(posix)) == 1, got  # at most one small pack stays
    all_read_back(posix, datas)
    # with another add's small pack, the next sweep puts the two small ones together
    BlobStore(posix).add([src(blob(999))])
    BlobStore(posix).forget([], small_packs=2)
    assert len(small(posix)) <= 1, packs(posix)
    all_read_back(posix, datas + [blob(999)])


def test_a_purge_forget_merges_the_small_packs_left(posix):
    datas = [blob(i) for i in range(6)]
    for d in datas:
        BlobStore(posix).add([src(d)])
    BlobStore(posix).forget([hashlib.sha256(datas[0]).hexdigest()], small_packs=2)  # a purge (sweeps)
    assert len(packs(posix)) == 1
    all_read_back(posix, datas[1:])
    assert sorted(r.sha for r in BlobStore(posix).refs()) == sorted(hashlib.sha256(d).hexdigest()
                                                                      for d in datas[1:])


def test_a_forget_not_asked_to_leaves_small_packs_as_they_are(posix):
    """Only the callers that ask merge (a batch's end, a remote purge): a local vault's packs are
    merged from ``vault.MERGE_SMALL_PACKS`` of them on, each run's own pack kept below that."""
    from tb_footprint_plugin.engine import vault as vault_mod

    for i in range(4):
        BlobStore(posix).add([src(blob(i))])
    before = packs(posix)
    BlobStore(posix).forget([])
    BlobStore(posix).forget([], small_packs=vault_mod.MERGE_SMALL_PACKS)
    assert packs(posix) == before
    BlobStore(posix).forget([], small_packs=4)
    assert len(packs(posix)) == 1


def test_a_release_that_does_not_sweep_touches_only_its_own_packs(posix):
    datas = [blob(i) for i in range(6)]
    for d in datas:
        BlobStore(posix).add([src(d)])
    before = packs(posix)
    sha = hashlib.sha256(datas[0]).hexdigest()
    its_pack = BlobStore(posix).ref(sha).key
    BlobStore(posix).forget([sha], sweep=False)
    assert packs(posix) == [p for p in before if p[0] != its_pack]  # the other small packs stay as they are
    all_read_back(posix, datas[1:])


def test_a_failure_at_the_new_pack_keeps_every_old_pack_and_blob(posix):
    datas = [blob(i) for i in range(5)]
    for d in datas:
        BlobStore(posix).add([src(d)])
    before = packs(posix)
    index_before = sorted(e.key for e in posix.list("index"))

    def boom(step):
        if step == "forget.pack_written":
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        BlobStore(posix).forget([], small_packs=2, failpoint=boom)
    assert set(before) <= set(packs(posix))  # old packs untouched, the new one unlisted
    assert sorted(e.key for e in posix.list("index")) == index_before
    all_read_back(posix, datas)
    BlobStore(posix).forget([], grace_seconds=0, small_packs=2)  # done again: the leftover swept, one pack
    assert len(packs(posix)) == 1
    all_read_back(posix, datas)


# --- end to end: a batch of small runs -------------------------------------------------------
def small_runs(root: Path, runs: int = RUNS, files: int = 2) -> Path:
    """``runs`` runs of scalars, each with an xprof session of ``files`` small ``.xplane.pb``
    files the archive policy removes (a few KB of backups a run)."""
    logdir = root / "logdir"
    for r in range(runs):
        run = logdir / f"run{r:02d}"
        with synth.EventWriter(str(run)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
        session = run / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        for i in range(files):
            synth.write_xplane(str(session / f"host{i}.xplane.pb"), 20 + i * 15, seed=r * 10 + i)
    synth.age(str(logdir))
    return logdir


def tree(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(".tb-footprint") or not p.is_file():
            continue
        st = p.stat()
        out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_mode)
    return out


def reduce_and_restore(logdir: Path, **kw) -> None:
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",), **kw)
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == RUNS, [o.to_dict() for o in rep.outcomes]


def test_a_batch_of_small_runs_offloaded_to_s3_leaves_at_most_one_small_pack(tmp_path, s3_bucket: Bucket):
    logdir = small_runs(tmp_path)
    before = tree(logdir)
    reduce_and_restore(logdir, backup_dir=s3_bucket.url("vaults"))
    url = offload.remote_url(Context(str(logdir)).vault)
    with open_store(url) as store:
        got = packs(store)
        lone = [e.key for e in store.list("data") if not e.key.endswith(".pack")]
        assert len(small(store)) <= 1 and len(got) <= 1 + len(lone), (got, lone)  # was one pack a run
        stats = BlobStore(store).stats()
        assert stats["blobs"] >= 2 * RUNS and stats["damaged_index"] == []
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert tree(logdir) == before


def test_a_batch_of_small_runs_in_the_local_vault_leaves_at_most_one_small_pack(tmp_path):
    logdir = small_runs(tmp_path)
    before = tree(logdir)
    reduce_and_restore(logdir)
    vault = Context(str(logdir)).vault
    store = PosixStore(remote_vault.packs_root(vault.root))
    assert packs(store) and len(small(store)) <= 1, packs(store)  # was one pack a run
    data = Path(remote_vault.packs_root(vault.root)) / "data"
    assert all(p.stat().st_mode & 0o777 == 0o700 for p in data.iterdir())  # the merged pack's folder too
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert tree(logdir) == before


def test_the_remote_merge_waits_for_no_one(tmp_path, s3_bucket: Bucket, monkeypatch):
    """An offload or purge holding the forget lock: the batch's end leaves the packs to the next."""
    from tb_footprint_plugin.storage.lock import held

    vault = Context(str(tmp_path / "logdir")).vault
    vault.ensure()
    url = offload.configure(vault, s3_bucket.url("vaults"))
    for i in range(3):
        remote_vault.blobstore(url, fresh=True).add([src(blob(i))])
    store = ObjectStore(url)
    try:
        assert len(small(store)) == 3
        with held(os.path.join(vault.root, "offload", ".lock"), shared=True):
            assert offload.merge_remote_packs(vault) == {}
        assert len(small(store)) == 3
        assert offload.merge_remote_packs(vault)["small_packs"] == 3
        assert len(small(store)) == 1
        all_read_back(store, [blob(i) for i in range(3)])
    finally:
        store.close()


def test_min_pack_is_the_s3_transition_floor():
    assert blobstore.MIN_PACK == 128 * 1024
