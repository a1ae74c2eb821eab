"""Settle unfinished bucket operations from any machine, and name journals that cannot be read.

Before its commit record an operation is rolled back (originals untouched, backups and
temporary keys dropped); from it on (every backup verified, new objects staged and checked) it is
finished; a retirement's journal is settled by ``engine.bucket_retire.settle``; a restore (or a
retired run's restore) stopped midway is finished (``_finish_restore``); a purge killed past its
intent (its journal names operations one of which its manifest says purged) is finished as a
disk's start finishes one (``bucket_purge_journal.KilledBucketPurges`` through
``purge_run.finish_killed``). Journals and locks are untrusted input: one that is not a journal's
shape, or names a key outside the logdir, its vault or its run, is never acted on and is reported
with a code.

Why one module: every kind of bucket journal (a reduction's, a rewrite's, a retirement's, a
restore's, a purge's) is settled in one pass over one listing of the journal objects, under the
same trust checks and lock handling; split by kind, each piece would list and check again.

This is the bucket's layout of recovery; what it answers (``RecoveryOutcome`` and its codes, the
settled runs, the reason of a rollback) is ``engine.recovery_rules``', as a disk's recovery's is.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import Code, Failure, Finding, Outcome, Recovery, Skip
from tb_footprint_plugin.engine import manifest, purge_run, trust
from tb_footprint_plugin.engine.bucket_blob_folder import journal_vault
from tb_footprint_plugin.engine.bucket_blob_release import release_settled
from tb_footprint_plugin.engine.bucket_blobs import names_our_backup, plain_under
from tb_footprint_plugin.engine.history import append_kept, append_rolled_back, kept_line, rolled_back_line
from tb_footprint_plugin.engine.bucket_lease import well_formed
from tb_footprint_plugin.engine.bucket_restore import RESTORE_KIND, restore_op
from tb_footprint_plugin.engine.bucket_retire import UNRETIRE_KIND, is_retire_journal, journal_runs
from tb_footprint_plugin.engine.bucket_retire import settle as settle_retire
from tb_footprint_plugin.engine.bucket_retire import unretire
from tb_footprint_plugin.engine.bucket_state import (
    JOURNAL,
    LOCKS,
    STORE_FAILURES,
    BucketState,
    BucketTxnError,
    BucketVault,
    lock_key,
    must_close,
    must_delete,
    owner_gone,
    run_prefix,
    vault_url,
)
from tb_footprint_plugin.engine.bucket_purge_journal import PURGE_KIND, KilledBucketPurges
from tb_footprint_plugin.engine.bucket_steps import copies_there, finish_op, rollback_entry, rollback_keeps
from tb_footprint_plugin.engine.journal_object import (
    COMMITTED_STEPS,
    ObjectJournal,
    journal_entries,
    journal_key,
    journal_unreadable,
    pending_objects,
)
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.engine.retire_rules import taken_along
from tb_footprint_plugin.engine.recovery_rules import (
    INTERRUPTED_REASON,
    MAX_REASON,
    NOT_REPLAYED,
    REDUCE,
    RecoveryOutcome,
    backups_kept,
    damaged_journal,
    failed,
    refused,
    settled,
    settled_run,
    skipped_live,
)
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.paths import is_op_id
from tb_footprint_plugin.storage.store_object import ObjectStore

#: why a journal of the wrong shape is not acted on (``trust.BAD_RECORD``; any other refusal names
#: keys outside the logdir, vault or run: ``trust.PATH_OUTSIDE``)
MALFORMED = "journal is malformed"
#: what is damaged in a journal object that does not read (read whole: no line to name)
DAMAGED_OBJECT = "the journal is damaged (not a journal's JSON)"


def _trusted(ostore: ObjectStore, vault: BucketVault, doc: dict) -> Optional[str]:
    """Why a journal must not be acted on (untrusted input), or None: every key it names is a
    plain key of this logdir or this vault's blobs/tmp, its runs are runs of this logdir, and a
    retirement's nested runs are inside its run."""
    for en in journal_entries(doc):
        if not isinstance(en, dict) or not isinstance(en.get("run"), str) or not isinstance(en.get("files", []), list):
            return MALFORMED
        try:
            ostore.path(en["run"]) if en["run"] != "." else None
            for f in en.get("files", []):
                if not isinstance(f, dict) or not isinstance(f.get("path"), str):
                    return MALFORMED
                ostore.path(f["path"])  # raises on '..' and friends
                if f.get("final") is not None:
                    ostore.path(f["final"])
                    if en["run"] != "." and not str(f["final"]).startswith(run_prefix(en["run"])):
                        return "journal names keys outside its run"
                if not names_our_backup(vault, f):
                    return "journal names keys outside the logdir or vault"
                if f.get("tmp") is not None and not plain_under(str(f["tmp"]), vault.root + "/tmp/"):
                    # '<vault>/tmp/../x' starts with the prefix: every part must be a plain one (review R12 F1)
                    return "journal names keys outside the logdir or vault"
                if not f["path"].startswith(run_prefix(en["run"])) and en["run"] != ".":
                    return "journal names keys outside its run"
        except (ValueError, TypeError):
            return "journal names keys outside the logdir or vault"
    if is_retire_journal(doc):
        # a run taken along must be inside the run (``retire_rules.taken_along``), as a disk's
        # journal check refuses one (``trust.check_journal``): never settled on a journal's word
        along, runs = doc.get("takes_along"), journal_entries(doc)
        along = [] if along is None else along
        if not isinstance(along, list):
            return MALFORMED
        if along and (not runs or taken_along({"run": runs[0].get("run"), "takes_along": along}) != along):
            return "journal names a run taken along outside its run"
    return None


def reduce_will(journal: ObjectJournal, ostore: ObjectStore, vault: BucketVault) -> dict:
    """What ``recover`` does with a reduce's journal object (one it trusts): ``{action, detail,
    code}`` (``action`` a ``codes.Recovery``, ``code`` its outcome's), by recovery's own rules and
    looks: a commit record whose copies are all there (``copies_missing``), else a refusal naming
    the copy; a rollback, whose originals are in place (``bucket_steps.rollback_keeps``), else its
    backups kept (``recovery_rules.backups_kept``). ``recover`` acts on it and ``status`` shows it
    (``unfinished``), so both say the same words, as ``engine.health.recover_will`` does for a
    disk's journal. The cost: one listing of each run's copies (a commit record), or one head per
    file (a rollback); only for journals left unfinished."""
    finish = finishes(journal)
    vault, refusal = journal_vault(ostore, vault, journal) if journal.committed() else (vault, None)
    if refusal is not None:
        return {"action": Recovery.REFUSED, "detail": refusal[1], "code": refusal[0]}
    if finish:
        missing = copies_missing(ostore, vault, journal)
        if missing:
            return {"action": Recovery.REFUSED, "detail": missing[0], "code": missing[1]}
    try:
        astray = [p for en in journal.entries() if en.get("dropped") for p in rollback_keeps(ostore, vault, en, False)]
        if not finish:
            astray += [p for en in journal.live_entries()
                       for p in rollback_keeps(ostore, vault, en, journal.committed())]
    except (BucketTxnError, *STORE_FAILURES, ValueError):
        astray = []  # what recover meets too: it says why then (``failed``)
    if astray:
        o = backups_kept(str(journal.doc.get("op")), None, astray)
        return {"action": o.action, "detail": o.detail, "code": o.code}
    if finish:
        return {"action": Recovery.COMPLETED, "detail": FINISHED, "code": Finding.RECOVERED}
    return {"action": Recovery.ROLLED_BACK, "detail": left_as_it_was(journal), "code": Finding.RECOVERED}


#: what a reduce's journal finished from its commit record says (``reduce_will`` and ``recover``)
FINISHED = "backups were verified; the reduction was finished"


def left_as_it_was(journal: ObjectJournal) -> str:
    """What a reduce's journal rolled back with its originals in place says (``reduce_will``, ``recover``)."""
    return f"stopped at step {journal.step_name}; run left as it was"


def finishes(journal: ObjectJournal) -> bool:
    """Whether a reduce's journal is finished rather than rolled back: past its commit step, with
    every backup of its live runs verified (their checksums recorded)."""
    return journal.step_name in COMMITTED_STEPS and all(
        isinstance(f, dict) and f.get("backup_checksums") for en in journal.live_entries() for f in en.get("files") or [])


def copies_missing(ostore: ObjectStore, vault: BucketVault, journal: ObjectJournal) -> Optional[Tuple[str, Code]]:
    """Why a reduce's journal past its commit record is not finished, and its code: the first copy
    of its live runs not in the vault as its copy step verified it (``bucket_steps.copies_there``:
    ``backup_damaged``), or a local blob folder not given to this command (``restore_blocked``:
    nothing is lost, the folder is named by ``--backup-dir``); None when every copy is there."""
    try:
        for en in journal.live_entries():
            copies_there(ostore, vault, en)
    except BucketTxnError as e:
        return str(e), (Finding.BACKUP_DAMAGED if e.code == Failure.BACKUP_DAMAGED else e.code)
    return None


def trust_refusal(ostore: ObjectStore, vault: BucketVault, journal: ObjectJournal, url: str) -> Optional[dict]:
    """Why ``recover`` will not act on this journal, as a finding ``{code, file, detail}`` (its
    rule, ``_trusted``), or None when it will."""
    why = _trusted(ostore, vault, journal.doc)
    if why is None:
        return None
    return {"code": trust.BAD_RECORD if why == MALFORMED else trust.PATH_OUTSIDE, "file": url,
            "detail": f"{url}: {why}; left alone"}


def recover(ostore: ObjectStore, vault: BucketVault) -> List[RecoveryOutcome]:
    """Settle unfinished bucket operations of this logdir, from any machine: before the commit
    record, roll back; from it on (backups verified, new objects staged and checked), finish."""
    st = BucketState(ostore)
    out: List[RecoveryOutcome] = []
    # local scratch of rewrites whose process was killed (named after its pid): swept here, as a
    # local vault's tmp/ is at every start
    scratch.sweep(scratch.system_root())
    # a damaged run lock is named here too (never acted on: a reduce or restore of its run takes
    # it over once no journal of the operation it names is left)
    out += [refused(d["file"].rsplit("/", 1)[-1], "?", d["detail"], d["code"]) for d in damaged_locks(ostore)]
    purges: List[ObjectJournal] = []
    for key, _info in pending_objects(BucketState.of(ostore)):
        rel = key.rsplit("/", 1)[-1]
        if not key.startswith(JOURNAL + "/") or not rel.endswith(".json"):
            continue
        try:
            path = ostore.path(key)
        except ValueError:  # S3 keeps 'journal/x/../<op>.json' as written: never read nor acted on (R12 F2)
            out.append(refused(rel, "?", f"{_named(ostore, key)}: not a plain key of the logdir; left in place",
                               trust.PATH_OUTSIDE))
            continue
        journal = ObjectJournal.read(st, path)  # read now (not at the listing's version): its owner may have moved on
        if journal is None:  # finished (or settled) by its owner since the listing
            continue
        doc = journal.doc
        if journal.unreadable():
            # named by its file's op id, as a disk's damaged journal is
            out.append(refused(rel[:-len(".json")], "?", damaged_journal(ostore.url_of(key), DAMAGED_OBJECT),
                               Finding.DAMAGED_FILE))
            continue
        op_id = str(doc.get("op", rel[:-5]))
        every = journal.entries()
        refusal = trust_refusal(ostore, vault, journal, ostore.url_of(key))
        runs = [str(en.get("run")) for en in every if isinstance(en, dict)]
        label = runs[0] if len(runs) == 1 else f"{runs[0] if runs else '?'} and {max(0, len(runs) - 1)} more run(s)"
        if refusal:
            out.append(refused(op_id, label, refusal["detail"], refusal["code"]))
            continue
        if journal.kind == PURGE_KIND:  # finished below, from this listing: a start costs no request more
            purges.append(journal)
            continue
        retiring = is_retire_journal(doc)
        # computed, never taken from the journal (a retirement's nested runs: checked to be inside its run)
        locks = [ostore.path(lock_key(r)) for r in (journal_runs(doc) if retiring else runs)]
        lock, _ = st.read(locks[0]) if locks else (None, None)
        if lock and lock.get("op") == op_id and not owner_gone(lock, st):
            out.append(skipped_live(op_id, label, "its owner is still running"))
            continue
        # acted on only as it stood once no live owner held its runs, never as read before the lock:
        # its owner may have gone on meanwhile (to its end: journal closed, lock dropped; or past its
        # commit step, then killed). Read again: gone, settled by its owner; changed, judged afresh by
        # the next start (its owner gone, it changes no more)
        now = ObjectJournal.read(st, path)
        if now is None:
            continue
        if now.version != journal.version:
            out.append(skipped_live(op_id, label, "its owner wrote its journal while this start read it; the next "
                                    "start settles it"))
            continue
        if journal.kind in (RESTORE_KIND, UNRETIRE_KIND):  # a restore stopped midway: finished
            out.append(_finish_restore(ostore, vault, st, journal, rel[:-5], label))
            continue
        try:
            jvault, refusal = journal_vault(ostore, vault, journal)  # no --backup-dir: the folder its manifests record
            if refusal is not None and journal.committed():
                out.append(refused(op_id, label, refusal[1], refusal[0]))  # as status says it (reduce_will)
                continue
            if retiring and doc.get("runs"):  # a whole run moved to the vault: ``engine.bucket_retire``
                ran = [_settled_run(st, jvault, en, True) for en in journal.live_entries()]  # before a rollback
                held: List[str] = []
                action, detail = settle_retire(ostore, jvault, journal, held=held)
                ran = [settled_run(r["run"], r["op_id"], r["bytes_before"], r["bytes_after"],
                                   action == Recovery.COMPLETED) for r in ran]
                if action == Recovery.COMPLETED:  # its witness before the journal goes, once (review R27 F4)
                    detail = _witnessed(ostore, jvault, ran, "retire", detail)
                must_close(journal)
                _drop_locks_of(st, locks, op_id)
                # as a reduction's: a run put back whole releases the claims its add made anew (R25 L2)
                run_ops = [str(en.get("op")) for en in journal.entries() if isinstance(en, dict)]
                detail += release_settled(ostore, jvault, [] if action != Recovery.ROLLED_BACK or held else run_ops, run_ops)
                out.append(settled(op_id, label, action, detail, runs=ran))
                continue
            # ``entries``: a batch's runs, or the one run journals of earlier versions held at top level
            # the journal may be older than the run (R7 F2): a rollback deletes no backup whose
            # original is not in place, and keeps the manifest naming it (``kept``: those keys)
            kept: Dict[str, List[str]] = {}
            finish = finishes(journal)
            missing = copies_missing(ostore, jvault, journal) if finish else None
            if missing:
                # a copy lost or changed since the commit record: the originals not yet deleted are
                # its bytes' only home; nothing is finished nor rolled back, the journal stays
                out.append(refused(op_id, label, *missing))
                continue
            dropped = [en for en in journal.entries() if en.get("dropped")]
            for en in dropped:  # taken out before the commit step: nothing of it was deleted
                kept[str(en["run"])] = rollback_entry(ostore, jvault, en, deleted=False)
            live = journal.live_entries()
            ran = [_settled_run(st, jvault, en, finish) for en in live]  # sizes before rollback drops manifests
            if finish:
                finish_op(ostore, jvault, doc)
            else:
                for en in live:
                    kept[str(en["run"])] = rollback_entry(ostore, jvault, en, deleted=journal.committed())
            action = Recovery.COMPLETED if finish else Recovery.ROLLED_BACK
            detail = FINISHED if finish else left_as_it_was(journal)
            # each rolled-back run's change-log line, as a disk's recovery writes it (its manifest is
            # gone): those the batch took out and, rolled back here, the others; before the journal
            # goes (a kill in between: the next start writes them), none the log has already. A run
            # whose backups were kept is not as it was: no such line
            lines = [_taken_out_line(en) for en in dropped if not kept.get(str(en["run"]))]
            if not finish:
                lines += [dict(rolled_back_line(
                    RunOutcome(run=r["run"], status=Outcome.ROLLED_BACK, reason=INTERRUPTED_REASON,
                               code=Failure.INTERRUPTED), r["op_id"], None),
                    before=r["bytes_before"], after=r["bytes_before"]) for r in ran if not kept.get(r["run"])]
            unwritten = _append_unwritten(ostore, lines)
            if unwritten:  # the rollback stands; its line's loss is said, never silent (review R19 P4)
                detail = f"{detail}; {unwritten}" if detail else unwritten
            if finish:  # its witness before the journal goes, once (review R27 F4)
                detail = _witnessed(ostore, jvault, ran, "reduce", detail)
            must_close(journal)
            _drop_locks_of(st, locks, op_id)
            # the claims each run's add made anew, recorded in the folder, released once the run is
            # put back as it was (review R25 L2: orphans, counted and never freed); the records go
            run_ops = [(str(en.get("op")), str(en.get("run"))) for en in journal.entries() if isinstance(en, dict)]
            detail += release_settled(ostore, jvault, [] if finish else [o for o, r in run_ops if not kept.get(r)],
                                      [o for o, _r in run_ops])
            astray = [p for ps in kept.values() for p in ps]
            ops = {str(en["run"]): en.get("op") for en in journal.entries()}  # each run's manifest
            if astray:  # each kept original a coded finding too (#26), as the rollback's own outcome notes it
                o = backups_kept(op_id, label, astray, [{"op_id": ops.get(r) or op_id, "run": r, "path": p}
                                                        for r, ps in kept.items() for p in ps])
                o.found(Finding.ORIGINAL_NOT_IN_PLACE, astray)
                out.append(o)
            else:
                out.append(settled(op_id, label, action, detail, runs=ran, kind=REDUCE))
        except (BucketTxnError, *STORE_FAILURES, ValueError) as e:
            # ValueError: a key the journal names that no store call can address (the trust check
            # above refuses those it knows of; one it misses must not stop every verb, review R12 F1)
            out.append(failed(op_id, label, str(e)))
    if purges:  # as a disk's start finishes its killed purges (``upkeep``): the one finish, its outcomes
        killed = KilledBucketPurges(ostore, vault, purges)
        try:
            finished = purge_run.finish_killed(killed)
        except KilledBucketPurges.finish_errors as e:  # what its journals name did not read: retried later
            finished = [purge_run.Finished("", "", code=Finding.RECOVERY_FAILED,
                                           detail=f"interrupted purge not finished: {e}")]
        out += purge_run.outcomes(finished) + killed.close(finished)
    return out


def _known_code(value) -> Optional[Code]:
    """``value`` as the ``codes.Failure`` or ``codes.Skip`` it names, else None (untrusted input)."""
    for kind in (Failure, Skip):
        try:
            return kind(value)
        except ValueError:
            continue
    return None


def _taken_out_line(en: dict) -> dict:
    """The change-log line of a run the batch took out before its commit record (rolled back alone),
    from what its journal entry says of it (``bucket_batch``: untrusted, so a known code, a string,
    a whole number, each else as an interrupted run's)."""
    said = en.get("rolled_back") if isinstance(en.get("rolled_back"), dict) else {}
    before = said.get("before")
    before = before if isinstance(before, int) and not isinstance(before, bool) and before >= 0 else None
    reason = said.get("reason") if isinstance(said.get("reason"), str) else INTERRUPTED_REASON
    out = RunOutcome(run=str(en["run"]), status=Outcome.ROLLED_BACK, reason=reason[:MAX_REASON],
                     code=_known_code(said.get("code")) or Failure.INTERRUPTED)
    return dict(rolled_back_line(out, str(en["op"]), None), before=before, after=before)


def _append_unwritten(ostore: ObjectStore, lines: List[dict]) -> Optional[str]:
    """``lines``, less those of an operation the change log has a rolled-back line of already (the
    process wrote it, then was killed before its journal went): one line per rolled-back operation
    (``ChangeLog.append_once``, whose one rule for a log it cannot read is every line written: one
    twice rather than none). Returns what says the lines were not written (the store refused the
    append), None once written."""
    if not lines:
        return None
    return append_rolled_back(BucketState.of(ostore).logdir_store(), lines, once=True)


def _witnessed(ostore: ObjectStore, vault: BucketVault, ran: List[dict], kind: str, detail: str) -> str:
    """With a blob folder, the witness line of each operation a start finished forward (``history.
    append_kept``, once: its killed process may have written it): the live process writes it past
    the commit record, so a kill before that left the operation unnamed once its manifest goes
    (review R27 F4 on R26 F1); ``detail`` with a refusal said."""
    lines = [kept_line(r["op_id"], kind, r["run"]) for r in ran if r.get("op_id")]
    said = append_kept(BucketState.of(ostore).logdir_store(), lines, once=True) if vault.blobs is not None else None
    return f"{detail}; {said}" if said and detail else (said or detail)


def _named(ostore: ObjectStore, key: str) -> str:
    """A listed key's URL as the listing gave it (``url_of`` refuses a key that is not plain)."""
    return f"{ostore.scheme}://{ostore.root}/{key}"


def _finish_restore(ostore: ObjectStore, vault: BucketVault, st: BucketState, journal: ObjectJournal, name: str,
                    label: str) -> RecoveryOutcome:
    """Finish a bucket restore (or unretire) whose journal is there: whatever is not back yet is
    put back from the vault (one already back with the original's checksums is not rewritten),
    the manifest is marked restored and the journal removed, by the restore itself
    (``bucket_restore.restore_op`` / ``bucket_retire.unretire`` with ``resume``). The journal is
    untrusted: it must name the operation of its file name, and the manifest of that operation
    must name exactly the files and backups the journal does; otherwise it is left alone."""
    doc = journal.doc
    op_id, run = doc.get("op"), str(doc.get("run"))
    unretiring = journal.kind == UNRETIRE_KIND
    along = [a for a in doc.get("takes_along") or [] if isinstance(a, str)] \
        if isinstance(doc.get("takes_along"), list) else []
    # every run it takes along inside its run (``retire_rules.taken_along``), or the whole journal is refused
    if not is_op_id(op_id) or op_id != name or run == "." and unretiring or \
            taken_along({"run": run, "takes_along": along}) != along:
        return refused(str(op_id), label, f"{ostore.url_of(journal_key(JOURNAL, name))}: {MALFORMED}; left alone",
                       trust.BAD_RECORD)
    try:
        doc_m, version = st.read(vault.manifest(op_id))
        try:  # any shape ever written, in the one schema (untrusted: refused when it does not read)
            m = manifest.read(doc_m, vault_url(ostore, vault.manifest(op_id))) if doc_m is not None else None
        except Untrusted:
            m = None
        if m is None or m["op_id"] != op_id or m["run"] != run or (m["kind"] == "retire") != unretiring:
            return failed(op_id, label, f"{vault_url(ostore, vault.manifest(op_id))}: the manifest of the restore "
                                        "is missing, unreadable or names another run; journal left in place")
        wanted = sorted((str(f.get("path")), str(f.get("backup")), str(f.get("sha256")))
                        for f in doc.get("files") or [] if isinstance(f, dict))
        named = sorted((str(f.get("path")), str(f.get("backup")), str(f.get("sha256")))
                       for f in m["files"] if isinstance(f, dict))
        if wanted != named:
            return refused(op_id, label, f"{ostore.url_of(journal_key(JOURNAL, name))}: journal and manifest name "
                                         "different files or backups; left alone", trust.BAD_RECORD)
        locks = [ostore.path(lock_key(r)) for r in [run] + along]
        if m["restored_by"]:  # stopped after its manifest record: only the journal is left
            must_close(journal)
            _drop_locks_of(st, locks, op_id)
            return settled(op_id, label, Recovery.COMPLETED, "the restore was recorded; its journal was removed")
        _drop_locks_of(st, locks, op_id)  # its holder is gone (checked by the caller): the restore takes them again
        m["_version"] = version
        res = unretire(ostore, vault, m, resume=True) if unretiring else restore_op(ostore, vault, m, resume=True)
    except (BucketTxnError, *STORE_FAILURES, ValueError) as e:
        return failed(str(op_id), label, str(e))
    if res.status != Outcome.RESTORED:
        return failed(op_id, label, f"restore not finished: {res.reason}")
    out = settled(op_id, label, Recovery.COMPLETED, f"a restore stopped midway was finished: {res.reason}")
    out.findings = list(res.findings)  # what the restore found besides its code (not_restored, ...), coded (#26)
    return out


def _settled_run(st: BucketState, vault: BucketVault, en: dict, finished: bool) -> dict:
    """One run a recovery settled, with its sizes from the manifest the reduction wrote before its
    commit (read as untrusted: numbers only); a rolled-back run is as big as it was."""
    sizes: Dict[str, Optional[int]] = {"bytes_before": None, "bytes_after": None}
    try:
        doc, _ = st.read(vault.manifest(en["op"]))
        m = manifest.read(doc, vault_url(st.logdir, vault.manifest(en["op"]))) if doc is not None else None
    except (OSError, Untrusted):  # sizes are for the record: never a reason to leave a journal unsettled
        m = None
    if m is not None:
        for k in sizes:
            v = m[k]
            sizes[k] = v if isinstance(v, int) and v >= 0 else None
    if sizes["bytes_before"] is None:
        # no manifest yet (killed before it): the size the journal entry recorded, as a disk's
        # recovery reports its plan's (untrusted: a whole number or nothing; older journals have none)
        v = en.get("bytes_before")
        sizes["bytes_before"] = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
    return settled_run(str(en["run"]), str(en["op"]), sizes["bytes_before"], sizes["bytes_after"], finished)


def _drop_locks_of(st: BucketState, locks: List[str], op_id: str) -> None:
    """Delete the locks of a settled operation: only those that still name it, each at the
    version read (a lock another operation holds now is never deleted as this one's)."""
    versions: Dict[str, str] = {}
    for p in locks:
        lock, version = st.read(p)
        if lock is not None and (lock.get("corrupt") or lock.get("op") == op_id) and version:
            versions[p] = version
    must_delete(st.logdir, list(versions), versions=versions)


def _damaged(ostore: ObjectStore, prefix: str, suffix: str, bad: Callable[[dict], bool], what: str,
             listing: Optional[dict] = None) -> List[dict]:
    """The objects under ``prefix`` (names ending in ``suffix``) whose document ``bad`` rejects,
    each named by URL with a code and ``what`` is said of it; they are left in place. ``listing``:
    the caller's listing of ``prefix`` (keyed relative to the logdir), so it is not listed again."""
    st = BucketState(ostore)
    out: List[dict] = []
    if listing is None:
        listing = st.tree(prefix, missing_ok=True)
    for key, info in sorted(listing.items()):
        if not key.endswith(suffix):
            continue
        try:
            doc, _ = st.read(ostore.path(key), info)
        except ValueError:  # not a plain key (S3 keeps '..' segments as written): named, never read
            out.append({"code": trust.PATH_OUTSIDE, "file": _named(ostore, key), "op_id": None, "run": None,
                        "detail": f"{_named(ostore, key)}: not a plain key of the logdir; never acted on, left in place"})
            continue
        if doc is not None and bad(doc):
            url = ostore.url_of(key)
            out.append({"code": Finding.DAMAGED_FILE, "file": url, "op_id": None, "run": None,
                        "detail": f"{url}: {what}"})
    return out


def damaged_journals(ostore: ObjectStore, listing: Optional[dict] = None) -> List[dict]:
    """Journal objects that cannot be read (``recover`` leaves them in place), named by URL.
    ``listing``: the journals as the caller listed them already (``pending_objects``), else one
    listing."""
    # the words ``recover`` refuses it with (``recovery_rules.damaged_journal``)
    return _damaged(ostore, JOURNAL, "", journal_unreadable, f"{DAMAGED_OBJECT}; {NOT_REPLAYED}", listing)


def damaged_locks(ostore: ObjectStore) -> List[dict]:
    """Run lock objects that are not a lock's shape (not JSON, cut, wrong types), named by URL
    with a code: they hold no run (the lease rules count their holder gone) and are left in place."""
    return _damaged(ostore, LOCKS, ".json", lambda doc: not well_formed(doc),
                    "run lock not readable; it holds no run (a reduce or restore of its run takes it over), "
                    "left in place")
