"""A reduce's staged file is owner-only while it is written, and a file made anew in an original's
place keeps the original's group when its user is a member (review R26 F2/F3/F4).

F2/F4: every staged output was opened with ``open(dst, "xb")``, the umask's mode (0644, or 0664 in
a team folder with umask 002) until ``take_over`` gave it the original's bits after it was written
and checked: another user could open it meanwhile, read a private file's reduced records or keep a
*write* descriptor past the swap and write into the reduced file. F3: run by its user (not root), a
reduce's rewritten file and a restore's file from a compressed backup took the process's group, so
a team that read the run (0640, the team's group) could read neither, for good.

F7: the folders a restore makes again (those the reduce removed) took the user's primary group too,
so the team could not reach the restored originals in them.

The group cases use a real second Unix user who is a member of a real team group (the suite runs as
root in CI)."""
from __future__ import annotations

import grp
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import time

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import transaction
from tb_footprint_plugin.transforms.gzip_trace import gzip_file

from test_trust_users import REPO, _traversable_base


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _profile_run(run: str) -> None:
    """A run of one scalar and a small profile session (what a drop-profiles reduce removes, folders too)."""
    with synth.EventWriter(run) as w:
        w.scalar("loss", 0, 1.0)
    synth.write_profile_session(run, n_events=200, with_caches=False, seed=0)


def _image_run(run) -> str:
    with synth.EventWriter(str(run)) as w:
        for s in range(30):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("img", s, synth.make_png(32, 32, seed=s), 32, 32)
        path = w.path
    old = time.time() - 7200
    os.utime(path, (old, old))
    return path


def test_a_staged_file_is_owner_only_until_it_takes_the_originals_place(tmp_path, monkeypatch):
    path = _image_run(tmp_path / "logdir" / "run")
    os.chmod(path, 0o664)  # a team's file, written with umask 002
    seen = []
    real = transaction.take_over

    def look(p, rec):
        seen.append(_mode(p))  # never chmodded before: its mode all the while it was written
        return real(p, rec)

    monkeypatch.setattr(transaction, "take_over", look)
    old = os.umask(0o002)
    try:
        (o,) = api.reduce_logdir(str(tmp_path / "logdir"), policy="archive", dry_run=False,
                                 verify_backends=("python",)).outcomes
    finally:
        os.umask(old)
    assert str(o.status) == "verified", o.reason
    # before: 0o664 (the umask's), writable by the team while it was written
    assert seen == [0o600], [oct(m) for m in seen]
    assert _mode(path) == 0o664, oct(_mode(path))


def test_a_compressed_copy_is_made_owner_only(tmp_path):
    src = tmp_path / "t.trace.json"
    src.write_bytes(b'{"traceEvents": []}' * 100)
    old = os.umask(0o000)
    try:
        gzip_file(str(src), str(tmp_path / "t.trace.json.gz"))
    finally:
        os.umask(old)
    assert _mode(tmp_path / "t.trace.json.gz") == 0o600  # before: 0o666


AS_USER = r'''
import json, os, sys
from tb_footprint_plugin import api
logdir, run_file = sys.argv[1], sys.argv[2]
out = {}
(o,) = api.reduce_logdir(logdir, policy="archive", dry_run=False, verify_backends=("python",),
                         vault_format="compressed").outcomes
out["reduce"] = [str(o.status), o.reason, os.lstat(run_file).st_gid, os.lstat(run_file).st_size]
(r,) = api.restore(logdir)
out["restore"] = [str(r.status), r.reason, os.lstat(run_file).st_gid, oct(os.lstat(run_file).st_mode & 0o777)]
print(json.dumps(out))
'''


@pytest.fixture
def member():
    """A throw-away user whose primary group is its own and who is a member of a team group."""
    assert os.geteuid() == 0, "this test creates Unix users: run it as root (CI does)"
    name, team = "fptg" + secrets.token_hex(3), "fptt" + secrets.token_hex(3)
    subprocess.run(["groupadd", team], check=True, capture_output=True)
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin",
                    "--groups", team, name], check=True, capture_output=True)
    base = _traversable_base()
    try:
        yield pwd.getpwnam(name), grp.getgrnam(team).gr_gid, base
    finally:
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", team], capture_output=True)


def _as_member(pw, base: str, script: str, *args: str) -> dict:
    """``script`` run as the member with its groups (the JSON its last line prints)."""
    cmd = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups",
           # to read the repository wherever CI cloned it (as test_trust_users' users do)
           "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", sys.executable, "-c", script, *args]
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": base, "PYTHONPATH": REPO,
           "XDG_CACHE_HOME": os.path.join(base, ".cache")}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=base, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_reduced_and_the_restored_file_keep_the_teams_group(member):
    pw, team, base = member
    logdir = os.path.join(base, "logdir")
    path = _image_run(os.path.join(logdir, "run"))
    for root, dirs, files in os.walk(base):
        for n in dirs + files:
            os.chown(os.path.join(root, n), pw.pw_uid, pw.pw_gid)
    os.chown(base, pw.pw_uid, pw.pw_gid)
    os.chown(path, pw.pw_uid, team)  # written by a job running with the team's group
    os.chmod(path, 0o640)
    before = os.path.getsize(path)
    out = _as_member(pw, base, AS_USER, logdir, path)
    status, reason, gid, size = out["reduce"]
    assert status == "verified", reason
    assert size < before, "the event file was not rewritten"
    assert gid == team, (gid, pw.pw_gid, team)  # before: the user's own group, the team shut out
    status, reason, gid, mode = out["restore"]
    assert status == "restored", reason
    assert (gid, mode) == (team, "0o640"), (gid, mode, pw.pw_gid, team)


AS_USER_FOLDERS = r'''
import json, os, shutil, sys
from tb_footprint_plugin import api
logdir, run = sys.argv[1], sys.argv[2]
drop = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
(o,) = api.reduce_logdir(logdir, policy=drop, dry_run=False, verify_backends=("python",)).outcomes
out = {"reduce": [str(o.status), o.reason, os.path.isdir(os.path.join(run, "plugins"))]}
(r,) = api.restore(logdir)
out["restore"] = [str(r.status), r.reason]
out["groups"] = {os.path.relpath(d, run): os.lstat(d).st_gid for d, _, _ in os.walk(run)}
print(json.dumps(out))
'''


def test_the_folders_a_restore_makes_again_keep_the_teams_group(member):
    pw, team, base = member
    logdir = os.path.join(base, "logdir")
    run = os.path.join(logdir, "run")
    _profile_run(run)
    old = time.time() - 7200
    for root, dirs, files in os.walk(base):
        for n in dirs + files:
            p = os.path.join(root, n)
            inside = p.startswith(run + os.sep)
            os.chown(p, pw.pw_uid, team if inside else pw.pw_gid)
            if inside and n in dirs:
                os.chmod(p, 0o750)  # the team reaches the run's files through its folders
            os.utime(p, (old, old))
    os.chown(base, pw.pw_uid, pw.pw_gid)
    before = {os.path.relpath(d, run): os.lstat(d).st_gid for d, _, _ in os.walk(run)}
    assert len(before) > 2 and all(g == team for k, g in before.items() if k != "."), before
    out = _as_member(pw, base, AS_USER_FOLDERS, logdir, run)
    status, reason, plugins_left = out["reduce"]
    assert status == "verified" and not plugins_left, (status, reason, plugins_left)
    status, reason = out["restore"]
    assert status == "restored", reason
    # before: every folder the restore made again had the user's own group
    assert out["groups"] == before, (out["groups"], before, pw.pw_gid, team)
