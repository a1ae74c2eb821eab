"""The stores every contract suite runs on: the local disk and the three object-store servers
(fixtures: a module imports them by name)."""
import errno
import itertools
import shutil
import uuid
from pathlib import Path

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.storage.store import Store
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore

KINDS = ("posix", "s3", "gs", "az")

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def buckets(objstore_pool):
    """One bucket per server for the module (each test gets a prefix of its own: a fresh store),
    dropped after it (``Bucket.drop``: an Azure container, whose blobs would slow every later
    request to Azurite)."""
    made = {}

    def get(scheme: str) -> Bucket:
        if scheme not in made:
            made[scheme] = Bucket(objstore_pool.get(scheme))
        return made[scheme]

    yield get
    for b in made.values():
        b.drop()


@pytest.fixture(params=KINDS)
def store(request, tmp_path) -> Store:
    """A fresh, empty store of each kind."""
    if request.param == "posix":
        root = tmp_path / "store-root"
        root.mkdir()
        s = PosixStore(str(root))
    else:
        s = ObjectStore(request.getfixturevalue("buckets")(request.param).url(f"c{next(_prefixes)}/root"))
    yield s
    s.close()


@pytest.fixture
def logdir_on(tmp_path, buckets):
    """``logdir_on(store, src)``: a copy of the logdir folder ``src`` on ``store`` (a folder, or a
    fresh prefix of a bucket), its URL."""
    def place(kind: str, src: Path) -> str:
        n = next(_prefixes)
        if kind == "posix":
            url = str(tmp_path / f"logs{n}")
            shutil.copytree(src, url)
            return url
        return buckets(kind).upload(src, f"l{n}-{uuid.uuid4().hex[:6]}")
    return place


@pytest.fixture
def scalar_runs_on(tmp_path, logdir_on):
    """``scalar_runs_on(store, runs=("a", "a/inner", "b"), steps=3)``: a logdir on ``store`` whose
    runs each hold ``steps`` scalar points (loss 1, 1/2, ...), its URL."""
    from tb_footprint_plugin import synth

    def make(kind: str, runs=("a", "a/inner", "b"), steps: int = 3) -> str:
        root = tmp_path / f"src{next(_prefixes)}"
        for run in runs:
            with synth.EventWriter(str(root / run)) as w:
                for s in range(steps):
                    w.scalar("loss", s, 1.0 / (s + 1))
        return logdir_on(kind, root)
    return make


def reduced_and_retired_source(root: Path) -> Path:
    """A logdir folder: ``exp``, scalars and a profile session the drop policy removes; ``old``,
    scalars (to be retired)."""
    from tb_footprint_plugin import synth

    with synth.EventWriter(str(root / "exp")) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    session = root / "exp" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(b"x" * 3000)
    with synth.EventWriter(str(root / "old")) as w:
        w.scalar("loss", 0, 1.0)
    return root


@pytest.fixture
def reduced_and_retired(tmp_path, logdir_on):
    """``reduced_and_retired(store)``: a logdir on ``store`` with one reduction (run ``exp``, the
    profile dropped) and one retirement (run ``old``), its URL."""
    from tb_footprint_plugin import api

    def make(kind: str) -> str:
        url = logdir_on(kind, reduced_and_retired_source(tmp_path / f"src{next(_prefixes)}"))
        drop = {"name": "drop-profiles", "rules": {c: "delete" for c in ("profile_xplane", "profile_other")}}
        rep = api.reduce_logdir(url, policy=drop, dry_run=False, quiet_period=0, verify_backends=("python",))
        assert [o.status for o in rep.outcomes if o.run == "exp"] == ["verified"], rep.to_dict()
        rep = api.retire(url, api.retire_rule(runs=["old"]), dry_run=False, quiet_period=0)
        assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
        return url
    return make


def hold_by_another_host(store: str, url: str, run: str) -> None:
    """A live lease of ``run`` held by a process on another host, planted in the lock ``store``'s
    engine reads (as test_trust_matrix plants it): a verb on that run meets a holder still running."""
    import json
    import os
    import time

    from tb_footprint_plugin.engine.bucket_state import lock_key
    from tb_footprint_plugin.engine.journal import RunLock
    from tb_footprint_plugin.storage.stores import open_store

    now = time.time()
    if store == "posix":
        key = ".tb-footprint/locks/" + os.path.basename(RunLock("locks", run).lease_path)
        doc = {"expires": now + 3600, "host": "another-host", "pid": 4242, "pid_start": 1, "renewed": now,
               "run": run, "shard": None, "started": now, "token": "f" * 32}
    else:
        key = lock_key(run)
        doc = {"at": now, "expires": now + 3600, "host": "another-host", "op": "20260101T000003-abcdef",
               "pid": 4242, "pid_start": 1, "renewed": now, "run": run, "shard": None}
    open_store(url).put(key, json.dumps(doc, sort_keys=True).encode())


def fail_io() -> None:
    """A failpoint's action: the step fails as a full or broken store would."""
    raise OSError(errno.EIO, "the test's failure")


def user_objects(st) -> dict:
    """Every key of the logdir ``st`` outside the state folder -> its bytes."""
    return {e.key: st.read_all(e.key) for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint")}


def copies_in_vault(st, data: bytes) -> list:
    """The keys of the state folder (the vault) holding exactly ``data``."""
    return [e.key for e in st.list(every_key=True)
            if e.key.startswith(".tb-footprint") and e.size == len(data) and st.read_all(e.key) == data]
