"""Review R19 F5: the restore's space check counted no blocks for a later name of a recorded link
group, as if it always became a link of its first name. When the first name stands already with
the original's bytes (a file the link is refused to, here another user's), it is left as it is
and every later name is a copy of its own: with two later names the check counted one copy where two are
written, past the commit point (ENOSPC half-way). Now a later name is free of blocks only while
its first name is free (this restore's own put-back). Root-acting: the first name is made again
by another user, with the original's bytes, mode and time (review R19 F1: never linked to)."""
import os
import shutil

import pytest

import tb_footprint_plugin as fp
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import restore as restore_mod
from tb_footprint_plugin.engine.context import FREE_SPACE_MARGIN
from conftest import copy_real

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a file to another user")
MALLORY = 4242

TRACE = "vm_25684.1795998065836083456.pt.trace.json"
ROUND = 64 << 10  # each file's blocks rounded up to this: far less than one more copy of the trace


def _reduced_triple(tmp_path):
    logdir = tmp_path / "ld"
    run = copy_real("torch/profiled", logdir / "torch")
    shutil.rmtree(run / "1795998068.7669468")
    for twin in ("twin1.pt.trace.json", "twin2.pt.trace.json"):
        os.link(run / TRACE, run / twin)
    os.utime(run, (os.path.getmtime(run / TRACE),) * 2)
    original = (run / TRACE).read_bytes()
    rep = fp.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok, [(o.run, o.status, o.reason) for o in rep.outcomes]
    files = next(m for m in api.operations(str(logdir)) if m["kind"] == "reduce")["files"]
    group = [f for f in files if f.get("inode")]
    first = next(f for f in group if not f.get("link_of"))
    assert len(group) == 3 and sum(1 for f in group if f.get("link_of") == first["path"]) == 2, group
    # room for every backup once, as the check counted before (later names none), not for two more copies
    counted = sum(-(-f["size"] // ROUND) * ROUND for f in files if not f.get("link_of"))
    return logdir, original, files, group, first, counted


def test_later_names_are_free_while_their_first_name_is(tmp_path, monkeypatch):
    logdir, _original, _files, group, first, counted = _reduced_triple(tmp_path)
    monkeypatch.setattr(restore_mod, "free_space", lambda path: counted + FREE_SPACE_MARGIN)
    outs = fp.restore(str(logdir), "torch")
    assert [o.status for o in outs] == ["restored"], [(o.status, o.reason) for o in outs]
    assert len({os.lstat(logdir / f["path"]).st_ino for f in group}) == 1


def test_later_names_count_when_their_first_name_stands(tmp_path, monkeypatch):
    logdir, original, files, group, first, counted = _reduced_triple(tmp_path)
    # another user's file at the first name, as the original: it stays, the two later names become copies
    theirs = logdir / first["path"]
    assert not theirs.exists()
    theirs.write_bytes(original)
    os.chmod(theirs, first["mode"])
    os.utime(theirs, ns=(first["mtime_ns"], first["mtime_ns"]))
    os.chown(theirs, MALLORY, MALLORY)
    monkeypatch.setattr(restore_mod, "free_space", lambda path: counted + FREE_SPACE_MARGIN)
    outs = fp.restore(str(logdir), "torch")
    assert [(o.status, o.code) for o in outs] == [("failed", Failure.NO_SPACE)], [(o.status, o.reason) for o in outs]
    assert os.stat(theirs).st_uid == MALLORY and not any((logdir / f["path"]).exists() for f in group if f is not first)
    assert api.restorable(str(logdir)), "the reduction is no longer restorable"

