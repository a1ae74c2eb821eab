"""A pending note left by a write killed after its index object was durable (``add.index_written``)
never proves a listed object a leftover later (review R24's note on 12c3f17).

The note names keys its index object lists: left, once that index object is lost (a lifecycle
rule, a tidy) and the note is past the grace, the sweep took the pack — the only copy of blobs
whose manifest is missing (orphans: no caller's guard needs them). Or the blob is forgotten
legitimately, written again by a later add (a lone blob's key is its sha), and its new index object
lost: the old note proved it. Now a sweep drops, before deleting anything and whatever their age,
the notes whose every key is listed or absent, and a forget that deletes an object a note names
drops that note the same way. Real files (PosixStore); the kill is the store's failpoint."""
import hashlib
import io
import os
import time

import pytest

from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore

AGED = 2 * 3600


class Crash(Exception):
    pass


def _src(data: bytes) -> BlobSource:
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda d=data: io.BytesIO(d))


def _files(root, folder):
    base = os.path.join(root, folder)
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(base) for f in fs)


def _age(root, folder, by=AGED):
    old = time.time() - by
    for rel in _files(root, folder):
        os.utime(os.path.join(root, rel), (old, old))


def _killed_after_index(root, datas):
    """An add of ``datas`` killed right after its index object is durable: its note stays."""
    def crash(step):
        if step == "add.index_written":
            raise Crash(step)

    bs = BlobStore(PosixStore(root, create=True), pack_below=1024, failpoint=crash)
    with pytest.raises(Crash):
        bs.add([_src(d) for d in datas])
    (note,) = _files(root, "pending")
    return note


def _lose_index(root):
    for rel in _files(root, "index"):
        os.unlink(os.path.join(root, rel))


def test_the_next_sweep_drops_the_note_while_its_pack_is_listed_and_a_lost_index_later_sweeps_nothing(tmp_path):
    root = str(tmp_path / "bs")
    datas = [os.urandom(300) + bytes([i]) for i in range(5)]
    note = _killed_after_index(root, datas)
    (pack,) = _files(root, "data")
    # the next start's batch end: a sweep, the note still young (its write may be alive for all it knows)
    fig = BlobStore(PosixStore(root), pack_below=1024).forget([], grace_seconds=3600)
    assert not os.path.exists(os.path.join(root, note)), fig
    assert fig.get("pending_stale_dropped") == 1, fig
    assert _files(root, "data") == [pack]
    # later the index object listing the pack is lost, and everything is past the grace
    _lose_index(root)
    _age(root, "pending", by=AGED + 60)  # (none is left: were one, it would be older than the pack)
    _age(root, "data")
    fig = BlobStore(PosixStore(root), pack_below=1024).forget([], grace_seconds=3600)
    assert _files(root, "data") == [pack], fig
    assert fig["leftovers_deleted"] == 0 and fig["unlisted_kept"] == 1, fig


def test_a_forget_of_the_notes_lone_blob_drops_it_so_a_later_rewrite_is_never_proven_a_leftover(tmp_path):
    """Lone blob L (its key is its sha): indexed, the add killed before its note went; L forgotten
    by a release (no sweep): deleted; written again by a clean add; that add's index object lost;
    a sweep past the grace keeps L (the old note named it, and L is younger than that note)."""
    root = str(tmp_path / "bs")
    big = os.urandom(5000)
    note = _killed_after_index(root, [big])
    (lone,) = _files(root, "data")
    bs = BlobStore(PosixStore(root), pack_below=1024)
    fig = bs.forget([_src(big).sha], sweep=False)
    assert fig["objects_deleted"] == 1 and _files(root, "data") == [], fig
    assert not os.path.exists(os.path.join(root, note)), fig
    time.sleep(0.05)
    (ref,) = BlobStore(PosixStore(root), pack_below=1024).add([_src(big)])
    assert ref.key == lone and _files(root, "pending") == []
    _lose_index(root)
    _age(root, "pending", by=AGED + 60)  # (none is left)
    _age(root, "data")
    fig = BlobStore(PosixStore(root), pack_below=1024).forget([], grace_seconds=3600)
    assert _files(root, "data") == [lone], fig
    assert fig["leftovers_deleted"] == 0 and fig["unlisted_kept"] == 1, fig


def test_a_young_note_of_a_write_that_wrote_nothing_listed_yet_is_kept(tmp_path):
    """The other side: a young note whose keys are unlisted objects (a write between its data and its
    index) or not yet written is a live write's: not dropped."""
    root = str(tmp_path / "bs")

    def crash(step):
        if step == "add.verified":
            raise Crash(step)

    bs = BlobStore(PosixStore(root, create=True), pack_below=1024, failpoint=crash)
    with pytest.raises(Crash):
        bs.add([_src(os.urandom(300)) for _ in range(3)])
    (note,) = _files(root, "pending")
    fig = BlobStore(PosixStore(root), pack_below=1024).forget([], grace_seconds=3600)
    assert os.path.exists(os.path.join(root, note)) and not fig.get("pending_stale_dropped"), fig
    assert len(_files(root, "data")) == 1 and fig["leftovers_kept_young"] == 1, fig
