"""The storage layer's open-for-writing detector and non-regular-file guard, on the real kernel."""
import os
import subprocess
import sys
import time

import pytest

from tb_footprint_plugin.storage.openfiles import describe_holders, find_writers, no_writer_anywhere
from tb_footprint_plugin.storage.regular import NotRegularFile, open_regular

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")

_HOLD = """
import sys, time
f = open(sys.argv[1], sys.argv[2])
print("ready", flush=True)
time.sleep(60)
"""


def _holder(path, mode):
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), mode], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.parametrize("mode,access", [("ab", "write"), ("r+b", "read-write"), ("wb", "write")])
def test_a_process_holding_the_file_for_writing_is_named(tmp_path, mode, access):
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(b"x")
    p = _holder(f, mode)
    try:
        res = find_writers([str(f)])
        assert res.supported
        (h,) = [h for h in res.holders if h.pid == p.pid]
        assert h.path == str(f) and h.access == access
        assert "python" in h.command and "\n" not in h.command
        assert f"pid {p.pid}" in describe_holders(res.holders)
    finally:
        p.kill()
        p.wait()


def test_a_reader_is_not_a_writer(tmp_path):
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(b"x")
    p = _holder(f, "rb")
    try:
        assert [h for h in find_writers([str(f)]).holders if h.pid == p.pid] == []
    finally:
        p.kill()
        p.wait()


def test_matched_by_inode_not_by_name(tmp_path):
    """A writer keeps its inode after the file is renamed or hard-linked elsewhere (the vault)."""
    f = tmp_path / "events.out.tfevents.1.host"
    f.write_bytes(b"x")
    p = _holder(f, "ab")
    try:
        other = tmp_path / "blob"
        os.link(f, other)
        os.unlink(f)
        res = find_writers([str(other), str(tmp_path / "missing")])
        assert [h.path for h in res.holders if h.pid == p.pid] == [str(other)]
        # a different file with the same name is not held
        f.write_bytes(b"y")
        assert not [h for h in find_writers([str(f)]).holders if h.pid == p.pid]
    finally:
        p.kill()
        p.wait()


def test_uninspectable_processes_are_counted_not_ignored(tmp_path, monkeypatch):
    """Another user's process (EACCES on its fd directory): counted, never taken as harmless;
    a kernel thread (empty command line) holds no files and is not counted."""
    proc = tmp_path / "proc"
    (proc / "self" / "fd").mkdir(parents=True)
    for pid, cmdline in ((42, b"secret\0job\0"), (2, b"")):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(cmdline)
    f = tmp_path / "f"
    f.write_bytes(b"x")
    real_listdir = os.listdir

    def listdir(path):
        if str(path).endswith(("/42/fd", "/2/fd")):
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    with open(f, "ab"):  # written by someone the fake /proc does not show: the kernel cannot clear pid 42
        res = find_writers([str(f)], proc=str(proc))
    assert res.uninspected == 1 and res.uninspected_pids == [42] and res.ruled_out == 0


def _fake_init(tmp_path, monkeypatch, target):
    """A fake /proc with pid 1 as a container's init looks to root: its fd directory lists,
    but each descriptor's ``stat`` is refused (EACCES, no ptrace access)."""
    proc = tmp_path / "proc"
    (proc / "self" / "fd").mkdir(parents=True)
    (proc / "1" / "fd").mkdir(parents=True)
    (proc / "1" / "cmdline").write_bytes(b"/sbin/init\0")
    os.symlink(target, proc / "1" / "fd" / "3")
    real_stat = os.stat

    def guarded(path, *a, **k):
        if "/proc/1/fd/" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *a, **k)

    monkeypatch.setattr(os, "stat", guarded)
    return proc


def test_container_init_holding_none_of_the_files_is_ruled_out(tmp_path, monkeypatch):
    """pid 1 whose descriptors cannot be stat'ed: when the kernel grants a read lease on every
    file (nobody anywhere holds one open for writing), pid 1 is not reported as a possible
    writer, and the plan prints no writers_not_ruled_out note."""
    from tb_footprint_plugin.plan.model import Plan, RunPlan
    from tb_footprint_plugin.plan.left_alone import apply_open_writers

    f = tmp_path / "logs" / "run" / "events.out.tfevents.1"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"x")
    proc = _fake_init(tmp_path, monkeypatch, tmp_path / "elsewhere")
    res = find_writers([str(f)], proc=str(proc))
    assert res.supported and not res.holders
    assert (res.uninspected, res.uninspected_pids, res.ruled_out) == (0, [], 1)
    plan = Plan(logdir=str(tmp_path / "logs"), policy={}, created_at=0, total_bytes=1,
                runs=[RunPlan(run="run", bytes_before=1, expected_after_bytes=0)])
    apply_open_writers(plan, res, str(tmp_path / "logs"))
    assert not any("writers_not_ruled_out" in n for n in plan.notes)
    assert plan.runs[0].skipped is None


def test_container_init_is_not_cleared_while_a_file_is_open_for_writing(tmp_path, monkeypatch):
    """The same pid 1, but one of the files is open for writing by a descriptor the pass did not
    see: the kernel refuses the lease, so pid 1 stays "not ruled out" (never a false all-clear)."""
    f = tmp_path / "events.out.tfevents.1"
    f.write_bytes(b"x")
    g = tmp_path / "events.out.tfevents.2"
    g.write_bytes(b"y")
    proc = _fake_init(tmp_path, monkeypatch, f)
    with open(g, "ab"):
        res = find_writers([str(f), str(g)], proc=str(proc))
    assert (res.uninspected, res.uninspected_pids, res.ruled_out) == (1, [1], 0)
    assert no_writer_anywhere(str(f)) is True and no_writer_anywhere(str(g)) is True
    with open(g, "r+b"):
        assert no_writer_anywhere(str(g)) is False
    assert no_writer_anywhere(str(tmp_path)) is None  # not a regular file: no answer


def test_a_vanished_descriptor_is_skipped(tmp_path):
    """Races with exiting processes: a dangling fd link is skipped without an error."""
    proc = tmp_path / "proc"
    (proc / "self" / "fd").mkdir(parents=True)
    (proc / "7" / "fd").mkdir(parents=True)
    os.symlink(tmp_path / "gone", proc / "7" / "fd" / "3")
    f = tmp_path / "f"
    f.write_bytes(b"x")
    res = find_writers([str(f)], proc=str(proc))
    assert res.supported and not res.holders and res.uninspected == 0 and res.processes == 1


def test_one_pass_is_cheap():
    """The whole process table, for 2,000 files, in well under a second on this machine."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i in range(2000):
            p = os.path.join(d, f"f{i}")
            with open(p, "wb"):
                pass
            paths.append(p)
        t0 = time.monotonic()
        res = find_writers(paths)
        took = time.monotonic() - t0
    assert res.processes > 1
    assert took < 2.0, took


@pytest.mark.parametrize("make", ["fifo", "socket", "symlink", "dir"])
def test_non_regular_files_are_never_opened(tmp_path, make):
    p = tmp_path / "events.out.tfevents.1.host"
    if make == "fifo":
        os.mkfifo(p)
    elif make == "socket":
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
    elif make == "symlink":
        (tmp_path / "real").write_bytes(b"x")
        os.symlink(tmp_path / "real", p)
    else:
        p.mkdir()
    with pytest.raises(NotRegularFile) as e:
        open_regular(str(p))
    assert str(p) in str(e.value) and "not a regular file" in str(e.value)


def test_regular_file_opens_and_reads(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"hello")
    with open_regular(str(p)) as f:
        assert f.read() == b"hello"


def test_a_file_on_a_filesystem_this_machine_exports_over_nfs_has_no_known_writers(tmp_path, monkeypatch):
    """An NFS client writes by file handle between short opens, so no descriptor check here can
    rule a writer out: on an exported filesystem the answer is 'cannot tell' (None), and the
    vault keeps such a backup plain rather than compact away the inode a client may append to."""
    from tb_footprint_plugin.storage import openfiles

    f = tmp_path / "events.out.tfevents.1"
    f.write_bytes(b"x")
    assert no_writer_anywhere(str(f)) is True
    exports = tmp_path / "exports"
    exports.write_text("# exported\n/nowhere/at\\040all\t*(rw)\n")
    monkeypatch.setattr(openfiles, "NFSD_EXPORTS", str(exports))
    assert no_writer_anywhere(str(f)) is True  # an export on no filesystem of ours
    sub = tmp_path / "with space"
    sub.mkdir()
    exports.write_text(f"{str(sub).replace(' ', chr(92) + '040')}\t10.0.0.0/8(rw,sync)\n")
    assert no_writer_anywhere(str(f)) is None
