"""The operation log's segments as the manifests' only record (issue 28 item 2).

A segment is one process's file of lines, each one record of one operation (its op id first,
its sequence number): sealed (compressed in pieces) at a batch's end. Whatever instant a seal is
cut short at, and whoever reads meanwhile, every manifest is read exactly once and whole.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import Vault

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def manifest(i: int, **more) -> dict:
    return dict({"op_id": f"20260101T0000{i:02d}-{i:06x}", "kind": "reduce", "run": f"run{i}", "logdir": "/x",
                 "files": [{"path": f"run{i}/f", "size": 3, "sha256": f"{i:064x}", "mode": 0o644,
                            "mtime_ns": 10**18 + i, "mtime": (10**18 + i) / 1e9,
                            "blob": f"blobs/{f'{i:064x}'[:2]}/{i:064x}", "action": "delete"}],
                 "outcome": "verified", "started_at": float(i)}, **more)


def states(vault: Vault) -> dict:
    return {m["op_id"]: {k: v for k, v in m.items() if k != "vault"} for m in vault.manifests()}


def written(tmp_path, n=30):
    vault = Vault(str(tmp_path / "vault"))
    vault.ensure()
    for i in range(n):
        vault.write_manifest(manifest(i))
    for i in range(0, n, 3):  # a later change of every third
        vault.write_manifest(manifest(i, restored_by="20260102T000000-aaaaaa"))
    return vault


def test_a_manifest_is_its_log_lines_and_reads_back_whole(tmp_path):
    vault = written(tmp_path)
    assert not os.listdir(vault.ops)  # no file of its own
    got = states(vault)
    assert len(got) == 30 and got == {m["op_id"]: m for m in
                                      (manifest(i, **({"restored_by": "20260102T000000-aaaaaa"} if i % 3 == 0 else {}))
                                       for i in range(30))}
    (seg,) = os.listdir(oplog.segments_dir(vault.root))
    lines = open(os.path.join(oplog.segments_dir(vault.root), seg), "rb").read().splitlines()
    assert len(lines) == 2 * 40  # each state twice in a row
    assert all(x.startswith(b'{"op":"') for x in lines)


def test_sealing_keeps_every_manifest_and_a_new_segment_follows(tmp_path):
    vault = written(tmp_path)
    before = states(vault)
    plain = os.listdir(oplog.segments_dir(vault.root))
    assert vault.seal_log()
    pieces = os.listdir(oplog.segments_dir(vault.root))
    assert pieces and all(n.endswith(oplog.SEALED_SUFFIX) for n in pieces) and not set(plain) & set(pieces)
    assert states(vault) == before  # the same index, after its segment went
    assert states(Vault(vault.root)) == before
    vault.write_manifest(manifest(1, restored_by="20260103T000000-bbbbbb"))  # after the seal: a new segment
    assert len(os.listdir(oplog.segments_dir(vault.root))) == len(pieces) + 1
    assert vault.read_manifest(manifest(1)["op_id"])["restored_by"] == "20260103T000000-bbbbbb"


def test_a_seal_cut_short_reads_every_record_once(tmp_path):
    """A kill between the pieces' rename and the plain segment's unlink leaves both: the plain
    one is the record, the pieces are not read; temp pieces of a kill before are ignored."""
    vault = written(tmp_path)
    before = states(vault)
    d = oplog.segments_dir(vault.root)
    (name,) = os.listdir(d)
    shutil.copy2(os.path.join(d, name), tmp_path / "plain")
    assert vault.seal_log()
    shutil.copy2(tmp_path / "plain", os.path.join(d, name))  # as the kill left it: both
    with open(os.path.join(d, "." + name.split(".")[0] + ".00001.tmp-dead"), "wb") as f:
        f.write(b"\x28\xb5\x2f\xfd half a piece")
    fresh = Vault(vault.root)
    assert states(fresh) == before
    recs = oplog.records(vault.root, manifest(0)["op_id"])
    assert [r["type"] for r in recs] == ["manifest", "manifest", "manifest_change", "manifest_change"]
    os.unlink(os.path.join(d, name))  # the unlink done: the pieces are the record
    assert states(fresh) == before


def test_readers_never_miss_a_manifest_while_a_segment_is_sealed(tmp_path):
    vault = written(tmp_path, 60)
    want = states(vault)
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            seen.append(states(Vault(vault.root)))

    t = threading.Thread(target=read)
    t.start()
    try:
        assert vault.seal_log()
    finally:
        stop.set()
        t.join(30)
    seen.append(states(Vault(vault.root)))
    assert seen and all(s == want for s in seen)


def test_a_damaged_line_is_named_once_and_hides_no_manifest(tmp_path):
    vault = written(tmp_path)
    before = states(vault)
    (seg,) = [os.path.join(oplog.segments_dir(vault.root), n) for n in os.listdir(oplog.segments_dir(vault.root))]
    with open(seg, "ab") as f:
        f.write(b"\xff\xfe garbage naming no operation\n")
    assert states(vault) == before  # each still listed at its last readable state
    # but it may have been a manifest no one reads now: a release of "unclaimed" blobs waits
    vault.manifests()
    assert vault.unread == 1
    damaged = {(d.file, d.line) for op in oplog.logged_ops(vault.root) for d in oplog.read_log(vault.root, op).damaged}
    assert damaged == {(seg, 81)}
    # whether it was a newer state of any of them is unknown: recovery replays over none of them
    assert all(vault.manifest_damage(op) for op in before)


def test_one_damaged_copy_of_a_state_is_covered_by_the_other(tmp_path):
    vault = written(tmp_path)
    before = states(vault)
    (seg,) = [os.path.join(oplog.segments_dir(vault.root), n) for n in os.listdir(oplog.segments_dir(vault.root))]
    lines = open(seg, "rb").read().splitlines(keepends=True)
    lines[4] = b"\xff" + lines[4][1:]  # the first copy of the third state, unreadable now
    open(seg, "wb").write(b"".join(lines))
    assert states(vault) == before
    assert not any(vault.manifest_damage(op) for op in before) and vault.unread == 0
    lines[5] = b"\xff" + lines[5][1:]  # its twin too: that state is lost
    open(seg, "wb").write(b"".join(lines))
    op = manifest(2)["op_id"]  # written third
    assert json.loads(lines[6].decode())["op"] == manifest(3)["op_id"]
    assert vault.manifest_damage(op) and "line 5" in vault.manifest_damage(op)


def test_two_processes_each_write_their_own_segment_and_changes_fold_in_order(tmp_path):
    vault = written(tmp_path, 3)
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from tb_footprint_plugin.engine.vault import Vault\n"
            "from test_oplog_segments import manifest\n"
            "v = Vault(%r); v.write_manifest(manifest(1, restored_by='20260104T000000-cccccc'))\n"
            % (os.path.join(ROOT, "tests"), vault.root))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    segs = os.listdir(oplog.segments_dir(vault.root))
    assert len(segs) == 2, segs  # the child's, sealed at its exit, beside this process's own
    assert vault.read_manifest(manifest(1)["op_id"])["restored_by"] == "20260104T000000-cccccc"
    vault.write_manifest(manifest(1, restored_by="20260105T000000-dddddd"))  # a later change, here
    assert Vault(vault.root).read_manifest(manifest(1)["op_id"])["restored_by"] == "20260105T000000-dddddd"


@pytest.mark.parametrize("at", ["compress", "replace", "unlink"])
def test_sigkill_during_a_seal_reads_every_manifest_once(tmp_path, at):
    """A real SIGKILL of the sealing process at each step (a piece written, a piece renamed, the
    plain segment unlinked): the next reader sees every manifest, once, whole."""
    root = str(tmp_path / "vault")
    code = ("import os, signal, sys; sys.path.insert(0, %r)\n"
            "from tb_footprint_plugin.engine import oplog\n"
            "from tb_footprint_plugin.engine.vault import Vault\n"
            "from test_oplog_segments import manifest\n"
            "v = Vault(%r); v.ensure()\n"
            "for i in range(40): v.write_manifest(manifest(i))\n"
            "oplog.SEAL_CHUNK = 4096  # several pieces\n"
            "at = %r\n"
            "def kill(real):\n"
            "    def f(*a, **k):\n"
            "        r = real(*a, **k)\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return f\n"
            "import tb_footprint_plugin.storage.zst as z\n"
            "if at == 'compress': z.compress_stream = kill(z.compress_stream)\n"
            "if at == 'replace': oplog.os.replace = kill(oplog.os.replace)\n"
            "if at == 'unlink': oplog.os.unlink = kill(oplog.os.unlink)\n"
            "v.seal_log()\n"
            "print('not killed')\n" % (os.path.join(ROOT, "tests"), root, at))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    vault = Vault(root)
    assert states(vault) == {manifest(i)["op_id"]: manifest(i) for i in range(40)}
    assert all(len(oplog.records(root, manifest(i)["op_id"])) == 2 for i in range(40))  # each state's two copies, once
