"""The writer checks of a disk's reduce, retirement and restore follow no link at any depth
(invariant 4: nothing followed outside the logdir, whatever the files on disk say).

They listed the run by path (``openfiles.files_under``, an ``os.walk``), then stat'ed each path and,
for a few files, opened it for a read lease, by path again: a folder of the run swapped for a link
in between (to another user's home, ``/etc``) was followed, the files there stat'ed and opened,
and a process writing a file *there* made the run "being written". Now every folder is opened in
its parent with ``O_NOFOLLOW``, each file's ``(dev, ino)`` is the walk's own lstat and its lease is
asked through its folder's descriptor (``engine.standing.writers_at``): the swap changes nothing.

Each test swaps ``r/sub`` for a link to a folder outside the logdir at the first look at one of its
files after the listing (a stat, an lstat or an open of ``r/sub/<name>``, by path or in a folder
descriptor), the worst instant. Outside, ``notes.bin`` is held open for writing by another process
and ``pipe`` is a FIFO (an open for reading would block: a 20 s alarm ends the test then). Asserted:
nothing outside is stat'ed or opened, no outside writer is reported, and the run is checked as it
was (its own writer still found)."""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import types

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.engine import preflight, retire
from tb_footprint_plugin.engine.context import Context, TransactionError

def _where(path, dir_fd) -> str:
    p = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(p):
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
    return os.path.abspath(p)


class Swapper:
    """Spies on ``os.open``/``os.stat``/``os.lstat``: the first look at a file of ``r/sub`` swaps
    the folder for a link to ``outside`` (the real one moved to ``r/.moved``); every look is
    recorded resolved, after the swap."""

    def __init__(self, monkeypatch, sub: str, outside: str):
        self.sub, self.outside, self.swapped, self.seen, self.busy = sub, outside, False, [], False
        for name in ("open", "stat", "lstat"):
            monkeypatch.setattr(os, name, self._spy(getattr(os, name)))

    def _spy(self, real):
        def spy(path, *a, dir_fd=None, **kw):
            if isinstance(path, (str, bytes, os.PathLike)) and not self.busy:
                self.busy = True  # realpath's own lstat calls are the spy's, not the code's
                try:
                    if not self.swapped and os.path.dirname(_where(path, dir_fd)) == self.sub:
                        self.swap()
                    # the folder entered, after the swap: a descriptor's own, or the path's resolved
                    # (the name itself may be a link looked at without following it)
                    where = _where(path, dir_fd)
                    self.seen.append(os.path.join(os.path.realpath(os.path.dirname(where)),
                                                  os.path.basename(where)))
                finally:
                    self.busy = False
            return real(path, *a, dir_fd=dir_fd, **kw) if dir_fd is not None else real(path, *a, **kw)
        return spy

    def swap(self) -> None:
        self.swapped = True
        os.rename(self.sub, os.path.join(os.path.dirname(self.sub), ".moved"))
        os.symlink(self.outside, self.sub)

    def outside_touched(self) -> list:
        out = os.path.realpath(self.outside)
        return [p for p in self.seen if p == out or p.startswith(out + os.sep)]


@pytest.fixture
def outside(tmp_path):
    """A folder outside the logdir: ``notes.bin`` held open for writing by another process, a FIFO."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "notes.bin").write_bytes(b"someone else's\n")
    os.mkfifo(d / "pipe")
    code = "import sys; f = open(sys.argv[1], 'ab'); print('open', flush=True); sys.stdin.read()"
    p = subprocess.Popen([sys.executable, "-c", code, str(d / "notes.bin")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "open"
    old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("blocked on the FIFO")))
    signal.alarm(20)
    try:
        yield d
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        p.stdin.close()
        p.wait(10)


def _run(logdir) -> None:
    """``r``: an event file, and ``r/sub`` holding ``notes.bin`` and ``pipe`` as regular files."""
    with synth.EventWriter(str(logdir / "r"), timestamp=1_500_000_000) as w:
        for s in range(40):
            w.scalar("loss", s, math.exp(-s / 10.0))
            w.image("img", s, synth.make_png(8, 8, seed=s), 8, 8)
    (logdir / "r" / "sub").mkdir()
    (logdir / "r" / "sub" / "notes.bin").write_bytes(b"the run's own\n")
    (logdir / "r" / "sub" / "pipe").write_bytes(b"a plain file in the run\n")


@pytest.mark.parametrize("check", ["reduce", "retire"])
def test_a_folder_swapped_for_a_link_is_not_followed_by_the_writer_check(tmp_path, monkeypatch, outside, check):
    logdir = tmp_path / "logs"
    _run(logdir)
    ctx = Context(str(logdir))
    spy = Swapper(monkeypatch, str(logdir / "r" / "sub"), str(outside))
    if check == "reduce":
        preflight.check_writers(ctx, types.SimpleNamespace(run="r"))
    else:
        retire._check_writers(ctx, "r")  # the retirement's look, before it begins and before it moves
    monkeypatch.undo()
    assert spy.swapped, "the check never looked at a file of r/sub"
    assert spy.outside_touched() == [], spy.outside_touched()


@pytest.mark.parametrize("check", ["reduce", "retire"])
def test_the_runs_own_writer_is_still_found_below_a_swapped_sibling(tmp_path, monkeypatch, outside, check):
    """Guard (passes before too): the walk still finds a writer in the run, at depth."""
    logdir = tmp_path / "logs"
    _run(logdir)
    (logdir / "r" / "a" / "b").mkdir(parents=True)
    held = logdir / "r" / "a" / "b" / "profile.pb"
    code = "import sys; f = open(sys.argv[1], 'ab'); print('open', flush=True); sys.stdin.read()"
    p = subprocess.Popen([sys.executable, "-c", code, str(held)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "open"
        ctx = Context(str(logdir))
        call = ((lambda: preflight.check_writers(ctx, types.SimpleNamespace(run="r"))) if check == "reduce"
                else (lambda: retire._check_writers(ctx, "r")))
        with pytest.raises(TransactionError) as e:
            call()
        assert e.value.code == Skip.OPEN_FOR_WRITING
        assert f"r/a/b/profile.pb: open for writing by pid {p.pid}" in str(e.value), str(e.value)
        assert "notes.bin" not in str(e.value)
    finally:
        p.stdin.close()
        p.wait(10)


def test_a_restore_does_not_follow_a_folder_swapped_for_a_link(tmp_path, monkeypatch, outside):
    logdir = tmp_path / "logs"
    _run(logdir)
    rep = api.reduce_logdir(str(logdir), None, policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    spy = Swapper(monkeypatch, str(logdir / "r" / "sub"), str(outside))
    (o,) = api.restore(str(logdir))
    monkeypatch.undo()
    assert spy.swapped, "the restore never looked at a file of r/sub"
    assert spy.outside_touched() == [], spy.outside_touched()
    # the writer outside is no writer of the run: restored, the outside folder as it was
    assert o.status == Outcome.RESTORED, o.to_dict()
    assert (outside / "notes.bin").read_bytes() == b"someone else's\n"
    assert (logdir / "r" / ".moved" / "notes.bin").read_bytes() == b"the run's own\n"


def test_a_writer_at_the_bottom_of_a_deep_chain_is_found_without_recursion(tmp_path):
    """A chain of folders 1,500 deep (a stranger's in a shared logdir, review R10 F4) was walked by
    recursion (``os.walk``): RecursionError out of the reduce's check. The walk is a stack, a chain
    holds one folder descriptor, and the writer at its bottom is found."""
    logdir = tmp_path / "logs"
    _run(logdir)
    code = ("import os, sys\nos.chdir(sys.argv[1])\nfor _ in range(1500):\n    os.mkdir('d'); os.chdir('d')\n"
            "f = open('held.bin', 'ab'); print('open', flush=True); sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", code, str(logdir / "r")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "open"
        with pytest.raises(TransactionError) as e:
            preflight.check_writers(Context(str(logdir)), types.SimpleNamespace(run="r"))
        assert e.value.code == Skip.OPEN_FOR_WRITING, str(e.value)[:300]
        assert "/d" * 1500 + f"/held.bin: open for writing by pid {p.pid}" in str(e.value), str(e.value)[-300:]
    finally:
        p.stdin.close()
        p.wait(10)
        _unchain(str(logdir / "r"))


def _unchain(top: str) -> None:
    """The chain taken down a level at a time (pytest's own removal of tmp_path recurses)."""
    while os.path.isdir(os.path.join(top, "d", "d")):
        os.rename(os.path.join(top, "d", "d"), os.path.join(top, "x"))
        os.rmdir(os.path.join(top, "d"))
        os.rename(os.path.join(top, "x"), os.path.join(top, "d"))
    shutil.rmtree(os.path.join(top, "d"))


def test_out_of_descriptors_for_the_leases_the_proc_walk_still_names_the_writer(tmp_path, monkeypatch):
    """Guard (passes before too): a folder's descriptor kept for the leases that cannot be had
    (the process's limit) leaves the answer to the walk over /proc, which still names the writer."""
    logdir = tmp_path / "logs"
    _run(logdir)
    held = logdir / "r" / "sub" / "notes.bin"
    code = "import sys; f = open(sys.argv[1], 'ab'); print('open', flush=True); sys.stdin.read()"
    p = subprocess.Popen([sys.executable, "-c", code, str(held)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "open"

        def no_dup(fd):
            raise OSError(24, "Too many open files")
        monkeypatch.setattr(os, "dup", no_dup)
        with pytest.raises(TransactionError) as e:
            preflight.check_writers(Context(str(logdir)), types.SimpleNamespace(run="r"))
        monkeypatch.undo()
        assert e.value.code == Skip.OPEN_FOR_WRITING
        assert f"r/sub/notes.bin: open for writing by pid {p.pid}" in str(e.value), str(e.value)
    finally:
        p.stdin.close()
        p.wait(10)
