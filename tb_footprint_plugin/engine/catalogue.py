"""The catalogue of operations: manifests (written once an operation ends), the vaults a
logdir has used, which operations are restorable, and what unfinished journals still need.
What a manifest says on every store (kept, restorable, its summary row) is ``catalogue_rules``.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from typing import Iterable, List, Optional

from tb_footprint_plugin.codes import Failure, Finding, Outcome
from tb_footprint_plugin.engine import manifest, oplog
# the store-neutral rules (a bucket's catalogue asks them too), re-exported for the disk's callers
from tb_footprint_plugin.engine.catalogue_rules import is_kept, operation_summary, summarize_operations  # noqa: F401
from tb_footprint_plugin.engine.context import Context, NoSpace, TransactionError, writing
from tb_footprint_plugin.engine.history import (append_history, backups_said_kept_now, disk_log, history_path,
                                                missing_manifests_said, missing_manifests as missing_in_log,
                                                reduce_line)
from tb_footprint_plugin.engine.manifest_form import stored_plan, stored_policy
from tb_footprint_plugin.engine.relink import LINK_FIELDS, link_groups
from tb_footprint_plugin.engine.journal import ensure_state_subdir, pending_journals
from tb_footprint_plugin.engine.vault import ManifestMemo, Vault, who
from tb_footprint_plugin.engine.vault_manifests import EveryBlob
from tb_footprint_plugin.engine.vault_index import (damaged_index_advice, damaged_vault_indexes, salvage_vault_paths,
                                                   set_aside, vault_index_entries)
from tb_footprint_plugin.engine.vault_reads import manifest_file, read_roots, VaultRead
from tb_footprint_plugin.storage.files import atomic_write_json, plausible_id
from tb_footprint_plugin.engine import trust
from tb_footprint_plugin.storage import lock
from tb_footprint_plugin.storage.regular import read_capped
from tb_footprint_plugin.storage.paths import VAULTS_NAME, is_sha256, recorded_vaults
from tb_footprint_plugin.version import __version__

def known_vaults(ctx: Context) -> List[str]:
    """The default vault plus every other vault this logdir's operations have used."""
    roots = [ctx.state]
    roots += [r for r in recorded_vaults(ctx.state) if r not in roots]
    if ctx.vault.root not in roots:
        roots.append(ctx.vault.root)
    return roots


def remember_vault(ctx: Context) -> None:
    """Record a vault outside the state directory so restore, purge and status find it later.

    The index is merged, never replaced: every string it lists stays, even one not used now (an
    unmounted vault, a folder an older version reached through a symlink: whether a vault is
    used is decided where it is read, ``paths.recorded_vaults``, not by forgetting it). A
    vaults.json that does not parse is set aside (``vaults.json.damaged-<time>``), never
    overwritten, and the vault paths still readable in its bytes (and in any file set aside
    before) are carried into the new one: the vaults it listed may be known nowhere else."""
    if ctx.vault.root == ctx.state:
        return
    path = os.path.join(ctx.state, VAULTS_NAME)
    # two reduces of one logdir (processes, or a batch's workers) must not each drop the other's vault
    with lock.exclusive(os.path.join(ensure_state_subdir(ctx.lock_dir), "vaults.lock")):
        listed, damaged = vault_index_entries(path)
        roots = list(listed)
        for aside in damaged_vault_indexes(ctx.state):
            roots += salvage_vault_paths(aside)
        if damaged:
            roots += salvage_vault_paths(path)
        roots.append(ctx.vault.root)
        merged = []
        for r in roots:
            if r not in merged and r != ctx.state:
                merged.append(r)
        if merged == listed and not damaged:
            return  # nothing new: the file is left as it is
        if damaged:
            set_aside(path)
        with writing(path, len(json.dumps(merged)) + 64):
            atomic_write_json(path, merged)


def read_vaults(ctx: Context, slim: bool = False, memo: Optional[ManifestMemo] = None) -> List[VaultRead]:
    """Every vault of this logdir (``known_vaults``) read once, for the passes of one command to
    share (``own_manifests``, ``vault_problems``, ``health.catalogue_problems``,
    ``purge.freeable_bytes``). ``slim``: each manifest without its verification, plan and policy
    (``_HEAVY``), as it is read: what counting, checking blobs and listing need of thousands."""
    return read_roots(known_vaults(ctx), slim, memo)


def own_manifests(ctx: Context, reads: Optional[List[VaultRead]] = None) -> List[dict]:
    """Every manifest of operations on this logdir, in every vault it used (from ``reads``,
    ``read_vaults``' of this command, when given: nothing is read again)."""
    out: List[dict] = []
    seen: set = set()
    here = os.path.realpath(ctx.logdir)
    identity = manifest_binding(ctx)
    if identity is False:
        return []  # a state directory copied or planted from elsewhere: none of it is ours
    for r in (read_vaults(ctx) if reads is None else reads):
        _take_own(r.vault.root, r.manifests, here, identity, seen, out)
    return out


def own_manifests_of(ctx: Context, op_ids: Iterable[object]) -> List[dict]:
    """What ``own_manifests`` lists of the operations ``op_ids`` (untrusted: a change log's),
    reading only theirs (``Vault.manifests_of``: an id not of the op-id format names no file),
    in each vault in turn those not found yet: the history's page of N entries reads N
    manifests, not the vaults' every one (issue #28)."""
    out: List[dict] = []
    seen: set = set()
    wanted = {op for op in op_ids if isinstance(op, str)}
    if not wanted:
        return out
    here = os.path.realpath(ctx.logdir)
    identity = manifest_binding(ctx)
    if identity is False:
        return []
    for root in known_vaults(ctx):
        if wanted <= seen:
            break
        _take_own(root, Vault(root).manifests_of(wanted - seen), here, identity, seen, out)
    return out


def _take_own(root: str, found: List[dict], here: str, identity, seen: set, out: List[dict]) -> None:
    """Add to ``out`` the manifests of ``found`` (read from the vault at ``root``) that are this
    logdir's (``here``, ``identity``: ``manifest_binding``) and of an operation not ``seen`` in
    a vault before: the one rule of ``own_manifests`` and ``own_manifests_of``."""
    for m in found:
        # a vault shared by several logdirs holds their operations side by side
        if not is_own(m, here, identity):
            continue
        if m["op_id"] not in seen:
            seen.add(m["op_id"])
            try:  # the one schema (``engine.manifest``); a refused one is named by ``vault_problems``
                out.append(manifest.read(m, manifest_file(root, m["op_id"])))
            except trust.Untrusted:
                continue  # never acted on; its blobs stay (``Vault.referenced_blobs`` reads every manifest)


def is_own(m: dict, here: str, identity) -> bool:
    """Whether the manifest (or journal begin record) ``m`` is this logdir's: the one rule, for
    every reader of a disk logdir's state (``here``: the logdir's realpath; ``identity``:
    ``manifest_binding``'s, not False).

    One carrying a ``logdir_id`` is this logdir's exactly when a bound identity has that id,
    wherever the logdir stands now: ``trust.bind`` proved the state is this directory's by its
    inode, so a logdir renamed, or reached through another mount point, keeps its operations
    (review R10 F1). The path decides only for one without an id (written before identities);
    a logdir with no identity yet (a new one, perhaps made at the path another logdir left)
    claims none that carries an id: it is another logdir's, which had one."""
    lid = m.get("logdir_id")
    if identity is not None and identity.get("id"):
        if lid is not None:
            return lid == identity["id"]
    elif lid is not None:
        return False
    return isinstance(m.get("logdir"), str) and os.path.realpath(m["logdir"]) == here


def manifest_binding(ctx: Context):
    """What a manifest's ``logdir_id`` must be to count as this logdir's: the identity (a dict
    with ``id``), None (no identity yet: only manifests without an id, by their path: ``is_own``),
    or False (a foreign state directory: nothing in it is ours). A missing identity.json is
    the identity ``trust.bind`` would adopt: the one id the state's own records carry
    (``trust.adoptable_ids``).

    A damaged identity.json hides no backup: the manifests bind themselves. Each one names its
    logdir and carries the state's id; when those whose logdir is this one agree on one id,
    that id stands for the identity (as ``trust.bind`` takes it back for a deleted one), a
    manifest outside the state folder counting only when the state's own change log or a
    journal names its operation (``trust.adoptable_ids``, the one rule). This
    trusts nothing an attacker who can write identity.json could not claim anyway (they could
    write a well-formed one), while state planted from another logdir still names that logdir,
    or, planted at this very path, carries an id other than the one this logdir's manifests
    agree on. When they carry several ids nothing with an id is trusted until it is settled."""
    try:
        bound = trust.bind(ctx.logdir, ctx.state, adopt=False)
    except trust.Untrusted as e:
        if e.code != trust.IDENTITY_DAMAGED:
            return False
    else:
        if bound is not None:
            return bound
        # none yet: the id adopting would take back (``trust.adoptable_ids``: a recorded vault's
        # only where the state's own change log corroborates it: a new logdir made where another
        # one stood must not take that one's id)
        ids = trust.adoptable_ids(ctx.logdir, ctx.state)
        return {"id": ids.pop()} if len(ids) == 1 else None
    # damaged: the id a repair would take back from these vaults, by the same rule (the command's
    # --backup-dir included, its ids corroborated alike: review R10 F9's narrower variant)
    ids = trust.adoptable_ids(ctx.logdir, ctx.state, known_vaults(ctx))
    return {"id": ids.pop() if len(ids) == 1 else None}


def find_manifest(ctx: Context, op_id: str) -> dict:
    """The manifest of operation ``op_id``; ``TransactionError`` when there is none."""
    for m in own_manifests(ctx):
        if m["op_id"] == op_id:
            return m
    # not found is said as such (a mistyped id is the user's to fix) unless damage may hide it
    hidden = hiding_damage(ctx)
    raise TransactionError(f"no operation {op_id!r} in the vault" + "".join(f"; {why}" for why in hidden),
                           Failure.RESTORE_BLOCKED if hidden else Failure.NOT_FOUND)


def restorable_ops(ctx: Context, run: Optional[str] = None, reads: Optional[List[VaultRead]] = None) -> List[dict]:
    """Verified reductions whose backup is kept and that were not restored yet, newest first
    (from ``reads``, this command's ``read_vaults``, when given).

    Of one run, only the newest can be restored first (``restore.restore_op`` refuses older ones)."""
    ops = [m for m in own_manifests(ctx, reads) if is_kept(m) and (run is None or m["run"] == run)]
    ops.sort(key=lambda m: (m.get("started_at", 0), m["op_id"]), reverse=True)
    return ops


def vault_of(records: List[dict], ctx: Context) -> Vault:
    begin = records[0] if records else {}
    return Vault(begin.get("vault") or ctx.vault.root)


def missing_manifests(ctx: Context) -> List[str]:
    """The operations this logdir's change log says were reduced or retired and verified (their
    backup kept, and not purged nor restored since) whose manifest no vault of the logdir holds
    (``history.missing_manifests``, the one rule of every store; review R26 F1): which blobs
    their runs' files are is unknown — they may be blobs another manifest names (a run copied,
    identical bytes stored once) — so every blob is kept (``journal_blobs``) and status names
    each (``Finding.MANIFEST_MISSING``)."""
    kept = backups_said_kept_now(ctx.state)
    todo = kept - ctx.manifests_seen if kept else kept
    if not todo:
        return []
    vaults = [Vault(root) for root in known_vaults(ctx)]
    # each vault's index brought up to date once; one found held is not looked for again (a batch asks per run)
    with contextlib.ExitStack() as stack:
        for v in vaults:
            stack.enter_context(oplog.snapshot(v.root))
        missing = missing_in_log(frozenset(todo), lambda op: any(v.has_manifest(op) for v in vaults))
    ctx.manifests_seen.update(todo.difference(missing))
    return missing


def missing_manifest_findings(ctx: Context) -> List["trust.Untrusted"]:
    """Status's words (and a purge's) for each of ``missing_manifests``, named by the change log."""
    ops = missing_manifests(ctx)
    if not ops:
        return []
    said = missing_manifests_said(disk_log(ctx.state), ops)
    return [trust.Untrusted(Finding.MANIFEST_MISSING, history_path(ctx.state), said[op][1]) for op in ops]


def journal_blobs(ctx: Context, exclude_op: Optional[str] = None) -> set:
    """Blobs that unfinished operations (other than ``exclude_op``) rely on; every blob
    (``EveryBlob``) while an operation's manifest is missing (``missing_manifests``): no purge,
    release, rollback or forget lets a blob go by its absence from the manifests read."""
    out = set()
    for j in pending_journals(ctx.journal_dir):
        if j.op_id == exclude_op:
            continue
        try:
            log = trust.read_json_lines(j.path)
        except OSError:
            log = None
        # only ever used to keep blobs: a malformed record here can only keep more
        if log is not None:
            out.update(r["sha256"] for r in log.records if r.get("type") == "backup" and is_sha256(r.get("sha256")))
        if log is None or log.damaged or log.torn:
            # a damaged line may have named a backup: every digest its bytes spell out is kept
            with contextlib.suppress(OSError):
                with open(j.path, "rb") as f:
                    out.update(m.decode() for m in _DIGEST.findall(read_capped(f, trust.MAX_STATE_BYTES - 1)))
    if missing_manifests(ctx):
        return EveryBlob(out)
    return out


_DIGEST = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


#: what a restore or verify of everything says after a refused manifest's own words
REFUSED_MANIFEST_WORDS = "its backups are kept, and it is not restored until it is mended or moved aside"
#: the codes a manifest is refused with as it is read (``trust.check_manifest``, a file that does
#: not parse), named in the vault's ``problems``: those of no other state file
MANIFEST_REFUSALS = frozenset({trust.BAD_MANIFEST, trust.BAD_OP_ID, trust.PATH_OUTSIDE, trust.BAD_RECORD,
                               trust.BAD_DIGEST})


def refused_manifests(ctx: Context, reads: Optional[List[VaultRead]] = None) -> List[dict]:
    """This logdir's manifests the one schema refuses (``manifest.read``: a field of the wrong
    type, a path outside its run): never acted on, their backups kept (``_take_own``), so a
    restore or verify of everything names each (``hiding_damage``, ``checks.unread_state``)
    rather than passing it over in silence, as a bucket names its damaged manifests. Each:
    ``{code, file, detail, op_id, run}`` (op id and run only when they are strings). One whose
    logdir fields cannot say whose it is counts as this logdir's: it may hide one of its backups,
    and so does one refused as it was read (``MANIFEST_REFUSALS`` in the vault's ``problems``)."""
    here, identity = os.path.realpath(ctx.logdir), manifest_binding(ctx)
    if identity is False:
        return []  # a state directory copied or planted from elsewhere: none of it is ours
    out = []
    for r in (read_vaults(ctx) if reads is None else reads):
        out += [{"code": p.code, "file": p.file, "detail": f"{p.file}: {p.detail}; {REFUSED_MANIFEST_WORDS}",
                 "op_id": None, "run": None} for p in r.vault.problems if p.code in MANIFEST_REFUSALS]
        for m in r.manifests:
            try:  # (each is a dict: ``trust.check_manifest`` refused any other as it was read)
                manifest.read(m, manifest_file(r.vault.root, m.get("op_id")))
                continue
            except trust.Untrusted as e:
                refusal = e
            said = isinstance(m.get("logdir"), str) or isinstance(m.get("logdir_id"), str)
            if said and not is_own(m, here, identity):
                continue  # another logdir's in a shared vault: its own verbs name it
            named = {k: m[k] if isinstance(m.get(k), str) else None for k in ("op_id", "run")}
            out.append({"code": refusal.code, "file": refusal.file,
                        "detail": f"{refusal.file}: {refusal.detail}; {REFUSED_MANIFEST_WORDS}", **named})
    return out


def vault_problems(ctx: Context, reads: Optional[List[VaultRead]] = None) -> List["trust.Untrusted"]:
    """Manifests in this logdir's vaults that were refused as malformed, to report (from
    ``reads`` when given), and those the change log names that are missing (``missing_manifests``)."""
    out = []
    for r in (read_vaults(ctx) if reads is None else reads):
        for m in r.manifests:
            try:
                manifest.read(m, manifest_file(r.vault.root, m.get("op_id")))
            except trust.Untrusted as e:  # a field of the wrong type: the one schema's check
                out.append(e)
        out += r.vault.problems
    # a verified operation of the change log whose manifest no vault holds (review R26 F1)
    return out + missing_manifest_findings(ctx)


def unsettled_op(ctx: Context, run: str) -> Optional[str]:
    """The id of an unfinished operation on ``run``, if one is left (call under the run lock)."""
    for j in pending_journals(ctx.journal_dir):
        try:
            recs = trust.read_json_lines(j.path).records
        except OSError:
            continue  # unreadable: named by status, never replayed; it holds no run it cannot name
        if recs and recs[0].get("run") == run:
            return j.op_id
    return None


def hiding_damage(ctx: Context, reads: Optional[List[VaultRead]] = None) -> List[str]:
    """Damage that may keep backups out of sight, for a restore of everything to name rather
    than say "nothing to restore": a state folder bound to another directory (copied here, or
    this logdir moved from another filesystem), an identity.json recovery could not rebuild, a
    vaults.json that does not parse (the vaults it listed are unknown), a manifest refused
    (``refused_manifests``, from ``reads`` when given)."""
    out = []
    try:  # a state folder bound to another directory: its retirements and backups are not used here
        trust.bind(ctx.logdir, ctx.state, adopt=False)
    except trust.Untrusted as e:
        if e.code == trust.FOREIGN_STATE:
            out.append(str(e))
    except OSError:
        pass
    damage = trust.identity_damage(ctx.logdir, ctx.state)
    if damage is not None:
        out.append(f"{damage}: manifests bound to another id than the one this logdir's own manifests agree on "
                   "are not used; see `tb-footprint recover`")
    path = os.path.join(ctx.state, VAULTS_NAME)
    try:
        if not isinstance(trust.read_json_file(path, what="vault index"), list):
            out.append(f"{path}: the vault index is not a JSON list; backups in the vaults it listed are not found "
                       "(give their folder as --backup-dir)")
    except FileNotFoundError:
        pass
    except trust.Untrusted as e:
        out.append(f"{e}; backups in the vaults it listed are not found (give their folder as --backup-dir)")
    # named until the user removes it: the merge kept what its bytes still said, perhaps not all
    out += [f"{aside}: {damaged_index_advice(aside, ctx.state)}" for aside in damaged_vault_indexes(ctx.state)]
    out += [r["detail"] for r in refused_manifests(ctx, reads)]  # a manifest refused hides its backups
    # a damaged line of a vault's operation log that may have been a whole manifest no readable
    # line names (an undecodable sealed piece): the operation it recorded is out of sight
    for root in known_vaults(ctx):
        if Vault(root).is_private():
            out += [f"{where}: the operation log's record there cannot be read and may be a manifest; "
                    f"{oplog.DAMAGED_LINE_ADVICE}" for where in oplog.hiding_damage(root, alone=True)]
    return out


def manifest_exists(ctx: Context, records: List[dict]) -> bool:
    return vault_of(records, ctx).has_manifest(records[0]["op_id"])


def bytes_after_of(records: List[dict]) -> int:
    """A reduced run's size by its journal: planned size, less what was backed up and removed,
    plus what was staged in its place."""
    removed = sum(r["size"] for r in records if r["type"] == "backup")
    created = sum(r["size"] for r in records if r["type"] == "staged")
    return records[0]["plan"]["bytes_before"] - removed + created


def write_manifest(ctx: Context, records: List[dict], outcome: str, reason: Optional[str],
                   recovered: bool = False, displaced: Optional[List[dict]] = None,
                   code: Optional[str] = None) -> dict:
    """The operation's manifest (and change-log line): what was backed up, and how it ended;
    ``code``: the outcome's code (``codes.Failure`` of a rollback), carried by both."""
    vault = vault_of(records, ctx)
    begin = records[0]
    plan = begin["plan"]
    backups = [r for r in records if r["type"] == "backup"]
    staged = [r for r in records if r["type"] == "staged"]
    ver = next((r.get("verification") for r in records if r["type"] == "verified"), None)
    if isinstance(ver, dict) and "views" in ver:
        # the readers' own description of each side: nothing reads it back (both front ends drop
        # it), and it was the bulk of a small run's record after its series
        ver = {k: v for k, v in ver.items() if k != "views"}
    after = bytes_after_of(records) if outcome == Outcome.VERIFIED else plan["bytes_before"]
    m = manifest.new(
        op_id=begin["op_id"], kind="reduce", run=begin["run"], logdir=begin["logdir"],
        started_at=begin["t"], finished_at=time.time(), outcome=outcome, reason=reason,
        policy=stored_policy(begin.get("policy")), bytes_before=plan["bytes_before"], bytes_after=after,
        # names of one inode at the backup (``inode``, ``nlink``): a later one's ``link_of`` is its first's
        files=link_groups([{"path": b["path"], "size": b["size"], "mode": b["mode"], "mtime": b["mtime"],
                            "mtime_ns": b.get("mtime_ns"), **{k: b[k] for k in ("uid", "gid", *LINK_FIELDS) if k in b},
                            "sha256": b["sha256"], "blob": os.path.relpath(vault.blob_path(b["sha256"]), vault.root),
                            "action": b["action"]} for b in backups]),
        backup_purged=outcome != Outcome.VERIFIED,
        **({"logdir_id": begin["logdir_id"]} if begin.get("logdir_id") else {}),
        vault=vault.root,
        plan=stored_plan(plan),
        tool_version=__version__,
        **who(),
        recovered=recovered,
        created=[{"path": s["final"], "size": s["size"], "sha256": s["sha256"]} for s in staged],
        # what restore re-creates them from (path, mode, mtime): the journal record's own type and
        # time say nothing more
        removed_dirs=[{k: v for k, v in r.items() if k not in ("type", "t")} for r in records
                      if r["type"] == "rmdir"],
        # the folders it changed and kept, with their mtimes before it: a restore gives them back
        dir_times=begin.get("dir_times") or [],
        **({"run_uid": begin["run_uid"]} if plausible_id(begin.get("run_uid")) is not None else {}),
        verification=ver,
        # content newer than the backup, found where an original went back: kept in the vault
        displaced=displaced or [],
        **({"code": str(code)} if code else {}),
    )
    os.makedirs(vault.ops, exist_ok=True)  # empty: it marks the folder as a vault (``paths.recorded_vaults``)
    # a rollback's manifest already there: an earlier attempt of this rollback wrote it (and perhaps
    # its line) before a kill, and recovery redoes it: one line per operation (``ChangeLog.append_once``)
    again = outcome != Outcome.VERIFIED and vault.has_manifest(m["op_id"])
    # one line of the operation log, its only record (``NoSpace`` names the file)
    size = len(json.dumps(m, sort_keys=True))
    try:
        with writing(oplog.log_path(vault.root, m["op_id"]), size, at=vault.root):
            vault.write_manifest(m)
    except NoSpace as e:
        if outcome == Outcome.VERIFIED or displaced:
            raise  # the record of a change, or of content kept in the vault: never skipped
        # a rollback that displaced nothing leaves the run as it was: on a full disk its record
        # is what gives way, so the rollback itself (which frees the staged files) completes
        m["not_recorded"] = str(e)
        return m
    entry = reduce_line(op_id=m["op_id"], run=m["run"], policy=(begin.get("policy") or {}).get("name"),
                        before=m["bytes_before"], after=after, outcome=outcome, reason=reason, code=code,
                        user=m["user"], host=m["host"])
    try:
        with writing(history_path(ctx.state), len(json.dumps(entry)) + 64):
            if again:  # one line per operation: the first attempt's stands (``ChangeLog.append_once``)
                disk_log(ctx.state, create=True).append_once([dict(entry, time=time.time())])
            else:
                append_history(ctx.state, entry)
    except NoSpace as e:
        if outcome == Outcome.VERIFIED:
            raise
        m["not_recorded"] = str(e)  # the manifest stands; only the change log lacks its line
    return m


def write_committed_line(ctx: Context, records: List[dict], m: dict) -> bool:
    """The change-log line of a committed reduction whose process was killed after its verified
    manifest ``m`` and before its line (review R20 P5), unless the log has a verified line of it
    already (the kill came after the line): one line per operation. Its fields are the
    manifest's (the journal's where the manifest's are not numbers: it is untrusted), its time
    the manifest's ``finished_at``, when the line would have been written. Returns whether it
    wrote it; raises what the append raises (recovery then leaves the journal for the next start)."""
    begin = records[0]
    op_id = begin["op_id"]

    def number(v, default):
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default

    def text(v):
        return v if isinstance(v, str) else None

    before = number(m.get("bytes_before"), begin["plan"]["bytes_before"])
    entry = reduce_line(op_id=op_id, run=begin["run"], policy=(begin.get("policy") or {}).get("name"),
                        before=before, after=number(m.get("bytes_after"), bytes_after_of(records)),
                        outcome=Outcome.VERIFIED, reason=None, code=None, user=text(m.get("user")),
                        host=text(m.get("host")))
    at = m.get("finished_at")
    entry["time"] = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at) \
        and 0 < at <= time.time() else time.time()
    # one line per operation (the kill came after the line: it stands), checked as a bucket's
    # recovery checks its rollback's line: ``ChangeLog.append_once``, one read of the logs
    with writing(history_path(ctx.state), len(json.dumps(entry)) + 64):
        return bool(disk_log(ctx.state, create=True).append_once([entry]))
