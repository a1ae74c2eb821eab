"""Review R10 F9 (a regression of cfe5071, the F6 fix that took a missing identity's id back from the vaults the
state's vaults.json records). F1(b) must stay closed: a NEW logdir at a renamed logdir's old path, whose FIRST
changing verb names the same --backup-dir V (retire, or reduce), records V in its vaults.json — if that happens
before its identity is adopted, adoption reads V's manifests by path, finds the renamed logdir's (they name this
very path) and takes ITS id: the new logdir would own the renamed one's retirement, and its purge delete it."""
import os

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api


@pytest.mark.parametrize("first", ["retire", "reduce"])
def test_a_new_logdir_at_the_old_path_never_takes_the_renamed_ones_id(tmp_path, first):
    vault = str(tmp_path / "V")
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    before = user_files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False,
                     backup_dir=vault)
    assert [o.status for o in rep.outcomes] == ["verified"]
    moved = tmp_path / "L2"
    os.rename(logdir, moved)
    copy_real("jax/profiled", logdir)  # a new experiment at the old path
    if first == "retire":
        api.retire(str(logdir), api.retire_rule(runs=["."]), dry_run=False, backup_dir=vault)
    else:
        api.reduce_logdir(str(logdir), vault, policy="archive", dry_run=False, quiet_period=0)
    assert [m["run"] for m in api.retired(str(logdir), backup_dir=vault)] == []
    pr = api.purge(str(logdir), yes=True, backup_dir=vault)
    assert not [o for o in pr.ops if o.get("run") == "train"], pr.to_dict()
    outs = api.restore(str(moved), run="train", backup_dir=vault)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(moved) == before
