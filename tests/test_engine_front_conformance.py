"""Both engines behind ``engine.front`` answer the API in one shape (issue #26, H2).

``open_engine`` chooses a ``LocalEngine`` for a path and a ``BucketEngine`` for a bucket URL; the
API's verbs call the ``Engine`` it returns and never ask which. The same demo logdir, reduced
(profiles dropped) on a disk and on moto S3, is asked every read-only question of the interface,
and both answers carry the keys and types the front ends read; then both are restored byte for
byte through the same calls.
"""
import hashlib
import os

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.engine.front import BucketEngine, Engine, LocalEngine, open_engine
from tb_footprint_plugin.engine.purge import PurgeReport
from tb_footprint_plugin.engine.recovery import RecoveryOutcome

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}

#: what the CLI and the tab read of ``status`` on either store
STATUS_KEYS = {"vault_bytes", "operations", "unfinished_operations", "unfinished", "problems", "settle_command",
               "late_writes", "kept_blobs", "batch", "disk_in_use_bytes", "freed_after_purge_bytes"}
OPERATION_KEYS = {"op_id", "kind", "run", "outcome", "restored_by", "backup_purged", "started_at"}
RETIRED_KEYS = {"op_id", "run", "takes_along", "bytes", "files", "retired_at", "user", "tree_sha256", "rule"}


def _hashes_on_disk(root) -> dict:
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".tb-footprint"]
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _hashes_in_bucket(bucket, prefix) -> dict:
    from tb_footprint_plugin.storage.remote import RemoteFS

    rfs = RemoteFS(bucket.url(prefix))
    return {k: hashlib.sha256(rfs.read_bytes(k)).hexdigest() for k in rfs.list_tree()
            if not k.startswith(".tb-footprint/")}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "logs"
    generate_demo(str(root), scale=0.05)
    return root


def _same_shapes(eng: Engine) -> None:
    st = eng.status()
    assert STATUS_KEYS <= set(st), STATUS_KEYS - set(st)
    ops = eng.operations()
    assert ops and all(OPERATION_KEYS <= set(m) for m in ops), [OPERATION_KEYS - set(m) for m in ops]
    assert all(not k.startswith("_") for m in ops for k in m)
    assert eng.operation(ops[0]["op_id"])["op_id"] == ops[0]["op_id"]
    assert {m["op_id"] for m in eng.operations(ops[0]["run"])} <= {m["op_id"] for m in ops}
    dn = eng.disk_numbers()
    assert {"disk_in_use_bytes", "freed_now_bytes", "freed_after_purge_bytes"} <= set(dn)
    assert isinstance(dn["disk_in_use_bytes"], int) and dn["disk_in_use_bytes"] > 0
    hist = eng.history()
    assert any(e.get("kind") == "reduce" and e.get("op_id") in {m["op_id"] for m in ops} for e in hist), hist
    kept = eng.restorable()
    assert kept and all("op_id" in k and "run" in k for k in kept)
    assert eng.retired() == [] or all(RETIRED_KEYS <= set(r) for r in eng.retired())
    assert all(isinstance(r, str) for r in eng.backup_runs())
    listed = eng.purge(older_than=None, yes=False, op=None, runs=None, op_ids=None)
    assert isinstance(listed, PurgeReport) and listed.dry_run and listed.ops
    assert all(isinstance(o, RecoveryOutcome) for o in eng.recover())
    assert eng.in_flight() == [] and eng.interrupted_state() == []


def test_a_local_and_a_bucket_logdir_answer_in_one_shape(demo, tmp_path, s3_bucket):
    local = tmp_path / "logs"
    import shutil

    shutil.copytree(demo, local)
    url = s3_bucket.upload(demo, "logs")
    before_local, before_bucket = _hashes_on_disk(local), _hashes_in_bucket(s3_bucket, "logs")
    engines = {}
    for where in (str(local), url):
        rep = api.reduce_logdir(where, policy=DROP_PROFILES, dry_run=False, quiet_period=0,
                                verify_backends=("python",))
        assert rep.ok and any(o.op_id for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
        engines[where] = open_engine(where)
    assert isinstance(engines[str(local)], LocalEngine) and isinstance(engines[url], BucketEngine)
    for eng in engines.values():
        _same_shapes(eng)
    for where, eng in engines.items():
        outs = eng.restore(None, None)
        assert outs and all(isinstance(o, RunOutcome) and o.status == "restored" for o in outs), \
            [o.to_dict() for o in outs]
    assert _hashes_on_disk(local) == before_local
    assert _hashes_in_bucket(s3_bucket, "logs") == before_bucket
