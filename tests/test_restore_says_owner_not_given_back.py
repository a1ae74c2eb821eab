"""A restore run by a user who is not root cannot give a file back to another owner: the file it
puts back is its own. A teammate who reduced a team run owned by someone else (on request,
``--include-others-runs``) and restores it gets the bytes, mode, time and group back, but the owner
was left unsaid (review R26, LOW): the restore now names each such file, whose it is now and whose
the backup recorded (``Finding.OWNER_NOT_GIVEN_BACK``). A user restoring a run of its own is told
nothing of owners. A real second Unix user in a real team group (the suite runs as root)."""
from __future__ import annotations

import os
import time

from test_staged_private_and_group import _as_member, _image_run, _profile_run, member  # noqa: F401

AS_USER = r'''
import json, os, sys
from tb_footprint_plugin import api
logdir, run_file = sys.argv[1], sys.argv[2]
(o,) = api.reduce_logdir(logdir, policy="archive", dry_run=False, verify_backends=("python",),
                         include_others_runs=True).outcomes
out = {"reduce": [str(o.status), o.reason]}
(r,) = api.restore(logdir)
st = os.lstat(run_file)
out["restore"] = [str(r.status), r.reason, r.findings, st.st_uid, st.st_gid, oct(st.st_mode & 0o777)]
print(json.dumps(out))
'''


def _team_run(base: str, pw, team: int, file_uid: int) -> tuple:
    """A logdir of the member's with one run whose folder and event file are ``file_uid``'s, in the
    team's group, writable by the team (mode 2775 / 0664)."""
    logdir = os.path.join(base, "logdir")
    path = _image_run(os.path.join(logdir, "run"))
    for p in (base, logdir):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    run = os.path.dirname(path)
    os.chown(run, file_uid, team)
    os.chmod(run, 0o2775)
    os.chown(path, file_uid, team)
    os.chmod(path, 0o664)
    return logdir, path


def test_a_restore_by_a_teammate_says_the_file_is_now_its_own(member):
    pw, team, base = member
    logdir, path = _team_run(base, pw, team, file_uid=0)  # a run root wrote for the team
    mtime = os.lstat(path).st_mtime_ns
    out = _as_member(pw, base, AS_USER, logdir, path)
    status, reason = out["reduce"]
    assert status == "verified", reason
    status, reason, findings, uid, gid, mode = out["restore"]
    assert status == "restored", reason
    # what could be given back was: bytes (checked by the restore), mode, group, time
    assert (gid, mode) == (team, "0o664"), (gid, mode)
    assert os.lstat(path).st_mtime_ns == mtime
    # the owner could not (only root can): said, naming the file, whose it is and whose it was
    assert uid == pw.pw_uid
    assert {"code": "owner_not_given_back", "path": "run/" + os.path.basename(path)} in findings, findings
    assert f"put back are owned by {pw.pw_name} (uid {pw.pw_uid}), not by root (uid 0) as their backup recorded" in reason, reason


def test_a_restore_of_ones_own_run_says_nothing_of_owners(member):
    pw, team, base = member
    logdir, path = _team_run(base, pw, team, file_uid=pw.pw_uid)
    out = _as_member(pw, base, AS_USER, logdir, path)
    assert out["reduce"][0] == "verified", out["reduce"]
    status, reason, findings, uid, _gid, _mode = out["restore"]
    assert status == "restored", reason
    assert uid == pw.pw_uid
    assert not [f for f in findings if f["code"] == "owner_not_given_back"], findings
    assert "not by" not in reason, reason


AS_USER_PROFILE = r'''
import json, os, sys
from tb_footprint_plugin import api
logdir = sys.argv[1]
drop = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
(o,) = api.reduce_logdir(logdir, policy=drop, dry_run=False, verify_backends=("python",),
                         include_others_runs=True).outcomes
(r,) = api.restore(logdir)
print(json.dumps({"reduce": [str(o.status), o.reason], "restore": [str(r.status), r.reason, r.findings]}))
'''


def test_the_folders_a_teammates_restore_makes_again_are_named_too(member):
    """The folders a reduce removed (a profile session's) come back as the restorer's as well."""
    pw, team, base = member
    logdir = os.path.join(base, "logdir")
    run = os.path.join(logdir, "run")
    _profile_run(run)
    old = time.time() - 7200
    for p in (base, logdir):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    for root, dirs, files in os.walk(run):
        for n in dirs + files:
            p = os.path.join(root, n)
            os.chown(p, 0, team)
            os.chmod(p, 0o2775 if n in dirs else 0o664)
            os.utime(p, (old, old))
    os.chown(run, 0, team)
    os.chmod(run, 0o2775)
    out = _as_member(pw, base, AS_USER_PROFILE, logdir)
    assert out["reduce"][0] == "verified", out["reduce"]
    status, reason, findings = out["restore"]
    assert status == "restored", reason
    named = {f["path"] for f in findings if f["code"] == "owner_not_given_back"}
    assert "run/plugins" in named and "run/plugins/profile" in named, findings
    assert any(p.endswith(".xplane.pb") for p in named), findings
