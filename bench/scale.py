"""Cost per run on logdirs of many small runs (issue #28), next to ``cp -a`` and TensorBoard's Rust load.

    python bench/scale.py                          # 1,000 and 10,000 runs, a reduce of 50 runs each
    python bench/scale.py --sizes 1000 --reduce-runs all
    python bench/scale.py --sizes 100000 --skip reduce,plan_cold --time-limit 900
    python bench/scale.py --small                  # CI: 50 and 200 runs, a reduce of 6 runs

Input: N runs ``expNNNN/runNNNNNN`` of what a small training job leaves: one TF2 event file
(4 scalar tags x 100 steps, 2 histogram tags x 10 steps, written by ``synth.EventWriter``;
``--steps``/``--hist-every`` change that, e.g. so that archive rewrites every event file) and
one small xprof session (``synth.write_profile_session``: an ``xplane.pb`` of 100 events). A few
runs are written with the synth writers (different seeds) and the others are byte copies of
them, so generating 100k runs takes a minute, not an hour; every file is its own inode, aged
three days (outside the quiet period).

Each figure is measured in its own subprocess (peak RSS ``ru_maxrss`` is that phase's own; the
Rust server's is the largest child's):

* ``scan cold``: ``api.scan`` with an empty scan cache (page cache warm: the files were just
  written or read; dropping it would disturb the other users of the machine);
* ``scan warm``: ``api.scan`` again, served by the cache it wrote;
* ``plan``: ``api.plan(policy="archive")`` (the dry run: writes nothing) with the warm cache,
  and ``plan cold`` without any cache;
* ``reduce``: ``api.reduce_logdir(policy="archive", dry_run=False, ledger="default")`` (what
  ``tb-footprint reduce`` calls; ``--no-ledger`` leaves the ledger out) of ``--reduce-runs`` runs
  (a subset by default: its scan and plan cover the whole logdir, then each run is its own
  verified transaction). The time to the first outcome holds the fixed part (recovery, scan,
  plan, first run); the spacing of the outcomes gives the cost per run, and the estimate of a
  reduce of all N runs is fixed + N x per run. Its peak RSS is the whole batch's;
* ``upkeep``: ``api.recover_logdir`` after the reduce, what every start of a verb or of the tab
  does over the vault's operations (per operation);
* ``ledger``: one transition of the CLI's batch ledger when it lists all N runs (an appended
  line; the settled ones fsynced), measured apart since a subset reduce has a small ledger;
* anchors: ``cp -a`` of the logdir, and one load of it by TensorBoard's Rust data server
  (``--reload=once`` until its "Finished load cycle"), before and after the reduce.

Beside each wall time is the phase's CPU time (its process and the children it waited for): on
a shared machine contention inflates wall time several times, CPU time far less. Targets are
judged on wall time, as the issue states them, with the CPU ratio shown beside.

``--profile DIR`` runs every Python phase under cProfile and writes ``DIR/<phase>-<N>.prof``
(times are then inflated by the profiler).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

AGE_S = 3 * 86400
TEMPLATES = 4
RUNS_PER_GROUP = 100
TARGET = {
    "linear": 1.5,  # cost per run: largest / smallest across sizes
    "plan_vs_rust": 3.0,
    "warm_vs_cold": 0.20,
    "rss_mb": 300.0,
    "reduce_vs_anchor": 50.0,  # reduce of all runs / (cp -a + one Rust load)
    "state_per_run": 2048,
}


# --- input ------------------------------------------------------------------------------------
def _template_runs(root: str, steps: int = 100, hist_every: int = 10) -> List[Dict[str, bytes]]:
    """A few small runs written by the synth writers: {relative path: bytes}. 4 scalar tags
    over ``steps`` steps, 2 histogram tags every ``hist_every`` steps, one xprof session."""
    from tb_footprint_plugin import synth

    out = []
    for seed in range(TEMPLATES):
        run = os.path.join(root, f"t{seed}")
        with synth.EventWriter(run, timestamp=1_700_000_000) as w:
            for step in range(steps):
                for k, tag in enumerate(("loss", "accuracy", "learning_rate", "grad_norm")):
                    w.scalar(tag, step, 1.0 / (step + 1 + k + seed))
                if step % hist_every == 0:
                    for layer in range(2):
                        buckets = [(i - 15.0 + seed, i - 14.0 + seed, float((i * 7 + step + layer) % 31))
                                   for i in range(30)]
                        w.histogram(f"layer_{layer}/weights", step, buckets)
        synth.write_profile_session(run, synth.session_name_for(1_700_000_600), "host", n_events=100, seed=seed)
        files = {}
        for dirpath, _dirs, names in os.walk(run):
            for n in names:
                p = os.path.join(dirpath, n)
                with open(p, "rb") as f:
                    files[os.path.relpath(p, run)] = f.read()
        out.append(files)
    return out


def run_name(i: int) -> str:
    """The run name of the i-th run (groups of 100 under ``expNNNN``, as sweeps lay them out)."""
    return f"exp{i // RUNS_PER_GROUP:04d}/run{i:06d}"


def make_logdir(logdir: str, n: int, templates: List[Dict[str, bytes]]) -> int:
    """Write ``n`` runs into ``logdir`` (aged); returns the bytes written."""
    old = time.time() - AGE_S
    total = 0
    made = set()
    for i in range(n):
        run = os.path.join(logdir, run_name(i))
        for rel, data in templates[i % len(templates)].items():
            path = os.path.join(run, rel)
            parent = os.path.dirname(path)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            with open(path, "xb") as f:
                f.write(data)
            os.utime(path, (old, old))
            total += len(data)
    folders = {logdir}
    for d in made:
        while d not in folders:
            folders.add(d)
            d = os.path.dirname(d)
    for d in folders:  # after the last file went in: a folder's mtime is its last change
        os.utime(d, (old, old))
    return total


# --- phases (each in its own subprocess) --------------------------------------------------------
def _rust_load(logdir: str, timeout_s: float) -> dict:
    """One load of ``logdir`` by TensorBoard's Rust data server, until "Finished load cycle"."""
    from tb_footprint_plugin.verify import data_server_binary

    binary = data_server_binary()
    if not binary:
        return {"error": "the Rust data server (tensorboard-data-server) is not installed"}
    work = tempfile.mkdtemp(prefix="tbfp-scale-rust-")
    args = [binary, f"--logdir={logdir}", "--reload=once", "--port=0",
            f"--port-file={os.path.join(work, 'port')}", f"--error-file={os.path.join(work, 'error')}",
            "--die-after-stdin", "--verbose"]
    loaded = threading.Event()
    tail: List[str] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def read() -> None:
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            tail[:] = (tail + [line])[-5:]
            if "Finished load cycle" in line:
                loaded.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ok = loaded.wait(timeout_s)
    elapsed = time.perf_counter() - t0
    proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(timeout=2)
    shutil.rmtree(work, ignore_errors=True)
    if not ok:
        return {"error": f"no 'Finished load cycle' within {timeout_s:.0f} s: {' | '.join(tail)}"}
    return {"seconds": elapsed}


def _phase(kind: str, a: dict) -> dict:
    """Run one measured phase in this process; returns seconds and what the phase found."""
    from tb_footprint_plugin import api

    logdir = a["logdir"]
    if kind == "rust":
        return _rust_load(logdir, a.get("timeout", 3600))
    if kind in ("scan_cold", "scan_warm"):
        t = time.perf_counter()
        fp = api.scan(logdir)
        return {"seconds": time.perf_counter() - t, "runs": len(fp.runs), "files_read": fp.files_read,
                "files_cached": fp.files_cached, "bytes": fp.total_bytes}
    if kind in ("plan", "plan_cold"):
        t = time.perf_counter()
        p = api.plan(logdir, "archive")
        return {"seconds": time.perf_counter() - t, "runs": len(p.runs),
                "planned": sum(1 for rp in p.runs if rp.actions and not rp.skipped),
                "removable_bytes": p.removable_bytes}
    if kind == "reduce":
        stamps: List[float] = []
        runs = a.get("runs")
        t = time.perf_counter()
        rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, runs=runs, ledger=a.get("ledger"),
                                on_outcome=lambda o: stamps.append(time.perf_counter() - t))
        total = time.perf_counter() - t
        statuses: Dict[str, int] = {}
        for o in rep.outcomes:
            statuses[o.status] = statuses.get(o.status, 0) + 1
        reasons = sorted({f"{o.code}: {o.reason}" for o in rep.outcomes if o.status != "verified"})[:3]
        return {"seconds": total, "stamps": stamps, "statuses": statuses, "reasons": reasons,
                "saved_bytes": rep.saved_bytes}
    if kind == "ledger":
        # the batch ledger the CLI's reduce keeps: three transitions per run, each an appended
        # line (measured apart: a subset reduce has a small ledger)
        from tb_footprint_plugin.engine.ledger import Ledger

        folder = tempfile.mkdtemp(prefix="tbfp-scale-ledger-")
        book = Ledger(os.path.join(folder, "ledger.json"), "archive", logdir)
        names = [run_name(i) for i in range(a["n"])]
        book.start(names, {r: 47_000 for r in names})
        marks = 0
        t = time.perf_counter()
        for r in names[:20]:
            book.mark(r, "reducing", original_size_bytes=47_000)
            book.mark(r, "verifying")
            book.mark(r, "done", original_size_bytes=47_000, after_size_bytes=42_000, reduced_ratio=0.1,
                      verified=True, error=None, op_id="20260101T000000-abcdef", code=None)
            marks += 3
        elapsed = time.perf_counter() - t
        size = os.path.getsize(book.path)
        shutil.rmtree(folder, ignore_errors=True)
        return {"seconds": elapsed, "marks": marks, "ledger_bytes": size}
    if kind == "upkeep":
        t = time.perf_counter()
        outs = api.recover_logdir(logdir)
        return {"seconds": time.perf_counter() - t, "outcomes": len(outs)}
    raise SystemExit(f"unknown phase {kind}")


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (the data servers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _worker(kind: str, a: dict) -> None:
    from tb_footprint_plugin import api  # noqa: F401  (imports are the process's, not the phase's)

    prof = None
    if a.get("profile"):
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    cpu = _cpu()
    out = _phase(kind, a)
    out["cpu"] = _cpu() - cpu
    if prof is not None:
        prof.disable()
        prof.dump_stats(a["profile"])
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["child_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(out))


def measure(kind: str, cache: str, timeout: Optional[float] = None, **a) -> dict:
    """One phase in a fresh interpreter whose scan cache lives in ``cache`` (``XDG_CACHE_HOME``)."""
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--_worker", kind, json.dumps(a)],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped at the time limit ({timeout:.0f} s)"}
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-1500:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cp_a(logdir: str, scratch: str) -> dict:
    """``cp -a`` of the logdir into the scratch folder (the copy is removed afterwards, untimed)."""
    dest = os.path.join(scratch, "cp-a-copy")
    cpu = _cpu()
    t = time.perf_counter()
    subprocess.run(["cp", "-a", logdir, dest], check=True)
    elapsed = time.perf_counter() - t
    cpu = _cpu() - cpu
    shutil.rmtree(dest, ignore_errors=True)
    return {"seconds": elapsed, "cpu": cpu}


def best(fn, repeat: int) -> dict:
    """The fastest of ``repeat`` measurements (others share these cores: the minimum is the signal);
    an error is returned as is."""
    runs = []
    for _ in range(max(1, repeat)):
        r = fn()
        if "error" in r:
            return r
        runs.append(r)
    out = min(runs, key=lambda r: r["seconds"])
    out["all_seconds"] = [round(r["seconds"], 3) for r in runs]
    return out


def state_bytes(logdir: str) -> dict:
    """Bytes of the vault/state folder beyond its backups (apparent and allocated), and the scan cache."""
    from tb_footprint_plugin.storage.paths import state_dir

    sdir = state_dir(logdir)
    out = {"state": 0, "state_disk": 0, "blobs": 0, "cache": 0, "files": 0, "by_dir": {}}
    for dirpath, _dirs, names in os.walk(sdir):
        rel = os.path.relpath(dirpath, sdir)
        top = rel.split(os.sep)[0] if rel != "." else "."
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            if top == "blobs":
                out["blobs"] += st.st_size
                continue
            if top == "." and n.startswith("scan-cache"):
                out["cache"] += st.st_size
                continue
            out["state"] += st.st_size
            out["state_disk"] += st.st_blocks * 512
            out["files"] += 1
            key = top if top != "." else n
            out["by_dir"][key] = out["by_dir"].get(key, 0) + st.st_size
    return out


# --- one size ---------------------------------------------------------------------------------
def run_size(n: int, scratch: str, templates, args) -> dict:
    logdir = os.path.join(scratch, f"logdir-{n}")
    t = time.perf_counter()
    size = make_logdir(logdir, n, templates)
    row: dict = {"n": n, "bytes": size, "gen_s": time.perf_counter() - t}
    print(f"\n{n} runs: {size / 1e6:.1f} MB generated in {row['gen_s']:.1f} s", flush=True)
    skip = set(args.skip)
    deadline = time.monotonic() + args.time_limit if args.time_limit else None

    def left() -> Optional[float]:
        return None if deadline is None else max(1.0, deadline - time.monotonic())

    def prof(kind: str) -> Optional[str]:
        return os.path.join(args.profile, f"{kind}-{n}.prof") if args.profile else None

    def step(name: str, fn) -> dict:
        if name in skip:
            row[name] = {"error": "skipped (--skip)"}
            return row[name]
        r = fn()
        row[name] = r
        shown = f"{r['seconds']:.2f} s" if "seconds" in r else r["error"]
        rss = f", peak RSS {r['rss_mb']:.0f} MB" if "rss_mb" in r else ""
        print(f"  {name:<12} {shown}{rss}", flush=True)
        return r

    warm = os.path.join(scratch, f"cache-{n}")
    step("rust_before", lambda: best(lambda: measure("rust", warm, left(), logdir=logdir), args.repeat))
    step("cp_a", lambda: best(lambda: cp_a(logdir, scratch), args.repeat))

    def cold_scan() -> dict:
        shutil.rmtree(warm, ignore_errors=True)
        return measure("scan_cold", warm, left(), logdir=logdir, profile=prof("scan_cold"))

    step("scan_cold", lambda: best(cold_scan, args.repeat))
    row["cache_bytes"] = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(warm) for f in fs)
    step("scan_warm", lambda: best(lambda: measure("scan_warm", warm, left(), logdir=logdir,
                                                   profile=prof("scan_warm")), args.repeat))
    step("plan", lambda: best(lambda: measure("plan", warm, left(), logdir=logdir, profile=prof("plan")),
                              args.repeat))
    empty = os.path.join(scratch, f"nocache-{n}")
    step("plan_cold", lambda: best(lambda: measure("plan_cold", empty, left(), logdir=logdir,
                                                   profile=prof("plan_cold")), args.repeat))
    step("ledger", lambda: measure("ledger", warm, left(), logdir=logdir, n=n))
    k = n if args.reduce_runs == "all" else min(n, int(args.reduce_runs))
    if args.reduce_sizes and n not in args.reduce_sizes:
        k = 0
        skip.add("reduce")
    row["reduce_k"] = k
    # every n/k-th run: spread over the groups, as a user's selection would be
    picked = None if k == n else [run_name(i * n // k) for i in range(k)]
    red = step("reduce", lambda: measure("reduce", warm, left(), logdir=logdir, runs=picked,
                                         ledger=None if args.no_ledger else "default", profile=prof("reduce")))
    if "error" not in red and k:
        row["state"] = state_bytes(logdir)
        step("upkeep", lambda: best(lambda: measure("upkeep", warm, left(), logdir=logdir,
                                                    profile=prof("upkeep")), args.repeat))
        step("rust_after", lambda: best(lambda: measure("rust", warm, left(), logdir=logdir), args.repeat))
    if not args.keep:
        shutil.rmtree(logdir, ignore_errors=True)
    shutil.rmtree(warm, ignore_errors=True)
    shutil.rmtree(empty, ignore_errors=True)
    return row


# --- report -----------------------------------------------------------------------------------
def _met(ok: Optional[bool]) -> str:
    return "(target met)" if ok else ("(not met)" if ok is not None else "")


def reduce_split(r: dict, k: int) -> dict:
    """Fixed part and cost per run of a reduce, from the times its outcomes came in."""
    stamps = r.get("stamps") or []
    if len(stamps) >= 2:
        per_run = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    else:
        per_run = r["seconds"] / max(1, k)
    fixed = max(0.0, (stamps[0] if stamps else r["seconds"]) - per_run)
    return {"per_run": per_run, "fixed": fixed}


PHASES = ("rust_before", "cp_a", "scan_cold", "scan_warm", "plan", "plan_cold", "ledger", "reduce", "upkeep",
          "rust_after")


def _get(row: dict, name: str, key: str = "seconds") -> Optional[float]:
    return (row.get(name) or {}).get(key)


def _ratio(row: dict, a: str, b) -> str:
    """``a`` over ``b`` (a phase name or a list of them, summed) in wall time and in CPU time."""
    names = [b] if isinstance(b, str) else list(b)
    out = []
    for key in ("seconds", "cpu"):
        num, den = _get(row, a, key), [_get(row, n, key) for n in names]
        out.append(f"{num / sum(den):.2f}x" if num is not None and None not in den and sum(den) > 0 else "—")
    return f"{out[0]} (cpu {out[1]})"


def report(rows: List[dict], load_before, load_after, args) -> bool:
    """Print every figure next to its anchor and target; True when every phase ran.

    The machine may be shared: next to each wall time is the CPU time of the phase (its process
    and the children it waited for, the data servers), which contention inflates far less.
    Targets are judged on wall time, as the issue states them; the CPU ratio is shown beside."""
    ok = True
    print(f"\nmachine: {os.cpu_count()} cores, load average (1/5/15 min) "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after"
          + ("; under cProfile (times inflated)" if args.profile else ""))
    print(f"times: best of {args.repeat}; page cache warm; wall / CPU seconds (CPU: the phase's process and "
          "the children it waited for); RSS: the phase's own process\n")
    cols = ("rust_before", "cp_a", "scan_cold", "scan_warm", "plan", "plan_cold", "reduce", "upkeep", "rust_after")
    hdr = f"{'runs':>7} {'MB':>7} " + " ".join(f"{c:>13}" for c in cols)
    print(hdr)
    print("-" * len(hdr))
    for row in rows:
        cells = []
        for c in cols:
            w, cpu = _get(row, c), _get(row, c, "cpu")
            cells.append(f"{w:.2f}/{cpu:.2f}" if w is not None and cpu is not None
                         else (f"{w:.2f}/—" if w is not None else "—"))
        print(f"{row['n']:>7} {row['bytes'] / 1e6:>7.1f} " + " ".join(f"{x:>13}" for x in cells))
        for name in PHASES:
            r = row.get(name) or {}
            if "error" in r and not r["error"].startswith("skipped"):
                ok = False
                print(f"        {name}: {r['error']}")

    print("\nper run, ms (wall / CPU):")
    for name in ("scan_cold", "scan_warm", "plan", "plan_cold", "rust_before", "cp_a"):
        cells = [f"{row['n']}: {_get(row, name) / row['n'] * 1e3:.2f} / "
                 f"{(_get(row, name, 'cpu') or 0) / row['n'] * 1e3:.2f}" for row in rows
                 if _get(row, name) is not None]
        if cells:
            print(f"  {name:<12} " + ", ".join(cells))
    cells = [f"{row['n']}: {reduce_split(row['reduce'], row['reduce_k'])['per_run'] * 1e3:.0f} "
             f"(of {row['reduce_k']} runs)" for row in rows if _get(row, "reduce") is not None]
    if cells:
        print(f"  {'reduce':<12} " + ", ".join(cells) + " (wall, from the outcomes' spacing)")
    if len(rows) >= 2:
        print(f"\nlinear growth (cost per run at the largest size / at the smallest; target <= {TARGET['linear']}x):")
        for name in ("scan_cold", "scan_warm", "plan", "plan_cold"):
            per = [row for row in rows if _get(row, name) is not None]
            if len(per) >= 2:
                a, b = per[0], per[-1]
                ratio = (_get(b, name) / b["n"]) / (_get(a, name) / a["n"])
                cpu = ""
                if _get(a, name, "cpu") and _get(b, name, "cpu"):
                    cpu = f" (cpu {(_get(b, name, 'cpu') / b['n']) / (_get(a, name, 'cpu') / a['n']):.2f}x)"
                print(f"  {name:<12} {ratio:.2f}x{cpu} from {a['n']} to {b['n']} runs "
                      f"{_met(ratio <= TARGET['linear'])}")

    print()
    for row in rows:
        n = row["n"]
        rust, cp = _get(row, "rust_before"), _get(row, "cp_a")
        cold, warm = _get(row, "scan_cold"), _get(row, "scan_warm")
        print(f"{n} runs:")
        if cold and warm:
            print(f"  warm scan / cold scan: {_ratio(row, 'scan_warm', 'scan_cold')} "
                  f"(target <= {TARGET['warm_vs_cold']:.2f}x) {_met(warm / cold <= TARGET['warm_vs_cold'])}")
        if rust:
            for label, name in (("plan (scan cache warm)", "plan"), ("plan (no scan cache)", "plan_cold"),
                                ("cold scan", "scan_cold"), ("warm scan", "scan_warm")):
                v = _get(row, name)
                if v:
                    print(f"  {label} / Rust load: {_ratio(row, name, 'rust_before')} "
                          f"(target <= {TARGET['plan_vs_rust']:g}x for plan at 10k runs) "
                          f"{_met(v / rust <= TARGET['plan_vs_rust'])}")
        rss = [(name, row[name]["rss_mb"]) for name in ("scan_cold", "scan_warm", "plan", "plan_cold", "reduce",
                                                       "upkeep") if "rss_mb" in (row.get(name) or {})]
        if rss:
            worst = max(rss, key=lambda x: x[1])
            print("  peak RSS: " + ", ".join(f"{k} {v:.0f} MB" for k, v in rss)
                  + f"; largest {worst[1]:.0f} MB (target <= {TARGET['rss_mb']:.0f} MB at 100k runs) "
                  + _met(worst[1] <= TARGET["rss_mb"]))
        for name in ("rust_before", "rust_after"):
            if "child_rss_mb" in (row.get(name) or {}):
                print(f"  Rust data server peak RSS ({name.split('_')[1]} the reduce): "
                      f"{row[name]['child_rss_mb']:.0f} MB")
        red = row.get("reduce") or {}
        k = row.get("reduce_k", 0)
        verified = (red.get("statuses") or {}).get("verified", 0)
        if "seconds" in red:
            split = reduce_split(red, k)
            full = split["fixed"] + n * split["per_run"]
            print(f"  reduce of {k} run(s): {red['seconds']:.1f} s wall, {red.get('cpu', 0):.1f} s CPU; "
                  f"{verified}/{k} verified {json.dumps(red['statuses'])}; fixed part {split['fixed']:.1f} s "
                  f"(recovery, scan, plan, ledger), {split['per_run'] * 1e3:.0f} ms a run")
            stamps = red.get("stamps") or []
            if len(stamps) >= 20:
                tenth = len(stamps) // 10
                first = (stamps[tenth] - stamps[0]) / tenth
                last = (stamps[-1] - stamps[-1 - tenth]) / tenth
                print(f"  within the batch: {first * 1e3:.0f} ms a run over its first tenth, {last * 1e3:.0f} ms over "
                      f"its last ({last / first:.2f}x: growth with the runs already done)")
            for reason in red.get("reasons", []):
                print(f"    not verified: {reason[:200]}")
            if verified != k:
                ok = False
            if rust and cp:
                anchor = cp + rust
                est = "" if k == n else f" (estimated: fixed {split['fixed']:.1f} s + {n} x {split['per_run']:.3f} s)"
                cpu_note = ""
                if red.get("cpu") and _get(row, "cp_a", "cpu") is not None and _get(row, "rust_before", "cpu"):
                    cpu_full = red["cpu"] / red["seconds"] * full  # the reduce's CPU share of its wall time
                    anchor_cpu = _get(row, "cp_a", "cpu") + _get(row, "rust_before", "cpu")
                    cpu_note = f"; cpu ~{cpu_full / anchor_cpu:.0f}x"
                print(f"  reduce of all {n} runs: {full:.1f} s{est} = {full / anchor:.0f}x (cp -a {cp:.2f} s + "
                      f"Rust load {rust:.2f} s){cpu_note} (target <= {TARGET['reduce_vs_anchor']:g}x, every run "
                      f"verified) {_met(full / anchor <= TARGET['reduce_vs_anchor'] and verified == k)}")
        led = row.get("ledger") or {}
        if "seconds" in led:
            per_mark = led["seconds"] / led["marks"]
            print(f"  batch ledger of {n} runs ({led['ledger_bytes'] / 1e6:.1f} MB): {per_mark * 1e3:.1f} ms a "
                  f"transition, 3 a run: {3 * per_mark * 1e3:.0f} ms a run, ~{3 * n * per_mark:.0f} s for a reduce "
                  f"of all {n} (each transition an appended line)")
        up = row.get("upkeep") or {}
        if "seconds" in up and verified:
            print(f"  start-up upkeep (api.recover_logdir) over {verified} operation(s): {up['seconds']:.2f} s = "
                  f"{up['seconds'] / verified * 1e3:.1f} ms an operation (a vault of {n} operations: "
                  f"~{up['seconds'] / verified * n:.0f} s at every start, if it stays linear)")
        st = row.get("state")
        if st and verified:
            per = st["state"] / verified
            print(f"  vault state beyond backups: {st['state'] / 1e3:.1f} kB in {st['files']} files "
                  f"({st['state_disk'] / 1e3:.0f} kB on disk) = {per:.0f} B a reduced run "
                  f"(target <= {TARGET['state_per_run']} B) {_met(per <= TARGET['state_per_run'])}; "
                  "by file or folder: " + ", ".join(f"{k2} {v / 1e3:.1f} kB" for k2, v in
                                                    sorted(st["by_dir"].items(), key=lambda x: -x[1])[:6]))
        if row.get("cache_bytes"):
            print(f"  scan cache: {row['cache_bytes'] / 1e6:.1f} MB = {row['cache_bytes'] / n:.0f} B a run")
        after = _get(row, "rust_after")
        if rust and after:
            print(f"  TensorBoard's Rust data server loads the logdir in {rust:.2f} s before and {after:.2f} s "
                  f"after the default (archive) reduce of {k} of its {n} runs")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="numbers of runs, comma-separated (default 1000,10000)")
    ap.add_argument("--reduce-runs", default="50", help="runs the reduce takes at each size, or 'all' (default 50)")
    ap.add_argument("--reduce-sizes", default="", help="sizes at which to reduce (default: every size)")
    ap.add_argument("--small", action="store_true",
                    help="CI: 50 and 200 runs, a reduce of 6 runs at 200 (under a minute)")
    ap.add_argument("--scratch", default=None, help="where to write the logdirs (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=1, help="measure each phase this often, keep the best")
    ap.add_argument("--skip", default="", help="phases to leave out, e.g. reduce,plan_cold,cp_a")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds allowed for one size; a phase still running then is stopped and said so")
    ap.add_argument("--profile", default=None, help="write cProfile stats of each Python phase into this folder")
    ap.add_argument("--steps", type=int, default=100, help="scalar steps per run (default 100)")
    ap.add_argument("--hist-every", type=int, default=10,
                    help="a histogram point every N steps (default 10: 10 a tag, all of which the default "
                         "dashboard shows, so archive leaves the event file alone; --steps 400 --hist-every 1 "
                         "makes archive rewrite every event file)")
    ap.add_argument("--no-ledger", action="store_true",
                    help="reduce without the batch ledger (the CLI's reduce keeps one: <state>/ledger.json)")
    ap.add_argument("--json", default=None, help="also write every measurement to this JSON file")
    ap.add_argument("--keep", action="store_true", help="keep the generated logdirs (in --scratch)")
    ap.add_argument("--_worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._worker:
        _worker(args._worker[0], json.loads(args._worker[1]))
        return 0
    if args.small:
        args.sizes, args.reduce_runs, args.reduce_sizes = "50,200", "6", "200"
    if args.reduce_runs != "all" and not args.reduce_runs.isdigit():
        ap.error("--reduce-runs: a number or 'all'")
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    args.reduce_sizes = {int(x) for x in args.reduce_sizes.split(",") if x.strip()}
    args.skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        args.profile = os.path.abspath(args.profile)
    scratch = tempfile.mkdtemp(prefix="tbfp-bench-scale-", dir=args.scratch)
    load_before = os.getloadavg()
    rows = []
    try:
        templates = _template_runs(os.path.join(scratch, "templates"), args.steps, args.hist_every)
        per = sum(len(b) for b in templates[0].values())
        print(f"a run: {len(templates[0])} files, {per / 1e3:.1f} kB "
              f"({', '.join(sorted(os.path.basename(p) for p in templates[0]))})")
        for n in sizes:
            rows.append(run_size(n, scratch, templates, args))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    ok = report(rows, load_before, os.getloadavg(), args)
    print(_code_state())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "load_before": load_before, "load_after": os.getloadavg(),
                       "argv": sys.argv[1:], "code": _code_state()}, f, indent=1, default=str)
    return 0 if ok else 1


def _code_state() -> str:
    """Which code was measured: the commit, and whether the package had uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "tb_footprint_plugin"],
                               capture_output=True, text=True, timeout=10).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "code: not a git checkout"
    changed = [line[3:] for line in dirty if line.strip()]
    return (f"code: {head or '?'}" + (f" + uncommitted changes in {len(changed)} package file(s): "
                                        + ", ".join(changed[:6]) + (" …" if len(changed) > 6 else "")
                                        if changed else " (package clean)"))


if __name__ == "__main__":
    sys.exit(main())
