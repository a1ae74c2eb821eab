"""A killed writer's segment of the operation log is sealed at the next start (issue #28 item 2).

A batch seals its segment at its end or at its process's exit; a SIGKILLed one cannot, and before
this its plain segment (~5 KB a run) stayed until that very process's next batch — never. Every
start (``oplog.rebuild_manifests``) now seals a segment whose writer is provably gone: its lock file
is free (the writer holds an flock on it from before its first line) and its pid runs no more.
A live writer's segment, an older version's (no lock file) and one whose pid runs are left alone;
a kill during that seal loses nothing.
"""
import os
import signal
import subprocess
import sys

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

from helpers_runs import age_tree, write_small_run
from test_oplog_segments import manifest, states

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.path.join(ROOT, "tests") + os.pathsep
           + os.environ.get("PYTHONPATH", ""))


def plain(root):
    return sorted(n for n in os.listdir(oplog.segments_dir(root)) if n.endswith(".jsonl"))


def locks(root):
    d = os.path.join(oplog.oplog_dir(root), oplog.LOCKS)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def pieces(root, folder):
    d = folder(root)
    return sorted(n for n in os.listdir(d) if n.endswith(".zst")) if os.path.isdir(d) else []


def child(code: str, **kw):
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=ENV, **kw)


def write_and_kill(root: str, n: int = 20) -> None:
    """A process that logs ``n`` manifests and is SIGKILLed before its batch ends."""
    code = ("import os, signal\n"
            "from tb_footprint_plugin.engine.vault import Vault\n"
            "from test_oplog_segments import manifest\n"
            f"v = Vault({root!r}); v.ensure()\n"
            f"for i in range({n}): v.write_manifest(manifest(i))\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    p = child(code)
    assert p.wait(60) == -signal.SIGKILL


def test_a_sigkilled_batch_is_sealed_by_the_next_start(tmp_path, monkeypatch):
    """A real reduce batch SIGKILLed after its second run committed: its segment is plain; the
    next start (``api.recover_logdir``) seals it into pieces in both folders, every manifest
    reads back as before, and the lock file is gone."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = str(tmp_path / "logs")
    for i in range(4):
        write_small_run(os.path.join(logdir, f"exp/run{i}"), i)
    age_tree(logdir, 1_700_000_000 - 3 * 86400)
    code = ("import os, signal, sys\n"
            "from tb_footprint_plugin import api\n"
            "done = []\n"
            "def on(o):\n"
            "    done.append(o)\n"
            "    if len(done) == 2:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            f"api.reduce_logdir({logdir!r}, policy='archive', dry_run=False, ledger='default', on_outcome=on)\n")
    p = child(code)
    assert p.wait(600) == -signal.SIGKILL
    root = state_dir(logdir)
    left = plain(root)
    assert len(left) == 1 and locks(root) == [left[0][:-len(".jsonl")] + ".lock"], os.listdir(
        oplog.segments_dir(root))
    before = {m["op_id"]: m for m in Vault(root).manifests()}
    assert sum(m["outcome"] == "verified" for m in before.values()) >= 2

    api.recover_logdir(logdir)  # the next start

    assert plain(root) == [] and locks(root) == []
    stem = left[0][:-len(".jsonl")]
    assert [n for n in pieces(root, oplog.segments_dir) if n.startswith(stem)] == \
        [n for n in pieces(root, oplog.twins_dir) if n.startswith(stem)] != []
    oplog._INDEXES.clear()  # read from the files, not this process's index
    after = {m["op_id"]: m for m in Vault(root).manifests()}
    assert {k: m for k, m in after.items() if k in before} == before
    assert oplog.hiding_damage(root) == [] and oplog.damaged_lines(root) == []


def test_a_killed_writers_segment_is_sealed_and_reads_back_whole(tmp_path):
    root = str(tmp_path / "vault")
    write_and_kill(root)
    (seg,) = plain(root)
    want = {manifest(i)["op_id"]: manifest(i) for i in range(20)}
    assert states(Vault(root)) == want
    assert oplog.rebuild_manifests(Vault(root)) == []  # a start: nothing to report
    assert plain(root) == [] and locks(root) == []
    oplog._INDEXES.clear()
    assert states(Vault(root)) == want
    assert all(len(oplog.records(root, manifest(i)["op_id"])) == 2 for i in range(20))


def test_a_live_writers_segment_is_left_alone_until_it_is_gone(tmp_path):
    root = str(tmp_path / "vault")
    code = ("import sys, time\n"
            "from tb_footprint_plugin.engine.vault import Vault\n"
            "from test_oplog_segments import manifest\n"
            f"v = Vault({root!r}); v.ensure()\n"
            "for i in range(5): v.write_manifest(manifest(i))\n"
            "print('written', flush=True)\n"
            "time.sleep(600)\n")
    p = child(code, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "written"
        (seg,) = plain(root)
        assert oplog.seal_leftovers(root) == []  # its lock is held: a live writer
        assert plain(root) == [seg]
    finally:
        p.kill()
        p.wait()
    assert oplog.seal_leftovers(root) == [seg]  # killed: lock free, pid gone
    assert plain(root) == [] and len(states(Vault(root))) == 5


def test_no_lock_file_or_a_running_pid_is_no_proof_the_writer_is_gone(tmp_path):
    """An older version's segment (no lock file: its writer took none) and one whose pid runs
    (a free lock file beside it: the pid may be a writer that could not lock) stay plain."""
    root = str(tmp_path / "vault")
    write_and_kill(root, 3)
    (seg,) = plain(root)
    folder = oplog.segments_dir(root)
    os.unlink(os.path.join(oplog.oplog_dir(root), oplog.LOCKS, locks(root)[0]))
    assert oplog.seal_leftovers(root) == [] and plain(root) == [seg]

    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        alive = seg.replace(f"-{seg.split('-')[1]}-", f"-{sleeper.pid}-")
        os.rename(os.path.join(folder, seg), os.path.join(folder, alive))
        lock = os.path.join(oplog.oplog_dir(root), oplog.LOCKS, alive[:-len(".jsonl")] + ".lock")
        open(lock, "w").close()
        os.chmod(lock, 0o600)
        assert oplog.seal_leftovers(root) == [] and plain(root) == [alive]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert oplog.seal_leftovers(root) == [alive] and plain(root) == []
    assert len(states(Vault(root))) == 3


@pytest.mark.parametrize("at", ["compress", "replace", "unlink"])
def test_a_kill_while_sealing_a_leftover_loses_nothing(tmp_path, at):
    """A real SIGKILL of the start sealing a dead writer's segment, at each step (a piece
    compressed, a piece renamed, the plain segment unlinked): every manifest still reads once and
    whole, and the next start finishes the seal."""
    root = str(tmp_path / "vault")
    write_and_kill(root, 40)
    want = {manifest(i)["op_id"]: manifest(i) for i in range(40)}
    code = ("import os, signal\n"
            "from tb_footprint_plugin.engine import oplog\n"
            "oplog.SEAL_CHUNK = 4096  # several pieces\n"
            f"at = {at!r}\n"
            "def kill(real):\n"
            "    def f(*a, **k):\n"
            "        r = real(*a, **k)\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return f\n"
            "import tb_footprint_plugin.storage.zst as z\n"
            "if at == 'compress': z.compress_stream = kill(z.compress_stream)\n"
            "if at == 'replace': oplog.os.replace = kill(oplog.os.replace)\n"
            "if at == 'unlink': oplog.os.unlink = kill(oplog.os.unlink)\n"
            f"print(oplog.seal_leftovers({root!r}))\n")
    p = child(code, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, out, err)
    oplog._INDEXES.clear()
    assert states(Vault(root)) == want
    assert all(len(oplog.records(root, manifest(i)["op_id"])) == 2 for i in range(40))
    oplog.rebuild_manifests(Vault(root))  # the next start
    assert plain(root) == [] and locks(root) == []
    assert not [n for n in os.listdir(oplog.segments_dir(root)) + os.listdir(oplog.twins_dir(root)) if ".tmp-" in n]
    oplog._INDEXES.clear()
    assert states(Vault(root)) == want
    assert all(len(oplog.records(root, manifest(i)["op_id"])) == 2 for i in range(40))


def test_this_process_keeps_its_own_segment_plain_until_it_seals_it(tmp_path):
    root = str(tmp_path / "vault")
    vault = Vault(root)
    vault.ensure()
    vault.write_manifest(manifest(1))
    (seg,) = plain(root)
    assert oplog.seal_leftovers(root) == [] and plain(root) == [seg]
    assert vault.seal_log() and plain(root) == [] and locks(root) == []
