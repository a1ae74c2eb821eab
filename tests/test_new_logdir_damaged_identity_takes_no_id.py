"""A new logdir at a renamed logdir's old path whose identity.json is DAMAGED never takes the renamed
one's id from a shared --backup-dir (review R10 F9's narrower variant; invariant 1).

A damaged identity binds the manifests that agree on one id (``catalogue.manifest_binding``) and
``recover`` rebuilds it with that id (``trust.repair_identity``). Both read the vaults the command
names: the renamed logdir's manifests there name this very path, so the new logdir listed its
retirement as its own, its ``recover`` wrote that id into identity.json for good, and its purge
could delete the renamed logdir's only copy. An id from a vault outside the state folder counts
only when the state's own change log (or a journal) names its operation (``trust.adoptable_ids``);
a new logdir's state logged none of the renamed one's.
"""
import json
import os

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api


def _identity(logdir):
    return os.path.join(str(logdir), ".tb-footprint", "identity.json")


def _id_of(logdir):
    """The id identity.json holds; None while it is not JSON (still damaged: not rebuilt)."""
    with open(_identity(logdir), "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw)["id"]
    except ValueError:
        return None


@pytest.mark.parametrize("new_state", ["fresh", "after_its_own_reduce"])
def test_a_new_logdir_with_a_damaged_identity_never_takes_the_renamed_ones_id(tmp_path, new_state):
    vault = str(tmp_path / "V")
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    before = user_files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False,
                     backup_dir=vault)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    moved = tmp_path / "L2"
    os.rename(logdir, moved)
    renamed_id = _id_of(moved)
    copy_real("jax/profiled", logdir)  # a new experiment at the old path
    own_id = None
    if new_state == "fresh":  # a state folder whose identity.json was cut short
        os.mkdir(os.path.join(str(logdir), ".tb-footprint"), 0o700)
    else:  # its own reduction into the same vault first (recorded in its vaults.json)
        rep = api.reduce_logdir(str(logdir), vault, policy="archive", dry_run=False, quiet_period=0)
        assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
        own_id = _id_of(logdir)
        assert own_id not in (None, renamed_id)
    with open(_identity(logdir), "wb") as f:
        f.write(b"\xff\xfe garbage {")

    assert [m["run"] for m in api.retired(str(logdir), backup_dir=vault)] == []
    api.recover_logdir(str(logdir), backup_dir=vault)  # rebuilds the damaged identity
    rebuilt = _id_of(logdir)
    assert rebuilt not in (None, renamed_id)
    if own_id is not None:
        assert rebuilt == own_id  # its own reduction's id: its change log names that operation
    assert [m["run"] for m in api.retired(str(logdir), backup_dir=vault)] == []
    pr = api.purge(str(logdir), yes=True, backup_dir=vault)
    assert not [o for o in pr.ops if o.get("run") == "train"], pr.to_dict()
    outs = api.restore(str(moved), run="train", backup_dir=vault)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(moved) == before
