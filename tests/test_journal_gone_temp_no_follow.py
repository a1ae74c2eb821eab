"""A reduce whose journal cannot be written again (something stands at its path) removes its
staged temporaries in their folder as the logdir store's walk reaches it, never by path (review
R8 F7's sibling, invariant 4): ``reduce_journal.journal_gone`` looked (``no_symlink``) and then
unlinked the absolute path, so the run's folder swapped for a link to an outside folder after the
look had the outside file of that name removed. Now the outside folder is untouched and the
temporary is named as left."""
from __future__ import annotations

import os

import pytest

import time

from test_journal_lost_again import _remove_journal
from test_restore_temp_no_follow import _swap, _tree, _unswap
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.engine import faults, reduce_journal

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_temporary_is_removed_nowhere_through_a_link(tmp_path, monkeypatch):
    logdir = str(tmp_path / "logs")
    generate_demo(logdir, scale=0.05)
    old = time.time() - 7 * 86400
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (old, old))
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    real, swapped = reduce_journal.no_symlink, []

    def look_then_swap(ctx, rel, *a, **k):
        got = real(ctx, rel, *a, **k)
        if ".footprint" in os.path.basename(rel) and not swapped:  # the instant after the look
            swapped.append(rel)
            (outside / os.path.basename(rel)).write_bytes(b"someone else's file, outside the logdir")
            _swap(tmp_path / "logs", os.path.dirname(rel), outside, aside)
        return got

    monkeypatch.setattr(reduce_journal, "no_symlink", look_then_swap)
    faults.arm("reduce.stage", _remove_journal(logdir, plant=True))
    rep = api.reduce_logdir(logdir, policy="lossless", dry_run=False, runs=["resnet_torch"], quiet_period=0,
                            verify_backends=("python",))
    (out,) = rep.outcomes
    assert swapped, ("the window was not reached", out.status, out.reason)
    there = _tree(outside)
    assert os.path.basename(swapped[0]) in there, "a file outside the logdir was removed"
    assert out.status == Outcome.ROLLED_BACK and "temp files left" in out.reason, (out.status, out.reason)
    _unswap(tmp_path / "logs", os.path.dirname(swapped[0]), aside)
