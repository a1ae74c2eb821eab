"""What a plan costs on an object store: requests per verb and bytes downloaded.

A pure function of a plan (and the requests its scan actually issued). The reduce side follows
the bucket transaction protocol (``engine.bucket_reduce`` cuts the batches, ``engine.bucket_batch``
reduces one, ``engine.bucket_rewrite`` a run that rewrites files):

* runs that only lose files go in batches of ``BATCH_RUNS`` (defined here, the one number the
  engine cuts by) under one journal object: a batch
  pays the journal's create and commit record (2 puts), a listing of its runs before and after
  the delete step (the whole logdir in pages when that is fewer requests than a listing per run)
  and one final batched delete of the journal and the locks; each run pays its lock object and its
  manifest (2 puts), a **server-side copy** per removed file (no bytes through this machine) and
  its share of the batched deletes (``DELETE_BATCH`` keys a request: 1,000 on S3);
* a run whose plan rewrites or compresses files is its own transaction: lock, journal (create,
  commit record), manifest, a backup copy per file, the files the transform reads downloaded by
  ranged reads (for an event-file rewrite: every event file of the run), each new file uploaded
  under a temporary key and read back once, copied over its original with a precondition (one
  metadata read first where the server may ignore it), the temporary keys and removed originals
  deleted in batches, and two listings of the run.

Restore lists the run once, copies every backup back server-side, marks the manifest and removes
what the reduction added (the ``.gz`` copies).

With a local vault of blobs (``--backup-dir FOLDER``, ``blob_vault``) a backup is not a
server-side copy: each removed or replaced file is downloaded whole into the folder (its bytes
counted as downloaded), and a restore uploads it back (a put, its bytes up) instead of copying.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.scan.model import LogdirFootprint

#: runs that only lose files, reduced under one journal object (``engine.bucket_reduce`` batches by it)
BATCH_RUNS = 250
#: per batch: journal create + commit record
BATCH_PUTS = 2
#: per run: lock put + manifest put
RUN_PUTS = 2
READ_CHUNK = 1 << 20
LIST_PAGE_KEYS = 1000


def _zero() -> Dict[str, int]:
    return {"list": 0, "read": 0, "head": 0, "copy": 0, "put": 0, "delete": 0, "bytes_down": 0, "bytes_up": 0}


def request_cost(plan: Plan, footprint: LogdirFootprint, protocol: str, blob_vault: bool = False) -> Dict[str, dict]:
    """{'scan': measured requests of the scan, 'reduce': estimated requests of the reduction,
    'restore': estimated requests to restore every reduced run}, each per verb with bytes.
    ``blob_vault``: the backups go to a local folder of blobs (downloaded, uploaded back on
    restore), not server-side copies."""
    from tb_footprint_plugin.storage.remote import DELETE_BATCH

    batch = DELETE_BATCH.get(protocol, 1)
    red, res = _zero(), _zero()
    objects = sum(len(r.files) for r in footprint.runs)
    logdir_pages = max(1, math.ceil(objects / LIST_PAGE_KEYS))
    drops = []
    for rp in plan.runs:
        if rp.skipped or not rp.actions:
            continue
        run = footprint.run(rp.run)
        files = [a for a in rp.actions if a.kind != "remove_dir"]
        deletes = [a for a in files if a.kind == "delete"]
        replaced = [a for a in files if a.kind in ("rewrite", "compress")]
        if blob_vault:  # each backup downloaded into the folder, uploaded back by a restore
            for a in files:
                red["read"] += max(1, math.ceil(a.bytes_before / READ_CHUNK))
                red["bytes_down"] += a.bytes_before
                res["put"] += 1
                res["bytes_up"] += a.bytes_before
        else:
            red["copy"] += len(files)  # backups, server-side
            res["copy"] += len(files)
        red["put"] += RUN_PUTS
        res["put"] += 2  # lock, manifest marked restored
        res["list"] += 1
        res["delete"] += 1  # the lock
        if not replaced:
            drops.append(len(deletes))
            continue
        red["put"] += BATCH_PUTS  # its own journal
        red["list"] += 2
        read_bytes = sum(a.bytes_before for a in replaced)
        if run and any("tfevents" in a.path.rsplit("/", 1)[-1] for a in replaced):
            read_bytes = sum(f.size for f in run.files if f.kind == "event") + \
                sum(a.bytes_before for a in replaced if "tfevents" not in a.path.rsplit("/", 1)[-1])
        red["read"] += max(1, math.ceil(read_bytes / READ_CHUNK))
        red["bytes_down"] += read_bytes
        for a in replaced:
            red["put"] += 1  # the temporary key (one part below the multipart threshold)
            red["head"] += 2  # the upload's version, the original's before the conditional copy
            red["bytes_up"] += a.bytes_after
            red["read"] += max(1, math.ceil(a.bytes_after / READ_CHUNK))  # read back through TensorBoard
            red["bytes_down"] += a.bytes_after
            red["copy"] += 1  # temporary key over the original, with a precondition
        gone = len(deletes) + sum(1 for a in replaced if a.kind == "compress")
        red["delete"] += (math.ceil(gone / batch) if gone else 0) + math.ceil(len(replaced) / batch) + 1
        added = sum(1 for a in replaced if a.kind == "compress")
        res["delete"] += math.ceil(added / batch) if added else 0
        res["head"] += len(replaced)
    for i in range(0, len(drops), BATCH_RUNS):
        chunk = drops[i:i + BATCH_RUNS]
        red["put"] += BATCH_PUTS
        red["list"] += 2 * min(len(chunk), logdir_pages)
        red["delete"] += math.ceil(sum(chunk) / batch) + math.ceil((len(chunk) + 1) / batch)
    for d in (red, res):
        d["requests"] = d["list"] + d["read"] + d["head"] + d["copy"] + d["put"] + d["delete"]
    return {"scan": dict(footprint.requests or {}), "reduce": red, "restore": res}


def format_cost(cost: Optional[Dict[str, dict]]) -> str:
    """One line per phase: requests per verb and bytes downloaded."""
    from tb_footprint_plugin.fmt import human_bytes

    if not cost:
        return ""
    lines = []
    for phase, label in (("scan", "scan (measured)"), ("reduce", "reduce (estimate)"),
                         ("restore", "restore all (estimate)")):
        c = cost.get(phase) or {}
        lines.append(
            f"{label:24} {c.get('requests', 0):6d} requests: list {c.get('list', 0)}, read {c.get('read', 0)}, "
            f"head {c.get('head', 0)}, copy {c.get('copy', 0)}, put {c.get('put', 0)}, delete {c.get('delete', 0)}; "
            f"{human_bytes(c.get('bytes_down', 0))} downloaded"
        )
    return "\n".join(lines)
