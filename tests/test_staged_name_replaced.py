"""A file put at a name this process made in a run's folder is never given an owner or bits unless it is
still the file this process put there (review R27 F1, HIGH by the rubric: a change outside the logdir).

O_NOFOLLOW stops no hard link. In a run folder another user may write (a team folder, or the run's own
folder when root reduces a user's run), that user can rename a hard link to a file outside the logdir
over a reduce's staged name after its checks: ``take_over`` then ``fchmod``-ed it (as root also
``fchown``-ed it to the run's owner). The same after an unretire's rename, before its owner is given
back. The races are made deterministic here by doing the rename at the step's door."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import retire_tree, swap, transaction

from conftest import REPO, copy_real, user_files
from helpers_runs import read_tree
from test_staged_private_and_group import _image_run


def _victim(tmp_path, mode: int = 0o666) -> str:
    v = tmp_path / "outside" / "victim.txt"
    v.parent.mkdir()
    v.write_bytes(b"not the logdir's\n")
    os.chmod(v, mode)
    return str(v)


def test_a_link_renamed_over_the_staged_name_is_not_touched_and_the_run_rolls_back(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    os.chmod(path, 0o640)
    victim = _victim(tmp_path)
    before = read_tree(logdir)
    real = transaction.take_over

    def swapped(tmp, rec):  # the teammate's rename, between the stage checks and the take-over
        os.link(victim, tmp + ".x")
        os.rename(tmp + ".x", tmp)
        real(tmp, rec)

    monkeypatch.setattr(transaction, "take_over", swapped)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).outcomes
    assert (str(o.status), o.code) == ("rolled_back", Failure.REFUSED), o.to_dict()
    assert "not the file this reduce staged there" in o.reason, o.reason
    # before: 0o640, the original's bits given to the file outside the logdir
    assert stat.S_IMODE(os.lstat(victim).st_mode) == 0o666
    assert open(victim, "rb").read() == b"not the logdir's\n"
    # the run as it was: the original in place; the link put at the staged name is not this reduce's
    # file, so the rollback leaves it where it was put (named in the reason), as any file not its own
    run_files = {k: v for k, v in read_tree(logdir).items() if not k.startswith(".tb-footprint")}
    left = {k: v for k, v in run_files.items() if os.path.basename(k).startswith(".footprint-")}
    assert list(left.values()) == [b"not the logdir's\n"] and os.path.basename(next(iter(left))) in o.reason
    assert {k: v for k, v in run_files.items() if k not in left} == \
        {k: v for k, v in before.items() if not k.startswith(".tb-footprint")}


def test_another_users_file_put_at_the_staged_name_is_not_taken_over(tmp_path, monkeypatch):
    assert os.geteuid() == 0, "chowns a file to another uid: run as root (CI does)"
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    real = transaction.take_over

    def planted(tmp, rec):  # the same bytes, a file of another user's (no link)
        data = open(tmp, "rb").read()
        os.unlink(tmp)
        with open(tmp, "xb") as f:
            f.write(data)
        os.chown(tmp, 54321, 54321)
        real(tmp, rec)

    monkeypatch.setattr(transaction, "take_over", planted)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).outcomes
    assert (str(o.status), o.code) == ("rolled_back", Failure.REFUSED), o.to_dict()
    assert os.path.getsize(path) > 0


def test_an_unretire_gives_no_owner_to_a_link_renamed_over_the_file_it_put_back(tmp_path, monkeypatch):
    assert os.geteuid() == 0, "gives owners back as root: run as root (CI does)"
    logdir = tmp_path / "logdir"
    with synth.EventWriter(str(logdir / "run")) as w:
        w.scalar("loss", 0, 1.0)
    for d, dirs, names in os.walk(logdir / "run"):
        for n in dirs + names:
            os.chown(os.path.join(d, n), 54321, 54321)
    os.chown(logdir / "run", 54321, 54321)
    victim = _victim(tmp_path)
    assert api.retire(str(logdir), api.retire_rule(runs=["run"], include_others_runs=True), dry_run=False,
                      quiet_period=0).ok
    real = retire_tree._move_new

    def swapped(src, dst, f, stored, dir_fd=None):  # the folder's owner, right after the move
        real(src, dst, f, stored, dir_fd)
        name = os.path.basename(dst)
        os.link(victim, name + ".x", dst_dir_fd=dir_fd)
        os.rename(name + ".x", name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    monkeypatch.setattr(retire_tree, "_move_new", swapped)
    (o,) = api.restore(str(logdir), run="run")
    assert str(o.status) == "failed", o.to_dict()  # the tree it put back is not the retired one: said
    st = os.lstat(victim)
    # before: root gave the file outside the logdir to uid 54321
    assert (st.st_uid, st.st_gid) == (0, 0), (st.st_uid, st.st_gid)


def test_a_file_put_at_the_staged_name_during_the_verification_is_never_swapped_in(tmp_path, monkeypatch):
    """The swap half: the staged file taken over, then verified (seconds) by path; a file of another
    user's with the same bytes put at its name meanwhile would be renamed into the run, that user's,
    who could write into the reduced file afterwards unseen."""
    assert os.geteuid() == 0, "chowns a file to another uid: run as root (CI does)"
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    before = open(path, "rb").read()
    real = transaction.apply_swap

    def planted(ctx, rp, journal, staged, *a, **k):
        for s in staged:
            tmp = ctx.abs(s["tmp"])
            data = open(tmp, "rb").read()
            os.unlink(tmp)
            with open(tmp, "xb") as f:
                f.write(data)
            os.chown(tmp, 54321, 54321)
        return real(ctx, rp, journal, staged, *a, **k)

    monkeypatch.setattr(transaction, "apply_swap", planted)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).outcomes
    assert (str(o.status), o.code) == ("rolled_back", Failure.REFUSED), o.to_dict()
    assert open(path, "rb").read() == before and os.lstat(path).st_uid == 0


def test_a_users_own_file_moved_over_the_staged_name_is_neither_taken_over_nor_removed(tmp_path, monkeypatch):
    """Review R27 F3: a teammate who may write both folders moves the user's own private file (0600, one
    name: every property a staged file has) over the staged name. It was given the original's group and
    bits (the teammate could read it), and the rollback then removed it: its only copy. Now only the
    file this process made there is taken over or removed; the other stays where it was put, intact."""
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    os.chmod(path, 0o640)
    secret = tmp_path / "logdir" / "notes" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"the user's private notes\n")
    os.chmod(secret, 0o600)
    real = transaction.take_over
    moved_to = []

    def moved(tmp, rec):
        os.rename(secret, tmp)
        moved_to.append(tmp)
        return real(tmp, rec)

    monkeypatch.setattr(transaction, "take_over", moved)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).outcomes
    assert (str(o.status), o.code) == ("rolled_back", Failure.REFUSED), o.to_dict()
    (where,) = moved_to
    # before: mode 0o640 given to it, then removed by the rollback
    assert open(where, "rb").read() == b"the user's private notes\n"
    assert stat.S_IMODE(os.lstat(where).st_mode) == 0o600
    assert os.path.basename(where) in o.reason, o.reason


_KILLED_IN_THE_STAGE = """
import os, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import transaction

def killed(tmp, rec):  # the stage wrote its file, then the process died before recording its inode
    open(sys.argv[2], "w").write(tmp)
    os.kill(os.getpid(), 9)

transaction.take_over = killed
api.reduce_logdir(sys.argv[1], policy="archive", dry_run=False, verify_backends=("python",))
"""


def _killed_in_the_stage(tmp_path, logdir) -> str:
    where = tmp_path / "staged-at"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILLED_IN_THE_STAGE, str(logdir), str(where)], env=env, timeout=300)
    assert p.returncode == -9, "the stand-in of take_over should have killed the process"
    tmp = where.read_text()
    assert os.path.getsize(tmp) > 0  # the stage's own file, written whole, unrecorded
    return tmp


def test_a_start_after_a_kill_leaves_a_file_moved_over_an_unrecorded_staged_name(tmp_path):
    """Review R27 F3's start half: killed after its stage made its file and before it recorded the file's
    inode, a reduce's next start knew no file there but by its name, and removed whatever stood at it.
    In a folder others may write, a teammate could have moved the user's own private file there
    meanwhile: it was removed, its only copy. Now the start removes a file it cannot tell for its own
    only where no one else could have put it; here it stays, intact, and the rollback names it."""
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    before = open(path, "rb").read()
    os.chmod(logdir / "run", 0o777)  # a team folder without the sticky bit
    tmp = _killed_in_the_stage(tmp_path, logdir)
    secret = logdir / "notes" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"the user's private notes\n")
    os.chmod(secret, 0o600)
    os.unlink(tmp)  # the teammate, who may write both folders
    os.rename(secret, tmp)
    api.recover_logdir(str(logdir))
    # before: removed by the start's rollback
    assert open(tmp, "rb").read() == b"the user's private notes\n"
    assert open(path, "rb").read() == before
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    assert m["outcome"] == "rolled_back" and os.path.relpath(tmp, logdir) in m["reason"], m


def test_a_start_after_a_kill_removes_its_unrecorded_staged_file_where_only_the_user_writes(tmp_path):
    """The other side of the rule: in a run folder only the user may write, the file at an unrecorded
    staged name can only be the stage's own, and the start removes it as it always did."""
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    before = read_tree(logdir / "run")
    os.chmod(logdir / "run", 0o755)
    tmp = _killed_in_the_stage(tmp_path, logdir)
    api.recover_logdir(str(logdir))
    assert not os.path.lexists(tmp)
    assert read_tree(logdir / "run") == before and os.path.getsize(path) > 0


def test_a_file_moved_over_a_dropped_originals_name_during_the_swap_is_not_removed(tmp_path, monkeypatch):
    """Review R27 (F3's class, in the swap): a dropped original's name was unlinked by name after the
    swap's look found its bytes the backup's; a teammate who may write the run's folder could rename
    the user's other file over it in between, and the swap removed that file, never backed up. Now a
    name goes only while it holds the file the look found. The race is made deterministic by the move
    right after the look."""
    probe = copy_real("viewed/jax_profiled", tmp_path / "probe")
    before = user_files(probe)
    assert api.reduce_logdir(str(probe), policy="archive", dry_run=False, verify_backends=("python",)).ok
    dropped = sorted(k for k in set(before) - set(user_files(probe)) if k.endswith("vm.xplane.pb"))
    assert dropped, "the fixture's archive reduce drops files"
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    secret = tmp_path / "elsewhere" / "secret.txt"  # in a folder of the same disk (a fresh file in the
    secret.parent.mkdir()                              # run would make it a run being written)
    secret.write_bytes(b"the user's other file\n")
    target = logdir / dropped[0]
    real = swap.holds_original

    def looked(store, key, f, *a, **k):
        got = real(store, key, f, *a, **k)
        if got and key.endswith(dropped[0]) and secret.exists():
            os.rename(secret, target)  # the teammate's move, right after the look
        return got

    monkeypatch.setattr(swap, "holds_original", looked)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert not secret.exists(), "the move happened"
    # before: unlinked by the swap, its only copy
    assert target.read_bytes() == b"the user's other file\n", rep.outcomes


def test_a_file_moved_over_a_rewritten_originals_name_during_the_swap_is_not_replaced(tmp_path, monkeypatch):
    """Review R28 F3: the staged rewrite was renamed onto its original's name, replacing whatever stood
    there by then; a teammate's rename of the user's other file over that name between the swap's look
    and its rename destroyed that file (never backed up), and the run was said verified. Now the staged
    file is exchanged with the name and only the original the look found is removed: another file that
    comes out is put back at once, and the run is refused and rolled back. The move is made right after
    the look, as in the dropped-original case."""
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"the user's other file\n")
    real = swap.holds_original
    name = os.path.relpath(path, logdir)

    def looked(store, key, f, *a, **k):
        got = real(store, key, f, *a, **k)
        if got and key.endswith(name) and f.get("action") and secret.exists():
            os.rename(secret, path)  # the teammate's move, right after the look at the original
        return got

    monkeypatch.setattr(swap, "holds_original", looked)
    (o,) = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",)).outcomes
    assert not secret.exists(), "the move happened"
    # before: replaced by the rename, the run said verified
    kept = [p for p in read_tree(tmp_path).values() if p == b"the user's other file\n"]
    assert kept, o.to_dict()
    assert (str(o.status), o.code) == ("rolled_back", Failure.REFUSED), o.to_dict()
    # the reduce's own staged file goes with the rollback, though the two exchanges moved its change time
    assert not [n for n in os.listdir(logdir / "run") if n.startswith(".footprint-")]


_KILLED_IN_THE_EXCHANGE = """
import os, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import swap

real = swap.unlink_if_same

def killed(path, made, dir_fd=None):  # the exchange made, the original not yet removed from the staged name
    if os.path.basename(path).startswith(".footprint-"):
        os.kill(os.getpid(), 9)
    return real(path, made, dir_fd=dir_fd)

swap.unlink_if_same = killed
api.reduce_logdir(sys.argv[1], policy="archive", dry_run=False, verify_backends=("python",))
"""


def test_a_kill_between_the_exchange_and_its_unlink_is_finished_by_the_next_start(tmp_path):
    """The exchange's window: the staged file in its place, the original at the staged name. The next
    start finishes the swap (the original's bytes are the backup's) and leaves nothing at the staged
    name, rather than taking that original for a file put there and rolling the run back."""
    logdir = tmp_path / "logdir"
    path = _image_run(logdir / "run")
    size = os.path.getsize(path)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILLED_IN_THE_EXCHANGE, str(logdir)], env=env, timeout=300)
    assert p.returncode == -9, "the stand-in should have killed the process"
    assert [n for n in os.listdir(logdir / "run") if n.startswith(".footprint-")]  # the original, there
    api.recover_logdir(str(logdir))
    assert not [n for n in os.listdir(logdir / "run") if n.startswith(".footprint-")]
    assert os.path.getsize(path) < size
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    assert m["outcome"] == "verified", m
