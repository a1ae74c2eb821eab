"""bench/scale.py's file-size section prints how long a reduce's route crawl waited for
TensorBoard's app imports (``routes.prewarm_waited``, issue #28 item 3): the most that starting
those imports earlier could take off the fixed part, told apart on a quiet machine."""
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


def test_the_report_prints_the_crawls_wait_for_the_app(capsys):
    assert scale.file_sizes_report([_row(app_wait_s=0.137)])
    out = capsys.readouterr().out
    assert "route crawl waited 0.137 s for TensorBoard's app imports" in out
    # --repeat: every measurement's wait (the fastest one's may be the only one without)
    assert scale.file_sizes_report([_row(app_wait_s=0.0, all_app_wait_s=[0.0, 0.21, 0.05])])
    assert "waited 0.000 s for TensorBoard's app imports (routes.prewarm); in each measurement: " \
           "[0.0, 0.21, 0.05]" in capsys.readouterr().out
    runs = iter([{"seconds": 2.0, "app_wait_s": 0.3}, {"seconds": 1.0, "app_wait_s": 0.0}])
    got = scale.best(lambda: next(runs), 2)
    assert got["app_wait_s"] == 0.0 and got["all_app_wait_s"] == [0.3, 0.0], got
    # a measurement without the figure (an older JSON) prints no such line
    assert scale.file_sizes_report([_row()])
    assert "route crawl waited" not in capsys.readouterr().out


def test_a_fresh_file_reduce_measures_the_wait(tmp_path):
    """The worker's phase returns it: a fresh process's reduce of a small histogram/image file."""
    run = tmp_path / "logdir" / "run"
    scale.make_media_event_file(str(run), 2e6)
    scale._age_tree(str(tmp_path / "logdir"))
    cache = tmp_path / "cache"
    got = scale.measure("file_reduce", str(cache), 600, logdir=str(tmp_path / "logdir"))
    assert "error" not in got, got
    assert got["statuses"] == {"verified": 1}, json.dumps(got)[:2000]
    assert 0.0 <= got["app_wait_s"] <= got["seconds"], got
