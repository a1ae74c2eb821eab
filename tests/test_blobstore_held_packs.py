"""Review R25 F2 (HIGH): a pack listed anew only in part lost an orphan's blobs to a forget.

Runs x and w reduced in one batch share one pack, listed by one index object. w's manifest goes
missing (its blobs become orphans: nobody asks for them) and the index object is lost. A restore
(or a purge's look) finds x's blobs again and lists them anew (``index_found``): the pack is now
listed in part. x's release then forgot x's rows and deleted the pack — the data object no listed
row needed — with w's only copy. Now ``index_found`` marks a pack its rows do not cover held
(``held/<pack id>.json``) and no forget deletes or repacks a held pack; a pack whose rows were
never lost still goes once its last row is forgotten. On a PosixStore (the layout every store
shares: a disk vault's packs, a bucket's blob folder, a remote vault)."""
import hashlib
import io
import os

import pytest

from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore


def _src(data: bytes) -> BlobSource:
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda d=data: io.BytesIO(d))


def _files(root, folder):
    base = os.path.join(root, folder)
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(base) for f in fs)


def _shared_pack(tmp_path):
    """x's three blobs and w's two, one add: one pack, one index object."""
    root = str(tmp_path / "bs")
    bs = BlobStore(PosixStore(root, create=True), pack_below=4096)
    x = [os.urandom(700) + b"x" * i for i in range(3)]
    w = [os.urandom(900) + b"w" * i for i in range(2)]
    refs = bs.add([_src(b) for b in x + w])
    assert len({r.key for r in refs}) == 1, refs
    return root, refs[:3], refs[3:], w


@pytest.mark.parametrize("sweep", [False, True])
def test_a_pack_listed_anew_in_part_keeps_the_orphans_bytes_through_every_forget(tmp_path, sweep):
    root, x, w, w_bytes = _shared_pack(tmp_path)
    pack = x[0].key
    for rel in _files(root, "index"):  # the index object lost
        os.unlink(os.path.join(root, rel))
    bs = BlobStore(PosixStore(root), pack_below=4096)
    bs.index_found(x)  # a restore of x found its blobs again (w's: nobody asked)
    fig = bs.forget([r.sha for r in x], grace_seconds=0, sweep=sweep)  # x restored: its blobs let go
    assert os.path.exists(os.path.join(root, pack)), f"the pack holding w's only copy was deleted: {fig}"
    assert fig.get("held_kept") == 1 and bs.held_packs() == {pack}, fig
    # w's manifest comes back: its blobs are found in the pack, whole
    again = BlobStore(PosixStore(root), pack_below=4096)
    again.index_found(w)
    for ref, data in zip(w, w_bytes):
        with again.open(ref.sha) as f:
            assert f.read() == data


def test_a_pack_never_listed_anew_still_goes_with_its_last_row(tmp_path):
    root, x, w, _ = _shared_pack(tmp_path)
    bs = BlobStore(PosixStore(root), pack_below=4096)
    fig = bs.forget([r.sha for r in x], grace_seconds=0, sweep=False)  # below half live: w's repacked
    assert fig["packs_repacked"] == 1 and not fig.get("held_kept"), fig
    fig = bs.forget([r.sha for r in w], grace_seconds=0, sweep=False)
    assert _files(root, "data") == [], fig
    assert bs.held_packs() == set() and not fig.get("held_kept"), fig


def test_a_pack_listed_anew_whole_is_not_held(tmp_path):
    root, x, w, _ = _shared_pack(tmp_path)
    for rel in _files(root, "index"):
        os.unlink(os.path.join(root, rel))
    bs = BlobStore(PosixStore(root), pack_below=4096)
    bs.index_found(x + w)  # every blob of it found again: nothing unaccounted
    assert bs.held_packs() == set()
    bs.forget([r.sha for r in x + w], grace_seconds=0, sweep=False)
    assert _files(root, "data") == []


def test_the_mark_is_durable_before_the_rows_it_guards(tmp_path, monkeypatch):
    """Review R25 F4: the mark was written after the index object listing the found rows; killed in
    between, the pack stood listed in part and unheld, and no later look would mark it (the start
    finds nothing hidden any more). Now the mark comes first: a write of the rows that fails (a
    kill) leaves the pack held, which only ever keeps it."""
    root, x, w, _ = _shared_pack(tmp_path)
    for rel in _files(root, "index"):
        os.unlink(os.path.join(root, rel))
    bs = BlobStore(PosixStore(root), pack_below=4096)

    def killed(*a, **kw):
        raise KeyboardInterrupt("killed before the index object")

    monkeypatch.setattr(bs, "_write_index", killed)
    with pytest.raises(KeyboardInterrupt):
        bs.index_found(x)
    assert bs.held_packs() == {x[0].key}


def test_a_pack_whose_rows_two_index_objects_list_keeps_the_lost_ones_bytes(tmp_path, monkeypatch):
    """Review R25 F5: with no look at all. An add of more small blobs than an index object lists
    (``INDEX_ROWS``, 2,048; 5 here) splits one pack's rows over two objects; the one listing only
    an orphan's rows lost, nothing is looked for (every needed blob is still listed), and the
    forget of the listed rows deleted the pack. A forget now deletes or repacks a pack only when
    its rows (those it forgets included) and the gaps earlier forgets recorded cover it."""
    from tb_footprint_plugin.storage import blobstore

    monkeypatch.setattr(blobstore, "INDEX_ROWS", 5)
    root = str(tmp_path / "bs")
    bs = BlobStore(PosixStore(root, create=True), pack_below=4096)
    blobs = [os.urandom(600) + bytes([i]) for i in range(7)]
    refs = bs.add([_src(b) for b in blobs])
    assert len({r.key for r in refs}) == 1 and len(_files(root, "index")) == 2
    small = min(_files(root, "index"), key=lambda rel: os.path.getsize(os.path.join(root, rel)))
    os.unlink(os.path.join(root, small))  # the object listing the orphan's two rows, lost
    bs = BlobStore(PosixStore(root), pack_below=4096)
    listed = [r for r in refs if bs.has(r.sha)]
    assert len(listed) == 5
    fig = bs.forget([r.sha for r in listed], grace_seconds=0, sweep=False)
    assert os.path.exists(os.path.join(root, refs[0].key)), f"the pack with the orphan's rows was deleted: {fig}"
    assert fig.get("held_kept") == 1, fig
    again = BlobStore(PosixStore(root), pack_below=4096)
    orphans = [r for r in refs if r not in listed]
    again.index_found(orphans)
    for r in orphans:
        with again.open(r.sha) as f:
            assert f.read() == blobs[refs.index(r)]


def test_a_packs_own_gaps_are_recorded_so_it_is_repacked_then_deleted(tmp_path):
    """The other side: releases of a pack's blobs one run at a time (the pack stays while half of
    it lives) record the ranges they let go, so the pack is still repacked, then deleted, with its
    last rows: nothing kept for want of an account, nothing left behind."""
    root = str(tmp_path / "bs")
    bs = BlobStore(PosixStore(root, create=True), pack_below=4096)
    refs = bs.add([_src(os.urandom(800) + bytes([i])) for i in range(6)])
    assert len({r.key for r in refs}) == 1
    fig = bs.forget([r.sha for r in refs[:2]], grace_seconds=0, sweep=False)
    assert fig["packs_repacked"] == 0 and os.path.exists(os.path.join(root, refs[0].key)), fig
    assert _files(root, "gaps"), "the forget recorded no gap of the pack that stayed"
    fig = bs.forget([r.sha for r in refs[2:4]], grace_seconds=0, sweep=False)
    assert fig["packs_repacked"] == 1 and not fig.get("held_kept"), fig
    assert not os.path.exists(os.path.join(root, refs[0].key)) and _files(root, "gaps") == [], _files(root, "gaps")
    fig = bs.forget([r.sha for r in refs[4:]], grace_seconds=0, sweep=False)
    assert _files(root, "data") == [] and not fig.get("held_kept"), fig
