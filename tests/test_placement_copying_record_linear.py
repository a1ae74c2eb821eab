"""Deciding whether a copy needs its ``copying`` record reads each journal record once (review
R2-7): ``placement.put_in_place``'s "once per path and journal" scanned every record the journal
object had written, once per copy, so putting back n files on a folder that does not rename read
~n²/2 records (10,000 files 5.6 s CPU). Counted here: records looked at, not time.
"""
from __future__ import annotations

from tb_footprint_plugin.engine import placement
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.swap_strategy import swap_strategy
from test_put_back_strategy import NO_RENAME

N = 3000


class CountedRecord(dict):
    """A journal record that counts how often it is looked into."""

    reads = 0

    def get(self, *a, **kw):
        CountedRecord.reads += 1
        return super().get(*a, **kw)


class FakeJournal:
    """The part of an ``OpJournal`` ``put_in_place`` uses: ``append`` and ``written``."""

    def __init__(self):
        self.written: list = [CountedRecord(type=Rec.BEGIN)]

    def append(self, record, sync=True):
        self.written.append(CountedRecord(record))


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
