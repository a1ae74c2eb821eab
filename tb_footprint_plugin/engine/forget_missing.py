"""The explicit end of a missing manifest's line (#26): ``tb-footprint purge LOGDIR --forget-missing OP_ID``.

While an operation the change log (a disk) or the blob-folder witness (a bucket logdir with a local
blob folder, ``history.bucket_kept_log``) names as verified, its backup kept, has no manifest in any
vault (``history.missing_manifests``, the one rule of every store: ``catalogue.missing_manifests``,
``bucket_blobs.missing_in_bucket``), every purge keeps every blob (status: ``manifest_missing``):
which blobs its run's files are is written only in that manifest. A manifest gone for good (a sync
with ``--delete``, a tidy by hand) would keep them forever. This verb ends that one line, named by
its operation, one at a time, as restic's ``forget`` acknowledges a loss:

- refused (``TransactionError``, ``Failure.REFUSED``; ``Failure.NOT_FOUND`` when no line names the
  operation at all) unless the operation is missing right now by the one rule: a manifest present
  in any form (damaged, refused, purged) keeps its line, and a log or witness that cannot be read
  refuses (it may say anything);
- without ``yes`` it only says what ending the line means (``words``): the operation, its kind and
  run; that run cannot be restored by this tool whatever is chosen; ending the line lets the next
  purge forget blobs no manifest names; put the manifest back instead if you can;
- with ``yes`` it appends one line, the purge line of that operation (``history.purge_line``, which
  ``history.said_kept_into`` reads as its end) to the disk's change log, or to the bucket's witness.
  Nothing is deleted by this verb: the next purge frees what its own rules let go, under its locks.
"""
from __future__ import annotations

import errno
import json
import time
from typing import Callable, List, Tuple

from tb_footprint_plugin.codes import Failure, Finding, StoreError
from tb_footprint_plugin.engine.bucket_blobs import listed_op, witness_name
from tb_footprint_plugin.engine.bucket_state import BucketState, BucketVault
from tb_footprint_plugin.engine.catalogue import missing_manifests
from tb_footprint_plugin.engine.context import TransactionError, writing
from tb_footprint_plugin.engine.front_base import Engine
from tb_footprint_plugin.engine.front_local import LocalEngine
from tb_footprint_plugin.engine.history import (ChangeLog, append_history, bucket_kept_log, disk_log, history_path,
                                                purge_line, purge_mark)
from tb_footprint_plugin.storage.store import StoreFailure


def forget_missing(eng: Engine, op_id: str, *, yes: bool = False) -> dict:
    """End the line of operation ``op_id`` whose manifest is missing (``yes``), or say what that
    means (without ``yes``: nothing written). Returns ``{op_id, kind, run, log, dry_run, ended,
    words}`` (``log``: the change log or witness the line goes to; ``words``: what to say, in
    order). ``TransactionError`` with a code when it is refused (the message names why)."""
    if isinstance(eng, LocalEngine):
        return _disk(eng, op_id, yes)
    return _bucket(eng, op_id, yes)


def _refuse_unless_missing(log: ChangeLog, where: str, op_id: str, present: Callable[[], bool]) -> Tuple[str, str]:
    """``(kind, run)`` of ``op_id`` when ``log`` (read whole, every line, first: a log that cannot be
    read refuses, naming it) says its backup is kept and ``present()`` says no manifest of it is
    there; else the refusal naming why."""
    try:
        kept = log.backups_said_kept(strict=True)
    except (StoreFailure, OSError) as e:
        raise TransactionError(f"{where}: cannot be read ({e}); no line is ended while it does not read (it may "
                               f"say anything of {op_id})", Failure.REFUSED) from None
    kinds: dict = {}
    runs = log.runs_of(frozenset({op_id}), kinds)
    if op_id not in runs:
        raise TransactionError(f"{where}: no reduction or retirement {op_id!r} is named there; nothing to end",
                               Failure.NOT_FOUND)
    if op_id not in kept:
        raise TransactionError(f"{where}: operation {op_id} of run {runs[op_id]} is not said kept (rolled back, "
                               "purged or restored since): its line is no guard of anything, nothing to end",
                               Failure.REFUSED)
    if present():
        raise TransactionError(f"operation {op_id} of run {runs[op_id]}: its manifest is there (whatever it says: "
                               "damaged, refused or purged); it names its blobs, so its line is never ended this "
                               f"way ({Finding.MANIFEST_MISSING} is said only of a manifest that is missing)",
                               Failure.REFUSED)
    return kinds.get(op_id, "reduce"), runs[op_id]


def _words(op_id: str, kind: str, run: str, where: str, yes: bool) -> List[str]:
    """What is said of ending ``op_id``'s line (its log or witness: ``where``), before and after."""
    done = "retired" if kind == "retire" else "reduced"
    out = [
        f"operation {op_id} ({kind}) of run {run}: {where} says it was {done} and verified, its backup kept; its "
        f"manifest is missing: while its line stands every purge keeps every blob ({Finding.MANIFEST_MISSING})",
        f"run {run} cannot be restored by this tool whatever is chosen here: which backups are its files is "
        "written only in that manifest",
        f"ending its line lets the next purge forget blobs no manifest names: bytes of {run}'s files still in the "
        "vault may then go for good",
        f"put the manifest back instead if you can (a copy of .tb-footprint/, another copy of the logdir): run {run} "
        "is then restorable again and nothing needs ending",
    ]
    if yes:
        out.append(f"its line is ended: one purge line of {op_id} appended to {where}; nothing was deleted; the "
                   "next purge frees what its own rules let go")
    else:
        out.append(f"nothing changed: add --yes to end the line of {op_id}")
    return out


def _line(op_id: str, run: str) -> dict:
    """The one line that ends it: a purge line of the operation, freeing nothing, that says why."""
    return purge_line(op_id, run, 0, purge_mark(f"manifest of {op_id} missing; its line ended by --forget-missing "
                                                f"(run {run} can no longer be restored by this tool)"))


def _result(op_id: str, kind: str, run: str, where: str, yes: bool) -> dict:
    return {"op_id": op_id, "kind": kind, "run": run, "log": where, "dry_run": not yes, "ended": yes,
            "words": _words(op_id, kind, run, where, yes)}


def _disk(eng: LocalEngine, op_id: str, yes: bool) -> dict:
    """A disk: the logdir's change log, and every vault of the logdir (``catalogue.missing_manifests``)."""
    ctx = eng.ctx
    where = history_path(ctx.state)
    log = disk_log(ctx.state)
    if log is None:
        raise TransactionError(f"{where}: no change log; no operation {op_id!r} to end", Failure.NOT_FOUND)
    kind, run = _refuse_unless_missing(log, where, op_id, present=lambda: op_id not in missing_manifests(ctx))
    if yes:
        line = _line(op_id, run)
        try:
            with writing(where, len(json.dumps(line)) + 64):  # a full disk: ``NoSpace`` naming it
                append_history(ctx.state, line)
        except OSError as e:  # named with the log's path (the state folder's own errors name its file only)
            denied = getattr(e, "errno", None) in (errno.EACCES, errno.EPERM, errno.EROFS) \
                or getattr(e, "code", None) == StoreError.PERMISSION
            raise TransactionError(f"{where}: the line ending {op_id} was not written ({e}); its line stands",
                                   Failure.REFUSED if denied else Failure.ERROR) from None
    return _result(op_id, kind, run, where, yes)


def _bucket(eng: Engine, op_id: str, yes: bool) -> dict:
    """A bucket logdir with a local blob folder: its witness, and the manifest objects listed in its vault."""
    ostore, vault = eng.ostore, eng.vault
    if vault.blobs is None:
        raise TransactionError(f"{eng.logdir}: its backups are copies in the bucket, no local blob folder: no "
                               "witness line keeps every blob (give the --backup-dir folder its reduce was given)",
                               Failure.REFUSED)
    st = BucketState.of(ostore)
    where = witness_name(ostore)
    log = bucket_kept_log(st.logdir_store())
    kind, run = _refuse_unless_missing(log, where, op_id, present=lambda: _listed(st, vault, op_id))
    if yes:
        try:
            log.append_lines([dict(_line(op_id, run), time=time.time())])
        except StoreFailure as e:
            raise TransactionError(f"{where}: the line ending {op_id} was not written ({e}); nothing changed",
                                   Failure.STORE_ERROR) from None
    return _result(op_id, kind, run, where, yes)


def _listed(st: BucketState, vault: BucketVault, op_id: str) -> bool:
    """Whether a manifest object of ``op_id`` is listed in the bucket's vault (any content counts);
    a listing that fails refuses (it may hide it)."""
    manifests = vault.root + "/manifests"
    try:
        keys = st.listing(manifests, missing_ok=True)
    except (StoreFailure, OSError) as e:
        raise TransactionError(f"{manifests}: cannot be listed ({e}); no line is ended while it may hide the "
                               f"manifest of {op_id}", Failure.REFUSED) from None
    return any(listed_op(k) == op_id for k in keys)

