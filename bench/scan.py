"""Throughput and memory of event-file scanning: ``python bench/scan.py [--points N] [--small]``.

``python bench/scan.py --plan-runs 200``: the cost of planning instead: an archive plan of runs
it rewrites, cold (a selection and a Rust data-server load per run) and warm (outcomes from the
selection cache), next to one Rust data-server load of the same logdir.

Generates two event files with ``RecordWriter`` + ``event_pb2`` (the way TensorBoard's
``summary_v2`` writers lay records out: TF2 tensor summaries, metadata on each tag's first
value only):

* a scalar file: ``--points`` scalar points over 8 tags;
* a heavy file: histograms (30 buckets) and PNG-sized images, plus some scalars.

Each is read by: a raw ``f.read`` loop, ``event_file_stats`` (CRCs verified), and TensorBoard's
``EventFileLoader`` (pure-Python stub reader when TensorFlow is absent). Peak RSS is measured in
a fresh child process per reader, at two file sizes, to show that memory does not grow with
the file.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SCALAR_TAGS = [
    "loss",
    "accuracy",
    "learning_rate",
    "grad_norm",
    "throughput/examples_per_sec",
    "memory/host_mb",
    "eval/loss",
    "eval/accuracy",
]


# --- generation ---------------------------------------------------------------------------
def _metadata(plugin: str, content: bytes = b""):
    from tensorboard.compat.proto import summary_pb2

    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin, content=content)
    )


class _EventSink:
    """Writes TF2-style summary events; metadata goes on a tag's first value only."""

    def __init__(self, f):
        from tb_footprint_plugin.scan.tfrecord import RecordWriter
        from tensorboard.compat.proto import event_pb2

        self._pb = event_pb2
        self.writer = RecordWriter(f)
        self._seen = set()
        self.wall = 1.7e9
        self.writer.write(event_pb2.Event(wall_time=self.wall, file_version="brain.Event:2").SerializeToString())

    def value(self, step: int, tag: str, plugin: str, tensor) -> None:
        from tensorboard.compat.proto import summary_pb2

        v = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
        if tag not in self._seen:
            self._seen.add(tag)
            v.metadata.CopyFrom(_metadata(plugin))
        self.wall += 0.001
        ev = self._pb.Event(wall_time=self.wall, step=step, summary=summary_pb2.Summary(value=[v]))
        self.writer.write(ev.SerializeToString())


def _scalar_tensor(x: float):
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        tensor_content=struct.pack("<f", x),
    )


def _histogram_tensor(rng: random.Random, buckets: int = 30):
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

    edges = sorted(rng.gauss(0, 1) for _ in range(buckets + 1))
    rows = [(edges[i], edges[i + 1], float(rng.randint(0, 500))) for i in range(buckets)]
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=buckets), tensor_shape_pb2.TensorShapeProto.Dim(size=3)]
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_DOUBLE,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims),
        tensor_content=struct.pack(f"<{3 * buckets}d", *(x for row in rows for x in row)),
    )


def _image_tensor(rng: random.Random, nbytes: int):
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

    png = b"\x89PNG\r\n\x1a\n" + rng.randbytes(nbytes)  # incompressible, like real PNG data
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=3)])
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, tensor_shape=shape, string_val=[b"64", b"64", png])


def write_scalar_file(path: str, points: int, seed: int = 0) -> int:
    """``points`` scalar points round-robin over 8 tags; returns the file size."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        sink = _EventSink(f)
        for i in range(points):
            sink.value(i // len(SCALAR_TAGS), SCALAR_TAGS[i % len(SCALAR_TAGS)], "scalars", _scalar_tensor(rng.random()))
    return os.path.getsize(path)


def write_heavy_file(path: str, steps: int, seed: int = 0) -> int:
    """Per step: 4 scalars, 12 histograms; every 10th step 4 images of ~20-60 KB."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        sink = _EventSink(f)
        for step in range(steps):
            for tag in SCALAR_TAGS[:4]:
                sink.value(step, tag, "scalars", _scalar_tensor(rng.random()))
            for layer in range(12):
                sink.value(step, f"layer_{layer}/weights/histogram", "histograms", _histogram_tensor(rng))
            if step % 10 == 0:
                for k in range(4):
                    sink.value(step, f"samples/image_{k}", "images", _image_tensor(rng, rng.randint(20_000, 60_000)))
    return os.path.getsize(path)


# --- readers ------------------------------------------------------------------------------
def read_raw(path: str) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            chunk = f.read(4 << 20)
            if not chunk:
                return n
            n += len(chunk)


def read_footprint(path: str) -> int:
    from tb_footprint_plugin.scan.eventfile import event_file_stats

    stats = event_file_stats(path)
    assert stats.status == "ok" and sum(stats.category_bytes().values()) == stats.size
    return stats.records


def read_tensorboard(path: str) -> int:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return sum(1 for _ in EventFileLoader(path).Load())


READERS = {"raw read": read_raw, "event_file_stats": read_footprint, "TB EventFileLoader": read_tensorboard}


def _child(reader: str, path: str, repeat: int) -> None:
    """Run one reader in this (fresh) process and print JSON: best seconds, RSS growth."""
    import numpy  # noqa: F401  (baseline RSS includes the libraries every reader loads)
    from tensorboard.backend.event_processing import event_file_loader  # noqa: F401
    from tensorboard.compat.proto import event_pb2  # noqa: F401

    from tb_footprint_plugin.scan import eventfile  # noqa: F401

    fn = READERS[reader]
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(path)
        best = min(best, time.perf_counter() - t0)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    fn(path) if reader != "TB EventFileLoader" else None
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(json.dumps({"seconds": best, "rss_growth_kb": peak_rss - base_rss, "traced_peak": traced}))


def measure(reader: str, path: str, repeat: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--_child", reader, path, str(repeat)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200_000, help="scalar points (default 200000)")
    ap.add_argument("--small", action="store_true", help="CI mode: ~20000 points")
    ap.add_argument("--repeat", type=int, default=3, help="runs per reader (best is kept)")
    ap.add_argument("--runs", type=int, default=1000, help="runs in the re-scan benchmark (default 1000)")
    ap.add_argument("--plan-runs", type=int, default=0,
                    help="only the plan benchmark: this many runs the archive policy rewrites (e.g. 200)")
    ap.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--_plan", nargs=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        _child(args._child[0], args._child[1], int(args._child[2]))
        return
    if args._plan:
        _plan_child(args._plan[0])
        return
    if args.plan_runs:
        with tempfile.TemporaryDirectory(prefix="tbfp-bench-plan-") as tmp:
            _plan_bench(tmp, args.plan_runs)
        return
    points = 20_000 if args.small else args.points
    steps = max(10, points // 200)
    with tempfile.TemporaryDirectory(prefix="tbfp-bench-") as tmp:
        files = []
        for label, writer, n in (("scalars", write_scalar_file, points), ("hist+images", write_heavy_file, steps)):
            for mult in (1, 4):
                path = os.path.join(tmp, f"events.out.tfevents.{label.replace('+', '_')}.x{mult}")
                size = writer(path, n * mult)
                files.append((label, mult, n * mult, path, size))
        _report(files, args.repeat)
        _rescan(tmp, 100 if args.small else args.runs)


def _rescan(tmp: str, runs: int) -> None:
    """Cold scan, then re-scan of the unchanged logdir (served from the incremental cache)."""
    from tb_footprint_plugin.scan.scanner import scan

    logdir = os.path.join(tmp, "many-runs")
    for i in range(runs):
        run = os.path.join(logdir, f"exp{i // 50:03d}", f"run{i:04d}")
        os.makedirs(run)
        write_scalar_file(os.path.join(run, "events.out.tfevents.1.host"), 200)
        os.makedirs(os.path.join(run, "plugins", "profile", "2026_01_01_00_00_00"))
        with open(os.path.join(run, "plugins", "profile", "2026_01_01_00_00_00", "host.xplane.pb"), "wb") as f:
            f.write(b"\0" * 1000)
    t = time.perf_counter()
    cold = scan(logdir)
    t_cold = time.perf_counter() - t
    t = time.perf_counter()
    warm = scan(logdir)
    t_warm = time.perf_counter() - t
    assert warm.files_read == 0 and warm.total_bytes == cold.total_bytes
    print(f"\nre-scan of an unchanged {runs}-run logdir: cold {t_cold:.2f} s ({cold.files_read} event files "
          f"read), warm {t_warm * 1000:.0f} ms ({warm.files_cached} served from the cache; target < 1 s)")


def _write_rewritable_run(run: str, seed: int) -> None:
    """A run whose event file the archive policy rewrites: one image tag of 30 steps (the
    dashboard shows 10), one histogram tag of 150 (it shows 100), four scalar tags."""
    from tb_footprint_plugin import synth

    with synth.EventWriter(run, timestamp=1_700_000_000 + seed) as w:
        for step in range(150):
            for k, tag in enumerate(("loss", "accuracy", "learning_rate", "grad_norm")):
                w.scalar(tag, step, 1.0 / (step + 1 + k + seed))
            w.histogram("layer/weights", step, [(i - 5.0, i - 4.0, float((i * 7 + step) % 31)) for i in range(10)])
            if step < 30:
                w.image("samples", step, synth.make_png(4, 4, seed=step + seed), 4, 4)


def _plan_child(logdir: str) -> None:
    """One plan in a fresh interpreter (as a CLI call or a restarted TensorBoard makes it)."""
    from tb_footprint_plugin import api
    from tb_footprint_plugin.transforms import event_rewrite as er

    made = []
    select_run = er.select_run

    def counting(*a, **k):
        made.append(1)
        return select_run(*a, **k)

    er.select_run = counting
    t = time.perf_counter()
    p = api.plan(logdir, "archive")
    print(json.dumps({"seconds": time.perf_counter() - t, "selections": len(made),
                      "rewrites": sum(1 for rp in p.runs for a in rp.actions if a.kind == "rewrite"),
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _plan_bench(tmp: str, runs: int) -> None:
    """Plan (archive) of ``runs`` runs that each need the rewrite's selection: cold (no
    selection cache: a pass and a Rust data-server load per run), warm (the same logdir again,
    in a new process), next to one Rust data-server load of the whole logdir (bench/scale.py's)."""
    logdir = os.path.join(tmp, "plan-runs")
    templates = os.path.join(tmp, "templates")
    for k in range(4):
        _write_rewritable_run(os.path.join(templates, f"t{k}"), k)
    t = time.perf_counter()
    import shutil

    for i in range(runs):
        src = os.path.join(templates, f"t{i % 4}")
        shutil.copytree(src, os.path.join(logdir, f"exp{i // 100:03d}", f"run{i:05d}"))
    old = time.time() - 3 * 86400
    for d, _, fs in os.walk(logdir):
        for n in fs:
            os.utime(os.path.join(d, n), (old, old))
    print(f"{runs} runs written in {time.perf_counter() - t:.1f} s (each: 30 images, 150 histograms, "
          "600 scalars; archive rewrites every one)")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
    rust = subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), "--_worker", "rust",
                           json.dumps({"logdir": logdir})], capture_output=True, text=True, env=env)
    rust_s = json.loads(rust.stdout.strip().splitlines()[-1]).get("seconds") if rust.returncode == 0 else None

    def plan() -> dict:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_plan", logdir],
                             capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])

    cold = plan()
    warm = plan()
    anchor = f" = {cold['seconds'] / rust_s:.1f}x" if rust_s else ""
    print(f"Rust data server, one load of the logdir: {rust_s:.2f} s" if rust_s else "Rust data server: not run")
    print(f"plan cold: {cold['seconds']:.2f} s{anchor} ({cold['selections']} selections, {cold['rewrites']} rewrites "
          f"planned, peak RSS {cold['rss_mb']:.0f} MB)")
    anchor = f" = {warm['seconds'] / rust_s:.2f}x" if rust_s else ""
    print(f"plan warm: {warm['seconds']:.2f} s{anchor} ({warm['selections']} selections, {warm['rewrites']} rewrites "
          f"planned; target <= 3x the Rust load)")


def _tensorflow_note() -> str:
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        return "TensorFlow absent: EventFileLoader uses TensorBoard's pure-Python stub reader"
    return "TensorFlow present: EventFileLoader uses TF's record reader"


def _report(files, repeat: int) -> None:
    print(f"python {sys.version.split()[0]}, cpus {os.cpu_count()}; best of {repeat} runs; page cache warm")
    print(_tensorflow_note())
    print("RSS+ = peak RSS growth of a fresh process after imports; traced = tracemalloc peak\n")
    header = f"{'file':<15} {'size':>9} {'reader':<20} {'MB/s':>8} {'s':>7} {'RSS+ MiB':>9} {'traced MiB':>10}"
    print(header)
    print("-" * len(header))
    speedups = []
    for label, mult, n, path, size in files:
        results = {}
        for reader in READERS:
            if reader == "TB EventFileLoader" and mult != 1:
                continue  # slow; its memory is not the point here
            r = measure(reader, path, repeat if reader != "TB EventFileLoader" else 1)
            results[reader] = r
            mbps = size / r["seconds"] / 1e6
            traced = f"{r['traced_peak'] / 2**20:10.1f}" if reader != "TB EventFileLoader" else f"{'':>10}"
            print(
                f"{label + ' x' + str(mult):<15} {size / 1e6:8.1f}M {reader:<20} {mbps:8.1f} "
                f"{r['seconds']:7.3f} {r['rss_growth_kb'] / 1024:9.1f} {traced}"
            )
        if "TB EventFileLoader" in results:
            ratio = results["TB EventFileLoader"]["seconds"] / results["event_file_stats"]["seconds"]
            speedups.append((label, ratio))
    print()
    for label, ratio in speedups:
        print(f"speedup of event_file_stats over TensorBoard's EventFileLoader on {label}: {ratio:.1f}x")


if __name__ == "__main__":
    main()
