"""Deciding whether a copy needs its ``copying`` record reads each journal record once (review
R2-7): ``placement.put_in_place``'s "once per path and journal" scanned every record the journal
object had written, once per copy, so putting back n files on a folder that does not rename read
~n²/2 records (10,000 files 5.6 s CPU). Counted here: records looked at, not time.
"""
from __future__ import annotations

from tb_footprint_plugin.engine import placement
from tb_footprint_plugin.engine.journal import Journal, OpJournal, Rec
from tb_footprint_plugin.engine.journal_object import ObjectFolder, ObjectJournal
from tb_footprint_plugin.engine.swap_strategy import swap_strategy
from test_one_journal import _Objects
from test_put_back_strategy import NO_RENAME

N = 3000


class CountedRecord(dict):
    """A journal record that counts how often it is looked into."""

    reads = 0

    def get(self, *a, **kw):
        CountedRecord.reads += 1
        return super().get(*a, **kw)


class FakeJournal(OpJournal):
    """An ``OpJournal`` that keeps its records in memory (``append`` through ``wrote``, as both
    implementations do); what ``put_in_place`` uses of it: ``append`` and ``copying_paths``."""

    def __init__(self):
        self.written = []
        self.wrote(CountedRecord(type=Rec.BEGIN))

    @classmethod
    def create(cls, where, op_id, first):
        raise NotImplementedError

    def append(self, record, sync=True):
        self.wrote(CountedRecord(record))

    def records(self):
        return list(self.written)

    def close(self, durable=True):
        pass


def _place_all(journal, paths, monkeypatch) -> None:
    """Every path put in place by copy (the copy itself a stand-in that only asks for its record,
    as ``copy_over`` does right before its first change)."""
    monkeypatch.setattr(placement, "copy_over", lambda tmp, dest, sha, size, sparse, new_name, before: before())
    strategy = swap_strategy(NO_RENAME)
    for p in paths:
        placement.put_in_place(strategy, journal, {"path": p, "sha256": "0" * 64, "size": 1})("tmp", p)


def test_copying_records_are_read_once_each(monkeypatch):
    journal = FakeJournal()
    CountedRecord.reads = 0
    _place_all(journal, [f"run/f{i}" for i in range(N)], monkeypatch)
    assert [r["final"] for r in journal.written[1:]] == [f"run/f{i}" for i in range(N)]
    assert CountedRecord.reads <= 3 * N  # before: ~N²/2 (4.5 million)


def test_still_once_per_path_and_journal(monkeypatch):
    """The same records as before: a path this journal named already (also through a ``written``
    list replaced meanwhile) gets no second record; another journal's record does not count."""
    journal, other = FakeJournal(), FakeJournal()
    _place_all(journal, ["run/a", "run/b", "run/a"], monkeypatch)
    _place_all(other, ["run/a"], monkeypatch)
    journal.written = list(journal.written)  # as reduce_journal's journal read again does
    _place_all(journal, ["run/b", "run/c"], monkeypatch)
    assert [r["final"] for r in journal.written[1:]] == ["run/a", "run/b", "run/c"]
    assert [r["final"] for r in other.written[1:]] == ["run/a"]


def test_each_journal_keeps_the_paths_its_copying_records_name(tmp_path):
    """The journal owns the set ``put_in_place`` asks (no side cache in placement): the file journal
    and the object journal add a ``copying`` record's path as they write it (create and append),
    other records add none, and a journal written again from another's records
    (``reduce_journal.journal_again`` assigns ``written``) holds theirs."""
    jdir = tmp_path / ".tb-footprint" / "journal"
    j = Journal.create(str(jdir), "op1", {"type": Rec.BEGIN, "kind": "restore", "op_id": "op1"})
    assert set(j.copying_paths) == set()
    j.append({"type": Rec.COPYING, "final": "run/a"})
    j.append({"type": Rec.SWAP, "final": "run/not-a-copy"})
    j.append({"type": Rec.COPYING, "final": "run/b"})
    assert set(j.copying_paths) == {"run/a", "run/b"}
    again = Journal(j.path)
    again.written = list(j.written)
    assert set(again.copying_paths) == {"run/a", "run/b"}

    objs = _Objects()
    oj = ObjectJournal.create(ObjectFolder(objs, "bk/j"), "b1", {"type": Rec.BEGIN, "op": "b1"})
    oj.append({"type": Rec.COPYING, "final": "run/c"})
    oj.append({"type": Rec.DONE})
    assert set(oj.copying_paths) == {"run/c"}


def test_placement_keeps_no_journal_state_of_its_own():
    """The "once per path and journal" answer comes from the journal alone: placement holds no
    per-journal cache (before: a module-level WeakKeyDictionary mirrored each journal's records)."""
    import weakref
    kept = [n for n, v in vars(placement).items() if isinstance(v, (weakref.WeakKeyDictionary, weakref.WeakSet))]
    assert kept == []
