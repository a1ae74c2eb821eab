"""What a bucket reduction's manifest says it verified, as a disk's manifest says it (review R21 PD15).

A disk's manifest carries ``verification`` (``ok``, ``checks``: run present, routes, removed files,
the plan's lines) and ``plan`` (its ``fidelity`` lines); the tab's operations list, ``restorable``
and the check page read them (``catalogue_rules.operation_summary``). A bucket's manifest is written
before its commit record, once every backup is made: it records the checks made by then and no
other — each removed file's backup (a server-side copy whose checksum the store computed equal to
the original's, or a blob read back and hashed), the profile routes the contract leaves uncompared
(a statement of the plan, as on a disk: no route is crawled) and the plan's fidelity lines. The
fresh listing after the swap (``bucket_steps.verify_batch``) comes later: when it finds the run not
as planned, ``unverified`` is what the manifest is rewritten to (the failure path only: a verified
batch makes no request more). ``mode`` ``listing`` tells the tab no reader compared the run (a
drop-only run has no new file; its other objects are proven unchanged by their versions).
"""
from __future__ import annotations

from typing import List, Optional

__all__ = ["MODE", "drop_verification", "listed", "plan_record", "removed_files_check", "rewrite_verification",
           "unverified"]

#: ``verification.mode`` of a bucket drop-only reduction: checked by the store (checksums, listing)
MODE = "listing"


def removed_files_check(files: List[dict], blob_folder: Optional[str]) -> List[dict]:
    """The ``removed files`` check of the deleted ``files`` (journal entries), in the words a
    bucket rewrite says it: how each was backed up and checked (``blob_folder``: the local vault
    of blobs they went into, else server-side copies); none when nothing was removed."""
    dels = [f for f in files if f.get("action") == "delete"]
    if not dels:
        return []
    how = (f"into the blob vault {blob_folder} (read back and hashed)" if blob_folder
           else "by server-side copy (the store's checksum verified)")
    return [{"name": "removed files", "ok": True, "detail": f"{len(dels)} file(s) backed up {how} and removed"}]


def drop_verification(rp, files: List[dict], blob_folder: Optional[str]) -> dict:
    """The ``verification`` of a drop-only run's manifest (plan ``rp``, its journal's ``files``):
    the checks made before the manifest is written, the plan's lines last (as a disk's)."""
    # here, not at the top: a bucket's status and history import this module (``bucket_steps``)
    # and never the verification's readers
    from tb_footprint_plugin.engine.verification import profile_route_lines

    checks = profile_route_lines(rp) + removed_files_check(files, blob_folder)
    checks += [{"name": "plan", "ok": True, "detail": line} for line in rp.fidelity]
    return {"ok": True, "mode": MODE, "checks": checks, "failed": [], "backends": []}


def rewrite_verification(staged_run: dict) -> dict:
    """The ``verification`` of a rewrite's manifest: when TensorBoard's readers compared its staged
    run with the original (``staged_run``: what ``bucket_rewrite`` staged, its ``checks`` (the
    readers' first) and ``backends``), as a disk's rewrite says it. A rewrite that only compressed
    profile files (no event file rewritten: no reader to start, as for a disk's run whose event
    files stay) is checked by hashing and by the store, as a drop-only run is (``mode``
    ``listing``): each compressed copy decompresses to the original (sha256) and was read back
    through TensorBoard's own file reader after its upload, each removed file backed up, the
    plan's lines; before, its manifest carried no verification and the tab's check page said "Not
    verified" of a verified run. The listing after the swap comes later, as for a drop-only run
    (``unverified`` on the failure path)."""
    backends = list(staged_run.get("backends") or [])
    if not backends:
        checks = list(staged_run.get("checks") or [])
        if any(c.get("name") == "compress" for c in checks):
            checks.append({"name": "read back", "ok": True, "detail": "each compressed copy, once uploaded, read "
                           "back through TensorBoard's own file reader (gfile): the staged bytes (sha256)"})
        return {"ok": True, "mode": MODE, "checks": checks, "failed": [], "backends": []}
    out = {"ok": True, "checks": list(staged_run.get("checks") or []), "failed": [], "backends": backends}
    for k in ("expectations", "record_substitutes"):
        if staged_run.get(k):
            out[k] = staged_run[k]
    return out


def listed(v: dict, checks: List[dict]) -> dict:
    """A run's outcome ``verification`` once the listing after its swap (``v``: ``verify_batch``'s
    figures for the run) found it as planned: the manifest's ``checks`` (what was verified before
    the swap), then the listing's own line, as a disk's outcome carries its manifest's checks
    (a drop-only batch's outcome carried the listing's figures alone)."""
    return dict(v, checks=list(checks) + [{"name": "store listing", "ok": True, "detail": (
        f"{v['rewritten']} object(s) replaced and {v['removed']} removed, each holding exactly the staged bytes "
        f"(the store's checksum); {v['unchanged_objects']} other object(s) unchanged")}])


def plan_record(rp) -> dict:
    """What a bucket manifest keeps of plan ``rp``: its fidelity lines and what explains each
    (``fidelity``, ``fidelity_details``, as a disk's manifest's ``plan``); not its actions (the
    manifest's files name them). Empty for a caller that has only a size (a rollback's)."""
    fid = getattr(rp, "fidelity", None)
    if not isinstance(fid, list):
        return {}
    return {"plan": {"fidelity": list(fid), "fidelity_details": list(getattr(rp, "fidelity_details", None) or [])}}


def unverified(doc: dict, why: str) -> dict:
    """Manifest ``doc`` once the listing after its swap found the run not as planned (``why``):
    its verification not ok, that check failed and named, as a failed check on a disk."""
    ver = doc.get("verification") if isinstance(doc.get("verification"), dict) else {}
    checks = list(ver.get("checks") or []) + [{"name": "store listing", "ok": False, "detail": why}]
    return dict(doc, verification=dict(ver, ok=False, checks=checks, failed=list(ver.get("failed") or []) + [why]))
