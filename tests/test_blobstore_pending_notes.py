"""A sweep deletes only what is proven to be a killed write's leftover (review R24 F5, HIGH).

``BlobStore.forget(sweep=True)`` deleted every data object no index row listed once past the grace,
taking it for a killed ``add``'s leftover; but an object is also unlisted when the index object
listing it was lost (the orphans of a missing manifest: nobody's guard fires for them). Now every
write of data objects not yet listed first makes a create-only ``pending/<id>.json`` note naming
them durable, and removes it once their index object is; the sweep deletes an unlisted object
only when an old note names it (and the object is not older than the note), and keeps and counts
every other one. On a PosixStore; crashes through the store's failpoints."""
import json
import os
import time

import pytest

from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore, STEPS
from tb_footprint_plugin.storage.store_posix import PosixStore

AGED = 2 * 3600


class Crash(Exception):
    pass


def _src(data: bytes) -> BlobSource:
    import hashlib
    import io
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda d=data: io.BytesIO(d))


def _blobs(n=5, tag=b"x"):
    return [os.urandom(300) + tag * i for i in range(n)]


def _files(root, folder):
    base = os.path.join(root, folder)
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(base) for f in fs)


def _age(root, folder, by=AGED):
    old = time.time() - by
    for rel in _files(root, folder):
        os.utime(os.path.join(root, rel), (old, old))


def _store(tmp_path, **kw):
    root = str(tmp_path / "bs")
    return root, BlobStore(PosixStore(root, create=True), pack_below=1024, **kw)


def _unlisted(tmp_path):
    """One add of small blobs (one pack), then its index object removed: (root, store, pack key)."""
    root, bs = _store(tmp_path)
    refs = bs.add([_src(b) for b in _blobs()])
    assert len({r.key for r in refs}) == 1
    for rel in _files(root, "index"):
        os.unlink(os.path.join(root, rel))
    bs.reload()
    return root, bs, refs[0].key


def _note(root, keys, age=None, doc=None):
    path = os.path.join(root, "pending", f"{os.urandom(16).hex()}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps({"v": 1, "created": 0, "keys": keys}) if doc is None else doc)
    if age is not None:
        os.utime(path, (time.time() - age,) * 2)
    return path


def test_an_add_leaves_no_note_and_its_objects_listed(tmp_path):
    root, bs = _store(tmp_path)
    bs.add([_src(b) for b in _blobs()] + [_src(os.urandom(4096))])
    assert _files(root, "pending") == []
    fig = bs.forget([], grace_seconds=0)
    assert fig["leftovers_deleted"] == 0 and fig["unlisted_kept"] == 0, fig


def test_an_unlisted_object_without_a_note_is_kept_however_old(tmp_path):
    root, bs, key = _unlisted(tmp_path)
    _age(root, "data", by=30 * 24 * 3600)
    fig = bs.forget([], grace_seconds=3600)
    assert os.path.exists(os.path.join(root, key)), fig
    assert fig["unlisted_kept"] == 1 and fig["unlisted_kept_bytes"] == os.path.getsize(os.path.join(root, key))
    assert fig["leftovers_deleted"] == 0 and fig["objects_deleted"] == 0, fig


def test_an_old_note_proves_a_leftover_deleted_then_the_note_dropped(tmp_path):
    root, bs, key = _unlisted(tmp_path)
    note = _note(root, [key], age=AGED + 60)
    _age(root, "data")
    fig = bs.forget([], grace_seconds=3600)
    assert not os.path.exists(os.path.join(root, key)), fig
    assert not os.path.exists(note), fig
    assert fig["leftovers_deleted"] == 1 and fig["unlisted_kept"] == 0, fig


def test_a_young_note_deletes_nothing(tmp_path):
    root, bs, key = _unlisted(tmp_path)
    note = _note(root, [key], age=60)
    _age(root, "data")
    fig = bs.forget([], grace_seconds=3600)
    assert os.path.exists(os.path.join(root, key)) and os.path.exists(note), fig
    assert fig["unlisted_kept"] == 1, fig


def test_an_object_older_than_the_note_naming_it_is_not_that_writes(tmp_path):
    """An add whose lone key was there already (someone's orphan) named it too: not proof."""
    root, bs, key = _unlisted(tmp_path)
    _age(root, "data", by=AGED + 3600)
    _note(root, [key], age=AGED)
    fig = bs.forget([], grace_seconds=3600)
    assert os.path.exists(os.path.join(root, key)), fig
    assert fig["unlisted_kept"] == 1, fig


@pytest.mark.parametrize("doc", [
    "{not json",
    json.dumps({"v": 1, "keys": "data/ab/x.pack"}),
    json.dumps({"v": 2, "keys": []}),
    json.dumps({"v": 1, "keys": ["../../outside", None]}),
])
def test_a_malformed_note_deletes_nothing(tmp_path, doc):
    root, bs, key = _unlisted(tmp_path)
    # a malformed note that names the key in its text proves nothing either
    note = _note(root, None, age=AGED + 60, doc=doc.replace("data/ab/x.pack", key))
    _age(root, "data")
    fig = bs.forget([], grace_seconds=3600)
    assert os.path.exists(os.path.join(root, key)) and os.path.exists(note), fig
    assert fig["unlisted_kept"] == 1 and [d["key"] for d in fig["pending_damaged"]] == [os.path.relpath(note, root)]


def test_a_note_naming_a_listed_key_deletes_nothing(tmp_path):
    root, bs = _store(tmp_path)
    refs = bs.add([_src(b) for b in _blobs()])
    note = _note(root, sorted({r.key for r in refs}), age=AGED + 60)
    _age(root, "data")
    fig = bs.forget([], grace_seconds=3600)
    assert fig["objects_deleted"] == 0 and fig["leftovers_deleted"] == 0, fig
    for r in refs:
        assert bs.open(r.sha).read()
    assert not os.path.exists(note)  # proves nothing any more: dropped


@pytest.mark.parametrize("step", ["add.data_written", "add.verified", "add.index_written"])
def test_a_killed_add_leaves_every_blob_readable_or_a_leftover_the_sweep_deletes(tmp_path, step):
    """Killed between the note and the data (a lone blob's), between the data and the index, and
    between the index and the note's removal: a later sweep past the grace leaves each blob either
    readable, or gone with its object; the killed add's notes go; nothing else is touched."""
    root, bs = _store(tmp_path)
    keep = bs.add([_src(b) for b in _blobs(tag=b"k")])  # an earlier add, listed
    datas = _blobs(tag=b"y") + [os.urandom(5000)]

    def crash(s):
        if s == step:
            raise Crash(s)

    bs.failpoint = crash
    with pytest.raises(Crash):
        bs.add([_src(b) for b in datas])
    bs.failpoint = None
    assert len(_files(root, "pending")) == 1  # one note for the whole batch
    fresh = BlobStore(PosixStore(root), pack_below=1024)
    fig = fresh.forget([], grace_seconds=0)
    assert _files(root, "pending") == [], fig
    for r in keep:
        assert fresh.open(r.sha).read()
    listed = [fresh.has(_src(b).sha) for b in datas]
    if step == "add.index_written":
        assert all(listed), fig
        for b in datas:
            assert fresh.open(_src(b).sha).read() == b
    else:
        assert not any(listed) and fig["leftovers_deleted"] >= 1, fig
        # nothing unlisted stays: the leftovers were proven and deleted
        keys = {r.key for r in fresh.refs()}
        assert {k for k in _files(root, "data")} == keys, fig


def test_a_killed_repack_leaves_its_new_pack_a_proven_leftover(tmp_path):
    root, bs = _store(tmp_path)
    refs = bs.add([_src(b) for b in _blobs(n=10)])
    drop = [r.sha for r in refs[:8]]

    def crash(s):
        if s == "forget.pack_written":
            raise Crash(s)

    with pytest.raises(Crash):
        bs.forget(drop, grace_seconds=0, failpoint=crash)
    assert len(_files(root, "pending")) == 1
    fresh = BlobStore(PosixStore(root), pack_below=1024)
    for r in refs:  # the old pack and index stand: every blob reads
        assert fresh.open(r.sha).read()
    assert len(_files(root, "data")) == 2
    fig = fresh.forget(drop, grace_seconds=0)
    assert fig["leftovers_deleted"] == 1 and _files(root, "pending") == [], fig
    for r in refs[8:]:
        assert fresh.open(r.sha).read()


def test_a_sweep_on_a_store_of_old_vaults_keeps_their_leftovers(tmp_path):
    """A leftover written before notes existed (no note names it): kept and counted, never
    deleted — space, not bytes."""
    root, bs = _store(tmp_path)
    bs.add([_src(b) for b in _blobs()])
    old = os.path.join(root, "data", "ab", "ab" * 16 + ".pack")
    os.makedirs(os.path.dirname(old), exist_ok=True)
    with open(old, "wb") as f:
        f.write(blobstore.PACK_MAGIC + b"z" * 50)
    _age(root, "data")
    fig = bs.forget([], grace_seconds=3600)
    assert os.path.exists(old) and fig["unlisted_kept"] == 1, fig


def test_steps_name_the_note_removal():
    assert "add.pending_removed" in STEPS


def test_add_takes_its_sources_one_at_a_time_never_ahead(tmp_path):
    """The notes are written as each blob's key is drawn, not from a list of every source made first
    (12c3f17 did ``list(items)``): a caller streams each original through a scratch file it removes
    once the next source is asked for (``bucket_blobs.backup_entries``), and memory must not grow
    with the number of blobs. Each source here is opened before the next one is asked for."""
    import hashlib
    import io

    (tmp_path / "store").mkdir()
    bs = BlobStore(PosixStore(str(tmp_path / "store")))
    events = []

    def sources():
        for i in range(6):
            data = os.urandom(bs.pack_below + 10 if i % 2 else 100)
            sha = hashlib.sha256(data).hexdigest()

            def opener(data=data, i=i):
                events.append(("open", i))
                return io.BytesIO(data)

            events.append(("yield", i))
            yield BlobSource(sha=sha, size=len(data), open=opener)

    refs = bs.add(sources())
    assert len(refs) == 6 and all(r is not None for r in refs)
    for i in range(5):
        assert events.index(("open", i)) < events.index(("yield", i + 1)), events
    assert not [e for e in bs.store.list("pending")], "a pending note was left after the add"
