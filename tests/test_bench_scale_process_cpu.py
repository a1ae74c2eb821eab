"""bench/scale.py's fresh file-size reduce also prints the CPU of its whole worker process
(issue #28 item 3): the interpreter's start, the package's imports and the interpreter's exit
(its last collection of every object left) are part of what a fresh ``tb-footprint reduce``
pays at every file size, and the reduce's own CPU figure leaves them out."""
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale  # noqa: E402


def _row(**cold):
    base = {"seconds": 1.0, "cpu": 0.7, "statuses": {"verified": 1}, "rss_mb": 100.0}
    return {"mb": 20, "bytes": 20e6, "anchor": {"seconds": 0.1},
            "cold": dict(base, **cold), "warm": dict(base, process_cpu=0.9)}


def test_a_worker_measures_its_whole_process(tmp_path):
    got = scale.measure("ledger", str(tmp_path / "cache"), 300, logdir=str(tmp_path), n=20)
    assert "error" not in got, got
    # the package's imports and the interpreter's start are in it, not in the phase's figure
    assert got["process_cpu"] >= got["cpu"] + 0.05, got


def test_the_report_lines(capsys):
    scale.file_sizes_report([_row(process_cpu=1.02)])
    out = capsys.readouterr().out
    line = "the whole fresh process (interpreter start, the package's imports, the reduce, exit): 1.02 s CPU"
    # the fresh process only: the warm one is the tab's, which neither starts nor exits
    assert out.count(line) == 1 and "0.90 s CPU" not in out, out
    scale.file_sizes_report([_row(process_cpu=1.02, all_process_cpu=[1.02, 1.1])])
    assert line + "; in each measurement: [1.02, 1.1]" in capsys.readouterr().out
    runs = iter([{"seconds": 2.0, "process_cpu": 1.3}, {"seconds": 1.0, "process_cpu": 1.1}])
    got = scale.best(lambda: next(runs), 2)
    assert got["process_cpu"] == 1.1 and got["all_process_cpu"] == [1.3, 1.1], got
