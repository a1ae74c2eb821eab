"""A reduction's restore removes the files the reduction made at new names (a torch trace's .gz)
in their folder as the logdir store's walk reaches it, never by path (review R8 F7, invariant 4):
``finish_restore`` looked (``holds_original``, through the walk) and then ran ``os.unlink`` on the
absolute path, so the run's folder swapped for a link to an outside folder after the look had the
outside file of that name removed. Now a link met there is refused, coded, with the journal kept;
once the folder is back, the next start finishes the restore byte for byte."""
import os
import time

import pytest

from conftest import user_files
from test_restore_temp_no_follow import _swap, _tree, _unswap
from tb_footprint_plugin import api
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.engine import restore

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_restore_unlinks_no_created_file_through_a_link(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    generate_demo(str(logdir), scale=0.05)
    old = time.time() - 7 * 86400
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (old, old))
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, runs=["resnet_torch"], quiet_period=0,
                            verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status == "verified", o.reason
    gz = [c for c in o.created_files if c.endswith(".gz")]
    assert gz, o.created_files
    name, folder = os.path.basename(gz[0]), os.path.dirname(gz[0])
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    (outside / name).write_bytes(b"someone else's file, outside the logdir")
    there = _tree(outside)
    real, swapped = restore.holds_original, []

    def look_then_swap(store, key, rec, *a, **k):
        got = real(store, key, rec, *a, **k)
        if key.endswith(name) and got and not swapped:  # the instant after the look
            swapped.append(1)
            _swap(logdir, folder, outside, aside)
        return got

    monkeypatch.setattr(restore, "holds_original", look_then_swap)
    res = api.restore(str(logdir), run="resnet_torch")
    assert swapped, "the window was not reached"
    assert _tree(outside) == there, "a file outside the logdir was removed"
    (r,) = res.outcomes if hasattr(res, "outcomes") else res
    assert r.status == "failed" and r.code == "symlink_refused", (r.status, r.code, r.reason)
    monkeypatch.undo()
    _unswap(logdir, folder, aside)
    api.recover_logdir(str(logdir))
    assert user_files(logdir) == before
