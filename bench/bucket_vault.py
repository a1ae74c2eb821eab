"""A bucket logdir's backups: server-side copies vs a local vault of blobs, side by side:
``python bench/bucket_vault.py [--runs N] [--small]``.

Builds an N-run logdir (default 40; ``--small``: 6) in moto's S3 server on loopback, each run an
event file and an xprof profile session (many small files: xplane.pb, a trace and the xprof
caches; each run's profile files differ), twice (two prefixes), and drops the profiles of every
run: once with today's default (each backup a server-side copy in ``<logdir>/.tb-footprint/blobs/``), once with
``--backup-dir <folder>`` (the originals as compressed, packed blobs in a local ``BlobStore``).
Every request goes through a counting proxy in front of the server. It prints, per vault: the
vault's objects and bytes (in the bucket, or in the folder), requests and time of the reduce and
of the restore of every run, bytes downloaded; and checks every run restored byte for byte.
The exit status is 0 when both restores give every original back.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(REPO / "tests"), str(REPO / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

from objectstore import DROP_PROFILES, counting_s3, one_run_files  # noqa: E402 - after the path setup

STATE = ".tb-footprint"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--small", action="store_true", help="CI mode: 6 runs")
    args = ap.parse_args(argv)
    n = 6 if args.small else args.runs

    ok = True
    with counting_s3() as s3:
        from tb_footprint_plugin import api
        from tb_footprint_plugin.storage.blobstore import BlobStore
        from tb_footprint_plugin.storage.store_posix import PosixStore

        bucket = s3.bucket
        files = one_run_files()
        per_run = sum(len(v) for v in files.values())
        print(f"logdir: {n} runs x {len(files)} objects ({per_run / 1e3:.0f} KB a run, {n * per_run / 1e6:.1f} MB)")

        def of_run(i: int, rel: str, data: bytes) -> bytes:
            # each run's profile files differ (a few bytes of its own): the vault of blobs keeps a
            # content-addressed copy once, and identical runs would measure its dedupe, not the store
            return data + b"run %d" % i if "plugins/profile" in rel else data

        for name in ("copies", "blobs"):
            bucket.fs.pipe({bucket.key(f"{name}/run{i:03d}/{rel}"): of_run(i, rel, data)
                            for i in range(n) for rel, data in files.items()})
        time.sleep(1.1)  # listing mtimes have 1 s resolution: keep "now" past every upload

        def measure(label, fn):
            res, counts, _, secs = s3.measure(label, fn)
            return res, sum(counts.values()), secs

        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "vault")
            figures = {}
            for name, backup_dir in (("copies", None), ("blobs", folder)):
                url = bucket.url(name)
                before = {k: v for k, v in bucket.hashes(name).items()}
                rep, red_req, red_s = measure(f"reduce, {name}", lambda: api.reduce_logdir(
                    url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, backup_dir=backup_dir,
                    verify_backends=("python",)))
                verified = sum(o.status == "verified" for o in rep.outcomes)
                if backup_dir is None:
                    listing = bucket.fs.find(bucket.key(f"{name}/{STATE}/blobs"), detail=True)
                    objects, stored = len(listing), sum(v["size"] for v in listing.values())
                else:
                    st = BlobStore(PosixStore(folder)).stats()
                    objects, stored = st["objects"] + st["index_objects"], st["stored_bytes"]
                outs, res_req, res_s = measure(f"restore, {name}",
                                               lambda: api.restore(url, backup_dir=backup_dir))
                after = {k: v for k, v in bucket.hashes(name).items() if not k.startswith(STATE + "/")}
                same = after == {k: v for k, v in before.items() if not k.startswith(STATE + "/")}
                ok &= same and all(o.status == "restored" for o in outs)
                figures[name] = (verified, rep.removed_from_logdir_bytes, objects, stored, red_req, red_s,
                                 res_req, res_s, same)
        print()
        print(f"{'':8} {'verified':>8} {'removed':>10} {'vault objects':>14} {'vault bytes':>12} "
              f"{'reduce req':>10} {'reduce s':>8} {'restore req':>11} {'restore s':>9}  byte-identical")
        for name, (v, removed, objs, stored, rq, rs, sq, ss, same) in figures.items():
            print(f"{name:8} {v:8d} {removed:10d} {objs:14d} {stored:12d} {rq:10d} {rs:8.2f} {sq:11d} {ss:9.2f}  {same}")
        c, b = figures["copies"], figures["blobs"]
        print(f"\nblobs vs copies: vault objects {b[2]}/{c[2]}, vault bytes {b[3] / max(1, c[3]):.2f}x, "
              f"reduce {b[5] / max(1e-9, c[5]):.2f}x time, {b[4] / max(1, c[4]):.2f}x requests; "
              f"restore {b[7] / max(1e-9, c[7]):.2f}x time, {b[6] / max(1, c[6]):.2f}x requests")
    print("OK" if ok else "FAILED: a restore did not give every original back")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
