"""Benchmark of a sharded batch: wall time of ``archive`` over a generated logdir with 1, 2 and 4
workers (each ``tb-footprint reduce --shard I/N`` in its own process, all started at once, as a
Slurm array or an Indexed Job would), and what the per-run lock and the ledger cost.

    python bench/shards.py             # 2,000 small runs
    python bench/shards.py --small     # what CI runs (well under a minute)

Each run: scalars plus one xprof profile session (what ``archive`` removes). Verification uses
the Python reader backend only (the batch mechanics are what is measured here; bench/reduce.py
times the verification backends). The figures printed: wall time and runs/s per worker count,
speed-up over one worker, and per-run overhead of the lock (flock + lease written, read back and
removed), of the ledger (three transitions per run, each an fsynced atomic rewrite of the
shard's ledger, every entry checked on reading, measured at the ledger size a shard of the batch
has) and of the change log (one fsynced line appended to the worker's own history file).

How it scales to 100 workers: the per-run work (read, back up, verify) is each worker's own
and grows with machines; the per-run bookkeeping does not grow with N (the lock is a few
metadata operations on the run's own lease file, each shard's ledger holds only its 1/N of the
runs, each worker appends to its own history file). What saturates first is the shared
filesystem's metadata service: every worker scans the whole logdir to compute the partition
(N full scans at start), and every transaction creates, renames and removes files in the
same few state directories (``locks/``, ``journal/``, the vault's ``ops/``), one directory
lock on the metadata server for all workers — cap it with ``--max-file-ops-per-second``. On a
bucket the same place is the request rate under the ``.tb-footprint/`` prefix (S3 takes about
3,500 writes a second per prefix; beyond that it answers 503 SlowDown, which is retried).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tb_footprint_plugin import synth  # noqa: E402


def make_logdir(root: str, n_runs: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    old = time.time() - 86400
    for i in range(n_runs):
        run = os.path.join(root, f"team{i % 7}", f"run{i:05d}")
        os.makedirs(run)
        with synth.EventWriter(run, timestamp=1_700_000_000 + i) as w:
            for step in range(10 + rng.randrange(40)):
                w.scalar("loss", step, 1.0 / (step + 1))
        synth.write_profile_session(run, synth.session_name_for(1_700_000_000 + i), "host",
                                    n_events=10 + rng.randrange(200), seed=i)
    for d, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(d, f), (old, old))
    return root


def batch(logdir: str, workers: int) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", logdir, "--verify", "python", "--json", "--yes"]
    t = time.perf_counter()
    procs = [subprocess.Popen(cmd + ["--shard", f"{i}/{workers}"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(workers)]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - t
    verified = 0
    others = []
    failed = [why_failed(i, workers, p.returncode, out, err) for i, (p, (out, err)) in enumerate(zip(procs, outs))
              if p.returncode != 0]
    if failed:
        raise SystemExit("\n".join(failed))
    for p, (out, err) in zip(procs, outs):
        outcomes = json.loads(out)["outcomes"]
        verified += sum(o["status"] == "verified" for o in outcomes)
        others += [(o["run"], o["status"], o.get("code"), o.get("reason")) for o in outcomes if o["status"] != "verified"]
    return {"workers": workers, "seconds": wall, "verified": verified, "others": others}


def why_failed(index: int, workers: int, rc: int, out: str, err: str) -> str:
    """What a failed worker said, so a failure of the batch says why (an exit 1 with --json and an
    empty stderr is a run failed, rolled back or left unread, named only in its stdout): its
    non-verified outcomes (run, status, code, reason), the error it reported as JSON, the
    start-up recoveries not completed, its ledger problems, and the tail of its stderr."""
    lines = [f"the worker of shard {index}/{workers} failed (exit {rc})"]
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
        lines.append(f"  stdout (not JSON), tail: {out[-1000:]!r}")
    for d in doc if isinstance(doc, list) else [doc] if isinstance(doc, dict) else []:
        if isinstance(d.get("error"), dict):
            lines.append(f"  error: {d['error']}")
        for o in d.get("outcomes") or ():
            if o.get("status") != "verified":
                lines.append(f"  {o.get('run')}: {o.get('status')} [{o.get('code')}] {o.get('reason')}")
        for r in d.get("recovered") or ():
            if r.get("action") != "completed":
                lines.append(f"  recovered at start: {r}")
        for problem in d.get("ledger_problems") or ():
            lines.append(f"  ledger problem: {problem}")
    lines.append(f"  stderr, tail: {err[-2000:]!r}" if err.strip() else "  stderr: (empty)")
    return "\n".join(lines)


def overhead(tmp: str, ledger_runs: int, n: int = 300) -> dict:
    from tb_footprint_plugin.engine.journal import RunLock
    from tb_footprint_plugin.engine.ledger import Ledger

    locks = os.path.join(tmp, "state", "locks")
    t = time.perf_counter()
    for i in range(n):
        with RunLock(locks, f"run{i}"):
            pass
    lock_ms = (time.perf_counter() - t) / n * 1000
    book = Ledger(os.path.join(tmp, "state", "ledger-shard-0-of-1.json"), "archive", tmp, shard="0/1")
    names = [f"team{i % 7}/run{i:05d}" for i in range(ledger_runs)]
    book.start(names)
    m = min(n, ledger_runs)
    t = time.perf_counter()
    for r in names[:m]:
        book.mark(r, "reducing", original_size_bytes=12345)
        book.mark(r, "verifying")
        book.mark(r, "done", original_size_bytes=12345, after_size_bytes=2345, verified=True, op_id="x")
    ledger_ms = (time.perf_counter() - t) / m * 1000
    from tb_footprint_plugin.engine import history

    before = history.configure_writer("0/1")
    try:
        t = time.perf_counter()
        for r in names[:m]:
            history.append_history(os.path.join(tmp, "state"), {"kind": "reduce", "run": r, "outcome": "verified",
                                                                "before": 12345, "after": 2345, "op_id": "x"})
        history_ms = (time.perf_counter() - t) / m * 1000
    finally:
        history.configure_writer(before)
    return {"lock_ms_per_run": lock_ms, "ledger_ms_per_run": ledger_ms, "ledger_runs": ledger_runs,
            "history_ms_per_run": history_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="a small logdir (CI)")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--workers", default="1,2,4")
    args = ap.parse_args()
    n_runs = args.runs or (60 if args.small else 2000)
    counts = [int(x) for x in args.workers.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench-shards-")
    try:
        t = time.perf_counter()
        template = make_logdir(os.path.join(tmp, "template"), n_runs)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(template) for f in fs)
        print(f"logdir: {n_runs} runs, {size / 1e6:.1f} MB, generated in {time.perf_counter() - t:.1f}s; "
              f"{os.cpu_count()} CPU(s)")
        base = None
        for w in counts:
            ld = os.path.join(tmp, f"w{w}")
            shutil.copytree(template, ld)
            r = batch(ld, w)
            if r["verified"] != n_runs:
                raise SystemExit(f"{w} worker(s): {r['verified']} of {n_runs} runs verified; the others: {r['others']}")
            base = base or r["seconds"] * counts[0]
            print(f"archive, {w} worker(s): {r['seconds']:7.1f}s wall  {n_runs / r['seconds']:6.1f} runs/s  "
                  f"speed-up {base / r['seconds']:.2f}x  ({r['verified']} runs reduced and verified once)")
            shutil.rmtree(ld)
        for w in counts:
            o = overhead(os.path.join(tmp, f"o{w}"), max(1, n_runs // w))
            print(f"per-run overhead with {w} shard(s): lock {o['lock_ms_per_run']:.2f} ms (flock + lease), "
                  f"ledger {o['ledger_ms_per_run']:.2f} ms (3 transitions, {o['ledger_runs']}-run shard ledger), "
                  f"history {o['history_ms_per_run']:.2f} ms (1 fsynced line, worker's own file)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
