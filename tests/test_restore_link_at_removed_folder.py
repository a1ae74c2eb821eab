"""Review R22 F1: a link planted where a reduction removed a folder (a teammate in a shared
logdir) stops the restore: never followed, and said as what it is. Before, the restore called it
``interrupted`` "it will be finished on the next start" — false, every start fails the same until
the link goes — while the same link at a removed *file* said ``symlink_refused`` and what to do.
Now both say ``StoreError.SYMLINK`` naming the link; once it is gone, ``recover`` finishes the
restore byte for byte."""
from __future__ import annotations

import hashlib
import os

import pytest

from helpers_runs import write_loss_run
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, StoreError

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = 1_600_000_000


def _tree(root):
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_a_link_at_a_removed_folder_is_refused_by_name_and_recover_finishes_once_it_is_gone(tmp_path):
    logdir = tmp_path / "logs"
    write_loss_run(logdir / "v1", seed=1)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    before = _tree(logdir / "v1")
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [(o.status, o.reason) for o in rep.outcomes]
    removed = sorted(set(before) - set(_tree(logdir / "v1")))
    assert any(r.startswith("plugins/") for r in removed), removed
    # the highest folder of a removed file that the reduce took away: a link to a private folder
    target = logdir / "v1" / os.path.dirname(next(r for r in removed if r.startswith("plugins/")))
    while not target.parent.exists():
        target = target.parent
    assert not target.exists()
    private = tmp_path / "private"
    private.mkdir()
    (private / "keep.txt").write_text("mine\n")
    os.symlink(private, target)

    [o] = api.restore(str(logdir), run="v1")
    assert o.status == Outcome.FAILED
    assert o.code == StoreError.SYMLINK, (o.code, o.reason)
    assert os.path.relpath(target, logdir / "v1") in o.reason, o.reason
    assert "next start" not in o.reason, o.reason
    assert sorted(os.listdir(private)) == ["keep.txt"]  # nothing written through the link
    # every start meets it the same way until the link is gone; then recover finishes the restore
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "failed" and os.path.relpath(target, logdir) + " is a symlink" in r.detail, (r.action, r.detail)
    assert sorted(os.listdir(private)) == ["keep.txt"]
    os.unlink(target)
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "completed", (r.action, r.detail)
    assert _tree(logdir / "v1") == before
