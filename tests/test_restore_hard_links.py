"""Review R17 F4: a restore gives back the hard links between the files a reduction took (names
of one inode at its backup): the second name is linked to the first one put back, so the run
takes the disk it took before (``du``, each inode once), nlink and inode as before; a link that
cannot be made is a copy of its own, said so."""
import errno
import os
import shutil
import subprocess
import sys

import pytest

import tb_footprint_plugin as fp
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import faults
from conftest import REPO, copy_real

TRACE = "vm_25684.1795998065836083456.pt.trace.json"


def _du(path: str) -> int:
    """Allocated bytes under ``path``, each inode once, the state folder left out."""
    seen, n = set(), 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".tb-footprint"]
        for name in dirs + files + ["."]:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                n += st.st_blocks * 512
    return n


def _twins(tmp_path):
    logdir = tmp_path / "ld"
    run = copy_real("torch/profiled", logdir / "torch")
    shutil.rmtree(run / "1795998068.7669468")
    a, b = run / TRACE, run / "twin.pt.trace.json"
    os.link(a, b)
    os.utime(run, (os.path.getmtime(a),) * 2)
    return logdir, a, b


def _seen(*paths):
    out = []
    for p in paths:
        st = os.lstat(p)
        out.append((p.read_bytes(), st.st_mtime_ns, st.st_mode, st.st_nlink))
    return out


def _reduced(logdir, policy="archive"):
    rep = fp.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    assert rep.ok, [(o.run, o.status, o.reason) for o in rep.outcomes]
    return rep


@pytest.mark.parametrize("policy", ["archive", "lossless"])
def test_restore_gives_hard_links_back(tmp_path, policy):
    logdir, a, b = _twins(tmp_path)
    before, du = _seen(a, b), _du(str(logdir))
    _reduced(logdir, policy)
    assert not b.exists() or os.lstat(b).st_ino != os.lstat(a).st_ino  # the reduce took both names
    outs = fp.restore(str(logdir), "torch")
    assert [o.status for o in outs] == ["restored"], [(o.status, o.reason) for o in outs]
    assert os.lstat(a).st_ino == os.lstat(b).st_ino  # one inode, as before
    assert _seen(a, b) == before  # bytes, mtime, mode, nlink 2
    assert _du(str(logdir)) <= du  # the run takes the disk it took, not one more copy


def test_manifest_names_the_link_group(tmp_path):
    logdir, a, b = _twins(tmp_path)
    _reduced(logdir)
    m = next(m for m in api.operations(str(logdir)) if m["kind"] == "reduce")
    files = {f["path"]: f for f in m["files"]}
    first, second = files[f"torch/{TRACE}"], files["torch/twin.pt.trace.json"]
    later = second if second.get("link_of") else first
    earlier = first if later is second else second
    assert later["link_of"] == earlier["path"] and "link_of" not in earlier
    assert earlier["inode"] == later["inode"] and earlier["nlink"] == later["nlink"] == 2


def test_a_link_that_fails_is_a_copy_said_so(tmp_path, monkeypatch):
    logdir, a, b = _twins(tmp_path)
    before = _seen(a, b)
    _reduced(logdir)
    real_link = os.link

    def no_link(src, dst, *args, **kw):
        if "twin" in os.fsdecode(dst) or TRACE in os.fsdecode(dst):
            raise OSError(errno.EMLINK, os.strerror(errno.EMLINK))
        return real_link(src, dst, *args, **kw)

    monkeypatch.setattr(os, "link", no_link)
    outs = fp.restore(str(logdir), "torch")
    assert [o.status for o in outs] == ["restored"], [(o.status, o.reason) for o in outs]
    assert os.lstat(a).st_ino != os.lstat(b).st_ino
    assert [x[:3] for x in _seen(a, b)] == [x[:3] for x in before]  # bytes, mtime, mode: exact
    assert "hard link" in outs[0].reason and "copy of its own" in outs[0].reason
    assert {"code": str(Finding.HARD_LINKED), "path": "torch/twin.pt.trace.json"} in outs[0].findings \
        or {"code": str(Finding.HARD_LINKED), "path": f"torch/{TRACE}"} in outs[0].findings


_KILL_AFTER_ONE = """
import os, signal, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
a, b = sys.argv[2], sys.argv[3]
faults.arm("restore.file", lambda: (os.path.exists(a) or os.path.exists(b)) and os.kill(os.getpid(), signal.SIGKILL))
api.restore(sys.argv[1])
"""


def test_killed_between_first_name_and_link_is_finished_linked(tmp_path):
    logdir, a, b = _twins(tmp_path)
    before, du = _seen(a, b), _du(str(logdir))
    _reduced(logdir)
    # killed (SIGKILL) right after the first of the two names is back, before the other is linked to it
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL_AFTER_ONE, str(logdir), str(a), str(b)], env=env, timeout=300)
    assert p.returncode == -9
    assert a.exists() != b.exists()  # one name back, the other not yet
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"]
    assert os.lstat(a).st_ino == os.lstat(b).st_ino
    assert _seen(a, b) == before
    assert _du(str(logdir)) <= du


def test_a_twin_outside_the_run_is_said_not_rejoined(tmp_path):
    logdir = tmp_path / "ld"
    run = copy_real("torch/profiled", logdir / "torch")
    shutil.rmtree(run / "1795998068.7669468")
    os.link(run / TRACE, tmp_path / "snapshot.pt.trace.json")  # a `cp -al` beside the logdir
    os.utime(run, (os.path.getmtime(run / TRACE),) * 2)
    _reduced(logdir)
    outs = fp.restore(str(logdir), "torch")
    assert [o.status for o in outs] == ["restored"]
    assert "outside" in outs[0].reason and "not made again" in outs[0].reason
    assert (run / TRACE).read_bytes() == (tmp_path / "snapshot.pt.trace.json").read_bytes()


def test_names_not_linked_are_not_joined(tmp_path):
    """Two byte-identical files of their own stay two inodes (only recorded links are made)."""
    logdir = tmp_path / "ld"
    run = copy_real("torch/profiled", logdir / "torch")
    shutil.rmtree(run / "1795998068.7669468")
    shutil.copy2(run / TRACE, run / "copy.pt.trace.json")
    os.utime(run, (os.path.getmtime(run / TRACE),) * 2)
    _reduced(logdir)
    fp.restore(str(logdir), "torch")
    assert os.lstat(run / TRACE).st_ino != os.lstat(run / "copy.pt.trace.json").st_ino
    assert os.lstat(run / TRACE).st_nlink == 1


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


@pytest.mark.parametrize("policy", ["archive", "lossless"])
def test_a_rolled_back_reduce_gives_hard_links_back(tmp_path, policy):
    """A failure after every original was removed or replaced (before the commit): the rollback
    puts the two names back as one inode, as the restore does."""
    logdir, a, b = _twins(tmp_path)
    before, du = _seen(a, b), _du(str(logdir))
    faults.arm("reduce.swap", "raise")
    rep = fp.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    faults.disarm_all()
    assert [o.status for o in rep.outcomes if o.run == "torch"] == ["rolled_back"]
    assert os.lstat(a).st_ino == os.lstat(b).st_ino
    assert _seen(a, b) == before
    assert _du(str(logdir)) <= du


def test_names_in_two_runs_are_linked_again(tmp_path):
    """One inode with a name in each of two runs, the plan taking both: the run restored second
    links its name to the first one's, as before the reduce."""
    logdir = tmp_path / "ld"
    one = copy_real("torch/profiled", logdir / "one")
    shutil.rmtree(one / "1795998068.7669468")
    two = copy_real("torch/profiled", logdir / "two")
    shutil.rmtree(two / "1795998068.7669468")
    a, b = one / TRACE, two / TRACE
    os.unlink(b)
    os.link(a, b)
    for r in (one, two):
        os.utime(r, (os.path.getmtime(a),) * 2)
    before, du = _seen(a, b), _du(str(logdir))
    rep = _reduced(logdir)
    assert {o.run for o in rep.outcomes if o.status == "verified"} == {"one", "two"}
    assert not a.exists() and not b.exists()
    outs = fp.restore(str(logdir))  # every kept reduction, one run after the other
    assert all(o.status == "restored" for o in outs), [(o.run, o.status, o.reason) for o in outs]
    assert os.lstat(a).st_ino == os.lstat(b).st_ino
    assert _seen(a, b) == before
    assert _du(str(logdir)) <= du
    assert any("linked again" in (o.reason or "") for o in outs)
