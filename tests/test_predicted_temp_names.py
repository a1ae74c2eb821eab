"""A temporary name a teammate can predict is never a licence to remove what stands at it (review R28
F1, F2; R27 F3's class).

A reduce's stage records name every staged file's temporary (``.footprint-<op>-N.tmp``) before the
first is written, and a restore's temporaries carry one journaled token (``.footprint-restore-<token>-
<sha12>``): once one of them stands in a run folder others may read, the others' names are known. In a
folder a teammate may write (a team folder, with the sticky bit or without), that teammate can move the
user's own private file to such a name before the operation makes it. The rollback (F1) and a restore's
next start (F2) removed whatever stood there: the user's file, its only copy. Now a name the operation
did not make, or cannot tell for its own, is left where it is, and the operation goes on around it."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, copy_real
from helpers_runs import read_tree
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import transaction
from tb_footprint_plugin.engine.vault_base import restore_tmp_path
from tb_footprint_plugin.storage.paths import state_dir

SECRET = b"the user's private notes\n"


def _image_files(run: Path, n: int = 2) -> list:
    paths = []
    for i in range(n):
        with synth.EventWriter(str(run), timestamp=1795990000 + 1000 * i, index=i) as w:
            for s in range(30):
                w.scalar(f"loss{i}", s, 1.0 / (s + 1))  # a tag of its own each (no restart of the first)
                w.image(f"img{i}", s, synth.make_png(32, 32, seed=s + 100 * i), 32, 32)
            paths.append(w.path)
    old = time.time() - 7200
    for p in paths:
        os.utime(p, (old, old))
    return paths


def _secret(tmp_path: Path) -> Path:
    s = tmp_path / "elsewhere" / "secret.txt"  # another folder of the same disk the teammate may write
    s.parent.mkdir()
    s.write_bytes(SECRET)
    os.chmod(s, 0o600)
    return s


def test_a_file_moved_to_a_staged_name_not_yet_made_survives_the_rollback_in_a_sticky_team_folder(tmp_path,
                                                                                                monkeypatch):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    _image_files(run)
    before = read_tree(run)
    os.chmod(run, 0o1777)  # a team folder with the sticky bit: no one replaces the user's files there
    secret = _secret(tmp_path)
    real = transaction.take_over
    moved_to = []

    def predicted(tmp, rec):  # while file 0 is staged, file 1's name is known: the teammate fills it
        if tmp.endswith("-0.tmp") and not moved_to:
            moved_to.append(tmp[:-len("-0.tmp")] + "-1.tmp")
            os.rename(secret, moved_to[0])
        return real(tmp, rec)

    monkeypatch.setattr(transaction, "take_over", predicted)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).outcomes
    assert str(o.status) == "rolled_back", o.to_dict()
    # before: the rollback removed "its" staged name, the user's file at it
    assert open(moved_to[0], "rb").read() == SECRET
    assert {k: v for k, v in read_tree(run).items() if not k.startswith(".footprint-")} == before
    m = api.operation(str(logdir), o.op_id)
    assert os.path.basename(moved_to[0]) in m["reason"], m["reason"]  # named where the user looks


_KILLED_RESTORE = """
import sys
from tb_footprint_plugin import api
api.restore(sys.argv[1])
"""


def test_a_file_moved_to_a_restores_temporary_name_survives_its_next_start(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    (path,) = _image_files(run, 1)
    original = open(path, "rb").read()
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).ok
    os.chmod(run, 0o777)  # a team folder without the sticky bit
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS="restore.dirs=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILLED_RESTORE, str(logdir)], env=env, timeout=300)
    assert p.returncode == -9, "the failpoint should have killed the restore"
    # the teammate who saw one of the restore's temporaries knows its token: a name for each backup
    begins = [json.loads(line.splitlines()[0]) for line in
              (Path(state_dir(str(logdir))) / "journal").glob("*.jsonl") for line in [line.read_text()]]
    (begin,) = [b for b in begins if b.get("kind") == "restore"]
    of_op = api.operation(str(logdir), begin["of_op"])
    (f,) = [f for f in of_op["files"] if f["path"] == os.path.relpath(path, logdir)]
    name = restore_tmp_path(str(run), f["sha256"], begin["tmp_token"])
    os.rename(_secret(tmp_path), name)
    (rec,) = api.recover_logdir(str(logdir))
    # before: the start removed every regular file at a name the journaled token gives
    assert open(name, "rb").read() == SECRET
    assert os.path.relpath(name, logdir) in rec.detail, rec  # named where the user reads it
    # and the restore finished around it, under fresh names
    assert open(path, "rb").read() == original


def test_a_leftover_at_a_temporary_name_is_set_aside_not_removed_where_others_may_write(tmp_path):
    """``files.create_new`` (the vault's and a copy's temporaries) and salvage's ``clear_own_temp`` took a
    regular file of the user's at their name for a crashed attempt's and removed it: in a folder others may
    write it may be the user's own file a teammate moved there (the class of F1 and F2). There it is set
    aside now (renamed, kept); in a folder only the user writes it is removed as before."""
    from tb_footprint_plugin.storage.files import create_new

    for mode, kept in ((0o777, True), (0o755, False)):
        d = tmp_path / f"folder-{mode:o}"
        d.mkdir()
        os.chmod(d, mode)
        name = d / ".footprint-tmp"
        name.write_bytes(SECRET)
        os.close(create_new(str(name)))
        assert name.read_bytes() == b""  # the temporary, made anew
        others = [p.read_bytes() for p in d.iterdir() if p != name]
        assert others == ([SECRET] if kept else []), (mode, others)


def test_a_file_moved_to_a_staged_name_survives_a_state_folder_moved_aside(tmp_path, monkeypatch):
    """Review R28 F4: in a logdir without the sticky bit a teammate may also rename the state folder aside
    mid-reduce; the reduce then cannot journal and undid its stage records' temporaries by name
    (``reduce_journal.journal_gone``), the user's own file moved to a predicted one among them. Now it
    removes only its stage's own files (the one rule of every rollback) and names the one it leaves."""
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    _image_files(run)
    os.chmod(run, 0o777)
    secret = _secret(tmp_path)
    real = transaction.take_over
    moved_to = []

    def predicted(tmp, rec):
        if tmp.endswith("-0.tmp") and not moved_to:
            moved_to.append(tmp[:-len("-0.tmp")] + "-1.tmp")
            os.rename(secret, moved_to[0])
            os.rename(logdir / ".tb-footprint", logdir / ".hidden")  # the state folder, aside
            os.mkdir(logdir / ".tb-footprint")
        return real(tmp, rec)

    monkeypatch.setattr(transaction, "take_over", predicted)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).outcomes
    assert str(o.status) == "rolled_back", o.to_dict()
    # before: unlinked by name with every stage record's temporary
    assert open(moved_to[0], "rb").read() == SECRET
    assert os.path.relpath(moved_to[0], logdir) in o.reason, o.reason


def test_a_private_folder_moved_to_a_removed_folders_path_is_not_opened_by_the_restore(tmp_path):
    """Review R28 F5: a restore gave any 0700 folder at a path the reduce removed the recorded mode and group,
    taking it for a killed attempt's own; a teammate could rename the user's private folder there (a team
    folder) and read it afterwards. Now only where no one else could have put it; here it stays private,
    and the restore names it."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).ok
    assert not (logdir / "plugins").exists()
    os.chmod(logdir, 0o777)  # the run's folder, a team's
    private = logdir / "private"
    private.mkdir()
    os.chmod(private, 0o700)
    (private / "notes.txt").write_bytes(SECRET)
    os.rename(private, logdir / "plugins")  # the teammate's move, to the path the reduce removed
    (o,) = api.restore(str(logdir))
    # before: drwxr-xr-x (the recorded mode), the notes readable by the group and others
    assert stat.S_IMODE(os.lstat(logdir / "plugins").st_mode) == 0o700, o.to_dict()
    assert "plugins" in o.reason or "plugins" in str(o.to_dict()), o.to_dict()
