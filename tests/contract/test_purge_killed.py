"""A real SIGKILL of ``tb-footprint purge --yes`` at its intent and inside its deletes, on a folder
and on an object store (the crash matrix, ``test_crash_matrix``, injects a failure at every purge
step on every store in-process; a kill of the CLI was there only for reduce and restore).

What a purge killed past its intent left is finished by the one finish (``purge_run.finish_killed``)
at the next start, on every store (issue #26: a bucket's start finishes it from the purge's journal,
``bucket_purge_journal``, as a disk's from its intents): ``recover`` says ``purge_finished``, a
second start finds nothing to finish, and the next purge purges the rest, no row of it a finished
one. Either way nothing that exists nowhere else is lost: every operation whose purge did not
reach its intent still restores byte for byte, and the user's files are never touched
(``settled``)."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import REPO
from contract_stores import buckets  # noqa: F401 - the bucket fixture
from test_crash_matrix import _disarm, place_of, settled, setup, template  # noqa: F401 - fixtures
from tb_footprint_plugin import api

#: (store, failpoint): right after the intent, and after the first delete (a CLI start costs 5-8 s on an
#: object store: both on S3, one on the GCS emulator and one on Azurite)
KILLED = [("posix", "purge.intent"), ("posix", "purge.blob"), ("s3", "purge.intent"), ("s3", "purge.blob"),
          ("gs", "purge.intent"), ("az", "purge.blob")]


def _ops(p):
    return {m["op_id"]: m for m in api.operations(p.url, backup_dir=p.backup) if m["kind"] in ("reduce", "retire")}


@pytest.mark.parametrize("store,step", KILLED)
def test_sigkill_of_a_purge_is_finished_and_loses_nothing(store, step, place_of):
    p = place_of(store, "purge")
    original = p.user()
    start = setup(p, "purge")
    before = _ops(p)
    assert len(before) == 2 and not any(m["backup_purged"] for m in before.values())
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = ["purge", p.url, "--yes"] + (["--backup-dir", p.backup] if p.backup else [])
    r = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli"] + cmd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    outs = api.recover_logdir(p.url, p.backup)  # the next start, in another process than the purge
    # a disk purges its reductions first (every operation's intent before any blob), a bucket one
    # operation at a time (marked, then its copies): either way one operation was past its intent
    assert [(o.action, o.code) for o in outs] == [("completed", "purge_finished")], \
        [(o.action, o.code, o.detail) for o in outs]
    purged = {op for op, m in _ops(p).items() if m["backup_purged"]}
    assert [o.op_id for o in outs] == sorted(purged), (outs, purged)
    # a disk's reductions' purge comes before its retired runs'; a bucket's one purge takes them in
    # its manifests' order
    assert len(purged) == 1 and (store != "posix" or before[min(purged)]["kind"] == "reduce"), _ops(p)
    if store != "posix":
        left = [k for k in p.bucket.hashes(p.prefix) if any(f"/blobs/{op}/" in k for op in purged)]
        assert left == [], left  # the finished operation's copies went at the start
        assert api.status(p.url, backup_dir=p.backup)["unfinished_operations"] == []
    again = api.recover_logdir(p.url, p.backup)
    assert [(o.op_id, o.code) for o in again] == [], [(o.op_id, o.code, o.detail) for o in again]
    rep = api.purge(p.url, yes=True, backup_dir=p.backup)  # nothing left to finish: the rest, as usual
    assert sorted((o["op_id"], bool(o.get("finished"))) for o in rep.ops) == \
        sorted((op, False) for op in before if op not in purged), rep.to_dict()
    assert all(m["backup_purged"] for m in _ops(p).values())
    if store != "posix":
        left = [k for k in p.bucket.hashes(p.prefix) if "/blobs/" in k or "/retired/" in k]
        assert left == [], left
    assert p.user() == start
    settled(p, "purge", original, start, start)
