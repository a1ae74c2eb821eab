"""Restore puts holes back as holes, and refuses up front when the run's disk has no room
(task N3 item 3, review R13 F3).

Before: every put-back wrote a sparse file's holes as zeros (a sparse 1 GiB file came back
allocating 1 GiB, and a 4 GiB one could fill the disk), and the free-space check counted the
files' length, so a restore of a sparse file was refused where it fits. Now each block-aligned
zero run of at least one block is a seek (``vault.SparseWriter``) in every put-back path —
plain blob, ``.zst``, packed — and the check counts what the put-backs allocate, naming the run,
the bytes needed and the bytes free."""
from __future__ import annotations

import hashlib
import io
import os
import random
import shutil

import pytest

from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import restore as restore_mod
from tb_footprint_plugin.engine.context import Context

pytestmark = pytest.mark.usefixtures("disarm_faults")

GiB = 1 << 30
EXTENT = 64 << 10


def _sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def _sparse_file(path, size, offsets, extent=EXTENT):
    """A file of ``size`` bytes, holes but for ``extent`` random bytes at each of ``offsets``."""
    rnd = random.Random(size)
    with open(path, "r+b" if os.path.exists(path) else "wb") as f:
        f.truncate(0)
        f.truncate(size)
        for off in offsets:
            f.seek(off)
            f.write(bytes(rnd.getrandbits(8) for _ in range(min(extent, size - off))))


def _profile_file(logdir):
    for dp, _ds, fs in os.walk(logdir):
        for n in fs:
            if n.endswith(".xplane.pb"):
                return os.path.join(dp, n)
    raise AssertionError("no profile file")


def _stat(path):
    st = os.stat(path)
    return {"sha": _sha(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "mode": st.st_mode}


def _sparse_run(tmp_path, size, offsets, extent=EXTENT):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    prof = _profile_file(logdir)
    st = os.stat(prof)
    _sparse_file(prof, size, offsets, extent)
    os.utime(prof, ns=(st.st_atime_ns, st.st_mtime_ns))  # past the quiet period still
    return logdir, prof


def _reduce(logdir, vault_format):
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                            vault_format=vault_format)
    (out,) = rep.outcomes
    assert out.status == Outcome.VERIFIED, out.reason
    return out


def test_the_sparse_writer_gives_the_same_bytes_for_any_chunks(tmp_path):
    """Zero runs shorter than a block, across chunk edges, at the end; reads of any length."""
    from tb_footprint_plugin.engine.vault import hash_count_sparse

    rnd = random.Random(7)
    for trial in range(120):
        n = rnd.randrange(0, 60000)
        buf = bytearray(n)
        for _ in range(rnd.randrange(0, 6)):
            a = rnd.randrange(0, n + 1)
            b = min(n, a + rnd.randrange(0, 12000))
            buf[a:b] = os.urandom(b - a) if rnd.random() < 0.5 else b"\x01" * (b - a)
        data = bytes(buf)

        class Chunks(io.RawIOBase):
            pos = 0

            def readable(self):
                return True

            def read(self, k=-1):
                k = rnd.randrange(1, 7000)
                out = data[self.pos:self.pos + k]
                self.pos += len(out)
                return out

        p = tmp_path / f"f{trial}"
        with open(p, "wb") as fo:
            got, m = hash_count_sparse(Chunks(), fo)
        assert (got, m) == (hashlib.sha256(data).hexdigest(), n)
        assert p.read_bytes() == data


def test_zero_blocks_are_holes(tmp_path):
    from tb_footprint_plugin.engine.vault import SparseWriter

    p = tmp_path / "f"
    with open(p, "wb") as fo:
        w = SparseWriter(fo, 4096)
        w.write(b"a" * 4096 + bytes(64 << 20) + b"b" * 10)
        w.finish(4096 + (64 << 20) + 10)
    st = os.stat(p)
    assert st.st_size == 4096 + (64 << 20) + 10
    assert st.st_blocks * 512 <= 3 * 4096
    assert w.data_bytes == 4096 + 10


@pytest.mark.parametrize("vault_format", ["hardlink", "compressed"])
def test_a_sparse_gib_round_trips_with_its_holes(tmp_path, monkeypatch, vault_format):
    """Bytes, length, mtime and mode back; allocated no more than the original's plus one block
    per hole edge. The restore is not refused on a disk with room for the data but not the length
    (before: 'not enough free space', it counted 1 GiB)."""
    offsets = [0, 300 << 20, GiB - EXTENT]
    logdir, prof = _sparse_run(tmp_path, GiB, offsets)
    before = _stat(prof)
    blocks_before = os.stat(prof).st_blocks * 512
    assert blocks_before < 4 * EXTENT + (1 << 20)  # a sparse file on this file system
    _reduce(logdir, vault_format)
    assert not os.path.exists(prof)
    vault = Context(logdir).vault
    sha = before["sha"]
    assert vault.local_form(sha) == ("plain" if vault_format == "hardlink" else "zst")
    # the disk has 512 MiB free: room for the data, not for 1 GiB of zeros
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=512 << 20))
    outs = api.restore(logdir)
    monkeypatch.undo()
    assert [o.status for o in outs] == [Outcome.RESTORED], [o.reason for o in outs]
    assert _stat(prof) == before
    edges = 2 * len(offsets) * os.stat(prof).st_blksize
    assert os.stat(prof).st_blocks * 512 <= blocks_before + edges


@pytest.mark.parametrize("vault_format,size,form", [("hardlink", 8 << 20, "plain"), ("compressed", 8 << 20, "zst"),
                                                     ("compressed", 200 << 10, "packed")])
def test_each_put_back_path_leaves_the_holes(tmp_path, vault_format, size, form):
    """The plain blob's copy, the ``.zst``'s decompression and the pack's read (a small backup
    in the vault's packs) each leave the holes. Before: each allocated the whole length."""
    logdir, prof = _sparse_run(tmp_path, size, [0, size - 4096], extent=4096)
    before = _stat(prof)
    blocks_before = os.stat(prof).st_blocks * 512
    _reduce(logdir, vault_format)
    assert Context(logdir).vault.blob_form(before["sha"]) == form
    outs = api.restore(logdir)
    assert [o.status for o in outs] == [Outcome.RESTORED], [o.reason for o in outs]
    assert _stat(prof) == before
    assert os.stat(prof).st_blocks * 512 <= blocks_before + 4 * os.stat(prof).st_blksize < size


def _files(logdir):
    out = {}
    for dp, ds, fs in os.walk(logdir):
        ds[:] = [d for d in ds if not d.startswith(".tb-footprint")]
        for n in fs:
            p = os.path.join(dp, n)
            out[os.path.relpath(p, logdir)] = _stat(p)
    return out


def test_a_restore_without_room_is_refused_up_front_and_changes_nothing(tmp_path, monkeypatch):
    """Before: the check named the logdir, not the run, and counted a sparse file's length."""
    logdir, prof = _sparse_run(tmp_path, 8 << 20, [0], extent=EXTENT)
    before = _stat(prof)
    _reduce(logdir, "hardlink")
    reduced = _files(logdir)
    free = 3 << 20  # below the data (64 KiB) plus the 16 MiB margin
    monkeypatch.setattr(restore_mod, "free_space", lambda path: free)
    outs = api.restore(logdir)
    assert [o.status for o in outs] == [Outcome.FAILED]
    o = outs[0]
    assert o.code == Failure.NO_SPACE, o.reason
    assert "restore run 'exp/run000'" in o.reason and f"({free} bytes) free" in o.reason
    assert "nothing was changed" in o.reason
    need = int(o.reason.split(" margin (")[1].split(" bytes)")[0])
    assert EXTENT + (16 << 20) <= need < (8 << 20) + (16 << 20)  # the data, not the file's length
    assert _files(logdir) == reduced  # nothing put back, nothing removed
    assert not [n for n in os.listdir(os.path.join(logdir, ".tb-footprint", "journal")) if n.endswith(".jsonl")]
    monkeypatch.undo()
    assert [o.status for o in api.restore(logdir)] == [Outcome.RESTORED]  # with room: restored
    assert _stat(prof) == before
