"""``BlobStore`` killed with SIGKILL at each of its steps (no ``finally``, no cleanup runs), on a
POSIX folder and moto S3, the GCS emulator and Azurite: every blob an index lists still reads
back whole, the killed ``add`` or ``forget`` done again completes, and a last ``forget`` leaves
exactly the objects the live blobs need.

The exception-injected crash matrix of every step is in ``test_blobstore.py``; this file checks
that a process that dies outright leaves nothing those tests did not foresee.
"""
import hashlib
import io
import itertools
import os
import signal
import subprocess
import sys

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store import Store
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: the originals, made the same way in the child and here (lone zstd, lone raw, packed ones)
ITEMS = '''
import hashlib
def make_items():
    lone_text = b"step=1 loss=0.25 " * 40_000
    lone_random = b"".join(hashlib.sha256(b"r%d" % i).digest() for i in range(20_000))
    small = [hashlib.sha256(b"s%d" % i).digest() * (40 + i) for i in range(10)]
    small += [b"epoch %d acc=0.9 " % i * 30 for i in range(10)]
    return [lone_text, lone_random] + small
'''

CHILD = ITEMS + '''
import io, os, signal, sys
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.stores import open_store

url, op, step = sys.argv[1:4]

def die(s):
    if s == step:
        os.kill(os.getpid(), signal.SIGKILL)

blobstore.FAILPOINT = die
store = open_store(url)
datas = make_items()
srcs = [BlobSource(hashlib.sha256(d).hexdigest(), len(d), (lambda d=d: io.BytesIO(d))) for d in datas]
bs = BlobStore(store)
if op == "add":
    bs.add(srcs)
elif op == "merge":  # a batch's end: a sweep that repacks the small packs together
    bs.forget([], small_packs=2)
else:  # "forgetfew": the local vault's release, which lists no data object
    bs.forget([s.sha for i, s in enumerate(srcs) if i not in KEEP], sweep=op != "forgetfew")
print("finished without being killed")
'''

#: positions of the originals a forget keeps (the rest are forgotten: the pack falls below half)
KEEP = (1, 3, 12)

ns = {}
exec(ITEMS, ns)
DATAS = ns["make_items"]()
SRCS = [BlobSource(hashlib.sha256(d).hexdigest(), len(d), (lambda d=d: io.BytesIO(d))) for d in DATAS]

_prefixes = itertools.count()
CASES = [("posix", s) for s in ("add.data_written", "add.verified", "add.index_written", "add.pending_removed",
                                "forget.pack_written",
                                "forget.index_written", "forget.old_index_deleted", "forget.objects_deleted")]
CASES += [(k, s) for k in ("s3", "gs", "az") for s in ("add.verified", "forget.index_written")]


def run_child(url: str, env: dict, op: str, step: str) -> subprocess.CompletedProcess:
    code = CHILD.replace("KEEP", repr(KEEP))
    env = dict(env, PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, url, op, step], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def readable(store: Store, idx) -> None:
    bs = BlobStore(store)
    for i in idx:
        with bs.open(SRCS[i].sha) as f:
            assert f.read() == DATAS[i], i


def every_listed_blob_reads_back(store: Store) -> None:
    bs = BlobStore(store)
    by_sha = {s.sha: d for s, d in zip(SRCS, DATAS)}
    for ref in bs.refs():
        assert bs.check(ref.sha) is None
        with bs.open(ref.sha) as f:
            assert f.read() == by_sha[ref.sha]


@pytest.mark.parametrize("kind,step", CASES)
def test_sigkill_at_each_step_leaves_every_listed_blob_whole_and_the_next_run_finishes(
        kind, step, tmp_path, objstore_pool):
    env = dict(os.environ)
    if kind == "posix":
        root = tmp_path / "vault"
        root.mkdir()
        store: Store = PosixStore(str(root))
        url = str(root)
    else:
        server = objstore_pool.get(kind)
        env.update(server.env)
        url = Bucket(server).url(f"k{next(_prefixes)}/vault")
        store = ObjectStore(url)
    op = step.split(".")[0]
    if op == "forget":
        BlobStore(store).add(SRCS)
    res = run_child(url, env, op, step)
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stdout, res.stderr[-3000:])
    every_listed_blob_reads_back(store)
    if op == "add":
        refs = BlobStore(store).add(SRCS)  # the killed add done again
        assert [r.sha for r in refs] == [s.sha for s in SRCS]
        readable(store, range(len(SRCS)))
        keep = range(len(SRCS))
    else:
        readable(store, KEEP)  # the live blobs survived the kill
        BlobStore(store).forget([s.sha for i, s in enumerate(SRCS) if i not in KEEP])
        readable(store, KEEP)
        keep = KEEP
    BlobStore(store).forget([], grace_seconds=0)  # the kill's leftovers, once their grace is over
    after = BlobStore(store)
    assert sorted(r.sha for r in after.refs()) == sorted(SRCS[i].sha for i in keep)
    needed = sorted({c.key for r in after.refs() for c in after.candidates(r.sha)})
    assert sorted(e.key for e in store.list("data")) == needed
    assert after.damaged_index() == []  # no half-written index object either
    assert [e.key for e in store.list("pending")] == []  # the kill's pending notes dropped (R24 F5)
    every_listed_blob_reads_back(store)
    store.close()


#: more blobs, added apart: a forget of SRCS leaves the index objects listing them as they are
OTHERS = [BlobSource(hashlib.sha256(d).hexdigest(), len(d), (lambda d=d: io.BytesIO(d)))
          for d in (b"other %d " % i * (50 + i) for i in range(6))]


@pytest.mark.parametrize("kind,step", [("posix", "forget.index_written"), ("posix", "forget.old_index_deleted"),
                                       ("s3", "forget.index_written")])
def test_sigkill_between_the_new_index_objects_and_the_old_ones_going_loses_nothing(
        kind, step, tmp_path, objstore_pool):
    """A forget that rewrites some of many index objects, killed once the new ones are durable
    (or the old ones gone): every blob still reads back, the index objects listing none of the
    forgotten blobs are untouched, and the forget done again finishes."""
    env = dict(os.environ)
    if kind == "posix":
        root = tmp_path / "vault"
        root.mkdir()
        store: Store = PosixStore(str(root))
        url = str(root)
    else:
        server = objstore_pool.get(kind)
        env.update(server.env)
        url = Bucket(server).url(f"k{next(_prefixes)}/vault")
        store = ObjectStore(url)
    for i in range(0, len(SRCS), 6):
        BlobStore(store).add(SRCS[i:i + 6])
    before = {e.key for e in store.list("index")}
    for item in OTHERS:
        BlobStore(store).add([item])
    apart = {e.key: e.version for e in store.list("index") if e.key not in before}
    res = run_child(url, env, "forgetfew", step)
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stdout, res.stderr[-3000:])
    every_listed_blob_reads_back_or_is_other(store)
    readable(store, KEEP)
    assert {e.key: e.version for e in store.list("index") if e.key in apart} == apart
    BlobStore(store).forget([s.sha for i, s in enumerate(SRCS) if i not in KEEP], sweep=False)
    after = BlobStore(store)
    assert sorted(r.sha for r in after.refs()) == sorted([SRCS[i].sha for i in KEEP] + [o.sha for o in OTHERS])
    assert {e.key: e.version for e in store.list("index") if e.key in apart} == apart
    readable(store, KEEP)
    for o in OTHERS:
        with after.open(o.sha) as f:
            assert hashlib.sha256(f.read()).hexdigest() == o.sha
    store.close()


def every_listed_blob_reads_back_or_is_other(store: Store) -> None:
    bs = BlobStore(store)
    by_sha = {s.sha: d for s, d in zip(SRCS, DATAS)}
    for ref in bs.refs():
        assert bs.check(ref.sha) is None
        with bs.open(ref.sha) as f:
            data = f.read()
        assert data == by_sha[ref.sha] if ref.sha in by_sha else hashlib.sha256(data).hexdigest() == ref.sha


#: a kill while a sweep repacks the small packs of many adds together (restic's prune of small
#: packs, issue #27 remains): at its new pack, its index, the old index objects' and packs' deletion
MERGE_CASES = [("posix", s) for s in ("forget.pack_written", "forget.index_written", "forget.old_index_deleted",
                                      "forget.objects_deleted")]
MERGE_CASES += [(k, "forget.pack_written") for k in ("s3", "gs", "az")]


@pytest.mark.parametrize("kind,step", MERGE_CASES)
def test_sigkill_while_small_packs_are_repacked_together_loses_nothing(kind, step, tmp_path, objstore_pool):
    """Each small original added on its own (a pack each, as one offload a run leaves them), then a
    sweep killed at each step of their repack: every blob an index lists reads back, every one
    added reads back, and the sweep done again leaves one small pack and nothing else unneeded."""
    from tb_footprint_plugin.storage.blobstore import MIN_PACK

    env = dict(os.environ)
    if kind == "posix":
        root = tmp_path / "vault"
        root.mkdir()
        store: Store = PosixStore(str(root))
        url = str(root)
    else:
        server = objstore_pool.get(kind)
        env.update(server.env)
        url = Bucket(server).url(f"k{next(_prefixes)}/vault")
        store = ObjectStore(url)
    for s in SRCS:
        BlobStore(store).add([s])
    small_before = [e.key for e in store.list("data") if e.key.endswith(".pack") and e.size < MIN_PACK]
    assert len(small_before) == len(SRCS) - 2  # the two lone ones aside
    res = run_child(url, env, "merge", step)
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stdout, res.stderr[-3000:])
    every_listed_blob_reads_back(store)
    readable(store, range(len(SRCS)))
    BlobStore(store).forget([], small_packs=2)  # the batch's next end
    BlobStore(store).forget([], grace_seconds=0)  # the kill's leftovers, once their grace is over
    after = BlobStore(store)
    assert sorted(r.sha for r in after.refs()) == sorted(s.sha for s in SRCS)
    needed = sorted({c.key for r in after.refs() for c in after.candidates(r.sha)})
    assert sorted(e.key for e in store.list("data")) == needed
    assert len([e for e in store.list("data") if e.key.endswith(".pack") and e.size < MIN_PACK]) == 1
    assert after.damaged_index() == []
    readable(store, range(len(SRCS)))
    store.close()
