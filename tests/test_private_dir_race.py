"""Root makes a state subfolder in the very folder it checked (review R15 F4, task N6 item 5).
``ensure_private_dir`` checked each folder by path and then made the next one by path, and
``scratch.make`` checked its root and then ran ``mkdtemp`` by path: a stranger who can write the
logdir swapping the state folder for their own (or for a link to it) between the check and the
mkdir got root's ``tmp/`` or scratch folder made inside their folder. Each folder is now made with
``mkdir(dir_fd=)`` of its checked parent and opened ``O_NOFOLLOW | O_DIRECTORY`` relative to it,
then judged by ``fstat``. The swaps are planted from a wrapper of ``os.mkdir``: the instant
between the check and the mkdir, or between the mkdir and the open."""
import os

import pytest

from tb_footprint_plugin.storage import private, scratch

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the race is root's: others cannot write a stranger's folder")
NOBODY = 65534


@pytest.fixture
def shared(tmp_path):
    """A logdir others may write (sticky or not: the stranger renames their own folder in), our
    state folder in it, and a stranger's world-writable folder holding a ``tmp`` of theirs."""
    logdir = tmp_path / "logdir"
    logdir.mkdir(mode=0o777)
    os.chmod(logdir, 0o777)
    state = logdir / ".tb-footprint"
    state.mkdir(mode=0o700)
    stranger = logdir / "stranger"
    (stranger / "tmp").mkdir(parents=True)
    for p in (stranger, stranger / "tmp"):
        os.chmod(p, 0o777)
        os.chown(p, NOBODY, NOBODY)
    return logdir, state, stranger


def _strangers_entries(folder):
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, ds, fs in os.walk(folder) for n in ds + fs)


def _swap_at(monkeypatch, when, swap):
    """Run ``swap`` once, right before the mkdir whose name ``when`` accepts."""
    real = os.mkdir
    done = []

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if not done and when(os.path.basename(os.fsdecode(path))):
            done.append(path)
            swap()
        return real(path, mode, dir_fd=dir_fd)
    monkeypatch.setattr(os, "mkdir", mkdir)
    return done


def _folder_swap(state, stranger):
    def swap():
        os.rename(state, str(state) + ".ours")
        os.rename(stranger, state)
    return swap


def _link_swap(state, stranger):
    def swap():
        os.rename(state, str(state) + ".ours")
        os.symlink(stranger, state)
    return swap


@pytest.mark.parametrize("planted", ["folder", "symlink"])
def test_a_state_folder_swapped_before_the_mkdir_of_tmp_does_not_receive_it(shared, monkeypatch, planted):
    logdir, state, stranger = shared
    (stranger / "tmp").rmdir()  # R15's repro: the stranger's folder is empty
    before = _strangers_entries(stranger)
    swap = (_folder_swap if planted == "folder" else _link_swap)(state, stranger)
    done = _swap_at(monkeypatch, lambda n: n == "tmp", swap)
    private.ensure_private_dir(str(state / "tmp"), tighten_root=True)
    monkeypatch.undo()
    assert done
    where = state if planted == "folder" else stranger  # the stranger's folder now
    assert os.lstat(where).st_uid == NOBODY
    assert _strangers_entries(where) == before  # nothing of root's in the stranger's folder
    ours = logdir / ".tb-footprint.ours"
    st = os.lstat(ours / "tmp")  # made in the folder that was checked, ours
    assert st.st_uid == 0 and (st.st_mode & 0o777) == 0o700


@pytest.mark.parametrize("planted", ["folder", "symlink"])
def test_a_scratch_folder_is_made_in_the_root_that_was_checked(shared, monkeypatch, planted):
    logdir, state, stranger = shared
    (state / "tmp").mkdir(mode=0o700)
    before = _strangers_entries(stranger)
    swap = (_folder_swap if planted == "folder" else _link_swap)(state, stranger)
    done = _swap_at(monkeypatch, lambda n: n.startswith("tbfp-probe-"), swap)
    made = scratch.make("probe", str(state / "tmp"))
    monkeypatch.undo()
    assert done
    where = state if planted == "folder" else stranger
    assert os.lstat(where).st_uid == NOBODY
    assert _strangers_entries(where) == before
    assert os.path.basename(made) in os.listdir(logdir / ".tb-footprint.ours" / "tmp")
    assert scratch._PATTERN.match(os.path.basename(made))


def test_a_folder_swapped_for_a_link_after_its_mkdir_is_not_followed(shared, monkeypatch):
    logdir, state, stranger = shared
    vault = state
    before = _strangers_entries(stranger)
    real = os.mkdir
    done = []

    def mkdir(path, mode=0o777, *, dir_fd=None):
        real(path, mode, dir_fd=dir_fd)
        if os.path.basename(os.fsdecode(path)) == "ab" and not done:
            done.append(path)
            os.rmdir(path, dir_fd=dir_fd)  # the stranger cannot do this in our folder: this test can
            os.symlink(stranger, path, dir_fd=dir_fd)
    monkeypatch.setattr(os, "mkdir", mkdir)
    got = private.ensure_private_dir(str(vault / "blobs" / "ab"), str(vault), tighten_root=True)
    monkeypatch.undo()
    st = os.lstat(got)
    assert os.path.isdir(got) and not os.path.islink(got) and st.st_uid == 0 and (st.st_mode & 0o777) == 0o700
    aside = [n for n in os.listdir(vault / "blobs") if n.startswith("ab" + private.UNTRUSTED_MARK)]
    assert len(aside) == 1 and os.path.islink(vault / "blobs" / aside[0])  # kept for inspection
    assert _strangers_entries(stranger) == before



@pytest.fixture
def open_tmp():
    """A folder in /tmp others may reach (pytest's own is root's 0700)."""
    import shutil
    import tempfile
    from pathlib import Path

    d = tempfile.mkdtemp()
    os.chmod(d, 0o755)
    yield Path(d)
    for dp, ds, _ in os.walk(d):
        for n in ds:
            os.chmod(os.path.join(dp, n), 0o700)
    shutil.rmtree(d, ignore_errors=True)


def test_a_logdir_the_user_may_search_but_not_list_still_gets_its_state_folder(open_tmp):
    """A guard, not a repro (the path-based code passed it too): the chain's anchor is opened
    O_PATH, so a logdir of mode 0311 (searchable, not listable) keeps working. Run as nobody in
    a forked child (root reads any folder)."""
    log = open_tmp / "logdir"
    log.mkdir(mode=0o700)
    os.chown(log, NOBODY, NOBODY)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.chmod(log, 0o311)
            private.ensure_private_dir(str(log / ".tb-footprint" / "tmp"), tighten_root=True)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.chmod(log, 0o700)
    assert os.waitstatus_to_exitcode(status) == 0
    st = os.lstat(log / ".tb-footprint" / "tmp")
    assert st.st_uid == NOBODY and (st.st_mode & 0o777) == 0o700
