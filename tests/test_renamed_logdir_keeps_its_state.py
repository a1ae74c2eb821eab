"""A logdir's operations follow its identity, not its path (review R10 F1; invariants 1 and 3).

``trust.bind`` proves the state folder is this directory's by its inode, so a logdir renamed
(``mv L L2``) or reached through another mount point keeps every retirement and reduction: status,
``retired`` and restore see them (before: realpath(manifest["logdir"]) had to equal the logdir's,
and everything was hidden). And a NEW logdir made at the old path, sharing the --backup-dir, has no
identity yet: it claims no manifest that carries an id (another logdir's), so its purge never
frees the renamed logdir's only copy (before: "the path decides", and it did).
"""
import os

from conftest import copy_real, user_files
from tb_footprint_plugin import api

RULE = dict(runs=["train"], include_nested=True)


def _retire(logdir, vault=None):
    rep = api.retire(str(logdir), api.retire_rule(**RULE), dry_run=False, backup_dir=vault)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()


def test_a_renamed_logdir_restores_its_retired_run(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    before = user_files(logdir)
    _retire(logdir)
    moved = tmp_path / "L2"
    os.rename(logdir, moved)  # the user moves the experiment folder: same inode, same state folder
    assert [m["run"] for m in api.retired(str(moved))] == ["train"]
    assert [o["run"] for o in api.status(str(moved))["operations"]] == ["train"]
    outs = api.restore(str(moved), run="train")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(moved) == before


def test_a_renamed_logdir_restores_its_reduction(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "L")
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0)
    assert [o for o in rep.outcomes if o.status == "verified"], rep.to_dict()
    moved = tmp_path / "L2"
    os.rename(logdir, moved)
    outs = api.restore(str(moved))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert user_files(moved) == before


def test_a_new_logdir_at_the_old_path_never_purges_the_renamed_logdirs_retired_run(tmp_path):
    vault = str(tmp_path / "V")
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    before = user_files(logdir)
    _retire(logdir, vault)
    moved = tmp_path / "L2"
    os.rename(logdir, moved)
    other = user_files(copy_real("tf/keras_profiled", logdir))  # a new experiment at the old path, same --backup-dir
    assert api.retired(str(logdir), backup_dir=vault) == []  # not the new logdir's
    assert api.status(str(logdir), backup_dir=vault)["operations"] == []
    assert api.restore(str(logdir), backup_dir=vault) == []  # nothing of L2's comes into it
    pr = api.purge(str(logdir), yes=True, backup_dir=vault)
    assert pr.freed_bytes == 0 and not pr.ops, pr.to_dict()
    assert user_files(logdir) == other
    outs = api.restore(str(moved), run="train", backup_dir=vault)  # L2's (or, renamed back, L's) run
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(moved) == before


def test_a_new_logdir_at_the_old_path_sees_none_of_the_renamed_ones_reductions(tmp_path):
    """The same with a reduction in a shared vault: the new logdir lists and restores none of it,
    its purge frees none of it, and the renamed logdir restores it byte for byte."""
    vault = str(tmp_path / "V")
    logdir = copy_real("jax/profiled", tmp_path / "L")
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), backup_dir=vault, policy="archive", dry_run=False, quiet_period=0)
    assert [o for o in rep.outcomes if o.status == "verified"], rep.to_dict()
    moved = tmp_path / "L2"
    os.rename(logdir, moved)
    os.makedirs(logdir)  # `mkdir L`: a new, empty logdir where the old one stood
    assert api.status(str(logdir), backup_dir=vault)["operations"] == []
    assert api.restore(str(logdir), backup_dir=vault) == []
    pr = api.purge(str(logdir), yes=True, backup_dir=vault)
    assert pr.freed_bytes == 0 and not pr.ops, pr.to_dict()
    assert user_files(logdir) == {}
    outs = api.restore(str(moved), backup_dir=vault)
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert user_files(moved) == before
