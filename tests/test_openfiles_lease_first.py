"""The open-writer check asks the kernel first for a few files (issue #28 item 3): a read lease
granted on each says no descriptor anywhere writes one, so ``/proc`` is not walked — a walk
stats every descriptor of every process, 10-40 ms on a shared machine, three times in a run's
reduce. A refused or unaskable lease still walks ``/proc`` and names the writer."""
import mmap
import os
import subprocess
import sys

import pytest

from tb_footprint_plugin.storage import openfiles
from tb_footprint_plugin.storage.openfiles import LEASE_FIRST_MAX, find_writers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and leases are Linux's")

_HOLD = """
import sys, time
f = open(sys.argv[1], sys.argv[2])
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def proc_walks(monkeypatch):
    """The listings of /proc's process table each find_writers call makes."""
    walks = []
    real = os.listdir

    def listdir(path="."):
        if path == openfiles.PROC:
            walks.append(path)
        return real(path)

    monkeypatch.setattr(openfiles.os, "listdir", listdir)
    return walks


def _files(tmp_path, n):
    out = []
    for i in range(n):
        p = tmp_path / f"events.out.tfevents.{i}.host"
        p.write_bytes(b"x" * 10)
        out.append(str(p))
    return out


def test_files_nobody_writes_are_cleared_without_a_walk(tmp_path, proc_walks):
    paths = _files(tmp_path, 3)
    os.link(paths[0], tmp_path / "second-name")  # one inode named twice: one lease
    res = find_writers(paths + [str(tmp_path / "second-name"), str(tmp_path / "missing")])
    assert res.supported and res.holders == [] and res.uninspected == 0
    assert res.cleared_by_lease == 3 and res.processes == 0
    assert proc_walks == []


def test_a_writer_is_still_named(tmp_path, proc_walks):
    paths = _files(tmp_path, 2)
    p = subprocess.Popen([sys.executable, "-c", _HOLD, paths[1], "ab"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        res = find_writers(paths)
        assert [(h.pid, h.path, h.access) for h in res.holders] == [(p.pid, paths[1], "write")]
        assert res.cleared_by_lease == 0 and res.processes > 1 and proc_walks == [openfiles.PROC]
    finally:
        p.kill()
        p.wait()


def test_a_writable_mapping_is_not_cleared(tmp_path, proc_walks):
    """A shared writable mapping whose descriptor is closed writes the file with no descriptor
    in /proc: the kernel refuses the lease, so the answer is the walk's, as before."""
    (path,) = _files(tmp_path, 1)
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
    try:
        res = find_writers([path])
        assert res.cleared_by_lease == 0 and proc_walks == [openfiles.PROC]
    finally:
        m.close()


def test_a_file_that_is_not_the_inode_looked_at_is_walked_for(tmp_path, monkeypatch, proc_walks):
    """The lease answers only for the inode the name had when the files were looked at."""
    (path,) = _files(tmp_path, 1)
    real = openfiles._keys
    monkeypatch.setattr(openfiles, "_keys", lambda paths: {k + 1: v for k, v in real(paths).items()})
    res = find_writers([path])
    assert res.cleared_by_lease == 0 and proc_walks == [openfiles.PROC]


def test_many_files_are_walked_for_in_one_pass(tmp_path, proc_walks):
    res = find_writers(_files(tmp_path, LEASE_FIRST_MAX + 1))
    assert res.cleared_by_lease == 0 and res.processes > 1 and proc_walks == [openfiles.PROC]


def test_a_given_proc_tree_is_always_walked(tmp_path, proc_walks):
    """Tests stand in a /proc of their own: the kernel's leases do not answer for it."""
    proc = tmp_path / "proc"
    (proc / "self" / "fd").mkdir(parents=True)
    (path,) = _files(tmp_path, 1)
    res = find_writers([path], proc=str(proc))
    assert res.cleared_by_lease == 0 and res.processes == 0 and res.holders == []
