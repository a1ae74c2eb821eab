"""Root reduces and restores a logdir owned by another user: every file and folder comes back
with its owner (review R14 F5). Before, the reduce's rewritten event file, every restored file
and every re-made folder became root:root: the user could no longer write their own files nor
add to their own session folders. The owner is recorded where the mode and mtime are (backup,
manifest and rmdir records) and given back with ``fchown`` when the process is root."""
import os

import pytest

from conftest import copy_real
from tb_footprint_plugin import api

pytestmark = [pytest.mark.usefixtures("disarm_faults"),
              pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a file to another user")]
NOBODY = 65534


def _owners(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.split(os.sep)[0] == ".tb-footprint":
                continue
            st = os.lstat(p)
            out[rel] = (st.st_uid, st.st_gid)
    return out


def test_root_gives_back_the_owner_of_reduced_and_restored_files_and_folders(tmp_path):
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.chown(os.path.join(d, n), NOBODY, NOBODY, follow_symlinks=False)
    before = _owners(logdir)
    assert set(before.values()) == {(NOBODY, NOBODY)}
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"],
                            include_others_runs=True)
    assert rep.ok and [o.run for o in rep.outcomes] == ["tf/summary_mix"], [o.to_dict() for o in rep.outcomes]
    # the rewritten event file, renamed into the original's place, is still the user's
    reduced = _owners(logdir)
    assert {k: v for k, v in reduced.items() if v != (NOBODY, NOBODY)} == {}
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    assert {(f["uid"], f["gid"]) for f in m["files"]} == {(NOBODY, NOBODY)}
    assert m["removed_dirs"] and {(d["uid"], d["gid"]) for d in m["removed_dirs"]} == {(NOBODY, NOBODY)}
    outs = api.restore(str(logdir), run="tf/summary_mix")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    after = _owners(logdir)
    assert {k: v for k, v in after.items() if v != before.get(k)} == {}
    assert after.keys() == before.keys()


def test_no_owner_is_given_when_not_root(tmp_path, monkeypatch):
    from tb_footprint_plugin.storage import files

    p = tmp_path / "f"
    p.write_bytes(b"x")
    calls = []
    monkeypatch.setattr(os, "fchown", lambda *a: calls.append(a))
    fd = os.open(p, os.O_RDONLY)
    try:
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        files.give_owner(fd, (NOBODY, NOBODY))
        assert calls == []
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        files.give_owner(fd, (NOBODY, NOBODY))
        assert calls == [(fd, NOBODY, NOBODY)]
    finally:
        os.close(fd)
    # records are untrusted: only two plausible ids are an owner
    assert files.recorded_owner({"uid": 1, "gid": 2}) == (1, 2)
    for bad in ({}, {"uid": 1}, {"uid": True, "gid": 0}, {"uid": -1, "gid": 0}, {"uid": "0", "gid": 0},
                {"uid": 1 << 40, "gid": 0}, None):
        assert files.recorded_owner(bad) is None
