"""A verification gives the C heap's free pages back when it ends (issue 28 item 3, memory):
its ~50 threads leave what they freed in glibc's per-thread arenas, which a process that
reduces again (the tab's TensorBoard) carried into its next reduce's peak."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.verify import Expectations, compare

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_free_pages_ended_threads_left_are_returned():
    """Eight threads each free ~8 MB of small blocks under one block they keep: the pages stay
    mapped (no arena top to trim) until ``release_free_heap``. They hold their blocks together
    (a barrier): one after another, on a loaded machine, they shared arenas and left less (9 MB
    in one CI run) to return."""
    code = textwrap.dedent("""
        import sys, threading
        sys.path.insert(0, %r)
        from tb_footprint_plugin.verify import compare

        def rss_kb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4

        kept = []
        together = threading.Barrier(8)
        def work():
            blocks = [bytes(2000) + b"x" for _ in range(4000)]
            kept.append(bytes(3000))
            together.wait()  # all eight hold theirs at once: each in an arena of its own
            del blocks

        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts: t.start()
        for t in ts: t.join()
        before = rss_kb()
        print(compare.release_free_heap(), before, rss_kb())
    """ % REPO)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    done, before, after = out.stdout.split()
    assert done == "True"
    assert int(after) < int(before) - 10 * 1024, (before, after)


def _run(run: Path) -> Path:
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(20):
            w.scalar("loss", step, 1.0 / (step + 1))
    return run


class _Trim:
    def __init__(self):
        self.calls = []

    def __call__(self, pad):
        self.calls.append(pad)
        return 1


def test_a_big_runs_verification_releases_the_free_heap_at_its_end(tmp_path, monkeypatch):
    orig = _run(tmp_path / "orig")
    shutil.copytree(orig, tmp_path / "red")
    trim = _Trim()
    monkeypatch.setattr(compare, "_MALLOC_TRIM", [trim])
    # the big-run path (threads by the dozen) when the run is above full_read_bytes
    res = compare.verify_reduction(str(orig), str(tmp_path / "red"), Expectations(), full_read_bytes=0)
    assert res.ok and trim.calls == [0]
    # a small run's (a batch of many: no per-run cost added)
    res = compare.verify_reduction(str(orig), str(tmp_path / "red"), Expectations())
    assert res.ok and trim.calls == [0]


def test_a_failed_verification_releases_it_too(tmp_path, monkeypatch):
    orig = _run(tmp_path / "orig")
    shutil.copytree(orig, tmp_path / "red")
    trim = _Trim()
    monkeypatch.setattr(compare, "_MALLOC_TRIM", [trim])

    def broken(*a, **k):
        raise RuntimeError("a reader broke")

    monkeypatch.setattr(compare, "_verify", broken)
    with pytest.raises(RuntimeError):
        compare.verify_reduction(str(orig), str(tmp_path / "red"), Expectations(), full_read_bytes=0)
    assert trim.calls == [0]


def test_without_malloc_trim_nothing_is_released(monkeypatch):
    monkeypatch.setattr(compare, "_MALLOC_TRIM", [None])
    assert compare.release_free_heap() is False
