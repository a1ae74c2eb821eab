"""The Activity view's read at many operations: ``python bench/history_page.py [--ops N] [--keep DIR] [--small]``.

Issue #28 (r23 task B, r26 K3). ``api.history_page(newest=500)`` is what the tab's Activity page
asks. On a disk: a logdir of N small runs reduced in one batch (``--keep DIR``: built there once
and reused, so the same logdir can be measured by two trees); it prints the seconds, the
manifests read (``Vault.read_manifest`` calls) and the peak of traced memory of the page. On a
bucket (moto's S3 on loopback): three real reductions and N-3 manifests planted as copies of
theirs, of operations one an hour back from now, a few restored lately; a server dates each
object when it is written, so the planted manifests' dates in the listings are set to when each
was last written (``ObjectStore.list`` answers them so, as a vault written over months lists
them). It prints the same for the page and for the whole history cut to its newest 500 (what the
page was before r23), with the requests the store's counters saw. Each page is printed beside its
anchor measured in the same run, the whole history (every manifest read); the targets: a disk's
page reads no more manifests than it shows, a bucket's page gives the whole history's newest and
reads no more manifests than it shows and the three real ones written together (r26: before, it
read every manifest, as the anchor does). ``--small`` (CI): 30 operations, a page of 10. Run it
with ``PYTHONPATH`` at another tree to measure that tree.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO / "tests"),):
    if p not in sys.path:
        sys.path.append(p)

NEWEST = 500


def build_runs(ld: Path, n: int) -> None:
    """``n`` small runs, each with a profile session the archive policy removes."""
    from tb_footprint_plugin import synth

    for i in range(n):
        run = ld / f"exp{i // 100:03d}/run{i:06d}"
        with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
            for s in range(3):
                w.scalar("loss", s, 1.0 / (s + 1 + i))
        synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=3, seed=i)


def measured(fn):
    """``fn()``'s result, seconds, manifests read and peak traced MB."""
    from tb_footprint_plugin.engine.vault import Vault

    reads = []
    real = Vault.read_manifest

    def counted(self, op_id):
        reads.append(op_id)
        return real(self, op_id)

    Vault.read_manifest = counted
    tracemalloc.start()
    t = time.perf_counter()
    try:
        res = fn()
        secs = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
        Vault.read_manifest = real
    return res, secs, len(reads), peak


def disk(n: int, keep: str) -> bool:
    from tb_footprint_plugin import api

    ld = Path(keep) / "logs"
    if not ld.exists():
        build_runs(ld, n)
        t = time.perf_counter()
        rep = api.reduce_logdir(str(ld), policy="archive", dry_run=False, quiet_period=0,
                                verify_backends=("python",))
        print(f"built: {sum(o.status == 'verified' for o in rep.outcomes)} reductions in "
              f"{time.perf_counter() - t:.0f} s")
    api.history_page(str(ld), newest=1)  # the vault's index read once, as a long-lived tab has it
    whole, wsecs, wreads, wpeak = measured(lambda: api.history(str(ld)))
    print(f"disk, anchor: the whole history ({len(whole)} entries): {wsecs:.2f} s, {wreads} manifests read, "
          f"peak {wpeak:.1f} MB")
    ok = True
    for label in ("first", "again"):
        page, secs, reads, peak = measured(lambda: api.history_page(str(ld), newest=NEWEST))
        met = reads <= min(NEWEST, page["total"])
        ok &= met
        print(f"disk, {label}: history_page(newest={NEWEST}) of {page['total']} entries: {secs:.2f} s, "
              f"{reads} manifests read (target <= {NEWEST}: {'met' if met else 'NOT MET'}), peak {peak:.1f} MB")
    return ok


def bucket(n: int) -> bool:
    import dataclasses

    import objstore_servers as servers
    from tb_footprint_plugin import api
    from tb_footprint_plugin.engine.front_bucket import BucketEngine
    from tb_footprint_plugin.storage.store_object import ObjectStore

    real_list = ObjectStore.list
    srv = servers.start_moto()
    try:
        os.environ.update(srv.env)
        b = servers.Bucket(srv)
        with tempfile.TemporaryDirectory() as d:
            build_runs(Path(d) / "logs", 3)
            url = b.upload(Path(d) / "logs", "v")
        rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
        ops = [o.op_id for o in rep.outcomes if o.status == "verified"]
        api.restore(url, op=ops[1])
        state = b.key("v/.tb-footprint")
        docs = [json.loads(b.fs.cat_file(f"{state}/manifests/{op}.json")) for op in ops]
        now = time.time()
        planted, dated = {}, {}
        for i in range(n - 3):
            start = now - (n - i) * 3600.0
            doc = dict(docs[i % 3], op_id=f"20250101T000000-{i:06x}", started_at=start, finished_at=start + 60)
            if "op" in doc:
                doc["op"] = doc["op_id"]
            for k in ("restored_at", "purged_at"):
                if doc.get(k):  # half an hour later (every 25th lately: an old operation among the newest)
                    doc[k] = now - 1800 - i if i % 25 == 1 else start + 1800
            planted[f"{state}/manifests/{doc['op_id']}.json"] = json.dumps(doc).encode()
            dated[f"manifests/{doc['op_id']}.json"] = max(doc[k] for k in ("finished_at", "restored_at", "purged_at")
                                                          if doc.get(k)) + 2
        keys = list(planted)
        for i in range(0, len(keys), 500):
            b.fs.pipe({k: planted[k] for k in keys[i:i + 500]})
        b.fs.invalidate_cache()

        def listed(self, prefix="", **kw):  # each planted manifest dated when it was last written
            for e in real_list(self, prefix, **kw):
                when = dated.get("/".join(e.key.split("/")[-2:]))
                yield e if when is None else dataclasses.replace(e, mtime=when)

        ObjectStore.list = listed

        def whole_cut(eng):
            entries = eng.history()
            return entries[-NEWEST:], len(entries)

        seen = []
        for label, fn in (("anchor: whole history, cut (the page before r23)", whole_cut),
                          (f"history_page(newest={NEWEST})", lambda eng: eng.history_page(NEWEST))):
            eng = BucketEngine(url)
            (entries, total, *_exact), secs, _reads, peak = measured(lambda: fn(eng))  # a page: (entries, total, exact)
            c = eng.request_counts()
            seen.append((entries, c))
            print(f"bucket, {label}: {len(entries)} of {total} entries, {secs:.2f} s, {c['requests']} requests "
                  f"({c['list']} list, {c['read']} read, {c['head']} head), peak {peak:.1f} MB")
        met = seen[1][0] == seen[0][0] and seen[1][1]["read"] <= NEWEST + 3
        print(f"bucket: the page's entries are the whole history's newest, with no more manifests read than "
              f"it shows and the three real ones (target <= {NEWEST + 3}, the anchor read {seen[0][1]['read']}): "
              f"{'met' if met else 'NOT MET'}")
        return met
    finally:
        ObjectStore.list = real_list
        srv.stop()


def main(argv=None) -> int:
    global NEWEST
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--keep", help="the disk logdir's folder (built there if absent, reused after)")
    ap.add_argument("--only", choices=("disk", "bucket"))
    ap.add_argument("--newest", type=int, default=500, help="the page's size (default 500, the tab's)")
    ap.add_argument("--small", action="store_true", help="CI: 30 operations, a page of 10")
    args = ap.parse_args(argv)
    NEWEST = 10 if args.small else args.newest
    n = 30 if args.small else args.ops
    ok = True
    if args.only != "bucket":
        if args.keep:
            ok &= disk(n, args.keep)
        else:
            with tempfile.TemporaryDirectory() as d:
                ok &= disk(n, d)
    if args.only != "disk":
        ok &= bucket(n)
    print("OK" if ok else "a target NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
