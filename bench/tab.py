"""Latency of the Footprint tab's runs route (``GET /data/plugin/footprint/runs``).

Generates a logdir of N small runs (default 1,000; ``--small`` for 100), then measures through
TensorBoard's own WSGI app (``application.TensorBoardWSGI``, all its middlewares):

* cold: a fresh plugin, no scan cache on disk: the first request waits for the whole scan;
* warm (memory): later requests, served from the scan kept in memory (what the tab sees);
* warm (disk cache): a fresh plugin (TensorBoard restarted) with the on-disk scan cache of the
  first run: the first request waits for a scan that re-reads nothing;
* the same for ``/summary`` and one ``/run`` detail.

Target: warm < 300 ms. ``python bench/tab.py [--small] [--runs N] [--repeat K] [--keep DIR]``
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TARGET_WARM_MS = 300.0
OLD = 1795000000  # fixed past mtime: no run is "still being written"


def generate(root: str, n_runs: int, seed: int = 0) -> int:
    """N runs of a few scalar tags; every 10th also has a small profile session."""
    from tb_footprint_plugin import synth

    for i in range(n_runs):
        run_dir = os.path.join(root, f"group_{i // 100:02d}", f"run_{i:04d}")
        with synth.EventWriter(run_dir) as w:
            for s in range(20):
                w.scalar("loss", s, math.exp(-s / 7.0) + 0.001 * i)
                w.scalar("accuracy", s, 1.0 - math.exp(-s / 5.0))
        if i % 10 == 0:
            synth.write_profile_session(run_dir, n_events=150, with_caches=(i % 20 == 0), seed=seed + i)
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            os.utime(p, (OLD, OLD))
            total += os.lstat(p).st_size
    return total


def make_app(logdir: str):
    import argparse as ap

    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_footprint_plugin.loader import FootprintLoader

    flags = ap.Namespace(logdir=logdir, host=None, bind_all=False, path_prefix="", footprint_backup_dir=None,
                         footprint_policy="archive", footprint_read_only=False,
                         footprint_allow_remote_actions=False, footprint_quiet_period=0.0)
    plugin = FootprintLoader().load(base_plugin.TBContext(logdir=logdir, flags=flags))
    return plugin, Client(application.TensorBoardWSGI([plugin]))


def timed_get(client, path: str):
    t0 = time.perf_counter()
    r = client.get(path, headers={"Accept-Encoding": "gzip"})
    dt = (time.perf_counter() - t0) * 1000.0
    assert r.status_code == 200, (path, r.status_code, r.get_data()[:300])
    return dt, len(r.get_data())


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--small", action="store_true", help="100 runs (CI)")
    ap.add_argument("--repeat", type=int, default=20, help="warm requests to time")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it")
    args = ap.parse_args(argv)
    n = 100 if args.small else args.runs

    root = args.keep or tempfile.mkdtemp(prefix="footprint-bench-")
    logdir = os.path.join(root, "logs")
    try:
        if os.path.isdir(logdir) and os.listdir(logdir):
            shutil.rmtree(logdir)
        t0 = time.perf_counter()
        total = generate(logdir, n)
        print(f"generated {n} runs, {total / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s: {logdir}")

        rows = []
        # cold: no scan cache anywhere
        plugin, client = make_app(logdir)
        cold_ms, size = timed_get(client, "/data/plugin/footprint/runs?wait=600")
        rows.append(("runs, cold (first request, full scan)", [cold_ms], size))
        warm = [timed_get(client, "/data/plugin/footprint/runs")[0] for _ in range(args.repeat)]
        rows.append(("runs, warm (scan in memory)", warm, size))
        warm_lossless = [timed_get(client, "/data/plugin/footprint/runs?policy=lossless")[0]
                         for _ in range(max(3, args.repeat // 4))]
        rows.append(("runs, warm, first time under another policy", warm_lossless[:1], size))
        rows.append(("runs, warm, another policy (memoized)", warm_lossless[1:], size))
        summ = [timed_get(client, "/data/plugin/footprint/summary")[0] for _ in range(args.repeat)]
        rows.append(("summary, warm", summ, 0))
        detail = [timed_get(client, "/data/plugin/footprint/run?run=group_00/run_0000")[0]
                  for _ in range(max(3, args.repeat // 4))]
        rows.append(("run detail, warm", detail, 0))
        plugin.jobs.wait_all(10)
        plugin.scans.wait_idle(600)
        files_read = plugin.scans.peek().files_read

        # restart: the on-disk scan cache is there
        plugin2, client2 = make_app(logdir)
        restart_ms, _ = timed_get(client2, "/data/plugin/footprint/runs?wait=600")
        rows.append(("runs, TensorBoard restarted (disk scan cache)", [restart_ms], size))
        fp2 = plugin2.scans.peek()
        plugin2.scans.wait_idle(600)

        print(f"\nGET /data/plugin/footprint/... over {n} runs (through TensorBoardWSGI, gzip)")
        print(f"{'case':52} {'median ms':>10} {'p95 ms':>9} {'n':>4} {'gzip B':>9}")
        for name, xs, nbytes in rows:
            if not xs:
                continue
            print(f"{name:52} {statistics.median(xs):10.1f} {percentile(xs, 0.95):9.1f} {len(xs):4d} "
                  f"{nbytes if nbytes else '':>9}")
        print(f"\ncold scan parsed {files_read} event files; after restart parsed {fp2.files_read}, "
              f"{fp2.files_cached} from the cache")
        warm_med = statistics.median(warm)
        ok = warm_med < TARGET_WARM_MS
        print(json.dumps({"runs": n, "cold_ms": round(cold_ms, 1), "warm_median_ms": round(warm_med, 1),
                          "warm_p95_ms": round(percentile(warm, 0.95), 1), "restart_ms": round(restart_ms, 1),
                          "target_warm_ms": TARGET_WARM_MS, "ok": ok}))
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
