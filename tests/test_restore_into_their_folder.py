"""Review R24 F7: a reduction removed ``train/plugins`` (its profile data went into the vault); another
user then made ``train/plugins`` (the run folder is writable by them: a shared group, a 0777 run).
A restore put the originals back inside that user's folder and freed the vault's copy: the only copy
sat where they decide who reaches it. 0a2dbc5 refused this for a retired run only. Now a reduction's
restore refuses too (``restore_blocked``, naming the folder and its owner, nothing put back, the
vault's copy kept), before its journal; and made in the instant after that look, the folder-making
walk refuses to make anything inside it. Once the name is clear, the restore is exact."""
import os
import shutil

import pytest

from test_restore_exact import assert_exact, snapshot
from test_unretire_foreign_folder import _run

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import restore as disk_restore

pytestmark = [pytest.mark.usefixtures("disarm_faults"),
              pytest.mark.skipif(os.geteuid() != 0, reason="chowns a folder to another uid: CI runs as root")]


def _reduced(tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _run(logdir)
    before = snapshot(logdir)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",)).outcomes
    assert str(o.status) == "verified" and not (logdir / "train" / "plugins").exists(), o.reason
    vault = sorted(p for p in (logdir / ".tb-footprint").rglob("*") if p.is_file() and "blobs" in p.parts
                   or p.suffix == ".pack")
    return logdir, before, vault


def _kept_latest(tmp_path):
    """A run with two profile sessions reduced keep-latest: ``train/plugins/profile`` stays with the
    newer one, the older one's folder removed. (logdir, snapshot before, vault files)."""
    from tb_footprint_plugin import synth

    logdir = tmp_path / "logs"
    logdir.mkdir()
    _run(logdir)
    synth.write_profile_session(str(logdir / "train"), synth.session_name_for(synth.DEFAULT_TIMESTAMP - 86400),
                                n_events=200, seed=4)
    for d, dirs, names in os.walk(logdir):
        for n in dirs + names:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    before = snapshot(logdir)
    (o,) = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, quiet_period=0,
                             verify_backends=("python",)).outcomes
    assert str(o.status) == "verified", o.reason
    profile = logdir / "train" / "plugins" / "profile"
    assert len(os.listdir(profile)) == 1, os.listdir(profile)
    vault = sorted(p for p in (logdir / ".tb-footprint").rglob("*") if p.is_file() and "blobs" in p.parts
                   or p.suffix == ".pack")
    return logdir, before, vault


def _theirs(path):
    os.mkdir(path, 0o777)
    os.chown(path, 4242, 4242)


def test_a_reductions_restore_puts_nothing_into_a_folder_another_user_made_at_a_removed_name(tmp_path):
    logdir, before, vault = _reduced(tmp_path)
    _theirs(logdir / "train" / "plugins")
    (o,) = api.restore(str(logdir), run="train")
    assert (str(o.status), str(o.code)) == ("failed", "restore_blocked"), o.to_dict()
    assert "train/plugins is a folder of uid 4242" in o.reason and "nothing was changed" in o.reason, o.reason
    assert os.listdir(logdir / "train" / "plugins") == []
    assert [p for p in vault if p.exists()] == vault, "the vault let a backup go"
    assert api.restorable(str(logdir)), "the reduction is no longer restorable"
    shutil.rmtree(logdir / "train" / "plugins")
    (o,) = api.restore(str(logdir), run="train")
    assert str(o.status) == "restored", o.reason
    assert_exact(logdir, before)


def test_one_made_in_the_instant_after_the_look_gets_nothing_made_inside(tmp_path, monkeypatch):
    logdir, _before, vault = _reduced(tmp_path)
    real = disk_restore.make_dirs

    def taken_first(ctx, dirs, refuse_theirs=False):  # uid 4242 takes the name after the restore's look
        _theirs(logdir / "train" / "plugins")
        return real(ctx, dirs, refuse_theirs)

    monkeypatch.setattr(disk_restore, "make_dirs", taken_first)
    (o,) = api.restore(str(logdir), run="train")
    assert str(o.status) == "failed" and "uid 4242" in o.reason, o.to_dict()
    assert os.listdir(logdir / "train" / "plugins") == [], "folders were made inside uid 4242's folder"
    assert [p for p in vault if p.exists()] == vault, "the vault let a backup go"


def test_nor_into_a_folder_that_was_not_removed_but_is_now_another_users(tmp_path):
    """R24 F7b: the rule of every folder on the way to an original below the run's own, not only
    those the reduction removed: keep-latest removes the older of two profile sessions, so
    ``train/plugins/profile`` stays; another user's folder put in its place is refused the same way,
    nothing put back, the vault's copy kept; once ours again, the restore is exact."""
    logdir, before, vault = _kept_latest(tmp_path)
    profile = logdir / "train" / "plugins" / "profile"
    st = os.stat(profile)
    os.chown(profile, 4242, 4242)
    try:
        (o,) = api.restore(str(logdir), run="train")
    finally:
        os.chown(profile, st.st_uid, st.st_gid)
        os.utime(profile, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (str(o.status), str(o.code)) == ("failed", "restore_blocked"), o.to_dict()
    assert "train/plugins/profile is a folder of uid 4242" in o.reason and "nothing was changed" in o.reason, o.reason
    assert len(os.listdir(profile)) == 1, "a session was put back into uid 4242's folder"
    assert [p for p in vault if p.exists()] == vault, "the vault let a backup go"
    (o,) = api.restore(str(logdir), run="train")
    assert str(o.status) == "restored", o.reason
    assert_exact(logdir, before)


@pytest.mark.parametrize("which", ["profile", "session"])
def test_one_put_in_place_after_the_look_while_nothing_was_made_in_it_receives_nothing(tmp_path, monkeypatch, which):
    """R24 F7's residual: another user's folder put on an original's way in the instant after the
    restore's first look, where the restore has nothing to make (the folder it would make in
    stands already): each put-back asks whose the folders on its way are again (the one it places
    in through its descriptor), so nothing goes into it, nor into a folder of ours inside it
    (``profile``: its owner could move the session out of our reach). The restore stops
    ``restore_blocked``, naming it; the originals stay in the vault; once the folder is ours again
    ``recover`` finishes the restore, exact."""
    logdir, before, vault = _kept_latest(tmp_path)
    profile = logdir / "train" / "plugins" / "profile"
    real, taken = disk_restore.make_dirs, {}

    def taken_after(ctx, dirs, refuse_theirs=False):  # uid 4242 takes the folder once it stands
        made = real(ctx, dirs, refuse_theirs)
        (session,) = [d for d in dirs if os.path.dirname(d["path"]) == "train/plugins/profile"]
        target = profile if which == "profile" else logdir / session["path"]
        st = os.stat(target)
        taken.update(path=target, st=st, session=logdir / session["path"])
        os.chown(target, 4242, 4242)
        return made

    monkeypatch.setattr(disk_restore, "make_dirs", taken_after)
    try:
        (o,) = api.restore(str(logdir), run="train")
    finally:
        st = taken["st"]
        os.chown(taken["path"], st.st_uid, st.st_gid)
    assert (str(o.status), str(o.code)) == ("failed", "restore_blocked"), o.to_dict()
    name = "train/plugins/profile" if which == "profile" else os.path.relpath(taken["session"], logdir)
    assert f"{name} is a folder of uid 4242" in o.reason and "nothing is lost" in o.reason, o.reason
    assert os.listdir(taken["session"]) == [], "an original was put back into or under uid 4242's folder"
    assert [p for p in vault if p.exists()] == vault, "the vault let a backup go"
    monkeypatch.undo()
    os.utime(taken["path"], ns=(taken["st"].st_atime_ns, taken["st"].st_mtime_ns))
    api.recover_logdir(str(logdir))
    assert not api.restorable(str(logdir)), "the restore was not finished by recover"
    assert_exact(logdir, before)


def test_nor_into_another_users_folder_at_the_runs_own_name(tmp_path):
    """Review R25 F1: in a group-shared logdir without the sticky bit another user may rename our
    run away and put a folder of theirs at its name. A restore put the originals inside it and
    freed the vault's copy. The run's folder is asked too: refused ``restore_blocked`` before the
    journal, naming it, nothing changed; once the name is ours again, exact. (Another user's run
    taken on request still restores: its files' recorded owner is its folder's —
    ``tests/test_restore_owner.py``.)"""
    logdir, before, vault = _reduced(tmp_path)
    run = logdir / "train"
    st = os.stat(run)
    os.chown(run, 4242, 4242)
    try:
        (o,) = api.restore(str(logdir), run="train")
    finally:
        os.chown(run, st.st_uid, st.st_gid)
        os.utime(run, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (str(o.status), str(o.code)) == ("failed", "restore_blocked"), o.to_dict()
    assert "train is a folder of uid 4242" in o.reason and "nothing was changed" in o.reason, o.reason
    assert not (run / "plugins").exists(), "folders were made inside uid 4242's run folder"
    assert [p for p in vault if p.exists()] == vault, "the vault let a backup go"
    (o,) = api.restore(str(logdir), run="train")
    assert str(o.status) == "restored", o.reason
    assert_exact(logdir, before)


def test_the_run_folders_owner_is_recorded_so_another_users_run_taken_on_request_restores(tmp_path):
    """The other side of R25 F1's rule: a run whose folder was another user's when it was reduced
    (taken on request) goes back into that folder although every file in it is this user's: the
    reduction records the run folder's owner (``run_uid``) and the restore allows it."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _run(logdir)
    run = logdir / "train"
    os.chown(run, 4242, 4242)
    before = snapshot(logdir)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",), include_others_runs=True).outcomes
    assert str(o.status) == "verified", o.reason
    (m,) = api.operations(str(logdir))
    assert m.get("run_uid") == 4242, m
    (o,) = api.restore(str(logdir), run="train")
    assert str(o.status) == "restored", o.reason
    assert_exact(logdir, before)
