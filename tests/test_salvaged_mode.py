"""A salvage file of late records gets the original's mode, permission bits only (review R24's note:
it was made 0600 where the original was 0644, so a TensorBoard running as another user of the group
could not read those records; invariant 3: a restore gives back mode).

Both ways records are salvaged: a restore over a reduced file a writer appended to by path (the late
records go beside the original as ``<file>.salvaged-001``), and the start's salvage of records a
writer appended to the backup's inode. A set-user-id bit on the original is never given to it.
(A restore's salvage takes the mode of the file its records were appended to until its caller
passes the original's recorded one: ``keep_late_records(mode=)``.)
Real files, TensorBoard's record writer."""
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.scan.tfrecord import frame
from tb_footprint_plugin.synth import EventWriter, make_png

PY = ("python",)
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
PATH_WRITER = r"""
import sys, time
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
path, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "ab") as f:
    w = RecordWriter(f)
    for step in range(first, first + n):
        ev = event_pb2.Event(wall_time=time.time(), step=step)
        ev.summary.value.add(tag="late", simple_value=float(step))
        w.write(ev.SerializeToString())
"""

pytestmark = pytest.mark.usefixtures("disarm_faults")


def image_run(run_dir, mode):
    """A run whose event file archive rewrites (images thinned, scalars kept), two hours old."""
    with EventWriter(str(run_dir)) as w:
        for s in range(30):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("img", s, make_png(32, 32, seed=s), 32, 32)
        path = Path(w.path)
    os.chmod(path, mode)
    old = time.time() - 7200
    os.utime(path, (old, old))
    return path


def _scalar_event(step):
    from tensorboard.compat.proto import event_pb2

    ev = event_pb2.Event(wall_time=time.time(), step=step)
    ev.summary.value.add(tag="late", simple_value=float(step))
    return ev.SerializeToString()


@pytest.mark.parametrize("mode,want", [(0o644, 0o644), (0o640, 0o640)])
def test_a_restores_salvaged_records_have_the_originals_mode(tmp_path, mode, want):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run, mode)
    original = path.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    subprocess.run([sys.executable, "-c", PATH_WRITER, str(path), "1000", "3"], env=ENV, check=True, timeout=120)

    (o,) = api.restore(str(logdir))
    assert o.status == "restored" and o.code == Finding.LATE_RECORDS_RESTORED, o.to_dict()
    salvaged = run / (path.name + ".salvaged-001")
    assert path.read_bytes() == original and stat.S_IMODE(path.stat().st_mode) == mode
    assert oct(stat.S_IMODE(salvaged.stat().st_mode)) == oct(want)
    assert salvaged.stat().st_size > 0


@pytest.mark.parametrize("mode,want", [(0o644, 0o644), (0o4755, 0o755)])
def test_the_starts_salvage_of_records_appended_to_a_backup_has_the_originals_mode(tmp_path, monkeypatch, mode, want):
    from tb_footprint_plugin.engine import vault as vault_mod

    monkeypatch.setattr(vault_mod, "PACK_BELOW", 0)  # the backup stays a file of its own: its writer's inode
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run, mode)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    (f,) = [f for f in m["files"] if f["path"] == "run/" + path.name]
    late = b"".join(frame(_scalar_event(100 + i)) for i in range(3))
    with open(Path(m["vault"]) / f["blob"], "ab") as w:  # the job's next records, through its old descriptor
        w.write(late)

    rec = api.recover_logdir(str(logdir))  # what every start runs
    assert [r.code for r in rec] == [Finding.LATE_WRITES_SALVAGED], rec
    salvaged = run / (path.name + ".salvaged-001")
    assert salvaged.read_bytes() == late
    assert oct(stat.S_IMODE(salvaged.stat().st_mode)) == oct(want)  # never set-user-id
