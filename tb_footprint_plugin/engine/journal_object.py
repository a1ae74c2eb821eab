"""The object-store journal: one operation's journal as ONE JSON object, rewritten by a
conditional put under the version its writer holds (one request per record).

Where a store cannot append durably in place (``Capabilities.append == "conditional_rewrite"``:
S3, GCS, Azure), a journal is the object ``<logdir>/.tb-footprint/journal/<op>.json``. Its shape
is the one the bucket engine has always written, so a journal left by an older version reads as
before and an older worker of a sharded batch reads this one's: the begin record's fields (``op``,
``logdir``, ``step``: the step it begins at, ``created``, ``vault``, ``runs`` or a restore's
``run`` and ``files``, …), then for each later record its type as ``step``, ``[type, time]``
appended to ``steps``, and its other fields merged in (a record names the fields it changes,
e.g. ``runs`` once their backups are verified). The object holds the latest value of each
field: ``records()`` gives the begin record (with those latest values) and one record per step.

Each record is one conditional put under the version the last one returned, so two writers
never interleave: a writer whose journal was rewritten by someone else fails (the store's
``PRECONDITION_FAILED``) instead of overwriting it. The readers of the document (recovery, the
unfinished operations, a sample's uncommitted operations) read it through ``ObjectJournal.read``
and its accessors (``step``, ``committed``, ``entries``, ``live_entries``, ``unreadable``):
the one parser of every shape ever written (untrusted input: a wrong type reads as nothing).

Why the journals left are listed by two functions (``pending_objects`` here,
``journal.pending_journals`` for a folder): what each listing must refuse differs in kind. A
folder's journals are trusted only from a real folder of this user (an ``lstat`` of the folder:
a link or a stranger's folder is never listed) and are opened one by one as ``Journal`` files;
a bucket's are every key one listing finds, those no call can address included (the readers name
them as refused, never read them), with the listing's version sparing a metadata read per
journal. One function would be these two bodies behind a test of the store; each caller already
holds the one its store needs.
"""
from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Protocol, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.journal import Journal, OpJournal, Rec
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME
from tb_footprint_plugin.storage.store import Capabilities, StoreFailure

#: the journal folder of a bucket logdir, relative to the logdir
OBJECT_JOURNALS = f"{STATE_DIR_NAME}/journal"

#: The steps from which an object journal is rolled forward: every backup verified and (for
#: rewrites) every new object staged and checked; ``deleting`` is the name older journals used.
COMMITTED_STEPS = (Rec.SWAPPING, Rec.DELETING, Rec.DONE)


def journal_class(caps: Capabilities) -> type:
    """The journal implementation for a store of these capabilities: the JSON-lines file
    (``journal.Journal``) where the store appends durably in place (``o_append``), the object
    rewritten under its version (``ObjectJournal``) where an append is a conditional rewrite."""
    if caps.append == "o_append" and caps.fsync:
        return Journal
    if caps.conditional_put:
        return ObjectJournal
    raise ValueError(f"no journal for a store that neither appends durably nor puts conditionally ({caps})")


class StateObjects(Protocol):
    """What an object journal needs of the engine's way to its store (``bucket_objects.BucketState``):
    small JSON objects by store path, written create-only or over a version, read with their
    version, deleted in batches (at versions where given)."""

    def create(self, path: str, doc: dict) -> str: ...

    def update(self, path: str, doc: dict, version: str) -> str: ...

    def read(self, path: str, info=None) -> Tuple[Optional[dict], Optional[str]]: ...

    def delete(self, paths: List[str], versions: Optional[Dict[str, str]] = None) -> Dict[str, str]: ...

    def tree(self, rel: str = "", *, missing_ok: bool = False) -> Dict[str, Any]: ...


@dataclass(frozen=True)
class ObjectFolder:
    """Where object journals live: the state objects of a store and the store path of the
    journal folder (``<bucket>/<logdir>/.tb-footprint/journal``)."""

    st: StateObjects
    path: str

    def key(self, op_id: str) -> str:
        """``journal_key(self.path, op_id)``."""
        return journal_key(self.path, op_id)


def journal_key(folder: str, op_id: str) -> str:
    """The store path of operation ``op_id``'s journal object in the journal folder ``folder``
    (a store path): the one place that key is built."""
    return f"{folder}/{op_id}.json"


def step_record(name: str, at: Optional[float] = None, **fields) -> dict:
    """A step's record: its ``Rec`` name, its time ``at`` (when the caller wrote that time
    elsewhere too, e.g. the commit record's in the manifests; else the append's), and the fields
    of the journal it changes."""
    rec = {"type": name, **fields}
    if at is not None:
        rec["t"] = at
    return rec


class ObjectJournal(OpJournal):
    """One operation's journal object (the ``OpJournal`` of a store whose append is a conditional
    rewrite). ``doc`` is the document as this object last wrote or read it, ``version`` the
    version it holds (every append is conditional on it), ``path`` its store path."""

    def __init__(self, st: StateObjects, path: str, doc: Optional[dict] = None, version: Optional[str] = None):
        self.st = st
        self.path = path
        name = path.rsplit("/", 1)[-1]
        self.op_id = name[: -len(".json")] if name.endswith(".json") else name
        self.doc: dict = doc if doc is not None else {}
        self.version = version
        self.written = []
        # a step's put and a lease renewal (``renew``, the lease thread's) never interleave: each
        # is conditional on the version the other just replaced
        self._mu = threading.Lock()

    @classmethod
    def create(cls, where: ObjectFolder, op_id: str, first: dict) -> "ObjectJournal":
        """The journal object of a new operation, holding ``first`` (``Rec.BEGIN``; its fields are
        the document, ``step`` the one it begins at): one create-only put, so a journal of that
        operation already there (an unfinished one) is never overwritten (``ALREADY_EXISTS``)."""
        fields = {k: v for k, v in first.items() if k != "type"}
        if first.get("type", Rec.BEGIN) != Rec.BEGIN:
            raise ValueError(f"a journal begins with a {Rec.BEGIN!r} record, not {first.get('type')!r}")
        j = cls(where.st, where.key(op_id), copy.deepcopy(fields))
        j.version = where.st.create(j.path, j.doc)
        j.wrote(dict(fields, type=Rec.BEGIN))
        return j

    @classmethod
    def read(cls, st: StateObjects, path: str, info=None) -> Optional["ObjectJournal"]:
        """A journal left in the store, read back (one read; ``info`` from a listing spares the
        metadata read): None when it is gone; one that does not parse reads as ``unreadable``."""
        doc, version = st.read(path, info)
        if doc is None:
            return None
        return cls(st, path, doc, version)

    def append(self, record: dict, sync: bool = True) -> None:
        """Record one step: one conditional put of the whole document under the version this
        object holds (durable once acknowledged: ``sync`` changes nothing). The document counts
        the record from before the put: a put that failed may still have landed, so a failure
        path judges from the record too (e.g. a commit record counts as recorded)."""
        if self.version is None:
            raise ValueError(f"{self.path}: no version held; a journal is appended to only by its writer")
        fields = dict(record)
        name = fields.pop("type")
        t = fields.pop("t", None)
        t = time.time() if t is None else t
        with self._mu:
            doc = dict(self.doc)
            doc["step"] = name
            doc["steps"] = list(doc.get("steps") if isinstance(doc.get("steps"), list) else []) + [[name, t]]
            # the record's own copy: a writer's later changes to its entries are not recorded by aliasing
            doc.update(copy.deepcopy(fields))
            self.doc = doc
            self.wrote(dict(record, t=t))
            self.version = self.st.update(self.path, doc, self.version)

    def renew(self, now: Optional[float] = None) -> None:
        """Show its writer alive: the document written again as it stands, ``renewed`` set to
        ``now``, conditional on the version held (one put; no record: ``steps`` unchanged). Its
        new last-modified time is what another host reads as the operation's progress
        (``lease.holder_gone``): the lease of every lock of a batch in one request
        (``bucket_lease.delegate``). Raises the store's failure (``PRECONDITION_FAILED``: written
        by another since; ``NOT_FOUND``: gone); nothing is written when no version is held.

        A put that failed otherwise may have landed with its answer lost: the store client's retry
        of it then fails its precondition against our own new version, or all its tries time out.
        The journal is read again (``landed``) and, when it holds the very document put, its version
        is adopted: the writer's next record goes on instead of failing its precondition (its batch
        rolled back, or every lock of it lost)."""
        with self._mu:
            if self.version is None:
                return
            doc = dict(self.doc, renewed=time.time() if now is None else now)
            try:
                self.version = self.st.update(self.path, doc, self.version)
            except StoreFailure as e:
                version = self.landed(doc) if e.code != StoreError.NOT_FOUND else None
                if version is None:
                    raise
                self.version = version
            self.doc = doc

    def landed(self, doc: dict) -> Optional[str]:
        """The version of the journal object when it holds ``doc`` as this writer put it (same
        fields and values, ``renewed`` included, after the JSON round trip), else None (another
        document, gone, unreadable, or the read failed: the put is taken as not landed)."""
        return jsondoc.landed_version(lambda: self.st.read(self.path), doc)

    def step(self, name: str, *, at: Optional[float] = None, **fields) -> None:
        """``append(step_record(name, at, **fields))``."""
        self.append(step_record(name, at, **fields))

    def records(self) -> List[dict]:
        """The begin record (the document's fields as they stand: the object holds each field's
        latest value; the step it began at only while no step followed) and one record per step,
        ``{type, t}``, from the document this object holds (no request)."""
        steps = self.doc.get("steps") if isinstance(self.doc.get("steps"), list) else []
        begin = {k: v for k, v in self.doc.items() if k not in ("steps",) and not (steps and k == "step")}
        out = [dict(begin, type=Rec.BEGIN)]
        out += [{"type": s[0], "t": s[1] if len(s) > 1 else None} for s in steps
                if isinstance(s, list) and s and isinstance(s[0], str)]
        return out

    def close(self, durable: bool = True, *, also: Iterable[str] = (),
              versions: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """Remove the journal object, in one batched delete with ``also`` (store paths: the
        operation's locks, at ``versions``) — the journal first in the batch; ``{path: why}``
        for those the store refused (``durable`` changes nothing: a delete is durable once
        acknowledged)."""
        return self.st.delete([self.path] + list(also), versions=versions)

    # -- readers: the one parser of the document (untrusted: any field may be of any type) -----

    @property
    def step_name(self) -> Optional[str]:
        """The step the journal stands at (its last record's type), None when not a string."""
        s = self.doc.get("step")
        return s if isinstance(s, str) else None

    @property
    def kind(self) -> Optional[str]:
        """The operation's kind (``restore``, ``retire``, ``unretire``), None for a reduce."""
        k = self.doc.get("kind")
        return k if isinstance(k, str) else None

    def committed(self) -> bool:
        """``commit_recorded`` of the document."""
        return commit_recorded(self.doc)

    def entries(self) -> list:
        """``journal_entries`` of the document."""
        return journal_entries(self.doc)

    def live_entries(self) -> List[dict]:
        """``live_entries`` of the document."""
        return live_entries(self.doc)

    def unreadable(self) -> bool:
        """``journal_unreadable`` of the document."""
        return journal_unreadable(self.doc)


def pending_objects(st: StateObjects, folder: str = OBJECT_JOURNALS) -> List[Tuple[str, Any]]:
    """The journal objects left under ``folder`` (relative to the logdir): unfinished operations,
    as ``(key, listing entry)`` in key order, from one listing (every key the store holds there,
    one no call can address included: the readers name those, never read them). The object form
    of ``journal.pending_journals``; each is read with ``ObjectJournal.read``."""
    return sorted(st.tree(folder, missing_ok=True).items())


def commit_recorded(doc: dict) -> bool:
    """Whether an operation's journal document recorded its commit step (from then on it may have
    deleted or replaced originals)."""
    steps = doc.get("steps") if isinstance(doc.get("steps"), list) else []
    return doc.get("step") in COMMITTED_STEPS or \
        any(isinstance(s, list) and s and s[0] in COMMITTED_STEPS for s in steps)


#: where a bucket purge's journal (``kind`` ``purge``) names its operations: never ``runs`` nor a
#: top-level ``run``. A release from before that journal (dc346ea and earlier) finds no run in
#: it, calls it damaged and never acts on it; had it found ``runs``, it would have rolled each
#: named operation back as an unfinished reduce, deleting their manifests (review R5 F1)
PURGING = "purging"
#: ``kind`` of a bucket purge's journal (``engine.bucket_purge_journal``)
PURGE_KIND = "purge"


def journal_entries(doc: dict) -> list:
    """Every run entry a journal document names, in each shape ever written: a batch's ``runs``
    (as written, dropped ones too; untrusted: an entry may be of any type, its callers check), a
    purge's ``PURGING``, or the one run a journal of an earlier version held at top level, as
    such an entry."""
    if doc.get("kind") == PURGE_KIND:
        return list(doc[PURGING]) if isinstance(doc.get(PURGING), list) else []
    if "runs" in doc:
        return list(doc["runs"]) if isinstance(doc["runs"], list) else []
    return [{"run": doc.get("run"), "op": doc.get("op"), "lock": doc.get("lock"), "files": doc.get("files", [])}]


def live_entries(doc: dict) -> List[dict]:
    """The runs of a journal document still in it (``journal_entries`` less those taken out: ``dropped``)."""
    return [en for en in journal_entries(doc) if isinstance(en, dict) and not en.get("dropped")]


def journal_unreadable(doc: dict) -> bool:
    """A journal object that is not UTF-8 JSON of a journal's shape: never acted on."""
    if doc.get("kind") == PURGE_KIND:  # its operations under ``PURGING`` alone (see there)
        return bool(doc.get("corrupt")) or not isinstance(doc.get(PURGING), list) or "run" in doc or "runs" in doc
    return bool(doc.get("corrupt")) or not ("run" in doc or "runs" in doc) or \
        ("runs" in doc and not isinstance(doc["runs"], list))


__all__ = ["COMMITTED_STEPS", "OBJECT_JOURNALS", "PURGE_KIND", "PURGING", "ObjectFolder", "ObjectJournal", "StateObjects", "commit_recorded",
           "journal_class", "journal_entries", "journal_key", "journal_unreadable", "live_entries", "pending_objects", "step_record"]
