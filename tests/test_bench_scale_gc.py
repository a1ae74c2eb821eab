"""bench/scale.py's file-size section prints the cyclic garbage collector's passes during each
fresh reduce (issue #28 item 3): each pass stops every thread of the reduce, and in a fresh
process most of them follow from the modules the reduce imports (TensorBoard's app, gRPC), as
many at 20 MB as at 100 MB: part of the fixed cost, measured rather than guessed."""
import gc
import json
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale  # noqa: E402


def _row(**mode):
    base = {"seconds": 1.0, "cpu": 1.0, "statuses": {"verified": 1}, "rss_mb": 100.0}
    return {"mb": 20, "bytes": 20e6, "anchor": {"seconds": 0.1},
            "cold": dict(base, **mode), "warm": dict(base)}


def test_the_report_prints_the_collectors_passes(capsys):
    gcs = {"passes": [130, 12, 1], "ms": [20.4, 14.5, 69.3]}
    assert scale.file_sizes_report([_row(gc=gcs)])
    out = capsys.readouterr().out
    assert ("cyclic GC during the reduce: 143 passes (young 130, middle 12, full 1), 104 ms with every "
            "thread stopped (full passes 69 ms)") in out, out
    # --repeat: every measurement's total
    assert scale.file_sizes_report([_row(gc=gcs, all_gc_ms=[104.2, 61.0])])
    assert "(full passes 69 ms); in each measurement: [104.2, 61.0]" in capsys.readouterr().out
    runs = iter([{"seconds": 2.0, "gc": {"passes": [1, 0, 0], "ms": [1.0, 0.0, 0.0]}},
                 {"seconds": 1.0, "gc": {"passes": [2, 1, 0], "ms": [2.0, 3.0, 0.0]}}])
    got = scale.best(lambda: next(runs), 2)
    assert got["gc"]["passes"] == [2, 1, 0] and got["all_gc_ms"] == [1.0, 5.0], got
    # a measurement without the figure (an older JSON, a warm process) prints no such line
    assert scale.file_sizes_report([_row()])
    assert "cyclic GC" not in capsys.readouterr().out


def test_the_meter_counts_each_generation_and_leaves_no_callback():
    meter = scale._GcMeter().install()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        got = meter.remove()
    assert meter not in gc.callbacks
    assert got["passes"][0] >= 1 and got["passes"][2] >= 1, got
    assert all(ms >= 0 for ms in got["ms"]), got


def test_a_fresh_file_reduce_measures_the_passes(tmp_path):
    """The worker returns them for a fresh process's reduce (the bench's cold measurement)."""
    run = tmp_path / "logdir" / "run"
    scale.make_media_event_file(str(run), 2e6)
    scale._age_tree(str(tmp_path / "logdir"))
    got = scale.measure("file_reduce", str(tmp_path / "cache"), 600, logdir=str(tmp_path / "logdir"),
                        split=True)
    assert "error" not in got, got
    assert got["statuses"] == {"verified": 1}, json.dumps(got)[:2000]
    g = got["gc"]
    assert len(g["passes"]) == 3 and len(g["ms"]) == 3, g
    # the reduce imports TensorBoard's app in this fresh process: the collector runs
    assert sum(g["passes"]) > 0, g
    assert 0 <= sum(g["ms"]) / 1e3 <= got["seconds"], (g, got["seconds"])
