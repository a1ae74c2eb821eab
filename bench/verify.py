"""What verification costs on a big run, next to TensorBoard loading that run once.

    python bench/verify.py                    # 300 MB and 1 GB runs
    python bench/verify.py --sizes 300        # one size
    python bench/verify.py --small            # ~2 and ~4 MB (CI): the big-run path forced
    python bench/verify.py --scanned          # the logdir scanned first, as the tab does

Input: the histogram-heavy event file of ``bench/rewrite.py`` (legacy ``histo`` values, a
scalar per step, an image every 100 steps), one run in a fresh logdir. Each measurement runs
in its own subprocess so its peak RSS (``ru_maxrss``, the process and, separately, its
largest child: the data servers) is its own:

* ``rust load``: TensorBoard's Rust data server (``--reload=once``) loading the original
  once, until its "Finished load cycle" — the yardstick;
* ``reduce``: ``api.reduce_logdir(policy="archive")`` — plan, backup, rewrite, verification
  (with the routes), commit: the whole thing a user waits for, timed by phase (plan = scan
  and plan, rewrite = staging the reduced file, verify = the verification step); the issue's
  target is plan + rewrite + verify within 3x the Rust load (the backup, a copy and two
  sha256 passes of the original, is reported beside it);
  Inside a reduce the original is read once, by the plan's scan, which keeps its pass
  (``scan.passes``: sha256, record index, the batches' decode); the rewrite's selection
  replays it (``select``, inside ``rewrite``) and the copy reads only the kept records (the
  small ones, scalars mostly, not even those: the pass kept their bytes). It is
  loaded once by the Rust data server: by the plan's selection, whose load the reduce takes
  over (``verify.original.park``), or, when a cached plan made no selection, started before
  the backup so it loads meanwhile; both are handed to the verification (``verify.original``);
* ``verify new``: ``verify_reduction`` on its own, as ``tb-footprint verify`` runs it (nothing
  handed over: it streams the original for the records and loads it with the Rust server;
  TensorBoard's routes on the Rust default view, the Python loader on the reduced run, whole
  scalar tags thinned);
* ``verify old``: the verifier before issue 12 (both backends read every point of both
  sides, the Python loader over the whole original; no routes). Skipped above
  ``--old-max-mb`` (it reads ~4.5 MB/s and its memory follows the file).

``--small`` lowers the full-read threshold so a few-MB run takes the big-run path.
``--scanned`` scans the logdir (writing its scan cache) before the reduce, as the tab or
``tb-footprint scan`` would: the reduce's scan is then a cache hit and the rewrite's selection
makes the one pass over the original instead (``plan`` ~0, ``rewrite`` holds the pass).
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def _age(path: str) -> None:
    """Make every file look finished (no recent writes), so reduce does not skip the run."""
    old = time.time() - 3 * 86400
    for root, dirs, files in os.walk(path):
        for n in files + dirs:
            os.utime(os.path.join(root, n), (old, old))
    os.utime(path, (old, old))


def make_inputs(scratch: str, mb: float) -> dict:
    """A logdir with one histogram-heavy run, and a hard link of the original event file."""
    import rewrite  # bench/rewrite.py: the same input as the rewrite benchmark

    logdir = os.path.join(scratch, f"logdir-{mb:g}")
    run = os.path.join(logdir, "run")
    os.makedirs(run)
    src = rewrite.make_event_file(run, mb * 1e6)
    orig = os.path.join(scratch, f"orig-{mb:g}")
    os.makedirs(orig)
    # The reduce replaces the file by rename: the link keeps the original bytes for the
    # verifier-only measurements.
    os.link(src, os.path.join(orig, os.path.basename(src)))
    _age(logdir)
    return {"logdir": logdir, "run": run, "orig": orig, "bytes": os.path.getsize(src)}


# --- workers (one measurement per subprocess) ---------------------------------------------------
def _worker(kind: str, args: dict) -> dict:
    from tb_footprint_plugin.verify import dashboard

    if args.get("full_read_bytes") is not None:
        dashboard.FULL_READ_BYTES = int(args["full_read_bytes"])
    info: dict = {}
    t0 = time.perf_counter()
    if kind == "rust_load":
        from tb_footprint_plugin.formats import views

        tmp = tempfile.mkdtemp()
        logdir = os.path.join(tmp, "logdir")
        views.link_run(args["orig"], os.path.join(logdir, "run"))
        server = views.DataServer(views.data_server_binary(), logdir, tmp, "")
        t0 = time.perf_counter()
        server.start(60)
        if not server.loaded.wait(3600):
            raise SystemExit("data server never finished loading")
        elapsed = time.perf_counter() - t0
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        return {"kind": kind, "seconds": elapsed, **_rss()}
    if kind == "reduce":
        from tb_footprint_plugin import api
        from tb_footprint_plugin.engine import front_local  # where the local engine looks reduce_run up
        from tb_footprint_plugin.engine import transaction

        # Where the time goes, by phase: wrap the engine's own steps (measurement only).
        marks: dict = {}

        def timed(name, fn):
            def wrapper(*a, **kw):
                t = time.perf_counter()
                marks.setdefault(name + "_start", t - t0)
                try:
                    return fn(*a, **kw)
                finally:
                    marks[name] = marks.get(name, 0.0) + time.perf_counter() - t
            return wrapper

        from tb_footprint_plugin.transforms import event_rewrite

        front_local.reduce_run = timed("run", front_local.reduce_run)
        transaction.stage_file = timed("rewrite", transaction.stage_file)
        transaction.verify_run = timed("verify", transaction.verify_run)
        # the selection pass (inside the rewrite phase)
        event_rewrite.select_run = timed("select", event_rewrite.select_run)
        t0 = time.perf_counter()
        rep = api.reduce_logdir(args["logdir"], policy="archive", dry_run=False)
        outs = [o for o in rep.outcomes if o.status != "skipped"]
        o = outs[0]
        # plan: scan + plan up to the run's transaction; backup: up to the first rewrite
        info = {"plan_s": marks.get("run_start", 0.0),
                "rewrite_s": marks.get("rewrite", 0.0),
                "verify_phase_s": marks.get("verify", 0.0),
                "backup_s": marks.get("rewrite_start", 0.0) - marks.get("run_start", 0.0),
                "select_s": marks.get("select", 0.0),
                "status": o.status, "reason": o.reason,
                "verify_s": round((o.verification or {}).get("duration_s", 0), 2),
                "bytes_after": o.bytes_after,
                "expectations": (o.verification or {}).get("expectations") or {},
                "failed": (o.verification or {}).get("failed", [])[:3]}
    elif kind in ("verify_new", "verify_old"):
        from tb_footprint_plugin.verify import Expectations, verify_reduction

        # A one-time cost of the process, not of a run: TensorBoard's Python loader imports
        # TensorFlow when it is installed (~10 s). Reported separately.
        t_imp = time.perf_counter()
        from tensorboard.compat import tf

        tf.io  # noqa: B018 - the lazy import happens on first attribute access
        info["tf_import_s"] = round(time.perf_counter() - t_imp, 2)
        t0 = time.perf_counter()
        exp = Expectations(plugin_modes=args.get("expectations") or {})
        if kind == "verify_old":
            r = verify_reduction(args["orig"], args["run"], exp, routes=False,
                                 full_read_bytes=1 << 60)
        else:
            r = verify_reduction(args["orig"], args["run"], exp)
        info.update({"ok": r.ok, "failed": r.failed[:3], "lines": len(r.checks)})
    else:
        raise SystemExit(f"unknown worker {kind}")
    return {"kind": kind, "seconds": time.perf_counter() - t0, **_rss(), **info}


def _rss() -> dict:
    return {"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def measure(kind: str, **args) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", kind,
                           json.dumps(args)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_size(scratch: str, mb: float, old_max_mb: float, full_read_bytes,
             scanned: bool = False) -> dict:
    inp = make_inputs(scratch, mb)
    common = {"full_read_bytes": full_read_bytes}
    if scanned:  # as the tab would have, before the user asks for the reduce
        from tb_footprint_plugin.scan.scanner import scan

        scan(inp["logdir"])
    rust = measure("rust_load", orig=inp["orig"])
    red = measure("reduce", logdir=inp["logdir"], **common)
    if red["status"] != "verified":
        raise SystemExit(f"reduce did not verify: {red}")
    new = measure("verify_new", orig=inp["orig"], run=inp["run"],
                  expectations=red["expectations"], **common)
    old = (measure("verify_old", orig=inp["orig"], run=inp["run"],
                   expectations=red["expectations"], **common)
           if mb <= old_max_mb else None)
    shutil.rmtree(inp["logdir"], ignore_errors=True)
    shutil.rmtree(inp["orig"], ignore_errors=True)
    return {"mb": inp["bytes"] / 1e6, "rust": rust, "reduce": red, "new": new, "old": old,
            "after_mb": red["bytes_after"] / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="300,1024", help="event file sizes in MB, comma-separated")
    ap.add_argument("--small", action="store_true", help="~2 and ~4 MB, big-run path forced (CI)")
    ap.add_argument("--old-max-mb", type=float, default=400,
                    help="run the old verifier only up to this size (default 400)")
    ap.add_argument("--scratch", default=None, help="where to write the inputs (default: a temp dir)")
    ap.add_argument("--scanned", action="store_true",
                    help="scan each logdir (its scan cache written) before the reduce")
    ap.add_argument("--full-read-mb", type=float, default=None,
                    help="the full-read threshold to use (default: the package's)")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(_worker(a.worker[0], json.loads(a.worker[1]))))
        return
    sizes = [2.0, 4.0] if a.small else [float(s) for s in a.sizes.split(",")]
    full_read = 1 << 20 if a.small else None  # --small: a few MB must take the big-run path
    if a.full_read_mb is not None:
        full_read = int(a.full_read_mb * (1 << 20))
    old_max = min(a.old_max_mb, 2.0) if a.small else a.old_max_mb  # CI: one old-verifier row
    scratch = tempfile.mkdtemp(prefix="tbfp-bench-verify-", dir=a.scratch)
    load_before = os.getloadavg()
    rows = []
    try:
        for mb in sizes:
            rows.append(run_size(scratch, mb, old_max, full_read, a.scanned))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    load_after = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average (1/5/15 min) "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} after")
    print("plan + rewrite + verification of archive, next to the Rust data server loading the "
          "original once (target: <= 3x)" + ("; logdir scanned first (scan cache hit: the "
                                             "selection makes the pass)" if a.scanned else ""))
    print("('select': the rewrite's selection, replayed from the scan's pass over the original, "
          "inside 'rewrite'; the Rust load of the original starts before the backup and is shared "
          "by rewrite and verify)")
    print(f"{'run':>9} {'rust load':>10} {'plan':>7} {'rewrite':>8} {'verify':>8} "
          f"{'sum':>8} {'ratio':>7} {'backup':>7} {'select':>7} {'reduce':>8} {'peak RSS':>9} "
          f"{'child RSS':>10}")
    for r in rows:
        rust_s, red = r["rust"]["seconds"], r["reduce"]
        total = red["plan_s"] + red["rewrite_s"] + red["verify_phase_s"]
        print(f"{r['mb']:7.0f}MB {rust_s:9.2f}s {red['plan_s']:6.2f}s {red['rewrite_s']:7.2f}s "
              f"{red['verify_phase_s']:7.2f}s {total:7.2f}s {total / rust_s:6.1f}x "
              f"{red['backup_s']:6.2f}s {red['select_s']:6.2f}s {red['seconds']:7.2f}s "
              f"{red['rss_mb']:7.0f}MB "
              f"{red['child_rss_mb']:8.0f}MB"
              + ("  (3x reached)" if total <= 3 * rust_s else "  (3x not reached)"))
    print()
    print(f"{'run':>9} {'rust load':>10} {'verify new':>11} {'verify old':>11} {'new/rust':>9} "
          f"{'reduce':>8} {'reduce/rust':>12} {'RSS new':>9} {'RSS old':>9} {'RSS reduce':>11} "
          f"{'server RSS':>11}")
    for r in rows:
        rust_s = r["rust"]["seconds"]
        old = r["old"]
        old_s = f"{old['seconds']:10.2f}s" if old else "skipped"
        old_rss = f"{old['rss_mb']:7.0f}MB" if old else "skipped"
        print(f"{r['mb']:7.0f}MB {rust_s:9.2f}s {r['new']['seconds']:10.2f}s "
              f"{old_s:>11} "
              f"{r['new']['seconds'] / rust_s:8.1f}x {r['reduce']['seconds']:7.1f}s "
              f"{r['reduce']['seconds'] / rust_s:11.1f}x {r['new']['rss_mb']:7.0f}MB "
              f"{old_rss:>9} "
              f"{r['reduce']['rss_mb']:9.0f}MB {r['new']['child_rss_mb']:9.0f}MB")
    for r in rows:
        print(f"{r['mb']:.0f} MB -> {r['after_mb']:.1f} MB after archive; verification inside "
              f"reduce {r['reduce']['verify_s']:.2f}s; new verifier ok={r['new']['ok']} "
              f"({r['new']['lines']} lines)" + (f", old ok={r['old']['ok']}" if r["old"] else ""))
    if len(rows) >= 2:
        a0, a1 = rows[0], rows[-1]
        print(f"peak RSS of the new verifier: {a0['new']['rss_mb']:.0f} MB at {a0['mb']:.0f} MB, "
              f"{a1['new']['rss_mb']:.0f} MB at {a1['mb']:.0f} MB "
              f"({a1['new']['rss_mb'] / max(a0['new']['rss_mb'], 1):.2f}x for "
              f"{a1['mb'] / a0['mb']:.1f}x the file)")


if __name__ == "__main__":
    main()
