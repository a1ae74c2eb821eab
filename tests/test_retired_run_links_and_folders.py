"""Review R18's findings on this session's retirement changes (d095a75, fb35cad), each fixed:

* F4: the unretire's look at whose folder a file goes into is made of the descriptor the file is
  placed through, not only by path once: under a folder others may rename in (not sticky), the run
  folder swapped for theirs after the look gets no file (it stays in the vault);
* F6: a name of a run's own hard-linked pair left in the vault while the other goes back gets an
  inode of its own: a write through the restored name never changes the vault's only copy;
* F2: "after purge" counts a retired run's linked names once (what du sees the purge free);
* F3: status names no backup_shared for a retired run's own links;
* R19 F6 (on the F4 fix): a folder made again by its own recorded owner still takes back a
  teammate's file of the run (the descriptor's owner judged as the path's was).
"""
from __future__ import annotations

import os

import pytest

from conftest import copy_real
from test_freed_figures_du import SLACK, du
from test_trust_users import files_under, snapshot  # noqa: F401

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import retire as disk_retire
from tb_footprint_plugin.engine.vault import Vault


@pytest.mark.skipif(os.geteuid() != 0, reason="chowns folders: CI runs as root")
def test_a_run_folder_swapped_after_the_look_under_a_non_sticky_parent_gets_no_file(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    team = logdir / "team"
    run = team / "train"
    with synth.EventWriter(str(run)) as w:
        for s in range(40):
            w.scalar("loss", s, 1.0 / (s + 1))
    for dirpath, dirnames, filenames in os.walk(run):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))
    os.chmod(team, 0o777)
    os.chown(team, 4242, 4242)  # a teammate's shared folder, not sticky
    original = snapshot(run)
    rep = api.retire(str(logdir), api.retire_rule(runs=["team/train"]), dry_run=False, quiet_period=0)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]

    real = disk_retire.folders_not_ours
    looks, theirs = [], []

    def swapped_after_the_look(ctx, dirs):
        looks.append(real(ctx, dirs))
        if len(looks) == 2 and looks[-1] is None:  # after make_dirs: uid 4242 (team's owner) swaps it
            os.rename(run, team / "train.ours")
            os.mkdir(run, 0o777)
            os.chown(run, 4242, 4242)
            theirs.append(os.stat(run).st_ino)
        return looks[-1]

    monkeypatch.setattr(disk_retire, "folders_not_ours", swapped_after_the_look)
    [o] = api.restore(str(logdir), run="team/train")
    assert len(looks) == 2 and theirs, looks
    # the files went back into the folder uid 4242 made (root then chowned it to the recorded
    # owner: a non-root restorer cannot, and the files stay in the other user's folder)
    into_theirs = os.stat(run).st_ino == theirs[0] and bool(files_under(run))
    assert not into_theirs, ("the retired files were put into the folder uid 4242 swapped in after the look",
                             o.to_dict())


def _retired_linked_pair(tmp_path, size: int):
    """A logdir whose run ``a`` holds one inode under two names (``trace.json``, ``trace-copy.json``),
    retired: (logdir, run)."""
    logdir = tmp_path / "ld"
    run = logdir / "a"
    with synth.EventWriter(str(run)) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    big = run / "trace.json"
    big.write_bytes(os.urandom(size))
    os.link(big, run / "trace-copy.json")  # one inode, two names, both inside the run
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    assert api.retire(str(logdir), api.retire_rule(runs=["a"]), dry_run=False, quiet_period=0).ok
    return logdir, run

def test_a_linked_name_left_in_the_vault_shares_no_inode_with_the_logdir(tmp_path, monkeypatch):
    logdir, run = _retired_linked_pair(tmp_path, 1 << 16)

    real = disk_retire.folders_not_ours
    calls = []

    def a_writer_recreates_one_name(ctx, dirs):
        calls.append(1)
        if len(calls) == 2:  # after make_dirs, before any file moves
            (run / "trace.json").write_bytes(b"new\n")
        return real(ctx, dirs)

    monkeypatch.setattr(disk_retire, "folders_not_ours", a_writer_recreates_one_name)
    [o] = api.restore(str(logdir), run="a")
    [m] = [m for m in Vault(str(logdir / ".tb-footprint")).manifests() if m.get("kind") == "retire"]
    files = logdir / ".tb-footprint" / "retired" / m["op_id"] / "files"
    left = {os.lstat(p).st_ino for p in files.iterdir()} if files.exists() else set()
    back = os.lstat(run / "trace-copy.json").st_ino
    assert back not in left, ("the vault's only copy of trace.json is the inode of the logdir's trace-copy.json",
                              o.to_dict())


def test_after_purge_counts_a_retired_runs_linked_names_once(tmp_path):
    logdir, run = _retired_linked_pair(tmp_path, 2 << 20)
    said = api.status(str(logdir))["freed_after_purge_bytes"]
    before = du(logdir)
    done = api.purge(str(logdir), yes=True)
    gained = before - du(logdir)
    assert abs(done.freed_bytes - gained) <= SLACK, (done.freed_bytes, gained)
    assert abs(said - gained) <= SLACK, (said, gained)


def test_status_names_no_problem_for_a_retired_runs_own_links(tmp_path):
    """fb35cad keeps a run's two linked names as one inode in the vault (nlink 2); status's
    retire_tree.stored_problems reads nlink > 1 as 'one inode with other name(s) outside the vault'
    (backup_shared) — a false alarm for the run's own twin."""
    logdir, run = _retired_linked_pair(tmp_path, 1 << 16)
    st = api.status(str(logdir))
    text = repr(st)
    assert "backup_shared" not in text, [p for p in st.get("problems", [])]


NOBODY, MATE = 65534, 4242


@pytest.mark.usefixtures("disarm_faults")
@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a file to another user")
def test_a_teammates_file_goes_back_into_the_run_folder_its_owner_made_again(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    for d, dirs, names in os.walk(logdir):
        for n in dirs + names:
            os.chown(os.path.join(d, n), NOBODY, NOBODY, follow_symlinks=False)
    mate = next(logdir / "train" / n for n in sorted(os.listdir(logdir / "train"))
                if os.path.isfile(logdir / "train" / n))
    os.chown(mate, MATE, MATE)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"], include_others_runs=True), dry_run=False)
    assert rep.ok, rep.to_dict()
    os.mkdir(logdir / "train")  # its owner's launcher makes the run folder again, empty
    os.chown(logdir / "train", NOBODY, NOBODY)
    outs = api.restore(str(logdir), run="train")
    assert [o.status for o in outs] == ["restored"], [(o.status, o.reason) for o in outs]
    assert not outs[0].findings, outs[0].reason
    assert mate.exists() and os.stat(mate).st_uid == MATE
