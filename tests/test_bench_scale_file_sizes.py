"""bench/scale.py's file-size section (issue 28 item 3) judges the reduce's own peak memory.

``ru_maxrss`` of a process started by ``subprocess`` (vfork + exec on Linux) starts at its
parent's RSS: the bench's worker reported the bench's memory as the reduce's whenever the bench
held more than the reduce did."""
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale  # noqa: E402


def test_a_worker_reports_its_own_peak_not_its_parents():
    held = bytearray(os.urandom(1 << 20) * 120)  # 120 MB resident in this (the parent) process
    code = ("import resource, sys; sys.path.insert(0, %r); import scale; "
            "print(scale.own_peak_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)" % BENCH)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    own, ru = map(float, out.stdout.split())
    assert len(held) == 120 << 20
    assert own < 80, own  # an interpreter that imported the bench module: tens of MB
    assert ru > own + 60, (ru, own)  # the parent's 120 MB in ru_maxrss: why it is not the figure


def _row(**mode):
    base = {"seconds": 1.0, "cpu": 1.0, "statuses": {"verified": 1}}
    return {"mb": 20, "bytes": 20e6, "anchor": {"seconds": 0.1},
            "cold": dict(base, **mode), "warm": dict(base, **mode)}


def test_the_memory_target_is_judged_on_the_largest_own_peak(capsys):
    # ru_maxrss inflated by the bench, the reduce's own peak under the target: met
    assert scale.file_sizes_report([_row(rss_mb=170.0, own_rss_mb=120.0, max_own_rss_mb=120.0)])
    assert "peak RSS 120 MB (target <= 150 MB) (target met)" in capsys.readouterr().out
    # the fastest of --repeat measurements under it, another one over it: not met
    assert not scale.file_sizes_report([_row(rss_mb=120.0, own_rss_mb=120.0, max_own_rss_mb=151.0)])
    assert "peak RSS 151 MB (target <= 150 MB) (not met)" in capsys.readouterr().out


def test_best_keeps_the_largest_peak_of_its_measurements():
    runs = iter([{"seconds": 2.0, "own_rss_mb": 149.0}, {"seconds": 1.0, "own_rss_mb": 120.0}])
    got = scale.best(lambda: next(runs), 2)
    assert got["seconds"] == 1.0 and got["max_own_rss_mb"] == 149.0
