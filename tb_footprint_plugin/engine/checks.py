"""Reader-level checks of a reduction: the original and the reduced run side by side, as
TensorBoard's readers see them, under the contract the reduction promised.

The same view builder serves the check before a swap (transaction) and the re-check of a
committed reduction later (``api.verify``): only which file stands for "original" and
"reduced" differs.
"""
from __future__ import annotations

import os
import shutil
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.catalogue import find_manifest, read_vaults, refused_manifests, restorable_ops
from tb_footprint_plugin.engine.context import CancelToken, Context
from tb_footprint_plugin.codes import Failure, Finding, StoreError
from tb_footprint_plugin.engine.vault import Vault, VaultError
from tb_footprint_plugin.engine.vault_reads import ARCHIVED, HIDDEN, UNREADABLE, missing_backup, VaultRead
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.scan.categories import is_event_file_name
from tb_footprint_plugin.verify.stop import Stopped

#: event file name -> (path of the original bytes or None if it is new (salvaged late writes),
#: path of the reduced file or None if removed)
ViewPairs = Dict[str, Tuple[Optional[str], Optional[str]]]


def verify_reduction(*args, **kwargs):
    """``verify.compare.verify_reduction``, imported on the first verification: the readers and
    numpy it brings are not paid by the verbs that import this module and verify nothing
    (status, history); the name stays here, where ``compare_views`` looks it up."""
    from tb_footprint_plugin.verify.compare import verify_reduction as verify

    return verify(*args, **kwargs)


def compare_views(views_dir: str, pairs: ViewPairs, modes: Optional[Dict[str, str]],
                  backends: Sequence[str], substitutes: Optional[Dict[str, list]] = None,
                  label: str = "run", handover=None, should_stop: Optional[Callable[[], bool]] = None) -> dict:
    """Link ``pairs`` into ``views_dir/original`` and ``views_dir/reduced`` and verify them.

    ``modes`` (plugin -> verification mode) is the reduction's contract; none means exact.
    ``substitutes``: records the rewrite re-encoded (sha256 -> original record's sha256, size).
    The views are symlinks (no copy of a possibly huge file) and are always removed.
    ``handover``: what this reduce already read of the original (``verify.original``).
    ``should_stop``: the verification ends at once when it says yes (``verify.Stopped``).
    """
    from tb_footprint_plugin.verify.compare import Expectations  # with the comparison (see above)

    orig_view, red_view = os.path.join(views_dir, "original"), os.path.join(views_dir, "reduced")
    os.makedirs(orig_view, exist_ok=True)
    os.makedirs(red_view, exist_ok=True)
    try:
        for name in sorted(pairs):
            original, reduced = pairs[name]
            if original is not None:
                os.symlink(original, os.path.join(orig_view, name))
            if reduced is not None:
                os.symlink(reduced, os.path.join(red_view, name))
        expectations = (Expectations(plugin_modes=dict(modes or {}), record_substitutes=dict(substitutes or {}))
                        if modes or substitutes else None)
        d = verify_reduction(orig_view, red_view, expectations, backends=tuple(backends),
                             original=handover, should_stop=should_stop).to_dict()
        # findings name the run's own files, never the scratch views they were read through
        return _renamed(d, {orig_view: f"{label} (original, from the vault)", red_view: label})
    finally:
        shutil.rmtree(views_dir, ignore_errors=True)


def _renamed(obj, names: Dict[str, str]):
    """``obj`` with every path under a key of ``names`` shown under its value instead."""
    if isinstance(obj, str):
        for old, new in names.items():
            obj = obj.replace(old, new)
        return obj
    if isinstance(obj, list):
        return [_renamed(x, names) for x in obj]
    if isinstance(obj, dict):
        return {k: _renamed(v, names) for k, v in obj.items()}
    return obj


#: what an unchecked run's result says (``unchecked``)
NOT_CHECKED = "not checked: the re-check was cancelled"


def unchecked(result: dict, detail: str = NOT_CHECKED) -> dict:
    """``result`` (at least ``op_id`` and ``run``) as a run the re-check did not finish: never
    ok, ``checked`` False, a failed check saying so; what it had found already (damaged backups,
    backups this user may not read) is kept, backups it did not get to are not said intact. Its
    code is what happened: the code of a finding it had made (``StoreError.PERMISSION``: a backup
    it may not read stays unreadable whatever the cut), else ``Failure.INTERRUPTED``."""
    ver = result.get("verification") or {}
    return {"damaged_backups": [], "unreadable_backups": [], "archived_backups": [], "backups_ok": False, **result,
            "ok": False, "checked": False,
            "code": result.get("code") or Failure.INTERRUPTED,
            "verification": {**ver, "ok": False, "checks": list(ver.get("checks") or []) + [
                {"name": "interrupted", "ok": False, "detail": detail}]}}


def recheck(ctx: Context, run: Optional[str] = None, op: Optional[str] = None,
            progress: Optional[Callable[[dict, int, int], None]] = None,
            cancel: Optional[CancelToken] = None) -> List[dict]:
    """Re-check committed reductions: every backup re-hashed, and the run as it is now read by
    TensorBoard's readers against the original (from the vault). ``progress(manifest, i, n)`` is
    called as the i-th of n checks starts. ``cancel`` (Ctrl-C, the tab's Cancel) is looked at
    before each run, between its backups and inside its verification (``should_stop``): the run
    under way and those after it are results ``unchecked`` (code ``interrupted``), never ok."""
    manifests = [find_manifest(ctx, op)] if op else restorable_ops(ctx, run)
    newest: Dict[str, str] = {}
    for m in restorable_ops(ctx, None):  # newest first
        newest.setdefault(m["run"], m["op_id"])
    results = []
    stop = None if cancel is None else (lambda: cancel.cancelled)
    for i, m in enumerate(manifests):
        if stop is not None and stop():
            results.append(unchecked({"op_id": m["op_id"], "run": m["run"]}))
            continue
        if progress:
            progress(m, i, len(manifests))
        vault = Vault(m["vault"])
        bad, unreadable, archived, hidden = [], [], [], False
        cut = False  # cancelled before every backup was re-hashed
        for f in m["files"]:
            if stop is not None and stop():
                cut = True
                break
            if not vault.check_blob(f["sha256"]):
                kind, entry = missing_backup(vault, f["path"], f["sha256"])
                hidden = hidden or kind == HIDDEN
                {UNREADABLE: unreadable, ARCHIVED: archived}.get(kind, bad).append(entry)
        res = {"op_id": m["op_id"], "run": m["run"], "backups_ok": not bad and not unreadable and not archived,
               "damaged_backups": bad, "unreadable_backups": unreadable, "archived_backups": archived}
        if archived and not bad:  # in an archive class of its store, not damaged (helper S's note)
            res["code"] = StoreError.ARCHIVED
        if hidden:
            res["code"] = Failure.BACKUP_INDEX_DAMAGED
        if unreadable:  # a finding that stands, the run checked in full or cut short (``unchecked``)
            res["code"] = StoreError.PERMISSION
        if cut:  # not all of its backups re-hashed
            results.append(unchecked(dict(res, backups_ok=False)))
            continue
        bad = bad + unreadable + archived  # either way, not every backup could be checked
        if newest.get(m["run"], m["op_id"]) != m["op_id"]:
            # a later reduction changed the run again: only its own backups can be checked
            res["verification"] = {"ok": True, "checks": [{"name": "superseded", "ok": True, "detail":
                                   f"superseded by {newest[m['run']]}; backups re-hashed"}]}
            res["ok"] = not bad
            results.append(res)
            continue
        # the readers' scratch space too (swept at the next start), for this check only
        with scratch.rooted(vault.tmp), scratch.scratch("check", vault.tmp) as tmp:
            try:
                pairs = _committed_pairs(ctx, m, vault, tmp)
            except VaultError as e:  # a damaged compressed backup is never read as the original
                pairs = None
                vr = {"ok": False, "checks": [{"name": "backup", "ok": False, "detail": str(e)}], "failed": [str(e)]}
            if pairs is not None:
                try:
                    vr = compare_views(os.path.join(tmp, "views"), pairs,
                                       (m.get("verification") or {}).get("expectations"), ctx.verify_backends,
                                       (m.get("verification") or {}).get("record_substitutes"), label=m["run"],
                                       should_stop=stop)
                except Stopped:  # cancelled inside the readers' comparison: no verdict on this run
                    vr = None
        if vr is None:
            results.append(unchecked(res, "not checked: the re-check was cancelled while TensorBoard's readers "
                                          "compared the run with its backups (its backups were re-hashed)"))
            continue
        if unreadable:
            vr = dict(vr, ok=False, checks=list(vr.get("checks", [])) + [
                {"name": "backups", "ok": False, "detail": f"[{StoreError.PERMISSION}] cannot read the backup of: "
                                                           + ", ".join(unreadable)}])
        if archived:
            vr = dict(vr, ok=False, checks=list(vr.get("checks", [])) + [
                {"name": "backups", "ok": False, "detail": f"[{StoreError.ARCHIVED}] archived by the store (not "
                                                           "damaged): " + "; ".join(archived)}])
        res["verification"] = vr
        res["ok"] = bool(vr.get("ok")) and not bad
        results.append(res)
    return results


#: codes of what a read of the vaults' manifests names when a manifest does not read (all its
#: states damaged, a file that does not parse): a verify that said "all intact" past one would be
#: wrong (FAILSAFE "Damaged state files"). A damaged line of the operation log itself is judged by
#: restore's rule instead (``unread_state``); a manifest refused as it was read (one that does not
#: parse or check) is ``catalogue.refused_manifests``' to name
UNREAD_STATE = frozenset({Finding.DAMAGED_LINE, Finding.DAMAGED_FILE})


def state_row(code: str, detail: str, path: Optional[str] = None, line: Optional[int] = None,
              op_id: Optional[str] = None, run: Optional[str] = None) -> dict:
    """A re-check's failed result for damage no operation's check shows: ``op_id`` "-" and
    ``run`` "(vault)" unless it names them, ``code`` the finding's, ``path`` (and ``line``) the
    damaged file, its one failed check the finding's words (which name the file first)."""
    row = {"op_id": op_id or "-", "run": run or "(vault)", "ok": False, "backups_ok": False,
           "damaged_backups": [], "unreadable_backups": [], "code": code,
           "verification": {"ok": False, "checks": [{"name": str(code), "ok": False, "detail": detail}]}}
    if path is not None:
        row["path"] = path
    if line is not None:
        row["line"] = line
    return row


def unread_state(ctx: Context, reads: Optional[List[VaultRead]] = None) -> List[dict]:
    """The vaults' state that does not read and may hide a manifest, each a ``state_row`` naming
    its file: damage the re-check of the readable manifests cannot see (review R22 F2). A piece
    of the operation log no readable record comes from (both copies of a sealed piece damaged):
    ``damaged_line``, by the rule that makes a restore of everything ``restore_blocked``
    (``catalogue.hiding_damage``); a damaged line beside readable records hides none of theirs,
    as there. A manifest that does not read (``UNREAD_STATE``, as ``status`` names it), or that
    the one schema refuses (``catalogue.refused_manifests``). ``reads``: the command's
    ``catalogue.read_vaults``, else read here."""
    rows = []
    reads = read_vaults(ctx) if reads is None else reads
    for r in reads:
        root = r.vault.root
        if r.vault.is_private():
            for where in oplog.hiding_damage(root, alone=True):
                file, _sep, why = where.partition(" line ")
                rows.append(state_row(Finding.DAMAGED_LINE, f"{file}: line {why}: the operation log's record there "
                                      f"cannot be read and may be a manifest; {oplog.DAMAGED_LINE_ADVICE}", file))
        segments = oplog.segments_dir(root)
        rows += [state_row(p.code, f"{p.file}: {p.detail}", p.file, p.line) for p in r.vault.problems
                 if p.code in UNREAD_STATE and os.path.dirname(p.file) != segments]
    # a manifest the one schema refuses is never checked: its backups may be this logdir's, so
    # it is a failed row naming it, as a bucket's damaged manifest is (and as restore names it)
    rows += [state_row(x["code"], x["detail"], x["file"], None, x["op_id"], x["run"])
             for x in refused_manifests(ctx, reads)]
    return rows


def _committed_pairs(ctx: Context, m: dict, vault: Vault, scratch_dir: str) -> ViewPairs:
    """Original = the backed-up bytes (or the file in place if it was never changed);
    reduced = what is in the run now. TensorBoard's readers take paths: a compressed backup is
    decompressed (and hashed) into ``scratch_dir``, removed with it after the check."""
    run_dir = ctx.abs(m["run"])
    by_name = {os.path.basename(f["path"]): f for f in m["files"]
               if os.path.dirname(f["path"]) == (m["run"] if m["run"] != "." else "")}
    names = set(by_name)
    if os.path.isdir(run_dir):
        names |= {n for n in os.listdir(run_dir) if is_event_file_name(n)}
    # records salvaged from a late writer are in the (grown) original backup already
    salvaged = {os.path.basename(s["file"]) for s in m.get("salvaged", []) if s.get("file")}
    pairs: ViewPairs = {}
    for n in names:
        if not is_event_file_name(n):
            continue
        f = by_name.get(n)
        now = os.path.join(run_dir, n)
        if f is None and n in salvaged:
            # only in the reduced view: an original-side placeholder that reads as nothing
            pairs[n] = (None, now if os.path.isfile(now) else None)
            continue
        pairs[n] = (vault.materialise(f["sha256"], scratch_dir) if f else now, now if os.path.isfile(now) else None)
    return pairs


__all__ = ["NOT_CHECKED", "UNREAD_STATE", "compare_views", "recheck", "state_row", "unchecked", "unread_state"]
