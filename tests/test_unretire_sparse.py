"""A run retired into a vault on another filesystem comes back with its sparse files still
sparse: unretire's copy back writes through the one ``SparseWriter`` every put-back uses
(``files.copy_new(sparse=True)``), as N3 noted it did not (a 64 MiB file with two small data
extents came back allocating 64 MiB)."""
import os
import shutil
import uuid
from pathlib import Path

from conftest import copy_real, user_files
from tb_footprint_plugin import api


def test_unretire_from_another_filesystem_keeps_holes(tmp_path):
    vault = Path("/dev/shm") / f"tbfp-test-{uuid.uuid4().hex[:8]}"
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    sparse = logdir / "train" / "big.pt.trace.json"
    with open(sparse, "wb") as f:
        f.write(b"{" + b"x" * 8191)
        f.seek(64 << 20)
        f.write(b"y" * 8192 + b"}")
    old = os.lstat(next((logdir / "train").glob("*tfevents*"))).st_mtime
    os.utime(sparse, (old, old))
    allocated = os.lstat(sparse).st_blocks * 512
    assert allocated < 1 << 20  # the file system keeps holes
    try:
        vault.mkdir()
        assert os.stat(vault).st_dev != os.stat(logdir).st_dev, "needs /dev/shm on another filesystem"
        before = user_files(logdir)
        rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=str(vault))
        assert rep.ok, rep.to_dict()
        outs = api.restore(str(logdir), op=rep.outcomes[0].op_id)
        assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
        assert user_files(logdir) == before
        assert os.lstat(sparse).st_blocks * 512 <= allocated + 2 * os.statvfs(sparse).f_bsize
    finally:
        shutil.rmtree(vault, ignore_errors=True)
