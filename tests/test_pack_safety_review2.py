"""The J6 safety review of the local vault's packs (notes/r6/review_J6.md), the findings left
after tests/test_pack_safety_review.py: a restore's release of a grown plain blob, the memory
one planted index object costs (F2), and a planted ``.remote`` record while the pack index
folder is gone. Each test fails on the code before its fix."""
from __future__ import annotations

import functools
import hashlib
import io
import os
import secrets
import time
from pathlib import Path

import pytest

from test_restore_exact import assert_exact, snapshot
from test_vault_packs import make_logdir, packs, reduce
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


# --- 1: a restore's release never unlinks a plain blob that does not hash to its name --------
def test_a_restore_keeps_a_grown_plain_blob_beside_a_pack_and_says_so(tmp_path):
    """A plain blob under a packed backup's digest that a late writer grew (a link of a live
    file that kept being appended to) holds appended bytes that exist nowhere else. The restore
    reads the intact pack copy; its release then unlinked the grown plain blob (and forgot the
    pack copy). Now both stay, the manifest keeps claiming them, the restore says
    ``backup_changed`` and status names it."""
    root = make_logdir(tmp_path / "logs", files=3)
    before = snapshot(root)
    reduce(root)
    v = Vault(state_dir(str(root)))
    m = next(m for m in v.manifests() if m.get("kind") == "reduce")
    f = m["files"][0]
    assert v.blob_form(f["sha256"]) == "packed"
    with v.open_blob(f["sha256"]) as src:
        grown = src.read() + b"records a late writer appended: only here"
    plain = Path(v.blob_path(f["sha256"]))
    plain.parent.mkdir(mode=0o700, exist_ok=True)
    plain.write_bytes(grown)
    os.chmod(plain, 0o600)

    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [(o.status, o.reason) for o in outs]
    assert_exact(root, before)
    assert plain.read_bytes() == grown  # the appended bytes are still in the vault
    assert Finding.BACKUP_CHANGED.value in outs[0].reason and f["path"] in outs[0].reason, outs[0].reason
    fresh = Vault(state_dir(str(root))).read_manifest(m["op_id"])
    assert fresh.get("restored_by") and not fresh.get("backup_purged")
    assert Vault(state_dir(str(root))).check_blob(f["sha256"])  # the pack copy stays beside it
    codes = [p["code"] for p in api.status(str(root))["problems"]]
    assert Finding.BACKUP_CHANGED in codes and Finding.BACKUP_DAMAGED not in codes, codes
    # the whole backup stays while one of its blobs changed: the operation never claims a blob
    # that went (status called those missing, "damaged")
    for g in m["files"][1:]:
        assert Vault(state_dir(str(root))).check_blob(g["sha256"])
    # and a later start asks again, and keeps it again
    api.recover_logdir(str(root))
    assert plain.read_bytes() == grown


# --- 3: a planted .remote record never makes a pack no index lists a sweepable leftover --------
def _age_packs(v: Path, hours: float = 2) -> None:
    old = time.time() - hours * 3600  # reduced long ago: every pack is past the leftovers' grace
    for p in (v / "packs" / "data").rglob("*.pack"):
        os.utime(p, (old, old))


def test_a_planted_record_never_lets_an_unlisted_pack_be_swept(tmp_path, s3_bucket):
    """The pack index's objects deleted (the folder left, empty) and a well-formed ``.remote``
    record (the configured remote vault's URL) planted for every backup while the bucket holds
    none of them: ``pack_index_gaps`` counted each record as a copy, found no gap, and the batch
    end swept the pack, the only copy. A record now counts only when its remote vault's index
    lists the blob: the gap is named and the pack stays; once the bucket does hold them all,
    the records count again."""
    from tb_footprint_plugin.engine import offload, remote_vault
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.storage.blobstore import BlobSource

    root = make_logdir(tmp_path / "logs", files=4)
    reduce(root)
    vault = Context(str(root)).vault
    offload.configure(vault, s3_bucket.url("planted"))
    url = remote_vault.configured_url(vault.root)
    m = next(m for m in vault.manifests() if m.get("kind") == "reduce")
    bodies = {}
    for f in m["files"]:
        with remote_vault.open_packed(vault.root, f["sha256"]) as src:
            bodies[f["sha256"]] = src.read()
    v = Path(vault.root)
    _age_packs(v)
    held = packs(root)
    assert held
    for obj in list((v / "packs" / "index").iterdir()):
        obj.unlink()
    for sha, body in bodies.items():
        remote_vault.write_record(vault.root, sha, url, len(body), f"data/{sha[:2]}/{sha}")
    gaps = Vault(str(v)).pack_index_gaps()
    assert gaps and "listed by no index object" in gaps[0]["message"], gaps
    Vault(str(v)).merge_pack_index()
    assert packs(root) == held  # the only copy of run a's backups stays
    # the bucket holds every blob now (verified by its store): the records stand for copies
    bs = remote_vault.blobstore(url, fresh=True)
    bs.add([BlobSource(sha=s, size=len(b), open=functools.partial(io.BytesIO, b)) for s, b in bodies.items()])
    assert Vault(str(v)).pack_index_gaps() == []


# --- 2 (F2): one planted index object must not cost memory by its size --------------------------
def _plant_huge_index(folder: Path) -> Path:
    """An index object of valid-looking rows just under ``INDEX_READ_LIMIT`` (the review's r3:
    66 MB, 475,948 rows), written a batch of rows at a time."""
    from tb_footprint_plugin.storage.blobstore import INDEX_READ_LIMIT

    pid = secrets.token_hex(16)
    key = f"data/{pid[:2]}/{pid}.pack"
    row_len = len(f'["{0:064x}",1,"{key}",{21 + 999_999},1,"raw",[""]],')
    count = (INDEX_READ_LIMIT - 100) // row_len
    path = folder / f"{secrets.token_hex(16)}.json"
    with open(path, "w") as f:
        f.write('{"v":1,"created":0,"blobs":[')
        for start in range(0, count, 10_000):
            f.write(",".join(f'["{i:064x}",1,"{key}",{21 + i},1,"raw",[""]]'
                             for i in range(start, min(count, start + 10_000))))
            if start + 10_000 < count:
                f.write(",")
        f.write("]}")
    assert 60_000_000 < path.stat().st_size <= INDEX_READ_LIMIT
    return path


def test_a_planted_huge_index_object_is_refused_as_damaged_in_bounded_memory(tmp_path):
    """A planted index object of 66 MB (475,948 rows) was parsed whole: ~490 MB traced (about
    as much again resident) for one reload. Now it is read as a stream and refused as damaged
    once it lists more rows than any index object of this layout (named, ``index_damaged``):
    the reload's traced peak stays below 64 MiB, nothing is deleted, and the backups the real
    index lists restore exactly."""
    import tracemalloc

    from tb_footprint_plugin.codes import BlobError
    from tb_footprint_plugin.engine import remote_vault
    from tb_footprint_plugin.storage import blobstore

    root = make_logdir(tmp_path / "logs", files=4)
    before = snapshot(root)
    reduce(root)
    v = Path(state_dir(str(root)))
    planted = _plant_huge_index(v / "packs" / "index")
    held = packs(root)
    with blobstore._PARSED_LOCK:
        blobstore._PARSED.clear()  # a fresh process: nothing parsed yet
    bs = remote_vault.pack_store(str(v), fresh=True)
    tracemalloc.start()
    try:
        bs.reload()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak >> 20} MiB traced for one reload"
    damaged = bs.damaged_index()
    assert [d["key"] for d in damaged] == [f"index/{planted.name}"], damaged
    assert damaged[0]["code"] == BlobError.DAMAGED_INDEX.value
    reads = []
    real = bs.store.open_read
    bs.store.open_read = lambda key, *a, **kw: reads.append(key) or real(key, *a, **kw)
    bs.reload()  # found damaged as it is: not parsed again by this store
    assert f"index/{planted.name}" not in reads and [d["key"] for d in bs.damaged_index()] == [d["key"] for d in damaged]
    problems = Vault(str(v)).pack_problems()
    assert any(p["code"] == BlobError.DAMAGED_INDEX.value and p["file"] == str(planted) for p in problems), problems
    Vault(str(v)).merge_pack_index()
    assert packs(root) == held and planted.exists()
    planted.unlink()  # the user removes what status named; the restore reads the real index
    outs = api.restore(str(root))
    assert [o.status.value for o in outs] == ["restored"], [(o.status, o.reason) for o in outs]
    assert_exact(root, before)


def test_the_parsed_index_cache_is_bounded_by_bytes(tmp_path, monkeypatch):
    """The module cache of parsed index objects kept every object read for the life of the
    process; it now keeps at most ``INDEX_CACHE_BYTES`` of them as stored, the least recently
    used going first, and a store reads an evicted object again as it was."""
    import io as _io

    from tb_footprint_plugin.storage import blobstore
    from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore

    monkeypatch.setattr(blobstore, "_PARSED", {})
    monkeypatch.setattr(blobstore, "INDEX_CACHE_BYTES", 2000, raising=False)
    stores = []
    for n in range(6):  # six vaults' pack stores, one index object each (~700 bytes)
        d = tmp_path / f"s{n}"
        d.mkdir()
        bs = BlobStore(PosixStore(str(d)))
        bodies = [os.urandom(100) for _ in range(3)]
        bs.add([BlobSource(sha=hashlib.sha256(b).hexdigest(), size=len(b), open=functools.partial(_io.BytesIO, b))
                for b in bodies])
        stores.append((d, bodies))
        fresh = BlobStore(PosixStore(str(d)))
        fresh.reload()
    cached = blobstore._PARSED
    assert 1 <= len(cached) < 6 and sum(v[1] for v in cached.values()) <= 2000, {k: v[1] for k, v in cached.items()}
    d, bodies = stores[0]  # the first store's object went first; read again, it is whole
    again = BlobStore(PosixStore(str(d)))
    assert all(again.has(hashlib.sha256(b).hexdigest()) for b in bodies) and not again.damaged_index()


@pytest.mark.parametrize("shape", ["compact", "spaced", "blobs_first", "cut_in_chunks"])
def test_an_index_object_read_as_a_stream_lists_what_json_says(tmp_path, monkeypatch, shape):
    """The streamed read of an index object lists the same rows as the document parsed whole,
    whatever its spacing or field order, and across read chunks that cut rows and numbers."""
    import json

    from tb_footprint_plugin.storage import blobstore
    from tb_footprint_plugin.storage.blobstore import BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore

    pid = secrets.token_hex(16)
    rows = [[f"{i:064x}", 10 + i, f"data/{pid[:2]}/{pid}.pack", 21 + 100 * i, 10 + i, "raw", ["", "x"]]
            for i in range(50)]
    doc = {"v": 1, "created": 123.5, "blobs": rows}
    if shape == "blobs_first":
        doc = {"blobs": rows, "created": 123.5, "v": 1}
    text = json.dumps(doc, indent=2) if shape == "spaced" else json.dumps(doc, separators=(",", ":"))
    if shape == "cut_in_chunks":
        monkeypatch.setattr(blobstore, "_INDEX_READ", 7)
    monkeypatch.setattr(blobstore, "_PARSED", {})
    (tmp_path / "index").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "index" / f"{secrets.token_hex(16)}.json").write_text(text)
    bs = BlobStore(PosixStore(str(tmp_path)))
    assert not bs.damaged_index()
    got = sorted((r.sha, r.size, r.key, r.offset, r.length, r.form, sorted(bs.owners(r.sha))) for r in bs.refs())
    assert got == [tuple(r[:6]) + (sorted(r[6]),) for r in rows]


@pytest.mark.parametrize("text", [
    '{"v":1,"blobs":[]} x', '{"v":1,"blobs":[[1] [2]]}', '{"v":1,"blobs":[[1],]}', '{"v":2,"blobs":[]}',
    '{"v":1}', '{"v":1,"blobs":{}}', '[]', '', '{"v":1,"blobs":[', '{"v":1,"v":1,"blobs":[]}',
    '{"v":1,"blobs":[' + "[" * 100_000 + "]" * 100_000 + "]}"])
def test_an_index_object_that_is_not_one_is_damaged(tmp_path, monkeypatch, text):
    """Whatever is not a whole v1 index document is a damaged index object, named; nothing it
    says is taken."""
    from tb_footprint_plugin.codes import BlobError
    from tb_footprint_plugin.storage import blobstore
    from tb_footprint_plugin.storage.blobstore import BlobStore
    from tb_footprint_plugin.storage.store_posix import PosixStore

    monkeypatch.setattr(blobstore, "_PARSED", {})
    (tmp_path / "index").mkdir()
    (tmp_path / "data").mkdir()
    name = f"{secrets.token_hex(16)}.json"
    (tmp_path / "index" / name).write_text(text)
    damaged = BlobStore(PosixStore(str(tmp_path))).damaged_index()
    assert [(d["key"], d["code"]) for d in damaged] == [(f"index/{name}", BlobError.DAMAGED_INDEX.value)]
