"""A retired run never goes back into a folder another user made at its name (review R16 H1).

A retirement frees its run's name. In a shared logdir (sticky, world-writable: the README's
``/scratch/team/runs``) anyone may then make a folder there; before the fix, the restore renamed
every retired file into it (the vault's copy released), failed setting that folder's mode, and the
folder's owner deleted the run's event file: its scalars existed nowhere else.

Two real Unix users (``test_trust_users``' machinery), and a root-acting case for the look that a
folder made between the restore's first look and its put-back must not pass.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from test_trust_users import PRELUDE, User, files_under, shared, snapshot, tmp_path, users, world  # noqa: F401

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import retire as disk_retire

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes Unix users and chowns folders: CI runs as root")

RETIRE = PRELUDE.replace('    raise SystemExit(f"unknown command {cmd}")', '''    if cmd == "retire":
        rep = api.retire(logdir, api.retire_rule(runs=[run]), dry_run=False, quiet_period=0)
        return {"outcomes": [o.to_dict() for o in rep.outcomes]}
    raise SystemExit(f"unknown command {cmd}")''')


def _tool(user: User, *args) -> dict:
    r = user._as([sys.executable, "-c", RETIRE, json.dumps([str(a) if a is not None else None for a in args])])
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_folder_another_user_made_at_a_retired_runs_name_is_refused_and_the_run_stays_in_the_vault(users, shared):
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    original = snapshot(shared / "alice-run")
    out = _tool(alice, "retire", shared, "alice-run")
    assert [o["status"] for o in out["outcomes"]] == ["verified"], out
    retired = shared / ".tb-footprint" / "retired"
    assert len(files_under(retired)) == len(original)
    # bob takes the free name in the sticky logdir: a folder of his, open to alice
    r = bob.sh(f"mkdir '{shared}/alice-run' && chmod 0777 '{shared}/alice-run'")
    assert r.returncode == 0, r.stderr

    res = alice.tool("restore", shared, "alice-run")
    [o] = res["outcomes"]
    assert o["status"] == "failed" and o["code"] == "restore_blocked", o
    assert "alice-run is a folder of" in o["reason"] and str(bob.uid) in o["reason"], o["reason"]
    assert snapshot(shared / "alice-run") == {}, "a retired file went into bob's folder"
    assert len(files_under(retired)) == len(original), "the vault let a retired file go"
    assert not list((shared / ".tb-footprint" / "journal").glob("*.jsonl")), "a refusal before anything left a journal"

    # once bob's folder is gone, the run comes back as it was
    shutil.rmtree(shared / "alice-run")
    res = alice.tool("restore", shared, "alice-run")
    assert [o["status"] for o in res["outcomes"]] == ["restored"], res
    assert snapshot(shared / "alice-run") == original
    assert os.stat(shared / "alice-run").st_uid == alice.uid


def _run(logdir) -> dict:
    run = logdir / "train"
    with synth.EventWriter(str(run)) as w:
        for s in range(40):
            w.scalar("loss", s, 1.0 / (s + 1))
    synth.write_profile_session(str(run), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=500, seed=3)
    for dirpath, dirnames, filenames in os.walk(run):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))
    return snapshot(run)


def test_a_folder_made_between_the_restores_look_and_its_put_back_is_refused_before_any_file_moves(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    original = _run(logdir)
    assert api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0).ok
    retired = logdir / ".tb-footprint" / "retired"
    assert len(files_under(retired)) == len(original)

    real = disk_retire.folders_not_ours
    looks = []

    def planted_after_the_look(ctx, dirs):
        looks.append(real(ctx, dirs))
        if len(looks) == 1:  # the look before the journal found the name free; then uid 4242 takes it
            os.mkdir(logdir / "train", 0o777)
            os.chown(logdir / "train", 4242, 4242)
            return looks[0]
        return looks[-1]

    monkeypatch.setattr(disk_retire, "folders_not_ours", planted_after_the_look)
    [o] = api.restore(str(logdir), run="train")
    assert len(looks) == 2 and looks[0] is None and looks[1] is not None, looks
    assert o.status == "failed" and o.code == "restore_blocked", o.to_dict()
    assert "uid 4242" in o.reason
    assert not [p for p in files_under(logdir / "train")], "a retired file went into uid 4242's folder"
    assert len(files_under(retired)) == len(original), "the vault let a retired file go"

    # the folder moved away, the run comes back as it was (the next start, or a restore)
    monkeypatch.setattr(disk_retire, "folders_not_ours", real)
    shutil.rmtree(logdir / "train")
    api.recover_logdir(str(logdir))
    if not (logdir / "train").exists():
        [o] = api.restore(str(logdir), run="train")
        assert o.status == "restored", o.to_dict()
    assert snapshot(logdir / "train") == original
