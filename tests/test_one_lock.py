"""One lock with its lease (issue #26): the run lock's staleness rule is written once
(``engine.lease.holder_gone``) and judged alike by a folder's ``journal.RunLock`` and a bucket's
lock (``engine.bucket_lease``); both are an ``engine.lease.RunLease`` whose refusal is a coded
``LockRefused`` (``Skip.LOCKED``) naming the holder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tb_footprint_plugin.codes import Skip
from tb_footprint_plugin.engine import bucket_lease, lease
from tb_footprint_plugin.engine.journal import RunLock, RunLocked


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _cases(now: float):
    """(name, lease, journal progress, expected gone) for a holder other than this process."""
    live_pid = os.getppid()
    n = lease.lease_seconds()
    return [
        ("same host, holder runs", {"host": lease.HOST, "pid": live_pid, "expires": now - 5}, None, False),
        ("same host, holder gone", {"host": lease.HOST, "pid": _dead_pid(), "expires": now + n}, now, True),
        ("same host, pid reused", {"host": lease.HOST, "pid": live_pid, "pid_start": -7, "expires": now + n}, None, True),
        ("other host, lease runs", {"host": "elsewhere", "pid": 1, "expires": now + 5}, None, False),
        ("other host, expired, journal written lately", {"host": "elsewhere", "pid": 1, "expires": now - 5}, now - 1, False),
        ("other host, expired, journal idle", {"host": "elsewhere", "pid": 1, "expires": now - 5}, now - 2 * n, True),
        ("other host, expired, no journal", {"host": "elsewhere", "pid": 1, "expires": now - 5}, None, True),
    ]


def test_one_staleness_rule_for_both_engines(tmp_path):
    """Every case is judged the same by the rule, by a folder's lease (``live_holder``, progress
    from its journal files) and by a bucket lock (``bucket_lease.holder_gone``, progress from its
    journal object); the progress is asked only of an expired lease of another host."""
    now = time.time()
    for name, held, progress, gone in _cases(now):
        asked = []

        def prog(p=progress):
            asked.append(1)
            return p

        assert lease.holder_gone(held, prog, now=now) is gone, name
        assert bool(asked) == (held["host"] != lease.HOST and now >= held["expires"]), name
        lock = dict(held, op="20260101T000000Z-abcdef12", run="r")
        assert bucket_lease.holder_gone(lock, lambda op, p=progress: p, now=now) is gone, name
        journals = tmp_path / name.replace(" ", "_").replace(",", "")
        journals.mkdir()
        if progress is not None:  # the run's journal file, last written at ``progress``
            (journals / "op.jsonl").write_text(json.dumps({"type": "begin", "run": "r"}) + "\n")
            os.utime(journals / "op.jsonl", (progress, progress))
        assert lease.live_holder(dict(held, token="t", renewed=now), str(journals), "r", now=now) is (not gone), name


def test_this_process_is_live_only_while_it_runs_the_operation():
    now = time.time()
    mine = {"host": lease.HOST, "pid": os.getpid(), "expires": now - 100}
    assert lease.holder_gone(mine, lambda: None, ours_live=True, now=now) is False
    assert lease.holder_gone(mine, lambda: None, now=now) is True
    op = "20260101T000000Z-abcdef12"
    assert bucket_lease.holder_gone(dict(mine, op=op), lambda o: None, {op}, now=now) is False
    assert bucket_lease.holder_gone(dict(mine, op=op), lambda o: None, set(), now=now) is True
    # an op of a type a set cannot hold is untrusted input, never an error
    assert bucket_lease.holder_gone(dict(mine, op=["x"]), lambda o: None, {op}, now=now) is True


def test_the_bucket_lease_has_no_staleness_rule_of_its_own():
    """``bucket_lease`` judges a holder only through ``lease.holder_gone``: no expiry compared,
    no process looked up there."""
    import inspect

    src = inspect.getsource(bucket_lease)
    assert "lease.holder_gone(" in src
    for own in ('< lock["expires"]', "holder_alive(", "os.getpid()", "lease_seconds() <", "<= now"):
        assert own not in src, own


def test_a_folder_run_lock_is_a_run_lease_refused_with_a_code_naming_the_holder(tmp_path):
    locks = tmp_path / ".tb-footprint" / "locks"
    locks.mkdir(parents=True)
    first = RunLock(str(locks), "run1")
    assert isinstance(first, lease.RunLease)
    with first:
        assert first.still_held()
        with pytest.raises(lease.LockRefused) as e:
            RunLock(str(locks), "run1").acquire()
        assert isinstance(e.value, RunLocked) and e.value.code == Skip.LOCKED
    assert not first.still_held()
    # a live lease of another process on this host (its flock on another client, as on NFS)
    other = RunLock(str(locks), "run2")
    now = time.time()
    with open(other.lease_path, "w") as f:
        json.dump({"run": "run2", "host": lease.HOST, "pid": os.getppid(), "token": "x", "renewed": now,
                   "expires": now + 60}, f)
    with pytest.raises(lease.LockRefused) as e:
        other.acquire()
    assert e.value.code == Skip.LOCKED and f"pid {os.getppid()}" in e.value.holder


class _Objects:
    """In-memory state objects with versions (one call a request), as ``BucketState`` answers."""

    def __init__(self):
        self.objs, self.calls, self.n = {}, [], 0

    def _put(self, path, doc):
        self.n += 1
        self.objs[path] = (json.dumps(doc, sort_keys=True), f"v{self.n}")
        return f"v{self.n}"

    def create(self, path, doc):
        from tb_footprint_plugin.codes import StoreError
        from tb_footprint_plugin.storage.store import StoreFailure

        self.calls.append("create")
        if path in self.objs:
            raise StoreFailure(StoreError.ALREADY_EXISTS, path, "exists")
        return self._put(path, doc)

    def update(self, path, doc, version):
        from tb_footprint_plugin.codes import StoreError
        from tb_footprint_plugin.storage.store import StoreFailure

        self.calls.append("update")
        if path not in self.objs or self.objs[path][1] != version:
            raise StoreFailure(StoreError.PRECONDITION_FAILED, path, "version")
        return self._put(path, doc)

    def read(self, path, info=None):
        self.calls.append("read")
        if path not in self.objs:
            return None, None
        return json.loads(self.objs[path][0]), self.objs[path][1]

    def delete(self, paths, versions=None):
        self.calls.append("delete")
        for p in paths:
            if versions and p in versions and self.objs.get(p, (None, None))[1] != versions[p]:
                return {p: "version"}
            self.objs.pop(p, None)
        return {}


def test_the_run_lock_is_chosen_by_the_stores_capabilities(tmp_path):
    from tb_footprint_plugin.storage.store_object import BUCKET_CAPABILITIES
    from tb_footprint_plugin.storage.store_posix import PosixStore

    assert bucket_lease.lock_class(PosixStore(str(tmp_path)).capabilities) is RunLock
    assert bucket_lease.lock_class(BUCKET_CAPABILITIES) is bucket_lease.ObjectRunLock
    assert issubclass(bucket_lease.ObjectRunLock, lease.RunLease)


def test_a_bucket_run_lock_is_taken_refused_naming_its_holder_and_taken_over_once_stale():
    objs, journals = _Objects(), {}
    ops = {"op-a", "op-b"}
    place = bucket_lease.LockPlace(objs, lambda r: f"b/logs/.tb-footprint/locks/{r}.json", journals.get, ops)
    first = bucket_lease.ObjectRunLock(place, "run1", "op-a").acquire()
    try:
        assert objs.calls == ["create"] and first.still_held()  # one create-only put
        with pytest.raises(lease.LockRefused) as e:
            bucket_lease.ObjectRunLock(place, "run1", "op-b").acquire()
        assert e.value.code == Skip.LOCKED and f"pid {os.getpid()} (operation op-a)" in e.value.holder
        version = first.release()
        assert version == objs.objs[first.path][1] and not first.still_held()
    finally:
        bucket_lease.release(first.path)
    # its holder is gone (this process no longer runs op-a) and no journal of op-a is left: taken over
    ops.discard("op-a")
    objs.calls.clear()
    second = bucket_lease.ObjectRunLock(place, "run1", "op-b").acquire()
    try:
        assert objs.calls == ["create", "read", "delete", "create"]
        assert json.loads(objs.objs[second.path][0])["op"] == "op-b"
    finally:
        bucket_lease.release(second.path)
    # a gone holder whose journal is still there is not taken over (recovery settles it first)
    ops.discard("op-b")
    journals["op-b"] = type("Info", (), {"mtime": time.time()})()
    with pytest.raises(lease.LockRefused):
        bucket_lease.ObjectRunLock(place, "run1", "op-c").acquire()


def test_the_bucket_engine_takes_its_run_locks_through_the_interface():
    """``bucket_state.lock_run`` is ``run_lock(...).acquire()``: it neither writes a lock object
    nor judges a holder itself (the create, the takeover and the rule live in ``ObjectRunLock``
    and ``lease.holder_gone``)."""
    import inspect

    from tb_footprint_plugin.engine import bucket_state

    src = inspect.getsource(bucket_state.lock_run)
    assert "run_lock(" in src and ".acquire()" in src
    for own in ("st.create(", "st.delete(", "owner_gone(", "new_lock_doc("):
        assert own not in src, own


def test_the_lease_document_is_written_in_one_place(tmp_path):
    """Both run locks write ``lease.lease_doc`` (their own fields beside it), push it forward with
    ``lease.renewed`` and read it back with ``lease.well_formed``: the bucket module builds no
    expiry itself."""
    import inspect

    now = time.time()
    core = set(lease.lease_doc("r", now))
    assert core == {"run", "host", "pid", "pid_start", "shard", "renewed", "expires"}
    doc = bucket_lease.new_lock_doc("r", "op1")
    assert set(doc) == core | {"op", "at"} and doc["expires"] - doc["renewed"] == lease.lease_seconds()
    locks = tmp_path / ".tb-footprint" / "locks"
    locks.mkdir(parents=True)
    with RunLock(str(locks), "r") as lk:
        assert set(lease.read_lease(lk.lease_path)) == core | {"started", "token"}
    src = inspect.getsource(bucket_lease)
    for own in ('"expires":', "expires=", '"renewed":', "renewed=", 'isinstance(lock.get("'):
        assert own not in src, own
    assert lease.renewed(doc, now + 10)["expires"] == now + 10 + lease.lease_seconds()
    assert not bucket_lease.well_formed(dict(doc, corrupt=True)) and not lease.well_formed(dict(doc, expires=True))
