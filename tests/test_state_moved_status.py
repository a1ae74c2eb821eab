"""``status`` names a state folder of ours that stands in the logdir under another name (review R13
F2, "fix 3": someone renamed ``.tb-footprint`` in a logdir without the sticky bit; operations
stop with ``state_moved`` then, but nothing said where the journals and backups went once they
had stopped). Found in one listing of the logdir's top level: a real folder of this user, not
writable by others, holding a regular identity.json of ours bound to this logdir, not at the
state path. Named with code ``state_moved`` and what to do (move it back, then ``recover``);
nothing else is named, and nothing that is not ours is read."""
from __future__ import annotations

import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding


def _reduced(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "run"
    with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=200, seed=1)
    for p in list(logdir.rglob("*")) + [logdir]:
        os.utime(p, (1_600_000_000, 1_600_000_000))
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"]
    return logdir


def _moved(logdir):
    return [p for p in api.status(str(logdir))["problems"] if p["code"] == Finding.STATE_MOVED]


def test_a_state_folder_moved_aside_is_named_with_what_to_do(tmp_path):
    logdir = _reduced(tmp_path)
    state, aside = logdir / ".tb-footprint", logdir / "old-state"
    assert not _moved(logdir)  # in place: nothing to say
    os.rename(state, aside)
    (found,) = _moved(logdir)
    assert found["path"] == str(aside)
    assert str(state) in found["detail"] and "recover" in found["detail"] and "move it back" in found["detail"]
    # a folder made at the state path since (another user's stand-in, or a new one) changes nothing
    state.mkdir(mode=0o700)
    (found,) = _moved(logdir)
    assert found["path"] == str(aside) and "once the folder there now is moved away" in found["detail"]
    # moved back (the stand-in moved away first): nothing to say, and recover finds its operations
    os.rmdir(state)
    os.rename(aside, state)
    assert not _moved(logdir)
    assert api.status(str(logdir))["operations"]


def test_only_a_folder_of_ours_bound_to_this_logdir_is_named(tmp_path):
    logdir = _reduced(tmp_path)
    state = logdir / ".tb-footprint"
    ident = (state / "identity.json").read_bytes()
    # another logdir's state folder copied in (bound to that logdir): not this one's
    other = _reduced(tmp_path / "elsewhere")
    os.system(f"cp -a {other / '.tb-footprint'} {logdir / 'copied'}")
    # identity.json as a link to ours: never followed
    (logdir / "linked").mkdir(mode=0o700)
    os.symlink(state / "identity.json", logdir / "linked" / "identity.json")
    # a folder others may write, holding a copy of our identity: not ours
    (logdir / "open").mkdir()
    (logdir / "open" / "identity.json").write_bytes(ident)
    os.chmod(logdir / "open", 0o777)
    # a link to the state folder itself: not followed
    os.symlink(state, logdir / "state-link")
    assert not _moved(logdir)
    if os.geteuid() == 0:  # another user's folder holding our identity: never read, never named
        (logdir / "theirs").mkdir(mode=0o700)
        (logdir / "theirs" / "identity.json").write_bytes(ident)
        os.chown(logdir / "theirs", 54321, 54321)
        assert not _moved(logdir)
