"""One manifest schema for both engines: its field names, the constructor every writer uses, and
the one reader that takes any shape ever written and answers the one schema.

A manifest is an operation's record in its vault: what was backed up, how the operation ended,
whether it was restored or its backups purged. The local engine (``engine.catalogue``,
``engine.restore``, ``engine.retire``; folded from the operation log) and the bucket engine
(``engine.bucket_steps``, ``engine.bucket_retire``; one object per operation) write the same
top-level fields (``FIELDS``, through ``new``); what a file entry holds stays the store's own
(a blob digest, mode and mtime on a disk; a backup key, versions and the store's checksums in a
bucket), as do store-specific extras (``displaced``, ``takes_along``, ``blob_folder`` ...).

Shapes read (``read``):

* the one schema (local manifests of every version already had these names);
* a bucket manifest of 282b743 and before: ``op`` (the id), ``created`` (a number: when it was
  written), ``status`` (``verified`` | ``restored``), ``purged`` (the time it was purged), no
  ``kind`` for a reduction — each put in the one schema's fields.

A bucket manifest still carries ``op``, ``created``, ``status`` and ``purged`` beside the one
schema (``BUCKET_ALIASES``, set from it by ``bucket_form``): workers of an older version (282b743
and before) may share the bucket (several machines reduce one bucket), and their recovery, purge
and blob-folder forget read those names; without them an older worker would take a manifest for
missing. They are written only for those older workers and read by no current code: every reader
of this version goes through ``read`` (``engine.bucket_catalogue.manifests`` answers ``read(...)``
of each object, without the aliases; recovery, the blob vault's forget, restore and retire read
the objects they hold through ``read`` too), and names an unreadable one by ``op_id_of``.
``read`` takes the one schema's fields first; only "restored" and "purged", which are one-way and
which an older worker marks under its own names alone, count from either name.

A manifest is untrusted input (anyone who can write the vault can write one): ``read`` refuses
one whose op id is not of the op-id format (it becomes a key or file name), whose run or file
paths leave the run (absolute, ``..``), or whose fields are of the wrong type, with an
``engine.trust.Untrusted`` naming the file and a code of ``codes.Finding`` — never follows it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.storage.paths import UnsafePath, is_op_id, is_sha256, safe_rel

#: the operation's fields of every manifest, on every store (what ``read`` answers)
OP_ID = "op_id"  # the operation's id (op-id format: it names the manifest's file or object)
KIND = "kind"  # ``reduce`` | ``restore`` | ``retire``
RUN = "run"  # the run, relative to the logdir (``.`` for the logdir itself)
LOGDIR = "logdir"  # the logdir's path or URL when it was written
STARTED_AT = "started_at"  # seconds since the epoch
FINISHED_AT = "finished_at"
OUTCOME = "outcome"  # ``codes.Outcome`` (``verified`` for every manifest a bucket keeps)
REASON = "reason"
POLICY = "policy"
FILES = "files"  # the backed-up files, each with at least ``path`` (inside the run) and ``size``
BYTES_BEFORE = "bytes_before"
BYTES_AFTER = "bytes_after"
RESTORED_BY = "restored_by"  # who restored it (the restore's op id on a disk), None while not restored
RESTORED_AT = "restored_at"
BACKUP_PURGED = "backup_purged"  # its backups were purged
PURGED_AT = "purged_at"
FIELDS = (OP_ID, KIND, RUN, LOGDIR, STARTED_AT, FINISHED_AT, OUTCOME, REASON, POLICY, FILES, BYTES_BEFORE,
          BYTES_AFTER, RESTORED_BY, RESTORED_AT, BACKUP_PURGED, PURGED_AT)
KINDS = ("reduce", "restore", "retire")
#: a disk's extra (not in ``FIELDS``; absent from manifests written before it): the digests of a
#: restored operation's backup its release let go, recorded (one fsynced log line) before the
#: first of them is deleted. Some may stay, claimed by another operation; one of them absent is
#: released, not missing (``released``). Its claims are unchanged: only what is reported reads it
RELEASED = "released"

#: the names a bucket manifest of 282b743 and before used, still written beside the one schema
#: for older workers sharing the bucket and read by no current code (module docstring): ``op`` = ``op_id``, ``created`` =
#: ``finished_at``, ``status`` = ``restored`` once restored else ``verified``, ``purged`` =
#: ``purged_at`` once purged
BUCKET_ALIASES = ("op", "created", "status", "purged")
#: what a bucket restore that has no op id of its own records as ``restored_by``
A_RESTORE = "a restore"

_NUMBERS = (STARTED_AT, FINISHED_AT, RESTORED_AT, PURGED_AT)
_INTS = (BYTES_BEFORE, BYTES_AFTER)
_STRINGS = (LOGDIR, OUTCOME, REASON, RESTORED_BY)


def new(*, op_id: str, kind: str, run: str, logdir: str, started_at: float, finished_at: float,
        outcome: str, files: list, backup_purged: bool = False, reason: Optional[str] = None, policy: Any = None,
        bytes_before: Optional[int] = None, bytes_after: Optional[int] = None, restored_by: Optional[str] = None,
        restored_at: Optional[float] = None, purged_at: Optional[float] = None, **more) -> Dict[str, Any]:
    """A manifest in the one schema: the operation's fields first, then the store's own ``more``
    (which may not redefine them). An optional field is written only with a value (a manifest
    line per operation is kept for good: no nulls in it); ``read`` answers every field of
    ``FIELDS``, None where it was not written."""
    m = {OP_ID: op_id, KIND: kind, RUN: run, LOGDIR: logdir, STARTED_AT: started_at, FINISHED_AT: finished_at,
         OUTCOME: str(outcome), FILES: files, BACKUP_PURGED: backup_purged}
    for k, v in ((REASON, reason), (POLICY, policy), (BYTES_BEFORE, bytes_before), (BYTES_AFTER, bytes_after),
                 (RESTORED_BY, restored_by), (RESTORED_AT, restored_at), (PURGED_AT, purged_at)):
        if v is not None:
            m[k] = v
    m.update({k: v for k, v in more.items() if k not in FIELDS})
    return m


def released(m: dict) -> frozenset:
    """The digests of restored manifest ``m``'s backup a release let go (``RELEASED``): none
    for an operation not restored (its originals exist only in its backup, so an absent blob
    of it is missing whatever the manifest says), and only well-formed digests (untrusted)."""
    got = m.get(RELEASED) if m.get(RESTORED_BY) else None
    if not isinstance(got, list):
        return frozenset()
    return frozenset(x for x in got if is_sha256(x))


def released_not_missing(m: dict, sha: str, form: Optional[str]) -> bool:
    """Whether a backup of ``m`` the vault holds in no form (``form`` None: ``Vault.blob_form``)
    was let go by its restore (``released``): the original stands again, so it is not missing.
    The one rule ``health`` and ``purge`` judge an absent blob by."""
    return form is None and sha in released(m)


def bucket_form(m: dict) -> dict:
    """What a bucket keeps of manifest ``m`` (one schema): without the reader's private ``_``
    keys, with ``BUCKET_ALIASES`` set from the one schema's fields (never the other way)."""
    if OP_ID not in m:
        raise ValueError("bucket_form takes a manifest in the one schema (read it first)")
    out = {k: v for k, v in m.items() if not k.startswith("_")}
    out["op"] = out[OP_ID]
    out["created"] = out.get(FINISHED_AT) or out.get(STARTED_AT)
    out["status"] = "restored" if out.get(RESTORED_BY) or out.get(RESTORED_AT) else "verified"
    if out.get(BACKUP_PURGED):
        out["purged"] = out.get(PURGED_AT) or True
    else:
        out.pop("purged", None)
    return out


def op_id_of(doc) -> str:
    """The operation id a manifest of any shape names, as text, to name it in a refusal when it
    does not read (``read`` refused it): never trusted, never a key or a file name."""
    if not isinstance(doc, dict):
        return "?"
    return str(doc.get(OP_ID) or doc.get("op") or "?")[:128]


def _bad(file: str, detail: str, code: str = Finding.BAD_MANIFEST) -> Untrusted:
    return Untrusted(code, file, detail)


def _inside(path, run: str, file: str, what: str) -> str:
    """``path`` if it is a relative path inside ``run``; ``Untrusted(PATH_OUTSIDE)`` else."""
    try:
        safe_rel(path)
    except UnsafePath as e:
        raise _bad(file, f"{what}: {e}", Finding.PATH_OUTSIDE) from None
    p, r = path.strip("/"), run.strip("/")
    if r not in ("", ".") and p != r and not p.startswith(r + "/"):
        raise _bad(file, f"{what} {path[:200]!r} is outside its run {run[:200]!r}",
                   Finding.PATH_OUTSIDE)
    return path


def _number(value, file: str, what: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise _bad(file, f"{what}: {str(value)[:40]!r} is not a number")
    return value


#: set True by a slim read (``vault_reads.slim``) on a manifest the one schema refuses, never left
#: on one it takes: a release or a count over a slim read tells a refused manifest by it (``refused``)
#: without reading it again, and never takes it for a restored or purged operation
REFUSED = "_refused"


def refused(m: dict) -> bool:
    """Whether a read marked ``m`` as refused by the one schema (``REFUSED``)."""
    return m.get(REFUSED) is True


def read(doc, file: str) -> dict:
    """``doc`` (a manifest of any shape ever written, untrusted) in the one schema: a new dict
    with every field of ``FIELDS`` and the store's own keys kept; ``Untrusted`` (code, file) when
    it is not a manifest, its op id is not one, a path leaves its run or a field is of the
    wrong type."""
    if not isinstance(doc, dict) or doc.get("corrupt") is True:  # the bucket's reader marks undecodable bytes
        raise _bad(file, "not UTF-8 JSON of an object")
    legacy = OP_ID not in doc  # a bucket manifest of 282b743 and before
    op_id = doc.get(OP_ID) if not legacy else doc.get("op")
    if not is_op_id(op_id):
        raise _bad(file, f"operation id {str(op_id)[:80]!r} is not of the op-id format", Finding.BAD_OP_ID)
    if not legacy and "op" in doc and doc["op"] != op_id:  # an older worker reads ``op``: both must agree
        raise _bad(file, f"op {str(doc['op'])[:80]!r} is not its op_id {op_id!r}", Finding.BAD_OP_ID)
    run = doc.get(RUN)
    if not isinstance(run, str):
        raise _bad(file, "run missing or not a string")
    _inside(run, ".", file, "run")
    files = doc.get(FILES)
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise _bad(file, "files is not a list of objects")
    for f in files:
        _inside(f.get("path"), run, file, "backed-up path")
        size = f.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise _bad(file, f"the size of {str(f.get('path'))[:120]!r} is not a non-negative integer")
    bucket = "op" in doc  # a bucket's: its aliases are read below, never kept as the store's own keys
    kind = doc.get(KIND) or ("reduce" if bucket else None)  # 282b743's bucket reductions named none
    if kind not in KINDS:
        raise _bad(file, f"unknown kind {str(kind)[:40]!r}")
    status = doc.get("status")
    if status is not None and not isinstance(status, str):
        raise _bad(file, "status is not a string")
    created = doc.get("created")
    when = created if isinstance(created, (int, float)) and not isinstance(created, bool) else None
    purged = doc.get("purged")
    out = {k: v for k, v in doc.items()
           if not (bucket and k in ("op", "status", "purged") or k == "created" and when is not None)}
    out.update({OP_ID: op_id, KIND: kind, RUN: run, FILES: files})
    out[STARTED_AT] = doc.get(STARTED_AT, when)
    out[FINISHED_AT] = doc.get(FINISHED_AT, when)
    # a bucket keeps only verified operations' manifests (282b743's said so by ``status``); a
    # disk's manifest without an outcome is no verified operation's
    out[OUTCOME] = doc.get(OUTCOME) if OUTCOME in doc or not bucket else (
        str(Outcome.VERIFIED) if status in (None, Outcome.VERIFIED, Outcome.RESTORED) else status)
    # restored and purged are one-way: on a bucket either name saying so counts (an older worker
    # sharing the bucket marks only its own names, ``status`` and ``purged``, on a manifest of ours)
    out[RESTORED_BY] = doc.get(RESTORED_BY)
    if out[RESTORED_BY] is None and status == Outcome.RESTORED:
        out[RESTORED_BY] = A_RESTORE
    out.setdefault(RESTORED_AT, None)
    out.setdefault(REASON, None)
    out.setdefault(POLICY, None)
    out.setdefault(LOGDIR, None)
    out.setdefault(BYTES_BEFORE, None)
    out.setdefault(BYTES_AFTER, None)
    if purged is not None and not isinstance(purged, (bool, int, float)):
        raise _bad(file, f"purged: {str(purged)[:40]!r} is neither a time nor true")
    out[BACKUP_PURGED] = doc.get(BACKUP_PURGED, False)
    out.setdefault(PURGED_AT, None)
    if bucket and purged and out[BACKUP_PURGED] is False:
        out[BACKUP_PURGED] = True
        out[PURGED_AT] = purged if isinstance(purged, (int, float)) and not isinstance(purged, bool) else None
    if not isinstance(out[BACKUP_PURGED], bool):
        raise _bad(file, f"backup_purged: {str(out[BACKUP_PURGED])[:40]!r} is not true or false")
    for k in _NUMBERS:
        _number(out[k], file, k)
    for k in _INTS:
        v = out[k]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise _bad(file, f"{k}: {str(v)[:40]!r} is not an integer")
    for k in _STRINGS:
        if out[k] is not None and not isinstance(out[k], str):
            raise _bad(file, f"{k}: {str(out[k])[:40]!r} is not a string")
    return out



def run_prefix(run: str) -> str:
    """The prefix of a run's files relative to the logdir (``""`` for the logdir's own files, run
    ``.``): what a manifest's file paths of that run start with, on every store."""
    return "" if run == "." else run.rstrip("/") + "/"


def renamed(f: dict) -> bool:
    """Whether a manifest's file entry put its new bytes under another name than its original (a
    gzip, or a trace slimmed to ``<name>.gz``): created there, the original deleted after, as the
    plan says."""
    final = f.get("final")
    return f.get("action") in ("compress", "rewrite") and bool(final) and final != f.get("path")

__all__ = ["FIELDS", "KINDS", "BUCKET_ALIASES", "A_RESTORE", "new", "bucket_form", "read", "op_id_of", "OP_ID",
           "KIND", "RUN", "LOGDIR", "STARTED_AT", "FINISHED_AT", "OUTCOME", "REASON", "POLICY", "FILES", "BYTES_BEFORE",
           "BYTES_AFTER", "RESTORED_BY", "RESTORED_AT", "BACKUP_PURGED", "PURGED_AT", "RELEASED", "released",
           "released_not_missing", "run_prefix", "renamed", "REFUSED", "refused"]
