"""One journal interface for both engines (issue #26): ``journal.OpJournal`` with its record
vocabulary ``journal.Rec``, the POSIX file journal (``journal.Journal``, bytes unchanged) and the
object journal (``journal_object.ObjectJournal``: one object rewritten by a conditional put
under the version its writer holds, in the shape the bucket engine always wrote), chosen by the
store's declared capabilities."""
from __future__ import annotations

import json
import os

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.journal import Journal, OpJournal, Rec, pending_journals
from tb_footprint_plugin.engine.journal_object import (
    ObjectFolder,
    ObjectJournal,
    commit_recorded,
    journal_class,
    step_record,
)
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore, BUCKET_CAPABILITIES
from tb_footprint_plugin.storage.store_posix import PosixStore


class _Objects:
    """In-memory state objects with versions, as ``BucketState`` answers (one call a request)."""

    def __init__(self):
        self.objs = {}
        self.calls = []
        self.n = 0

    def _put(self, path, doc):
        self.n += 1
        self.objs[path] = (json.dumps(doc, sort_keys=True), f"v{self.n}")
        return f"v{self.n}"

    def create(self, path, doc):
        self.calls.append(("create", path))
        if path in self.objs:
            raise StoreFailure(StoreError.ALREADY_EXISTS, path, "exists")
        return self._put(path, doc)

    def update(self, path, doc, version):
        self.calls.append(("update", path))
        if path not in self.objs or self.objs[path][1] != version:
            raise StoreFailure(StoreError.PRECONDITION_FAILED, path, "version")
        return self._put(path, doc)

    def read(self, path, info=None):
        if path not in self.objs:
            return None, None
        return json.loads(self.objs[path][0]), self.objs[path][1]

    def delete(self, paths, versions=None):
        self.calls.append(("delete", tuple(paths)))
        for p in paths:
            self.objs.pop(p, None)
        return {}


def _todays_bucket_writer(objs, path, doc, steps):
    """The bucket journal writer before the one interface (``bucket_state.BucketJournal`` at
    10e65a8), kept here as the reference of the object's shape: the doc created, then per step
    ``step`` set, ``[name, t]`` appended to ``steps``, extras merged, the whole doc put."""
    version = objs.create(path, doc)
    for name, at, extra in steps:
        doc["step"] = name
        doc.setdefault("steps", []).append([name, at])
        doc.update(extra)
        version = objs.update(path, doc, version)


def test_the_journal_is_chosen_by_the_stores_capabilities(tmp_path):
    assert journal_class(PosixStore(str(tmp_path)).capabilities) is Journal
    assert journal_class(BUCKET_CAPABILITIES) is ObjectJournal
    assert issubclass(Journal, OpJournal) and issubclass(ObjectJournal, OpJournal)


def test_a_file_journal_writes_the_same_lines_as_before(tmp_path):
    """The POSIX journal's bytes are unchanged: one sorted-keys JSON line a record, each with its time."""
    jdir = tmp_path / ".tb-footprint" / "journal"
    j = Journal.create(str(jdir), "op1", {"type": Rec.BEGIN, "kind": "reduce", "op_id": "op1", "run": "r"})
    j.append({"type": Rec.SWAP})
    lines = (jdir / "op1.jsonl").read_text().splitlines(keepends=True)
    recs = [json.loads(x) for x in lines]
    assert lines == [json.dumps(r, sort_keys=True) + "\n" for r in recs]
    assert [r["type"] for r in recs] == ["begin", "swap"] and all("t" in r for r in recs)
    assert [p.op_id for p in pending_journals(str(jdir))] == ["op1"]
    assert j.records() == recs and j.written == recs
    j.close()
    assert not os.path.exists(jdir / "op1.jsonl")


def test_the_object_journal_writes_todays_bucket_shape_one_put_a_record():
    """The same documents, byte for byte, as the bucket writer before it, one request a record,
    so an older worker of a sharded batch reads a new worker's journal and the other way round."""
    entries = [{"run": "a", "op": "o1", "files": [{"path": "a/x", "size": 3}]}]
    begin = {"op": "b1", "logdir": "s3://bk/l", "step": Rec.PLANNED, "created": 1.5, "vault": "bk/l/.tb-footprint",
             "runs": entries, "logdir_objects": 4}
    old = _Objects()
    entries_old = json.loads(json.dumps(entries))
    entries_old[0]["files"][0]["backup_checksums"] = {"md5": "x"}
    _todays_bucket_writer(old, "bk/j/b1.json", json.loads(json.dumps(dict(begin))),
                          [(Rec.BACKED_UP, 2.0, {"runs": entries_old}), (Rec.SWAPPING, 3.0, {}), (Rec.DONE, 4.0, {})])

    new = _Objects()
    j = ObjectJournal.create(ObjectFolder(new, "bk/j"), "b1", dict(begin, type=Rec.BEGIN))
    entries[0]["files"][0]["backup_checksums"] = {"md5": "x"}
    j.append(step_record(Rec.BACKED_UP, at=2.0, runs=entries))
    entries[0]["dropped"] = True  # changed after its record: not recorded until a record names it
    j.append(step_record(Rec.SWAPPING, at=3.0))
    j.step(Rec.DONE, at=4.0)
    assert new.objs["bk/j/b1.json"][0] == old.objs["bk/j/b1.json"][0]
    assert [c[0] for c in new.calls] == ["create", "update", "update", "update"]  # one request a record
    assert j.committed() and commit_recorded(j.doc) and j.step_name == Rec.DONE
    recs = j.records()
    assert recs[0]["type"] == Rec.BEGIN and recs[0]["op"] == "b1" and "step" not in recs[0]
    assert [(r["type"], r["t"]) for r in recs[1:]] == [(Rec.BACKED_UP, 2.0), (Rec.SWAPPING, 3.0), (Rec.DONE, 4.0)]
    assert [r["type"] for r in j.written] == [Rec.BEGIN, Rec.BACKED_UP, Rec.SWAPPING, Rec.DONE]

    back = ObjectJournal.read(new, "bk/j/b1.json")
    assert back.doc == j.doc and back.version == j.version and back.op_id == "b1"
    assert [en["run"] for en in back.live_entries()] == ["a"]
    assert j.close(also=["bk/locks/a.json"], versions={"bk/locks/a.json": "v0"}) == {}
    assert new.calls[-1] == ("delete", ("bk/j/b1.json", "bk/locks/a.json"))  # one batched delete, journal first
    assert ObjectJournal.read(new, "bk/j/b1.json") is None


def test_an_object_journal_never_overwrites_another_writers_version():
    objs = _Objects()
    j = ObjectJournal.create(ObjectFolder(objs, "bk/j"), "op", {"type": Rec.BEGIN, "op": "op", "step": Rec.PLANNED,
                                                                 "runs": []})
    with pytest.raises(StoreFailure) as e:
        ObjectJournal.create(ObjectFolder(objs, "bk/j"), "op", {"type": Rec.BEGIN, "op": "op", "runs": []})
    assert e.value.code == StoreError.ALREADY_EXISTS
    other = ObjectJournal.read(objs, "bk/j/op.json")
    other.step(Rec.ROLLING_BACK)  # another writer (a recovery) took it over
    with pytest.raises(StoreFailure) as e:
        j.step(Rec.SWAPPING)
    assert e.value.code == StoreError.PRECONDITION_FAILED
    assert ObjectJournal.read(objs, "bk/j/op.json").step_name == Rec.ROLLING_BACK
    with pytest.raises(ValueError):
        ObjectJournal(objs, "bk/j/x.json").step(Rec.DONE)  # no version held: not its writer


def test_an_object_journal_on_s3_is_one_put_a_record_and_reads_back(s3_bucket):
    from tb_footprint_plugin.engine.bucket_objects import BucketState

    ostore = ObjectStore(s3_bucket.url("logs"))
    rfs = ostore.rfs
    st = BucketState(ostore)
    folder = ObjectFolder(st, rfs.path(".tb-footprint/journal"))
    before = rfs.stats.put
    j = ObjectJournal.create(folder, "op9", {"type": Rec.BEGIN, "op": "op9", "step": Rec.PLANNED, "runs": []})
    j.step(Rec.SWAPPING, at=7.0)
    assert rfs.stats.put - before == 2
    s3_bucket.fs.invalidate_cache()
    doc = json.loads(s3_bucket.fs.cat_file(j.path))
    assert doc == {"op": "op9", "step": "swapping", "steps": [["swapping", 7.0]], "runs": []}
    assert ObjectJournal.read(st, j.path).committed()
    assert j.close() == {}
    assert ObjectJournal.read(st, j.path) is None


#: the bucket engine's modules that write or read journals through the interface (issue #26); a
#: journal document built, listed or parsed by hand in one of them fails the test below
_THROUGH_THE_INTERFACE = ("bucket.py", "bucket_state.py", "bucket_batch.py", "bucket_rewrite.py", "bucket_retire.py",
                          "bucket_recover.py", "bucket_unfinished.py", "bucket_steps.py", "bucket_restore.py",
                          "bucket_ledger.py", "bucket_catalogue.py", "bucket_purge.py", "bucket_blobs.py")
#: of these, the ones that name the journal folder only through ``journal_object.pending_objects`` and
#: ``bucket_state.journal_path`` (never ``JOURNAL`` itself: a listing, key or read of their own)
_NO_FOLDER_OF_THEIR_OWN = ("bucket_batch.py", "bucket_rewrite.py", "bucket_retire.py", "bucket_unfinished.py",
                           "bucket_steps.py", "bucket_restore.py", "bucket_ledger.py", "bucket_catalogue.py",
                           "bucket_purge.py", "bucket_blobs.py")


def test_the_bucket_engine_writes_and_reads_its_journals_only_through_the_interface():
    """No module of the bucket engine builds a journal object (``BucketJournal(`` / a create of a
    journal path), builds a journal's key, sets or parses its ``step``/``steps`` or lists the journal
    folder itself: the object journal (``journal_object``) is the one writer and parser of that
    document (a restore's and an unretire's journals too, since ``bucket_restore.start_journal``
    creates them with ``bucket_state.new_journal``); and none but ``bucket_state`` (the engine's
    ``journal_path``) and ``bucket_recover`` (which names damaged journals by key) names the journal
    folder: the ledger's commit proof, status, purge and the blob vault's collect list it with
    ``pending_objects`` and read it with ``ObjectJournal.read``."""
    import re
    from pathlib import Path

    import tb_footprint_plugin.engine as engine

    folder = Path(engine.__file__).parent
    # a journal's key built by hand (``{JOURNAL}/<op>.json``) is one a create-only put could make
    # by hand too: the key is the object journal's (``ObjectFolder.key``)
    by_hand = re.compile(r"BucketJournal\(|[\"']steps[\"']|\.get\([\"']step[\"']\)|\[[\"']step[\"']\]|tree\(JOURNAL"
                         r"|\{JOURNAL\}/|\{OBJECT_JOURNALS\}/")
    found = {name: [ln.strip() for ln in (folder / name).read_text().splitlines() if by_hand.search(ln)]
             for name in _THROUGH_THE_INTERFACE}
    assert not {k: v for k, v in found.items() if v}, found
    folder_named = re.compile(r"\bJOURNAL\b|OBJECT_JOURNALS")
    found = {name: [ln.strip() for ln in (folder / name).read_text().splitlines() if folder_named.search(ln)]
             for name in _NO_FOLDER_OF_THEIR_OWN}
    assert not {k: v for k, v in found.items() if v}, found


#: the disk engine's modules of this owner that write and read their journals' record types only
#: as ``journal.Rec`` names (issue #26); a literal record type in one of them fails the test below
_RECORD_TYPES_BY_NAME = ("retire.py", "salvage.py", "recovery.py")


def test_local_journals_name_their_record_types_through_rec():
    """``retire``, ``salvage`` and ``recovery`` write and compare record types only as
    ``journal.Rec`` members (same values, so the same bytes): no line there pairs a journal
    record's ``type`` (or the set of ``types`` read back) with a literal of the vocabulary."""
    import re
    from pathlib import Path

    import tb_footprint_plugin.engine as engine

    values = sorted({v for k, v in vars(Rec).items() if k.isupper()})
    literal = re.compile(r"[\"'](%s)[\"']" % "|".join(values))
    folder = Path(engine.__file__).parent
    found = {name: [ln.strip() for ln in (folder / name).read_text().splitlines()
                    if re.search(r"[\"']type[\"']|\btypes\b", ln) and literal.search(ln)]
             for name in _RECORD_TYPES_BY_NAME}
    assert not {k: v for k, v in found.items() if v}, found
    assert all(isinstance(v, str) for v in values)  # a Rec is its string: JSON writes the same bytes

