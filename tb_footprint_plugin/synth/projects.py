"""Logdirs shaped like real projects, for the cut benchmark (``bench/cuts.py``) and its tests.

* ``write_tbx_histogram_run``: a tensorboardX / ``torch.utils.tensorboard`` run of legacy
  ``histo`` values (TF's default exponential buckets, ~10 KB a record for a weight tensor),
  3 tags x 1,000 steps by default (~30 MB), plus a loss scalar every 10 steps;
* ``write_profiled_project``: a logdir in the proportions of a typical profiled project:
  ~75% PyTorch profiler traces, ~11% histograms, ~7% scalars, ~6% xprof sessions with the
  caches a viewed session leaves, ~1% the rest (text, hparams, images, a graph, run metadata);
* ``protected_digests``: the scalar / hparams / text records of a logdir, to check they did not
  change; ``age``: make a logdir look finished.

Nothing here depends on tensorboardX.
"""
from __future__ import annotations

import collections
import hashlib
import os
import random
import time
from typing import Dict, List

from tensorboard.compat.proto import event_pb2, summary_pb2

from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.scan.tfrecord import RecordReader
from tb_footprint_plugin.synth.events import (EventWriter, legacy_histogram_proto, make_graph_def,
                                              make_run_metadata)
from tb_footprint_plugin.synth.media import make_png
from tb_footprint_plugin.synth.torch_trace import torch_trace_name, write_torch_trace
from tb_footprint_plugin.synth.xprof import session_name_for, write_profile_session

#: Share of each part of ``write_profiled_project`` (bytes).
PROJECT_SHARES = {"torch_traces": 0.75, "histograms": 0.11, "scalars": 0.07, "xprof": 0.06, "rest": 0.01}


def _histo_variants(n: int, size: int, seed: int, spread: float = 0.0) -> List[summary_pb2.HistogramProto]:
    """``n`` histograms of ``size`` values: a weight tensor around 0 (~600 of TF's exponential
    buckets, ~10 KB) or, with ``spread``, values in ``[1, 1 + spread]`` (few buckets: small
    records, e.g. ~0.4 KB for a spread of 10)."""
    rng = random.Random(seed)
    if spread:
        return [legacy_histogram_proto([1 + rng.random() * spread * (1 + i / 20) for _ in range(size)])
                for i in range(n)]
    return [legacy_histogram_proto([rng.gauss(0, 1 + i / 10) for _ in range(size)]) for i in range(n)]


def write_tbx_histogram_run(run_dir: str, *, tags: int = 3, steps: int = 1000, values: int = 1500,
                            seed: int = 0, scalar_every: int = 10, timestamp: int = 1795990000,
                            spread: float = 0.0) -> str:
    """One tensorboardX-style event file: ``tags`` legacy histogram tags at every step (each
    record ~4 bytes per value of a weight tensor of ``values`` values, as tensorboardX
    writes them with ``bins="tensorflow"``), a ``loss`` scalar every ``scalar_every`` steps.
    Returns the file's path."""
    variants = _histo_variants(8, values, seed, spread)
    with EventWriter(run_dir, style="torch", timestamp=timestamp) as w:
        for s in range(steps):
            wall = timestamp + s * 0.5
            for t in range(tags):
                v = summary_pb2.Summary.Value(tag=f"layer{t}/weight", histo=variants[(s + t) % len(variants)])
                w.write_event(event_pb2.Event(wall_time=wall, step=s, summary=summary_pb2.Summary(value=[v])))
            if scalar_every and s % scalar_every == 0:
                w.legacy_simple_value("loss", s, 1.0 / (s + 1), wall_time=wall)
        return w.path


def _write_scalar_run(run_dir: str, target: int, timestamp: int) -> None:
    """tensorboardX ``add_scalar`` at every step (~45 bytes a record) until ``target`` bytes."""
    with EventWriter(run_dir, style="torch", timestamp=timestamp) as w:
        s = 0
        while True:
            for _ in range(1000):
                wall = timestamp + s * 0.01
                w.legacy_simple_value("train/loss", s, 1.0 / (s + 1), wall_time=wall)
                w.legacy_simple_value("train/lr", s, 1e-3 * (0.999 ** (s // 100)), wall_time=wall)
                s += 1
            w._file.flush()
            if os.path.getsize(w.path) >= target:
                break


def _write_rest(run_dir: str, target: int, timestamp: int) -> None:
    """Text, hparams, a few images, a graph and run metadata (TF1 ``add_run_metadata``)."""
    with EventWriter(run_dir, style="torch", timestamp=timestamp) as w:
        w.hparams({"lr": 1e-3, "batch": 64, "optimizer": "adam"}, ["train/loss"])
        w.graph_def(make_graph_def(60, seed=1))
        w.run_metadata("step1", 1, make_run_metadata(40, seed=1))
        s = 0
        while True:
            w.text("notes", s, f"epoch {s}: nothing to report " * 4)
            w.legacy_image("samples", s, make_png(16, 16, seed=s % 7), 16, 16)
            s += 1
            w._file.flush()
            if os.path.getsize(w.path) >= target:
                break


def write_profiled_project(logdir: str, total_bytes: int = 200_000_000, *, seed: int = 0) -> Dict[str, int]:
    """A profiled project of about ``total_bytes`` in ``PROJECT_SHARES``; returns bytes per part.

    Runs: ``resnet/`` (PyTorch traces beside a tensorboardX histogram + scalar event file, as
    ``tensorboard_trace_handler`` and ``SummaryWriter`` share a run directory), ``resnet_long/``
    (a long scalar run), ``tf_profile/`` (xprof sessions that were viewed: caches), ``notes/``
    (the rest)."""
    sizes: Dict[str, int] = {}
    os.makedirs(logdir, exist_ok=True)
    ts = 1795990000
    share = {k: int(total_bytes * v) for k, v in PROJECT_SHARES.items()}

    run = os.path.join(logdir, "resnet")
    os.makedirs(run, exist_ok=True)
    traces = 0
    i = 0
    while traces < share["torch_traces"]:
        ns = (ts + 60 * i) * 10**9
        per = min(max(1, int((share["torch_traces"] - traces) / 0.9e6)), 40)
        traces += write_torch_trace(os.path.join(run, torch_trace_name(ns=ns)), n_steps=per,
                                          seed=seed + i, start_ns=ns)
        i += 1
    sizes["torch_traces"] = traces
    # histograms: 3 tags of at least 1,000 steps; records as large as the share allows
    for spread in (0.0, 1e6, 1e3, 10.0, 1.0):
        rec = _histo_variants(1, 500, seed, spread)[0].ByteSize() + 40
        if 3 * 1000 * rec <= share["histograms"]:
            break
    steps = max(1000, share["histograms"] // (3 * rec))
    sizes["histograms"] = os.path.getsize(write_tbx_histogram_run(
        run, steps=steps, values=500, seed=seed, scalar_every=0, timestamp=ts + 1, spread=spread))

    _write_scalar_run(os.path.join(logdir, "resnet_long"), share["scalars"], ts + 2)
    sizes["scalars"] = _dir_bytes(os.path.join(logdir, "resnet_long"))

    prof_run = os.path.join(logdir, "tf_profile")
    xprof = 0
    j = 0
    while xprof < share["xprof"]:
        # ~95 bytes an event with the caches of a viewed session
        n_events = int(min(200_000, max(1000, (share["xprof"] - xprof) / 95)))
        written = write_profile_session(prof_run, session_name_for(ts + 3600 * j),
                                              n_events=n_events, with_caches=True, seed=seed + j)
        xprof += sum(os.path.getsize(p) for p in written)
        j += 1
    sizes["xprof"] = xprof

    _write_rest(os.path.join(logdir, "notes"), share["rest"], ts + 3)
    sizes["rest"] = _dir_bytes(os.path.join(logdir, "notes"))
    return sizes


def protected_digests(logdir: str) -> collections.Counter:
    """``{(run, sha256 of the record): count}`` of every event record holding a scalar, hparams
    or text value (a tag is bound to its plugin by its first value, as TensorBoard does):
    equal before and after a reduction means those records are all there, byte for byte."""
    out: collections.Counter = collections.Counter()
    for d, _, files in os.walk(logdir):
        if ".tb-footprint" in d.split(os.sep):
            continue
        binding: Dict[str, str] = {}
        for n in sorted(files):
            if not cat.is_event_file_name(n):
                continue
            with RecordReader(os.path.join(d, n), verify=True, display_name=n) as reader:
                for rec in reader:
                    ev = event_pb2.Event.FromString(rec.data)
                    hit = False
                    for v in ev.summary.value:
                        if v.tag not in binding:
                            binding[v.tag] = "scalars" if v.WhichOneof("value") == "simple_value" else (
                                v.metadata.plugin_data.plugin_name)
                        hit |= binding[v.tag] in cat.PROTECTED_PLUGINS
                    if hit:
                        out[(os.path.relpath(d, logdir), hashlib.sha256(rec.data).hexdigest())] += 1
    return out


def _dir_bytes(d: str) -> int:
    return sum(os.path.getsize(os.path.join(r, n)) for r, _, fs in os.walk(d) for n in fs)


def age(root: str, seconds: float = 3600.0) -> None:
    """Make every file look finished (older than the active-run window)."""
    old = time.time() - seconds
    for dirpath, _, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(dirpath, n), (old, old))


__all__ = ["PROJECT_SHARES", "age", "protected_digests", "write_profiled_project", "write_tbx_histogram_run"]
