"""Review R13 F2 with two real Unix users (as tests/test_trust_users.py makes them; CI runs as root):
in a logdir others may write without the sticky bit, bob renames alice's ``.tb-footprint`` away and
makes his own folder at its name while alice's reduce is between its backup and its swap. Alice's
reduce must stop with ``state_moved`` naming the folder and where hers went, leaving her run as it
was (before: a bare failure naming bob's folder, 'rollback incomplete')."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from test_trust_users import REPO, User, _traversable_base, snapshot  # the suite's throw-away users

ALICE = r'''
import json, os, sys, time
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
logdir, flags = sys.argv[1], sys.argv[2]

def wait_for_bob():
    open(os.path.join(flags, "ready"), "w").close()
    for _ in range(1200):
        if os.path.exists(os.path.join(flags, "go")):
            return
        time.sleep(0.05)

faults.arm("reduce.backup", wait_for_bob)
rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, runs=["alice-run"], quiet_period=0,
                        verify_backends=("python",))
print("\n" + json.dumps([o.to_dict() for o in rep.outcomes], default=str))
'''


@pytest.fixture(scope="module")
def users():
    import pathlib
    import shutil

    base = pathlib.Path(_traversable_base())
    alice, bob = User(base), User(base)
    yield base, alice, bob
    alice.remove()
    bob.remove()
    shutil.rmtree(base, ignore_errors=True)


def test_bob_moves_alices_state_folder_mid_reduce(users):
    base, alice, bob = users
    logdir = base / "unsticky"
    logdir.mkdir()
    os.chmod(logdir, 0o777)  # others may write, no sticky bit: bob can rename alice's folder
    alice.tool("make", logdir, "alice-run")
    before = snapshot(logdir / "alice-run")
    flags = alice.home
    cmd = ["setpriv", f"--reuid={alice.uid}", f"--regid={alice.gid}", "--clear-groups",
           "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
           sys.executable, "-c", ALICE, str(logdir), str(flags)]
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(alice.home),
           "PYTHONPATH": REPO, "XDG_CACHE_HOME": str(alice.home / ".cache")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(alice.home))
    try:
        for _ in range(1200):
            if (flags / "ready").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (flags / "ready").exists(), proc.communicate(timeout=60)
        r = bob.sh(f"mv '{logdir}/.tb-footprint' '{logdir}/.hidden' && mkdir '{logdir}/.tb-footprint'")
        assert r.returncode == 0, r.stderr  # the kernel lets him (review R13 perm.sh)
        (flags / "go").touch()
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    (o,) = json.loads(out.strip().splitlines()[-1])
    state = os.path.join(str(logdir), ".tb-footprint")
    assert o["code"] == "state_moved", o["reason"]
    assert o["status"] == "rolled_back"
    assert f"{state}: the state folder is no longer" in o["reason"]
    assert os.path.join(str(logdir), ".hidden", "journal") in o["reason"]
    assert snapshot(logdir / "alice-run") == before  # nothing of her run replaced
    assert os.stat(logdir / ".hidden").st_uid == alice.uid  # hers, where the reason says
