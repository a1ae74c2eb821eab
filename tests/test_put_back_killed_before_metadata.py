"""A copying put-back killed after its last byte and before its mode, mtime and owner (review R19
F1, F1b): on a folder that declares no atomic rename a put-back's verified temporary is copied to
the path (``placement.copy_over``: ``files.copy_new`` writes the bytes into a new 0600 file, then
``finish_new_file`` sets owner, mode and mtime). A SIGKILL between the two leaves the recorded
bytes at the path with a new file's mode, time and owner. The next start must not take that for a
finished put-back on its content alone: where a ``copying`` record names the path, the file gets
its recorded mode, mtime (ns) and owner (``placement.finish_copied``). Before, a restore was
declared "restored byte for byte" with mode 0600 and the kill's mtime for good, a rollback left
them too, and an unretire failed at every start ("modes differ"). Each case is a child process
SIGKILLed inside ``copy_over``'s ``finish_new_file``, then ``recover_logdir`` in this process on
the same folder."""
from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import textwrap

import pytest

from conftest import copy_real
from test_late_records import ENV, append_by_path, image_run
from test_put_back_strategy import NO_RENAME, _spy, leftovers
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import retire_tree, salvage

pytestmark = pytest.mark.usefixtures("disarm_faults")

ROOT = os.geteuid() == 0
NOBODY = 65534

CHILD = textwrap.dedent("""
    import dataclasses, os, signal, sys
    from tb_footprint_plugin import api
    from tb_footprint_plugin.engine import faults, placement, retire_tree, salvage, swap, transaction
    from tb_footprint_plugin.storage import files
    from tb_footprint_plugin.storage.store_posix import PosixStore

    caps = dataclasses.replace(PosixStore(os.sep).capabilities, rename_atomic=False, hard_link=False)
    for mod in (transaction, swap, salvage, retire_tree):
        mod.folder_capabilities = lambda: caps
    logdir, what, marker, out = sys.argv[1:5]
    state = {"armed": what != "rollback", "in": []}
    real_finish, real_over = files.finish_new_file, placement.copy_over

    def over(tmp, final, *a, **kw):
        state["in"].append(final)
        try:
            return real_over(tmp, final, *a, **kw)
        finally:
            state["in"].pop()

    def finish(fo, *a, **kw):
        if state["armed"] and state["in"] and marker in os.path.basename(state["in"][-1]):
            # every byte is at the path; its owner, mode and mtime are not set yet
            with open(out, "w") as f:
                f.write(state["in"][-1])
            os.kill(os.getpid(), signal.SIGKILL)
        return real_finish(fo, *a, **kw)

    placement.copy_over = over
    files.finish_new_file = finish
    if what == "rollback":
        def fail():
            state["armed"] = True  # the reduce's own copies are whole; the rollback's first is killed
            raise RuntimeError("a failure after the swap")
        faults.arm("reduce.swap", fail)
        api.reduce_logdir(logdir, policy="archive", dry_run=False, verify_backends=("python",),
                          include_others_runs=True)
    elif what == "unretire":
        api.restore(logdir, op=sys.argv[5])
    else:
        api.restore(logdir)
    sys.exit(3)  # not killed
""")


def snapshot(root) -> dict:
    """Every file's (sha256, mtime_ns, mode, uid, gid) and every folder's (mtime_ns, mode), outside
    the state folder."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".tb-footprint")]
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            meta = (st.st_mtime_ns, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            if stat.S_ISDIR(st.st_mode):
                out[os.path.relpath(p, root)] = ("dir",) + meta
            else:
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = (hashlib.sha256(f.read()).hexdigest(),) + meta
    return out


def _give_all(root, uid=NOBODY) -> None:
    """Root's test on a user's logdir: the owner is given back too (where root)."""
    if not ROOT:
        return
    for d, dirs, files in os.walk(root):
        os.chown(d, uid, uid)
        for n in files:
            os.chown(os.path.join(d, n), uid, uid, follow_symlinks=False)


def _killed_in_the_window(tmp_path, logdir, what: str, marker: str = "", *extra) -> str:
    """The child, SIGKILLed with a put-back's bytes whole at their path and nothing else set;
    returns that path (its mode is a new file's, 0600)."""
    out = tmp_path / "killed_at"
    p = subprocess.run([sys.executable, "-c", CHILD, str(logdir), what, marker, str(out), *extra],
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-3000:])
    path = out.read_text()
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600  # the window: bytes in place, no mode yet
    return path


def _next_start(monkeypatch, logdir) -> list:
    """``recover_logdir`` on the same folder, declaring no rename (``test_put_back_strategy._spy``)."""
    _spy(monkeypatch)
    for mod in (salvage, retire_tree):
        monkeypatch.setattr(mod, "folder_capabilities", lambda: NO_RENAME)
    return api.recover_logdir(str(logdir))


def test_a_restore_killed_before_a_copy_set_mode_and_mtime_gives_them_back(tmp_path, monkeypatch):
    logdir = copy_real("tf", tmp_path / "logdir")
    _give_all(logdir)
    before = snapshot(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",),
                            include_others_runs=True)
    assert rep.ok and all(o.status == Outcome.VERIFIED for o in rep.outcomes if o.op_id)
    path = _killed_in_the_window(tmp_path, logdir, "restore")
    rel = os.path.relpath(path, logdir)
    assert snapshot(logdir)[rel][0] == before[rel][0] and before[rel][2] != 0o600  # the bytes, not the mode
    rec = _next_start(monkeypatch, logdir)
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]
    assert snapshot(logdir)[rel] == before[rel]  # bytes, mtime_ns, mode, owner as recorded
    assert all(o.status == Outcome.RESTORED for o in api.restore(str(logdir)))  # the runs not come to
    assert snapshot(logdir) == before
    assert not leftovers(logdir)
    assert not api.unfinished(str(logdir))["unfinished_operations"]


def test_a_rollback_killed_before_a_copy_set_mode_and_mtime_gives_them_back(tmp_path, monkeypatch):
    logdir = copy_real("tf", tmp_path / "logdir")
    _give_all(logdir)
    before = snapshot(logdir)
    path = _killed_in_the_window(tmp_path, logdir, "rollback")
    rel = os.path.relpath(path, logdir)
    assert snapshot(logdir)[rel][0] == before[rel][0] and before[rel][2] != 0o600
    rec = _next_start(monkeypatch, logdir)
    assert [r.action for r in rec] == ["rolled_back"], [vars(r) for r in rec]
    assert all(m["outcome"] == Outcome.ROLLED_BACK for m in api.operations(logdir) if m.get("kind") == "reduce")
    assert snapshot(logdir) == before
    assert not leftovers(logdir)
    assert not api.unfinished(str(logdir))["unfinished_operations"]


def test_an_unretire_killed_before_a_copy_set_mode_and_mtime_is_finished(tmp_path, monkeypatch):
    logdir, run = copy_real("tf/keras_profiled", tmp_path / "logdir"), "train"
    _give_all(logdir)
    before = snapshot(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=[run], include_others_runs=True), dry_run=False)
    assert rep.ok, rep.to_dict()
    path = _killed_in_the_window(tmp_path, logdir, "unretire", "", rep.outcomes[0].op_id)
    assert os.path.relpath(path, logdir).startswith(run + os.sep)
    rec = _next_start(monkeypatch, logdir)
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]  # before: failed, modes differ
    assert snapshot(logdir) == before
    assert not leftovers(logdir)
    assert not api.unfinished(str(logdir))["unfinished_operations"]


@pytest.mark.skipif(not ROOT, reason="only root gives a file to another user")
def test_late_records_killed_before_their_copy_set_the_owner_are_the_users(tmp_path, monkeypatch):
    """The salvage file's own rule (0600, a new mtime, the recorded owner of the file it comes
    from): a kill before ``finish_new_file`` left it root's, and the next attempt reused it."""
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    _give_all(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",),
                            include_others_runs=True)
    assert rep.ok and rep.outcomes[0].status == Outcome.VERIFIED, [o.to_dict() for o in rep.outcomes]
    append_by_path(path, 1000)  # the user's resumed job appends to the reduced file
    killed = _killed_in_the_window(tmp_path, logdir, "restore", ".salvaged-")
    assert os.lstat(killed).st_uid == 0  # the window: the records there, root's
    rec = _next_start(monkeypatch, logdir)
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]
    (salvaged,) = [p for p in path.parent.iterdir() if ".salvaged-" in p.name]
    assert str(salvaged) == killed
    assert (salvaged.stat().st_uid, salvaged.stat().st_gid) == (NOBODY, NOBODY)
    assert (path.stat().st_uid, path.stat().st_gid) == (NOBODY, NOBODY)
    # root in the user's folder (the user may write it) cannot tell a file at its temporaries' names for
    # its own (review R28 F2: the user may have moved a file of theirs there): left, and the start names it
    left = leftovers(logdir)
    assert len(left) <= 1 and all(os.path.relpath(p, logdir) in rec[0].detail for p in left), (left, rec[0].detail)
