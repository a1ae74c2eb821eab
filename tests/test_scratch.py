"""Scratch folders of killed processes are swept from where they were made, and only ours."""
import os
import subprocess
import sys
import tempfile

from tb_footprint_plugin.storage import scratch


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_system_root_is_the_system_temp_dir_whatever_use_root_said(tmp_path):
    """A bucket rewrite's local copy goes to the system temp dir even in a process that earlier
    pointed the scratch root at a local vault (a notebook reducing a local logdir, then a bucket),
    so the sweep of a later start looks where the killed process wrote."""
    before = scratch.current_root()
    try:
        scratch.use_root(str(tmp_path / "vault-tmp"))
        assert scratch.current_root() != tempfile.gettempdir()
        assert scratch.system_root() == tempfile.gettempdir()
    finally:
        scratch.use_root(None if before == tempfile.gettempdir() else before)


def test_sweep_of_the_system_temp_dir_removes_only_dead_scratch_of_ours():
    """The system temp dir is not ours (root owns it, others write to it): its sweep still removes
    our dead processes' scratch, but never a live one's, another user's, or a symlink."""
    root = scratch.system_root()
    dead = _dead_pid()
    ours = tempfile.mkdtemp(prefix=f"tbfp-bucket-p{dead}-", dir=root)
    live = scratch.make("bucket", root)
    link = os.path.join(root, f"tbfp-bucket-p{dead}-link{os.getpid()}")
    os.symlink(ours, link)
    theirs = tempfile.mkdtemp(prefix=f"tbfp-bucket-p{dead}-", dir=root)
    other_uid = 65534 if os.geteuid() == 0 else None
    if other_uid is not None:
        os.chown(theirs, other_uid, other_uid)
    try:
        removed = scratch.sweep(root)
        assert os.path.basename(ours) in removed and not os.path.exists(ours)
        assert os.path.isdir(live), "a live process's scratch was removed"
        assert os.path.islink(link), "a symlink was followed or removed"
        if other_uid is not None:
            assert os.path.isdir(theirs), "another user's folder was removed"
    finally:
        for p in (link,):
            if os.path.islink(p):
                os.unlink(p)
        for p in (ours, live, theirs):
            if os.path.isdir(p):
                os.rmdir(p)


def test_sweep_leaves_alone_scratch_made_in_another_pid_namespace():
    """Containers sharing /tmp under one uid see each other's pids as dead: a folder whose name
    says it was made in another pid namespace is never swept, however dead its pid looks here;
    one made in ours with a dead pid is, and a live maker's is kept."""
    root = scratch.system_root()
    dead = _dead_pid()
    own = scratch.pid_namespace()
    assert own > 0
    other = tempfile.mkdtemp(prefix=f"tbfp-bucket-p{dead}-n{own + 1}-", dir=root)
    mine_dead = tempfile.mkdtemp(prefix=f"tbfp-bucket-p{dead}-n{own}-", dir=root)
    live = scratch.make("bucket", root)
    assert f"-p{os.getpid()}-n{own}-" in os.path.basename(live)
    try:
        removed = scratch.sweep(root)
        assert os.path.isdir(other), "scratch of another pid namespace was swept"
        assert os.path.basename(other) not in removed
        assert os.path.basename(mine_dead) in removed and not os.path.exists(mine_dead)
        assert os.path.isdir(live)
    finally:
        for p in (other, mine_dead, live):
            if os.path.isdir(p):
                os.rmdir(p)
