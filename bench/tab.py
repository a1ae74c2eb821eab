"""Latency of the Footprint tab's overview routes (``GET /data/plugin/footprint/runs`` and ``/summary``).

Generates a logdir of N small runs (default 1,000; ``--small`` for 100; ``--runs 100000`` in about
a minute: a few template runs are written by the synth writers and the others are byte copies of
them, as ``bench/scale.py`` does), then measures through TensorBoard's own WSGI app
(``application.TensorBoardWSGI``, all its middlewares):

* anchor: one cold ``api.scan`` of the logdir (no scan cache), the scan's own time;
* cold: a fresh plugin, no scan cache on disk: the first request waits for the whole scan, then
  the plan and the overview;
* warm (memory): later requests, served from the overview kept for the scan (what the tab sees):
  the first page, another page, another sort, a filter, ``/summary``; and the first request
  after a background rescan of the unchanged logdir;
* warm (disk cache): a fresh plugin (TensorBoard restarted) with the on-disk scan cache of the
  first run: the first request waits for a scan that re-reads nothing;
* the payload of ``/runs`` and ``/summary`` (JSON bytes, not gzipped): one page and bounded
  aggregates, the same size for 100 runs or 100,000 (checked against ``MAX_*_PAYLOAD``).

Targets (#28.4): warm overview < 1 s; cold ≤ 2x the scan. The cold ratio is the MEDIAN of
``--cold-repeat`` (default 3) pairs, each a cold scan then a cold plugin on a fresh cache folder,
taken in turn so both sides see the same machine. With ``--small`` (100 runs, ~0.1 s a side, CI)
the time targets are judged and printed but decide the exit status only with ``--gate-time``: a
CI on a shared machine measured 2.11x from one pair (the first, which also pays the plan's
imports) where a quiet run measures 1.4-1.5x for that pair and 0.9-1.2x for the next — at 0.1 s
the ratio is start-up noise, as ``bench/vault.py`` says of its small times. The payload
bounds gate at every size. ``python bench/tab.py [--small] [--gate-time] [--runs N] [--repeat K]
[--cold-repeat K] [--keep DIR]``
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

TARGET_WARM_MS = 1000.0
TARGET_COLD_VS_SCAN = 2.0
#: a page of 100 runs and the aggregates: bounded whatever N (measured ~60 KB and ~10 KB)
MAX_RUNS_PAYLOAD = 200_000
MAX_SUMMARY_PAYLOAD = 100_000
OLD = 1795000000  # fixed past mtime: no run is "still being written"
TEMPLATES = 10
RUNS_PER_GROUP = 100


def run_name(i: int) -> str:
    """The i-th run: groups of 100 under ``group_NNNN``, as sweeps lay them out."""
    return f"group_{i // RUNS_PER_GROUP:04d}/run_{i:06d}"


def _templates(root: str, seed: int = 0) -> list:
    """A few small runs written by the synth writers, as {relative path: bytes}: scalar tags over
    a number of steps that differs per template (so sizes differ); the first also has a small
    profile session with its caches, the sixth one without."""
    from tb_footprint_plugin import synth

    out = []
    for t in range(TEMPLATES):
        run_dir = os.path.join(root, f"t{t}")
        with synth.EventWriter(run_dir, timestamp=1_700_000_000) as w:
            for s in range(20 + 8 * t):
                w.scalar("loss", s, math.exp(-s / 7.0) + 0.001 * t)
                w.scalar("accuracy", s, 1.0 - math.exp(-s / 5.0))
        if t in (0, 5):
            synth.write_profile_session(run_dir, n_events=150, with_caches=(t == 0), seed=seed + t)
        files = {}
        for dirpath, _, names in os.walk(run_dir):
            for name in names:
                p = os.path.join(dirpath, name)
                with open(p, "rb") as f:
                    files[os.path.relpath(p, run_dir)] = f.read()
        out.append(files)
    return out


def generate(root: str, n_runs: int, seed: int = 0) -> int:
    """N runs, each a byte copy of one of ``TEMPLATES`` template runs (every file its own inode,
    dated in the past); returns the bytes written. 100,000 runs take about a minute."""
    scratch = tempfile.mkdtemp(prefix="footprint-templates-")
    try:
        templates = _templates(scratch, seed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    total = 0
    made = set()
    for i in range(n_runs):
        run_dir = os.path.join(root, run_name(i))
        for rel, data in templates[i % TEMPLATES].items():
            path = os.path.join(run_dir, rel)
            parent = os.path.dirname(path)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            with open(path, "xb") as f:
                f.write(data)
            os.utime(path, (OLD, OLD))
            total += len(data)
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


def timed_get(client, path: str, gzip: bool = True):
    """(ms, bytes of the body as sent) of one GET."""
    t0 = time.perf_counter()
    r = client.get(path, headers={"Accept-Encoding": "gzip"} if gzip else {})
    dt = (time.perf_counter() - t0) * 1000.0
    assert r.status_code == 200, (path, r.status_code, r.get_data()[:300])
    return dt, len(r.get_data())


def first_answer(client, path: str) -> float:
    """ms until ``path`` first answers 200: a request waits at most 120 s for the first scan
    (the route's cap), so a long one is asked again until it is done."""
    t0 = time.perf_counter()
    while True:
        r = client.get(path + "?wait=120")
        if r.status_code == 200:
            return (time.perf_counter() - t0) * 1000.0
        assert r.status_code == 503, (path, r.status_code, r.get_data()[:300])


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--small", action="store_true", help="100 runs (CI)")
    ap.add_argument("--repeat", type=int, default=20, help="warm requests to time")
    ap.add_argument("--cold-repeat", type=int, default=3, help="(cold scan, cold plugin) pairs to time")
    ap.add_argument("--gate-time", action="store_true",
                    help="with --small: let the time targets decide the exit status")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it")
    ap.add_argument("--reuse", action="store_true", help="with --keep: use the runs already generated there")
    args = ap.parse_args(argv)
    n = 100 if args.small else args.runs

    root = args.keep or tempfile.mkdtemp(prefix="footprint-bench-")
    logdir = os.path.join(root, "logs")
    # the scan caches of this bench live in its own folder: cold means cold, the user's cache stays
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="footprint-bench-cache-")
    P = "/data/plugin/footprint"
    try:
        if args.reuse and os.path.isdir(os.path.join(logdir, run_name(n - 1))):
            print(f"reusing the {n} runs in {logdir}")
        else:
            if os.path.isdir(logdir) and os.listdir(logdir):
                shutil.rmtree(logdir)
            t0 = time.perf_counter()
            total = generate(logdir, n)
            print(f"generated {n} runs, {total / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s: {logdir}")

        from tb_footprint_plugin import api

        # pairs in turn: the anchor (the scan's own cold time, no cache read or written), then a
        # fresh plugin on a fresh cache folder (the first request waits for scan, plan, overview)
        scans, colds = [], []
        for _ in range(max(1, args.cold_repeat)):
            t0 = time.perf_counter()
            api.scan(logdir, use_cache=False, write_cache=False)
            scans.append((time.perf_counter() - t0) * 1000.0)
            os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="footprint-bench-cache-")
            plugin, client = make_app(logdir)
            colds.append(first_answer(client, P + "/summary"))
            plugin.scans.wait_idle(3600)
        scan_ms, cold_ms = statistics.median(scans), statistics.median(colds)
        ratios = [c / s if s else math.inf for s, c in zip(scans, colds)]
        print(f"anchor: cold api.scan {scan_ms / 1000:.1f} s (median of {len(scans)})", flush=True)

        rows = []
        rows.append(("summary, cold (first request: scan, plan, overview)", colds, None))
        first_ms, runs_bytes = timed_get(client, P + "/runs", gzip=False)
        _, runs_gz = timed_get(client, P + "/runs")
        warm = [timed_get(client, P + "/runs")[0] for _ in range(args.repeat)]
        rows.append(("runs page 1, warm (overview kept)", warm, runs_gz))
        _, summary_bytes = timed_get(client, P + "/summary", gzip=False)
        summ = [timed_get(client, P + "/summary")[0] for _ in range(args.repeat)]
        rows.append(("summary, warm", summ, None))
        last = max(0, (n - 1) // 100 * 100)
        rows.append(("runs, last page", [timed_get(client, P + f"/runs?offset={last}")[0] for _ in range(3)], None))
        by_name = [timed_get(client, P + "/runs?sort=name&order=asc")[0] for _ in range(3)]
        rows.append(("runs by name, first time (sort kept after)", by_name[:1], None))
        rows.append(("runs by name, kept", by_name[1:], None))
        filt = [timed_get(client, P + f"/runs?q=group_{(n // 200):04d}/")[0] for _ in range(3)]
        rows.append(("runs filtered (one group), first time", filt[:1], None))
        rows.append(("runs filtered, kept", filt[1:], None))
        other = [timed_get(client, P + "/runs?policy=lossless")[0] for _ in range(3)]
        rows.append(("runs, first time under another policy", other[:1], None))
        rows.append(("runs, another policy, kept", other[1:], None))
        detail = [timed_get(client, P + "/run?run=" + run_name(0))[0] for _ in range(3)]
        rows.append(("run detail", detail, None))
        # a background rescan of the unchanged logdir: the overview kept for its content serves it
        plugin.scans.refresh()
        plugin.scans.wait_idle(3600)
        rescan_ms = timed_get(client, P + "/runs")[0]
        rows.append(("runs after a rescan of the unchanged logdir", [rescan_ms], None))
        plugin.jobs.wait_all(10)

        # restart: the on-disk scan cache is there
        plugin2, client2 = make_app(logdir)
        restart_ms = first_answer(client2, P + "/summary")
        rows.append(("summary, TensorBoard restarted (disk scan cache)", [restart_ms], None))
        plugin2.scans.wait_idle(3600)

        print(f"\nGET {P}/... over {n} runs (through TensorBoardWSGI, gzip)")
        print(f"{'case':52} {'median ms':>10} {'p95 ms':>9} {'n':>4} {'gzip B':>9}")
        print(f"{'anchor: api.scan, cold (the scan alone)':52} {scan_ms:10.1f}")
        for name, xs, nbytes in rows:
            if not xs:
                continue
            print(f"{name:52} {statistics.median(xs):10.1f} {percentile(xs, 0.95):9.1f} {len(xs):4d} "
                  f"{nbytes if nbytes else '':>9}")
        print(f"\npayload (JSON, not gzipped): /runs {runs_bytes} B (limit {MAX_RUNS_PAYLOAD}), "
              f"/summary {summary_bytes} B (limit {MAX_SUMMARY_PAYLOAD})")
        warm_med = max(statistics.median(warm), statistics.median(summ))
        ratio = statistics.median(ratios)
        payload_ok = runs_bytes <= MAX_RUNS_PAYLOAD and summary_bytes <= MAX_SUMMARY_PAYLOAD
        time_ok = warm_med < TARGET_WARM_MS and ratio <= TARGET_COLD_VS_SCAN
        time_gated = not args.small or args.gate_time
        ok = payload_ok and (time_ok or not time_gated)
        print(f"warm overview {warm_med:.0f} ms (target < {TARGET_WARM_MS:.0f}); cold {cold_ms / 1000:.1f} s = "
              f"{ratio:.2f}x the scan's {scan_ms / 1000:.1f} s (median of the pairs' ratios "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; target <= {TARGET_COLD_VS_SCAN}x): "
              f"{'met' if time_ok else 'NOT MET'}"
              f"{'' if time_gated else ' (not gated at --small without --gate-time: 0.1 s a side is start-up noise)'}")
        print(json.dumps({"runs": n, "scan_ms": round(scan_ms, 1), "cold_ms": round(cold_ms, 1),
                          "cold_vs_scan": round(ratio, 2), "warm_median_ms": round(warm_med, 1),
                          "warm_p95_ms": round(percentile(warm, 0.95), 1), "after_rescan_ms": round(rescan_ms, 1),
                          "restart_ms": round(restart_ms, 1), "runs_payload_bytes": runs_bytes,
                          "summary_payload_bytes": summary_bytes, "target_warm_ms": TARGET_WARM_MS,
                          "target_cold_vs_scan": TARGET_COLD_VS_SCAN, "time_ok": time_ok,
                          "time_gated": time_gated, "ok": ok}))
        assert payload_ok, "the /runs or /summary payload grew past its bound"
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
