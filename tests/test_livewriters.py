"""Issue 10: a training job that is still writing never loses a record; damaged state is
reported, never silently dropped.

Each test reruns one case of the torture run that found the problem and checks that nothing
is lost and that the tool says what happened (with a code).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.cli import main as cli_main
from tb_footprint_plugin.codes import Failure, Finding, Recovery, Skip
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.scan.tfrecord import RecordReader, frame
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.synth import EventWriter, make_png

PY = ("python",)
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


pytestmark = pytest.mark.usefixtures("disarm_faults")



@pytest.fixture
def one_file_a_backup(monkeypatch):
    """No packs (issue #27 item 2): these tests write into, damage or look for a backup's own
    file in ``blobs/`` (an incompressible one stays plain); packed backups' late writers, damage
    and orphans are tested in test_vault_packs.py."""
    from tb_footprint_plugin.engine import vault as vault_mod

    monkeypatch.setattr(vault_mod, "PACK_BELOW", 0)


def _age(root, seconds=7200):
    old = time.time() - seconds
    for dirpath, _dirs, files in os.walk(root):
        if ".tb-footprint" in dirpath:
            continue
        for n in files:
            p = os.path.join(dirpath, n)
            if os.path.isfile(p) and not os.path.islink(p):
                os.utime(p, (old, old))


def image_run(run_dir, steps=30):
    """A run whose event file archive rewrites (images thinned, scalars kept)."""
    with EventWriter(str(run_dir)) as w:
        for s in range(steps):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("img", s, make_png(32, 32, seed=s), 32, 32)
        path = w.path
    return Path(path)


def scalar_event(tag, step, value, wall=None):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    ev = event_pb2.Event(wall_time=wall or time.time(), step=step)
    ev.summary.value.add(tag=tag, simple_value=value)
    return ev.SerializeToString()


def python_scalars(run_dir):
    """What TensorBoard's Python reader shows for the run's scalars: tag -> [steps]."""
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    mux = pem.EventMultiplexer()
    mux.AddRun(str(run_dir), "r")
    mux.Reload()
    out = {}
    for tag in mux.Runs()["r"].get("tensors", []):
        out[tag] = [e.step for e in mux.Tensors("r", tag)]
    return out


# ---------------------------------------------------------------------------------------
# 1. a live writer on this machine: the run is left alone and the plan names the process
# ---------------------------------------------------------------------------------------
_WRITER = r"""
import os, sys, time
from tensorboard.compat.proto import event_pb2
from tb_footprint_plugin.scan.tfrecord import RecordWriter
# a training job's event writer: the file stays open for the whole job (TF's and PyTorch's do)
path = os.path.join(sys.argv[1], "events.out.tfevents.%d.trainer.%d.0.v2" % (time.time(), os.getpid()))
f = open(path, "ab")
w = RecordWriter(f)
def record(step):
    ev = event_pb2.Event(wall_time=time.time(), step=step)
    ev.summary.value.add(tag="live", simple_value=float(step))
    w.write(ev.SerializeToString())
    f.flush()
w.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
record(0)
print("ready", flush=True)
for line in sys.stdin:
    record(int(line))
    print("ok", flush=True)
"""


def _start_writer(run_dir):
    p = subprocess.Popen([sys.executable, "-c", _WRITER, str(run_dir)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=ENV)
    assert p.stdout.readline().strip() == "ready"
    return p


def _stop(p):
    p.stdin.close()
    p.kill()
    p.wait()


def test_writer_holding_its_event_file_leaves_the_run_alone(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    image_run(run)
    (run / "worker0.1.pt.trace.json").write_text(json.dumps({"traceEvents": [{"ph": "X"}] * 500}))
    _age(logdir)
    writer = _start_writer(run)  # a TensorBoard Writer keeps its own event file open
    try:
        before = user_files(logdir)
        p = api.plan(str(logdir), "archive", quiet_period=0)
        rp = p.run("run")
        assert rp.skipped and rp.code == Skip.OPEN_FOR_WRITING
        assert f"pid {writer.pid}" in rp.skipped and "python" in rp.skipped
        assert [w["pid"] for w in rp.writers] == [writer.pid]
        rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
        o = next(o for o in rep.outcomes if o.run == "run")
        assert o.status == "skipped" and o.code == Skip.OPEN_FOR_WRITING and f"pid {writer.pid}" in o.reason
        assert user_files(logdir) == before
        writer.stdin.write("1\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "ok"
    finally:
        _stop(writer)
    # once the job is gone the run is reduced normally, and the writer's records are all there
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
    assert next(o for o in rep.outcomes if o.run == "run").status == "verified"
    assert python_scalars(run)["live"] == [0, 1]


def test_writer_that_opens_the_file_during_the_reduce_is_caught_before_the_swap(tmp_path):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    _age(logdir)
    before = user_files(logdir)
    holders = []

    def open_for_append():
        holders.append(subprocess.Popen([sys.executable, "-c",
                                         "import sys,time; f=open(sys.argv[1],'ab'); print('ready',flush=True); "
                                         "time.sleep(120)", str(path)], stdout=subprocess.PIPE, text=True))
        assert holders[0].stdout.readline().strip() == "ready"

    faults.arm("reduce.verify", open_for_append)
    try:
        rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY)
    finally:
        for h in holders:
            h.kill()
            h.wait()
    (o,) = rep.outcomes
    assert holders, "the failpoint was not reached"
    assert o.status == "skipped" and o.code == Skip.OPEN_FOR_WRITING, o.to_dict()
    assert f"pid {holders[0].pid}" in o.reason
    assert user_files(logdir) == before
    assert not os.listdir(Path(state_dir(str(logdir))) / "journal")


# ---------------------------------------------------------------------------------------
# 2. a writer out of sight (another machine): its records land in the backup and are salvaged
# ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("one_file_a_backup")
def test_records_appended_to_the_backup_are_salvaged_into_the_run(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run)
    _age(logdir)
    original = path.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    (f,) = [f for f in m["files"] if f["path"] == "run/" + path.name]
    blob = Path(m["vault"]) / f["blob"]
    assert os.path.samefile(blob, blob)  # the backup inode the writer still holds
    late = [frame(scalar_event("late", 100 + i, float(i))) for i in range(3)]
    partial = frame(scalar_event("late", 200, 9.0))
    with open(blob, "ab") as w:  # the job's next records, written through its old descriptor
        w.write(b"".join(late) + partial[:10])

    rec = api.recover_logdir(str(logdir))  # what every start runs
    (s,) = [r for r in rec if r.code == Finding.LATE_WRITES_SALVAGED]
    salvaged = run / (path.name + ".salvaged-001")
    assert s.run == "run" and salvaged.name in s.detail
    assert salvaged.read_bytes() == b"".join(late)  # exactly the complete records, byte for byte
    assert python_scalars(run)["late"] == [100, 101, 102]  # TensorBoard shows them
    st = api.status(str(logdir))
    assert any(x["code"] == Finding.LATE_WRITES_SALVAGED for x in st["late_writes"])
    assert not st["problems"], st["problems"]  # the old digest's name went with the salvage
    assert any(h.get("kind") == "salvage" and h["outcome"] == Finding.LATE_WRITES_SALVAGED
               for h in api.history(str(logdir)))
    (m2,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    (f2,) = [x for x in m2["files"] if x["path"] == f["path"]]
    assert f2["size"] == len(original) + len(b"".join(late)) + 10 and f2["grew_from"][0]["sha256"] == f["sha256"]
    assert api.verify(str(logdir), verify_backends=PY)[0]["ok"]  # the grown backup is intact

    with open(Path(m2["vault"]) / f2["blob"], "ab") as w:  # the partial record completes later
        w.write(partial[10:])
    rec = api.recover_logdir(str(logdir))
    assert [r.code for r in rec] == [Finding.LATE_WRITES_SALVAGED]
    assert (run / (path.name + ".salvaged-002")).read_bytes() == partial
    assert python_scalars(run)["late"] == [100, 101, 102, 200]

    # restore puts back the grown original and removes what was salvaged
    (o,) = api.restore(str(logdir))
    assert o.status == "restored", o.to_dict()
    assert sorted(os.listdir(run)) == [path.name]
    assert path.read_bytes() == original + b"".join(late) + partial


@pytest.mark.usefixtures("one_file_a_backup")  # the writer holds the backup's own file (packed, it has none)
def test_purge_keeps_a_backup_a_writer_still_holds(tmp_path):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    blob = Path(m["vault"]) / m["files"][0]["blob"]
    h = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1],'ab'); "
                          "print('ready',flush=True); time.sleep(120)", str(blob)], stdout=subprocess.PIPE, text=True)
    try:
        assert h.stdout.readline().strip() == "ready"
        preview = api.purge(str(logdir), older_than=0)
        assert preview.freed_bytes == 0 and [k["code"] for k in preview.kept] == [Finding.BACKUP_OPEN_FOR_WRITING]
        done = api.purge(str(logdir), older_than=0, yes=True)
        assert done.freed_bytes == 0 and blob.exists()
    finally:
        h.kill()
        h.wait()


# ---------------------------------------------------------------------------------------
# 3. purge never deletes a byte that exists nowhere else
# ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("one_file_a_backup")
def test_purge_keeps_and_reports_a_damaged_backup(tmp_path):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    blob = Path(m["vault"]) / m["files"][0]["blob"]
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as f:
        f.seek(100)
        f.write(b"XXXX")
    preview = api.purge(str(logdir), older_than=0)
    assert preview.freed_bytes == 0
    assert [k["code"] for k in preview.kept] == [Finding.BACKUP_DAMAGED] and m["op_id"] in preview.kept[0]["op_id"]
    done = api.purge(str(logdir), older_than=0, yes=True)
    assert done.freed_bytes == 0 and blob.exists()
    (m2,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    assert not m2["backup_purged"]
    code = cli_main(["purge", str(logdir), "--older-than", "0s"])
    assert code == 0


PURGE_STEPS = ["purge.intent", "purge.blob", "purge.marked"]


@pytest.mark.parametrize("step", PURGE_STEPS)
def test_killed_purge_is_finished_and_leaks_nothing(tmp_path, step):
    logdir = tmp_path / "logdir"
    for r in ("a", "b"):
        image_run(logdir / r)
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill")
    code = "import sys; from tb_footprint_plugin import api; api.purge(sys.argv[1], older_than=0, yes=True)"
    p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL
    api.recover_logdir(str(logdir))
    ops = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    vault = Path(state_dir(str(logdir)))
    blobs = {p.name for p in (vault / "blobs").rglob("*") if p.is_file()}
    kept = {f["sha256"] for m in ops if not m["backup_purged"] for f in m["files"]}
    assert blobs == kept, "every blob belongs to a kept backup, and every kept backup has its blob"
    done = api.purge(str(logdir), older_than=0, yes=True)
    assert all(m["backup_purged"] for m in api.operations(str(logdir)) if m["kind"] == "reduce"), done
    assert not [p for p in (vault / "blobs").rglob("*") if p.is_file()]
    # the change log names each purged backup once, whether the purge or the recovery finished it
    purges = [e["op_id"] for e in api.history(str(logdir)) if e["kind"] == "purge"]
    assert sorted(purges) == sorted(m["op_id"] for m in ops), purges


# ---------------------------------------------------------------------------------------
# 4. FIFOs and other non-regular files are never opened
# ---------------------------------------------------------------------------------------
def test_fifo_named_like_an_event_file_does_not_hang(tmp_path):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    fifo = logdir / "run" / "events.out.tfevents.1795990001.demo-host.4242.0.v2"
    os.mkfifo(fifo)
    _age(logdir)
    code = ("import sys, json; from tb_footprint_plugin import api; "
            "fp = api.scan(sys.argv[1]); p = api.plan(sys.argv[1], 'archive'); "
            "r = api.reduce_logdir(sys.argv[1], policy='archive', dry_run=False, verify_backends=('python',)); "
            "print(json.dumps({'warnings': fp.warnings + [w for r in fp.runs for w in r.warnings], "
            "'outcomes': [o.to_dict() for o in r.outcomes]}))")
    p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=ENV, timeout=240, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert any(fifo.name in w and "FIFO" in w for w in out["warnings"]), out["warnings"]
    (o,) = out["outcomes"]
    assert o["status"] == "verified", o
    assert fifo.exists() and os.path.exists(fifo) and not fifo.is_file()


# ---------------------------------------------------------------------------------------
# 5. a deleted or corrupt manifest is rebuilt from the vault's log
# ---------------------------------------------------------------------------------------
def _as_an_older_version_wrote_it(m: dict) -> Path:
    """Turn a manifest into the state older versions wrote (a manifest file ``ops/<op>.json``
    and a log ``oplog/<op>.jsonl`` of its own, no line in the shared log): returns the file.
    Such a manifest is what a rebuild from its log still mends (the shared log is the only
    record of a manifest written now)."""
    from tb_footprint_plugin.engine import oplog
    from tb_footprint_plugin.engine.vault import Vault

    vault = Vault(m["vault"])
    full = vault.read_manifest(m["op_id"])
    mpath = Path(vault.manifest_path(m["op_id"]))
    mpath.write_text(json.dumps(full))
    logged = {k: v for k, v in oplog._loggable(full).items() if k != "plan_checks_by_fidelity"}
    Path(oplog.legacy_path(vault.root, m["op_id"])).write_text(
        json.dumps({"type": "manifest", "manifest": logged, "t": time.time()}) + "\n")
    from tb_footprint_plugin.storage import zst

    for seg in Path(oplog.segments_dir(vault.root)).iterdir():
        if seg.name.endswith(oplog.SEALED_SUFFIX):  # a batch's sealed piece: its lines, as a plain segment
            with zst.open_decompressed(open(seg, "rb")) as f:
                text = f.read()
            seg.unlink()
            (Path(oplog.twins_dir(vault.root)) / seg.name).unlink()  # and its second copy
            seg = seg.with_name(seg.name.split(".")[0] + "-unsealed.jsonl")
        else:
            text = seg.read_bytes()
        seg.write_bytes(b"".join(x for x in text.splitlines(keepends=True)
                                 if not x.startswith(b'{"op":"%s"' % m["op_id"].encode())))
    return mpath


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_lost_manifest_is_rebuilt_by_recover(tmp_path, damage, capsys):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    before = user_files(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    mpath = _as_an_older_version_wrote_it(m)
    if damage == "deleted":
        mpath.unlink()
    else:
        mpath.write_text('{"op_id": "trunc')
    st = api.status(str(logdir))  # status reports, and says how to settle it
    assert any(x["code"] == Finding.MANIFEST_DAMAGED and x["op_id"] == m["op_id"] for x in st["problems"]), st
    assert "tb-footprint recover" in st["settle_command"]
    assert cli_main(["recover", str(logdir)]) == 0
    assert m["op_id"] in capsys.readouterr().out
    (m2,) = [x for x in api.operations(str(logdir)) if x["kind"] == "reduce"]
    assert m2["op_id"] == m["op_id"] and m2["files"] == m["files"] and m2["rebuilt"]["was"] == {"deleted": "missing", "corrupt": "corrupt"}[damage]
    assert not api.status(str(logdir))["problems"]
    (o,) = api.restore(str(logdir))
    assert o.status == "restored" and user_files(logdir) == before


@pytest.mark.usefixtures("one_file_a_backup")
def test_backup_without_any_manifest_is_reported_and_never_purged(tmp_path):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    vault = Path(state_dir(str(logdir)))
    shutil.rmtree(vault / "ops")
    shutil.rmtree(vault / "oplog")
    st = api.status(str(logdir))
    (x,) = [x for x in st["problems"] if x["code"] == Finding.ORPHAN_BLOBS]
    assert x["bytes"] > 0
    api.purge(str(logdir), older_than=0, yes=True)
    assert [p for p in (vault / "blobs").rglob("*") if p.is_file()]


# ---------------------------------------------------------------------------------------
# 6. restore: free space first, temp files cleaned after a kill
# ---------------------------------------------------------------------------------------
def test_restore_checks_free_space_first(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    after = user_files(logdir)
    from tb_footprint_plugin.engine import transaction

    monkeypatch.setattr(transaction.shutil, "disk_usage",
                        lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1000))
    (o,) = api.restore(str(logdir))
    assert o.status == "failed" and o.code == Failure.NO_SPACE and "free space" in o.reason
    assert user_files(logdir) == after
    assert not os.listdir(Path(state_dir(str(logdir))) / "journal")


def test_killed_restore_leaves_no_temp_file(tmp_path):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    before = user_files(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS="restore_copied=kill")
    code = "import sys; from tb_footprint_plugin import api; api.restore(sys.argv[1])"
    p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL
    assert [n for n in os.listdir(logdir / "run") if n.startswith(".footprint-restore-")], "the kill left a temp file"
    st = api.status(str(logdir))
    assert st["unfinished_operations"] and "tb-footprint recover" in st["settle_command"]
    api.recover_logdir(str(logdir))
    assert user_files(logdir) == before


def test_scratch_space_lives_in_the_vault_and_is_swept(tmp_path):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    tmp = Path(state_dir(str(logdir))) / "tmp"
    code = ("import sys; from tb_footprint_plugin import api; "
            "api.reduce_logdir(sys.argv[1], policy='archive', dry_run=False, verify_backends=('python',))")
    p = subprocess.Popen([sys.executable, "-c", code, str(logdir)], env=ENV)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if tmp.is_dir() and [n for n in os.listdir(tmp) if n.startswith("tbfp-verify-")]:
                break
            time.sleep(0.01)
        else:
            pytest.fail("verification never made its scratch directory in the vault")
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait()
    assert [n for n in os.listdir(tmp) if n.startswith("tbfp-")]
    api.recover_logdir(str(logdir))
    assert not [n for n in os.listdir(tmp) if n.startswith("tbfp-")]


# ---------------------------------------------------------------------------------------
# 7. unfinished operations are reported by status, scan, plan and history
# ---------------------------------------------------------------------------------------
def test_unfinished_operation_is_reported_with_the_command_that_settles_it(tmp_path, capsys):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS="reduce.swap_record=kill")
    code = ("import sys; from tb_footprint_plugin import api; "
            "api.reduce_logdir(sys.argv[1], policy='archive', dry_run=False, verify_backends=('python',))")
    assert subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300).returncode == -9
    for verb in (["status"], ["scan"], ["plan"], ["history"]):
        capsys.readouterr()
        cli_main(verb + [str(logdir)])
        out = capsys.readouterr()
        assert f"tb-footprint recover {logdir}" in out.out + out.err, verb
    rp = api.plan(str(logdir), "archive").run("run")
    assert rp.code == Skip.UNFINISHED
    assert cli_main(["recover", str(logdir)]) == 0
    assert api.status(str(logdir))["unfinished_operations"] == []


# ---------------------------------------------------------------------------------------
# 8. odd names, unreadable files, two reducers
# ---------------------------------------------------------------------------------------
def test_non_utf8_event_file_name_reduces_verifies_and_restores(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    name = os.fsdecode(b"events.out.tfevents.1795990000.h\xff\xfe.4242.0.v2")
    image_run(run)
    (src,) = list(run.iterdir())
    os.rename(src, run / name)
    _age(logdir)
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python", "rust"))
    (o,) = rep.outcomes
    assert o.status == "verified", o.to_dict()
    res = api.verify(str(logdir), verify_backends=("python", "rust"))
    assert res[0]["ok"], res
    (r,) = api.restore(str(logdir))
    assert r.status == "restored" and user_files(logdir) == before


def test_second_reducer_says_another_process_changed_the_run(tmp_path):
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    _age(logdir)
    stale = api.plan(str(logdir), "archive")
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.engine.transaction import reduce_run

    o = reduce_run(Context(str(logdir), verify_backends=PY), stale.run("run"))
    assert o.status == "skipped" and o.code == Skip.CHANGED_BY_OTHER, o.to_dict()
    assert "another process" in o.reason and "stale" not in o.reason


# ---------------------------------------------------------------------------------------
# 9. kills during restore, at each step: the next start finishes it, no temp file is left
# ---------------------------------------------------------------------------------------
RESTORE_STEPS = ["restore.dirs", "restore_copied", "restore.file", "restore.check"]


@pytest.mark.parametrize("step", RESTORE_STEPS)
def test_restore_killed_at_each_step_is_finished_by_the_next_start(tmp_path, step):
    logdir = tmp_path / "logdir"
    image_run(logdir / "a")
    (logdir / "a" / "worker0.1.pt.trace.json").write_text(json.dumps({"traceEvents": [{"ph": "X"}] * 200}))
    _age(logdir)
    before = user_files(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill")
    code = "import sys; from tb_footprint_plugin import api; api.restore(sys.argv[1])"
    p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL
    rec = api.recover_logdir(str(logdir))
    assert [r for r in rec if r.action == Recovery.COMPLETED], rec
    assert user_files(logdir) == before  # byte-identical, no temp file anywhere
    assert not os.listdir(Path(state_dir(str(logdir))) / "journal")
    assert not api.status(str(logdir))["problems"]


# ---------------------------------------------------------------------------------------
# 10. the tab: late writes and damage are reported, and the hint names a command that exists
# ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("one_file_a_backup")
def test_tab_reports_salvage_at_load_and_damage_when_read_only(tmp_path):
    from test_plugin_routes import App

    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    with open(Path(m["vault"]) / m["files"][0]["blob"], "ab") as w:
        w.write(frame(scalar_event("late", 500, 1.0)))
    mpath = _as_an_older_version_wrote_it(m)

    ro = App(logdir, footprint_read_only=True)  # read-only: reports, changes nothing
    try:
        mpath.write_text("{")  # damage found by the read-only tab too
        ro.plugin.recovery._run()
        rec = ro.get("/status").get_json()["recovery"]
        codes = {p["code"] for p in rec["problems"]}
        assert {"manifest_damaged"} <= codes, rec
        assert rec["settle_command"] == f"tb-footprint recover {logdir}"
        assert rec["settle_command"] in rec["detail"]
        assert cli_main(["recover", "--help"]) == 0  # the command the hint names exists
    finally:
        ro.close()
    assert not (path.parent / (path.name + ".salvaged-001")).exists()

    a = App(logdir)
    try:
        rec = a.get("/status").get_json()["recovery"]
        assert {o["code"] for o in rec["outcomes"]} >= {"manifest_rebuilt", "late_writes_salvaged"}, rec
        assert "late writes" in rec["detail"] and not rec["problems"]
        ops = a.get("/operations").get_json()["operations"]
        (o,) = [o for o in ops if o["kind"] == "reduce"]
        assert o["salvaged"][0]["records"] == 1 and o["rebuilt"]["was"] == "corrupt"
        hist = a.get("/history").get_json()["entries"]
        assert any(e.get("kind") == "salvage" for e in hist)
    finally:
        a.close()
    assert (path.parent / (path.name + ".salvaged-001")).exists()


def test_unreadable_event_file_is_named_and_nothing_changes(tmp_path):
    """Run as a user who may not read one event file (root without its read-anything capabilities)."""
    logdir = tmp_path / "logdir"
    image_run(logdir / "run")
    with EventWriter(str(logdir / "run"), index=1) as w:
        w.scalar("x", 1, 1.0)
        bad = Path(w.path)
    _age(logdir)
    before = user_files(logdir)
    os.chown(bad, 65534, 65534) if os.geteuid() == 0 else None
    os.chmod(bad, 0)
    code = ("import sys, json; from tb_footprint_plugin import api; "
            "fp = api.scan(sys.argv[1]); "
            "r = api.reduce_logdir(sys.argv[1], policy='archive', dry_run=False, verify_backends=('python',)); "
            "print(json.dumps({'w': [w for r in fp.runs for w in r.warnings], "
            "'o': [o.to_dict() for o in r.outcomes]}))")
    prefix = (["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
              if os.geteuid() == 0 else [])
    try:
        p = subprocess.run(prefix + [sys.executable, "-c", code, str(logdir)], env=ENV, capture_output=True,
                           text=True, timeout=300)
    finally:
        os.chmod(bad, 0o644)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert any(w.startswith(f"run/{bad.name}: unreadable") for w in out["w"]), out["w"]
    (o,) = out["o"]
    assert o["status"] == "failed" and o["reason"].startswith(f"run/{bad.name}: not readable"), o
    assert ".tb-footprint" not in o["reason"]
    assert user_files(logdir) == before
