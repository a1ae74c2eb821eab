"""A folder made inside a state folder (a reduce's scratch root ``<state>/tmp``, any state
subfolder made with its missing parents) is made only when every folder from the state folder
down is ours (task N2 item 4). Before, ``ensure_private_dir(<state>/tmp)`` anchored its check at
``tmp`` itself and made it with its missing parents unchecked: as root (who may write any
folder) a reduce whose ``.tb-footprint`` was replaced by a stranger's folder mid-run made
``tmp/`` inside that stranger's folder, and for any user a state folder replaced by a symlink had
``tmp/`` made in the link's target. Root treats a folder of another uid as any user does: not
ours, never written."""
from __future__ import annotations

import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.private import NotPrivate, ensure_private_dir


def _logdir(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "run"
    with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
        for s in range(200):
            w.scalar("loss", s, 1.0 / (s + 1))
    synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=200, seed=1)
    for p in list(logdir.rglob("*")) + [logdir]:
        os.utime(p, (1_600_000_000, 1_600_000_000))
    return logdir


def _tree(p):
    return sorted(os.path.relpath(os.path.join(d, n), p) for d, ds, fs in os.walk(p) for n in ds + fs)


def test_a_scratch_root_in_a_symlinked_state_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    os.symlink(elsewhere, logdir / ".tb-footprint")
    before = scratch.current_root()
    with pytest.raises(NotPrivate):
        scratch.use_root(str(logdir / ".tb-footprint" / "tmp"))
    assert scratch.current_root() == before
    with pytest.raises(NotPrivate):
        ensure_private_dir(str(logdir / ".tb-footprint" / "tmp" / "op" / "pins"))
    assert _tree(elsewhere) == []  # nothing made through the link


def test_a_folder_of_ours_below_the_state_folder_is_made_and_the_state_folder_tightened(tmp_path):
    state = tmp_path / "logs" / ".tb-footprint"
    state.mkdir(parents=True, mode=0o700)
    os.chmod(state, 0o770)  # made under umask 002 by an older version: tightened, as at its root
    scratch.use_root(str(state / "tmp"))
    try:
        assert (state / "tmp").is_dir() and os.stat(state).st_mode & 0o022 == 0
        assert ensure_private_dir(str(state / "a" / "b")) == str(state / "a" / "b")
    finally:
        scratch.use_root(None)


@pytest.mark.skipif(os.geteuid() != 0, reason="root writes any folder: the case the check is for")
def test_root_makes_nothing_in_a_strangers_folder_standing_at_the_state_path(tmp_path):
    logdir = _logdir(tmp_path)
    state = logdir / ".tb-footprint"

    def replace_it():  # a group member renames the folder away and puts their own in its place
        os.rename(state, logdir / "moved")
        state.mkdir(mode=0o700)
        os.chown(state, 54321, 54321)

    faults.arm("reduce.backup", replace_it)
    try:
        rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                                verify_backends=("python",))
    finally:
        faults.disarm_all()
    (o,) = rep.outcomes
    assert o.status == "rolled_back" and o.code in (Failure.STATE_MOVED, Failure.STATE_NOT_OURS), o.to_dict()
    assert _tree(state) == []  # before: ['tmp']
    assert os.lstat(state).st_uid == 54321
