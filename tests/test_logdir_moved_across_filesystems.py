"""Review R10 F7: a logdir MOVED to another filesystem (`mv /scratch/runs /archive/runs` is a copy
and a delete: a new inode) holding a retired run, whose only copy is its state folder's vault. Its
state was taken for a copy (foreign_state): `retired` listed nothing, `restore --run` said "nothing
to restore" naming no cause, and status advised "move it aside to start afresh" — followed, and the
folder set aside later deleted, the run was lost. Now a restore names the foreign state and says to
keep it; `recover --adopt-moved-state` (the user saying it was a move) binds it again, id kept, and
the run comes back byte for byte; a copy whose original still stands is never adopted."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import copy_real, user_files
from helpers_cli import run_cli as tbf
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure

OTHER_FS = "/dev/shm"


def _moved(tmp_path):
    if os.stat(OTHER_FS).st_dev == os.stat(tmp_path).st_dev:
        pytest.fail(f"needs {OTHER_FS} on another filesystem than {tmp_path}")
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    before = user_files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"]
    dst = os.path.join(OTHER_FS, f"footprint-moved-{os.getpid()}-{tmp_path.name}")
    subprocess.run(["mv", str(logdir), dst], check=True)  # another filesystem: a copy and a delete
    return logdir, dst, before


def test_a_moved_logdirs_restore_names_its_state_and_adoption_brings_the_run_back(tmp_path):
    logdir, dst, before = _moved(tmp_path)
    try:
        with pytest.raises(api.TransactionError) as e:
            api.restore(dst, run="train")
        assert e.value.code == Failure.RESTORE_BLOCKED, e.value  # not "nothing to restore" (not_found)
        assert "identity.json" in str(e.value) and "Keep it" in str(e.value) and "--adopt-moved-state" in str(e.value)
        assert "only to start afresh" in str(e.value)  # never the bare advice to set it aside
        p = tbf("recover", dst, "--adopt-moved-state")
        assert p.returncode == 0 and "state adopted" in p.stdout, (p.stdout, p.stderr)
        ident = json.loads(open(os.path.join(dst, ".tb-footprint", "identity.json")).read())
        assert ident["ino"] == os.stat(dst).st_ino and ident["moved_from"] == str(logdir)
        assert [m["run"] for m in api.retired(dst)] == ["train"]
        outs = api.restore(dst, run="train")
        assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
        assert user_files(dst) == before
    finally:
        shutil.rmtree(dst, ignore_errors=True)


def test_a_copy_whose_original_still_stands_is_never_adopted(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"]
    copy = tmp_path / "C"
    subprocess.run(["cp", "-a", str(logdir), str(copy)], check=True)
    ident = (copy / ".tb-footprint" / "identity.json").read_bytes()
    p = tbf("recover", copy, "--adopt-moved-state")
    assert p.returncode == 1 and "still stands" in p.stderr and "foreign_state" in p.stderr, (p.stdout, p.stderr)
    assert (copy / ".tb-footprint" / "identity.json").read_bytes() == ident  # nothing changed
    assert api.retired(str(copy)) == [] and [m["run"] for m in api.retired(str(logdir))] == ["train"]


def test_nothing_to_adopt_where_the_state_is_bound_here(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False)
    assert api.adopt_moved_state(str(logdir)) is None
    assert [m["run"] for m in api.retired(str(logdir))] == ["train"]


def test_a_new_folder_at_the_same_path_is_told_to_adopt_not_to_restore_there(tmp_path):
    """Review R11 G5: the logdir restored from a backup to where it was (a new inode at the very
    path its state was made for; equally a mount that does not keep inode numbers). The refusal
    said "if <this path> is that logdir ... restore them there": the restore that had just refused.
    It now says this folder is a new one at that path and offers the adoption, which works."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "L")
    before = user_files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_nested=True), dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"]
    shutil.copytree(logdir, tmp_path / "backup", symlinks=True, copy_function=shutil.copy2)
    shutil.rmtree(logdir)
    shutil.copytree(tmp_path / "backup", logdir, symlinks=True, copy_function=shutil.copy2)
    with pytest.raises(api.TransactionError) as e:
        api.restore(str(logdir), run="train")
    words = str(e.value)
    assert e.value.code == Failure.RESTORE_BLOCKED, e.value
    assert "restore them there" not in words, words
    assert "a new one at the very path the state was made for" in words and "--adopt-moved-state" in words, words
    assert api.adopt_moved_state(str(logdir))
    outs = api.restore(str(logdir), run="train")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(logdir) == before
