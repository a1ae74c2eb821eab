"""ParsePool reads the machine's CPU ticks (/proc/stat) only in a scan that may start workers.

Every scan made a ``ParsePool``, whose constructor read /proc/stat, though the pool starts only
past ``START_AFTER`` (1,000) uncached event files: a scan of a few runs paid a system call for
nothing. The first read is now made halfway to the start, the second where the pool decides how
many workers to start; the window between them is the scan parsing alone, as before.
"""
from __future__ import annotations

from tb_footprint_plugin.scan import parse_pool


def _spy(monkeypatch):
    reads, windows = [], []
    ticks = iter(range(100, 10_000, 100))

    def fake_ticks():
        t = next(ticks)
        reads.append(t)
        return (t, t)

    def fake_idle(since):
        windows.append(since)
        return None

    monkeypatch.setattr(parse_pool, "cpu_ticks", fake_ticks)
    monkeypatch.setattr(parse_pool, "idle_cores", fake_idle)
    monkeypatch.setenv(parse_pool.ENV, "0")  # never a worker: the decision alone is watched
    return reads, windows


def test_a_pool_that_never_nears_its_start_never_reads_the_ticks(monkeypatch):
    reads, windows = _spy(monkeypatch)
    with parse_pool.ParsePool(start_after=10) as pool:
        assert reads == []
        for i in range(5):
            assert pool.ask(f"/nowhere/{i}", f"f{i}", 1) is False
    assert reads == [] and windows == []


def test_the_idle_window_runs_from_halfway_to_the_start(monkeypatch):
    reads, windows = _spy(monkeypatch)
    with parse_pool.ParsePool(start_after=10) as pool:
        for i in range(10):
            assert pool.ask(f"/nowhere/{i}", f"f{i}", 1) is False
        assert reads == [100]  # read once, at the 6th file
        assert pool.ask("/nowhere/10", "f10", 1) is False  # the 11th: the pool decides (0 workers)
        assert windows == [(100, 100)]  # idle measured since the 6th file


def test_a_pool_told_its_workers_reads_no_ticks(monkeypatch):
    reads, windows = _spy(monkeypatch)
    with parse_pool.ParsePool(workers=0, start_after=4) as pool:
        for i in range(8):
            assert pool.ask(f"/nowhere/{i}", f"f{i}", 1) is False
    assert reads == [] and windows == []
