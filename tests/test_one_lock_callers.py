"""One lock with its lease, the callers (issue #26): the bucket engine's verbs hold the lock
objects of the one run-lock interface (``engine.lease.RunLease``), never lock paths looked up in
``bucket_lease``'s table, and a run whose lock another live process holds is an outcome coded
``Skip.LOCKED`` with the holder as a field (``RunOutcome.holder``), not only in its text."""
import ast
import os
import time

from test_shards import make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.engine import bucket_state, lease
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.context import new_op_id
from tb_footprint_plugin.storage.store_object import ObjectStore

ENGINE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tb_footprint_plugin", "engine")
CALLERS = ("bucket_batch.py", "bucket_batch_runs.py", "bucket_rewrite.py", "bucket_retire.py", "bucket_restore.py")
#: ``bucket_lease``'s path-keyed table: what ``ObjectRunLock`` itself uses, never a verb
BY_PATH = {"still_held", "release", "hold"}
DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def test_bucket_verbs_hold_lock_objects_not_paths():
    for name in CALLERS:
        with open(os.path.join(ENGINE, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    for a in n.names if n.module and n.module.endswith(("bucket_lease", ".engine"))}
        assert "bucket_lease" not in imported, f"{name} reaches bucket_lease's table of lock paths"
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("unlock_all", "unlock_versions"):
                arg = n.args[0]
                # a list of paths read back from the journal's entries ("lock" fields) is what they took before
                assert not any(isinstance(s, ast.Constant) and s.value == "lock" for s in ast.walk(arg)), \
                    f"{name}:{n.lineno} releases locks by the paths its journal names"
        assert not (BY_PATH & imported), name


def test_a_locked_bucket_run_is_skipped_locked_with_its_holder_as_a_field(s3_bucket, tmp_path):
    url = s3_bucket.upload(make_logdir(tmp_path / "logs", 2), "logs")
    ostore = ObjectStore(url)
    rfs = ostore.rfs
    st = BucketState(ostore)
    op = new_op_id()
    now = time.time()
    # another host's live lock of one run (its lease runs for a minute more)
    other = dict(lease.lease_doc("exp0/run000", now, op=op, at=now), host="other-node", pid=4242)
    st.create(rfs.path(bucket_state.lock_key("exp0/run000")), other)
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0)
    by_run = {o.run: o for o in rep.outcomes}
    locked = by_run["exp0/run000"]
    assert (locked.status, locked.code) == (Outcome.SKIPPED, Skip.LOCKED), locked
    assert locked.holder == f"other-node pid 4242 (operation {op})", locked
    assert locked.to_dict()["holder"] == locked.holder
    assert by_run["exp1/run001"].status == Outcome.VERIFIED and by_run["exp1/run001"].holder is None
    # the other host's lock is left as it was; ours is gone with the batch's journal
    assert st.read(rfs.path(bucket_state.lock_key("exp0/run000")))[0]["host"] == "other-node"
    assert st.stat(rfs.path(bucket_state.lock_key("exp1/run001"))) is None


#: where ``journal.RunLock`` may be named as a constructor: its own module, and the one place that
#: chooses it by the store's capabilities (``bucket_lease.lock_class``, which returns the class)
MAY_BUILD = {"journal.py"}
#: modules still allowed to (none: every engine module goes through ``engine.run_lock``)
NOT_YET: set = set()


def test_no_engine_module_constructs_runlock_itself():
    """The local engine builds its locks through ``engine.run_lock`` (``lock_class`` of a folder's
    capabilities), as the bucket engine through ``bucket_state.run_lock``: a ``RunLock(`` call
    anywhere else is a lock whose implementation the store did not choose."""
    found = []
    for name in sorted(os.listdir(ENGINE)):
        if not name.endswith(".py") or name in MAY_BUILD | NOT_YET:
            continue
        with open(os.path.join(ENGINE, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for n in ast.walk(tree):
            if isinstance(n, ast.Call):
                fn = n.func
                called = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                if called == "RunLock":
                    found.append(f"{name}:{n.lineno}")
    assert not found, f"RunLock constructed directly (use engine.run_lock): {found}"


def test_a_local_lock_is_the_implementation_a_folder_store_chooses(tmp_path):
    from tb_footprint_plugin.engine import bucket_lease, run_lock
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.engine.journal import RunLock
    from tb_footprint_plugin.storage.store_posix import PosixStore

    assert run_lock.folder_capabilities() == PosixStore(str(tmp_path)).capabilities
    (tmp_path / "logs" / "r").mkdir(parents=True)
    ctx = Context(str(tmp_path / "logs"))
    lk = run_lock.run_lock(ctx, "r")
    assert type(lk) is bucket_lease.lock_class(PosixStore(ctx.logdir).capabilities) is RunLock
    with lk:  # the same flock and lease file as ever
        assert lk.still_held() and os.path.exists(lk.path) and os.path.exists(lk.lease_path)
        try:
            run_lock.run_lock(ctx, "r").acquire()
            raise AssertionError("a second lock of the run was taken")
        except lease.LockRefused as e:
            assert e.code == Skip.LOCKED
    assert not lk.still_held()
