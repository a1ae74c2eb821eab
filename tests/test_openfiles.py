"""The storage layer's open-for-writing detector and non-regular-file guard, on the real kernel."""
import os
import subprocess
import sys
import time

import pytest

from tb_footprint_plugin.storage.openfiles import describe_holders, find_writers
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
    res = find_writers([str(f)], proc=str(proc))
    assert res.uninspected == 1 and res.uninspected_pids == [42]


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
