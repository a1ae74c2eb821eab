"""A retired run leaves a running TensorBoard's run list on its next reload, and a restored run
comes back with identical data — on both backends: the Python multiplexer (``--load_fast=false``)
and the Rust data server (``--load_fast=true``, which fails rather than falling back). Prints how long each took."""
import json
import math
import os
import time
import urllib.parse

import pytest

from tbproc import TensorBoard
from tb_footprint_plugin import api, synth

RELOAD_S = 2  # --reload_interval; TensorBoard's default is 5 s
OLD = time.time() - 7 * 86400


def make_logdir(root):
    for i, name in enumerate(("keep_a", "keep_b", "gone")):
        with synth.EventWriter(str(root / name)) as w:
            for s in range(40):
                w.scalar("val/loss", s, math.exp(-s / 10) + i)
                w.histogram("weights", s, [0.1 * i + 0.01 * k for k in range(20)])
            w.text("notes", 0, f"run {name}")
    for dirpath, _d, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(dirpath, n), (OLD, OLD))
    return root


def runs(tb):
    return set(tb.json("/data/runs"))


def scalars(tb, run, tag="val/loss"):
    q = urllib.parse.urlencode({"run": run, "tag": tag})
    return tb.json(f"/data/plugin/scalars/scalars?{q}")


def wait_until(pred, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")


@pytest.mark.parametrize("backend", ["python", "rust"])
def test_retired_run_leaves_and_comes_back(tmp_path, backend):
    logdir = make_logdir(tmp_path / "logs")
    fast = "false" if backend == "python" else "true"
    tb = TensorBoard(logdir, f"--load_fast={fast}", f"--reload_interval={RELOAD_S}")
    try:
        wait_until(lambda: runs(tb) >= {"keep_a", "keep_b", "gone"}, 60)
        before = scalars(tb, "gone")
        assert len(before) == 40
        rep = api.retire(str(logdir), api.retire_rule(runs=["gone"]), dry_run=False)
        assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
        t_gone = wait_until(lambda: "gone" not in runs(tb), 10 * RELOAD_S + 20)
        assert runs(tb) >= {"keep_a", "keep_b"}
        # nothing of it is found anywhere else in the logdir (the vault is inside it)
        assert not [r for r in runs(tb) if ".tb-footprint" in r]
        [o] = api.restore(str(logdir), run="gone")
        assert o.status == "restored", o.to_dict()
        t_back = wait_until(lambda: "gone" in runs(tb) and len(scalars(tb, "gone")) == 40, 10 * RELOAD_S + 20)
        after = scalars(tb, "gone")
        assert after == before  # wall time, step and value of every point
        q = urllib.parse.urlencode({"run": "gone", "tag": "notes"})
        assert "run gone" in json.dumps(tb.json(f"/data/plugin/text/text?{q}"))
        print(f"\n{backend}: --reload_interval {RELOAD_S}: retired run gone from /data/runs after {t_gone:.1f} s, "
              f"restored run back with identical scalars after {t_back:.1f} s")
        assert t_gone <= 3 * RELOAD_S + 10 and t_back <= 3 * RELOAD_S + 10
    finally:
        tb.stop()
