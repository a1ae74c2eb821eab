"""A disk's unretire asks the one rule against a new run of the same name over what stands at the
run's path, as a bucket's does (``retire_rules.new_run_refusal`` over ``UnretireLayout.standing``
and ``retired_at``; issue #26). Before, ``DiskUnretire.refused`` looked at the run's folder itself
and refused anything in it. Its look is now the walk that follows no link (``standing.standing_at``):
a link at the run's path or in its folder is a name, never followed, and refuses, as a file there
does. Two cases change, each as a bucket has it: folders holding nothing (a bucket has no empty
folder; a disk's empty run folder was allowed already) and files that are the retired ones as they
were (copied back by hand: bytes, mode and mtime) no longer refuse: the rest is put back and the
run is whole. A copy that is not as it was (another mtime) still refuses."""
from __future__ import annotations

import os
import shutil

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine.retire_rules import new_run_words
from tb_footprint_plugin.storage.private import user_name


def _tree(root) -> dict:
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".tb-footprint"]
        for n in files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (f.read(), st.st_mode, st.st_mtime_ns)
    return out


@pytest.fixture
def retired(tmp_path):
    """(logdir, the run's files before, a copy of the run) with run ``b`` retired."""
    logdir = tmp_path / "logs"
    for run in ("a", "b"):
        with synth.EventWriter(str(logdir / run), timestamp=1_600_000_000) as w:
            for s in range(5):
                w.scalar("loss", s, 1.0 / (s + 1))
    (logdir / "b" / "notes.txt").write_text("lr 0.1\n")
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), ns=(1_600_000_000 * 10**9, 1_600_000_000 * 10**9))
    before = _tree(logdir)
    aside = tmp_path / "copy-of-b"
    shutil.copytree(logdir / "b", aside)  # copy2: bytes, mode and mtime
    rep = api.retire(str(logdir), api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    assert not (logdir / "b").exists()
    return logdir, before, aside


def _refused(logdir, outside=None, words=None):
    now = _tree(logdir)
    seen = sorted(os.listdir(outside)) if outside else None
    (o,) = api.restore(str(logdir), run="b")
    assert (o.status, o.code, o.reason) == (Outcome.FAILED, Failure.RESTORE_BLOCKED, words or new_run_words("b")), \
        o.to_dict()
    assert _tree(logdir) == now and [r["run"] for r in api.retired(str(logdir))] == ["b"]
    if outside:
        assert sorted(os.listdir(outside)) == seen  # never followed
    assert not api.unfinished(str(logdir))["unfinished_operations"]


def _restored(logdir, before):
    (o,) = api.restore(str(logdir), run="b")
    assert (o.status, o.code) == (Outcome.RESTORED, None), o.to_dict()
    assert _tree(logdir) == before and api.retired(str(logdir)) == []


def test_a_link_at_the_runs_path_refuses_never_followed(retired, tmp_path):
    logdir, _before, aside = retired
    os.symlink(aside, logdir / "b")  # the run's own files, as it was, behind a link
    # said as the link it is, with what to do (review R22 F5: retire_tree.folders_not_ours), before
    # the rule of something standing there
    _refused(logdir, aside, f"b is a symbolic link of {user_name(os.geteuid())}, made there since the retirement: "
             "never followed, nothing "
             "is put back through it; the run stays in the vault; remove that link, then restore again; nothing was "
             "changed")


def test_a_file_at_the_runs_path_refuses(retired):
    logdir, _before, _aside = retired
    (logdir / "b").write_text("not a run\n")
    _refused(logdir)


def test_a_link_in_the_runs_folder_refuses_never_followed(retired, tmp_path):
    logdir, _before, _aside = retired
    outside = tmp_path / "outside"
    outside.mkdir()
    (logdir / "b").mkdir()
    os.symlink(outside, logdir / "b" / "plugins")
    _refused(logdir, outside)


def test_an_empty_folder_at_the_runs_path_is_filled(retired):
    logdir, before, _aside = retired
    (logdir / "b").mkdir()
    _restored(logdir, before)


def test_folders_holding_nothing_are_filled(retired):
    """Refused before (the folder was not empty): a bucket has no such folder to refuse by."""
    logdir, before, _aside = retired
    (logdir / "b" / "plugins" / "profile").mkdir(parents=True)
    _restored(logdir, before)
    assert (logdir / "b" / "plugins" / "profile").is_dir()


def test_retired_files_copied_back_as_they_were_are_kept_and_the_rest_put_back(retired):
    """Refused before; a bucket's unretire takes an object holding the original as in place."""
    logdir, before, aside = retired
    (logdir / "b").mkdir()
    shutil.copy2(aside / "notes.txt", logdir / "b" / "notes.txt")
    _restored(logdir, before)


def test_a_retired_name_holding_its_bytes_at_another_time_refuses(retired):
    logdir, _before, aside = retired
    (logdir / "b").mkdir()
    shutil.copy(aside / "notes.txt", logdir / "b" / "notes.txt")  # its bytes, not its mtime
    _refused(logdir)
