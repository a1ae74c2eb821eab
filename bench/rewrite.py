"""Throughput and peak memory of the content-level rewrites, next to a plain copy.

    python bench/rewrite.py            # ~1 GB inputs
    python bench/rewrite.py --small    # ~20 MB inputs (CI)
    python bench/rewrite.py --sizes 20,1024   # several sizes: is peak RSS flat?

Inputs are generated (``tb_footprint_plugin.synth``): a histogram-heavy event file written
like tensorboardX/PyTorch (legacy ``histo`` values of ~8 KB, a scalar and an image tag) and a
pretty-printed kineto trace (``write_torch_trace``). Each measurement runs in a fresh
subprocess so its peak RSS (``ru_maxrss``) is its own:

* ``copy``: ``shutil.copyfile`` of the same file (the floor);
* ``event rewrite``: ``select_run`` (one pass over the records + TensorBoard's Rust data
  server asked for its default view; the server is a child process, its peak RSS is shown
  separately) and ``rewrite_event_file`` (the streaming copy of the kept frames);
* ``trace gzip``: what ``lossless`` does to a trace (reference);
* ``trace slim``: whitespace + python_function + [memory] dropped, gzip'd, then re-read and
  checked with ijson (``verify_slim``).

MB/s are input megabytes (10^6 bytes) per second of wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


# --- inputs ----------------------------------------------------------------------------------
def make_event_file(run_dir: str, target_bytes: float, large_records: Optional[bool] = None) -> str:
    """A histogram-heavy run: two legacy histogram tags at every step (~8 KB records, like
    torch ``add_histogram`` of a weight tensor; ~0.7 KB below 100 MB so that a small file
    still has the >10,000 steps per tag dashboard-exact needs to drop anything), a scalar
    every step and an image every 100 steps. ``large_records``: the ~8 KB records at any size
    (bench/scale.py compares sizes with the same records, so only the amount of work differs)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tb_footprint_plugin import synth

    rng = random.Random(0)
    if large_records is None:
        large_records = target_bytes >= 100e6
    if large_records:  # ~8 KB records: a weight tensor's histogram as torch writes it
        variants = [synth.legacy_histogram_proto([rng.gauss(0, 1 + i / 10) for _ in range(2000)])
                    for i in range(8)]
    else:  # ~0.7 KB records, so that a small file still has >10,000 steps per tag
        variants = [synth.legacy_histogram_proto([1 + rng.random() * (40 + i) for _ in range(2000)])
                    for i in range(8)]
    png = synth.make_png(32, 32, seed=1)
    with synth.EventWriter(run_dir, style="torch") as w:
        step = 0
        while os.path.getsize(w.path) < target_bytes:
            for _ in range(50):
                wall = 1795990000.0 + step * 0.05
                for t, tag in enumerate(("layer1/weight", "layer2/weight")):
                    v = summary_pb2.Summary.Value(tag=tag, histo=variants[(step + t) % len(variants)])
                    w.write_event(event_pb2.Event(wall_time=wall, step=step,
                                                  summary=summary_pb2.Summary(value=[v])))
                w.legacy_simple_value("loss", step, 1.0 / (step + 1), wall_time=wall)
                if step % 100 == 0:
                    w.legacy_image("sample", step, png, 32, 32, wall_time=wall)
                step += 1
            w._file.flush()
        return w.path


def make_trace(path: str, target_bytes: int) -> str:
    from tb_footprint_plugin import synth

    n_steps = max(2, int(target_bytes / 0.9e6))
    synth.write_torch_trace(path, n_steps=n_steps)
    return path


# --- workers (one measurement per subprocess) -------------------------------------------------
def _worker(kind: str, src: str, out_dir: str) -> dict:
    t0 = time.perf_counter()
    info: dict = {}
    if kind == "copy":
        shutil.copyfile(src, os.path.join(out_dir, "copy"))
    elif kind == "event_rewrite":
        from tb_footprint_plugin.transforms import event_rewrite as er

        run_dir = os.path.dirname(src)
        rules = er.Rules.from_content({"downsample": "dashboard_exact", "dedupe_graphs": True,
                                       "strip_run_metadata": True})
        er.kept_positions(100)  # the one-off probe of the data server is not per file
        er.kept_positions(10)
        t0 = time.perf_counter()
        sel = er.select_run(run_dir, rules, [os.path.basename(src)])
        t1 = time.perf_counter()
        name = os.path.basename(src)
        r = er.rewrite_event_file(src, os.path.join(out_dir, name), sel.masks[name], sel.codes[name],
                                  sel.code_names)
        t2 = time.perf_counter()
        info = {"select_s": round(t1 - t0, 2), "write_s": round(t2 - t1, 2),
                "records": f"{r['records_after']}/{r['records_before']}",
                "out_bytes": r["size"], "tags": {t: v["kept"] for t, v in sel.tags.items()}}
    elif kind == "trace_gzip":
        from tb_footprint_plugin.transforms.gzip_trace import gzip_file

        gzip_file(src, os.path.join(out_dir, "t.gz"))
        info = {"out_bytes": os.path.getsize(os.path.join(out_dir, "t.gz"))}
    elif kind == "trace_slim":
        from tb_footprint_plugin.transforms import trace_slim as ts

        dst = os.path.join(out_dir, "slim.gz")
        o = ts.TraceOptions(drop_python_function=True, drop_memory=True)
        stats = ts.slim_trace(src, dst, o)
        t1 = time.perf_counter()
        ts.verify_slim(dst, stats)
        t2 = time.perf_counter()
        info = {"slim_s": round(t1 - t0, 2), "check_s": round(t2 - t1, 2),
                "events": f"{stats['events_after']}/{stats['events_before']}",
                "out_bytes": os.path.getsize(dst)}
    else:
        raise SystemExit(f"unknown worker {kind}")
    elapsed = time.perf_counter() - t0
    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"kind": kind, "seconds": elapsed, "rss_mb": self_rss / 1024, "child_rss_mb": child_rss / 1024,
            **info}


def measure(kind: str, src: str, scratch: str) -> dict:
    out_dir = tempfile.mkdtemp(dir=scratch)
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", kind, src, out_dir],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{kind} failed:\n{proc.stderr}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    res["in_bytes"] = os.path.getsize(src)
    res["mb_s"] = res["in_bytes"] / 1e6 / max(res["seconds"], 1e-9)
    return res


def _row(label: str, r: dict, extra: str = "") -> str:
    return (f"  {label:<16} {r['in_bytes'] / 1e6:9.1f} MB  {r['seconds']:8.2f} s  {r['mb_s']:9.1f} MB/s  "
            f"peak RSS {r['rss_mb']:7.1f} MB  {extra}")


def run_size(size_mb: float, scratch: str) -> dict:
    target = int(size_mb * 1e6)
    run_dir = os.path.join(scratch, f"run-{size_mb:g}")
    t = time.perf_counter()
    ev = make_event_file(run_dir, target)
    trace = make_trace(os.path.join(scratch, f"w_{size_mb:g}.1.pt.trace.json"), target)
    gen = time.perf_counter() - t
    print(f"\n== inputs ~{size_mb:g} MB (generated in {gen:.1f} s): event file "
          f"{os.path.getsize(ev) / 1e6:.1f} MB, trace {os.path.getsize(trace) / 1e6:.1f} MB")
    res = {}
    for kind, src in (("copy", ev), ("event_rewrite", ev), ("copy", trace), ("trace_gzip", trace),
                      ("trace_slim", trace)):
        r = measure(kind, src, scratch)
        res[f"{kind}:{os.path.basename(src)}"] = r
        if kind == "copy":
            print(_row("copy", r, f"({os.path.basename(src)[:24]})"))
        elif kind == "event_rewrite":
            print(_row("event rewrite", r, f"select {r['select_s']} s + write {r['write_s']} s; "
                                           f"records kept {r['records']}; {r['out_bytes'] / 1e6:.1f} MB out; "
                                           f"data server peak RSS {r['child_rss_mb']:.0f} MB"))
        elif kind == "trace_gzip":
            print(_row("trace gzip", r, f"{r['out_bytes'] / 1e6:.1f} MB out"))
        else:
            print(_row("trace slim", r, f"slim {r['slim_s']} s + ijson check {r['check_s']} s; events "
                                        f"{r['events']}; {r['out_bytes'] / 1e6:.1f} MB out"))
    shutil.rmtree(run_dir, ignore_errors=True)
    os.unlink(trace)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="~20 MB inputs (CI)")
    ap.add_argument("--sizes", help="comma-separated input sizes in MB (default 1024, or 20 with --small)")
    ap.add_argument("--tmp", help="scratch directory (default: system temp)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--worker", nargs=3, metavar=("KIND", "SRC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(*args.worker)))
        return 0
    sizes = [float(s) for s in args.sizes.split(",")] if args.sizes else ([20.0] if args.small else [1024.0])
    scratch = tempfile.mkdtemp(prefix="tbfp-bench-rewrite-", dir=args.tmp)
    print(f"bench/rewrite.py: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, scratch {scratch}")
    results = {}
    try:
        for size in sizes:
            results[f"{size:g}"] = run_size(size, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
