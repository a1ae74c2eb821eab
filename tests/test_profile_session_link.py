"""A profile session holding a symbolic link: what the plan says is what the reduce does
(invariant 3), and the link is never followed (invariant 4).

Before (N6's item 6, /work/notes/r16/n6_item6_repro.py): with ``rel_link.xplane.pb -> vm.xplane.pb``
in one session, the archive plan said "1 session(s) removed; 1 kept" while the reduce deleted every
regular file of the "kept" session and left the link dangling; the scanner even counted the link
as a host ("rel_link", tests/test_scan_link_no_host.py). Now such a session is kept whole (none of
its files is removed, its folder stays) and the plan says so, naming the link."""
import hashlib
import os

import pytest

from conftest import copy_real
from tb_footprint_plugin import api

RUN = "jax/profiled"


def _logdir(tmp_path):
    """The jax fixture with a relative link in its older session; the session's path and the link's."""
    logdir = copy_real("jax", tmp_path / "L" / "jax").parent
    base = logdir / "jax" / "profiled" / "plugins" / "profile"
    older = sorted(base.iterdir())[0]
    link = older / "rel_link.xplane.pb"
    os.symlink("vm.xplane.pb", link)
    t = os.lstat(older / "vm.xplane.pb").st_mtime_ns
    os.utime(link, ns=(t, t), follow_symlinks=False)
    return logdir, older, link


def _snapshot(root):
    """Every entry under ``root``: a file's sha256, mtime_ns and mode, a link's target, a folder's mode."""
    snap = {}
    for dp, ds, fs in os.walk(root):
        for n in ds + fs:
            p = os.path.join(dp, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                snap[rel] = ("link", os.readlink(p))
            elif n in ds:
                snap[rel] = ("dir", st.st_mode)
            else:
                with open(p, "rb") as f:
                    snap[rel] = ("file", hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns, st.st_mode,
                                 st.st_size)
    return snap


@pytest.mark.parametrize("policy", ["archive", "keep-latest", "lossless"])
def test_a_session_holding_a_link_is_kept_whole_as_the_plan_says(tmp_path, policy):
    logdir, older, link = _logdir(tmp_path)
    run_dir = logdir / "jax" / "profiled"
    before = _snapshot(logdir)
    plan = api.plan(str(logdir), policy=policy, runs=[RUN], quiet_period=0)
    (rp,) = [r for r in plan.runs if r.run == RUN]
    session_rel = os.path.relpath(older, logdir)
    # nothing in the linked session is planned, and the plan names the link
    assert not [a for a in rp.actions if a.path == session_rel or a.path.startswith(session_rel + "/")]
    assert any("kept whole" in line and "rel_link.xplane.pb" in line for line in rp.fidelity), rp.fidelity
    said = " ".join(rp.fidelity)
    if policy == "archive":  # the other session goes, this one stays
        assert "profile: 1 session(s) removed" in said and "; 1 kept" in said, said
    else:  # keep-latest keeps the newer one and this older one, whole
        assert "profile: all 2 session(s) kept" in said, said
    deleted = {a.path for a in rp.actions if a.kind == "delete"}
    removed_dirs = {a.path for a in rp.actions if a.kind == "remove_dir"}
    assert deleted, "the policy reduces the other session"

    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, quiet_period=0, runs=[RUN])
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    after = {k: v for k, v in _snapshot(logdir).items() if not k.startswith(".tb-footprint")}
    gone = {k for k in before if k not in after}
    # exactly the planned files and folders went, nothing else changed
    assert {k for k in gone if before[k][0] == "file"} == deleted
    assert {k for k in gone if before[k][0] == "dir"} <= removed_dirs
    assert not any(before[k][0] == "link" for k in gone)
    assert all(after[k] == before[k] for k in after if before[k][0] != "dir")
    # the kept session is whole: its link still leads to its file, unchanged
    assert os.readlink(link) == "vm.xplane.pb" and os.path.exists(link)
    assert all(k in after for k in before if k.startswith(session_rel + "/"))
    # the plan's bytes are the bytes that went
    assert sum(a.bytes_before for a in rp.actions if a.kind == "delete") == sum(before[k][4] for k in gone
                                                                               if before[k][0] == "file")
    outs = api.restore(str(logdir), run=RUN)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    restored = {k: v for k, v in _snapshot(logdir).items() if not k.startswith(".tb-footprint")}
    assert {k: v for k, v in restored.items() if v[0] != "dir"} == {k: v for k, v in before.items()
                                                                    if v[0] != "dir"}
    assert set(restored) == set(before)
    assert run_dir.is_dir()


@pytest.mark.parametrize("name, target", [("latest", "{newer}"), ("latest.xplane.pb", "{newer}/vm.xplane.pb")])
@pytest.mark.parametrize("policy", ["archive", "keep-latest"])
def test_a_link_beside_the_sessions_keeps_them_all(tmp_path, policy, name, target):
    """A link in plugins/profile itself (``latest -> <session>``): xprof lists it as a session and
    it may lead to any of them. Before, archive planned every session's files and the profile and
    plugins folders removed; the reduce left both folders and the link dangling."""
    logdir = copy_real("jax", tmp_path / "L" / "jax").parent
    base = logdir / "jax" / "profiled" / "plugins" / "profile"
    newer = sorted(base.iterdir())[-1]
    link = base / name
    os.symlink(target.format(newer=newer.name), link)
    before = _snapshot(logdir)
    plan = api.plan(str(logdir), policy=policy, runs=[RUN], quiet_period=0)
    (rp,) = [r for r in plan.runs if r.run == RUN]
    profile_rel = os.path.relpath(base, logdir)
    assert not [a for a in rp.actions if a.path.startswith(profile_rel) or profile_rel.startswith(a.path)], \
        rp.actions
    assert any("2 sessions kept whole" in line and name in line for line in rp.fidelity), rp.fidelity
    api.reduce_logdir(str(logdir), policy=policy, dry_run=False, quiet_period=0, runs=[RUN])
    after = {k: v for k, v in _snapshot(logdir).items() if not k.startswith(".tb-footprint")}
    assert after == before and os.path.exists(link)
