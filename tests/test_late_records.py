"""Issue 25.3: records a writer appends by path to a reduced event file (a job resumed into the
same run) are never hidden by a restore. The original comes back byte for byte, the late records
stay in the run beside it (``<file>.salvaged-NNN``, read by TensorBoard), the restore says so with
a code, and ``status``/``history`` (and the CLI's status) list the blob kept in the vault with
what it holds and how to bring it back.

The writer is a real process writing with TensorBoard's own record writer, opening the event
file by path in append mode.
"""
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from tb_footprint_plugin import api
from tb_footprint_plugin.cli import main as cli_main
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.scan.tfrecord import RecordReader
from tb_footprint_plugin.synth import EventWriter, make_png

PY = ("python",)
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
PATH_WRITER = r"""
import sys, time
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
path, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "ab") as f:  # a job resumed into the run: its writer appends by path
    w = RecordWriter(f)
    for step in range(first, first + n):
        ev = event_pb2.Event(wall_time=time.time(), step=step)
        ev.summary.value.add(tag="late", simple_value=float(step))
        w.write(ev.SerializeToString())
"""


pytestmark = pytest.mark.usefixtures("disarm_faults")


def append_by_path(path, first, n=3):
    subprocess.run([sys.executable, "-c", PATH_WRITER, str(path), str(first), str(n)], env=ENV, check=True,
                   timeout=120)


def image_run(run_dir):
    """A run whose event file archive rewrites in place (images thinned, scalars kept)."""
    with EventWriter(str(run_dir)) as w:
        for s in range(30):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("img", s, make_png(32, 32, seed=s), 32, 32)
        path = Path(w.path)
    old = time.time() - 7200
    os.utime(path, (old, old))
    return path


def scalar_steps(run_dir):
    """What TensorBoard's Python loader shows: tag -> steps (scalars and tensors)."""
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    mux = pem.EventMultiplexer()
    mux.AddRun(str(run_dir), "r")
    mux.Reload()
    acc = mux.GetAccumulator("r")
    out = {}
    for tag in acc.Tags().get("scalars", []):
        out[tag] = [e.step for e in acc.Scalars(tag)]
    for tag in acc.Tags().get("tensors", []):
        out[tag] = [e.step for e in acc.Tensors(tag)]
    return out


def test_restore_keeps_records_appended_to_the_reduced_file(tmp_path, capsys):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run)
    original = path.read_bytes()
    mtime_ns = path.stat().st_mtime_ns
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    reduced = path.read_bytes()
    assert reduced != original

    append_by_path(path, 1000)  # the resumed job's records land in the reduced file
    assert api.recover_logdir(str(logdir)) == []
    assert scalar_steps(run)["late"] == [1000, 1001, 1002]  # TensorBoard shows them

    (o,) = api.restore(str(logdir))
    assert o.status == "restored", o.to_dict()
    assert o.code == Finding.LATE_RECORDS_RESTORED
    salvaged = run / (path.name + ".salvaged-001")
    assert salvaged.name in o.reason and "3 record(s)" in o.reason
    # the original byte for byte (and its mtime), the late records beside it, nothing else
    assert path.read_bytes() == original and path.stat().st_mtime_ns == mtime_ns
    assert sorted(os.listdir(run)) == [path.name, salvaged.name]
    grown = reduced + salvaged.read_bytes()
    assert len(list(RecordReader(str(salvaged)))) == 3
    steps = scalar_steps(run)
    assert steps["late"] == [1000, 1001, 1002] and steps["loss"] == list(range(30))

    # status names the kept blob: what it holds, where its records went, how to bring it back
    st = api.status(str(logdir))
    (kb,) = st["kept_blobs"]
    assert kb["code"] == Finding.LATE_RECORDS_RESTORED and kb["path"] == f"run/{path.name}"
    assert kb["late_records"] == 3 and kb["late_records_file"] == f"run/{salvaged.name}" and kb["present"]
    assert kb["sha256"] == hashlib.sha256(grown).hexdigest() and salvaged.name in kb["holds"]
    assert Path(kb["blob"]).read_bytes() == grown
    subprocess.run(kb["bring_back"], shell=True, check=True)
    (copy,) = [p for p in run.iterdir() if p.name.startswith("kept-")]
    assert copy.read_bytes() == grown
    assert "tfevents" not in copy.name  # TensorBoard would show its records twice
    copy.unlink()
    # history: the restore entry says so too
    (h,) = [e for e in api.history(str(logdir)) if e["kind"] == "restore"]
    assert [k["sha256"] for k in h["kept_blobs"]] == [kb["sha256"]] and h["code"] == Finding.LATE_RECORDS_RESTORED
    # the CLI's status line
    assert cli_main(["status", str(logdir)]) == 0
    out = capsys.readouterr().out
    assert f"kept in the vault [{Finding.LATE_RECORDS_RESTORED}]" in out and kb["bring_back"] in out
    # a purge never takes it
    api.purge(str(logdir), yes=True)
    assert Path(kb["blob"]).read_bytes() == grown


def test_restore_killed_after_the_late_records_went_back_is_finished_once(tmp_path):
    """A restore killed right after putting the original back (late records already beside it)
    is finished by the next start: one salvage file, the kept blob still listed."""
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run)
    original = path.read_bytes()
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    append_by_path(path, 1000)
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS="restore.file=kill")
    p = subprocess.run([sys.executable, "-c", "import sys; from tb_footprint_plugin import api; "
                        "api.restore(sys.argv[1])", str(logdir)], env=env, timeout=300)
    assert p.returncode == -9
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]
    assert path.read_bytes() == original
    assert sorted(os.listdir(run)) == [path.name, path.name + ".salvaged-001"]
    assert scalar_steps(run)["late"] == [1000, 1001, 1002]
    (kb,) = api.status(str(logdir))["kept_blobs"]
    assert kb["late_records_file"] == f"run/{path.name}.salvaged-001"


def test_a_file_written_again_where_the_reduce_removed_it_is_listed(tmp_path, capsys):
    """A trace the reduce gzipped, written again under its old name: restore keeps it in the vault
    (it is not an event file, so nothing goes back into the run) and says how to bring it back."""
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    image_run(run)
    trace = run / "worker0.1.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "op"}] * 300}))
    original = trace.read_bytes()
    old = time.time() - 7200
    os.utime(trace, (old, old))
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=PY)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert not trace.exists()
    newer = b'{"traceEvents": [], "written": "again"}'
    trace.write_bytes(newer)
    (o,) = api.restore(str(logdir))
    assert o.status == "restored" and o.code == Finding.DISPLACED_KEPT, o.to_dict()
    assert trace.read_bytes() == original
    (kb,) = api.status(str(logdir))["kept_blobs"]
    assert kb["code"] == Finding.DISPLACED_KEPT and kb["late_records"] == 0 and kb["late_records_file"] is None
    assert Path(kb["blob"]).read_bytes() == newer
    subprocess.run(kb["bring_back"], shell=True, check=True)
    assert (run / (trace.name + ".kept")).read_bytes() == newer
