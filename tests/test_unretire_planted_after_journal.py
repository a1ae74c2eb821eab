"""Review R22 F7: another user plants a link or a folder at a retired run's name *while* its restore
runs (held after its journal record, ``unretire.journal``), in a sticky shared logdir.

Before the fix, a link ended the restore ``failed [error]`` with "the journal is kept and the next
start finishes the restore" (false: every start met the link), and a folder of the other user got
the run's empty folders (0700, the restoring user's) made inside it, then a refusal saying "nothing
was changed" and "move that folder away", which that user may not do in a sticky logdir. Now both
are the run's own refusal as before the journal (``restore_blocked``, naming the link or folder,
its owner and who may move it), nothing made or written there, the journal dropped (nothing was
put back), and once the other user clears the name the run comes back byte for byte.

A folder made in the instant between that look and the making of the run's folders is met as they
are made, before any is made inside it, and before any file moves: the journal stays, and the
restore says it finishes once the name is clear, which the next start then does.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from test_trust_users import PRELUDE, REPO, files_under, shared, snapshot, tmp_path, users, world  # noqa: F401
from test_unretire_foreign_folder import _run, _tool

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import retire as disk_retire

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes Unix users and chowns folders: CI runs as root")


def _held_restore(user, logdir, run, gate) -> subprocess.Popen:
    """``user``'s restore of ``run``, held after its journal record until ``gate`` exists."""
    cmd = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
           "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
           sys.executable, "-c", PRELUDE, json.dumps(["restore", str(logdir), run])]
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(user.home),
           "PYTHONPATH": REPO, "XDG_CACHE_HOME": str(user.home / ".cache"),
           "TB_FOOTPRINT_FAILPOINTS": "unretire.journal=wait", "TB_FOOTPRINT_FAILPOINT_GATE": str(gate)}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(user.home))


def _journals(logdir) -> list:
    return sorted((logdir / ".tb-footprint" / "journal").glob("*.jsonl"))


@pytest.mark.parametrize("plant", ["link", "folder"])
def test_a_link_or_folder_planted_after_the_restores_journal_refuses_the_run_and_nothing_is_made_there(
        users, shared, tmp_path, plant):
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    original = snapshot(shared / "alice-run")
    out = _tool(alice, "retire", shared, "alice-run")
    assert [o["status"] for o in out["outcomes"]] == ["verified"], out
    retired = shared / ".tb-footprint" / "retired"
    private = tmp_path / "alice-private"  # where bob's link points: alice's own folder outside the logdir
    private.mkdir()
    os.chown(private, alice.uid, alice.gid)
    os.chmod(private, 0o700)

    gate = tmp_path / "gate"
    p = _held_restore(alice, shared, "alice-run", gate)
    try:
        deadline = time.monotonic() + 120
        while not _journals(shared) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _journals(shared), "the restore never wrote its journal: " + (p.stderr.read() if p.poll() is not None else "")
        # bob takes the free name while alice's restore is held after its journal record
        script = f"ln -s '{private}' '{shared}/alice-run'" if plant == "link" else \
            f"mkdir '{shared}/alice-run' && chmod 0777 '{shared}/alice-run'"
        r = bob.sh(script)
        assert r.returncode == 0, r.stderr
    finally:
        gate.touch()
        stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr[-3000:]
    [o] = json.loads(stdout.strip().splitlines()[-1])["outcomes"]

    assert o["status"] == "failed" and o["code"] == "restore_blocked", o
    what = "a symbolic link of" if plant == "link" else "a folder of"
    assert f"alice-run is {what} {bob.name} (uid {bob.uid})" in o["reason"], o["reason"]
    # alice may not move bob's entry out of the sticky logdir: the words say who may
    fix = "its owner (or root) must remove it" if plant == "link" else "its owner (or root) must move it away"
    assert fix in o["reason"] and "sticky" in o["reason"], o["reason"]
    assert "move that folder away" not in o["reason"] and "next start" not in o["reason"], o["reason"]
    assert "nothing was changed" in o["reason"], o["reason"]
    assert os.listdir(private) == [], "something was written through bob's link"
    if plant == "folder":
        assert os.listdir(shared / "alice-run") == [], "alice's folders were made inside bob's folder"
    assert len(files_under(retired)) == len(original), "the vault let a retired file go"
    # nothing was put back: no journal left for every start to meet; the run is still retired
    assert _journals(shared) == []
    assert alice.tool("operations", shared)["unfinished"] == []
    assert alice.tool("recover", shared)["recovered"] == []

    # once bob clears the name, alice's restore brings the run back as it was
    r = bob.sh(f"rm -f '{shared}/alice-run'" if plant == "link" else f"rmdir '{shared}/alice-run'")
    assert r.returncode == 0, r.stderr
    [o] = alice.tool("restore", shared, "alice-run")["outcomes"]
    assert o["status"] == "restored", o
    assert snapshot(shared / "alice-run") == original
    assert os.stat(shared / "alice-run").st_uid == alice.uid


def test_a_folder_made_in_the_instant_before_the_folders_are_made_keeps_the_journal_and_says_until_when(
        tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    original = _run(logdir)
    assert api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0).ok
    retired = logdir / ".tb-footprint" / "retired"

    real = disk_retire.make_dirs

    def taken_first(ctx, dirs, refuse_theirs=False):  # uid 4242 takes the name after the restore's last look at it
        os.mkdir(logdir / "train", 0o777)
        os.chown(logdir / "train", 4242, 4242)
        return real(ctx, dirs, refuse_theirs)

    monkeypatch.setattr(disk_retire, "make_dirs", taken_first)
    [o] = api.restore(str(logdir), run="train")
    assert o.status == "failed" and o.code == "restore_blocked", o.to_dict()
    assert "train is a folder of uid 4242" in o.reason, o.reason
    # a folder of ours may have been made in it: the journal stays, and says until when
    assert "the journal is kept and the next start finishes the restore once what stands in its way is gone" \
        in o.reason, o.reason
    assert files_under(logdir / "train") == [], "a retired file went into uid 4242's folder"
    # nor a folder: the walk that makes them looks at whose folder it makes each in (before, the
    # run's plugins/profile/… folders were made inside uid 4242's, then refused)
    assert os.listdir(logdir / "train") == [], "folders were made inside uid 4242's folder"
    assert len(files_under(retired)) == len(original), "the vault let a retired file go"
    assert len(_journals(logdir)) == 1

    monkeypatch.setattr(disk_retire, "make_dirs", real)
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "failed" and "uid 4242" in r.detail, (r.action, r.detail)
    assert files_under(logdir / "train") == []
    shutil.rmtree(logdir / "train")
    api.recover_logdir(str(logdir))
    assert snapshot(logdir / "train") == original
    assert _journals(logdir) == []
