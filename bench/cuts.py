"""What ``archive`` frees, verified on both backends, on generated logdirs.

    python bench/cuts.py            # tensorboardX run (3 tags x 1,000 histograms) + 300 MB project
    python bench/cuts.py --small    # the same run with small records + a 20 MB project (CI, < 1 minute)

Inputs (``tb_footprint_plugin.synth``):

* ``tbx histograms``: a tensorboardX-style run, 3 legacy histogram tags x 1,000 steps
  (~10 KB records, TF's default buckets, ~30 MB; ``--small``: ~0.5 KB records of a narrow
  range, same record counts) and a loss scalar every 10 steps;
* ``profiled project``: ~75% PyTorch profiler traces, ~11% histograms, ~7% scalars, ~6% xprof
  sessions with the caches a viewed session leaves, ~1% the rest (text, hparams, images, a
  graph, run metadata).

Each is reduced with the built-in ``archive`` policy through the public API (plan, backup,
rewrite, verification on the Python and the Rust backends, swap). Printed: bytes before and
after, the cut, wall time of the reduce, verification time per run (the sum of every check,
from the outcome), and whether every scalar / hparams / text record is still there byte for
byte (sha256 multiset of those records, before and after). Exit status 1 if a target is
missed: >= 85% on the tensorboardX run, >= 90% on the project, protected records identical.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TARGETS = {"tbx histograms": 0.85, "profiled project": 0.90}


def user_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, fs in os.walk(root) for n in fs
               if ".tb-footprint" not in d.split(os.sep))


def measure(name: str, logdir: str) -> dict:
    from tb_footprint_plugin import api
    from tb_footprint_plugin.synth import protected_digests

    before = user_bytes(logdir)
    prot0 = protected_digests(logdir)
    t0 = time.monotonic()
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, verify_backends=("python", "rust"))
    wall = time.monotonic() - t0
    after = user_bytes(logdir)
    prot1 = protected_digests(logdir)
    # "skipped": nothing to do (e.g. a scalars-only run), said by the plan
    failed = [o.run for o in rep.outcomes if o.status not in ("verified", "skipped")]
    verify_s = {o.run: (o.verification or {}).get("duration_s", 0.0) for o in rep.outcomes}
    return {"name": name, "before": before, "after": after, "cut": 1 - after / before, "wall_s": wall,
            "verify_s": verify_s, "failed": failed, "ok": rep.ok,
            "protected": prot0 == prot1, "protected_records": sum(prot0.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="20 MB project (CI)")
    ap.add_argument("--project-mb", type=float, default=None, help="project size in MB (default 300)")
    args = ap.parse_args(argv)
    from tb_footprint_plugin import fmt
    from tb_footprint_plugin import synth as sp

    project_mb = args.project_mb or (20 if args.small else 300)
    tmp = tempfile.mkdtemp(prefix="tbfp-cuts-")
    rows = []
    try:
        tbx = os.path.join(tmp, "tbx")
        sp.write_tbx_histogram_run(os.path.join(tbx, "run"), spread=10.0 if args.small else 0.0)
        sp.age(tbx)
        rows.append(measure("tbx histograms", tbx))
        proj = os.path.join(tmp, "project")
        parts = sp.write_profiled_project(proj, int(project_mb * 1e6))
        sp.age(proj)
        total = sum(parts.values())
        print("project parts: " + ", ".join(f"{k} {fmt.human_bytes(v)} ({v / total:.0%})"
                                            for k, v in parts.items()))
        rows.append(measure("profiled project", proj))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = True
    print(f"{'logdir':<18} {'before':>10} {'after':>10} {'cut':>7} {'target':>7} {'reduce':>8}  "
          f"verification per run (both backends)   scalars/hparams/text")
    for r in rows:
        target = TARGETS[r["name"]]
        good = r["ok"] and not r["failed"] and r["cut"] >= target and r["protected"]
        ok &= good
        ver = ", ".join(f"{run} {s:.1f}s" for run, s in sorted(r["verify_s"].items()))
        print(f"{r['name']:<18} {fmt.human_bytes(r['before']):>10} {fmt.human_bytes(r['after']):>10} "
              f"{r['cut']:>7.1%} {target:>7.0%} {r['wall_s']:>7.1f}s  {ver}   "
              f"{'identical' if r['protected'] else 'CHANGED'} ({r['protected_records']} records)"
              + ("" if good else "   <-- MISSED" + (f" (not verified: {r['failed']})" if r["failed"] else "")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
