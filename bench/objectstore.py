"""Object-store costs: ``python bench/objectstore.py [--runs N] [--small]``.

Builds an N-run logdir (default 1,000; ``--small``: 10) in moto's S3 server on loopback, each
run with one event file and one xprof profile session (xplane.pb, a trace and xprof caches),
and drives the library through a counting proxy in front of the server, so every request any
client sent (s3fs listings and reads, boto3 copies, puts and deletes) is counted where the
server sees it. For scan (cold), re-scan (unchanged logdir), plan, reduce (drop the profiles:
backups by server-side copy, batched deletes) and restore it prints requests per verb, bytes
downloaded and wall time; next to it a naive recursive delete of the same profile prefixes with
boto3 (list + delete_objects per run, no backup) on the restored data.

Targets (issue 15): bytes downloaded by the reduction of drop-only runs = 0 (what it reads is its
own state: the scan cache); requests within 2x of the naive delete, the backup copies (which the
naive delete does not make) shown apart: drop-only runs share one journal object per batch, a
listing of the logdir before and after the delete step and the batched deletes, so a run pays its
lock object and its manifest; re-scan of an unchanged logdir = one listing (one page per 1,000
objects) plus one read of the cache. The exit status is 0 only when every target is met.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Tuple

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(REPO / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def one_run_files() -> dict:
    """rel path -> bytes of one run: an event file from the demo writers and a profile session."""
    from tb_footprint_plugin.demo import generate_demo

    with tempfile.TemporaryDirectory() as d:
        generate_demo(d, scale=0.05)
        root = Path(d) / "mnist" / "baseline" / "train"
        out = {}
        for p in root.rglob("*"):
            if p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


def row(name: str, counts: dict, down: int, secs: float) -> str:
    """One printed line: requests per verb, MB downloaded and wall time."""
    verbs = ("list", "read", "head", "copy", "put", "delete", "other")
    total = sum(counts.get(v, 0) for v in verbs)
    parts = ", ".join(f"{v} {counts.get(v, 0)}" for v in verbs if counts.get(v))
    return f"{name:34} {total:7d} requests ({parts}); {down / 1e6:8.2f} MB down; {secs:7.2f} s"


class CountingS3:
    """moto's S3 server on loopback behind a counting proxy: ``bucket`` talks to the server directly
    (what it uploads is not counted), the library talks to ``proxy.endpoint``."""

    def __init__(self, bucket, proxy):
        self.bucket, self.proxy = bucket, proxy

    def measure(self, name: str, fn: Callable) -> Tuple[object, dict, int, float]:
        """Run ``fn`` with the counts reset and print its row: (result, requests per verb, bytes
        downloaded, seconds)."""
        self.proxy.reset()
        t = time.perf_counter()
        res = fn()
        secs = time.perf_counter() - t
        print(row(name, dict(self.proxy.counts), self.proxy.bytes_down, secs))
        return res, dict(self.proxy.counts), self.proxy.bytes_down, secs


@contextlib.contextmanager
def counting_s3() -> Iterator[CountingS3]:
    """Start moto and the counting proxy, point this process's S3 clients at the proxy, and stop
    both on the way out."""
    import objstore_servers as servers
    from faulty_proxy import FaultyProxy

    srv = servers.start_moto()
    proxy = None
    try:
        os.environ.update(srv.env)
        proxy = FaultyProxy(upstream=srv.endpoint).start()
        os.environ["AWS_ENDPOINT_URL"] = os.environ["S3_ENDPOINT"] = proxy.endpoint
        yield CountingS3(servers.Bucket(srv), proxy)
    finally:
        if proxy is not None:
            proxy.stop()
        srv.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--small", action="store_true", help="CI mode: 10 runs (under a minute)")
    args = ap.parse_args(argv)
    n = 10 if args.small else args.runs

    import boto3

    with counting_s3() as s3:
        from tb_footprint_plugin import api
        from tb_footprint_plugin.scan import scan

        bucket = s3.bucket
        files = one_run_files()
        t0 = time.time()
        blobs = {bucket.key(f"logs/exp{i // 100:02d}/run{i:04d}/{rel}"): data
                 for i in range(n) for rel, data in files.items()}
        for i in range(0, len(blobs), 2000):
            bucket.fs.pipe(dict(list(blobs.items())[i:i + 2000]))
        url = bucket.url("logs")
        per_run = sum(len(v) for v in files.values())
        print(f"logdir: {n} runs x {len(files)} objects ({per_run / 1e3:.0f} KB a run, "
              f"{n * per_run / 1e6:.1f} MB) uploaded in {time.time() - t0:.1f} s")
        time.sleep(1.1)  # listing mtimes have 1 s resolution: keep "now" past every upload

        cold, *_ = s3.measure("scan (cold)", lambda: scan(url))
        warm, warm_counts, *_ = s3.measure("re-scan (unchanged)", lambda: scan(url))
        plan, *_ = s3.measure("plan (drop profiles)", lambda: api.plan(url, DROP_PROFILES, quiet_period=0))
        rep, red_counts, red_down, _ = s3.measure(
            "reduce (drop profiles)",
            lambda: api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0))
        ok = sum(1 for o in rep.outcomes if o.status == "verified")
        outs, *_ = s3.measure("restore (every run)", lambda: api.restore(url))

        c = boto3.client("s3", endpoint_url=s3.proxy.endpoint)

        def naive():
            for i in range(n):
                prefix = f"logs/exp{i // 100:02d}/run{i:04d}/plugins/profile/"
                for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket.name, Prefix=prefix):
                    keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    if keys:
                        c.delete_objects(Bucket=bucket.name, Delete={"Objects": keys, "Quiet": True})

        _, naive_counts, *_ = s3.measure("naive boto3 delete (no backup)", naive)
        print()
        print(f"runs reduced and verified: {ok}/{n}; restored: {sum(o.status == 'restored' for o in outs)}")
        print(f"re-scan: {warm_counts.get('list', 0)} listing page(s) (one listing), {warm.files_read} event files read, "
              f"{warm.files_cached} from the cache")
        print(f"reduction bytes downloaded: {red_down} (target 0 for drop-only runs: what it reads is the scan "
              "cache in the bucket, no logdir file)")
        red_total = sum(red_counts.values())
        red_no_backup = red_total - red_counts.get("copy", 0)
        naive_total = sum(naive_counts.values())
        ratio = red_no_backup / max(1, naive_total)
        print(f"requests: reduction {red_total} ({red_counts.get('copy', 0)} of them backup copies), "
              f"naive delete {naive_total}; per run {red_total / n:.1f} vs {naive_total / n:.1f}; "
              f"without the backup copies {red_no_backup / n:.2f} per run")
        print(f"ratio to the naive delete (backup copies apart): {ratio:.2f}x (target <= 2x)")
        print(f"scan: {cold.total_bytes / 1e6:.1f} MB in {len(cold.runs)} runs; plan removable "
              f"{plan.removable_bytes / 1e6:.1f} MB")
        # S3 returns 1,000 keys a listing page; the listing also holds the scan cache object
        pages = -(-(len(blobs) + 1) // 1000)
        return 0 if ok == n and warm_counts.get("list", 0) == pages and ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
