"""The walk carries another user's uid (review R10 F8, O1's ask): a file or run folder owned by
another user than the scanner's has FileEntry.uid / RunFootprint.uid set to its lstat st_uid; the
scanner's own files leave it None (the shared None: memory flat). No syscall more than the walk's."""
from __future__ import annotations

import os

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.scan.scanner import scan

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def test_another_users_files_and_run_carry_its_uid_own_ones_none(tmp_path):
    logdir = tmp_path / "logs"
    for run in ("mine", "theirs"):
        with synth.EventWriter(str(logdir / run), timestamp=1_700_000_000) as w:
            w.scalar("loss", 1, 0.5)
        (logdir / run / "notes.txt").write_text("x")
    other = 4242
    theirs = logdir / "theirs"
    os.chown(theirs, other, other)
    for p in theirs.iterdir():
        os.chown(p, other, other, follow_symlinks=False)
    fp = scan(str(logdir), use_cache=False, write_cache=False)
    runs = {r.name: r for r in fp.runs}
    assert runs["theirs"].uid == other and runs["mine"].uid is None
    assert {f.path: f.uid for f in runs["theirs"].files} == {
        p: other for p in (f.path for f in runs["theirs"].files)} and runs["theirs"].files
    assert all(f.uid is None for f in runs["mine"].files)
    # the cache serves the event stats, never the owner: a second scan from it says the same
    scan(str(logdir))
    again = {r.name: r for r in scan(str(logdir)).runs}
    assert again["theirs"].uid == other and all(f.uid == other for f in again["theirs"].files)
    assert all(f.uid is None for f in again["mine"].files)
