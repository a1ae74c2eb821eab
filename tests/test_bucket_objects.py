"""The bucket engine's small state objects (journals, locks, manifests) go through the ``Store``
interface (issue #26, ``engine.bucket_objects``), on moto's S3, the GCS emulator and Azurite:

* every write, read, metadata read and delete of ``BucketState`` is an ``ObjectStore`` call, and
  costs the requests the same operation cost on the client directly (no HEAD, no GET added);
* the objects keep their keys and JSON bytes, and their failures keep their codes (create-only
  -> ``already_exists``, a stale version -> ``precondition_failed``, a held lock -> ``locked``);
* a vault in another bucket is reached on the logdir's own client and counters;
* a planted oversized state object reads as corrupt without being read whole, and a path that is
  no plain key (named by an untrusted document) is never sent to the store.
"""
import json
import os

import pytest

from tb_footprint_plugin.codes import Failure, Skip, StoreError
from tb_footprint_plugin.engine import bucket_objects, bucket_state
from tb_footprint_plugin.engine.bucket_state import (BucketState, BucketTxnError, failure_code, lock_key, lock_run,
                                                      must_delete, must_delete_versioned, unlock_all)
from tb_footprint_plugin.engine.context import new_op_id
from tb_footprint_plugin.storage.remote import ALREADY_EXISTS, PRECONDITION_FAILED
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore
from objstore_servers import Bucket

VERBS = ("list", "read", "head", "copy", "put", "delete")


def counts(rfs):
    return {v: getattr(rfs.stats, v) for v in VERBS}


def delta(a, b):
    return {v: b[v] - a[v] for v in VERBS}


def test_state_objects_go_through_the_store_at_the_clients_cost(bucket, monkeypatch):
    url = bucket.url("logs")
    ostore = ObjectStore(url)
    rfs = ostore.rfs
    calls = []
    for name in ("put", "stat", "read_all", "delete"):
        real = getattr(ObjectStore, name)
        monkeypatch.setattr(ObjectStore, name, lambda self, *a, _n=name, _r=real, **kw: calls.append(_n) or
                            _r(self, *a, **kw))
    st = BucketState(ostore)
    doc = {"op": "x", "step": "started", "steps": [["started", 1.0]], "ü": "spaces and ünicode"}

    # the old way, on the client directly, for the cost to compare with
    old = rfs.path(".tb-footprint/journal/old.json")
    c0 = counts(rfs)
    v = rfs.ops.put(old, json.dumps(doc, sort_keys=True).encode(), if_absent=True)
    v = rfs.ops.put(old, json.dumps(dict(doc, step="done"), sort_keys=True).encode(), if_version=v)
    info = rfs.ops.head(old)
    rfs.stats.add("read", down=len(rfs.cat(old)))
    rfs.ops.delete([old], versions={old: info.version_token})
    direct = delta(c0, counts(rfs))
    assert not calls

    new = rfs.path(".tb-footprint/journal/new.json")
    c0 = counts(rfs)
    v1 = st.create(new, doc)
    v2 = st.update(new, dict(doc, step="done"), v1)
    got, version = st.read(new)
    assert st.delete([new], versions={new: version}) == {}
    assert delta(c0, counts(rfs)) == direct  # not a request more (nor fewer) through the Store
    assert calls == ["put", "put", "stat", "read_all", "delete"]
    assert got == dict(doc, step="done") and version == v2 != v1

    # the key and the bytes every earlier version wrote and reads
    st.create(new, doc)
    assert bucket.fs.cat_file(f"{bucket.key('logs')}/.tb-footprint/journal/new.json") == \
        json.dumps(doc, sort_keys=True).encode()
    # with a listing's info the read is one GET, no HEAD
    info = rfs.list_tree(".tb-footprint/journal")[".tb-footprint/journal/new.json"]
    c0 = counts(rfs)
    assert st.read(new, info) == (doc, info.version_token)
    assert delta(c0, counts(rfs)) == dict.fromkeys(VERBS, 0) | {"read": 1}

    # failures are the store's, with its codes (the client's values)
    with pytest.raises(StoreFailure) as ei:
        st.create(new, doc)
    assert ei.value.code == StoreError.ALREADY_EXISTS == ALREADY_EXISTS
    st.update(new, dict(doc, n=2), info.version_token)
    with pytest.raises(StoreFailure) as ei:
        st.update(new, doc, info.version_token)  # a stale version
    assert ei.value.code == StoreError.PRECONDITION_FAILED == PRECONDITION_FAILED
    assert failure_code(ei.value) == Failure.STORE_ERROR
    assert st.stat(rfs.path(".tb-footprint/journal/none.json")) is None
    assert st.read(rfs.path(".tb-footprint/journal/none.json")) == (None, None)


def test_run_locks_through_the_store(bucket):
    ostore = ObjectStore(bucket.url("logs"))
    rfs = ostore.rfs
    st = BucketState(ostore)
    lock = lock_run(st, "exp/run", new_op_id())  # the lock object, held
    path, version = lock.path, lock.version
    assert path == rfs.path(lock_key("exp/run"))
    held, v = st.read(path)
    assert held["run"] == "exp/run" and v == version
    bucket_state.ACTIVE_OPS.add(held["op"])  # this process runs it: not stale
    try:
        with pytest.raises(BucketTxnError) as ei:
            lock_run(st, "exp/run", new_op_id())
        assert ei.value.code == Skip.LOCKED
        assert ei.value.holder and f"pid {os.getpid()}" in ei.value.holder  # the holder, a field
    finally:
        bucket_state.ACTIVE_OPS.discard(held["op"])
    ours, versions = unlock_all([lock])
    assert ours == [path]
    c0 = counts(rfs)
    must_delete(ostore, ours, versions=versions)
    assert delta(c0, counts(rfs)) == dict.fromkeys(VERBS, 0) | {"delete": 1}  # no HEAD before it
    assert st.stat(path) is None
    # a stale version is refused where the store enforces a delete's condition (Azurite; moto and
    # the GCS emulator ignore it: the conformance suite says so)
    v1 = st.create(path, {"run": "exp/run"})
    st.update(path, {"run": "exp/run", "again": True}, v1)
    if bucket.scheme == "az":
        with pytest.raises(BucketTxnError) as ei:
            must_delete_versioned(ostore, path, v1)
        assert ei.value.code == Failure.STORE_ERROR and st.stat(path) is not None


def test_a_vault_in_another_bucket_is_reached_on_the_logdirs_client(s3_bucket, objstore_pool):
    other = Bucket(objstore_pool.get("s3"))
    ostore = ObjectStore(s3_bucket.url("logs"))
    rfs = ostore.rfs
    st = BucketState(ostore)
    far = f"{other.key('vault')}/manifests/op.json"
    c0 = counts(rfs)
    st.create(far, {"op_id": "op"})
    assert st.read(far)[0] == {"op_id": "op"}
    assert st.delete([far, rfs.path(".tb-footprint/journal/op.json")]) == {}
    d = delta(c0, counts(rfs))
    assert (d["put"], d["head"], d["read"], d["delete"]) == (1, 1, 1, 2)  # a batch per bucket, counted here
    store, key = st.where(far)
    assert key == "vault/manifests/op.json" and store.ops is rfs.ops and store.stats is rfs.stats
    mine = st.where(rfs.path("x"))[0]
    assert mine is st.where(rfs.path("y"))[0] and mine.rfs is rfs  # the logdir's: its own RemoteFS
    assert other.fs.find(other.key()) == []
    with pytest.raises(Exception) as ei:
        ObjectStore.on_client(rfs, "gs://elsewhere")
    assert getattr(ei.value, "code", None) == "not_supported"


def test_an_oversized_state_object_reads_as_corrupt_without_being_read_whole(s3_bucket, monkeypatch):
    ostore = ObjectStore(s3_bucket.url("logs"))
    rfs = ostore.rfs
    path = rfs.path(".tb-footprint/locks/planted.json")
    rfs.ops.put(path, json.dumps({"pad": "x" * 50_000}).encode())
    monkeypatch.setattr(bucket_objects, "STATE_LIMIT", 1000)
    before = rfs.stats.bytes_down
    doc, version = BucketState(ostore).read(path)
    assert doc == {"corrupt": True} and version == rfs.ops.head(path).version_token
    assert rfs.stats.bytes_down - before <= 1001


@pytest.mark.parametrize("rel", ["journal/../../../other/x.json", "journal//x.json", "journal/./x.json"])
def test_a_path_that_is_no_plain_key_is_never_sent(s3_bucket, rel):
    ostore = ObjectStore(s3_bucket.url("logs"))
    rfs = ostore.rfs
    st = BucketState(ostore)
    path = f"{rfs.root}/.tb-footprint/{rel}"  # as an untrusted op id builds one
    c0 = counts(rfs)
    assert st.stat(path) is None and st.read(path) == (None, None)
    assert st.delete([path]) == {}  # nothing of ours there: nothing to refuse
    must_delete(ostore, [path], versions={path: "v"})
    with pytest.raises(ValueError):
        st.create(path, {})
    assert delta(c0, counts(rfs)) == dict.fromkeys(VERBS, 0)


def test_a_planted_object_under_a_key_with_dotdot_parts_is_never_deleted(s3_bucket):
    """S3 keeps 'a/../x' as a key of its own: a delete of that path (the backup or staged key a
    rollback drops for a planted file) sends nothing, so the planted object and the one the
    path would name once normalised are both kept."""
    ostore = ObjectStore(s3_bucket.url("logs"))
    planted = f"{s3_bucket.key('logs')}/a/../b/x.bin"
    s3_bucket.fs.pipe_file(planted, b"planted")
    s3_bucket.fs.pipe_file(f"{s3_bucket.key('logs')}/b/x.bin", b"user's")
    must_delete(ostore, [planted])
    s3_bucket.fs.invalidate_cache()
    assert s3_bucket.fs.cat_file(planted) == b"planted"
    assert s3_bucket.fs.cat_file(f"{s3_bucket.key('logs')}/b/x.bin") == b"user's"


def test_a_vault_in_another_prefix_of_the_bucket_is_deleted_with_the_logdirs_keys_in_one_batch(s3_bucket):
    ostore = ObjectStore(s3_bucket.url("logs"))
    rfs = ostore.rfs
    st = BucketState(ostore)
    vault = f"{s3_bucket.key('vault')}/blobs/op/run/a.bin"
    tmp = rfs.path("run/.a.tmp")
    for p in (vault, tmp):
        st.create(p, {"k": p})
    c0 = counts(rfs)
    must_delete(ostore, [vault, tmp])
    assert delta(c0, counts(rfs)) == dict.fromkeys(VERBS, 0) | {"delete": 1}  # one DeleteObjects, as before
    assert st.stat(vault) is None and st.stat(tmp) is None


def test_a_logdir_whose_prefix_starts_with_a_tilde_keeps_its_state(s3_bucket):
    """'~' is special on a disk, not in a bucket: the logdir's state is keyed under the logdir."""
    ostore = ObjectStore(s3_bucket.url("~logs"))
    st = BucketState(ostore)
    lock = lock_run(st, "run", new_op_id())
    path, version = lock.path, lock.version
    assert st.read(path)[1] == version
    ours, versions = unlock_all([lock])
    must_delete(ostore, ours, versions=versions)
    assert st.stat(path) is None


def test_the_engine_s_listings_and_reads_go_through_the_store_and_see_every_key(s3_bucket):
    """``BucketState.listing``/``tree`` (every listing of the bucket engine) are one paginated
    listing each, keyed as ``RemoteFS.list_tree``/``list_under`` keyed them (relative to the
    logdir, or to a vault elsewhere), and see a planted 'a/../b' key and a staged write, which the
    trust checks keep; a missing bucket is ``NOT_FOUND`` or, asked, nothing. Ranged and whole
    reads cost one read each."""
    ostore = ObjectStore(s3_bucket.url("logs"))
    rfs = ostore.rfs
    st = BucketState(ostore)
    s3_bucket.fs.pipe_file(f"{s3_bucket.key('logs')}/run/a/../b/x.bin", b"planted")
    s3_bucket.fs.pipe_file(f"{s3_bucket.key('logs')}/run/.footprint-tmp-1", b"staged")
    s3_bucket.fs.pipe_file(f"{s3_bucket.key('logs')}/run/events.bin", b"0123456789")
    s3_bucket.fs.pipe_file(f"{s3_bucket.key('vault')}/manifests/op.json", b"{}")
    c0 = counts(rfs)
    tree = st.tree("run")
    assert delta(c0, counts(rfs)) == dict.fromkeys(VERBS, 0) | {"list": 1}
    assert sorted(tree) == ["run/.footprint-tmp-1", "run/a/../b/x.bin", "run/events.bin"]
    assert tree["run/events.bin"].size == 10 and tree["run/events.bin"].version_token
    assert list(st.listing(f"{s3_bucket.key('vault')}/manifests", s3_bucket.key("vault"))) == ["manifests/op.json"]
    assert list(st.listing(f"{s3_bucket.key('vault')}/manifests")) == ["op.json"]
    with pytest.raises(ValueError):
        st.tree("a/../b")
    c0 = counts(rfs)
    assert st.read_range(rfs.path("run/events.bin"), 2, 5) == b"234"
    assert st.open_read(rfs.path("run/events.bin"), 10).read(4) == b"0123"
    assert st.read_bytes(rfs.path("run/events.bin")) == b"0123456789"
    assert delta(c0, counts(rfs)) == dict.fromkeys(VERBS, 0) | {"read": 3}
    gone = BucketState(ObjectStore(f"s3://no-such-bucket-{new_op_id().lower()}/logs"))
    assert gone.tree(missing_ok=True) == {}
    with pytest.raises(StoreFailure) as e:
        gone.tree()
    assert e.value.code == StoreError.NOT_FOUND
