"""The compressed vault against the hard-link vault, on the same mixed logdir, in one run (#27.5).

    python bench/vault.py            # 300 MB mixed project + a 2 GB PyTorch trace
    python bench/vault.py --small    # 30 MB project + a 50 MB trace (CI, about a minute)

Inputs (``tb_footprint_plugin.synth``): the profiled project of bench/cuts.py (PyTorch traces,
xprof sessions with a viewed session's caches, tensorboardX histograms, scalars, images and the
rest), copied twice byte for byte; and one run holding a single big PyTorch trace.

Each copy is reduced with the default ``archive`` policy through the public API, one with
``vault_format="compressed"`` (the default), the other with ``"hardlink"`` (the anchor), then
restored. Printed side by side, each figure beside its anchor measured in the same run:

* disk in use (logdir + vault, as ``du`` counts it: ``engine.usage``, checked against ``du``)
  after the reduce, as a share of before — target <= 20% with the compressed vault, no purge;
* reduce wall time, compressed / hard-link — target <= 1.5x;
* restore wall time, compressed / hard-link — target <= 1.5x; every file back byte for byte;
* peak RSS of a process reducing the big-trace run (compressed and hard-link) — target <= 200 MB.

Exit status 1 if a target is missed or a restore is not exact.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

TARGET_DISK_SHARE = 0.20
TARGET_TIME_RATIO = 1.5
TARGET_RSS_MB = 200
#: below this a wall time is mostly start-up noise: ratios of two such times are not gated
NOISE_S = 2.0


def tree(root: str) -> dict:
    """rel path -> (sha256, mode, mtime_ns) of every user file (the vault left out)."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".tb-footprint")]
        for n in files:
            p = os.path.join(d, n)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for b in iter(lambda: f.read(1 << 20), b""):
                    h.update(b)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (h.hexdigest(), st.st_mode, st.st_mtime_ns)
    return out


def du(path: str) -> int:
    out = subprocess.run(["du", "-sc", "--block-size=1", path], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def run_vault(logdir: str, fmt_name: str) -> dict:
    from tb_footprint_plugin import api

    before_tree = tree(logdir)
    in_use_before = du(logdir)  # no vault yet
    t0 = time.monotonic()
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, vault_format=fmt_name)
    reduce_s = time.monotonic() - t0
    failed = [o.run for o in rep.outcomes if o.status not in ("verified", "skipped")]
    st = api.status(logdir)
    after, du_after = st["disk_in_use_bytes"], du(logdir)
    blobs = [os.path.join(d, n) for d, _, fs in os.walk(os.path.join(logdir, ".tb-footprint", "blobs")) for n in fs]
    t0 = time.monotonic()
    outs = api.restore(logdir)
    restore_s = time.monotonic() - t0
    exact = all(o.status == "restored" for o in outs) and tree(logdir) == before_tree
    return {"fmt": fmt_name, "before": in_use_before, "after": after, "du_after": du_after, "reduce_s": reduce_s,
            "restore_s": restore_s, "exact": exact, "failed": failed, "ok": rep.ok,
            "zst": sum(1 for b in blobs if b.endswith(".zst")), "plain": sum(1 for b in blobs if not b.endswith(".zst")),
            "freed_now": rep.freed_now_bytes, "after_purge": rep.freed_on_disk_after_purge_bytes}


# The child's own peak (VmHWM of its memory map): getrusage's ru_maxrss would carry over the
# bench process's peak from the fork (Linux keeps it across exec), not the reduce's
_RSS_CHILD = r"""
import sys, time
from tb_footprint_plugin import api
t0 = time.monotonic()
rep = api.reduce_logdir(sys.argv[1], policy="archive", dry_run=False, vault_format=sys.argv[2])
assert rep.ok and any(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(hwm // 1024, round(time.monotonic() - t0, 1))
"""


def big_trace_rss(tmp: str, trace_mb: int, fmt_name: str) -> tuple:
    """(peak RSS MB, seconds) of a fresh process reducing a run of one ``trace_mb`` MB trace."""
    from tb_footprint_plugin import synth as sp

    logdir = os.path.join(tmp, f"big-{fmt_name}")
    run = os.path.join(logdir, "run")
    os.makedirs(run)
    # ~0.9 MB a step, pretty-printed (synth.torch_trace): streamed, so its writer stays small too
    sp.write_torch_trace(os.path.join(run, sp.torch_trace_name()), n_steps=max(1, int(trace_mb / 0.9)))
    sp.age(logdir)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _RSS_CHILD, logdir, fmt_name], capture_output=True, text=True,
                       env=env, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    rss, secs = p.stdout.split()[-2:]
    shutil.rmtree(logdir, ignore_errors=True)
    return int(rss), float(secs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="30 MB project, 50 MB trace (CI)")
    ap.add_argument("--project-mb", type=float, default=None, help="mixed project size in MB (default 300)")
    ap.add_argument("--trace-mb", type=int, default=None, help="the big trace in MB (default 2000)")
    args = ap.parse_args(argv)
    from tb_footprint_plugin import fmt
    from tb_footprint_plugin import synth as sp
    from tb_footprint_plugin.storage import zst

    # 30 MB: at 20 MB the vault's own records and folders (a few blocks each) weigh ~1% more
    project_mb = args.project_mb or (30 if args.small else 300)
    trace_mb = args.trace_mb or (50 if args.small else 2000)
    tmp = tempfile.mkdtemp(prefix="tbfp-vault-")
    try:
        src = os.path.join(tmp, "src")
        parts = sp.write_profiled_project(src, int(project_mb * 1e6))
        sp.age(src)
        total = sum(parts.values())
        print(f"zstd: {zst.backend()}, level {zst.LEVEL}")
        print("mixed project: " + ", ".join(f"{k} {fmt.human_bytes(v)} ({v / total:.0%})" for k, v in parts.items()))
        rows = {}
        for name in ("hardlink", "compressed"):  # the anchor first: a warm page cache helps it, not us
            d = os.path.join(tmp, name)
            shutil.copytree(src, d, copy_function=shutil.copy2)
            rows[name] = run_vault(d, name)
            shutil.rmtree(d, ignore_errors=True)
        rss = {name: big_trace_rss(tmp, trace_mb, name) for name in ("hardlink", "compressed")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    c, h = rows["compressed"], rows["hardlink"]
    ok = True
    print(f"\n{'figure':<44} {'compressed':>12} {'hard-link':>12} {'target':>10}")

    def line(label: str, a: str, b: str, target: str, good: bool) -> None:
        nonlocal ok
        ok &= good
        print(f"{label:<44} {a:>12} {b:>12} {target:>10}" + ("" if good else "   <-- MISSED"))

    share_c, share_h = c["after"] / c["before"], h["after"] / h["before"]
    line("disk in use after reduce, % of before", f"{share_c:.2%}", f"{share_h:.2%}",
         f"<= {TARGET_DISK_SHARE:.0%}", share_c <= TARGET_DISK_SHARE)
    line("  disk in use after (status)", fmt.human_bytes(c["after"]), fmt.human_bytes(h["after"]), "", True)
    agree = all(abs(r["after"] - r["du_after"]) <= 0.01 * r["du_after"] for r in (c, h))
    line("  du of logdir + vault after", fmt.human_bytes(c["du_after"]), fmt.human_bytes(h["du_after"]),
         "status ±1%", agree)
    line("  freed now / freed after purge", f"{fmt.human_bytes(c['freed_now'])}/{fmt.human_bytes(c['after_purge'])}",
         f"{fmt.human_bytes(h['freed_now'])}/{fmt.human_bytes(h['after_purge'])}", "", True)
    line("  blobs .zst / plain", f"{c['zst']}/{c['plain']}", f"{h['zst']}/{h['plain']}", "", True)
    r_ratio = c["reduce_s"] / h["reduce_s"]
    gated = max(c["reduce_s"], h["reduce_s"]) >= NOISE_S
    line(f"reduce time (ratio {r_ratio:.2f}x)", f"{c['reduce_s']:.1f}s", f"{h['reduce_s']:.1f}s",
         f"<= {TARGET_TIME_RATIO}x", r_ratio <= TARGET_TIME_RATIO or not gated)
    s_ratio = c["restore_s"] / h["restore_s"]
    gated = max(c["restore_s"], h["restore_s"]) >= NOISE_S
    line(f"restore time (ratio {s_ratio:.2f}x)" + ("" if gated else f", < {NOISE_S:.0f}s: not gated"),
         f"{c['restore_s']:.2f}s", f"{h['restore_s']:.2f}s", f"<= {TARGET_TIME_RATIO}x",
         s_ratio <= TARGET_TIME_RATIO or not gated)
    line("every file restored byte for byte (+mode, mtime)", "yes" if c["exact"] else "NO",
         "yes" if h["exact"] else "NO", "yes", c["exact"] and h["exact"] and not c["failed"] and not h["failed"])
    line(f"peak RSS reducing a {trace_mb} MB trace (reduce s)", f"{rss['compressed'][0]} MB ({rss['compressed'][1]}s)",
         f"{rss['hardlink'][0]} MB ({rss['hardlink'][1]}s)", f"<= {TARGET_RSS_MB} MB",
         rss["compressed"][0] <= TARGET_RSS_MB)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
