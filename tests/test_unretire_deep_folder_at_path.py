"""Review R10 F4 (a regression of 7a80191): a disk unretire whose run path now holds a folder chain ~1100 deep (a new
run's, or a stranger's in a 1777 logdir) must be refused as before (restore_blocked, "something stands there
now", nothing changed), not fail on the new recursive walk (standing.standing_at) with RecursionError."""
import os
import subprocess

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure


def test_a_deep_folder_at_the_run_path_refuses_the_unretire(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"]
    os.mkdir(logdir / "train")
    fd = os.open(str(logdir / "train"), os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    with open(os.open("events.out.tfevents.1.new", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
        f.write(b"a new run's bytes")
    os.close(fd)
    deep = os.path.join(str(logdir / 'train'), *(['d'] * 1100), 'events.out.tfevents.1.new')
    try:
        _check(logdir, deep)
    finally:  # pytest's own rmtree of tmp_path recurses too deep
        subprocess.run(["rm", "-rf", str(logdir / "train")], check=True)


def _check(logdir, deep):
    outs = api.restore(str(logdir), run="train")
    assert [(o.status, o.code) for o in outs] == [("failed", Failure.RESTORE_BLOCKED)], [o.to_dict() for o in outs]
    with open(deep, 'rb') as f:
        assert f.read() == b"a new run's bytes"
    assert [m["run"] for m in api.retired(str(logdir))] == ["train"]
