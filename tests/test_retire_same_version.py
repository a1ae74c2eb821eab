"""A retirement asks whether a run's file is still what it recorded by the one "same version" rule
(``Store.version``: inode, size and mtime, through the logdir's store; review R5 F8): it compared
size and mtime by its own ``os.lstat``, so a file replaced while it was read by another of the
same size and time (a writer's ``rename`` of a fresh copy over it, its time set back) passed as
unchanged there; only the move's later check caught it, and called a writer's change an error
(``rolled_back``/``error``) where a writer met anywhere else is a skip (``active``)."""
import os
import time
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import retire

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400


def _logdir(root: Path) -> Path:
    with synth.EventWriter(str(root / "train")) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    (root / "train" / "config.yaml").write_bytes(b"lr: 0.1\n" * 40)
    for d, _dirs, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    return root


def test_a_file_replaced_by_one_of_the_same_size_and_time_while_read_is_a_change(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path / "logs")
    cfg = logdir / "train" / "config.yaml"
    before = os.lstat(cfg)
    real = retire.sha256_file
    replaced = []

    def sha_then_replace(p):
        h = real(p)
        if os.path.basename(p) == "config.yaml" and not replaced:
            # another file of the same size and time renamed over it right after it was read
            new = str(cfg) + ".new"
            with open(new, "wb") as f:
                f.write(b"lr: 0.9\n" * 40)
            os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
            os.replace(new, cfg)
            replaced.append(p)
        return h

    monkeypatch.setattr(retire, "sha256_file", sha_then_replace)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert replaced
    [o] = rep.outcomes
    assert (o.status, o.code) == ("skipped", "active"), (o.status, o.code, o.reason)
    assert cfg.read_bytes() == b"lr: 0.9\n" * 40  # the writer's file stays where it put it
    assert not api.retired(str(logdir))
