"""What a plan costs on an object store: requests per verb and bytes downloaded.

A pure function of a plan (and the requests its scan actually issued). The reduce side follows
the bucket transaction protocol, per reduced run:

* the per-run lock (a create-only put, deleted at the end) and the journal records (one put for
  each step: planned, backed up, swapped, done) and the manifest (one put);
* a backup of every file a step removes or replaces, by a **server-side copy** (no bytes through
  this machine), its checksum computed by the store and returned with the copy;
* deletes batched (``DELETE_BATCH`` keys a request: 1,000 on S3);
* a rewritten or compressed file is downloaded by ranged reads, written under a temporary key,
  copied over the original with a precondition, and the temporary key deleted;
* a final listing of the run to check what is there. A run whose event files are untouched is
  checked from that listing (ETag/generation unchanged), so a drop-only run downloads nothing;
  a run whose event files are rewritten is read back before and after by TensorBoard's loader.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

from tb_footprint_plugin.plan.model import Plan
from tb_footprint_plugin.scan.model import LogdirFootprint

#: per reduced run: lock put + journal puts (planned, backed up, swapped, done) + manifest put
STATE_PUTS_PER_RUN = 6
#: per reduced run: lock delete + journal delete (batched together)
STATE_DELETES_PER_RUN = 1
READ_CHUNK = 1 << 20


def request_cost(plan: Plan, footprint: LogdirFootprint, protocol: str) -> Dict[str, dict]:
    """{'scan': measured requests of the scan, 'reduce': estimated requests of the reduction,
    'restore': estimated requests to restore every reduced run}, each per verb with bytes."""
    from tb_footprint_plugin.storage.remote import DELETE_BATCH

    batch = DELETE_BATCH.get(protocol, 1)
    red = {"list": 0, "read": 0, "copy": 0, "put": 0, "delete": 0, "bytes_down": 0, "bytes_up": 0}
    res = {"list": 0, "read": 0, "copy": 0, "put": 0, "delete": 0, "bytes_down": 0, "bytes_up": 0}
    for rp in plan.runs:
        if rp.skipped or not rp.actions:
            continue
        run = footprint.run(rp.run)
        files = [a for a in rp.actions if a.kind != "remove_dir"]
        deletes = [a for a in files if a.kind == "delete"]
        replaced = [a for a in files if a.kind in ("rewrite", "compress")]
        red["put"] += STATE_PUTS_PER_RUN
        red["copy"] += len(files)  # backups, server-side
        red["list"] += 1  # the run after the swap
        for a in replaced:
            red["read"] += max(1, math.ceil(a.bytes_before / READ_CHUNK))
            red["bytes_down"] += a.bytes_before
            red["put"] += 1
            red["bytes_up"] += a.bytes_after
            red["copy"] += 1  # temp key over the original, with a precondition
        temp_keys = len(replaced)
        red["delete"] += math.ceil((len(deletes) + temp_keys) / batch) if (deletes or temp_keys) else 0
        red["delete"] += STATE_DELETES_PER_RUN
        if run and any("tfevents" in a.path.rsplit("/", 1)[-1] for a in replaced):
            event_bytes = sum(f.size for f in run.files if f.kind == "event")
            red["bytes_down"] += 2 * event_bytes  # TensorBoard's loader, before and after
            red["read"] += 2 * max(1, math.ceil(event_bytes / READ_CHUNK))
        # restore: copy every backup back server-side, remove what the reduction added
        res["put"] += STATE_PUTS_PER_RUN
        res["copy"] += len(files)
        res["list"] += 1
        added = sum(1 for a in replaced if a.kind == "compress")
        res["delete"] += (math.ceil(added / batch) if added else 0) + STATE_DELETES_PER_RUN
    for d in (red, res):
        d["requests"] = d["list"] + d["read"] + d["copy"] + d["put"] + d["delete"]
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
            f"copy {c.get('copy', 0)}, put {c.get('put', 0)}, delete {c.get('delete', 0)}; "
            f"{human_bytes(c.get('bytes_down', 0))} downloaded"
        )
    return "\n".join(lines)
