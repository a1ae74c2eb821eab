"""Cost of the open-for-writing check on a busy machine: ``python bench/openfiles.py [--procs N] [--small]``.

Before a run is reduced (at the plan and again right before the swap) every process's open
descriptors are looked at once (``storage.openfiles.find_writers``). This starts ``--procs``
extra processes that each hold ``--fds`` files open (half of them for writing), then times one
pass over the process table for a run of ``--files`` files, and prints processes seen,
descriptors held, seconds per pass and whether the writers were all found.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tb_footprint_plugin.storage.openfiles import find_writers  # noqa: E402

def _holder(files):
    """A light process (a shell, then ``sleep``) holding ``files`` open, even ones for appending."""
    redirs = " ".join(f'{3 + i}{">>" if i % 2 == 0 else "<"}"${i + 1}"' for i in range(len(files)))
    script = f"exec {redirs}; echo ready; exec sleep 3600"
    return subprocess.Popen(["/bin/sh", "-c", script, "holder", *files], stdout=subprocess.PIPE, text=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2000, help="extra processes holding files open")
    ap.add_argument("--fds", type=int, default=7, help="files each extra process holds open (at most 7)")
    ap.add_argument("--files", type=int, default=1000, help="files of the run being checked")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--small", action="store_true", help="CI size: 100 processes, 200 files")
    args = ap.parse_args()
    args.fds = max(1, min(args.fds, 7))  # a POSIX shell redirects single-digit descriptors only
    if args.small:
        args.procs, args.files, args.repeat = 100, 200, 3
    if not sys.platform.startswith("linux"):
        print(json.dumps({"supported": False}))
        return
    with tempfile.TemporaryDirectory(prefix="tbfp-bench-openfiles-") as d:
        run = Path(d) / "run"
        run.mkdir()
        files = []
        for i in range(args.files):
            p = run / f"events.out.tfevents.{i:06d}.host"
            p.write_bytes(b"")
            files.append(str(p))
        others = Path(d) / "others"
        others.mkdir()
        procs = []
        try:
            for i in range(args.procs):
                mine = []
                for k in range(args.fds):
                    p = others / f"p{i}-{k}"
                    p.write_bytes(b"")
                    mine.append(str(p))
                if i < 3:  # a few of them write to the run's own files: the check must find them
                    mine[0] = files[i]
                procs.append(_holder(mine))
            for p in procs:
                p.stdout.readline()
            times = []
            res = None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                res = find_writers(files)
                times.append(time.perf_counter() - t0)
            expected = {procs[i].pid for i in range(min(3, len(procs)))}
            found = {h.pid for h in res.holders}
            print(json.dumps({
                "processes_seen": res.processes,
                "extra_processes": args.procs,
                "fds_per_extra_process": args.fds + 3,
                "files_checked": args.files,
                "seconds_per_pass_min": round(min(times), 4),
                "seconds_per_pass_median": round(sorted(times)[len(times) // 2], 4),
                "writers_found": sorted(found) == sorted(expected),
                "uninspected": res.uninspected,
            }, indent=1))
        finally:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()


if __name__ == "__main__":
    main()
