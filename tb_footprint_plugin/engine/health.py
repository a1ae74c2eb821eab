"""What is unsettled or damaged in a logdir's state and vaults — read only, cheap, with codes.

``status``, ``scan``, ``plan``, ``history``, ``verify`` and the tab report these findings and
name the command that settles them (``tb-footprint recover LOGDIR``); nothing here changes a
byte. Checks are cheap enough for every call: directory listings, one ``lstat`` per backup and
one parse per manifest (full hashing of backups is ``verify``'s job).

Why one module: every finding ``status`` shows is made here with one shape (``_f``) and one
notion of what ``recover`` settles (``RECOVER_SETTLES``, ``journal_refusal``); split, the
front ends would again offer ``recover`` for what it then refuses (review R16 F1, F6).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import stat
from typing import Callable, Collection, Dict, List, Optional, Union

from tb_footprint_plugin.codes import BlobError, Finding, Outcome, Recovery
from tb_footprint_plugin.engine import manifest, oplog, remote_vault, trust
from tb_footprint_plugin.engine.vault_index import damaged_index_advice, damaged_vault_indexes
from tb_footprint_plugin.engine.history import history_problems
from tb_footprint_plugin.engine.journal import pending_journals, Rec
from tb_footprint_plugin.engine.putback import begins_with, holds_original
from tb_footprint_plugin.engine.recovery_rules import damaged_line, no_begin_record, not_in_place_words
from tb_footprint_plugin.engine.retire_tree import retired_dir, stored_problems
from tb_footprint_plugin.engine.vault import damaged_notes, ZST_SUFFIX, Vault
from tb_footprint_plugin.engine.vault_reads import VaultRead
from tb_footprint_plugin.scan.cache import CACHE_NAME
from tb_footprint_plugin.storage.paths import VAULTS_NAME, contained, is_sha256, recorded_vaults
from tb_footprint_plugin.storage.store import Store
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.private import UNTRUSTED_MARK

#: the findings `tb-footprint recover` settles (settle_command is offered for these alone): an
#: unfinished operation, late writes to salvage, a manifest or identity to rebuild from the log, a
#: backup shared with a snapshot to unshare. Damage to a backup or a state file, orphan or pinned
#: blobs, a moved state folder are the user's to look at: advising recover for them sent the user
#: to a command that then said "no damage found" (review R16 F1)
RECOVER_SETTLES = frozenset({Finding.UNFINISHED, Finding.LATE_WRITES_PENDING, Finding.MANIFEST_DAMAGED,
                             Finding.IDENTITY_DAMAGED, Finding.BACKUP_SHARED})

#: damaged lines named one by one per file; the rest are counted
LINES_NAMED = 5
#: a scan cache up to this size is checked by every status
CACHE_CHECKED_BYTES = 16 << 20


def settle_command(logdir: str, backup_dir: Optional[str] = None) -> str:
    """The command that settles unfinished operations and repairs what can be repaired."""
    cmd = f"tb-footprint recover {shlex.quote(logdir)}"
    if backup_dir:
        cmd += f" --backup-dir {shlex.quote(backup_dir)}"
    return cmd


def unfinished_ops(journal_dir: str, *, logdir: Optional[str] = None, state: Optional[str] = None,
                   vaults: Optional[List[str]] = None, forecast: bool = True) -> List[dict]:
    """Operations whose journal is still there: {op_id, run, kind, bytes_before (the size its
    plan saw; None where the journal does not say), journal (the file read)}. With ``logdir``, ``state`` and ``vaults``
    (the vaults recovery accepts: the state folder, the vault and ``known_vaults``), each also
    has ``refused``: None when recovery will replay it, else the finding (code, the journal file)
    saying why it will not (``journal_refusal``, recovery's rule), and each one it replays
    ``recover_will``: what it will do (``recover_will``). ``forecast`` False leaves
    ``recover_will`` out: its look at a journal's originals (``not_in_place``, a stat each) is
    status's, which a plan's notes never read."""
    judge = logdir is not None and state is not None and vaults is not None
    identity: object = _UNREAD
    stores: List[Store] = []  # the logdir's, made once, for the first journal that needs a look
    out = []
    for j in pending_journals(journal_dir):
        try:
            log: object = trust.read_json_lines(j.path)
        except OSError as e:
            log = e
        recs = log.records if isinstance(log, trust.JsonLines) else []
        begin = recs[0] if recs and recs[0].get("type") == "begin" else {}
        plan = begin.get("plan") if isinstance(begin.get("plan"), dict) else {}
        before = plan.get("bytes_before")
        op = {"op_id": j.op_id, "run": begin.get("run"), "kind": begin.get("kind"), "journal": j.path,
              "bytes_before": before if isinstance(before, int) and not isinstance(before, bool) else None}
        if judge:
            if identity is _UNREAD:
                identity = _identity_for_journals(logdir, state)
            op["refused"] = journal_refusal(j.path, j.op_id, log, logdir=logdir, vaults=vaults, identity=identity)
            if op["refused"] is None and forecast:
                op["recover_will"] = recover_will(recs, _Looks(logdir, stores), j.path)
        out.append(op)
    return out


_UNREAD = object()

#: what recover does to a reduce stopped before its swap, said by status and recover alike: no
#: original was touched (its backups are links or copies), so nothing is "put back"
BEFORE_SWAP = ("stopped before its swap, so its run was never changed: recover removes the attempt's "
               "staging files and backups and records it as rolled back")
#: ... and to one stopped at or after its swap without a verification that passed
AFTER_SWAP = "originals put back byte for byte"


class _Looks:
    """The logdir's store and keys for ``recover_will``'s looks, the store made at the first
    ask only (a status with no journal to look at makes none)."""

    def __init__(self, logdir: str, made: List[Store]):
        self.logdir, self.made = logdir, made

    @property
    def store(self) -> Store:
        if not self.made:
            self.made.append(PosixStore(self.logdir))
        return self.made[0]

    def abs(self, rel: str) -> str:
        return contained(self.logdir, rel)

    def key(self, rel: str) -> str:
        return os.path.relpath(self.abs(rel), self.logdir)


def recover_will(records: List[dict], looks=None, journal: str = "") -> Optional[dict]:
    """What ``recover`` will do with a reduce's journal (one it replays): ``{action, detail,
    code}`` (``action`` a ``codes.Recovery``), by recovery's branches and, given ``looks`` (the
    logdir's ``store``, ``key`` and ``abs``: a ``Context`` or ``_Looks``), its look at the
    originals of a journal without a swap record (``not_in_place``: one stat each, a read only
    where one differs); ``journal``: its file, named in a refusal. None for the other kinds. A
    manifest of the operation saying it committed (a lost commit record) makes recovery finish
    it instead; status does not read it here."""
    if not records or records[0].get("kind") != "reduce":
        return None
    types = {r.get("type") for r in records}
    done = {"code": Finding.RECOVERED}
    if Rec.COMMIT in types:
        return {"action": Recovery.COMPLETED, "detail": "was committed: recover only removes its journal", **done}
    verified_ok = any(r.get("type") == Rec.VERIFIED and r.get("ok") for r in records)
    if Rec.SWAP in types and verified_ok and Rec.ROLLBACK not in types and Rec.DISPLACED not in types:
        return {"action": Recovery.COMPLETED, "detail": "verification had passed: recover finishes its swap, "
                                                        "the run ends reduced and verified", **done}
    if Rec.SWAP in types:
        return {"action": Recovery.ROLLED_BACK, "detail": AFTER_SWAP, **done}
    try:
        astray = not_in_place(looks.store, looks.key, records) if looks is not None else []
        named = looks.abs(astray[0]) if astray else ""
    except (OSError, ValueError):  # what recover meets too: it says why then (``failed``)
        astray = []
    if astray:
        return {"action": Recovery.REFUSED, "detail": not_in_place_words(named, journal),
                "code": Finding.ORIGINAL_NOT_IN_PLACE}
    return {"action": Recovery.ROLLED_BACK, "detail": BEFORE_SWAP, **done}


def not_in_place(store: Store, key_of: Callable[[str], str], records: List[dict]) -> List[str]:
    """The backed-up originals of a journal that are not in place as its backup records say: not
    the recorded size and time (then not the recorded bytes, read to tell), nor grown from them by
    a writer (the recorded bytes first). What a rollback without a swap may drop blobs of only
    when empty (review R7 F2, the disk's twin of ``bucket_steps.rollback_entry``); the one rule
    ``recover`` refuses such a journal by and ``status`` forecasts it with (``recover_will``)."""
    out: List[str] = []
    for r in records:
        if r.get("type") != Rec.BACKUP:
            continue
        key = key_of(r["path"])
        try:
            e = store.stat(key)
        except OSError:  # a link or a special file where the original was: not it
            e = None
        if e is not None and e.size == r.get("size") and e.mtime == r.get("mtime"):
            continue  # as recorded, taken without a read (a swapped-in file has its own size and time)
        if e is not None and (holds_original(store, key, r) or _grown(store, key, e.size, r)):
            continue
        out.append(r["path"])
    return out


def _grown(store: Store, key: str, size: int, r: dict) -> bool:
    """Whether the file at ``key`` is the recorded original with bytes a writer appended."""
    want = r.get("size")
    if not isinstance(want, int) or isinstance(want, bool) or not 0 <= want < size or not isinstance(r.get("sha256"), str):
        return False
    try:
        return begins_with(store, key, want, r["sha256"])
    except OSError:
        return False


def _identity_for_journals(logdir: str, state: str):
    """The identity recovery binds the journals to, read only: ``trust.bind`` without adopting
    (what adopting would take: the one id the logdir's own manifests carry, else a new one no
    journal names), or the ``Untrusted`` that makes recovery refuse every journal."""
    try:
        ident = trust.bind(logdir, state, adopt=False)
        if ident is None:
            ids = trust.adoptable_ids(logdir, state)
            ident = {"id": next(iter(ids))} if len(ids) == 1 else None
        return ident
    except trust.Untrusted as e:
        return e
    except OSError:
        return None


def journal_refusal(path: str, op_id: str, log, *, logdir: str, vaults: List[str], identity) -> Optional[dict]:
    """The finding naming why recovery will not replay this journal, or None when it will
    (``engine.recovery.recover``'s rule, in its order: the identity bound, the journal read, no
    damaged line, a begin record first, then ``trust.check_journal``). ``log``: the journal
    read (``trust.JsonLines``) or the ``OSError`` reading it; ``identity``: from
    ``_identity_for_journals``."""
    where = "not replayed by `tb-footprint recover`: its run and backups are left exactly as they are"
    if isinstance(log, OSError):  # recover fails on it at each start until it can be read
        return _f(Finding.DAMAGED_FILE, op_id, None, f"unreadable journal ({log.strerror or log}); {where} "
                  "until it can be read", file=path)
    if isinstance(identity, trust.Untrusted):
        if identity.code == trust.IDENTITY_DAMAGED:
            return None  # recover rebuilds the identity first (upkeep.recover_all), then judges
        return _f(identity.code, op_id, None, f"the state's identity is refused ({identity.file}: "
                  f"{identity.detail}); {where}", file=path)
    if log.damaged:  # recover's own sentence (recovery_rules), which names the file itself
        d = log.damaged[0]
        return _named(Finding.DAMAGED_FILE, op_id, damaged_line(path, d.line, d.detail), path, line=d.line)
    records = log.records
    if not records:
        return None  # an empty journal of an older version: recovery removes it, nothing happened
    if records[0].get("type") != "begin":
        return _named(Finding.DAMAGED_FILE, op_id, no_begin_record(path), path)
    try:
        trust.check_journal(path, op_id, records, logdir=logdir, vaults=vaults, identity=identity)
    except trust.Untrusted as e:
        run = records[0].get("run")
        return _f(e.code, op_id, run if isinstance(run, str) else None,
                  f"journal refused: {e.detail}; {where}. Look at it, and move it aside once you know "
                  "what it was", file=path)
    return None


class VaultRoots:
    """The logdir's vaults (``catalogue.known_vaults``), as a manifest's ``vault`` field (untrusted)
    is judged against them: each root's real path worked out once, and each field's once (a start
    asks it of every purged retirement, for good: review R13)."""

    def __init__(self, roots: Collection[str]):
        self._real = frozenset(os.path.realpath(r) for r in roots)
        self._asked: Dict[str, bool] = {}

    def holds(self, vault) -> bool:
        """Whether ``vault`` (a manifest's field) is one of these vaults."""
        if not isinstance(vault, str):
            return False
        if vault not in self._asked:
            self._asked[vault] = os.path.realpath(vault) in self._real
        return self._asked[vault]


def _vault_roots(roots: Union[Collection[str], VaultRoots]) -> VaultRoots:
    """``roots`` as ``VaultRoots`` (made once by a caller that asks of many manifests)."""
    return roots if isinstance(roots, VaultRoots) else VaultRoots(roots)


def purged_retirement(m: dict, roots: VaultRoots) -> bool:
    """Whether manifest ``m`` is a verified retirement marked purged (not by a restore), naming its
    run, in one of the logdir's vaults (``roots``: the field is untrusted): a purge of a retired
    run, whose folder and change-log line are then looked at (``retired_purge_unfinished``,
    ``retire_purge``)."""
    return (m.get("kind") == "retire" and m.get("outcome") == Outcome.VERIFIED and bool(m.get("backup_purged"))
            and not m.get("restored_by") and isinstance(m.get("run"), str) and roots.holds(m.get("vault")))


def retired_folder_there(m: dict) -> bool:
    """Whether the folder of retirement ``m`` is in its vault (a real one: a link is never
    followed, so one ``lstat``)."""
    try:
        return stat.S_ISDIR(os.lstat(retired_dir(Vault(m["vault"]), m["op_id"])).st_mode)
    except (OSError, ValueError):
        return False


def retired_purge_unfinished(m: dict, vault_roots: Union[Collection[str], VaultRoots]) -> bool:
    """Whether manifest ``m`` is a verified retirement whose purge was killed past its intent
    (``retire_purge``: `recover` finishes it): a ``purged_retirement`` whose folder is still there
    (``retired_folder_there``)."""
    return purged_retirement(m, _vault_roots(vault_roots)) and retired_folder_there(m)


def catalogue_problems(vault_roots: List[str], manifests: List[dict], in_use: frozenset = frozenset(),
                       reads: Optional[List[VaultRead]] = None) -> List[dict]:
    """Damage in the vaults: lost manifests, backups grown / missing / shrunk, orphan blobs,
    purges that did not finish. Each finding: {code, op_id, run, detail, bytes}. ``reads``: the
    command's one read of the vaults' manifests (``catalogue.read_vaults``), what the blobs any
    manifest claims come from; a vault not in it is read here."""
    shared = {r.vault.root: r for r in reads or ()}
    out: List[dict] = []
    referenced = set(in_use)  # blobs of operations under way
    for m in manifests:  # content displaced by a restore or rollback stays, whatever the outcome
        referenced.update(d["sha256"] for d in m.get("displaced", []) if d.get("sha256"))
    for root in vault_roots:
        with oplog.snapshot(root):  # one look at the log's files for every operation
            out += _log_problems(root)
    shared_named = set()  # a blob several manifests name is named once
    roots = VaultRoots(vault_roots)
    for m in manifests:
        if m.get("backup_purged"):
            if retired_purge_unfinished(m, roots):
                out.append(_f(Finding.UNFINISHED, m["op_id"], m.get("run"), f"a purge of retired run {m.get('run')} "
                              f"({m['op_id']}) was interrupted; `recover` finishes it"))
            continue
        vault = Vault(m["vault"])
        # a disk retirement's files in the vault: gone, grown by a writer, changed or shared (review R9 F3)
        out += [_f(code, m["op_id"], m.get("run"), words) for code, _path, words in stored_problems(m)]
        for f in m.get("files", []):
            referenced.add(f["sha256"])
            try:
                st = os.lstat(vault.blob_path(f["sha256"]))
            except OSError:
                form = vault.blob_form(f["sha256"])
                if form in ("remote", "packed"):
                    continue  # offloaded, or in a verified pack of the vault: `verify` reads it
                if form == "zst":
                    # compressed: it cannot grow; its frame header must declare the original's size
                    # (cheap; a damaged body is found by `verify`, which decompresses and hashes)
                    if not vault.zst_header_ok(f["sha256"], f["size"]):
                        out.append(_f(Finding.BACKUP_DAMAGED, m["op_id"], m.get("run"),
                                      f"compressed backup of {f['path']} in {vault.root} is damaged "
                                      f"({os.path.relpath(vault.zst_path(f['sha256']), vault.root)})"))
                    continue
                if manifest.released_not_missing(m, f["sha256"], form):
                    continue  # let go by its restore (the original stands again), not missing
                out.append(_f(Finding.BACKUP_DAMAGED, m["op_id"], m.get("run"),
                              f"backup of {f['path']} is missing from {vault.root}"))
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and m.get("outcome") == Outcome.VERIFIED \
                    and f["sha256"] not in in_use and (vault.root, f["sha256"]) not in shared_named \
                    and not vault.pinned_by(f["sha256"]):
                # committed, pinned by no transaction under way: its original's name went at the
                # swap, so the other name is outside the vault (a ``cp -al`` / ``rsync --link-dest``
                # snapshot an older version linked in, review R13 F1): a write there changes the backup
                shared_named.add((vault.root, f["sha256"]))
                out.append(_f(Finding.BACKUP_SHARED, m["op_id"], m.get("run"),
                              f"the backup of {f['path']} is one inode with {st.st_nlink - 1} other name(s) outside "
                              "the vault (a hard-linked snapshot of the run?): a write through such a name changes "
                              "this backup; leave them unwritten until `recover` (every start) makes it a copy of "
                              "its own, which it does while it still holds the original's bytes",
                              file=vault.blob_path(f["sha256"])))
            if not stat.S_ISREG(st.st_mode) or st.st_size < f["size"]:
                out.append(_f(Finding.BACKUP_DAMAGED, m["op_id"], m.get("run"),
                              f"backup of {f['path']} in {vault.root} is shorter than it was"))
            elif st.st_size > f["size"] and m.get("kind") == "reduce" and m.get("outcome") == Outcome.VERIFIED and (
                    os.path.lexists(vault.zst_path(f["sha256"]))
                    or remote_vault.packed_ref(vault.root, f["sha256"]) is not None):
                # compacted or packed once nothing wrote it: a plain file grown beside that copy is
                # not this run's late records (salvage leaves it), so no start will put them back
                out.append(_f(Finding.BACKUP_CHANGED, m["op_id"], m.get("run"),
                              f"a plain file grew beside the compacted backup of {f['path']} in {vault.root}: not "
                              "this run's records; kept as is, not salvaged (the backup itself is intact)"))
            elif st.st_size > f["size"] and m.get("kind") == "reduce" and m.get("outcome") == Outcome.VERIFIED:
                out.append(_f(Finding.LATE_WRITES_PENDING, m["op_id"], m.get("run"),
                              f"{st.st_size - f['size']} byte(s) were written to {f['path']} after the reduction; "
                              "`recover` puts the complete records back into the run", st.st_size - f["size"]))
    for root in vault_roots:
        # a compaction note that names nothing is never finished nor dropped (review R13 F5)
        for path, why in damaged_notes(os.path.join(root, "compact")):
            out.append(_f(Finding.DAMAGED_FILE, None, None, f"compaction note {why}: it names no backup, so "
                          "nothing finishes it; the backups stay as they are (remove the note)", file=path))
        r = shared.get(os.path.abspath(root))
        own = r.vault.referenced_blobs(manifests=r.manifests) if r else Vault(root).referenced_blobs()
        # an index that does not read or is gone, a pack gone or cut short, backups nothing lists
        for p in Vault(root).pack_problems(own):
            out.append(_f(Finding.DAMAGED_FILE if p["code"] == BlobError.DAMAGED_INDEX.value else Finding.BACKUP_DAMAGED,
                          None, None, p["message"], file=p["file"]))
        # a blob another logdir's manifest (shared vault) needs is not an orphan either
        refs = referenced | own
        orphans = oplog.orphan_blobs(Vault(root), refs)
        orphans.update(_compressed_orphans(Vault(root), refs))
        orphans.update(Vault(root).packed_orphans(refs))
        if orphans:
            # a pinned blob is an operation's (``unsettled_pins`` names those whose operation is
            # gone): counted here too, it was said twice and `recover` advised for it
            pv = Vault(root)
            for op_id in pv.pinned_ops():
                for sha in pv.pins_of(op_id):
                    orphans.pop(sha, None)
        if orphans:
            out.append(_f(Finding.ORPHAN_BLOBS, None, None,
                          f"{len(orphans)} backup blob(s) in {root} belong to no operation (a lost manifest?); "
                          "kept, never purged", sum(orphans.values())))
    return out


def _compressed_orphans(vault: Vault, referenced: set) -> dict:
    """Compressed blobs (``<sha>.zst``) no manifest refers to: sha256 → size (reported like the
    plain ones, never deleted)."""
    out = {}
    if not os.path.isdir(vault.blobs) or os.path.islink(vault.blobs):
        return out
    for sub in os.listdir(vault.blobs):
        d = os.path.join(vault.blobs, sub)
        if not os.path.isdir(d) or os.path.islink(d):
            continue
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue  # an empty shard folder pruned meanwhile (``Vault.prune_shards``)
        for n in names:
            sha = n[:-len(ZST_SUFFIX)] if n.endswith(ZST_SUFFIX) else None
            if sha and is_sha256(sha) and sha not in referenced:
                with contextlib.suppress(OSError):
                    out[sha] = os.lstat(os.path.join(d, n)).st_size
    return out


def late_writes(manifests: List[dict]) -> List[dict]:
    """Every salvage recorded in the manifests: {op_id, run, path, file, records, at, code}."""
    out = []
    for m in manifests:
        for s in m.get("salvaged", []):
            out.append({"op_id": m["op_id"], "run": m.get("run"), "path": s.get("path"), "file": s.get("file"),
                        "records": s.get("records", 0), "bytes": s.get("bytes", 0), "at": s.get("at"),
                        "code": Finding.LATE_WRITES_SALVAGED if s.get("file") else Finding.LATE_WRITES_KEPT})
    return out


def state_problems(logdir: str, state: str, journal_dir: str) -> List[dict]:
    """Damage in the state directory's own files, each named (file, and line for a log): a
    damaged identity.json, vaults.json, journal, history line, lease or scan cache. Read only."""
    out: List[dict] = moved_state_problems(logdir, state)
    out += planted_links(state)
    damage = trust.identity_damage(logdir, state)
    if damage is not None:
        out.append(_f(Finding.IDENTITY_DAMAGED, None, None,
                      f"{damage.detail}; backups are still found by the manifests' own logdir and id, and "
                      "`recover` rebuilds it (the damaged file is kept beside it)", file=damage.file))
    vaults = os.path.join(state, VAULTS_NAME)
    try:
        roots = trust.read_json_file(vaults, what="vault index")
        if not isinstance(roots, list):
            raise trust.Untrusted(Finding.DAMAGED_FILE, vaults, "vault index is not a JSON list")
    except FileNotFoundError:
        pass
    except trust.Untrusted as e:
        out.append(_f(Finding.DAMAGED_FILE, None, None,
                      f"{e.detail}: backups in the vaults it listed are not found (give their folder as "
                      "--backup-dir); the next reduce with --backup-dir sets it aside and carries the vault paths "
                      "still readable in it into a new one", file=vaults))
    # a damaged index set aside stays named until the user removes it: its vaults may be unknown
    for aside in damaged_vault_indexes(state):
        out.append(_f(Finding.DAMAGED_FILE, None, None, damaged_index_advice(aside, state), file=aside))
    # a journal that cannot be read or does not parse is named by ``unfinished_ops`` (judged):
    # the finding recover's own rule gives it, once
    out += unsettled_pins(state, journal_dir)
    out += history_findings(history_problems(state))
    locks = os.path.join(state, "locks")
    try:
        leases = sorted(n for n in os.listdir(locks) if n.endswith(".lease"))
    except OSError:
        leases = []
    for name in leases:
        if os.path.islink(os.path.join(locks, name)):
            continue  # named as a planted link (``planted_links``), once
        try:
            lease = trust.read_json_file(os.path.join(locks, name), what="lease")
            why = _lease_shape(lease)
            if why:
                raise trust.Untrusted(Finding.DAMAGED_FILE, os.path.join(locks, name), f"lease is JSON but {why}")
        except (FileNotFoundError, IsADirectoryError):
            continue
        except trust.Untrusted as e:
            out.append(_f(Finding.DAMAGED_FILE, None, None, f"{e.detail}; held by no one: replaced when the run "
                          "is next locked", file=e.file))
    cache = os.path.join(state, CACHE_NAME)
    try:
        # a big logdir's cache is tens of MB: parsed here only while cheap (the scan, which
        # reads it anyway, rescans every file of a damaged one)
        if os.path.getsize(cache) <= CACHE_CHECKED_BYTES:
            trust.read_json_file(cache, what="scan cache")
    except FileNotFoundError:
        pass
    except trust.Untrusted as e:
        out.append(_f(Finding.DAMAGED_FILE, None, None, f"{e.detail}; not used: the next scan reads every file "
                      "and writes it afresh", file=e.file))
    return out


#: the state folder's own subfolders whose entries are the tool's own files; ``tmp`` holds the
#: scratch of checks under way (their views link to the originals), so it is not looked into
_SCRATCH = "tmp"


def planted_links(state: str) -> List[dict]:
    """Symbolic links in the state folder and its direct subfolders (the tool makes none there: a
    ``journal`` link to another folder is planted), each a finding naming the link and where it
    points (``Finding.PATH_OUTSIDE``), read with ``lstat``/``readlink`` only: never followed, so
    a read-only verb says it before a changing verb sets it aside (review R16 F11b). One already
    set aside is named by ``vault.set_aside_findings``."""
    out: List[dict] = []
    folders = [state]
    for folder in folders:
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if UNTRUSTED_MARK in e.name:
                continue  # set aside already: ``set_aside_findings`` names it
            try:
                if e.is_symlink():
                    try:
                        target = os.readlink(e.path)
                    except OSError:
                        target = "?"
                    out.append(_f(Finding.PATH_OUTSIDE, None, None,
                                  f"a symbolic link to {target} stands where the tool keeps {e.name!r}; never "
                                  "followed, so nothing there is read, replayed or written; the next verb that writes "
                                  "there (a reduce, a restore) renames the link itself aside. Look at it, then "
                                  "remove it", file=e.path))
                elif folder == state and e.name != _SCRATCH and e.is_dir(follow_symlinks=False):
                    folders.append(e.path)
            except OSError:
                continue
    return out


def unsettled_pins(state: str, journal_dir: str) -> List[dict]:
    """Backups pinned by an operation that has neither a journal in this logdir nor a manifest
    in the vault holding the pins (``Finding.PINS_UNSETTLED``, one finding an operation): a
    reduction whose journal was lost and could not be written again (``engine.transaction``)
    leaves its originals there, possibly as their only copy, and nothing else names them; the
    start-up upkeep keeps such pins, so nothing purges them. A reduce of another logdir sharing
    the vault, under way right now, is named too, in passing (its journal is in its logdir).
    Cost: one listing of each vault's ``tmp/``, and of each pinned operation's pins."""
    out: List[dict] = []
    for root in [state] + [r for r in recorded_vaults(state) if r != state]:
        vault = Vault(root)
        pinned = vault.pinned_ops()
        if not pinned:
            continue
        # listed after the pins: an operation pins only once its journal exists, and removes the
        # journal only once its manifest is written, so one of the two is seen for a live one
        open_ops = {j.op_id for j in pending_journals(journal_dir)}
        for op_id in pinned:
            if op_id in open_ops or vault.has_manifest(op_id):
                continue
            shas = vault.pins_of(op_id)
            if not shas:
                continue
            nbytes = sum(vault.blob_size_on_disk(sha) for sha in shas)
            pins = os.path.join(vault.tmp, op_id, "pins")
            out.append(_f(Finding.PINS_UNSETTLED, op_id, None,
                          f"{len(shas)} backup(s) in {root} are pinned by operation {op_id}, which has neither a "
                          "journal in this logdir nor a manifest (unless a reduce of another logdir sharing this "
                          "vault is under way now): the originals of a reduction whose journal was lost, perhaps "
                          "their only copy; kept and never purged (their digests are the file names here). "
                          "`recover` does not release them: no record says whether the run still needs them. "
                          "Compare the run's files with these digests (sha256sum); an original you miss is "
                          f"{vault.blobs}/<first 2 digits>/<digest> (or <digest>.zst, zstd-compressed). No "
                          "verb frees them (purge never deletes a blob no manifest names): once none is needed, "
                          "remove them and this folder yourself",
                          nbytes, file=pins))
    return out


def moved_state_problems(logdir: str, state: str) -> List[dict]:
    """A state folder of ours standing in ``logdir`` under another name than ``state`` (renamed
    aside: in a logdir others may write without the sticky bit any of them can, review R13 F2),
    as a ``state_moved`` finding naming it and what to do: its journals and backups are seen
    from nowhere else. One listing of the logdir's top level and one ``lstat`` a folder in it;
    only a real folder of this user that others may not write, holding a regular identity.json
    of this user bound to this logdir (its inode, as ``trust.bind`` checks), is read: nothing is
    followed, and nothing that is not ours is opened."""
    me = os.geteuid()
    here = os.path.abspath(state)
    base = os.path.abspath(logdir)
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return []
    found = []
    try:
        log = os.fstat(fd)
        with os.scandir(fd) as it:
            names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        for name in names:
            try:
                # the one lstat of a folder without one, relative to the listed folder (cheap)
                ist = os.lstat(f"{name}/{trust.IDENTITY_NAME}", dir_fd=fd)
                if stat.S_ISREG(ist.st_mode) and ist.st_uid == me:
                    found.append((os.path.join(base, name), os.lstat(name, dir_fd=fd)))
            except OSError:
                continue
    finally:
        os.close(fd)
    out = []
    for folder, st in found:
        if folder == here:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != me or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            continue  # not ours (another user's, or anyone may have written it): never read
        try:
            ident = trust.read_identity(folder)
        except trust.Untrusted:
            continue
        if ident is None or ident["ino"] != log.st_ino or ident.get("dev", log.st_dev) != log.st_dev:
            continue  # another logdir's (a copy): not this one's state
        there = ("once the folder there now is moved away" if os.path.lexists(here)
                 else "nothing stands there now")
        out.append(_f(Finding.STATE_MOVED, None, None,
                      f"a state folder of yours bound to this logdir stands here, not at {here}: its journals and "
                      f"backups are seen from nowhere else (moved aside: in a logdir others may write without the "
                      f"sticky bit, any of them can rename it). Nothing here changes it; move it back to {here} "
                      f"({there}), then run `{settle_command(logdir)}`", file=folder))
    return out


#: a run lock's lease: key -> the types its value may have (a key may be absent)
_LEASE_TYPES = {"expires": (int, float), "renewed": (int, float), "started": (int, float), "at": (int, float),
                "pid": (int,), "pid_start": (int,), "host": (str,), "run": (str,), "token": (str,), "op": (str,)}


def _lease_shape(lease) -> Optional[str]:
    """Why a parsed lease is no lease (wrong shape or types), or None."""
    if not isinstance(lease, dict):
        return "not a JSON object"
    bad = sorted(k for k, types in _LEASE_TYPES.items() if k in lease and (
        isinstance(lease[k], bool) or not isinstance(lease[k], types)))
    return f"of the wrong types ({', '.join(bad)})" if bad else None


def history_findings(problems: List["trust.Untrusted"]) -> List[dict]:
    """The findings of a change log's problems (``history.ChangeLog.problems``, on any store):
    the first ``LINES_NAMED`` damaged lines by file and line, then a count."""
    return _lines(problems, None, "the other entries are shown")


def _lines(damaged: List["trust.Untrusted"], op_id, rest: str) -> List[dict]:
    """Findings for the damaged lines of one log: the first ``LINES_NAMED`` by line, then a count."""
    out = [_f(Finding.DAMAGED_LINE, op_id, None, f"{d.detail}; {rest}", file=d.file, line=d.line)
           for d in damaged[:LINES_NAMED]]
    if len(damaged) > LINES_NAMED:
        out.append(_f(Finding.DAMAGED_LINE, op_id, None, f"{len(damaged) - LINES_NAMED} more damaged line(s), "
                      f"up to line {damaged[-1].line}; skipped", file=damaged[-1].file, line=damaged[-1].line))
    return out


def _f(code: Finding, op_id, run, detail: str, nbytes: int = 0, *, file: Optional[str] = None,
       line: Optional[int] = None) -> dict:
    """A finding; one about a file names it first in ``detail`` (what every front end prints)
    and in ``path`` (and ``line``, 1-based, for a line of a log) for programs."""
    out = {"code": code, "op_id": op_id, "run": run, "detail": f"{file}: {detail}" if file else detail,
           "bytes": nbytes}
    if file is not None:
        out["path"] = file
    if line is not None:
        out["line"] = line
    return out


def _named(code: Finding, op_id, detail: str, file: str, *, line: Optional[int] = None) -> dict:
    """``_f`` of a finding whose ``detail`` already names ``file`` first (recovery's sentences)."""
    out = _f(code, op_id, None, detail, line=line)
    out["path"] = file
    return out


def _log_problems(root: str) -> List[dict]:
    """``catalogue_problems``' findings from one vault's operation log and manifest files."""
    out: List[dict] = []
    vault = Vault(root)
    seen = set()  # a segment's damaged line may be about several operations: named once
    for op_id in oplog.logged_ops(root):
        try:
            recs = oplog.read_log(root, op_id)
        except OSError as e:
            out.append(_f(Finding.DAMAGED_FILE, op_id, None, f"unreadable ({e.strerror or e})",
                          file=oplog.log_path(root, op_id)))
            continue
        fresh = [d for d in recs.damaged if (d.file, d.line) not in seen]
        seen.update((d.file, d.line) for d in fresh)
        out += _lines(fresh, op_id, "the rest of the log is used")
        path = vault.manifest_path(op_id)
        if oplog.has_state(root, op_id):
            pass  # the segments are its record: a damaged line of it is named just above
        elif oplog.last_state(recs) is not None and not oplog.manifest_readable(path, op_id):
            what = "corrupt" if os.path.exists(path) else "missing"
            out.append(_f(Finding.MANIFEST_DAMAGED, op_id, None, f"manifest of {op_id} is {what}; "
                          "`recover` rebuilds it from the vault's operation log"))
        intent = oplog.purge_intent(recs)
        if intent:
            out.append(_f(Finding.UNFINISHED, op_id, None, f"a purge of {op_id} was interrupted; "
                          "`recover` finishes it"))
    # a sealed piece's copy that does not decode (or is missing) while its twin does: `recover`
    # rewrites it; neither whole: what it held is unknown (every blob is kept)
    for f in oplog.check_copies(root):
        code = Finding.MANIFEST_DAMAGED if f.code == oplog.COPY_DAMAGED else Finding.MANIFEST_LOST
        path = f.detail.split(": ", 1)[0]
        out.append(dict(_f(code, None, None, f.detail), path=path))
    # damage that names no operation (a sealed piece that does not decode): named all the same
    out += _lines([d for d in oplog.damaged_lines(root) if (d.file, d.line) not in seen], None,
                  "the operations it held are not listed; their backups are kept")
    for op_id in vault.unreadable_manifests():
        if not os.path.exists(oplog.legacy_path(root, op_id)):
            out.append(_f(Finding.MANIFEST_LOST, op_id, None, f"manifest {op_id} in {root} is corrupt and has no "
                          "log to rebuild it from; its backups are kept"))
    return out


__all__ = ["VaultRoots", "purged_retirement", "retired_folder_there", "retired_purge_unfinished", "settle_command", "history_findings", "unfinished_ops", "journal_refusal", "recover_will", "not_in_place", "BEFORE_SWAP", "AFTER_SWAP", "catalogue_problems", "state_problems", "moved_state_problems",
           "unsettled_pins", "late_writes"]
